//! Retention of the shared files of incremental checkpoints (`<job>/shared/`): a file is
//! deleted only when no completed checkpoint in the store references it. The references are
//! recomputed at every retention pass from the `_metadata` of the completed checkpoints listed
//! then, never counted in memory, so a crash at any point (between an upload and `_metadata`,
//! in the middle of a pass) leaves nothing to reconcile: the next pass of the next run sees the
//! same files and decides the same way. A run keeps each `_metadata` it has parsed
//! ([`MetadataCache`]): it is written once and never changed, so each is read once per run, not
//! at every pass.
//!
//! A file no `_metadata` references is either an orphan (its checkpoint failed, or was
//! dropped by retention and nothing newer shares it) or belongs to the checkpoint in flight.
//! The file name carries the checkpoint that wrote it
//! ([`shared_file_checkpoint`](crate::state::incremental::shared_file_checkpoint)); a file is
//! deleted only when that checkpoint is older than the newest completed snapshot, so it
//! settled (one checkpoint is in flight at a time, and ids grow). A checkpoint in flight
//! extends only the chains of the newest completed checkpoint, which retention always keeps.

use super::decide::SeenSnapshot;
use super::restore::RestoreError;
use super::{METADATA_FILE, checkpoint_dir};
use crate::state::incremental::{SHARED_DIR, resolve_relative, shared_file_checkpoint};
use crate::state::snapshot::CheckpointMetadata;
use crate::storage::{Store, join};
use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;

/// The parsed `_metadata` of a job's completed checkpoints, by id, as a run's retention passes
/// read them. A `_metadata` is written once (`lineage::put_once`) and never changed, and ids
/// never repeat within a store, so a read is never stale; a checkpoint retention deleted is
/// dropped at the next pass ([`MetadataCache::keep_only`]). Failed reads are not kept: the next
/// pass reads again.
#[derive(Debug, Default)]
pub struct MetadataCache {
    by_id: HashMap<u64, Arc<CheckpointMetadata>>,
    reads: u64,
}

impl MetadataCache {
    /// The `_metadata` of checkpoint `id` of `job`, read from `store` the first time. Errors:
    /// as [`load_metadata`](super::restore::load_metadata)'s (missing, corrupt, storage).
    pub async fn get(&mut self, store: &Store, job: &str, id: u64) -> Result<Arc<CheckpointMetadata>, RestoreError> {
        if let Some(found) = self.by_id.get(&id) {
            return Ok(found.clone());
        }
        self.reads += 1;
        let metadata = Arc::new(super::restore::load_metadata(store, &checkpoint_dir(job, id)).await?);
        self.by_id.insert(id, metadata.clone());
        Ok(metadata)
    }

    /// Forgets every checkpoint not among the completed ones of `seen`.
    pub fn keep_only(&mut self, seen: &[SeenSnapshot]) {
        self.by_id
            .retain(|id, _| seen.iter().any(|s| s.id == *id && s.completed && !s.savepoint));
    }

    /// `_metadata` files read from storage so far (for tests).
    pub fn reads(&self) -> u64 {
        self.reads
    }
}

/// The store paths of the state files that `metadata` (of the snapshot directory `dir`)
/// references outside its directory.
pub fn referenced_files(dir: &str, metadata: &CheckpointMetadata) -> BTreeSet<String> {
    metadata
        .operators
        .iter()
        .flat_map(|o| &o.handles)
        .flat_map(|h| h.files())
        .filter(|(file, _, _)| file.starts_with("../"))
        .filter_map(|(file, _, _)| resolve_relative(dir, file))
        .collect()
}

/// The shared files (store paths) that may be deleted: those no completed checkpoint
/// references (`referenced`), written by a checkpoint older than `newest_completed` (the
/// newest completed snapshot's id), and newer than `kept_through` when given: the newest
/// completed checkpoint whose `_metadata` could not be read. A checkpoint references only
/// files written by itself or by older checkpoints (a chain extends older links, a native
/// checkpoint reuses older table files), so an unreadable one can only need files up to its
/// own id. A file whose name carries no checkpoint id is not Weir's and is left alone.
pub fn deletable(
    shared: &[String],
    referenced: &BTreeSet<String>,
    newest_completed: u64,
    kept_through: Option<u64>,
) -> Vec<String> {
    shared
        .iter()
        .filter(|path| !referenced.contains(*path))
        .filter(|path| {
            let name = path.rsplit('/').next().unwrap_or(path);
            shared_file_checkpoint(name)
                .is_some_and(|id| id < newest_completed && kept_through.is_none_or(|kept| id > kept))
        })
        .cloned()
        .collect()
}

