//! Kafka helpers of the tests that need a broker (runtime/tests/kafka*.rs): the broker's
//! address, topics, producing and reading records.

use rdkafka::admin::{AdminClient, AdminOptions, NewPartitions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::Message;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use std::time::{Duration, Instant};

/// The broker address, or `None` (locally, with a message) when nothing listens there.
pub fn broker() -> Option<String> {
    let addr = std::env::var("WEIR_TEST_KAFKA").unwrap_or_else(|_| "127.0.0.1:9092".into());
    let reachable = addr
        .parse()
        .ok()
        .is_some_and(|a| std::net::TcpStream::connect_timeout(&a, Duration::from_secs(2)).is_ok());
    if reachable {
        return Some(addr);
    }
    let message = format!(
        "no Kafka broker at {addr} (WEIR_TEST_KAFKA): start one, e.g. `tansu broker --storage-engine memory://tansu/ \
         --kafka-listener-url tcp://127.0.0.1:9092 --kafka-advertised-listener-url tcp://127.0.0.1:9092` (see .ci/run)"
    );
    assert!(std::env::var("CI").as_deref() != Ok("true"), "{message}");
    eprintln!("kafka tests did nothing: {message}");
    None
}

pub fn unique(name: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{name}-{}-{nanos}", std::process::id())
}

pub fn create_topic(servers: &str, topic: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", servers).create().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let results = rt
        .block_on(admin.create_topics(
            &[NewTopic::new(topic, partitions, TopicReplication::Fixed(1))],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        ))
        .unwrap();
    for r in results {
        r.unwrap_or_else(|(t, e)| panic!("creating topic {t}: {e}"));
    }
}

/// Every record of `topic` (all partitions, from offset 0) as `isolation` reads it; sorted.
/// Reads to the end of every partition ([`read_to_the_end`]).
pub fn read_topic(servers: &str, topic: &str, isolation: &str, at_least: usize) -> Vec<String> {
    let mut out: Vec<String> = read_to_the_end(servers, topic, isolation, at_least)
        .into_iter()
        .map(|c| c.value)
        .collect();
    out.sort();
    out
}

/// Every message of `topic` from offset 0 of every partition, read with `isolation` until
/// every partition has reached its end (librdkafka's partition EOF: the high watermark, or
/// the last stable offset for `read_committed`, of the broker's fetch responses) with no
/// message after it, and at least `at_least` were read (or 120 s passed). For a topic whose
/// writers have ended, so the end is where the log ends; no idle timer decides it.
///
/// Why offset 0 and not `Offset::Beginning`: `Beginning` asks the broker (ListOffsets,
/// earliest), and tansu answers with the base offset of the batch it *stored first*
/// (`DynoStore::list_offsets`, the oldest `last_modified`), not the log start: when two
/// producers write a partition's first batches at once, the batch at offset 0 can be stored
/// after a later one, and a consumer from `Beginning` then skips it
/// (docs/runtime/kafka-test-broker.md, "tansu's ListOffsets"). The test topics are fresh
/// (nothing deleted), so their log starts at 0 on every broker.
pub fn read_to_the_end(servers: &str, topic: &str, isolation: &str, at_least: usize) -> Vec<Consumed> {
    use std::collections::BTreeSet;
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", servers)
        .set("group.id", unique("weir-test-reader"))
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "true")
        .set("isolation.level", isolation)
        .create()
        .unwrap();
    let metadata = consumer.fetch_metadata(Some(topic), Duration::from_secs(30)).unwrap();
    let partitions: BTreeSet<i32> = metadata.topics()[0].partitions().iter().map(|p| p.id()).collect();
    let mut list = TopicPartitionList::new();
    for &p in &partitions {
        list.add_partition_offset(topic, p, Offset::Offset(0)).unwrap();
    }
    consumer.assign(&list).unwrap();
    let mut out = vec![];
    let mut at_end = BTreeSet::new();
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(120) && (out.len() < at_least || at_end != partitions) {
        match consumer.poll(Duration::from_millis(200)) {
            None => {}
            Some(Err(rdkafka::error::KafkaError::PartitionEOF(p))) => {
                at_end.insert(p);
            }
            Some(Err(e)) => panic!("reading topic {topic}: {e}"),
            Some(Ok(m)) => {
                at_end.remove(&m.partition());
                out.push(Consumed {
                    partition: m.partition(),
                    key: m.key().map(|k| String::from_utf8_lossy(k).into_owned()),
                    value: String::from_utf8(m.payload().unwrap_or_default().to_vec()).unwrap(),
                });
            }
        }
    }
    out
}

