//! The decision builder [`Ctx`] and the first half of every operation's cycle: starting it,
//! stepping it through its phases, and the stop (with a savepoint where the mode asks for one)
//! that records the restore point and deletes the workloads.

use super::{
    Action, Decision, Event, INFLIGHT_SAVEPOINT_WAIT, Observation, POLL, RESTARTING_WAIT, RETRY_BACKOFF, Reason,
    STEADY, STOP_TIMEOUT, Snapshot, ms_to_time, parse_time, rfc3339, spec_json,
};
use crate::crd::{
    LifecycleState, OperationKind, OperationPhase, PendingOperation, RestoreOrigin, RestorePoint, SavepointOrigin,
    SavepointRecord, StreamJobSpec, UpgradeMode,
};
use std::time::{Duration, UNIX_EPOCH};
use weir_runtime::control::api::{JobState, SnapshotKind, TriggerState};

/// Builder of a decision, starting from the current status.
pub(super) struct Ctx<'a> {
    pub(super) spec: &'a StreamJobSpec,
    pub(super) obs: &'a Observation,
    pub(super) d: Decision,
}

impl<'a> Ctx<'a> {
    pub(super) fn event(&mut self, warning: bool, reason: Reason, message: impl Into<String>) {
        self.d.events.push(Event {
            warning,
            reason,
            message: message.into(),
        });
    }

    pub(super) fn elapsed_since(&self, rfc: &str) -> Duration {
        parse_time(rfc)
            .and_then(|t| self.obs.now.duration_since(t).ok())
            .unwrap_or(Duration::ZERO)
    }

    pub(super) fn job_state(&self) -> Option<JobState> {
        self.obs.coordinator.job().map(|j| j.state)
    }

    pub(super) fn fail(&mut self, reason: Reason, message: String) {
        let st = &mut self.d.status;
        st.lifecycle_state = LifecycleState::Failed;
        st.failed_generation = Some(self.obs.generation);
        st.pending = None;
        st.error = Some(message.clone());
        self.event(true, reason, message);
        self.d.requeue = STEADY;
    }

    /// Records a new operation and takes its first step. `target` is the spec to deploy after
    /// the stop (None for suspend/delete).
    pub(super) fn start(&mut self, kind: OperationKind, target: Option<&StreamJobSpec>) {
        let mode = self.spec.upgrade_mode;
        let wants_savepoint = match kind {
            OperationKind::Upgrade | OperationKind::Suspend => mode == UpgradeMode::Savepoint,
            OperationKind::Delete => self.spec.savepoint_on_delete,
            OperationKind::Restart | OperationKind::Rollback => false,
        };
        let running = self.job_state() == Some(JobState::Running);
        // The runtime is restarting the job from a checkpoint, or its coordinator did not
        // answer this pass (its state is unknown, not stopped): it may run again shortly, so
        // the stop waits for it (bounded) rather than giving up on the savepoint. A job still
        // initializing is not waited for here: its state is the restore point it is loading,
        // which the fallback restores, and a deploy that never comes up is replaced at once
        // (the decision table's Deploying row).
        let may_run = self.job_state() == Some(JobState::Restarting) || self.state_unknown();
        let phase = if wants_savepoint && (running || may_run) {
            OperationPhase::Stopping
        } else {
            OperationPhase::AwaitingTermination
        };
        if wants_savepoint && !running && !may_run && kind != OperationKind::Delete {
            self.event(
                true,
                Reason::SavepointError,
                "the job is not running, so no savepoint can be taken; it will restore from its newest completed checkpoint",
            );
        }
        self.d.status.pending = Some(PendingOperation {
            kind,
            mode,
            target_spec: target.map(spec_json),
            target_generation: Some(self.obs.generation),
            phase,
            trigger_id: None,
            savepoint_path: None,
            started_at: rfc3339(self.obs.now),
        });
        self.d.status.lifecycle_state = match kind {
            OperationKind::Rollback => LifecycleState::RollingBack,
            OperationKind::Delete => LifecycleState::Deleting,
            _ => LifecycleState::Upgrading,
        };
        self.step();
    }

