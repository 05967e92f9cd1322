//! Table tests of the pending-key-group layer: first access, checkpoints while groups are
//! pending, rescale, and lazily built state equal to eagerly restored state on both backends.

use super::*;
use crate::record::Key;
use crate::state::backend::BackendChoice;
use crate::state::disk::DiskStateOptions;
use crate::state::key_group::{key_group_of_hash, key_group_range, key_hash};
use crate::state::ttl::StateTtl;
use std::collections::BTreeMap;
use std::time::Duration;

const MAX_P: u32 = 8;

fn block(key_group: u32, data: Vec<u8>, entries: u64) -> KeyGroupBlock {
    KeyGroupBlock {
        expired_through_ms: None,
        key_group,
        entries,
        data: data.into(),
    }
}

fn full_v1(key_group: u32) -> KeyGroupBlock {
    let (k, v) = (Key::Int(i64::from(key_group)), 1i64);
    block(key_group, keyed_block::encode_v1(&[(&k, &v)]).unwrap(), 1)
}

fn full_v2(key_group: u32) -> KeyGroupBlock {
    let (k, v) = (Key::Int(i64::from(key_group)), 1i64);
    block(key_group, keyed_block::encode_v2(&[(&k, &v, 5)]).unwrap(), 1)
}

fn delta(key_group: u32) -> KeyGroupBlock {
    let (k, v) = (Key::Int(i64::from(key_group)), 2i64);
    block(key_group, keyed_block::encode_delta(&[(&k, Some(&v), 6)]).unwrap(), 1)
}

fn groups(blocks: &[KeyGroupBlock]) -> Vec<u32> {
    blocks.iter().map(|b| b.key_group).collect()
}

#[test]
fn first_access_takes_only_the_touched_groups_once() {
    let range = KeyGroupRange { start: 2, end: 5 };
    let blocks = vec![full_v1(2), full_v1(3), delta(3), full_v1(5), full_v1(7)];
    let mut pending = PendingKeyGroups::new(range, blocks, 0).unwrap();
    assert_eq!(
        (pending.len(), pending.pending_entries()),
        (3, 4),
        "key group 7 is not owned"
    );
    // (touched key groups, blocks taken, groups pending after)
    let table: [(&[u32], &[u32], usize); 5] = [
        (&[5, 5], &[5], 2),
        (&[5, 7, 1], &[], 2),
        (&[4], &[], 2),
        (&[3, 2], &[3, 3, 2], 0),
        (&[2, 3, 5], &[], 0),
    ];
    for (touched, taken, left) in table {
        let got = pending.take(touched.iter().copied());
        assert_eq!(groups(&got), taken, "touching {touched:?}");
        assert_eq!(pending.len(), left, "after {touched:?}");
    }
    assert!(pending.is_empty() && pending.pending_entries() == 0);
}

#[test]
fn groups_are_built_a_few_at_a_time_in_key_group_order() {
    let range = KeyGroupRange { start: 0, end: 5 };
    let mut pending = PendingKeyGroups::new(range, (0..6).map(full_v1).collect(), 0).unwrap();
    assert_eq!(groups(&pending.take([3])), [3]);
    assert_eq!(groups(&pending.take_next(2)), [0, 1]);
    assert_eq!(groups(&pending.take_next(2)), [2, 4]);
    assert_eq!(groups(&pending.take_all()), [5]);
    assert!(pending.take_next(2).is_empty());
}

#[test]
fn a_checkpoint_writes_single_full_blocks_as_they_are_and_builds_the_rest_first() {
    // (blocks of key group 0, step has a TTL, written as they are)
    let bounded = KeyGroupBlock {
        expired_through_ms: Some(5_000),
        ..full_v2(0)
    };
    let table: [(Vec<KeyGroupBlock>, bool, bool); 7] = [
        (vec![full_v1(0)], false, true),
        // Write times into a step without TTL: built, so the snapshot records none (as-is, the
        // old times would expire the keys at once when a later restore adds a TTL).
        (vec![full_v2(0)], false, false),
        // With a TTL every group is built first: a snapshot leaves out entries expired at its
        // barrier, which a block written as it is would keep (and a later restore with a
        // longer TTL would bring back).
        (vec![full_v2(0)], true, false),
        (vec![full_v1(0)], true, false),
        // A block that may hold entries expired when it was written (a chain's base, a native
        // store as blocks) is built first even into a step without TTL now, which is when the
        // block alone would bring them back.
        (vec![bounded], false, false),
        // A chain's base and delta: one full state file holds one block per key group.
        (vec![full_v2(0), delta(0)], false, false),
        (vec![delta(0)], false, false),
    ];
    for (blocks, ttl, as_is) in table {
        let mut pending = PendingKeyGroups::new(KeyGroupRange { start: 0, end: 1 }, blocks.clone(), 0).unwrap();
        let (snapshot, build) = pending.for_snapshot(ttl);
        let written: Vec<KeyGroupBlock> = snapshot.as_is.iter().flat_map(|b| b.iter().cloned()).collect();
        if as_is {
            assert_eq!((written, build.len(), pending.len()), (blocks, 0, 1), "ttl {ttl}");
            // Built later, the group is still the blocks restored.
            assert_eq!(pending.take([0]).len(), 1);
        } else {
            assert_eq!((written.len(), build, pending.len()), (0, blocks, 0), "ttl {ttl}");
        }
    }
}

