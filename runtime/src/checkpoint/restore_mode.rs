//! The restore mode Weir applies to a restored checkpoint (Flink's `RestoreMode`, CLAIM vs
//! NO_CLAIM, decided here rather than chosen by the user): whether the first checkpoint after
//! the restore may **reference** the restored checkpoint's shared files (a native checkpoint's
//! table files, `checkpoint/native_upload.rs`) instead of uploading them again.
//!
//! **Claim** ([`RestoreMode::Claim`]): the restored checkpoint is one of this job's own
//! checkpoints, in the directory the new checkpoints are written to (`<storage>/<job>/chk-<id>`):
//! a restart after a failure (`weir run`'s or a cluster's failover), or `weir run --restore
//! latest` / `--restore <url of its own chk-N>` / the operator's restore from its own latest
//! checkpoint. Its shared files are in this job's `shared/` directory, under retention's
//! control (`checkpoint/retention.rs`, `checkpoint/shared_files.rs`), which deletes a shared
//! file only when no completed checkpoint of the job references it. The coordinator then names
//! the restored checkpoint in the first barriers ([`Barrier::incremental`]) as the confirmed
//! checkpoint, and a subtask whose store the fast restore built from the restored handle
//! (`checkpoint/native_restore.rs`) references the table files still in its store, as Flink's
//! RocksDB backend continues the incremental lineage after a restore without rescaling.
//!
//! **No claim** ([`RestoreMode::NoClaim`]): a savepoint (self-contained; never native today,
//! decided explicitly all the same), or a checkpoint in another directory or store (a restore
//! point from another job's or another storage's checkpoints, which that job's retention may
//! delete at any time). The first checkpoint uploads every file, as Flink's NO_CLAIM mode makes
//! the first checkpoint after the restore a full one.
//!
//! **Why retention never deletes a referenced restored file** (docs/runtime/state-backends-log.md,
//! "restoredrefs"): the restored files carry the restored checkpoint's id (or an older one) in
//! their names, so the orphan rule (`shared_files::deletable`) deletes them once a newer
//! snapshot completed *and* no completed `_metadata` of the job references them. Until the
//! first checkpoint after the restore completes, the restored checkpoint's own `_metadata`
//! references them and stays: a run's retention passes run only after one of its snapshots
//! completed (none has yet), and the killed or stopped run before it runs none any more. A
//! checkpoint that references them writes its `_metadata` before retention is signalled, and a
//! pass reads the `_metadata` files after deleting the snapshots beyond `retained`, so from
//! then on that checkpoint references them, and each later one that still holds them in its
//! store references them in turn. A savepoint completing first leaves the restored
//! checkpoint the base (`commit::next_base`; an aggregation does not confirm a savepoint, so
//! it keeps the restored record): the restored checkpoint is then the newest completed
//! checkpoint, which retention never deletes (`decide::retention_plan`), so its `_metadata`
//! keeps referencing the files until a checkpoint after the restore completes.
//!
//! [`Barrier::incremental`]: crate::checkpoint::Barrier::incremental

use crate::control::api::SnapshotKind;

/// What the restore decided about the restored checkpoint's shared files.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RestoreMode {
    /// The first checkpoints after the restore may reference the shared files of checkpoint
    /// `checkpoint_id` (this job's own, in the directory new checkpoints go to).
    Claim {
        /// The restored checkpoint's id: the confirmed checkpoint the first barriers name.
        checkpoint_id: u64,
    },
    /// Nothing of the restore point is referenced: the first checkpoint uploads every file.
    NoClaim,
}

/// The restored snapshot, as the decision needs it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct RestoredSnapshot<'a> {
    /// Checkpoint or savepoint (`_metadata`'s kind).
    pub kind: SnapshotKind,
    /// Its id (`_metadata`'s `checkpointId`).
    pub checkpoint_id: u64,
    /// URL of its directory, as the restore loaded it (`LoadedSnapshot::url`).
    pub url: &'a str,
}

/// The restore mode for `restored`, given `own_directory_url`: the URL a checkpoint with the
/// restored id has in this run's checkpoint storage (`<storage>/<job>/chk-<id>`, from the
/// store the new checkpoints are written to). Claim only for a checkpoint whose URL is exactly
/// that one (trailing `/` ignored); a savepoint, or a checkpoint anywhere else (another
/// storage, another job's directory, a copy elsewhere), is no claim. A URL spelt differently
/// for the same place (another alias of the bucket or directory) is no claim too: the safe
/// side, everything is uploaded.
pub fn restore_mode(restored: RestoredSnapshot<'_>, own_directory_url: &str) -> RestoreMode {
    let normalized = |url: &str| url.trim_end_matches('/').to_string();
    let own = restored.kind == SnapshotKind::Checkpoint && normalized(restored.url) == normalized(own_directory_url);
    if own {
        RestoreMode::Claim {
            checkpoint_id: restored.checkpoint_id,
        }
    } else {
        RestoreMode::NoClaim
    }
}

/// The URL checkpoint `checkpoint_id` of job `job` has in the checkpoint `store` new
/// checkpoints go to (the `own_directory_url` of [`restore_mode`]).
pub fn own_checkpoint_url(store: &crate::storage::Store, job: &str, checkpoint_id: u64) -> String {
    store.url(&super::checkpoint_dir(job, checkpoint_id))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn which_restores_claim_the_restored_checkpoint_table() {
        let own = "s3://bucket/checkpoints/wordcount/chk-7";
        let checkpoint = |url| RestoredSnapshot {
            kind: SnapshotKind::Checkpoint,
            checkpoint_id: 7,
            url,
        };
        let claim = RestoreMode::Claim { checkpoint_id: 7 };
        // (what, restored snapshot, its id's URL in this run's checkpoint storage, mode)
        let rows: Vec<(&str, RestoredSnapshot, &str, RestoreMode)> = vec![
            (
                "a failover restart from the newest checkpoint",
                checkpoint(own),
                own,
                claim,
            ),
            (
                "--restore <url> of its own checkpoint, with a trailing slash",
                checkpoint("s3://bucket/checkpoints/wordcount/chk-7/"),
                own,
                claim,
            ),
            (
                "a local checkpoint storage",
                checkpoint("file:///data/checkpoints/wordcount/chk-7"),
                "file:///data/checkpoints/wordcount/chk-7/",
                claim,
            ),
            (
                "another job's checkpoint (its retention may delete the files)",
                checkpoint("s3://bucket/checkpoints/other-job/chk-7"),
                own,
                RestoreMode::NoClaim,
            ),
            (
                "the same job's checkpoint in another storage",
                checkpoint("s3://old-bucket/checkpoints/wordcount/chk-7"),
                own,
                RestoreMode::NoClaim,
            ),
            (
                "a copy under another directory name",
                checkpoint("s3://bucket/checkpoints/wordcount/chk-7-copy"),
                own,
                RestoreMode::NoClaim,
            ),
            (
                "a savepoint (self-contained), even at that URL",
                RestoredSnapshot {
                    kind: SnapshotKind::Savepoint,
                    ..checkpoint(own)
                },
                own,
                RestoreMode::NoClaim,
            ),
            (
                "a savepoint in the savepoint directory",
                RestoredSnapshot {
                    kind: SnapshotKind::Savepoint,
                    ..checkpoint("s3://bucket/savepoints/savepoint-wordcount-7")
                },
                own,
                RestoreMode::NoClaim,
            ),
        ];
        for (what, restored, own_url, want) in rows {
            assert_eq!(restore_mode(restored, own_url), want, "{what}");
        }
    }
}
