//! The Kafka sink: exactly-once through transactions (two-phase commit, protocol in
//! [`super::sink_kafka_recovery`]), at-least-once (flush at every barrier) or none.
//!
//! Broker calls that block (init, flush, offsets, commit) run on tokio's blocking pool; the
//! producer's background thread serves delivery reports, and the first failed delivery fails
//! the subtask at the next record batch, flush or commit.

use super::sink_kafka_recovery::{
    KafkaRecord, PendingTransaction, SinkStateItem, decode_state, ids_in_use, ids_in_use_group, marker_group,
    recovery_plan, to_replay, transactional_id,
};
use super::{EncodedState, OperatorRestore, SnapshotEncoder, StreamOperator, TaskError, TaskResult};
use crate::checkpoint::Barrier;
use crate::job::{DeliveryGuarantee, KafkaSinkSpec};
use crate::record::json::write_json_line;
use crate::record::{Datum, Record};
use async_trait::async_trait;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientConfig, ClientContext, Offset, TopicPartitionList};
use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// How long a blocking broker call (init, flush, commit) may take before the subtask fails.
const BROKER_TIMEOUT: Duration = Duration::from_secs(60);
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
    fn check(&self, topic: &str) -> TaskResult<()> {
        match self.0.lock().ok().and_then(|g| g.clone()) {
            Some(e) => Err(TaskError(format!(
                "Kafka sink: a record to topic `{topic}` was not delivered: {e}"
            ))),
            None => Ok(()),
        }
    }
}

type KafkaProducer = ThreadedProducer<DeliveryErrors>;

fn kafka_error(what: impl std::fmt::Display) -> impl Fn(rdkafka::error::KafkaError) -> TaskError {
    let what = what.to_string();
    move |e| TaskError(format!("Kafka sink: {what}: {e}"))
}

fn producer_config(spec: &KafkaSinkSpec, transactional_id: Option<&str>) -> ClientConfig {
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
async fn blocking<T: Send + 'static>(
    what: &str,
    call: impl FnOnce() -> TaskResult<T> + Send + 'static,
) -> TaskResult<T> {
    tokio::task::spawn_blocking(call)
        .await
        .map_err(|e| TaskError(format!("Kafka sink: {what}: {e}")))?
}

