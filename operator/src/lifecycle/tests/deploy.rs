//! Deploys, health restarts, rollback and savepoint redeploys.

use super::*;

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
    o.coordinator = CoordinatorReport::Absent; // restarted operator, coordinator not up yet
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
    o.coordinator = CoordinatorReport::Reported(JobReport {
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
    o.coordinator = CoordinatorReport::Absent;
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
    // It runs the previous spec and says so (defect 10): the reason stays in status.error.
    let err = d.status.error.clone().unwrap_or_default();
    assert!(err.contains("rolled back to the last stable spec"), "{err:?}");
    assert_eq!(d.status.failed_generation, Some(o3.generation));
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

/// Defect 10: a deployment (e.g. a rescale to 64) whose pods cannot be scheduled reports why
/// while it waits, and the reason goes once they are scheduled.
#[test]
fn unschedulable_deployment_says_why() {
    let spec = base_spec(UpgradeMode::Savepoint);
    let st = deployed_status(&spec, LifecycleState::Deploying);
    let mut o = obs();
    o.coordinator = CoordinatorReport::Reported(report(JobState::Initializing));
    o.unschedulable = Some("j-worker-63: 0/3 nodes are available: 3 Insufficient cpu.".into());
    let d = decide(&spec, &st, &o);
    assert_eq!(d.status.lifecycle_state, LifecycleState::Deploying);
    let err = d.status.error.clone().unwrap_or_default();
    assert!(err.contains("scheduled") && err.contains("Insufficient cpu"), "{err:?}");
    o.unschedulable = None;
    let d = decide(&spec, &d.status, &o);
    assert_eq!(d.status.error, None);
}
