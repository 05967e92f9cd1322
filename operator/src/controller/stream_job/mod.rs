//! The StreamJob controller.
//!
//! One pass: observe (child objects and pods through the API, the coordinator's control API,
//! storage when a stop or restore needs it) → [`lifecycle::decide`] → write the decided status
//! (server-side apply; the write-ahead log: if it fails nothing else runs) → emit events (best
//! effort) → run the actions → record their results (the stop trigger id).

mod children;
mod observe;
mod savepoints;
#[cfg(test)]
mod tests;

pub use observe::{StorageReads, read_claim, read_storage, storage_reads, storage_spec, to_report};
pub use savepoints::{
    FAILED_PERIODIC_KEPT, failed_periodic_to_prune, merge_savepoint_history, periodic_attempted_recently,
    savepoint_object_name,
};

use super::{Context, Error, FINALIZER, invalid_ref, publish, s3_options_for, set_finalizers_at};
use crate::build::{self, ANNOTATION_SPEC_GENERATION, FIELD_MANAGER, LABEL_DEPLOY_GENERATION, Target};
use crate::crd::{LifecycleState, Savepoint, SavepointOrigin, StreamJob, StreamJobStatus};
use crate::lifecycle::{self, Action as LAction};
use children::{apply_children, delete_ignoring_missing, delete_orphans, delete_workloads, ensure_job_secret};
use kube::api::{DeleteParams, Patch, PatchParams};
use kube::core::DeserializeGuard;
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use observe::observe;
use savepoints::record_savepoint;
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use tracing::Instrument;
use weir_runtime::control::api::SavepointRequest;

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
            let cycle = invalid.metadata.generation.unwrap_or(0) as u64;
            publish(
                &ctx,
                &r,
                cycle,
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
        Ok(a) => {
            ctx.failures.succeeded(&failure_key(&obj));
            Ok(a)
        }
        Err(e) => {
            ctx.metrics.error(CONTROLLER, e.reason());
            if matches!(e, Error::Conflict(_)) {
                // Not a failure: a newer object exists; the retry decides on it.
                tracing::info!(parent: &span, error = %e, "stale object; retrying");
                return Err(e);
            }
            tracing::warn!(parent: &span, error = %e, "reconcile failed");
            let cycle = job.status.as_ref().map(|s| s.deploy_generation).unwrap_or(0);
            publish(&ctx, &job.object_ref(&()), cycle, true, e.reason(), e.to_string()).await;
            Err(e)
        }
    }
}

/// The backoff key of a StreamJob.
fn failure_key(obj: &DeserializeGuard<StreamJob>) -> String {
    format!("StreamJob/{}/{}", obj.namespace().unwrap_or_default(), obj.name_any())
}

/// Requeue policy after an error: a conflict is retried at once (the cache catches up with the
/// newer object), anything else after this job's own backoff (5 s doubling to 5 min).
pub fn error_policy(obj: Arc<DeserializeGuard<StreamJob>>, err: &Error, ctx: Arc<Context>) -> Action {
    super::error_requeue(&ctx, &failure_key(&obj), err)
}

/// Writes status (server-side apply) on the condition that the object is still at
/// `resource_version`: status is the write-ahead log, and a pass that decided on an older
/// object must not overwrite what a newer pass recorded (409 → [`Error::Conflict`]). Returns
/// the new resourceVersion, the condition of this pass's next write.
async fn write_status(
    api: &Api<StreamJob>,
    name: &str,
    resource_version: Option<&str>,
    status: &StreamJobStatus,
) -> Result<Option<String>, Error> {
    let body = json!({
        "apiVersion": StreamJob::api_version(&()),
        "kind": StreamJob::kind(&()),
        "metadata": {"resourceVersion": resource_version},
        "status": status,
    });
    api.patch_status(name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&body))
        .await
        .map(|o| o.resource_version())
        .map_err(|e| match e {
            kube::Error::Api(s) if s.code == 409 => Error::Conflict(format!("status of {name}: {}", s.message)),
            e => Error::StatusError(e),
        })
}

