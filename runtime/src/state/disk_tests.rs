//! Table tests of the disk keyed state: operations, TTL with an injected time, snapshot
//! isolation, and block compatibility with the heap backend both ways.

use super::*;
use crate::state::disk_rocks::MAX_WRITE_BUFFERS;
use crate::state::heap::HeapKeyedState;
use crate::state::key_group::{key_group_of_hash, key_group_range};
use std::collections::BTreeMap;
use std::time::Duration;

const MAX_P: u32 = 8;

fn key(i: i64) -> Key {
    if i % 2 == 0 {
        Key::Int(i)
    } else {
        Key::Str(format!("key-{i}").into())
    }
}

fn key_id(k: &Key) -> i64 {
    match k {
        Key::Int(i) => *i,
        Key::Str(s) => s.strip_prefix("key-").unwrap().parse().unwrap(),
        other => panic!("unexpected key {other:?}"),
    }
}

struct Fixture {
    _dir: tempfile::TempDir,
    state: DiskKeyedState<i64>,
}

fn open(ttl: Option<Duration>, range: KeyGroupRange) -> Fixture {
    let dir = tempfile::tempdir().unwrap();
    let state = DiskKeyedState::open(
        &dir.path().join("count-0"),
        range,
        ttl.map(StateTtl::new),
        DiskStateOptions::default(),
    )
    .unwrap();
    Fixture { _dir: dir, state }
}

fn all() -> KeyGroupRange {
    key_group_range(0, 1, MAX_P)
}

fn add(s: &mut DiskKeyedState<i64>, i: i64, by: i64, now: u64) -> i64 {
    let k = key(i);
    let h = key_hash(&k);
    s.update(key_group_of_hash(h, MAX_P), h, &k, now, |old| {
        old.copied().unwrap_or(0) + by
    })
    .unwrap()
}

fn get(s: &DiskKeyedState<i64>, i: i64, now: u64) -> Option<i64> {
    let k = key(i);
    let h = key_hash(&k);
    s.get(key_group_of_hash(h, MAX_P), h, &k, now).unwrap()
}

fn remove(s: &mut DiskKeyedState<i64>, i: i64) -> bool {
    let k = key(i);
    let h = key_hash(&k);
    s.remove(key_group_of_hash(h, MAX_P), h, &k).unwrap()
}

/// Decodes blocks into key id → (value, write time), checking entry counts, key groups and
/// that no key is in two blocks.
fn decode(blocks: &[KeyGroupBlock]) -> BTreeMap<i64, (i64, Option<u64>)> {
    let mut out = BTreeMap::new();
    for b in blocks {
        let entries = keyed_block::decode::<i64>(&b.data).unwrap();
        assert_eq!(entries.len() as u64, b.entries, "key group {}", b.key_group);
        for (k, v, t) in entries {
            assert_eq!(key_group_of_hash(key_hash(&k), MAX_P), b.key_group);
            assert!(out.insert(key_id(&k), (v, t)).is_none(), "{k:?} in two blocks");
        }
    }
    out
}

fn values(blocks: &[KeyGroupBlock]) -> BTreeMap<i64, i64> {
    decode(blocks).into_iter().map(|(k, (v, _))| (k, v)).collect()
}

