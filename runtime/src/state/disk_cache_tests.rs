//! Tests of the write-back cache by generations: the disk backend with a cache that freezes
//! a generation every few writes, against the heap backend (every result, and every snapshot
//! at its barrier, full and incremental, encoded after later writes and write-backs); snapshots
//! taken while the write-back thread is held, so their generations are pending; reads,
//! removals and TTL through pending generations; the memory bound.

use super::*;
use crate::state::disk::{DiskKeyedState, DiskStateOptions};
use crate::state::heap::HeapKeyedState;
use crate::state::key_group::{KeyGroupRange, key_group_range};
use crate::state::keyed_block;
use crate::state::snapshot::KeyGroupBlock;
use crate::state::ttl::StateTtl;
use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use crate::state::disk_test_keys::{TEST_MAX_PARALLELISM as MAX_P, at, decode, key};

/// A small deterministic generator (xorshift).
struct Rng(u64);

impl Rng {
    fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below
    }
}

/// A disk state whose write-back cache holds `cache_entries` entries of [`key`]'s size.
fn open_disk(
    dir: &tempfile::TempDir,
    name: &str,
    range: KeyGroupRange,
    ttl: Option<StateTtl>,
    cache_entries: u64,
) -> DiskKeyedState<i64> {
    let options = DiskStateOptions {
        write_cache_bytes: cache_entries * entry_bytes::<i64>(&key(1)),
        ..DiskStateOptions::default()
    };
    DiskKeyedState::open(&dir.path().join(name), range, ttl, options).unwrap()
}

fn add(state: &mut DiskKeyedState<i64>, i: u64, by: i64, now: u64) -> i64 {
    let (kg, h, k) = at(i);
    state
        .update(kg, h, &k, now, |old| old.copied().unwrap_or(0) + by)
        .unwrap()
}

fn heap_add(state: &mut HeapKeyedState<i64>, i: u64, by: i64, now: u64) -> i64 {
    let (kg, h, k) = at(i);
    state.update(kg, h, &k, now, |old| old.copied().unwrap_or(0) + by)
}

fn get(state: &DiskKeyedState<i64>, i: u64, now: u64) -> Option<i64> {
    let (kg, h, k) = at(i);
    state.get(kg, h, &k, now).unwrap()
}

/// What the store alone holds for key `i` (not the cache).
fn in_store(state: &DiskKeyedState<i64>, i: u64) -> Option<i64> {
    let (kg, h, k) = at(i);
    state.read(&store_key(kg, h, &k)).unwrap().map(|(v, _)| v)
}

/// Every key group's entries ([`DiskKeyedState::entries_in_group`]) of `disk` equal the
/// heap's at `now`.
fn assert_same_groups(disk: &DiskKeyedState<i64>, heap: &HeapKeyedState<i64>, now: u64, context: &str) {
    for key_group in 0..MAX_P {
        let sorted = |mut entries: Vec<(crate::record::Key, i64)>| {
            entries.sort_by(|a, b| format!("{:?}", a.0).cmp(&format!("{:?}", b.0)));
            entries
        };
        let on_disk = sorted(disk.entries_in_group(key_group, now).unwrap());
        assert_eq!(
            on_disk,
            sorted(heap.entries_in_group(key_group, now)),
            "key group {key_group}, {context}"
        );
    }
}

/// The state a chain (a full base, then deltas) restores to on the heap at `now`.
fn restored_chain(chain: Vec<KeyGroupBlock>, ttl: Option<StateTtl>, now: u64) -> BTreeMap<String, (i64, Option<u64>)> {
    let all = key_group_range(0, 1, MAX_P);
    let mut heap = HeapKeyedState::<i64>::new(all, ttl);
    heap.restore(chain, now).unwrap();
    decode(&heap.snapshot(now).encode().unwrap())
}

