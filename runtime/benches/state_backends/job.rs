//! One keyed-count run in a child process of the bench: a generator over `keys` distinct
//! `key-<n>` strings → `keyBy` → `count` (or a 1-hour `window`) → `discard`, at parallelism
//! 1, on one state backend,
//! with checkpoints every `interval` (`0s`: only the final checkpoint of the bounded job), full
//! or incremental, to a local directory or an S3 bucket (moto).
//!
//! The child prints one JSON line ([`JobRun`]): records/s, its peak RSS above its RSS at start
//! (`VmHWM`, read before the store measurements), and per completed checkpoint the bytes it
//! uploaded (`size_bytes`: the state files written by that checkpoint plus `_metadata`; an
//! incremental checkpoint's referenced older files are not counted), its duration, and the
//! synchronous and asynchronous parts. With `--store`, it then measures the final checkpoint
//! against the raw store ([`crate::store`]).

use crate::rss::status_kib;
use crate::store::{StoreRun, measure_store};
use serde::{Deserialize, Serialize};
use std::time::Instant;
use weir_runtime::checkpoint::restore::RestoreFrom;
use weir_runtime::exec::{RunOptions, prepare};
use weir_runtime::job::parse_manifest;

/// The generator's seed (any fixed value: every run sees the same records).
const SEED: u64 = 42;

/// What the parent asks one child for.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct JobArgs {
    /// `heap` or `disk` (`spec.stateBackend`).
    pub backend: String,
    /// Distinct keys of the generator (`key-0` .. `key-<keys-1>`, drawn uniformly).
    pub keys: u64,
    /// Records generated.
    pub records: u64,
    /// Checkpoint interval, `1s` or `0s` (periodic checkpoints off).
    pub interval: String,
    /// `checkpointing.incremental` (a config switch: a backend that does not write deltas
    /// yet writes full checkpoints, and picks deltas up when it does).
    pub incremental: bool,
    /// Checkpoint storage URL (a local directory or `s3://bucket/prefix`).
    pub storage: String,
    /// Local directory of the disk backend's stores.
    pub state_dir: String,
    /// After the job: measure the final checkpoint against a raw upload and download.
    pub store: bool,
    /// The windowed job instead of the count ([`manifest`]).
    #[serde(default)]
    pub window: bool,
}

/// One completed checkpoint as the bench reports it.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct CheckpointRow {
    /// Bytes written by this checkpoint (state files plus `_metadata`).
    pub bytes: u64,
    /// Trigger to `_metadata` written, ms.
    pub duration_ms: u64,
    /// Longest synchronous part over subtasks, ms.
    pub sync_ms: u64,
    /// Longest asynchronous part (encode + upload) over subtasks, ms.
    pub async_ms: u64,
}

/// What one child reports.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct JobRun {
    /// Records per second over the whole run (start-up and the final checkpoint included).
    pub records_per_s: f64,
    /// Peak RSS above the child's RSS at start, MiB, over the job (not the store part).
    pub peak_mib: f64,
    /// Completed checkpoints, oldest first (the last is the bounded job's final one).
    pub checkpoints: Vec<CheckpointRow>,
    /// The store measurements (`--store`).
    pub store: Option<StoreRun>,
}

/// The job's manifest: the keyed count, or with `window` a 1-hour tumbling window count per
/// key in event time (the generator's `id`, so one record per millisecond of event time: 2M
/// records are 33 minutes, and the end of the input fires every key's window at once).
pub fn manifest(a: &JobArgs) -> String {
    let (event_time, step) = match a.window {
        true => (
            ", eventTime: { field: id, maxOutOfOrderness: 1s }",
            "{ uid: window, window: { type: tumbling, size: 1h } }",
        ),
        false => ("", "{ uid: count, count: {} }"),
    };
    format!(
        r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: bench-state }}
spec:
  parallelism: 1
  stateBackend: {backend}{disk_state}
  checkpointing: {{ interval: {interval}, storage: "{storage}", retained: 1, incremental: {incremental} }}
  job:
    steps:
      - source: {{ generator: {{ seed: {SEED}, count: {records}, keys: {keys} }}{event_time} }}
      - keyBy: {{ expression: key, as: key }}
      - {step}
      - sink: {{ discard: {{}} }}
