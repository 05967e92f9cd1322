//! The directories of savepoints of this run that failed (declined, timed out, superseded by a
//! stop, or their `_metadata` could not be written): their subtasks' state files were
//! uploaded to `<dir>/savepoint-<job>-<id>-<suffix>/`, nothing references them and nothing restores
//! from them (a savepoint without `_metadata` is refused), so they are deleted, as Flink
//! disposes of a failed savepoint's location. The retention worker deletes them
//! ([`super::retention`]), off the processing path, once a newer snapshot completed: by then
//! every subtask has moved past the failed savepoint's barrier. An upload of the failed
//! savepoint still running then can land a file after the delete, so a directory is listed
//! again at each later pass and forgotten only when a pass finds it empty.
//!
//! Never deleted: a directory holding `_metadata` (the savepoint completed after all, or the
//! file is another writer's), and the directories of savepoints cut off by a kill or by a
//! failure of the job (no run remembers them; `docs/operations/retention.md`).

use super::{METADATA_FILE, SnapshotTarget};
use crate::storage::join;
use std::sync::Arc;

/// A savepoint of this run that failed: its id and its directory.
#[derive(Debug, Clone)]
pub struct FailedSavepoint {
    /// Its snapshot id.
    pub id: u64,
    /// Its store and directory.
    pub target: Arc<SnapshotTarget>,
    /// Whether a pass deleted its directory already (later passes delete late files).
    pub deleted_once: bool,
}

/// What a retention pass does with a [`FailedSavepoint`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailedSavepointStep {
    /// No snapshot newer than it has completed: its subtasks may still be uploading.
    Wait,
    /// Delete its directory, and list it again at the next pass.
    Delete,
    /// Done with it: deleted and found empty since, or it holds `_metadata` (never deleted).
    Forget,
}

/// What a pass whose newest completed snapshot is `newest_completed` does with `failed`, whose
/// directory now holds `listed` objects, `_metadata` among them if `has_metadata`.
pub fn failed_savepoint_step(
    failed: &FailedSavepoint,
    newest_completed: u64,
    has_metadata: bool,
    listed: usize,
) -> FailedSavepointStep {
    if has_metadata {
        FailedSavepointStep::Forget
    } else if newest_completed <= failed.id {
        FailedSavepointStep::Wait
    } else if failed.deleted_once && listed == 0 {
        FailedSavepointStep::Forget
    } else {
        FailedSavepointStep::Delete
    }
}

