//! The observation, action and decision types [`decide`](fn@super::decide) works with.

use crate::crd::{SavepointOrigin, StreamJobSpec, StreamJobStatus};
use std::time::{Duration, SystemTime};
use weir_runtime::control::api::{JobState, SavepointStatus, SnapshotInfo, SnapshotKind};

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

/// The job's newest completed checkpoint or savepoint, as the operator read it from storage.
#[derive(Clone, Debug, PartialEq, Default)]
pub enum NewestSnapshot {
    /// Not read in this pass (a decision that needs it waits for the next pass, which reads
    /// it: [`storage_reads`](crate::controller::stream_job::storage_reads)).
    #[default]
    NotRead,
    /// Storage holds no completed snapshot of the job.
    None,
    /// The newest one, readable.
    Found(Snapshot),
    /// The newest one cannot be the restore point: its `_metadata` is missing or damaged, or
    /// the job's record of its newest completed snapshot (`<job>/newest-completed`) names one
    /// storage no longer holds (deleted by hand). An older one would replay committed output,
    /// so only the restore choice refuses with this message (naming the snapshot and what to
    /// do); deletes, stateless changes and stops go on.
    Refused {
        /// The refused snapshot's id.
        id: u64,
        /// Why, naming it, and what to do.
        message: String,
    },
}

impl NewestSnapshot {
    /// The snapshot, when one was found.
    pub fn found(&self) -> Option<&Snapshot> {
        match self {
            NewestSnapshot::Found(s) => Some(s),
            _ => None,
        }
    }
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

/// Whether the job's checkpoint directory is this StreamJob's to use
/// ([`weir_runtime::checkpoint::owner`]), read before a deploy.
#[derive(Clone, Debug, PartialEq)]
pub enum StorageClaim {
    /// Not read in this pass.
    NotChecked,
    /// Claimed by this StreamJob (now or before), or there is no checkpoint storage.
    Ours,
    /// Another StreamJob owns it: the message names it and says what to do.
    Taken(String),
    /// The storage refused the record for good (the operator may not write there): the deploy
    /// goes on unchecked, with a Warning saying why.
    Unrecorded(String),
}

/// What one pass learned from the job's coordinator: whether there is one and, if so,
/// whether its control API reported the job's state.
#[derive(Clone, Debug)]
pub enum CoordinatorReport {
    /// No coordinator Deployment exists (not deployed yet, or deleted).
    Absent,
    /// The coordinator Deployment exists but its control API did not report the job's state
    /// (a timeout, a refused connection, its pod not up, an error reply; the error's text):
    /// the state is unknown, not stopped. Unless its pods crash-loop or cannot be scheduled, a
    /// savepoint stop waits for a report (bounded by [`RESTARTING_WAIT`](super::RESTARTING_WAIT))
    /// instead of giving up on the savepoint.
    Unanswered(String),
    /// The job's state as its coordinator reported it.
    Reported(JobReport),
}

impl CoordinatorReport {
    /// The report, when the coordinator gave one.
    pub fn job(&self) -> Option<&JobReport> {
        match self {
            CoordinatorReport::Reported(report) => Some(report),
            _ => None,
        }
    }

    /// The error of a coordinator that did not report, when it did not.
    pub fn unanswered(&self) -> Option<&str> {
        match self {
            CoordinatorReport::Unanswered(error) => Some(error),
            _ => None,
        }
    }
}

/// Everything the controller observed for one reconcile. All I/O happens before [`decide`](fn@super::decide).
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
    /// What the job's coordinator reported this pass.
    pub coordinator: CoordinatorReport,
    /// Poll result for `status.pending.triggerId`, when there is one.
    pub trigger: Option<SavepointStatus>,
    /// Coordinator Deployment or worker StatefulSet exists.
    pub workloads_present: bool,
    /// Pods of this job still present (any deploy generation, including terminating ones).
    pub job_pods: u32,
    /// A coordinator or worker container is crash-looping.
    pub crash_looping: bool,
    /// Why a pod of the job cannot be scheduled (its `PodScheduled=False` message), if one
    /// cannot.
    pub unschedulable: Option<String>,
    /// Newest completed checkpoint or savepoint of this job in storage (read only while a stop
    /// is in flight or after the pods are gone).
    pub newest_snapshot: NewestSnapshot,
    /// Inspection of `status.restorePoint` (or `spec.initialSavepointPath` before a first
    /// deploy).
    pub restore_info: RestoreInfo,
    /// The claim on the target spec's checkpoint directory, read in the passes that may
    /// deploy.
    pub storage_claim: StorageClaim,
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
    /// The owner of the job's checkpoint directory could not be recorded.
    OwnerUnrecorded,
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

/// The outcome of [`decide`](fn@super::decide).
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
