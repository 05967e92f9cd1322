//! Tests of [`super`]: which snapshots and files a pass deletes, and what it reads.

use super::*;
use crate::state::snapshot::{ChainLink, CheckpointMetadata, OperatorMetadata, StateHandle, encode_metadata};
use crate::storage::LocalStore;
use bytes::Bytes;
use std::sync::Arc;

fn checkpoint(id: u64, completed: bool, of_this_lineage: bool) -> StoredSnapshot {
    StoredSnapshot {
        id,
        completed,
        savepoint: false,
        of_this_lineage,
    }
}

fn savepoint_pointer(id: u64, completed: bool, of_this_lineage: bool) -> StoredSnapshot {
    StoredSnapshot {
        savepoint: true,
        ..checkpoint(id, completed, of_this_lineage)
    }
}

/// Which snapshots a pass deletes (the run's first id is 10 in every row, `retained` 2).
#[test]
fn which_snapshots_a_retention_pass_deletes_table() {
    // (what, stored snapshots, deleted)
    type Row = (&'static str, Vec<StoredSnapshot>, Vec<u64>);
    let rows: Vec<Row> = vec![
        (
            "incomplete directories of earlier runs (killed before _metadata) go once this run completed one",
            vec![
                checkpoint(3, true, true),
                checkpoint(4, false, false),
                checkpoint(7, false, false),
                checkpoint(10, true, true),
            ],
            vec![4, 7],
        ),
        (
            "before this run completed a checkpoint nothing is deleted",
            vec![
                checkpoint(3, true, true),
                checkpoint(4, false, false),
                checkpoint(10, false, false),
            ],
            vec![],
        ),
        (
            "this run's checkpoint in flight (newer than its newest completed one) is kept",
            vec![
                checkpoint(10, true, true),
                checkpoint(11, true, true),
                checkpoint(12, false, false),
            ],
            vec![],
        ),
        (
            "this run's abandoned checkpoint between completed ones goes, completed ones beyond retained go",
            vec![
                checkpoint(10, true, true),
                checkpoint(11, false, false),
                checkpoint(12, true, true),
                checkpoint(13, true, true),
            ],
            vec![10, 11],
        ),
        (
            "completed checkpoints of another lineage, or with an unreadable _metadata, are never deleted",
            vec![
                checkpoint(1, true, false),
                checkpoint(2, true, false),
                checkpoint(5, false, false),
                checkpoint(10, true, true),
                checkpoint(11, true, true),
                checkpoint(12, true, true),
            ],
            vec![5, 10],
        ),
        (
            "savepoint pointers: this lineage's count as retained snapshots; another's stay",
            vec![
                savepoint_pointer(4, true, false),
                checkpoint(10, true, true),
                savepoint_pointer(11, true, true),
                checkpoint(12, true, true),
            ],
            vec![10],
        ),
        (
            "an incomplete pointer directory is deleted only when this run created it",
            vec![
                savepoint_pointer(4, false, false),
                savepoint_pointer(10, false, false),
                checkpoint(11, true, true),
            ],
            vec![10],
        ),
    ];
    for (what, stored, want) in rows {
        assert_eq!(snapshots_to_delete(&stored, 10, 2), want, "{what}");
    }
}

/// Checkpoint directories the object listing does not show (only temporary files inside)
/// are found by name; listed ones, savepoint pointers and other names are not repeated.
#[test]
fn unlisted_checkpoint_directories_table() {
    let seen = |id: u64, savepoint: bool| SeenSnapshot {
        id,
        completed: false,
        savepoint,
    };
    let names = |list: &[&str]| -> Vec<String> { list.iter().map(|n| n.to_string()).collect() };
    // (what, directories, listed snapshots, unlisted checkpoint ids)
    type Row = (&'static str, Vec<String>, Vec<SeenSnapshot>, Vec<u64>);
    let rows: Vec<Row> = vec![
        (
            "every directory listed",
            names(&["chk-1", "chk-2"]),
            vec![seen(1, false), seen(2, false)],
            vec![],
        ),
        (
            "a directory with only a temporary file",
            names(&["chk-1", "chk-2"]),
            vec![seen(1, false)],
            vec![2],
        ),
        (
            "a savepoint pointer of the same id is not the checkpoint",
            names(&["chk-3", "sp-3"]),
            vec![seen(3, true)],
            vec![3],
        ),
        (
            "other names",
            names(&["shared", "runs", "chk-x", "chk-"]),
            vec![],
            vec![],
        ),
    ];
    for (what, directories, listed, want) in rows {
        assert_eq!(unlisted_checkpoint_directories(&directories, &listed), want, "{what}");
    }
}

/// A keyed count's checkpoint `id` of lineage `run_id`: its own file and a chain of shared
/// files (`chain`: checkpoint ids, base first).
fn metadata(id: u64, run_id: &str, chain: &[u64]) -> CheckpointMetadata {
    let link = |chain_id: u64| ChainLink {
        file: format!("../shared/c-0-chk{chain_id}.state"),
        checkpoint_id: chain_id,
        base: chain_id == chain[0],
        size: 1,
        crc32: 0,
        entries: 1,
    };
    CheckpointMetadata {
        format_version: 1,
        job_name: "job".into(),
        checkpoint_id: id,
        kind: crate::control::api::SnapshotKind::Checkpoint,
        max_parallelism: 128,
        parallelism: 1,
        triggered_at_ms: 0,
        completed_at_ms: 0,
        run_id: Some(run_id.into()),
        operators: vec![OperatorMetadata {
            uid: "c".into(),
            kind: "count".into(),
            parallelism: 1,
            state_names: vec![],
            handles: vec![StateHandle {
                file: format!("../shared/c-0-chk{id}.state"),
                subtask: 0,
                key_group_range: None,
                size: 1,
                crc32: 0,
                entries: 1,
                operator_items: None,
                chain: chain.iter().map(|c| link(*c)).collect(),
                native: None,
                expired_through_ms: None,
            }],
        }],
        channel_state: vec![],
        alignment: Default::default(),
    }
}

/// Writes `job/chk-<id>/_metadata` of lineage `lineage` with the chain `chain` ([`metadata`]).
async fn put_checkpoint(store: &Store, id: u64, chain: &[u64]) {
    let bytes = Bytes::from(encode_metadata(&metadata(id, "lineage", chain)));
    store.put(&format!("job/chk-{id}/_metadata"), bytes).await.unwrap();
}

/// [`super::super::shared_files::collect`] of job `job` over the snapshots listed now.
async fn collect(store: &Store) -> usize {
    let seen = lineage::list_snapshots(store, "job").await.unwrap();
    crate::checkpoint::shared_files::collect(store, "job", &seen, &mut MetadataCache::default())
        .await
        .unwrap()
}

/// The shared files of job `job`, sorted.
async fn shared_files(store: &Store) -> Vec<String> {
    let mut left: Vec<String> = store
        .list("job/shared/")
        .await
        .unwrap()
        .into_iter()
        .map(|o| o.path)
        .collect();
    left.sort();
    left
}

/// A run's passes read each `_metadata` once (two checkpoints, then a third: three reads
/// over two passes, where each pass read every one twice before), and a pass deletes the
/// shared files of the checkpoints it deleted itself.
#[tokio::test]
async fn passes_read_each_metadata_once_and_collect_what_they_retired() {
    let dir = tempfile::tempdir().unwrap();
    let store: Store = Arc::new(LocalStore::new(dir.path().to_str().unwrap()).unwrap());
    let scope = RetentionScope {
        store: store.clone(),
        job: "job".into(),
        retained: 1,
        run_id: "lineage".into(),
        first_id: 1,
    };
    let mut cache = MetadataCache::default();
    for id in [1, 2] {
        put_checkpoint(&store, id, &[id]).await;
        store
            .put(&format!("job/shared/c-0-chk{id}.state"), Bytes::from_static(b"s"))
            .await
            .unwrap();
    }
    pass(&scope, &mut cache).await;
    assert_eq!(shared_files(&store).await, ["job/shared/c-0-chk2.state"]);
    assert_eq!(cache.reads(), 2);
    put_checkpoint(&store, 3, &[3]).await;
    store
        .put("job/shared/c-0-chk3.state", Bytes::from_static(b"s"))
        .await
        .unwrap();
    pass(&scope, &mut cache).await;
    assert_eq!(shared_files(&store).await, ["job/shared/c-0-chk3.state"]);
    assert_eq!(checkpoint_ids_left(&store).await, [3]);
    assert_eq!(cache.reads(), 3);
}

/// A store that counts the objects its listings return under `job/shared/`.
#[derive(Debug)]
struct CountingListings {
    inner: Store,
    shared_listed: std::sync::atomic::AtomicUsize,
}

#[async_trait::async_trait]
impl crate::storage::ObjectStore for CountingListings {
    fn url(&self, path: &str) -> String {
        self.inner.url(path)
    }
    async fn put(&self, path: &str, data: Bytes) -> crate::storage::Result<()> {
        self.inner.put(path, data).await
    }
    async fn put_if_absent(&self, path: &str, data: Bytes) -> crate::storage::Result<crate::storage::PutOutcome> {
        self.inner.put_if_absent(path, data).await
    }
    async fn get(&self, path: &str) -> crate::storage::Result<Bytes> {
        self.inner.get(path).await
    }
    async fn get_from(&self, path: &str, offset: u64) -> crate::storage::Result<Bytes> {
        self.inner.get_from(path, offset).await
    }
    async fn exists(&self, path: &str) -> crate::storage::Result<bool> {
        self.inner.exists(path).await
    }
    async fn list(&self, prefix: &str) -> crate::storage::Result<Vec<crate::storage::ObjectMeta>> {
        let listed = self.inner.list(prefix).await?;
        let shared = listed.iter().filter(|o| o.path.starts_with("job/shared/")).count();
        self.shared_listed
            .fetch_add(shared, std::sync::atomic::Ordering::Relaxed);
        Ok(listed)
    }
    async fn list_directories(&self, prefix: &str) -> crate::storage::Result<Vec<String>> {
        self.inner.list_directories(prefix).await
    }
    async fn delete(&self, path: &str) -> crate::storage::Result<()> {
        self.inner.delete(path).await
    }
    async fn create_multipart(&self, path: &str) -> crate::storage::Result<crate::storage::MultipartUpload> {
        self.inner.create_multipart(path).await
    }
    async fn upload_part(
        &self,
        upload: &mut crate::storage::MultipartUpload,
        data: Bytes,
    ) -> crate::storage::Result<()> {
        self.inner.upload_part(upload, data).await
    }
    async fn upload_part_at(
        &self,
        upload: &crate::storage::MultipartUpload,
        number: i32,
        offset: u64,
        data: Bytes,
    ) -> crate::storage::Result<String> {
        self.inner.upload_part_at(upload, number, offset, data).await
    }
    async fn complete_multipart(&self, upload: &crate::storage::MultipartUpload) -> crate::storage::Result<()> {
        self.inner.complete_multipart(upload).await
    }
    async fn abort_multipart(&self, upload: &crate::storage::MultipartUpload) -> crate::storage::Result<()> {
        self.inner.abort_multipart(upload).await
    }
}

/// A pass lists each shared file once (`shared/` itself): the snapshot listings skip it,
/// and the directory listing is the store's own (S3's with a delimiter since 2026-12-06,
/// `storage_contract` tests). Before, an S3 pass listed every shared file four times (two
/// snapshot listings, the directories, `shared/`): at 1,448 shared files, eight requests
/// of 1,000 keys per pass for what two do now.
#[tokio::test]
async fn a_pass_lists_the_shared_files_once() {
    let dir = tempfile::tempdir().unwrap();
    let local: Store = Arc::new(LocalStore::new(dir.path().to_str().unwrap()).unwrap());
    for id in 1..=3 {
        put_checkpoint(&local, id, &[1, id]).await;
        local
            .put(&format!("job/shared/c-0-chk{id}.state"), Bytes::from_static(b"s"))
            .await
            .unwrap();
    }
    let counting = Arc::new(CountingListings {
        inner: local,
        shared_listed: Default::default(),
    });
    let scope = RetentionScope {
        store: counting.clone(),
        job: "job".into(),
        retained: 3,
        run_id: "lineage".into(),
        first_id: 1,
    };
    pass(&scope, &mut MetadataCache::default()).await;
    assert_eq!(counting.shared_listed.load(std::sync::atomic::Ordering::Relaxed), 3);
}

/// The checkpoint ids of job `job` whose `_metadata` is there.
async fn checkpoint_ids_left(store: &Store) -> Vec<u64> {
    lineage::list_snapshots(store, "job")
        .await
        .unwrap()
        .into_iter()
        .filter(|s| s.completed)
        .map(|s| s.id)
        .collect()
}

/// One completed checkpoint whose `_metadata` does not verify (chk-2) keeps the shared
/// files it may reference (ids up to 2), and no more: the unreferenced files of later
/// checkpoints (3, 4) are still deleted. Before, the whole collection stopped at it.
#[tokio::test]
async fn an_unreadable_metadata_keeps_only_the_shared_files_up_to_its_id() {
    let dir = tempfile::tempdir().unwrap();
    let store: Store = Arc::new(LocalStore::new(dir.path().to_str().unwrap()).unwrap());
    let mut corrupt = encode_metadata(&metadata(2, "lineage", &[1, 2]));
    let last = corrupt.len() - 1;
    corrupt[last] ^= 0xFF;
    store.put("job/chk-2/_metadata", Bytes::from(corrupt)).await.unwrap();
    put_checkpoint(&store, 5, &[5]).await;
    for id in 1..=5 {
        store
            .put(&format!("job/shared/c-0-chk{id}.state"), Bytes::from_static(b"s"))
            .await
            .unwrap();
    }
    let deleted = collect(&store).await;
    let left = shared_files(&store).await;
    assert_eq!(deleted, 2);
    assert_eq!(
        left,
        [
            "job/shared/c-0-chk1.state",
            "job/shared/c-0-chk2.state",
            "job/shared/c-0-chk5.state"
        ]
    );
}

/// A kill in the middle of a shared file's upload leaves the local store's hidden temporary
/// file: the pass deletes it once its checkpoint (4) is older than the newest completed one
/// (5), and keeps the in-flight checkpoint's (6).
#[tokio::test]
async fn a_pass_deletes_the_temporary_files_of_cut_off_uploads() {
    let dir = tempfile::tempdir().unwrap();
    let store: Store = Arc::new(LocalStore::new(dir.path().to_str().unwrap()).unwrap());
    put_checkpoint(&store, 5, &[5]).await;
    store
        .put("job/shared/c-0-chk5.state", Bytes::from_static(b"s"))
        .await
        .unwrap();
    let shared = dir.path().join("job/shared");
    std::fs::write(shared.join(".c-0-chk4.state.tmp-4242-0"), b"partial").unwrap();
    std::fs::write(shared.join(".c-0-chk6.state.tmp-4242-1"), b"in flight").unwrap();
    collect(&store).await;
    assert!(
        !shared.join(".c-0-chk4.state.tmp-4242-0").exists(),
        "the cut-off upload's temporary file is deleted"
    );
    assert!(
        shared.join(".c-0-chk6.state.tmp-4242-1").exists(),
        "the checkpoint in flight's is kept"
    );
    assert!(shared.join("c-0-chk5.state").exists());
}

/// The layout runs killed between a checkpoint's first upload and its `_metadata` leave
/// (`chk-3` with a state file, `chk-4` with only the temporary file of a cut-off write, a
/// shared file each, no `_metadata`), then a
/// run (first id 5) that completed `chk-5` and has `chk-6` in flight: its retention pass
/// deletes the killed runs' incomplete directories and the shared files only they uploaded,
/// and keeps the completed checkpoints (another lineage's `chk-1` too), the checkpoint in
/// flight, and every shared file a retained checkpoint references.
#[tokio::test]
async fn a_pass_deletes_the_incomplete_checkpoints_killed_runs_left() {
    let dir = tempfile::tempdir().unwrap();
    let store: Store = Arc::new(LocalStore::new(dir.path().to_str().unwrap()).unwrap());
    let put = |path: String, bytes: Vec<u8>| {
        let store = store.clone();
        async move { store.put(&path, Bytes::from(bytes)).await.unwrap() }
    };
    // An earlier fresh run of another lineage, then this lineage's chk-2, then two runs
    // restored from chk-2 and killed before their checkpoint's `_metadata`.
    put(
        "job/chk-1/_metadata".into(),
        encode_metadata(&metadata(1, "other", &[1])),
    )
    .await;
    put("job/shared/c-0-chk1.state".into(), b"s".to_vec()).await;
    put(
        "job/chk-2/_metadata".into(),
        encode_metadata(&metadata(2, "lineage", &[2])),
    )
    .await;
    put("job/shared/c-0-chk2.state".into(), b"s".to_vec()).await;
    for killed in [3, 4] {
        put(format!("job/shared/c-0-chk{killed}.state"), b"s".to_vec()).await;
    }
    put("job/chk-3/src-0.state".into(), b"s".to_vec()).await;
    // chk-4's run was killed while writing its first file: only the temporary file of that
    // write is there, which the store's listing does not show.
    std::fs::create_dir_all(dir.path().join("job/chk-4")).unwrap();
    std::fs::write(dir.path().join("job/chk-4/.src-0.state.tmp-4242-0"), b"partial").unwrap();
    assert!(store.list("job/chk-4/").await.unwrap().is_empty());
    // This run (first id 5): chk-5 completed as a delta on chk-2's base; chk-6 in flight.
    put(
        "job/chk-5/_metadata".into(),
        encode_metadata(&metadata(5, "lineage", &[2, 5])),
    )
    .await;
    put("job/shared/c-0-chk5.state".into(), b"s".to_vec()).await;
    put("job/chk-6/src-0.state".into(), b"s".to_vec()).await;
    put("job/shared/c-0-chk6.state".into(), b"s".to_vec()).await;
    let scope = RetentionScope {
        store: store.clone(),
        job: "job".into(),
        retained: 3,
        run_id: "lineage".into(),
        first_id: 5,
    };
    pass(&scope, &mut MetadataCache::default()).await;
    for killed in ["job/chk-3", "job/chk-4"] {
        assert!(!dir.path().join(killed).exists(), "{killed} is still there");
    }
    let mut left: Vec<String> = store.list("job/").await.unwrap().into_iter().map(|o| o.path).collect();
    left.sort();
    assert_eq!(
        left,
        [
            "job/chk-1/_metadata",
            "job/chk-2/_metadata",
            "job/chk-5/_metadata",
            "job/chk-6/src-0.state",
            "job/shared/c-0-chk1.state",
            "job/shared/c-0-chk2.state",
            "job/shared/c-0-chk5.state",
            "job/shared/c-0-chk6.state",
        ]
    );
}

/// When the job ends, the worker runs the pass a checkpoint signalled even if no pass started
/// yet, and the pass after one in flight, which sees the checkpoints completed meanwhile: a
/// finished job keeps `retained` checkpoints (the coordinator waits for both within
/// [`retention_grace_at_exit`](crate::checkpoint::coordinator::retention_grace_at_exit)).
#[tokio::test]
async fn the_worker_runs_the_signalled_passes_before_it_finishes() {
    let dir = tempfile::tempdir().unwrap();
    let store: Store = Arc::new(LocalStore::new(dir.path().to_str().unwrap()).unwrap());
    let scope = RetentionScope {
        store: store.clone(),
        job: "job".into(),
        retained: 2,
        run_id: "lineage".into(),
        first_id: 1,
    };
    for id in 1..=4 {
        put_checkpoint(&store, id, &[id]).await;
    }
    let worker = RetentionWorker::start(scope.clone());
    worker.completed(checkpoint_mark(&store, 4));
    worker.finish(std::time::Duration::from_secs(30)).await;
    assert_eq!(checkpoint_ids_left(&store).await, [3, 4]);
    let recorded = crate::checkpoint::completed_mark::read(&store, "job").await.unwrap();
    assert_eq!(
        recorded,
        Some(checkpoint_mark(&store, 4)),
        "the pass records the newest completed snapshot"
    );

    // A signal while a pass runs: one more pass, which sees checkpoints 5 and 6.
    let worker = RetentionWorker::start(scope);
    worker.completed(checkpoint_mark(&store, 4));
    for id in 5..=6 {
        put_checkpoint(&store, id, &[id]).await;
        worker.completed(checkpoint_mark(&store, id));
    }
    worker.finish(std::time::Duration::from_secs(30)).await;
    assert_eq!(checkpoint_ids_left(&store).await, [5, 6]);
    let recorded = crate::checkpoint::completed_mark::read(&store, "job").await.unwrap();
    assert_eq!(recorded, Some(checkpoint_mark(&store, 6)));
}

/// The record of checkpoint `id` of job `job` in `store`.
fn checkpoint_mark(store: &Store, id: u64) -> crate::checkpoint::completed_mark::CompletedMark {
    crate::checkpoint::completed_mark::CompletedMark {
        id,
        savepoint: false,
        url: store.url(&format!("job/chk-{id}")),
    }
}
