//! The `StreamJob` custom resource: a Weir job plus how the operator deploys, upgrades and
//! protects its state. `spec` is a superset of the runtime's [`JobSpec`] (same field names and
//! shapes), so the operator hands the whole object to the runtime pods as their job file.
//!
//! [`JobSpec`]: weir_runtime::job::JobSpec

use k8s_openapi::api::core::v1::{PodTemplateSpec, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::Condition;
use kube::{CustomResource, KubeSchema};
use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use weir_runtime::job::{CheckpointingSpec, PipelineSpec, S3Spec, SavepointsSpec, StateBackend};

/// Desired state of a Weir streaming job.
#[derive(CustomResource, KubeSchema, Clone, Debug, Serialize, Deserialize, PartialEq)]
#[kube(
    group = "weir.dev",
    version = "v1alpha1",
    kind = "StreamJob",
    namespaced,
    doc = "A Weir streaming job: the pipeline, its parallelism and checkpointing, and how the \
           operator upgrades it without losing state.",
    status = "StreamJobStatus",
    shortname = "sj",
    category = "weir",
    derive = "PartialEq",
    scale(
        spec_replicas_path = ".spec.parallelism",
        status_replicas_path = ".status.parallelism",
        label_selector_path = ".status.selector"
    ),
    printcolumn(
        name = "Job State",
        type_ = "string",
        json_path = ".status.jobStatus.state",
        description = "State reported by the job's coordinator"
    ),
    printcolumn(
        name = "Lifecycle",
        type_ = "string",
        json_path = ".status.lifecycleState",
        description = "Operator lifecycle state"
    ),
    printcolumn(
        name = "Parallelism",
        type_ = "integer",
        json_path = ".spec.parallelism",
        description = "Desired parallelism"
    ),
    printcolumn(
        name = "Last Checkpoint",
        type_ = "date",
        json_path = ".status.jobStatus.lastCheckpoint.completedAt",
        description = "Completion time of the newest checkpoint"
    ),
    printcolumn(name = "Age", type_ = "date", json_path = ".metadata.creationTimestamp")
)]
#[serde(rename_all = "camelCase")]
#[x_kube(validation = Rule::new("self.parallelism <= self.maxParallelism")
    .message("spec.parallelism must not exceed spec.maxParallelism")
    .field_path(".parallelism"))]
#[x_kube(validation = Rule::new(
    "self.upgradeMode == 'stateless' || (has(self.checkpointing) && has(self.checkpointing.storage))")
    .message("spec.checkpointing.storage is required unless spec.upgradeMode is stateless")
    .field_path(".checkpointing"))]
