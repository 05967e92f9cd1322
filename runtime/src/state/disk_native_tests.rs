//! Tests of native checkpoints of the disk backend: the checkpoint holds exactly the writes
//! before its barrier (those still pending in generations included, none after it), and its
//! files restore, as blocks, to the heap state at the barrier.

use super::*;
use crate::state::disk_cache::entry_bytes;
use crate::state::heap::HeapKeyedState;
use crate::state::key_group::key_group_range;
use std::collections::BTreeMap;

use crate::state::disk_test_keys::{TEST_MAX_PARALLELISM as MAX_P, at, decode, key};

fn options(cache_entries: u64) -> DiskStateOptions {
    DiskStateOptions {
        write_cache_bytes: cache_entries * entry_bytes::<i64>(&key(1)),
        ..DiskStateOptions::default()
    }
}

/// The checkpoint written at a barrier holds the writes before it, also those of generations
/// still pending when it was requested, and removals before it; none of the writes, removals
/// or overwrites after it. Its blocks equal the heap state's at the barrier, for the whole
/// range and for each half (a rescale), with and without a TTL; whether changes are tracked
/// for deltas or only as native checkpoints need (`track_for_native_checkpoints`: no changed
/// key recorded, no generation kept, also after a switch from tracked changes).
#[test]
fn a_native_checkpoint_holds_exactly_the_writes_before_its_barrier() {
    let all = key_group_range(0, 1, MAX_P);
    let a_second = Some(StateTtl::new(std::time::Duration::from_millis(1_000)));
    for (ttl, native_tracking) in [(None, false), (None, true), (a_second, false), (a_second, true)] {
        let dir = tempfile::tempdir().unwrap();
        let store_dir = dir.path().join("count-0");
        let mut disk = DiskKeyedState::<i64>::open(&store_dir, all, ttl, options(4_000)).unwrap();
        disk.track_changes();
        let mut heap = HeapKeyedState::<i64>::new(all, ttl);
        let add =
            |disk: &mut DiskKeyedState<i64>, heap: Option<&mut HeapKeyedState<i64>>, i: u64, by: i64, now: u64| {
                let (kg, h, k) = at(i);
                disk.update(kg, h, &k, now, |old| old.copied().unwrap_or(0) + by)
                    .unwrap();
                if let Some(heap) = heap {
                    heap.update(kg, h, &k, now, |old| old.copied().unwrap_or(0) + by);
                }
            };
        // Keys 0..300 in the store, then the write-back thread held: 200..600 and the removals
        // of 0..50 stay pending in generations at the barrier.
        for i in 0..300 {
            add(&mut disk, Some(&mut heap), i, 1, 0);
        }
        drop(disk.snapshot(0));
        disk.wait_for_write_back();
        if native_tracking {
            assert!(disk.kept_generations().0 > 0, "kept for deltas before the switch");
            disk.track_for_native_checkpoints();
            assert_eq!(disk.kept_generations(), (0, 0), "the kept generations are freed");
        }
        disk.pause_write_back(true);
        for i in 200..600 {
            add(&mut disk, Some(&mut heap), i, 10, 500);
        }
        for i in 0..50 {
            let (kg, h, k) = at(i);
            assert_eq!(disk.remove(kg, h, &k).unwrap(), heap.remove(kg, h, &k));
        }
        let barrier = disk.native_snapshot(7);
        if native_tracking {
            assert!(disk.take_changes().is_empty(), "no changed key recorded");
        }
        let expected = decode(&heap.snapshot(900).encode().unwrap());
        assert!(disk.cached_entries().1 > 0, "generations pending at the barrier");
        // After the barrier: overwrites, new keys, removals of keys the checkpoint holds.
        for i in (250..350).chain(700..750) {
            add(&mut disk, None, i, 100, 800);
        }
        for i in 100..120 {
            let (kg, h, k) = at(i);
            disk.remove(kg, h, &k).unwrap();
        }
        disk.pause_write_back(false);
        for i in 800..1_500 {
            add(&mut disk, None, i, 1, 800);
        }
        drop(disk.snapshot(900));
        disk.wait_for_write_back();
        if native_tracking {
            assert_eq!(
                disk.kept_generations(),
                (0, 0),
                "no generation kept after its write-back"
            );
        }
        let checkpoint = barrier.wait().unwrap();
        assert_eq!(checkpoint.dir(), local_checkpoint_dir(&store_dir, 7));
        assert!(
            !checkpoint.table_files.is_empty(),
            "the flushed memtable is a table file"
        );
        assert!(checkpoint.private_files.iter().any(|f| f.name == "CURRENT"));
        assert!(checkpoint.private_files.iter().any(|f| f.name.starts_with("MANIFEST-")));
        assert!(checkpoint.table_files.iter().all(|f| f.size > 0));
        // Restored from a copy (the restore's download), for all key groups and by halves.
        let copy = |name: &str| {
            let to = dir.path().join(name);
            std::fs::create_dir(&to).unwrap();
            for f in checkpoint.table_files.iter().chain(&checkpoint.private_files) {
                std::fs::copy(checkpoint.dir().join(&f.name), to.join(&f.name)).unwrap();
            }
            to
        };
        let whole = copy("whole");
        let blocks = blocks_of_native_store(&whole, &options(4_000), all, ttl, 900).unwrap();
        assert!(!whole.exists(), "the downloaded directory is scratch");
        assert_eq!(
            decode(&blocks),
            expected,
            "ttl {ttl:?}, native tracking {native_tracking}"
        );
        assert_eq!(expected.len(), 550);
        let mut halves = BTreeMap::new();
        for subtask in 0..2 {
            let range = key_group_range(subtask, 2, MAX_P);
            let half = copy(&format!("half-{subtask}"));
            let blocks = blocks_of_native_store(&half, &options(4_000), range, ttl, 900).unwrap();
            assert!(blocks.iter().all(|b| range.contains(b.key_group)));
            halves.extend(decode(&blocks));
        }
        assert_eq!(halves, expected);
        // The fast restore (`checkpoint/native_restore.rs`): the files opened writable as
        // the subtask's store hold the same entries with their write times, so the step's TTL
        // applies to them as on the blocks path (at 900 and after the first writes expired).
        let fast = copy("fast");
        let mut reopened = DiskKeyedState::<i64>::open_restored(&fast, all, ttl, options(4_000), 550).unwrap();
        assert_eq!(reopened.len(), 550);
        for now in [900, 1_200] {
            assert_eq!(
                decode(&reopened.snapshot(now).encode().unwrap()),
                decode(&heap.snapshot(now).encode().unwrap()),
                "fast restore, ttl {ttl:?}, at {now}"
            );
        }
        // It goes on as a store of its own: writes, and a native checkpoint of it.
        reopened.track_changes();
        add(&mut reopened, None, 5_000, 1, 900);
        let again = reopened.native_snapshot(8).wait().unwrap();
        assert!(!again.table_files.is_empty());
        drop(again);
        drop(reopened);
        assert!(!fast.exists(), "the restored store is scratch");
        // Heap restored from the blocks: the same state.
        let mut restored = HeapKeyedState::<i64>::new(all, ttl);
        restored.restore(blocks, 900).unwrap();
        assert_eq!(decode(&restored.snapshot(900).encode().unwrap()), expected);
        let local = checkpoint.dir().to_path_buf();
        drop(checkpoint);
        assert!(!local.exists(), "the local checkpoint is removed once uploaded");
    }
}

