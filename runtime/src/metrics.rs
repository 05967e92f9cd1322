//! Prometheus metrics (prometheus-client), in the OpenMetrics text format. Every metric carries
//! the `job` label (the StreamJob's name); per-subtask metrics add `task` (the chained
//! operators' uids joined by ` -> `), `operator` (the uid of the chain's operator the number
//! belongs to: the first for records in, the last for records out and output channels) and
//! `subtask`. Metrics with a unit carry `# UNIT` (the unit is the name's suffix). The user
//! reference, docs/reference/metrics.md, is generated from what [`render`] serves
//! (`hack/gen-references.sh`), so a metric added here shows up there.
//!
//! | metric | type | labels | meaning |
//! |---|---|---|---|
//! | `weir_uptime_seconds` | gauge | job | seconds since this process started the job (a worker: since it started) |
//! | `weir_records_in_total` | counter | job, task, operator, subtask | records received by a subtask |
//! | `weir_records_out_total` | counter | job, task, operator, subtask | records emitted (or written) by a subtask |
//! | `weir_backpressured_seconds_total` | counter | job, task, operator, subtask | time waiting for space in output channels |
//! | `weir_output_buffers_used` | gauge | job, task, operator, subtask | batches queued in the last-used output channel (capacity 8) |
//! | `weir_source_pending_records` | gauge | job, task, operator, subtask | records a bounded generator subtask has not read yet (Flink's `pendingRecords`) |
//! | `weir_source_pending_bytes` | gauge | job, task, operator, subtask | bytes a file source subtask has not read yet, local uncompressed files only (Flink's `pendingBytes`) |
//! | `weir_late_records_dropped_total` | counter | job, task, operator, subtask | records a `window` dropped as later than its allowed lateness (present once one was dropped) |
//! | `weir_keyed_state_entries` | gauge | job, task, operator, subtask | keys a stateful step's subtask holds (expired ones until cleanup removes them; a `window`: keys holding a window, open or fired and kept for `allowedLateness`), refreshed about once a second and at each barrier |
//! | `weir_keyed_state_disk_bytes` | gauge | job, task, operator, subtask | `stateBackend: disk`: bytes the subtask's state takes in the state dir: its store's table files (Flink's `rocksdb.total-sst-files-size`) plus the files only its last native checkpoint's base holds (logged delta files, table files compacted away since) |
//! | `weir_keyed_state_memory_bytes` | gauge | job, task, operator, subtask | `stateBackend: disk`: bytes of memory the store uses: block cache, memtables and write-back cache (bounded by `spec.diskState`) |
//! | `weir_keyed_state_cache_hits_total`, `weir_keyed_state_cache_misses_total` | counter | job, task, operator, subtask | `stateBackend: disk` with `writeCacheSize` above 0: a record's key found in the write-back cache, or read from the store ([`CacheLookups`](crate::state::disk::CacheLookups)); hits / (hits + misses) is the hit ratio |
//!
//! The process coordinating the job (`weir run`, `weir coordinator`) adds:
//!
//! | metric | type | meaning |
//! |---|---|---|
//! | `weir_checkpoint_duration_seconds` | histogram | checkpoint trigger-to-commit time |
//! | `weir_checkpoint_alignment_seconds` | histogram | longest barrier alignment per checkpoint |
//! | `weir_checkpoints_completed_total` | counter | completed checkpoints and savepoints |
//! | `weir_checkpoints_failed_total` | counter | declined or timed-out checkpoints |
//! | `weir_restarts_total` | counter | restarts by the restart strategy |
//! | `weir_last_checkpoint_id` | gauge | id of the newest completed checkpoint or savepoint |
//! | `weir_last_checkpoint_age_seconds` | gauge | seconds since it completed |
//! | `weir_last_checkpoint_size_bytes` | gauge | its state files plus metadata |
//! | `weir_last_checkpoint_duration_seconds` | gauge | its trigger-to-commit time |
//! | `weir_last_checkpoint_alignment_seconds` | gauge | its longest barrier alignment over subtasks |
//! | `weir_last_checkpoint_channel_state_bytes` | gauge | its channel state (in-flight records of an unaligned checkpoint) |
//! | `weir_last_checkpoint_unaligned` | gauge | 1 when it was taken unaligned, else 0 |
//!
//! The `weir_last_checkpoint_*` gauges are absent until a checkpoint completed.

