//! Tests of the disk backend's state while its store is created: records are processed in
//! memory, and the handover leaves the store exactly as if every operation had gone to it
//! (values and last write times, removals, restored groups), whether it happens at a batch
//! after the creation ended or because a large set of restored groups waits for the store;
//! a state dropped before the handover drops its store.

use crate::record::Key;
use crate::state::backend::{BackendChoice, KeyedState};
use crate::state::disk::DiskStateOptions;
use crate::state::disk_store;
use crate::state::key_group::{KeyGroupRange, key_group_of_hash, key_group_range, key_hash};
use crate::state::keyed_block;
use crate::state::snapshot::KeyGroupBlock;
use crate::state::ttl::StateTtl;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::mpsc::{Sender, channel};
use std::time::Duration;

const MAX_P: u32 = 8;
const KEYS: i64 = 2_000;

fn key(i: i64) -> Key {
    Key::Str(format!("k{i}").into())
}

fn key_group(i: i64) -> u32 {
    key_group_of_hash(key_hash(&key(i)), MAX_P)
}

fn all() -> KeyGroupRange {
    key_group_range(0, 1, MAX_P)
}

fn ttl() -> Option<StateTtl> {
    Some(StateTtl::new(Duration::from_secs(3600)))
}

fn set(state: &mut KeyedState<i64>, i: i64, value: i64, now: u64) {
    let k = key(i);
    state.update(key_group(i), key_hash(&k), &k, now, |_| value).unwrap();
}

fn remove(state: &mut KeyedState<i64>, i: i64) {
    let k = key(i);
    state.remove(key_group(i), key_hash(&k), &k).unwrap();
}

fn get(state: &KeyedState<i64>, i: i64, now: u64) -> Option<i64> {
    let k = key(i);
    state.get(key_group(i), key_hash(&k), &k, now).unwrap()
}

/// The blocks of a heap state of keys `0..KEYS` (value `i`, written at 1,000 ms, TTL 1 h).
fn restored_blocks() -> Vec<KeyGroupBlock> {
    let mut state = KeyedState::<i64>::open(&BackendChoice::Heap, all(), ttl()).unwrap();
    for i in 0..KEYS {
        set(&mut state, i, i, 1_000);
    }
    state.snapshot(1_000).encode().unwrap()
}

/// Key group → (key, value, last write ms) of full blocks, sorted.
fn entries(blocks: &[KeyGroupBlock]) -> BTreeMap<u32, Vec<(String, i64, Option<u64>)>> {
    let mut out: BTreeMap<u32, Vec<_>> = BTreeMap::new();
    for b in blocks {
        let group = out.entry(b.key_group).or_default();
        for (k, v, written) in keyed_block::decode::<i64>(&b.data).unwrap() {
            group.push((k.to_string(), v, written));
        }
        group.sort();
    }
    out
}

/// A disk state on `dir` whose store's creation waits for the returned sender (a message or
/// its drop).
fn opening(dir: &Path, options: DiskStateOptions) -> (KeyedState<i64>, Sender<()>) {
    let (gate, wait) = channel();
    disk_store::create_early_gated(dir, options, wait);
    let backend = BackendChoice::Disk {
        dir: dir.to_path_buf(),
        options,
    };
    let state = KeyedState::<i64>::open(&backend, all(), ttl()).unwrap();
    assert!(state.is_opening(), "a store still being created is not waited for");
    (state, gate)
}

/// The same operations on a heap state (the reference) and on a disk state whose store is
/// created in the middle of them.
fn operations(state: &mut KeyedState<i64>, blocks: &[KeyGroupBlock], first: u32) {
    // A lazy restore's first group, then writes to it (new values, removals) and new keys.
    let group: Vec<KeyGroupBlock> = blocks.iter().filter(|b| b.key_group == first).cloned().collect();
    state.restore_absent_groups(group, 2_000).unwrap();
    for i in (0..KEYS).filter(|&i| key_group(i) == first) {
        match i % 3 {
            0 => set(state, i, i * 10, 3_000),
            1 => remove(state, i),
            _ => {}
        }
    }
    for i in KEYS..KEYS + 300 {
        set(state, i, -i, 3_500);
    }
}

#[test]
fn records_before_the_store_exists_are_handed_over_to_it_exactly() {
    let dir = tempfile::tempdir().unwrap();
    let blocks = restored_blocks();
    let first = key_group(7);
    let mut reference = KeyedState::<i64>::open(&BackendChoice::Heap, all(), ttl()).unwrap();
    operations(&mut reference, &blocks, first);

    let (mut state, gate) = opening(&dir.path().join("store"), DiskStateOptions::default());
    operations(&mut state, &blocks, first);
    state.maintain(3_600, 1).unwrap();
    assert!(state.is_opening(), "the creation has not ended: no handover, no wait");
    assert_eq!(state.len(), reference.len());
    for i in [6, 7, 9, KEYS + 5] {
        assert_eq!(get(&state, i, 3_600), get(&reference, i, 3_600), "key {i} in memory");
    }

    drop(gate);
    let mut batches = 0;
    while state.is_opening() {
        std::thread::sleep(Duration::from_millis(5));
        state.maintain(3_600, 1).unwrap();
        batches += 1;
        assert!(batches < 12_000, "the store's creation did not end");
    }
    assert_eq!(state.len(), reference.len());
    // The rest of the restore goes into the store as usual.
    let rest: Vec<KeyGroupBlock> = blocks.iter().filter(|b| b.key_group != first).cloned().collect();
    state.restore_absent_groups(rest.clone(), 2_000).unwrap();
    reference.restore_absent_groups(rest, 2_000).unwrap();
    assert_eq!(
        entries(&state.snapshot(4_000).encode().unwrap()),
        entries(&reference.snapshot(4_000).encode().unwrap()),
        "the store holds what memory held (values, last write times, removals) and the rest"
    );
    for i in [6, 7, 9, KEYS + 5, KEYS - 1] {
        assert_eq!(get(&state, i, 4_000), get(&reference, i, 4_000), "key {i} in the store");
    }
}

