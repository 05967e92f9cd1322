//! Tests of mapped state files (`mapped_files.rs`): the bytes are the file's, its name is gone
//! once mapped, and a restore by a process with disk stores hands out blocks that are pages of
//! a mapped file, not of the heap, with nothing left in the state root after the load.

use super::*;
use crate::checkpoint::native_restore::LocalKeyedStores;
use crate::state::disk::DiskStateOptions;
use crate::state::key_group::key_group_range;
use crate::state::snapshot::{
    CheckpointMetadata, KeyGroupBlock, OperatorMetadata, StateHandle, StreamedStateFile, encode_metadata,
};

/// The line of `/proc/self/maps` whose address range holds `address` (Linux).
fn mapping_of(address: usize) -> String {
    let maps = std::fs::read_to_string("/proc/self/maps").expect("/proc/self/maps");
    maps.lines()
        .find(|line| {
            let range = line.split_whitespace().next().unwrap_or("");
            let (start, end) = range.split_once('-').unwrap_or(("0", "0"));
            let (start, end) = (
                usize::from_str_radix(start, 16).unwrap(),
                usize::from_str_radix(end, 16).unwrap(),
            );
            start <= address && address < end
        })
        .unwrap_or_else(|| panic!("no mapping holds {address:#x}"))
        .to_string()
}

/// Whether the bytes at `address` are pages of a file that was removed after it was mapped.
fn in_a_removed_files_map(address: usize) -> bool {
    mapping_of(address).ends_with("(deleted)")
}

/// Whether the bytes at `address` are pages of a map of a file under `dir`.
fn in_a_map_of_a_file_under(address: usize, dir: &Path) -> bool {
    mapping_of(address).contains(&format!(" {}/", dir.display()))
}

#[test]
fn a_mapped_file_is_its_bytes_and_its_name_is_gone() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("f.state");
    let content: Vec<u8> = (0..3 * 4096 + 17).map(|i| (i % 251) as u8).collect();
    std::fs::write(&path, &content).unwrap();
    let mapped = map_and_unlink(&path).unwrap();
    assert_eq!(&mapped[..], &content[..]);
    assert!(!path.exists(), "the local name is removed once mapped");
    assert!(in_a_removed_files_map(mapped.as_ptr() as usize));
    // An empty file is empty bytes, its name removed too.
    std::fs::write(&path, b"").unwrap();
    assert!(map_and_unlink(&path).unwrap().is_empty());
    assert!(!path.exists());
    // A missing file is an error naming nothing mapped.
    assert!(map_and_unlink(&path).is_err());
}

fn blocks(groups: std::ops::Range<u32>, bytes_each: u32) -> Vec<KeyGroupBlock> {
    groups
        .map(|kg| KeyGroupBlock {
            expired_through_ms: None,
            key_group: kg,
            entries: u64::from(kg) + 1,
            data: (0..bytes_each).map(|i| (i ^ kg) as u8).collect(),
        })
        .collect()
}

#[test]
fn blocks_written_through_a_file_come_back_as_its_map() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("blocks.state");
    let written = blocks(0..40, 5_000);
    let read = blocks_through_file(
        &path,
        |emit| written.iter().cloned().try_for_each(&mut *emit),
        |problem| problem,
    )
    .unwrap();
    assert_eq!(read, written);
    assert!(read.iter().all(|b| in_a_removed_files_map(b.data.as_ptr() as usize)));
    assert!(!path.exists());
    // The encoder's error stops the write and removes the file.
    let failed = blocks_through_file(
        &path,
        |emit| {
            emit(written[0].clone())?;
            Err("the store failed to read".to_string())
        },
        |problem| problem,
    );
    assert_eq!(failed, Err("the store failed to read".to_string()));
    assert!(!path.exists());
}

/// One keyed operator's checkpoint in a local store: two subtasks' state files of
/// `bytes_each` bytes per block, blocks of 64 key groups each.
fn write_checkpoint(root: &Path, bytes_each: u32) -> (Vec<KeyGroupBlock>, CheckpointMetadata) {
    let dir = root.join("chk-1");
    std::fs::create_dir_all(&dir).unwrap();
    let all = blocks(0..128, bytes_each);
    let mut handles = vec![];
    for subtask in 0..2u32 {
        let range = key_group_range(subtask, 2, 128);
        let (mut writer, mut file) = StreamedStateFile::start("counts", subtask, vec![]);
        for block in all.iter().filter(|b| range.contains(b.key_group)) {
            file.extend(writer.block(block));
            file.extend_from_slice(&block.data);
        }
        file.extend(writer.finish());
        let name = format!("counts-{subtask}.state");
        std::fs::write(dir.join(&name), &file).unwrap();
        handles.push(StateHandle {
            file: name,
            subtask,
            key_group_range: Some(range),
            size: file.len() as u64,
            crc32: crc32fast::hash(&file),
            entries: 64,
            operator_items: Some(0),
            chain: vec![],
            native: None,
            expired_through_ms: None,
        });
    }
    let metadata = CheckpointMetadata {
        format_version: 1,
        job_name: "job".into(),
        checkpoint_id: 1,
        kind: crate::control::api::SnapshotKind::Savepoint,
        max_parallelism: 128,
        parallelism: 2,
        triggered_at_ms: 0,
        completed_at_ms: 0,
        run_id: None,
        operators: vec![OperatorMetadata {
            uid: "counts".into(),
            kind: "count".into(),
            parallelism: 2,
            state_names: vec!["keyed:aggregate".into()],
            handles,
        }],
        channel_state: vec![],
        alignment: Default::default(),
    };
    std::fs::write(dir.join(crate::checkpoint::METADATA_FILE), encode_metadata(&metadata)).unwrap();
    (all, metadata)
}

