//! The replayable Kafka source (librdkafka through `rdkafka`).
//!
//! Each subtask assigns itself the partitions [`partition_owner`] gives it (no consumer-group
//! rebalancing), starts each at its checkpointed offset or by `startingOffsets`
//! ([`start_from`]), and records the offset of the next record per partition in every
//! checkpoint ([`KafkaSplit`]). Unbounded sources look for new partitions every
//! `partitionDiscoveryIntervalMs`; bounded ones stop at the end offsets seen when they start.
//! Broker calls that block (metadata, watermarks, offset look-ups) run on tokio's blocking pool.
//! With event time, each partition has its own watermark ([`SplitWatermarks`], as Flink's
//! `KafkaSource` with per-split watermarks) whose clock (the largest event time read) is in the
//! partition's checkpointed state and moves with the partition on a rescale.

use super::Source;
use super::kafka_assign::{KafkaSplit, StartFrom, earliest_start, newly_owned, restored_event_times, restored_offsets};
use crate::exec::split_watermarks::{SplitId, SplitWatermarks};
use crate::exec::watermark::NO_WATERMARK;
use crate::job::{KafkaSourceSpec, StartingOffsets};
use crate::operators::{EncodedState, OperatorRestore, TaskError, TaskResult};
use crate::record::json::parse_json_row;
use crate::record::row::RowBuilder;
use crate::record::{Datum, Record, Row, SchemaCache};
use async_trait::async_trait;
use futures::FutureExt;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer, StreamConsumer};
use rdkafka::message::{Message, OwnedMessage};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// How long a broker call (metadata, watermarks, offsets) may take before the subtask fails.
const BROKER_TIMEOUT: Duration = Duration::from_secs(30);
/// How long `next_batch` waits for a first record before returning an empty batch (so the
/// subtask's loop sees checkpoint triggers).
const POLL_WAIT: Duration = Duration::from_millis(100);
/// Default partition discovery interval (unbounded sources).
const DEFAULT_DISCOVERY_MS: u64 = 30_000;

/// One assigned partition.
#[derive(Clone, Debug)]
struct Assigned {
    split: KafkaSplit,
    /// The partition's number in this subtask's [`SplitWatermarks`].
    split_id: SplitId,
    /// Bounded mode: the end offset seen at start (exclusive).
    end: Option<i64>,
}

/// A Kafka source subtask.
pub struct KafkaSource {
    spec: KafkaSourceSpec,
    subtask: u32,
    parallelism: u32,
    consumer: StreamConsumer,
    assigned: BTreeMap<(String, i32), Assigned>,
    schemas: SchemaCache,
    /// Schemas of rows with the metadata fields added.
    with_metadata: SchemaCache,
    next_discovery: Option<Instant>,
    /// With a `groupId`: the positions of each checkpoint taken and not completed yet, to
    /// commit to the group when it completes (monitoring only).
    taken: BTreeMap<u64, TopicPartitionList>,
    /// Per-partition watermarks, when the source has event time.
    watermarks: Option<SplitWatermarks>,
    /// The largest event time per partition in the restored state (rescale: of every old
    /// subtask), for the partitions this subtask takes.
    restored_event_times: BTreeMap<(String, i32), i64>,
    /// The partition (its split id) and offset of each record of the last batch, for
    /// [`Source::record_origin`].
    batch_origin: Vec<(SplitId, i64)>,
}

/// At most this many checkpoints' positions wait for completion (older ones are dropped: a
/// later completion commits newer positions anyway).
const MAX_TAKEN: usize = 16;

fn client_config(spec: &KafkaSourceSpec) -> ClientConfig {
    let mut config = ClientConfig::new();
    for (key, value) in &spec.properties {
        config.set(key, value);
    }
    config
        .set("bootstrap.servers", &spec.bootstrap_servers)
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        // Earliest starts at offset 0 (`earliest_start`); an offset below the log start is out
        // of range and resets to the log start. Restored offsets are in range unless retention
        // deleted records the job never read (then: what is left of them) or the partition's
        // log was truncated or re-created (then: its start; docs/concepts.md, "Kafka").
        .set("auto.offset.reset", "earliest")
        // librdkafka needs a group id for a consumer; nothing is read back from it.
        .set("group.id", spec.group_id.as_deref().unwrap_or("weir-source"));
    config
}

