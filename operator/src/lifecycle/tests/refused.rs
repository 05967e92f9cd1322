//! A refused newest snapshot (`NewestSnapshot::Refused`: deleted by hand after it completed, or
//! unreadable) across passes, each pass reading what the controller's `storage_reads` says it
//! reads (helper-119's review): the ways out the refusal names work, a resume chooses again,
//! and the user's own restore point is not refused for what predates it.

use super::*;
use crate::controller::stream_job::storage_reads;

/// The refusal, as storage gives it.
const WHY: &str =
    "checkpoint chk-9 of job j completed (s3://b/chk/j/chk-9), but the checkpoint storage no longer holds it";

/// Storage refuses its newest snapshot, `id`.
fn refused(id: u64) -> NewestSnapshot {
    NewestSnapshot::Refused {
        id,
        message: WHY.into(),
    }
}

/// Runs up to six passes of `spec` from `status`, each observing what that pass reads: the
/// newest snapshot `newest` (`NotRead` when the pass does not read it), an owned directory,
/// and any restore point as holding `counts`. Returns the last decision and the restore point
/// of the first deploy (`Some(None)`: deployed from empty state); stops at a deploy or when a
/// pass ends Failed.
fn passes(
    spec: &StreamJobSpec,
    mut status: StreamJobStatus,
    newest: &NewestSnapshot,
) -> (Decision, Option<Option<String>>) {
    let mut o = gone(obs());
    o.generation = 3;
    let mut last = None;
    for _ in 0..6 {
        let reads = storage_reads(&status, spec);
        o.newest_snapshot = if reads.newest {
            newest.clone()
        } else {
            NewestSnapshot::NotRead
        };
        o.storage_claim = if reads.claim.is_some() {
            StorageClaim::Ours
        } else {
            StorageClaim::NotChecked
        };
        o.restore_info = match reads.inspect {
            Some(path) => RestoreInfo::Found {
                path,
                info: info(&["counts"]),
            },
            None => RestoreInfo::NotInspected,
        };
        let d = decide(spec, &status, &o);
        let deployed = d.actions.iter().find_map(|a| match a {
            Action::Deploy { restore_from, .. } => Some(restore_from.clone()),
            _ => None,
        });
        status = d.status.clone();
        let failed = d.status.lifecycle_state == LifecycleState::Failed;
        last = Some(d);
        if deployed.is_some() || failed {
            return (last.unwrap(), deployed);
        }
    }
    (last.unwrap(), None)
}

/// A last-state job whose upgrade was refused (Failed, RestoreRequired).
fn refused_upgrade() -> (StreamJobSpec, StreamJobStatus) {
    let (new, st) = upgrade_awaiting_termination(UpgradeMode::LastState);
    let mut o = gone(obs());
    o.newest_snapshot = refused(9);
    let d = decide(&new, &st, &o);
    assert_eq!(d.status.lifecycle_state, LifecycleState::Failed);
    (new, d.status)
}

/// The deployment of `spec` (`deployed`, its status) ran, then a last-state upgrade to a new
/// image stopped it: (the upgraded spec, the status awaiting its pods' termination).
fn running_then_upgraded(spec: &StreamJobSpec, deployed: &StreamJobStatus) -> (StreamJobSpec, StreamJobStatus) {
    let mut st = deployed.clone();
    st.lifecycle_state = LifecycleState::Running;
    st.first_running_at = st.deployed_at.clone();
    let mut upgraded = spec.clone();
    upgraded.image = "weir:3".into();
    st.pending = Some(pending(
        OperationKind::Upgrade,
        UpgradeMode::LastState,
        OperationPhase::AwaitingTermination,
        Some(&upgraded),
    ));
    (upgraded, st)
}

/// The refusal's first way out: the files put back, then a new `spec.restartNonce`. The pass
/// that starts the retry has not read storage, so it waits for the next one, which restores
/// the newest snapshot; with the files still gone the retry is refused again, never deployed
/// from an older point.
#[test]
fn a_restart_nonce_after_the_files_are_back_restores_the_newest() {
    let (new, failed) = refused_upgrade();
    let mut retry = new.clone();
    retry.restart_nonce = Some(1);
    let back = NewestSnapshot::Found(snapshot(9, SnapshotKind::Checkpoint, 0));
    let (_, deployed) = passes(&retry, failed.clone(), &back);
    assert_eq!(deployed, Some(Some("s3://b/chk/j/chk-9".into())));

    let (d, deployed) = passes(&retry, failed, &refused(9));
    assert_eq!(deployed, None, "{:?}", d.status);
    assert_eq!(d.status.lifecycle_state, LifecycleState::Failed);
    assert!(d.status.error.unwrap_or_default().ends_with(WHY));
}

