//! What a job's checkpoint store records besides checkpoint directories, so that every restore
//! path applies the one restore rule ([`super::decide::choose_restore_point`]):
//!
//! - `<job>/sp-<id>/_pointer`: written when a savepoint completes, after its `_metadata` and
//!   before any sink commits its output; holds the savepoint's URL. A failover or `--restore
//!   latest` then sees the savepoint as the newest snapshot, and ids stay unique across
//!   checkpoints and savepoints.
//! - `<job>/runs/<run id>`: a run's [`LineageRecord`], written once before its first
//!   checkpoint; a restarted coordinator of the same run reads it back.
//!
//! Every commit-point write here and in the checkpoint coordinator goes through
//! [`put_once`], which recognises its own earlier write after a lost response.

use super::decide::{LineageRecord, SeenSnapshot};
use super::{METADATA_FILE, now_ms};
use crate::storage::{PutOutcome, StorageError, Store, join};
use bytes::Bytes;
use std::collections::BTreeMap;
use std::time::Duration;

/// Name of the savepoint pointer file inside `<job>/sp-<id>/`.
pub const POINTER_FILE: &str = "_pointer";

/// Directory of the pointer to savepoint `id` of `job`: `<job>/sp-<id>`.
pub fn pointer_dir(job: &str, id: u64) -> String {
    format!("{job}/sp-{id}")
}

/// A completed savepoint as recorded in the checkpoint store.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SavepointPointer {
    /// The savepoint id.
    pub id: u64,
    /// URL of the savepoint directory (the one holding `_metadata`).
    pub url: String,
    /// The run that took it.
    pub run_id: String,
    /// Completion time, ms since the Unix epoch.
    pub completed_at_ms: u64,
}

/// Errors of a commit-point write.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    /// Another writer created the object with other content.
    #[error("{url} already exists with other content: another coordinator committed it")]
    Conflict {
        /// The object.
        url: String,
    },
    /// The store failed.
    #[error(transparent)]
    Storage(#[from] StorageError),
}

/// Creates `path` with `data` exactly once. An `AlreadyExists` answer is read back: the same
/// bytes mean the object is our own earlier write (a conditional PUT whose success response was
/// lost, then retried by the SDK and answered 412), which is success; other bytes are a
/// [`CommitError::Conflict`].
pub async fn put_once(store: &Store, path: &str, data: Bytes) -> Result<(), CommitError> {
    match store.put_if_absent(path, data.clone()).await? {
        PutOutcome::Created => Ok(()),
        PutOutcome::AlreadyExists => {
            let existing = store.get(path).await?;
            if existing == data {
                tracing::info!(path = %store.url(path), "commit point already written by this writer (lost response)");
                Ok(())
            } else {
                Err(CommitError::Conflict { url: store.url(path) })
            }
        }
    }
}

/// Records a completed savepoint in the checkpoint store (idempotent).
pub async fn write_pointer(store: &Store, job: &str, pointer: &SavepointPointer) -> Result<(), CommitError> {
    let bytes = serde_json::to_vec_pretty(pointer).expect("pointer serializes");
    put_once(
        store,
        &join(&pointer_dir(job, pointer.id), POINTER_FILE),
        Bytes::from(bytes),
    )
    .await
}

/// Reads the pointer to savepoint `id`. Errors name the file.
pub async fn read_pointer(store: &Store, job: &str, id: u64) -> Result<SavepointPointer, String> {
    let path = join(&pointer_dir(job, id), POINTER_FILE);
    let bytes = with_retries(&store.url(&path), || store.get(&path))
        .await
        .map_err(|e| e.to_string())?;
    serde_json::from_slice(&bytes).map_err(|e| format!("{}: unreadable savepoint pointer: {e}", store.url(&path)))
}

fn run_path(job: &str, run_id: &str) -> String {
    format!("{job}/runs/{run_id}")
}

/// The prefix of `run_id`'s end markers: `<job>/runs/<run id>.ended-`, followed by the id of
/// the snapshot that ends the run.
fn end_marker_prefix(job: &str, run_id: &str) -> String {
    format!("{}.ended-", run_path(job, run_id))
}