#[test]
fn overlays_merge_newest_first_with_tombstones() {
    let generation = |writes: &[(u64, Option<i64>)]| -> Arc<dyn EncodedWrites> {
        let mut g = Generation::<i64>::default();
        for &(i, value) in writes {
            let (kg, h, k) = at(i);
            g.insert(
                CachedEntry {
                    key: k,
                    key_group: kg,
                    hash: h,
                    value,
                    written_ms: 7,
                },
                0,
            );
        }
        Arc::new(FrozenGeneration::new(g))
    };
    let older = generation(&[(1, Some(10)), (2, Some(20)), (3, Some(30))]);
    let newer = generation(&[(1, Some(11)), (2, None)]);
    let overlays = vec![older, newer];
    let value = |i| {
        let (kg, h, k) = at(i);
        overlay_write(&overlays, &store_key(kg, h, &k)).map(|v| v.map(|bytes| bytes.to_vec()))
    };
    let encoded = |v: i64| Some(Some(encode_value(&v, 7)));
    assert_eq!(value(1), encoded(11));
    assert_eq!(value(2), Some(None));
    assert_eq!(value(3), encoded(30));
    assert_eq!(value(4), None);
    // By prefix (every key group: the empty prefix): each key once, newest winning, in order.
    let all = overlay_writes(&overlays, &[]);
    assert_eq!(all.len(), 3);
    assert!(all.keys().is_sorted());
    let (kg, h, k) = at(2);
    assert_eq!(all.get(store_key(kg, h, &k).as_slice()), Some(&None));
}

/// Random updates, removals and reads over 2,000 keys with a 40-entry cache (a generation is
/// frozen every 5 new keys, so most writes read a pending generation or the store), with and
/// without a TTL, compared with the heap backend after every operation; at every barrier the
/// snapshot and the delta (changes tracked) are held while 1,000 more operations run and
/// write back, then encoded: the full snapshot must equal the heap's at that barrier and the
/// previous barrier's base plus the delta must restore to it; finally both backends restore
/// each other's blocks.
#[test]
fn a_disk_state_whose_cache_freezes_all_the_time_equals_the_heap_state_at_every_barrier() {
    let all = key_group_range(0, 1, MAX_P);
    for ttl in [None, Some(StateTtl::new(Duration::from_millis(5_000)))] {
        let dir = tempfile::tempdir().unwrap();
        let mut disk = open_disk(&dir, "count-0", all, ttl, 40);
        disk.track_changes();
        let mut heap = HeapKeyedState::<i64>::new(all, ttl);
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let mut now = 1_000u64;
        let mut base: Option<Vec<KeyGroupBlock>> = None;
        let mut held = None;
        let mut barriers = 0;
        for op in 1..=20_000u64 {
            now += rng.next(3);
            // Skewed keys: half the operations on 50 hot keys, the rest over 2,000.
            let i = if rng.next(2) == 0 {
                rng.next(50)
            } else {
                rng.next(2_000)
            };
            let (kg, h, k) = at(i);
            match rng.next(10) {
                0 => {
                    // With a TTL the backends clean expired entries in different orders, so
                    // whether an expired key was still held may differ; the state may not.
                    let (on_disk, on_heap) = (disk.remove(kg, h, &k).unwrap(), heap.remove(kg, h, &k));
                    if ttl.is_none() {
                        assert_eq!(on_disk, on_heap, "remove {i}");
                    }
                }
                1 | 2 => assert_eq!(disk.get(kg, h, &k, now).unwrap(), heap.get(kg, h, &k, now).copied()),
                _ => assert_eq!(add(&mut disk, i, 1, now), heap_add(&mut heap, i, 1, now)),
            }
            if op % 997 == 0 {
                disk.maintain(now, 100).unwrap();
                heap.maintain(now, 100);
            }
            if op % 1_511 == 0 {
                assert_same_groups(&disk, &heap, now, &format!("op {op}, ttl {ttl:?}"));
            }
            if op % 2_003 == 0 {
                // The barrier: the disk's changes since the last one, two disk snapshots of
                // it (one for the full encode, one for the delta) and the heap's, all held.
                let changes = disk.take_changes();
                let (full, for_delta) = (disk.snapshot(now), disk.snapshot(now));
                held = Some((full, for_delta, heap.snapshot(now), changes, now));
            }
            if op % 2_003 == 1_000
                && let Some((full, for_delta, heap_snapshot, changes, at_barrier)) = held.take()
            {
                let expected = decode(&heap_snapshot.encode().unwrap());
                let full = full.encode().unwrap();
                assert_eq!(decode(&full), expected, "barrier at op {}, ttl {ttl:?}", op - 1_000);
                if let Some(mut chain) = base.take() {
                    chain.extend(for_delta.encode_delta(&changes).unwrap());
                    assert_eq!(restored_chain(chain, ttl, at_barrier), expected, "delta, ttl {ttl:?}");
                }
                base = Some(full);
                barriers += 1;
            }
        }
        assert!(barriers >= 9);
        let from_disk = disk.snapshot(now).encode().unwrap();
        let from_heap = heap.snapshot(now).encode().unwrap();
        assert_eq!(decode(&from_disk), decode(&from_heap), "ttl {ttl:?}");
        // Both ways across backends.
        let mut heap_again = HeapKeyedState::<i64>::new(all, ttl);
        heap_again.restore(from_disk.clone(), now).unwrap();
        assert_eq!(decode(&heap_again.snapshot(now).encode().unwrap()), decode(&from_heap));
        let mut disk_again = open_disk(&dir, "count-1", all, ttl, 40);
        disk_again.restore(from_heap.clone(), now).unwrap();
        assert_eq!(decode(&disk_again.snapshot(now).encode().unwrap()), decode(&from_heap));
    }
}

