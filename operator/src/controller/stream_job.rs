//! The StreamJob controller.
//!
//! One pass: observe (child objects and pods through the API, the coordinator's control API,
//! storage when a stop or restore needs it) → [`lifecycle::decide`] → write the decided status
//! (server-side apply; the write-ahead log: if it fails nothing else runs) → emit events (best
//! effort) → run the actions → record their results (the stop trigger id).

use super::{Context, Error, FINALIZER, invalid_ref, publish, s3_options_for, set_finalizers, system_time};
use crate::build::{
    self, ANNOTATION_SPEC_GENERATION, FIELD_MANAGER, LABEL_DEPLOY_GENERATION, LABEL_JOB, Target, coordinator_name,
    worker_name,
};
use crate::crd::{
    LifecycleState, OperationPhase, Savepoint, SavepointOrigin, SavepointRecord, SavepointState, StreamJob,
    StreamJobSpec, StreamJobStatus,
};
use crate::lifecycle::{self, Action as LAction, JobReport, Observation, RestoreInfo, Snapshot};
use crate::snapshots::{InspectError, SnapshotStore};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, Pod, Service};
use kube::api::{DeleteParams, ListParams, Patch, PatchParams};
use kube::core::DeserializeGuard;
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use tracing::Instrument;
use weir_runtime::control::api::{JobStatus, SavepointRequest};
use weir_runtime::storage::S3Options;

/// Controller name in metrics.
pub const CONTROLLER: &str = "streamjob";

/// Reconciles one StreamJob (entry point for the kube `Controller`). An object that cannot be
/// deserialized gets a ValidationError event and is left alone until it changes.
pub async fn reconcile(obj: Arc<DeserializeGuard<StreamJob>>, ctx: Arc<Context>) -> Result<Action, Error> {
    let _timer = ctx.metrics.reconcile(CONTROLLER);
    let job = match &obj.0 {
        Ok(job) => job,
        Err(invalid) => {
            ctx.metrics.error(CONTROLLER, "ValidationError");
            let r = invalid_ref::<StreamJob>(&invalid.metadata);
            publish(
                &ctx,
                &r,
                true,
                "ValidationError",
                format!("invalid StreamJob: {}", invalid.error),
            )
            .await;
            return Ok(Action::await_change());
        }
    };
    let span = tracing::info_span!(
        "reconcile",
        controller = CONTROLLER,
        namespace = %job.namespace().unwrap_or_default(),
        name = %job.name_any()
    );
    match reconcile_job(job, &ctx).instrument(span.clone()).await {
        Ok(a) => Ok(a),
        Err(e) => {
            ctx.metrics.error(CONTROLLER, e.reason());
            tracing::warn!(parent: &span, error = %e, "reconcile failed");
            publish(&ctx, &job.object_ref(&()), true, e.reason(), e.to_string()).await;
            Err(e)
        }
    }
}

/// Requeue policy after an error.
pub fn error_policy(_obj: Arc<DeserializeGuard<StreamJob>>, _err: &Error, _ctx: Arc<Context>) -> Action {
    Action::requeue(Duration::from_secs(15))
}

/// What observation read besides the lifecycle's [`Observation`].
struct Observed {
    observation: Observation,
    savepoints: Vec<Savepoint>,
    coordinator: Option<Deployment>,
}

/// What a reconcile pass reads from storage (see [`storage_reads`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StorageReads {
    /// Look for the newest completed checkpoint or savepoint.
    pub newest: bool,
    /// Inspect this restore point.
    pub inspect: Option<String>,
}

impl StorageReads {
    /// Nothing to read.
    pub fn is_empty(&self) -> bool {
        !self.newest && self.inspect.is_none()
    }
}

