//! The two controllers of one watched namespace (or all), their watches, and the watch cache
//! those watches fill for the reconciles.

use super::shutdown_signal;
use crate::build::{ANNOTATION_JOB_NAME, LABEL_JOB};
use crate::control::ServiceControlApiFactory;
use crate::controller::cache::CacheWriter;
use crate::controller::{Context, savepoint, stream_job};
use crate::crd::{Savepoint, StreamJob};
use crate::metrics::Metrics;
use crate::snapshots::ObjectStoreSnapshots;
use futures::StreamExt;
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::Pod;
use kube::core::DeserializeGuard;
use kube::runtime::reflector::ObjectRef;
use kube::runtime::{Controller, WatchStreamExt, predicates, watcher};
use kube::{Api, Client, ResourceExt};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::watch;

/// Spawns the StreamJob and Savepoint controllers of namespace `ns` (None: all) with a context
/// of their own, whose cache their watches fill; returns their tasks.
pub(super) fn spawn(
    client: &Client,
    ns: Option<String>,
    metrics: &Arc<Metrics>,
    runtime_defaults: &crate::build::RuntimeDefaults,
    network_policies: &crate::build::NetworkPolicySettings,
    stop: &watch::Receiver<bool>,
) -> [tokio::task::JoinHandle<()>; 2] {
    let (cache, writers) = crate::controller::cache::cache();
    let ctx = Arc::new(Context::new(
        client.clone(),
        Arc::new(ServiceControlApiFactory {
            timeout: Duration::from_secs(5),
            client: client.clone(),
        }),
        Arc::new(ObjectStoreSnapshots),
        metrics.clone(),
        runtime_defaults.clone(),
        network_policies.clone(),
        cache,
    ));
    let job_writers = StreamJobWriters {
        jobs: writers.jobs,
        deployments: writers.deployments,
        stateful_sets: writers.stateful_sets,
        pods: writers.pods,
    };
    [
        tokio::spawn(run_stream_jobs(
            client.clone(),
            ns.clone(),
            ctx.clone(),
            job_writers,
            stop.clone(),
        )),
        tokio::spawn(run_savepoints(
            client.clone(),
            ns,
            ctx,
            writers.savepoints,
            stop.clone(),
        )),
    ]
}

fn api_for<K>(client: &Client, ns: Option<&str>) -> Api<K>
where
    K: kube::Resource<Scope = k8s_openapi::NamespaceResourceScope>
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug,
    K::DynamicType: Default,
{
    match ns {
        Some(ns) => Api::namespaced(client.clone(), ns),
        None => Api::all(client.clone()),
    }
}

/// The StreamJob controller for one namespace (or all). Status-only changes of a StreamJob do
/// not trigger it (generation predicate): its own status writes never loop. Its StreamJob,
/// Deployment, StatefulSet and Pod watches fill the context's cache (`writers`), which the
/// reconciles read instead of the API server.
async fn run_stream_jobs(
    client: Client,
    ns: Option<String>,
    ctx: Arc<Context>,
    writers: StreamJobWriters,
    stop: watch::Receiver<bool>,
) {
    let jobs = api_for::<DeserializeGuard<StreamJob>>(&client, ns.as_deref());
    let trigger = writers
        .jobs
        .fill(watcher(jobs, watcher::Config::default()).default_backoff())
        .touched_objects()
        .predicate_filter(predicates::generation, Default::default());
    let managed = watcher::Config::default().labels("app.kubernetes.io/managed-by=weir-operator");
    let deployments = writers
        .deployments
        .fill(watcher(api_for::<Deployment>(&client, ns.as_deref()), managed.clone()).default_backoff())
        .touched_objects();
    let stateful_sets = writers
        .stateful_sets
        .fill(watcher(api_for::<StatefulSet>(&client, ns.as_deref()), managed).default_backoff())
        .touched_objects();
    let pod_watch = watcher(
        api_for::<Pod>(&client, ns.as_deref()),
        watcher::Config::default().labels(LABEL_JOB),
    );
    let pods = writers.pods.fill(pod_watch.default_backoff()).touched_objects();
    Controller::for_stream(trigger, ctx.cache.jobs.clone())
        .owns_stream(deployments)
        .owns_stream(stateful_sets)
        .watches_stream(pods, |pod| {
            let ns = pod.namespace()?;
            // A shortened job key in the label: the full name is in the annotation.
            let job = pod
                .annotations()
                .get(ANNOTATION_JOB_NAME)
                .or_else(|| pod.labels().get(LABEL_JOB))?;
            Some(ObjectRef::new(job).within(&ns))
        })
        .watches(
            api_for::<DeserializeGuard<Savepoint>>(&client, ns.as_deref()),
            watcher::Config::default(),
            |sp| {
                let ns = sp.namespace()?;
                sp.0.ok().map(|s| ObjectRef::new(&s.spec.job_ref.name).within(&ns))
            },
        )
        .graceful_shutdown_on(shutdown_signal(stop))
        .run(stream_job::reconcile, stream_job::error_policy, ctx)
        .for_each(|r| async move { log_controller_error("streamjob", r) })
        .await;
}

/// The writers of the StreamJob controller's watches.
struct StreamJobWriters {
    jobs: CacheWriter<DeserializeGuard<StreamJob>>,
    deployments: CacheWriter<Deployment>,
    stateful_sets: CacheWriter<StatefulSet>,
    pods: CacheWriter<Pod>,
}

/// The Savepoint controller for one namespace (or all); its Savepoint watch fills the
/// context's Savepoint cache (`writer`).
async fn run_savepoints(
    client: Client,
    ns: Option<String>,
    ctx: Arc<Context>,
    writer: CacheWriter<DeserializeGuard<Savepoint>>,
    stop: watch::Receiver<bool>,
) {
    let svps = api_for::<DeserializeGuard<Savepoint>>(&client, ns.as_deref());
    let trigger = writer
        .fill(watcher(svps, watcher::Config::default()).default_backoff())
        .touched_objects()
        .predicate_filter(predicates::generation, Default::default());
    Controller::for_stream(trigger, ctx.cache.savepoints.clone())
        .graceful_shutdown_on(shutdown_signal(stop))
        .run(savepoint::reconcile, savepoint::error_policy, ctx)
        .for_each(|r| async move { log_controller_error("savepoint", r) })
        .await;
}

/// Logs what the controller stream reports: reconcile failures were logged (and turned into
/// events) by the reconciler, so they stay at debug; watch and queue errors (RBAC, a lost
/// watch, an object gone from the cache) are only seen here and are warnings.
fn log_controller_error<T, E1: std::error::Error + 'static, E2: std::error::Error + 'static>(
    controller: &str,
    r: Result<T, kube::runtime::controller::Error<E1, E2>>,
) {
    match r {
        Ok(_) => {}
        Err(e @ kube::runtime::controller::Error::ReconcilerFailed(..)) => {
            tracing::debug!(controller, error = %e, "reconcile failed")
        }
        Err(e) => tracing::warn!(controller, error = %e, "watch or queue error"),
    }
}
