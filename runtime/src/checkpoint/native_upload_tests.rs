//! Tests of native checkpoints' upload and download (`native_upload.rs`): which table files are
//! referenced or uploaded, in which order and how; on a local store on the same file system the
//! table files are linked both ways, elsewhere copied, and either way the handle restores the
//! state exactly.

use super::*;

fn local(name: &str, size: u64) -> LocalFile {
    LocalFile {
        name: name.into(),
        size,
    }
}

fn uploaded(name: &str, size: u64, by: u64) -> NativeFile {
    NativeFile {
        file: format!("../shared/c-0-chk{by}-{name}"),
        name: name.into(),
        checkpoint_id: by,
        size,
        crc32: 7,
    }
}

/// What an upload holds of the budget: its size in MiB rounded up, at most a part being
/// filled and the parts in flight (40 MiB), at least 1: large table files share the budget
/// a few at a time, small ones many at once.
#[test]
fn an_upload_holds_its_size_up_to_a_streaming_uploads_memory() {
    const MIB: u64 = 1 << 20;
    for (file_bytes, mib) in [
        (0, 1),
        (1, 1),
        (MIB, 1),
        (MIB + 1, 2),
        (10 * MIB, 10),
        (40 * MIB, 40),
        (64 * MIB, 40),
        (u64::MAX, 40),
    ] {
        assert_eq!(upload_mib(file_bytes), mib, "{file_bytes} bytes");
    }
    const _: () = assert!(UPLOAD_BUDGET_MIB >= 40, "one large upload fits the budget");
}

/// A download directory left by a process killed with `kill -9` is swept by the next
/// process (its owner file names a dead process); this process's own is kept.
#[test]
fn a_dead_processs_download_directory_is_swept() {
    let root = tempfile::tempdir().unwrap();
    let mine = create_download_dir(root.path()).unwrap();
    let left = create_download_dir(root.path()).unwrap();
    std::fs::write(left.join("000009.sst"), b"table").unwrap();
    // A pid above Linux's pid_max (2^22) is never alive.
    std::fs::write(left.join(crate::state::local_dir::OWNER_FILE), "99999999 5").unwrap();
    let swept = crate::state::local_dir::sweep_stale(root.path());
    assert_eq!(swept, vec![left.clone()]);
    assert!(!left.exists() && mine.exists());
    // The next download sweeps too (a heap job or a coordinator sweeps nowhere else).
    let left_again = create_download_dir(root.path()).unwrap();
    std::fs::write(left_again.join(crate::state::local_dir::OWNER_FILE), "99999999 5").unwrap();
    let next = create_download_dir(root.path()).unwrap();
    assert!(!left_again.exists() && mine.exists() && next.exists());
}

/// A local directory that cannot be made (here: its root is a file) is the local path's I/O
/// error, which restarts the job, never a corrupt restore point (which refuses it for good
/// and advises restoring an older one).
#[test]
fn a_local_disk_failure_is_not_a_corrupt_checkpoint() {
    let scratch = tempfile::tempdir().unwrap();
    let not_a_directory = scratch.path().join("file");
    std::fs::write(&not_a_directory, b"x").unwrap();
    let e = create_download_dir(&not_a_directory).unwrap_err();
    assert!(
        matches!(
            e,
            crate::checkpoint::restore::RestoreError::Storage(crate::storage::StorageError::Io { .. })
        ),
        "{e:?}"
    );
    assert!(!e.is_permanent(), "{e}");
    let message = e.to_string();
    assert!(message.contains(&not_a_directory.display().to_string()), "{message}");
    assert!(message.contains("cannot create the directory"), "{message}");
}

