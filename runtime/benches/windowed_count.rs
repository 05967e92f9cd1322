//! Windowed count against the running count, measured in the same run (issue 13).
//!
//! Both jobs read the same generator (seeded, 1,000 keys), key by `key` and write to a file
//! sink with exactly-once checkpoints every second, at parallelism 1 and 2:
//! - running count: `count` emits one update per record;
//! - windowed count: the generator's `id` is the event time (epoch ms, so 1,000 records per
//!   second of event time), 10 s tumbling windows (`maxOutOfOrderness: 40s`, above the
//!   generator's round-robin disorder of 32 splits × 1,024 records), one result per key and
//!   window.
//!
//! Prints records/s of each and the ratio windowed / running at the same parallelism.
//!
//! Run: `cargo bench -p weir-runtime --bench windowed_count`. Environment: `WEIR_BENCH_RECORDS`
//! (input size; default 2,000,000).

use std::time::Instant;
use weir_runtime::checkpoint::restore::RestoreFrom;
use weir_runtime::exec::{RunOptions, prepare};
use weir_runtime::job::parse_manifest;

/// The same allocator as the `weir` binary.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Runs a manifest to the end; returns records/s over `n` records, checking that the tasks
/// whose name starts with `counted_task` received exactly `n` and that no window dropped a
/// record as late.
fn run(manifest: &str, n: u64, counted_task: &str) -> f64 {
    let job = parse_manifest(manifest, &[]).expect("bench manifest");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let t = Instant::now();
        let prepared = prepare(
            job,
            RunOptions {
                restore: RestoreFrom::None,
                checkpoint_storage: None,
                state_dir: None,
            },
        )
        .await
        .unwrap();
        let handle = prepared.handle.clone();
        prepared.run().await.unwrap();
        let secs = t.elapsed().as_secs_f64();
        let counted: u64 = handle
            .tasks
            .iter()
            .filter(|t| t.0.starts_with(counted_task))
            .map(|t| t.2.records_in.load(std::sync::atomic::Ordering::Relaxed))
            .sum();
        assert_eq!(counted, n, "every record reached the aggregation once");
        let late: u64 = handle
            .tasks
            .iter()
            .map(|t| t.2.late_records_dropped.load(std::sync::atomic::Ordering::Relaxed))
            .sum();
        assert_eq!(late, 0, "no record is late: the bound covers the generator's disorder");
        n as f64 / secs
    })
}

/// Records/s of the job at parallelism `p` with `aggregation` (a step's YAML) after the keyBy.
fn job(n: u64, p: u32, dir: &std::path::Path, name: &str, event_time: &str, aggregation: &str) -> f64 {
    let manifest = format!(
        r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: {name} }}
spec:
  parallelism: {p}
  checkpointing: {{ interval: 1s, storage: "{d}/checkpoints" }}
  job:
    steps:
      - source: {{ generator: {{ seed: 42, count: {n}, keys: 1000 }}{event_time} }}
      - keyBy: {{ expression: key, as: key }}
      - uid: agg
        {aggregation}
      - sink: {{ file: {{ path: "{d}/{name}-p{p}" }} }}
"#,
        d = dir.display()
    );
    run(&manifest, n, "agg")
}

fn main() {
    let n: u64 = std::env::var("WEIR_BENCH_RECORDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2_000_000);
    let dir = tempfile::tempdir().unwrap();
    println!("windowed vs running count, {n} records, 1000 keys");
    println!("{:<44} {:>14} {:>22}", "run", "records/s", "windowed / running");
    for p in [1u32, 2] {
        let running = job(n, p, dir.path(), "running", "", "count: {}");
        let windowed = job(
            n,
            p,
            dir.path(),
            "windowed",
            ", eventTime: { field: id, maxOutOfOrderness: 40s }",
            "window: { type: tumbling, size: 10s }",
        );
        println!("{:<44} {running:>14.0} {:>22}", format!("running count p={p}"), "");
        println!(
            "{:<44} {windowed:>14.0} {:>22.2}",
            format!("windowed count (10 s tumbling) p={p}"),
            windowed / running
        );
    }
}
