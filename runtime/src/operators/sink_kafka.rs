//! The Kafka sink: exactly-once through transactions (two-phase commit, protocol in
//! [`super::sink_kafka_recovery`]), at-least-once (flush at every barrier) or none.
//!
//! Broker calls that block (init, flush, offsets, commit) run on tokio's blocking pool; the
//! producer's background thread serves delivery reports, and the first failed delivery fails
//! the subtask at the next record batch, flush or commit.

use super::sink_kafka_broker::{
    BROKER_TIMEOUT, DeliveryErrors, KafkaProducer, Restored, blocking, kafka_error, producer_config, read_marker,
    read_markers, recover, send, send_marker,
};
use super::sink_kafka_recovery::{
    KafkaRecord, PendingTransaction, SinkStateItem, UnconfirmedMarker, completion_plan, decides_restored, marker_group,
    merge_markers, replay_markers, still_unconfirmed, to_replay,
};
use super::{EncodedState, OperatorRestore, SnapshotEncoder, StreamOperator, TaskError, TaskResult};
use crate::checkpoint::Barrier;
use crate::job::{DeliveryGuarantee, KafkaSinkSpec};
use crate::record::json::write_json_line;
use crate::record::{Datum, Record};
use async_trait::async_trait;
use rdkafka::producer::Producer;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::{Duration, Instant};