/// Files up to the multipart threshold go in one put; larger ones stream in parts. The
/// order is largest first, then by name.
#[test]
fn how_and_in_which_order_native_files_upload_table() {
    const MIB: u64 = 1 << 20;
    for (file_bytes, whole) in [(0, true), (9 * MIB, true), (16 * MIB, true), (16 * MIB + 1, false)] {
        assert_eq!(uploads_whole(file_bytes), whole, "{file_bytes} bytes");
    }
    let mut files = [
        (16, "CURRENT"),
        (9 * MIB, "000013.sst"),
        (26 * MIB, "000012.sst"),
        (9 * MIB, "000014.sst"),
        (1574, "MANIFEST-000005"),
    ];
    files.sort_by(|a, b| upload_order(*a, *b));
    let names: Vec<&str> = files.iter().map(|f| f.1).collect();
    assert_eq!(
        names,
        ["000012.sst", "000013.sst", "000014.sst", "MANIFEST-000005", "CURRENT"]
    );
}

/// Only the confirmed checkpoint's table files of the same name and size are referenced;
/// new ones (flushes, compaction outputs) are uploaded.
#[test]
fn which_table_files_are_uploaded_table() {
    let reuse: BTreeMap<String, NativeFile> = [uploaded("000010.sst", 100, 3), uploaded("000011.sst", 50, 4)]
        .into_iter()
        .map(|f| (f.name.clone(), f))
        .collect();
    // (what, local table files, reuse, uploaded names, referenced files)
    type Row = (
        &'static str,
        Vec<LocalFile>,
        BTreeMap<String, NativeFile>,
        Vec<&'static str>,
        Vec<NativeFile>,
    );
    let rows: Vec<Row> = vec![
        (
            "first checkpoint: everything uploaded",
            vec![local("000010.sst", 100)],
            BTreeMap::new(),
            vec!["000010.sst"],
            vec![],
        ),
        (
            "files the confirmed checkpoint holds are referenced, new ones uploaded",
            vec![
                local("000010.sst", 100),
                local("000011.sst", 50),
                local("000014.sst", 9),
            ],
            reuse.clone(),
            vec!["000014.sst"],
            vec![uploaded("000010.sst", 100, 3), uploaded("000011.sst", 50, 4)],
        ),
        (
            "compacted away: nothing of the old files is listed",
            vec![local("000020.sst", 150)],
            reuse.clone(),
            vec!["000020.sst"],
            vec![],
        ),
    ];
    // A known name at another size: the store on local disk was damaged; the checkpoint
    // fails naming the file instead of uploading it as new.
    let damaged = tables_to_upload(&[local("000011.sst", 50), local("000010.sst", 51)], &reuse).unwrap_err();
    assert_eq!(
        damaged,
        DamagedTable {
            local_size: 51,
            recorded: uploaded("000010.sst", 100, 3)
        }
    );
    for (what, tables, reuse, want_upload, want_referenced) in rows {
        let (upload, referenced) = tables_to_upload(&tables, &reuse).unwrap();
        let names: Vec<&str> = upload.iter().map(|t| t.name.as_str()).collect();
        assert_eq!(names, want_upload, "{what}");
        assert_eq!(referenced, want_referenced, "{what}");
    }
}

#[test]
fn only_the_confirmed_checkpoints_tables_are_kept() {
    let tables = UploadedTables::default();
    for id in [3, 4, 5] {
        tables.record(
            id,
            [(format!("{id}.sst"), uploaded("x.sst", 1, id))].into_iter().collect(),
        );
    }
    tables.confirm(4);
    assert!(tables.of(3).is_empty());
    assert_eq!(tables.of(4).len(), 1);
    assert_eq!(tables.of(5).len(), 1);
}

mod linked {
    use super::*;
    use crate::state::disk::DiskKeyedState;
    use crate::state::disk_test_keys::{TEST_MAX_PARALLELISM, at, decode};
    use crate::state::key_group::key_group_range;
    use std::os::unix::fs::MetadataExt;
    use std::sync::Arc;

