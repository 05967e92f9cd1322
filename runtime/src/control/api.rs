//! The control API's wire types: the contract between the runtime (`weir run`, and the
//! coordinator) and its clients (the operator, `weir savepoint trigger`). JSON, camelCase.
//!
//! The routes are [`super::routes::ROUTES`]. Every error answers `{"error": "<reason>"}`
//! ([`ApiError`]): 401, 404 (unknown path or trigger), 405, 409, 422 (a body that does not
//! parse).

use serde::{Deserialize, Serialize};

/// Lifecycle state of a job as the runtime sees it (Flink's `JobStatus` names).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum JobState {
    /// Loading the restore point and starting subtasks.
    Initializing,
    /// All subtasks running.
    Running,
    /// A stop-with-savepoint is in progress.
    Stopping,
    /// Stopped by stop-with-savepoint; the savepoint is complete.
    Stopped,
    /// A bounded job consumed all input and committed its final checkpoint.
    Finished,
    /// A subtask or worker failed; the restart strategy restarts from the latest checkpoint.
    Restarting,
    /// Failed for good (restart strategy exhausted, or `weir run`); see `failure`.
    Failed,
    /// Stopping on SIGTERM / SIGINT without a savepoint (Flink's `SUSPENDED`): the in-flight
    /// checkpoint completes or is aborted, then the process exits; a restart resumes from the
    /// latest completed checkpoint.
    Suspending,
}

impl JobState {
    /// Whether the job will make no more progress.
    pub fn is_terminal(self) -> bool {
        matches!(self, JobState::Stopped | JobState::Finished | JobState::Failed)
    }
}

/// Whether a completed snapshot is a periodic checkpoint or a savepoint.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum SnapshotKind {
    /// Periodic (or final) checkpoint, owned by the runtime and subject to retention.
    Checkpoint,
    /// User-triggered, self-contained, never deleted by the runtime.
    Savepoint,
}

/// Statistics of one completed checkpoint or savepoint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointStats {
    /// Checkpoint id (increasing across restores).
    pub id: u64,
    /// Checkpoint or savepoint.
    pub kind: SnapshotKind,
    /// URL of the snapshot directory (the one holding `_metadata`).
    pub path: String,
    /// Trigger time, milliseconds since the Unix epoch.
    pub triggered_at_ms: u64,
    /// Completion time (the `_metadata` write), milliseconds since the Unix epoch.
    pub completed_at_ms: u64,
    /// Trigger to completion, in milliseconds.
    pub duration_ms: u64,
    /// Longest synchronous part over subtasks, in milliseconds.
    pub max_sync_ms: u64,
    /// Longest asynchronous part (serialize + upload) over subtasks, in milliseconds.
    pub max_async_ms: u64,
    /// Longest barrier alignment over subtasks, in milliseconds.
    pub max_alignment_ms: u64,
    /// Bytes this snapshot wrote: its state files plus metadata (Flink's "checkpointed data
    /// size"). For an incremental checkpoint only the new links of its chains count, so this is
    /// what it uploaded.
    pub size_bytes: u64,
    /// Bytes a restore from this snapshot reads: every file of every chain it references plus
    /// metadata (Flink's "full checkpoint data size"); equal to `size_bytes` for a full
    /// checkpoint or savepoint. 0 when unknown (a stats record of an older version).
    #[serde(default)]
    pub full_size_bytes: u64,
    /// Aligned or unaligned, alignment time, channel state and per-subtask sizes.
    #[serde(default)]
    pub alignment: CheckpointAlignment,
}

/// How a checkpoint was aligned and what channel state it holds (an unaligned checkpoint's
/// in-flight records). Older `_metadata` without it reads as aligned with no channel state.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointAlignment {
    /// Whether any subtask took its snapshot unaligned (then the checkpoint holds channel
    /// state); savepoints are always aligned.
    pub unaligned: bool,
    /// Longest barrier alignment over subtasks (first barrier to snapshot), in milliseconds.
    pub alignment_ms: u64,
    /// Total bytes of the channel-state files.
    pub channel_state_bytes: u64,
    /// Per subtask, in task order.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subtasks: Vec<SubtaskCheckpointStats>,
}

