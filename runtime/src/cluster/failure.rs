//! Failure messages of the distributed runtime (pure): lead with the cause, name the subtask
//! as Flink does (`counts -> output (2/4) on worker w2`).
//!
//! When a worker is lost, subtasks on other workers that exchanged records with it fail too
//! (`input 0 closed without end-of-stream (upstream lost)`), and their report can reach the
//! coordinator before the loss is noticed. Those are symptoms: the message of the attempt's
//! failure names the lost worker and what it ran.

/// The message of a lost worker: `worker w2 lost: <why>; it ran <subtasks>`.
pub fn worker_lost(worker_id: &str, why: &str, subtasks: &[String]) -> String {
    if subtasks.is_empty() {
        format!("worker {worker_id} lost: {why}")
    } else {
        format!("worker {worker_id} lost: {why}; it ran {}", subtasks.join(", "))
    }
}

/// Whether a subtask failure is the symptom of a peer subtask's loss rather than a cause.
pub fn is_peer_loss_symptom(message: &str) -> bool {
    message.contains("(upstream lost)") || message.contains("downstream subtask is gone")
}

/// The failure message of an attempt: the first worker lost during it, if any (the cause),
/// else the first failure reported.
pub fn lead_with_cause(first_failure: &str, lost_workers: &[String]) -> String {
    match lost_workers.first() {
        Some(lost) => lost.clone(),
        None => first_failure.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_lost_worker_message_leads_with_the_worker_and_names_its_subtasks() {
        assert_eq!(
            worker_lost(
                "w2",
                "connection closed",
                &["lines -> map (2/4)".into(), "counts -> output (2/4)".into()]
            ),
            "worker w2 lost: connection closed; it ran lines -> map (2/4), counts -> output (2/4)"
        );
        assert_eq!(
            worker_lost("w3", "heartbeat timeout", &[]),
            "worker w3 lost: heartbeat timeout"
        );
    }

    #[test]
    fn the_attempt_failure_leads_with_a_lost_worker_over_its_symptoms() {
        let symptom =
            "counts -> output (1/4) on worker w1 failed: input 1 closed without end-of-stream (upstream lost)";
        let lost = "worker w2 lost: connection closed; it ran counts -> output (2/4)".to_string();
        let failed = "counts -> output (3/4) on worker w1 failed: operator counts: overflow";
        for (first, lost_workers, want) in [
            (symptom, vec![lost.clone()], lost.as_str()),
            (lost.as_str(), vec![lost.clone()], lost.as_str()),
            (symptom, vec![], symptom),
            (failed, vec![], failed),
        ] {
            assert_eq!(lead_with_cause(first, &lost_workers), want, "{first}");
        }
    }

    #[test]
    fn only_lost_peers_are_symptoms() {
        for (msg, want) in [
            (
                "x (1/2) failed: input 0 closed without end-of-stream (upstream lost)",
                true,
            ),
            ("x (1/2) failed: downstream subtask is gone", true),
            ("x (1/2) failed: operator counts: cannot evaluate", false),
            ("worker w2 lost: connection closed", false),
        ] {
            assert_eq!(is_peer_loss_symptom(msg), want, "{msg}");
        }
    }
}