    fn barrier(store: Store) -> Barrier {
        Barrier {
            id: 2,
            kind: crate::control::api::SnapshotKind::Checkpoint,
            stop: false,
            target: Arc::new(crate::checkpoint::SnapshotTarget {
                store,
                dir: "job/chk-2".into(),
            }),
            triggered_at_ms: 0,
            is_final: false,
            incremental: Some(None),
        }
    }

    /// Keys `0..n` counted once each in a disk state under `dir`, and its native checkpoint 2.
    fn checkpoint_of(dir: &Path, n: u64) -> (DiskKeyedState<i64>, LocalCheckpoint) {
        let all = key_group_range(0, 1, TEST_MAX_PARALLELISM);
        let mut disk =
            DiskKeyedState::<i64>::open(&dir.join("count-0"), all, None, DiskStateOptions::default()).unwrap();
        disk.track_for_native_checkpoints();
        for i in 0..n {
            let (kg, h, k) = at(i);
            disk.update(kg, h, &k, 0, |old| old.copied().unwrap_or(0) + 1).unwrap();
        }
        let checkpoint = disk.native_snapshot(2).wait().unwrap();
        (disk, checkpoint)
    }

    /// A checkpoint store on the state's file system gets the table files as links (the
    /// object is the local checkpoint's file), one on another file system (a memory file
    /// system, where the machine has one) a copy; either way the handle, downloaded into a
    /// directory on the state's file system (linked back where it can be) and verified,
    /// restores every key's count.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn table_files_are_linked_on_one_file_system_and_restore_exactly() {
        let dir = tempfile::tempdir().unwrap();
        let shm = std::path::Path::new("/dev/shm");
        let other = (shm.is_dir()
            && std::fs::metadata(shm).unwrap().dev() != std::fs::metadata(dir.path()).unwrap().dev())
        .then(|| tempfile::tempdir_in(shm).unwrap());
        let roots: Vec<(PathBuf, bool)> = std::iter::once((dir.path().join("checkpoints"), true))
            .chain(other.iter().map(|o| (o.path().join("checkpoints"), false)))
            .collect();
        for (root, same_file_system) in roots {
            let state = tempfile::tempdir_in(dir.path()).unwrap();
            let (disk, checkpoint) = checkpoint_of(state.path(), 3_000);
            let tables: Vec<(String, u64)> = checkpoint
                .table_files
                .iter()
                .map(|t| {
                    (
                        t.name.clone(),
                        std::fs::metadata(checkpoint.dir().join(&t.name)).unwrap().ino(),
                    )
                })
                .collect();
            assert!(!tables.is_empty());
            let store: Store = Arc::new(crate::storage::LocalStore::new(&root).unwrap());
            let b = barrier(store.clone());
            let native = NativeUpload {
                checkpoint,
                reuse: BTreeMap::new(),
                uploaded: UploadedTables::default(),
                entries: 3_000,
                write_times: false,
            };
            let handle = upload_native(&b, "count", 0, native).await.unwrap();
            for (name, inode) in &tables {
                let path = shared_table_file(&b.target.dir, "count", 0, 2, name).1;
                let placed = std::fs::metadata(root.join(&path)).unwrap().ino();
                assert_eq!(placed == *inode, same_file_system, "{name} in {}", root.display());
            }
            let blocks = native_blocks(&store, &b.target.dir, &handle, dir.path(), None)
                .await
                .unwrap();
            let counts: BTreeMap<String, i64> = decode(&blocks).into_iter().map(|(k, (v, _))| (k, v)).collect();
            let expected: BTreeMap<String, i64> = (0..3_000).map(|i| (format!("{:?}", at(i).2), 1)).collect();
            assert_eq!(counts, expected, "{}", root.display());
            // A process with disk stores has the same blocks written through a local file
            // and mapped (`mapped_files.rs`); the file's name is gone after.
            let blocks_file = dir.path().join("blocks.state");
            let through_file = native_blocks(&store, &b.target.dir, &handle, dir.path(), Some(&blocks_file))
                .await
                .unwrap();
            assert_eq!(through_file, blocks, "{}", root.display());
            assert!(!blocks_file.exists());
            drop(disk);
        }
    }

    /// A handle written by a step with `ttl` restores as blocks with every key's write time;
    /// one written without `ttl` as blocks without them, so a restore into a step that has a
    /// `ttl` now counts its keys as written at the restore instead of expiring every key
    /// idle for longer than the `ttl` (the store stamps every write either way; found by
    /// trying it: a `ttl: 30s` added 35 s after the checkpoint restarted every count).
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn write_times_are_restored_only_from_a_handle_written_with_ttl() {
        let dir = tempfile::tempdir().unwrap();
        let store: Store = Arc::new(crate::storage::LocalStore::new(dir.path().join("checkpoints")).unwrap());
        for write_times in [false, true] {
            let state = tempfile::tempdir_in(dir.path()).unwrap();
            let (disk, checkpoint) = checkpoint_of(state.path(), 200);
            let b = barrier(store.clone());
            let native = NativeUpload {
                checkpoint,
                reuse: BTreeMap::new(),
                uploaded: UploadedTables::default(),
                entries: 200,
                write_times,
            };
            let handle = upload_native(&b, "count", 0, native).await.unwrap();
            assert_eq!(handle.write_times, write_times);
            let blocks = native_blocks(&store, &b.target.dir, &handle, dir.path(), None)
                .await
                .unwrap();
            let restored = decode(&blocks);
            assert_eq!(restored.len(), 200);
            // `checkpoint_of` writes every key at 0 ms.
            let want = write_times.then_some(0);
            assert!(
                restored
                    .values()
                    .all(|(count, written)| *count == 1 && *written == want),
                "written with ttl: {write_times}: {:?}",
                restored.values().next()
            );
            drop(disk);
        }
    }

    /// A linked table file whose bytes changed after the checkpoint recorded them (a bit
    /// flipped on the disk) is refused by the restore as a corrupt file, as a copied one is.
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_linked_table_file_changed_later_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let (disk, checkpoint) = checkpoint_of(dir.path(), 500);
        let store: Store = Arc::new(crate::storage::LocalStore::new(dir.path().join("checkpoints")).unwrap());
        let b = barrier(store.clone());
        let native = NativeUpload {
            checkpoint,
            reuse: BTreeMap::new(),
            uploaded: UploadedTables::default(),
            entries: 500,
            write_times: false,
        };
        let handle = upload_native(&b, "count", 0, native).await.unwrap();
        let table = handle.files.iter().find(|f| is_table_file(&f.name)).unwrap();
        let path = dir
            .path()
            .join("checkpoints")
            .join(resolve_relative(&b.target.dir, &table.file).unwrap());
        let mut bytes = std::fs::read(&path).unwrap();
        bytes[0] ^= 1;
        std::fs::write(&path, bytes).unwrap();
        let e = native_blocks(&store, &b.target.dir, &handle, dir.path(), None)
            .await
            .unwrap_err();
        assert!(e.to_string().contains("checksum mismatch"), "{e}");
        drop(disk);
    }
}

