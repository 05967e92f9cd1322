//! Pure decisions of the checkpoint coordinator and of restore, over observed state.

use std::time::Duration;

/// Whether the coordinator should trigger a periodic checkpoint now.
///
/// Rules: only one checkpoint in flight; the interval counts from the last trigger; the
/// min pause counts from the last completion; an interval of zero disables periodic
/// checkpoints.
pub fn should_trigger(
    in_flight: bool,
    since_last_trigger: Option<Duration>,
    since_last_completion: Option<Duration>,
    interval: Duration,
    min_pause: Duration,
) -> bool {
    if in_flight || interval.is_zero() {
        return false;
    }
    let interval_ok = since_last_trigger.is_none_or(|d| d >= interval);
    let pause_ok = since_last_completion.is_none_or(|d| d >= min_pause);
    interval_ok && pause_ok
}

/// Progress of one pending checkpoint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PendingState {
    /// Waiting for `missing` acknowledgements.
    Waiting {
        /// Acks still missing.
        missing: usize,
    },
    /// Every subtask acknowledged: write `_metadata`.
    AllAcked,
    /// Exceeded the timeout: decline it.
    TimedOut,
}

/// State of a pending checkpoint from acks received, acks expected and its age.
/// All acks win over a timeout observed at the same moment.
pub fn pending_state(acked: usize, expected: usize, age: Duration, timeout: Duration) -> PendingState {
    if acked >= expected {
        PendingState::AllAcked
    } else if age >= timeout {
        PendingState::TimedOut
    } else {
        PendingState::Waiting {
            missing: expected - acked,
        }
    }
}

/// A checkpoint directory seen in storage.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SeenCheckpoint {
    /// Its id.
    pub id: u64,
    /// Whether `_metadata` exists (only then is it a checkpoint at all).
    pub completed: bool,
}

/// Checkpoint ids whose directories retention deletes: completed checkpoints beyond the
/// newest `retained`, and incomplete (abandoned) ones older than the newest completed one.
/// Never the newest completed checkpoint, never anything newer than it (it may be in flight).
pub fn retention_plan(seen: &[SeenCheckpoint], retained: usize) -> Vec<u64> {
    let mut completed: Vec<u64> = seen.iter().filter(|c| c.completed).map(|c| c.id).collect();
    completed.sort_unstable_by(|a, b| b.cmp(a));
    let Some(&newest) = completed.first() else {
        return vec![];
    };
    let keep: Vec<u64> = completed.iter().take(retained.max(1)).copied().collect();
    let mut out: Vec<u64> = seen
        .iter()
        .filter(|c| c.id < newest && !keep.contains(&c.id))
        .map(|c| c.id)
        .collect();
    out.sort_unstable();
    out.dedup();
    out
}

/// The first checkpoint id of a run: one more than the highest id restored or seen in
/// storage, so ids never repeat across restores.
pub fn next_checkpoint_id(restored: Option<u64>, seen: &[SeenCheckpoint]) -> u64 {
    let max_seen = seen.iter().map(|c| c.id).max().unwrap_or(0);
    restored.unwrap_or(0).max(max_seen) + 1
}

/// Candidates for `--restore latest`: completed checkpoint ids, newest first.
pub fn latest_candidates(seen: &[SeenCheckpoint]) -> Vec<u64> {
    let mut ids: Vec<u64> = seen.iter().filter(|c| c.completed).map(|c| c.id).collect();
    ids.sort_unstable_by(|a, b| b.cmp(a));
    ids
}

/// Whether a snapshot's operators fit the new job.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Compatibility {
    /// Every piece of state has an operator to go to.
    Compatible,
    /// These uids have state but no operator in the new job.
    NonRestoredState(Vec<String>),
    /// These uids exist in both with different kinds: `(uid, old kind, new kind)`.
    KindChanged(Vec<(String, String, String)>),
    /// Key groups differ: `(snapshot maxParallelism, job maxParallelism)`.
    MaxParallelismChanged(u32, u32),
}

