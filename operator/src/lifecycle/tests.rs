//! Decision tables: every (lifecycle state × change class × upgrade mode) cell, then the named
//! edge cases (FKO's known failures) as explicit rows.

use super::*;
use crate::crd::{SavepointHistory, SavepointsConfig};
use weir_runtime::control::api::OperatorStateInfo;

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
        job: Some(report(JobState::Running)),
        trigger: None,
        workloads_present: true,
        job_pods: 3,
        crash_looping: false,
        newest_snapshot: Some(snapshot(5, SnapshotKind::Checkpoint, 0)),
        restore_info: RestoreInfo::NotInspected,
        savepoint_in_flight_since: None,
    }
}

fn gone(mut o: Observation) -> Observation {
    o.workloads_present = false;
    o.job_pods = 0;
    o.job = None;
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
const CLASSES: [ChangeClass; 4] = [
    ChangeClass::Ignore,
    ChangeClass::Scale,
    ChangeClass::Upgrade,
    ChangeClass::SavepointRedeploy,
];

/// The fixture for one lifecycle state: (status, observation) with `old` deployed.
fn fixture(state: LifecycleState, old: &StreamJobSpec, new: &StreamJobSpec) -> (StreamJobStatus, Observation) {
    let mode = new.upgrade_mode;
    match state {
        LifecycleState::Created => (StreamJobStatus::default(), gone(obs())),
        LifecycleState::Deploying => {
            let mut o = obs();
            o.job = Some(report(JobState::Initializing));
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
            o.job = Some(report(JobState::Stopping));
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
            o.job = None;
            (st, o)
        }
    }
}

/// Expected (lifecycle, actions, pending phase) per cell, stated from the design, not the code.
fn expected(
    state: LifecycleState,
    class: ChangeClass,
    mode: UpgradeMode,
) -> (LifecycleState, Vec<&'static str>, Option<OperationPhase>) {
    use LifecycleState as L;
    use OperationPhase as P;
    let restarts = class != ChangeClass::Ignore;
    match state {
        // First deploy; a restore from initialSavepointPath waits for its inspection.
        L::Created if class == ChangeClass::SavepointRedeploy => (L::Deploying, vec![], Some(P::Deploying)),
        L::Created => (L::Deploying, vec!["deploy"], None),
        // Not running yet: nothing to savepoint, so every mode deletes and restores.
        L::Deploying if restarts => (L::Upgrading, vec!["delete-workloads"], Some(P::AwaitingTermination)),
        L::Deploying => (L::Deploying, vec!["deploy"], None),
        L::Running if restarts && mode == UpgradeMode::Savepoint => {
            (L::Upgrading, vec!["stop-with-savepoint"], Some(P::AwaitingStop))
        }
        L::Running if restarts => (L::Upgrading, vec!["delete-workloads"], Some(P::AwaitingTermination)),
        L::Running => (L::Running, vec!["deploy"], None),
        // An operation in flight continues regardless of further spec changes.
        L::Upgrading if mode == UpgradeMode::Savepoint => (L::Upgrading, vec![], Some(P::AwaitingStop)),
        L::Upgrading => (L::Upgrading, vec!["delete-workloads"], Some(P::AwaitingTermination)),
        // Suspended stays suspended whatever changes; it applies on resume.
        L::Suspended => (L::Suspended, vec![], None),
        // Old pods gone: the restore point is chosen, next pass inspects it.
        L::RollingBack => (L::RollingBack, vec![], Some(P::Deploying)),
        // A failed job redeploys on a new spec; nothing is running, so no stop.
        L::Failed if restarts => (L::Upgrading, vec![], Some(P::Deploying)),
        L::Failed => (L::Failed, vec![], None),
        L::Deleting => (L::Deleting, vec!["delete-workloads"], Some(P::AwaitingTermination)),
    }
}

#[test]
fn every_state_class_mode_cell() {
    use LifecycleState as L;
    let mut cells = 0;
    for state in [
        L::Created,
        L::Deploying,
        L::Running,
        L::Upgrading,
        L::Suspended,
        L::RollingBack,
        L::Failed,
        L::Deleting,
    ] {
        for class in CLASSES {
            for mode in MODES {
                let old = base_spec(mode);
                let mut new = changed(&old, class);
                if state == L::Suspended {
                    new.state = DesiredState::Suspended;
                }
                let (status, o) = fixture(state, &old, &new);
                let d = decide(&new, &status, &o);
                let (lc, actions, ph) = expected(state, class, mode);
                let cell = format!("{state:?} × {class:?} × {mode:?}");
                assert_eq!(d.status.lifecycle_state, lc, "{cell}: lifecycle");
                assert_eq!(kinds(&d), actions, "{cell}: actions");
                assert_eq!(phase(&d), ph, "{cell}: phase");
                // The write-ahead rule: any stop or delete of a running job has its intent recorded.
                if d.actions.iter().any(|a| matches!(a, Action::StopWithSavepoint { .. }))
                    || (state == L::Running && actions.contains(&"delete-workloads"))
                {
                    let p = d
                        .status
                        .pending
                        .as_ref()
                        .unwrap_or_else(|| panic!("{cell}: no pending op"));
                    assert_eq!(
                        p.target_spec.as_deref(),
                        Some(spec_json(&new).as_str()),
                        "{cell}: target spec recorded"
                    );
                    assert_eq!(p.mode, mode, "{cell}");
                    assert!(
                        d.events.iter().any(|e| e.reason == Reason::SpecChanged),
                        "{cell}: SpecChanged names the cycle"
                    );
                }
                cells += 1;
            }
        }
    }
    assert_eq!(cells, 8 * 4 * 3);
}

// ---------- classification ----------

#[test]
fn classify_orders_changes() {
    let s = base_spec(UpgradeMode::Savepoint);
    let mut m = s.clone();
    m.upgrade_mode = UpgradeMode::LastState;
    assert_eq!(classify(&s, &m), ChangeClass::Ignore, "upgradeMode alone");
    m.initial_savepoint_path = Some("s3://x".into());
    assert_eq!(classify(&s, &m), ChangeClass::Ignore, "initialSavepointPath alone");
    m.savepoints = Some(SavepointsConfig {
        periodic_interval: Some("1h".into()),
        ..s.savepoints.clone().unwrap()
    });
    assert_eq!(classify(&s, &m), ChangeClass::Ignore, "savepoint schedule");
    m.parallelism = 3;
    assert_eq!(classify(&s, &m), ChangeClass::Scale);
    m.checkpointing.interval = "1s".into();
    assert_eq!(classify(&s, &m), ChangeClass::Upgrade, "scale + upgrade = upgrade");
    m.savepoint_redeploy_nonce = Some(7);
    assert_eq!(classify(&s, &m), ChangeClass::SavepointRedeploy, "strongest wins");
    let mut n = s.clone();
    n.restart_nonce = Some(1);
    assert_eq!(classify(&s, &n), ChangeClass::Upgrade, "restartNonce restarts");
}

// ---------- FLINK-27804: savepoint path lost between stop and status write ----------

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

#[test]
fn flink_27804_restart_before_trigger_id_written_uses_the_savepoint_from_the_coordinator() {
    let (_, new, st) = awaiting_stop(UpgradeMode::Savepoint);
    let mut o = obs();
    let sp = snapshot(6, SnapshotKind::Savepoint, 60); // completed after the op started (t=50)
    o.job = Some(JobReport {
        state: JobState::Stopped,
        last_completed: Some(sp.clone()),
        ..report(JobState::Stopped)
    });
    let d = decide(&new, &st, &o);
    assert_eq!(kinds(&d), ["record-savepoint", "delete-workloads"]);
    assert_eq!(
        d.status.restore_point.as_ref().map(|r| r.path.as_str()),
        Some(sp.path.as_str())
    );
    assert_eq!(phase(&d), Some(OperationPhase::AwaitingTermination));
}

#[test]
fn flink_27804_coordinator_gone_savepoint_found_in_storage() {
    let (_, new, st) = awaiting_stop(UpgradeMode::Savepoint);
    let mut o = obs();
    o.job = None;
    o.newest_snapshot = Some(snapshot(6, SnapshotKind::Savepoint, 60));
    let d = decide(&new, &st, &o);
    assert_eq!(
        d.status.restore_point.as_ref().unwrap().path,
        "s3://b/svp/savepoint-j-6"
    );
    assert_eq!(kinds(&d), ["record-savepoint", "delete-workloads"]);
}

#[test]
fn an_older_savepoint_is_not_mistaken_for_this_stops() {
    let (_, new, st) = awaiting_stop(UpgradeMode::Savepoint);
    let mut o = obs();
    o.job = Some(report(JobState::Stopping));
    o.newest_snapshot = Some(snapshot(4, SnapshotKind::Savepoint, 10)); // before t=50
    let d = decide(&new, &st, &o);
    assert!(d.actions.is_empty(), "{:?}", d.actions);
    assert_eq!(phase(&d), Some(OperationPhase::AwaitingStop));
}

#[test]
fn crash_before_the_stop_request_resends_it() {
    let (_, new, st) = awaiting_stop(UpgradeMode::Savepoint);
    let d = decide(&new, &st, &obs()); // job still RUNNING, no trigger id
    assert_eq!(kinds(&d), ["stop-with-savepoint"]);
}

#[test]
fn record_trigger_writes_the_id_into_the_pending_operation() {
    let (_, _, mut st) = awaiting_stop(UpgradeMode::Savepoint);
    record_trigger(&mut st, "t9".into());
    assert_eq!(st.pending.unwrap().trigger_id.as_deref(), Some("t9"));
}

// ---------- FLINK-33522: savepoint completed but a task failed while stopping ----------

#[test]
fn flink_33522_completed_savepoint_used_although_the_trigger_failed() {
    let (_, new, mut st) = awaiting_stop(UpgradeMode::Savepoint);
    st.pending.as_mut().unwrap().trigger_id = Some("t1".into());
    let mut o = obs();
    o.trigger = Some(SavepointStatus {
        trigger_id: "t1".into(),
        state: TriggerState::Failed,
        path: None,
        checkpoint_id: None,
        error: Some("task failed".into()),
    });
    o.job = Some(JobReport {
        last_completed: Some(snapshot(6, SnapshotKind::Savepoint, 70)),
        ..report(JobState::Failed)
    });
    let d = decide(&new, &st, &o);
    assert_eq!(
        d.status.restore_point.as_ref().unwrap().path,
        "s3://b/svp/savepoint-j-6"
    );
    assert_eq!(phase(&d), Some(OperationPhase::AwaitingTermination));
}

#[test]
fn failed_stop_of_a_still_running_job_leaves_it_running_and_retries() {
    let (_, new, mut st) = awaiting_stop(UpgradeMode::Savepoint);
    st.pending.as_mut().unwrap().trigger_id = Some("t1".into());
    let mut o = obs();
    o.trigger = Some(SavepointStatus {
        trigger_id: "t1".into(),
        state: TriggerState::Failed,
        path: None,
        checkpoint_id: None,
        error: Some("not all tasks running".into()),
    });
    let d = decide(&new, &st, &o);
    assert_eq!(d.status.lifecycle_state, LifecycleState::Running);
    assert!(d.status.pending.is_none() && d.actions.is_empty());
    assert!(d.status.error.unwrap().contains("not all tasks running"));
    assert_eq!(d.requeue, RETRY_BACKOFF);
    assert!(d.events.iter().any(|e| e.warning && e.reason == Reason::SavepointError));
}

#[test]
fn stateful_mode_never_degrades_to_stateless_when_the_savepoint_fails() {
    let (_, new, mut st) = awaiting_stop(UpgradeMode::Savepoint);
    st.pending.as_mut().unwrap().trigger_id = Some("t1".into());
    let mut o = obs();
    o.trigger = Some(SavepointStatus {
        trigger_id: "t1".into(),
        state: TriggerState::Failed,
        path: None,
        checkpoint_id: None,
        error: Some("job failed".into()),
    });
    o.job = Some(report(JobState::Failed));
    let d = decide(&new, &st, &o);
    assert_eq!(phase(&d), Some(OperationPhase::AwaitingTermination));
    // Once the pods are gone it restores from the newest checkpoint, not from empty state.
    let d = decide(&new, &d.status, &gone(obs()));
    assert_eq!(d.status.restore_point.as_ref().unwrap().path, "s3://b/chk/j/chk-5");
    assert_eq!(phase(&d), Some(OperationPhase::Deploying));
}

// ---------- pending periodic savepoint during an upgrade (bounded wait) ----------

#[test]
fn upgrade_waits_for_an_in_flight_savepoint_but_not_forever() {
    let old = base_spec(UpgradeMode::Savepoint);
    let new = changed(&old, ChangeClass::Upgrade);
    let st = deployed_status(&old, LifecycleState::Running);
    let mut o = obs();
    o.savepoint_in_flight_since = Some(at(90));
    let d = decide(&new, &st, &o);
    assert_eq!(phase(&d), Some(OperationPhase::Stopping));
    assert!(d.actions.is_empty());
    assert_eq!(d.requeue, POLL);
    // Still in flight after the bound: stop anyway.
    o.now = at(100) + INFLIGHT_SAVEPOINT_WAIT + Duration::from_secs(1);
    let d = decide(&new, &d.status, &o);
    assert_eq!(kinds(&d), ["stop-with-savepoint"]);
    assert_eq!(phase(&d), Some(OperationPhase::AwaitingStop));
}

#[test]
fn savepoint_stop_of_a_restarting_job_waits_for_it_then_falls_back_to_the_checkpoint() {
    let old = base_spec(UpgradeMode::Savepoint);
    let new = changed(&old, ChangeClass::Scale);
    let st = deployed_status(&old, LifecycleState::Running);
    let mut o = obs();
    o.job = Some(report(JobState::Restarting));
    // A restart is not a failure: the job stays Running in the lifecycle and the stop waits.
    let d = decide(&new, &st, &o);
    assert_eq!(phase(&d), Some(OperationPhase::Stopping));
    assert!(d.actions.is_empty(), "{:?}", d.actions);
    assert!(!d.events.iter().any(|e| e.reason == Reason::SavepointError));
    // Running again: the stop-with-savepoint goes out.
    o.job = Some(report(JobState::Running));
    let running = decide(&new, &d.status, &o);
    assert_eq!(kinds(&running), ["stop-with-savepoint"]);
    // Still restarting after the bound: stop without a savepoint, restore from the checkpoint.
    o.job = Some(report(JobState::Restarting));
    o.now = at(100) + RESTARTING_WAIT + Duration::from_secs(1);
    let d = decide(&new, &d.status, &o);
    assert_eq!(kinds(&d), ["delete-workloads"]);
    assert_eq!(phase(&d), Some(OperationPhase::AwaitingTermination));
    assert!(d.events.iter().any(|e| e.reason == Reason::SavepointError));
    let d = decide(&new, &d.status, &gone(o));
    assert_eq!(phase(&d), Some(OperationPhase::Deploying));
    assert_eq!(
        d.status.restore_point.as_ref().map(|r| r.path.as_str()),
        Some("s3://b/chk/j/chk-5")
    );
}

// ---------- FLINK-34438 / FLINK-39970: never two generations at once ----------

#[test]
fn new_deploy_waits_while_old_pods_still_terminate() {
    for mode in MODES {
        let old = base_spec(mode);
        let new = changed(&old, ChangeClass::Upgrade);
        let mut st = deployed_status(&old, LifecycleState::Upgrading);
        st.pending = Some(pending(
            OperationKind::Upgrade,
            mode,
            OperationPhase::AwaitingTermination,
            Some(&new),
        ));
        let mut o = gone(obs());
        o.job_pods = 2; // workloads deleted, pods terminating
        let d = decide(&new, &st, &o);
        assert_eq!(kinds(&d), ["delete-workloads"], "{mode:?}");
        assert_eq!(phase(&d), Some(OperationPhase::AwaitingTermination), "{mode:?}");
        assert_eq!(d.status.deploy_generation, 1, "{mode:?}");
    }
}

#[test]
fn resume_waits_for_leftover_pods() {
    let spec = base_spec(UpgradeMode::Savepoint);
    let (st, mut o) = fixture(LifecycleState::Suspended, &spec, &spec);
    o.job_pods = 1;
    o.restore_info = RestoreInfo::Found {
        path: "s3://b/svp/savepoint-j-6".into(),
        info: info(&["counts"]),
    };
    let d = decide(&spec, &st, &o);
    assert_eq!(kinds(&d), ["delete-workloads"]);
    assert_eq!(d.status.deploy_generation, 1);
}

// ---------- FLINK-33011: restore metadata gone ----------

#[test]
fn flink_33011_last_state_with_lost_checkpoints_fails_loudly() {
    let old = base_spec(UpgradeMode::LastState);
    let new = changed(&old, ChangeClass::Upgrade);
    let mut st = deployed_status(&old, LifecycleState::Upgrading);
    st.pending = Some(pending(
        OperationKind::Upgrade,
        UpgradeMode::LastState,
        OperationPhase::AwaitingTermination,
        Some(&new),
    ));
    let mut o = gone(obs());
    o.newest_snapshot = None;
    let d = decide(&new, &st, &o);
    assert_eq!(d.status.lifecycle_state, LifecycleState::Failed);
    assert!(d.status.error.unwrap().contains("manual restore required"));
    assert!(d.actions.is_empty(), "never deploys empty");
    // An older snapshot than the job is known to have completed is refused too.
    o.newest_snapshot = Some(snapshot(3, SnapshotKind::Checkpoint, 0));
    let d = decide(&new, &st, &o);
    assert_eq!(d.status.lifecycle_state, LifecycleState::Failed);
    // The newest checkpoint is used when it is there.
    o.newest_snapshot = Some(snapshot(9, SnapshotKind::Checkpoint, 0));
    let d = decide(&new, &st, &o);
    assert_eq!(d.status.restore_point.unwrap().checkpoint_id, Some(9));
}

#[test]
fn missing_restore_point_at_deploy_requires_manual_restore() {
    let spec = base_spec(UpgradeMode::Savepoint);
    let (st, mut o) = fixture(LifecycleState::Suspended, &spec, &spec);
    o.restore_info = RestoreInfo::Missing {
        path: "s3://b/svp/savepoint-j-6".into(),
        error: "no _metadata".into(),
    };
    let d = decide(&spec, &st, &o);
    assert_eq!(d.status.lifecycle_state, LifecycleState::Failed);
    assert!(d.status.error.unwrap().contains("manual restore required"));
    assert_eq!(
        d.status.restore_point.as_ref().unwrap().path,
        "s3://b/svp/savepoint-j-6",
        "restore point kept"
    );
}

// ---------- FLINK-30638: state that the new job would drop ----------

fn info(uids: &[&str]) -> SnapshotInfo {
    SnapshotInfo {
        job_name: "j".into(),
        checkpoint_id: 6,
        kind: SnapshotKind::Savepoint,
        max_parallelism: 128,
        parallelism: 2,
        operators: uids
            .iter()
            .map(|u| OperatorStateInfo {
                uid: u.to_string(),
                kind: "count".into(),
                state_names: vec![],
                key_group_ranges: vec![],
                bytes: 1,
                entries: 1,
            })
            .collect(),
    }
}

fn deploying_phase(mode: UpgradeMode, new: &StreamJobSpec) -> StreamJobStatus {
    let old = base_spec(mode);
    let mut st = deployed_status(&old, LifecycleState::Upgrading);
    st.pending = Some(pending(
        OperationKind::Upgrade,
        mode,
        OperationPhase::Deploying,
        Some(new),
    ));
    st.restore_point = Some(RestorePoint {
        path: "s3://b/chk/j/chk-5".into(),
        origin: RestoreOrigin::Checkpoint,
        checkpoint_id: Some(5),
    });
    st
}

#[test]
fn flink_30638_last_state_refuses_to_drop_state_without_allow_non_restored_state() {
    let mut new = base_spec(UpgradeMode::LastState);
    new.job.steps[2].uid = Some("renamed".into());
    let st = deploying_phase(UpgradeMode::LastState, &new);
    let mut o = gone(obs());
    // Not inspected yet: wait, do not deploy blind.
    let d = decide(&new, &st, &o);
    assert!(d.actions.is_empty() && phase(&d) == Some(OperationPhase::Deploying));
    o.restore_info = RestoreInfo::Found {
        path: "s3://b/chk/j/chk-5".into(),
        info: info(&["counts"]),
    };
    let d = decide(&new, &st, &o);
    assert_eq!(d.status.lifecycle_state, LifecycleState::Failed);
    let err = d.status.error.clone().unwrap();
    assert!(
        err.contains("[counts]") && err.contains("spec.allowNonRestoredState"),
        "{err}"
    );
    assert!(d.actions.is_empty());
    assert!(
        d.status.restore_point.is_some(),
        "restore point kept for a corrected spec"
    );
    // With allowNonRestoredState the same restore deploys.
    new.allow_non_restored_state = true;
    let st = deploying_phase(UpgradeMode::LastState, &new);
    let d = decide(&new, &st, &o);
    assert_eq!(kinds(&d), ["deploy"]);
    match &d.actions[0] {
        Action::Deploy {
            restore_from,
            deploy_generation,
            ..
        } => {
            assert_eq!(restore_from.as_deref(), Some("s3://b/chk/j/chk-5"));
            assert_eq!(*deploy_generation, 2);
        }
        a => panic!("{a:?}"),
    }
}

#[test]
fn restore_with_other_max_parallelism_is_refused() {
    let new = base_spec(UpgradeMode::Savepoint);
    let st = deploying_phase(UpgradeMode::Savepoint, &new);
    let mut o = gone(obs());
    let mut i = info(&["counts"]);
    i.max_parallelism = 256;
    o.restore_info = RestoreInfo::Found {
        path: "s3://b/chk/j/chk-5".into(),
        info: i,
    };
    let d = decide(&new, &st, &o);
    assert!(d.status.error.unwrap().contains("maxParallelism 256"));
}

#[test]
fn invalid_spec_is_refused_before_the_running_job_is_stopped() {
    let old = base_spec(UpgradeMode::Savepoint);
    let mut new = old.clone();
    new.job.steps.swap(0, 3); // sink first: the runtime rejects it
    let d = decide(&new, &deployed_status(&old, LifecycleState::Running), &obs());
    assert!(
        !d.actions
            .iter()
            .any(|a| matches!(a, Action::StopWithSavepoint { .. } | Action::DeleteWorkloads))
    );
    assert!(d.status.pending.is_none());
    assert!(
        d.events
            .iter()
            .any(|e| e.reason == Reason::ValidationError && e.warning)
    );
}

// ---------- FLINK-38033: retention never disposes the active restore point ----------

fn rec(path: &str, secs: u64, origin: SavepointOrigin) -> SavepointRecord {
    SavepointRecord {
        path: path.into(),
        completed_at: rfc3339(at(secs)),
        origin,
        savepoint_name: None,
    }
}

#[test]
fn flink_38033_retention_keeps_the_restore_point_and_the_newest() {
    let history = vec![
        rec("sp-1", 0, SavepointOrigin::Periodic),
        rec("sp-2", 10, SavepointOrigin::Upgrade), // the active restore point
        rec("sp-3", 20, SavepointOrigin::Manual),
        rec("sp-4", 30, SavepointOrigin::Periodic),
        rec("sp-5", 40, SavepointOrigin::Periodic),
    ];
    let policy = SavepointHistory {
        max_count: Some(1),
        max_age: None,
    };
    let out: Vec<&str> = retention::to_dispose(&history, &policy, &["sp-2"], at(50))
        .iter()
        .map(|r| r.path.as_str())
        .collect();
    assert_eq!(out, ["sp-4", "sp-1"]);
    // maxAge alone: everything old, yet the newest and the restore point stay.
    let policy = SavepointHistory {
        max_count: None,
        max_age: Some("5s".into()),
    };
    let out: Vec<&str> = retention::to_dispose(&history, &policy, &["sp-2"], at(1000))
        .iter()
        .map(|r| r.path.as_str())
        .collect();
    assert_eq!(out, ["sp-4", "sp-1"]);
    let policy = SavepointHistory {
        max_count: Some(10),
        max_age: Some("1h".into()),
    };
    assert!(retention::to_dispose(&history, &policy, &[], at(50)).is_empty());
}

#[test]
fn running_job_disposes_by_retention_but_not_its_restore_point() {
    let mut spec = base_spec(UpgradeMode::Savepoint);
    spec.savepoints = Some(SavepointsConfig {
        history: Some(SavepointHistory {
            max_count: Some(1),
            max_age: None,
        }),
        ..spec.savepoints.clone().unwrap()
    });
    let mut st = deployed_status(&spec, LifecycleState::Running);
    st.savepoint_history = vec![
        rec("sp-1", 0, SavepointOrigin::Upgrade),
        rec("sp-2", 10, SavepointOrigin::Periodic),
        rec("sp-3", 20, SavepointOrigin::Periodic),
    ];
    st.restore_point = Some(RestorePoint {
        path: "sp-1".into(),
        origin: RestoreOrigin::UpgradeSavepoint,
        checkpoint_id: None,
    });
    let d = decide(&spec, &st, &obs());
    assert_eq!(
        d.actions
            .iter()
            .filter(|a| matches!(a, Action::DisposeSavepoint { .. }))
            .count(),
        1
    );
    assert!(d.actions.contains(&Action::DisposeSavepoint { path: "sp-2".into() }));
    assert_eq!(d.status.savepoint_history.len(), 2);
}

#[test]
fn periodic_savepoint_is_requested_when_due_and_not_while_one_is_in_flight() {
    let mut spec = base_spec(UpgradeMode::Savepoint);
    spec.savepoints.as_mut().unwrap().periodic_interval = Some("60s".into());
    let st = deployed_status(&spec, LifecycleState::Running); // deployed at t=0, now t=100
    let d = decide(&spec, &st, &obs());
    assert!(d.actions.contains(&Action::RecordSavepoint {
        origin: SavepointOrigin::Periodic,
        path: None
    }));
    let mut o = obs();
    o.savepoint_in_flight_since = Some(at(95));
    assert!(
        !decide(&spec, &st, &o)
            .actions
            .iter()
            .any(|a| matches!(a, Action::RecordSavepoint { .. }))
    );
    let mut o = obs();
    o.now = at(30);
    assert!(
        !decide(&spec, &st, &o)
            .actions
            .iter()
            .any(|a| matches!(a, Action::RecordSavepoint { .. }))
    );
}

// ---------- FLINK-31860: deletion completes ----------

#[test]
fn flink_31860_deletion_completes_without_the_coordinator() {
    let mut spec = base_spec(UpgradeMode::Savepoint);
    spec.savepoint_on_delete = true;
    let st = deployed_status(&spec, LifecycleState::Running);
    let mut o = obs();
    o.deleting = true;
    o.job = None; // namespace terminating: coordinator already gone
    let d = decide(&spec, &st, &o);
    assert_eq!(
        kinds(&d),
        ["delete-workloads"],
        "no savepoint attempt against a dead job"
    );
    assert_eq!(d.status.lifecycle_state, LifecycleState::Deleting);
    let mut o2 = gone(o.clone());
    o2.deleting = true;
    let d = decide(&spec, &d.status, &o2);
    assert_eq!(kinds(&d), ["remove-finalizer"]);
    // Even with no recorded operation (status write lost), an empty job is released.
    let d = decide(&spec, &StreamJobStatus::default(), &o2);
    assert_eq!(kinds(&d), ["remove-finalizer"]);
}

#[test]
fn savepoint_on_delete_stops_with_a_savepoint_first() {
    let mut spec = base_spec(UpgradeMode::LastState);
    spec.savepoint_on_delete = true;
    let mut o = obs();
    o.deleting = true;
    let d = decide(&spec, &deployed_status(&spec, LifecycleState::Running), &o);
    assert_eq!(kinds(&d), ["stop-with-savepoint"]);
    // A failed savepoint does not block deletion even though the job still runs.
    let mut st = d.status.clone();
    record_trigger(&mut st, "t1".into());
    o.trigger = Some(SavepointStatus {
        trigger_id: "t1".into(),
        state: TriggerState::Failed,
        path: None,
        checkpoint_id: None,
        error: Some("x".into()),
    });
    let d = decide(&spec, &st, &o);
    assert_eq!(kinds(&d), ["delete-workloads"]);
}

// ---------- suspend / resume ----------

#[test]
fn suspend_then_resume_in_savepoint_mode() {
    let running = base_spec(UpgradeMode::Savepoint);
    let mut suspended = running.clone();
    suspended.state = DesiredState::Suspended;
    let d = decide(&suspended, &deployed_status(&running, LifecycleState::Running), &obs());
    assert_eq!(kinds(&d), ["stop-with-savepoint"]);
    assert_eq!(d.status.pending.as_ref().unwrap().kind, OperationKind::Suspend);
    let mut st = d.status;
    record_trigger(&mut st, "t1".into());
    let mut o = obs();
    o.job = Some(report(JobState::Stopped));
    o.trigger = Some(SavepointStatus {
        trigger_id: "t1".into(),
        state: TriggerState::Completed,
        path: Some("s3://b/svp/savepoint-j-6".into()),
        checkpoint_id: Some(6),
        error: None,
    });
    let d = decide(&suspended, &st, &o);
    assert_eq!(kinds(&d), ["record-savepoint", "delete-workloads"]);
    let d = decide(&suspended, &d.status, &gone(obs()));
    assert_eq!(d.status.lifecycle_state, LifecycleState::Suspended);
    assert_eq!(
        d.status.restore_point.as_ref().unwrap().path,
        "s3://b/svp/savepoint-j-6"
    );
    assert!(d.events.iter().any(|e| e.reason == Reason::Suspended));
    // Resume: inspect, then deploy from the savepoint at the (new) parallelism.
    let mut resumed = running.clone();
    resumed.parallelism = 3;
    let d = decide(&resumed, &d.status, &gone(obs()));
    assert!(d.actions.is_empty() && phase(&d) == Some(OperationPhase::Deploying));
    let mut o = gone(obs());
    o.restore_info = RestoreInfo::Found {
        path: "s3://b/svp/savepoint-j-6".into(),
        info: info(&["counts"]),
    };
    let d = decide(&resumed, &d.status, &o);
    assert_eq!(
        d.actions,
        vec![Action::Deploy {
            spec: Box::new(resumed.clone()),
            restore_from: Some("s3://b/svp/savepoint-j-6".into()),
            deploy_generation: 2
        }]
    );
    assert_eq!(d.status.lifecycle_state, LifecycleState::Deploying);
}

#[test]
fn stateless_suspend_keeps_no_restore_point() {
    let running = base_spec(UpgradeMode::Stateless);
    let mut suspended = running.clone();
    suspended.state = DesiredState::Suspended;
    let d = decide(&suspended, &deployed_status(&running, LifecycleState::Running), &obs());
    assert_eq!(kinds(&d), ["delete-workloads"]);
    let d = decide(&suspended, &d.status, &gone(obs()));
    assert_eq!(d.status.lifecycle_state, LifecycleState::Suspended);
    assert!(d.status.restore_point.is_none());
}

// ---------- deploy, health, rollback ----------

#[test]
fn deploying_becomes_running_and_stable() {
    let spec = base_spec(UpgradeMode::Savepoint);
    let mut st = deployed_status(&spec, LifecycleState::Deploying);
    st.last_stable_spec = None;
    let d = decide(&spec, &st, &obs());
    assert_eq!(d.status.lifecycle_state, LifecycleState::Running);
    assert_eq!(d.status.last_stable_spec, st.last_reconciled_spec);
    assert!(d.events.iter().any(|e| e.reason == Reason::JobRunning));
}

#[test]
fn replaying_a_deploy_decision_is_idempotent() {
    let spec = base_spec(UpgradeMode::Savepoint);
    let st = deployed_status(&spec, LifecycleState::Deploying);
    let mut o = obs();
    o.job = None; // restarted operator, coordinator not up yet
    let d1 = decide(&spec, &st, &o);
    let d2 = decide(&spec, &d1.status, &o);
    assert_eq!(d1.actions, d2.actions);
    assert_eq!(d2.status.deploy_generation, 1, "no new generation on replay");
}

#[test]
fn failed_job_restarts_from_newest_checkpoint_within_limits() {
    let spec = base_spec(UpgradeMode::Stateless);
    let st = deployed_status(&spec, LifecycleState::Running);
    let mut o = obs();
    o.job = Some(JobReport {
        failure: Some("boom".into()),
        ..report(JobState::Failed)
    });
    let d = decide(&spec, &st, &o);
    assert_eq!(kinds(&d), ["delete-workloads"]);
    assert_eq!(d.status.pending.as_ref().unwrap().kind, OperationKind::Restart);
    assert_eq!(d.status.restarts.len(), 1);
    let d = decide(&spec, &d.status, &gone(obs()));
    assert_eq!(
        d.status.restore_point.as_ref().unwrap().path,
        "s3://b/chk/j/chk-5",
        "restart restores even in stateless mode"
    );
    // Over the limit: Failed, no restart.
    let mut st = deployed_status(&spec, LifecycleState::Running);
    st.restarts = vec![rfc3339(at(10)), rfc3339(at(20)), rfc3339(at(30))];
    let d = decide(&spec, &st, &o);
    assert_eq!(d.status.lifecycle_state, LifecycleState::Failed);
    assert!(d.actions.is_empty());
    // Restarts outside the window no longer count.
    o.now = at(10_000);
    let d = decide(&spec, &st, &o);
    assert_eq!(d.status.lifecycle_state, LifecycleState::Upgrading);
}

#[test]
fn rollback_after_readiness_timeout_and_not_retried() {
    let stable = base_spec(UpgradeMode::Savepoint);
    let bad = changed(&stable, ChangeClass::Upgrade);
    let mut st = deployed_status(&bad, LifecycleState::Deploying);
    st.last_stable_spec = Some(spec_json(&stable));
    let mut o = obs();
    o.job = None;
    o.now = at(0) + Duration::from_secs(301);
    let d = decide(&bad, &st, &o);
    assert_eq!(d.status.lifecycle_state, LifecycleState::RollingBack);
    assert_eq!(kinds(&d), ["delete-workloads"]);
    assert!(d.events.iter().any(|e| e.reason == Reason::Rollback && e.warning));
    let d = decide(&bad, &d.status, &gone(o.clone()));
    assert_eq!(phase(&d), Some(OperationPhase::Deploying));
    let mut o2 = gone(o.clone());
    o2.restore_info = RestoreInfo::Found {
        path: "s3://b/chk/j/chk-5".into(),
        info: info(&["counts"]),
    };
    let d = decide(&bad, &d.status, &o2);
    match &d.actions[..] {
        [Action::Deploy { spec, .. }] => assert_eq!(**spec, stable),
        a => panic!("{a:?}"),
    }
    // The rolled-back generation is not re-applied while the spec stays the same.
    let mut o3 = obs();
    o3.now = o.now;
    let d = decide(&bad, &d.status, &o3);
    assert_eq!(d.status.lifecycle_state, LifecycleState::Running);
    assert!(!d.actions.iter().any(|a| matches!(a, Action::StopWithSavepoint { .. })));
    // A new generation is.
    let mut o4 = o3.clone();
    o4.generation = 3;
    let d = decide(&changed(&bad, ChangeClass::Scale), &d.status, &o4);
    assert_eq!(kinds(&d), ["stop-with-savepoint"]);
}

#[test]
fn savepoint_redeploy_restores_from_the_initial_path_not_the_stop_savepoint() {
    let old = base_spec(UpgradeMode::Savepoint);
    let new = changed(&old, ChangeClass::SavepointRedeploy);
    let mut st = deployed_status(&old, LifecycleState::Upgrading);
    let mut p = pending(
        OperationKind::Upgrade,
        UpgradeMode::Savepoint,
        OperationPhase::AwaitingTermination,
        Some(&new),
    );
    p.savepoint_path = Some("s3://b/svp/savepoint-j-6".into());
    st.pending = Some(p);
    let d = decide(&new, &st, &gone(obs()));
    let r = d.status.restore_point.unwrap();
    assert_eq!(
        (r.path.as_str(), r.origin),
        ("s3://b/svp/savepoint-j-3", RestoreOrigin::Initial)
    );
}
