//! The pure lifecycle decisions of the StreamJob controller.
//!
//! [`decide`] maps (spec, status, observations) to the next status and the actions to take.
//! The controller persists [`Decision::status`] **before** it runs any of
//! [`Decision::actions`] (if that write fails, nothing runs): status is the write-ahead log, so
//! an operator restarted at any point finds the intent (the pending operation, its phase and
//! target spec) and resumes it. Each action is idempotent. The only action with a result is
//! [`Action::StopWithSavepoint`], whose trigger id the controller records with
//! [`record_trigger`] right away; a crash before that write is covered by looking for the
//! savepoint itself (FLINK-27804).
//!
//! Every upgrade, suspend, restart and rollback takes the same road: stop (with a savepoint
//! where the mode asks for one) → record the restore point → delete the workloads → wait until
//! every old pod is gone (FLINK-34438/39970) → check the restore point against the new job
//! (FLINK-30638) → deploy a new generation from it.

mod classify;
pub mod retention;

pub use classify::{ChangeClass, classify};

use crate::crd::{
    CheckpointRef, DesiredState, JobStatusSummary, LifecycleState, OperationKind, OperationPhase, PendingOperation,
    RestoreOrigin, RestorePoint, SavepointOrigin, SavepointRecord, StreamJobSpec, StreamJobStatus, UpgradeMode,
};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use weir_runtime::control::api::{JobState, SavepointStatus, SnapshotInfo, SnapshotKind, TriggerState};

/// How long an upgrade waits for an in-flight (e.g. periodic) savepoint before it stops the job.
pub const INFLIGHT_SAVEPOINT_WAIT: Duration = Duration::from_secs(120);
/// How long a savepoint stop waits for a job the runtime is restarting (`RESTARTING`) to run
/// again before it gives up on the savepoint and restores from the newest checkpoint.
pub const RESTARTING_WAIT: Duration = Duration::from_secs(120);
/// How long a stop-with-savepoint may take before it counts as failed.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(600);
/// Requeue interval while waiting on something in progress.
pub const POLL: Duration = Duration::from_secs(5);
/// Requeue interval of a steady job.
pub const STEADY: Duration = Duration::from_secs(60);
/// Requeue interval after a failed stop before the change is tried again.
pub const RETRY_BACKOFF: Duration = Duration::from_secs(30);

/// A completed checkpoint or savepoint of the job.
#[derive(Clone, Debug, PartialEq)]
pub struct Snapshot {
    /// Snapshot directory URL.
    pub path: String,
    /// Checkpoint id (increasing across restores of the same job).
    pub id: u64,
    /// Checkpoint or savepoint.
    pub kind: SnapshotKind,
    /// Completion time, milliseconds since the Unix epoch.
    pub completed_at_ms: u64,
}

/// What the coordinator's control API reported.
#[derive(Clone, Debug, PartialEq)]
pub struct JobReport {
    /// Id of this run.
    pub job_id: String,
    /// Job state.
    pub state: JobState,
    /// Newest completed checkpoint or savepoint of this run.
    pub last_completed: Option<Snapshot>,
    /// Failure message when FAILED.
    pub failure: Option<String>,
}

/// Result of inspecting a restore point (`weir savepoint inspect`).
#[derive(Clone, Debug, PartialEq)]
pub enum RestoreInfo {
    /// Not inspected in this pass.
    NotInspected,
    /// Inspected `path`.
    Found {
        /// The inspected path.
        path: String,
        /// What it holds.
        info: SnapshotInfo,
    },
    /// `path` has no readable `_metadata`.
    Missing {
        /// The inspected path.
        path: String,
        /// The read error.
        error: String,
    },
}

/// Everything the controller observed for one reconcile. All I/O happens before [`decide`].
#[derive(Clone, Debug)]
pub struct Observation {
    /// Wall clock.
    pub now: SystemTime,
    /// `metadata.generation` of the StreamJob.
    pub generation: i64,
    /// `metadata.name` of the StreamJob.
    pub name: String,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// Coordinator report; `None` when the control API did not answer.
    pub job: Option<JobReport>,
    /// Poll result for `status.pending.triggerId`, when there is one.
    pub trigger: Option<SavepointStatus>,
    /// Coordinator Deployment or worker StatefulSet exists.
    pub workloads_present: bool,
    /// Pods of this job still present (any deploy generation, including terminating ones).
    pub job_pods: u32,
    /// A coordinator or worker container is crash-looping.
    pub crash_looping: bool,
    /// Newest completed checkpoint or savepoint of this job found in storage.
    pub newest_snapshot: Option<Snapshot>,
    /// Inspection of `status.restorePoint` (or `spec.initialSavepointPath` before a first
    /// deploy).
    pub restore_info: RestoreInfo,
    /// Start time of a savepoint in flight (a periodic or manual one), if any.
    pub savepoint_in_flight_since: Option<SystemTime>,
}

