//! Aligned vs unaligned checkpoints vs the alignment timeout under backpressure, measured in
//! the same run (issue 11).
//!
//! The job: two unbounded generators (1,000 keys each) merged by a `union`, keyed by `key`,
//! counted, into a discard sink slowed to a fixed rate (`maxRecordsPerSecond`, per subtask),
//! at parallelism 2 with checkpoints every 500 ms. The sources produce far more than the sink
//! takes, so every channel stays full. The same job runs three times in one process (`weir
//! run`'s code path, `exec::prepare`), changing only `checkpointing`:
//! - aligned (exactly-once, the default);
//! - unaligned (`unaligned: true`);
//! - alignment timeout (`unaligned: true, alignedCheckpointTimeout: 1s`).
//!
//! Each run is measured over a window after a warm-up, then suspended (as on SIGTERM).
//! Printed per run:
//! - checkpoint duration (trigger to `_metadata`, ms): mean and max over the checkpoints
//!   triggered in the window, and how many completed;
//! - end-to-end latency (s) by Little's law: the mean number of records in flight (emitted by
//!   the generators, not yet received by the count subtasks; sampled every 100 ms) over the
//!   sink's throughput in the window (records/s). Each generator record reaches the count
//!   once, so the two counts are comparable;
//! - the ratios of both to the aligned run's.
//!
//! Run: `cargo bench -p weir-runtime --bench unaligned_checkpoints` (or, without a release
//! build, `cargo test -p weir-runtime --bench unaligned_checkpoints`: the sink's rate, not
//! the build, sets the pace). Environment: `WEIR_BENCH_SINK_RATE` (records/s per sink
//! subtask, default 5,000), `WEIR_BENCH_SECONDS` (window, default 20), `WEIR_BENCH_WARMUP`
//! (seconds, default 3).

use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};
use weir_runtime::checkpoint::restore::RestoreFrom;
use weir_runtime::exec::{JobHandle, RunOptions, prepare};
use weir_runtime::job::parse_manifest;

/// The same allocator as the `weir` binary.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// What one run measured.
struct Measured {
    /// Checkpoints triggered in the window and completed.
    completed: usize,
    /// Mean and max checkpoint duration of those, ms (`None` when none completed).
    duration_ms: Option<(f64, u64)>,
    /// Age of the checkpoint still in flight at the end of the window, ms, if any.
    in_flight_ms: Option<u64>,
    /// Records/s received by the count subtasks in the window.
    throughput: f64,
    /// Mean records in flight between the generators and the count subtasks.
    in_flight_records: f64,
    /// Whether the completed checkpoints were unaligned (the last one's flag) and its channel
    /// state bytes.
    last_alignment: Option<(bool, u64)>,
}

impl Measured {
    /// End-to-end latency by Little's law, s.
    fn latency_s(&self) -> f64 {
        self.in_flight_records / self.throughput.max(1.0)
    }
}

fn sum(handle: &JobHandle, prefix: &str, out: bool) -> u64 {
    handle
        .tasks
        .iter()
        .filter(|t| t.0.starts_with(prefix))
        .map(|t| {
            if out {
                t.2.records_out.load(Ordering::Relaxed)
            } else {
                t.2.records_in.load(Ordering::Relaxed)
            }
        })
        .sum()
}

fn manifest(dir: &std::path::Path, name: &str, checkpointing: &str, rate: u64) -> String {
    format!(
        r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: {name} }}
spec:
  parallelism: 2
  checkpointing: {{ interval: 500ms, storage: "{d}/checkpoints"{checkpointing} }}
  job:
    steps:
      - {{ name: a, uid: gen-a, source: {{ generator: {{ seed: 1, keys: 1000 }} }} }}
      - {{ name: b, uid: gen-b, source: {{ generator: {{ seed: 2, keys: 1000 }} }} }}
      - {{ uid: merged, union: {{}}, inputs: [a, b] }}
      - keyBy: {{ expression: key, as: key }}
      - {{ uid: counts, count: {{}} }}
      - sink: {{ discard: {{ maxRecordsPerSecond: {rate} }} }}
"#,
        d = dir.display()
    )
}