/// Storage is read only where a decision depends on it: finding the savepoint of a stop and
/// the restore point after the pods are gone (newest), and inspecting the restore point of a
/// deploy. Pure.
pub fn storage_reads(old: &StreamJobStatus, job_spec: &StreamJobSpec) -> StorageReads {
    let phase = old.pending.as_ref().map(|p| p.phase);
    let newest = matches!(
        phase,
        Some(OperationPhase::AwaitingStop) | Some(OperationPhase::AwaitingTermination)
    );
    let inspect = match (&old.pending, old.lifecycle_state) {
        (Some(p), _) if p.phase == OperationPhase::Deploying => old.restore_point.as_ref().map(|r| r.path.clone()),
        (None, LifecycleState::Created) => old
            .restore_point
            .as_ref()
            .map(|r| r.path.clone())
            .or_else(|| job_spec.initial_savepoint_path.clone()),
        _ => None,
    };
    StorageReads { newest, inspect }
}

/// Performs `reads` against the storage of `spec` (the deployed spec): the lifecycle's
/// `newest_snapshot` and `restore_info` observations. An unusable restore point (no or a
/// corrupt `_metadata`) is an observation; a storage failure is an error (retried).
pub async fn read_storage(
    snapshots: &dyn SnapshotStore,
    s3: &S3Options,
    spec: &StreamJobSpec,
    name: &str,
    reads: StorageReads,
) -> Result<(Option<Snapshot>, RestoreInfo), Error> {
    let newest = if reads.newest {
        snapshots.newest(spec, s3, name).await.map_err(Error::StorageError)?
    } else {
        None
    };
    let info = match reads.inspect {
        None => RestoreInfo::NotInspected,
        Some(path) => match snapshots.inspect(s3, &path).await {
            Ok(info) => RestoreInfo::Found { path, info },
            Err(InspectError::Unusable(error)) => RestoreInfo::Missing { path, error },
            Err(InspectError::Storage(e)) => return Err(Error::StorageError(e)),
        },
    };
    Ok((newest, info))
}

/// The lifecycle's view of a control API job status.
pub fn to_report(j: JobStatus) -> JobReport {
    JobReport {
        job_id: j.job_id,
        state: j.state,
        last_completed: j.last_completed_checkpoint.map(|c| Snapshot {
            path: c.path,
            id: c.id,
            kind: c.kind,
            completed_at_ms: c.completed_at_ms,
        }),
        failure: j.failure,
    }
}

fn observe_err(what: &str) -> impl FnOnce(kube::Error) -> Error + '_ {
    move |source| Error::ObserveError {
        what: what.into(),
        source,
    }
}

/// The spec whose storage holds the job's snapshots: the deployed one when readable.
pub fn storage_spec(job: &StreamJob, status: &StreamJobStatus) -> StreamJobSpec {
    status
        .last_reconciled_spec
        .as_deref()
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_else(|| job.spec.clone())
}