/// One pass over `failed` after snapshot `newest_completed` completed: deletes the directories
/// [`failed_savepoint_step`] says to and drops those it is done with. A listing or delete
/// that fails is logged and tried again at the next pass.
pub async fn sweep(failed: &mut Vec<FailedSavepoint>, newest_completed: u64) {
    let mut kept = Vec::with_capacity(failed.len());
    for mut savepoint in failed.drain(..) {
        let target = savepoint.target.clone();
        let prefix = format!("{}/", target.dir);
        let listed = match target.store.list(&prefix).await {
            Ok(listed) => listed,
            Err(e) => {
                tracing::warn!(savepoint = savepoint.id, error = %e, "retention: cannot list a failed savepoint");
                kept.push(savepoint);
                continue;
            }
        };
        let metadata = join(&target.dir, METADATA_FILE);
        let has_metadata = listed.iter().any(|object| object.path == metadata);
        match failed_savepoint_step(&savepoint, newest_completed, has_metadata, listed.len()) {
            FailedSavepointStep::Wait => kept.push(savepoint),
            FailedSavepointStep::Forget => {}
            FailedSavepointStep::Delete => match target.store.delete_prefix(&prefix).await {
                Ok(()) => {
                    tracing::info!(
                        savepoint = savepoint.id,
                        dir = %target.url(),
                        files = listed.len(),
                        "retention: deleted the files of a failed savepoint"
                    );
                    savepoint.deleted_once = true;
                    kept.push(savepoint);
                }
                Err(e) => {
                    tracing::warn!(savepoint = savepoint.id, error = %e, "retention: cannot delete a failed savepoint");
                    kept.push(savepoint);
                }
            },
        }
    }
    *failed = kept;
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::LocalStore;
    use bytes::Bytes;

    fn failed(id: u64, deleted_once: bool, store: crate::storage::Store) -> FailedSavepoint {
        FailedSavepoint {
            id,
            target: Arc::new(SnapshotTarget {
                store,
                dir: format!("savepoint-job-{id}"),
            }),
            deleted_once,
        }
    }

    fn any_store() -> crate::storage::Store {
        Arc::new(LocalStore::new(std::env::temp_dir()).unwrap())
    }

    /// What a pass does with a failed savepoint 5 (newest completed snapshot, `_metadata`
    /// present, objects listed, deleted before).
    #[test]
    fn what_a_pass_does_with_a_failed_savepoint_table() {
        use FailedSavepointStep::*;
        // (what, newest completed, has _metadata, listed, deleted once, step)
        let rows: [(&str, u64, bool, usize, bool, FailedSavepointStep); 7] = [
            (
                "nothing newer completed: its uploads may still run",
                4,
                false,
                3,
                false,
                Wait,
            ),
            (
                "the pass of its own id (a savepoint cannot complete and fail)",
                5,
                false,
                3,
                false,
                Wait,
            ),
            (
                "a newer snapshot completed: delete its files",
                6,
                false,
                3,
                false,
                Delete,
            ),
            (
                "deleted before, and a late file landed since: delete again",
                7,
                false,
                1,
                true,
                Delete,
            ),
            ("deleted before and empty since: forget it", 7, false, 0, true, Forget),
            (
                "never deleted and empty (a local directory of temporaries only): delete",
                6,
                false,
                0,
                false,
                Delete,
            ),
            (
                "it holds _metadata: never deleted, whatever else holds",
                9,
                true,
                4,
                false,
                Forget,
            ),
        ];
        for (what, newest, has_metadata, listed, deleted_once, want) in rows {
            let savepoint = failed(5, deleted_once, any_store());
            assert_eq!(
                failed_savepoint_step(&savepoint, newest, has_metadata, listed),
                want,
                "{what}"
            );
        }
    }

    /// A sweep deletes a failed savepoint's files once a newer snapshot completed, keeps one
    /// holding `_metadata` untouched, and forgets each when done.
    #[tokio::test]
    async fn a_sweep_deletes_failed_savepoints_and_never_one_with_metadata() {
        let root = tempfile::tempdir().unwrap();
        let store: crate::storage::Store = Arc::new(LocalStore::new(root.path()).unwrap());
        for (dir, file) in [
            ("savepoint-job-5", "count-0.state"),
            ("savepoint-job-5", "count-1.state"),
            ("savepoint-job-6", "count-0.state"),
            ("savepoint-job-6", METADATA_FILE),
        ] {
            store.put(&join(dir, file), Bytes::from_static(b"x")).await.unwrap();
        }
        let mut list = vec![failed(5, false, store.clone()), failed(6, false, store.clone())];

        sweep(&mut list, 5).await;
        assert!(
            root.path().join("savepoint-job-5/count-0.state").exists(),
            "waits for a newer completion"
        );
        assert_eq!(list.len(), 1, "the one holding _metadata is forgotten at once");

        sweep(&mut list, 7).await;
        assert!(
            !root.path().join("savepoint-job-5").exists(),
            "the failed savepoint's files are gone"
        );
        assert!(
            root.path().join("savepoint-job-6/_metadata").exists(),
            "a completed one stays"
        );
        assert!(root.path().join("savepoint-job-6/count-0.state").exists());
        assert_eq!(list.len(), 1, "listed again at the next pass (a late upload)");

        store
            .put("savepoint-job-5/count-1.state", Bytes::from_static(b"late"))
            .await
            .unwrap();
        sweep(&mut list, 8).await;
        assert!(!root.path().join("savepoint-job-5").exists(), "a late file goes too");
        sweep(&mut list, 9).await;
        assert!(list.is_empty(), "forgotten once found empty");
    }
}
