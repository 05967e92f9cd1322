//! Table tests of the copy-on-write heap state and its TTL.

use super::*;
use crate::state::key_group::{key_group_of_hash, key_group_range};
use std::collections::BTreeMap;
use std::time::Duration;

const MAX_P: u32 = 8;

fn key(i: i64) -> Key {
    Key::Int(i)
}

fn state(ttl: Option<Duration>) -> HeapKeyedState<i64> {
    HeapKeyedState::new(key_group_range(0, 1, MAX_P), ttl.map(StateTtl::new))
}

/// Adds `by` to key `i` at `now`, returning the new value.
fn add(s: &mut HeapKeyedState<i64>, i: i64, by: i64, now: u64) -> i64 {
    let k = key(i);
    let h = key_hash(&k);
    s.update(key_group_of_hash(h, MAX_P), h, &k, now, |old| {
        old.copied().unwrap_or(0) + by
    })
}

fn get(s: &HeapKeyedState<i64>, i: i64, now: u64) -> Option<i64> {
    let k = key(i);
    let h = key_hash(&k);
    s.get(key_group_of_hash(h, MAX_P), h, &k, now).copied()
}

fn remove(s: &mut HeapKeyedState<i64>, i: i64) -> bool {
    let k = key(i);
    let h = key_hash(&k);
    s.remove(key_group_of_hash(h, MAX_P), h, &k)
}

/// Decodes encoded blocks into key → value (checking the block's entry counts).
fn decode(blocks: &[KeyGroupBlock]) -> BTreeMap<i64, i64> {
    let mut out = BTreeMap::new();
    for b in blocks {
        let entries = keyed_block::decode::<i64>(&b.data).unwrap();
        assert_eq!(entries.len() as u64, b.entries);
        for (k, v, _) in entries {
            let Key::Int(i) = k else { panic!("int keys only") };
            assert!(out.insert(i, v).is_none(), "key {i} in two blocks");
        }
    }
    out
}

fn map(pairs: &[(i64, i64)]) -> BTreeMap<i64, i64> {
    pairs.iter().copied().collect()
}