async fn observe(job: &StreamJob, old: &StreamJobStatus, ctx: &Context, now: SystemTime) -> Result<Observed, Error> {
    let ns = job.namespace().unwrap_or_default();
    let name = job.name_any();
    let client = ctx.client.clone();
    let coordinator = Api::<Deployment>::namespaced(client.clone(), &ns)
        .get_opt(&coordinator_name(&name))
        .await
        .map_err(observe_err("Deployment"))?;
    let workers = Api::<StatefulSet>::namespaced(client.clone(), &ns)
        .get_opt(&worker_name(&name))
        .await
        .map_err(observe_err("StatefulSet"))?;
    let pods = Api::<Pod>::namespaced(client.clone(), &ns)
        .list(&ListParams::default().labels(&format!("{LABEL_JOB}={name}")))
        .await
        .map_err(observe_err("Pods"))?
        .items;
    let crash_looping = pods.iter().any(|p| {
        p.status
            .as_ref()
            .and_then(|s| s.container_statuses.as_ref())
            .is_some_and(|cs| {
                cs.iter().any(|c| {
                    c.state
                        .as_ref()
                        .and_then(|s| s.waiting.as_ref())
                        .and_then(|w| w.reason.as_deref())
                        == Some("CrashLoopBackOff")
                })
            })
    });
    let savepoints: Vec<Savepoint> = Api::<Savepoint>::namespaced(client.clone(), &ns)
        .list(&ListParams::default())
        .await
        .map_err(observe_err("Savepoints"))?
        .items
        .into_iter()
        .filter(|s| s.spec.job_ref.name == name)
        .collect();

    // The control API is asked only while a coordinator exists.
    let control = ctx.control.for_job(&ns, &name);
    let (report, trigger) = if coordinator.is_some() {
        let report = control.job().await.ok().map(to_report);
        let trigger = match old.pending.as_ref().and_then(|p| p.trigger_id.as_deref()) {
            Some(id) => control.savepoint(id).await.ok(),
            None => None,
        };
        (report, trigger)
    } else {
        (None, None)
    };

    // Storage is read only where a decision depends on it.
    let spec = storage_spec(job, old);
    let reads = storage_reads(old, &job.spec);
    let (newest_snapshot, restore_info) = if reads.is_empty() {
        (None, RestoreInfo::NotInspected)
    } else {
        let s3 = s3_options_for(ctx, &ns, &spec).await?;
        read_storage(ctx.snapshots.as_ref(), &s3, &spec, &name, reads).await?
    };
    let savepoint_in_flight_since = savepoints
        .iter()
        .filter(|s| {
            matches!(
                s.status.as_ref().map(|st| st.state).unwrap_or_default(),
                SavepointState::Pending | SavepointState::InProgress
            ) && s.meta().deletion_timestamp.is_none()
        })
        .map(|s| s.meta().creation_timestamp.as_ref().map(system_time).unwrap_or(now))
        .min();
    Ok(Observed {
        observation: Observation {
            now,
            generation: job.meta().generation.unwrap_or(0),
            name,
            deleting: job.meta().deletion_timestamp.is_some(),
            job: report,
            trigger,
            workloads_present: coordinator.is_some() || workers.is_some(),
            job_pods: pods.len() as u32,
            crash_looping,
            newest_snapshot,
            restore_info,
            savepoint_in_flight_since,
        },
        savepoints,
        coordinator,
    })
}

/// Folds completed operator-taken Savepoint objects of the job into `status.savepointHistory`
/// (periodic savepoints are taken by the Savepoint controller and recorded here), and names
/// the records that have an object. Pure.
pub fn merge_savepoint_history(status: &mut StreamJobStatus, savepoints: &[Savepoint]) {
    for s in savepoints {
        let origin = s.spec.origin;
        let Some(st) = &s.status else { continue };
        let (SavepointState::Completed, Some(path)) = (st.state, &st.path) else {
            continue;
        };
        if origin == SavepointOrigin::Manual || s.meta().deletion_timestamp.is_some() {
            continue;
        }
        match status.savepoint_history.iter_mut().find(|r| &r.path == path) {
            Some(r) => {
                if r.savepoint_name.is_none() {
                    r.savepoint_name = Some(s.name_any());
                }
            }
            None => status.savepoint_history.push(SavepointRecord {
                path: path.clone(),
                completed_at: st.completed_at.clone().unwrap_or_default(),
                origin,
                savepoint_name: Some(s.name_any()),
            }),
        }
    }
    status
        .savepoint_history
        .sort_by(|a, b| a.completed_at.cmp(&b.completed_at));
}

async fn write_status(api: &Api<StreamJob>, name: &str, status: &StreamJobStatus) -> Result<(), Error> {
    let body = json!({
        "apiVersion": StreamJob::api_version(&()),
        "kind": StreamJob::kind(&()),
        "status": status,
    });
    api.patch_status(name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&body))
        .await
        .map(|_| ())
        .map_err(Error::StatusError)
}

