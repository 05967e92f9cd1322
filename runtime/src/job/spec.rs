//! The StreamJob manifest and its `spec`: the one job definition that `weir run` reads from a
//! file and the operator embeds in the `StreamJob` custom resource.
//!
//! Every type derives serde (camelCase fields) and schemars `JsonSchema`; the doc comments here
//! become the OpenAPI descriptions that `kubectl explain` shows.

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

pub use super::spec_checkpointing::{CheckpointMode, CheckpointingSpec, SavepointsSpec};
pub use super::spec_join::{JoinFieldSpec, JoinSpec};
pub use super::spec_kafka::{DeliveryGuarantee, KafkaSinkSpec, KafkaSourceSpec, StartingOffsets};

/// The API version of the `StreamJob` resource.
pub const API_VERSION: &str = "weir.dev/v1alpha1";
/// The kind of the resource.
pub const KIND: &str = "StreamJob";

/// A whole `StreamJob` manifest as `kubectl apply` and `weir run` take it. Fields that only the
/// operator uses (image, resources, upgradeMode, ...) are accepted and ignored by `weir run`.
#[derive(Clone, Debug, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StreamJobManifest {
    /// Must be `weir.dev/v1alpha1`.
    pub api_version: String,
    /// Must be `StreamJob`.
    pub kind: String,
    /// Object metadata; only `name` is used by the runtime.
    pub metadata: ManifestMetadata,
    /// The job.
    pub spec: JobSpec,
}

/// The subset of Kubernetes object metadata the runtime reads.
#[derive(Clone, Debug, Default, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ManifestMetadata {
    /// The job's name: a DNS-1123 label. It names the job's checkpoint directory
    /// (`<storage>/<name>/chk-<n>/`) and its savepoints.
    #[serde(default)]
    pub name: String,
    /// The StreamJob's namespace: the operator writes it into the coordinator's job file, so
    /// the coordinator knows which StreamJob it runs (`<namespace>/<name>`, checked against
    /// the checkpoint directory's owner record). `weir run` ignores it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub namespace: Option<String>,
}

/// What the runtime needs to run a job: parallelism, checkpointing and the pipeline.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct JobSpec {
    /// Number of parallel subtasks of every operator. 1 ≤ parallelism ≤ maxParallelism.
    #[serde(default = "default_parallelism")]
    #[schemars(range(min = 1))]
    pub parallelism: u32,
    /// Number of key groups: the upper bound for parallelism and the unit by which keyed state
    /// is redistributed on rescale. Defaults by Flink's rule,
    /// `min(max(roundUpToPowerOfTwo(p + p/2), 128), 32768)`. Fixed once a job has state: unset,
    /// a restore adopts the restore point's (as Flink does); set to a different value, the
    /// restore is refused.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 32768))]
    pub max_parallelism: Option<u32>,
    /// Checkpointing: interval, mode, storage and retention.
    #[serde(default)]
    pub checkpointing: CheckpointingSpec,
    /// Where savepoints go when a trigger names no directory.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub savepoints: Option<SavepointsSpec>,
    /// S3 settings for `s3://` URLs (checkpoint storage, sources and sinks).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub s3: Option<S3Spec>,
    /// Restore even if the restore point holds state for an operator uid the job no longer
    /// has (that state is dropped). Default false: such a restore is refused.
    #[serde(default)]
    pub allow_non_restored_state: bool,
    /// Where keyed state (aggregations) lives: `heap` (default; in memory, Flink's `hashmap`)
    /// or `disk` (an embedded LSM store per subtask on local disk, Flink's `rocksdb`: state
    /// larger than memory, memory bounded by the store's cache). Checkpoints and savepoints
    /// have the same format on both, so a savepoint of one restores on the other. See
    /// docs/runtime/state-backends.md.
    #[serde(default, skip_serializing_if = "StateBackend::is_heap")]
    pub state_backend: StateBackend,
    /// Memory and compression of each disk store (`stateBackend: disk` only): block cache,
    /// write buffer and write-back cache per subtask of each stateful step, and how its table
    /// files are compressed, e.g. `{cacheSize: 256Mi, writeBufferSize: 32Mi, writeCacheSize:
    /// 64Mi, compression: lz4}`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub disk_state: Option<crate::job::disk_state::DiskStateSpec>,
    /// The pipeline.
    pub job: PipelineSpec,
}