/// Without tracked changes (removals may then bypass the cache) or without a write-back cache,
/// a native checkpoint fails with a clear error instead of being inexact; so does one after a
/// failed write-back (the store lacks that generation's writes).
#[test]
fn a_native_checkpoint_refuses_a_store_it_cannot_capture_exactly() {
    let all = key_group_range(0, 1, MAX_P);
    let dir = tempfile::tempdir().unwrap();
    let mut untracked = DiskKeyedState::<i64>::open(&dir.path().join("a"), all, None, options(4_000)).unwrap();
    let e = untracked.native_snapshot(1).wait().err().unwrap();
    assert!(e.problem.contains("write-back cache"), "{e}");
    let mut no_cache = DiskKeyedState::<i64>::open(&dir.path().join("b"), all, None, options(0)).unwrap();
    no_cache.track_changes();
    let e = no_cache.native_snapshot(1).wait().err().unwrap();
    assert!(e.problem.contains("write-back cache"), "{e}");
    let mut failing = DiskKeyedState::<i64>::open(&dir.path().join("c"), all, None, options(4_000)).unwrap();
    failing.track_changes();
    let (kg, h, k) = at(1);
    failing.update(kg, h, &k, 0, |_| 5).unwrap();
    failing.fail_next_write_back();
    let e = failing.native_snapshot(2).wait().err().unwrap();
    assert!(e.problem.contains("write-back"), "{e}");
    assert!(!local_checkpoint_dir(&dir.path().join("c"), 2).exists());
}