/// How a run ends, as its end marker records it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum RunEnd {
    /// Stop-with-savepoint: the snapshot is the savepoint. (A bounded job's final checkpoint
    /// writes no marker: a coordinator restarted after it restores it and finishes at once,
    /// committing the final checkpoint's output if the crash came before its commit, which a
    /// Kafka sink can only do by running.)
    Stopped,
}

/// Records, before snapshot `id` commits, that `run_id` ends with it (a stop-with-savepoint's
/// savepoint). The marker counts only once the snapshot completed ([`decide::run_ended`]):
/// written first, a crash between the two leaves a marker of a snapshot that never completed,
/// which means nothing. Idempotent. Errors: the write.
pub async fn write_end_marker(store: &Store, job: &str, run_id: &str, id: u64, end: RunEnd) -> Result<(), String> {
    let path = format!("{}{id}", end_marker_prefix(job, run_id));
    let bytes = Bytes::from(serde_json::to_vec(&end).expect("an end serializes"));
    put_once(store, &path, bytes).await.map_err(|e| e.to_string())
}

/// Whether `run_id` already ended ([`decide::run_ended`] over its end markers and the store's
/// snapshots): the snapshot it ended with and how. Errors: the store cannot be listed or read.
///
/// [`decide::run_ended`]: super::decide::run_ended
pub async fn run_end(store: &Store, job: &str, run_id: &str) -> Result<Option<(u64, RunEnd)>, String> {
    let markers = end_markers(store, job, run_id).await?;
    if markers.is_empty() {
        return Ok(None);
    }
    let seen = with_retries(&store.url(job), || list_snapshots(store, job))
        .await
        .map_err(|e| e.to_string())?;
    Ok(super::decide::run_ended(&markers, &seen))
}

/// The end markers of `run_id`: (snapshot id, how the run ends there). Unreadable markers are
/// errors naming the file.
pub async fn end_markers(store: &Store, job: &str, run_id: &str) -> Result<Vec<(u64, RunEnd)>, String> {
    let prefix = end_marker_prefix(job, run_id);
    let mut markers = Vec::new();
    for object in store.list(&prefix).await.map_err(|e| e.to_string())? {
        let Ok(id) = object.path[prefix.len()..].parse::<u64>() else {
            continue;
        };
        let bytes = store.get(&object.path).await.map_err(|e| e.to_string())?;
        let end = serde_json::from_slice(&bytes)
            .map_err(|e| format!("{}: unreadable end marker: {e}", store.url(&object.path)))?;
        markers.push((id, end));
    }
    Ok(markers)
}

/// Reads the lineage record of `run_id`, if the run wrote one.
pub async fn read_lineage(store: &Store, job: &str, run_id: &str) -> Result<Option<LineageRecord>, String> {
    let path = run_path(job, run_id);
    match with_retries(&store.url(&path), || store.get(&path)).await {
        Ok(bytes) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| format!("{}: unreadable lineage record: {e}", store.url(&path))),
        Err(StorageError::NotFound(_)) => Ok(None),
        Err(e) => Err(e.to_string()),
    }
}

/// Writes the lineage record of a run once; if the run already has one (another attempt or an
/// earlier coordinator process of the same run), returns that one instead.
pub async fn record_lineage(store: &Store, job: &str, record: &LineageRecord) -> Result<LineageRecord, String> {
    let path = run_path(job, &record.run_id);
    let bytes = Bytes::from(serde_json::to_vec_pretty(record).expect("record serializes"));
    match store.put_if_absent(&path, bytes).await.map_err(|e| e.to_string())? {
        PutOutcome::Created => Ok(record.clone()),
        PutOutcome::AlreadyExists => Ok(read_lineage(store, job, &record.run_id)
            .await?
            .unwrap_or_else(|| record.clone())),
    }
}

