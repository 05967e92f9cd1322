//! Local-store multipart checks beyond the shared contract (`tests/storage_contract.rs`): the
//! staging file's layout, crash and restore paths, and the earlier directory layout.

use super::*;
use std::os::unix::fs::MetadataExt;

fn store_in(dir: &tempfile::TempDir) -> LocalStore {
    LocalStore::new(dir.path()).expect("opening the local store")
}

/// Deterministic test data of `len` bytes.
fn data(len: usize, seed: u8) -> Bytes {
    (0..len).map(|i| (i as u8).wrapping_mul(31) ^ seed).collect()
}

/// The hidden entries of `dir` (staging files, temporaries), sorted.
fn hidden_entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .expect("reading the output directory")
        .map(|e| e.expect("directory entry").file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with('.'))
        .collect();
    names.sort();
    names
}

/// The upload as a checkpoint records it and a restored run reads it back.
fn as_restored(upload: &MultipartUpload) -> MultipartUpload {
    serde_json::from_str(&serde_json::to_string(upload).unwrap()).unwrap()
}

/// "No byte is written twice", observed: the parts go into one staging file whose size is the
/// sum of the parts (no part files beside it), and the completed object is that very file
/// (same inode), so completion copied nothing.
#[tokio::test]
async fn completion_renames_the_staging_file_without_copying() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_in(&dir);
    let parts = [data(MIN_PART_SIZE, 1), data(MIN_PART_SIZE, 2), data(777, 3)];
    let mut upload = store.create_multipart("out/part-0").await.unwrap();
    for part in &parts {
        store.upload_part(&mut upload, part.clone()).await.unwrap();
    }
    let staging = store.staging(&upload);
    let staged = std::fs::metadata(&staging).expect("the staging file exists before completion");
    let total: usize = parts.iter().map(Bytes::len).sum();
    assert_eq!(staged.len(), total as u64, "staging holds each byte once");
    assert_eq!(
        hidden_entries(&dir.path().join("out")),
        [staging.file_name().unwrap().to_string_lossy().into_owned()],
        "one staging file, no part files"
    );

    store.complete_multipart(&upload).await.unwrap();
    let target = std::fs::metadata(dir.path().join("out/part-0")).unwrap();
    assert_eq!(target.ino(), staged.ino(), "the object is the staging file, renamed");
    assert_eq!(target.len(), total as u64);
    assert!(hidden_entries(&dir.path().join("out")).is_empty(), "no staging left");
    assert!(store.get("out/part-0").await.unwrap() == parts.concat());
}

/// Part 2 written before part 1 (each from the state that records the parts before it) still
/// lands after part 1: a part's offset comes from the recorded lengths, not from the order of
/// arrival.
#[tokio::test]
async fn parts_uploaded_out_of_order_land_at_their_offsets() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_in(&dir);
    let (first, second) = (data(1000, 4), data(300, 5));
    let empty = store.create_multipart("out/part-1").await.unwrap();
    let after_first = MultipartUpload {
        parts: vec![(1, first.len().to_string())],
        ..empty.clone()
    };
    let mut complete = after_first.clone();
    store.upload_part(&mut complete, second.clone()).await.unwrap();
    store.upload_part(&mut empty.clone(), first.clone()).await.unwrap();
    assert_eq!(complete.parts, [(1, "1000".to_string()), (2, "300".to_string())]);
    store.complete_multipart(&complete).await.unwrap();
    assert!(store.get("out/part-1").await.unwrap() == [first, second].concat());
}

/// A part uploaded again from the same recorded state replaces the earlier attempt, even when
/// that attempt was longer: completion cuts the staging file to the recorded length.
#[tokio::test]
async fn a_part_uploaded_again_shorter_replaces_the_longer_attempt() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_in(&dir);
    let first = data(500, 6);
    let mut upload = store.create_multipart("out/part-2").await.unwrap();
    store.upload_part(&mut upload, first.clone()).await.unwrap();
    let recorded = upload.clone();
    store.upload_part(&mut upload, data(4000, 7)).await.unwrap(); // attempt lost in a crash
    let mut retried = recorded;
    let last = data(40, 8);
    store.upload_part(&mut retried, last.clone()).await.unwrap();
    store.complete_multipart(&retried).await.unwrap();
    assert!(store.get("out/part-2").await.unwrap() == [first, last].concat());
}

