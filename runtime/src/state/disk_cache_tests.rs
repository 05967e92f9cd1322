//! Tests of the write-back cache: its bound and CLOCK eviction on its own, and the disk
//! backend with a cache small enough to evict all the time against the heap backend
//! (snapshots, restores, TTL, removals, incremental cleanup): every result must be the same.

use super::*;
use crate::state::disk::{DiskKeyedState, DiskStateOptions};
use crate::state::heap::HeapKeyedState;
use crate::state::key_group::{KeyGroupRange, key_group_of_hash, key_group_range, key_hash};
use crate::state::keyed_block;
use crate::state::snapshot::KeyGroupBlock;
use crate::state::ttl::StateTtl;
use std::collections::BTreeMap;
use std::time::Duration;

const MAX_P: u32 = 8;

fn key(i: u64) -> Key {
    if i.is_multiple_of(3) {
        Key::Int(i as i64)
    } else {
        Key::Str(format!("key-{i}").into())
    }
}

fn entry(i: u64, dirty: bool) -> CachedEntry<i64> {
    let k = key(i);
    let h = key_hash(&k);
    CachedEntry::new(k, key_group_of_hash(h, MAX_P), h, Some(i as i64), 0, dirty)
}

#[test]
fn the_cache_stays_under_its_budget_and_hands_over_exactly_the_dirty_entries_it_evicts() {
    let per_entry = entry_bytes::<i64>(&key(1));
    let budget = 100 * per_entry;
    let mut cache = WriteBackCache::<i64>::new(budget);
    let mut written_back = Vec::new();
    for i in 0..1_000u64 {
        cache
            .insert(entry(i, i % 2 == 0), |e| {
                written_back.push(e.value.unwrap());
                Ok::<(), ()>(())
            })
            .unwrap();
        assert!(cache.bytes() <= budget, "{} bytes held, budget {budget}", cache.bytes());
    }
    assert_eq!(cache.len(), 100);
    // Every dirty entry is either still cached (dirty) or was written back, once; no clean one
    // was written back.
    assert!(written_back.iter().all(|v| v % 2 == 0));
    assert_eq!(written_back.len() + cache.dirty(), 500);
    let mut seen = written_back.clone();
    seen.sort_unstable();
    seen.dedup();
    assert_eq!(seen.len(), written_back.len(), "an entry written back twice");
    // Each cached entry is found under its own key, with its own value.
    let mut found = 0;
    for i in 0..1_000u64 {
        let k = key(i);
        if let Some(e) = cache.peek(key_hash(&k), &k) {
            assert_eq!(e.value, Some(i as i64));
            found += 1;
        }
    }
    assert_eq!(found, 100);
    // Dirty entries drained, the cache empty.
    assert_eq!(cache.drain_dirty().len() + written_back.len(), 500);
    assert_eq!((cache.len(), cache.bytes(), cache.dirty()), (0, 0, 0));
}

#[test]
fn an_entry_found_again_survives_the_next_eviction_and_a_zero_budget_writes_through() {
    let per_entry = entry_bytes::<i64>(&key(1));
    let mut cache = WriteBackCache::<i64>::new(3 * per_entry);
    let none = |_: CachedEntry<i64>| Ok::<(), ()>(());
    for i in 0..3 {
        cache.insert(entry(i, false), none).unwrap();
    }
    // Entry 0 is used again: the next insert evicts 1 (the hand passes 0 once), then 2.
    let k0 = key(0);
    assert!(cache.find_for_write(key_hash(&k0), &k0).is_some());
    cache.insert(entry(3, false), none).unwrap();
    let cached = |cache: &WriteBackCache<i64>, i| {
        let k = key(i);
        cache.peek(key_hash(&k), &k).is_some()
    };
    assert!(cached(&cache, 0) && !cached(&cache, 1) && cached(&cache, 2) && cached(&cache, 3));
    let mut through = WriteBackCache::<i64>::new(0);
    let mut written = 0;
    through
        .insert(entry(7, true), |_| {
            written += 1;
            Ok::<(), ()>(())
        })
        .unwrap();
    assert_eq!((written, through.len()), (1, 0));
}

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

fn decode(blocks: &[KeyGroupBlock]) -> BTreeMap<String, (i64, Option<u64>)> {
    let mut out = BTreeMap::new();
    for b in blocks {
        for (k, v, t) in keyed_block::decode::<i64>(&b.data).unwrap() {
            assert!(out.insert(format!("{k:?}"), (v, t)).is_none());
        }
    }
    out
}

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

