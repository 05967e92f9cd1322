//! The replayable Kafka source (librdkafka through `rdkafka`).
//!
//! Each subtask assigns itself the partitions [`partition_owner`] gives it (no consumer-group
//! rebalancing), starts each at its checkpointed offset or by `startingOffsets`
//! ([`start_from`]), and records the offset of the next record per partition in every
//! checkpoint ([`KafkaSplit`]). Unbounded sources look for new partitions every
//! `partitionDiscoveryIntervalMs`; bounded ones stop at the end offsets seen when they start.
//! Broker calls that block (metadata, watermarks, offset look-ups) run on tokio's blocking pool.

use super::Source;
use super::kafka_assign::{KafkaSplit, StartFrom, partition_owner, restored_offsets, start_from};
use crate::job::{KafkaSourceSpec, StartingOffsets};
use crate::operators::{EncodedState, OperatorRestore, TaskError, TaskResult};
use crate::record::json::parse_json_row;
use crate::record::{Record, SchemaCache};
use async_trait::async_trait;
use futures::FutureExt;
use rdkafka::consumer::{BaseConsumer, Consumer, StreamConsumer};
use rdkafka::message::Message;
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
    next_discovery: Option<Instant>,
}

fn client_config(spec: &KafkaSourceSpec) -> ClientConfig {
    let mut config = ClientConfig::new();
    for (key, value) in &spec.properties {
        config.set(key, value);
    }
    config
        .set("bootstrap.servers", &spec.bootstrap_servers)
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        // librdkafka needs a group id for a consumer; nothing is read back from it.
        .set("group.id", spec.group_id.as_deref().unwrap_or("weir-source"));
    config
}

fn kafka_error(what: impl std::fmt::Display, servers: &str) -> impl Fn(rdkafka::error::KafkaError) -> TaskError {
    let what = what.to_string();
    let servers = servers.to_string();
    move |e| TaskError(format!("Kafka ({servers}): {what}: {e}"))
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
        let start = match from {
            StartFrom::Restored(offset) => *offset,
            StartFrom::Earliest => low,
            StartFrom::StartingOffsets => match spec.starting_offsets {
                StartingOffsets::Earliest => low,
                StartingOffsets::Latest => high,
                StartingOffsets::Committed => {
                    let mut list = TopicPartitionList::new();
                    list.add_partition(topic, *partition);
                    let committed = consumer
                        .committed_offsets(list, BROKER_TIMEOUT)
                        .map_err(kafka_error("reading the group's committed offsets", servers))?;
                    match committed.elements().first().map(|e| e.offset()) {
                        Some(Offset::Offset(n)) => n,
                        _ => low,
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
            },
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
        let owned: Vec<((String, i32), StartFrom)> = list_partitions(&consumer, &spec)?
            .into_iter()
            .filter(|(t, p)| partition_owner(t, *p, parallelism) == subtask && !known.contains(&(t.clone(), *p)))
            .map(|(t, p)| {
                let from = start_from(&restored, &t, p, !first);
                ((t, p), from)
            })
            .collect();
        resolve(&consumer, &spec, &owned)
    })
    .await
    .map_err(|e| TaskError(format!("partition discovery: {e}")))?
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
            next_discovery: None,
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
        for a in found {
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
    fn take(
        &mut self,
        topic: &str,
        partition: i32,
        offset: i64,
        payload: Option<&[u8]>,
        out: &mut Vec<Record>,
    ) -> TaskResult<()> {
        let Some(a) = self.assigned.get_mut(&(topic.to_string(), partition)) else {
            return Ok(());
        };
        if a.end.is_some_and(|end| offset >= end) || offset < a.split.next_offset {
            return Ok(());
        }
        a.split.next_offset = offset + 1;
        let Some(bytes) = payload else { return Ok(()) };
        let text = std::str::from_utf8(bytes).map_err(|e| {
            TaskError(format!(
                "topic {topic} partition {partition} offset {offset}: value is not UTF-8: {e}"
            ))
        })?;
        if text.trim().is_empty() {
            return Ok(());
        }
        let row = parse_json_row(text, &mut self.schemas).map_err(|e| {
            TaskError(format!(
                "topic {topic} partition {partition} offset {offset}: value is not a JSON object: {e}"
            ))
        })?;
        out.push(Record::new(row));
        Ok(())
    }
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
        let first = match tokio::time::timeout(POLL_WAIT, self.consumer.recv()).await {
            Err(_) => return Ok(true),
            Ok(message) => message.map_err(kafka_error("reading", &servers))?.detach(),
        };
        let mut message = Some(first);
        while let Some(m) = message.take() {
            self.take(m.topic(), m.partition(), m.offset(), m.payload(), out)?;
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
        Ok(EncodedState {
            incremental: None,
            state_names: vec!["operator:kafka-offsets".into()],
            key_group_range: None,
            key_groups: vec![],
            operator_state: self
                .assigned
                .values()
                .map(|a| postcard::to_stdvec(&a.split))
                .collect::<Result<_, _>>()?,
        })
    }

    fn max_records_per_second(&self) -> Option<u64> {
        self.spec.max_records_per_second
    }
}