/// A crash after the pre-commit and before the commit: the staging file is there, the target
/// is not. Another process (a new store on the same directory) completes the upload recorded in
/// the checkpoint; a second completion (a second restore) is Ok and changes nothing.
#[tokio::test]
async fn completion_after_a_simulated_crash_in_a_new_process() {
    let dir = tempfile::tempdir().unwrap();
    let parts = [data(MIN_PART_SIZE, 9), data(123, 10)];
    let recorded = {
        let store = store_in(&dir);
        let mut upload = store.create_multipart("out/part-3").await.unwrap();
        for part in &parts {
            store.upload_part(&mut upload, part.clone()).await.unwrap();
        }
        serde_json::to_string(&upload).unwrap()
    };
    assert!(!dir.path().join("out/part-3").exists(), "not visible before the commit");

    let restored_store = store_in(&dir);
    let restored: MultipartUpload = serde_json::from_str(&recorded).unwrap();
    restored_store.complete_multipart(&restored).await.unwrap();
    restored_store
        .complete_multipart(&as_restored(&restored))
        .await
        .unwrap();
    assert!(restored_store.get("out/part-3").await.unwrap() == parts.concat());
    assert!(hidden_entries(&dir.path().join("out")).is_empty(), "no staging left");
}

/// Staging data shorter than the recorded parts (a part the record names never reached the
/// disk) is an error naming the staging file, not a short object.
#[tokio::test]
async fn completion_with_missing_staged_bytes_is_an_error() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_in(&dir);
    let mut upload = store.create_multipart("out/part-4").await.unwrap();
    store.upload_part(&mut upload, data(100, 11)).await.unwrap();
    upload.parts.push((2, "50".into()));
    let err = store.complete_multipart(&upload).await.unwrap_err().to_string();
    assert!(err.contains("has 100 bytes, the recorded parts add up to 150"), "{err}");
    assert!(err.contains(".part-4.upload-"), "names the staging file: {err}");
    assert!(!store.exists("out/part-4").await.unwrap());
}

/// Abort removes the staging file; uploading to or completing the aborted upload afterwards is
/// `NotFound` and leaves no file behind.
#[tokio::test]
async fn abort_removes_the_staging_file_and_later_uploads_are_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_in(&dir);
    let mut upload = store.create_multipart("out/part-5").await.unwrap();
    store.upload_part(&mut upload, data(2000, 12)).await.unwrap();
    store.abort_multipart(&upload).await.unwrap();
    assert!(hidden_entries(&dir.path().join("out")).is_empty());
    let late = store.upload_part(&mut upload.clone(), data(10, 13)).await;
    assert!(matches!(late, Err(StorageError::NotFound(_))), "{late:?}");
    let complete = store.complete_multipart(&upload).await;
    assert!(matches!(complete, Err(StorageError::NotFound(_))), "{complete:?}");
    assert!(hidden_entries(&dir.path().join("out")).is_empty(), "no file recreated");
    assert!(!store.exists("out/part-5").await.unwrap());
}

/// A restore point written before the single staging file may name an upload staged the
/// earlier way, as a directory of numbered part files: completion still concatenates them.
#[tokio::test]
async fn an_upload_staged_as_a_directory_of_parts_still_completes() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_in(&dir);
    let upload = MultipartUpload {
        path: "out/part-6".into(),
        upload_id: "earlier-layout".into(),
        parts: vec![(1, "3".into()), (2, "2".into())],
    };
    let staging = store.staging(&upload);
    std::fs::create_dir_all(&staging).unwrap();
    std::fs::write(staging.join("00001"), b"ab\n").unwrap();
    std::fs::write(staging.join("00002"), b"c\n").unwrap();
    store.complete_multipart(&upload).await.unwrap();
    assert_eq!(store.get("out/part-6").await.unwrap(), Bytes::from_static(b"ab\nc\n"));
    assert!(!staging.exists(), "the part directory is removed");
}

/// A crash inside the earlier layout's cleanup (after the rename, while the staging directory
/// was being removed) leaves the directory without its part files. Completing again on restore
/// must succeed, keep the committed bytes and remove the leftover.
#[tokio::test]
async fn completion_after_a_crash_during_staging_cleanup_is_ok() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_in(&dir);
    let mut upload = store.create_multipart("out/part-0").await.unwrap();
    store
        .upload_part(&mut upload, Bytes::from_static(b"a\nb\n"))
        .await
        .unwrap();
    store.complete_multipart(&upload).await.unwrap();
    let staging = store.staging(&upload);
    std::fs::create_dir_all(&staging).unwrap(); // files gone, directory not yet
    store.complete_multipart(&upload).await.unwrap();
    assert_eq!(store.get("out/part-0").await.unwrap(), Bytes::from_static(b"a\nb\n"));
    assert!(!staging.exists(), "leftover staging directory is removed");
}

/// An upload that was never completed and whose staging is gone is reported, not silently
/// turned into an empty object.
#[tokio::test]
async fn completion_without_staging_or_target_is_not_found() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_in(&dir);
    let mut upload = store.create_multipart("out/part-1").await.unwrap();
    store
        .upload_part(&mut upload, Bytes::from_static(b"x\n"))
        .await
        .unwrap();
    std::fs::remove_file(store.staging(&upload)).unwrap();
    let err = store.complete_multipart(&upload).await.unwrap_err();
    assert!(matches!(err, StorageError::NotFound(_)), "{err}");
}

