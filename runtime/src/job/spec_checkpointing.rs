//! The `spec.checkpointing` and `spec.savepoints` parts of the StreamJob spec: the processing
//! guarantee, the checkpoint interval, timeout, storage and retention, unaligned and
//! incremental checkpoints, and where savepoints go. Doc comments become the CRD's
//! descriptions, as in [`super::spec`].

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// The processing guarantee (`spec.checkpointing.mode`): Flink's `CheckpointingMode`
/// (`exactly-once`, `at-least-once`) plus `at-most-once`. What each one loses or duplicates
/// after a failure is in docs/concepts.md ("Guarantees"); the decisions are
/// [`crate::checkpoint::guarantee`].
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
pub enum CheckpointMode {
    /// Aligned checkpoints: an input that delivered barrier n is held until every input did;
    /// a restore replays from the checkpoint's source positions. With the transactional file
    /// sink, nothing is lost and nothing is written twice.
    #[default]
    #[serde(rename = "exactly-once")]
    ExactlyOnce,
    /// Barriers are counted, not aligned: records after a barrier may be in checkpoint n's state
    /// and output and are replayed on restore (duplicates possible, nothing lost).
    #[serde(rename = "at-least-once")]
    AtLeastOnce,
    /// No replay: barriers are counted, not aligned, and every source subtask records how far
    /// it has read (in the checkpoint storage, before it emits a batch); a restore from the
    /// latest checkpoint (`--restore latest`, a failover of the distributed runtime) takes its
    /// state and committed output but resumes each source where it had read up to. Records
    /// read after that checkpoint and not yet committed are lost; nothing is read or written
    /// twice.
    #[serde(rename = "at-most-once")]
    AtMostOnce,
}

/// Checkpointing configuration.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointingSpec {
    /// Time between checkpoint triggers, e.g. `10s`, `500ms`, `2m`. `0s` disables periodic
    /// checkpoints (a bounded job still takes its final checkpoint).
    #[serde(default = "default_interval")]
    pub interval: String,
    /// A checkpoint that has not completed within this time is declined and the next proceeds.
    #[serde(default = "default_timeout")]
    pub timeout: String,
    /// Minimum pause between the completion of one checkpoint and the trigger of the next.
    #[serde(default = "default_min_pause")]
    pub min_pause: String,
    /// The guarantee after a failure: `exactly-once` (default; aligned barriers),
    /// `at-least-once` (barriers not aligned; a restore may write records twice, loses none)
    /// or `at-most-once` (no replay: a restore may lose records, never writes one twice).
    #[serde(default)]
    pub mode: CheckpointMode,
    /// Checkpoint storage URL: a local path, `file:///abs/path` (or `file:/abs/path`), or
    /// `s3://bucket/prefix`; a `file://` URL naming a host (`file://tmp/x`) is refused.
    /// Checkpoints go to `<storage>/<job name>/chk-<n>/`. Default for `weir run`:
    /// `./weir-data/checkpoints`. In S3 the job's directory belongs to the first StreamJob
    /// deployed there (`<storage>/<job name>/_owner`): a StreamJob of the same name in another
    /// namespace, or a `weir run`, is refused there, so give each namespace its own prefix.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub storage: Option<String>,
    /// Number of completed checkpoints kept (at least 1); older ones are deleted off the
    /// processing path.
    #[serde(default = "default_retained")]
    #[schemars(range(min = 1))]
    pub retained: u32,
    /// Consecutive checkpoint failures (declined, timed out, or not committed) tolerated before
    /// the job fails with the cause; as Flink's `tolerable-failed-checkpoints`, default 0: the
    /// first failure fails the job (a cluster job then restarts by its restart strategy).
    /// Savepoint failures never count.
    #[serde(default, skip_serializing_if = "is_zero")]
    pub tolerable_failed_checkpoints: u32,
    /// Unaligned checkpoints (Flink's `execution.checkpointing.unaligned.enabled`), with
    /// `mode: exactly-once` only: the first barrier of a checkpoint overtakes the records
    /// queued in the channels, each subtask snapshots at once and stores the records that were
    /// in flight as channel state, so checkpoints complete under backpressure. Savepoints are
    /// always aligned.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub unaligned: bool,
    /// With `unaligned: true`: start each checkpoint aligned and switch a subtask to unaligned
    /// when its barriers have not all arrived this long after the checkpoint reached it (its
    /// first barrier or the barrier's announcement), e.g. `2s` (Flink's
    /// `execution.checkpointing.aligned-checkpoint-timeout`). Unset: unaligned from the start.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aligned_checkpoint_timeout: Option<String>,
    /// Incremental checkpoints (Flink's `execution.checkpointing.incremental`): each
    /// checkpoint uploads only what changed since the previous completed one and references
    /// the earlier files in `<storage>/<job name>/shared/`. With `stateBackend: disk`, an
    /// aggregation subtask's checkpoint is its store's own files, as Flink's RocksDB backend:
    /// the table files new since the last checkpoint, and between memtable flushes a log of the
    /// writes since the last flush (with `diskState.writeCacheSize: 0`, chains as on heap).
    /// With `stateBackend: heap`, and for joins and windows on either backend, a chain per subtask: a full
    /// file, then the keys written or removed since (a join's with all their rows), compacted
    /// into a new full file after 8 deltas, when its deltas hold half as many keys as its base,
    /// or when a join's deltas hold more bytes than its base.
    /// Retention deletes a shared file only when
    /// no retained checkpoint references it. Savepoints are always full and self-contained.
    /// Default `false`: with heap state every key write is also recorded (one hash-set
    /// insert), which pays off only when state is large and changes slowly.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub incremental: bool,
}

fn default_interval() -> String {
    "10s".into()
}
fn default_timeout() -> String {
    "10m".into()
}
fn default_min_pause() -> String {
    "0s".into()
}
fn is_zero(n: &u32) -> bool {
    *n == 0
}

fn default_retained() -> u32 {
    3
}

impl Default for CheckpointingSpec {
    fn default() -> Self {
        CheckpointingSpec {
            interval: default_interval(),
            timeout: default_timeout(),
            min_pause: default_min_pause(),
            mode: CheckpointMode::default(),
            storage: None,
            retained: default_retained(),
            tolerable_failed_checkpoints: 0,
            unaligned: false,
            aligned_checkpoint_timeout: None,
            incremental: false,
        }
    }
}

/// Savepoint defaults.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SavepointsSpec {
    /// Directory URL (local path or `s3://bucket/prefix`); savepoints are written to
    /// `<directory>/savepoint-<job>-<id>-<8 random letters>/`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub directory: Option<String>,
}
