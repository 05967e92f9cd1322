//! A savepoint between incremental checkpoints: the checkpoint after it extends the one
//! before it, on the heap (chains of blocks), on disk with chains, and on disk with native
//! checkpoints (the table files of the checkpoint before it are referenced again).

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
