//! The second half of every operation's cycle: once every old pod is gone, choose the restore
//! point, check it against the new job, and deploy a new generation from it.

use super::operations::Ctx;
use super::{
    Action, ChangeClass, NewestSnapshot, POLL, Reason, RestoreInfo, STEADY, StorageClaim, classify, parse_spec,
    parse_time, rfc3339, spec_json,
};
use crate::crd::{
    LifecycleState, OperationKind, OperationPhase, PendingOperation, RestoreOrigin, RestorePoint, StreamJobSpec,
    StreamJobStatus, UpgradeMode,
};
use std::time::Duration;
use weir_runtime::control::api::SnapshotKind;

impl<'a> Ctx<'a> {
    pub(super) fn await_termination(&mut self, op: &PendingOperation) {
        if self.obs.workloads_present || self.obs.job_pods > 0 {
            self.d.actions.push(Action::DeleteWorkloads);
            self.d.requeue = POLL;
            return;
        }
        if op.kind == OperationKind::Delete {
            // Deletion never waits on a restore point.
            self.d.actions.push(Action::RemoveFinalizer);
            self.event(false, Reason::Cleanup, "workloads deleted; removing finalizer");
            return;
        }
        // Every old pod is gone: no checkpoint can complete any more, so the newest one is final.
        let target = parse_spec(&op.target_spec);
        let redeploy = target.as_ref().is_some_and(|t| {
            parse_spec(&self.d.status.last_reconciled_spec)
                .is_some_and(|old| classify(&old, t) == ChangeClass::SavepointRedeploy)
        });
        let restore = if redeploy {
            target
                .as_ref()
                .and_then(|t| t.initial_savepoint_path.clone())
                .map(|path| RestorePoint {
                    path,
                    origin: RestoreOrigin::Initial,
                    checkpoint_id: None,
                })
        } else if let Some(path) = &op.savepoint_path {
            self.d.status.restore_point.clone().filter(|r| &r.path == path)
        } else if op.mode == UpgradeMode::Stateless
            && matches!(op.kind, OperationKind::Upgrade | OperationKind::Suspend)
        {
            // Stateless drops state only once the deployment has run: a first deploy from a
            // restore point (spec.initialSavepointPath) that never ran keeps it.
            let kept = self.unused_restore_point();
            if let Some(r) = &kept {
                self.event(
                    false,
                    Reason::SpecChanged,
                    format!(
                        "the current deployment never ran, so its restore point {} is kept (stateless starts empty only after a run)",
                        r.path
                    ),
                );
            }
            kept
        } else {
            if self.obs.newest_snapshot == NewestSnapshot::NotRead {
                // Storage was not read in this pass (an operation started in it, from a failed
                // job with no pods): the next one reads it.
                self.d.requeue = Duration::ZERO;
                return;
            }
            match self.newest_restore_point() {
                Ok(r) => r,
                Err(msg) => return self.fail(Reason::RestoreRequired, msg),
            }
        };
        self.d.status.restore_point = restore;
        match op.kind {
            OperationKind::Suspend => {
                self.d.status.pending = None;
                self.d.status.lifecycle_state = LifecycleState::Suspended;
                self.d.status.job_status = None;
                self.d.status.parallelism = Some(0);
                let msg = match &self.d.status.restore_point {
                    Some(r) => format!("suspended; resume restores from {}", r.path),
                    None => "suspended (stateless: resume starts empty)".into(),
                };
                self.event(false, Reason::Suspended, msg);
                self.d.requeue = STEADY;
            }
            _ => {
                self.set_phase(OperationPhase::Deploying);
                self.d.requeue = Duration::ZERO; // next pass inspects the restore point
            }
        }
    }

    /// The restore point the current deployment started from, if that deployment never ran
    /// (see [`deployment_ran`]); None once it has.
    fn unused_restore_point(&self) -> Option<RestorePoint> {
        let st = &self.d.status;
        if deployment_ran(st) {
            return None;
        }
        st.restore_point
            .clone()
            .filter(|r| st.deployed_from.as_deref() == Some(r.path.as_str()))
    }