/// One step of a scenario.
enum Step {
    Add(i64, i64),
    Remove(i64),
    Snapshot,
    /// Encode snapshot n (0-based, in order taken) and drop it; expect this content.
    Encode(usize, &'static [(i64, i64)]),
    Maintain,
    /// The live state must be exactly this.
    Live(&'static [(i64, i64)]),
    /// Whether every group is owned again (all snapshots released and merged).
    AllOwned(bool),
}

#[test]
fn copy_on_write_snapshot_table() {
    use Step::*;
    let scenarios: Vec<(&str, Vec<Step>)> = vec![
        (
            "a snapshot sees the state as of its barrier while later writes go on",
            vec![
                Add(1, 1),
                Add(2, 1),
                Snapshot,
                Add(1, 10),
                Add(3, 1),
                Remove(2),
                Live(&[(1, 11), (3, 1)]),
                Encode(0, &[(1, 1), (2, 1)]),
                Maintain,
                AllOwned(true),
                Live(&[(1, 11), (3, 1)]),
            ],
        ),
        (
            "no merge while the snapshot is held; merge after release",
            vec![
                Add(1, 1),
                Snapshot,
                Add(1, 1),
                Maintain,
                AllOwned(false),
                Add(1, 1),
                Live(&[(1, 3)]),
                Encode(0, &[(1, 1)]),
                Maintain,
                AllOwned(true),
                Add(1, 1),
                Live(&[(1, 4)]),
            ],
        ),
        (
            "a second snapshot before the first is released",
            vec![
                Add(1, 1),
                Add(2, 5),
                Snapshot,
                Add(1, 1),
                Remove(2),
                Add(4, 4),
                Snapshot,
                Add(1, 1),
                Add(2, 7),
                Add(5, 5),
                Live(&[(1, 3), (2, 7), (4, 4), (5, 5)]),
                Encode(1, &[(1, 2), (4, 4)]),
                Maintain,
                AllOwned(false),
                Encode(0, &[(1, 1), (2, 5)]),
                Maintain,
                AllOwned(true),
                Live(&[(1, 3), (2, 7), (4, 4), (5, 5)]),
            ],
        ),
        (
            "the first snapshot released before the second: the second still sees its barrier",
            vec![
                Add(1, 1),
                Snapshot,
                Add(1, 1),
                Snapshot,
                Add(1, 1),
                Encode(0, &[(1, 1)]),
                Maintain,
                AllOwned(false),
                Add(1, 1),
                Encode(1, &[(1, 2)]),
                Maintain,
                AllOwned(true),
                Live(&[(1, 4)]),
            ],
        ),
        (
            "a key deleted and written again while frozen",
            vec![
                Add(7, 2),
                Snapshot,
                Remove(7),
                Live(&[]),
                Add(7, 3),
                Live(&[(7, 3)]),
                Encode(0, &[(7, 2)]),
                Maintain,
                AllOwned(true),
                Live(&[(7, 3)]),
            ],
        ),
    ];
    for (name, steps) in scenarios {
        let mut s = state(None);
        let mut snapshots: Vec<Option<HeapSnapshot<i64>>> = Vec::new();
        let mut expected_live: BTreeMap<i64, i64> = BTreeMap::new();
        for (n, step) in steps.into_iter().enumerate() {
            let at = format!("{name}, step {n}");
            match step {
                Add(i, by) => {
                    let want = expected_live.get(&i).copied().unwrap_or(0) + by;
                    assert_eq!(add(&mut s, i, by, 0), want, "{at}");
                    expected_live.insert(i, want);
                }
                Remove(i) => {
                    assert_eq!(remove(&mut s, i), expected_live.remove(&i).is_some(), "{at}");
                }
                Snapshot => snapshots.push(Some(s.snapshot(0))),
                Encode(k, want) => {
                    let snap = snapshots[k].take().expect("encoded once");
                    assert_eq!(decode(&snap.encode().unwrap()), map(want), "{at}");
                }
                Maintain => s.maintain(0, 0),
                Live(want) => {
                    assert_eq!(expected_live, map(want), "{at}: the scenario's own bookkeeping");
                    for i in 0..10 {
                        assert_eq!(get(&s, i, 0), expected_live.get(&i).copied(), "{at}: key {i}");
                    }
                    assert_eq!(s.len(), want.len(), "{at}: len");
                }
                AllOwned(want) => assert_eq!(s.shared.is_empty(), want, "{at}"),
            }
        }
    }
}

/// Many keys across all key groups: every snapshot equals a plain map copied at its barrier,
/// whatever the order of writes, snapshots and releases.
#[test]
fn snapshots_match_a_copy_taken_at_the_barrier() {
    let mut s = state(None);
    let mut model: BTreeMap<i64, i64> = BTreeMap::new();
    let mut pending: Vec<(HeapSnapshot<i64>, BTreeMap<i64, i64>)> = Vec::new();
    let mut rng = 7u64;
    for round in 0..40 {
        for _ in 0..500 {
            rng = crate::operators::source::generator::splitmix64(rng);
            let i = (rng % 2000) as i64;
            if rng.is_multiple_of(11) {
                assert_eq!(remove(&mut s, i), model.remove(&i).is_some());
            } else {
                let v = add(&mut s, i, 1, 0);
                *model.entry(i).or_default() += 1;
                assert_eq!(v, model[&i]);
            }
        }
        if round % 3 != 2 {
            pending.push((s.snapshot(0), model.clone()));
        }
        // Release the oldest snapshot every other round, so up to a few are in flight.
        if round % 2 == 1 && !pending.is_empty() {
            let (snap, want) = pending.remove(0);
            assert_eq!(decode(&snap.encode().unwrap()), want, "round {round}");
        }
        s.maintain(0, 0);
        assert_eq!(s.len(), model.len(), "round {round}");
    }
    for (snap, want) in pending.drain(..) {
        assert_eq!(decode(&snap.encode().unwrap()), want);
    }
    s.maintain(0, 0);
    assert!(s.shared.is_empty());
    assert_eq!(decode(&s.snapshot(0).encode().unwrap()), model);
}

#[test]
fn expired_keys_start_over_and_cleanup_shrinks_the_state() {
    let ttl = Duration::from_secs(10);
    let mut s = state(Some(ttl));
    for i in 0..1000 {
        add(&mut s, i, 5, 1_000);
    }
    // Key 0 is written again at 9 s: it lives until 19 s.
    add(&mut s, 0, 1, 9_000);
    assert_eq!(get(&s, 1, 10_999), Some(5), "alive just before the TTL");
    assert_eq!(get(&s, 1, 11_000), None, "expired at written + ttl");
    assert_eq!(add(&mut s, 1, 1, 12_000), 1, "an expired key counts from zero");
    assert_eq!(
        add(&mut s, 0, 1, 12_000),
        7,
        "a key written within the TTL keeps its value"
    );
    assert_eq!(s.len(), 1000, "expired entries are held until cleanup");
    // Incremental cleanup: a little per record, so a few batches remove every expired entry.
    s.maintain(12_000, 30);
    assert!(
        s.len() < 1000 && s.len() > 2,
        "one small batch cleans part of the state: {}",
        s.len()
    );
    for _ in 0..100 {
        s.maintain(12_000, 30);
    }
    assert_eq!(s.len(), 2, "only keys 0 and 1 are live");
    // Snapshot at 20 s: key 0 (written 12 s) and key 1 (12 s) live, nothing else written.
    let blocks = s.snapshot(20_000).encode().unwrap();
    assert_eq!(decode(&blocks), map(&[(0, 7), (1, 1)]));
    // A snapshot drops what expired by its barrier; a restore drops what expired by then.
    let blocks = s.snapshot(22_000).encode().unwrap();
    assert!(decode(&blocks).is_empty(), "both expired at 22 s");
    let mut restored = state(Some(ttl));
    restored.restore(s.snapshot(20_000).encode().unwrap(), 21_999).unwrap();
    assert_eq!(restored.len(), 2);
    let mut late = state(Some(ttl));
    late.restore(s.snapshot(20_000).encode().unwrap(), 22_000).unwrap();
    assert_eq!(late.len(), 0, "restored after the TTL: nothing");
}

#[test]
fn ttl_applies_to_writes_made_while_a_snapshot_is_in_flight() {
    let mut s = state(Some(Duration::from_secs(1)));
    add(&mut s, 1, 4, 0);
    let snap = s.snapshot(0);
    assert_eq!(add(&mut s, 1, 1, 5_000), 1, "expired in the frozen base: starts over");
    assert_eq!(add(&mut s, 2, 1, 5_000), 1);
    // Cleanup skips frozen groups; nothing lost.
    s.maintain(5_500, 1_000_000);
    assert_eq!(get(&s, 1, 5_500), Some(1));
    assert_eq!(decode(&snap.encode().unwrap()), map(&[(1, 4)]));
    s.maintain(5_500, 0);
    assert!(s.shared.is_empty());
    assert_eq!(decode(&s.snapshot(5_500).encode().unwrap()), map(&[(1, 1), (2, 1)]));
}

#[test]
fn blocks_without_timestamps_restore_as_written_at_restore_time() {
    let mut old = state(None);
    add(&mut old, 1, 3, 0);
    let v1 = old.snapshot(0).encode().unwrap();
    assert!(
        postcard::from_bytes::<Vec<(Key, i64)>>(&v1[0].data).is_ok(),
        "no TTL: the version-1 format of earlier releases"
    );
    let mut s = state(Some(Duration::from_secs(10)));
    s.restore(v1, 50_000).unwrap();
    assert_eq!(get(&s, 1, 59_999), Some(3));
    assert_eq!(get(&s, 1, 60_000), None);
    // And a TTL snapshot restores into a job without TTL (timestamps ignored).
    let v2 = s.snapshot(50_000).encode().unwrap();
    assert_eq!(v2[0].data[10], keyed_block::BLOCK_VERSION_TTL);
    assert!(v2[0].data.starts_with(&keyed_block::VERSIONED_PREFIX));
    let mut plain = state(None);
    plain.restore(v2, u64::MAX).unwrap();
    assert_eq!(get(&plain, 1, u64::MAX), Some(3));
}

#[test]
fn a_block_that_does_not_decode_names_its_key_group() {
    let mut s = state(None);
    let err = s
        .restore(
            vec![KeyGroupBlock {
                expired_through_ms: None,
                key_group: 3,
                entries: 1,
                data: vec![9].into(),
            }],
            0,
        )
        .unwrap_err();
    assert!(err.starts_with("key group 3 does not decode"), "{err}");
}

/// Rescale of TTL state: each subtask of the new parallelism takes exactly its key groups,
/// with their write times (a key written long ago still expires on time after the rescale).
#[test]
fn ttl_blocks_split_by_key_group_on_rescale() {
    let ttl = Some(StateTtl::new(Duration::from_secs(10)));
    let mut s = state(Some(Duration::from_secs(10)));
    for i in 0..300 {
        add(&mut s, i, 1, if i < 100 { 0 } else { 5_000 });
    }
    let blocks = s.snapshot(5_000).encode().unwrap();
    let mut total = 0;
    let mut live_at_12s = 0;
    for sub in 0..3 {
        let range = key_group_range(sub, 3, MAX_P);
        let mut part: HeapKeyedState<i64> = HeapKeyedState::new(range, ttl);
        part.restore(blocks.clone(), 6_000).unwrap();
        total += part.len();
        for i in 0..300 {
            let k = key(i);
            let h = key_hash(&k);
            let kg = key_group_of_hash(h, MAX_P);
            if range.contains(kg) && part.get(kg, h, &k, 12_000).is_some() {
                live_at_12s += 1;
            }
        }
    }
    assert_eq!(total, 300, "every key restored exactly once");
    assert_eq!(
        live_at_12s, 200,
        "keys written at 0 s expired at 10 s, after the rescale"
    );
}

/// A base, then deltas written while earlier snapshots are still being encoded (frozen
/// layers), with removals and keys removed from a now-empty key group: the chain restores to
/// exactly the state at the last barrier, and each delta holds only the changed keys.
#[test]
fn a_chain_of_deltas_restores_the_state_at_the_last_barrier() {
    let mut s = state(None);
    s.track_changes();
    for i in 0..200 {
        add(&mut s, i, i, 1);
    }
    s.take_changes();
    let base = s.snapshot(1).encode().unwrap();
    let mut blocks = base.clone();
    let mut in_flight = Vec::new();
    for round in 0..3i64 {
        for i in (round * 10)..(round * 10 + 5) {
            add(&mut s, i, 1000, 2);
        }
        remove(&mut s, 100 + round);
        add(&mut s, 500 + round, 7, 2);
        let changes = s.take_changes();
        assert_eq!(changes.len(), 7, "round {round}: 5 writes, 1 removal, 1 new key");
        // Keep the snapshot of the previous round alive: writes go to frozen layers.
        let view = s.snapshot(2);
        let delta = view.encode_delta(&changes).unwrap();
        assert_eq!(delta.iter().map(|b| b.entries).sum::<u64>(), 7, "round {round}");
        assert!(delta.iter().all(|b| keyed_block::is_delta(&b.data)));
        blocks.extend(delta);
        in_flight.push(s.snapshot(2));
    }
    // A key added after a full snapshot and then removed: the delta removes it.
    let lonely = (1000..).find(|i| get(&s, *i, 2).is_none()).unwrap();
    add(&mut s, lonely, 1, 2);
    s.take_changes();
    let with_lonely = s.snapshot(2).encode().unwrap();
    let mut blocks2 = with_lonely.clone();
    remove(&mut s, lonely);
    blocks2.extend(s.snapshot(2).encode_delta(&s.take_changes()).unwrap_or_default());
    drop(in_flight);

    let want = decode(&s.snapshot(3).encode().unwrap());
    let mut restored = state(None);
    restored.restore(blocks, 3).unwrap();
    assert_eq!(decode(&restored.snapshot(3).encode().unwrap()), want);
    assert_eq!(want.get(&0), Some(&1000), "written in round 0");
    assert_eq!(want.get(&101), None, "removed in round 1");
    assert_eq!(want.get(&502), Some(&7));

    let mut restored2 = state(None);
    restored2.restore(blocks2, 3).unwrap();
    assert_eq!(decode(&restored2.snapshot(3).encode().unwrap()), want);
}

/// A delta releases each key group's tables before its block is handed over, and a group
/// without changes as soon as the encoding passes it: the task merges its writes back and
/// writes the group in place again without waiting for the whole delta.
#[test]
fn a_delta_releases_each_group_before_handing_over_its_block() {
    let mut s = state(None);
    s.track_changes();
    for i in 0..400 {
        add(&mut s, i, i, 1);
    }
    s.take_changes();
    let group_of = |i: i64| key_group_of_hash(key_hash(&key(i)), MAX_P);
    let unchanged = (0..400).map(group_of).min().unwrap();
    for i in (0..400).filter(|i| group_of(*i) != unchanged) {
        add(&mut s, i, 1, 2);
    }
    let changes = s.take_changes();
    let snapshot = s.snapshot(2);
    let bases: Vec<(u32, std::sync::Weak<BaseTable<i64>>)> = snapshot
        .views
        .iter()
        .map(|v| (v.key_group, Arc::downgrade(&v.base)))
        .collect();
    assert_eq!(bases.len() as u32, MAX_P, "every group holds keys");
    let mut emitted = Vec::new();
    snapshot
        .encode_delta_each::<postcard::Error>(&changes, &mut |block| {
            // The state holds one reference to each base; a snapshot still encoding holds another.
            let held: Vec<u32> = bases
                .iter()
                .filter(|(_, b)| b.strong_count() > 1)
                .map(|(g, _)| *g)
                .collect();
            let after: Vec<u32> = bases.iter().map(|(g, _)| *g).filter(|g| *g > block.key_group).collect();
            assert_eq!(
                held, after,
                "held when group {}'s block is handed over",
                block.key_group
            );
            emitted.push(block.key_group);
            Ok(())
        })
        .unwrap();
    assert_eq!(
        emitted.len() as u32,
        MAX_P - 1,
        "a block per changed group: {emitted:?}"
    );
    assert!(!emitted.contains(&unchanged));
}

#[test]
fn changes_are_recorded_only_when_tracked() {
    let mut s = state(None);
    add(&mut s, 1, 1, 1);
    assert!(s.take_changes().is_empty());
    s.track_changes();
    add(&mut s, 1, 1, 1);
    add(&mut s, 1, 1, 1);
    remove(&mut s, 2);
    assert_eq!(s.take_changes().len(), 2, "key 1 once, key 2's removal");
    assert!(s.take_changes().is_empty(), "taken");
}

/// Encoding on several threads writes the same blocks, in key-group order, as on one; so does
/// a snapshot whose groups carry frozen deltas (writes made while an earlier snapshot was in
/// flight).
#[test]
fn parallel_encoding_writes_the_same_blocks_as_one_thread() {
    for ttl in [None, Some(Duration::from_secs(60))] {
        let mut s = state(ttl);
        for i in 0..2000 {
            add(&mut s, i, i, 1_000);
        }
        let held = s.snapshot(1_000);
        for i in 1000..2500 {
            add(&mut s, i, 1, 2_000);
        }
        remove(&mut s, 3);
        let one = s.snapshot(2_000).encode_on(1).unwrap();
        let four = s.snapshot(2_000).encode_on(4).unwrap();
        drop(held);
        assert_eq!(one, four, "ttl {ttl:?}");
        assert!(
            one.windows(2).all(|w| w[0].key_group < w[1].key_group),
            "key-group order"
        );
        assert_eq!(decode_any(&one).len(), 2499, "ttl {ttl:?}");
    }
}

/// The streamed encoding (workers ahead of `emit` by a window of groups) hands over the same
/// blocks in the same key-group order as one thread, for any worker count, and stops at the
/// first error of `emit`.
#[test]
fn streamed_encoding_hands_over_the_blocks_of_one_thread_in_order() {
    let mut s = HeapKeyedState::new(key_group_range(0, 1, 128), None);
    for i in 0..5000i64 {
        let k = key(i);
        let h = key_hash(&k);
        s.update(key_group_of_hash(h, 128), h, &k, 1, |_| i);
    }
    let want = s.snapshot(1).encode_on(1).unwrap();
    assert!(want.len() > 100, "{} groups", want.len());
    for workers in [1, 2, 4] {
        let mut got = Vec::new();
        s.snapshot(1)
            .encode_each_on::<postcard::Error>(workers, &mut |b| {
                got.push(b);
                Ok(())
            })
            .unwrap();
        assert_eq!(got, want, "{workers} workers");
        let mut emitted = 0;
        let e = s
            .snapshot(1)
            .encode_each_on::<Stop>(workers, &mut |_| {
                emitted += 1;
                if emitted == 10 { Err(Stop::Upload) } else { Ok(()) }
            })
            .unwrap_err();
        assert_eq!((e, emitted), (Stop::Upload, 10), "{workers} workers");
    }
}

/// Why a streamed encoding stopped (test).
#[derive(Debug, PartialEq)]
enum Stop {
    Encode,
    Upload,
}

impl From<postcard::Error> for Stop {
    fn from(_: postcard::Error) -> Self {
        Stop::Encode
    }
}

/// Decodes blocks of either full version into key → value.
fn decode_any(blocks: &[KeyGroupBlock]) -> BTreeMap<i64, i64> {
    let mut out = BTreeMap::new();
    for b in blocks {
        for (k, v, _) in keyed_block::decode::<i64>(&b.data).unwrap() {
            let Key::Int(i) = k else { panic!("int keys only") };
            assert!(out.insert(i, v).is_none(), "key {i} in two blocks");
        }
    }
    out
}

/// A restore on several threads builds the same state as on one: full blocks bulk-built
/// (expired entries dropped), a chain's delta applied over its base (a removal and an update),
/// blocks of groups outside the range skipped, an undecodable block named by its key group.
#[test]
fn parallel_restore_builds_the_same_state_as_one_thread() {
    let ttl = Some(Duration::from_millis(500));
    let mut source = state(ttl);
    for i in 0..3000 {
        add(&mut source, i, i, if i % 10 == 0 { 0 } else { 1_000 });
    }
    let mut blocks = source.snapshot(1_000).encode().unwrap();
    // A delta over the base: key 1 removed, key 2 set to 99, key 5000 added.
    let delta_of = |i: i64, v: Option<i64>| {
        let k = key(i);
        let kg = key_group_of_hash(key_hash(&k), MAX_P);
        let data = keyed_block::encode_delta(&[(&k, v.as_ref(), 1_000)]).unwrap();
        KeyGroupBlock {
            expired_through_ms: None,
            key_group: kg,
            entries: 1,
            data: data.into(),
        }
    };
    blocks.extend([delta_of(1, None), delta_of(2, Some(99)), delta_of(5000, Some(7))]);
    let half = key_group_range(0, 2, MAX_P);
    for range in [key_group_range(0, 1, MAX_P), half] {
        let restore = |workers| {
            let mut s: HeapKeyedState<i64> = HeapKeyedState::new(range, ttl.map(StateTtl::new));
            s.restore_on(blocks.clone(), 1_200, workers).unwrap();
            (s.len(), decode_any(&s.snapshot(1_200).encode_on(1).unwrap()))
        };
        let (len_one, one) = restore(1);
        let (len_four, four) = restore(4);
        assert_eq!((len_one, &one), (len_four, &four));
        let owned = |i: i64| range.contains(key_group_of_hash(key_hash(&key(i)), MAX_P));
        let mut want: BTreeMap<i64, i64> = (0..3000).filter(|i| i % 10 != 0 && owned(*i)).map(|i| (i, i)).collect();
        want.remove(&1);
        if owned(2) {
            want.insert(2, 99);
        }
        if owned(5000) {
            want.insert(5000, 7);
        }
        assert_eq!(one, want, "range {range:?}");
        assert_eq!(len_one, want.len());
    }
    let mut bad = blocks[0].clone();
    bad.data = vec![0xFF; 3].into();
    let mut s = state(None);
    let e = s.restore_on(vec![bad.clone()], 0, 4).unwrap_err();
    assert!(
        e.contains(&format!("key group {} does not decode", bad.key_group)),
        "{e}"
    );
}

/// A key removed by TTL cleanup stays removed at a restore of the next incremental checkpoint
/// when the wall clock steps back between the cleanup and the barrier: the times the state
/// sees come through `ttl::not_before` (as [`SystemClock`](crate::state::ttl::SystemClock)'s
/// do), so the barrier's `expired_through` covers what cleanup removed. With the raw wall
/// times (1150 at the cleanup, 1050 at the barrier) the restore brought key 1 back from the
/// chain's base (review of 2026-12-07).
#[test]
fn a_key_cleaned_up_stays_removed_across_a_wall_clock_step_back() {
    use crate::state::ttl::{expired_through, not_before};
    let latest = std::sync::atomic::AtomicU64::new(0);
    let now = |wall_ms: u64| not_before(&latest, wall_ms);
    let ttl = StateTtl::new(Duration::from_millis(100));
    let mut s = state(Some(Duration::from_millis(100)));
    s.track_changes();
    let written = now(1_000);
    add(&mut s, 1, 7, written);
    let _ = s.take_changes();
    let mut blocks = s.snapshot(written).encode().unwrap();
    // Cleanup at 1150: key 1 has expired and goes, recorded nowhere.
    let cleanup = now(1_150);
    s.maintain(cleanup, 1_000);
    assert_eq!(s.len(), 0, "cleanup removed the expired key");
    // The wall clock steps back 100 ms before the next barrier.
    let barrier = now(1_050);
    let changes = s.take_changes();
    blocks.extend(s.snapshot(barrier).encode_delta(&changes).unwrap());
    for block in &mut blocks {
        block.expired_through_ms = expired_through(Some(ttl), barrier);
    }
    // The restore runs in a new process, whose clock reads the raw wall time (1060): it is
    // the barrier's bound that must leave key 1 out, not the restore's expiry.
    let mut restored = state(Some(Duration::from_millis(100)));
    restored.restore(blocks, 1_060).unwrap();
    assert_eq!(restored.len(), 0, "the restore brought back a key cleanup had removed");
}