fn kafka_error(what: impl std::fmt::Display, servers: &str) -> impl Fn(rdkafka::error::KafkaError) -> TaskError {
    let what = what.to_string();
    let servers = servers.to_string();
    move |e| TaskError(format!("Kafka ({servers}): {what}: {e}"))
}

/// Where a record read from Kafka came from, for error messages (an event time that is none,
/// say): `the record at offset 17 of topic `orders` partition 2`, enough to find it with any
/// Kafka client (`kcat -t orders -p 2 -o 17 -c 1`).
pub fn kafka_record_origin(topic: &str, partition: i32, offset: i64) -> String {
    format!("the record at offset {offset} of topic `{topic}` partition {partition}")
}

/// The partitions of `topics`, by topic. Errors: a topic the cluster does not have.
fn list_partitions(consumer: &BaseConsumer, spec: &KafkaSourceSpec) -> TaskResult<Vec<(String, i32)>> {
    let mut out = Vec::new();
    for topic in &spec.topics {
        let metadata = consumer
            .fetch_metadata(Some(topic), BROKER_TIMEOUT)
            .map_err(kafka_error(
                format!("reading the metadata of topic `{topic}`"),
                &spec.bootstrap_servers,
            ))?;
        let Some(found) = metadata.topics().iter().find(|t| t.name() == topic) else {
            return Err(TaskError(format!("topic `{topic}` is not in the cluster's metadata")));
        };
        if found.error().is_some() || found.partitions().is_empty() {
            return Err(TaskError(format!(
                "topic `{topic}` does not exist on {} (create it first; source.kafka.topics)",
                spec.bootstrap_servers
            )));
        }
        out.extend(found.partitions().iter().map(|p| (topic.clone(), p.id())));
    }
    Ok(out)
}

/// Resolves the start (and, bounded, the end) of newly assigned partitions. Blocking.
fn resolve(
    consumer: &BaseConsumer,
    spec: &KafkaSourceSpec,
    partitions: &[((String, i32), StartFrom)],
) -> TaskResult<Vec<Assigned>> {
    let servers = &spec.bootstrap_servers;
    let mut out = Vec::with_capacity(partitions.len());
    for ((topic, partition), from) in partitions {
        let (low, high) = consumer
            .fetch_watermarks(topic, *partition, BROKER_TIMEOUT)
            .map_err(kafka_error(
                format!("reading the offsets of {topic}/{partition}"),
                servers,
            ))?;
        let earliest = earliest_start(low, high, spec.bounded);
        let start = match from {
            StartFrom::Restored(offset) => *offset,
            StartFrom::Earliest => earliest,
            StartFrom::StartingOffsets => match spec.starting_offsets {
                StartingOffsets::Earliest => earliest,
                StartingOffsets::Latest => high,
                StartingOffsets::Committed => {
                    let mut list = TopicPartitionList::new();
                    list.add_partition(topic, *partition);
                    let committed = consumer
                        .committed_offsets(list, BROKER_TIMEOUT)
                        .map_err(kafka_error("reading the group's committed offsets", servers))?;
                    match committed.elements().first().map(|e| e.offset()) {
                        Some(Offset::Offset(n)) => n,
                        _ => earliest,
                    }
                }
                StartingOffsets::Timestamp => {
                    let mut list = TopicPartitionList::new();
                    let at = Offset::Offset(spec.starting_timestamp_ms.unwrap_or(0));
                    list.add_partition_offset(topic, *partition, at)
                        .map_err(kafka_error("building an offset look-up", servers))?;
                    let found = consumer
                        .offsets_for_times(list, BROKER_TIMEOUT)
                        .map_err(kafka_error("looking up offsets by timestamp", servers))?;
                    match found.elements().first().map(|e| e.offset()) {
                        Some(Offset::Offset(n)) => n,
                        _ => high,
                    }
                }
            },
        };
        out.push(Assigned {
            split: KafkaSplit {
                topic: topic.clone(),
                partition: *partition,
                next_offset: start,
                max_event_time: None,
            },
            split_id: 0,
            end: spec.bounded.then_some(high),
        });
    }
    Ok(out)
}