fn measure(manifest: &str, warmup: Duration, window: Duration) -> Measured {
    let job = parse_manifest(manifest, &[]).expect("bench manifest");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
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
        let run = tokio::spawn(prepared.run());
        tokio::time::sleep(warmup).await;
        let start_ms = weir_runtime::checkpoint::now_ms();
        let received_before = sum(&handle, "counts", false);
        let t = Instant::now();
        let (mut samples, mut in_flight_sum) = (0u64, 0f64);
        while t.elapsed() < window {
            tokio::time::sleep(Duration::from_millis(100)).await;
            let emitted = sum(&handle, "gen-", true);
            let received = sum(&handle, "counts", false);
            in_flight_sum += emitted.saturating_sub(received) as f64;
            samples += 1;
        }
        let secs = t.elapsed().as_secs_f64();
        let received = sum(&handle, "counts", false) - received_before;
        let end_ms = weir_runtime::checkpoint::now_ms();
        let (completed, duration_ms, in_flight_ms, last_alignment) = {
            let shared = handle.shared.lock().unwrap();
            let done: Vec<_> = shared
                .history
                .completed
                .iter()
                .filter(|c| c.triggered_at_ms >= start_ms)
                .collect();
            let duration = (!done.is_empty()).then(|| {
                let total: u64 = done.iter().map(|c| c.duration_ms).sum();
                let max = done.iter().map(|c| c.duration_ms).max().unwrap_or(0);
                (total as f64 / done.len() as f64, max)
            });
            let last = done
                .last()
                .map(|c| (c.alignment.unaligned, c.alignment.channel_state_bytes));
            // The in-flight checkpoint's age: from the newest completion's end, or the window's
            // start, whichever is later (a lower bound: its trigger time is not shared).
            let in_flight = shared.history.in_progress.map(|_| {
                let since = done.last().map_or(start_ms, |c| c.completed_at_ms.max(start_ms));
                end_ms.saturating_sub(since)
            });
            (done.len(), duration, in_flight, last)
        };
        handle.shared.lock().unwrap().suspend.cancel();
        let _ = run.await;
        Measured {
            completed,
            duration_ms,
            in_flight_ms,
            throughput: received as f64 / secs,
            in_flight_records: in_flight_sum / samples.max(1) as f64,
            last_alignment,
        }
    })
}

fn env(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

fn main() {
    let rate = env("WEIR_BENCH_SINK_RATE", 5_000);
    let window = Duration::from_secs(env("WEIR_BENCH_SECONDS", 20));
    let warmup = Duration::from_secs(env("WEIR_BENCH_WARMUP", 3));
    let dir = tempfile::tempdir().unwrap();
    println!(
        "union of two generators -> keyBy -> count -> discard at {rate} records/s per subtask, p=2, \
         checkpoints every 500 ms; {window:?} window after {warmup:?}"
    );
    let runs = [
        ("aligned", ""),
        ("unaligned", ", unaligned: true"),
        (
            "alignment timeout 1s",
            ", unaligned: true, alignedCheckpointTimeout: 1s",
        ),
    ];
    let mut results = vec![];
    for (i, (name, checkpointing)) in runs.iter().enumerate() {
        let m = manifest(dir.path(), &format!("bench-{i}"), checkpointing, rate);
        results.push((name, measure(&m, warmup, window)));
    }
    let baseline = &results[0].1;
    println!(
        "{:<22} {:>9} {:>12} {:>10} {:>14} {:>11} {:>10} {:>13} {:>11}",
        "run",
        "completed",
        "mean ms",
        "max ms",
        "in flight ms",
        "records/s",
        "latency s",
        "duration / al",
        "latency / al"
    );
    for (name, r) in &results {
        let (mean, max) = r.duration_ms.unwrap_or((f64::NAN, 0));
        let duration_ratio = match (r.duration_ms, baseline.duration_ms) {
            (Some((m, _)), Some((b, _))) => format!("{:.2}", m / b),
            _ => "-".into(),
        };
        println!(
            "{:<22} {:>9} {:>12.0} {:>10} {:>14} {:>11.0} {:>10.2} {:>13} {:>11.2}",
            name,
            r.completed,
            mean,
            max,
            r.in_flight_ms.map_or("-".into(), |ms| ms.to_string()),
            r.throughput,
            r.latency_s(),
            duration_ratio,
            r.latency_s() / baseline.latency_s()
        );
        if let Some((unaligned, bytes)) = r.last_alignment {
            println!("    last checkpoint: unaligned {unaligned}, channel state {bytes} bytes");
        }
    }
}