#[test]
fn merged_blocks_come_in_key_group_order() {
    let mut pending = PendingKeyGroups::new(
        KeyGroupRange { start: 0, end: 7 },
        vec![full_v1(0), full_v1(3), full_v1(7)],
        0,
    )
    .unwrap();
    let (snapshot, _) = pending.for_snapshot(false);
    let mut out = Vec::new();
    snapshot
        .merge_each::<String>(
            |each| [1, 2, 5].into_iter().try_for_each(|kg| each(full_v1(kg))),
            &mut |b| {
                out.push(b.key_group);
                Ok(())
            },
        )
        .unwrap();
    assert_eq!(out, [0, 1, 2, 3, 5, 7]);
}

#[test]
fn rescale_splits_pending_groups_by_the_new_ranges() {
    let blocks: Vec<KeyGroupBlock> = (0..MAX_P).map(full_v1).collect();
    let mut seen = Vec::new();
    for p in [1, 2, 3] {
        seen.clear();
        for i in 0..p {
            let range = key_group_range(i, p, MAX_P);
            let mut pending = PendingKeyGroups::new(range, blocks.clone(), 0).unwrap();
            assert_eq!(pending.len() as u32, range.len());
            let taken = pending.take_all();
            assert!(taken.iter().all(|b| range.contains(b.key_group)));
            seen.extend(groups(&taken));
        }
        assert_eq!(seen, (0..MAX_P).collect::<Vec<_>>(), "parallelism {p}");
    }
}

/// Keyed state of `i64` counts on `backend` for `range` (the directory lives in `dir`).
fn open(backend: &str, dir: &std::path::Path, range: KeyGroupRange, ttl: Option<u64>) -> KeyedState<i64> {
    let choice = match backend {
        "disk" => BackendChoice::Disk {
            dir: dir.join(format!("store-{}", range.start)),
            options: DiskStateOptions::default(),
        },
        _ => BackendChoice::Heap,
    };
    KeyedState::open(&choice, range, ttl.map(|ms| StateTtl::new(Duration::from_millis(ms)))).unwrap()
}

fn key(i: i64) -> Key {
    if i % 3 == 0 {
        Key::Str(format!("k{i}").into())
    } else {
        Key::Int(i)
    }
}

fn add(state: &mut KeyedState<i64>, i: i64, now: u64) {
    let k = key(i);
    let h = key_hash(&k);
    state
        .update(key_group_of_hash(h, MAX_P), h, &k, now, |v| v.copied().unwrap_or(0) + 1)
        .unwrap();
}

fn decoded(blocks: &[KeyGroupBlock]) -> BTreeMap<(u32, String), i64> {
    let mut out = BTreeMap::new();
    for b in blocks {
        for (k, v, _) in keyed_block::decode::<i64>(&b.data).unwrap() {
            assert!(
                out.insert((b.key_group, k.to_string()), v).is_none(),
                "one block per key group"
            );
        }
    }
    out
}

/// Full and delta blocks of 400 keys written at 1,000 ms, keys 0..100 rewritten in a delta.
fn restored_blocks(backend: &str, dir: &std::path::Path) -> Vec<KeyGroupBlock> {
    let mut state = open(backend, dir, key_group_range(0, 1, MAX_P), Some(60_000));
    state.track_changes();
    for i in 0..400 {
        add(&mut state, i, 1_000);
    }
    state.take_changes();
    let mut blocks = state.snapshot(1_000).encode().unwrap();
    for i in 0..100 {
        add(&mut state, i, 1_500);
    }
    let changes = state.take_changes();
    blocks.extend(state.snapshot(1_500).encode_delta(&changes).unwrap());
    blocks
}