/// Lists partitions and resolves the positions of the ones this subtask owns and does not
/// have yet. `restored` is empty after the first discovery (new partitions start earliest).
async fn discover(
    spec: &KafkaSourceSpec,
    subtask: u32,
    parallelism: u32,
    known: Vec<(String, i32)>,
    restored: BTreeMap<(String, i32), i64>,
    first: bool,
) -> TaskResult<Vec<Assigned>> {
    let spec = spec.clone();
    tokio::task::spawn_blocking(move || {
        let consumer: BaseConsumer = client_config(&spec)
            .create()
            .map_err(kafka_error("creating a consumer", &spec.bootstrap_servers))?;
        let listed = list_partitions(&consumer, &spec)?;
        let owned = newly_owned(listed, &known, &restored, subtask, parallelism, !first);
        resolve(&consumer, &spec, &owned)
    })
    .await
    .map_err(|e| TaskError(crate::exec::panics::join_failure("Kafka partition discovery", e)))?
}

impl KafkaSource {
    /// Opens source subtask `subtask` of `parallelism`, restoring partition offsets from
    /// `restore` (the items of all old subtasks, pooled). Errors: the brokers cannot be
    /// reached, a topic does not exist, the state does not decode.
    pub async fn new(
        spec: &KafkaSourceSpec,
        subtask: u32,
        parallelism: u32,
        restore: OperatorRestore,
    ) -> TaskResult<KafkaSource> {
        let restored = restored_offsets(&restore.operator_state).map_err(TaskError)?;
        let restored_event_times = restored_event_times(&restore.operator_state).map_err(TaskError)?;
        let consumer: StreamConsumer = client_config(spec)
            .create()
            .map_err(kafka_error("creating a consumer", &spec.bootstrap_servers))?;
        let mut source = KafkaSource {
            spec: spec.clone(),
            subtask,
            parallelism,
            consumer,
            assigned: BTreeMap::new(),
            schemas: SchemaCache::default(),
            with_metadata: SchemaCache::default(),
            next_discovery: None,
            taken: BTreeMap::new(),
            watermarks: None,
            restored_event_times,
            batch_origin: Vec::new(),
        };
        let found = discover(spec, subtask, parallelism, vec![], restored, true).await?;
        source.add(found)?;
        source.schedule_discovery();
        Ok(source)
    }

    fn schedule_discovery(&mut self) {
        let every = self
            .spec
            .partition_discovery_interval_ms
            .unwrap_or(DEFAULT_DISCOVERY_MS);
        self.next_discovery = (!self.spec.bounded && every > 0).then(|| Instant::now() + Duration::from_millis(every));
    }

    /// Adds partitions and (re)assigns the consumer at every partition's current position.
    fn add(&mut self, found: Vec<Assigned>) -> TaskResult<()> {
        let now = Instant::now();
        for mut a in found {
            a.split_id = self.assigned.len() as SplitId;
            a.split.max_event_time = self
                .restored_event_times
                .get(&(a.split.topic.clone(), a.split.partition))
                .copied();
            if let Some(w) = &mut self.watermarks
                && !a.done()
            {
                w.add_split(a.split_id, a.split.max_event_time.unwrap_or(NO_WATERMARK), now);
            }
            tracing::info!(
                topic = %a.split.topic, partition = a.split.partition, offset = a.split.next_offset,
                subtask = self.subtask, "Kafka source: partition assigned"
            );
            self.assigned.insert((a.split.topic.clone(), a.split.partition), a);
        }
        let mut list = TopicPartitionList::new();
        for a in self.assigned.values().filter(|a| !a.done()) {
            list.add_partition_offset(&a.split.topic, a.split.partition, Offset::Offset(a.split.next_offset))
                .map_err(kafka_error("assigning partitions", &self.spec.bootstrap_servers))?;
        }
        self.consumer
            .assign(&list)
            .map_err(kafka_error("assigning partitions", &self.spec.bootstrap_servers))
    }