/// One subtask's part of a checkpoint.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubtaskCheckpointStats {
    /// Global task index (`stage × parallelism + subtask`).
    pub task: usize,
    /// Whether this subtask snapshotted unaligned.
    pub unaligned: bool,
    /// Its barrier alignment, in milliseconds.
    pub alignment_ms: u64,
    /// Bytes of its operator state files.
    pub state_bytes: u64,
    /// Bytes of its channel-state file (0 when aligned).
    pub channel_state_bytes: u64,
    /// Records in its channel state.
    pub channel_state_records: u64,
}

/// Per-subtask counters.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubtaskStatus {
    /// Task name: the uids of the chained operators, joined by ` -> `.
    pub task: String,
    /// Subtask index.
    pub subtask: u32,
    /// Records received.
    pub records_in: u64,
    /// Records emitted.
    pub records_out: u64,
    /// Milliseconds spent waiting for space in output channels (backpressure).
    pub backpressured_ms: u64,
    /// Where it runs (worker id) when distributed; empty in `weir run`.
    #[serde(default, skip_serializing_if = "String::is_empty")]
    pub location: String,
}

/// Reply of `GET /v1/job`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct JobStatus {
    /// `metadata.name` of the StreamJob.
    pub job_name: String,
    /// Id of this run of the job: `weir run` draws a new one on every start, `weir coordinator`
    /// takes `--run-id` (stable across restarts of the coordinator). It names this run's sink
    /// files (`part-<jobId>-*.jsonl`). `weir list` shows it as RUN.
    pub job_id: String,
    /// The lineage this run's checkpoints belong to: the run id of the run that began it. A
    /// run restored with `--restore latest` (or from one of its job's checkpoints) continues the
    /// lineage it restored, so its retention keeps managing those checkpoints; any other run
    /// begins its own (the lineage is then its `jobId`). `weir list` and
    /// `weir checkpoints list` show it as LINEAGE. Absent from older runtimes.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lineage_id: Option<String>,
    /// Current state.
    pub state: JobState,
    /// Parallelism.
    pub parallelism: u32,
    /// Max parallelism (number of key groups).
    pub max_parallelism: u32,
    /// The checkpoint or savepoint this run restored from, if any.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub restored_from: Option<String>,
    /// The newest completed checkpoint or savepoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_completed_checkpoint: Option<CheckpointStats>,
    /// Per subtask detail.
    pub subtasks: Vec<SubtaskStatus>,
    /// Why the job failed, when `state` is `FAILED`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub failure: Option<String>,
    /// Number of restarts of this job by the runtime's restart strategy.
    #[serde(default)]
    pub restarts: u32,
    /// Registered workers (distributed runtime only).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub workers: Vec<WorkerStatus>,
    /// What the run did so far: the numbers `weir run` logs when it ends.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub summary: Option<RunSummary>,
}

/// What a run did: records per task, checkpoints, elapsed time, and where its committed output
/// is. `weir run` logs it when the run ends; `GET /v1/job` reports it while it runs.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct RunSummary {
    /// Milliseconds since this process started the run.
    pub elapsed_ms: u64,
    /// Records per task (chain of operators), summed over its subtasks, in plan order.
    pub tasks: Vec<TaskTotals>,
    /// Checkpoints and savepoints completed by this run.
    pub checkpoints_completed: u64,
    /// Checkpoints declined or timed out in this run.
    pub checkpoints_failed: u64,
    /// Output directories of the file sinks and the files this run commits there.
    pub output: Vec<CommittedOutput>,
    /// The lineage this run continues when it is not its own (a run restored with
    /// `--restore latest`): the files of the lineage's earlier runs in the same directories
    /// hold the output before the restore point. `None` for a run that began its lineage.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub continues_lineage: Option<String>,
    /// Restarts of the job by its restart strategy during this run (a cluster's failovers
    /// among them). Each restart starts the subtasks again from a checkpoint, so `tasks`
    /// counts the records since the last one. 0 (left out) without restarts.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub restarts: u32,
}

fn is_zero(n: &u32) -> bool {
    *n == 0
}

/// Records of one task (chain of operators), summed over its subtasks.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TaskTotals {
    /// Task name: the uids of the chained operators, joined by ` -> `.
    pub task: String,
    /// Records received by the chain's first operator (for a source: read).
    pub records_in: u64,
    /// Records emitted by the chain's last operator (0 when it is a sink).
    pub records_out: u64,
}