#[test]
fn update_get_remove_table() {
    enum Op {
        Add(i64, i64),
        Remove(i64, bool),
    }
    use Op::*;
    /// (case, operations, expected value per key, expected len).
    type Row = (&'static str, Vec<Op>, Vec<(i64, Option<i64>)>, usize);
    let rows: [Row; 4] = [
        ("empty", vec![], vec![(1, None)], 0),
        (
            "adds accumulate",
            vec![Add(1, 2), Add(1, 3), Add(2, 5)],
            vec![(1, Some(5)), (2, Some(5))],
            2,
        ),
        (
            "remove then add starts over",
            vec![Add(1, 2), Remove(1, true), Remove(1, false), Add(1, 7)],
            vec![(1, Some(7))],
            1,
        ),
        ("remove of a missing key", vec![Remove(9, false)], vec![(9, None)], 0),
    ];
    for (name, ops, want, len) in rows {
        let mut f = open(None, all());
        for op in ops {
            match op {
                Add(i, by) => {
                    add(&mut f.state, i, by, 0);
                }
                Remove(i, held) => assert_eq!(remove(&mut f.state, i), held, "{name}: remove {i}"),
            }
        }
        for (i, v) in want {
            assert_eq!(get(&f.state, i, 0), v, "{name}: key {i}");
        }
        assert_eq!(f.state.len(), len, "{name}");
    }
}

#[test]
fn ttl_expires_keys_cleans_them_up_and_leaves_them_out_of_snapshots() {
    let day = Duration::from_secs(86_400);
    let mut f = open(Some(day), all());
    let t0 = 1_000_000;
    for i in 0..200 {
        add(&mut f.state, i, 1, t0);
    }
    add(&mut f.state, 1_000, 1, t0 + 1_000);
    // Just before the TTL: all live; at the TTL: keys 0..200 expired, key 1000 not.
    assert_eq!(get(&f.state, 5, t0 + 86_399_999), Some(1));
    assert_eq!(get(&f.state, 5, t0 + 86_400_000), None);
    assert_eq!(get(&f.state, 1_000, t0 + 86_400_000), Some(1));
    // An update of an expired key starts over from nothing.
    assert_eq!(add(&mut f.state, 5, 10, t0 + 86_400_000), 10);
    let now = t0 + 86_400_000;
    let snap = decode(&f.state.snapshot(now).encode().unwrap());
    assert_eq!(snap.keys().copied().collect::<Vec<_>>(), vec![5, 1_000]);
    assert_eq!(snap[&5], (10, Some(now)), "write time carried in the block");
    assert_eq!(f.state.len(), 201, "expired keys held until cleanup");
    // Cleanup walks the store: entries still in the write-back cache's pending generations
    // are cleaned once written back.
    f.state.wait_for_write_back();
    // Incremental cleanup: 5 entries per record, so 40 records examine every entry once.
    f.state.maintain(now, 10).unwrap();
    assert!(f.state.len() > 150, "a small budget removes a few: {}", f.state.len());
    for _ in 0..10 {
        f.state.maintain(now, 40).unwrap();
    }
    assert_eq!(f.state.len(), 2);
    assert_eq!(
        f.state.store.count_entries(),
        2,
        "expired entries deleted from the store"
    );
}

#[test]
fn a_snapshot_sees_the_state_at_its_barrier_only() {
    let mut f = open(None, all());
    for i in 0..100 {
        add(&mut f.state, i, i, 0);
    }
    let first = f.state.snapshot(0);
    // After the barrier: changes, removals and new keys, none of which the snapshot may see.
    for i in 0..50 {
        add(&mut f.state, i, 1_000, 0);
    }
    assert!(remove(&mut f.state, 99));
    add(&mut f.state, 500, 1, 0);
    let second = f.state.snapshot(0);
    add(&mut f.state, 501, 1, 0);
    let want_first: BTreeMap<i64, i64> = (0..100).map(|i| (i, i)).collect();
    let mut want_second: BTreeMap<i64, i64> = (0..99).map(|i| (i, if i < 50 { i + 1_000 } else { i })).collect();
    want_second.insert(500, 1);
    // Encode in the opposite order of taking them, as encoder threads may.
    assert_eq!(values(&second.encode().unwrap()), want_second);
    assert_eq!(values(&first.encode().unwrap()), want_first);
    assert_eq!(f.state.len(), 101);
}

/// Blocks written by either backend restore on the other with the same contents, with and
/// without TTL (block versions 2 and 1), and a restore at parallelism 2 splits the keys.
#[test]
fn blocks_are_backend_independent() {
    for ttl in [None, Some(StateTtl::new(Duration::from_secs(3_600)))] {
        let mut heap = HeapKeyedState::<i64>::new(all(), ttl);
        let mut f = open(ttl.map(|t| Duration::from_millis(t.ttl_ms)), all());
        for i in 0..1_000 {
            let k = key(i);
            let h = key_hash(&k);
            let kg = key_group_of_hash(h, MAX_P);
            heap.update(kg, h, &k, 5_000 + i as u64, |_| i * 3);
            f.state.update(kg, h, &k, 5_000 + i as u64, |_| i * 3).unwrap();
        }
        let from_heap = heap.snapshot(6_000).encode().unwrap();
        let from_disk = f.state.snapshot(6_000).encode().unwrap();
        assert_eq!(decode(&from_heap), decode(&from_disk), "ttl {ttl:?}");
        assert_eq!(from_disk.len(), MAX_P as usize);
        // Disk blocks into heap, heap blocks into disk, and each split over two subtasks.
        let mut heap_again = HeapKeyedState::<i64>::new(all(), ttl);
        heap_again.restore(from_disk.clone(), 6_000).unwrap();
        assert_eq!(
            decode(&heap_again.snapshot(6_000).encode().unwrap()),
            decode(&from_heap)
        );
        let mut total = 0;
        for subtask in 0..2 {
            let mut part = open(None, key_group_range(subtask, 2, MAX_P));
            part.state.ttl = ttl;
            part.state.restore(from_heap.clone(), 6_000).unwrap();
            let blocks = part.state.snapshot(6_000).encode().unwrap();
            assert!(blocks.iter().all(|b| part.state.range().contains(b.key_group)));
            total += part.state.len();
            for (k, v) in values(&blocks) {
                assert_eq!(v, k * 3);
            }
        }
        assert_eq!(total, 1_000);
    }
}

#[test]
fn restore_drops_expired_entries_and_the_directory_is_scratch() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("count-0");
    std::fs::create_dir_all(path.join("leftover")).unwrap();
    let ttl = Some(StateTtl::new(Duration::from_secs(10)));
    let mut s = DiskKeyedState::<i64>::open(&path, all(), ttl, DiskStateOptions::default()).unwrap();
    assert!(
        !path.join("leftover").exists(),
        "an earlier run's files are deleted on open"
    );
    let k = key(1);
    let h = key_hash(&k);
    let v2 = keyed_block::encode_v2(&[(&k, &7i64, 1_000)]).unwrap();
    let block = KeyGroupBlock {
        expired_through_ms: None,
        key_group: key_group_of_hash(h, MAX_P),
        entries: 1,
        data: v2.into(),
    };
    s.restore(vec![block.clone()], 5_000).unwrap();
    assert_eq!(s.len(), 1);
    assert_eq!(get(&s, 1, 5_000), Some(7));
    let mut late = open(ttl.map(|t| Duration::from_millis(t.ttl_ms)), all());
    late.state.restore(vec![block], 11_000).unwrap();
    assert_eq!(late.state.len(), 0, "expired at the restore");
    drop(s);
    assert!(!path.exists(), "the store's directory is deleted with it");
}

