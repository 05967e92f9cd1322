//! Pure decisions of the exactly-once Kafka sink's recovery: which transactional ids a new
//! subtask fences (so the transactions a failed attempt left open are aborted), which old
//! subtasks' pre-committed transactions it takes over, and which of those it must write again.
//!
//! Protocol (docs/concepts.md, "Kafka"): subtask `i` writes through transactional id
//! `<prefix>-<i>`, one transaction at a time. At barrier `n` the open transaction is flushed
//! (pre-commit) and, inside it, offset `n` is committed for partition 0 of the output topic in
//! the consumer group `<prefix>-<i>` (the commit marker: it becomes visible exactly when the
//! transaction commits). The transaction's records are also kept in the checkpoint (write-ahead),
//! and it is committed when checkpoint `n` completes. librdkafka cannot resume another
//! process's transaction (Flink's KafkaSink does so through producer internals), so after a
//! failure the open transactions are aborted by fencing their ids, and every pre-committed
//! transaction of the restore point whose marker shows it was not committed is written again in
//! a new transaction that also moves the marker. The markers of the restore point are read at
//! the new attempt's first commit (its first completed checkpoint), not at start: by then every
//! subtask has fenced its ids, so no old transaction is still open (on tansu a committed
//! transaction's marker can wait for another producer's open transaction to end, below); until
//! then the adopted transactions stay in every snapshot. That first commit carries the
//! rewritten records and moves their markers together with the attempt's own. Reference: Flink's `KafkaSink` transactional-id
//! pool and its abort of lingering transactions on restore (`TransactionAborter`).
//!
//! The marker is read back before the next transaction begins: after a commit, the subtask
//! writes nothing into a new transaction (its records wait in the write-ahead buffer, and
//! pending transactions that are due are later written together in one transaction with the
//! highest marker) until a fresh `read_committed` consumer reads the marker at or above the
//! committed checkpoint ([`still_unconfirmed`], [`completion_plan`]). On Apache Kafka the
//! first read after the commit returns it (the transaction is decided when `EndTxn` returns,
//! and OffsetFetch with `require_stable` waits for its markers). tansu 510f3e2, the CI broker,
//! defers a committed transaction's offsets while another producer's open transaction has
//! records among its own, and the committing producer's next transaction takes them over, so
//! they were lost when that one aborted while the records stayed committed
//! (docs/runtime/kafka-test-broker.md, the probe in runtime/tests/common/kafka_txn_offsets.rs);
//! with the read-back no transaction carries an older marker.
//!
//! Lingering transactions: an attempt at a higher parallelism that failed before its first
//! checkpoint (savepoint at 2, restore at 4, crash, restore from the savepoint at 2) leaves
//! transactions open on ids the restore point does not know (`<prefix>-2`, `<prefix>-3`).
//! Flink's `KafkaSink` finds them by probing ids until one was never used (producer epoch 0),
//! which librdkafka does not expose; Weir instead records, before any subtask opens a
//! transaction, how many ids have ever been used ([`ids_in_use`], kept as the committed offset
//! of consumer group [`ids_in_use_group`] on partition 0 of the output topic), and every
//! restore fences the recorded ids its own subtasks and the restore point do not cover.

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// One record as the sink writes it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KafkaRecord {
    /// Message key, if the sink has a `keyField`.
    pub key: Option<Vec<u8>>,
    /// Message value: the record's JSON text.
    pub value: Vec<u8>,
    /// Partition to write to, if the sink has a `partitionField`; `None`: the producer's
    /// partitioner chooses.
    pub partition: Option<i32>,
}

/// An item of the exactly-once sink's operator state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum SinkStateItem {
    /// Written by every subtask at every checkpoint: who wrote the state, at which parallelism
    /// (so a restore knows which transactional ids existed).
    Subtask {
        /// Subtask index.
        subtask: u32,
        /// The job's parallelism then.
        parallelism: u32,
    },
    /// A transaction pre-committed at barrier `checkpoint_id` and not known to be committed.
    Pending(PendingTransaction),
}

/// A pre-committed transaction: its records, kept so that a restore can write them again if
/// the commit never happened.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PendingTransaction {
    /// The subtask that wrote it (its transactional id is `<prefix>-<subtask>`).
    pub subtask: u32,
    /// The checkpoint whose completion commits it.
    pub checkpoint_id: u64,
    /// Its records, in order.
    pub records: Vec<KafkaRecord>,
}

/// The transactional id of subtask `subtask`: `<prefix>-<subtask>`.
pub fn transactional_id(prefix: &str, subtask: u32) -> String {
    format!("{prefix}-{subtask}")
}

