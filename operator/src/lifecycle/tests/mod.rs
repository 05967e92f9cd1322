//! Decision tables: every (lifecycle state × change class × upgrade mode) cell, then the named
//! edge cases (FKO's known failures) as explicit rows.
//!
//! This module holds the shared fixtures; the tests are grouped by topic in its submodules.

use super::*;
use crate::crd::{
    CheckpointRef, DesiredState, JobStatusSummary, LifecycleState, OperationKind, OperationPhase, PendingOperation,
    RestoreOrigin, RestorePoint, SavepointOrigin, SavepointRecord, StreamJobSpec, StreamJobStatus, UpgradeMode,
};
use std::time::{Duration, SystemTime, UNIX_EPOCH};
use weir_runtime::control::api::{
    JobState, OperatorStateInfo, SavepointStatus, SnapshotInfo, SnapshotKind, TriggerState,
};

mod delete;
mod deploy;
mod refused;
mod restore;
mod savepoints;
mod stateless;
mod stop;
mod suspend;
mod table;

const T0: u64 = 1_700_000_000; // seconds since the epoch

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(T0 + secs)
}

fn base_spec(mode: UpgradeMode) -> StreamJobSpec {
    let mut s: StreamJobSpec = serde_yaml::from_str(
        r#"
image: weir:1
parallelism: 2
checkpointing: {storage: "s3://b/chk"}
savepoints: {directory: "s3://b/svp"}
job:
  steps:
    - source: {generator: {seed: 1}}
    - keyBy: {expression: key}
    - uid: counts
      count: {}
    - sink: {print: {}}
"#,
    )
    .unwrap();
    s.upgrade_mode = mode;
    s
}

fn changed(spec: &StreamJobSpec, class: ChangeClass) -> StreamJobSpec {
    let mut s = spec.clone();
    match class {
        ChangeClass::Ignore => s.rollback.readiness_timeout = "9m".into(),
        ChangeClass::Scale => s.parallelism = 4,
        ChangeClass::Upgrade => s.image = "weir:2".into(),
        ChangeClass::SavepointRedeploy => {
            s.initial_savepoint_path = Some("s3://b/svp/savepoint-j-3".into());
            s.savepoint_redeploy_nonce = Some(1);
        }
    }
    s
}

fn snapshot(id: u64, kind: SnapshotKind, secs: u64) -> Snapshot {
    let dir = if kind == SnapshotKind::Savepoint {
        "svp/savepoint-j"
    } else {
        "chk/j/chk"
    };
    Snapshot {
        path: format!("s3://b/{dir}-{id}"),
        id,
        kind,
        completed_at_ms: (T0 + secs) * 1000,
    }
}

fn report(state: JobState) -> JobReport {
    JobReport {
        job_id: "run-1".into(),
        state,
        last_completed: Some(snapshot(5, SnapshotKind::Checkpoint, 0)),
        failure: None,
    }
}

fn obs() -> Observation {
    Observation {
        now: at(100),
        generation: 2,
        name: "j".into(),
        deleting: false,
        coordinator: CoordinatorReport::Reported(report(JobState::Running)),
        trigger: None,
        workloads_present: true,
        job_pods: 3,
        crash_looping: false,
        unschedulable: None,
        newest_snapshot: NewestSnapshot::Found(snapshot(5, SnapshotKind::Checkpoint, 0)),
        restore_info: RestoreInfo::NotInspected,
        storage_claim: StorageClaim::Ours,
        savepoint_in_flight_since: None,
    }
}

fn gone(mut o: Observation) -> Observation {
    o.workloads_present = false;
    o.job_pods = 0;
    o.coordinator = CoordinatorReport::Absent;
    o
}

fn deployed_status(spec: &StreamJobSpec, state: LifecycleState) -> StreamJobStatus {
    StreamJobStatus {
        lifecycle_state: state,
        last_reconciled_spec: Some(spec_json(spec)),
        last_stable_spec: Some(spec_json(spec)),
        deploy_generation: 1,
        deployed_at: Some(rfc3339(at(0))),
        observed_generation: Some(1),
        job_status: Some(JobStatusSummary {
            job_id: "run-1".into(),
            state: "RUNNING".into(),
            last_checkpoint: Some(CheckpointRef {
                id: 5,
                path: "s3://b/chk/j/chk-5".into(),
                completed_at: None,
            }),
            failure: None,
        }),
        ..Default::default()
    }
}

fn pending(
    kind: OperationKind,
    mode: UpgradeMode,
    phase: OperationPhase,
    target: Option<&StreamJobSpec>,
) -> PendingOperation {
    PendingOperation {
        kind,
        mode,
        target_spec: target.map(spec_json),
        target_generation: Some(2),
        phase,
        trigger_id: None,
        savepoint_path: None,
        started_at: rfc3339(at(50)),
    }
}

/// A `mode` job whose upgrade (an image change) has deleted its pods and now chooses its
/// restore point: (the target spec, the status).
fn upgrade_awaiting_termination(mode: UpgradeMode) -> (StreamJobSpec, StreamJobStatus) {
    let old = base_spec(mode);
    let new = changed(&old, ChangeClass::Upgrade);
    let mut st = deployed_status(&old, LifecycleState::Upgrading);
    st.pending = Some(pending(
        OperationKind::Upgrade,
        mode,
        OperationPhase::AwaitingTermination,
        Some(&new),
    ));
    (new, st)
}

