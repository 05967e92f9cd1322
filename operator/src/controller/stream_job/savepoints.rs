//! The job's Savepoint objects: folding completed ones into `status.savepointHistory`, spacing
//! and pruning periodic attempts, and creating the object that records an operator-taken
//! savepoint.

use crate::build::{self, FIELD_MANAGER, LABEL_JOB};
use crate::controller::{Context, Error, system_time};
use crate::crd::{
    Savepoint, SavepointOrigin, SavepointRecord, SavepointState, StreamJob, StreamJobSpec, StreamJobStatus,
};
use kube::api::{Patch, PatchParams};
use kube::{Api, Resource, ResourceExt};
use serde_json::json;
use std::time::{SystemTime, UNIX_EPOCH};

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

/// Whether a periodic Savepoint object of the job (in any state, including Failed) was created
/// within `savepoints.periodicInterval` of `now`. Pure.
pub fn periodic_attempted_recently(spec: &StreamJobSpec, savepoints: &[Savepoint], now: SystemTime) -> bool {
    let Some(interval) = spec
        .savepoints
        .as_ref()
        .and_then(|s| s.periodic_interval.as_deref())
        .and_then(|s| weir_runtime::job::parse_duration(s).ok())
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
    // The job key keeps the name short for long job names (see `build::job_key`).
    format!("{}-{kind}-{suffix}", build::job_key(job))
}

/// Creates (server-side apply) the Savepoint object owned by the job; with a path (an upgrade
/// savepoint that already exists) its status is set Completed.
pub(super) async fn record_savepoint(
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
            "labels": {LABEL_JOB: build::job_key(&name), "app.kubernetes.io/managed-by": FIELD_MANAGER},
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
                "s3": crate::controller::savepoint::recorded_s3(job),
                "completedAt": humantime::format_rfc3339_seconds(now).to_string(),
            },
        });
        api.patch_status(&obj_name, &pp, &Patch::Apply(&status))
            .await
            .map_err(Error::StatusError)?;
    }
    Ok(())
}