/// A native checkpoint abandoned before its encoder waited for it leaves no local directory,
/// whether the write-back thread wrote it before or after the drop.
#[test]
fn an_abandoned_native_checkpoint_leaves_no_local_directory() {
    let all = key_group_range(0, 1, MAX_P);
    let dir = tempfile::tempdir().unwrap();
    let store_dir = dir.path().join("s");
    let mut disk = DiskKeyedState::<i64>::open(&store_dir, all, None, options(4_000)).unwrap();
    disk.track_changes();
    let (kg, h, k) = at(1);
    disk.update(kg, h, &k, 0, |_| 5).unwrap();
    // Written before the drop.
    let written = disk.native_snapshot(1);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !local_checkpoint_dir(&store_dir, 1).join("CURRENT").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the write-back thread writes the checkpoint"
        );
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    // RocksDB writes the directory under a temporary name and renames it when complete.
    drop(written);
    assert!(!local_checkpoint_dir(&store_dir, 1).exists());
    // Dropped before the thread gets to it.
    disk.pause_write_back(true);
    disk.update(kg, h, &k, 0, |_| 6).unwrap();
    drop(disk.native_snapshot(2));
    disk.pause_write_back(false);
    drop(disk.snapshot(0));
    disk.wait_for_write_back();
    // The thread handles jobs in order: a later checkpoint's reply means it is past job 2.
    let later = disk.native_snapshot(3).wait().unwrap();
    assert!(!local_checkpoint_dir(&store_dir, 2).exists());
    drop(later);
    assert!(!local_checkpoint_dir(&store_dir, 3).exists());
}

/// A store checkpointed natively compacts level 0 at RocksDB's default trigger
/// ([`L0_COMPACTION_TRIGGER`](crate::state::disk_rocks::L0_COMPACTION_TRIGGER)), as one
/// checkpointed as chains of blocks does: after eight checkpoints, each flushing writes spread
/// over the whole key range into a new level-0 table file, fewer than eight remain there, so a
/// point read checks few of them (a trigger of 16 kept all eight and cost the task thread up to
/// 39 % more CPU per record with checkpoints every second).
#[test]
fn a_store_checkpointed_natively_compacts_level_0_at_the_default_trigger() {
    let all = key_group_range(0, 1, MAX_P);
    for native in [false, true] {
        let dir = tempfile::tempdir().unwrap();
        // Each checkpoint's 20,000 writes of 250-byte values (about 5 MB logged) pass four
        // write buffers of 1 MiB (the least a store takes), so each one flushes instead of
        // logging them (`state/disk_delta.rs`).
        let options = DiskStateOptions {
            write_buffer_bytes: 1 << 20,
            ..options(100)
        };
        let mut disk = DiskKeyedState::<String>::open(&dir.path().join("count-0"), all, None, options).unwrap();
        disk.track_changes();
        if native {
            disk.track_for_native_checkpoints();
        }
        for checkpoint in 1..=8 {
            for i in 0..20_000 {
                let (kg, h, k) = at(i);
                disk.update(kg, h, &k, 0, |_| format!("{checkpoint:0>250}")).unwrap();
            }
            let written = disk.native_snapshot(checkpoint).wait().unwrap();
            assert!(
                written.table_files.iter().all(|f| f.name.ends_with(".sst")),
                "checkpoint {checkpoint} flushed"
            );
        }
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(20);
        while disk.level0_files() >= 8 {
            assert!(
                std::time::Instant::now() < deadline,
                "level 0 compacted at the default trigger (native: {native}): {} files",
                disk.level0_files()
            );
            std::thread::sleep(std::time::Duration::from_millis(20));
        }
    }
}
