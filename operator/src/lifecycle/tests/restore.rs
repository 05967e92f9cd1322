//! After the stop: waiting for old pods to go, choosing the restore point, and refusing one the
//! new job cannot use.

use super::*;

// ---------- FLINK-34438 / FLINK-39970: never two generations at once ----------

#[test]
fn new_deploy_waits_while_old_pods_still_terminate() {
    for mode in MODES {
        let (new, st) = upgrade_awaiting_termination(mode);
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
    let (new, st) = upgrade_awaiting_termination(UpgradeMode::LastState);
    let mut o = gone(obs());
    o.newest_snapshot = NewestSnapshot::None;
    let d = decide(&new, &st, &o);
    assert_eq!(d.status.lifecycle_state, LifecycleState::Failed);
    assert!(d.status.error.unwrap().contains("manual restore required"));
    assert!(d.actions.is_empty(), "never deploys empty");
    // An older snapshot than the job is known to have completed is refused too.
    o.newest_snapshot = NewestSnapshot::Found(snapshot(3, SnapshotKind::Checkpoint, 0));
    let d = decide(&new, &st, &o);
    assert_eq!(d.status.lifecycle_state, LifecycleState::Failed);
    // The newest checkpoint is used when it is there.
    o.newest_snapshot = NewestSnapshot::Found(snapshot(9, SnapshotKind::Checkpoint, 0));
    let d = decide(&new, &st, &o);
    assert_eq!(d.status.restore_point.unwrap().checkpoint_id, Some(9));
}

/// Storage refused the newest snapshot (its `_metadata` unreadable, or the job's record of its
/// newest completed snapshot names one deleted by hand): only the restore choice of a stateful
/// change fails with RestoreRequired; a delete, a stateless upgrade and a savepoint stop's own
/// savepoint go on (helper-118: the refusal used to fail the whole observation, so these were
/// retried for ever; the controller's `deletion_completes_when_event_writes_fail` covers the
/// observation).
#[test]
fn a_refused_newest_snapshot_fails_only_a_stateful_restore_choice() {
    let why = "checkpoint chk-9 of job j completed (s3://b/chk/j/chk-9, recorded in s3://b/chk/j/newest-completed), \
               but the checkpoint storage no longer holds it";
    /// What the pass does.
    #[derive(Debug, PartialEq)]
    enum Then {
        /// Failed with RestoreRequired, nothing deployed.
        Fails,
        /// The finalizer goes.
        RemovesFinalizer,
        /// Goes on to deploy from this restore point (None: empty state).
        Deploys(Option<String>),
    }
    let stop_savepoint = "s3://b/svp/savepoint-j-10";
    // (what, operation, mode, savepoint of the stop, then)
    let rows: [(&str, OperationKind, UpgradeMode, Option<&str>, Then); 6] = [
        (
            "last-state upgrade",
            OperationKind::Upgrade,
            UpgradeMode::LastState,
            None,
            Then::Fails,
        ),
        (
            "suspend (last-state)",
            OperationKind::Suspend,
            UpgradeMode::LastState,
            None,
            Then::Fails,
        ),
        (
            "savepoint upgrade, no savepoint taken",
            OperationKind::Upgrade,
            UpgradeMode::Savepoint,
            None,
            Then::Fails,
        ),
        (
            "delete",
            OperationKind::Delete,
            UpgradeMode::LastState,
            None,
            Then::RemovesFinalizer,
        ),
        (
            "stateless upgrade",
            OperationKind::Upgrade,
            UpgradeMode::Stateless,
            None,
            Then::Deploys(None),
        ),
        (
            "savepoint upgrade with the stop's savepoint",
            OperationKind::Upgrade,
            UpgradeMode::Savepoint,
            Some(stop_savepoint),
            Then::Deploys(Some(stop_savepoint.into())),
        ),
    ];
    for (what, kind, mode, savepoint, then) in rows {
        let old = base_spec(mode);
        let new = changed(&old, ChangeClass::Upgrade);
        let mut st = deployed_status(&old, LifecycleState::Upgrading);
        let target = (kind == OperationKind::Upgrade).then_some(&new);
        st.pending = Some(pending(kind, mode, OperationPhase::AwaitingTermination, target));
        if let Some(path) = savepoint {
            st.pending.as_mut().unwrap().savepoint_path = Some(path.into());
            st.restore_point = Some(RestorePoint {
                path: path.into(),
                origin: RestoreOrigin::UpgradeSavepoint,
                checkpoint_id: Some(10),
            });
        }
        let mut o = gone(obs());
        o.deleting = kind == OperationKind::Delete;
        o.newest_snapshot = NewestSnapshot::Refused {
            id: 9,
            message: why.into(),
        };
        let d = decide(&new, &st, &o);
        let restore = d.status.restore_point.as_ref().map(|r| r.path.clone());
        let seen = match (d.status.lifecycle_state, kinds(&d).as_slice(), phase(&d)) {
            (LifecycleState::Failed, [], None) => Then::Fails,
            (_, ["remove-finalizer"], _) => Then::RemovesFinalizer,
            (_, [], Some(OperationPhase::Deploying)) => Then::Deploys(restore),
            other => panic!("{what}: {other:?} {:?}", d.status.error),
        };
        assert_eq!(seen, then, "{what}: {:?}", d.status.error);
        if then == Then::Fails {
            let error = d.status.error.clone().unwrap_or_default();
            assert!(
                error.starts_with("manual restore required: ") && error.ends_with(why),
                "{what}: {error}"
            );
            assert!(d.events.iter().any(|e| e.reason == Reason::RestoreRequired), "{what}");
        }
    }
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

/// Issue 9 defect 12: removing a stateful operator's uid (or reusing it for another kind) is
/// refused while the job still runs the previous spec: no stop, no savepoint, no deletion; the
/// reason stays in status.error (also on the next pass) until the spec changes; stateless mode
/// and allowNonRestoredState let the change through.
#[test]
fn state_incompatible_change_is_refused_before_the_running_job_is_stopped() {
    for mode in [UpgradeMode::Savepoint, UpgradeMode::LastState] {
        let old = base_spec(mode);
        let mut new = old.clone();
        new.job.steps = vec![old.job.steps[0].clone(), old.job.steps[3].clone()]; // drops `counts`
        let running = deployed_status(&old, LifecycleState::Running);
        let d = decide(&new, &running, &obs());
        assert!(
            !kinds(&d)
                .iter()
                .any(|k| *k == "stop-with-savepoint" || *k == "delete-workloads"),
            "{mode:?}: {:?}",
            kinds(&d)
        );
        assert!(d.status.pending.is_none(), "{mode:?}");
        assert_eq!(
            d.status.lifecycle_state,
            LifecycleState::Running,
            "{mode:?}: keeps running"
        );
        let err = d.status.error.clone().unwrap_or_default();
        assert!(
            err.contains("[counts]") && err.contains("refused before stopping"),
            "{mode:?}: {err}"
        );
        assert_eq!(d.status.failed_generation, Some(obs().generation));
        assert!(
            d.events
                .iter()
                .any(|e| e.reason == Reason::ValidationError && e.warning)
        );
        // The next pass keeps the reason and still does not stop the job.
        let again = decide(&new, &d.status, &obs());
        assert_eq!(again.status.error, d.status.error, "{mode:?}");
        assert!(again.status.pending.is_none());

        let mut allowed = new.clone();
        allowed.allow_non_restored_state = true;
        let d = decide(&allowed, &running, &obs());
        assert!(
            d.status.pending.is_some(),
            "{mode:?}: allowNonRestoredState lets the upgrade start"
        );
    }
    let old = base_spec(UpgradeMode::Stateless);
    let mut new = old.clone();
    new.job.steps = vec![old.job.steps[0].clone(), old.job.steps[3].clone()];
    let d = decide(&new, &deployed_status(&old, LifecycleState::Running), &obs());
    assert!(
        d.status.pending.is_some(),
        "stateless carries no state: the upgrade starts"
    );
}

// ---------- one checkpoint directory, one StreamJob ----------

#[test]
fn a_deploy_waits_for_the_storage_claim_and_fails_when_another_stream_job_owns_the_directory() {
    let spec = base_spec(UpgradeMode::Savepoint);
    let (created, created_obs) = fixture(LifecycleState::Created, &spec, &spec);
    let upgrading = deploying_phase(UpgradeMode::Savepoint, &spec);
    let mut upgrading_obs = gone(obs());
    if let Some(r) = &upgrading.restore_point {
        upgrading_obs.restore_info = RestoreInfo::Found {
            path: r.path.clone(),
            info: info(&["counts"]),
        };
    }
    for (what, st, mut o) in [
        ("first deploy", created, created_obs),
        ("upgrade", upgrading, upgrading_obs),
    ] {
        let deploys = |d: &Decision| d.actions.iter().any(|a| matches!(a, Action::Deploy { .. }));
        assert!(
            deploys(&decide(&spec, &st, &o)),
            "{what}: deploys into a directory it owns"
        );

        o.storage_claim = StorageClaim::NotChecked;
        let unread = decide(&spec, &st, &o);
        assert!(!deploys(&unread), "{what}: never deploys before the claim is read");
        assert_eq!(phase(&unread), Some(OperationPhase::Deploying), "{what}");
        assert_eq!(unread.requeue, POLL, "{what}");

        o.storage_claim = StorageClaim::Taken("s3://b/chk/j/_owner names StreamJob team-a/j".into());
        let taken = decide(&spec, &st, &o);
        assert!(!deploys(&taken), "{what}: never deploys into another job's directory");
        assert_eq!(taken.status.lifecycle_state, LifecycleState::Failed, "{what}");
        assert!(taken.status.error.as_deref().unwrap().contains("team-a/j"), "{what}");

        // The way out the message gives: `_owner` deleted, then a new `spec.restartNonce`:
        // the passes that follow (nothing running) deploy, the claim read again.
        let mut retry = spec.clone();
        retry.restart_nonce = Some(1);
        let mut o = gone(obs());
        o.generation = 3;
        let mut status = taken.status.clone();
        let deployed = (0..4).any(|_| {
            // What each pass reads, as the controller's observation reads it.
            let reads = crate::controller::stream_job::storage_reads(&status, &retry);
            o.storage_claim = match reads.claim {
                Some(_) => StorageClaim::Ours,
                None => StorageClaim::NotChecked,
            };
            o.newest_snapshot = if reads.newest {
                NewestSnapshot::Found(snapshot(5, SnapshotKind::Checkpoint, 0))
            } else {
                NewestSnapshot::NotRead
            };
            o.restore_info = match reads.inspect {
                Some(path) => RestoreInfo::Found {
                    path,
                    info: info(&["counts"]),
                },
                None => RestoreInfo::NotInspected,
            };
            let d = decide(&retry, &status, &o);
            status = d.status.clone();
            deploys(&d)
        });
        assert!(deployed, "{what}: a new restartNonce deploys again: {status:?}");
    }
}

#[test]
fn a_deploy_the_storage_would_not_record_goes_on_with_a_warning() {
    let spec = base_spec(UpgradeMode::Savepoint);
    let (st, mut o) = fixture(LifecycleState::Created, &spec, &spec);
    o.storage_claim = StorageClaim::Unrecorded("s3://b/chk/j/_owner: S3 PutObject failed: AccessDenied".into());
    let d = decide(&spec, &st, &o);
    assert!(
        d.actions.iter().any(|a| matches!(a, Action::Deploy { .. })),
        "{:?}",
        d.actions
    );
    let warning = d
        .events
        .iter()
        .find(|e| e.warning && e.reason == Reason::OwnerUnrecorded)
        .expect("a Warning says the owner was not recorded");
    assert!(
        warning.message.contains("AccessDenied") && warning.message.contains("s3:PutObject"),
        "{}",
        warning.message
    );
}

/// A change that moves a running job's checkpoints into a directory another StreamJob owns is
/// refused before the job is stopped, as a change whose state could not be handed over is: the
/// job keeps running the previous spec. The same change into a directory of its own stops the
/// job for the upgrade.
#[test]
fn moving_a_running_jobs_checkpoints_into_another_stream_jobs_directory_is_refused_before_the_stop() {
    let old = base_spec(UpgradeMode::Savepoint);
    let mut new = old.clone();
    new.checkpointing.storage = Some("s3://b/shared".into());
    let (st, mut o) = fixture(LifecycleState::Running, &old, &new);
    o.generation = 3;
    o.storage_claim = StorageClaim::Taken("s3://b/shared/j/_owner names StreamJob team-a/j".into());
    let d = decide(&new, &st, &o);
    assert!(!kinds(&d).contains(&"stop-with-savepoint"), "{:?}", kinds(&d));
    assert!(d.status.pending.is_none(), "{:?}", d.status.pending);
    assert_eq!(d.status.lifecycle_state, LifecycleState::Running);
    let error = d.status.error.as_deref().unwrap();
    assert!(
        error.contains("team-a/j") && error.contains("refused before stopping the job"),
        "{error}"
    );

    o.storage_claim = StorageClaim::Ours;
    let d = decide(&new, &st, &o);
    assert!(kinds(&d).contains(&"stop-with-savepoint"), "{:?}", kinds(&d));
}