/// With the write-back thread held, two barriers' generations stay pending while later
/// writes overwrite, remove and expire their keys; the snapshots, encoded only after every
/// write-back is done and more writes went to the store, hold the state at their barriers
/// (as the heap backend's), full and as a delta, and restore to it on disk.
#[test]
fn a_snapshot_taken_while_write_backs_are_pending_restores_the_state_at_its_barrier() {
    let all = key_group_range(0, 1, MAX_P);
    for ttl in [None, Some(StateTtl::new(Duration::from_millis(1_000)))] {
        let dir = tempfile::tempdir().unwrap();
        // 4,000 entries: a generation of 500, and the two barriers' below the pending bound.
        let mut disk = open_disk(&dir, "count-0", all, ttl, 4_000);
        disk.track_changes();
        let mut heap = HeapKeyedState::<i64>::new(all, ttl);
        // Keys 0..300 in the store (written back), then the thread held.
        for i in 0..300 {
            add(&mut disk, i, 1, 0);
            heap_add(&mut heap, i, 1, 0);
        }
        drop(disk.snapshot(0));
        disk.wait_for_write_back();
        disk.pause_write_back(true);
        // Interval 1: keys 200..600 written at 500 (200..300 over the store's), 0..50 removed.
        for i in 200..600 {
            add(&mut disk, i, 10, 500);
            heap_add(&mut heap, i, 10, 500);
        }
        for i in 0..50 {
            let (kg, h, k) = at(i);
            assert_eq!(disk.remove(kg, h, &k).unwrap(), heap.remove(kg, h, &k));
        }
        let _ = disk.take_changes();
        let first = (disk.snapshot(900), heap.snapshot(900));
        // Interval 2 (the first barrier's generation pending): keys 250..350 written again,
        // 500..550 removed (tombstones over the pending generation), 0..10 written again
        // (over a pending tombstone), 700..750 new; at 1,100 keys written at 0 expired.
        for i in (250..350).chain(0..10).chain(700..750) {
            add(&mut disk, i, 100, 1_100);
            heap_add(&mut heap, i, 100, 1_100);
        }
        for i in 500..550 {
            let (kg, h, k) = at(i);
            assert_eq!(disk.remove(kg, h, &k).unwrap(), heap.remove(kg, h, &k));
        }
        let changes = disk.take_changes();
        let second = (disk.snapshot(1_200), disk.snapshot(1_200), heap.snapshot(1_200));
        assert_eq!(disk.cached_entries().1, 2, "both barriers' generations pending");
        // A key group's entries: the store under two pending generations, then writes and
        // tombstones in the current one over them.
        assert_same_groups(&disk, &heap, 1_200, &format!("two pending, ttl {ttl:?}"));
        for i in (0..5).chain(260..270).chain(520..530).chain(900..910) {
            add(&mut disk, i, 7, 1_250);
            heap_add(&mut heap, i, 7, 1_250);
        }
        for i in (5..8).chain(270..275).chain(700..705) {
            let (kg, h, k) = at(i);
            assert_eq!(disk.remove(kg, h, &k).unwrap(), heap.remove(kg, h, &k));
        }
        assert!(disk.cached_entries().0 > 0, "writes in the current generation");
        assert_same_groups(&disk, &heap, 1_250, &format!("two pending and current, ttl {ttl:?}"));
        assert_eq!(
            in_store(&disk, 250),
            Some(1),
            "the store does not hold pending writes yet"
        );
        // After the barriers: everything overwritten and written back.
        disk.pause_write_back(false);
        for i in 0..800 {
            add(&mut disk, i, 1_000, 1_300);
        }
        drop(disk.snapshot(1_300));
        disk.wait_for_write_back();
        assert_eq!(in_store(&disk, 250), Some(1_111));

        let first_blocks = first.0.encode().unwrap();
        assert_eq!(
            decode(&first_blocks),
            decode(&first.1.encode().unwrap()),
            "first, ttl {ttl:?}"
        );
        let expected = decode(&second.2.encode().unwrap());
        let second_blocks = second.0.encode().unwrap();
        assert_eq!(decode(&second_blocks), expected, "second, ttl {ttl:?}");
        let mut chain = first_blocks;
        chain.extend(second.1.encode_delta(&changes).unwrap());
        assert_eq!(restored_chain(chain, ttl, 1_200), expected, "delta, ttl {ttl:?}");
        let mut restored = open_disk(&dir, "count-1", all, ttl, 4_000);
        restored.restore(second_blocks, 1_200).unwrap();
        assert_eq!(decode(&restored.snapshot(1_200).encode().unwrap()), expected);
    }
}

