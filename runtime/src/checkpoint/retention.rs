//! Retention off the checkpoint path: one background worker per run that deletes checkpoints
//! (and savepoint pointers) beyond `checkpointing.retained`. Completions only signal it; while a
//! pass runs, further signals coalesce into one more pass (FLINK-17988: synchronous deletes
//! slowed new checkpoints; unbounded concurrent deletes are worse). Each pass then deletes
//! the shared files of incremental checkpoints that no remaining checkpoint references
//! ([`super::shared_files`]).
//!
//! Incomplete checkpoint directories (`chk-<n>/` without `_metadata`: a checkpoint declined,
//! timed out, or cut off by a kill between its first upload and its `_metadata`) are deleted
//! once the run has a newer completed checkpoint, whichever run left them: this run's own, and
//! those of earlier runs of the job (ids below the run's first, the runs ended, killed, before
//! this one started). Which snapshots a pass deletes is [`snapshots_to_delete`], a pure function.

use super::decide::{self, SeenCheckpoint, SeenSnapshot};
use super::lineage::{self, POINTER_FILE};
use super::{METADATA_FILE, checkpoint_dir};
use crate::storage::{Store, join};
use std::time::Duration;
use tokio::sync::watch;

/// What retention manages: one lineage of one job in one store.
#[derive(Debug, Clone)]
pub struct RetentionScope {
    /// The checkpoint store.
    pub store: Store,
    /// Job name.
    pub job: String,
    /// Completed snapshots to keep (at least 1).
    pub retained: usize,
    /// The lineage: only snapshots whose `_metadata` (or pointer) names this run id are deleted.
    pub run_id: String,
    /// The run's first snapshot id: incomplete savepoint pointer directories are deleted only
    /// when this run created them (`id >= first_id`); incomplete checkpoint directories of
    /// earlier runs (ids below it) are deleted too ([`snapshots_to_delete`]).
    pub first_id: u64,
}

/// The retention worker of a run.
pub struct RetentionWorker {
    signal: watch::Sender<u64>,
    task: tokio::task::JoinHandle<()>,
}

impl RetentionWorker {
    /// Starts the worker; it waits for [`RetentionWorker::completed`] signals.
    pub fn start(scope: RetentionScope) -> RetentionWorker {
        let (signal, mut changes) = watch::channel(0u64);
        let task = tokio::spawn(async move {
            while changes.changed().await.is_ok() {
                changes.borrow_and_update();
                // A pass that panics (a bug) is reported and the next completed checkpoint
                // runs another: retention is housekeeping, the job goes on.
                let what = || format!("the retention pass over the checkpoints of job {}", scope.job);
                let _ = crate::exec::panics::catch_panic(what, pass(&scope)).await;
            }
        });
        RetentionWorker { signal, task }
    }

    /// A checkpoint completed: run a pass (or one more after the running one).
    pub fn completed(&self, id: u64) {
        self.signal.send_replace(id);
    }

    /// Stops the worker, letting a running or signalled pass finish for at most `grace`.
    pub async fn finish(self, grace: Duration) {
        let RetentionWorker { signal, mut task } = self;
        drop(signal);
        if tokio::time::timeout(grace, &mut task).await.is_err() {
            tracing::warn!(
                ?grace,
                "retention: still deleting at exit; leaving the rest to the next run"
            );
            task.abort();
        }
    }
}

/// A snapshot in the job's checkpoint store as a retention pass sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredSnapshot {
    /// Its id.
    pub id: u64,
    /// A checkpoint's `_metadata`, or a savepoint's pointer, exists.
    pub completed: bool,
    /// A savepoint pointer directory (`sp-<id>/`) rather than a checkpoint directory.
    pub savepoint: bool,
    /// For a completed snapshot: its `_metadata` (or pointer) was read and names the run's
    /// lineage. `false` for another lineage, or one that cannot be read (a truncated
    /// `_metadata`), which retention never deletes.
    pub of_this_lineage: bool,
}

/// Whether retention of the run whose first snapshot id is `first_id` manages `snapshot`:
/// a completed snapshot of its own lineage; an incomplete checkpoint directory whoever left it
/// (this run's, or an earlier run's killed between the checkpoint's first upload and its
/// `_metadata`); an incomplete savepoint pointer directory only when this run created it.
/// Completed snapshots of other lineages are never its to delete.
pub fn retention_manages(snapshot: &StoredSnapshot, first_id: u64) -> bool {
    match (snapshot.completed, snapshot.savepoint) {
        (true, _) => snapshot.of_this_lineage,
        (false, false) => true,
        (false, true) => snapshot.id >= first_id,
    }
}