/// What the error of a damaged table file says, by its copy in the checkpoint storage: intact
/// (the last checkpoint restores), damaged too (locally a hard link of the store's file;
/// nothing that references it restores), missing, or not listable (said to be unchecked, and
/// nothing claimed either way).
#[test]
fn a_damaged_table_files_error_says_whether_its_checkpoint_copy_restores() {
    let damaged = DamagedTable {
        local_size: 51,
        recorded: uploaded("000010.sst", 100, 3),
    };
    const LOCAL: &str = "file:///ckpt/job/shared/c-0-chk3-000010.sst";
    const S3: &str = "s3://b/ckpt/job/shared/c-0-chk3-000010.sst";
    let (local, s3) = (LOCAL, S3);
    // (what, copy URL, what the storage holds, must contain, must not contain)
    type Row = (
        &'static str,
        &'static str,
        StoredCopy,
        &'static [&'static str],
        &'static [&'static str],
    );
    let rows: [Row; 5] = [
        (
            "intact copy",
            local,
            StoredCopy::Size(100),
            &[
                "000010.sst",
                "51 bytes",
                "100 bytes",
                LOCAL,
                "is intact",
                "restores from its last",
            ],
            &["damaged too", "savepoint", NO_REFERENCING_CHECKPOINT_RESTORES],
        ),
        (
            "a local copy damaged too: the same file",
            local,
            StoredCopy::Size(51),
            &[
                "damaged too",
                "hard links",
                NO_REFERENCING_CHECKPOINT_RESTORES,
                "checkpoint 3",
                "savepoint",
                "older than 3",
            ],
            &["is intact"],
        ),
        (
            "an S3 copy at another size: no hard link blamed",
            s3,
            StoredCopy::Size(51),
            &["damaged too", NO_REFERENCING_CHECKPOINT_RESTORES],
            &["hard links"],
        ),
        (
            "missing copy",
            s3,
            StoredCopy::Missing,
            &[
                "is missing",
                NO_REFERENCING_CHECKPOINT_RESTORES,
                "savepoint",
                "older than 3",
            ],
            &["is intact"],
        ),
        (
            "a listing that failed: unchecked, the resume command kept",
            s3,
            StoredCopy::Unknown("503 Slow Down".into()),
            &["could not be checked (503 Slow Down)", "if that copy is intact"],
            &[NO_REFERENCING_CHECKPOINT_RESTORES, "is intact,"],
        ),
    ];
    for (what, copy, stored, want, not_want) in rows {
        let message = damaged_table_message(&damaged, copy, &stored);
        for part in want {
            assert!(message.contains(part), "{what}: no {part:?} in {message}");
        }
        for part in not_want {
            assert!(!message.contains(part), "{what}: {part:?} in {message}");
        }
    }
}

