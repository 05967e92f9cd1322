//! The Kafka source and sink of a job (`source: {kafka: …}`, `sink: {kafka: …}`), named as
//! Flink's `KafkaSource` / `KafkaSink` builders name their settings. Guarantees and limits are
//! in docs/concepts.md ("Kafka").

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// Where a Kafka source starts reading a partition it has no checkpointed offset for, as
/// Flink's `OffsetsInitializer`. Partitions discovered after the job started always start at
/// `earliest` (Flink's default for new partitions), so nothing written to them is skipped.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum StartingOffsets {
    /// The first offset the broker still holds (`OffsetsInitializer.earliest()`).
    #[default]
    Earliest,
    /// The end of the partition when the job starts (`OffsetsInitializer.latest()`).
    Latest,
    /// The offset committed for `groupId` (`OffsetsInitializer.committedOffsets()`); a
    /// partition without one starts at `earliest`. Needs `groupId`.
    Committed,
    /// The first record whose timestamp is at least `startingTimestampMs`
    /// (`OffsetsInitializer.timestamp(ms)`); a partition with none starts at its end.
    Timestamp,
}

/// A replayable Kafka source. Partition `p` of topic `t` is read by source subtask
/// `(((javaHashCode(t) * 31) & 0x7fffffff) % parallelism + p) % parallelism`, Flink's
/// `KafkaSourceEnumerator.getSplitOwner`. The offset of every partition is operator state in
/// each checkpoint (consumer-group commits are never read back for correctness); a restore
/// seeks to them, also at another parallelism (the offsets of all old subtasks are pooled and
/// re-split by the formula). Record values must be JSON objects; each becomes one record.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct KafkaSourceSpec {
    /// `host:port[,host:port…]` of the brokers (librdkafka's `bootstrap.servers`).
    pub bootstrap_servers: String,
    /// Topics to read (at least one).
    pub topics: Vec<String>,
    /// Consumer group: needed for `startingOffsets: committed`; when set, the offsets of each
    /// completed checkpoint are also committed to it, for monitoring only.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub group_id: Option<String>,
    /// `earliest` (default), `latest`, `committed` or `timestamp`.
    #[serde(default)]
    pub starting_offsets: StartingOffsets,
    /// Milliseconds since the Unix epoch; required with `startingOffsets: timestamp`, not
    /// allowed otherwise.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub starting_timestamp_ms: Option<i64>,
    /// Stop at the end offsets seen when the job started (a backfill or a test); default
    /// false: read for ever and discover new partitions.
    #[serde(default)]
    pub bounded: bool,
    /// How often an unbounded source looks for new partitions, in milliseconds (Flink's
    /// `partition.discovery.interval.ms`); default 30000; 0 turns discovery off.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition_discovery_interval_ms: Option<u64>,
    /// Optional rate limit, in records per second per source subtask (at least 1).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub max_records_per_second: Option<u64>,
    /// Field that receives the record's Kafka key as text (null when the record has no key;
    /// as Flink SQL's `key` metadata column). Default: the key is not read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_field: Option<String>,
    /// Field that receives the record's partition number. Default: not added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition_field: Option<String>,
    /// Field that receives the record's offset in its partition. Default: not added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub offset_field: Option<String>,
    /// Field that receives the record's Kafka timestamp, in milliseconds since the Unix epoch
    /// (create or log-append time, as the topic is configured; null when the broker has none).
    /// Usable as the event-time field. Default: not added.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub timestamp_field: Option<String>,
    /// Further librdkafka consumer properties (`fetch.max.bytes`, `security.protocol`, …).
    /// `enable.auto.commit`, `group.id`, `bootstrap.servers` and `auto.offset.reset` are set by
    /// Weir and refused.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub properties: BTreeMap<String, String>,
}

/// What a Kafka sink guarantees after a failure, as Flink's `DeliveryGuarantee`.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum DeliveryGuarantee {
    /// Transactions: each subtask's records between two checkpoints form one transaction,
    /// flushed at the barrier and committed when the checkpoint completes; `read_committed`
    /// consumers see every record once. Needs checkpointing (mode `exactly-once`): without
    /// completed checkpoints nothing is ever committed.
    ExactlyOnce,
    /// Flush at every barrier: nothing is lost; records after the last checkpoint are written
    /// again after a restore (duplicates).
    #[default]
    AtLeastOnce,
    /// No flush at the barrier: records buffered in the producer when the job fails are lost.
    None,
}

/// A Kafka sink: each record is written as one JSON value to `topic`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct KafkaSinkSpec {
    /// `host:port[,host:port…]` of the brokers.
    pub bootstrap_servers: String,
    /// The topic written to (it must exist).
    pub topic: String,
    /// `exactly-once`, `at-least-once` (default) or `none`.
    #[serde(default)]
    pub delivery_guarantee: DeliveryGuarantee,
    /// Prefix of the transactional ids (exactly-once): subtask `i` uses `<prefix>-<i>`, and
    /// the consumer group `<prefix>-<i>` holds its commit marker. Must be unique per job and
    /// sink among everything writing to the cluster; default `weir-<job name>-<operator uid>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub transactional_id_prefix: Option<String>,
    /// Field whose value (as text) is the record key; default: no key.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_field: Option<String>,
    /// Field whose integer value is the partition a record is written to (it must be a
    /// partition of `topic`, or the subtask fails naming the record's value). Default: the
    /// producer's partitioner (by key hash when `keyField` is set, else sticky round-robin).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub partition_field: Option<String>,
    /// `transaction.timeout.ms` of the producers; default 600000 (10 minutes). It must not
    /// exceed the broker's `transaction.max.timeout.ms` and must exceed the checkpoint interval
    /// plus the longest expected downtime, or the broker aborts transactions a checkpoint
    /// already covers (docs/concepts.md, "Kafka").
    #[serde(default, skip_serializing_if = "Option::is_none")]
    #[schemars(range(min = 1))]
    pub transaction_timeout_ms: Option<u64>,
    /// Further librdkafka producer properties (`compression.type`, `linger.ms`, …).
    /// `transactional.id` and `bootstrap.servers` are set by Weir and refused.
    #[serde(default, skip_serializing_if = "BTreeMap::is_empty")]
    pub properties: BTreeMap<String, String>,
}
