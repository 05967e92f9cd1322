//! Savepoint retention and periodic savepoints of a running job.

use super::*;
use crate::crd::{SavepointHistory, SavepointsConfig};

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
    // The entry stays until the dispose succeeded (the controller removes it then), so a
    // failed dispose is retried on the next pass instead of orphaning the data.
    assert_eq!(d.status.savepoint_history.len(), 3);
    let again = decide(&spec, &d.status, &obs());
    assert!(
        again
            .actions
            .contains(&Action::DisposeSavepoint { path: "sp-2".into() })
    );
}

/// Without spec.savepoints.history (or without spec.savepoints at all), at most
/// DEFAULT_MAX_COUNT operator savepoints are kept; `history: {}` keeps all.
#[test]
fn default_retention_applies_when_history_is_unset() {
    let mut spec = base_spec(UpgradeMode::Savepoint);
    let n = retention::DEFAULT_MAX_COUNT as usize + 2;
    let history: Vec<SavepointRecord> = (0..n)
        .map(|i| rec(&format!("sp-{i}"), i as u64, SavepointOrigin::Periodic))
        .collect();
    let running = |spec: &StreamJobSpec| {
        let mut st = deployed_status(spec, LifecycleState::Running);
        st.savepoint_history = history.clone();
        st
    };
    let disposed = |d: &Decision| -> Vec<String> {
        d.actions
            .iter()
            .filter_map(|a| match a {
                Action::DisposeSavepoint { path } => Some(path.clone()),
                _ => None,
            })
            .collect()
    };
    for savepoints in [spec.savepoints.clone(), None] {
        spec.savepoints = savepoints;
        let d = decide(&spec, &running(&spec), &obs());
        assert_eq!(disposed(&d), vec!["sp-1".to_string(), "sp-0".to_string()]);
    }
    spec.savepoints = Some(SavepointsConfig {
        history: Some(SavepointHistory::default()),
        ..Default::default()
    });
    assert!(
        disposed(&decide(&spec, &running(&spec), &obs())).is_empty(),
        "history: {{}} keeps all"
    );
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
