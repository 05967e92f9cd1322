//! Deletion of a StreamJob, with and without a savepoint first.

use super::*;

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