/// Creates a transactional producer and initialises it (which aborts whatever transaction its
/// id left open and fences older producers with that id). Blocking.
fn transactional_producer(spec: &KafkaSinkSpec, id: &str, errors: DeliveryErrors) -> TaskResult<KafkaProducer> {
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

/// The partition a record goes to from the value of the sink's `partitionField` `field`.
/// Errors (naming the field): the field is missing or null, not an integer, negative or above
/// `i32::MAX` (Kafka partition numbers are `int32`).
pub fn record_partition(field: &str, value: Option<&Datum>) -> Result<i32, String> {
    let number = match value {
        Some(Datum::Int(n)) => *n,
        Some(Datum::UInt(_)) => i64::MAX,
        Some(Datum::Str(s)) => s
            .trim()
            .parse::<i64>()
            .map_err(|_| format!("partitionField `{field}` is \"{s}\", not a partition number"))?,
        Some(Datum::Null) | None => {
            return Err(format!(
                "the record has no `{field}` (partitionField): give every record a partition number"
            ));
        }
        Some(other) => return Err(format!("partitionField `{field}` is {other}, not a partition number")),
    };
    i32::try_from(number)
        .ok()
        .filter(|p| *p >= 0)
        .ok_or_else(|| format!("partitionField `{field}` is {number}: a partition number is 0 to 2147483647"))
}

/// Sends one record, waiting while the producer's queue is full.
async fn send(producer: &KafkaProducer, topic: &str, record: &KafkaRecord) -> TaskResult<()> {
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
fn send_marker(producer: &KafkaProducer, spec: &KafkaSinkSpec, group: &str, checkpoint: u64) -> TaskResult<()> {
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
fn read_marker(spec: &KafkaSinkSpec, group: &str) -> TaskResult<Option<u64>> {
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

/// A Kafka sink subtask.
pub struct KafkaSink {
    spec: KafkaSinkSpec,
    prefix: String,
    subtask: u32,
    parallelism: u32,
    producer: Arc<KafkaProducer>,
    errors: DeliveryErrors,
    /// Exactly-once: a transaction is open and holds `current`.
    in_transaction: bool,
    /// Exactly-once: records of the open transaction (write-ahead for the checkpoint).
    current: Vec<KafkaRecord>,
    /// Exactly-once: pre-committed transactions not yet committed, oldest first; only the
    /// first may have been written already (`written_first`).
    pending: Vec<PendingTransaction>,
    written_first: bool,
    /// Exactly-once: records that arrived while a pre-committed transaction awaits its commit.
    buffered: Vec<KafkaRecord>,
    scratch: Vec<u8>,
}

impl KafkaSink {
    /// Opens sink subtask `subtask` of `parallelism`. `default_prefix` (`weir-<job>-<uid>`)
    /// names the transactional ids when the spec sets none. Exactly-once: recovers from
    /// `restore` first (fences ids, writes again what the restore point pre-committed and the
    /// markers show uncommitted). Errors: brokers unreachable, transactions unsupported.
    pub async fn new(
        spec: &KafkaSinkSpec,
        default_prefix: &str,
        subtask: u32,
        parallelism: u32,
        restore: OperatorRestore,
    ) -> TaskResult<KafkaSink> {
        let prefix = spec
            .transactional_id_prefix
            .clone()
            .unwrap_or_else(|| default_prefix.to_string());
        let errors = DeliveryErrors::default();
        let exactly_once = spec.delivery_guarantee == DeliveryGuarantee::ExactlyOnce;
        let producer = if exactly_once {
            let (spec, prefix, errors) = (spec.clone(), prefix.clone(), errors.clone());
            blocking("recovery", move || {
                recover(&spec, &prefix, subtask, parallelism, &restore.operator_state, errors)
            })
            .await?
        } else {
            producer_config(spec, None)
                .create_with_context(errors.clone())
                .map_err(kafka_error("creating a producer"))?
        };
        Ok(KafkaSink {
            spec: spec.clone(),
            prefix,
            subtask,
            parallelism,
            producer: Arc::new(producer),
            errors,
            in_transaction: false,
            current: Vec::new(),
            pending: Vec::new(),
            written_first: false,
            buffered: Vec::new(),
            scratch: Vec::new(),
        })
    }

    fn exactly_once(&self) -> bool {
        self.spec.delivery_guarantee == DeliveryGuarantee::ExactlyOnce
    }

    fn encode_record(&mut self, record: &Record) -> TaskResult<KafkaRecord> {
        self.scratch.clear();
        write_json_line(&record.row, &mut self.scratch);
        self.scratch.pop();
        let partition = match &self.spec.partition_field {
            None => None,
            Some(field) => Some(record_partition(field, record.row.get(field)).map_err(|e| {
                TaskError(format!(
                    "Kafka sink (topic `{}`): {e}; record {}",
                    self.spec.topic,
                    String::from_utf8_lossy(&self.scratch)
                ))
            })?),
        };
        let key = self
            .spec
            .key_field
            .as_ref()
            .and_then(|f| record.row.get(f))
            .map(|d| match d {
                crate::record::Datum::Str(s) => s.as_bytes().to_vec(),
                other => other.to_string().into_bytes(),
            });
        Ok(KafkaRecord {
            key,
            value: self.scratch.clone(),
            partition,
        })
    }

    async fn write_open(&mut self, records: Vec<KafkaRecord>) -> TaskResult<()> {
        if !self.in_transaction {
            self.producer
                .begin_transaction()
                .map_err(kafka_error("beginning a transaction"))?;
            self.in_transaction = true;
        }
        for r in &records {
            send(&self.producer, &self.spec.topic, r).await?;
        }
        self.current.extend(records);
        Ok(())
    }

    /// Writes, marks and commits one whole transaction from records (a replay or a
    /// checkpointed buffer).
    async fn write_and_commit(&mut self, records: &[KafkaRecord], group: String, checkpoint: u64) -> TaskResult<()> {
        self.producer
            .begin_transaction()
            .map_err(kafka_error("beginning a transaction"))?;
        for r in records {
            send(&self.producer, &self.spec.topic, r).await?;
        }
        self.commit_open(group, checkpoint).await
    }

    /// Pre-commits (flush + marker) and commits the open transaction.
    async fn commit_open(&mut self, group: String, checkpoint: u64) -> TaskResult<()> {
        let (producer, spec) = (self.producer.clone(), self.spec.clone());
        blocking("commit", move || {
            send_marker(&producer, &spec, &group, checkpoint)?;
            producer.commit_transaction(BROKER_TIMEOUT).map_err(kafka_error(format!(
                "committing the transaction of checkpoint {checkpoint}"
            )))
        })
        .await?;
        self.errors.check(&self.spec.topic)
    }
}

/// Exactly-once recovery (blocking): record the ids in use, fence the ids of adopted old
/// subtasks and the lingering ids of failed attempts, start the own producer (fencing its id),
/// read markers, write again what was not committed.
fn recover(
    spec: &KafkaSinkSpec,
    prefix: &str,
    subtask: u32,
    parallelism: u32,
    items: &[Vec<u8>],
    errors: DeliveryErrors,
) -> TaskResult<KafkaProducer> {
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
    let producer = transactional_producer(spec, &transactional_id(prefix, subtask), errors.clone())?;
    let mut committed = BTreeMap::new();
    for &s in &plan.adopted {
        committed.insert(s, read_marker(spec, &marker_group(prefix, s))?);
    }
    for t in to_replay(&pending, &plan.adopted, &committed) {
        tracing::info!(
            subtask,
            from_subtask = t.subtask,
            checkpoint = t.checkpoint_id,
            records = t.records.len(),
            "Kafka sink: writing again a pre-committed transaction that was not committed"
        );
        producer
            .begin_transaction()
            .map_err(kafka_error("beginning a transaction"))?;
        for r in &t.records {
            loop {
                let mut base = BaseRecord::<[u8], [u8]>::to(&spec.topic).payload(&r.value[..]);
                if let Some(key) = &r.key {
                    base = base.key(&key[..]);
                }
                if let Some(partition) = r.partition {
                    base = base.partition(partition);
                }
                match producer.send(base) {
                    Ok(()) => break,
                    Err((e, _)) if !is_queue_full(&e) => return Err(kafka_error("sending a recovered record")(e)),
                    Err(_) => std::thread::sleep(Duration::from_millis(5)),
                }
            }
        }
        send_marker(&producer, spec, &marker_group(prefix, t.subtask), t.checkpoint_id)?;
        producer
            .commit_transaction(BROKER_TIMEOUT)
            .map_err(kafka_error("committing a recovered transaction"))?;
    }
    errors.check(&spec.topic)?;
    Ok(producer)
}

#[async_trait]
impl StreamOperator for KafkaSink {
    async fn process(&mut self, input: Vec<Record>, _out: &mut Vec<Record>) -> TaskResult<()> {
        self.errors.check(&self.spec.topic)?;
        let records: Vec<KafkaRecord> = input.iter().map(|r| self.encode_record(r)).collect::<TaskResult<_>>()?;
        if !self.exactly_once() {
            for r in &records {
                send(&self.producer, &self.spec.topic, r).await?;
            }
        } else if self.pending.is_empty() {
            self.write_open(records).await?;
        } else {
            self.buffered.extend(records);
        }
        Ok(())
    }

    async fn snapshot(&mut self, barrier: &Barrier) -> TaskResult<Option<SnapshotEncoder>> {
        match self.spec.delivery_guarantee {
            DeliveryGuarantee::None => return Ok(None),
            DeliveryGuarantee::AtLeastOnce => {
                let producer = self.producer.clone();
                blocking("flush", move || {
                    producer.flush(BROKER_TIMEOUT).map_err(kafka_error("flushing"))
                })
                .await?;
                self.errors.check(&self.spec.topic)?;
                return Ok(None);
            }
            DeliveryGuarantee::ExactlyOnce => {}
        }
        if self.in_transaction {
            // Pre-commit: everything of this transaction is on the broker before the barrier
            // is acknowledged.
            let producer = self.producer.clone();
            blocking("flush", move || {
                producer.flush(BROKER_TIMEOUT).map_err(kafka_error("flushing"))
            })
            .await?;
            self.errors.check(&self.spec.topic)?;
            self.pending.push(PendingTransaction {
                subtask: self.subtask,
                checkpoint_id: barrier.id,
                records: std::mem::take(&mut self.current),
            });
            self.written_first = true;
            self.in_transaction = false;
        } else if !self.buffered.is_empty() {
            self.pending.push(PendingTransaction {
                subtask: self.subtask,
                checkpoint_id: barrier.id,
                records: std::mem::take(&mut self.buffered),
            });
        }
        let mut items = vec![postcard::to_stdvec(&SinkStateItem::Subtask {
            subtask: self.subtask,
            parallelism: self.parallelism,
        })?];
        for t in &self.pending {
            items.push(postcard::to_stdvec(&SinkStateItem::Pending(t.clone()))?);
        }
        Ok(Some(Box::new(move || {
            Ok(EncodedState {
                incremental: None,
                state_names: vec!["operator:kafka-transactions".into()],
                key_group_range: None,
                key_groups: vec![],
                operator_state: items,
                key_group_stream: None,
            })
        })))
    }

    async fn notify_complete(&mut self, id: u64) -> TaskResult<()> {
        if !self.exactly_once() {
            return Ok(());
        }
        let group = marker_group(&self.prefix, self.subtask);
        while self.pending.first().is_some_and(|t| t.checkpoint_id <= id) {
            let t = self.pending.remove(0);
            if std::mem::take(&mut self.written_first) {
                self.commit_open(group.clone(), t.checkpoint_id).await?;
            } else {
                self.write_and_commit(&t.records, group.clone(), t.checkpoint_id)
                    .await?;
            }
        }
        if self.pending.is_empty() && !self.buffered.is_empty() {
            let records = std::mem::take(&mut self.buffered);
            self.write_open(records).await?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn record_partition_takes_integers_and_names_the_field_otherwise() {
        let cases: Vec<(Option<Datum>, Result<i32, &str>)> = vec![
            (Some(Datum::Int(0)), Ok(0)),
            (Some(Datum::Int(7)), Ok(7)),
            (Some(Datum::Str("3".into())), Ok(3)),
            (Some(Datum::Int(-1)), Err("0 to 2147483647")),
            (Some(Datum::Int(1 << 31)), Err("0 to 2147483647")),
            (Some(Datum::UInt(u64::MAX)), Err("0 to 2147483647")),
            (Some(Datum::Str("x".into())), Err("not a partition number")),
            (Some(Datum::Float(1.5)), Err("not a partition number")),
            (Some(Datum::Null), Err("the record has no `p`")),
            (None, Err("the record has no `p`")),
        ];
        for (value, want) in cases {
            let got = record_partition("p", value.as_ref());
            match (&got, want) {
                (Ok(p), Ok(w)) => assert_eq!(*p, w, "{value:?}"),
                (Err(e), Err(w)) => assert!(e.contains(w) && e.contains("`p`"), "{value:?}: {e}"),
                _ => panic!("{value:?}: got {got:?}, want {want:?}"),
            }
        }
    }
}