/// The ids of the snapshots a retention pass deletes, from what it sees in the store: of those
/// it manages ([`retention_manages`]), the completed ones beyond the newest `retained` of the
/// lineage and the incomplete ones older than the lineage's newest completed checkpoint
/// ([`decide::retention_plan`]). Never a completed snapshot of another lineage or one whose
/// `_metadata` cannot be read, never the newest completed one nor the newest completed
/// checkpoint (the incremental base, kept across savepoints), never anything newer than it:
/// the run's checkpoint in flight (one at a time, ids growing) is always newer, and an earlier
/// run's ids are all below this run's first.
pub fn snapshots_to_delete(stored: &[StoredSnapshot], first_id: u64, retained: usize) -> Vec<u64> {
    let managed: Vec<SeenCheckpoint> = stored
        .iter()
        .filter(|s| retention_manages(s, first_id))
        .map(|s| SeenCheckpoint {
            id: s.id,
            completed: s.completed,
            savepoint: s.savepoint,
        })
        .collect();
    decide::retention_plan(&managed, retained)
}

/// The ids of the checkpoint directories (`chk-<id>` among `directories`, the names under the
/// job's directory) that the listing of objects (`seen`) does not show: on a local store, a
/// checkpoint killed while writing its first file leaves only that write's temporary file.
pub fn unlisted_checkpoint_directories(directories: &[String], seen: &[SeenSnapshot]) -> Vec<u64> {
    directories
        .iter()
        .filter_map(|name| name.strip_prefix("chk-")?.parse::<u64>().ok())
        .filter(|id| !seen.iter().any(|s| s.id == *id && !s.savepoint))
        .collect()
}

/// One retention pass: list, read the lineage of the completed snapshots, delete per
/// [`snapshots_to_delete`].
async fn pass(scope: &RetentionScope) {
    let seen = match lineage::list_snapshots(&scope.store, &scope.job).await {
        Ok(seen) => seen,
        Err(e) => return tracing::warn!(error = %e, "retention: cannot list checkpoints"),
    };
    let seen_ids = seen.clone();
    let mut stored: Vec<StoredSnapshot> = Vec::with_capacity(seen.len());
    for snapshot in seen {
        let of_this_lineage = if !snapshot.completed {
            false
        } else if snapshot.savepoint {
            lineage::read_pointer(&scope.store, &scope.job, snapshot.id)
                .await
                .is_ok_and(|p| p.run_id == scope.run_id)
        } else {
            super::restore::load_metadata(&scope.store, &checkpoint_dir(&scope.job, snapshot.id))
                .await
                .is_ok_and(|m| m.run_id.as_deref() == Some(scope.run_id.as_str()))
        };
        stored.push(StoredSnapshot {
            id: snapshot.id,
            completed: snapshot.completed,
            savepoint: snapshot.savepoint,
            of_this_lineage,
        });
    }
    // Directories the object listing does not show are incomplete checkpoints too.
    match scope.store.list_directories(&format!("{}/", scope.job)).await {
        Ok(directories) => {
            for id in unlisted_checkpoint_directories(&directories, &seen_ids) {
                stored.push(StoredSnapshot {
                    id,
                    completed: false,
                    savepoint: false,
                    of_this_lineage: false,
                });
            }
        }
        Err(e) => tracing::warn!(error = %e, "retention: cannot list checkpoint directories"),
    }
    for id in snapshots_to_delete(&stored, scope.first_id, scope.retained) {
        let savepoint = stored.iter().any(|s| s.id == id && s.savepoint);
        // The commit-point file first: a crash midway leaves an incomplete directory, never a
        // "completed" snapshot whose files are gone. A pointer's savepoint itself is the user's.
        let (dir, commit_file) = if savepoint {
            (lineage::pointer_dir(&scope.job, id), POINTER_FILE)
        } else {
            (checkpoint_dir(&scope.job, id), METADATA_FILE)
        };
        let deleted = match scope.store.delete(&join(&dir, commit_file)).await {
            Ok(()) => scope.store.delete_prefix(&format!("{dir}/")).await,
            Err(e) => Err(e),
        };
        if let Err(e) = deleted {
            tracing::warn!(snapshot = id, error = %e, "retention: delete failed");
        }
    }
    // Then the shared files of incremental checkpoints that no remaining checkpoint references.
    match super::shared_files::collect(&scope.store, &scope.job).await {
        Ok(0) => {}
        Ok(n) => tracing::debug!(files = n, "retention: deleted unreferenced shared state files"),
        Err(e) => tracing::warn!(error = %e, "retention: shared state files not collected"),
    }
}

#[cfg(test)]
mod tests {
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
        let deleted = crate::checkpoint::shared_files::collect(&store, "job").await.unwrap();
        let mut left: Vec<String> = store
            .list("job/shared/")
            .await
            .unwrap()
            .into_iter()
            .map(|o| o.path)
            .collect();
        left.sort();
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
        crate::checkpoint::shared_files::collect(&store, "job").await.unwrap();
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
        pass(&scope).await;
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
}