/// The second way out: `spec.initialSavepointPath` and a new `spec.savepointRedeployNonce`
/// deploy the chosen savepoint, recording the newest snapshot id in storage then (9). A
/// stateful change of that deployment keeps the chosen savepoint over what predates it (the
/// refused chk-9, or an older checkpoint of the abandoned state: helper-120), and takes the
/// deployment's own checkpoint 10, refused when that one is gone.
#[test]
fn a_savepoint_redeploy_restores_the_chosen_savepoint_over_what_predates_it() {
    let (new, failed) = refused_upgrade();
    let redeploy = changed(&new, ChangeClass::SavepointRedeploy);
    let chosen = redeploy.initial_savepoint_path.clone();
    let (d, deployed) = passes(&redeploy, failed, &refused(9));
    assert_eq!(deployed, Some(chosen.clone()), "{:?}", d.status);
    assert_eq!(d.status.deployed_after_snapshot, Some(9));

    let (upgraded, st) = running_then_upgraded(&redeploy, &d.status);
    for (what, newest) in [
        ("chk-9 still refused", refused(9)),
        (
            "an older checkpoint of the abandoned state",
            NewestSnapshot::Found(snapshot(8, SnapshotKind::Checkpoint, 0)),
        ),
    ] {
        let (d, deployed) = passes(&upgraded, st.clone(), &newest);
        assert_eq!(deployed, Some(chosen.clone()), "{what}: {:?}", d.status);
    }
    let own = NewestSnapshot::Found(snapshot(10, SnapshotKind::Checkpoint, 0));
    let (_, deployed) = passes(&upgraded, st.clone(), &own);
    assert_eq!(deployed, Some(Some("s3://b/chk/j/chk-10".into())));
    let (d, deployed) = passes(&upgraded, st, &refused(10));
    assert_eq!(deployed, None);
    assert_eq!(d.status.lifecycle_state, LifecycleState::Failed);
}

/// A savepoint redeploy that also moves the checkpoint storage records no boundary: the ids
/// read were the old storage's, and the new deployment's own checkpoint in the new storage
/// must not be hidden by them (helper-121: it was, and the chosen savepoint was restored over
/// 17 committed checkpoints).
#[test]
fn a_redeploy_into_another_checkpoint_storage_records_no_boundary() {
    let (new, failed) = refused_upgrade();
    let mut moved = changed(&new, ChangeClass::SavepointRedeploy);
    moved.checkpointing.storage = Some("s3://b/chk2".into());
    let (d, deployed) = passes(
        &moved,
        failed,
        &NewestSnapshot::Found(snapshot(50, SnapshotKind::Checkpoint, 0)),
    );
    assert_eq!(deployed, Some(moved.initial_savepoint_path.clone()), "{:?}", d.status);
    assert_eq!(d.status.deployed_after_snapshot, None);
    let (upgraded, st) = running_then_upgraded(&moved, &d.status);
    // Its own checkpoint 6 (past the old deployment's reported chk-5) is restored.
    let own = NewestSnapshot::Found(snapshot(6, SnapshotKind::Checkpoint, 0));
    let (_, deployed) = passes(&upgraded, st, &own);
    assert_eq!(deployed, Some(Some("s3://b/chk/j/chk-6".into())));
}

/// Storage is read for the newest snapshot at a deploy only where it decides something: a
/// restore point the user gave (its boundary) or a stateful resume; a plain first deploy reads
/// only the claim, so a storage the operator cannot list does not stop it.
#[test]
fn a_deploy_reads_the_newest_snapshot_only_where_it_decides() {
    let spec = base_spec(UpgradeMode::LastState);
    let created = StreamJobStatus::default();
    assert!(!storage_reads(&created, &spec).newest, "a plain first deploy");
    let mut from_savepoint = spec.clone();
    from_savepoint.initial_savepoint_path = Some("s3://b/svp/savepoint-j-2".into());
    assert!(
        storage_reads(&created, &from_savepoint).newest,
        "a first deploy from a given savepoint"
    );
    let suspended = StreamJobStatus {
        lifecycle_state: LifecycleState::Suspended,
        ..Default::default()
    };
    assert!(
        !storage_reads(&suspended, &spec).newest,
        "a job created suspended, resumed"
    );
    let mut deployed = deployed_status(&spec, LifecycleState::Suspended);
    deployed.job_status = None;
    assert!(storage_reads(&deployed, &spec).newest, "a stateful resume");
}

