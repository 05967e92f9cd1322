//! Prometheus metrics (prometheus-client): checkpoint duration, size and alignment time, and
//! per-subtask records in/out and backpressured time (collected at scrape time).

use crate::control::api::CheckpointStats;
use crate::exec::task::TaskMetrics;
use prometheus_client::encoding::text::encode;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::atomic::Ordering;
use std::sync::{Arc, OnceLock};

struct Checkpoints {
    duration: Histogram,
    alignment: Histogram,
    size: Gauge,
    completed: Counter,
}

fn checkpoints() -> &'static Checkpoints {
    static C: OnceLock<Checkpoints> = OnceLock::new();
    C.get_or_init(|| Checkpoints {
        duration: Histogram::new(exponential_buckets(0.005, 2.0, 16)),
        alignment: Histogram::new(exponential_buckets(0.001, 2.0, 16)),
        size: Gauge::default(),
        completed: Counter::default(),
    })
}

/// Records a completed checkpoint.
pub fn record_checkpoint(s: &CheckpointStats) {
    let c = checkpoints();
    c.duration.observe(s.duration_ms as f64 / 1000.0);
    c.alignment.observe(s.max_alignment_ms as f64 / 1000.0);
    c.size.set(s.size_bytes as i64);
    c.completed.inc();
}

/// Renders all metrics in the Prometheus text format; `tasks` are `(task name, subtask,
/// counters)`.
pub fn render(tasks: &[(String, u32, Arc<TaskMetrics>)], failed_checkpoints: u64) -> String {
    let mut reg = Registry::with_prefix("weir");
    let c = checkpoints();
    reg.register(
        "checkpoint_duration_seconds",
        "Checkpoint trigger-to-commit time",
        c.duration.clone(),
    );
    reg.register(
        "checkpoint_alignment_seconds",
        "Longest barrier alignment per checkpoint",
        c.alignment.clone(),
    );
    reg.register(
        "checkpoint_size_bytes",
        "Size of the last completed checkpoint",
        c.size.clone(),
    );
    reg.register(
        "checkpoints_completed",
        "Completed checkpoints and savepoints",
        c.completed.clone(),
    );
    let failed: Counter = Counter::default();
    failed.inc_by(failed_checkpoints);
    reg.register("checkpoints_failed", "Declined or timed-out checkpoints", failed);
    type Labels = Vec<(String, String)>;
    let rin = Family::<Labels, Counter>::default();
    let rout = Family::<Labels, Counter>::default();
    let bp = Family::<Labels, Counter<f64>>::default();
    let buffers = Family::<Labels, Gauge>::default();
    for (name, subtask, m) in tasks {
        let l = vec![
            ("task".to_string(), name.clone()),
            ("subtask".to_string(), subtask.to_string()),
        ];
        rin.get_or_create(&l).inc_by(m.records_in.load(Ordering::Relaxed));
        rout.get_or_create(&l).inc_by(m.records_out.load(Ordering::Relaxed));
        bp.get_or_create(&l)
            .inc_by(m.backpressured_ns.load(Ordering::Relaxed) as f64 / 1e9);
        buffers
            .get_or_create(&l)
            .set(m.output_buffers_used.load(Ordering::Relaxed) as i64);
    }
    reg.register("records_in", "Records received by a subtask", rin);
    reg.register("records_out", "Records emitted by a subtask", rout);
    reg.register(
        "backpressured_seconds",
        "Time a subtask waited for space in output channels",
        bp,
    );
    reg.register(
        "output_buffers_used",
        "Batches queued in the subtask's last-used output channel (capacity 8)",
        buffers,
    );
    let auth_failures = Family::<Labels, Counter>::default();
    for surface in crate::security::refusals::Surface::ALL {
        auth_failures
            .get_or_create(&vec![("surface".to_string(), surface.label().to_string())])
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