/// The keyed state backend (`spec.stateBackend`).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
pub enum StateBackend {
    /// Keyed state in memory with copy-on-write snapshots (Flink's `hashmap`): fastest while
    /// state fits in memory comfortably.
    #[default]
    #[serde(rename = "heap")]
    Heap,
    /// Keyed state in an embedded LSM store per subtask under the runtime's local state
    /// directory (`weir run --state-dir`, `WEIR_STATE_DIR`; Flink's `rocksdb`): state larger
    /// than memory.
    #[serde(rename = "disk")]
    Disk,
}

impl JobSpec {
    /// The disk stores' options (`spec.diskState`, defaults where unset). Errors: a value
    /// that does not parse, naming its field.
    pub fn disk_state_options(&self) -> Result<crate::state::disk::DiskStateOptions, crate::job::validate::JobError> {
        self.disk_state.clone().unwrap_or_default().options("spec.diskState")
    }
}

impl StateBackend {
    /// Whether this is the default, [`StateBackend::Heap`].
    pub fn is_heap(&self) -> bool {
        *self == StateBackend::Heap
    }
}

fn default_parallelism() -> u32 {
    1
}

/// S3 client settings; anything unset falls back to the AWS default chain
/// (environment, profile, web identity, instance metadata).
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct S3Spec {
    /// Custom endpoint URL for S3-compatible stores (MinIO, Ceph), e.g. `http://minio:9000`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub endpoint: Option<String>,
    /// Region, e.g. `us-east-1`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub region: Option<String>,
    /// Use path-style addressing (`endpoint/bucket/key`), which MinIO and Ceph need.
    #[serde(default)]
    pub path_style: bool,
}

/// The pipeline: an ordered list of steps, from one source to one sink, or a dataflow of
/// several sources merged by `union` steps into one sink.
#[derive(Clone, Debug, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PipelineSpec {
    /// Steps in data order: first a `source`, last a `sink`, transforms between. A step reads
    /// the step listed before it unless it names its input in `inputs`; a source reads nothing.
    /// Several sources: name steps (`name`) and merge them with a `union` step whose `inputs`
    /// lists them. Every step but the one sink feeds exactly one step.
    pub steps: Vec<Step>,
}

/// One step of the pipeline. Exactly one of the step fields (`source`, `filter`, `map`,
/// `flatMap`, `keyBy`, `count`, `sum`, `min`, `max`, `window`, `union`, `join`, `sink`) is set.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Step {
    /// Stable operator id: the key under which the step's state is saved in checkpoints and
    /// savepoints. Default: `<kind>-<index>` (e.g. `count-4`), which changes when steps are
    /// inserted or removed — set it explicitly on stateful steps you intend to keep across
    /// upgrades. Unique within the job.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub uid: Option<String>,
    /// Name by which other steps refer to this one in `inputs` (letters, digits, '-', '_',
    /// '.'; unique within the job). Names only wire the dataflow; state is saved under `uid`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub name: Option<String>,
    /// Names of the steps this step reads, each declared above it. Default: the step listed
    /// just before it. A `union` lists two or more, a `join` two (`[left, right]`); any other
    /// step at most one; a source none. Several steps may read one step (a branch: each gets
    /// every record). `<window name>.late` reads a window's late side output
    /// (`lateRecords: sideOutput`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub inputs: Option<Vec<String>>,
    /// Read records from files or a generator.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub source: Option<SourceSpec>,
    /// Keep records for which the CEL expression is true.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub filter: Option<ExprSpec>,
    /// Replace each record by the value of a CEL expression (a map).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub map: Option<ExprSpec>,
    /// Split a string field by a regex into one record per token.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub flat_map: Option<FlatMapSpec>,
    /// Partition the stream by a key (hash exchange by key group).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_by: Option<KeyBySpec>,
    /// Keyed running count: emits `{<key>: k, <as>: n}` for every record.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<AggregateSpec>,
    /// Keyed running sum of a numeric CEL expression.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sum: Option<AggregateSpec>,
    /// Keyed running minimum of a numeric CEL expression.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min: Option<AggregateSpec>,
    /// Keyed running maximum of a numeric CEL expression.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max: Option<AggregateSpec>,
    /// Keyed event-time window aggregation (tumbling, sliding or session windows): emits one
    /// `{<key>, window_start, window_end, <as>}` record per key and window when the watermark
    /// passes the window's end. Requires a preceding `keyBy` and a source with `eventTime`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub window: Option<WindowSpec>,
    /// Merge the streams of the steps in `inputs` (two or more, with the same fields where
    /// the plan knows them) into one, as Flink's `DataStream.union`: records interleave in
    /// arrival order; checkpoint barriers are aligned across all inputs.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub union: Option<UnionSpec>,
    /// Keyed two-input inner join of the two steps in `inputs` (`[left, right]`), both sides
    /// kept in keyed state (Flink SQL's regular join).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub join: Option<JoinSpec>,
    /// Write records out.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub sink: Option<SinkSpec>,
}