async fn reconcile_job(job: &StreamJob, ctx: &Context) -> Result<Action, Error> {
    let ns = job.namespace().unwrap_or_default();
    let name = job.name_any();
    let jobs: Api<StreamJob> = Api::namespaced(ctx.client.clone(), &ns);
    let deleting = job.meta().deletion_timestamp.is_some();
    let has_finalizer = job.finalizers().iter().any(|f| f == FINALIZER);
    if deleting && !has_finalizer {
        ctx.metrics.job_state(&ns, &name, None);
        return Ok(Action::await_change());
    }
    if !has_finalizer {
        let mut f = job.finalizers().to_vec();
        f.push(FINALIZER.into());
        set_finalizers(&jobs, job, f).await?;
    }
    let now = (ctx.clock)();
    let old = job.status.clone().unwrap_or_default();
    let observed = observe(job, &old, ctx, now).await?;
    let mut base = old.clone();
    merge_savepoint_history(&mut base, &observed.savepoints);
    let decision = lifecycle::decide(&job.spec, &base, &observed.observation);
    let mut status = decision.status.clone();
    let generation = observed.observation.generation;
    status.conditions = super::conditions(&status, &old.conditions, generation, now);
    status.selector = Some(super::worker_selector(&name));

    // The write-ahead log: persist the intent before any action.
    if status != old {
        write_status(&jobs, &name, &status).await?;
    }
    let state_name = |s: LifecycleState| serde_json::to_value(s).ok().and_then(|v| v.as_str().map(str::to_owned));
    let (from, to) = (
        state_name(old.lifecycle_state).unwrap_or_default(),
        state_name(status.lifecycle_state).unwrap_or_default(),
    );
    ctx.metrics.transition(&from, &to);
    let job_state = status.job_status.as_ref().map(|j| j.state.clone()).unwrap_or_default();
    ctx.metrics.job_state(&ns, &name, Some((&to, &job_state)));
    if from != to {
        tracing::info!(namespace = %ns, name = %name, from = %from, to = %to, "lifecycle transition");
    }

    let oref = job.object_ref(&());
    // FKO's JobStatusChanged: the coordinator reported a different (known) state.
    let known = |s: &StreamJobStatus| {
        s.job_status
            .as_ref()
            .map(|j| j.state.clone())
            .filter(|s| !s.is_empty() && s != "UNKNOWN")
    };
    if let (prev, Some(now_state)) = (known(&old), known(&status))
        && prev.as_deref() != Some(now_state.as_str())
    {
        let msg = format!("job state {} → {now_state}", prev.unwrap_or_else(|| "none".into()));
        publish(ctx, &oref, now_state == "FAILED", "JobStatusChanged", msg).await;
    }
    for ev in &decision.events {
        publish(ctx, &oref, ev.warning, &format!("{:?}", ev.reason), ev.message.clone()).await;
    }

    for action in decision.actions {
        match action {
            LAction::StopWithSavepoint { directory } => {
                let control = ctx.control.for_job(&ns, &name);
                match control
                    .trigger_savepoint(&SavepointRequest { directory, stop: true })
                    .await
                {
                    Ok(id) => {
                        lifecycle::record_trigger(&mut status, id);
                        write_status(&jobs, &name, &status).await?;
                    }
                    // The pending operation stays at its step; the next pass asks again or
                    // finds the savepoint in storage.
                    Err(e) => {
                        publish(
                            ctx,
                            &oref,
                            true,
                            "SavepointError",
                            format!("stop-with-savepoint request failed: {e}; retrying"),
                        )
                        .await
                    }
                }
            }
            LAction::DeleteWorkloads => delete_workloads(ctx, &ns, &name).await?,
            LAction::Deploy {
                spec,
                restore_from,
                deploy_generation,
            } => {
                let observed_generation = observed
                    .coordinator
                    .as_ref()
                    .and_then(|d| d.labels().get(LABEL_DEPLOY_GENERATION))
                    .and_then(|g| g.parse::<u64>().ok());
                let new_generation = observed_generation != Some(deploy_generation);
                // The generation that asked for this deployment (FKO's annotation): kept while
                // the deployment is unchanged, else the pending operation's target.
                let spec_generation = if new_generation {
                    old.pending
                        .as_ref()
                        .and_then(|p| p.target_generation)
                        .unwrap_or(generation)
                } else {
                    observed
                        .coordinator
                        .as_ref()
                        .and_then(|d| d.annotations().get(ANNOTATION_SPEC_GENERATION))
                        .and_then(|g| g.parse().ok())
                        .unwrap_or(generation)
                };
                let target = Target {
                    job,
                    spec: &spec,
                    restore_from: restore_from.as_deref(),
                    deploy_generation,
                    spec_generation,
                    default_image: &ctx.default_image,
                };
                apply_children(ctx, &ns, &build::build(&target)).await?;
                if new_generation {
                    delete_orphans(ctx, &ns, &name, deploy_generation).await?;
                }
            }
            LAction::RecordSavepoint { origin, path } => {
                if path.is_none() && periodic_attempted_recently(&job.spec, &observed.savepoints, now) {
                    // A periodic savepoint that failed is not in the history; don't take a new
                    // one every pass, wait for the next interval.
                    continue;
                }
                record_savepoint(ctx, job, origin, path.as_deref(), now).await?;
            }
            LAction::DisposeSavepoint { path } => {
                let s3 = s3_options_for(ctx, &ns, &storage_spec(job, &old)).await?;
                ctx.snapshots.dispose(&s3, &path).await.map_err(Error::StorageError)?;
                let api: Api<Savepoint> = Api::namespaced(ctx.client.clone(), &ns);
                for s in observed.savepoints.iter().filter(|s| {
                    s.spec.origin != SavepointOrigin::Manual
                        && s.status.as_ref().and_then(|st| st.path.as_deref()) == Some(path.as_str())
                }) {
                    delete_ignoring_missing(&api, &s.name_any(), "Savepoint", &DeleteParams::default()).await?;
                }
            }
            LAction::RemoveFinalizer => {
                let keep: Vec<String> = job.finalizers().iter().filter(|f| *f != FINALIZER).cloned().collect();
                set_finalizers(&jobs, job, keep).await?;
                ctx.metrics.job_state(&ns, &name, None);
            }
        }
    }
    if !deleting {
        // Failed periodic attempts have no data and are not in the history: keep the newest few
        // (they space the attempts and show why they failed), delete the rest.
        let api: Api<Savepoint> = Api::namespaced(ctx.client.clone(), &ns);
        for n in failed_periodic_to_prune(&observed.savepoints, FAILED_PERIODIC_KEPT) {
            delete_ignoring_missing(&api, &n, "Savepoint", &DeleteParams::default()).await?;
        }
    }
    Ok(Action::requeue(decision.requeue.max(Duration::from_millis(500))))
}

