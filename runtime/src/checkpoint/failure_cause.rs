//! Which subtask failure is the cause of a job's failure (pure), for the local coordinator
//! ([`super::coordinator`]).
//!
//! When one subtask fails, its channels close, and the subtasks it exchanged records with
//! fail too: a downstream one with `input 0 closed without end-of-stream (upstream lost)`, an
//! upstream one with `downstream subtask is gone`. Those are *symptoms*, and their reports can
//! reach the coordinator before the cause's own (the failing task drops its channels before it
//! reports). So a symptom is provisional: the coordinator waits up to [`SYMPTOM_GRACE`] for a
//! failure that is not one and reports that; only when none comes does it report the first
//! symptom. The cluster coordinator does the same with lost workers
//! (`cluster/failure.rs`).

use std::time::Duration;

/// How long the coordinator waits, after the first symptom, for the failure that caused it.
/// The cause is reported right after its task ends, so this is only reached when there is no
/// other failure (a symptom with no cause in this process, such as a lost peer worker).
pub const SYMPTOM_GRACE: Duration = Duration::from_millis(500);

/// Whether a subtask failure is the symptom of another subtask's failure (a closed channel)
/// rather than a cause.
pub fn is_symptom(message: &str) -> bool {
    crate::cluster::failure::is_peer_loss_symptom(message)
}

/// What the coordinator does with the failures reported so far (in arrival order).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum FailureDecision {
    /// No failure yet.
    Running,
    /// Only symptoms so far and the grace period is not over: wait for the cause.
    WaitForCause,
    /// Fail the job with this message.
    Fail(String),
}

/// The decision over `failures` (arrival order): the first failure that is not a symptom as
/// soon as there is one; the first symptom once `grace_over` (nothing else came).
pub fn decide(failures: &[String], grace_over: bool) -> FailureDecision {
    if let Some(cause) = failures.iter().find(|m| !is_symptom(m)) {
        return FailureDecision::Fail(cause.clone());
    }
    match failures.first() {
        None => FailureDecision::Running,
        Some(first) if grace_over => FailureDecision::Fail(first.clone()),
        Some(_) => FailureDecision::WaitForCause,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_cause_wins_over_symptoms_that_arrived_first() {
        let closed = "counts (1/2) failed: input 0 closed without end-of-stream (upstream lost)";
        let gone = "lines (2/2) failed: downstream subtask is gone";
        let cause = "events (1/2) failed: operator events: spec.job.steps[0].source.eventTime.field: …";
        let other = "counts (2/2) failed: operator counts: overflow";
        let s = |v: &[&str]| v.iter().map(|m| m.to_string()).collect::<Vec<_>>();
        use FailureDecision::*;
        for (failures, grace_over, want) in [
            (s(&[]), false, Running),
            (s(&[]), true, Running),
            (s(&[closed]), false, WaitForCause),
            (s(&[closed, gone]), false, WaitForCause),
            (s(&[closed]), true, Fail(closed.into())),
            (s(&[gone, closed]), true, Fail(gone.into())),
            (s(&[closed, cause]), false, Fail(cause.into())),
            (s(&[closed, gone, cause]), true, Fail(cause.into())),
            (s(&[cause]), false, Fail(cause.into())),
            (s(&[cause, closed]), false, Fail(cause.into())),
            (s(&[other, cause]), false, Fail(other.into())),
        ] {
            assert_eq!(
                decide(&failures, grace_over),
                want,
                "{failures:?} grace over: {grace_over}"
            );
        }
    }
}
