//! Suspending a job and resuming it.

use super::*;

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
    o.coordinator = CoordinatorReport::Reported(report(JobState::Stopped));
    o.trigger = Some(completed_trigger("t1", "s3://b/svp/savepoint-j-6", 6));
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

/// Defect 11: a Suspended savepoint-mode job whose status.restorePoint is missing resumes from
/// its newest known snapshot (the recorded savepoint here, newer than the checkpoint in
/// storage), with a Warning, not from empty state.
#[test]
fn resume_without_a_restore_point_uses_the_newest_known_snapshot() {
    let spec = base_spec(UpgradeMode::Savepoint);
    let mut st = deployed_status(&spec, LifecycleState::Suspended);
    st.restore_point = None;
    st.savepoint_history = vec![SavepointRecord {
        path: "s3://b/svp/savepoint-j-9".into(),
        completed_at: rfc3339(at(50)),
        origin: SavepointOrigin::Upgrade,
        savepoint_name: None,
    }];
    let d = decide(&spec, &st, &gone(obs()));
    assert_eq!(
        d.status.restore_point.as_ref().map(|r| r.path.as_str()),
        Some("s3://b/svp/savepoint-j-9")
    );
    assert!(
        d.events
            .iter()
            .any(|e| e.warning && e.message.contains("restorePoint is missing"))
    );
    // Nothing recorded: the newest snapshot in storage.
    st.savepoint_history.clear();
    let d = decide(&spec, &st, &gone(obs()));
    let rp = d.status.restore_point.expect("restore point from storage");
    assert_eq!(rp.origin, RestoreOrigin::Checkpoint);
    // Stateless mode resumes empty, as documented.
    let spec = base_spec(UpgradeMode::Stateless);
    let mut st = deployed_status(&spec, LifecycleState::Suspended);
    st.restore_point = None;
    assert!(decide(&spec, &st, &gone(obs())).status.restore_point.is_none());
}
