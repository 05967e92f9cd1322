//! Tests of disk stores created ahead of a restore: a store created while the files download
//! restores every key exactly (a rescale's split ranges, a chain of base and delta, lazily
//! built groups by write batches and by bulk ingestion), and stores nobody takes are dropped.

use super::*;
use crate::record::Key;
use crate::state::backend::{BackendChoice, KeyedState};
use crate::state::disk::DiskKeyedState;
use crate::state::key_group::{KeyGroupRange, key_group_of_hash, key_group_range, key_hash};
use crate::state::keyed_block;
use crate::state::pending::PendingKeyGroups;
use crate::state::snapshot::KeyGroupBlock;
use crate::state::ttl::StateTtl;
use std::collections::BTreeMap;
use std::time::Duration;

const MAX_P: u32 = 8;
const KEYS: i64 = 3_000;

fn key(i: i64) -> Key {
    if i % 3 == 0 {
        Key::Str(format!("k{i}").into())
    } else {
        Key::Int(i)
    }
}

fn key_group(i: i64) -> u32 {
    key_group_of_hash(key_hash(&key(i)), MAX_P)
}

fn set(state: &mut KeyedState<i64>, i: i64, value: i64, now: u64) {
    let k = key(i);
    let h = key_hash(&k);
    state.update(key_group(i), h, &k, now, |_| value).unwrap();
}

/// The blocks of a job at parallelism 2 (two heap subtasks, a TTL of one hour so entries
/// carry write times): each subtask's base of keys `0..KEYS` (value `i`), then a delta in which
/// keys below 500 became `i + 1000` and multiples of 7 below 500 were removed. Returns the
/// blocks in chain order and the state they restore to (key → value).
fn chained_blocks() -> (Vec<KeyGroupBlock>, BTreeMap<String, i64>) {
    let ttl = Some(StateTtl::new(Duration::from_secs(3600)));
    let mut blocks = Vec::new();
    let mut deltas = Vec::new();
    for subtask in 0..2 {
        let range = key_group_range(subtask, 2, MAX_P);
        let mut state = KeyedState::<i64>::open(&BackendChoice::Heap, range, ttl).unwrap();
        state.track_changes();
        for i in (0..KEYS).filter(|&i| range.contains(key_group(i))) {
            set(&mut state, i, i, 1_000);
        }
        state.take_changes();
        blocks.extend(state.snapshot(1_000).encode().unwrap());
        for i in (0..500).filter(|&i| range.contains(key_group(i))) {
            if i % 7 == 0 {
                let k = key(i);
                state.remove(key_group(i), key_hash(&k), &k).unwrap();
            } else {
                set(&mut state, i, i + 1000, 1_500);
            }
        }
        let changes = state.take_changes();
        deltas.extend(state.snapshot(1_500).encode_delta(&changes).unwrap());
    }
    blocks.extend(deltas);
    let expected = (0..KEYS)
        .filter(|&i| i >= 500 || i % 7 != 0)
        .map(|i| (key(i).to_string(), if i < 500 { i + 1000 } else { i }))
        .collect();
    (blocks, expected)
}

/// Key → value of full blocks, each key once.
fn decoded(blocks: &[KeyGroupBlock]) -> BTreeMap<String, i64> {
    let mut out = BTreeMap::new();
    for b in blocks {
        for (k, v, _) in keyed_block::decode::<i64>(&b.data).unwrap() {
            assert_eq!(key_group_of_hash(key_hash(&k), MAX_P), b.key_group);
            assert!(out.insert(k.to_string(), v).is_none(), "{k:?} twice");
        }
    }
    out
}

