//! The `Savepoint` custom resource: a request to take a savepoint of a StreamJob (manual), or
//! the record of one the operator took (periodic, upgrade). `kubectl get svp` is the history.

use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A savepoint of a StreamJob.
#[derive(CustomResource, KubeSchema, Clone, Debug, Serialize, Deserialize, PartialEq)]
#[kube(
    group = "weir.dev",
    version = "v1alpha1",
    kind = "Savepoint",
    namespaced,
    doc = "A savepoint of a StreamJob: taken on creation (manual) or recorded by the operator \
           (periodic, upgrade).",
    status = "SavepointStatus",
    shortname = "svp",
    category = "weir",
    derive = "PartialEq",
    printcolumn(name = "Job", type_ = "string", json_path = ".spec.jobRef.name"),
    printcolumn(name = "State", type_ = "string", json_path = ".status.state"),
    printcolumn(name = "Origin", type_ = "string", json_path = ".spec.origin"),
    printcolumn(name = "Path", type_ = "string", json_path = ".status.path", priority = 1),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
pub struct SavepointSpec {
    /// The StreamJob (same namespace) to take the savepoint of.
    #[x_kube(validation = Rule::new("self == oldSelf").message("spec.jobRef is immutable"))]
    pub job_ref: JobRef,
    /// Target directory URL; default: the job's `spec.savepoints.directory`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directory: Option<String>,
    /// Delete the savepoint's data when this object is deleted (never the job's current
    /// restore point). Default false.
    #[serde(default)]
    pub dispose_on_delete: bool,
    /// Why it exists: `Manual` (taken when this object is created), `Periodic` or `Upgrade`
    /// (recorded by the operator after it took the savepoint).
    #[serde(default)]
    pub origin: SavepointOrigin,
}

/// A reference to a StreamJob in the same namespace.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct JobRef {
    /// StreamJob name.
    pub name: String,
}

/// Why a savepoint was taken.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq, Hash)]
pub enum SavepointOrigin {
    /// Requested by a user creating the Savepoint object.
    #[default]
    Manual,
    /// Taken by the operator on `spec.savepoints.periodicInterval`.
    Periodic,
    /// Taken by the operator when stopping the job for an upgrade, suspend or deletion.
    Upgrade,
}

/// Observed state of a Savepoint.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SavepointStatus {
    /// Progress.
    #[serde(default)]
    pub state: SavepointState,
    /// Control-API trigger id, once triggered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_id: Option<String>,
    /// Savepoint directory URL when completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Completion time (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<String>,
    /// The last error.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
    /// Failed trigger attempts so far (retried with backoff).
    #[serde(default)]
    pub failures: u32,
    /// The job's S3 settings when the savepoint completed (endpoint, region, path style and
    /// the name of the credentials Secret; never the credentials themselves). Disposal on
    /// delete uses them, so it works after the StreamJob is gone. Unset on savepoints that
    /// completed before the operator recorded it (the job's settings are used, when it exists).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<crate::crd::S3Config>,
}

/// Progress of a Savepoint.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq, Hash)]
pub enum SavepointState {
    /// Not yet triggered.
    #[default]
    Pending,
    /// Triggered; waiting for completion.
    InProgress,
    /// Completed: `path` is a restore point.
    Completed,
    /// Failed after the allowed retries.
    Failed,
    /// The job stopped or disappeared before the savepoint could be taken.
    Abandoned,
}
