//! The newest completed snapshot of a job, as the operator's restore choice needs it
//! ([`SnapshotStore::newest`](super::SnapshotStore::newest)): found, none, or refused.
//!
//! Refused is a value, not an error: the observation carries it and only the restore choice of
//! a stateful change fails on it (`RestoreRequired`), while a delete, a stateless change or a
//! stop's own savepoint goes on. An error is kept for storage that did not answer (retried).

use super::{completion_ms, savepoint_directory, split_dir};
use crate::crd::StreamJobSpec;
use crate::lifecycle::{NewestSnapshot, Snapshot};
use weir_runtime::checkpoint::completed_mark::{self, RestoreWords};
use weir_runtime::checkpoint::lineage::{POINTER_FILE, SavepointPointer, list_snapshots, pointer_dir};
use weir_runtime::checkpoint::restore::{RestoreError, is_damage, load_metadata, vanished_refusal};
use weir_runtime::checkpoint::{METADATA_FILE, checkpoint_dir, savepoint_id_of};
use weir_runtime::storage::{self, S3Options, StorageError, Store, join};

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
/// - the newest one's `_metadata` is missing or does not decode, or its savepoint pointer
///   does not decode or names no usable place (only the newest one's pointer is read);
/// - its `_metadata` is of a format this operator does not read (a newer runtime).
///
/// An older one would replay the output committed after the newest. Errors: storage did not
/// answer (a listing, the pointer or the `_metadata` read failed otherwise).
pub(super) async fn newest(spec: &StreamJobSpec, s3: &S3Options, name: &str) -> Result<NewestSnapshot, String> {
    let candidate = match &spec.checkpointing.storage {
        Some(url) => {
            let store = storage::open(url, s3).await.map_err(|e| e.to_string())?;
            let mark = completed_mark::read(&store, name).await.map_err(|e| e.to_string())?;
            let seen = list_snapshots(&store, name).await.map_err(|e| e.to_string())?;
            if let Some(gone) = completed_mark::vanished(mark.as_ref(), &seen, 0) {
                let message = vanished_refusal(&store, name, gone, &seen, RestoreWords::StreamJob).await;
                return Ok(NewestSnapshot::Refused { id: gone.id, message });
            }
            // Only the newest one is read: an older savepoint's pointer, however damaged,
            // does not stand in the way.
            match seen.iter().filter(|s| s.completed).max_by_key(|s| s.id) {
                None => None,
                Some(newest) if newest.savepoint => match savepoint_of(&store, name, newest.id, s3).await? {
                    Ok(found) => Some((newest.id, found)),
                    Err(message) => return Ok(NewestSnapshot::Refused { id: newest.id, message }),
                },
                Some(newest) => Some((newest.id, (store.clone(), checkpoint_dir(name, newest.id)))),
            }
        }
        None => newest_in_savepoint_directory(spec, s3, name).await?,
    };
    let Some((id, (store, dir))) = candidate else {
        return Ok(NewestSnapshot::None);
    };
    match load_metadata(&store, &dir).await {
        Ok(m) => Ok(NewestSnapshot::Found(Snapshot {
            path: store.url(&dir),
            id: m.checkpoint_id,
            kind: m.kind,
            completed_at_ms: completion_ms(&m),
        })),
        Err(RestoreError::Corrupt(fault)) if !is_damage(&fault) => Ok(NewestSnapshot::Refused {
            id,
            message: format!(
                "snapshot {id} ({}) is the newest of job {name}, and this operator cannot read its `_metadata`: \
                 {fault}; upgrade the operator to the version of the job's Weir image",
                store.url(&dir)
            ),
        }),
        Err(e @ (RestoreError::Storage(StorageError::NotFound(_)) | RestoreError::Corrupt(_))) => {
            let message = unreadable(id, &store.url(&dir), name, &e.to_string());
            Ok(NewestSnapshot::Refused { id, message })
        }
        Err(e) => Err(format!("reading {}: {e}", store.url(&dir))),
    }
}

/// The refusal of a newest snapshot `id` at `url` whose files cannot be read (`error`).
fn unreadable(id: u64, url: &str, name: &str, error: &str) -> String {
    format!(
        "snapshot {id} ({url}) is the newest of job {name} and is unreadable: {error}; an older one would \
         replay committed output, so the operator will not use it: put its files back and change \
         spec.restartNonce to retry, or set spec.initialSavepointPath to a snapshot of your choice and \
         change spec.savepointRedeployNonce, or start without state: set spec.upgradeMode: stateless and \
         change spec.restartNonce"
    )
}