/// An incremental heap checkpoint (a base, then deltas that overwrite, add and remove keys)
/// restores on the disk backend to exactly the heap's state at the last barrier, also split
/// over two subtasks; the entry count follows removals and overwrites.
#[test]
fn an_incremental_heap_chain_restores_on_disk() {
    let mut heap = HeapKeyedState::<i64>::new(all(), None);
    heap.track_changes();
    let write = |heap: &mut HeapKeyedState<i64>, i: i64, v: i64| {
        let k = key(i);
        let h = key_hash(&k);
        heap.update(key_group_of_hash(h, MAX_P), h, &k, 1, |_| v);
    };
    for i in 0..300 {
        write(&mut heap, i, i);
    }
    heap.take_changes();
    let mut chain = heap.snapshot(1).encode().unwrap();
    for round in 0..3i64 {
        for i in (round * 20)..(round * 20 + 10) {
            write(&mut heap, i, -i);
        }
        for i in (200 + round * 10)..(205 + round * 10) {
            let k = key(i);
            let h = key_hash(&k);
            assert!(heap.remove(key_group_of_hash(h, MAX_P), h, &k));
        }
        write(&mut heap, 1_000 + round, 7);
        let changes = heap.take_changes();
        let delta = heap.snapshot(1).encode_delta(&changes).unwrap();
        assert!(delta.iter().all(|b| keyed_block::is_delta(&b.data)));
        chain.extend(delta);
    }
    let want = values(&heap.snapshot(2).encode().unwrap());
    assert_eq!(want.len(), 300 - 15 + 3);
    assert_eq!(want.get(&25), Some(&-25), "overwritten in round 1");
    assert_eq!(want.get(&212), None, "removed in round 1");

    let mut whole = open(None, all());
    whole.state.restore(chain.clone(), 2).unwrap();
    assert_eq!(whole.state.len(), want.len(), "removals and overwrites keep the count");
    assert_eq!(values(&whole.state.snapshot(2).encode().unwrap()), want);

    let mut union = BTreeMap::new();
    for subtask in 0..2 {
        let mut part = open(None, key_group_range(subtask, 2, MAX_P));
        part.state.restore(chain.clone(), 2).unwrap();
        let got = values(&part.state.snapshot(2).encode().unwrap());
        assert_eq!(part.state.len(), got.len());
        union.extend(got);
    }
    assert_eq!(union, want);
}

