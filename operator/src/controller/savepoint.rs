//! The Savepoint controller: takes manual and periodic savepoints through the job's control
//! API and records the result; upgrade savepoints are records only (the StreamJob controller
//! took them while stopping).
//!
//! Pending → (trigger) → InProgress → (poll) → Completed. A refused trigger ("not all tasks
//! running") or a failed savepoint is retried with exponential backoff up to
//! [`MAX_FAILURES`] attempts, then Failed. If the job stops, is suspended or disappears first,
//! the savepoint is Abandoned. Deleting a Savepoint with `disposeOnDelete` removes its data
//! through a finalizer, except when it is the job's current restore point (FLINK-38033).

use super::stream_job::storage_spec;
use super::{Context, Error, FINALIZER, invalid_ref, publish, s3_config_options, set_finalizers, system_time};
use crate::build::FIELD_MANAGER;
use crate::control::ControlError;
use crate::crd::{
    DesiredState, LifecycleState, S3Config, Savepoint, SavepointOrigin, SavepointState, SavepointStatus, StreamJob,
};
use crate::lifecycle::disposal::{DisposalFacts, DisposalStep, DisposeFailure, disposal_step};
use crate::snapshots::CredentialsError;
use crate::snapshots::savepoint_directory;
use kube::api::{Patch, PatchParams};
use kube::core::DeserializeGuard;
use kube::runtime::controller::Action;
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use std::sync::Arc;
use std::time::Duration;
use weir_runtime::control::api::{SavepointRequest, TriggerState};

/// Controller name in metrics.
pub const CONTROLLER: &str = "savepoint";
/// Trigger attempts before a savepoint is Failed.
pub const MAX_FAILURES: u32 = 5;
/// Poll interval while a savepoint is in progress or the job is starting.
pub const POLL: Duration = Duration::from_secs(2);

/// Backoff before attempt `failures + 1`: 5 s doubling, at most 5 minutes.
pub fn backoff(failures: u32) -> Duration {
    let secs = 5u64.saturating_mul(1u64 << failures.saturating_sub(1).min(6));
    Duration::from_secs(secs.min(300))
}

/// Reconciles one Savepoint.
pub async fn reconcile(obj: Arc<DeserializeGuard<Savepoint>>, ctx: Arc<Context>) -> Result<Action, Error> {
    let _timer = ctx.metrics.reconcile(CONTROLLER);
    let sp = match &obj.0 {
        Ok(sp) => sp,
        Err(invalid) => {
            ctx.metrics.error(CONTROLLER, "ValidationError");
            let r = invalid_ref::<Savepoint>(&invalid.metadata);
            publish(
                &ctx,
                &r,
                invalid.metadata.generation.unwrap_or(0) as u64,
                true,
                "ValidationError",
                format!("invalid Savepoint: {}", invalid.error),
            )
            .await;
            return Ok(Action::await_change());
        }
    };
    match reconcile_savepoint(sp, &ctx).await {
        Ok(a) => {
            ctx.failures.succeeded(&failure_key(&obj));
            Ok(a)
        }
        Err(e) => {
            ctx.metrics.error(CONTROLLER, e.reason());
            tracing::warn!(name = %sp.name_any(), error = %e, "savepoint reconcile failed");
            let cycle = sp.metadata.generation.unwrap_or(0) as u64;
            publish(&ctx, &sp.object_ref(&()), cycle, true, e.reason(), e.to_string()).await;
            Err(e)
        }
    }
}

/// Requeue policy after an error.
pub fn error_policy(obj: Arc<DeserializeGuard<Savepoint>>, err: &Error, ctx: Arc<Context>) -> Action {
    super::error_requeue(&ctx, &failure_key(&obj), err)
}

/// The backoff key of a Savepoint.
fn failure_key(obj: &DeserializeGuard<Savepoint>) -> String {
    format!("Savepoint/{}/{}", obj.namespace().unwrap_or_default(), obj.name_any())
}

async fn write_status(api: &Api<Savepoint>, name: &str, status: &SavepointStatus) -> Result<(), Error> {
    let body = json!({
        "apiVersion": Savepoint::api_version(&()),
        "kind": Savepoint::kind(&()),
        "status": status,
    });
    api.patch_status(name, &PatchParams::apply(FIELD_MANAGER).force(), &Patch::Apply(&body))
        .await
        .map(|_| ())
        .map_err(Error::StatusError)
}

fn job_stopped(job: Option<&StreamJob>) -> Option<String> {
    let Some(job) = job else {
        return Some("the job does not exist".into());
    };
    if job.meta().deletion_timestamp.is_some() {
        return Some("the job is being deleted".into());
    }
    if job.spec.state == DesiredState::Suspended {
        return Some("the job is suspended".into());
    }
    let lifecycle = job.status.as_ref().map(|s| s.lifecycle_state).unwrap_or_default();
    match lifecycle {
        LifecycleState::Suspended | LifecycleState::Failed | LifecycleState::Deleting => {
            Some(format!("the job is {lifecycle:?}"))
        }
        _ => None,
    }
}

