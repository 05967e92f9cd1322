//! [`decide`] and its top-level helpers: deletion, resuming a recorded operation, first deploy,
//! resume, and the checks on a deployed job (health, readiness, spec changes, periodic
//! savepoints and retention).

use super::operations::Ctx;
use super::{
    Action, ChangeClass, Decision, NewestSnapshot, Observation, POLL, Reason, STEADY, Snapshot, StorageClaim, classify,
    ms_to_time, parse_spec, parse_time, resume_rechooses, retention, rfc3339, spec_json,
};
use crate::crd::{
    CheckpointRef, DesiredState, JobStatusSummary, LifecycleState, OperationKind, OperationPhase, PendingOperation,
    RestoreOrigin, RestorePoint, SavepointOrigin, SavepointRecord, StreamJobSpec, StreamJobStatus, UpgradeMode,
};
use std::time::Duration;
use weir_runtime::control::api::JobState;

/// Describes the cycle a change of `class` triggers under `mode`, for events and conditions.
pub fn describe_cycle(class: ChangeClass, mode: UpgradeMode, parallelism: i32) -> String {
    let how = match mode {
        UpgradeMode::Savepoint => "stop-with-savepoint → delete pods → restore from the savepoint",
        UpgradeMode::LastState => "stop → delete pods → restore from the newest completed checkpoint",
        UpgradeMode::Stateless => "stop → delete pods → start with empty state",
    };
    match class {
        ChangeClass::Ignore => "no restart (operator-only fields changed)".into(),
        ChangeClass::Scale => format!("rescale to parallelism {parallelism}: {how}"),
        ChangeClass::Upgrade => format!("upgrade: {how}"),
        ChangeClass::SavepointRedeploy => {
            "savepoint redeploy: stop → delete pods → restore from spec.initialSavepointPath (current state discarded)"
                .into()
        }
    }
}

