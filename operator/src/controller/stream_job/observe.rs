//! Observation: what one StreamJob reconcile reads from the watch caches, the coordinator's
//! control API and (only where a decision depends on it) storage, as the lifecycle's
//! [`Observation`].

use crate::build::{coordinator_name, worker_name};
use crate::controller::{Context, Error, s3_options_for, system_time};
use crate::crd::{
    DesiredState, LifecycleState, OperationPhase, RestoreOrigin, Savepoint, SavepointState, StreamJob, StreamJobSpec,
    StreamJobStatus,
};
use crate::lifecycle::{
    CoordinatorReport, JobReport, NewestSnapshot, Observation, RestoreInfo, Snapshot, StorageClaim, resume_rechooses,
};
use crate::snapshots::{InspectError, SnapshotStore};
use k8s_openapi::api::apps::v1::Deployment;
use k8s_openapi::api::core::v1::Pod;
use kube::{Resource, ResourceExt};
use std::time::SystemTime;
use weir_runtime::control::api::JobStatus;
use weir_runtime::storage::S3Options;

/// What observation read besides the lifecycle's [`Observation`].
pub(super) struct Observed {
    pub(super) observation: Observation,
    pub(super) savepoints: Vec<Savepoint>,
    pub(super) coordinator: Option<Deployment>,
}

/// What a reconcile pass reads from storage (see [`storage_reads`]).
#[derive(Clone, Debug, Default, PartialEq)]
pub struct StorageReads {
    /// Look for the newest completed checkpoint or savepoint.
    pub newest: bool,
    /// Inspect this restore point.
    pub inspect: Option<String>,
    /// Claim the checkpoint directory of this spec (the one a deploy in this pass would
    /// deploy) for the StreamJob ([`read_claim`]).
    pub claim: Option<StreamJobSpec>,
}

