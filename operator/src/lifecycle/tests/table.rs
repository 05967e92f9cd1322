//! The decision table (every lifecycle state × change class × upgrade mode cell) and the
//! ordering of change classes.

use super::*;
use crate::crd::SavepointsConfig;

const CLASSES: [ChangeClass; 4] = [
    ChangeClass::Ignore,
    ChangeClass::Scale,
    ChangeClass::Upgrade,
    ChangeClass::SavepointRedeploy,
];

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