/// Something the controller must do after persisting the decision's status.
#[derive(Clone, Debug, PartialEq)]
pub enum Action {
    /// `POST /v1/savepoints {stop: true}`; record the trigger id with [`record_trigger`].
    StopWithSavepoint {
        /// Target directory.
        directory: Option<String>,
    },
    /// Delete the coordinator Deployment and worker StatefulSet (idempotent).
    DeleteWorkloads,
    /// Apply every child object for `spec` restoring from `restore_from`, labelled with
    /// `deploy_generation` (server-side apply: idempotent).
    Deploy {
        /// The spec to deploy.
        spec: Box<StreamJobSpec>,
        /// The coordinator's `--restore` argument.
        restore_from: Option<String>,
        /// Deploy generation label.
        deploy_generation: u64,
    },
    /// Create a Savepoint object owned by the job (manual ones are created by users).
    RecordSavepoint {
        /// Why it was taken.
        origin: SavepointOrigin,
        /// Its path; `None` asks the Savepoint controller to trigger one (periodic).
        path: Option<String>,
    },
    /// Delete an operator-taken savepoint and its Savepoint object (retention).
    DisposeSavepoint {
        /// The savepoint path.
        path: String,
    },
    /// Remove the StreamJob's finalizer: deletion is complete.
    RemoveFinalizer,
}

/// Event reasons (the Kubernetes Event `reason`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Reason {
    /// A spec change was detected; the message says which cycle it triggers.
    SpecChanged,
    /// A new deploy generation was submitted.
    Submit,
    /// The job is running.
    JobRunning,
    /// The job was suspended.
    Suspended,
    /// A savepoint could not be taken.
    SavepointError,
    /// Rolling back to the last stable spec.
    Rollback,
    /// Restarting a failed job.
    RestartUnhealthyJob,
    /// The spec or restore point was refused.
    ValidationError,
    /// No restore point can be found for a stateful job: manual restore required.
    RestoreRequired,
    /// Deletion cleanup.
    Cleanup,
}

/// An Event to emit. Events are best effort: failing to write one never fails a reconcile
/// (a terminating namespace refuses them: FLINK-31860).
#[derive(Clone, Debug, PartialEq)]
pub struct Event {
    /// Warning (true) or Normal.
    pub warning: bool,
    /// Reason.
    pub reason: Reason,
    /// Message for humans.
    pub message: String,
}

/// The outcome of [`decide`].
#[derive(Clone, Debug, PartialEq)]
pub struct Decision {
    /// The next status, to persist before any action runs.
    pub status: StreamJobStatus,
    /// Actions, in order.
    pub actions: Vec<Action>,
    /// Events to emit (best effort).
    pub events: Vec<Event>,
    /// When to reconcile again.
    pub requeue: Duration,
}

/// Records the trigger id returned by [`Action::StopWithSavepoint`] in the pending operation.
pub fn record_trigger(status: &mut StreamJobStatus, trigger_id: String) {
    if let Some(p) = status.pending.as_mut() {
        p.trigger_id = Some(trigger_id);
    }
}

fn rfc3339(t: SystemTime) -> String {
    humantime::format_rfc3339_seconds(t).to_string()
}

fn parse_time(s: &str) -> Option<SystemTime> {
    humantime::parse_rfc3339(s).ok()
}

fn ms_to_time(ms: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_millis(ms)
}

fn spec_json(spec: &StreamJobSpec) -> String {
    serde_json::to_string(spec).expect("spec serializes")
}

fn parse_spec(s: &Option<String>) -> Option<StreamJobSpec> {
    s.as_deref().and_then(|s| serde_json::from_str(s).ok())
}

