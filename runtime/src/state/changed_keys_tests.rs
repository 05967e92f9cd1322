//! Exactness of deltas made from changed-key hashes: keys sharing a hash, and removals after
//! writes within one checkpoint interval, on both backends.

use super::*;
use crate::state::backend::{BackendChoice, KeyedState};
use crate::state::disk::DiskStateOptions;
use crate::state::heap::{BaseTable, DeltaEntry, DeltaTable, HeapKeyedState, Stamped};
use crate::state::heap_snapshot::{GroupView, delta_entries};
use crate::state::key_group::{KeyGroupRange, key_group_of_hash, key_group_range};
use crate::state::keyed_block;
use crate::state::snapshot::KeyGroupBlock;
use std::collections::BTreeMap;
use std::sync::Arc;

const MAX_P: u32 = 8;

fn all() -> KeyGroupRange {
    key_group_range(0, 1, MAX_P)
}

fn stamped(value: i64, written_ms: u64) -> Stamped<i64> {
    Stamped {
        value,
        written_ms,
        written_epoch: 0,
    }
}

/// The entries of blocks, restored in order on the heap backend: key → value.
fn restored(blocks: Vec<KeyGroupBlock>) -> BTreeMap<Key, i64> {
    let mut state = HeapKeyedState::<i64>::new(all(), None);
    state.restore(blocks, 1_000).unwrap();
    full_entries(&state.snapshot(1_000).encode().unwrap())
}

fn full_entries(blocks: &[KeyGroupBlock]) -> BTreeMap<Key, i64> {
    let mut out = BTreeMap::new();
    for block in blocks {
        for (key, value, _) in keyed_block::decode::<i64>(&block.data).unwrap() {
            assert!(out.insert(key, value).is_none(), "a key in two blocks");
        }
    }
    out
}

