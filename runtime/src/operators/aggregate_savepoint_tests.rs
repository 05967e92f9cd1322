//! Sequences of barriers at the aggregate. A savepoint between incremental checkpoints: the
//! checkpoint after it extends the one before it, on the heap (chains of blocks), on disk with
//! chains, and on disk with native checkpoints (the table files of the checkpoint before it
//! are referenced again). A failed write-back of a disk store fails the task at the next
//! barrier.

use super::*;
use crate::control::api::SnapshotKind;
use crate::record::{Key, KeyedBy, Row};
use crate::state::disk::DiskStateOptions;
use crate::state::key_group::key_group_range;
use crate::state::snapshot::NativeFile;

fn keyed(words: &[&str]) -> Vec<Record> {
    words
        .iter()
        .map(|w| Record {
            row: Row::from_json(serde_json::json!({})),
            keyed: Some(KeyedBy::new(Key::Str((*w).into()), 8)),
        })
        .collect()
}

fn barrier(id: u64, kind: SnapshotKind, incremental: Option<Option<u64>>) -> Barrier {
    Barrier {
        id,
        kind,
        incremental,
        ..tests::barrier()
    }
}

/// The keys of the delta blocks of `encoded` (sorted).
fn delta_keys(encoded: EncodedState) -> Vec<String> {
    let encoded = encoded.collect_stream().unwrap();
    let mut keys: Vec<String> = encoded
        .key_groups
        .iter()
        .flat_map(|b| crate::state::keyed_block::decode_with_removals::<Num>(&b.data).unwrap())
        .map(|(key, _, _)| format!("{key:?}"))
        .collect();
    keys.sort();
    keys
}