/// Checks that `name` is still at `resource_version` before a pass acts without having
/// written status (a write would have checked it): a pass on a stale cached object must not
/// delete or deploy workloads.
async fn ensure_current(api: &Api<StreamJob>, name: &str, resource_version: Option<&str>) -> Result<(), Error> {
    let current = api.get(name).await.map_err(|source| Error::ObserveError {
        what: format!("StreamJob {name}"),
        source,
    })?;
    if current.resource_version().as_deref() == resource_version {
        Ok(())
    } else {
        Err(Error::Conflict(format!(
            "StreamJob {name} changed since it was read (resourceVersion {} → {})",
            resource_version.unwrap_or("none"),
            current.resource_version().unwrap_or_default()
        )))
    }
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
    // The resourceVersion every write of this pass is conditioned on, advanced by each write.
    let mut resource_version = job.resource_version();
    if !has_finalizer {
        let mut f = job.finalizers().to_vec();
        f.push(FINALIZER.into());
        resource_version = set_finalizers_at(&jobs, &name, resource_version, f).await?;
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

    // The write-ahead log: persist the intent before any action, on the condition that the
    // object is the one decided on; without a write, check that before acting.
    if status != old {
        resource_version = write_status(&jobs, &name, resource_version.as_deref(), &status).await?;
    } else if !decision.actions.is_empty() {
        ensure_current(&jobs, &name, resource_version.as_deref()).await?;
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
    // Events of this pass belong to the deployment cycle it decided (see `event_action`).
    let cycle = status.deploy_generation;
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
        publish(ctx, &oref, cycle, now_state == "FAILED", "JobStatusChanged", msg).await;
    }
    for ev in &decision.events {
        publish(
            ctx,
            &oref,
            cycle,
            ev.warning,
            &format!("{:?}", ev.reason),
            ev.message.clone(),
        )
        .await;
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
                        resource_version = write_status(&jobs, &name, resource_version.as_deref(), &status).await?;
                    }
                    // The pending operation stays at its step; the next pass asks again or
                    // finds the savepoint in storage.
                    Err(e) => {
                        publish(
                            ctx,
                            &oref,
                            status.deploy_generation,
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
                    defaults: &ctx.runtime_defaults,
                };
                ensure_job_secret(ctx, &ns, &target).await?;
                let policies = build::network_policies(&target, &ctx.network_policies);
                apply_children(ctx, &ns, &build::build(&target), &policies).await?;
                if new_generation {
                    delete_orphans(ctx, &ns, &name).await?;
                    // Once per deployment cycle: each worker logs the same at its start, but a
                    // pod killed for memory shows little more than OOMKilled.
                    if let Some(warning) = build::disk_memory_warning(&target) {
                        publish(ctx, &oref, deploy_generation, true, "DiskStateOverMemory", warning).await;
                    }
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
                ctx.snapshots
                    .dispose(&s3, &path)
                    .await
                    .map_err(|e| Error::StorageError(e.to_string()))?;
                let api: Api<Savepoint> = Api::namespaced(ctx.client.clone(), &ns);
                for s in observed.savepoints.iter().filter(|s| {
                    s.spec.origin != SavepointOrigin::Manual
                        && s.status.as_ref().and_then(|st| st.path.as_deref()) == Some(path.as_str())
                }) {
                    delete_ignoring_missing(&api, &s.name_any(), "Savepoint", &DeleteParams::default()).await?;
                }
                // Only now, with the data gone, does the history forget it (a failed dispose
                // above leaves the entry, and the next pass retries).
                status.savepoint_history.retain(|r| r.path != path);
                resource_version = write_status(&jobs, &name, resource_version.as_deref(), &status).await?;
            }
            LAction::RemoveFinalizer => {
                let keep: Vec<String> = job.finalizers().iter().filter(|f| *f != FINALIZER).cloned().collect();
                // The resourceVersion of this pass's own status write, not the one read.
                resource_version = set_finalizers_at(&jobs, &name, resource_version.take(), keep).await?;
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
