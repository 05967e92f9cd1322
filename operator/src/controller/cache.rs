//! The watch caches a reconcile reads instead of the API server: kube-runtime reflector stores
//! kept by the controllers' own watches (the StreamJob controller's StreamJob, Deployment,
//! StatefulSet and Pod watches, the Savepoint controller's Savepoint watch). Reads come from
//! here; writes still go to the API server, each conditioned on the resourceVersion the pass
//! decided on (a pass on a stale cached object fails with 409 and is retried on the newer one).
//!
//! One cache per watched namespace (or one for all namespaces); the stores hold only what the
//! watches select: children labelled `app.kubernetes.io/managed-by=weir-operator`, pods with a
//! `weir.dev/job` label.

use super::Error;
use crate::build::{LABEL_JOB, job_key};
use crate::crd::{Savepoint, StreamJob};
use futures::FutureExt;
use futures::future::{BoxFuture, Shared};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::core::DeserializeGuard;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{self, ObjectRef, Store};

/// Completes once a set of stores has been listed (false: a watch ended first). Shared, so any
/// number of reconciles can wait on it: a store's own `wait_until_ready` wakes only the last of
/// several concurrent waiters (its one-shot channel keeps one waker), which left every other
/// reconcile pending forever when an operator restarted with many jobs.
type Ready = Shared<BoxFuture<'static, bool>>;

/// Read handles of the watch caches (cheap to clone).
#[derive(Clone)]
pub struct Cache {
    /// StreamJobs (the StreamJob controller's own store).
    pub jobs: Store<DeserializeGuard<StreamJob>>,
    /// Savepoints (the Savepoint controller's own store).
    pub savepoints: Store<DeserializeGuard<Savepoint>>,
    /// The operator's coordinator Deployments.
    pub deployments: Store<Deployment>,
    /// The operator's worker StatefulSets.
    pub stateful_sets: Store<StatefulSet>,
    /// Pods of StreamJobs (label `weir.dev/job`).
    pub pods: Store<Pod>,
    /// Deployments, StatefulSets, Pods and Savepoints listed.
    children_ready: Ready,
    /// StreamJobs listed.
    jobs_ready: Ready,
}

/// The writing ends of a [`Cache`]: each goes to the watch stream that fills its store
/// (`.reflect(writer)`).
pub struct CacheWriters {
    /// Filled by the StreamJob watch.
    pub jobs: Writer<DeserializeGuard<StreamJob>>,
    /// Filled by the Savepoint watch.
    pub savepoints: Writer<DeserializeGuard<Savepoint>>,
    /// Filled by the Deployment watch.
    pub deployments: Writer<Deployment>,
    /// Filled by the StatefulSet watch.
    pub stateful_sets: Writer<StatefulSet>,
    /// Filled by the Pod watch.
    pub pods: Writer<Pod>,
}

/// A new, empty cache and its writers.
pub fn cache() -> (Cache, CacheWriters) {
    let (jobs, jobs_writer) = reflector::store();
    let (savepoints, savepoints_writer) = reflector::store();
    let (deployments, deployments_writer) = reflector::store();
    let (stateful_sets, stateful_sets_writer) = reflector::store();
    let (pods, pods_writer) = reflector::store();
    let children_ready = {
        let (deployments, stateful_sets, pods, savepoints) = (
            deployments.clone(),
            stateful_sets.clone(),
            pods.clone(),
            savepoints.clone(),
        );
        async move {
            deployments.wait_until_ready().await.is_ok()
                && stateful_sets.wait_until_ready().await.is_ok()
                && pods.wait_until_ready().await.is_ok()
                && savepoints.wait_until_ready().await.is_ok()
        }
        .boxed()
        .shared()
    };
    let jobs_ready = {
        let jobs = jobs.clone();
        async move { jobs.wait_until_ready().await.is_ok() }.boxed().shared()
    };
    (
        Cache {
            jobs,
            savepoints,
            deployments,
            stateful_sets,
            pods,
            children_ready,
            jobs_ready,
        },
        CacheWriters {
            jobs: jobs_writer,
            savepoints: savepoints_writer,
            deployments: deployments_writer,
            stateful_sets: stateful_sets_writer,
            pods: pods_writer,
        },
    )
}

fn closed() -> Error {
    Error::CacheError("a watch cache is closed (the operator is stopping)".into())
}

/// Whether `labels` mark an object of job `job`.
fn of_job(labels: &std::collections::BTreeMap<String, String>, job: &str) -> bool {
    labels.get(LABEL_JOB).map(String::as_str) == Some(job_key(job).as_str())
}

impl Cache {
    /// Waits until every store a StreamJob pass reads has been listed once (right after the
    /// operator starts, an empty store would look like "no workloads").
    pub async fn children_ready(&self) -> Result<(), Error> {
        if self.children_ready.clone().await {
            Ok(())
        } else {
            Err(closed())
        }
    }

    /// Waits until the StreamJob store has been listed once.
    pub async fn jobs_ready(&self) -> Result<(), Error> {
        if self.jobs_ready.clone().await {
            Ok(())
        } else {
            Err(closed())
        }
    }

    /// The StreamJob `ns/name`, if cached and valid.
    pub fn job(&self, ns: &str, name: &str) -> Option<StreamJob> {
        self.jobs
            .get(&ObjectRef::new(name).within(ns))
            .and_then(|j| j.0.as_ref().ok().cloned())
    }