/// Where a file sink commits this run's output.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CommittedOutput {
    /// The sink's output directory (local path or `s3://` URL).
    pub path: String,
    /// The run id in the names of this run's files: `part-<runId>-<subtask>-<seq>.jsonl`
    /// (distributed runs add `-e<epoch>-a<attempt>` to it).
    pub run_id: String,
}

/// A registered worker.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkerStatus {
    /// Worker id.
    pub id: String,
    /// Data address.
    pub address: String,
    /// Slots offered.
    pub slots: u32,
    /// Milliseconds since its last heartbeat.
    pub last_heartbeat_ms: u64,
}

/// Reply of `GET /v1/checkpoints`.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointHistory {
    /// Completed checkpoints and savepoints of this run, oldest first (bounded).
    pub completed: Vec<CheckpointStats>,
    /// Id of the checkpoint in flight.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub in_progress: Option<u64>,
    /// Checkpoints declined or timed out in this run.
    pub failed: u64,
}

/// Body of `POST /v1/savepoints` (an unknown field is refused with 422).
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SavepointRequest {
    /// Target directory URL; defaults to `spec.savepoints.directory`, then
    /// `./weir-data/savepoints`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directory: Option<String>,
    /// Stop the job after the savepoint completes (stop-with-savepoint): sources stop at the
    /// savepoint barrier, sinks commit, the process exits 0.
    #[serde(default)]
    pub stop: bool,
}

/// Reply of `POST /v1/savepoints`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TriggerResponse {
    /// Poll `GET /v1/savepoints/{triggerId}`.
    pub trigger_id: String,
}

/// State of a savepoint trigger.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub enum TriggerState {
    /// Waiting for or taking the savepoint.
    InProgress,
    /// `_metadata` written: `path` is a restore point.
    Completed,
    /// Declined, timed out, or the job failed; see `error`.
    Failed,
}

/// Reply of `GET /v1/savepoints/{triggerId}`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SavepointStatus {
    /// The trigger id.
    pub trigger_id: String,
    /// Progress.
    pub state: TriggerState,
    /// Savepoint directory URL when completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub path: Option<String>,
    /// Checkpoint id of the savepoint when completed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub checkpoint_id: Option<u64>,
    /// Why it failed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub error: Option<String>,
}

/// Error body of any non-2xx reply.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiError {
    /// Human-readable reason.
    pub error: String,
}

/// What a restore point holds, as `weir savepoint inspect` prints it and the operator uses to
/// check a new job against it.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotInfo {
    /// Job name recorded in the snapshot.
    pub job_name: String,
    /// Checkpoint id.
    pub checkpoint_id: u64,
    /// Checkpoint or savepoint.
    pub kind: SnapshotKind,
    /// Max parallelism the keyed state was written with (a restore adopts it when the job sets
    /// no `spec.maxParallelism`, and refuses another value).
    pub max_parallelism: u32,
    /// Parallelism at snapshot time.
    pub parallelism: u32,
    /// One entry per stateful operator.
    pub operators: Vec<OperatorStateInfo>,
    /// Aligned or unaligned, alignment time, channel state and per-subtask sizes.
    #[serde(default)]
    pub alignment: CheckpointAlignment,
}

/// One operator's state in a snapshot.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OperatorStateInfo {
    /// The operator uid.
    pub uid: String,
    /// Operator kind (`count`, `source-file`, `sink-file`, ...).
    pub kind: String,
    /// State names held (`keyed:aggregate`, `operator:splits`, `operator:pending-commits`).
    pub state_names: Vec<String>,
    /// Key-group ranges `[start, end]` of the keyed state files, one per subtask.
    pub key_group_ranges: Vec<[u32; 2]>,
    /// Bytes of state files.
    pub bytes: u64,
    /// Number of entries (keys, splits or pending commits).
    pub entries: u64,
    /// Per subtask that had state, by subtask index: its key groups, bytes and entries.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub subtasks: Vec<SubtaskStateInfo>,
}

/// One subtask's state of an operator in a snapshot.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SubtaskStateInfo {
    /// Subtask index (0-based, as in state file names `<uid>-<subtask>.state`).
    pub subtask: u32,
    /// Key groups `[start, end]` (inclusive) of its keyed state; `None` for operator state.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_group_range: Option<[u32; 2]>,
    /// Bytes of its state file.
    pub bytes: u64,
    /// Entries in it: keys for keyed state (not counting operator state items kept beside
    /// them, such as an aggregation's shape), splits or pending commits for operator state.
    pub entries: u64,
}