/// The consumer group holding subtask `subtask`'s commit marker (same name as its id).
pub fn marker_group(prefix: &str, subtask: u32) -> String {
    transactional_id(prefix, subtask)
}

/// The consumer group whose committed offset (partition 0 of the output topic) is the number
/// of transactional ids `<prefix>-0 … <prefix>-<n−1>` any attempt of the job has used.
pub fn ids_in_use_group(prefix: &str) -> String {
    format!("{prefix}-ids-in-use")
}

/// The number of ids to record before a subtask opens a transaction: the recorded number
/// (`None`: never recorded), the restore point's parallelism and this attempt's, whichever is
/// largest. It never shrinks, so an attempt that failed at a higher parallelism stays known.
pub fn ids_in_use(recorded: Option<u64>, old_parallelism: Option<u32>, parallelism: u32) -> u32 {
    let recorded = recorded.map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX));
    recorded.max(old_parallelism.unwrap_or(0)).max(parallelism)
}

/// What a new subtask does before it writes anything.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RecoveryPlan {
    /// Old subtasks whose pending transactions this subtask takes over (their markers are
    /// read, their uncommitted transactions written again): `s` with `s mod parallelism ==
    /// subtask`, for `s` below the old parallelism.
    pub adopted: Vec<u32>,
    /// Transactional ids to fence, besides the subtask's own (fenced when its producer
    /// starts): those of adopted old subtasks that no longer exist, and the lingering ids
    /// (used by some attempt, `s ≥ max(old parallelism, parallelism)`, below `ids_in_use`) with
    /// `s mod parallelism == subtask`, so each is fenced by exactly one subtask.
    pub fence_ids: Vec<String>,
}

/// Decides the recovery of `subtask` of `parallelism` from state written at
/// `old_parallelism` (`None`: a first start, nothing to take over), with `ids_in_use` ids
/// ever used ([`ids_in_use`], including this attempt's).
pub fn recovery_plan(
    prefix: &str,
    old_parallelism: Option<u32>,
    parallelism: u32,
    subtask: u32,
    ids_in_use: u32,
) -> RecoveryPlan {
    let parallelism = parallelism.max(1);
    let old = old_parallelism.unwrap_or(0);
    let adopted: Vec<u32> = (0..old).filter(|s| s % parallelism == subtask).collect();
    let lingering = (old.max(parallelism)..ids_in_use).filter(|s| s % parallelism == subtask);
    let fence_ids = adopted
        .iter()
        .copied()
        .filter(|&s| s != subtask)
        .chain(lingering)
        .map(|s| transactional_id(prefix, s))
        .collect();
    RecoveryPlan { adopted, fence_ids }
}

/// The old parallelism and the pending transactions in restored state (items of all old
/// subtasks, pooled). Errors: an item that does not decode.
pub fn decode_state(items: &[Vec<u8>]) -> Result<(Option<u32>, Vec<PendingTransaction>), String> {
    let mut parallelism = None;
    let mut pending = Vec::new();
    for item in items {
        match postcard::from_bytes::<SinkStateItem>(item) {
            Ok(SinkStateItem::Subtask { parallelism: p, .. }) => parallelism = parallelism.max(Some(p)),
            Ok(SinkStateItem::Pending(t)) => pending.push(t),
            Err(e) => return Err(format!("Kafka sink state does not decode: {e}")),
        }
    }
    Ok((parallelism, pending))
}

/// The pending transactions to write again, in order (by old subtask, then checkpoint): those
/// of adopted subtasks whose checkpoint is above that subtask's committed marker (`None` or
/// missing: nothing of it was ever committed).
pub fn to_replay<'p>(
    pending: &'p [PendingTransaction],
    adopted: &[u32],
    committed: &BTreeMap<u32, Option<u64>>,
) -> Vec<&'p PendingTransaction> {
    let mut out: Vec<&PendingTransaction> = pending
        .iter()
        .filter(|t| adopted.contains(&t.subtask))
        .filter(|t| {
            committed
                .get(&t.subtask)
                .copied()
                .flatten()
                .is_none_or(|m| t.checkpoint_id > m)
        })
        .collect();
    out.sort_by_key(|t| (t.subtask, t.checkpoint_id));
    out
}

/// A commit marker committed with a transaction and not yet read back.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct UnconfirmedMarker {
    /// The marker's consumer group ([`marker_group`]).
    pub group: String,
    /// The checkpoint id committed as its offset.
    pub checkpoint: u64,
}