    /// The valid Savepoints of job `ns/job`.
    pub fn savepoints_of(&self, ns: &str, job: &str) -> Vec<Savepoint> {
        self.savepoints
            .state()
            .iter()
            .filter_map(|s| s.0.as_ref().ok())
            .filter(|s| s.namespace().as_deref() == Some(ns) && s.spec.job_ref.name == job)
            .cloned()
            .collect()
    }

    /// The Deployment `ns/name`.
    pub fn deployment(&self, ns: &str, name: &str) -> Option<Deployment> {
        self.deployments
            .get(&ObjectRef::new(name).within(ns))
            .map(|d| (*d).clone())
    }

    /// The StatefulSet `ns/name`.
    pub fn stateful_set(&self, ns: &str, name: &str) -> Option<StatefulSet> {
        self.stateful_sets
            .get(&ObjectRef::new(name).within(ns))
            .map(|s| (*s).clone())
    }

    /// The Deployments of job `ns/job` (label `weir.dev/job`).
    pub fn deployments_of(&self, ns: &str, job: &str) -> Vec<Deployment> {
        self.deployments
            .state_filter(|d| d.namespace().as_deref() == Some(ns) && of_job(d.labels(), job))
            .into_iter()
            .map(|d| (*d).clone())
            .collect()
    }

    /// The StatefulSets of job `ns/job` (label `weir.dev/job`).
    pub fn stateful_sets_of(&self, ns: &str, job: &str) -> Vec<StatefulSet> {
        self.stateful_sets
            .state_filter(|s| s.namespace().as_deref() == Some(ns) && of_job(s.labels(), job))
            .into_iter()
            .map(|s| (*s).clone())
            .collect()
    }

    /// The pods of job `ns/job` (label `weir.dev/job`).
    pub fn job_pods(&self, ns: &str, job: &str) -> Vec<Pod> {
        self.pods
            .state_filter(|p| p.namespace().as_deref() == Some(ns) && of_job(p.labels(), job))
            .into_iter()
            .map(|p| (*p).clone())
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kube::runtime::watcher::Event;
    use serde_json::json;

    fn pod(ns: &str, name: &str, job: &str) -> Pod {
        serde_json::from_value(json!({"metadata": {"name": name, "namespace": ns, "labels": {LABEL_JOB: job}}}))
            .unwrap()
    }

    /// Many reconciles waiting for the caches at once (an operator restarting with many jobs)
    /// are all released when the stores are listed, not only the last one to wait.
    #[tokio::test]
    async fn every_concurrent_waiter_is_released_when_the_caches_are_listed() {
        let (cache, mut writers) = cache();
        let waiters: Vec<_> = (0..9)
            .map(|_| {
                let cache = cache.clone();
                tokio::spawn(async move {
                    cache.children_ready().await.unwrap();
                    cache.jobs_ready().await.unwrap();
                })
            })
            .collect();
        // Every waiter has polled and is pending now.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        for w in &waiters {
            assert!(!w.is_finished());
        }
        writers.jobs.apply_watcher_event(&Event::InitDone);
        writers.savepoints.apply_watcher_event(&Event::InitDone);
        writers.deployments.apply_watcher_event(&Event::InitDone);
        writers.stateful_sets.apply_watcher_event(&Event::InitDone);
        writers.pods.apply_watcher_event(&Event::InitDone);
        for w in waiters {
            tokio::time::timeout(std::time::Duration::from_secs(1), w)
                .await
                .expect("a waiter was never woken")
                .unwrap();
        }
    }

    /// Reads select by namespace and by the job label (the shortened job key for long names).
    #[test]
    fn reads_select_by_namespace_and_job() {
        let (cache, mut writers) = cache();
        let long = "a-very-long-job-name-that-does-not-fit-into-the-label-value-limit";
        for p in [
            pod("ns", "wc-0", "wc"),
            pod("ns", "wc2-0", "wc2"),
            pod("other", "wc-0", "wc"),
            pod("ns", "long-0", &job_key(long)),
        ] {
            writers.pods.apply_watcher_event(&Event::Apply(p));
        }
        let names = |pods: Vec<Pod>| pods.iter().map(|p| p.name_any()).collect::<Vec<_>>();
        assert_eq!(names(cache.job_pods("ns", "wc")), ["wc-0"]);
        assert_eq!(names(cache.job_pods("other", "wc")), ["wc-0"]);
        assert_eq!(names(cache.job_pods("ns", long)), ["long-0"]);
        assert!(cache.job_pods("ns", "w").is_empty());
        let sp: DeserializeGuard<Savepoint> = serde_json::from_value(json!({
            "apiVersion": "weir.dev/v1alpha1", "kind": "Savepoint",
            "metadata": {"name": "s", "namespace": "ns"}, "spec": {"jobRef": {"name": "wc"}}}))
        .unwrap();
        let invalid: DeserializeGuard<Savepoint> = serde_json::from_value(json!({
            "apiVersion": "weir.dev/v1alpha1", "kind": "Savepoint",
            "metadata": {"name": "bad", "namespace": "ns"}, "spec": {"jobRef": {"name": "wc"}, "origin": "Nope"}}))
        .unwrap();
        writers.savepoints.apply_watcher_event(&Event::Apply(sp));
        writers.savepoints.apply_watcher_event(&Event::Apply(invalid));
        let got: Vec<String> = cache.savepoints_of("ns", "wc").iter().map(|s| s.name_any()).collect();
        assert_eq!(got, ["s"], "invalid Savepoints are skipped");
        assert!(cache.savepoints_of("other", "wc").is_empty());
    }
}