use crate::control::api::CheckpointStats;
use crate::exec::task::TaskMetrics;
use crate::operators::source::SourcePending;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::{Registry, Unit};
use std::borrow::Cow;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

struct Checkpoints {
    duration: Histogram,
    alignment: Histogram,
    completed: Counter,
}

fn checkpoints() -> &'static Checkpoints {
    static C: OnceLock<Checkpoints> = OnceLock::new();
    C.get_or_init(|| Checkpoints {
        duration: Histogram::new(exponential_buckets(0.005, 2.0, 16)),
        alignment: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
        completed: Counter::default(),
    })
}

/// Records a completed checkpoint in the process's checkpoint histograms and counter.
pub fn record_checkpoint(s: &CheckpointStats) {
    let c = checkpoints();
    c.duration.observe(s.duration_ms as f64 / 1000.0);
    c.alignment.observe(s.max_alignment_ms as f64 / 1000.0);
    c.completed.inc();
}

/// What one scrape renders.
pub struct Scrape<'a> {
    /// The job's name: the `job` label of every metric (empty on a worker without a job).
    pub job: &'a str,
    /// `(task name, subtask, counters)` of the subtasks in this process.
    pub tasks: &'a [(String, u32, Arc<TaskMetrics>)],
    /// Time since this process started the job (a worker: since it started).
    pub uptime: Duration,
    /// Job-level numbers, on the process coordinating the job; `None` on a worker.
    pub coordinator: Option<CoordinatorNumbers>,
}

/// Job-level numbers known to the process coordinating the job.
pub struct CoordinatorNumbers {
    /// Checkpoints declined or timed out.
    pub failed_checkpoints: u64,
    /// Restarts by the restart strategy.
    pub restarts: u64,
    /// The newest completed checkpoint or savepoint.
    pub last_checkpoint: Option<CheckpointStats>,
    /// Now, milliseconds since the Unix epoch (for the last checkpoint's age).
    pub now_ms: u64,
}

/// The first and the last operator uid of a task name (uids joined by ` -> `; a uid holds
/// only letters, digits, `-`, `_` and `.`, so the split is exact).
pub fn chain_ends(task: &str) -> (&str, &str) {
    let first = task.split(" -> ").next().unwrap_or(task);
    let last = task.rsplit(" -> ").next().unwrap_or(task);
    (first, last)
}