/// Failed or abandoned periodic Savepoint objects kept per job.
pub const FAILED_PERIODIC_KEPT: usize = 3;

/// Names of the failed or abandoned periodic Savepoint objects of a job beyond the newest
/// `keep` (by creation time). Manual and completed ones are never returned. Pure.
pub fn failed_periodic_to_prune(savepoints: &[Savepoint], keep: usize) -> Vec<String> {
    let mut failed: Vec<(Option<SystemTime>, String)> = savepoints
        .iter()
        .filter(|s| s.spec.origin == SavepointOrigin::Periodic && s.meta().deletion_timestamp.is_none())
        .filter(|s| {
            matches!(
                s.status.as_ref().map(|st| st.state),
                Some(SavepointState::Failed | SavepointState::Abandoned)
            )
        })
        .map(|s| (s.meta().creation_timestamp.as_ref().map(system_time), s.name_any()))
        .collect();
    failed.sort_by(|a, b| b.cmp(a)); // newest first (names break ties)
    failed.into_iter().skip(keep).map(|(_, n)| n).collect()
}

async fn delete_ignoring_missing<K>(api: &Api<K>, name: &str, kind: &str, dp: &DeleteParams) -> Result<(), Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.delete(name, dp).await {
        Ok(_) => Ok(()),
        Err(kube::Error::Api(s)) if s.code == 404 => Ok(()),
        Err(source) => Err(Error::DeleteError {
            what: format!("{kind}/{name}"),
            source,
        }),
    }
}