/// A source. Exactly one of `file`, `generator`, `kafka`; optionally `eventTime`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SourceSpec {
    /// Event time and its watermark strategy (as Flink's
    /// `WatermarkStrategy.forBoundedOutOfOrderness(...).withIdleness(...)`): which field holds
    /// each record's event time and how far out of order records may arrive. Required by
    /// `window` steps downstream.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub event_time: Option<EventTimeSpec>,
    /// Bounded, replayable file source (by file and byte offset).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<FileSourceSpec>,
    /// Seeded deterministic generator, replayable by record index.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub generator: Option<GeneratorSpec>,
    /// Replayable Kafka source (offsets in the checkpoint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kafka: Option<KafkaSourceSpec>,
}

/// File formats a file source reads.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum FileFormat {
    /// One record per line: `{"line": "<text>"}` (a trailing CR is removed).
    #[default]
    Text,
    /// One JSON object per line.
    Jsonl,
    /// CSV with a header row; every field is a string unless the source's `schema` declares
    /// its type.
    Csv,
}

/// A bounded file source. Each matching file is one split; splits are assigned to source
/// subtasks by `index mod parallelism` over the sorted file list.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FileSourceSpec {
    /// A local path or `s3://bucket/prefix`, with an optional glob in the last component
    /// (`*.txt`). Relative local paths resolve against the working directory. Files ending in
    /// `.gz` are decompressed.
    pub path: String,
    /// `text` (default), `jsonl` or `csv`.
    #[serde(default)]
    pub format: FileFormat,
    /// Optional rate limit, in records per second per source subtask (at least 1); omit it for
    /// no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_records_per_second: Option<u64>,
    /// Declared field types, as a list of `{name, type}` (as the columns of a Flink `CREATE
    /// TABLE`), checked against the steps when the job is planned. `csv`: types of columns by
    /// name; a listed column must be in the header, unlisted columns are strings; values are
    /// converted when read (an empty value is null; a value that does not convert fails the
    /// job naming the file, byte offset and column). `jsonl`: the fields of the records; a
    /// record whose listed field holds another type fails the job naming the field; without a
    /// schema, fields and types are inferred from the first 100 lines of the first file. Not
    /// allowed for `text` (its one field is `line`, a string).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schema: Option<Vec<SchemaField>>,
}

/// One declared field of a file source's `schema`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SchemaField {
    /// The field (CSV column or top-level JSON key).
    pub name: String,
    /// `string`, `int` (64-bit signed), `float` (64-bit) or `bool`.
    #[serde(rename = "type")]
    pub field_type: DeclaredType,
}

/// A type a source's `schema` can declare.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum DeclaredType {
    /// A string.
    #[default]
    String,
    /// A 64-bit signed integer.
    Int,
    /// A 64-bit floating-point number.
    Float,
    /// `true` or `false`.
    Bool,
}

/// A seeded, deterministic generator of `{"id": n, "key": "key-<k>", "value": v}` records.
/// Record n depends only on `seed` and n, so replay from a recorded index is exact.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct GeneratorSpec {
    /// Seed of the pseudo-random sequence.
    #[serde(default)]
    pub seed: u64,
    /// Total number of records; unbounded if unset.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub count: Option<u64>,
    /// Number of distinct keys (at least 1; default 1000).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub keys: Option<u64>,
    /// Optional rate limit, in records per second per source subtask (at least 1); omit it for
    /// no limit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_records_per_second: Option<u64>,
    /// Number of splits the sequence is cut into (record n belongs to split n mod splits);
    /// splits are the unit of source rescaling. At least 1, at most 32768 (the largest
    /// `maxParallelism`: more splits spread over no more subtasks, and every split is state in
    /// every checkpoint); default 32.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1, max = 32768))]
    pub splits: Option<u32>,
}

/// A CEL expression over the record. The record's top-level fields are variables (`word`,
/// `line`, ...) and the whole record is `record`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ExprSpec {
    /// The CEL expression: for `filter` a bool (e.g. `size(word) > 3`), for `map` the new
    /// record, a map (e.g. `{'line': line.lower()}`).
    pub expression: String,
}

