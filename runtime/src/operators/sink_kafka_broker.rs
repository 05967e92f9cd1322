//! The exactly-once Kafka sink's broker calls (thin I/O over rdkafka): producers, the commit
//! markers (consumer-group offsets committed inside a transaction, read back through a fresh
//! `read_committed` consumer so that librdkafka's OffsetFetch sets `require_stable`), and the
//! recovery of a restored subtask. The decisions are pure functions in
//! [`super::sink_kafka_recovery`]; the protocol is described there.

use super::sink_kafka_recovery::{
    KafkaRecord, PendingTransaction, decode_state, ids_in_use, ids_in_use_group, marker_group, recovery_plan,
    transactional_id,
};
use super::{TaskError, TaskResult};
use crate::job::KafkaSinkSpec;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientConfig, ClientContext, Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a blocking broker call (init, flush, commit) may take before the subtask fails.
pub(super) const BROKER_TIMEOUT: Duration = Duration::from_secs(60);
/// Default `transaction.timeout.ms` (10 minutes).
const DEFAULT_TRANSACTION_TIMEOUT_MS: u64 = 600_000;

/// Collects the first failed delivery.
#[derive(Default, Clone)]
pub struct DeliveryErrors(Arc<Mutex<Option<String>>>);

impl ClientContext for DeliveryErrors {}

impl ProducerContext for DeliveryErrors {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &DeliveryResult<'_>, _: ()) {
        if let Err((e, _)) = result
            && let Ok(mut first) = self.0.lock()
        {
            first.get_or_insert_with(|| e.to_string());
        }
    }
}

impl DeliveryErrors {
    pub(super) fn check(&self, topic: &str) -> TaskResult<()> {
        match self.0.lock().ok().and_then(|g| g.clone()) {
            Some(e) => Err(TaskError(format!(
                "Kafka sink: a record to topic `{topic}` was not delivered: {e}"
            ))),
            None => Ok(()),
        }
    }
}

pub(super) type KafkaProducer = ThreadedProducer<DeliveryErrors>;

pub(super) fn kafka_error(what: impl std::fmt::Display) -> impl Fn(rdkafka::error::KafkaError) -> TaskError {
    let what = what.to_string();
    move |e| TaskError(format!("Kafka sink: {what}: {e}"))
}

pub(super) fn producer_config(spec: &KafkaSinkSpec, transactional_id: Option<&str>) -> ClientConfig {
    let mut config = ClientConfig::new();
    for (key, value) in &spec.properties {
        config.set(key, value);
    }
    config.set("bootstrap.servers", &spec.bootstrap_servers);
    if let Some(id) = transactional_id {
        let timeout = spec.transaction_timeout_ms.unwrap_or(DEFAULT_TRANSACTION_TIMEOUT_MS);
        config
            .set("transactional.id", id)
            .set("transaction.timeout.ms", timeout.to_string());
    }
    config
}

/// Runs a blocking producer call on the blocking pool.
pub(super) async fn blocking<T: Send + 'static>(
    what: &str,
    call: impl FnOnce() -> TaskResult<T> + Send + 'static,
) -> TaskResult<T> {
    tokio::task::spawn_blocking(call)
        .await
        .map_err(|e| TaskError(crate::exec::panics::join_failure(&format!("Kafka sink: {what}"), e)))?
}

/// Creates a transactional producer and initialises it (which aborts whatever transaction its
/// id left open and fences older producers with that id). Blocking.
pub(super) fn transactional_producer(
    spec: &KafkaSinkSpec,
    id: &str,
    errors: DeliveryErrors,
) -> TaskResult<KafkaProducer> {
    let producer: KafkaProducer = producer_config(spec, Some(id))
        .create_with_context(errors)
        .map_err(kafka_error(format!("creating producer `{id}`")))?;
    producer.init_transactions(BROKER_TIMEOUT).map_err(kafka_error(format!(
        "initialising transactional id `{id}` (does the broker support transactions?)"
    )))?;
    Ok(producer)
}

fn is_queue_full(e: &rdkafka::error::KafkaError) -> bool {
    matches!(
        e,
        rdkafka::error::KafkaError::MessageProduction(rdkafka::types::RDKafkaErrorCode::QueueFull)
    )
}

/// Sends one record, waiting while the producer's queue is full.
pub(super) async fn send(producer: &KafkaProducer, topic: &str, record: &KafkaRecord) -> TaskResult<()> {
    loop {
        let mut base = BaseRecord::<[u8], [u8]>::to(topic).payload(&record.value[..]);
        if let Some(key) = &record.key {
            base = base.key(&key[..]);
        }
        if let Some(partition) = record.partition {
            base = base.partition(partition);
        }
        match producer.send(base) {
            Ok(()) => return Ok(()),
            Err((e, _)) if !is_queue_full(&e) => return Err(kafka_error(format!("sending to topic `{topic}`"))(e)),
            Err(_) => tokio::time::sleep(Duration::from_millis(5)).await,
        }
    }
}

