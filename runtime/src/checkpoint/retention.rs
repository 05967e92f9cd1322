//! Retention off the checkpoint path: one background worker per run that deletes checkpoints
//! (and savepoint pointers) beyond `checkpointing.retained`. Completions only signal it; while a
//! pass runs, further signals coalesce into one more pass (FLINK-17988: synchronous deletes
//! slowed new checkpoints; unbounded concurrent deletes are worse). Each pass then deletes
//! the shared files of incremental checkpoints that no remaining checkpoint references
//! ([`super::shared_files`]).

use super::decide::{self, SeenCheckpoint};
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
    /// Incomplete directories are deleted only when this run created them (`id >= first_id`).
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

/// One retention pass: list, keep the lineage's own snapshots, delete per the plan.
async fn pass(scope: &RetentionScope) {
    let seen = match lineage::list_snapshots(&scope.store, &scope.job).await {
        Ok(seen) => seen,
        Err(e) => return tracing::warn!(error = %e, "retention: cannot list checkpoints"),
    };
    let mut mine: Vec<(SeenCheckpoint, bool)> = Vec::with_capacity(seen.len());
    for snapshot in seen {
        let ours = if !snapshot.completed {
            snapshot.id >= scope.first_id
        } else if snapshot.savepoint {
            lineage::read_pointer(&scope.store, &scope.job, snapshot.id)
                .await
                .is_ok_and(|p| p.run_id == scope.run_id)
        } else {
            super::restore::load_metadata(&scope.store, &checkpoint_dir(&scope.job, snapshot.id))
                .await
                .is_ok_and(|m| m.run_id.as_deref() == Some(scope.run_id.as_str()))
        };
        if ours {
            let seen = SeenCheckpoint {
                id: snapshot.id,
                completed: snapshot.completed,
            };
            mine.push((seen, snapshot.savepoint));
        }
    }
    let plain: Vec<SeenCheckpoint> = mine.iter().map(|(c, _)| c.clone()).collect();
    for id in decide::retention_plan(&plain, scope.retained) {
        let savepoint = mine.iter().any(|(c, sp)| c.id == id && *sp);
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