    /// The newest restore point of a stateful job after its pods are gone: the newest of the
    /// recorded restore point and the newest snapshot in storage. Errors when the job is known
    /// to have checkpoints that storage no longer has (FLINK-33011: manual restore required),
    /// or storage refused its newest snapshot ([`NewestSnapshot::Refused`]: unreadable, or
    /// deleted by hand after it completed).
    pub(super) fn newest_restore_point(&self) -> Result<Option<RestorePoint>, String> {
        let st = &self.d.status;
        let recorded = st.restore_point.clone();
        // The current deployment started from a restore point the user gave
        // (spec.initialSavepointPath): snapshots up to the newest in storage at its deploy
        // predate that choice, and are neither preferred to it nor refused for.
        let chose_up_to = recorded
            .as_ref()
            .filter(|r| r.origin == RestoreOrigin::Initial && st.deployed_from.as_deref() == Some(r.path.as_str()))
            .and(st.deployed_after_snapshot);
        let since_the_choice = |id: u64| chose_up_to.is_none_or(|through| id > through);
        let stored = match &self.obs.newest_snapshot {
            NewestSnapshot::Refused { id, message } if since_the_choice(*id) => {
                return Err(format!("manual restore required: {message}"));
            }
            NewestSnapshot::Found(s) if since_the_choice(s.id) => Some(RestorePoint {
                path: s.path.clone(),
                origin: if s.kind == SnapshotKind::Savepoint {
                    RestoreOrigin::Savepoint
                } else {
                    RestoreOrigin::Checkpoint
                },
                checkpoint_id: Some(s.id),
            }),
            _ => None,
        };
        let best = match (recorded, stored) {
            (Some(r), Some(s)) => Some(if s.checkpoint_id.unwrap_or(0) > r.checkpoint_id.unwrap_or(0) {
                s
            } else {
                r
            }),
            (r, s) => r.or(s),
        };
        let known = self
            .d
            .status
            .job_status
            .as_ref()
            .and_then(|j| j.last_checkpoint.as_ref())
            .map(|c| c.id)
            .filter(|id| since_the_choice(*id));
        match (&best, known) {
            (None, Some(id)) => Err(format!(
                "manual restore required: the job completed checkpoint {id} but no checkpoint or savepoint is in storage; set spec.initialSavepointPath and spec.savepointRedeployNonce"
            )),
            (Some(b), Some(id)) if b.checkpoint_id.unwrap_or(0) < id => Err(format!(
                "manual restore required: the newest snapshot in storage ({}, id {}) is older than checkpoint {id} the job completed",
                b.path,
                b.checkpoint_id.unwrap_or(0)
            )),
            _ => Ok(best),
        }
    }

    /// Checks the restore point against the target job and deploys it.
    pub(super) fn deploy_pending(&mut self, op: &PendingOperation) {
        let Some(target) = parse_spec(&op.target_spec) else {
            return self.fail(
                Reason::ValidationError,
                "pending operation has no readable target spec".into(),
            );
        };
        if self.obs.workloads_present || self.obs.job_pods > 0 {
            // Never two generations at once: old pods must be gone first (FLINK-34438/39970).
            self.d.actions.push(Action::DeleteWorkloads);
            self.d.requeue = POLL;
            return;
        }
        // Never two StreamJobs in one checkpoint directory (same name, other namespace).
        match &self.obs.storage_claim {
            StorageClaim::NotChecked => {
                self.d.requeue = POLL;
                return;
            }
            StorageClaim::Taken(message) => return self.fail(Reason::ValidationError, message.clone()),
            StorageClaim::Unrecorded(error) => self.event(
                true,
                Reason::OwnerUnrecorded,
                format!(
                    "deploying without recording this StreamJob as the owner of its checkpoint directory \
                     (`_owner`, which keeps a StreamJob of the same name in another namespace out): {error}; \
                     let the operator write `<spec.checkpointing.storage>/*/_owner` (s3:PutObject)"
                ),
            ),
            StorageClaim::Ours => {}
        }
        let restore = self.d.status.restore_point.clone();
        if let Some(r) = &restore {
            match self.check_restore(&target, &r.path) {
                Check::Wait => {
                    self.d.requeue = POLL;
                    return;
                }
                Check::Refuse(reason, msg) => {
                    // Keep the restore point: a corrected spec deploys from it.
                    return self.fail(reason, msg);
                }
                Check::Ok => {}
            }
        }
        self.deploy(target, restore.map(|r| r.path));
    }

    fn check_restore(&self, target: &StreamJobSpec, path: &str) -> Check {
        match &self.obs.restore_info {
            RestoreInfo::NotInspected => Check::Wait,
            RestoreInfo::Found { path: p, .. } | RestoreInfo::Missing { path: p, .. } if p != path => Check::Wait,
            RestoreInfo::Missing { error, .. } => Check::Refuse(
                Reason::RestoreRequired,
                format!("manual restore required: restore point {path} cannot be read ({error})"),
            ),
            RestoreInfo::Found { info, .. } => {
                if info.max_parallelism != target.max_parallelism as u32 {
                    return Check::Refuse(
                        Reason::ValidationError,
                        format!(
                            "restore point {path} was written with maxParallelism {} but spec.maxParallelism is {}: \
                             its keyed state is split into {0} key groups, fixed for the life of the state; \
                             restore it in a StreamJob created with spec.maxParallelism: {0} (the field is \
                             immutable), or restore another point",
                            info.max_parallelism, target.max_parallelism
                        ),
                    );
                }
                let job = match target.runtime_job(&self.obs.name) {
                    Ok(j) => j,
                    Err(e) => {
                        return Check::Refuse(Reason::ValidationError, format!("spec.job is invalid: {e}"));
                    }
                };
                let dropped: Vec<&str> = info
                    .operators
                    .iter()
                    .map(|o| o.uid.as_str())
                    .filter(|uid| !job.operators.iter().any(|op| op.uid == *uid))
                    .collect();
                if !dropped.is_empty() && !target.allow_non_restored_state {
                    return Check::Refuse(
                        Reason::ValidationError,
                        format!(
                            "restore point {path} holds state for operator uids [{}] that spec.job no longer has; restore them or set spec.allowNonRestoredState: true to drop that state",
                            dropped.join(", ")
                        ),
                    );
                }
                Check::Ok
            }
        }
    }

