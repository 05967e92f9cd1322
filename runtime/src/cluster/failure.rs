//! Failure messages of the distributed runtime (pure): lead with the cause, name the subtask
//! as Flink does (`counts -> output (2/4) on worker w2`).
//!
//! When a worker is lost, subtasks on other workers that exchanged records with it fail too
//! (`input 0 closed without end-of-stream (upstream lost)`), and their report can reach the
//! coordinator before the loss is noticed. Those are symptoms: the message of the attempt's
//! failure names the lost worker and what it ran.
//!
//! Whether an attempt's failure is permanent (the job is FAILED at once, restarting cannot
//! help) is decided here too ([`attempt_failure`]): a restore error is permanent on a worker as
//! it is on the coordinator ([`DeploymentError::restore`]), since a worker verifies the keyed
//! state files only it reads (their checksums), which the coordinator never reads.

use crate::checkpoint::restore::RestoreError;
use crate::exec::StartError;

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

/// Why a worker could not deploy its subtasks of an attempt.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DeploymentError {
    /// What failed (a restore error names the file).
    pub message: String,
    /// Deploying again cannot help: the restore point is corrupt, incompatible or refused
    /// ([`RestoreError::is_permanent`]). Every other failure is transient.
    pub permanent: bool,
}

impl DeploymentError {
    /// The deployment error of a failed restore: permanent as [`RestoreError::is_permanent`]
    /// says (a checksum mismatch is, an S3 timeout is not).
    pub fn restore(error: RestoreError) -> DeploymentError {
        DeploymentError {
            permanent: error.is_permanent(),
            message: error.to_string(),
        }
    }
}

/// Any other failure of a deployment is transient: a restart may succeed.
impl From<String> for DeploymentError {
    fn from(message: String) -> Self {
        DeploymentError {
            message,
            permanent: false,
        }
    }
}

/// A subtask that could not be built: permanent when the restore point's state does not fit
/// the job (a changed join, window or aggregation shape): every attempt would be refused the
/// same way, as `weir run` refuses it at once.
impl From<crate::exec::BuildError> for DeploymentError {
    fn from(error: crate::exec::BuildError) -> Self {
        DeploymentError {
            permanent: error.restore_refused,
            message: error.message,
        }
    }
}

impl std::fmt::Display for DeploymentError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// The failure of an attempt, from what the attempt saw: `first_failure` (what ended it, as
/// the attempt returned it: permanent when the coordinator's own restore refused the restore
/// point), the failure messages of workers lost during it, and the permanent deployment
/// failures workers reported for it (`worker w1 could not deploy attempt 1.1: corrupt restore
/// point: ...`).
///
/// A permanent failure leads and keeps the attempt permanent: the attempt's own first, then
/// the first permanent deployment failure (a worker lost meanwhile does not make a corrupt
/// restore point readable). Otherwise the attempt is transient and leads with its cause
/// ([`lead_with_cause`]).
pub fn attempt_failure(
    first_failure: &StartError,
    lost_workers: &[String],
    permanent_deployment_failures: &[String],
) -> StartError {
    if first_failure.permanent {
        return first_failure.clone();
    }
    if let Some(deployment) = permanent_deployment_failures.first() {
        return StartError {
            message: deployment.clone(),
            permanent: true,
        };
    }
    StartError {
        message: lead_with_cause(&first_failure.message, lost_workers),
        permanent: false,
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

    fn start_error(message: &str, permanent: bool) -> StartError {
        StartError {
            message: message.into(),
            permanent,
        }
    }

    /// Which failures of an attempt make it permanent (FAILED at once) and which message leads.
    #[test]
    fn which_failures_make_an_attempt_permanent() {
        let corrupt = "worker w1 could not deploy attempt 1.1: corrupt restore point: \
                       file:///sp/counts-1.state: checksum mismatch";
        let timeout = "worker w1 could not deploy attempt 1.1: s3://b/sp/counts-1.state: S3 GetObject failed: timeout";
        let refused = "chk-7 (file:///c/chk-7) is the newest snapshot of job j and cannot be restored: ...";
        let lost = "worker w2 lost: connection closed; it ran counts (2/2)";
        let symptom = "counts (1/2) on worker w1 failed: input 1 closed without end-of-stream (upstream lost)";
        struct Row {
            what: &'static str,
            first: StartError,
            lost_workers: Vec<String>,
            permanent_deployment_failures: Vec<String>,
            want: StartError,
        }
        let row = |what, first, lost_workers: &[&str], deployments: &[&str], want| Row {
            what,
            first,
            lost_workers: lost_workers.iter().map(|s| s.to_string()).collect(),
            permanent_deployment_failures: deployments.iter().map(|s| s.to_string()).collect(),
            want,
        };
        let rows = [
            row(
                "a worker's corrupt restore point is permanent and leads",
                start_error(corrupt, false),
                &[],
                &[corrupt],
                start_error(corrupt, true),
            ),
            row(
                "it leads over another failure reported first",
                start_error(symptom, false),
                &[],
                &[corrupt],
                start_error(corrupt, true),
            ),
            row(
                "and over a worker lost meanwhile",
                start_error(symptom, false),
                &[lost],
                &[corrupt],
                start_error(corrupt, true),
            ),
            row(
                "a transient deployment failure restarts",
                start_error(timeout, false),
                &[],
                &[],
                start_error(timeout, false),
            ),
            row(
                "a lost worker leads a transient failure",
                start_error(symptom, false),
                &[lost],
                &[],
                start_error(lost, false),
            ),
            row(
                "the coordinator's own refusal stays permanent and leads",
                start_error(refused, true),
                &[lost],
                &[corrupt],
                start_error(refused, true),
            ),
        ];
        for r in rows {
            let got = attempt_failure(&r.first, &r.lost_workers, &r.permanent_deployment_failures);
            assert_eq!(got, r.want, "{}", r.what);
        }
    }

    /// A deployment error is permanent only for a restore error that is: a corrupt, refused or
    /// incompatible restore point, or a missing file; not a transient storage error, and not
    /// any other failure of the deployment.
    #[test]
    fn a_deployment_error_is_permanent_only_for_a_permanent_restore_error() {
        use crate::state::snapshot::FormatError;
        use crate::storage::StorageError;
        let io = |kind: std::io::ErrorKind| StorageError::Io {
            path: "file:///sp/counts-1.state".into(),
            source: std::io::Error::from(kind),
        };
        let rows: Vec<(RestoreError, bool)> = vec![
            (
                RestoreError::Corrupt(FormatError {
                    path: "file:///sp/counts-1.state".into(),
                    problem: "checksum mismatch".into(),
                    fault: crate::state::snapshot::FormatFault::Damage,
                }),
                true,
            ),
            (RestoreError::Incompatible("max parallelism changed".into()), true),
            (
                RestoreError::Refused("the newest snapshot cannot be restored".into()),
                true,
            ),
            (
                RestoreError::Storage(StorageError::NotFound("file:///sp/counts-1.state".into())),
                true,
            ),
            (
                RestoreError::Storage(StorageError::S3 {
                    path: "s3://b/sp/counts-1.state".into(),
                    op: "GetObject",
                    message: "timeout".into(),
                }),
                false,
            ),
            (RestoreError::Storage(io(std::io::ErrorKind::ConnectionRefused)), false),
        ];
        for (error, permanent) in rows {
            let message = error.to_string();
            let deployment = DeploymentError::restore(error);
            assert_eq!(deployment.permanent, permanent, "{message}");
            assert_eq!(deployment.message, message);
        }
        let other = DeploymentError::from("no location for task 3".to_string());
        assert!(!other.permanent, "{other}");
    }
}
