//! Disposal of a deleted Savepoint's data (`spec.disposeOnDelete`): whether to dispose, retry
//! or give up and release the finalizer. Pure; the Savepoint controller does the I/O.
//!
//! The finalizer must never hang a namespace deletion (FLINK-31860): a permanent failure
//! (credentials Secret gone, access denied, bucket gone) gives up at once, and transient
//! failures (storage unreachable) are retried with the object's backoff only for
//! [`DISPOSE_GIVE_UP_AFTER`] after the deletion was requested. Giving up leaves the data in
//! storage and says so in a Warning event that names the path to delete by hand.

use std::time::Duration;

/// How long transient dispose failures are retried after `metadata.deletionTimestamp` before
/// the finalizer is released anyway (the Savepoint's backoff is 5 s doubling, so about six
/// attempts).
pub const DISPOSE_GIVE_UP_AFTER: Duration = Duration::from_secs(300);

/// Why a dispose attempt failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum DisposeFailure {
    /// Retrying cannot help until someone changes something: the credentials Secret is gone or
    /// unusable, access is denied, the bucket does not exist, the URL is not a directory.
    #[error("{0}")]
    Permanent(String),
    /// Storage or the API server did not answer; a retry may succeed.
    #[error("{0}")]
    Transient(String),
}

/// What is known when a deleted Savepoint is reconciled.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DisposalFacts<'a> {
    /// `spec.disposeOnDelete`.
    pub dispose_on_delete: bool,
    /// `status.path`: the savepoint's data (None: it never completed, nothing to dispose).
    pub path: Option<&'a str>,
    /// The job whose current restore point (or deployment's start) is `path`, if any: its data
    /// must stay (FLINK-38033).
    pub protected_by: Option<&'a str>,
    /// The attempt made in this pass (None: not yet attempted).
    pub attempt: Option<Result<(), DisposeFailure>>,
    /// Time since `metadata.deletionTimestamp`.
    pub deleting_for: Duration,
}

/// The next step for a deleted Savepoint's finalizer.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum DisposalStep {
    /// Remove the finalizer without touching storage; `note`: an event to emit first
    /// (`warning` when data is deliberately kept).
    Release {
        /// Whether the event is a Warning.
        warning: bool,
        /// The event's message, if any.
        note: Option<String>,
    },
    /// Dispose the data at this path, then decide again with the attempt's outcome.
    Dispose(String),
    /// The data is gone: emit a Normal `Cleanup` event and remove the finalizer.
    Disposed(String),
    /// Keep the finalizer and retry after the object's backoff (an error of the pass).
    Retry(String),
    /// Give up: emit this Warning (it names the path left behind and what to do), then remove
    /// the finalizer.
    GiveUp(String),
}

/// Decides the next step of a deleted Savepoint's disposal. Pure.
pub fn disposal_step(facts: &DisposalFacts) -> DisposalStep {
    let (true, Some(path)) = (facts.dispose_on_delete, facts.path) else {
        return DisposalStep::Release {
            warning: false,
            note: None,
        };
    };
    if let Some(job) = facts.protected_by {
        return DisposalStep::Release {
            warning: true,
            note: Some(format!(
                "not disposing {path}: it is the current restore point of job {job}"
            )),
        };
    }
    let left_behind = |why: &str| {
        format!(
            "savepoint data at {path} was not disposed ({why}) and is left in storage: delete it by hand \
             (e.g. `aws s3 rm --recursive {path}/`) if it is no longer needed"
        )
    };
    match &facts.attempt {
        None => DisposalStep::Dispose(path.to_string()),
        Some(Ok(())) => DisposalStep::Disposed(path.to_string()),
        Some(Err(DisposeFailure::Permanent(why))) => DisposalStep::GiveUp(left_behind(why)),
        Some(Err(DisposeFailure::Transient(why))) if facts.deleting_for >= DISPOSE_GIVE_UP_AFTER => {
            DisposalStep::GiveUp(left_behind(&format!(
                "still failing {}s after the deletion: {why}",
                facts.deleting_for.as_secs()
            )))
        }
        Some(Err(DisposeFailure::Transient(why))) => {
            DisposalStep::Retry(format!("disposing {path} failed: {why}; retrying"))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const P: &str = "s3://b/svp/savepoint-j-7";

    /// A short name of a step for the table.
    fn short(step: &DisposalStep) -> &'static str {
        match step {
            DisposalStep::Release {
                warning: false,
                note: None,
            } => "release",
            DisposalStep::Release {
                warning: true,
                note: Some(_),
            } => "release-with-warning",
            DisposalStep::Release { .. } => "release-other",
            DisposalStep::Dispose(_) => "dispose",
            DisposalStep::Disposed(_) => "disposed",
            DisposalStep::Retry(_) => "retry",
            DisposalStep::GiveUp(_) => "give-up",
        }
    }

    #[test]
    fn disposal_table() {
        let permanent = || {
            Some(Err(DisposeFailure::Permanent(
                "S3 credentials Secret creds not found".into(),
            )))
        };
        let transient = || Some(Err(DisposeFailure::Transient("connection refused".into())));
        let min = |m: u64| Duration::from_secs(60 * m);
        #[allow(clippy::type_complexity)]
        let rows: Vec<(
            &str,
            bool,
            Option<&str>,
            Option<&str>,
            Option<Result<(), DisposeFailure>>,
            Duration,
            &str,
        )> = vec![
            ("disposeOnDelete off", false, Some(P), None, None, min(0), "release"),
            ("never completed (no path)", true, None, None, None, min(0), "release"),
            (
                "the job's restore point",
                true,
                Some(P),
                Some("j"),
                None,
                min(0),
                "release-with-warning",
            ),
            (
                "restore point, even after a failure",
                true,
                Some(P),
                Some("j"),
                transient(),
                min(9),
                "release-with-warning",
            ),
            ("first pass", true, Some(P), None, None, min(0), "dispose"),
            ("first pass, late", true, Some(P), None, None, min(60), "dispose"),
            ("disposed", true, Some(P), None, Some(Ok(())), min(0), "disposed"),
            (
                "Secret gone / access denied",
                true,
                Some(P),
                None,
                permanent(),
                min(0),
                "give-up",
            ),
            ("unreachable, early", true, Some(P), None, transient(), min(1), "retry"),
            (
                "unreachable, just before the limit",
                true,
                Some(P),
                None,
                transient(),
                min(5) - Duration::from_secs(1),
                "retry",
            ),
            (
                "unreachable, at the limit",
                true,
                Some(P),
                None,
                transient(),
                min(5),
                "give-up",
            ),
        ];
        for (row, dispose_on_delete, path, protected_by, attempt, deleting_for, expected) in rows {
            let facts = DisposalFacts {
                dispose_on_delete,
                path,
                protected_by,
                attempt,
                deleting_for,
            };
            assert_eq!(short(&disposal_step(&facts)), expected, "{row}");
        }
    }

    #[test]
    fn giving_up_names_the_path_left_behind_and_what_to_do() {
        let step = disposal_step(&DisposalFacts {
            dispose_on_delete: true,
            path: Some(P),
            protected_by: None,
            attempt: Some(Err(DisposeFailure::Permanent(
                "S3 credentials Secret creds not found".into(),
            ))),
            deleting_for: Duration::ZERO,
        });
        let DisposalStep::GiveUp(note) = step else {
            panic!("{step:?}")
        };
        assert!(note.contains(P), "{note}");
        assert!(note.contains("Secret creds not found"), "{note}");
        assert!(note.contains("delete it by hand"), "{note}");
    }
}