/// Split a string field into tokens.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FlatMapSpec {
    /// The string field to split.
    pub field: String,
    /// Separator regex (Rust `regex` syntax, Unicode-aware: `\W+` splits on non-word runs).
    /// It must not match the empty string (`''`, `\s*`), which would split between every
    /// character.
    pub pattern: String,
    /// Output field that holds the token (default: the split field). Other fields are kept.
    #[serde(default, rename = "as", skip_serializing_if = "Option::is_none")]
    pub as_field: Option<String>,
    /// Keep empty tokens (default false: they are dropped).
    #[serde(default)]
    pub keep_empty: bool,
}

/// Partition by key.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct KeyBySpec {
    /// CEL expression giving the key: a string, integer or boolean.
    pub expression: String,
    /// Field name under which the key appears in aggregation output (default `key`).
    #[serde(default, rename = "as", skip_serializing_if = "Option::is_none")]
    pub as_field: Option<String>,
}

/// A keyed running aggregation. Requires a preceding `keyBy`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct AggregateSpec {
    /// Numeric CEL expression aggregated by `sum`, `min`, `max` (ignored by `count`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expression: Option<String>,
    /// Output field holding the aggregate (default: the aggregation's name, e.g. `count`).
    #[serde(default, rename = "as", skip_serializing_if = "Option::is_none")]
    pub as_field: Option<String>,
    /// State time-to-live (Flink's state TTL, processing time), a duration like `24h` or
    /// `30m`: a key not updated for this long is forgotten, and its next record counts from
    /// zero again. Expired keys are removed a few at a time while records flow, so a job over
    /// an unbounded key space holds bounded state, and are never restored. Savepoints and full
    /// checkpoints leave them out; an incremental checkpoint's files may hold those not removed
    /// yet (on `stateBackend: disk`, until compaction reclaims a removed key's bytes). Unset:
    /// keys are kept for ever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<String>,
}

/// Event time of a source's records and its watermark strategy.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct EventTimeSpec {
    /// Top-level field holding the event time: an ISO-8601 / RFC 3339 string in UTC
    /// (`2015-02-22T21:00:00Z`, fractional seconds allowed; also with a space for the `T` and
    /// without the `Z`, as CSV and SQL exports write it: `2019-01-15 03:36:12`, read as UTC) or
    /// an integer of epoch milliseconds (epoch seconds with `unit: seconds`).
    pub field: String,
    /// The unit of an integer event time: `milliseconds` (Flink's event-time unit) or
    /// `seconds` (Unix time, as `TO_TIMESTAMP_LTZ(field, 0)` reads it in Flink SQL). Unset:
    /// milliseconds, and a first integer that reads as epoch seconds of the years 2000-2099
    /// (946684800 to 4102444799, which as milliseconds would be January 1970) is refused as
    /// ambiguous, naming this field (after a first value outside that range, later ones are
    /// milliseconds). Strings are ISO-8601 whatever the unit.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub unit: Option<EventTimeUnit>,
    /// Bounded out-of-orderness: how far behind the largest event time seen a record may
    /// arrive and still be on time, e.g. `5s`. The watermark is the largest event time seen
    /// minus this bound minus 1 ms (as Flink). Default `0s` (records in order).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub max_out_of_orderness: Option<String>,
    /// A source subtask that reads nothing for this long is marked idle: downstream subtasks
    /// leave it out of their watermark (the minimum over inputs) until it reads again, e.g.
    /// `1m`. Default: never idle.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub idle_timeout: Option<String>,
}

/// The unit of an integer event time (`eventTime.unit`): `milliseconds` (Flink's event-time
/// unit) or `seconds` (Unix time, as `TO_TIMESTAMP_LTZ(field, 0)` reads it in Flink SQL).
/// Unset: milliseconds, and a first integer that reads as epoch seconds of the years
/// 2000-2099 (946684800 to 4102444799, which as milliseconds would be January 1970) is refused
/// as ambiguous (after a first value outside that range, later ones are milliseconds).
/// Strings are ISO-8601 whatever the unit.
#[derive(Clone, Copy, Debug, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum EventTimeUnit {
    /// Epoch milliseconds (`1424638800000`).
    Milliseconds,
    /// Epoch seconds (`1424638800`), Unix time.
    Seconds,
}

/// The kind of window (`window.type`).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum WindowType {
    /// Fixed-size, non-overlapping windows of `size`, aligned to the epoch.
    #[default]
    Tumbling,
    /// Windows of `size` starting every `slide` (a record is in `size / slide` windows).
    Sliding,
    /// Per-key activity sessions: a window closes after `gap` without records of its key.
    Session,
}

