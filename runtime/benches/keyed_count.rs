//! Keyed count throughput: a generator source (seeded, 100k keys) → keyBy → count → file
//! sink, with exactly-once checkpoints every second to a local directory, at parallelism 1
//! and 2. Prints records/s and records/s per core, and the ratio against a baseline measured
//! in the same run: the same records counted in a plain `HashMap` on one thread with no
//! framework (no channels, no checkpoints, no output).
//!
//! Run: `cargo bench -p weir-runtime --bench keyed_count` (set WEIR_BENCH_RECORDS to change
//! the input size; default 2,000,000).

use std::collections::HashMap;
use std::time::Instant;
use weir_runtime::checkpoint::restore::RestoreFrom;
use weir_runtime::exec::{RunOptions, prepare};
use weir_runtime::job::parse_manifest;
use weir_runtime::operators::source::generator::record;

/// The same allocator as the `weir` binary.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const KEYS: u64 = 100_000;
const SEED: u64 = 42;

fn baseline(n: u64) -> f64 {
    let t = Instant::now();
    let mut counts: HashMap<String, u64> = HashMap::new();
    for i in 0..n {
        let r = record(SEED, i, KEYS);
        *counts.entry(r["key"].as_str().unwrap().to_string()).or_default() += 1;
    }
    assert_eq!(counts.values().sum::<u64>(), n);
    n as f64 / t.elapsed().as_secs_f64()
}

fn weir(n: u64, parallelism: u32, dir: &std::path::Path) -> f64 {
    let manifest = format!(
        r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: bench }}
spec:
  parallelism: {parallelism}
  checkpointing: {{ interval: 1s, storage: "{d}/checkpoints" }}
  job:
    steps:
      - source: {{ generator: {{ seed: {SEED}, count: {n}, keys: {KEYS} }} }}
      - keyBy: {{ expression: key, as: key }}
      - count: {{}}
      - sink: {{ file: {{ path: "{d}/output-p{parallelism}" }} }}
"#,
        d = dir.display()
    );
    let job = parse_manifest(&manifest, &[]).expect("bench manifest");
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
            },
        )
        .await
        .unwrap();
        let handle = prepared.handle.clone();
        prepared.run().await.unwrap();
        let secs = t.elapsed().as_secs_f64();
        let out: u64 = handle
            .tasks
            .iter()
            .filter(|t| t.0.starts_with("count"))
            .map(|t| t.2.records_in.load(std::sync::atomic::Ordering::Relaxed))
            .sum();
        assert_eq!(out, n, "every record counted once");
        n as f64 / secs
    })
}

fn main() {
    let n: u64 = std::env::var("WEIR_BENCH_RECORDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2_000_000);
    let cores = std::thread::available_parallelism().map(|c| c.get()).unwrap_or(1) as f64;
    let dir = tempfile::tempdir().unwrap();
    let base = baseline(n);
    println!("keyed count, {n} records, {KEYS} keys, {cores} cores");
    println!(
        "{:<34} {:>14} {:>16} {:>10}",
        "run", "records/s", "records/s/core", "vs base"
    );
    println!(
        "{:<34} {:>14.0} {:>16.0} {:>10.2}",
        "baseline: HashMap, 1 thread", base, base, 1.0
    );
    for p in [1u32, 2] {
        let r = weir(n, p, dir.path());
        let per_core = r / (p as f64).min(cores);
        println!(
            "{:<34} {:>14.0} {:>16.0} {:>10.2}",
            format!("weir p={p}, exactly-once, chk 1s"),
            r,
            per_core,
            r / base
        );
    }
}