/// Every snapshot recorded in the checkpoint store of `job`: checkpoint directories (completed
/// when `_metadata` exists) and savepoint pointers, sorted by id.
pub async fn list_snapshots(store: &Store, job: &str) -> Result<Vec<SeenSnapshot>, StorageError> {
    let prefix = format!("{job}/");
    let mut seen: BTreeMap<u64, SeenSnapshot> = BTreeMap::new();
    // Only the snapshot directories' objects: not `shared/` (thousands of files with
    // incremental checkpoints, listed by every retention pass before 2026-12-06), the
    // read-position log or the run records.
    let mut objects = store.list(&format!("{prefix}chk-")).await?;
    objects.extend(store.list(&format!("{prefix}sp-")).await?);
    for object in objects {
        let rest = &object.path[prefix.len()..];
        let Some((dir, file)) = rest.split_once('/') else {
            continue;
        };
        let (id, savepoint) = if let Some(id) = dir.strip_prefix("chk-") {
            (id, false)
        } else if let Some(id) = dir.strip_prefix("sp-") {
            (id, true)
        } else {
            continue;
        };
        let Ok(id) = id.parse::<u64>() else { continue };
        let entry = seen.entry(id).or_insert(SeenSnapshot {
            id,
            completed: false,
            savepoint,
        });
        let marks_completion = if savepoint {
            file == POINTER_FILE
        } else {
            file == METADATA_FILE
        };
        entry.completed |= marks_completion;
    }
    Ok(seen.into_values().collect())
}

/// Whether an error may go away when the read is repeated (an S3 or network error, an I/O error
/// other than a missing file). A missing object or a failed checksum will not.
pub fn is_transient(error: &StorageError) -> bool {
    match error {
        StorageError::NotFound(_) | StorageError::InvalidUrl(..) => false,
        StorageError::Io { source, .. } => !matches!(
            source.kind(),
            std::io::ErrorKind::NotFound | std::io::ErrorKind::PermissionDenied | std::io::ErrorKind::InvalidData
        ),
        StorageError::S3 { .. } => true,
    }
}

/// Attempts of a read before a transient error is final, and the first delay (doubled each
/// time: 0.25 s, 0.5 s, 1 s, 2 s).
pub const READ_ATTEMPTS: u32 = 5;
const FIRST_RETRY_DELAY: Duration = Duration::from_millis(250);

/// Runs a storage read, repeating it on transient errors ([`is_transient`]) up to
/// [`READ_ATTEMPTS`] times with exponential backoff; each retried error is logged with `what`.
pub async fn with_retries<T, F, Fut>(what: &str, mut read: F) -> Result<T, StorageError>
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, StorageError>>,
{
    let mut delay = FIRST_RETRY_DELAY;
    let mut attempt = 1;
    loop {
        match read().await {
            Err(e) if attempt < READ_ATTEMPTS && is_transient(&e) => {
                tracing::warn!(
                    target: "weir",
                    what,
                    attempt,
                    "reading {what} failed (attempt {attempt} of {READ_ATTEMPTS}): {e}; retrying in {delay:?}"
                );
                tokio::time::sleep(delay).await;
                delay *= 2;
                attempt += 1;
            }
            other => return other,
        }
    }
}