/// The size of a damaged table file's copy is read from the storage, at the path its
/// `_metadata` entry names relative to the snapshot directory.
#[tokio::test]
async fn a_damaged_table_files_copy_is_looked_up_in_the_job_directory() {
    let root = tempfile::tempdir().unwrap();
    let store: crate::storage::Store = std::sync::Arc::new(crate::storage::LocalStore::new(root.path()).unwrap());
    store
        .put("job/shared/c-0-chk3-000010.sst", bytes::Bytes::from(vec![0u8; 51]))
        .await
        .unwrap();
    let damaged = |name: &str| DamagedTable {
        local_size: 51,
        recorded: uploaded(name, 100, 3),
    };
    let copy = |name: &str| format!("job/shared/c-0-chk3-{name}");
    let found = stored_copy(&store, "job/chk-5", &damaged("000010.sst")).await;
    assert_eq!(found, (copy("000010.sst"), StoredCopy::Size(51)));
    let missing = stored_copy(&store, "job/chk-5", &damaged("000011.sst")).await;
    assert_eq!(missing, (copy("000011.sst"), StoredCopy::Missing));
}

/// RocksDB's words for a table format it does not read (its status is text only) make a
/// verified native store's failure a version fault; any other failure is damage.
#[test]
fn a_native_store_that_rocksdb_does_not_read_is_not_damage() {
    let rows = [
        (
            "Corruption: Corrupt or unsupported format_version: 9",
            FormatFault::UnsupportedVersion,
        ),
        (
            "Corruption: Corrupt or unsupported checksum type",
            FormatFault::UnsupportedVersion,
        ),
        ("Corruption: block checksum mismatch", FormatFault::Damage),
        ("IO error: No such file or directory", FormatFault::Damage),
    ];
    for (problem, fault) in rows {
        assert_eq!(native_store_fault(problem), fault, "{problem}");
    }
}