/// Decides the next step for a StreamJob. Pure: all inputs are arguments.
pub fn decide(spec: &StreamJobSpec, status: &StreamJobStatus, obs: &Observation) -> Decision {
    let mut cx = Ctx {
        spec,
        obs,
        d: Decision {
            status: status.clone(),
            actions: vec![],
            events: vec![],
            requeue: STEADY,
        },
    };
    absorb_job_report(&mut cx);

    // Deletion wins over everything; a pending upgrade is superseded.
    if obs.deleting {
        let deleting =
            cx.d.status
                .pending
                .as_ref()
                .is_some_and(|p| p.kind == OperationKind::Delete);
        if deleting {
            cx.step();
        } else if !obs.workloads_present && obs.job_pods == 0 {
            cx.d.status.lifecycle_state = LifecycleState::Deleting;
            cx.d.actions.push(Action::RemoveFinalizer);
        } else {
            let superseded = cx.d.status.pending.take();
            match superseded {
                // A stop-with-savepoint already sent (an upgrade's or a suspend's) that may
                // still complete becomes the deletion's savepoint: deleting the pods under it
                // would lose the savepoint the user asked for with savepointOnDelete. One that
                // failed or timed out is replaced by the deletion's own stop.
                Some(stop) if spec.savepoint_on_delete && cx.stop_may_complete(&stop) => {
                    cx.d.status.pending = Some(PendingOperation {
                        kind: OperationKind::Delete,
                        target_spec: None,
                        ..stop
                    });
                    cx.d.status.lifecycle_state = LifecycleState::Deleting;
                    cx.step();
                }
                _ => cx.start(OperationKind::Delete, None),
            }
        }
        return cx.d;
    }

    // A recorded operation resumes where it stopped.
    if cx.d.status.pending.is_some() {
        cx.step();
        cx.d.status.observed_generation = Some(obs.generation);
        return cx.d;
    }

    let state = cx.d.status.lifecycle_state;
    let deployed = parse_spec(&cx.d.status.last_reconciled_spec);
    let retry_blocked = cx.d.status.failed_generation == Some(obs.generation);
    let class = deployed.as_ref().map_or(ChangeClass::Upgrade, |d| classify(d, spec));
    let want_running = spec.state == DesiredState::Running;

    // Refuse a spec the runtime would reject before stopping anything.
    if class != ChangeClass::Ignore
        && want_running
        && !retry_blocked
        && let Err(e) = spec.validate(&obs.name)
    {
        cx.d.status.error = Some(format!("spec is invalid, nothing was changed: {e}"));
        cx.event(
            true,
            Reason::ValidationError,
            format!("spec is invalid, nothing was changed: {e}"),
        );
        cx.d.status.observed_generation = Some(obs.generation);
        if matches!(state, LifecycleState::Running | LifecycleState::Deploying) {
            cx.keep_deployed();
        }
        return cx.d;
    }

    match state {
        LifecycleState::Created => {
            if !want_running {
                cx.d.status.lifecycle_state = LifecycleState::Suspended;
                cx.d.status.last_reconciled_spec = Some(spec_json(spec));
                if let Some(p) = &spec.initial_savepoint_path {
                    cx.d.status.restore_point = Some(RestorePoint {
                        path: p.clone(),
                        origin: RestoreOrigin::Initial,
                        checkpoint_id: None,
                    });
                }
            } else {
                if cx.d.status.restore_point.is_none()
                    && let Some(p) = &spec.initial_savepoint_path
                {
                    cx.d.status.restore_point = Some(RestorePoint {
                        path: p.clone(),
                        origin: RestoreOrigin::Initial,
                        checkpoint_id: None,
                    });
                }
                cx.d.status.pending = Some(first_deploy(spec, obs));
                cx.d.status.lifecycle_state = LifecycleState::Deploying;
                cx.step();
            }
        }
        LifecycleState::Suspended => {
            if want_running {
                // A stateful resume chooses again, as a stop does: the newest of the suspend's
                // restore point and the newest snapshot in storage (files put back since a
                // refused choice), refused when storage refuses its newest (read in this
                // pass: `storage_reads`).
                if resume_rechooses(&cx.d.status, spec) {
                    if obs.newest_snapshot == NewestSnapshot::NotRead {
                        cx.d.requeue = Duration::ZERO;
                        return cx.d;
                    }
                    let refused = matches!(obs.newest_snapshot, NewestSnapshot::Refused { .. });
                    // Without a restore point, the fallback below looks wider (the recorded
                    // savepoints too).
                    if refused || cx.d.status.restore_point.is_some() {
                        match cx.newest_restore_point() {
                            Ok(best) => cx.d.status.restore_point = best,
                            Err(msg) => {
                                cx.fail(Reason::RestoreRequired, msg);
                                cx.d.status.observed_generation = Some(obs.generation);
                                return cx.d;
                            }
                        }
                    }
                }
                // A stateful job whose restore point went missing resumes from its newest
                // known savepoint or checkpoint, never silently from empty state.
                // (A job created suspended has no deployment to go on from: it starts as one
                // created running does.)
                if cx.d.status.restore_point.is_none()
                    && spec.upgrade_mode != UpgradeMode::Stateless
                    && cx.d.status.deploy_generation > 0
                    && let Some(rp) =
                        fallback_restore_point(&cx.d.status.savepoint_history, obs.newest_snapshot.found())
                {
                    cx.event(
                        true,
                        Reason::SavepointError,
                        format!(
                            "status.restorePoint is missing; resuming from the newest known snapshot {}",
                            rp.path
                        ),
                    );
                    cx.d.status.restore_point = Some(rp);
                }
                cx.event(false, Reason::SpecChanged, "resuming");
                cx.d.status.pending = Some(first_deploy(spec, obs));
                cx.d.status.lifecycle_state = LifecycleState::Upgrading;
                cx.step();
            }
        }
        LifecycleState::Failed => {
            if !want_running && (obs.workloads_present || obs.job_pods > 0) {
                cx.start(OperationKind::Suspend, None);
            } else if !want_running {
                cx.d.status.lifecycle_state = LifecycleState::Suspended;
            } else if !retry_blocked && class != ChangeClass::Ignore {
                cx.event(
                    false,
                    Reason::SpecChanged,
                    format!(
                        "spec changed on a failed job: {}",
                        describe_cycle(class, spec.upgrade_mode, spec.parallelism)
                    ),
                );
                cx.d.status.failed_generation = None;
                cx.start(OperationKind::Upgrade, Some(spec));
            }
        }
        LifecycleState::Deploying | LifecycleState::Running => running_or_deploying(&mut cx, class, retry_blocked),
        // These states always carry a pending operation; without one, re-derive from workloads.
        LifecycleState::Upgrading | LifecycleState::RollingBack | LifecycleState::Deleting => {
            cx.d.status.lifecycle_state = if obs.workloads_present {
                LifecycleState::Deploying
            } else {
                LifecycleState::Failed
            };
            cx.d.requeue = Duration::ZERO;
        }
    }
    cx.d.status.observed_generation = Some(obs.generation);
    cx.d
}