/// Checks a snapshot (`snapshot_max_p`, its operators as `(uid, kind)`) against a job
/// (`job_max_p`, its stateful operators as `(uid, kind)`). Order of checks: max parallelism,
/// kind changes, then state without an operator.
pub fn check_compatibility(
    snapshot_max_p: u32,
    snapshot_ops: &[(String, String)],
    job_max_p: u32,
    job_ops: &[(String, String)],
) -> Compatibility {
    if snapshot_max_p != job_max_p {
        return Compatibility::MaxParallelismChanged(snapshot_max_p, job_max_p);
    }
    let changed: Vec<_> = snapshot_ops
        .iter()
        .filter_map(|(uid, kind)| {
            job_ops
                .iter()
                .find(|(u, _)| u == uid)
                .filter(|(_, k)| k != kind)
                .map(|(_, k)| (uid.clone(), kind.clone(), k.clone()))
        })
        .collect();
    if !changed.is_empty() {
        return Compatibility::KindChanged(changed);
    }
    let missing: Vec<String> = snapshot_ops
        .iter()
        .filter(|(uid, _)| !job_ops.iter().any(|(u, _)| u == uid))
        .map(|(uid, _)| uid.clone())
        .collect();
    if missing.is_empty() {
        Compatibility::Compatible
    } else {
        Compatibility::NonRestoredState(missing)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const S: fn(u64) -> Duration = Duration::from_secs;

    #[test]
    fn trigger_table() {
        // (in_flight, since_trigger, since_completion, interval, min_pause, expected)
        let rows = [
            (false, None, None, S(10), S(0), true),
            (true, None, None, S(10), S(0), false),
            (false, Some(S(5)), None, S(10), S(0), false),
            (false, Some(S(10)), None, S(10), S(0), true),
            (false, Some(S(10)), Some(S(1)), S(10), S(2), false),
            (false, Some(S(10)), Some(S(2)), S(10), S(2), true),
            (false, None, None, S(0), S(0), false),
        ];
        for (i, (f, t, c, iv, mp, want)) in rows.into_iter().enumerate() {
            assert_eq!(should_trigger(f, t, c, iv, mp), want, "row {i}");
        }
    }

    #[test]
    fn pending_table() {
        assert_eq!(pending_state(3, 3, S(100), S(10)), PendingState::AllAcked);
        assert_eq!(pending_state(2, 3, S(10), S(10)), PendingState::TimedOut);
        assert_eq!(pending_state(1, 3, S(1), S(10)), PendingState::Waiting { missing: 2 });
    }

    fn seen(list: &[(u64, bool)]) -> Vec<SeenCheckpoint> {
        list.iter()
            .map(|&(id, completed)| SeenCheckpoint { id, completed })
            .collect()
    }

    #[test]
    fn retention_table() {
        // (seen, retained, deleted)
        let rows: Vec<(Vec<SeenCheckpoint>, usize, Vec<u64>)> = vec![
            (seen(&[]), 3, vec![]),
            (seen(&[(1, true), (2, true)]), 3, vec![]),
            (seen(&[(1, true), (2, true), (3, true), (4, true)]), 3, vec![1]),
            (seen(&[(1, true), (2, true), (3, true)]), 1, vec![1, 2]),
            // abandoned 2 is deleted; in-flight 5 (newer than newest completed 4) is kept
            (
                seen(&[(1, true), (2, false), (3, true), (4, true), (5, false)]),
                2,
                vec![1, 2],
            ),
            // retained 0 still keeps the newest completed
            (seen(&[(7, true), (8, true)]), 0, vec![7]),
            // nothing completed: delete nothing (the first may be in flight)
            (seen(&[(1, false), (2, false)]), 1, vec![]),
        ];
        for (i, (s, r, want)) in rows.into_iter().enumerate() {
            assert_eq!(retention_plan(&s, r), want, "row {i}");
        }
    }

    #[test]
    fn ids_never_repeat_across_restores() {
        assert_eq!(next_checkpoint_id(None, &[]), 1);
        assert_eq!(next_checkpoint_id(Some(7), &[]), 8);
        assert_eq!(next_checkpoint_id(Some(3), &seen(&[(9, false), (4, true)])), 10);
        assert_eq!(
            latest_candidates(&seen(&[(3, true), (9, false), (5, true)])),
            vec![5, 3]
        );
    }

    #[test]
    fn compatibility_table() {
        let op = |u: &str, k: &str| (u.to_string(), k.to_string());
        let job = vec![op("src", "source-file"), op("counts", "count"), op("out", "sink-file")];
        assert_eq!(check_compatibility(128, &job, 128, &job), Compatibility::Compatible);
        assert_eq!(
            check_compatibility(128, &job, 256, &job),
            Compatibility::MaxParallelismChanged(128, 256)
        );
        let old = vec![op("src", "source-file"), op("gone", "sum")];
        assert_eq!(
            check_compatibility(128, &old, 128, &job),
            Compatibility::NonRestoredState(vec!["gone".into()])
        );
        let old = vec![op("counts", "sum")];
        assert_eq!(
            check_compatibility(128, &old, 128, &job),
            Compatibility::KindChanged(vec![("counts".into(), "sum".into(), "count".into())])
        );
        // the new job may add stateful operators: they start empty
        assert_eq!(
            check_compatibility(128, &[op("src", "source-file")], 128, &job),
            Compatibility::Compatible
        );
    }
}