/// Builder of a decision, starting from the current status.
struct Ctx<'a> {
    spec: &'a StreamJobSpec,
    obs: &'a Observation,
    d: Decision,
}

impl<'a> Ctx<'a> {
    fn event(&mut self, warning: bool, reason: Reason, message: impl Into<String>) {
        self.d.events.push(Event {
            warning,
            reason,
            message: message.into(),
        });
    }

    fn elapsed_since(&self, rfc: &str) -> Duration {
        parse_time(rfc)
            .and_then(|t| self.obs.now.duration_since(t).ok())
            .unwrap_or(Duration::ZERO)
    }

    fn job_state(&self) -> Option<JobState> {
        self.obs.job.as_ref().map(|j| j.state)
    }

    fn fail(&mut self, reason: Reason, message: String) {
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
    fn start(&mut self, kind: OperationKind, target: Option<&StreamJobSpec>) {
        let mode = self.spec.upgrade_mode;
        let wants_savepoint = match kind {
            OperationKind::Upgrade | OperationKind::Suspend => mode == UpgradeMode::Savepoint,
            OperationKind::Delete => self.spec.savepoint_on_delete,
            OperationKind::Restart | OperationKind::Rollback => false,
        };
        let running = self.job_state() == Some(JobState::Running);
        // The runtime is restarting the job from a checkpoint: it will run again shortly, so
        // the stop waits for it (bounded) rather than giving up on the savepoint.
        let restarting = self.job_state() == Some(JobState::Restarting);
        let phase = if wants_savepoint && (running || restarting) {
            OperationPhase::Stopping
        } else {
            OperationPhase::AwaitingTermination
        };
        if wants_savepoint && !running && !restarting && kind != OperationKind::Delete {
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
    fn step(&mut self) {
        let Some(op) = self.d.status.pending.clone() else {
            return;
        };
        match op.phase {
            OperationPhase::Stopping => {
                let waited = self.elapsed_since(&op.started_at);
                if self.job_state() == Some(JobState::Restarting) {
                    if waited < RESTARTING_WAIT {
                        self.d.requeue = POLL;
                        return;
                    }
                    if op.kind != OperationKind::Delete {
                        self.event(
                            true,
                            Reason::SavepointError,
                            format!("the job has been restarting for {waited:?}, so no savepoint can be taken; it will restore from its newest completed checkpoint"),
                        );
                    }
                    self.set_phase(OperationPhase::AwaitingTermination);
                    return self.step();
                }
                if self.obs.savepoint_in_flight_since.is_some() && waited < INFLIGHT_SAVEPOINT_WAIT {
                    self.d.requeue = POLL; // bounded wait for a periodic/manual savepoint
                    return;
                }
                self.set_phase(OperationPhase::AwaitingStop);
                self.d.actions.push(Action::StopWithSavepoint {
                    directory: self.savepoint_dir(),
                });
                self.d.requeue = POLL;
            }
            OperationPhase::AwaitingStop => self.await_stop(&op),
            OperationPhase::AwaitingTermination => self.await_termination(&op),
            OperationPhase::Deploying => self.deploy_pending(&op),
        }
    }

    fn set_phase(&mut self, phase: OperationPhase) {
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
            .job
            .as_ref()
            .and_then(|j| j.last_completed.as_ref())
            .filter(from_this_stop)
            .or(self.obs.newest_snapshot.as_ref().filter(from_this_stop))
            .cloned()
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
        let trigger_failed = self
            .obs
            .trigger
            .as_ref()
            .is_some_and(|t| t.state == TriggerState::Failed);
        let timed_out = self.elapsed_since(&op.started_at) > STOP_TIMEOUT;
        if op.trigger_id.is_none() && self.obs.trigger.is_none() && state == Some(JobState::Running) && !timed_out {
            // The stop was recorded but never reached the job (crash before the request).
            self.d.actions.push(Action::StopWithSavepoint {
                directory: self.savepoint_dir(),
            });
            self.d.requeue = POLL;
            return;
        }
        let job_gone = matches!(state, None | Some(JobState::Failed) | Some(JobState::Finished));
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

    fn await_termination(&mut self, op: &PendingOperation) {
        if self.obs.workloads_present || self.obs.job_pods > 0 {
            self.d.actions.push(Action::DeleteWorkloads);
            self.d.requeue = POLL;
            return;
        }
        if op.kind == OperationKind::Delete {
            // Deletion never waits on a restore point.
            self.d.actions.push(Action::RemoveFinalizer);
            self.event(false, Reason::Cleanup, "workloads deleted; removing finalizer");
            return;
        }
        // Every old pod is gone: no checkpoint can complete any more, so the newest one is final.
        let target = parse_spec(&op.target_spec);
        let redeploy = target.as_ref().is_some_and(|t| {
            parse_spec(&self.d.status.last_reconciled_spec)
                .is_some_and(|old| classify(&old, t) == ChangeClass::SavepointRedeploy)
        });
        let restore = if redeploy {
            target
                .as_ref()
                .and_then(|t| t.initial_savepoint_path.clone())
                .map(|path| RestorePoint {
                    path,
                    origin: RestoreOrigin::Initial,
                    checkpoint_id: None,
                })
        } else if let Some(path) = &op.savepoint_path {
            self.d.status.restore_point.clone().filter(|r| &r.path == path)
        } else if op.mode == UpgradeMode::Stateless
            && matches!(op.kind, OperationKind::Upgrade | OperationKind::Suspend)
        {
            None
        } else {
            match self.newest_restore_point() {
                Ok(r) => r,
                Err(msg) => return self.fail(Reason::RestoreRequired, msg),
            }
        };
        self.d.status.restore_point = restore;
        match op.kind {
            OperationKind::Suspend => {
                self.d.status.pending = None;
                self.d.status.lifecycle_state = LifecycleState::Suspended;
                self.d.status.job_status = None;
                self.d.status.parallelism = Some(0);
                let msg = match &self.d.status.restore_point {
                    Some(r) => format!("suspended; resume restores from {}", r.path),
                    None => "suspended (stateless: resume starts empty)".into(),
                };
                self.event(false, Reason::Suspended, msg);
                self.d.requeue = STEADY;
            }
            _ => {
                self.set_phase(OperationPhase::Deploying);
                self.d.requeue = Duration::ZERO; // next pass inspects the restore point
            }
        }
    }

    /// The newest restore point of a stateful job after its pods are gone: the newest of the
    /// recorded restore point and the newest snapshot in storage. Errors when the job is known
    /// to have checkpoints that storage no longer has (FLINK-33011: manual restore required).
    fn newest_restore_point(&self) -> Result<Option<RestorePoint>, String> {
        let recorded = self.d.status.restore_point.clone();
        let stored = self.obs.newest_snapshot.as_ref().map(|s| RestorePoint {
            path: s.path.clone(),
            origin: if s.kind == SnapshotKind::Savepoint {
                RestoreOrigin::Savepoint
            } else {
                RestoreOrigin::Checkpoint
            },
            checkpoint_id: Some(s.id),
        });
        let best = match (recorded, stored) {
            (Some(r), Some(s)) => Some(if s.checkpoint_id.unwrap_or(0) > r.checkpoint_id.unwrap_or(0) {
                s
            } else {
                r
            }),
            (r, s) => r.or(s),
        };
        let known = self
            .d
            .status
            .job_status
            .as_ref()
            .and_then(|j| j.last_checkpoint.as_ref())
            .map(|c| c.id);
        match (&best, known) {
            (None, Some(id)) => Err(format!(
                "manual restore required: the job completed checkpoint {id} but no checkpoint or savepoint is in storage; set spec.initialSavepointPath and spec.savepointRedeployNonce"
            )),
            (Some(b), Some(id)) if b.checkpoint_id.unwrap_or(0) < id => Err(format!(
                "manual restore required: the newest snapshot in storage ({}, id {}) is older than checkpoint {id} the job completed",
                b.path,
                b.checkpoint_id.unwrap_or(0)
            )),
            _ => Ok(best),
        }
    }

    /// Checks the restore point against the target job and deploys it.
    fn deploy_pending(&mut self, op: &PendingOperation) {
        let Some(target) = parse_spec(&op.target_spec) else {
            return self.fail(
                Reason::ValidationError,
                "pending operation has no readable target spec".into(),
            );
        };
        if self.obs.workloads_present || self.obs.job_pods > 0 {
            // Never two generations at once: old pods must be gone first (FLINK-34438/39970).
            self.d.actions.push(Action::DeleteWorkloads);
            self.d.requeue = POLL;
            return;
        }
        let restore = self.d.status.restore_point.clone();
        if let Some(r) = &restore {
            match self.check_restore(&target, &r.path) {
                Check::Wait => {
                    self.d.requeue = POLL;
                    return;
                }
                Check::Refuse(reason, msg) => {
                    // Keep the restore point: a corrected spec deploys from it.
                    return self.fail(reason, msg);
                }
                Check::Ok => {}
            }
        }
        self.deploy(target, restore.map(|r| r.path));
    }

    fn check_restore(&self, target: &StreamJobSpec, path: &str) -> Check {
        match &self.obs.restore_info {
            RestoreInfo::NotInspected => Check::Wait,
            RestoreInfo::Found { path: p, .. } | RestoreInfo::Missing { path: p, .. } if p != path => Check::Wait,
            RestoreInfo::Missing { error, .. } => Check::Refuse(
                Reason::RestoreRequired,
                format!("manual restore required: restore point {path} cannot be read ({error})"),
            ),
            RestoreInfo::Found { info, .. } => {
                if info.max_parallelism != target.max_parallelism as u32 {
                    return Check::Refuse(
                        Reason::ValidationError,
                        format!(
                            "restore point {path} was written with maxParallelism {} but spec.maxParallelism is {}",
                            info.max_parallelism, target.max_parallelism
                        ),
                    );
                }
                let job = match target.runtime_job(&self.obs.name) {
                    Ok(j) => j,
                    Err(e) => {
                        return Check::Refuse(Reason::ValidationError, format!("spec.job is invalid: {e}"));
                    }
                };
                let dropped: Vec<&str> = info
                    .operators
                    .iter()
                    .map(|o| o.uid.as_str())
                    .filter(|uid| !job.operators.iter().any(|op| op.uid == *uid))
                    .collect();
                if !dropped.is_empty() && !target.allow_non_restored_state {
                    return Check::Refuse(
                        Reason::ValidationError,
                        format!(
                            "restore point {path} holds state for operator uids [{}] that spec.job no longer has; restore them or set spec.allowNonRestoredState: true to drop that state",
                            dropped.join(", ")
                        ),
                    );
                }
                Check::Ok
            }
        }
    }

    fn deploy(&mut self, spec: StreamJobSpec, restore_from: Option<String>) {
        let st = &mut self.d.status;
        st.deploy_generation += 1;
        st.last_reconciled_spec = Some(spec_json(&spec));
        st.deployed_from = restore_from.clone();
        st.deployed_at = Some(rfc3339(self.obs.now));
        st.pending = None;
        st.lifecycle_state = LifecycleState::Deploying;
        st.parallelism = Some(spec.parallelism);
        st.error = None;
        let generation = st.deploy_generation;
        let from = restore_from.clone().unwrap_or_else(|| "empty state".into());
        self.event(
            false,
            Reason::Submit,
            format!(
                "deploying generation {generation} at parallelism {} from {from}",
                spec.parallelism
            ),
        );
        self.d.actions.push(Action::Deploy {
            spec: Box::new(spec),
            restore_from,
            deploy_generation: generation,
        });
        self.d.requeue = POLL;
    }

    /// Re-applies the current deployment (drift correction; idempotent).
    fn keep_deployed(&mut self) {
        if let Some(spec) = parse_spec(&self.d.status.last_reconciled_spec) {
            self.d.actions.push(Action::Deploy {
                spec: Box::new(spec),
                restore_from: self.d.status.deployed_from.clone(),
                deploy_generation: self.d.status.deploy_generation,
            });
        }
    }
}

enum Check {
    Wait,
    Refuse(Reason, String),
    Ok,
}

/// Describes the cycle a change of `class` triggers under `mode`, for events and conditions.
pub fn describe_cycle(class: ChangeClass, mode: UpgradeMode, parallelism: i32) -> String {
    let how = match mode {
        UpgradeMode::Savepoint => "stop-with-savepoint → delete pods → restore from the savepoint",
        UpgradeMode::LastState => "stop → delete pods → restore from the newest completed checkpoint",
        UpgradeMode::Stateless => "stop → delete pods → start with empty state",
    };
    match class {
        ChangeClass::Ignore => "no restart (operator-only fields changed)".into(),
        ChangeClass::Scale => format!("rescale to parallelism {parallelism}: {how}"),
        ChangeClass::Upgrade => format!("upgrade: {how}"),
        ChangeClass::SavepointRedeploy => {
            "savepoint redeploy: stop → delete pods → restore from spec.initialSavepointPath (current state discarded)"
                .into()
        }
    }
}

/// Decides the next step for a StreamJob. Pure: all inputs are arguments.
pub fn decide(spec: &StreamJobSpec, status: &StreamJobStatus, obs: &Observation) -> Decision {
    let mut cx = Ctx {
        spec,
        obs,
        d: Decision {
            status: status.clone(),
            actions: vec![],
            events: vec![],
            requeue: STEADY,
        },
    };
    absorb_job_report(&mut cx);

    // Deletion wins over everything; a pending upgrade is superseded.
    if obs.deleting {
        let deleting =
            cx.d.status
                .pending
                .as_ref()
                .is_some_and(|p| p.kind == OperationKind::Delete);
        if deleting {
            cx.step();
        } else if !obs.workloads_present && obs.job_pods == 0 {
            cx.d.status.lifecycle_state = LifecycleState::Deleting;
            cx.d.actions.push(Action::RemoveFinalizer);
        } else {
            cx.d.status.pending = None;
            cx.start(OperationKind::Delete, None);
        }
        return cx.d;
    }

    // A recorded operation resumes where it stopped.
    if cx.d.status.pending.is_some() {
        cx.step();
        cx.d.status.observed_generation = Some(obs.generation);
        return cx.d;
    }

    let state = cx.d.status.lifecycle_state;
    let deployed = parse_spec(&cx.d.status.last_reconciled_spec);
    let retry_blocked = cx.d.status.failed_generation == Some(obs.generation);
    let class = deployed.as_ref().map_or(ChangeClass::Upgrade, |d| classify(d, spec));
    let want_running = spec.state == DesiredState::Running;

    // Refuse a spec the runtime would reject before stopping anything.
    if class != ChangeClass::Ignore
        && want_running
        && !retry_blocked
        && let Err(e) = spec.runtime_job(&obs.name)
    {
        cx.d.status.error = Some(format!("spec is invalid, nothing was changed: {e}"));
        cx.event(
            true,
            Reason::ValidationError,
            format!("spec is invalid, nothing was changed: {e}"),
        );
        cx.d.status.observed_generation = Some(obs.generation);
        if matches!(state, LifecycleState::Running | LifecycleState::Deploying) {
            cx.keep_deployed();
        }
        return cx.d;
    }

    match state {
        LifecycleState::Created => {
            if !want_running {
                cx.d.status.lifecycle_state = LifecycleState::Suspended;
                cx.d.status.last_reconciled_spec = Some(spec_json(spec));
                if let Some(p) = &spec.initial_savepoint_path {
                    cx.d.status.restore_point = Some(RestorePoint {
                        path: p.clone(),
                        origin: RestoreOrigin::Initial,
                        checkpoint_id: None,
                    });
                }
            } else {
                if cx.d.status.restore_point.is_none()
                    && let Some(p) = &spec.initial_savepoint_path
                {
                    cx.d.status.restore_point = Some(RestorePoint {
                        path: p.clone(),
                        origin: RestoreOrigin::Initial,
                        checkpoint_id: None,
                    });
                }
                cx.d.status.pending = Some(first_deploy(spec, obs));
                cx.d.status.lifecycle_state = LifecycleState::Deploying;
                cx.step();
            }
        }
        LifecycleState::Suspended => {
            if want_running {
                cx.event(false, Reason::SpecChanged, "resuming");
                cx.d.status.pending = Some(first_deploy(spec, obs));
                cx.d.status.lifecycle_state = LifecycleState::Upgrading;
                cx.step();
            }
        }
        LifecycleState::Failed => {
            if !want_running && (obs.workloads_present || obs.job_pods > 0) {
                cx.start(OperationKind::Suspend, None);
            } else if !want_running {
                cx.d.status.lifecycle_state = LifecycleState::Suspended;
            } else if !retry_blocked && class != ChangeClass::Ignore {
                cx.event(
                    false,
                    Reason::SpecChanged,
                    format!(
                        "spec changed on a failed job: {}",
                        describe_cycle(class, spec.upgrade_mode, spec.parallelism)
                    ),
                );
                cx.d.status.failed_generation = None;
                cx.start(OperationKind::Upgrade, Some(spec));
            }
        }
        LifecycleState::Deploying | LifecycleState::Running => running_or_deploying(&mut cx, class, retry_blocked),
        // These states always carry a pending operation; without one, re-derive from workloads.
        LifecycleState::Upgrading | LifecycleState::RollingBack | LifecycleState::Deleting => {
            cx.d.status.lifecycle_state = if obs.workloads_present {
                LifecycleState::Deploying
            } else {
                LifecycleState::Failed
            };
            cx.d.requeue = Duration::ZERO;
        }
    }
    cx.d.status.observed_generation = Some(obs.generation);
    cx.d
}

fn first_deploy(spec: &StreamJobSpec, obs: &Observation) -> PendingOperation {
    PendingOperation {
        kind: OperationKind::Upgrade,
        mode: spec.upgrade_mode,
        target_spec: Some(spec_json(spec)),
        target_generation: Some(obs.generation),
        phase: OperationPhase::Deploying,
        trigger_id: None,
        savepoint_path: None,
        started_at: rfc3339(obs.now),
    }
}

/// Copies the coordinator's report into `status.jobStatus` (only changing values change it).
fn absorb_job_report(cx: &mut Ctx) {
    let Some(j) = &cx.obs.job else {
        if let Some(js) = cx.d.status.job_status.as_mut() {
            js.state = "UNKNOWN".into();
        }
        return;
    };
    let prev_cp = cx.d.status.job_status.as_ref().and_then(|s| s.last_checkpoint.clone());
    let state = serde_json::to_value(j.state)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let last_checkpoint = match &j.last_completed {
        Some(s) if prev_cp.as_ref().is_none_or(|p| s.id >= p.id) => Some(CheckpointRef {
            id: s.id,
            path: s.path.clone(),
            completed_at: Some(rfc3339(ms_to_time(s.completed_at_ms))),
        }),
        _ => prev_cp,
    };
    cx.d.status.job_status = Some(JobStatusSummary {
        job_id: j.job_id.clone(),
        state,
        last_checkpoint,
        failure: j.failure.clone(),
    });
}

fn running_or_deploying(cx: &mut Ctx, class: ChangeClass, retry_blocked: bool) {
    let spec = cx.spec;
    let obs = cx.obs;
    let job_state = cx.job_state();
    let lifecycle = cx.d.status.lifecycle_state;

    if job_state == Some(JobState::Running) && lifecycle == LifecycleState::Deploying {
        cx.d.status.lifecycle_state = LifecycleState::Running;
        cx.d.status.last_stable_spec = cx.d.status.last_reconciled_spec.clone();
        cx.event(
            false,
            Reason::JobRunning,
            format!("deploy generation {} is running", cx.d.status.deploy_generation),
        );
    }
    let lifecycle = cx.d.status.lifecycle_state;

    if spec.state == DesiredState::Suspended {
        cx.event(
            false,
            Reason::SpecChanged,
            format!(
                "suspending: {}",
                describe_cycle(ChangeClass::Upgrade, spec.upgrade_mode, spec.parallelism)
            ),
        );
        return cx.start(OperationKind::Suspend, None);
    }

    // Health: a failed or crash-looping job restarts from its newest checkpoint, within limits.
    let failed = job_state == Some(JobState::Failed) || obs.crash_looping;
    if failed && lifecycle == LifecycleState::Running {
        let window = humantime::parse_duration(&spec.health.restart_window).unwrap_or(Duration::from_secs(3600));
        let now = obs.now;
        cx.d.status.restarts.retain(|t| {
            parse_time(t)
                .and_then(|t| now.duration_since(t).ok())
                .is_some_and(|age| age <= window)
        });
        if cx.d.status.restarts.len() < spec.health.max_restarts as usize {
            cx.d.status.restarts.push(rfc3339(now));
            let why = obs
                .job
                .as_ref()
                .and_then(|j| j.failure.clone())
                .unwrap_or_else(|| "crash-looping".into());
            cx.event(
                true,
                Reason::RestartUnhealthyJob,
                format!("job failed ({why}); restarting from its newest checkpoint"),
            );
            let deployed = parse_spec(&cx.d.status.last_reconciled_spec);
            return cx.start(OperationKind::Restart, Some(deployed.as_ref().unwrap_or(spec)));
        }
        return cx.fail(
            Reason::RestartUnhealthyJob,
            format!(
                "job failed {} times within {}; not restarting (change the spec or spec.restartNonce)",
                spec.health.max_restarts, spec.health.restart_window
            ),
        );
    }

    // Readiness timeout: roll back a change that does not come up.
    if lifecycle == LifecycleState::Deploying && job_state != Some(JobState::Running) {
        let timeout = humantime::parse_duration(&spec.rollback.readiness_timeout).unwrap_or(Duration::from_secs(300));
        let waited =
            cx.d.status
                .deployed_at
                .clone()
                .map(|t| cx.elapsed_since(&t))
                .unwrap_or_default();
        if waited > timeout {
            let stable = cx.d.status.last_stable_spec.clone();
            if spec.rollback.enabled && stable.is_some() && stable != cx.d.status.last_reconciled_spec {
                let stable = parse_spec(&stable).expect("stable spec parses");
                cx.d.status.failed_generation = Some(obs.generation);
                cx.event(
                    true,
                    Reason::Rollback,
                    format!(
                        "not running within {}; rolling back to the last stable spec",
                        spec.rollback.readiness_timeout
                    ),
                );
                return cx.start(OperationKind::Rollback, Some(&stable));
            }
            if failed {
                return cx.fail(
                    Reason::RestartUnhealthyJob,
                    format!("not running within {}", spec.rollback.readiness_timeout),
                );
            }
        }
    }

    if class != ChangeClass::Ignore && !retry_blocked {
        cx.event(
            false,
            Reason::SpecChanged,
            describe_cycle(class, spec.upgrade_mode, spec.parallelism),
        );
        cx.d.status.failed_generation = None;
        return cx.start(OperationKind::Upgrade, Some(spec));
    }
    if class == ChangeClass::Ignore && cx.d.status.last_reconciled_spec.as_deref() != Some(&spec_json(spec)) {
        // Operator-only fields changed: remember them without restarting (FKO: ignore diff).
        cx.d.status.last_reconciled_spec = Some(spec_json(spec));
        if lifecycle == LifecycleState::Running {
            cx.d.status.last_stable_spec = cx.d.status.last_reconciled_spec.clone();
        }
    }

    cx.keep_deployed();
    if cx.d.status.lifecycle_state == LifecycleState::Running && job_state == Some(JobState::Running) {
        periodic_and_retention(cx);
        cx.d.status.error = None;
    }
    cx.d.requeue = if cx.d.status.lifecycle_state == LifecycleState::Running {
        STEADY
    } else {
        POLL
    };
}

fn periodic_and_retention(cx: &mut Ctx) {
    let Some(sp) = cx.spec.savepoints.clone() else {
        return;
    };
    if let Some(interval) = sp
        .periodic_interval
        .as_deref()
        .and_then(|s| humantime::parse_duration(s).ok())
        && cx.obs.savepoint_in_flight_since.is_none()
    {
        let last =
            cx.d.status
                .savepoint_history
                .iter()
                .filter(|r| r.origin == SavepointOrigin::Periodic)
                .filter_map(|r| parse_time(&r.completed_at))
                .max()
                .or_else(|| cx.d.status.deployed_at.as_deref().and_then(parse_time));
        if last.is_none_or(|t| cx.obs.now.duration_since(t).unwrap_or_default() >= interval) {
            cx.d.actions.push(Action::RecordSavepoint {
                origin: SavepointOrigin::Periodic,
                path: None,
            });
        }
    }
    if let Some(policy) = &sp.history {
        let restore = cx.d.status.restore_point.as_ref().map(|r| r.path.clone());
        let deployed_from = cx.d.status.deployed_from.clone();
        let protected: Vec<&str> = [restore.as_deref(), deployed_from.as_deref()]
            .into_iter()
            .flatten()
            .collect();
        let dispose: Vec<String> =
            retention::to_dispose(&cx.d.status.savepoint_history, policy, &protected, cx.obs.now)
                .into_iter()
                .map(|r| r.path.clone())
                .collect();
        cx.d.status.savepoint_history.retain(|r| !dispose.contains(&r.path));
        for path in dispose {
            cx.d.actions.push(Action::DisposeSavepoint { path });
        }
    }
}

#[cfg(test)]
mod tests;
