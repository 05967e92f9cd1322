//! The newest completed snapshot of a job, as the operator's restore choice needs it
//! ([`SnapshotStore::newest`](super::SnapshotStore::newest)): found, none, or refused.
//!
//! Refused is a value, not an error: the observation carries it and only the restore choice of
//! a stateful change fails on it (`RestoreRequired`), while a delete, a stateless change or a
//! stop's own savepoint goes on. An error is kept for storage that did not answer (retried).

use super::{completion_ms, savepoint_directory, split_dir};
use crate::crd::StreamJobSpec;
use crate::lifecycle::{NewestSnapshot, Snapshot};
use std::collections::BTreeMap;
use weir_runtime::checkpoint::completed_mark::{self, RestoreWords};
use weir_runtime::checkpoint::lineage::{list_snapshots, read_pointer};
use weir_runtime::checkpoint::restore::{RestoreError, load_metadata, vanished_refusal};
use weir_runtime::checkpoint::{METADATA_FILE, checkpoint_dir, savepoint_id_of};
use weir_runtime::storage::{self, S3Options, StorageError, Store};

/// The newest completed checkpoint or savepoint of job `name` in the storage `spec` names.
///
/// Candidates by id (ids are unique across checkpoints and savepoints of a job): checkpoint
/// directories and savepoint pointers in the checkpoint store, as the runtime's restore rule
/// sees them. Only a spec without checkpoint storage (stateless; its pointers stay in the pods)
/// has its savepoints directory listed instead: a directory the job may share with jobs of its
/// name in other namespaces, whose savepoints a listing cannot tell apart.
///
/// Refused ([`NewestSnapshot::Refused`], the message naming the snapshot and what to do):
/// - the job's record of its newest completed snapshot (`<job>/newest-completed`, read before
///   the listing so a snapshot completing in between cannot cause a false refusal) names one
///   that the listing no longer holds, nor any newer ([`completed_mark::vanished`]);
/// - the newest one's `_metadata` is missing or does not decode.
///
/// An older one would replay the output committed after the newest. Errors: storage did not
/// answer (a listing, a pointer or a `_metadata` read failed otherwise).
pub(super) async fn newest(spec: &StreamJobSpec, s3: &S3Options, name: &str) -> Result<NewestSnapshot, String> {
    let mut candidates: BTreeMap<u64, (Store, String)> = BTreeMap::new();
    if let Some(url) = &spec.checkpointing.storage {
        let store = storage::open(url, s3).await.map_err(|e| e.to_string())?;
        let mark = completed_mark::read(&store, name).await.map_err(|e| e.to_string())?;
        let seen = list_snapshots(&store, name).await.map_err(|e| e.to_string())?;
        if let Some(gone) = completed_mark::vanished(mark.as_ref(), &seen, 0) {
            let message = vanished_refusal(&store, name, gone, &seen, RestoreWords::StreamJob).await;
            return Ok(NewestSnapshot::Refused(message));
        }
        for seen in seen.iter().filter(|s| s.completed) {
            if seen.savepoint {
                let pointer = read_pointer(&store, name, seen.id).await?;
                let (parent, dir) = split_dir(&pointer.url).unwrap_or((&pointer.url, ""));
                let sp_store = storage::open(parent, s3).await.map_err(|e| e.to_string())?;
                candidates.insert(seen.id, (sp_store, dir.to_string()));
            } else {
                candidates.insert(seen.id, (store.clone(), checkpoint_dir(name, seen.id)));
            }
        }
    }
    if let (None, Some(dir)) = (&spec.checkpointing.storage, savepoint_directory(spec)) {
        let store = storage::open(&dir, s3).await.map_err(|e| e.to_string())?;
        for object in store
            .list(&format!("savepoint-{name}-"))
            .await
            .map_err(|e| e.to_string())?
        {
            let Some((dir, file)) = object.path.split_once('/') else {
                continue;
            };
            if let (Some(id), METADATA_FILE) = (savepoint_id_of(name, dir), file) {
                candidates.entry(id).or_insert_with(|| (store.clone(), dir.to_string()));
            }
        }
    }
    let Some((id, (store, dir))) = candidates.into_iter().next_back() else {
        return Ok(NewestSnapshot::None);
    };
    match load_metadata(&store, &dir).await {
        Ok(m) => Ok(NewestSnapshot::Found(Snapshot {
            path: store.url(&dir),
            id: m.checkpoint_id,
            kind: m.kind,
            completed_at_ms: completion_ms(&m),
        })),
        Err(e @ (RestoreError::Storage(StorageError::NotFound(_)) | RestoreError::Corrupt(_))) => {
            Ok(NewestSnapshot::Refused(format!(
                "snapshot {id} ({}) is the newest of job {name} and is unreadable: {e}; an older one would \
                 replay committed output, so the operator will not use it: put its files back and change \
                 spec.restartNonce to retry, or set spec.initialSavepointPath to a snapshot of your choice and \
                 change spec.savepointRedeployNonce",
                store.url(&dir)
            )))
        }
        Err(e) => Err(format!("reading {}: {e}", store.url(&dir))),
    }
}