/// How often `process` reads the markers back while a new transaction waits for them.
const MARKER_READ_INTERVAL: Duration = Duration::from_millis(50);
/// How long the commit at a checkpoint's completion waits for the markers committed before it
/// to read back before it writes the due transactions anyway (with a warning). Apache Kafka
/// shows a marker on the first read after its commit; tansu defers it while another subtask's
/// transaction that began before the commit is open, which can be its transaction of the next
/// checkpoint, and that one cannot end while this subtask waits here.
const MARKER_WAIT_AT_COMPLETION: Duration = Duration::from_secs(5);

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
    /// Exactly-once: records that arrived while a pre-committed transaction awaits its commit
    /// or while no transaction may begin (`unconfirmed` markers).
    buffered: Vec<KafkaRecord>,
    /// Exactly-once: markers committed and not yet read back; no transaction begins until
    /// this is empty ([`super::sink_kafka_recovery`], "read back").
    unconfirmed: Vec<UnconfirmedMarker>,
    /// When the markers were last read back.
    last_marker_read: Option<Instant>,
    /// Exactly-once: the restore point's pending transactions this subtask adopted, until the
    /// first commit decides them (their markers are read then, once every subtask has fenced
    /// its ids); kept in every snapshot until then.
    restored: Restored,
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
        let (producer, restored) = if exactly_once {
            let (spec, prefix, errors) = (spec.clone(), prefix.clone(), errors.clone());
            blocking("recovery", move || {
                recover(&spec, &prefix, subtask, parallelism, &restore.operator_state, errors)
            })
            .await?
        } else {
            let producer = producer_config(spec, None)
                .create_with_context(errors.clone())
                .map_err(kafka_error("creating a producer"))?;
            let restored = Restored {
                adopted: Vec::new(),
                pending: Vec::new(),
                old_parallelism: 0,
            };
            (producer, restored)
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
            unconfirmed: Vec::new(),
            last_marker_read: None,
            restored,
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

    /// Whether a transaction may begin: every marker committed before reads back at or above
    /// its checkpoint. Reads them (a fresh `read_committed` consumer per group) unless none
    /// is unconfirmed or, without `now`, they were read less than [`MARKER_READ_INTERVAL`] ago.
    async fn markers_read_back(&mut self, now: bool) -> TaskResult<bool> {
        if self.unconfirmed.is_empty() {
            return Ok(true);
        }
        if !now
            && self
                .last_marker_read
                .is_some_and(|t| t.elapsed() < MARKER_READ_INTERVAL)
        {
            return Ok(false);
        }
        let (spec, groups) = (
            self.spec.clone(),
            self.unconfirmed.iter().map(|m| m.group.clone()).collect::<Vec<_>>(),
        );
        let read = blocking("reading the commit markers back", move || {
            groups
                .into_iter()
                .map(|g| read_marker(&spec, &g).map(|c| (g, c)))
                .collect::<TaskResult<BTreeMap<_, _>>>()
        })
        .await?;
        self.last_marker_read = Some(Instant::now());
        self.unconfirmed = still_unconfirmed(&self.unconfirmed, &read);
        Ok(self.unconfirmed.is_empty())
    }

    /// Waits until [`Self::markers_read_back`], reading every [`MARKER_READ_INTERVAL`] for up
    /// to [`MARKER_WAIT_AT_COMPLETION`]; then goes on with a warning (a transaction begun now
    /// may, on tansu, carry the older marker: docs/runtime/kafka-test-broker.md).
    async fn wait_for_markers(&mut self) -> TaskResult<()> {
        let started = Instant::now();
        while !self.markers_read_back(true).await? {
            if started.elapsed() >= MARKER_WAIT_AT_COMPLETION {
                tracing::warn!(
                    subtask = self.subtask,
                    markers = ?self.unconfirmed,
                    "Kafka sink: the commit markers did not read back within {MARKER_WAIT_AT_COMPLETION:?} \
                     (the broker defers a committed transaction's offsets); writing the due transactions anyway"
                );
                self.unconfirmed.clear();
                return Ok(());
            }
            tokio::time::sleep(MARKER_READ_INTERVAL).await;
        }
        Ok(())
    }

    /// Writes, marks and commits one whole transaction from records (checkpointed buffers).
    async fn write_and_commit(&mut self, records: &[KafkaRecord], markers: Vec<UnconfirmedMarker>) -> TaskResult<()> {
        self.producer
            .begin_transaction()
            .map_err(kafka_error("beginning a transaction"))?;
        for r in records {
            send(&self.producer, &self.spec.topic, r).await?;
        }
        self.commit_open(markers).await
    }

    /// Pre-commits (flush + markers) and commits the open transaction.
    async fn commit_open(&mut self, markers: Vec<UnconfirmedMarker>) -> TaskResult<()> {
        let (producer, spec, sent) = (self.producer.clone(), self.spec.clone(), markers.clone());
        blocking("commit", move || {
            for m in &sent {
                send_marker(&producer, &spec, &m.group, m.checkpoint)?;
            }
            producer
                .commit_transaction(BROKER_TIMEOUT)
                .map_err(kafka_error(format!("committing the transaction of markers {sent:?}")))
        })
        .await?;
        self.errors.check(&self.spec.topic)?;
        self.unconfirmed.extend(markers);
        Ok(())
    }

    /// The marker of this subtask's own transaction of checkpoint `checkpoint`.
    fn own_marker(&self, checkpoint: u64) -> UnconfirmedMarker {
        UnconfirmedMarker {
            group: marker_group(&self.prefix, self.subtask),
            checkpoint,
        }
    }

    /// Decides the adopted transactions of the restore point (their markers are read now):
    /// the records to write again and the markers their transaction moves.
    async fn restored_replay(&mut self) -> TaskResult<(Vec<KafkaRecord>, Vec<UnconfirmedMarker>)> {
        let (spec, prefix, adopted) = (self.spec.clone(), self.prefix.clone(), self.restored.adopted.clone());
        let committed = blocking("reading the adopted commit markers", move || {
            read_markers(&spec, &prefix, &adopted)
        })
        .await?;
        let replay = to_replay(&self.restored.pending, &self.restored.adopted, &committed);
        for t in &replay {
            tracing::info!(
                subtask = self.subtask,
                from_subtask = t.subtask,
                checkpoint = t.checkpoint_id,
                records = t.records.len(),
                "Kafka sink: writing again a pre-committed transaction that was not committed"
            );
        }
        let markers = replay_markers(&self.prefix, &replay);
        let records = replay.into_iter().flat_map(|t| t.records.iter().cloned()).collect();
        Ok((records, markers))
    }
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
        } else if self.pending.is_empty() && (self.in_transaction || self.markers_read_back(false).await?) {
            let mut all = std::mem::take(&mut self.buffered);
            all.extend(records);
            self.write_open(all).await?;
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
        // Undecided adopted transactions stay in the state under their old subtask, with the
        // old parallelism, so that a restore adopts them again.
        let mut items = vec![postcard::to_stdvec(&SinkStateItem::Subtask {
            subtask: self.subtask,
            parallelism: self.parallelism.max(self.restored.old_parallelism),
        })?];
        for t in self.restored.pending.iter().chain(&self.pending) {
            items.push(postcard::to_stdvec(&SinkStateItem::Pending(t.clone()))?);
        }
        Ok(Some(Box::new(move || {
            Ok(EncodedState::operator_only("operator:kafka-transactions", items))
        })))
    }

    async fn notify_complete(&mut self, id: u64) -> TaskResult<()> {
        if !self.exactly_once() {
            return Ok(());
        }
        let checkpoints: Vec<u64> = self.pending.iter().map(|t| t.checkpoint_id).collect();
        let plan = completion_plan(&checkpoints, self.written_first, id);
        // The first commit of this attempt also decides the adopted transactions: every
        // subtask has fenced its ids by now (they all acknowledged checkpoint `id`).
        let decide_restored = decides_restored(
            !self.restored.adopted.is_empty(),
            plan,
            self.in_transaction || self.written_first,
        );
        let (mut replay, mut markers) = if decide_restored {
            self.restored_replay().await?
        } else {
            (Vec::new(), Vec::new())
        };
        if plan.commit_open {
            let t = self.pending.remove(0);
            self.written_first = false;
            for r in std::mem::take(&mut replay) {
                send(&self.producer, &self.spec.topic, &r).await?;
            }
            markers.push(self.own_marker(t.checkpoint_id));
            self.commit_open(merge_markers(std::mem::take(&mut markers))).await?;
        }
        if plan.write_together > 0 {
            self.wait_for_markers().await?;
            let due: Vec<PendingTransaction> = self.pending.drain(..plan.write_together).collect();
            let checkpoint = due.iter().map(|t| t.checkpoint_id).max().unwrap_or(id);
            replay.extend(due.into_iter().flat_map(|t| t.records));
            markers.push(self.own_marker(checkpoint));
            let records = std::mem::take(&mut replay);
            self.write_and_commit(&records, merge_markers(std::mem::take(&mut markers)))
                .await?;
        } else if !markers.is_empty() {
            // Nothing of this attempt is due and no transaction is open (none written, none
            // pre-committed): the adopted ones alone.
            let records = std::mem::take(&mut replay);
            self.write_and_commit(&records, merge_markers(std::mem::take(&mut markers)))
                .await?;
        }
        if decide_restored {
            self.restored = Restored {
                adopted: Vec::new(),
                pending: Vec::new(),
                old_parallelism: 0,
            };
        }
        if self.pending.is_empty() && !self.buffered.is_empty() && self.markers_read_back(true).await? {
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