/// A local file on the store's file system is placed as a link, not a copy (the object is the
/// file's inode, nothing left beside it), replacing an object already there; a store on
/// another file system or a missing file is `false` (the caller sends the bytes). An object
/// is linked out as a local file the same way, replacing a file there; a missing object is
/// `false`.
#[tokio::test]
async fn files_are_linked_in_and_out_on_one_file_system() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_in(&dir);
    let local = dir.path().join("000012.sst");
    std::fs::write(&local, data(3_000, 4)).unwrap();
    store.put("shared/c-0-chk2-000012.sst", data(10, 1)).await.unwrap();
    assert!(
        store
            .link_from_local("shared/c-0-chk2-000012.sst", &local)
            .await
            .unwrap()
    );
    let placed = std::fs::metadata(dir.path().join("shared/c-0-chk2-000012.sst")).unwrap();
    assert_eq!(
        placed.ino(),
        std::fs::metadata(&local).unwrap().ino(),
        "a link, not a copy"
    );
    assert!(store.get("shared/c-0-chk2-000012.sst").await.unwrap() == data(3_000, 4));
    assert!(
        hidden_entries(&dir.path().join("shared")).is_empty(),
        "no temporary left"
    );
    let missing = dir.path().join("000099.sst");
    assert!(!store.link_from_local("shared/x.sst", &missing).await.unwrap());
    assert!(!store.exists("shared/x.sst").await.unwrap());

    let restored = dir.path().join("restore-000012.sst");
    std::fs::write(&restored, b"an earlier attempt").unwrap();
    assert!(store.link_to_local("shared/c-0-chk2-000012.sst", &restored).await);
    assert_eq!(std::fs::metadata(&restored).unwrap().ino(), placed.ino());
    assert!(
        !store
            .link_to_local("shared/gone.sst", &dir.path().join("gone.sst"))
            .await
    );

    // Another file system (a memory file system beside the disk, where the machine has one):
    // no link is possible, nothing is placed.
    let elsewhere = std::path::Path::new("/dev/shm");
    if elsewhere.is_dir() && std::fs::metadata(elsewhere).unwrap().dev() != placed.dev() {
        let other = tempfile::tempdir_in(elsewhere).unwrap();
        let file = other.path().join("000013.sst");
        std::fs::write(&file, b"table").unwrap();
        assert!(!store.link_from_local("shared/y.sst", &file).await.unwrap());
        assert!(!store.exists("shared/y.sst").await.unwrap());
        assert!(
            !store
                .link_to_local("shared/c-0-chk2-000012.sst", &other.path().join("t.sst"))
                .await
        );
    }
}

#[test]
fn a_temporary_files_name_gives_the_object_it_was_writing() {
    let rows = [
        (".c-0-chk349-000012.delta.tmp-4242-7", Some("c-0-chk349-000012.delta")),
        (".c-0-chk3.state.upload-9f8e", Some("c-0-chk3.state")),
        (".a.tmp-x.state.tmp-1-2", Some("a.tmp-x.state")),
        ("c-0-chk3.state", None),
        (".hidden", None),
        (".tmp-1-2", None),
        (".c-0-chk3.state.tmp-", None),
    ];
    for (name, want) in rows {
        assert_eq!(super::temporary_target(name), want, "{name}");
    }
}

/// A write cut off by a kill leaves its hidden temporary file, which `list` does not show:
/// `list_temporaries` does, with the object it was writing, and `delete` removes it.
#[tokio::test]
async fn temporaries_of_cut_off_writes_are_listed_and_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let store = store_in(&dir);
    store.put("job/shared/c-0-chk3.state", data(10, 1)).await.unwrap();
    std::fs::write(dir.path().join("job/shared/.c-0-chk4.state.tmp-4242-0"), b"partial").unwrap();
    std::fs::write(dir.path().join("job/shared/.c-0-chk5.state.upload-abc"), b"partial").unwrap();
    assert_eq!(store.list("job/shared/").await.unwrap().len(), 1);
    let temporaries = store.list_temporaries("job/shared/").await.unwrap();
    assert_eq!(
        temporaries,
        vec![
            (
                "job/shared/.c-0-chk4.state.tmp-4242-0".to_string(),
                "job/shared/c-0-chk4.state".to_string()
            ),
            (
                "job/shared/.c-0-chk5.state.upload-abc".to_string(),
                "job/shared/c-0-chk5.state".to_string()
            ),
        ]
    );
    store.delete(&temporaries[0].0).await.unwrap();
    assert!(!dir.path().join("job/shared/.c-0-chk4.state.tmp-4242-0").exists());
    assert!(store.list_temporaries("job/missing/").await.unwrap().is_empty());
}