/// A suspend refused (Failed), then suspended by the failed state, kept a stale restore
/// point: the resume reads storage and chooses again: refused while the files are gone, the
/// newest once they are back, never the stale point. A restore point the user gave that no
/// deployment ran from is kept as given.
#[test]
fn a_resume_chooses_its_restore_point_again() {
    let spec = base_spec(UpgradeMode::LastState);
    let mut st = deployed_status(&spec, LifecycleState::Suspended);
    st.restore_point = Some(RestorePoint {
        path: "s3://b/chk/j/chk-3".into(),
        origin: RestoreOrigin::Checkpoint,
        checkpoint_id: Some(3),
    });
    st.job_status = None;
    assert!(
        storage_reads(&st, &spec).newest,
        "a stateful resume reads the newest snapshot"
    );

    let (d, deployed) = passes(&spec, st.clone(), &refused(9));
    assert_eq!(deployed, None, "{:?}", d.status);
    assert_eq!(d.status.lifecycle_state, LifecycleState::Failed);
    assert!(d.events.iter().any(|e| e.reason == Reason::RestoreRequired));

    let back = NewestSnapshot::Found(snapshot(9, SnapshotKind::Checkpoint, 0));
    let (_, deployed) = passes(&spec, st.clone(), &back);
    assert_eq!(deployed, Some(Some("s3://b/chk/j/chk-9".into())));

    // A job created suspended resumes as one created running starts: empty here.
    let created = StreamJobStatus {
        lifecycle_state: LifecycleState::Suspended,
        ..Default::default()
    };
    let (_, deployed) = passes(&spec, created.clone(), &refused(9));
    assert_eq!(
        deployed,
        Some(None),
        "a job never deployed is not refused for old snapshots"
    );
    // Even when an observation holds one (the decision's own guard, not only the read's).
    for newest in [
        refused(9),
        NewestSnapshot::Found(snapshot(9, SnapshotKind::Checkpoint, 0)),
    ] {
        let mut o = gone(obs());
        o.newest_snapshot = newest.clone();
        let d = decide(&spec, &created, &o);
        assert_ne!(d.status.lifecycle_state, LifecycleState::Failed, "{newest:?}");
        assert_eq!(d.status.restore_point, None, "{newest:?}: no old snapshot taken");
    }

    let mut given = st.clone();
    given.restore_point = Some(RestorePoint {
        path: "s3://b/svp/savepoint-j-2".into(),
        origin: RestoreOrigin::Initial,
        checkpoint_id: None,
    });
    given.deployed_from = None;
    let (_, deployed) = passes(&spec, given, &back);
    assert_eq!(deployed, Some(Some("s3://b/svp/savepoint-j-2".into())));

    let mut stateless = spec.clone();
    stateless.upgrade_mode = UpgradeMode::Stateless;
    let mut emptied = st.clone();
    emptied.restore_point = None;
    let (_, deployed) = passes(&stateless, emptied, &refused(9));
    assert_eq!(deployed, Some(None), "a stateless resume starts empty, refusal or not");
}

/// A first deploy from a given savepoint still pending (nothing deployed yet) when the user
/// moves `checkpointing.storage`: the observation read the StreamJob's spec's storage (the new
/// one), not the one the pending operation deploys into, so no boundary is recorded from it
/// (helper-122).
#[test]
fn a_pending_first_deploy_records_no_boundary_read_from_another_storage() {
    let mut target = base_spec(UpgradeMode::LastState);
    target.initial_savepoint_path = Some("s3://b/svp/savepoint-j-2".into());
    let mut edited = target.clone();
    edited.checkpointing.storage = Some("s3://b/chk2".into());
    let status = StreamJobStatus {
        lifecycle_state: LifecycleState::Deploying,
        restore_point: Some(RestorePoint {
            path: "s3://b/svp/savepoint-j-2".into(),
            origin: RestoreOrigin::Initial,
            checkpoint_id: None,
        }),
        pending: Some(pending(
            OperationKind::Upgrade,
            UpgradeMode::LastState,
            OperationPhase::Deploying,
            Some(&target),
        )),
        ..Default::default()
    };
    let mut o = gone(obs());
    o.newest_snapshot = NewestSnapshot::Found(snapshot(50, SnapshotKind::Checkpoint, 0));
    o.restore_info = RestoreInfo::Found {
        path: "s3://b/svp/savepoint-j-2".into(),
        info: info(&["counts"]),
    };
    let d = decide(&edited, &status, &o);
    assert!(kinds(&d).contains(&"deploy"), "{:?}", d.status);
    assert_eq!(d.status.deployed_after_snapshot, None);
    // Read from the storage it deploys into: recorded.
    let d = decide(&target, &status, &o);
    assert_eq!(d.status.deployed_after_snapshot, Some(50));
}