fn first_deploy(spec: &StreamJobSpec, obs: &Observation) -> PendingOperation {
    PendingOperation {
        kind: OperationKind::Upgrade,
        mode: spec.upgrade_mode,
        target_spec: Some(spec_json(spec)),
        target_generation: Some(obs.generation),
        phase: OperationPhase::Deploying,
        trigger_id: None,
        savepoint_path: None,
        started_at: rfc3339(obs.now),
    }
}

/// Copies the coordinator's report into `status.jobStatus` (only changing values change it).
fn absorb_job_report(cx: &mut Ctx) {
    let Some(j) = cx.obs.coordinator.job() else {
        if let Some(js) = cx.d.status.job_status.as_mut() {
            js.state = "UNKNOWN".into();
        }
        return;
    };
    let prev_cp = cx.d.status.job_status.as_ref().and_then(|s| s.last_checkpoint.clone());
    let state = serde_json::to_value(j.state)
        .ok()
        .and_then(|v| v.as_str().map(str::to_owned))
        .unwrap_or_default();
    let last_checkpoint = match &j.last_completed {
        Some(s) if prev_cp.as_ref().is_none_or(|p| s.id >= p.id) => Some(CheckpointRef {
            id: s.id,
            path: s.path.clone(),
            completed_at: Some(rfc3339(ms_to_time(s.completed_at_ms))),
        }),
        _ => prev_cp,
    };
    // The current deployment has run once it reports RUNNING (its restore is done).
    if j.state == JobState::Running && cx.d.status.first_running_at.is_none() {
        cx.d.status.first_running_at = Some(rfc3339(cx.obs.now));
    }
    cx.d.status.job_status = Some(JobStatusSummary {
        job_id: j.job_id.clone(),
        state,
        last_checkpoint,
        failure: j.failure.clone(),
    });
}

