//! Prometheus metrics of the operator (served on `/metrics`).

use prometheus_client::encoding::EncodeLabelSet;
use prometheus_client::metrics::counter::Counter;
use prometheus_client::metrics::family::Family;
use prometheus_client::metrics::gauge::Gauge;
use prometheus_client::metrics::histogram::{Histogram, exponential_buckets};
use prometheus_client::registry::Registry;
use std::sync::Mutex;
use std::time::Instant;

/// Labels naming a controller.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ControllerLabels {
    /// `streamjob` or `savepoint`.
    pub controller: String,
}

/// Labels of a reconcile error.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct ErrorLabels {
    /// `streamjob` or `savepoint`.
    pub controller: String,
    /// The error's reason (the error enum's variant).
    pub reason: String,
}

/// Labels of a lifecycle transition.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct TransitionLabels {
    /// Lifecycle state before.
    pub from: String,
    /// Lifecycle state after.
    pub to: String,
}

/// Labels of one job's state gauge.
#[derive(Clone, Debug, Hash, PartialEq, Eq, EncodeLabelSet)]
pub struct JobLabels {
    /// Namespace.
    pub namespace: String,
    /// StreamJob name.
    pub job: String,
    /// Operator lifecycle state.
    pub lifecycle_state: String,
    /// Coordinator-reported job state.
    pub job_state: String,
}

/// The operator's metrics.
pub struct Metrics {
    /// Reconciles by controller.
    pub reconciles: Family<ControllerLabels, Counter>,
    /// Reconcile errors by controller and reason.
    pub errors: Family<ErrorLabels, Counter>,
    /// Reconcile duration by controller.
    pub duration: Family<ControllerLabels, Histogram>,
    /// Lifecycle transitions.
    pub transitions: Family<TransitionLabels, Counter>,
    /// 1 for each job's current (lifecycle state, job state).
    pub jobs: Family<JobLabels, Gauge>,
    current: Mutex<std::collections::HashMap<(String, String), JobLabels>>,
}

impl Metrics {
    /// Creates the metrics and registers them under `weir_operator_`.
    pub fn new(registry: &mut Registry) -> Metrics {
        let m = Metrics {
            reconciles: Family::default(),
            errors: Family::default(),
            duration: Family::new_with_constructor(|| Histogram::new(exponential_buckets(0.005, 2.0, 14))),
            transitions: Family::default(),
            jobs: Family::default(),
            current: Mutex::default(),
        };
        let r = registry.sub_registry_with_prefix("weir_operator");
        r.register("reconciles", "Reconciles by controller", m.reconciles.clone());
        r.register(
            "reconcile_errors",
            "Reconcile errors by controller and reason",
            m.errors.clone(),
        );
        r.register(
            "reconcile_duration_seconds",
            "Reconcile duration by controller",
            m.duration.clone(),
        );
        r.register(
            "lifecycle_transitions",
            "StreamJob lifecycle state transitions",
            m.transitions.clone(),
        );
        r.register(
            "job_state",
            "1 for each StreamJob's current lifecycle and job state",
            m.jobs.clone(),
        );
        m
    }

    /// Starts timing a reconcile of `controller`; the reconcile is counted at once.
    pub fn reconcile(&self, controller: &str) -> ReconcileTimer<'_> {
        let labels = ControllerLabels {
            controller: controller.into(),
        };
        self.reconciles.get_or_create(&labels).inc();
        ReconcileTimer {
            metrics: self,
            labels,
            start: Instant::now(),
        }
    }

    /// Counts an error.
    pub fn error(&self, controller: &str, reason: &str) {
        self.errors
            .get_or_create(&ErrorLabels {
                controller: controller.into(),
                reason: reason.into(),
            })
            .inc();
    }

    /// Records a lifecycle transition (no-op when `from == to`).
    pub fn transition(&self, from: &str, to: &str) {
        if from != to {
            self.transitions
                .get_or_create(&TransitionLabels {
                    from: from.into(),
                    to: to.into(),
                })
                .inc();
        }
    }

    /// Sets a job's state gauge (`None`: the job is gone).
    pub fn job_state(&self, namespace: &str, job: &str, states: Option<(&str, &str)>) {
        let key = (namespace.to_string(), job.to_string());
        let mut cur = self.current.lock().unwrap();
        if let Some(old) = cur.remove(&key) {
            self.jobs.remove(&old);
        }
        if let Some((lifecycle, job_state)) = states {
            let l = JobLabels {
                namespace: namespace.into(),
                job: job.into(),
                lifecycle_state: lifecycle.into(),
                job_state: job_state.into(),
            };
            self.jobs.get_or_create(&l).set(1);
            cur.insert(key, l);
        }
    }
}

/// Observes the reconcile duration when dropped.
pub struct ReconcileTimer<'a> {
    metrics: &'a Metrics,
    labels: ControllerLabels,
    start: Instant,
}

impl Drop for ReconcileTimer<'_> {
    fn drop(&mut self) {
        self.metrics
            .duration
            .get_or_create(&self.labels)
            .observe(self.start.elapsed().as_secs_f64());
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn encodes_counters_and_job_states() {
        let mut reg = Registry::default();
        let m = Metrics::new(&mut reg);
        drop(m.reconcile("streamjob"));
        m.error("streamjob", "ApplyError");
        m.transition("Created", "Deploying");
        m.transition("Running", "Running");
        m.job_state("ns", "wc", Some(("Deploying", "UNKNOWN")));
        m.job_state("ns", "wc", Some(("Running", "RUNNING")));
        let mut out = String::new();
        prometheus_client::encoding::text::encode(&mut out, &reg).unwrap();
        assert!(
            out.contains("weir_operator_reconciles_total{controller=\"streamjob\"} 1"),
            "{out}"
        );
        assert!(out.contains("weir_operator_reconcile_errors_total{controller=\"streamjob\",reason=\"ApplyError\"} 1"));
        assert!(out.contains("weir_operator_lifecycle_transitions_total{from=\"Created\",to=\"Deploying\"} 1"));
        assert!(!out.contains("from=\"Running\",to=\"Running\""));
        assert!(out.contains("lifecycle_state=\"Running\",job_state=\"RUNNING\"} 1"));
        assert!(
            !out.contains("lifecycle_state=\"Deploying\""),
            "old state removed: {out}"
        );
        assert!(out.contains("weir_operator_reconcile_duration_seconds_count{controller=\"streamjob\"} 1"));
    }
}