/// A read while write-backs are pending sees the newest write: of the current generation,
/// else the newest pending one, also a removal (a tombstone), never the store's older value.
#[test]
fn a_read_during_a_pending_write_back_sees_the_newest_value() {
    let all = key_group_range(0, 1, MAX_P);
    let dir = tempfile::tempdir().unwrap();
    let mut disk = open_disk(&dir, "count-0", all, None, 4_000);
    add(&mut disk, 1, 1, 0);
    add(&mut disk, 2, 1, 0);
    drop(disk.snapshot(0));
    disk.wait_for_write_back();
    disk.pause_write_back(true);
    add(&mut disk, 1, 10, 1);
    add(&mut disk, 2, 10, 1);
    drop(disk.snapshot(1));
    add(&mut disk, 1, 100, 2);
    drop(disk.snapshot(2));
    // Key 1: 1 in the store, 11 and 111 pending; key 2: 1 in the store, 11 pending, removed
    // in the current generation.
    let (kg, h, k) = at(2);
    assert!(disk.remove(kg, h, &k).unwrap());
    assert_eq!((in_store(&disk, 1), get(&disk, 1, 3)), (Some(1), Some(111)));
    assert_eq!((in_store(&disk, 2), get(&disk, 2, 3)), (Some(1), None));
    assert!(!disk.remove(kg, h, &k).unwrap(), "removed already");
    assert_eq!(add(&mut disk, 1, 1_000, 3), 1_111);
    assert_eq!(disk.len(), 1);
    // The tombstone pending too, then everything written back: the store agrees.
    drop(disk.snapshot(3));
    assert_eq!(get(&disk, 2, 3), None);
    disk.pause_write_back(false);
    drop(disk.snapshot(4));
    disk.wait_for_write_back();
    assert_eq!((in_store(&disk, 1), in_store(&disk, 2)), (Some(1_111), None));
    assert_eq!((get(&disk, 1, 5), get(&disk, 2, 5)), (Some(1_111), None));
}