fn job_running(job: &StreamJob) -> bool {
    job.status.as_ref().is_some_and(|s| {
        s.lifecycle_state == LifecycleState::Running && s.job_status.as_ref().is_some_and(|j| j.state == "RUNNING")
    })
}

/// The job `ns/name` from the watch cache; a job not (yet) in the cache is read from the API
/// server before it is taken for gone (a Savepoint applied together with its new job must not
/// be abandoned because the job's watch event came later).
async fn cached_job(ctx: &Context, jobs: &Api<StreamJob>, ns: &str, name: &str) -> Result<Option<StreamJob>, Error> {
    ctx.cache.jobs_ready().await?;
    if let Some(job) = ctx.cache.job(ns, name) {
        return Ok(Some(job));
    }
    jobs.get_opt(name).await.map_err(|source| Error::ObserveError {
        what: "StreamJob".into(),
        source,
    })
}

async fn reconcile_savepoint(sp: &Savepoint, ctx: &Context) -> Result<Action, Error> {
    let ns = sp.namespace().unwrap_or_default();
    let name = sp.name_any();
    let api: Api<Savepoint> = Api::namespaced(ctx.client.clone(), &ns);
    let jobs: Api<StreamJob> = Api::namespaced(ctx.client.clone(), &ns);
    let has_finalizer = sp.finalizers().iter().any(|f| f == FINALIZER);
    if sp.meta().deletion_timestamp.is_some() {
        if has_finalizer {
            // Read fresh, not from the cache: whether the data is the job's current restore
            // point decides whether it may be deleted (FLINK-38033).
            let job = jobs
                .get_opt(&sp.spec.job_ref.name)
                .await
                .map_err(|source| Error::ObserveError {
                    what: "StreamJob".into(),
                    source,
                })?;
            cleanup(sp, ctx, job.as_ref()).await?;
            let keep: Vec<String> = sp.finalizers().iter().filter(|f| *f != FINALIZER).cloned().collect();
            set_finalizers(&api, sp, keep).await?;
        }
        return Ok(Action::await_change());
    }
    if sp.spec.dispose_on_delete && !has_finalizer {
        let mut f = sp.finalizers().to_vec();
        f.push(FINALIZER.into());
        set_finalizers(&api, sp, f).await?;
    }
    let old = sp.status.clone().unwrap_or_default();
    if sp.spec.origin == SavepointOrigin::Upgrade
        || matches!(
            old.state,
            SavepointState::Completed | SavepointState::Failed | SavepointState::Abandoned
        )
    {
        return Ok(Action::await_change());
    }
    let job = cached_job(ctx, &jobs, &ns, &sp.spec.job_ref.name).await?;
    let oref = sp.object_ref(&());
    let cycle = sp.metadata.generation.unwrap_or(0) as u64;
    let mut st = old.clone();
    let mut requeue = POLL;
    let mut event: Option<(bool, &str, String)> = None;

    if let Some(why) = job_stopped(job.as_ref()) {
        st.state = SavepointState::Abandoned;
        st.error = Some(format!("abandoned: {why}"));
        event = Some((true, "SavepointError", format!("savepoint abandoned: {why}")));
    } else if let Some(job) = job.as_ref() {
        let control = ctx.control.for_job(&ns, &job.name_any());
        let mut failed = |st: &mut SavepointStatus, msg: String| {
            st.failures += 1;
            st.error = Some(msg.clone());
            st.trigger_id = None;
            if st.failures >= MAX_FAILURES {
                st.state = SavepointState::Failed;
                (
                    true,
                    "SavepointError",
                    format!("savepoint failed after {} attempts: {msg}", st.failures),
                )
            } else {
                st.state = SavepointState::Pending;
                requeue = backoff(st.failures);
                (
                    true,
                    "SavepointError",
                    format!(
                        "savepoint attempt {} failed: {msg}; retrying in {:?}",
                        st.failures, requeue
                    ),
                )
            }
        };
        match (old.state, old.trigger_id.as_deref()) {
            (SavepointState::InProgress, Some(id)) => match control.savepoint(id).await {
                Ok(s) => match s.state {
                    TriggerState::Completed => {
                        st.state = SavepointState::Completed;
                        st.path = s.path.clone();
                        st.s3 = Some(recorded_s3(job));
                        st.completed_at = Some(humantime::format_rfc3339_seconds((ctx.clock)()).to_string());
                        st.error = None;
                        event = Some((
                            false,
                            "SavepointCompleted",
                            format!("savepoint completed: {}", s.path.unwrap_or_default()),
                        ));
                    }
                    TriggerState::Failed => {
                        event = Some(failed(&mut st, s.error.unwrap_or_else(|| "savepoint failed".into())))
                    }
                    TriggerState::InProgress => {}
                },
                // The coordinator no longer knows the trigger (it restarted): take a new one.
                Err(ControlError::NotFound(m)) => event = Some(failed(&mut st, m)),
                Err(e) => tracing::debug!(error = %e, "savepoint poll failed; retrying"),
            },
            _ if !job_running(job) => {
                // Deploying or upgrading: wait for it to run.
                requeue = POLL;
            }
            _ => {
                let directory = sp.spec.directory.clone().or_else(|| savepoint_directory(&job.spec));
                match control
                    .trigger_savepoint(&SavepointRequest { directory, stop: false })
                    .await
                {
                    Ok(id) => {
                        st.state = SavepointState::InProgress;
                        st.trigger_id = Some(id);
                        st.error = None;
                    }
                    Err(e) => event = Some(failed(&mut st, e.to_string())),
                }
            }
        }
    }
    if st != old {
        write_status(&api, &name, &st).await?;
    }
    if let Some((warning, reason, note)) = event {
        publish(ctx, &oref, cycle, warning, reason, note).await;
    }
    Ok(match st.state {
        SavepointState::Pending | SavepointState::InProgress => Action::requeue(requeue),
        _ => Action::await_change(),
    })
}

