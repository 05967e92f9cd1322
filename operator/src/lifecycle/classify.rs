//! Classification of a spec change: what the smallest safe cycle is.

use crate::crd::StreamJobSpec;
use serde_json::Value;

/// How strong a spec change is, weakest first; the strongest difference decides the cycle
/// (FKO's `DiffType`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ChangeClass {
    /// Nothing the running job depends on changed (e.g. `upgradeMode`, `initialSavepointPath`,
    /// rollback/health settings, savepoint schedule and retention): nothing restarts.
    Ignore,
    /// Only `parallelism` changed: a stop → restore cycle at the new parallelism (keyed state
    /// is redistributed by key group).
    Scale,
    /// Anything else the runtime reads changed: a stop → restore cycle with the new spec.
    Upgrade,
    /// `savepointRedeployNonce` changed: stop and redeploy from `initialSavepointPath`,
    /// discarding the current state.
    SavepointRedeploy,
}

/// Spec fields only the operator reads; changing them never restarts the job. `state` is not a
/// change class either: suspend/resume is handled as a desired-state transition.
const OPERATOR_ONLY: &[&str] = &[
    "upgradeMode",
    "initialSavepointPath",
    "rollback",
    "health",
    "savepointOnDelete",
    "state",
];

fn normalized(spec: &StreamJobSpec) -> serde_json::Map<String, Value> {
    let Value::Object(mut m) = serde_json::to_value(spec).expect("spec serializes") else {
        unreachable!("a struct serializes to an object")
    };
    for k in OPERATOR_ONLY {
        m.remove(*k);
    }
    if let Some(Value::Object(sp)) = m.get_mut("savepoints") {
        sp.remove("periodicInterval");
        sp.remove("history");
    }
    m
}

/// Classifies the change from `old` (deployed) to `new` (desired).
pub fn classify(old: &StreamJobSpec, new: &StreamJobSpec) -> ChangeClass {
    if old.savepoint_redeploy_nonce != new.savepoint_redeploy_nonce && new.savepoint_redeploy_nonce.is_some() {
        return ChangeClass::SavepointRedeploy;
    }
    let (mut a, mut b) = (normalized(old), normalized(new));
    a.remove("savepointRedeployNonce");
    b.remove("savepointRedeployNonce");
    if a == b {
        return ChangeClass::Ignore;
    }
    a.remove("parallelism");
    b.remove("parallelism");
    if a == b {
        ChangeClass::Scale
    } else {
        ChangeClass::Upgrade
    }
}