/// Deletes the shared files of `job` that no completed checkpoint references, and the
/// temporary files of uploads cut off by a kill
/// ([`ObjectStore::list_temporaries`](crate::storage::ObjectStore::list_temporaries)) once
/// their checkpoint is older than the newest completed one (before 2026-12-06 a local store's
/// stayed for ever). A completed checkpoint whose `_metadata` cannot be read (corrupt, or a
/// storage error) keeps every file up to its id ([`deletable`]'s `kept_through`) and is named
/// in a warning; newer files are still collected, so one damaged checkpoint does not stop the
/// cleanup of the job (before 2026-12-06 it did: `shared/` grew from 9 to 211 files over 100
/// checkpoints). `seen`: the job's snapshots as listed before this call (a checkpoint that
/// completed since is newer than every one of them, so its files are kept). Returns the
/// number of files deleted.
pub async fn collect(
    store: &Store,
    job: &str,
    seen: &[SeenSnapshot],
    metadata: &mut MetadataCache,
) -> Result<usize, String> {
    let shared_prefix = format!("{}/", join(job, SHARED_DIR));
    let shared: Vec<String> = store
        .list(&shared_prefix)
        .await
        .map_err(|e| e.to_string())?
        .into_iter()
        .map(|o| o.path)
        .collect();
    // Temporary files of uploads a kill cut off (a local store's; `list` hides them).
    let temporaries = store
        .list_temporaries(&shared_prefix)
        .await
        .map_err(|e| e.to_string())?;
    if shared.is_empty() && temporaries.is_empty() {
        return Ok(0);
    }
    let Some(newest_completed) = seen.iter().filter(|s| s.completed).map(|s| s.id).max() else {
        return Ok(0);
    };
    let mut referenced = BTreeSet::new();
    let mut kept_through: Option<u64> = None;
    for snapshot in seen.iter().filter(|s| s.completed && !s.savepoint) {
        let dir = checkpoint_dir(job, snapshot.id);
        match metadata.get(store, job, snapshot.id).await {
            Ok(read) => referenced.extend(referenced_files(&dir, &read)),
            Err(e) => {
                tracing::warn!(
                    metadata = %store.url(&join(&dir, METADATA_FILE)),
                    error = %e,
                    "retention: cannot read a completed checkpoint's _metadata; the shared files of checkpoints up to {} are kept \
                     (`weir checkpoints list` shows it; delete the checkpoint once you have decided it is lost)",
                    snapshot.id
                );
                kept_through = kept_through.max(Some(snapshot.id));
            }
        }
    }
    let mut doomed = deletable(&shared, &referenced, newest_completed, kept_through);
    // A temporary file is never referenced: it goes once its checkpoint settled, as an orphan.
    doomed.extend(
        temporaries
            .into_iter()
            .filter(|(_, target)| {
                let name = target.rsplit('/').next().unwrap_or(target);
                shared_file_checkpoint(name).is_some_and(|id| id < newest_completed)
            })
            .map(|(temporary, _)| temporary),
    );
    for path in &doomed {
        store.delete(path).await.map_err(|e| e.to_string())?;
    }
    Ok(doomed.len())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_shared_files_are_deletable_table() {
        let shared = |names: &[&str]| -> Vec<String> { names.iter().map(|n| format!("job/shared/{n}")).collect() };
        let refs = |names: &[&str]| -> BTreeSet<String> { names.iter().map(|n| format!("job/shared/{n}")).collect() };
        // (what, shared files, referenced by retained _metadata, newest completed, deletable)
        type Row = (&'static str, Vec<String>, BTreeSet<String>, u64, Vec<String>);
        let rows: Vec<Row> = vec![
            (
                "a base still referenced by a retained delta chain is kept",
                shared(&["c-0-chk3.state", "c-0-chk4.state", "c-0-chk5.state"]),
                refs(&["c-0-chk3.state", "c-0-chk5.state"]),
                5,
                shared(&["c-0-chk4.state"]),
            ),
            (
                "an unconfirmed checkpoint's files (killed before _metadata) go once a newer one completed",
                shared(&["c-0-chk7.state", "c-1-chk7.state", "c-0-chk8.state"]),
                refs(&["c-0-chk8.state"]),
                8,
                shared(&["c-0-chk7.state", "c-1-chk7.state"]),
            ),
            (
                "files of the checkpoint in flight (newer than every completed one) are kept",
                shared(&["c-0-chk8.state", "c-0-chk9.state"]),
                refs(&["c-0-chk8.state"]),
                8,
                vec![],
            ),
            (
                "a file without a checkpoint id in its name is not ours",
                shared(&["notes.txt", "c-0-chkX.state"]),
                refs(&[]),
                8,
                vec![],
            ),
        ];
        for (what, files, referenced, newest, want) in rows {
            assert_eq!(deletable(&files, &referenced, newest, None), want, "{what}");
        }
    }

    #[test]
    fn an_unreadable_checkpoint_keeps_only_the_files_it_can_reference() {
        let shared: Vec<String> = [
            "c-0-chk3.state",
            "c-0-chk5.state",
            "c-0-chk6.state",
            "c-0-chk8.state",
            "c-0-chk9.state",
        ]
        .iter()
        .map(|n| format!("job/shared/{n}"))
        .collect();
        let referenced: BTreeSet<String> = ["job/shared/c-0-chk9.state".to_string()].into();
        // chk-5's _metadata is unreadable: files up to 5 stay (it may reference them), newer
        // unreferenced ones go, the checkpoint in flight's (10 and up) stay as always.
        assert_eq!(
            deletable(&shared, &referenced, 10, Some(5)),
            vec![
                "job/shared/c-0-chk6.state".to_string(),
                "job/shared/c-0-chk8.state".to_string()
            ]
        );
        assert_eq!(deletable(&shared, &referenced, 10, None).len(), 4);
    }

    #[test]
    fn references_resolve_from_the_checkpoint_directory() {
        use crate::state::snapshot::{ChainLink, OperatorMetadata, StateHandle};
        let link = |id: u64| ChainLink {
            file: format!("../shared/c-0-chk{id}.state"),
            checkpoint_id: id,
            base: id == 3,
            size: 1,
            crc32: 0,
            entries: 1,
        };
        let metadata = CheckpointMetadata {
            format_version: 1,
            job_name: "job".into(),
            checkpoint_id: 5,
            kind: crate::control::api::SnapshotKind::Checkpoint,
            max_parallelism: 128,
            parallelism: 1,
            triggered_at_ms: 0,
            completed_at_ms: 0,
            run_id: None,
            operators: vec![OperatorMetadata {
                uid: "c".into(),
                kind: "count".into(),
                parallelism: 1,
                state_names: vec![],
                handles: vec![
                    StateHandle {
                        file: "../shared/c-0-chk5.state".into(),
                        subtask: 0,
                        key_group_range: None,
                        size: 1,
                        crc32: 0,
                        entries: 1,
                        operator_items: None,
                        chain: vec![link(3), link(5)],
                        native: None,
                        expired_through_ms: None,
                    },
                    StateHandle {
                        file: "src-0.state".into(),
                        subtask: 0,
                        key_group_range: None,
                        size: 1,
                        crc32: 0,
                        entries: 1,
                        operator_items: None,
                        chain: vec![],
                        native: None,
                        expired_through_ms: None,
                    },
                ],
            }],
            channel_state: vec![],
            alignment: Default::default(),
        };
        let want: BTreeSet<String> = ["job/shared/c-0-chk3.state", "job/shared/c-0-chk5.state"]
            .iter()
            .map(|s| s.to_string())
            .collect();
        assert_eq!(referenced_files("job/chk-5", &metadata), want);
        assert_eq!(resolve_relative("", "../shared/x"), None);
    }
}
