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
use futures::{Stream, TryStreamExt};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use kube::ResourceExt;
use kube::core::DeserializeGuard;
use kube::runtime::WatchStreamExt;
use kube::runtime::reflector::store::Writer;
use kube::runtime::reflector::{self, ObjectRef, Store};
use kube::runtime::watcher;
use tokio::sync::watch;

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
    /// Whether each store has been listed, in the order of [`CacheWriters`]' fields.
    listed: [watch::Receiver<bool>; 5],
}

/// The writing end of one store: its reflector writer, and the flag raised once the watch's
/// first list is in the store.
///
/// Readiness is tracked here rather than with the store's own `wait_until_ready`: that wakes
/// only the last of several concurrent waiters (a one-shot channel keeps one waker), and the
/// controller itself waits on its main store, so a reconcile waiting there too could leave the
/// controller, or every other reconcile, pending forever (seen after an operator restart).
pub struct CacheWriter<K: kube::Resource + Clone + 'static>
where
    K::DynamicType: Eq + std::hash::Hash + Clone,
{
    writer: Writer<K>,
    listed: watch::Sender<bool>,
}

impl<K> CacheWriter<K>
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    /// Fills the store from a watch stream: every event is applied to the store, and the first
    /// completed list raises the store's listed flag (after the store holds it).
    pub fn fill<S>(self, events: S) -> impl Stream<Item = Result<watcher::Event<K>, watcher::Error>>
    where
        S: Stream<Item = Result<watcher::Event<K>, watcher::Error>>,
    {
        let listed = self.listed;
        events.reflect(self.writer).inspect_ok(move |event| {
            if matches!(event, watcher::Event::InitDone) {
                listed.send_replace(true);
            }
        })
    }

    /// Applies one event as [`CacheWriter::fill`] does (for tests).
    pub fn apply(&mut self, event: &watcher::Event<K>) {
        self.writer.apply_watcher_event(event);
        if matches!(event, watcher::Event::InitDone) {
            self.listed.send_replace(true);
        }
    }
}

/// The writing ends of a [`Cache`]: each goes to the watch stream that fills its store
/// ([`CacheWriter::fill`]).
pub struct CacheWriters {
    /// Filled by the StreamJob watch.
    pub jobs: CacheWriter<DeserializeGuard<StreamJob>>,
    /// Filled by the Savepoint watch.
    pub savepoints: CacheWriter<DeserializeGuard<Savepoint>>,
    /// Filled by the Deployment watch.
    pub deployments: CacheWriter<Deployment>,
    /// Filled by the StatefulSet watch.
    pub stateful_sets: CacheWriter<StatefulSet>,
    /// Filled by the Pod watch.
    pub pods: CacheWriter<Pod>,
}

fn store<K>() -> (Store<K>, CacheWriter<K>, watch::Receiver<bool>)
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    let (store, writer) = reflector::store();
    let (listed, listed_rx) = watch::channel(false);
    (store, CacheWriter { writer, listed }, listed_rx)
}

/// A new, empty cache and its writers.
pub fn cache() -> (Cache, CacheWriters) {
    let (jobs, jobs_writer, jobs_listed) = store();
    let (savepoints, savepoints_writer, savepoints_listed) = store();
    let (deployments, deployments_writer, deployments_listed) = store();
    let (stateful_sets, stateful_sets_writer, stateful_sets_listed) = store();
    let (pods, pods_writer, pods_listed) = store();
    (
        Cache {
            jobs,
            savepoints,
            deployments,
            stateful_sets,
            pods,
            listed: [
                jobs_listed,
                savepoints_listed,
                deployments_listed,
                stateful_sets_listed,
                pods_listed,
            ],
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

/// Waits until the store behind `listed` has been listed once.
async fn listed(listed: &watch::Receiver<bool>) -> Result<(), Error> {
    listed
        .clone()
        .wait_for(|listed| *listed)
        .await
        .map(|_| ())
        .map_err(|_| Error::CacheError("a watch cache is closed (the operator is stopping)".into()))
}

/// Whether `labels` mark an object of job `job`.
fn of_job(labels: &std::collections::BTreeMap<String, String>, job: &str) -> bool {
    labels.get(LABEL_JOB).map(String::as_str) == Some(job_key(job).as_str())
}

impl Cache {
    /// Waits until every store a StreamJob pass reads has been listed once (right after the
    /// operator starts, an empty store would look like "no workloads").
    pub async fn children_ready(&self) -> Result<(), Error> {
        for l in &self.listed[1..] {
            listed(l).await?;
        }
        Ok(())
    }

    /// Waits until the StreamJob store has been listed once.
    pub async fn jobs_ready(&self) -> Result<(), Error> {
        listed(&self.listed[0]).await
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

    /// Many reconciles waiting for the caches at once (an operator restarting with many jobs),
    /// and the controllers themselves waiting for their main stores (kube-runtime's runner
    /// waits with the store's `wait_until_ready`), are all released when the stores are listed.
    #[tokio::test]
    async fn every_concurrent_waiter_is_released_when_the_caches_are_listed() {
        let (cache, mut writers) = cache();
        let mut waiters: Vec<_> = (0..9)
            .map(|_| {
                let cache = cache.clone();
                tokio::spawn(async move {
                    cache.children_ready().await.unwrap();
                    cache.jobs_ready().await.unwrap();
                })
            })
            .collect();
        let jobs = cache.jobs.clone();
        waiters.push(tokio::spawn(async move { jobs.wait_until_ready().await.unwrap() }));
        let savepoints = cache.savepoints.clone();
        waiters.push(tokio::spawn(
            async move { savepoints.wait_until_ready().await.unwrap() },
        ));
        // Every waiter has polled and is pending now.
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        for w in &waiters {
            assert!(!w.is_finished());
        }
        writers.jobs.apply(&Event::InitDone);
        writers.savepoints.apply(&Event::InitDone);
        writers.deployments.apply(&Event::InitDone);
        writers.stateful_sets.apply(&Event::InitDone);
        writers.pods.apply(&Event::InitDone);
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
            writers.pods.apply(&Event::Apply(p));
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
        writers.savepoints.apply(&Event::Apply(sp));
        writers.savepoints.apply(&Event::Apply(invalid));
        let got: Vec<String> = cache.savepoints_of("ns", "wc").iter().map(|s| s.name_any()).collect();
        assert_eq!(got, ["s"], "invalid Savepoints are skipped");
        assert!(cache.savepoints_of("other", "wc").is_empty());
    }
}
