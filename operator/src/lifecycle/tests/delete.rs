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
    o.coordinator = CoordinatorReport::Absent; // namespace terminating: coordinator already gone
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
    o.trigger = Some(failed_trigger("t1", "x"));
    let d = decide(&spec, &st, &o);
    assert_eq!(kinds(&d), ["delete-workloads"]);
}

/// A deletion that arrives while an upgrade's stop-with-savepoint is in flight (the job
/// reports STOPPING) takes that stop over as its own savepoint when `savepointOnDelete` asks
/// for one: the pods are not deleted under the savepoint, which is recorded once it completes.
/// Without `savepointOnDelete` the pods go at once.
#[test]
fn a_deletion_takes_over_a_stop_with_savepoint_in_flight() {
    let (_, new, mut st) = awaiting_stop(UpgradeMode::Savepoint);
    record_trigger(&mut st, "t1".into());
    let mut deleting = obs();
    deleting.deleting = true;
    deleting.coordinator = CoordinatorReport::Reported(report(JobState::Stopping));
    let mut spec = new.clone();
    spec.savepoint_on_delete = true;
    let d = decide(&spec, &st, &deleting);
    assert!(d.actions.is_empty(), "{:?}", d.actions);
    assert_eq!(d.status.lifecycle_state, LifecycleState::Deleting);
    let op = d.status.pending.as_ref().expect("the deletion's operation");
    assert_eq!(
        (op.kind, op.phase),
        (OperationKind::Delete, OperationPhase::AwaitingStop)
    );
    assert_eq!(op.trigger_id.as_deref(), Some("t1"));
    // The savepoint completes: recorded, then the pods go.
    deleting.coordinator = CoordinatorReport::Reported(report(JobState::Stopped));
    deleting.trigger = Some(completed_trigger("t1", "s3://b/svp/savepoint-j-6", 6));
    let d = decide(&spec, &d.status, &deleting);
    assert_eq!(kinds(&d), ["record-savepoint", "delete-workloads"]);
    assert_eq!(
        d.status.savepoint_history.last().map(|r| r.path.as_str()),
        Some("s3://b/svp/savepoint-j-6")
    );
    let mut after = gone(deleting.clone());
    after.deleting = true;
    assert_eq!(kinds(&decide(&spec, &d.status, &after)), ["remove-finalizer"]);
    // Without savepointOnDelete the deletion does not wait for it.
    let mut deleting = obs();
    deleting.deleting = true;
    deleting.coordinator = CoordinatorReport::Reported(report(JobState::Stopping));
    let d = decide(&new, &st, &deleting);
    assert_eq!(kinds(&d), ["delete-workloads"]);
}

/// A stop in flight that can no longer complete (its trigger failed, or it is older than
/// STOP_TIMEOUT) is not taken over: a deletion with `savepointOnDelete` of a job still running
/// sends its own stop-with-savepoint instead of deleting the pods without one (helper-124).
#[test]
fn a_deletion_replaces_a_stop_that_failed_or_timed_out_with_its_own() {
    let (_, new, mut st) = awaiting_stop(UpgradeMode::Savepoint);
    record_trigger(&mut st, "t1".into());
    let mut spec = new.clone();
    spec.savepoint_on_delete = true;
    let mut failed = obs();
    failed.deleting = true;
    failed.trigger = Some(failed_trigger("t1", "a task failed"));
    let mut timed_out = obs();
    timed_out.deleting = true;
    timed_out.now = at(50) + STOP_TIMEOUT + Duration::from_secs(1);
    for (what, o) in [("trigger failed", failed), ("timed out", timed_out)] {
        let d = decide(&spec, &st, &o);
        assert_eq!(kinds(&d), ["stop-with-savepoint"], "{what}");
        let op = d.status.pending.as_ref().expect("the deletion's operation");
        assert_eq!(
            (op.kind, op.phase),
            (OperationKind::Delete, OperationPhase::AwaitingStop),
            "{what}"
        );
        assert_eq!(op.trigger_id, None, "{what}: a new stop, not the failed one");
    }
}
