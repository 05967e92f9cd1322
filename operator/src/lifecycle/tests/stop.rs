//! Stopping a job: savepoints lost between the stop and the status write, failed stops, and the
//! bounded waits for an in-flight savepoint or a restarting job.

use super::*;

// ---------- FLINK-27804: savepoint path lost between stop and status write ----------

#[test]
fn flink_27804_restart_before_trigger_id_written_uses_the_savepoint_from_the_coordinator() {
    let (_, new, st) = awaiting_stop(UpgradeMode::Savepoint);
    let mut o = obs();
    let sp = snapshot(6, SnapshotKind::Savepoint, 60); // completed after the op started (t=50)
    o.coordinator = CoordinatorReport::Reported(JobReport {
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
    o.coordinator = CoordinatorReport::Absent;
    o.newest_snapshot = NewestSnapshot::Found(snapshot(6, SnapshotKind::Savepoint, 60));
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
    o.coordinator = CoordinatorReport::Reported(report(JobState::Stopping));
    o.newest_snapshot = NewestSnapshot::Found(snapshot(4, SnapshotKind::Savepoint, 10)); // before t=50
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
    o.trigger = Some(failed_trigger("t1", "task failed"));
    o.coordinator = CoordinatorReport::Reported(JobReport {
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
    o.trigger = Some(failed_trigger("t1", "not all tasks running"));
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
    o.trigger = Some(failed_trigger("t1", "job failed"));
    o.coordinator = CoordinatorReport::Reported(report(JobState::Failed));
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
    o.coordinator = CoordinatorReport::Reported(report(JobState::Restarting));
    // A restart is not a failure: the job stays Running in the lifecycle and the stop waits.
    let d = decide(&new, &st, &o);
    assert_eq!(phase(&d), Some(OperationPhase::Stopping));
    assert!(d.actions.is_empty(), "{:?}", d.actions);
    assert!(!d.events.iter().any(|e| e.reason == Reason::SavepointError));
    // Running again: the stop-with-savepoint goes out.
    o.coordinator = CoordinatorReport::Reported(report(JobState::Running));
    let running = decide(&new, &d.status, &o);
    assert_eq!(kinds(&running), ["stop-with-savepoint"]);
    // Still restarting after the bound: stop without a savepoint, restore from the checkpoint.
    o.coordinator = CoordinatorReport::Reported(report(JobState::Restarting));
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

// ---------- a coordinator that did not answer is not a stopped job ----------

/// A savepoint upgrade observed with the coordinator's control API unanswered (a timeout on a
/// loaded machine; CI's stand-in saw a rescale take the checkpoint instead of its savepoint).
#[test]
fn savepoint_stop_waits_for_a_coordinator_that_did_not_answer_then_falls_back() {
    let old = base_spec(UpgradeMode::Savepoint);
    let new = changed(&old, ChangeClass::Scale);
    let st = deployed_status(&old, LifecycleState::Running);
    let mut unanswered = obs();
    unanswered.coordinator = CoordinatorReport::Unanswered("timed out after 5s".into());
    let d = decide(&new, &st, &unanswered);
    assert_eq!(phase(&d), Some(OperationPhase::Stopping));
    assert!(d.actions.is_empty(), "{:?}", d.actions);
    assert!(
        !d.events.iter().any(|e| e.reason == Reason::SavepointError),
        "{:?}",
        d.events
    );
    // It answers: the stop-with-savepoint goes out.
    let answered = decide(&new, &d.status, &obs());
    assert_eq!(kinds(&answered), ["stop-with-savepoint"]);
    // Unanswered still after the bound: stop without a savepoint, saying why.
    unanswered.now = at(100) + RESTARTING_WAIT + Duration::from_secs(1);
    let late = decide(&new, &d.status, &unanswered);
    assert_eq!(kinds(&late), ["delete-workloads"]);
    assert_eq!(phase(&late), Some(OperationPhase::AwaitingTermination));
    assert!(
        late.events
            .iter()
            .any(|e| e.reason == Reason::SavepointError && e.message.contains("has not reported its state")),
        "{:?}",
        late.events
    );
}

/// A coordinator that does not report but will not soon either (its pods crash-loop, or
/// cannot be scheduled), or that reports a state in which no savepoint can be taken (after an
/// unanswered pass: FAILED, FINISHED, or no coordinator at all), is not waited for: the cycle
/// restores from the newest checkpoint at once, saying why. A job initializing is waited for.
#[test]
fn savepoint_stop_falls_back_at_once_when_the_job_cannot_take_a_savepoint_soon() {
    let old = base_spec(UpgradeMode::Savepoint);
    let new = changed(&old, ChangeClass::Scale);
    let st = deployed_status(&old, LifecycleState::Running);
    let mut unanswered = obs();
    unanswered.coordinator = CoordinatorReport::Unanswered("connection refused".into());
    let mut crash_looping = unanswered.clone();
    crash_looping.crash_looping = true;
    let mut unschedulable = unanswered.clone();
    unschedulable.unschedulable = Some("0/3 nodes are available".into());
    // A deployment that never came up, changed again (a running one that crash-loops is
    // restarted by the health check first).
    let deploying = deployed_status(&old, LifecycleState::Deploying);
    for (what, o) in [("crash-looping", crash_looping), ("unschedulable", unschedulable)] {
        let d = decide(&new, &deploying, &o);
        assert_eq!(phase(&d), Some(OperationPhase::AwaitingTermination), "{what}");
        assert!(d.events.iter().any(|e| e.reason == Reason::SavepointError), "{what}");
    }
    // Unanswered first (Stopping), then a report in which no savepoint can be taken.
    let waiting = decide(&new, &st, &unanswered);
    assert_eq!(phase(&waiting), Some(OperationPhase::Stopping));
    for (what, coordinator) in [
        ("failed", CoordinatorReport::Reported(report(JobState::Failed))),
        ("finished", CoordinatorReport::Reported(report(JobState::Finished))),
        ("no coordinator", CoordinatorReport::Absent),
    ] {
        let mut o = obs();
        o.coordinator = coordinator;
        let d = decide(&new, &waiting.status, &o);
        assert_eq!(kinds(&d), ["delete-workloads"], "{what}");
        assert_eq!(phase(&d), Some(OperationPhase::AwaitingTermination), "{what}");
        assert!(
            d.events
                .iter()
                .any(|e| e.reason == Reason::SavepointError && e.message.contains("not running")),
            "{what}: {:?}",
            d.events
        );
    }
    let mut initializing = obs();
    initializing.coordinator = CoordinatorReport::Reported(report(JobState::Initializing));
    let d = decide(&new, &waiting.status, &initializing);
    assert_eq!(phase(&d), Some(OperationPhase::Stopping), "initializing is waited for");
    assert!(d.actions.is_empty());
    assert_eq!(d.requeue, POLL);
}

/// After the stop-with-savepoint went out, an unanswered poll does not count as the job gone:
/// the pods are not deleted under a savepoint that may be completing.
#[test]
fn an_unanswered_poll_during_a_stop_keeps_waiting_for_its_savepoint() {
    let (_, new, mut st) = awaiting_stop(UpgradeMode::Savepoint);
    st.pending.as_mut().unwrap().trigger_id = Some("t1".into());
    let mut o = obs();
    o.coordinator = CoordinatorReport::Unanswered("connection refused".into());
    o.newest_snapshot = NewestSnapshot::NotRead;
    let d = decide(&new, &st, &o);
    assert!(d.actions.is_empty(), "{:?}", d.actions);
    assert_eq!(phase(&d), Some(OperationPhase::AwaitingStop));
    assert_eq!(d.requeue, POLL);
    // The savepoint then shows up in the poll: recorded and restored from.
    o.coordinator = CoordinatorReport::Reported(report(JobState::Stopped));
    o.trigger = Some(completed_trigger("t1", "s3://b/svp/savepoint-j-6", 6));
    let d = decide(&new, &d.status, &o);
    assert_eq!(kinds(&d), ["record-savepoint", "delete-workloads"]);
    assert_eq!(
        d.status.restore_point.map(|r| r.path),
        Some("s3://b/svp/savepoint-j-6".to_string())
    );
    // Unanswered until the stop's timeout: counted as failed, the pods deleted.
    o.coordinator = CoordinatorReport::Unanswered("connection refused".into());
    o.trigger = None;
    o.now = at(50) + STOP_TIMEOUT + Duration::from_secs(1);
    let d = decide(&new, &st, &o);
    assert_eq!(kinds(&d), ["delete-workloads"]);
}