fn stores(state_root: &Path, disk: bool) -> LocalKeyedStores {
    LocalKeyedStores {
        parallelism: 1,
        max_parallelism_set: None,
        stores: vec![("counts".into(), 0)],
        run_dir: state_root.join("run"),
        disk: disk.then(DiskStateOptions::default),
        ttl_steps: vec![],
        without_keyed_state: false,
    }
}

/// A process with disk stores restores a savepoint's large state files through maps: every
/// block, as written, is a page of the checkpoint directory's own file (a local store's
/// files are mapped in place), and the state root holds nothing of the load afterwards; a
/// heap process reads the same files into memory.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disk_restore_maps_large_state_files_and_a_heap_restore_reads_them() {
    let storage = tempfile::tempdir().unwrap();
    // 64 blocks of 40 KB per file: 2.5 MB, above the map threshold.
    let (written, _) = write_checkpoint(storage.path(), 40_000);
    let store: Store = std::sync::Arc::new(crate::storage::LocalStore::new(storage.path()).unwrap());
    for disk in [true, false] {
        let state_root = tempfile::tempdir().unwrap();
        let snapshot = crate::checkpoint::restore::load_for(&store, "chk-1", &stores(state_root.path(), disk))
            .await
            .unwrap();
        let mut restored: Vec<KeyGroupBlock> = snapshot.files.values().flat_map(|f| f.key_groups.clone()).collect();
        restored.sort_by_key(|b| b.key_group);
        assert_eq!(restored, written, "disk: {disk}");
        let stored = storage.path().canonicalize().unwrap();
        let mapped = restored
            .iter()
            .filter(|b| in_a_map_of_a_file_under(b.data.as_ptr() as usize, &stored))
            .count();
        assert_eq!(mapped, if disk { written.len() } else { 0 }, "disk: {disk}");
        // The owners' lock files (`state/local_dir.rs`) stay in the root; no store does.
        let left: Vec<_> = std::fs::read_dir(state_root.path())
            .unwrap()
            .filter(|e| e.as_ref().unwrap().file_name() != crate::state::local_dir::OWNER_LOCKS_DIR)
            .collect();
        assert!(left.is_empty(), "disk: {disk}: the load left {left:?}");
        // The stored files are untouched (a map of a hard link to them, never a move).
        assert!(storage.path().join("chk-1/counts-0.state").exists());
    }
}

/// Files under [`MAP_MIN_BYTES`] are read into memory even by a disk process.
#[tokio::test]
async fn small_state_files_are_read_into_memory() {
    let storage = tempfile::tempdir().unwrap();
    let (written, _) = write_checkpoint(storage.path(), 100);
    let store: Store = std::sync::Arc::new(crate::storage::LocalStore::new(storage.path()).unwrap());
    let state_root = tempfile::tempdir().unwrap();
    let snapshot = crate::checkpoint::restore::load_for(&store, "chk-1", &stores(state_root.path(), true))
        .await
        .unwrap();
    let restored: Vec<&KeyGroupBlock> = snapshot.files.values().flat_map(|f| &f.key_groups).collect();
    assert_eq!(restored.len(), written.len());
    let stored = storage.path().canonicalize().unwrap();
    assert!(
        restored
            .iter()
            .all(|b| !in_a_map_of_a_file_under(b.data.as_ptr() as usize, &stored))
    );
}

/// A state file missing from a local checkpoint directory is `not found`, as the local store
/// names a missing object (a plain read said so before state files were mapped).
#[tokio::test]
async fn a_missing_local_file_is_not_found() {
    let storage = tempfile::tempdir().unwrap();
    let store: Store = std::sync::Arc::new(crate::storage::LocalStore::new(storage.path()).unwrap());
    let e = fetch_mapped(&store, "chk-1/gone.state", &storage.path().join("unused"))
        .await
        .unwrap_err();
    assert!(matches!(e, StorageError::NotFound(_)), "{e:?}");
    assert!(e.to_string().ends_with("chk-1/gone.state: not found"), "{e}");
}