/// A store whose creation started before the restore's download (as a run does) is the one
/// the subtask opens, and restores every key exactly: at parallelism 1 and at 3 (a rescale
/// from 2: the new ranges split the old ones), from a chain of bases and deltas, the group of
/// the first record built first and the rest later: every build through the write buffer,
/// every build by bulk ingestion (a write buffer so small), and the first group by a write
/// batch with the rest ingested.
#[test]
fn a_store_created_during_the_download_restores_every_key_exactly_at_a_rescale() {
    let (blocks, expected) = chained_blocks();
    let root = tempfile::tempdir().unwrap();
    let batched = DiskStateOptions::default();
    let ingested = DiskStateOptions {
        write_buffer_bytes: 1,
        ..DiskStateOptions::default()
    };
    // The first record's group by a write batch, the rest (more bytes) by one ingestion.
    let mut group_bytes = BTreeMap::<u32, usize>::new();
    for b in &blocks {
        *group_bytes.entry(b.key_group).or_default() += b.data.len();
    }
    let largest_group = *group_bytes.values().max().unwrap();
    let mixed = DiskStateOptions {
        write_buffer_bytes: 4 * largest_group as u64,
        ..DiskStateOptions::default()
    };
    let total: usize = group_bytes.values().sum();
    assert!(total <= crate::state::disk::batch_build_bytes(&batched));
    assert_eq!(crate::state::disk::batch_build_bytes(&ingested), 0);
    assert_eq!(crate::state::disk::batch_build_bytes(&mixed), largest_group);
    assert!(total > 3 * largest_group, "the rest of a subtask's groups is ingested");
    for (how, options) in [("batches", batched), ("ingestion", ingested), ("mixed", mixed)] {
        for p in [1, 3] {
            let ranges: Vec<KeyGroupRange> = (0..p).map(|i| key_group_range(i, p, MAX_P)).collect();
            let dirs: Vec<_> = (0..p).map(|i| root.path().join(format!("{how}-{p}/agg-{i}"))).collect();
            // The run starts every store's creation, then downloads (here: nothing to wait for).
            for dir in &dirs {
                create_early(dir, options);
                assert!(is_created_early(dir));
            }
            let mut restored = BTreeMap::new();
            let mut held = 0;
            for (range, dir) in ranges.iter().zip(&dirs) {
                let mut state = KeyedState::Disk(DiskKeyedState::<i64>::open(dir, *range, None, options).unwrap());
                assert!(!is_created_early(dir), "{how} p={p}: the early store is taken");
                let mut pending = PendingKeyGroups::new(*range, blocks.clone(), 2_000).unwrap();
                // The first record's key group, then the rest.
                if let Some(first) = (0..KEYS).map(key_group).find(|kg| range.contains(*kg)) {
                    pending.build(&mut state, [first]).unwrap();
                }
                pending.build_all(&mut state).unwrap();
                held += state.len();
                let blocks = state.snapshot(2_000).encode().unwrap();
                assert!(blocks.iter().all(|b| range.contains(b.key_group)));
                restored.extend(decoded(&blocks));
            }
            assert_eq!(restored, expected, "{how} p={p}");
            assert_eq!(held, expected.len(), "{how} p={p}: entry count");
        }
    }
}

/// A store started early with other options is replaced by one with the subtask's options;
/// stores nobody takes are dropped with their directories, those under other roots kept.
#[test]
fn early_stores_with_other_options_are_replaced_and_untaken_ones_discarded() {
    let root = tempfile::tempdir().unwrap();
    let other_root = tempfile::tempdir().unwrap();
    let range = key_group_range(0, 1, MAX_P);
    let dir = root.path().join("run/agg-0");
    create_early(&dir, DiskStateOptions::default());
    let small = DiskStateOptions {
        cache_bytes: 1 << 20,
        write_buffer_bytes: 1 << 20,
        ..DiskStateOptions::default()
    };
    let mut state = KeyedState::Disk(DiskKeyedState::<i64>::open(&dir, range, None, small).unwrap());
    set(&mut state, 1, 5, 1_000);
    let k = key(1);
    assert_eq!(state.get(key_group(1), key_hash(&k), &k, 1_000).unwrap(), Some(5));

    let untaken = root.path().join("run/agg-1");
    let elsewhere = other_root.path().join("run/agg-0");
    create_early(&untaken, DiskStateOptions::default());
    create_early(&elsewhere, DiskStateOptions::default());
    {
        let _guard = DiscardEarlyOnDrop::new(&root.path().join("run"));
    }
    assert!(!is_created_early(&untaken));
    assert!(!untaken.exists(), "a discarded store's directory is removed");
    assert!(is_created_early(&elsewhere), "only stores under the root are discarded");
    discard_early(other_root.path());
    assert!(!elsewhere.exists());
    assert!(dir.exists(), "the taken store is left alone");
}