/// A store of key group 0 with a TTL of 1,000 ms and a write-back cache of `cache_bytes`:
/// keys 0..10 written at 0 ms (count 1), snapshotted and written back into the store.
fn ten_keys_written_back_with_a_ttl(dir: &tempfile::TempDir, cache_bytes: u64) -> DiskKeyedState<i64> {
    let ttl = Some(StateTtl::new(Duration::from_millis(1_000)));
    let mut disk = open_disk(dir, "count-0", key_group_range(0, 1, MAX_P), ttl, cache_bytes);
    for i in 0..10 {
        add(&mut disk, i, 1, 0);
    }
    drop(disk.snapshot(0));
    disk.wait_for_write_back();
    disk
}

/// TTL through pending generations: a key whose store entry expired but whose pending
/// write is live stays; one whose pending write expired too is removed by a tombstone (its
/// write-back must not bring it back); keys only the store holds are removed from it.
#[test]
fn ttl_cleanup_through_pending_generations_is_exact() {
    let dir = tempfile::tempdir().unwrap();
    let mut disk = ten_keys_written_back_with_a_ttl(&dir, 4_000);
    disk.pause_write_back(true);
    // Key 0 live until 1,900 (pending), key 1 until 1,100 (pending); keys 2..10 until 1,000.
    add(&mut disk, 0, 1, 900);
    add(&mut disk, 1, 1, 100);
    drop(disk.snapshot(900));
    disk.maintain(1_200, 100).unwrap();
    assert_eq!(disk.len(), 1, "keys 1..10 expired and cleaned");
    assert_eq!((get(&disk, 0, 1_200), get(&disk, 1, 1_200)), (Some(2), None));
    assert_eq!(in_store(&disk, 2), None, "only in the store: removed from it");
    let blocks = disk.snapshot(1_200).encode().unwrap();
    assert_eq!(decode(&blocks).len(), 1);
    disk.pause_write_back(false);
    drop(disk.snapshot(1_200));
    disk.wait_for_write_back();
    assert_eq!(in_store(&disk, 1), None, "the tombstone's write-back removed it");
    assert_eq!(in_store(&disk, 0), Some(2));
    // A key written again after expiring starts over.
    assert_eq!(add(&mut disk, 1, 5, 1_300), 5);
    assert_eq!(disk.len(), 2);
}

/// The cache's bytes (current generation and pending ones) never exceed its budget, whatever
/// the write-back thread's pace, and a budget of 0 writes straight into the store.
#[test]
fn the_cache_holds_at_most_its_budget_and_a_zero_budget_writes_through() {
    let all = key_group_range(0, 1, MAX_P);
    let dir = tempfile::tempdir().unwrap();
    let entries = 200;
    let budget = entries * entry_bytes::<i64>(&key(1));
    let mut disk = open_disk(&dir, "count-0", all, None, entries);
    let mut rng = Rng(7);
    for op in 0..20_000u64 {
        add(&mut disk, rng.next(10_000), 1, op);
        if op % 3_001 == 0 {
            drop(disk.snapshot(op));
        }
        let (_, _, bytes) = disk.cached_entries();
        assert!(bytes <= budget, "{bytes} bytes held, budget {budget}");
    }
    let mut through = open_disk(&dir, "count-1", all, None, 0);
    add(&mut through, 7, 3, 0);
    assert_eq!(through.cached_entries(), (0, 0, 0));
    assert_eq!(in_store(&through, 7), Some(3));
}