/// The store and directory of savepoint `id` of job `name`, from its pointer in the checkpoint
/// `store`; `Ok(Err(refusal))` when the pointer does not decode or names no usable place (it
/// will not get better by retrying). Errors: storage did not answer.
async fn savepoint_of(
    store: &Store,
    name: &str,
    id: u64,
    s3: &S3Options,
) -> Result<Result<(Store, String), String>, String> {
    let path = join(&pointer_dir(name, id), POINTER_FILE);
    let bytes = match store.get(&path).await {
        Ok(bytes) => bytes,
        Err(StorageError::NotFound(_)) => {
            // Listed a moment ago: deleted since (retention of a running job, or by hand).
            return Err(format!("{}: gone since it was listed", store.url(&path)));
        }
        Err(e) => return Err(e.to_string()),
    };
    let pointer: SavepointPointer = match serde_json::from_slice(&bytes) {
        Ok(pointer) => pointer,
        Err(e) => {
            let why = format!("its pointer does not decode ({e})");
            return Ok(Err(unreadable(id, &store.url(&path), name, &why)));
        }
    };
    let (parent, dir) = split_dir(&pointer.url).unwrap_or((&pointer.url, ""));
    match storage::open(parent, s3).await {
        Ok(sp_store) => Ok(Ok((sp_store, dir.to_string()))),
        Err(e @ StorageError::InvalidUrl(..)) => {
            let why = format!("its pointer names no usable place ({e})");
            Ok(Err(unreadable(id, &pointer.url, name, &why)))
        }
        Err(e) => Err(e.to_string()),
    }
}

/// A stateless spec's savepoints (no checkpoint storage: its pointers stay in the pods): the
/// newest `savepoint-<name>-<id>[-<suffix>]/_metadata` in the savepoints directory, a
/// directory the job may share with jobs of its name in other namespaces, whose savepoints a
/// listing cannot tell apart.
async fn newest_in_savepoint_directory(
    spec: &StreamJobSpec,
    s3: &S3Options,
    name: &str,
) -> Result<Option<(u64, (Store, String))>, String> {
    let Some(directory) = savepoint_directory(spec) else {
        return Ok(None);
    };
    let store = storage::open(&directory, s3).await.map_err(|e| e.to_string())?;
    let mut newest: Option<(u64, String)> = None;
    for object in store
        .list(&format!("savepoint-{name}-"))
        .await
        .map_err(|e| e.to_string())?
    {
        let Some((dir, file)) = object.path.split_once('/') else {
            continue;
        };
        if let (Some(id), METADATA_FILE) = (savepoint_id_of(name, dir), file)
            && newest.as_ref().is_none_or(|(held, _)| id > *held)
        {
            newest = Some((id, dir.to_string()));
        }
    }
    Ok(newest.map(|(id, dir)| (id, (store, dir))))
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
            NewestSnapshot::None | NewestSnapshot::NotRead => Err("none".into()),
            NewestSnapshot::Refused { message, .. } => Err(message),
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
            "set spec.upgradeMode: stateless",
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

    /// Only the newest snapshot's savepoint pointer is read: an older one that does not decode
    /// stands in no one's way (it used to be an error retried for ever, blocking upgrades and
    /// deletes); the newest one's, undecodable, is refused naming it.
    #[tokio::test]
    async fn only_the_newest_savepoint_pointer_is_read_and_a_damaged_one_is_refused() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_str().unwrap().to_string();
        let chk = storage::open(&format!("{root}/chk"), &S3Options::default())
            .await
            .unwrap();
        write_meta(&root, "sp/savepoint-j-4", 4, SnapshotKind::Savepoint, 40).await;
        let url = format!("file://{root}/sp/savepoint-j-4");
        write_pointer(&chk, "j", &pointer_for(4, url, "run")).await.unwrap();
        chk.put("j/sp-4/_pointer", bytes::Bytes::from_static(b"{not json"))
            .await
            .unwrap();
        write_meta(&root, "chk/j/chk-5", 5, SnapshotKind::Checkpoint, 50).await;
        assert_eq!(newest_of(&root).await, Ok((SnapshotKind::Checkpoint, 5)));
        chk.delete("j/chk-5/_metadata").await.unwrap();
        let why = newest_of(&root).await.unwrap_err();
        assert!(
            why.contains("snapshot 4") && why.contains("sp-4/_pointer") && why.contains("does not decode"),
            "{why}"
        );
    }

    /// A newest checkpoint whose `_metadata` this build cannot read is refused, in words that
    /// fit its fault: a format version it does not know is not damage (upgrade the operator),
    /// a file cut short is (put it back). The fault is typed (`FormatFault`), not read from the
    /// message's words.
    #[tokio::test]
    async fn a_newer_format_is_told_apart_from_damage() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_str().unwrap().to_string();
        let chk = storage::open(&format!("{root}/chk"), &S3Options::default())
            .await
            .unwrap();
        write_meta(&root, "chk/j/chk-5", 5, SnapshotKind::Checkpoint, 40).await;
        let written = chk.get("j/chk-5/_metadata").await.unwrap();
        let newer = String::from_utf8_lossy(&written).replacen("WEIR-METADATA v", "WEIR-METADATA v9", 1);
        chk.put("j/chk-5/_metadata", newer.into_bytes().into()).await.unwrap();
        let why = newest_of(&root).await.unwrap_err();
        assert!(
            why.contains("unsupported metadata version") && why.contains("upgrade the operator"),
            "{why}"
        );
        chk.put("j/chk-5/_metadata", written.slice(..written.len() - 3))
            .await
            .unwrap();
        let why = newest_of(&root).await.unwrap_err();
        assert!(
            why.contains("is unreadable") && !why.contains("upgrade the operator"),
            "{why}"
        );
    }
}