pub struct StreamJobSpec {
    /// Container image with the `weir` binary, e.g. `ghcr.io/weir-dev/weir:0.1.0`. Empty or
    /// unset: the operator's runtime image (`WEIR_RUNTIME_IMAGE`, the chart's `runtime.image`,
    /// by default the image the operator itself runs).
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub image: String,
    /// Image pull policy of the coordinator and worker containers.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub image_pull_policy: Option<ImagePullPolicy>,
    /// Number of parallel subtasks of every operator. 1 ≤ parallelism ≤ maxParallelism.
    /// Changing only this field rescales the job (a savepoint/last-state cycle at the new
    /// parallelism); `kubectl scale sj NAME --replicas N` sets it.
    #[serde(default = "default_parallelism")]
    #[x_kube(validation = Rule::new("self >= 1").message("spec.parallelism must be at least 1"))]
    pub parallelism: i32,
    /// Number of key groups: the upper bound for parallelism and the unit by which keyed state
    /// is redistributed on rescale (Flink's maxParallelism). Between 1 and 32768; default 128.
    /// Immutable: keyed state cannot be restored with a different value.
    #[serde(default = "default_max_parallelism")]
    #[x_kube(validation = Rule::new("self >= 1 && self <= 32768")
        .message("spec.maxParallelism must be between 1 and 32768"))]
    #[x_kube(validation = Rule::new("self == oldSelf")
        .message("spec.maxParallelism is immutable: keyed state is partitioned by it; start a new StreamJob without state to change it"))]
    pub max_parallelism: i32,
    /// Task slots per worker pod; the worker StatefulSet has
    /// `ceil(parallelism / slotsPerWorker)` replicas. Default 1.
    #[serde(default = "default_slots")]
    #[x_kube(validation = Rule::new("self >= 1").message("spec.slotsPerWorker must be at least 1"))]
    pub slots_per_worker: i32,
    /// Coordinator pod settings (Flink's JobManager).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub coordinator: Option<ComponentSpec>,
    /// Worker pod settings (Flink's TaskManagers).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub worker: Option<ComponentSpec>,
    /// Service account of the coordinator and worker pods (needs read/write access to the
    /// checkpoint storage, nothing in the Kubernetes API).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub service_account_name: Option<String>,
    /// The pipeline: steps from one source to one sink.
    pub job: PipelineSpec,
    /// Checkpointing: interval, mode, storage URL and number retained.
    #[serde(default)]
    pub checkpointing: CheckpointingSpec,
    /// Savepoints: directory, periodic savepoints and history retention.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub savepoints: Option<SavepointsConfig>,
    /// S3 settings for `s3://` URLs (checkpoint storage, savepoints, sources and sinks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3Config>,
    /// How state is carried across a spec change: `stateless` (redeploy empty),
    /// `savepoint` (stop-with-savepoint, restore from it) or `last-state` (stop, restore from
    /// the newest completed checkpoint). Changing only this field restarts nothing.
    #[serde(default)]
    pub upgrade_mode: UpgradeMode,
    /// Desired state: `running` or `suspended` (stopped with its state kept as restore point).
    #[serde(default)]
    pub state: DesiredState,
    /// Savepoint or checkpoint URL the first deployment restores from. Changing it on a job
    /// that already ran restarts nothing.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub initial_savepoint_path: Option<String>,
    /// Allow a restore that drops state of operator uids the new job no longer has. Default
    /// false: such an upgrade is refused with a status error.
    #[serde(default)]
    pub allow_non_restored_state: bool,
    /// Where keyed state lives: `heap` (default; in memory, Flink's `hashmap`) or `disk` (an
    /// embedded LSM store per subtask, Flink's `rocksdb`: state larger than memory). With
    /// `disk` the worker pods get an emptyDir volume `weir-state` mounted at
    /// `/var/lib/weir/state`; size it with a volume of that name in `worker.podTemplate`
    /// (e.g. `emptyDir: {sizeLimit: 20Gi}`). Savepoints restore on either backend; changing
    /// it is an upgrade.
    #[serde(default, skip_serializing_if = "StateBackend::is_heap")]
    pub state_backend: StateBackend,
    /// Memory and compression of each disk store (`stateBackend: disk` only), per subtask of
    /// each stateful step: `cacheSize` (block cache, default `32Mi`), `writeBufferSize` (memtable, default
    /// `16Mi`) and `writeCacheSize` (write-back cache of recent writes, default `16Mi`),
    /// Kubernetes quantities. RocksDB keeps at most three memtables, so the configured memory is
    /// `cacheSize + 3 × writeBufferSize + writeCacheSize` per store; measured peaks are higher
    /// (docs/runtime/state-backends.md, "Memory of the disk backend"); `compression` of the
    /// store's table files (`none`, default; `lz4`; `lz4-zstd`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_state: Option<weir_runtime::job::disk_state::DiskStateSpec>,
    /// Change to any new value to force a restart through the upgrade cycle (like FKO's
    /// `restartNonce`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restart_nonce: Option<i64>,
    /// Change to any new value, together with `initialSavepointPath`, to redeploy from that
    /// savepoint, discarding the job's current state (FKO's `savepointRedeployNonce`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub savepoint_redeploy_nonce: Option<i64>,
    /// Rollback of a spec change that does not become healthy.
    #[serde(default)]
    pub rollback: RollbackSpec,
    /// Restart limits for a job whose coordinator reports FAILED or crash-loops.
    #[serde(default)]
    pub health: HealthSpec,
    /// Take a savepoint before the workloads are removed when the StreamJob is deleted.
    #[serde(default)]
    pub savepoint_on_delete: bool,
}

impl StreamJobSpec {
    /// The runtime's view of this spec (the fields `weir` reads from the job file).
    ///
    /// Errors: a field the runtime cannot read (not expected: the shapes are shared).
    pub fn runtime_spec(&self) -> Result<weir_runtime::job::JobSpec, serde_json::Error> {
        serde_json::from_value(serde_json::to_value(self)?)
    }