/// Values that own memory are counted by their heap bytes
/// ([`DiskKeyedState::count_value_bytes`]): lists that grow in place in the current
/// generation freeze it at its share of the budget (their write-back puts them in the store),
/// and the bytes counted never exceed the budget. Uncounted, the same 20 lists stay in the
/// current generation, counted as 20 small entries, while they hold over twice the budget.
#[test]
fn values_that_grow_in_place_are_counted_against_the_budget() {
    let all = key_group_range(0, 1, MAX_P);
    let dir = tempfile::tempdir().unwrap();
    let budget = 64 * 1024;
    let options = DiskStateOptions {
        write_cache_bytes: budget,
        ..DiskStateOptions::default()
    };
    fn list_bytes(list: &Vec<u64>) -> u64 {
        (list.capacity() * std::mem::size_of::<u64>()) as u64
    }
    for counted in [false, true] {
        let opened =
            DiskKeyedState::<Vec<u64>>::open(&dir.path().join(format!("lists-{counted}")), all, None, options).unwrap();
        let mut disk = if counted {
            opened.count_value_bytes(list_bytes)
        } else {
            opened
        };
        let mut lists = BTreeMap::new();
        for op in 0..20_000u64 {
            let i = op % 20;
            let (kg, h, k) = at(i);
            let list = disk
                .update(kg, h, &k, op, |old| {
                    let mut list = old.cloned().unwrap_or_default();
                    list.push(op);
                    list
                })
                .unwrap();
            lists.insert(i, list_bytes(&list));
            let (_, _, bytes) = disk.cached_entries();
            if counted {
                assert!(bytes <= budget, "{bytes} bytes counted, budget {budget}");
            }
        }
        disk.wait_for_write_back();
        let (kg, h, k) = at(0);
        let stored = disk.read(&store_key(kg, h, &k)).unwrap().map(|(list, _)| list.len());
        let held: u64 = lists.values().sum();
        assert!(held > 2 * budget, "the lists hold {held} bytes");
        if counted {
            assert!(stored.is_some_and(|n| n > 0), "generations frozen and written back");
        } else {
            assert_eq!(stored, None, "never frozen: counted as {:?}", disk.cached_entries());
        }
    }
}

/// A failed write-back (a full disk, a poisoned store) fails every later batch and snapshot,
/// and its generation stays readable: no checkpoint after the failure can complete without
/// its writes (before, the failure was reported once, by one declined checkpoint, and the
/// next checkpoint completed without the lost writes).
#[test]
fn a_failed_write_back_fails_every_later_batch_and_snapshot() {
    let all = key_group_range(0, 1, MAX_P);
    let dir = tempfile::tempdir().unwrap();
    let mut disk = open_disk(&dir, "count-0", all, None, 4_000);
    add(&mut disk, 1, 1, 0);
    drop(disk.snapshot(0));
    disk.wait_for_write_back();
    disk.fail_next_write_back();
    add(&mut disk, 5, 5, 1);
    add(&mut disk, 1, 10, 1);
    // The barrier freezes the generation holding both writes; its write-back fails (the
    // snapshot at this barrier may already see the failure: the write-back thread is fast).
    drop(disk.snapshot(1));
    let mut waited = 0;
    let first = loop {
        match disk.maintain(2, 1) {
            Err(e) => break e.to_string(),
            Ok(_) => {
                std::thread::sleep(Duration::from_millis(5));
                waited += 1;
                assert!(waited < 2_000, "the write-back's failure never reached the task");
            }
        }
    };
    assert!(first.contains("injected write-back failure"), "{first}");
    for attempt in 0..3 {
        let e = disk
            .snapshot(3)
            .encode()
            .expect_err("a snapshot after a failed write-back");
        assert!(e.to_string().contains("injected write-back failure"), "{e}");
        let e = disk.maintain(3, 1).expect_err("a batch after a failed write-back");
        assert!(
            e.to_string().contains("injected write-back failure"),
            "attempt {attempt}: {e}"
        );
    }
    assert_eq!(
        (get(&disk, 5, 3), get(&disk, 1, 3)),
        (Some(5), Some(11)),
        "the failed generation is still read"
    );
    assert_eq!(in_store(&disk, 5), None, "it never reached the store");
}