    /// Handles one message: advances its partition and appends the record (bounded: records
    /// at or past the end offset are dropped).
    fn take(&mut self, message: &OwnedMessage, out: &mut Vec<Record>) -> TaskResult<()> {
        let (topic, partition, offset) = (message.topic(), message.partition(), message.offset());
        let Some(a) = self.assigned.get_mut(&(topic.to_string(), partition)) else {
            return Ok(());
        };
        if a.end.is_some_and(|end| offset >= end) || offset < a.split.next_offset {
            return Ok(());
        }
        a.split.next_offset = offset + 1;
        let (split_id, finished) = (a.split_id, a.done());
        if finished && let Some(w) = &mut self.watermarks {
            w.finish(split_id);
        }
        let Some(bytes) = message.payload() else { return Ok(()) };
        let at = || format!("topic {topic} partition {partition} offset {offset}");
        let text = std::str::from_utf8(bytes).map_err(|e| TaskError(format!("{}: value is not UTF-8: {e}", at())))?;
        if text.trim().is_empty() {
            return Ok(());
        }
        let row = parse_json_row(text, &mut self.schemas)
            .map_err(|e| TaskError(format!("{}: value is not a JSON object: {e}", at())))?;
        let metadata = MessageMetadata {
            key: message.key(),
            partition,
            offset,
            timestamp_ms: message.timestamp().to_millis(),
        };
        let row = add_metadata(row, &self.spec, &metadata, &mut self.with_metadata)
            .map_err(|e| TaskError(format!("{}: {e}", at())))?;
        out.push(Record::new(row));
        self.batch_origin.push((split_id, offset));
        if let Some(w) = &mut self.watermarks {
            w.record_from(split_id);
        }
        Ok(())
    }

    /// The partition's state for the checkpoint: its position and its watermark's clock.
    fn checkpointed(&self, a: &Assigned) -> KafkaSplit {
        let tracked = self
            .watermarks
            .as_ref()
            .and_then(|w| w.max_seen(a.split_id))
            .filter(|&t| t != NO_WATERMARK);
        KafkaSplit {
            max_event_time: tracked.or(a.split.max_event_time),
            ..a.split.clone()
        }
    }
}

/// What the broker says about a message besides its value.
#[derive(Clone, Copy, Debug)]
pub struct MessageMetadata<'m> {
    /// The message key (bytes), if any.
    pub key: Option<&'m [u8]>,
    /// Partition number.
    pub partition: i32,
    /// Offset in the partition.
    pub offset: i64,
    /// Kafka timestamp in milliseconds since the Unix epoch, if the broker gave one.
    pub timestamp_ms: Option<i64>,
}

/// Adds the source's metadata fields (`keyField`, `partitionField`, `offsetField`,
/// `timestampField`) to `row`; a row with none configured is returned as it is. The key is
/// text (invalid UTF-8 replaced by U+FFFD); a missing key or timestamp is null. Errors: the
/// value already has a field of that name, or is not a JSON object.
pub fn add_metadata(
    row: Row,
    spec: &KafkaSourceSpec,
    metadata: &MessageMetadata<'_>,
    cache: &mut SchemaCache,
) -> Result<Row, String> {
    let added = [
        (
            "keyField",
            &spec.key_field,
            metadata
                .key
                .map_or(Datum::Null, |k| Datum::Str(String::from_utf8_lossy(k).as_ref().into())),
        ),
        (
            "partitionField",
            &spec.partition_field,
            Datum::Int(metadata.partition.into()),
        ),
        ("offsetField", &spec.offset_field, Datum::Int(metadata.offset)),
        (
            "timestampField",
            &spec.timestamp_field,
            metadata.timestamp_ms.map_or(Datum::Null, Datum::Int),
        ),
    ];
    if added.iter().all(|(_, name, _)| name.is_none()) {
        return Ok(row);
    }
    if row.schema().is_bare() {
        return Err("the value is not a JSON object, so metadata fields cannot be added to it".into());
    }
    let (schema, values) = row.into_parts();
    let mut builder = RowBuilder::with_capacity(values.len() + added.len());
    for (name, value) in schema.names().iter().zip(values) {
        builder.push(name.clone(), value);
    }
    for (setting, name, value) in added {
        let Some(name) = name else { continue };
        if schema.index_of(name).is_some() {
            return Err(format!(
                "the value already has a field `{name}` (source.kafka.{setting}): choose another name"
            ));
        }
        builder.push(name.as_str().into(), value);
    }
    Ok(builder.finish(cache))
}