    fn deploy(&mut self, spec: StreamJobSpec, restore_from: Option<String>) {
        // The observation read the storage of the deployed spec (the one deployed before this
        // deploy, else the StreamJob's spec: `storage_spec`): a boundary in another storage
        // than this deployment's would hide its own snapshots (helper-121, -122).
        let read_from = parse_spec(&self.d.status.last_reconciled_spec)
            .map_or_else(|| self.spec.checkpointing.storage.clone(), |s| s.checkpointing.storage);
        let deployed_after = match &self.obs.newest_snapshot {
            _ if read_from != spec.checkpointing.storage => None,
            NewestSnapshot::Found(s) => Some(s.id),
            NewestSnapshot::Refused { id, .. } => Some(*id),
            NewestSnapshot::None => Some(0),
            NewestSnapshot::NotRead => None,
        };
        let st = &mut self.d.status;
        st.deploy_generation += 1;
        st.last_reconciled_spec = Some(spec_json(&spec));
        st.deployed_from = restore_from.clone();
        st.deployed_after_snapshot = deployed_after;
        st.deployed_at = Some(rfc3339(self.obs.now));
        st.first_running_at = None;
        st.pending = None;
        st.lifecycle_state = LifecycleState::Deploying;
        st.parallelism = Some(spec.parallelism);
        // A rollback keeps saying why it runs the previous spec.
        if st.failed_generation != Some(self.obs.generation) {
            st.error = None;
        }
        let generation = st.deploy_generation;
        let from = restore_from.clone().unwrap_or_else(|| "empty state".into());
        self.event(
            false,
            Reason::Submit,
            format!(
                "deploying generation {generation} at parallelism {} from {from}",
                spec.parallelism
            ),
        );
        self.d.actions.push(Action::Deploy {
            spec: Box::new(spec),
            restore_from,
            deploy_generation: generation,
        });
        self.d.requeue = POLL;
    }

    /// Re-applies the current deployment (drift correction; idempotent).
    pub(super) fn keep_deployed(&mut self) {
        if let Some(spec) = parse_spec(&self.d.status.last_reconciled_spec) {
            self.d.actions.push(Action::Deploy {
                spec: Box::new(spec),
                restore_from: self.d.status.deployed_from.clone(),
                deploy_generation: self.d.status.deploy_generation,
            });
        }
    }
}

/// Whether a resume of a suspended job (`status`) to `spec` chooses its restore point again
/// from storage, as a stop does: a stateful job that has been deployed before (a job created
/// suspended starts as one created running does), unless its restore point was given
/// (`spec.initialSavepointPath`) and no deployment has run from it yet (kept as given). The
/// controller reads the newest snapshot for exactly these passes (`storage_reads`). Pure.
pub fn resume_rechooses(status: &StreamJobStatus, spec: &StreamJobSpec) -> bool {
    let given = status.restore_point.as_ref().is_some_and(|r| {
        r.origin == RestoreOrigin::Initial
            && !(status.deployed_from.as_deref() == Some(r.path.as_str()) && deployment_ran(status))
    });
    spec.upgrade_mode != UpgradeMode::Stateless && status.deploy_generation > 0 && !given
}

/// Whether the current deployment has run: it reported RUNNING with its restore done
/// (`firstRunningAt`), or completed a checkpoint of its own (newer than its deploy, not the
/// restore point itself). Pure.
pub fn deployment_ran(status: &StreamJobStatus) -> bool {
    if status.first_running_at.is_some() {
        return true;
    }
    let deployed_at = status.deployed_at.as_deref().and_then(parse_time);
    status
        .job_status
        .as_ref()
        .and_then(|j| j.last_checkpoint.as_ref())
        .is_some_and(|c| {
            let completed = c.completed_at.as_deref().and_then(parse_time);
            let after_deploy = match (completed, deployed_at) {
                (Some(c), Some(d)) => c >= d,
                _ => false,
            };
            after_deploy && status.deployed_from.as_deref() != Some(c.path.as_str())
        })
}

/// Outcome of checking a restore point against the target job.
enum Check {
    Wait,
    Refuse(Reason, String),
    Ok,
}