#[cfg(test)]
mod tests {
    use super::super::tests::{spec, write_meta};
    use super::*;
    use weir_runtime::checkpoint::completed_mark::CompletedMark;
    use weir_runtime::checkpoint::lineage::{pointer_for, write_pointer};
    use weir_runtime::control::api::SnapshotKind;

    /// What `newest` tells the restore choice, as (kind, id) or the refusal.
    async fn newest_of(root: &str) -> Result<(SnapshotKind, u64), String> {
        match newest(&spec(root), &S3Options::default(), "j").await.unwrap() {
            NewestSnapshot::Found(s) => Ok((s.kind, s.id)),
            NewestSnapshot::None => Err("none".into()),
            NewestSnapshot::Refused(why) => Err(why),
        }
    }

    /// The job's record of its newest completed snapshot names one deleted by hand (its
    /// `_metadata`, or a savepoint's pointer): refused naming it, the newest one held and the
    /// StreamJob's ways back, not replaced by the one before it (helper-116's trial, on the
    /// operator's path); a record the listing holds, or lags behind, changes nothing.
    #[tokio::test]
    async fn a_snapshot_deleted_after_it_completed_is_refused_not_replaced() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_str().unwrap().to_string();
        let chk = storage::open(&format!("{root}/chk"), &S3Options::default())
            .await
            .unwrap();
        write_meta(&root, "chk/j/chk-3", 3, SnapshotKind::Checkpoint, 30).await;
        write_meta(&root, "chk/j/chk-5", 5, SnapshotKind::Checkpoint, 40).await;
        let mark = |id: u64, savepoint: bool, url: String| CompletedMark { id, savepoint, url };
        let mut written = None;
        completed_mark::record(&chk, "j", &mark(3, false, chk.url("j/chk-3")), &mut written).await;
        assert_eq!(
            newest_of(&root).await,
            Ok((SnapshotKind::Checkpoint, 5)),
            "the record lags"
        );
        completed_mark::record(&chk, "j", &mark(5, false, chk.url("j/chk-5")), &mut written).await;
        assert_eq!(
            newest_of(&root).await,
            Ok((SnapshotKind::Checkpoint, 5)),
            "the record is held"
        );

        chk.delete("j/chk-5/_metadata").await.unwrap();
        let why = newest_of(&root).await.unwrap_err();
        for part in [
            "checkpoint chk-5 of job j completed",
            "`j/chk-5/_metadata` is gone",
            "put them back and change spec.restartNonce to retry",
            "the storage still holds is checkpoint 3",
            "set spec.initialSavepointPath: ",
            "change spec.savepointRedeployNonce",
        ] {
            assert!(why.contains(part), "`{part}` in {why}");
        }
        assert!(!why.contains("--restore"), "no CLI words for a StreamJob: {why}");

        // A savepoint whose pointer is deleted after it completed.
        write_meta(&root, "chk/j/chk-5", 5, SnapshotKind::Checkpoint, 40).await;
        write_meta(&root, "sp/savepoint-j-6", 6, SnapshotKind::Savepoint, 60).await;
        let url = format!("file://{root}/sp/savepoint-j-6");
        write_pointer(&chk, "j", &pointer_for(6, url.clone(), "run"))
            .await
            .unwrap();
        completed_mark::record(&chk, "j", &mark(6, true, url.clone()), &mut written).await;
        assert_eq!(newest_of(&root).await, Ok((SnapshotKind::Savepoint, 6)));
        chk.delete("j/sp-6/_pointer").await.unwrap();
        let why = newest_of(&root).await.unwrap_err();
        assert!(
            why.contains("savepoint 6 of job j") && why.contains(&format!("set spec.initialSavepointPath: {url}")),
            "{why}"
        );
        // A newer checkpoint completes: the record no longer stands in the way.
        write_meta(&root, "chk/j/chk-7", 7, SnapshotKind::Checkpoint, 70).await;
        assert_eq!(newest_of(&root).await, Ok((SnapshotKind::Checkpoint, 7)));
    }
}