    /// The runtime's validated job for this spec under `name` (operators, uids, parallelism).
    ///
    /// Errors: the runtime's validation error, naming the offending field.
    pub fn runtime_job(&self, name: &str) -> Result<weir_runtime::job::Job, String> {
        let spec = self.runtime_spec().map_err(|e| e.to_string())?;
        weir_runtime::job::Job::from_spec(name, spec).map_err(|e| e.to_string())
    }
}

fn default_parallelism() -> i32 {
    1
}
fn default_max_parallelism() -> i32 {
    128
}
fn default_slots() -> i32 {
    1
}

/// Image pull policy, as a container's `imagePullPolicy`.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
pub enum ImagePullPolicy {
    /// Always pull.
    Always,
    /// Pull when the image is not on the node.
    IfNotPresent,
    /// Never pull.
    Never,
}

/// Settings of one pod role (coordinator or worker).
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ComponentSpec {
    /// CPU and memory requests and limits of the `weir` container.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub resources: Option<ResourceRequirements>,
    /// Pod template merged over the generated pod (labels, annotations, node selection,
    /// tolerations, extra volumes, sidecars). Containers and volumes merge by name; a volume
    /// keeps only the keys it sets, so another volume source replaces a generated one (the
    /// `weir-state` volume of the disk state backend). The container named `weir` is the
    /// runtime.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(schema_with = "pod_template_schema")]
    pub pod_template: Option<PodTemplateSpec>,
}

/// The pod template is validated by the API server when the operator applies the generated
/// workload, so the CRD keeps it as an opaque object instead of embedding the whole pod schema.
fn pod_template_schema(_: &mut schemars::SchemaGenerator) -> schemars::Schema {
    schemars::json_schema!({
        "description": "A PodTemplateSpec merged over the generated pod.",
        "type": "object",
        "x-kubernetes-preserve-unknown-fields": true
    })
}

/// `status.conditions` as a list map keyed by `type` (as the API conventions ask), so server-side
/// apply merges conditions by type instead of replacing the whole list.
fn conditions_schema(generator: &mut schemars::SchemaGenerator) -> schemars::Schema {
    let item = generator.subschema_for::<Condition>();
    schemars::json_schema!({
        "description": "`Ready`, `Progressing` and `Degraded` conditions, one per type.",
        "type": "array",
        "items": item,
        "x-kubernetes-list-type": "map",
        "x-kubernetes-list-map-keys": ["type"],
    })
}

/// Savepoint settings: the runtime's (directory) plus periodic savepoints and history.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SavepointsConfig {
    /// Runtime savepoint settings; `directory` defaults to `<checkpointing.storage>/savepoints`.
    #[serde(flatten)]
    pub runtime: SavepointsSpec,
    /// Take a savepoint this often (e.g. `6h`); unset: no periodic savepoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub periodic_interval: Option<String>,
    /// Retention of periodic and upgrade savepoints. Manual Savepoint objects are never
    /// removed by retention, and neither is the current restore point. Unset: the newest 10 are
    /// kept; `{}` keeps all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub history: Option<SavepointHistory>,
}

/// Retention of operator-taken savepoints; a savepoint is removed when it exceeds either limit,
/// except the newest completed one and the current restore point.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SavepointHistory {
    /// Keep at most this many periodic/upgrade savepoints.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_count: Option<u32>,
    /// Remove periodic/upgrade savepoints older than this (e.g. `7d`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_age: Option<String>,
}

/// S3 settings: the runtime's (endpoint, region, path style) plus credentials.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct S3Config {
    /// Runtime S3 client settings.
    #[serde(flatten)]
    pub runtime: S3Spec,
    /// Secret holding the access key; mounted as `AWS_ACCESS_KEY_ID` /
    /// `AWS_SECRET_ACCESS_KEY`. Unset: the AWS default chain (e.g. IRSA) is used.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub credentials_secret: Option<S3CredentialsSecret>,
}

/// A Secret in the StreamJob's namespace holding S3 credentials.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct S3CredentialsSecret {
    /// Secret name.
    pub name: String,
    /// Key of the access key id (default `accessKeyId`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub access_key_id_key: Option<String>,
    /// Key of the secret access key (default `secretAccessKey`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub secret_access_key_key: Option<String>,
}

/// How state is carried across a spec change (FKO's upgradeMode).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq, Hash)]
pub enum UpgradeMode {
    /// Redeploy without state.
    #[serde(rename = "stateless")]
    Stateless,
    /// Stop with a savepoint and restore from it.
    #[default]
    #[serde(rename = "savepoint")]
    Savepoint,
    /// Stop without a savepoint and restore from the newest completed checkpoint.
    #[serde(rename = "last-state")]
    LastState,
}