    /// Advances the pending operation by one phase where the observations allow it.
    pub(super) fn step(&mut self) {
        let Some(op) = self.d.status.pending.clone() else {
            return;
        };
        match op.phase {
            OperationPhase::Stopping => self.stopping(&op),
            OperationPhase::AwaitingStop => self.await_stop(&op),
            OperationPhase::AwaitingTermination => self.await_termination(&op),
            OperationPhase::Deploying => self.deploy_pending(&op),
        }
    }

    /// Whether this pass could not learn the job's state: its coordinator Deployment exists
    /// but its control API did not report ([`CoordinatorReport::Unanswered`](super::CoordinatorReport::Unanswered)), and its
    /// pods are neither crash-looping nor unschedulable (those will not report soon).
    fn state_unknown(&self) -> bool {
        self.obs.coordinator.unanswered().is_some() && !self.obs.crash_looping && self.obs.unschedulable.is_none()
    }

    /// The Stopping phase: the stop-with-savepoint goes out once the job is RUNNING (after a
    /// bounded wait for a savepoint in flight). A job restarting or initializing, or whose state
    /// is unknown, may run again shortly: it is waited for, at most [`RESTARTING_WAIT`] from
    /// the operation's start. Any other state (failed, finished, stopping, no coordinator)
    /// cannot take a savepoint: the cycle restores from the newest completed checkpoint.
    fn stopping(&mut self, op: &PendingOperation) {
        let waited = self.elapsed_since(&op.started_at);
        let state = self.job_state();
        if state == Some(JobState::Running) {
            if self.obs.savepoint_in_flight_since.is_some() && waited < INFLIGHT_SAVEPOINT_WAIT {
                self.d.requeue = POLL; // bounded wait for a periodic/manual savepoint
                return;
            }
            self.set_phase(OperationPhase::AwaitingStop);
            self.d.actions.push(Action::StopWithSavepoint {
                directory: self.savepoint_dir(),
            });
            self.d.requeue = POLL;
            return;
        }
        let unknown = self.state_unknown();
        let may_run = matches!(state, Some(JobState::Restarting | JobState::Initializing)) || unknown;
        if may_run && waited < RESTARTING_WAIT {
            self.d.requeue = POLL;
            return;
        }
        if op.kind != OperationKind::Delete {
            let why = match (state, self.obs.coordinator.unanswered()) {
                (Some(JobState::Restarting), _) => format!("the job has been restarting for {waited:?}"),
                (Some(JobState::Initializing), _) => format!("the job has been initializing for {waited:?}"),
                (None, Some(error)) if unknown => {
                    format!("the job's coordinator has not reported its state for {waited:?} ({error})")
                }
                (Some(other), _) => format!("the job is not running (it is {other:?})"),
                (None, _) => "the job is not running".to_string(),
            };
            self.event(
                true,
                Reason::SavepointError,
                format!("{why}, so no savepoint can be taken; it will restore from its newest completed checkpoint"),
            );
        }
        self.set_phase(OperationPhase::AwaitingTermination);
        self.step()
    }

    pub(super) fn set_phase(&mut self, phase: OperationPhase) {
        if let Some(p) = self.d.status.pending.as_mut() {
            p.phase = phase;
        }
    }

    fn savepoint_dir(&self) -> Option<String> {
        self.spec
            .savepoints
            .as_ref()
            .and_then(|s| s.runtime.directory.clone())
            .or_else(|| {
                self.spec
                    .checkpointing
                    .storage
                    .as_ref()
                    .map(|s| format!("{}/savepoints", s.trim_end_matches('/')))
            })
    }

    /// The savepoint taken by this stop, from the trigger poll, the coordinator, or storage
    /// (whichever survived: FLINK-27804, FLINK-33522).
    fn stop_savepoint(&self, op: &PendingOperation) -> Option<Snapshot> {
        if let Some(t) = &self.obs.trigger
            && let Some(path) = &t.path
        {
            return Some(Snapshot {
                path: path.clone(),
                id: t.checkpoint_id.unwrap_or(0),
                kind: SnapshotKind::Savepoint,
                completed_at_ms: self.obs.now.duration_since(UNIX_EPOCH).unwrap_or_default().as_millis() as u64,
            });
        }
        let started = parse_time(&op.started_at)?;
        let from_this_stop =
            |s: &&Snapshot| s.kind == SnapshotKind::Savepoint && ms_to_time(s.completed_at_ms) >= started;
        self.obs
            .coordinator
            .job()
            .and_then(|j| j.last_completed.as_ref())
            .filter(from_this_stop)
            .or(self.obs.newest_snapshot.found().filter(from_this_stop))
            .cloned()
    }

