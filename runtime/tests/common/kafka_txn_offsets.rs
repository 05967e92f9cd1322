//! A broker probe of what the exactly-once Kafka sink's commit marker needs: the consumer-group
//! offsets a transaction commits (`send_offsets_to_transaction`, KIP-98) become visible when,
//! and because, that transaction commits, whatever other producers do. It reproduces the
//! sink's conditions (runtime/src/operators/sink_kafka.rs): two transactional producers
//! writing interleaved into the same partition, one committing records and offsets while the
//! other's transaction is still open, then beginning its next transaction, which a restore
//! fences (aborts).
//!
//! Kafka: once `EndTxn(commit)` returns, the transaction is decided; its offsets are written
//! with its markers, and an OffsetFetch with `require_stable` (librdkafka sends it for a
//! `read_committed` consumer's `committed()`) waits (`UNSTABLE_OFFSET_COMMIT`) until they are.
//! Nothing another producer does, nor the abort of the committing producer's *next*
//! transaction, can take them back. tansu 510f3e2 (the CI broker) defers the offsets of a
//! transaction whose records overlap another still-open transaction's records in a partition
//! (`DynoStore::txn_end`: "overlapping transactions" must all be prepared), and the committing
//! producer's next transaction takes them over; when that one aborts, they are lost while the
//! records stay committed (docs/runtime/kafka-test-broker.md).

use super::kafka::{committed_offsets, create_topic, unique};
use super::kafka_log::{committed_view, read_partition_log};
use rdkafka::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{Offset, TopicPartitionList};
use std::time::Duration;

const TIMEOUT: Duration = Duration::from_secs(30);

/// What the probe saw: the committing group's offset (`None`: nothing committed) read as the
/// sink reads its marker, at each step, and the partition's committed view.
#[derive(Debug)]
pub struct TxnOffsetsProbe {
    /// Right after producer A's `commit_transaction` returned (B's transaction still open).
    pub after_commit: Option<i64>,
    /// After A began its next transaction (one record written, left open; B committed
    /// before it with [`ProbeOrder::InterleavedNextAfterOtherCommits`]).
    pub after_next_begin: Option<i64>,
    /// After a new producer with A's id fenced A (aborting that next transaction) and B
    /// committed: nothing is open any more.
    pub after_fencing_and_other_commit: Option<i64>,
    /// The partition's committed view (values, sorted): A's and B's committed records.
    pub committed_records: Vec<String>,
}

fn transactional_producer(servers: &str, id: &str) -> BaseProducer {
    let p: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", servers)
        .set("transactional.id", id)
        .create()
        .unwrap();
    p.init_transactions(TIMEOUT).unwrap();
    p
}

fn send(p: &BaseProducer, topic: &str, value: &str) {
    p.send(BaseRecord::<(), str>::to(topic).payload(value).partition(0))
        .unwrap();
    p.flush(TIMEOUT).unwrap();
}

/// The group offset of partition 0 of `topic` read as the sink reads its commit marker: a
/// fresh `read_committed` consumer (librdkafka then sets `require_stable`).
fn marker(servers: &str, group: &str, topic: &str) -> Option<i64> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", servers)
        .set("group.id", group)
        .set("isolation.level", "read_committed")
        .create()
        .unwrap();
    let mut list = TopicPartitionList::new();
    list.add_partition(topic, 0);
    match consumer.committed_offsets(list, TIMEOUT).unwrap().elements()[0].offset() {
        Offset::Offset(n) if n >= 0 => Some(n),
        _ => None,
    }
}

/// How the probe orders its steps.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProbeOrder {
    /// B writes `b1` only after A's commit: no open transaction of B overlaps A's records.
    Apart,
    /// `a1`, `b1`, `a2` interleaved; A begins its next transaction while B's is still open
    /// (what the sink did before it waited for its marker).
    InterleavedNextBeforeOtherCommits,
    /// `a1`, `b1`, `a2` interleaved; B commits before A begins its next transaction (what the
    /// sink does now: no new transaction until its marker is visible).
    InterleavedNextAfterOtherCommits,
}