/// Desired run state.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum DesiredState {
    /// The job runs.
    #[default]
    Running,
    /// The job is stopped; its state is kept as the restore point for the next resume.
    Suspended,
}

/// Rollback of an unhealthy spec change.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RollbackSpec {
    /// Roll back to the last stable spec when a changed spec is not running within
    /// `readinessTimeout`. Default true.
    #[serde(default = "default_true")]
    pub enabled: bool,
    /// How long a new deployment may take to report RUNNING (e.g. `5m`).
    #[serde(default = "default_readiness_timeout")]
    pub readiness_timeout: String,
}

impl Default for RollbackSpec {
    fn default() -> Self {
        RollbackSpec {
            enabled: true,
            readiness_timeout: default_readiness_timeout(),
        }
    }
}

fn default_true() -> bool {
    true
}
fn default_readiness_timeout() -> String {
    "5m".into()
}

/// Restart limits for failed jobs.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct HealthSpec {
    /// Restarts from the latest checkpoint allowed within `restartWindow`; beyond it the job
    /// stays Failed. Default 3.
    #[serde(default = "default_max_restarts")]
    pub max_restarts: u32,
    /// Window over which restarts are counted (e.g. `1h`).
    #[serde(default = "default_restart_window")]
    pub restart_window: String,
}

impl Default for HealthSpec {
    fn default() -> Self {
        HealthSpec {
            max_restarts: default_max_restarts(),
            restart_window: default_restart_window(),
        }
    }
}

fn default_max_restarts() -> u32 {
    3
}
fn default_restart_window() -> String {
    "1h".into()
}

/// Observed state of a StreamJob, written by the operator. It is also the operator's
/// write-ahead log: an upgrade's intent is recorded here before any step is taken.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct StreamJobStatus {
    /// The `metadata.generation` this status reflects.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub observed_generation: Option<i64>,
    /// `Ready`, `Progressing` and `Degraded` conditions, one per type.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    #[schemars(schema_with = "conditions_schema")]
    pub conditions: Vec<Condition>,
    /// Operator lifecycle state.
    #[serde(default)]
    pub lifecycle_state: LifecycleState,
    /// What the coordinator last reported.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub job_status: Option<JobStatusSummary>,
    /// Running parallelism (the scale subresource's status replicas).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parallelism: Option<i32>,
    /// Label selector of the job's worker pods (for the scale subresource).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub selector: Option<String>,
    /// Where the next start restores from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restore_point: Option<RestorePoint>,
    /// Counter stamped on child objects (label `weir.dev/deployment-generation`); incremented by
    /// every deploy so a restarted operator can tell which generation is running.
    #[serde(default)]
    pub deploy_generation: u64,
    /// The spec (JSON) that is deployed or being deployed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_reconciled_spec: Option<String>,
    /// The last spec (JSON) that ran healthily: the rollback target.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_stable_spec: Option<String>,
    /// An upgrade, suspend or restart in flight, recorded before its first step.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pending: Option<PendingOperation>,
    /// The restore point the current deployment started from (its `--restore` argument).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployed_from: Option<String>,
    /// The id of the job's newest snapshot in its checkpoint storage (completed, or recorded
    /// as completed) when the current deployment was deployed from a restore point given in
    /// `spec.initialSavepointPath`: the deployment's own snapshots have higher ids (a run's ids
    /// start past every one in storage), so that restore point is preferred to any snapshot up
    /// to it, which predates the choice (the only use). Unset where the deploy pass did not
    /// read it (other deploys), for a deploy that moved the checkpoint storage, and for
    /// deployments before this field.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployed_after_snapshot: Option<u64>,
    /// A generation that was rolled back, refused or exhausted its restarts: not retried until
    /// the spec changes again.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failed_generation: Option<i64>,
    /// When the current deployment was started (RFC 3339); readiness timeout base.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub deployed_at: Option<String>,
    /// When the current deployment first reported RUNNING, its restore done (RFC 3339);
    /// unset until then and reset by every deploy. Until the deployment has run (this is set,
    /// or it completed a checkpoint), a stateless redeploy restores from the same restore
    /// point as the deployment did (e.g. `initialSavepointPath` after a failed image pull),
    /// never from empty state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub first_running_at: Option<String>,
    /// Restart times (RFC 3339) within the health restart window.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub restarts: Vec<String>,
    /// Operator-recorded savepoints, oldest first.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub savepoint_history: Vec<SavepointRecord>,
    /// The last error, with the field or step it concerns.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Operator lifecycle state (FKO's `ResourceLifecycleState`).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq, Hash)]