type Labels = Vec<(&'static str, String)>;

fn subtask_labels(task: &str, operator: &str, subtask: u32) -> Labels {
    vec![
        ("task", task.to_string()),
        ("operator", operator.to_string()),
        ("subtask", subtask.to_string()),
    ]
}

fn float_gauge(value: f64) -> Gauge<f64, AtomicU64> {
    let g = Gauge::<f64, AtomicU64>::default();
    g.set(value);
    g
}

fn saturating_i64(value: u64) -> i64 {
    i64::try_from(value).unwrap_or(i64::MAX)
}

fn int_gauge(value: u64) -> Gauge {
    let g = Gauge::default();
    g.set(saturating_i64(value));
    g
}

fn counter(value: u64) -> Counter {
    let c = Counter::default();
    c.inc_by(value);
    c
}

/// Renders the metrics of `scrape` in the OpenMetrics text format.
pub fn render(scrape: &Scrape) -> String {
    let job_label = [(Cow::Borrowed("job"), Cow::Owned(scrape.job.to_string()))];
    let mut reg = Registry::with_prefix_and_labels("weir", job_label.into_iter());
    reg.register_with_unit(
        "uptime",
        "Time since this process started the job",
        Unit::Seconds,
        float_gauge(scrape.uptime.as_secs_f64()),
    );
    if let Some(n) = &scrape.coordinator {
        register_coordinator(&mut reg, n);
    }
    let rin = Family::<Labels, Counter>::default();
    let rout = Family::<Labels, Counter>::default();
    let bp = Family::<Labels, Counter<f64>>::default();
    let buffers = Family::<Labels, Gauge>::default();
    let pending_records = Family::<Labels, Gauge>::default();
    let pending_bytes = Family::<Labels, Gauge>::default();
    let late = Family::<Labels, Counter>::default();
    let state_entries = Family::<Labels, Gauge>::default();
    let state_disk = Family::<Labels, Gauge>::default();
    let state_memory = Family::<Labels, Gauge>::default();
    let cache_hits = Family::<Labels, Counter>::default();
    let cache_misses = Family::<Labels, Counter>::default();
    for (name, subtask, m) in scrape.tasks {
        let (first, last) = chain_ends(name);
        let (head, tail) = (
            subtask_labels(name, first, *subtask),
            subtask_labels(name, last, *subtask),
        );
        rin.get_or_create(&head).inc_by(m.records_in.load(Ordering::Relaxed));
        rout.get_or_create(&tail).inc_by(m.records_out.load(Ordering::Relaxed));
        bp.get_or_create(&tail)
            .inc_by(m.backpressured_ns.load(Ordering::Relaxed) as f64 / 1e9);
        buffers
            .get_or_create(&tail)
            .set(m.output_buffers_used.load(Ordering::Relaxed) as i64);
        match m.source_pending() {
            Some(SourcePending::Records(n)) => pending_records.get_or_create(&head).set(saturating_i64(n)),
            Some(SourcePending::Bytes(n)) => pending_bytes.get_or_create(&head).set(saturating_i64(n)),
            None => 0,
        };
        let dropped = m.late_records_dropped.load(Ordering::Relaxed);
        if dropped > 0 {
            late.get_or_create(&tail).inc_by(dropped);
        }
        for (uid, size) in m.keyed_state() {
            let labels = subtask_labels(name, &uid, *subtask);
            state_entries.get_or_create(&labels).set(saturating_i64(size.entries));
            if let Some(bytes) = size.disk_bytes {
                state_disk.get_or_create(&labels).set(saturating_i64(bytes));
            }
            if let Some(bytes) = size.memory_bytes {
                state_memory.get_or_create(&labels).set(saturating_i64(bytes));
            }
            if let Some(lookups) = size.cache_lookups {
                cache_hits.get_or_create(&labels).inc_by(lookups.hits);
                cache_misses.get_or_create(&labels).inc_by(lookups.misses);
            }
        }
    }
    reg.register("records_in", "Records received by a subtask", rin);
    reg.register("records_out", "Records emitted by a subtask", rout);
    reg.register_with_unit(
        "backpressured",
        "Time a subtask waited for space in output channels",
        Unit::Seconds,
        bp,
    );
    reg.register(
        "output_buffers_used",
        "Batches queued in the subtask's last-used output channel (capacity 8)",
        buffers,
    );
    reg.register(
        "source_pending_records",
        "Records a source subtask has not read yet (bounded generator; Flink's pendingRecords)",
        pending_records,
    );
    reg.register_with_unit(
        "source_pending",
        "Bytes a file source subtask has not read yet (local uncompressed files; Flink's pendingBytes)",
        Unit::Bytes,
        pending_bytes,
    );
    reg.register(
        "late_records_dropped",
        "Records a window dropped because they arrived after its allowed lateness",
        late,
    );
    reg.register(
        "keyed_state_entries",
        "Keys a stateful step's subtask holds (a window: keys holding a window, open or kept for allowed lateness)",
        state_entries,
    );
    reg.register_with_unit(
        "keyed_state_disk",
        "Local disk a disk-backend subtask's state takes: its store's table files and its last native checkpoint's logged deltas",
        Unit::Bytes,
        state_disk,
    );
    reg.register_with_unit(
        "keyed_state_memory",
        "Memory of a disk-backend subtask's store: block cache, memtables, write-back cache",
        Unit::Bytes,
        state_memory,
    );
    reg.register(
        "keyed_state_cache_hits",
        "Reads of a disk-backend subtask's write-back cache that found the key there",
        cache_hits,
    );
    reg.register(
        "keyed_state_cache_misses",
        "Reads of a disk-backend subtask's write-back cache that read the store",
        cache_misses,
    );
    let auth_failures = Family::<Labels, Counter>::default();
    for surface in crate::security::refusals::Surface::ALL {
        auth_failures
            .get_or_create(&vec![("surface", surface.label().to_string())])
            .inc_by(crate::security::refusals::failures(surface));
    }
    reg.register(
        "auth_failures",
        "Refused credentials (wrong or missing job secret), by surface: control API, worker RPC, data",
        auth_failures,
    );
    let mut out = String::new();
    encode(&mut out, &reg).expect("encoding to a String");
    out
}

fn register_coordinator(reg: &mut Registry, n: &CoordinatorNumbers) {
    let c = checkpoints();
    reg.register_with_unit(
        "checkpoint_duration",
        "Checkpoint trigger-to-commit time",
        Unit::Seconds,
        c.duration.clone(),
    );
    reg.register_with_unit(
        "checkpoint_alignment",
        "Longest barrier alignment per checkpoint",
        Unit::Seconds,
        c.alignment.clone(),
    );
    reg.register(
        "checkpoints_completed",
        "Completed checkpoints and savepoints",
        c.completed.clone(),
    );
    reg.register(
        "checkpoints_failed",
        "Declined or timed-out checkpoints",
        counter(n.failed_checkpoints),
    );
    reg.register(
        "restarts",
        "Restarts of the job by the restart strategy",
        counter(n.restarts),
    );
    if let Some(last) = &n.last_checkpoint {
        reg.register(
            "last_checkpoint_id",
            "Id of the newest completed checkpoint or savepoint",
            int_gauge(last.id),
        );
        let age_ms = n.now_ms.saturating_sub(last.completed_at_ms);
        reg.register_with_unit(
            "last_checkpoint_age",
            "Time since the newest checkpoint or savepoint completed",
            Unit::Seconds,
            float_gauge(age_ms as f64 / 1000.0),
        );
        reg.register_with_unit(
            "last_checkpoint_size",
            "State files plus metadata of the newest completed checkpoint or savepoint",
            Unit::Bytes,
            int_gauge(last.size_bytes),
        );
        reg.register_with_unit(
            "last_checkpoint_duration",
            "Trigger-to-commit time of the newest completed checkpoint or savepoint",
            Unit::Seconds,
            float_gauge(last.duration_ms as f64 / 1000.0),
        );
        reg.register_with_unit(
            "last_checkpoint_alignment",
            "Longest barrier alignment over subtasks of the newest completed checkpoint or savepoint",
            Unit::Seconds,
            float_gauge(last.alignment.alignment_ms as f64 / 1000.0),
        );
        reg.register_with_unit(
            "last_checkpoint_channel_state",
            "Channel state (in-flight records) of the newest completed checkpoint",
            Unit::Bytes,
            int_gauge(last.alignment.channel_state_bytes),
        );
        reg.register(
            "last_checkpoint_unaligned",
            "1 when the newest completed checkpoint was taken unaligned, else 0",
            int_gauge(u64::from(last.alignment.unaligned)),
        );
    }
}

#[cfg(test)]
mod tests;