/// The pointer a savepoint completed now leaves.
pub fn pointer_for(id: u64, url: String, run_id: &str) -> SavepointPointer {
    SavepointPointer {
        id,
        url,
        run_id: run_id.to_string(),
        completed_at_ms: now_ms(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::LocalStore;
    use std::sync::Arc;

    /// A store whose conditional create writes the object and then answers "already exists",
    /// as S3 does to an SDK retry after the first response was lost.
    #[derive(Debug)]
    struct LostResponse(Store);

    #[async_trait::async_trait]
    impl crate::storage::ObjectStore for LostResponse {
        fn url(&self, path: &str) -> String {
            self.0.url(path)
        }
        async fn put(&self, path: &str, data: Bytes) -> crate::storage::Result<()> {
            self.0.put(path, data).await
        }
        async fn put_if_absent(&self, path: &str, data: Bytes) -> crate::storage::Result<PutOutcome> {
            self.0.put_if_absent(path, data).await?;
            Ok(PutOutcome::AlreadyExists)
        }
        async fn get(&self, path: &str) -> crate::storage::Result<Bytes> {
            self.0.get(path).await
        }
        async fn get_from(&self, path: &str, offset: u64) -> crate::storage::Result<Bytes> {
            self.0.get_from(path, offset).await
        }
        async fn exists(&self, path: &str) -> crate::storage::Result<bool> {
            self.0.exists(path).await
        }
        async fn list(&self, prefix: &str) -> crate::storage::Result<Vec<crate::storage::ObjectMeta>> {
            self.0.list(prefix).await
        }
        async fn delete(&self, path: &str) -> crate::storage::Result<()> {
            self.0.delete(path).await
        }
        async fn create_multipart(&self, path: &str) -> crate::storage::Result<crate::storage::MultipartUpload> {
            self.0.create_multipart(path).await
        }
        async fn upload_part(
            &self,
            upload: &mut crate::storage::MultipartUpload,
            data: Bytes,
        ) -> crate::storage::Result<()> {
            self.0.upload_part(upload, data).await
        }
        async fn upload_part_at(
            &self,
            upload: &crate::storage::MultipartUpload,
            number: i32,
            offset: u64,
            data: Bytes,
        ) -> crate::storage::Result<String> {
            self.0.upload_part_at(upload, number, offset, data).await
        }
        async fn complete_multipart(&self, upload: &crate::storage::MultipartUpload) -> crate::storage::Result<()> {
            self.0.complete_multipart(upload).await
        }
        async fn abort_multipart(&self, upload: &crate::storage::MultipartUpload) -> crate::storage::Result<()> {
            self.0.abort_multipart(upload).await
        }
    }

    #[tokio::test]
    async fn a_lost_response_to_our_own_commit_is_success_and_a_foreign_one_is_a_conflict() {
        let dir = tempfile::tempdir().unwrap();
        let local: Store = Arc::new(LocalStore::new(dir.path().to_str().unwrap()).unwrap());
        let store: Store = Arc::new(LostResponse(local.clone()));
        put_once(&store, "job/sp-4/_metadata", Bytes::from_static(b"ours"))
            .await
            .expect("our own write, answered 412 on retry, is a success");
        local
            .put("job/chk-5/_metadata", Bytes::from_static(b"theirs"))
            .await
            .unwrap();
        let err = put_once(&store, "job/chk-5/_metadata", Bytes::from_static(b"ours"))
            .await
            .unwrap_err();
        assert!(matches!(err, CommitError::Conflict { .. }), "{err}");
    }

    #[tokio::test]
    async fn snapshots_list_checkpoints_and_savepoint_pointers_by_id() {
        let dir = tempfile::tempdir().unwrap();
        let store: Store = Arc::new(LocalStore::new(dir.path().to_str().unwrap()).unwrap());
        store
            .put("job/chk-1/_metadata", Bytes::from_static(b"m"))
            .await
            .unwrap();
        store
            .put("job/chk-3/a-0.state", Bytes::from_static(b"s"))
            .await
            .unwrap();
        write_pointer(
            &store,
            "job",
            &pointer_for(2, "file:///sp/savepoint-job-2".into(), "run"),
        )
        .await
        .unwrap();
        record_lineage(
            &store,
            "job",
            &LineageRecord {
                run_id: "run".into(),
                first_id: 1,
                root: None,
            },
        )
        .await
        .unwrap();
        let seen = list_snapshots(&store, "job").await.unwrap();
        let summary: Vec<(u64, bool, bool)> = seen.iter().map(|s| (s.id, s.completed, s.savepoint)).collect();
        assert_eq!(summary, vec![(1, true, false), (2, true, true), (3, false, false)]);
        assert_eq!(
            read_pointer(&store, "job", 2).await.unwrap().url,
            "file:///sp/savepoint-job-2"
        );
    }

    #[tokio::test]
    async fn a_run_keeps_its_first_lineage_record() {
        let dir = tempfile::tempdir().unwrap();
        let store: Store = Arc::new(LocalStore::new(dir.path().to_str().unwrap()).unwrap());
        let first = LineageRecord {
            run_id: "gen-2".into(),
            first_id: 7,
            root: Some("file:///sp/savepoint-job-6".into()),
        };
        assert_eq!(record_lineage(&store, "job", &first).await.unwrap(), first);
        let restarted = LineageRecord {
            first_id: 12,
            ..first.clone()
        };
        assert_eq!(record_lineage(&store, "job", &restarted).await.unwrap(), first);
        assert_eq!(read_lineage(&store, "job", "gen-3").await.unwrap(), None);
    }

    #[test]
    fn transient_errors_are_retried_and_missing_files_are_not() {
        assert!(!is_transient(&StorageError::NotFound("x".into())));
        assert!(is_transient(&StorageError::S3 {
            path: "s3://b/k".into(),
            op: "GetObject",
            message: "503 SlowDown".into()
        }));
        assert!(!is_transient(&StorageError::Io {
            path: "/x".into(),
            source: std::io::Error::from(std::io::ErrorKind::NotFound)
        }));
    }
}