/// Storage is read only where a decision depends on it: finding the savepoint of a stop and
/// the restore point after the pods are gone or at a stateful resume, and the deployment's
/// boundary in a pass that may deploy a restore point the user gave (newest), and inspecting the restore point of a
/// deploy, and claiming the checkpoint directory of the spec a deploy would deploy (the
/// pending operation's target, or the spec itself before a first deploy or a resume), and of
/// a changed spec that moves a running job's checkpoints (before the job is stopped). Pure.
pub fn storage_reads(old: &StreamJobStatus, job_spec: &StreamJobSpec) -> StorageReads {
    let phase = old.pending.as_ref().map(|p| p.phase);
    // A pass that may deploy a restore point the user gave records the newest snapshot id as
    // the deployment's boundary (`status.deployedAfterSnapshot`), and a stateful resume
    // chooses its restore point again (the suspend's may be stale: a refused choice, or files
    // put back since). Only those: a storage the operator cannot list must not stop other
    // deploys (the claim lets them go on with a Warning).
    let given = old
        .restore_point
        .as_ref()
        .is_some_and(|r| r.origin == RestoreOrigin::Initial);
    let running = job_spec.state == DesiredState::Running;
    let deploy_reads = match (&old.pending, old.lifecycle_state) {
        (Some(p), _) => p.phase == OperationPhase::Deploying && given,
        (None, LifecycleState::Created) => running && (given || job_spec.initial_savepoint_path.is_some()),
        (None, LifecycleState::Suspended) => running && (given || resume_rechooses(old, job_spec)),
        _ => false,
    };
    let newest = deploy_reads
        || matches!(
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
    // The passes that may deploy: a pending deploy, and a first deploy or a resume, each of
    // which reaches its deploy within the pass that starts it.
    let claim = match (&old.pending, old.lifecycle_state) {
        (Some(p), _) if p.phase == OperationPhase::Deploying => {
            p.target_spec.as_deref().and_then(|s| serde_json::from_str(s).ok())
        }
        (None, LifecycleState::Created | LifecycleState::Suspended) if job_spec.state == DesiredState::Running => {
            Some(job_spec.clone())
        }
        // A running job whose spec moves its checkpoints: refused before the stop when another
        // StreamJob owns the new directory.
        (None, LifecycleState::Running | LifecycleState::Deploying) => {
            let deployed: Option<StreamJobSpec> = old
                .last_reconciled_spec
                .as_deref()
                .and_then(|s| serde_json::from_str(s).ok());
            deployed
                .filter(|d| d.checkpointing.storage != job_spec.checkpointing.storage)
                .map(|_| job_spec.clone())
        }
        _ => None,
    };
    StorageReads { newest, inspect, claim }
}

/// Claims the checkpoint directory of `target` (the spec [`StorageReads::claim`] names) for
/// the StreamJob `stream_job` (`<namespace>/<name>`); a storage failure is an error (retried).
pub async fn read_claim(
    snapshots: &dyn SnapshotStore,
    s3: &S3Options,
    target: &StreamJobSpec,
    name: &str,
    stream_job: &str,
) -> Result<StorageClaim, Error> {
    snapshots
        .claim(target, s3, name, stream_job)
        .await
        .map_err(Error::StorageError)
}

/// Performs `reads` against the storage of `spec` (the deployed spec): the lifecycle's
/// `newest_snapshot` and `restore_info` observations. An unusable restore point (no or a
/// corrupt `_metadata`) and a refused newest snapshot are observations; a storage failure is an
/// error (retried).
pub async fn read_storage(
    snapshots: &dyn SnapshotStore,
    s3: &S3Options,
    spec: &StreamJobSpec,
    name: &str,
    reads: StorageReads,
) -> Result<(NewestSnapshot, RestoreInfo), Error> {
    let newest = if reads.newest {
        snapshots.newest(spec, s3, name).await.map_err(Error::StorageError)?
    } else {
        NewestSnapshot::NotRead
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

/// The spec whose storage holds the job's snapshots: the deployed one when readable.
pub fn storage_spec(job: &StreamJob, status: &StreamJobStatus) -> StreamJobSpec {
    status
        .last_reconciled_spec
        .as_deref()
        .and_then(|s| serde_json::from_str(s).ok())
        .unwrap_or_else(|| job.spec.clone())
}

pub(super) async fn observe(
    job: &StreamJob,
    old: &StreamJobStatus,
    ctx: &Context,
    now: SystemTime,
) -> Result<Observed, Error> {
    let ns = job.namespace().unwrap_or_default();
    let name = job.name_any();
    // Children, pods and Savepoints come from the watch caches (listed once before the first
    // read); decisions on a stale cache are caught by the resourceVersion-conditioned writes.
    ctx.cache.children_ready().await?;
    let coordinator = ctx.cache.deployment(&ns, &coordinator_name(&name));
    let workers = ctx.cache.stateful_set(&ns, &worker_name(&name));
    let pods = ctx.cache.job_pods(&ns, &name);
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
    let savepoints: Vec<Savepoint> = ctx.cache.savepoints_of(&ns, &name);

    // The control API is asked only while a coordinator exists.
    let control = ctx.control.for_job(&ns, &name);
    let (report, trigger) = if coordinator.is_some() {
        let report = match control.job().await {
            Ok(report) => CoordinatorReport::Reported(to_report(report)),
            Err(e) => CoordinatorReport::Unanswered(e.to_string()),
        };
        let trigger = match old.pending.as_ref().and_then(|p| p.trigger_id.as_deref()) {
            Some(id) => control.savepoint(id).await.ok(),
            None => None,
        };
        (report, trigger)
    } else {
        (CoordinatorReport::Absent, None)
    };

    // Storage is read only where a decision depends on it.
    let spec = storage_spec(job, old);
    let mut reads = storage_reads(old, &job.spec);
    if job.meta().deletion_timestamp.is_some() {
        // Nothing deploys any more: a claim or restore-point read that fails (a missing
        // credentials Secret, an unreachable bucket) must not keep the finalizer for ever.
        reads.claim = None;
        reads.inspect = None;
    }
    let storage_claim = match &reads.claim {
        None => StorageClaim::NotChecked,
        Some(target) => {
            let s3 = s3_options_for(ctx, &ns, target).await?;
            read_claim(ctx.snapshots.as_ref(), &s3, target, &name, &format!("{ns}/{name}")).await?
        }
    };
    let deleting = job.meta().deletion_timestamp.is_some();
    let (newest_snapshot, restore_info) = if !reads.newest && reads.inspect.is_none() {
        (NewestSnapshot::NotRead, RestoreInfo::NotInspected)
    } else {
        let read = async {
            let s3 = s3_options_for(ctx, &ns, &spec).await?;
            read_storage(ctx.snapshots.as_ref(), &s3, &spec, &name, reads).await
        };
        match read.await {
            Ok(read) => read,
            // A delete uses the newest snapshot only to find a stop's savepoint, which the
            // coordinator reports too: a storage or credentials failure must not keep the
            // finalizer for ever.
            Err(e) if deleting => {
                tracing::warn!(job = %name, error = %e, "cannot read the job's newest snapshot while deleting it; going on without it");
                (NewestSnapshot::NotRead, RestoreInfo::NotInspected)
            }
            Err(e) => return Err(e),
        }
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
            coordinator: report,
            trigger,
            workloads_present: coordinator.is_some() || workers.is_some(),
            job_pods: pods.len() as u32,
            crash_looping,
            unschedulable: unschedulable_reason(&pods),
            newest_snapshot,
            restore_info,
            storage_claim,
            savepoint_in_flight_since,
        },
        savepoints,
        coordinator,
    })
}

/// The first `PodScheduled=False` condition among `pods` (e.g. "0/3 nodes are available:
/// 3 Insufficient cpu"), as `<pod>: <message>`.
fn unschedulable_reason(pods: &[Pod]) -> Option<String> {
    pods.iter().find_map(|p| {
        let c = p
            .status
            .as_ref()?
            .conditions
            .as_ref()?
            .iter()
            .find(|c| c.type_ == "PodScheduled" && c.status == "False")?;
        Some(format!(
            "{}: {}",
            p.metadata.name.as_deref().unwrap_or("pod"),
            c.message.clone().or_else(|| c.reason.clone()).unwrap_or_default()
        ))
    })
}

#[cfg(test)]
mod unschedulable_tests {
    use super::*;

    #[test]
    fn the_pod_scheduled_false_message_is_reported() {
        let pod = |name: &str, scheduled: &str| -> Pod {
            serde_json::from_value(serde_json::json!({
                "metadata": {"name": name},
                "status": {"conditions": [{"type": "PodScheduled", "status": scheduled,
                    "reason": "Unschedulable", "message": "0/3 nodes are available: 3 Insufficient cpu."}]}
            }))
            .unwrap()
        };
        assert_eq!(unschedulable_reason(&[pod("wc-worker-0", "True")]), None);
        assert_eq!(
            unschedulable_reason(&[pod("wc-worker-0", "True"), pod("wc-worker-63", "False")]).as_deref(),
            Some("wc-worker-63: 0/3 nodes are available: 3 Insufficient cpu.")
        );
    }
}