fn running_or_deploying(cx: &mut Ctx, class: ChangeClass, retry_blocked: bool) {
    let spec = cx.spec;
    let obs = cx.obs;
    let job_state = cx.job_state();
    let lifecycle = cx.d.status.lifecycle_state;

    if job_state == Some(JobState::Running) && lifecycle == LifecycleState::Deploying {
        cx.d.status.lifecycle_state = LifecycleState::Running;
        cx.d.status.last_stable_spec = cx.d.status.last_reconciled_spec.clone();
        cx.event(
            false,
            Reason::JobRunning,
            format!("deploy generation {} is running", cx.d.status.deploy_generation),
        );
    }
    let lifecycle = cx.d.status.lifecycle_state;

    if spec.state == DesiredState::Suspended {
        cx.event(
            false,
            Reason::SpecChanged,
            format!(
                "suspending: {}",
                describe_cycle(ChangeClass::Upgrade, spec.upgrade_mode, spec.parallelism)
            ),
        );
        return cx.start(OperationKind::Suspend, None);
    }

    // Health: a failed or crash-looping job restarts from its newest checkpoint, within limits.
    let failed = job_state == Some(JobState::Failed) || obs.crash_looping;
    if failed && lifecycle == LifecycleState::Running {
        let window =
            weir_runtime::job::parse_duration(&spec.health.restart_window).unwrap_or(Duration::from_secs(3600));
        let now = obs.now;
        cx.d.status.restarts.retain(|t| {
            parse_time(t)
                .and_then(|t| now.duration_since(t).ok())
                .is_some_and(|age| age <= window)
        });
        if cx.d.status.restarts.len() < spec.health.max_restarts as usize {
            cx.d.status.restarts.push(rfc3339(now));
            let why = obs
                .coordinator
                .job()
                .and_then(|j| j.failure.clone())
                .unwrap_or_else(|| "crash-looping".into());
            cx.event(
                true,
                Reason::RestartUnhealthyJob,
                format!("job failed ({why}); restarting from its newest checkpoint"),
            );
            let deployed = parse_spec(&cx.d.status.last_reconciled_spec);
            return cx.start(OperationKind::Restart, Some(deployed.as_ref().unwrap_or(spec)));
        }
        return cx.fail(
            Reason::RestartUnhealthyJob,
            format!(
                "job failed {} times within {}; not restarting (change the spec or spec.restartNonce)",
                spec.health.max_restarts, spec.health.restart_window
            ),
        );
    }

    // A deployment whose pods cannot be scheduled says why (Degraded, status.error) instead of
    // sitting in Deploying without a reason.
    const UNSCHEDULABLE: &str = "waiting for pods to be scheduled: ";
    if lifecycle == LifecycleState::Deploying && job_state != Some(JobState::Running) {
        match &obs.unschedulable {
            Some(why) => cx.d.status.error = Some(format!("{UNSCHEDULABLE}{why}")),
            None if cx
                .d
                .status
                .error
                .as_deref()
                .is_some_and(|e| e.starts_with(UNSCHEDULABLE)) =>
            {
                cx.d.status.error = None
            }
            None => {}
        }
    }

    // Readiness timeout: roll back a change that does not come up.
    if lifecycle == LifecycleState::Deploying && job_state != Some(JobState::Running) {
        let timeout =
            weir_runtime::job::parse_duration(&spec.rollback.readiness_timeout).unwrap_or(Duration::from_secs(300));
        let waited =
            cx.d.status
                .deployed_at
                .clone()
                .map(|t| cx.elapsed_since(&t))
                .unwrap_or_default();
        if waited > timeout {
            let stable = cx.d.status.last_stable_spec.clone();
            if spec.rollback.enabled && stable.is_some() && stable != cx.d.status.last_reconciled_spec {
                let stable = parse_spec(&stable).expect("stable spec parses");
                cx.d.status.failed_generation = Some(obs.generation);
                let why = format!(
                    "generation {} was not running within {}; rolled back to the last stable spec, which runs until the spec changes",
                    obs.generation, spec.rollback.readiness_timeout
                );
                // Kept (with Ready=False) while the rolled-back generation is the current one.
                cx.d.status.error = Some(why.clone());
                cx.event(true, Reason::Rollback, why);
                return cx.start(OperationKind::Rollback, Some(&stable));
            }
            if failed {
                return cx.fail(
                    Reason::RestartUnhealthyJob,
                    format!("not running within {}", spec.rollback.readiness_timeout),
                );
            }
        }
    }

    if class != ChangeClass::Ignore && !retry_blocked {
        // Refuse a change whose state the running job could not hand over before stopping it:
        // the job keeps running the previous spec, the reason is in status.error.
        let deployed = parse_spec(&cx.d.status.last_reconciled_spec);
        let refused = deployed
            .and_then(|d| super::state_incompatibility(&obs.name, &d, spec))
            .or_else(|| match &obs.storage_claim {
                // The change moves the checkpoints into another StreamJob's directory.
                StorageClaim::Taken(why) => Some(format!(
                    "{why}; refused before stopping the job (it keeps running the previous spec)"
                )),
                _ => None,
            });
        if let Some(why) = refused {
            cx.d.status.failed_generation = Some(obs.generation);
            cx.d.status.error = Some(why.clone());
            cx.event(true, Reason::ValidationError, why);
            cx.keep_deployed();
            cx.d.requeue = STEADY;
            return;
        }
        cx.event(
            false,
            Reason::SpecChanged,
            describe_cycle(class, spec.upgrade_mode, spec.parallelism),
        );
        cx.d.status.failed_generation = None;
        return cx.start(OperationKind::Upgrade, Some(spec));
    }
    if class == ChangeClass::Ignore && cx.d.status.last_reconciled_spec.as_deref() != Some(&spec_json(spec)) {
        // Operator-only fields changed: remember them without restarting (FKO: ignore diff).
        cx.d.status.last_reconciled_spec = Some(spec_json(spec));
        if lifecycle == LifecycleState::Running {
            cx.d.status.last_stable_spec = cx.d.status.last_reconciled_spec.clone();
        }
    }

    cx.keep_deployed();
    if cx.d.status.lifecycle_state == LifecycleState::Running && job_state == Some(JobState::Running) {
        periodic_and_retention(cx);
        // A refused or rolled-back generation keeps its reason until the spec changes.
        if cx.d.status.failed_generation != Some(obs.generation) {
            cx.d.status.error = None;
        }
    }
    cx.d.requeue = if cx.d.status.lifecycle_state == LifecycleState::Running {
        STEADY
    } else {
        POLL
    };
}