/// The S3 settings a savepoint of `job` is recorded with (`status.s3`): those of the deployed
/// spec, whose runtime wrote it.
pub fn recorded_s3(job: &StreamJob) -> S3Config {
    storage_spec(job, &job.status.clone().unwrap_or_default())
        .s3
        .unwrap_or_default()
}

/// Disposes the savepoint's data on deletion (see [`disposal_step`]): never the job's current
/// restore point or the one its deployment started from; with the S3 settings recorded at
/// completion (else the job's, when it still exists), so it works after the job is gone. A
/// transient failure is an error (retried with the object's backoff); a permanent one, or a
/// transient one for too long, gives up with a Warning naming the path left behind. `Ok`: the
/// finalizer may go.
async fn cleanup(sp: &Savepoint, ctx: &Context, job: Option<&StreamJob>) -> Result<(), Error> {
    let path = sp.status.as_ref().and_then(|s| s.path.as_deref());
    let protected_by = job
        .filter(|j| {
            j.status.as_ref().is_some_and(|s| {
                s.restore_point.as_ref().is_some_and(|r| Some(r.path.as_str()) == path)
                    || (s.deployed_from.is_some() && s.deployed_from.as_deref() == path)
            })
        })
        .map(|j| j.name_any());
    let deleting_for = sp
        .meta()
        .deletion_timestamp
        .as_ref()
        .and_then(|t| (ctx.clock)().duration_since(system_time(t)).ok())
        .unwrap_or_default();
    let oref = sp.object_ref(&());
    let cycle = sp.metadata.generation.unwrap_or(0) as u64;
    let mut attempt = None;
    loop {
        let step = disposal_step(&DisposalFacts {
            dispose_on_delete: sp.spec.dispose_on_delete,
            path,
            protected_by: protected_by.as_deref(),
            attempt: attempt.clone(),
            deleting_for,
        });
        match step {
            DisposalStep::Dispose(path) => attempt = Some(dispose(sp, ctx, job, &path).await),
            DisposalStep::Release { warning, note } => {
                if let Some(note) = note {
                    publish(ctx, &oref, cycle, warning, "Cleanup", note).await;
                }
                return Ok(());
            }
            DisposalStep::Disposed(path) => {
                publish(ctx, &oref, cycle, false, "Cleanup", format!("disposed {path}")).await;
                return Ok(());
            }
            DisposalStep::Retry(why) => return Err(Error::StorageError(why)),
            DisposalStep::GiveUp(note) => {
                tracing::warn!(name = %sp.name_any(), "{note}");
                publish(ctx, &oref, cycle, true, "DisposeFailed", note).await;
                return Ok(());
            }
        }
    }
}

/// One dispose attempt with the recorded S3 settings (else the job's, else the defaults).
async fn dispose(sp: &Savepoint, ctx: &Context, job: Option<&StreamJob>, path: &str) -> Result<(), DisposeFailure> {
    let config = sp
        .status
        .as_ref()
        .and_then(|s| s.s3.clone())
        .or_else(|| job.map(recorded_s3));
    let ns = sp.namespace().unwrap_or_default();
    let s3 = s3_config_options(ctx, &ns, config.as_ref())
        .await
        .map_err(|e| match e {
            CredentialsError::Missing(m) => DisposeFailure::Permanent(m),
            e @ CredentialsError::Unreadable(_) => DisposeFailure::Transient(e.to_string()),
        })?;
    ctx.snapshots.dispose(&s3, path).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn backoff_doubles_and_caps() {
        let got: Vec<u64> = (1..=9).map(|f| backoff(f).as_secs()).collect();
        assert_eq!(got, vec![5, 10, 20, 40, 80, 160, 300, 300, 300]);
    }
}