/// A delta's entries as key id → (value or removal, write time), sorted.
fn delta_entries(blocks: &[KeyGroupBlock]) -> BTreeMap<i64, (Option<i64>, Option<u64>)> {
    let mut out = BTreeMap::new();
    for b in blocks {
        assert!(
            keyed_block::is_delta(&b.data),
            "key group {} is a delta block",
            b.key_group
        );
        let entries = keyed_block::decode_with_removals::<i64>(&b.data).unwrap();
        assert_eq!(entries.len() as u64, b.entries, "key group {}", b.key_group);
        for (k, v, t) in entries {
            assert_eq!(key_group_of_hash(key_hash(&k), MAX_P), b.key_group);
            assert!(out.insert(key_id(&k), (v, t)).is_none(), "{k:?} twice in a delta");
        }
    }
    out
}

/// The disk backend's delta blocks (incremental checkpoints) hold exactly what the heap
/// backend's hold for the same writes, removals and expiries — same keys, values, write times
/// and removals, each entry's bytes equal (`keyed_block::encode_delta` of the decoded entry) —
/// see only the state at their barrier, and a chain of them restores on either backend to
/// the state at the last barrier.
#[test]
fn disk_deltas_equal_heap_deltas_and_restore_on_both_backends() {
    let ttl = Some(Duration::from_secs(60));
    let mut heap = HeapKeyedState::<i64>::new(all(), ttl.map(StateTtl::new));
    let mut disk = open(ttl, all());
    heap.track_changes();
    disk.state.track_changes();
    let write = |heap: &mut HeapKeyedState<i64>, disk: &mut DiskKeyedState<i64>, i: i64, v: i64, now: u64| {
        let k = key(i);
        let h = key_hash(&k);
        heap.update(key_group_of_hash(h, MAX_P), h, &k, now, |_| v);
        disk.update(key_group_of_hash(h, MAX_P), h, &k, now, |_| v).unwrap();
    };
    for i in 0..400 {
        write(&mut heap, &mut disk.state, i, i, 1_000);
    }
    heap.take_changes();
    disk.state.take_changes();
    let mut chain = disk.state.snapshot(1_000).encode().unwrap();
    let mut now = 1_000;
    let mut last_barrier = BTreeMap::new();
    for round in 0..3i64 {
        now += 30_000;
        for i in (round * 20)..(round * 20 + 10) {
            write(&mut heap, &mut disk.state, i, -i, now);
        }
        for i in (300 + round * 10)..(305 + round * 10) {
            let k = key(i);
            let h = key_hash(&k);
            assert!(heap.remove(key_group_of_hash(h, MAX_P), h, &k));
            assert!(remove(&mut disk.state, i));
        }
        // Written, then removed before the barrier: a removal of a key the base never held.
        write(&mut heap, &mut disk.state, 2_000 + round, 1, now);
        assert!(remove(&mut disk.state, 2_000 + round));
        let k = key(2_000 + round);
        let h = key_hash(&k);
        heap.remove(key_group_of_hash(h, MAX_P), h, &k);
        write(&mut heap, &mut disk.state, 1_000 + round, 7, now);
        // By round 2 (90 s after the base) keys written only at the base have expired.
        let heap_changes = heap.take_changes();
        let disk_changes = disk.state.take_changes();
        // The heap records the key written then removed twice (its hash, then the key), the
        // disk backend every key once, by key (`state/changed_keys.rs`).
        assert_eq!(
            heap_changes.len(),
            disk_changes.len() + 1,
            "round {round}: changed keys"
        );
        let disk_view = disk.state.snapshot(now);
        let heap_view = heap.snapshot(now);
        let at_barrier = values(&disk.state.snapshot(now).encode().unwrap());
        // Writes after the barrier are not in this delta.
        write(&mut heap, &mut disk.state, round * 20, 99_999, now);
        write(&mut heap, &mut disk.state, 3_000 + round, 99_999, now);
        let heap_delta = heap_view.encode_delta(&heap_changes).unwrap();
        let disk_delta = disk_view.encode_delta(&disk_changes).unwrap();
        let got = delta_entries(&disk_delta);
        assert_eq!(got, delta_entries(&heap_delta), "round {round}: the same delta entries");
        assert_eq!(got.get(&(2_000 + round)), Some(&(None, None)), "round {round}: removal");
        assert!(
            !got.contains_key(&(3_000 + round)),
            "round {round}: written after the barrier"
        );
        assert_eq!(
            got[&(round * 20)].0,
            Some(-(round * 20)),
            "round {round}: barrier value"
        );
        // Byte for byte: each disk block equals the heap encoder's bytes for its entries.
        for b in &disk_delta {
            let decoded = keyed_block::decode_with_removals::<i64>(&b.data).unwrap();
            let entries: Vec<(&Key, Option<&i64>, u64)> = decoded
                .iter()
                .map(|(k, v, t)| (k, v.as_ref(), t.unwrap_or(0)))
                .collect();
            assert_eq!(
                keyed_block::encode_delta(&entries).unwrap(),
                b.data,
                "key group {}",
                b.key_group
            );
        }
        chain.extend(disk_delta);
        last_barrier = at_barrier;
    }
    assert_eq!(
        values(&disk.state.snapshot(now).encode().unwrap()),
        values(&heap.snapshot(now).encode().unwrap())
    );
    for backend in ["heap", "disk"] {
        let restored = match backend {
            "heap" => {
                let mut h = HeapKeyedState::<i64>::new(all(), ttl.map(StateTtl::new));
                h.restore(chain.clone(), now).unwrap();
                values(&h.snapshot(now).encode().unwrap())
            }
            _ => {
                let mut d = open(ttl, all());
                d.state.restore(chain.clone(), now).unwrap();
                values(&d.state.snapshot(now).encode().unwrap())
            }
        };
        assert_eq!(restored, last_barrier, "{backend}: the state at the last barrier");
        assert_eq!(restored.get(&1_002), Some(&7), "{backend}: written in the last delta");
        assert_eq!(restored.get(&312), None, "{backend}: removed in a delta");
        assert_eq!(restored.get(&350), None, "{backend}: expired since the base");
    }
}