    /// Whether the stop-with-savepoint of `op` may still complete: `op` awaits it, its trigger
    /// has not failed, and [`STOP_TIMEOUT`] has not passed since the operation started. A
    /// deletion takes over only such a stop (`decide`); it replaces any other with its own.
    pub(super) fn stop_may_complete(&self, op: &PendingOperation) -> bool {
        op.phase == OperationPhase::AwaitingStop && !self.stop_trigger_failed() && !self.stop_timed_out(op)
    }

    /// Whether the poll of the pending stop's trigger says it failed.
    fn stop_trigger_failed(&self) -> bool {
        self.obs
            .trigger
            .as_ref()
            .is_some_and(|t| t.state == TriggerState::Failed)
    }

    /// Whether [`STOP_TIMEOUT`] has passed since `op` started.
    fn stop_timed_out(&self, op: &PendingOperation) -> bool {
        self.elapsed_since(&op.started_at) > STOP_TIMEOUT
    }

    fn await_stop(&mut self, op: &PendingOperation) {
        if let Some(sp) = self.stop_savepoint(op) {
            let origin = if op.kind == OperationKind::Upgrade
                || op.kind == OperationKind::Suspend
                || op.kind == OperationKind::Delete
            {
                RestoreOrigin::UpgradeSavepoint
            } else {
                RestoreOrigin::Savepoint
            };
            self.d.status.restore_point = Some(RestorePoint {
                path: sp.path.clone(),
                origin,
                checkpoint_id: Some(sp.id),
            });
            self.d.status.savepoint_history.push(SavepointRecord {
                path: sp.path.clone(),
                completed_at: rfc3339(ms_to_time(sp.completed_at_ms)),
                origin: SavepointOrigin::Upgrade,
                savepoint_name: None,
            });
            self.d.actions.push(Action::RecordSavepoint {
                origin: SavepointOrigin::Upgrade,
                path: Some(sp.path.clone()),
            });
            if let Some(p) = self.d.status.pending.as_mut() {
                p.savepoint_path = Some(sp.path);
            }
            self.set_phase(OperationPhase::AwaitingTermination);
            self.d.actions.push(Action::DeleteWorkloads);
            self.d.requeue = POLL;
            return;
        }
        let state = self.job_state();
        let trigger_failed = self.stop_trigger_failed();
        let timed_out = self.stop_timed_out(op);
        if op.trigger_id.is_none() && self.obs.trigger.is_none() && state == Some(JobState::Running) && !timed_out {
            // The stop was recorded but never reached the job (crash before the request).
            self.d.actions.push(Action::StopWithSavepoint {
                directory: self.savepoint_dir(),
            });
            self.d.requeue = POLL;
            return;
        }
        // A coordinator that did not answer is not gone: the stop may be completing (bounded
        // by STOP_TIMEOUT).
        let job_gone =
            !self.state_unknown() && matches!(state, None | Some(JobState::Failed) | Some(JobState::Finished));
        if trigger_failed || timed_out || (job_gone && op.trigger_id.is_some()) {
            let why = self
                .obs
                .trigger
                .as_ref()
                .and_then(|t| t.error.clone())
                .unwrap_or_else(|| "timed out".into());
            if state == Some(JobState::Running) && op.kind != OperationKind::Delete {
                // The job survived the failed stop: leave it running and retry later.
                self.d.status.pending = None;
                self.d.status.lifecycle_state = LifecycleState::Running;
                self.d.status.error = Some(format!("stop-with-savepoint failed: {why}; retrying"));
                self.event(
                    true,
                    Reason::SavepointError,
                    format!("stop-with-savepoint failed: {why}; the job keeps running and the change is retried"),
                );
                self.d.requeue = RETRY_BACKOFF;
            } else {
                self.event(true, Reason::SavepointError, format!("stop-with-savepoint failed ({why}) and the job is not running: restoring from its newest completed checkpoint"));
                self.set_phase(OperationPhase::AwaitingTermination);
                self.d.actions.push(Action::DeleteWorkloads);
                self.d.requeue = POLL;
            }
            return;
        }
        self.d.requeue = POLL; // in progress
    }
}