/// The markers of a recovery transaction that writes `replay` again: per old subtask, its
/// highest replayed checkpoint (the marker means "every pending transaction of that subtask up
/// to this checkpoint is committed"), by subtask.
pub fn replay_markers(prefix: &str, replay: &[&PendingTransaction]) -> Vec<UnconfirmedMarker> {
    let mut highest: BTreeMap<u32, u64> = BTreeMap::new();
    for t in replay {
        let h = highest.entry(t.subtask).or_default();
        *h = (*h).max(t.checkpoint_id);
    }
    highest
        .into_iter()
        .map(|(subtask, checkpoint)| UnconfirmedMarker {
            group: marker_group(prefix, subtask),
            checkpoint,
        })
        .collect()
}

/// `markers` with one per group: the highest checkpoint (a transaction that moves a group's
/// marker twice commits the higher), by group.
pub fn merge_markers(markers: Vec<UnconfirmedMarker>) -> Vec<UnconfirmedMarker> {
    let mut highest: BTreeMap<String, u64> = BTreeMap::new();
    for m in markers {
        let h = highest.entry(m.group).or_default();
        *h = (*h).max(m.checkpoint);
    }
    highest
        .into_iter()
        .map(|(group, checkpoint)| UnconfirmedMarker { group, checkpoint })
        .collect()
}

/// The markers of `unconfirmed` that the markers `read` back (group → committed checkpoint,
/// `None` or missing: nothing committed) do not yet show at or above their checkpoint.
pub fn still_unconfirmed(
    unconfirmed: &[UnconfirmedMarker],
    read: &BTreeMap<String, Option<u64>>,
) -> Vec<UnconfirmedMarker> {
    unconfirmed
        .iter()
        .filter(|m| read.get(&m.group).copied().flatten().is_none_or(|c| c < m.checkpoint))
        .cloned()
        .collect()
}

/// What a subtask commits when checkpoint `completed` completes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CompletionPlan {
    /// Commit the open transaction (the first pending one, already written).
    pub commit_open: bool,
    /// How many pending transactions after it (not written yet, checkpoint at or below
    /// `completed`) to write and commit together in one new transaction, whose marker is the
    /// highest of their checkpoints; only once the markers committed before are read back.
    pub write_together: usize,
}

/// Whether the commit of `plan` also decides the restore point's adopted transactions
/// (`adopted`: some are undecided): when it commits something of this attempt, or when no
/// transaction is open (`open_written`: one is written but not committed, or pre-committed),
/// so a transaction of their own can begin. Never while a transaction stays open uncommitted.
pub fn decides_restored(adopted: bool, plan: CompletionPlan, open_written: bool) -> bool {
    adopted && (plan.commit_open || plan.write_together > 0 || !open_written)
}

