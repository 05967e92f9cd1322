//! Unit tests of the StreamJob controller's pure helpers.

use super::*;
use crate::crd::{SavepointRecord, StreamJobSpec};
use std::time::UNIX_EPOCH;

fn svp(origin: &str, created: &str) -> Savepoint {
    serde_json::from_value(json!({
        "apiVersion": "weir.dev/v1alpha1", "kind": "Savepoint",
        "metadata": {"name": "x", "namespace": "ns", "creationTimestamp": created},
        "spec": {"jobRef": {"name": "wc"}, "origin": origin},
        "status": {"state": "Failed"},
    }))
    .unwrap()
}

#[test]
fn periodic_attempts_are_spaced_by_the_interval() {
    let mut spec: StreamJobSpec = serde_json::from_value(json!({
        "image": "weir:1",
        "savepoints": {"periodicInterval": "1h"},
        "job": {"steps": [{"source": {"generator": {}}}, {"sink": {"print": {}}}]},
    }))
    .unwrap();
    let now = humantime::parse_rfc3339("2023-11-14T22:00:00Z").unwrap();
    let recent = [svp("Periodic", "2023-11-14T21:30:00Z")];
    let old = [svp("Periodic", "2023-11-14T20:30:00Z")];
    let manual = [svp("Manual", "2023-11-14T21:59:00Z")];
    assert!(periodic_attempted_recently(&spec, &recent, now));
    assert!(!periodic_attempted_recently(&spec, &old, now));
    assert!(!periodic_attempted_recently(&spec, &manual, now));
    spec.savepoints = None;
    assert!(!periodic_attempted_recently(&spec, &recent, now));
}

#[test]
fn failed_periodic_savepoints_are_pruned_to_the_newest_few() {
    let mk = |name: &str, origin: &str, state: &str, created: &str| -> Savepoint {
        serde_json::from_value(json!({
            "apiVersion": "weir.dev/v1alpha1", "kind": "Savepoint",
            "metadata": {"name": name, "namespace": "ns", "creationTimestamp": created},
            "spec": {"jobRef": {"name": "wc"}, "origin": origin},
            "status": {"state": state},
        }))
        .unwrap()
    };
    let mut all: Vec<Savepoint> = (0..6)
        .map(|i| {
            let state = if i == 4 { "Abandoned" } else { "Failed" };
            mk(
                &format!("wc-periodic-{i}"),
                "Periodic",
                state,
                &format!("2023-11-14T20:0{i}:00Z"),
            )
        })
        .collect();
    all.push(mk("wc-periodic-ok", "Periodic", "Completed", "2023-11-14T10:00:00Z"));
    all.push(mk("mine", "Manual", "Failed", "2023-11-14T09:00:00Z"));
    all.push(mk("wc-periodic-now", "Periodic", "InProgress", "2023-11-14T09:00:00Z"));
    let prune = failed_periodic_to_prune(&all, 3);
    assert_eq!(prune, vec!["wc-periodic-2", "wc-periodic-1", "wc-periodic-0"]);
    assert!(failed_periodic_to_prune(&all[..3], 3).is_empty());
    // The kept ones still space the next attempt.
    let spec: StreamJobSpec = serde_json::from_value(json!({
        "image": "weir:1",
        "savepoints": {"periodicInterval": "30m"},
        "job": {"steps": [{"source": {"generator": {}}}, {"sink": {"print": {}}}]},
    }))
    .unwrap();
    let kept: Vec<Savepoint> = all.into_iter().filter(|s| !prune.contains(&s.name_any())).collect();
    let now = humantime::parse_rfc3339("2023-11-14T20:20:00Z").unwrap();
    assert!(periodic_attempted_recently(&spec, &kept, now));
}

#[test]
fn savepoint_object_names() {
    let now = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
    assert_eq!(
        savepoint_object_name("wc", SavepointOrigin::Upgrade, Some("s3://b/svp/savepoint-wc-7/"), now),
        "wc-upgrade-7"
    );
    assert_eq!(
        savepoint_object_name("wc", SavepointOrigin::Periodic, None, now),
        "wc-periodic-1700000000"
    );
    assert!(savepoint_object_name("wc", SavepointOrigin::Upgrade, Some("s3://b/odd"), now).starts_with("wc-upgrade-"));
}