pub enum LifecycleState {
    /// Accepted, nothing deployed yet.
    #[default]
    Created,
    /// Workloads applied; waiting for the coordinator to report RUNNING.
    Deploying,
    /// Running healthily.
    Running,
    /// A spec change is being carried out (stop → wait → deploy).
    Upgrading,
    /// Stopped on request; the restore point is kept.
    Suspended,
    /// Going back to the last stable spec.
    RollingBack,
    /// Failed and not restarting (restart limit reached, or refused upgrade).
    Failed,
    /// Being deleted.
    Deleting,
}

/// What the coordinator last reported.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct JobStatusSummary {
    /// Id of this run of the job.
    #[serde(default)]
    pub job_id: String,
    /// `INITIALIZING`, `RUNNING`, `RESTARTING` (the restart strategy is restarting it from
    /// the latest checkpoint), `SUSPENDING`, `STOPPING`, `STOPPED`, `FINISHED`, `FAILED`, or
    /// `UNKNOWN` when the coordinator does not answer.
    #[serde(default)]
    pub state: String,
    /// Newest completed checkpoint or savepoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_checkpoint: Option<CheckpointRef>,
    /// Failure message when FAILED.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
}

/// A completed checkpoint.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointRef {
    /// Checkpoint id.
    pub id: u64,
    /// Snapshot directory URL.
    pub path: String,
    /// Completion time (RFC 3339).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub completed_at: Option<String>,
}

/// The path the next start restores from, and where it came from.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct RestorePoint {
    /// Snapshot directory URL.
    pub path: String,
    /// What produced it.
    pub origin: RestoreOrigin,
    /// Checkpoint id, when known.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_id: Option<u64>,
}

/// Where a restore point came from.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
pub enum RestoreOrigin {
    /// `spec.initialSavepointPath`.
    Initial,
    /// Stop-with-savepoint for an upgrade, suspend or deletion.
    UpgradeSavepoint,
    /// A periodic or manual savepoint.
    Savepoint,
    /// The newest completed checkpoint (last-state or failure restart).
    Checkpoint,
}

/// An operation recorded before its first step (the write-ahead log entry).
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PendingOperation {
    /// What is being done.
    pub kind: OperationKind,
    /// The upgrade mode in force for this operation.
    pub mode: UpgradeMode,
    /// The spec (JSON) to deploy when the stop completes (absent for suspend/delete).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_spec: Option<String>,
    /// The metadata.generation that asked for it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub target_generation: Option<i64>,
    /// Step reached.
    pub phase: OperationPhase,
    /// Stop-with-savepoint trigger id, once triggered.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub trigger_id: Option<String>,
    /// The savepoint this operation's stop produced, once found.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub savepoint_path: Option<String>,
    /// When the operation started (RFC 3339), for bounded waits.
    pub started_at: String,
}

/// Kinds of recorded operation.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq, Hash)]
pub enum OperationKind {
    /// Apply a changed spec (includes rescale).
    Upgrade,
    /// Stop and keep the restore point.
    Suspend,
    /// Restart a failed job from its latest checkpoint.
    Restart,
    /// Go back to `lastStableSpec`.
    Rollback,
    /// Stop before deletion.
    Delete,
}

/// Steps of a recorded operation.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq, Hash)]
pub enum OperationPhase {
    /// Recorded; the stop is about to be requested.
    Stopping,
    /// Stop requested; waiting for the savepoint or the job to stop.
    AwaitingStop,
    /// Restore point recorded; workloads are being removed and their pods awaited.
    AwaitingTermination,
    /// Old pods gone; the new generation is being deployed.
    Deploying,
}

/// An operator-recorded savepoint.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SavepointRecord {
    /// Savepoint directory URL.
    pub path: String,
    /// Completion time (RFC 3339).
    pub completed_at: String,
    /// Why it was taken.
    pub origin: crate::crd::SavepointOrigin,
    /// Name of the Savepoint object recording it, once created.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub savepoint_name: Option<String>,
}