/// Decides the commits at the completion of checkpoint `completed`, from the pending
/// transactions' checkpoint ids (oldest first) and whether the first is written already.
pub fn completion_plan(pending_checkpoints: &[u64], written_first: bool, completed: u64) -> CompletionPlan {
    let due = pending_checkpoints.iter().take_while(|&&c| c <= completed).count();
    let commit_open = written_first && due > 0;
    CompletionPlan {
        commit_open,
        write_together: due - usize::from(commit_open),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_in_use_only_grow() {
        for (recorded, old, new, want) in [
            (None, None, 2, 2),
            (None, Some(3), 2, 3),
            (Some(4), Some(2), 2, 4), // a failed attempt at 4 stays recorded
            (Some(4), Some(2), 6, 6),
            (Some(u64::MAX), None, 1, u32::MAX),
        ] {
            assert_eq!(ids_in_use(recorded, old, new), want, "{recorded:?} {old:?} {new}");
        }
    }

    /// Scale-down after a failed scale-up: savepoint at 2, restore at 4 that crashes before
    /// its first checkpoint (ids 2 and 3 hold open transactions, recorded as 4 ids in use),
    /// restore from the savepoint at 2: subtask 0 fences id 2, subtask 1 id 3.
    #[test]
    fn lingering_ids_of_a_failed_attempt_are_fenced_once() {
        let ids = |v: &[u32]| v.iter().map(|&s| transactional_id("p", s)).collect::<Vec<_>>();
        for (old, new, subtask, in_use, adopted, fenced) in [
            (Some(2), 2, 0, 4, vec![0], vec![2]),
            (Some(2), 2, 1, 4, vec![1], vec![3]),
            // The same at 3: ids 0..3 are this attempt's own; 3 lingers, fenced by subtask 0.
            (Some(2), 3, 0, 4, vec![0], vec![3]),
            (Some(2), 3, 1, 4, vec![1], vec![]),
            (Some(2), 3, 2, 4, vec![], vec![]),
            // Failed 4 → 8, restored at 4 from the checkpoint at 4, then scaled to 2.
            (Some(4), 2, 0, 8, vec![0, 2], vec![2, 4, 6]),
            (Some(4), 2, 1, 8, vec![1, 3], vec![3, 5, 7]),
            // A first start (no restore point) after an earlier run at 3 under the same prefix.
            (None, 2, 0, 3, vec![], vec![2]),
            (None, 2, 1, 3, vec![], vec![]),
            // Nothing lingers: nothing extra.
            (Some(2), 2, 0, 2, vec![0], vec![]),
        ] {
            let plan = recovery_plan("p", old, new, subtask, in_use);
            let what = format!("{old:?} → {new}, subtask {subtask}, {in_use} ids in use");
            assert_eq!(plan.adopted, adopted, "{what}");
            assert_eq!(plan.fence_ids, ids(&fenced), "{what}");
        }
        // Every lingering id is fenced by exactly one subtask.
        let mut all: Vec<String> = (0..2)
            .flat_map(|s| recovery_plan("p", Some(4), 2, s, 8).fence_ids)
            .collect();
        all.sort();
        assert_eq!(all, ids(&[2, 3, 4, 5, 6, 7]));
    }

    #[test]
    fn plans_by_old_and_new_parallelism() {
        let ids = |v: &[u32]| v.iter().map(|&s| transactional_id("p", s)).collect::<Vec<_>>();
        for (old, new, subtask, adopted, fenced) in [
            // First start: nothing to take over; the own id is fenced by the producer itself.
            (None, 2, 0, vec![], vec![]),
            // Same parallelism: each subtask takes over its own id only.
            (Some(2), 2, 1, vec![1], vec![]),
            // Scale in 4 → 2: subtask 0 takes over 0 and 2, fencing 2.
            (Some(4), 2, 0, vec![0, 2], vec![2]),
            (Some(4), 2, 1, vec![1, 3], vec![3]),
            // Scale in 3 → 1: everything.
            (Some(3), 1, 0, vec![0, 1, 2], vec![1, 2]),
            // Scale out 2 → 4: subtasks 2 and 3 are new and take over nothing.
            (Some(2), 4, 1, vec![1], vec![]),
            (Some(2), 4, 3, vec![], vec![]),
        ] {
            let in_use = ids_in_use(None, old, new);
            let plan = recovery_plan("p", old, new, subtask, in_use);
            assert_eq!(plan.adopted, adopted, "{old:?} → {new}, subtask {subtask}");
            assert_eq!(plan.fence_ids, ids(&fenced), "{old:?} → {new}, subtask {subtask}");
        }
    }

    fn txn(subtask: u32, checkpoint_id: u64) -> PendingTransaction {
        PendingTransaction {
            subtask,
            checkpoint_id,
            records: vec![KafkaRecord {
                partition: None,
                key: None,
                value: format!("{subtask}/{checkpoint_id}").into_bytes(),
            }],
        }
    }

    #[test]
    fn replays_what_the_marker_does_not_cover() {
        let pending = vec![txn(2, 7), txn(0, 7), txn(0, 6), txn(1, 7)];
        let at = |v: Vec<&PendingTransaction>| v.iter().map(|t| (t.subtask, t.checkpoint_id)).collect::<Vec<_>>();
        for (adopted, committed, want) in [
            // The commit of 7 happened for subtask 0 (marker 7): nothing of it again.
            (vec![0], vec![(0, Some(7))], vec![]),
            // Marker 6: checkpoint 7's transaction was aborted: write it again.
            (vec![0], vec![(0, Some(6))], vec![(0, 7)]),
            // No marker at all: both, in checkpoint order.
            (vec![0], vec![(0, None)], vec![(0, 6), (0, 7)]),
            (vec![0], vec![], vec![(0, 6), (0, 7)]),
            // Adopted subtasks only, ordered by subtask.
            (vec![0, 2], vec![(0, Some(7)), (2, Some(3))], vec![(2, 7)]),
            (vec![1], vec![(1, Some(8))], vec![]),
            (vec![3], vec![], vec![]),
        ] {
            let committed: BTreeMap<u32, Option<u64>> = committed.into_iter().collect();
            assert_eq!(
                at(to_replay(&pending, &adopted, &committed)),
                want,
                "{adopted:?} {committed:?}"
            );
        }
    }

    #[test]
    fn state_round_trip() {
        let items: Vec<Vec<u8>> = [
            SinkStateItem::Subtask {
                subtask: 0,
                parallelism: 3,
            },
            SinkStateItem::Pending(txn(0, 4)),
            SinkStateItem::Subtask {
                subtask: 1,
                parallelism: 3,
            },
        ]
        .iter()
        .map(|i| postcard::to_stdvec(i).unwrap())
        .collect();
        assert_eq!(decode_state(&items).unwrap(), (Some(3), vec![txn(0, 4)]));
        assert_eq!(decode_state(&[]).unwrap(), (None, vec![]));
        assert!(decode_state(&[vec![9, 9, 9]]).is_err());
    }

    #[test]
    fn completion_commits_the_open_one_and_writes_the_due_rest_together() {
        for (pending, written_first, completed, commit_open, write_together) in [
            (vec![], false, 5, false, 0),
            (vec![5], true, 5, true, 0),
            (vec![5], false, 5, false, 1),
            (vec![5, 6, 7], true, 6, true, 1),
            (vec![5, 6, 7], false, 7, false, 3),
            // Not due yet: nothing.
            (vec![8], true, 7, false, 0),
            (vec![8, 9], false, 7, false, 0),
        ] {
            assert_eq!(
                completion_plan(&pending, written_first, completed),
                CompletionPlan {
                    commit_open,
                    write_together
                },
                "{pending:?} written first {written_first}, completed {completed}"
            );
        }
    }

    #[test]
    fn the_first_commit_decides_the_adopted_transactions_unless_one_stays_open() {
        let plan = |commit_open, write_together| CompletionPlan {
            commit_open,
            write_together,
        };
        for (adopted, p, open_written, want) in [
            (false, plan(true, 0), true, false),
            (true, plan(true, 0), true, true),
            (true, plan(false, 2), false, true),
            (true, plan(false, 0), false, true),
            // A transaction is written (or pre-committed for a later checkpoint) and not due:
            // no other can begin; the next completion decides.
            (true, plan(false, 0), true, false),
        ] {
            assert_eq!(
                decides_restored(adopted, p, open_written),
                want,
                "{adopted} {p:?} {open_written}"
            );
        }
    }

    #[test]
    fn a_marker_is_confirmed_when_read_at_or_above_its_checkpoint() {
        let m = |g: &str, c: u64| UnconfirmedMarker {
            group: g.into(),
            checkpoint: c,
        };
        for (read, want) in [
            (vec![("p-0", Some(7)), ("p-2", Some(9))], vec![]),
            (vec![("p-0", Some(8)), ("p-2", Some(10))], vec![]),
            // tansu deferring the offsets: still the older marker, or none yet.
            (vec![("p-0", Some(6)), ("p-2", Some(9))], vec![m("p-0", 7)]),
            (vec![("p-0", None), ("p-2", Some(9))], vec![m("p-0", 7)]),
            (vec![("p-2", Some(9))], vec![m("p-0", 7)]),
            (vec![], vec![m("p-0", 7), m("p-2", 9)]),
        ] {
            let read: BTreeMap<String, Option<u64>> = read.into_iter().map(|(g, c)| (g.to_string(), c)).collect();
            assert_eq!(still_unconfirmed(&[m("p-0", 7), m("p-2", 9)], &read), want, "{read:?}");
        }
    }

    #[test]
    fn one_recovery_transaction_moves_each_adopted_marker_to_its_highest_checkpoint() {
        let (a, b, c) = (txn(0, 6), txn(0, 7), txn(2, 7));
        let got = replay_markers("p", &[&a, &b, &c]);
        let want = [("p-0", 7), ("p-2", 7)].map(|(g, c)| UnconfirmedMarker {
            group: g.into(),
            checkpoint: c,
        });
        assert_eq!(got, want);
        assert!(replay_markers("p", &[]).is_empty());
        // The first commit after a restore: the own transaction of checkpoint 9 and the
        // replayed ones of the own old subtask (7) and of old subtask 2 (7): one marker each.
        let mut markers = got;
        markers.push(UnconfirmedMarker {
            group: "p-0".into(),
            checkpoint: 9,
        });
        let want = [("p-0", 9), ("p-2", 7)].map(|(g, c)| UnconfirmedMarker {
            group: g.into(),
            checkpoint: c,
        });
        assert_eq!(merge_markers(markers), want);
    }

    /// Markers are never shared: every subtask's group differs from every other's and from
    /// the ids-in-use record, at any parallelism, and prefixes keep jobs apart.
    #[test]
    fn marker_groups_are_distinct_per_subtask_and_from_the_ids_in_use_record() {
        let mut groups: Vec<String> = (0..64).map(|s| marker_group("p", s)).collect();
        groups.push(ids_in_use_group("p"));
        groups.extend((0..64).map(|s| marker_group("p-1", s)));
        let count = groups.len();
        groups.sort();
        groups.dedup();
        assert_eq!(groups.len(), count);
    }
}
