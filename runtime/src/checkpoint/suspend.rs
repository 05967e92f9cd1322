//! Suspending a job on SIGTERM / SIGINT (Flink's `SUSPENDED`): the job stops without a
//! savepoint and resumes from its latest completed checkpoint.
//!
//! The checkpoint coordinator, once [`Shared::suspend`] is cancelled:
//! 1. stops intake: sources pause (`Control::Pause`) after the barrier they were already told
//!    to inject, so an in-flight checkpoint can still complete;
//! 2. triggers no new checkpoint or savepoint (but the at-most-once suspend checkpoint of
//!    step 3), and fails queued savepoint triggers; a checkpoint that fails now does not fail
//!    the job;
//! 3. waits at most [`IN_FLIGHT_GRACE`] for the in-flight checkpoint (or a finishing bounded
//!    job) to complete, and in at-most-once mode for one more checkpoint it triggers once the
//!    sources have paused ([`checkpoints_at_suspend`]); a checkpoint that does not complete by then is aborted: its
//!    `_metadata` is never written, so its sink parts are never committed;
//! 4. tells every subtask to shut down (`Control::Shutdown`): sinks commit nothing new, and
//!    pending parts of a completed checkpoint whose commit notification was not processed stay
//!    pending, to be committed by the restore of that checkpoint.

use super::coordinator::Shared;
use crate::control::api::{JobState, TriggerState};
use crate::exec::messages::Control;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio::sync::mpsc::UnboundedSender;

/// How long a suspending job waits for its in-flight checkpoint before aborting it.
pub const IN_FLIGHT_GRACE: Duration = Duration::from_secs(2);

/// Whether a suspending coordinator stops now: when nothing is in flight (no pending
/// checkpoint, no bounded job finishing, no suspend checkpoint still to trigger:
/// [`checkpoints_at_suspend`]), or when the grace for the in-flight one is over.
pub fn stop_now(has_pending_checkpoint: bool, finishing: bool, suspend_checkpoint_due: bool, grace_over: bool) -> bool {
    grace_over || (!has_pending_checkpoint && !finishing && !suspend_checkpoint_due)
}

/// Whether a suspending job in `mode` takes one more checkpoint once its sources have paused
/// (and the checkpoint in flight, if any, completed), within [`IN_FLIGHT_GRACE`].
///
/// At-most-once only. Its `--restore latest` resumes each split at the furthest position the
/// sources recorded as read (`guarantee::source_positions`), so without this checkpoint the
/// records read after the last completed one, whose output the suspend discards with the
/// uncommitted sink parts, would never be read again: records lost with nothing failed (found
/// by trial, helper-111: 32,243 of 427,149 words after a SIGTERM). Restoring the checkpoint's
/// own positions instead would count twice the records a subtask read past a barrier before
/// its snapshot (at-most-once does not align). The paused sources' positions are all in this
/// checkpoint, so its positions and the log agree and nothing is lost or read twice. The
/// other modes replay from the last completed checkpoint and lose nothing without it.
pub fn checkpoints_at_suspend(mode: crate::job::CheckpointMode) -> bool {
    mode == crate::job::CheckpointMode::AtMostOnce
}

/// Starts suspending: the job state becomes `SUSPENDING` (the control API refuses new
/// savepoints) and sources stop reading.
pub fn begin(shared: &Arc<Mutex<Shared>>, sources: &[usize], controls: &[UnboundedSender<Control>]) {
    shared.lock().expect("lock").state = JobState::Suspending;
    for s in sources {
        if let Some(tx) = controls.get(*s) {
            let _ = tx.send(Control::Pause);
        }
    }
}

/// Ends the suspension: the in-flight checkpoint `aborted` (if any) counts as failed, and
/// every savepoint trigger still in progress fails with the reason.
pub fn end(shared: &Arc<Mutex<Shared>>, aborted: Option<u64>) {
    let mut s = shared.lock().expect("lock");
    if let Some(id) = aborted {
        tracing::warn!(checkpoint = id, "in-flight checkpoint aborted: the job is suspending");
        s.history.failed += 1;
        s.history.in_progress = None;
    }
    for t in s.triggers.values_mut().filter(|t| t.state == TriggerState::InProgress) {
        t.state = TriggerState::Failed;
        t.error = Some("the job was suspended (SIGTERM/SIGINT) before the savepoint completed".into());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_suspending_coordinator_waits_only_for_what_is_in_flight_and_only_within_the_grace() {
        // (pending checkpoint, finishing, suspend checkpoint due, grace over) -> stop now
        for (pending, finishing, due, over, want) in [
            (false, false, false, false, true),
            (true, false, false, false, false),
            (false, true, false, false, false),
            (true, true, false, false, false),
            (false, false, true, false, false),
            (true, false, true, false, false),
            (true, false, false, true, true),
            (false, true, false, true, true),
            (false, false, true, true, true),
            (false, false, false, true, true),
        ] {
            assert_eq!(
                stop_now(pending, finishing, due, over),
                want,
                "pending={pending} finishing={finishing} suspend_checkpoint_due={due} grace_over={over}"
            );
        }
    }

    #[test]
    fn only_at_most_once_checkpoints_at_a_suspend() {
        use crate::job::CheckpointMode::*;
        for (mode, want) in [(ExactlyOnce, false), (AtLeastOnce, false), (AtMostOnce, true)] {
            assert_eq!(checkpoints_at_suspend(mode), want, "{mode:?}");
        }
    }

    #[test]
    fn ending_a_suspension_fails_open_savepoint_triggers_and_counts_the_aborted_checkpoint() {
        let shared = super::super::coordinator::shared_with_triggers(&[
            ("a", TriggerState::InProgress),
            ("b", TriggerState::Completed),
        ]);
        shared.lock().unwrap().history.in_progress = Some(7);
        end(&shared, Some(7));
        let s = shared.lock().unwrap();
        assert_eq!(s.triggers["a"].state, TriggerState::Failed);
        assert!(s.triggers["a"].error.as_deref().unwrap().contains("suspended"));
        assert_eq!(s.triggers["b"].state, TriggerState::Completed);
        assert_eq!((s.history.failed, s.history.in_progress), (1, None));
    }
}
