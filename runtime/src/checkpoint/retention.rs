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
//! Each pass also deletes the directories of this run's failed savepoints
//! ([`failed_savepoints`]).

use super::completed_mark::{self, CompletedMark};
use super::decide::{self, SeenCheckpoint, SeenSnapshot};
use super::failed_savepoints::{self, FailedSavepoint};
use super::lineage::{self, POINTER_FILE};
use super::shared_files::MetadataCache;
use super::{METADATA_FILE, SnapshotTarget, checkpoint_dir};
use crate::storage::{Store, join};
use std::sync::Arc;
use std::time::Duration;
use tokio::sync::{mpsc, watch};

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
    signal: watch::Sender<Option<CompletedMark>>,
    failed_savepoints: mpsc::UnboundedSender<FailedSavepoint>,
    task: tokio::task::JoinHandle<()>,
}

impl RetentionWorker {
    /// Starts the worker; it waits for [`RetentionWorker::completed`] signals.
    pub fn start(scope: RetentionScope) -> RetentionWorker {
        let (signal, mut changes) = watch::channel(None::<CompletedMark>);
        let (failed_savepoints, mut newly_failed) = mpsc::unbounded_channel();
        let task = tokio::spawn(async move {
            let mut metadata = MetadataCache::default();
            let mut failed = Vec::new();
            let mut recorded = None;
            while changes.changed().await.is_ok() {
                let Some(newest) = changes.borrow_and_update().clone() else {
                    continue;
                };
                let newest_completed = newest.id;
                while let Ok(savepoint) = newly_failed.try_recv() {
                    failed.push(savepoint);
                }
                // A pass that panics (a bug) is reported and the next completed checkpoint
                // runs another: retention is housekeeping, the job goes on.
                let what = || format!("the retention pass over the checkpoints of job {}", scope.job);
                let work = async {
                    completed_mark::record(&scope.store, &scope.job, &newest, &mut recorded).await;
                    pass(&scope, &mut metadata).await;
                    failed_savepoints::sweep(&mut failed, newest_completed).await;
                };
                let _ = crate::exec::panics::catch_panic(what, work).await;
            }
        });
        RetentionWorker {
            signal,
            failed_savepoints,
            task,
        }
    }

    /// A checkpoint or savepoint completed (`newest`): run a pass (or one more after the
    /// running one), which first records it as the job's newest completed snapshot
    /// ([`completed_mark`]).
    pub fn completed(&self, newest: CompletedMark) {
        self.signal.send_replace(Some(newest));
    }

    /// Savepoint `id` of this run failed: the passes after a newer snapshot completed delete
    /// its directory `target` ([`failed_savepoints`]).
    pub fn savepoint_failed(&self, id: u64, target: Arc<SnapshotTarget>) {
        let _ = self.failed_savepoints.send(FailedSavepoint {
            id,
            target,
            deleted_once: false,
        });
    }

    /// Stops the worker, letting a running or signalled pass finish for at most `grace`.
    pub async fn finish(self, grace: Duration) {
        let RetentionWorker {
            signal,
            failed_savepoints,
            mut task,
        } = self;
        drop((signal, failed_savepoints));
        if tokio::time::timeout(grace, &mut task).await.is_err() {
            tracing::warn!(
                ?grace,
                "retention: still deleting at exit; checkpoints beyond `retained` stay until a run \
                 restored from this job's checkpoints deletes them (or delete them yourself)"
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

/// One retention pass: the snapshots beyond `retained` and the incomplete ones, then the
/// shared files nothing references. Requests to the store: two listings of the snapshot
/// directories (`chk-*`, `sp-*`), one of the job's directories, one of `shared/`, a read of
/// each savepoint pointer and of each `_metadata` not in `metadata` yet, and the deletes.
async fn pass(scope: &RetentionScope, metadata: &mut MetadataCache) {
    let mut seen = match lineage::list_snapshots(&scope.store, &scope.job).await {
        Ok(seen) => seen,
        Err(e) => return tracing::warn!(error = %e, "retention: cannot list checkpoints"),
    };
    metadata.keep_only(&seen);
    let mut stored: Vec<StoredSnapshot> = Vec::with_capacity(seen.len());
    for snapshot in &seen {
        let of_this_lineage = if !snapshot.completed {
            false
        } else if snapshot.savepoint {
            lineage::read_pointer(&scope.store, &scope.job, snapshot.id)
                .await
                .is_ok_and(|p| p.run_id == scope.run_id)
        } else {
            metadata
                .get(&scope.store, &scope.job, snapshot.id)
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
            for id in unlisted_checkpoint_directories(&directories, &seen) {
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
            Ok(()) => {
                // No longer a completed snapshot: its references no longer keep files.
                seen.retain(|s| s.id != id);
                scope.store.delete_prefix(&format!("{dir}/")).await
            }
            Err(e) => Err(e),
        };
        if let Err(e) = deleted {
            tracing::warn!(snapshot = id, error = %e, "retention: delete failed");
        }
    }
    // Then the shared files of incremental checkpoints that no remaining checkpoint references.
    match super::shared_files::collect(&scope.store, &scope.job, &seen, metadata).await {
        Ok(0) => {}
        Ok(n) => tracing::debug!(files = n, "retention: deleted unreferenced shared state files"),
        Err(e) => tracing::warn!(error = %e, "retention: shared state files not collected"),
    }
}

#[cfg(test)]
#[path = "retention_tests.rs"]
mod tests;