/// Incremental TTL cleanup examines each store entry at most once per call: its budget is
/// capped by the live count, which with the cache also counts keys only the cache holds, so
/// it can exceed the store's entries; a pass that wrapped around stops where it started (it
/// examined the first keys again and counted their removal twice, so the count drifted low).
#[test]
fn a_cleanup_pass_that_wraps_examines_no_store_entry_twice() {
    let dir = tempfile::tempdir().unwrap();
    let mut disk = ten_keys_written_back_with_a_ttl(&dir, 40_000);
    // A thousand live keys the cache alone holds (its current generation).
    for i in 100..1_100 {
        add(&mut disk, i, 1, 1_100);
    }
    assert_eq!(
        disk.cached_entries().1,
        0,
        "no generation pending: the new keys are in the current one"
    );
    assert_eq!(disk.len(), 1_010);
    // One record's worth (5 entries), then a budget larger than the store's 5 left.
    disk.maintain(1_500, 1).unwrap();
    assert_eq!(disk.len(), 1_005);
    disk.maintain(1_500, 100).unwrap();
    assert_eq!(disk.len(), 1_000, "the ten expired keys each counted once");
    for i in 0..10 {
        assert_eq!((get(&disk, i, 1_500), in_store(&disk, i)), (None, None), "key {i}");
    }
    assert_eq!(get(&disk, 500, 1_500), Some(1));
}

/// The galloping cursors a delta looks its sorted keys up with find what one binary search
/// per generation ([`overlay_write`]) finds: newest write first, removals as `Some(None)`,
/// over generations of very different sizes and keys looked up sparsely or densely.
#[test]
fn overlay_cursors_find_the_newest_write_of_each_key_in_order() {
    let mut rng = Rng(0xD1B5_4A32_D192_ED03);
    for (generations, keys, lookups) in [(1, 50, 10), (3, 2_000, 40), (4, 2_000, 1_500), (6, 300, 300)] {
        let overlays: Vec<Arc<dyn EncodedWrites>> = (0..generations)
            .map(|g| {
                let mut generation = Generation::<i64>::default();
                let size = 1 + rng.next(keys);
                let mut seen = std::collections::HashSet::new();
                for _ in 0..size {
                    let i = rng.next(keys);
                    if !seen.insert(i) {
                        continue;
                    }
                    let (kg, h, k) = at(i);
                    let value = (rng.next(5) != 0).then_some(g as i64 * 1_000 + i as i64);
                    generation.insert(
                        CachedEntry {
                            key: k,
                            key_group: kg,
                            hash: h,
                            value,
                            written_ms: g,
                        },
                        0,
                    );
                }
                Arc::new(FrozenGeneration::new(generation)) as Arc<dyn EncodedWrites>
            })
            .collect();
        let mut wanted: Vec<Vec<u8>> = (0..lookups)
            .map(|_| {
                let (kg, h, k) = at(rng.next(keys + 100));
                store_key(kg, h, &k)
            })
            .collect();
        wanted.sort();
        wanted.dedup();
        let mut cursors = OverlayCursors::new(&overlays);
        for key in &wanted {
            assert_eq!(
                cursors.newest_write(key),
                overlay_write(&overlays, key),
                "{generations} generations"
            );
        }
    }
}