/// Runs the probe on a new one-partition topic: producers A and B (own transactional ids)
/// each begin a transaction and write `a1`, `a2` and `b1` in the order `order` says; A commits
/// offset 7 for its group inside its transaction and commits; A begins its next transaction
/// (`a3`); a new producer with A's id fences A (aborting it); B commits (before A's next
/// transaction with [`ProbeOrder::InterleavedNextAfterOtherCommits`]). Kafka gives `Some(7)`
/// at every step and the committed records `a1, a2, b1` in every order.
pub fn probe_transaction_offsets(servers: &str, order: ProbeOrder) -> TxnOffsetsProbe {
    let topic = unique("weir-txn-offsets");
    let group = unique("weir-txn-offsets-group");
    create_topic(servers, &topic, 1);
    let (id_a, id_b) = (unique("weir-txn-a"), unique("weir-txn-b"));
    let a = transactional_producer(servers, &id_a);
    let b = transactional_producer(servers, &id_b);
    a.begin_transaction().unwrap();
    b.begin_transaction().unwrap();
    send(&a, &topic, "a1");
    if order != ProbeOrder::Apart {
        send(&b, &topic, "b1");
    }
    send(&a, &topic, "a2");
    let metadata = ClientConfig::new()
        .set("bootstrap.servers", servers)
        .set("group.id", &group)
        .create::<BaseConsumer>()
        .unwrap()
        .group_metadata()
        .unwrap();
    let mut offsets = TopicPartitionList::new();
    offsets.add_partition_offset(&topic, 0, Offset::Offset(7)).unwrap();
    a.send_offsets_to_transaction(&offsets, &metadata, TIMEOUT).unwrap();
    a.commit_transaction(TIMEOUT).unwrap();
    let after_commit = marker(servers, &group, &topic);
    if order == ProbeOrder::Apart {
        send(&b, &topic, "b1");
    }
    if order == ProbeOrder::InterleavedNextAfterOtherCommits {
        b.commit_transaction(TIMEOUT).unwrap();
    }
    a.begin_transaction().unwrap();
    send(&a, &topic, "a3");
    let after_next_begin = marker(servers, &group, &topic);
    drop(transactional_producer(servers, &id_a)); // fences A: its open transaction is aborted
    if order != ProbeOrder::InterleavedNextAfterOtherCommits {
        b.commit_transaction(TIMEOUT).unwrap();
    }
    let after_fencing_and_other_commit = marker(servers, &group, &topic);
    // The plain (non-`read_committed`) read of the group agrees (tansu ignores require_stable).
    assert_eq!(
        committed_offsets(servers, &group, &topic, 1)[0].filter(|n| *n >= 0),
        after_fencing_and_other_commit
    );
    let (values, _) = committed_view(&read_partition_log(servers, &topic, 0).batches);
    let mut committed_records: Vec<String> = values.into_iter().map(|v| String::from_utf8(v).unwrap()).collect();
    committed_records.sort();
    TxnOffsetsProbe {
        after_commit,
        after_next_begin,
        after_fencing_and_other_commit,
        committed_records,
    }
}

/// Whether the broker still commits a transaction's offsets with it in `topic`'s partitions:
/// a probe producer (its own transactional id, nothing else open) writes one record into each
/// of the `partitions` and commits offset 1 for its own group inside the transaction; the
/// offset must read back within 5 s. Call it only once nothing else writes `topic`.
///
/// Kafka: always true. tansu 510f3e2 can lose the ability for good: its `txn_end` finalizes
/// the overlapping transactions of the one ending (state `Committed`, record ranges cleared)
/// while one of them may still be writing its own COMMIT markers, which add record ranges
/// back to a transaction already `Committed`; such a transaction is never "prepared" again, so
/// every later transaction with records in those partitions waits for it for ever and its
/// offsets are never committed (docs/runtime/kafka-test-broker.md). A test whose output went
/// through such partitions cannot tell the sink's exactly-once from the broker's losses.
pub fn broker_still_commits_transaction_offsets(servers: &str, topic: &str, partitions: i32) -> bool {
    let group = unique("weir-offsets-probe");
    let producer = transactional_producer(servers, &unique("weir-offsets-probe"));
    producer.begin_transaction().unwrap();
    for partition in 0..partitions {
        producer
            .send(
                BaseRecord::<(), str>::to(topic)
                    .payload("weir-offsets-probe")
                    .partition(partition),
            )
            .unwrap();
    }
    producer.flush(TIMEOUT).unwrap();
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", servers)
        .set("group.id", &group)
        .create()
        .unwrap();
    let mut offsets = TopicPartitionList::new();
    offsets.add_partition_offset(topic, 0, Offset::Offset(1)).unwrap();
    producer
        .send_offsets_to_transaction(&offsets, &consumer.group_metadata().unwrap(), TIMEOUT)
        .unwrap();
    producer.commit_transaction(TIMEOUT).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while std::time::Instant::now() < deadline {
        if marker(servers, &group, topic) == Some(1) {
            return true;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    false
}
