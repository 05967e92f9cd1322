//! Savepoint history retention (maxCount / maxAge) that never disposes a restore point.

use crate::crd::{SavepointHistory, SavepointOrigin, SavepointRecord};
use std::time::{Duration, SystemTime};

/// Periodic and upgrade savepoints kept when `spec.savepoints.history` is unset (as the Flink
/// Kubernetes Operator's default savepoint history max count).
pub const DEFAULT_MAX_COUNT: u32 = 10;

/// The retention in force: `history` as given, or at most [`DEFAULT_MAX_COUNT`] savepoints
/// when unset (an explicit `history: {}` keeps every savepoint).
pub fn effective_policy(history: Option<&SavepointHistory>) -> SavepointHistory {
    history.cloned().unwrap_or(SavepointHistory {
        max_count: Some(DEFAULT_MAX_COUNT),
        max_age: None,
    })
}

/// The records of `history` to dispose under `policy` at `now`.
///
/// Only periodic and upgrade savepoints are candidates; manual ones belong to their Savepoint
/// object. Never returned: the newest completed candidate, and any record whose path is in
/// `protected` (the current restore point and the one the running deployment started from:
/// FLINK-38033). Records with an unparsable `completedAt` are kept.
pub fn to_dispose<'a>(
    history: &'a [SavepointRecord],
    policy: &SavepointHistory,
    protected: &[&str],
    now: SystemTime,
) -> Vec<&'a SavepointRecord> {
    let max_age = policy
        .max_age
        .as_deref()
        .and_then(|s| weir_runtime::job::parse_duration(s).ok());
    let mut candidates: Vec<(SystemTime, &SavepointRecord)> = history
        .iter()
        .filter(|r| r.origin != SavepointOrigin::Manual)
        .filter_map(|r| humantime::parse_rfc3339(&r.completed_at).ok().map(|t| (t, r)))
        .collect();
    candidates.sort_by_key(|(t, _)| std::cmp::Reverse(*t)); // newest first
    let mut out = Vec::new();
    for (i, (t, r)) in candidates.iter().enumerate() {
        if i == 0 || protected.contains(&r.path.as_str()) {
            continue;
        }
        let too_many = policy.max_count.is_some_and(|n| i >= n as usize);
        let too_old = max_age.is_some_and(|age| now.duration_since(*t).unwrap_or(Duration::ZERO) > age);
        if too_many || too_old {
            out.push(*r);
        }
    }
    out
}
