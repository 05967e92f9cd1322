//! The pure lifecycle decisions of the StreamJob controller.
//!
//! [`decide`](fn@decide) maps (spec, status, observations) to the next status and the actions to take.
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
mod compat;
mod decide;
pub mod disposal;
mod model;
mod operations;
mod restore;
pub mod retention;

pub use classify::{ChangeClass, classify};
pub use compat::state_incompatibility;
pub use decide::{decide, describe_cycle};
pub use model::{
    Action, CoordinatorReport, Decision, Event, JobReport, NewestSnapshot, Observation, Reason, RestoreInfo, Snapshot,
    StorageClaim, record_trigger,
};
pub use restore::{deployment_ran, resume_rechooses};

use crate::crd::StreamJobSpec;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

/// How long an upgrade waits for an in-flight (e.g. periodic) savepoint before it stops the job.
pub const INFLIGHT_SAVEPOINT_WAIT: Duration = Duration::from_secs(120);
/// How long a savepoint stop waits for a job the runtime is restarting (`RESTARTING`), or whose
/// coordinator does not answer, to run again before it gives up on the savepoint and restores
/// from the newest checkpoint.
pub const RESTARTING_WAIT: Duration = Duration::from_secs(120);
/// How long a stop-with-savepoint may take before it counts as failed.
pub const STOP_TIMEOUT: Duration = Duration::from_secs(600);
/// Requeue interval while waiting on something in progress.
pub const POLL: Duration = Duration::from_secs(5);
/// Requeue interval of a steady job.
pub const STEADY: Duration = Duration::from_secs(60);
/// Requeue interval after a failed stop before the change is tried again.
pub const RETRY_BACKOFF: Duration = Duration::from_secs(30);

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

#[cfg(test)]
mod tests;