#[test]
fn a_large_set_of_restored_groups_waits_for_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let blocks = restored_blocks();
    // Write batches of at most 1 KiB: one key group (about 250 keys) is more.
    let small = DiskStateOptions {
        write_buffer_bytes: 4 << 10,
        ..DiskStateOptions::default()
    };
    let (mut state, gate) = opening(&dir.path().join("store"), small);
    set(&mut state, KEYS + 1, 5, 3_000);
    gate.send(()).unwrap();
    state.restore_absent_groups(blocks.clone(), 2_000).unwrap();
    assert!(!state.is_opening(), "the groups went into the store");

    let mut reference = KeyedState::<i64>::open(&BackendChoice::Heap, all(), ttl()).unwrap();
    set(&mut reference, KEYS + 1, 5, 3_000);
    reference.restore_absent_groups(blocks, 2_000).unwrap();
    assert_eq!(state.len(), reference.len());
    assert_eq!(
        entries(&state.snapshot(4_000).encode().unwrap()),
        entries(&reference.snapshot(4_000).encode().unwrap())
    );
}

#[test]
fn finishing_the_opening_waits_for_the_store_and_refuses_changes_tracked_in_memory() {
    let dir = tempfile::tempdir().unwrap();
    let (mut state, gate) = opening(&dir.path().join("store"), DiskStateOptions::default());
    set(&mut state, 1, 1, 3_000);
    gate.send(()).unwrap();
    state.finish_opening(3_000).unwrap();
    assert!(!state.is_opening());
    assert_eq!(get(&state, 1, 3_000), Some(1));
    state.track_changes();
    set(&mut state, 2, 2, 3_000);
    assert_eq!(state.take_changes().len(), 1, "changes tracked in the store");

    let (mut tracked, gate) = opening(&dir.path().join("tracked"), DiskStateOptions::default());
    tracked.track_changes();
    drop(gate);
    let e = tracked.finish_opening(3_000).unwrap_err().to_string();
    assert!(e.contains("changes were tracked before the store was open"), "{e}");
    assert!(e.contains(&dir.path().join("tracked").display().to_string()), "{e}");
}

#[test]
fn a_state_dropped_before_the_handover_drops_its_store() {
    let dir = tempfile::tempdir().unwrap();
    let store_dir = dir.path().join("store");
    let (mut state, gate) = opening(&store_dir, DiskStateOptions::default());
    set(&mut state, 1, 1, 3_000);
    // The start's end drops untaken stores; this one was claimed by the state.
    disk_store::discard_early(dir.path());
    assert!(state.is_opening());
    drop(gate);
    drop(state);
    assert!(!disk_store::is_created_early(&store_dir));
    assert!(!store_dir.exists(), "the store's directory is removed with it");
}

/// Builds while the job is idle (a lazy restore's background builds, one small set at a time)
/// must not decode the whole restored state into memory: memory takes restored groups up to
/// the write-batch bound in all, and none once the creation has ended.
#[test]
fn restored_groups_built_one_at_a_time_go_to_memory_only_up_to_a_bound() {
    let blocks = restored_blocks();
    let groups: Vec<u32> = blocks.iter().map(|b| b.key_group).collect();
    let group_bytes = blocks.iter().map(|b| b.data.len()).max().unwrap();
    // Room for two groups in memory, not for the eight.
    let options = DiskStateOptions {
        write_buffer_bytes: (group_bytes * 2 * 4 + 64) as u64,
        ..DiskStateOptions::default()
    };
    let one = |g: u32| -> Vec<KeyGroupBlock> { blocks.iter().filter(|b| b.key_group == g).cloned().collect() };

    // The creation held back: the first two groups go to memory, the third waits for the
    // store (released from another thread) and hands memory over.
    let dir = tempfile::tempdir().unwrap();
    let (mut state, gate) = opening(&dir.path().join("store"), options);
    state.restore_absent_groups(one(groups[0]), 2_000).unwrap();
    state.restore_absent_groups(one(groups[1]), 2_000).unwrap();
    assert!(state.is_opening(), "two groups fit in memory");
    let release = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(50));
        drop(gate);
    });
    state.restore_absent_groups(one(groups[2]), 2_000).unwrap();
    release.join().unwrap();
    assert!(
        !state.is_opening(),
        "a third group beyond the bound finished the opening"
    );

    // The creation ended: the next group finishes the opening even though it would fit.
    let (mut ended, gate) = opening(&dir.path().join("ended"), options);
    drop(gate);
    while matches!(&ended, KeyedState::DiskOpening(opening) if !opening.is_store_ready()) {
        std::thread::sleep(Duration::from_millis(5));
    }
    ended.restore_absent_groups(one(groups[0]), 2_000).unwrap();
    assert!(
        !ended.is_opening(),
        "a build after the creation ended goes into the store"
    );

    // Either way the state equals the heap backend's.
    for (state, taken) in [(&mut state, 3), (&mut ended, 1)] {
        let mut reference = KeyedState::<i64>::open(&BackendChoice::Heap, all(), ttl()).unwrap();
        for &g in &groups[..taken] {
            reference.restore_absent_groups(one(g), 2_000).unwrap();
        }
        assert_eq!(state.len(), reference.len());
        assert_eq!(
            entries(&state.snapshot(4_000).encode().unwrap()),
            entries(&reference.snapshot(4_000).encode().unwrap())
        );
    }
}