/// A keyed event-time window aggregation. Requires a preceding `keyBy`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WindowSpec {
    /// `tumbling`, `sliding` or `session`.
    #[serde(rename = "type")]
    pub window_type: WindowType,
    /// Window length (`tumbling`, `sliding`), e.g. `1m`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub size: Option<String>,
    /// How often a sliding window starts (`sliding` only), e.g. `1m`; divides `size`, and
    /// `size / slide` (the windows each record is in) is at most 10,000.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub slide: Option<String>,
    /// Inactivity gap that closes a session (`session` only), e.g. `30s`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gap: Option<String>,
    /// `count` (default), `sum`, `min` or `max` of the records of each key and window.
    #[serde(default)]
    pub aggregate: WindowAggregate,
    /// Numeric CEL expression aggregated by `sum`, `min`, `max` (not used by `count`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expression: Option<String>,
    /// Output field holding the aggregate (default: the aggregate's name, e.g. `count`).
    #[serde(default, rename = "as", skip_serializing_if = "Option::is_none")]
    pub as_field: Option<String>,
    /// How long after a window fired records for it are still accepted, each emitting an
    /// updated result, e.g. `30s`. Default `0s`. What happens to later records:
    /// `lateRecords`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub allowed_lateness: Option<String>,
    /// What happens to records beyond the allowed lateness (Flink's `sideOutputLateData`):
    /// `drop` (default: dropped and counted in `weir_late_records_dropped_total`) or
    /// `sideOutput` (sent, as they came in, to the window's side output, which a later step
    /// reads as `inputs: [<window name>.late]`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub late_records: Option<LateRecords>,
}

/// What a window does with records beyond its allowed lateness (Flink's
/// `sideOutputLateData`): `drop` (default: dropped and counted in
/// `weir_late_records_dropped_total`) or `sideOutput` (sent, as they came in, to the window's
/// late side output, which a later step reads as `inputs: [<window name>.late]`).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub enum LateRecords {
    /// Drop them and count them in `weir_late_records_dropped_total`.
    #[default]
    Drop,
    /// Send them to the window's side output `<window name>.late`.
    SideOutput,
}

/// The aggregate a window computes (`window.aggregate`).
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum WindowAggregate {
    /// Number of records.
    #[default]
    Count,
    /// Sum of `expression`.
    Sum,
    /// Minimum of `expression`.
    Min,
    /// Maximum of `expression`.
    Max,
}

/// A union (`union: {}`): takes no settings; its inputs are the step's `inputs`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct UnionSpec {}

/// A sink. Exactly one of `file`, `print`, `discard`, `kafka`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct SinkSpec {
    /// Transactional (two-phase commit) JSON-lines file sink.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub file: Option<FileSinkSpec>,
    /// Print records to stdout as JSON lines (not transactional).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub print: Option<PrintSinkSpec>,
    /// Count records and write nothing (as Flink's `blackhole` connector): for benchmarks and
    /// tests. Nothing to commit, so exactly-once holds trivially.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub discard: Option<DiscardSinkSpec>,
    /// Kafka sink: transactional (exactly-once), at-least-once or none.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub kafka: Option<KafkaSinkSpec>,
}

/// Transactional file sink (two-phase commit): each subtask writes one part file per
/// checkpoint interval, visible only after the checkpoint completes, named
/// `<path>/part-<runId>-<subtask>-<seq>.jsonl` (run id of the process, subtask zero-padded to
/// 4 digits, per-subtask sequence number to 6). A restored run writes new part files under its
/// own run id; the committed files of earlier runs stay as they are.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct FileSinkSpec {
    /// Output directory: local path or `s3://bucket/prefix`.
    pub path: String,
    /// Throttle: at most this many records per second per subtask (at least 1); unset: no
    /// limit. A deliberately slow sink, to study backpressure and checkpoints under it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_records_per_second: Option<u64>,
}

/// Stdout sink.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct PrintSinkSpec {}

/// Discard sink (`discard: {}`): records are counted in the subtask's `records_in` metric
/// and dropped, optionally at a limited rate.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct DiscardSinkSpec {
    /// Throttle: at most this many records per second per subtask (at least 1); unset: no
    /// limit. A deliberately slow sink, to study backpressure and checkpoints under it.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_records_per_second: Option<u64>,
}