#[tokio::test]
async fn the_checkpoint_after_a_savepoint_extends_the_checkpoint_before_it() {
    let scratch = tempfile::tempdir().unwrap();
    let all = key_group_range(0, 1, 8);
    let disk = |name: &str, write_cache_bytes: u64| BackendChoice::Disk {
        dir: scratch.path().join(name),
        options: DiskStateOptions {
            write_cache_bytes,
            ..DiskStateOptions::default()
        },
    };
    for (what, backend, native) in [
        ("heap", BackendChoice::Heap, false),
        ("disk, chains (no write-back cache)", disk("chains", 0), false),
        ("disk, native", disk("native", 16 << 20), true),
    ] {
        let init = KeyedStateInit {
            backend,
            ..KeyedStateInit::new(all, OperatorRestore::default())
        };
        let mut op = Aggregate::with_state("c", AggregateFn::Count, None, "k", "k", init).unwrap();
        let mut out = Vec::new();
        // 100 keys, so a delta of 2 stays within the compaction policy's ratio.
        let words: Vec<String> = (0..100).map(|i| format!("w{i}")).collect();
        let words: Vec<&str> = words.iter().map(String::as_str).collect();
        op.process(keyed(&words), &mut out).await.unwrap();
        let first = (op
            .snapshot(&barrier(1, SnapshotKind::Checkpoint, Some(None)))
            .await
            .unwrap()
            .unwrap())()
        .unwrap();
        if native {
            assert!(first.native.is_some(), "{what}: checkpoint 1 is not native");
            // What the upload records for later checkpoints (no upload runs here).
            let table = NativeFile {
                file: "../shared/c-0-chk1-000009.sst".into(),
                name: "000009.sst".into(),
                checkpoint_id: 1,
                size: 1,
                crc32: 0,
            };
            op.native_tables.record(1, [(table.name.clone(), table)].into());
        } else {
            assert_eq!(first.incremental, Some(Form::Base), "{what}");
        }
        op.notify_complete(1).await.unwrap();
        op.process(keyed(&["a"]), &mut out).await.unwrap();
        let savepoint = (op
            .snapshot(&barrier(2, SnapshotKind::Savepoint, None))
            .await
            .unwrap()
            .unwrap())()
        .unwrap();
        assert!(savepoint.native.is_none(), "{what}: a savepoint is blocks");
        assert_eq!(savepoint.incremental, None, "{what}: a savepoint is self-contained");
        op.notify_complete(2).await.unwrap();
        op.process(keyed(&["d"]), &mut out).await.unwrap();
        // The coordinator names checkpoint 1, the newest completed checkpoint.
        let third = (op
            .snapshot(&barrier(3, SnapshotKind::Checkpoint, Some(Some(1))))
            .await
            .unwrap()
            .unwrap())()
        .unwrap();
        if native {
            let upload = third.native.expect("checkpoint 3 is native");
            assert_eq!(
                upload.reuse.keys().collect::<Vec<_>>(),
                ["000009.sst"],
                "{what}: checkpoint 3 may reference checkpoint 1's table files"
            );
        } else {
            assert_eq!(third.incremental, Some(Form::Delta { over: 1 }), "{what}");
            // The keys changed since checkpoint 1: before the savepoint and after it.
            assert_eq!(delta_keys(third), [r#"Str("a")"#, r#"Str("d")"#], "{what}");
        }
    }
}

/// After a write-back of the disk store failed, or a native checkpoint's memtable flush, the
/// next barrier fails the task (the synchronous `snapshot` errs, naming the cause) for a native
/// checkpoint, a checkpoint of blocks and a savepoint alike. Before, only the checkpoint's
/// asynchronous part failed: every later checkpoint was declined, and a job that no batch
/// reached declined one every 10 s without failing (helper-101, 2026-12-06: a full disk
/// stalled the write-back; a bounded job at its end retried its final checkpoint on the same
/// sticky flush error, as RocksDB writes nothing more to a store after a failed flush until it
/// recovers, on a full disk possibly never).
#[tokio::test]
async fn a_failed_write_back_or_flush_fails_the_task_at_the_next_barrier() {
    let scratch = tempfile::tempdir().unwrap();
    let all = key_group_range(0, 1, 8);
    let failures = [
        (
            "write-back",
            "injected write-back failure",
            "writing cached entries into the store",
        ),
        (
            "flush",
            "injected flush failure",
            "a checkpoint's flush of the store failed",
        ),
    ];
    let next: [(&str, Option<Option<u64>>, SnapshotKind); 3] = [
        ("native checkpoint", Some(None), SnapshotKind::Checkpoint),
        ("full checkpoint", None, SnapshotKind::Checkpoint),
        ("savepoint", None, SnapshotKind::Savepoint),
    ];
    for (failure, injected, cause) in failures {
        for (next_barrier, incremental, kind) in next {
            let what = format!("{failure}, then a {next_barrier}");
            let init = KeyedStateInit {
                backend: BackendChoice::Disk {
                    dir: scratch.path().join(what.replace([' ', ','], "-")),
                    options: DiskStateOptions {
                        write_cache_bytes: 16 << 20,
                        ..DiskStateOptions::default()
                    },
                },
                ..KeyedStateInit::new(all, OperatorRestore::default())
            };
            let mut op = Aggregate::with_state("c", AggregateFn::Count, None, "k", "k", init).unwrap();
            let mut out = Vec::new();
            op.process(keyed(&["a", "b"]), &mut out).await.unwrap();
            let KeyedState::Disk(disk) = &op.state else {
                panic!("{what}: not on disk")
            };
            match failure {
                "flush" => disk.fail_next_flush(),
                _ => disk.fail_next_write_back(),
            }
            // Native checkpoint 1 freezes the generation holding `a` and `b`; its write-back
            // fails (and with it the checkpoint written after it), or its flush does.
            let first = op
                .snapshot(&barrier(1, SnapshotKind::Checkpoint, Some(None)))
                .await
                .expect("the barrier before the failure is taken")
                .unwrap();
            let Err(error) = first() else {
                panic!("{what}: checkpoint 1 completed without the failed {failure}")
            };
            assert!(error.0.contains(injected), "{what}: {}", error.0);
            op.process(keyed(&["c"]), &mut out).await.ok();
            let second = op.snapshot(&barrier(2, kind, incremental)).await;
            let Err(error) = second else {
                panic!("{what}: the barrier after the failed {failure} did not fail the task")
            };
            assert!(
                error.0.contains("operator c") && error.0.contains(cause) && error.0.contains(injected),
                "{what}: {}",
                error.0
            );
        }
    }
}