/// Restored eagerly, or lazily with a checkpoint while groups are pending and writes to some
/// groups: the same state, the same blocks written, at every parallelism, on both backends.
#[test]
fn lazily_built_state_equals_eagerly_restored_state() {
    for backend in ["heap", "disk"] {
        let dir = tempfile::tempdir().unwrap();
        let blocks = restored_blocks(backend, dir.path());
        // At 61,200 ms the keys last written at 1,000 have expired (TTL 60 s): the restore
        // drops them, a lazy build too (it restores at the restore's time, not its own).
        for (restore_ms, live) in [(2_000, 400), (61_200, 100)] {
            let mut held = 0;
            for p in [1, 2] {
                for i in 0..p {
                    let range = key_group_range(i, p, MAX_P);
                    let eager_dir = dir.path().join(format!("eager-{p}-{restore_ms}"));
                    let lazy_dir = dir.path().join(format!("lazy-{p}-{restore_ms}"));
                    let mut eager = open(backend, &eager_dir, range, Some(60_000));
                    eager.restore(blocks.clone(), restore_ms).unwrap();
                    let mut lazy = open(backend, &lazy_dir, range, Some(60_000));
                    let mut pending = PendingKeyGroups::new(range, blocks.clone(), restore_ms).unwrap();
                    // First access to the key group of key 7, then a checkpoint while the rest
                    // is pending.
                    let kg7 = key_group_of_hash(key_hash(&key(7)), MAX_P);
                    pending.build(&mut lazy, [kg7]).unwrap();
                    let snap = pending.snapshot(&mut lazy, true).unwrap();
                    assert_eq!(pending.len(), 0, "{backend}: every group has a delta: built first");
                    let mut lazy_written = Vec::new();
                    snap.merge_each::<String>(|each| lazy.snapshot(restore_ms).encode_each(each), &mut |b| {
                        lazy_written.push(b);
                        Ok(())
                    })
                    .unwrap();
                    let eager_written = eager.snapshot(restore_ms).encode().unwrap();
                    let what = format!("{backend} p={p} i={i} at {restore_ms}");
                    assert_eq!(decoded(&lazy_written), decoded(&eager_written), "{what}");
                    assert_eq!(lazy.len(), eager.len(), "{what}");
                    if p == 2 {
                        held += decoded(&eager_written).len();
                    }
                }
            }
            assert_eq!(held, live, "{backend} at {restore_ms}");
        }
    }
}

/// Full blocks only: a checkpoint while groups are pending writes them as they are, later
/// writes land in built groups, and a restore of that checkpoint equals the eager path's.
#[test]
fn a_checkpoint_while_groups_are_pending_restores_the_same_state() {
    for backend in ["heap", "disk"] {
        let dir = tempfile::tempdir().unwrap();
        let range = key_group_range(0, 1, MAX_P);
        let mut source = open(backend, &dir.path().join("source"), range, None);
        for i in 0..300 {
            add(&mut source, i, 1_000);
        }
        let blocks = source.snapshot(1_000).encode().unwrap();
        let mut eager = open(backend, &dir.path().join("eager"), range, None);
        eager.restore(blocks.clone(), 2_000).unwrap();
        let mut lazy = open(backend, &dir.path().join("lazy"), range, None);
        let mut pending = PendingKeyGroups::new(range, blocks, 2_000).unwrap();
        for i in [1, 2, 1000] {
            let kg = key_group_of_hash(key_hash(&key(i)), MAX_P);
            pending.build(&mut lazy, [kg]).unwrap();
            add(&mut lazy, i, 2_100);
            add(&mut eager, i, 2_100);
        }
        let left = pending.len();
        assert!(left > 0, "{backend}: some groups still pending");
        let snap = pending.snapshot(&mut lazy, false).unwrap();
        assert_eq!(pending.len(), left, "{backend}: full blocks are written as they are");
        let view = lazy.snapshot(2_200);
        // Building the rest between the snapshot and its encoding changes nothing it writes
        // (heap: the groups were empty, so not frozen; disk: ingested above the read view).
        pending.build_all(&mut lazy).unwrap();
        let mut written = Vec::new();
        snap.merge_each::<String>(|each| view.encode_each(each), &mut |b| {
            written.push(b);
            Ok(())
        })
        .unwrap();
        let eager_written = eager.snapshot(2_200).encode().unwrap();
        assert_eq!(decoded(&written), decoded(&eager_written), "{backend}");
        assert_eq!(
            decoded(&lazy.snapshot(2_300).encode().unwrap()),
            decoded(&eager_written)
        );
    }
}

#[test]
fn a_block_of_an_unknown_version_is_refused_at_the_start() {
    let mut data = crate::state::keyed_block::VERSIONED_PREFIX.to_vec();
    data.push(9);
    let range = KeyGroupRange { start: 0, end: 3 };
    let err = PendingKeyGroups::new(range, vec![full_v1(1), block(2, data.clone(), 1)], 0).unwrap_err();
    assert!(err.contains("key group 2") && err.contains("version 9"), "{err}");
    // Outside the range: dropped unread, as an eager restore skips it.
    assert!(PendingKeyGroups::new(range, vec![block(7, data, 1)], 0).is_ok());
}