/// Two keys whose table hash is the same (made so by building the tables with a chosen hash
/// and resolving with the same one), one of them changed: the written hash yields both, each
/// with its own state at the barrier, and the base plus the delta restores exactly the
/// barrier's state (the unchanged key rewrites its own value). Rows: the change in the base
/// table itself (no frozen layer), in a frozen delta, and a removal of the other key in a
/// frozen delta (its tombstone hides it: the removal is recorded by key).
#[test]
fn two_keys_sharing_a_hash_both_go_into_the_delta_and_restore_exactly() {
    const HASH: u64 = 0x5eed_0000_0000_0001;
    let same = |_: &Key| HASH;
    let (a, b) = (Key::Str("a".into()), Key::Str("b".into()));
    // (row, base at the barrier, frozen delta entries (key, value or tombstone), removed
    // keys, expected delta entries)
    type Row<'k> = (
        &'static str,
        Vec<(&'k Key, i64)>,
        Vec<(&'k Key, Option<i64>)>,
        Vec<&'k Key>,
        Vec<(&'k Key, Option<i64>)>,
    );
    let rows: Vec<Row> = vec![
        (
            "changed in the base",
            vec![(&a, 10), (&b, 2)],
            vec![],
            vec![],
            vec![(&a, Some(10)), (&b, Some(2))],
        ),
        (
            "changed in a frozen delta",
            vec![(&a, 1), (&b, 2)],
            vec![(&a, Some(10))],
            vec![],
            vec![(&a, Some(10)), (&b, Some(2))],
        ),
        (
            "the other key removed",
            vec![(&a, 1), (&b, 2)],
            vec![(&a, Some(10)), (&b, None)],
            vec![&b],
            vec![(&a, Some(10)), (&b, None)],
        ),
    ];
    for (row, base, frozen, removed, want) in rows {
        let mut table: BaseTable<i64> = BaseTable::default();
        for (key, value) in &base {
            table.insert_unique(HASH, ((*key).clone(), stamped(*value, 100)), |_| HASH);
        }
        let mut delta: DeltaTable<i64> = DeltaTable::default();
        for (key, value) in &frozen {
            let entry = DeltaEntry {
                table_hash: HASH,
                key: (*key).clone(),
                slot: value.map(|v| stamped(v, 200)),
            };
            delta.insert_unique(HASH, entry, |_| HASH);
        }
        let view = GroupView {
            key_group: 0,
            base: Arc::new(table),
            deltas: if frozen.is_empty() {
                vec![]
            } else {
                vec![Arc::new(delta)]
            },
        };
        let mut changes = GroupChanges::default();
        changes.record_write(HASH);
        for key in &removed {
            changes.record_key(HASH, key);
        }
        let entries = delta_entries(Some(&view), &changes, None, 300, &same);
        let got: BTreeMap<&Key, Option<i64>> = entries.iter().map(|(k, v, _)| (*k, v.copied())).collect();
        assert_eq!(got.len(), entries.len(), "{row}: each key once");
        assert_eq!(got, want.iter().copied().collect(), "{row}");

        // The base checkpoint held a = 1, b = 2; base + delta is the barrier's state.
        let before = [(&a, &1i64), (&b, &2i64)];
        let blocks = vec![
            KeyGroupBlock {
                expired_through_ms: None,
                key_group: 0,
                entries: 2,
                data: keyed_block::encode_v1(&before).unwrap().into(),
            },
            KeyGroupBlock {
                expired_through_ms: None,
                key_group: 0,
                entries: entries.len() as u64,
                data: keyed_block::encode_delta(&entries).unwrap().into(),
            },
        ];
        let at_barrier: BTreeMap<Key, i64> = want.iter().filter_map(|(k, v)| v.map(|v| ((*k).clone(), v))).collect();
        assert_eq!(restored(blocks), at_barrier, "{row}: restored");
    }
}

/// One step of a scenario: a write of a value, a removal, or the end of a snapshot interval
/// whose checkpoint is declined (its changes are merged into the next delta's, as
/// `IncrementalTracker` does when the checkpoint in between never completes).
#[derive(Clone, Copy, Debug)]
enum Step {
    Write(i64, i64),
    Remove(i64),
    Declined,
}
use Step::*;

fn key_of(i: i64) -> (u32, u64, Key) {
    let key = Key::Int(i);
    let hash = key_hash(&key);
    (key_group_of_hash(hash, MAX_P), hash, key)
}

/// Removals after writes (and writes after removals) of one key within one checkpoint
/// interval, of a key the base holds (1) and of one it does not (2), on both backends, with
/// and without a snapshot in flight (frozen layers on the heap): the base plus the delta
/// restores exactly the state at the barrier, and the delta holds no key twice. Each delta is
/// encoded twice: from the set the backend recorded (heap: writes by hash; disk: by key) and
/// from the other kind (writes by hash, removals by key, built from the steps), so either
/// encoder resolves either kind exactly.
#[test]
fn a_removal_after_a_write_within_one_interval_restores_exactly() {
    let scenarios: [(&str, &[Step]); 9] = [
        ("held key written then removed", &[Write(1, 7), Remove(1)]),
        ("new key written then removed", &[Write(2, 7), Remove(2)]),
        ("held key removed then written", &[Remove(1), Write(1, 7)]),
        (
            "new key written, removed, written",
            &[Write(2, 7), Remove(2), Write(2, 8)],
        ),
        (
            "held key written, removed, written",
            &[Write(1, 7), Remove(1), Write(1, 8)],
        ),
        ("held key removed only", &[Remove(1)]),
        ("absent key removed only", &[Remove(2)]),
        ("written, declined, removed", &[Write(2, 7), Declined, Remove(2)]),
        ("removed, declined, written", &[Remove(1), Declined, Write(1, 9)]),
    ];
    for backend in ["heap", "disk"] {
        for in_flight in [false, true] {
            for (name, steps) in scenarios {
                let what = format!("{backend}, snapshot in flight {in_flight}: {name}");
                let dir = tempfile::tempdir().unwrap();
                let choice = match backend {
                    "heap" => BackendChoice::Heap,
                    _ => BackendChoice::Disk {
                        dir: dir.path().join("s"),
                        options: DiskStateOptions::default(),
                    },
                };
                let mut state = KeyedState::<i64>::open(&choice, all(), None).unwrap();
                state.track_changes();
                for i in [1, 3, 4] {
                    let (kg, hash, key) = key_of(i);
                    state.update(kg, hash, &key, 0, |_| i * 100).unwrap();
                }
                state.take_changes();
                let base = state.snapshot(0).encode().unwrap();
                let held = in_flight.then(|| state.snapshot(0));
                let mut changes = ChangedKeys::default();
                let mut other_kind = ChangedKeys::default();
                for step in steps {
                    match *step {
                        Write(i, v) => {
                            let (kg, hash, key) = key_of(i);
                            state.update(kg, hash, &key, 10, |_| v).unwrap();
                            match backend {
                                "heap" => other_kind.record_key(kg, hash, &key),
                                _ => other_kind.record_write(kg, hash),
                            };
                        }
                        Remove(i) => {
                            let (kg, hash, key) = key_of(i);
                            state.remove(kg, hash, &key).unwrap();
                            other_kind.record_key(kg, hash, &key);
                        }
                        Declined => changes.merge(&state.take_changes()),
                    }
                }
                changes.merge(&state.take_changes());
                let at_barrier = full_entries(&state.snapshot(20).encode().unwrap());
                for (kind, set) in [("recorded", &changes), ("other kind", &other_kind)] {
                    let delta = state.snapshot(20).encode_delta(set).unwrap();
                    assert_no_key_twice(&delta, &format!("{what}, {kind}"));
                    let mut chain = base.clone();
                    chain.extend(delta);
                    assert_eq!(restored(chain), at_barrier, "{what}, {kind}");
                }
                drop(held);
            }
        }
    }
}

/// Dense and sparse intervals on the heap (groups switch between written hashes and a scan
/// by write epoch, `GroupChanges::record_first_write`), with removals, snapshots held in
/// flight (frozen layers) and deltas over several intervals (sets merged, as when a
/// checkpoint was not confirmed before the next barrier): every chain of base plus deltas
/// restores exactly the state at its barrier, and no delta holds a key twice.
#[test]
fn deltas_by_scan_and_by_hash_restore_the_state_at_each_barrier() {
    const KEYS: u64 = 3_000;
    let mut seed: u64 = 0x2545_f491_4f6c_dd1d;
    let mut next = move |below: u64| {
        seed = seed.wrapping_mul(6364136223846793005).wrapping_add(1442695040888963407);
        (seed >> 33) % below
    };
    let mut state = HeapKeyedState::<i64>::new(all(), None);
    state.track_changes();
    let write = |state: &mut HeapKeyedState<i64>, i: u64, v: i64| {
        let (kg, hash, key) = key_of(i as i64);
        state.update(kg, hash, &key, 0, |old| old.copied().unwrap_or(0) + v);
    };
    for i in 0..KEYS {
        write(&mut state, i, 1);
    }
    state.take_changes();
    let mut chain = state.snapshot(0).encode().unwrap();
    // The encoded snapshot is dropped: merge the tables back (writes then go to the base
    // table itself until the next snapshot held in flight).
    state.maintain(0, 0);
    let (mut scanned, mut hashed) = (0, 0);
    // (writes in each interval merged into the delta (more than one: the checkpoints between
    // were not confirmed), removals per interval, snapshot held in flight)
    let intervals: [(&[u64], u64, bool); 10] = [
        (&[4 * KEYS], 5, false),
        (&[20], 3, true),
        (&[10], 0, false),
        (&[KEYS, KEYS], 40, false),
        (&[5], 1, true),
        (&[50, 50], 50, false),
        (&[3 * KEYS, 3 * KEYS, 3 * KEYS], 0, true),
        (&[KEYS / 2], 10, true),
        // Dense, then idle, then one write, merged (review): groups start scanning in the
        // dense interval and keep that start through the idle one.
        (&[4 * KEYS, 0, 1], 0, false),
        (&[4 * KEYS, 0, 1], 2, true),
    ];
    for (n, (writes_per_interval, removals, in_flight)) in intervals.into_iter().enumerate() {
        let mut changes = ChangedKeys::default();
        let mut held = Vec::new();
        for &writes in writes_per_interval {
            if in_flight {
                held.push(state.snapshot(0));
            }
            for _ in 0..writes {
                write(&mut state, next(KEYS + KEYS / 10), 1 + next(5) as i64);
            }
            for _ in 0..removals {
                let (kg, hash, key) = key_of(next(KEYS) as i64);
                state.remove(kg, hash, &key);
            }
            changes.merge(&state.take_changes());
        }
        for (_, group) in changes.by_key_group() {
            match group.scan_from_epoch {
                Some(_) => scanned += 1,
                None => hashed += 1,
            }
        }
        let at_barrier = full_entries(&state.snapshot(0).encode().unwrap());
        let delta = state.snapshot(0).encode_delta(&changes).unwrap();
        assert_no_key_twice(&delta, &format!("interval {n}"));
        chain.extend(delta);
        assert_eq!(restored(chain.clone()), at_barrier, "interval {n}");
        drop(held);
        state.maintain(0, 0);
    }
    assert!(
        scanned > 0 && hashed > 0,
        "both kinds ran: {scanned} scanned, {hashed} by hash"
    );
}

/// Panics naming `what` if a block of `delta` holds a key twice (a delta writes each changed
/// key once: its newest value or its tombstone).
fn assert_no_key_twice(delta: &[KeyGroupBlock], what: &str) {
    for block in delta {
        let keys: Vec<Key> = keyed_block::decode_with_removals::<i64>(&block.data)
            .unwrap()
            .into_iter()
            .map(|(k, _, _)| k)
            .collect();
        let distinct: std::collections::BTreeSet<&Key> = keys.iter().collect();
        assert_eq!(distinct.len(), keys.len(), "{what}: a key twice in {keys:?}");
    }
}

/// A chain written by a step without `ttl` restored into one with a `ttl`: every key counts
/// as written at the restore, those of the deltas as those of the base (a delta of such a
/// step carries no write times, `state/keyed_block.rs`), on both backends. Written with a
/// `ttl`, the deltas keep their times and keys already `ttl` old at the restore are dropped.
/// (Found by a review: the deltas' keys expired at once where the base's were kept.)
#[test]
fn a_ttl_added_at_a_restore_keeps_the_keys_of_the_chains_deltas() {
    use crate::state::ttl::StateTtl;
    use std::time::Duration;
    let ttl = StateTtl::new(Duration::from_secs(10));
    for backend in ["heap", "disk"] {
        for written_with_ttl in [false, true] {
            let what = format!("{backend}, written with a ttl: {written_with_ttl}");
            let dir = tempfile::tempdir().unwrap();
            let choice = |name: &str| backend_named(backend, dir.path(), name);
            let mut state =
                KeyedState::<i64>::open(&choice("written"), all(), written_with_ttl.then_some(ttl)).unwrap();
            state.track_changes();
            for i in 0..20 {
                write_key(&mut state, i, 1_000);
            }
            state.take_changes();
            let mut chain = state.snapshot(1_000).encode().unwrap();
            for i in [3, 20, 21] {
                write_key(&mut state, i, 2_000);
            }
            let changes = state.take_changes();
            chain.extend(state.snapshot(2_000).encode_delta(&changes).unwrap());
            assert!(chain.iter().any(|b| keyed_block::is_delta(&b.data)), "{what}");
            // Restored an hour later into a step with a 10 s ttl.
            let mut restored = KeyedState::<i64>::open(&choice("restored"), all(), Some(ttl)).unwrap();
            restored.restore(chain, 3_600_000).unwrap();
            let live = |key: i64| {
                let (kg, hash, key) = key_of(key);
                restored.get(kg, hash, &key, 3_600_000).unwrap().is_some()
            };
            let held: Vec<i64> = (0..22).filter(|k| live(*k)).collect();
            let want: Vec<i64> = if written_with_ttl { vec![] } else { (0..22).collect() };
            assert_eq!(held, want, "{what}");
        }
    }
}

/// A chain's base keeps the keys that expired (and were cleaned up) after it was written: no
/// delta removes them. Restored with a longer `ttl`, or none, they must stay out, as they are
/// out of a full snapshot taken when the delta was: the delta's handle records the newest
/// write time that had expired then (`StateHandle::expired_through_ms`), and every block of
/// the chain carries it into the restore. Both backends, the heap's integer table included (a
/// single full block restored into a step without `ttl`); without the bound, the 18 expired
/// keys came back (found by a review: 200 of 200 keys of a heap chain, a few of a native
/// store).
#[test]
fn keys_expired_when_a_delta_was_written_stay_out_of_a_restore_with_a_longer_ttl() {
    use crate::state::ttl::{StateTtl, expired_through};
    use std::time::Duration;
    let ttl = StateTtl::new(Duration::from_secs(10));
    for backend in ["heap", "disk"] {
        let dir = tempfile::tempdir().unwrap();
        let choice = |name: &str| backend_named(backend, dir.path(), name);
        let mut state = KeyedState::<i64>::open(&choice("written"), all(), Some(ttl)).unwrap();
        state.track_changes();
        // Keys 0..20 at 1 s, 18 and 19 again at 5 s; the base at 6 s holds all 20.
        for i in 0..20 {
            write_key(&mut state, i, 1_000);
        }
        write_key(&mut state, 18, 5_000);
        write_key(&mut state, 19, 5_000);
        state.take_changes();
        let base = state.snapshot(6_000).encode().unwrap();
        // At 12 s keys 0..18 have expired; 3 and 20 are written. The delta holds those two.
        write_key(&mut state, 3, 12_000);
        write_key(&mut state, 20, 12_000);
        let changes = state.take_changes();
        let delta = state.snapshot(12_000).encode_delta(&changes).unwrap();
        let through = expired_through(Some(ttl), 12_000);
        let mut chain = base.clone();
        chain.extend(delta);
        let bounded = |blocks: &[KeyGroupBlock]| -> Vec<KeyGroupBlock> {
            blocks
                .iter()
                .map(|b| KeyGroupBlock {
                    expired_through_ms: through,
                    ..b.clone()
                })
                .collect()
        };
        // (what, blocks, ttl at the restore, keys held)
        type Row = (&'static str, Vec<KeyGroupBlock>, Option<StateTtl>, Vec<i64>);
        let rows: [Row; 5] = [
            (
                "chain, ttl 1h",
                bounded(&chain),
                Some(StateTtl::new(Duration::from_secs(3_600))),
                vec![3, 18, 19, 20],
            ),
            ("chain, ttl removed", bounded(&chain), None, vec![3, 18, 19, 20]),
            ("chain, same ttl", bounded(&chain), Some(ttl), vec![3, 18, 19, 20]),
            (
                "the base alone (a native store as blocks), ttl removed",
                bounded(&base),
                None,
                vec![18, 19],
            ),
            (
                "no bound recorded (older metadata): as before",
                chain.clone(),
                None,
                (0..21).collect(),
            ),
        ];
        for (what, blocks, ttl_now, want) in rows {
            let what = format!("{backend}: {what}");
            let mut restored = KeyedState::<i64>::open(&choice(&what), all(), ttl_now).unwrap();
            restored.restore(blocks, 14_000).unwrap();
            let live = |key: i64| {
                let (kg, hash, key) = key_of(key);
                restored.get(kg, hash, &key, 14_000).unwrap().is_some()
            };
            let held: Vec<i64> = (0..21).filter(|k| live(*k)).collect();
            assert_eq!(held, want, "{what}");
        }
    }
}

/// The backend `backend` (`heap` or `disk`, its store in `dir/name`).
fn backend_named(backend: &str, dir: &std::path::Path, name: &str) -> BackendChoice {
    match backend {
        "heap" => BackendChoice::Heap,
        _ => BackendChoice::Disk {
            dir: dir.join(name),
            options: DiskStateOptions::default(),
        },
    }
}

/// Writes `i` as the value of key `i` at `at_ms`.
fn write_key(state: &mut KeyedState<i64>, i: i64, at_ms: u64) {
    let (kg, hash, key) = key_of(i);
    state.update(kg, hash, &key, at_ms, |_| i).unwrap();
}