"#,
        backend = a.backend,
        disk_state = disk_state(&a.backend),
        interval = a.interval,
        storage = a.storage,
        incremental = a.incremental,
        records = a.records,
        keys = a.keys,
    )
}

/// `spec.diskState` of a disk run from the environment: `WEIR_BENCH_DISK_STATE` (e.g.
/// `{writeBufferSize: 4Mi}`) is added as it is, so one invocation can be compared with
/// another at other memory settings; empty for heap runs or when unset.
fn disk_state(backend: &str) -> String {
    match std::env::var("WEIR_BENCH_DISK_STATE") {
        Ok(v) if backend == "disk" && !v.trim().is_empty() => format!("\n  diskState: {v}"),
        _ => String::new(),
    }
}

/// The child's body: runs the job, then (with `store`) the store measurements; prints the
/// [`JobRun`] as one JSON line.
pub fn child(a: &JobArgs) {
    if std::env::var_os("WEIR_BENCH_CHECKPOINT_DETAIL").is_some() {
        // Each state file's phases and each checkpoint's parts, on stderr: the parent passes
        // the lines on (`checkpoint breakdown`).
        let _ = tracing_subscriber::fmt()
            .with_env_filter("weir_runtime::checkpoint=debug,weir_runtime::state::write_back=debug")
            .with_writer(std::io::stderr)
            .with_ansi(false)
            .try_init();
    }
    let start_kib = status_kib("VmRSS");
    let job = parse_manifest(&manifest(a), &[]).expect("bench manifest");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .expect("tokio runtime");
    let threads = crate::threads::ThreadCpu::start();
    let whole = crate::usage::Probe::now();
    let run = rt.block_on(async {
        let t = Instant::now();
        let prepared = prepare(
            job,
            RunOptions {
                restore: RestoreFrom::None,
                checkpoint_storage: None,
                state_dir: Some(a.state_dir.clone().into()),
            },
        )
        .await
        .expect("prepare the bench job");
        let handle = prepared.handle.clone();
        prepared.run().await.expect("the bench job runs to the end");
        let secs = t.elapsed().as_secs_f64();
        // Where the job's CPU went (the parent passes `breakdown` lines on).
        eprintln!("job breakdown: {}", whole.until(&crate::usage::Probe::now()));
        eprintln!("job breakdown: CPU s per thread name: {}", threads.finish());
        let peak_mib = status_kib("VmHWM").saturating_sub(start_kib) as f64 / 1024.0;
        let stateful = if a.window { "window" } else { "count" };
        let counted: u64 = handle
            .tasks
            .iter()
            .filter(|t| t.0.starts_with(stateful))
            .map(|t| t.2.records_in.load(std::sync::atomic::Ordering::Relaxed))
            .sum();
        assert_eq!(counted, a.records, "every record counted once");
        let completed = handle.shared.lock().expect("lock").history.completed.clone();
        let last = completed.last().expect("the bounded job's final checkpoint").clone();
        let checkpoints = completed
            .iter()
            .map(|c| CheckpointRow {
                bytes: c.size_bytes,
                duration_ms: c.duration_ms,
                sync_ms: c.max_sync_ms,
                async_ms: c.max_async_ms,
            })
            .collect();
        let store = if a.store {
            Some(measure_store(&last.path, &a.backend, &a.state_dir, last.size_bytes, last.duration_ms).await)
        } else {
            None
        };
        if a.storage.starts_with("s3://") {
            // moto keeps objects in memory: drop this run's checkpoints.
            let root = weir_runtime::storage::open(&a.storage, &Default::default())
                .await
                .expect("open the checkpoint store");
            root.delete_prefix("").await.expect("delete the run's checkpoints");
        }
        JobRun {
            records_per_s: a.records as f64 / secs,
            peak_mib,
            checkpoints,
            store,
        }
    });
    println!("{}", serde_json::to_string(&run).expect("encode the child's report"));
}