impl Assigned {
    fn done(&self) -> bool {
        self.end.is_some_and(|end| self.split.next_offset >= end)
    }
}

#[async_trait]
impl Source for KafkaSource {
    async fn next_batch(&mut self, out: &mut Vec<Record>, max: usize) -> TaskResult<bool> {
        if self.spec.bounded && self.assigned.values().all(Assigned::done) {
            return Ok(false);
        }
        if self.next_discovery.is_some_and(|at| Instant::now() >= at) {
            let known = self.assigned.keys().cloned().collect();
            let found = discover(
                &self.spec,
                self.subtask,
                self.parallelism,
                known,
                BTreeMap::new(),
                false,
            )
            .await?;
            if !found.is_empty() {
                self.add(found)?;
            }
            self.schedule_discovery();
        }
        let servers = self.spec.bootstrap_servers.clone();
        self.batch_origin.clear();
        let first = match tokio::time::timeout(POLL_WAIT, self.consumer.recv()).await {
            Err(_) => return Ok(true),
            Ok(message) => message.map_err(kafka_error("reading", &servers))?.detach(),
        };
        let mut message = Some(first);
        while let Some(m) = message.take() {
            self.take(&m, out)?;
            if out.len() >= max {
                break;
            }
            if let Some(next) = self.consumer.recv().now_or_never() {
                message = Some(next.map_err(kafka_error("reading", &servers))?.detach());
            }
        }
        Ok(true)
    }

    fn snapshot(&self) -> TaskResult<EncodedState> {
        Ok(EncodedState::operator_only(
            "operator:kafka-offsets",
            self.assigned
                .values()
                .map(|a| postcard::to_stdvec(&self.checkpointed(a)))
                .collect::<Result<_, _>>()?,
        ))
    }

    fn max_records_per_second(&self) -> Option<u64> {
        self.spec.max_records_per_second
    }

    fn enable_split_watermarks(&mut self, bound_ms: i64, idle_timeout: Option<Duration>) -> bool {
        let now = Instant::now();
        let mut w = SplitWatermarks::new(bound_ms, idle_timeout, now);
        for a in self.assigned.values().filter(|a| !a.done()) {
            w.add_split(a.split_id, a.split.max_event_time.unwrap_or(NO_WATERMARK), now);
        }
        self.watermarks = Some(w);
        true
    }

    fn split_watermarks(&mut self) -> Option<&mut SplitWatermarks> {
        self.watermarks.as_mut()
    }

    fn record_origin(&self, index: usize) -> Option<String> {
        let (split_id, offset) = *self.batch_origin.get(index)?;
        let a = self.assigned.values().find(|a| a.split_id == split_id)?;
        Some(kafka_record_origin(&a.split.topic, a.split.partition, offset))
    }

    fn snapshot_taken(&mut self, checkpoint_id: u64) {
        if self.spec.group_id.is_none() {
            return;
        }
        let mut list = TopicPartitionList::new();
        for a in self.assigned.values() {
            // Cannot fail for an offset (only for an unknown partition handle).
            let _ = list.add_partition_offset(&a.split.topic, a.split.partition, Offset::Offset(a.split.next_offset));
        }
        self.taken.insert(checkpoint_id, list);
        while self.taken.len() > MAX_TAKEN {
            self.taken.pop_first();
        }
    }

    /// Commits the positions of checkpoint `checkpoint_id` to the consumer group, as Flink's
    /// `KafkaSource` does on checkpoint completion: for lag monitoring only (a restore never
    /// reads them back); a failed commit is logged, not fatal.
    async fn checkpoint_complete(&mut self, checkpoint_id: u64) {
        let Some(list) = self.taken.remove(&checkpoint_id) else {
            return;
        };
        self.taken.retain(|id, _| *id > checkpoint_id);
        if list.count() == 0 {
            return;
        }
        if let Err(e) = self.consumer.commit(&list, CommitMode::Async) {
            tracing::warn!(
                subtask = self.subtask, checkpoint_id, error = %e,
                "Kafka source: committing offsets to the consumer group failed (monitoring only)"
            );
        }
    }
}

#[cfg(test)]
#[path = "kafka_tests.rs"]
mod tests;