/// The newest of the recorded savepoints (`history`) and the newest snapshot in storage, by
/// completion time, as a restore point.
fn fallback_restore_point(history: &[SavepointRecord], newest: Option<&Snapshot>) -> Option<RestorePoint> {
    let from_history = history
        .iter()
        .filter_map(|r| parse_time(&r.completed_at).map(|t| (t, r)))
        .max_by_key(|(t, _)| *t)
        .map(|(t, r)| {
            (
                t,
                RestorePoint {
                    path: r.path.clone(),
                    origin: RestoreOrigin::Savepoint,
                    checkpoint_id: None,
                },
            )
        });
    let from_storage = newest.map(|s| {
        (
            ms_to_time(s.completed_at_ms),
            RestorePoint {
                path: s.path.clone(),
                origin: if s.kind == weir_runtime::control::api::SnapshotKind::Checkpoint {
                    RestoreOrigin::Checkpoint
                } else {
                    RestoreOrigin::Savepoint
                },
                checkpoint_id: Some(s.id),
            },
        )
    });
    [from_history, from_storage]
        .into_iter()
        .flatten()
        .max_by_key(|(t, _)| *t)
        .map(|(_, rp)| rp)
}

fn periodic_and_retention(cx: &mut Ctx) {
    let sp = cx.spec.savepoints.clone().unwrap_or_default();
    if let Some(interval) = sp
        .periodic_interval
        .as_deref()
        .and_then(|s| weir_runtime::job::parse_duration(s).ok())
        && cx.obs.savepoint_in_flight_since.is_none()
    {
        let last =
            cx.d.status
                .savepoint_history
                .iter()
                .filter(|r| r.origin == SavepointOrigin::Periodic)
                .filter_map(|r| parse_time(&r.completed_at))
                .max()
                .or_else(|| cx.d.status.deployed_at.as_deref().and_then(parse_time));
        if last.is_none_or(|t| cx.obs.now.duration_since(t).unwrap_or_default() >= interval) {
            cx.d.actions.push(Action::RecordSavepoint {
                origin: SavepointOrigin::Periodic,
                path: None,
            });
        }
    }
    // Retention applies to upgrade savepoints too, so it runs with or without spec.savepoints.
    {
        let policy = &retention::effective_policy(sp.history.as_ref());
        let restore = cx.d.status.restore_point.as_ref().map(|r| r.path.clone());
        let deployed_from = cx.d.status.deployed_from.clone();
        let protected: Vec<&str> = [restore.as_deref(), deployed_from.as_deref()]
            .into_iter()
            .flatten()
            .collect();
        let dispose: Vec<String> =
            retention::to_dispose(&cx.d.status.savepoint_history, policy, &protected, cx.obs.now)
                .into_iter()
                .map(|r| r.path.clone())
                .collect();
        // The history entries stay until their data is disposed: the controller removes each
        // one after its dispose succeeded, so a failed dispose is retried, never orphaned.
        for path in dispose {
            cx.d.actions.push(Action::DisposeSavepoint { path });
        }
    }
}