/// A `mode` job whose rescale has sent its stop-with-savepoint: (the old spec, the target
/// spec, the status).
fn awaiting_stop(mode: UpgradeMode) -> (StreamJobSpec, StreamJobSpec, StreamJobStatus) {
    let old = base_spec(mode);
    let new = changed(&old, ChangeClass::Scale);
    let mut st = deployed_status(&old, LifecycleState::Upgrading);
    st.pending = Some(pending(
        OperationKind::Upgrade,
        mode,
        OperationPhase::AwaitingStop,
        Some(&new),
    ));
    (old, new, st)
}

/// The poll result of trigger `id`: its savepoint `path` (id `checkpoint_id`) completed.
fn completed_trigger(id: &str, path: &str, checkpoint_id: u64) -> SavepointStatus {
    SavepointStatus {
        trigger_id: id.into(),
        state: TriggerState::Completed,
        path: Some(path.into()),
        checkpoint_id: Some(checkpoint_id),
        error: None,
    }
}

/// The poll result of trigger `id`: it failed with `error`.
fn failed_trigger(id: &str, error: &str) -> SavepointStatus {
    SavepointStatus {
        trigger_id: id.into(),
        state: TriggerState::Failed,
        path: None,
        checkpoint_id: None,
        error: Some(error.into()),
    }
}

/// A short, comparable summary of an action.
fn kinds(d: &Decision) -> Vec<&'static str> {
    d.actions
        .iter()
        .map(|a| match a {
            Action::StopWithSavepoint { .. } => "stop-with-savepoint",
            Action::DeleteWorkloads => "delete-workloads",
            Action::Deploy { .. } => "deploy",
            Action::RecordSavepoint { .. } => "record-savepoint",
            Action::DisposeSavepoint { .. } => "dispose-savepoint",
            Action::RemoveFinalizer => "remove-finalizer",
        })
        .collect()
}

fn phase(d: &Decision) -> Option<OperationPhase> {
    d.status.pending.as_ref().map(|p| p.phase)
}

const MODES: [UpgradeMode; 3] = [UpgradeMode::Stateless, UpgradeMode::Savepoint, UpgradeMode::LastState];

/// The fixture for one lifecycle state: (status, observation) with `old` deployed.
fn fixture(state: LifecycleState, old: &StreamJobSpec, new: &StreamJobSpec) -> (StreamJobStatus, Observation) {
    let mode = new.upgrade_mode;
    match state {
        LifecycleState::Created => (StreamJobStatus::default(), gone(obs())),
        LifecycleState::Deploying => {
            let mut o = obs();
            o.coordinator = CoordinatorReport::Reported(report(JobState::Initializing));
            (deployed_status(old, state), o)
        }
        LifecycleState::Running => (deployed_status(old, state), obs()),
        LifecycleState::Upgrading => {
            let mut st = deployed_status(old, state);
            let ph = if mode == UpgradeMode::Savepoint {
                OperationPhase::AwaitingStop
            } else {
                OperationPhase::AwaitingTermination
            };
            st.pending = Some(pending(OperationKind::Upgrade, mode, ph, Some(old)));
            st.pending.as_mut().unwrap().trigger_id = Some("t1".into());
            let mut o = obs();
            o.coordinator = CoordinatorReport::Reported(report(JobState::Stopping));
            o.trigger = Some(SavepointStatus {
                trigger_id: "t1".into(),
                state: TriggerState::InProgress,
                path: None,
                checkpoint_id: None,
                error: None,
            });
            (st, o)
        }
        LifecycleState::Suspended => {
            let mut st = deployed_status(old, state);
            st.restore_point = Some(RestorePoint {
                path: "s3://b/svp/savepoint-j-6".into(),
                origin: RestoreOrigin::UpgradeSavepoint,
                checkpoint_id: Some(6),
            });
            (st, gone(obs()))
        }
        LifecycleState::RollingBack => {
            let mut st = deployed_status(old, state);
            st.pending = Some(pending(
                OperationKind::Rollback,
                mode,
                OperationPhase::AwaitingTermination,
                Some(old),
            ));
            st.failed_generation = Some(2);
            (st, gone(obs()))
        }
        LifecycleState::Failed => {
            let mut st = deployed_status(old, state);
            st.failed_generation = Some(1);
            (st, gone(obs()))
        }
        LifecycleState::Deleting => {
            let mut st = deployed_status(old, state);
            st.pending = Some(pending(
                OperationKind::Delete,
                mode,
                OperationPhase::AwaitingTermination,
                None,
            ));
            let mut o = obs();
            o.deleting = true;
            o.coordinator = CoordinatorReport::Absent;
            (st, o)
        }
    }
}

/// An inspected snapshot holding state for the operators `uids`.
fn info(uids: &[&str]) -> SnapshotInfo {
    SnapshotInfo {
        job_name: "j".into(),
        checkpoint_id: 6,
        kind: SnapshotKind::Savepoint,
        max_parallelism: 128,
        parallelism: 2,
        alignment: Default::default(),
        operators: uids
            .iter()
            .map(|u| OperatorStateInfo {
                uid: u.to_string(),
                kind: "count".into(),
                state_names: vec![],
                key_group_ranges: vec![],
                bytes: 1,
                entries: 1,
                subtasks: vec![],
            })
            .collect(),
    }
}