/// Random updates, removals and reads over 2,000 keys with a 100-entry cache (so most
/// operations evict), with and without a TTL, compared with the heap backend after every
/// operation, then at several snapshots (which write the dirty entries back), and after a
/// restore of the disk blocks into a heap state and of the heap blocks into a disk state.
#[test]
fn a_disk_state_with_a_small_cache_equals_the_heap_state_through_snapshots_and_restores() {
    let all = key_group_range(0, 1, MAX_P);
    for ttl in [None, Some(StateTtl::new(Duration::from_millis(5_000)))] {
        let dir = tempfile::tempdir().unwrap();
        let mut disk = open_disk(&dir, "count-0", all, ttl, 100);
        let mut heap = HeapKeyedState::<i64>::new(all, ttl);
        let mut rng = Rng(0x9E37_79B9_7F4A_7C15);
        let mut now = 1_000u64;
        for op in 0..20_000u64 {
            now += rng.next(3);
            // Skewed keys: half the operations on 50 hot keys, the rest over 2,000.
            let i = if rng.next(2) == 0 {
                rng.next(50)
            } else {
                rng.next(2_000)
            };
            let k = key(i);
            let h = key_hash(&k);
            let kg = key_group_of_hash(h, MAX_P);
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
                _ => {
                    let add = |old: Option<&i64>| old.copied().unwrap_or(0) + 1;
                    assert_eq!(
                        disk.update(kg, h, &k, now, add).unwrap(),
                        heap.update(kg, h, &k, now, add)
                    );
                }
            }
            if op % 997 == 0 {
                disk.maintain(now, 100).unwrap();
                heap.maintain(now, 100);
            }
            if op % 5_003 == 0 {
                let from_disk = disk.snapshot(now).encode().unwrap();
                let from_heap = heap.snapshot(now).encode().unwrap();
                assert_eq!(decode(&from_disk), decode(&from_heap), "op {op}, ttl {ttl:?}");
            }
        }
        let (cached, _, bytes) = disk.cached_entries();
        assert!(cached <= 100 && bytes <= 100 * entry_bytes::<i64>(&key(1)));
        let from_disk = disk.snapshot(now).encode().unwrap();
        let from_heap = heap.snapshot(now).encode().unwrap();
        assert_eq!(decode(&from_disk), decode(&from_heap), "ttl {ttl:?}");
        assert_eq!(disk.cached_entries().1, 0, "a snapshot writes every dirty entry back");
        // Both ways across backends.
        let mut heap_again = HeapKeyedState::<i64>::new(all, ttl);
        heap_again.restore(from_disk.clone(), now).unwrap();
        assert_eq!(decode(&heap_again.snapshot(now).encode().unwrap()), decode(&from_heap));
        let mut disk_again = open_disk(&dir, "count-1", all, ttl, 100);
        disk_again.restore(from_heap.clone(), now).unwrap();
        assert_eq!(decode(&disk_again.snapshot(now).encode().unwrap()), decode(&from_heap));
    }
}

#[test]
fn cached_entries_expire_and_cleanup_removes_expired_cached_entries_but_not_live_ones() {
    let all = key_group_range(0, 1, MAX_P);
    let dir = tempfile::tempdir().unwrap();
    let ttl = Some(StateTtl::new(Duration::from_millis(1_000)));
    let mut disk = open_disk(&dir, "count-0", all, ttl, 1_000);
    let at = |i: u64| {
        let k = key(i);
        let h = key_hash(&k);
        (key_group_of_hash(h, MAX_P), h, k)
    };
    for i in 0..10 {
        let (kg, h, k) = at(i);
        disk.update(kg, h, &k, 0, |_| 1).unwrap();
    }
    // Into the store (clean in the cache), then key 0 written again in the cache only.
    let _ = disk.snapshot(0);
    let (kg, h, k) = at(0);
    disk.update(kg, h, &k, 900, |old| old.copied().unwrap_or(0) + 1)
        .unwrap();
    // At 1,000 ms keys 1..10 expired (still cached), key 0 live.
    assert_eq!(disk.get(kg, h, &k, 1_000).unwrap(), Some(2));
    let (kg1, h1, k1) = at(1);
    assert_eq!(disk.get(kg1, h1, &k1, 1_000).unwrap(), None);
    assert_eq!(
        disk.update(kg1, h1, &k1, 1_000, |old| old.copied().unwrap_or(0) + 5)
            .unwrap(),
        5,
        "an expired cached value starts over"
    );
    assert_eq!(disk.len(), 10);
    disk.maintain(1_000, 100).unwrap();
    // Keys 2..10 expired: gone from the store and the cache; keys 0 and 1 live.
    assert_eq!(disk.len(), 2);
    assert_eq!(disk.cached_entries().0, 2);
    let blocks = disk.snapshot(1_000).encode().unwrap();
    assert_eq!(decode(&blocks).len(), 2);
    // A removed cached key: not held, and left out of the next snapshot.
    assert!(disk.remove(kg, h, &k).unwrap());
    assert!(!disk.remove(kg, h, &k).unwrap());
    assert_eq!(disk.len(), 1);
    assert_eq!(decode(&disk.snapshot(1_000).encode().unwrap()).len(), 1);
}