/// Without tracking, the disk backend records no changes; with it, `take_changes` hands over
/// each key once per snapshot interval and starts a new record.
#[test]
fn disk_changes_are_tracked_only_when_asked() {
    let mut f = open(None, all());
    add(&mut f.state, 1, 1, 0);
    assert!(f.state.take_changes().is_empty());
    f.state.track_changes();
    add(&mut f.state, 1, 1, 0);
    add(&mut f.state, 1, 1, 0);
    add(&mut f.state, 2, 1, 0);
    remove(&mut f.state, 3);
    assert_eq!(f.state.take_changes().len(), 3, "keys 1, 2 and the removal of 3");
    assert!(f.state.take_changes().is_empty());
}

/// A restore into an empty store (bulk ingestion, key groups decoded in parallel) and one
/// into a store that already holds entries (write batches) end in the same state and count:
/// the same blocks restored in one call, or in two calls of which the second takes the
/// batch path; reads and later writes work on the ingested store.
#[test]
fn bulk_ingested_restore_equals_restore_by_batches() {
    let mut heap = HeapKeyedState::<i64>::new(all(), Some(StateTtl::new(Duration::from_secs(60))));
    for i in 0..5000 {
        let k = key(i);
        let h = key_hash(&k);
        heap.update(key_group_of_hash(h, MAX_P), h, &k, 1_000, |_| i * 3);
    }
    let blocks = heap.snapshot(1_000).encode().unwrap();
    let ttl = Some(Duration::from_secs(60));
    let mut ingested = open(ttl, all());
    ingested.state.restore(blocks.clone(), 2_000).unwrap();
    let mut batched = open(ttl, all());
    let (first, second) = blocks.split_at(blocks.len() / 2);
    batched.state.restore(first.to_vec(), 2_000).unwrap();
    batched.state.restore(second.to_vec(), 2_000).unwrap();
    // A block restored again over a store holding its keys keeps the count.
    batched.state.restore(second.to_vec(), 2_000).unwrap();
    assert_eq!(ingested.state.len(), 5000);
    assert_eq!(batched.state.len(), 5000);
    let snap = |s: &mut DiskKeyedState<i64>| s.snapshot(2_000).encode().unwrap();
    assert_eq!(snap(&mut ingested.state), snap(&mut batched.state));
    assert_eq!(get(&ingested.state, 4999, 2_000), Some(4999 * 3));
    assert_eq!(add(&mut ingested.state, 4999, 1, 3_000), 4999 * 3 + 1);
    assert_eq!(add(&mut ingested.state, 9999, 1, 3_000), 1);
    assert_eq!(ingested.state.len(), 5001);
    assert!(remove(&mut ingested.state, 0));
    assert_eq!(get(&ingested.state, 0, 3_000), None);
}