/// Deletes the coordinator Deployment and worker StatefulSet (foreground: the objects stay
/// until their pods are gone, which the lifecycle waits for). Services and the ConfigMap stay.
async fn delete_workloads(ctx: &Context, ns: &str, name: &str) -> Result<(), Error> {
    let dp = DeleteParams::foreground();
    delete_ignoring_missing(
        &Api::<Deployment>::namespaced(ctx.client.clone(), ns),
        &coordinator_name(name),
        "Deployment",
        &dp,
    )
    .await?;
    delete_ignoring_missing(
        &Api::<StatefulSet>::namespaced(ctx.client.clone(), ns),
        &worker_name(name),
        "StatefulSet",
        &dp,
    )
    .await
}

async fn apply<K>(ctx: &Context, ns: &str, obj: &K) -> Result<(), Error>
where
    K: Resource<DynamicType = ()> + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
    K: Resource<Scope = k8s_openapi::NamespaceResourceScope>,
{
    let api: Api<K> = Api::namespaced(ctx.client.clone(), ns);
    let name = obj.name_any();
    api.patch(&name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(obj))
        .await
        .map(|_| ())
        .map_err(|source| Error::ApplyError {
            what: format!("{}/{name}", K::kind(&())),
            source,
        })
}

/// Server-side applies every child (ConfigMap first: the pods mount it).
async fn apply_children(ctx: &Context, ns: &str, c: &build::Children) -> Result<(), Error> {
    apply::<ConfigMap>(ctx, ns, &c.config_map).await?;
    apply::<Service>(ctx, ns, &c.coordinator_service).await?;
    apply::<Service>(ctx, ns, &c.worker_service).await?;
    apply::<Deployment>(ctx, ns, &c.coordinator).await?;
    apply::<StatefulSet>(ctx, ns, &c.workers).await
}

/// Deletes workloads of the job that this deployment did not produce (renamed children, or
/// another deploy generation).
async fn delete_orphans(ctx: &Context, ns: &str, name: &str, deploy_generation: u64) -> Result<(), Error> {
    let lp = ListParams::default().labels(&format!("{LABEL_JOB}={name}"));
    let stale = |n: &str, labels: &std::collections::BTreeMap<String, String>, expected: &str| {
        n != expected || labels.get(LABEL_DEPLOY_GENERATION).map(String::as_str) != Some(&deploy_generation.to_string())
    };
    let deployments: Api<Deployment> = Api::namespaced(ctx.client.clone(), ns);
    for d in deployments.list(&lp).await.map_err(observe_err("Deployments"))?.items {
        if stale(&d.name_any(), d.labels(), &coordinator_name(name)) {
            delete_ignoring_missing(&deployments, &d.name_any(), "Deployment", &DeleteParams::foreground()).await?;
        }
    }
    let sets: Api<StatefulSet> = Api::namespaced(ctx.client.clone(), ns);
    for s in sets.list(&lp).await.map_err(observe_err("StatefulSets"))?.items {
        if stale(&s.name_any(), s.labels(), &worker_name(name)) {
            delete_ignoring_missing(&sets, &s.name_any(), "StatefulSet", &DeleteParams::foreground()).await?;
        }
    }
    Ok(())
}

/// Whether a periodic Savepoint object of the job (in any state, including Failed) was created
/// within `savepoints.periodicInterval` of `now`. Pure.
pub fn periodic_attempted_recently(spec: &StreamJobSpec, savepoints: &[Savepoint], now: SystemTime) -> bool {
    let Some(interval) = spec
        .savepoints
        .as_ref()
        .and_then(|s| s.periodic_interval.as_deref())
        .and_then(|s| humantime::parse_duration(s).ok())
    else {
        return false;
    };
    savepoints
        .iter()
        .filter(|s| s.spec.origin == SavepointOrigin::Periodic)
        .filter_map(|s| s.meta().creation_timestamp.as_ref().map(system_time))
        .any(|t| now.duration_since(t).unwrap_or_default() < interval)
}