/// Commits checkpoint id `checkpoint` as the marker of `group` inside the producer's open
/// transaction. Blocking.
pub(super) fn send_marker(
    producer: &KafkaProducer,
    spec: &KafkaSinkSpec,
    group: &str,
    checkpoint: u64,
) -> TaskResult<()> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &spec.bootstrap_servers)
        .set("group.id", group)
        .create()
        .map_err(kafka_error("creating the marker consumer"))?;
    let metadata = consumer
        .group_metadata()
        .ok_or_else(|| TaskError(format!("Kafka sink: no group metadata for marker group `{group}`")))?;
    let mut offsets = TopicPartitionList::new();
    offsets
        .add_partition_offset(&spec.topic, 0, Offset::Offset(checkpoint as i64))
        .map_err(kafka_error("building the commit marker"))?;
    producer
        .send_offsets_to_transaction(&offsets, &metadata, BROKER_TIMEOUT)
        .map_err(kafka_error(format!("recording the commit marker in group `{group}`")))
}

/// The committed marker (last committed checkpoint) of `group`, if any. Blocking.
pub(super) fn read_marker(spec: &KafkaSinkSpec, group: &str) -> TaskResult<Option<u64>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &spec.bootstrap_servers)
        .set("group.id", group)
        .set("isolation.level", "read_committed")
        .create()
        .map_err(kafka_error("creating the marker consumer"))?;
    let mut list = TopicPartitionList::new();
    list.add_partition(&spec.topic, 0);
    let committed = consumer
        .committed_offsets(list, BROKER_TIMEOUT)
        .map_err(kafka_error(format!("reading the commit marker of group `{group}`")))?;
    Ok(match committed.elements().first().map(|e| e.offset()) {
        Some(Offset::Offset(n)) if n >= 0 => Some(n as u64),
        _ => None,
    })
}

/// Commits `offset` for partition 0 of the output topic in consumer group `group`, outside any
/// transaction (the record of ids in use). Blocking.
fn commit_group_offset(spec: &KafkaSinkSpec, group: &str, offset: u64) -> TaskResult<()> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", &spec.bootstrap_servers)
        .set("group.id", group)
        .create()
        .map_err(kafka_error("creating the consumer of the ids-in-use record"))?;
    let mut list = TopicPartitionList::new();
    list.add_partition_offset(&spec.topic, 0, Offset::Offset(offset as i64))
        .map_err(kafka_error("building the ids-in-use record"))?;
    consumer
        .commit(&list, rdkafka::consumer::CommitMode::Sync)
        .map_err(kafka_error(format!(
            "recording the transactional ids in use in group `{group}`"
        )))
}

/// What a restored subtask took over: the pre-committed transactions of the restore point it
/// adopted, decided at the first checkpoint completion ([`super::sink_kafka_recovery`]).
pub(super) struct Restored {
    /// The old subtasks adopted.
    pub adopted: Vec<u32>,
    /// Their pending transactions.
    pub pending: Vec<PendingTransaction>,
    /// The restore point's parallelism (0: a first start).
    pub old_parallelism: u32,
}

/// Exactly-once recovery (blocking): record the ids in use, fence the ids of adopted old
/// subtasks and the lingering ids of failed attempts, start the own producer (fencing its id).
/// The adopted transactions' markers are read only once every subtask has fenced its ids,
/// at the first checkpoint completion ([`read_markers`]).
pub(super) fn recover(
    spec: &KafkaSinkSpec,
    prefix: &str,
    subtask: u32,
    parallelism: u32,
    items: &[Vec<u8>],
    errors: DeliveryErrors,
) -> TaskResult<(KafkaProducer, Restored)> {
    let (old_parallelism, pending) = decode_state(items).map_err(TaskError)?;
    // Record the ids this attempt uses before opening any transaction, so a restore after it
    // fails knows which ids may hold lingering transactions.
    let group = ids_in_use_group(prefix);
    let recorded = read_marker(spec, &group)?;
    let in_use = ids_in_use(recorded, old_parallelism, parallelism);
    if recorded != Some(u64::from(in_use)) {
        commit_group_offset(spec, &group, u64::from(in_use))?;
    }
    let plan = recovery_plan(prefix, old_parallelism, parallelism, subtask, in_use);
    if !plan.fence_ids.is_empty() {
        tracing::info!(subtask, ids = ?plan.fence_ids, "Kafka sink: fencing transactional ids (aborts what they left open)");
    }
    for id in &plan.fence_ids {
        drop(transactional_producer(spec, id, DeliveryErrors::default())?);
    }
    let producer = transactional_producer(spec, &transactional_id(prefix, subtask), errors)?;
    let pending = pending
        .into_iter()
        .filter(|t| plan.adopted.contains(&t.subtask))
        .collect();
    let restored = Restored {
        adopted: plan.adopted,
        pending,
        old_parallelism: old_parallelism.unwrap_or(0),
    };
    Ok((producer, restored))
}

/// The committed markers of the old subtasks `adopted` (blocking).
pub(super) fn read_markers(
    spec: &KafkaSinkSpec,
    prefix: &str,
    adopted: &[u32],
) -> TaskResult<BTreeMap<u32, Option<u64>>> {
    adopted
        .iter()
        .map(|&s| read_marker(spec, &marker_group(prefix, s)).map(|m| (s, m)))
        .collect()
}