/// Past [`changed_key_limit`] distinct keys the changed-key set overflows: it drops its keys,
/// a delta from it is refused, and the incremental tracker writes a full base instead.
#[test]
fn the_changed_key_set_is_bounded_and_an_overflow_makes_a_base() {
    use crate::state::incremental::{DEFAULT_POLICY, Form, IncrementalTracker};
    let mut f = open(None, all());
    let limit = changed_key_limit(&DiskStateOptions::default());
    f.state.track_changes();
    for i in 0..limit as i64 {
        add(&mut f.state, i, 1, 0);
    }
    let within = f.state.take_changes();
    assert!(!within.is_overflowed());
    assert_eq!(within.len(), limit);
    for i in 0..=limit as i64 {
        add(&mut f.state, i, 1, 0);
    }
    let over = f.state.take_changes();
    assert!(
        over.is_overflowed() && over.is_empty(),
        "past the limit: overflowed, no keys kept"
    );
    assert_eq!(over.len_upper_bound(), u64::MAX);
    let e = f.state.snapshot(0).encode_delta(&over).unwrap_err();
    assert!(e.problem.contains("overflowed"), "{e}");
    // A tracker with a confirmed base: a small set gives a delta, an overflowed one a base.
    let live = f.state.len() as u64;
    let mut tracker = IncrementalTracker::default();
    assert_eq!(
        tracker
            .plan(1, Some(None), ChangedKeys::default(), live, DEFAULT_POLICY)
            .form,
        Form::Base
    );
    let mut one = ChangedKeys::default();
    one.insert(0, &key(1));
    assert_eq!(
        tracker.plan(2, Some(Some(1)), one, live, DEFAULT_POLICY).form,
        Form::Delta { over: 1 }
    );
    assert_eq!(
        tracker.plan(3, Some(Some(2)), over, live, DEFAULT_POLICY).form,
        Form::Base
    );
}

/// A full snapshot encoded on several threads gives the blocks of one thread, in key-group
/// order.
#[test]
fn parallel_encoding_equals_one_thread() {
    let mut f = open(Some(Duration::from_secs(3600)), all());
    for i in 0..3000 {
        add(&mut f.state, i, i, 1000 + i as u64);
    }
    let mut encode = |workers: usize| {
        let mut blocks = Vec::new();
        f.state
            .snapshot(5000)
            .encode_each_on(workers, &mut |b| {
                blocks.push(b);
                Ok::<(), DiskStateError>(())
            })
            .unwrap();
        blocks
    };
    let one = encode(1);
    assert_eq!(one.iter().map(|b| b.entries).sum::<u64>(), 3000);
    assert!(one.windows(2).all(|w| w[0].key_group < w[1].key_group));
    for workers in [2, 3, 8] {
        assert_eq!(encode(workers), one, "{workers} workers");
    }
}

/// The store's write buffers stay within their configured bound (the active memtable plus the
/// sealed ones being flushed, [`MAX_WRITE_BUFFERS`] in all: past them RocksDB holds writes back)
/// while far more is written than fits (with fjall and one store thread, rotations once waited
/// behind compactions and the active memtable grew with the store).
#[test]
fn the_write_buffer_stays_bounded_while_the_store_grows() {
    let dir = tempfile::tempdir().unwrap();
    // No write-back cache: every write reaches the store's write buffer.
    let options = DiskStateOptions {
        cache_bytes: 1 << 20,
        write_buffer_bytes: 1 << 20,
        write_cache_bytes: 0,
        ..DiskStateOptions::default()
    };
    let mut state = DiskKeyedState::<String>::open(&dir.path().join("count-0"), all(), None, options).unwrap();
    let value = "v".repeat(1000);
    let mut peak = 0;
    // About 24 MiB of entries: 24 memtables' worth, flushed and compacted while writing.
    for i in 0..24_000i64 {
        let k = key(i);
        let h = key_hash(&k);
        state
            .update(key_group_of_hash(h, MAX_P), h, &k, 0, |_| value.clone())
            .unwrap();
        if i % 100 == 0 {
            peak = peak.max(state.write_buffer_bytes());
        }
    }
    assert_eq!(state.len(), 24_000);
    let bound = (MAX_WRITE_BUFFERS + 1) * options.write_buffer_bytes;
    assert!(
        peak <= bound,
        "write buffers peaked at {peak} bytes, over {bound} ({MAX_WRITE_BUFFERS} memtables of {} and slack)",
        options.write_buffer_bytes
    );
    assert!(peak > 0, "the write buffers were never measured");
}