/// Grows `topic` to `total` partitions.
pub fn add_partitions(servers: &str, topic: &str, total: usize) {
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", servers).create().unwrap();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let results = rt
        .block_on(admin.create_partitions(
            &[NewPartitions::new(topic, total)],
            &AdminOptions::new().operation_timeout(Some(Duration::from_secs(30))),
        ))
        .unwrap();
    for r in results {
        r.unwrap_or_else(|(t, e)| panic!("adding partitions to {t}: {e}"));
    }
}

/// One record to produce: value, key, partition, timestamp (ms).
pub struct Produced {
    pub value: String,
    pub key: Option<String>,
    pub partition: i32,
    pub timestamp_ms: i64,
}

/// Produces `records`, one per batch (tansu answers ListOffsets (latest) with the base
/// offset of the batch it stored last + 1, which would cut a bounded source short).
pub fn produce(servers: &str, topic: &str, records: &[Produced]) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", servers)
        .set("linger.ms", "0")
        .set("batch.num.messages", "1")
        .create()
        .unwrap();
    for r in records {
        loop {
            let mut base = BaseRecord::<str, str>::to(topic)
                .payload(&r.value)
                .partition(r.partition)
                .timestamp(r.timestamp_ms);
            if let Some(k) = &r.key {
                base = base.key(k);
            }
            match producer.send(base) {
                Ok(()) => break,
                Err(_) => {
                    producer.poll(Duration::from_millis(10));
                }
            }
        }
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(60)).unwrap();
}

/// A record as a consumer of the output reads it.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Consumed {
    pub partition: i32,
    pub key: Option<String>,
    pub value: String,
}

/// Every record of `topic` with its partition and key (read_committed, librdkafka's default,
/// from offset 0 to the end of every partition, [`read_to_the_end`]); sorted.
pub fn read_topic_records(servers: &str, topic: &str, at_least: usize) -> Vec<Consumed> {
    let mut out = read_to_the_end(servers, topic, "read_committed", at_least);
    out.sort();
    out
}

/// The offsets consumer group `group` has committed for partitions `0..partitions` of
/// `topic` (`None`: nothing committed).
pub fn committed_offsets(servers: &str, group: &str, topic: &str, partitions: i32) -> Vec<Option<i64>> {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", servers)
        .set("group.id", group)
        .create()
        .unwrap();
    let mut list = TopicPartitionList::new();
    for p in 0..partitions {
        list.add_partition(topic, p);
    }
    let got = consumer.committed_offsets(list, Duration::from_secs(30)).unwrap();
    got.elements()
        .iter()
        .map(|e| match e.offset() {
            Offset::Offset(n) => Some(n),
            _ => None,
        })
        .collect()
}

/// Commits `offsets` (partition, next offset) of `topic` for consumer group `group`.
pub fn commit_offsets(servers: &str, group: &str, topic: &str, offsets: &[(i32, i64)]) {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", servers)
        .set("group.id", group)
        .create()
        .unwrap();
    let mut list = TopicPartitionList::new();
    for &(p, o) in offsets {
        list.add_partition_offset(topic, p, Offset::Offset(o)).unwrap();
    }
    consumer.commit(&list, rdkafka::consumer::CommitMode::Sync).unwrap();
}