/// With changes tracked, generations stay after their write-back (up to the budget) and a
/// delta reads changed keys from them; a removal of a key only the store and a kept
/// generation hold, and a TTL cleanup of one, go through the cache as tombstones, so the
/// delta says removed (a removal straight from the store would leave the kept generation's
/// older write to the delta).
#[test]
fn a_delta_read_from_kept_generations_sees_removals_and_cleanups_after_them() {
    let all = key_group_range(0, 1, MAX_P);
    let ttl = Some(StateTtl::new(Duration::from_millis(1_000)));
    let dir = tempfile::tempdir().unwrap();
    // 100 entries: a generation every 12 or so new keys, kept up to 100 entries' bytes.
    let mut disk = open_disk(&dir, "count-0", all, ttl, 100);
    disk.track_changes();
    let mut heap = HeapKeyedState::<i64>::new(all, ttl);
    for i in 0..40 {
        add(&mut disk, i, 1, 0);
        heap_add(&mut heap, i, 1, 0);
    }
    let _ = disk.take_changes();
    let base = disk.snapshot(0).encode().unwrap();
    assert_eq!(decode(&base), decode(&heap.snapshot(0).encode().unwrap()));
    // Interval: keys 0..30 written at 500 (generations frozen and written back, several
    // kept), keys 40..45 written at 0 (expire at 1,000).
    for i in 0..30 {
        add(&mut disk, i, 10, 500);
        heap_add(&mut heap, i, 10, 500);
    }
    for i in 40..45 {
        add(&mut disk, i, 1, 0);
        heap_add(&mut heap, i, 1, 0);
    }
    drop(disk.snapshot(500));
    disk.wait_for_write_back();
    disk.maintain(500, 0).unwrap();
    let (kept, kept_bytes) = disk.kept_generations();
    assert!(kept >= 2, "{kept} generations kept");
    assert!(
        kept_bytes <= 100 * entry_bytes::<i64>(&key(1)),
        "kept within the budget"
    );
    // Keys 20..25 are in the store and in a kept generation only: removed.
    for i in 20..25 {
        let (kg, h, k) = at(i);
        assert!(disk.remove(kg, h, &k).unwrap());
        assert!(heap.remove(kg, h, &k));
    }
    // At 1,200 keys 30..45 (written at 0) expired: cleanup removes those the store holds,
    // 40..45 among them, kept generations holding their writes at 0.
    disk.maintain(1_200, 1_000).unwrap();
    heap.maintain(1_200, 1_000);
    let changes = disk.take_changes();
    let at_barrier = disk.snapshot(1_200);
    // The same barrier read with the wall clock stepped back to 990 (before keys 40..45
    // expired): cleaned, they are removed all the same, as the store's read view says.
    let stepped_back = disk.snapshot(990);
    // Everything written back before the delta is encoded.
    drop(disk.snapshot(1_200));
    disk.wait_for_write_back();
    assert_eq!(in_store(&disk, 21), None, "the tombstone's write-back removed it");
    let expected = decode(&heap.snapshot(1_200).encode().unwrap());
    let mut chain = base;
    chain.extend(at_barrier.encode_delta(&changes).unwrap());
    assert_eq!(restored_chain(chain, ttl, 1_200), expected);
    let cleaned: Vec<String> = (40..45).map(|i| format!("{:?}", key(i))).collect();
    for block in stepped_back.encode_delta(&changes).unwrap() {
        for (k, value, _) in keyed_block::decode_with_removals::<i64>(&block.data).unwrap() {
            if cleaned.contains(&format!("{k:?}")) {
                assert_eq!(value, None, "cleaned key {k:?} in the delta");
            }
        }
    }
    // Restoring into a store that holds entries drops the kept generations (the store is
    // then written directly).
    disk.write_back_and_clear_cache().unwrap();
    assert_eq!(disk.kept_generations(), (0, 0));
}

/// The cache's hits and misses ([`DiskKeyedState::cache_lookups`]): a key's first record
/// reads the store (a miss), later ones while a generation holds it find it there (hits), as
/// do reads; with the cache off nothing is counted.
#[test]
fn records_that_come_back_to_a_cached_key_count_as_hits() {
    let all = key_group_range(0, 1, MAX_P);
    let dir = tempfile::tempdir().unwrap();
    // The current generation (a share of the budget) holds the 100 keys.
    let mut disk = open_disk(&dir, "count-0", all, None, 10_000);
    assert_eq!(disk.cache_lookups(), Some(Default::default()));
    for round in 0..3 {
        for i in 0..100 {
            add(&mut disk, i, 1, round);
        }
    }
    assert_eq!(get(&disk, 5, 3), Some(3));
    assert_eq!(get(&disk, 5_000, 3), None);
    let want = crate::state::disk::CacheLookups { hits: 201, misses: 101 };
    assert_eq!(disk.cache_lookups(), Some(want));
    let mut through = open_disk(&dir, "count-1", all, None, 0);
    add(&mut through, 7, 3, 0);
    assert_eq!(get(&through, 7, 0), Some(3));
    assert_eq!(through.cache_lookups(), None);
}