/// A full snapshot of a store with many key groups holds only a few blocks ahead of a slow
/// upload: at most [`BLOCKS_IN_FLIGHT_PER_WORKER`] per scan thread, whatever the number of
/// key groups (before, a wave of contiguous spans, an eighth of the state, was encoded whole
/// before the first of its blocks was handed over: 16 of 128 blocks with two threads).
#[test]
fn a_full_snapshot_encodes_at_most_a_few_blocks_ahead_of_the_upload() {
    use crate::state::disk_snapshot::BLOCKS_IN_FLIGHT_PER_WORKER;
    let range = key_group_range(0, 1, 128);
    let mut f = open(None, range);
    let mut by_group = BTreeMap::new();
    for i in 0..20_000i64 {
        let k = key(i);
        let h = key_hash(&k);
        let group = key_group_of_hash(h, 128);
        f.state.update(group, h, &k, 0, |_| i).unwrap();
        *by_group.entry(group).or_insert(0u64) += 1;
    }
    assert_eq!(by_group.len(), 128, "every key group holds keys");
    for workers in [1, 2, 4] {
        let mut emitted = Vec::new();
        let peak = f
            .state
            .snapshot(0)
            .encode_each_on(workers, &mut |b| {
                // A slow upload: the scan threads run ahead until the window is full.
                std::thread::sleep(Duration::from_micros(200));
                emitted.push((b.key_group, b.entries));
                Ok::<(), DiskStateError>(())
            })
            .unwrap();
        assert_eq!(
            emitted,
            by_group.clone().into_iter().collect::<Vec<_>>(),
            "{workers} workers"
        );
        let bound = workers * BLOCKS_IN_FLIGHT_PER_WORKER;
        assert!(
            peak <= bound,
            "{peak} blocks encoded ahead of the upload with {workers} scan threads, over {bound}"
        );
    }
}

/// A disk store's I/O error says what a lost or unwritable state directory means and what to
/// do (helper-101: `rm -rf` and `chattr +i` of the state dir gave the raw errors alone); a
/// missing file in a directory that still exists, and other errors, get no such advice.
#[test]
fn state_dir_advice_table() {
    // (what, problem, whether the directory exists, advice starts with)
    let rows = [
        (
            "removed while running",
            "IO error: No such file or directory: While open a file for appending: /s/job/counts-0/000009.sst",
            false,
            "; the store's directory is gone",
        ),
        (
            "a missing file in a directory that is there",
            "IO error: No such file or directory: /s/job/counts-0/000009.sst",
            true,
            "",
        ),
        (
            "immutable",
            "IO error: While open a file for appending: /s/job/counts-0/000009.sst: Operation not permitted",
            true,
            "; the store's directory cannot be written",
        ),
        (
            "read-only mount",
            "IO error: Read-only file system",
            true,
            "; the store's directory cannot be written",
        ),
        (
            "a full disk (its own advice)",
            "IO error: No space left on device",
            true,
            "",
        ),
    ];
    for (what, problem, exists, advice) in rows {
        let said = crate::state::disk::state_dir_advice(problem, exists);
        assert!(
            said.starts_with(advice) && (advice.is_empty() == said.is_empty()),
            "{what}: {said}"
        );
    }
    let gone = DiskStateError {
        dir: std::path::PathBuf::from("/nonexistent/weir-state/job/counts-0"),
        problem: "IO error: No such file or directory: While open a file for appending".into(),
    };
    assert!(gone.to_string().contains("--state-dir"), "{gone}");
}