#[test]
fn history_merges_completed_operator_savepoints_only() {
    let mk = |name: &str, origin: &str, state: &str, path: &str| -> Savepoint {
        serde_json::from_value(json!({
            "apiVersion": "weir.dev/v1alpha1", "kind": "Savepoint",
            "metadata": {"name": name, "namespace": "ns"},
            "spec": {"jobRef": {"name": "wc"}, "origin": origin},
            "status": {"state": state, "path": path, "completedAt": format!("2023-11-14T2{}:00:00Z", path.len() % 10)},
        }))
        .unwrap()
    };
    let mut st = StreamJobStatus {
        savepoint_history: vec![SavepointRecord {
            path: "s3://b/up-1".into(),
            completed_at: "2023-11-14T20:00:00Z".into(),
            origin: SavepointOrigin::Upgrade,
            savepoint_name: None,
        }],
        ..Default::default()
    };
    merge_savepoint_history(
        &mut st,
        &[
            mk("wc-upgrade-1", "Upgrade", "Completed", "s3://b/up-1"),
            mk("wc-periodic-2", "Periodic", "Completed", "s3://b/per-22"),
            mk("wc-periodic-3", "Periodic", "InProgress", "s3://b/per-333"),
            mk("mine", "Manual", "Completed", "s3://b/man"),
        ],
    );
    let got: Vec<(&str, Option<&str>)> = st
        .savepoint_history
        .iter()
        .map(|r| (r.path.as_str(), r.savepoint_name.as_deref()))
        .collect();
    assert_eq!(
        got,
        vec![
            ("s3://b/up-1", Some("wc-upgrade-1")),
            ("s3://b/per-22", Some("wc-periodic-2"))
        ]
    );
}

/// The checkpoint directory is claimed in exactly the passes that may deploy: a pending
/// deploy (of its target spec), a first deploy and a resume of a job meant to run, and a
/// running job's pass whose changed spec moves its checkpoints (before the stop); never in
/// other running passes or for a job created suspended.
#[test]
fn storage_reads_claim_the_directory_of_what_a_pass_may_deploy() {
    use crate::crd::{
        DesiredState, LifecycleState, OperationKind, OperationPhase, PendingOperation, StreamJobStatus, UpgradeMode,
    };
    let spec: StreamJobSpec = serde_json::from_value(json!({
        "image": "weir:1", "checkpointing": {"storage": "s3://b/chk"},
        "job": {"steps": [{"source": {"generator": {}}}, {"sink": {"print": {}}}]},
    }))
    .unwrap();
    let mut suspended_spec = spec.clone();
    suspended_spec.state = DesiredState::Suspended;
    let mut target = spec.clone();
    target.checkpointing.storage = Some("s3://b/elsewhere".into());
    let status = |state: LifecycleState, phase: Option<OperationPhase>| StreamJobStatus {
        lifecycle_state: state,
        pending: phase.map(|phase| PendingOperation {
            kind: OperationKind::Upgrade,
            mode: UpgradeMode::Savepoint,
            target_spec: Some(serde_json::to_string(&target).unwrap()),
            target_generation: Some(2),
            phase,
            trigger_id: None,
            savepoint_path: None,
            started_at: "2026-12-07T00:00:00Z".into(),
        }),
        ..Default::default()
    };
    let running = |deployed: &StreamJobSpec| StreamJobStatus {
        lifecycle_state: LifecycleState::Running,
        last_reconciled_spec: Some(serde_json::to_string(deployed).unwrap()),
        ..Default::default()
    };
    let storage = |reads: StorageReads| reads.claim.and_then(|s| s.checkpointing.storage);
    let table = [
        (status(LifecycleState::Created, None), &spec, Some("s3://b/chk")),
        (status(LifecycleState::Suspended, None), &spec, Some("s3://b/chk")),
        (status(LifecycleState::Created, None), &suspended_spec, None),
        (status(LifecycleState::Suspended, None), &suspended_spec, None),
        (status(LifecycleState::Running, None), &spec, None),
        (status(LifecycleState::Failed, None), &spec, None),
        (
            status(LifecycleState::Upgrading, Some(OperationPhase::Deploying)),
            &spec,
            Some("s3://b/elsewhere"),
        ),
        (
            status(LifecycleState::Upgrading, Some(OperationPhase::AwaitingTermination)),
            &spec,
            None,
        ),
        (running(&spec), &target, Some("s3://b/elsewhere")),
        (running(&spec), &spec, None),
    ];
    for (old, job_spec, want) in table {
        let state = old.lifecycle_state;
        assert_eq!(
            storage(storage_reads(&old, job_spec)).as_deref(),
            want,
            "{state:?} {:?} spec {:?}",
            old.pending.as_ref().map(|p| p.phase),
            job_spec.state
        );
    }
}