/// Name of the Savepoint object recording an operator-taken savepoint.
pub fn savepoint_object_name(job: &str, origin: SavepointOrigin, path: Option<&str>, now: SystemTime) -> String {
    let kind = match origin {
        SavepointOrigin::Manual => "manual",
        SavepointOrigin::Periodic => "periodic",
        SavepointOrigin::Upgrade => "upgrade",
    };
    let suffix = match path {
        Some(p) => p
            .trim_end_matches('/')
            .rsplit_once('-')
            .and_then(|(_, id)| id.parse::<u64>().ok())
            .map(|id| id.to_string())
            .unwrap_or_else(|| format!("{:08x}", xxhash_rust::xxh3::xxh3_64(p.as_bytes()) as u32)),
        None => now.duration_since(UNIX_EPOCH).unwrap_or_default().as_secs().to_string(),
    };
    format!("{job}-{kind}-{suffix}")
}

/// Creates (server-side apply) the Savepoint object owned by the job; with a path (an upgrade
/// savepoint that already exists) its status is set Completed.
async fn record_savepoint(
    ctx: &Context,
    job: &StreamJob,
    origin: SavepointOrigin,
    path: Option<&str>,
    now: SystemTime,
) -> Result<(), Error> {
    let ns = job.namespace().unwrap_or_default();
    let name = job.name_any();
    let obj_name = savepoint_object_name(&name, origin, path, now);
    let api: Api<Savepoint> = Api::namespaced(ctx.client.clone(), &ns);
    let body = json!({
        "apiVersion": Savepoint::api_version(&()),
        "kind": Savepoint::kind(&()),
        "metadata": {
            "name": obj_name,
            "labels": {LABEL_JOB: name, "app.kubernetes.io/managed-by": FIELD_MANAGER},
            "ownerReferences": [build::owner_reference(job)],
        },
        "spec": {"jobRef": {"name": name}, "origin": origin, "disposeOnDelete": false},
    });
    let pp = PatchParams::apply(FIELD_MANAGER).force();
    api.patch(&obj_name, &pp, &Patch::Apply(&body))
        .await
        .map_err(|source| Error::ApplyError {
            what: format!("Savepoint/{obj_name}"),
            source,
        })?;
    if let Some(path) = path {
        let status = json!({
            "apiVersion": Savepoint::api_version(&()),
            "kind": Savepoint::kind(&()),
            "status": {
                "state": SavepointState::Completed,
                "path": path,
                "completedAt": humantime::format_rfc3339_seconds(now).to_string(),
            },
        });
        api.patch_status(&obj_name, &pp, &Patch::Apply(&status))
            .await
            .map_err(Error::StatusError)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn svp(origin: &str, created: &str) -> Savepoint {
        serde_json::from_value(json!({
            "apiVersion": "weir.dev/v1alpha1", "kind": "Savepoint",
            "metadata": {"name": "x", "namespace": "ns", "creationTimestamp": created},
            "spec": {"jobRef": {"name": "wc"}, "origin": origin},
            "status": {"state": "Failed"},
        }))
        .unwrap()
    }

    #[test]
    fn periodic_attempts_are_spaced_by_the_interval() {
        let mut spec: StreamJobSpec = serde_json::from_value(json!({
            "image": "weir:1",
            "savepoints": {"periodicInterval": "1h"},
            "job": {"steps": [{"source": {"generator": {}}}, {"sink": {"print": {}}}]},
        }))
        .unwrap();
        let now = humantime::parse_rfc3339("2023-11-14T22:00:00Z").unwrap();
        let recent = [svp("Periodic", "2023-11-14T21:30:00Z")];
        let old = [svp("Periodic", "2023-11-14T20:30:00Z")];
        let manual = [svp("Manual", "2023-11-14T21:59:00Z")];
        assert!(periodic_attempted_recently(&spec, &recent, now));
        assert!(!periodic_attempted_recently(&spec, &old, now));
        assert!(!periodic_attempted_recently(&spec, &manual, now));
        spec.savepoints = None;
        assert!(!periodic_attempted_recently(&spec, &recent, now));
    }

    #[test]
    fn failed_periodic_savepoints_are_pruned_to_the_newest_few() {
        let mk = |name: &str, origin: &str, state: &str, created: &str| -> Savepoint {
            serde_json::from_value(json!({
                "apiVersion": "weir.dev/v1alpha1", "kind": "Savepoint",
                "metadata": {"name": name, "namespace": "ns", "creationTimestamp": created},
                "spec": {"jobRef": {"name": "wc"}, "origin": origin},
                "status": {"state": state},
            }))
            .unwrap()
        };
        let mut all: Vec<Savepoint> = (0..6)
            .map(|i| {
                let state = if i == 4 { "Abandoned" } else { "Failed" };
                mk(
                    &format!("wc-periodic-{i}"),
                    "Periodic",
                    state,
                    &format!("2023-11-14T20:0{i}:00Z"),
                )
            })
            .collect();
        all.push(mk("wc-periodic-ok", "Periodic", "Completed", "2023-11-14T10:00:00Z"));
        all.push(mk("mine", "Manual", "Failed", "2023-11-14T09:00:00Z"));
        all.push(mk("wc-periodic-now", "Periodic", "InProgress", "2023-11-14T09:00:00Z"));
        let prune = failed_periodic_to_prune(&all, 3);
        assert_eq!(prune, vec!["wc-periodic-2", "wc-periodic-1", "wc-periodic-0"]);
        assert!(failed_periodic_to_prune(&all[..3], 3).is_empty());
        // The kept ones still space the next attempt.
        let spec: StreamJobSpec = serde_json::from_value(json!({
            "image": "weir:1",
            "savepoints": {"periodicInterval": "30m"},
            "job": {"steps": [{"source": {"generator": {}}}, {"sink": {"print": {}}}]},
        }))
        .unwrap();
        let kept: Vec<Savepoint> = all.into_iter().filter(|s| !prune.contains(&s.name_any())).collect();
        let now = humantime::parse_rfc3339("2023-11-14T20:20:00Z").unwrap();
        assert!(periodic_attempted_recently(&spec, &kept, now));
    }

    #[test]
    fn savepoint_object_names() {
        let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
        assert_eq!(
            savepoint_object_name("wc", SavepointOrigin::Upgrade, Some("s3://b/svp/savepoint-wc-7/"), now),
            "wc-upgrade-7"
        );
        assert_eq!(
            savepoint_object_name("wc", SavepointOrigin::Periodic, None, now),
            "wc-periodic-1700000000"
        );
        assert!(
            savepoint_object_name("wc", SavepointOrigin::Upgrade, Some("s3://b/odd"), now).starts_with("wc-upgrade-")
        );
    }

    #[test]
    fn history_merges_completed_operator_savepoints_only() {
        let mk = |name: &str, origin: &str, state: &str, path: &str| -> Savepoint {
            serde_json::from_value(json!({
                "apiVersion": "weir.dev/v1alpha1", "kind": "Savepoint",
                "metadata": {"name": name, "namespace": "ns"},
                "spec": {"jobRef": {"name": "wc"}, "origin": origin},
                "status": {"state": state, "path": path, "completedAt": format!("2023-11-14T2{}:00:00Z", path.len() % 10)},
            }))
            .unwrap()
        };
        let mut st = StreamJobStatus {
            savepoint_history: vec![SavepointRecord {
                path: "s3://b/up-1".into(),
                completed_at: "2023-11-14T20:00:00Z".into(),
                origin: SavepointOrigin::Upgrade,
                savepoint_name: None,
            }],
            ..Default::default()
        };
        merge_savepoint_history(
            &mut st,
            &[
                mk("wc-upgrade-1", "Upgrade", "Completed", "s3://b/up-1"),
                mk("wc-periodic-2", "Periodic", "Completed", "s3://b/per-22"),
                mk("wc-periodic-3", "Periodic", "InProgress", "s3://b/per-333"),
                mk("mine", "Manual", "Completed", "s3://b/man"),
            ],
        );
        let got: Vec<(&str, Option<&str>)> = st
            .savepoint_history
            .iter()
            .map(|r| (r.path.as_str(), r.savepoint_name.as_deref()))
            .collect();
        assert_eq!(
            got,
            vec![
                ("s3://b/up-1", Some("wc-upgrade-1")),
                ("s3://b/per-22", Some("wc-periodic-2"))
            ]
        );
    }
}
