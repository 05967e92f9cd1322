//! The record of a job's newest completed snapshot, kept beside its snapshot directories:
//! `<job>/newest-completed` ([`CompletedMark`]). The restore rule reads the snapshots the
//! store lists (`lineage::list_snapshots`), so a newest snapshot deleted by hand (its
//! `chk-<n>/_metadata`, or a savepoint's pointer `sp-<n>/_pointer`) used to make `--restore
//! latest` take the one before it without a word, and write again the output committed after
//! it (helper-116's trial: a deleted pointer, 5,215 words counted twice). Flink keeps its
//! completed checkpoints in the high-availability store, apart from the checkpoint files, and a
//! deleted checkpoint then fails the restore loudly; this record does that for Weir:
//!
//! - each retention pass (`checkpoint/retention.rs`, off the processing path, after every
//!   completion) records the snapshot that signalled it, when its id is higher than the
//!   recorded one. It never leads (it is written after the snapshot's `_metadata` and
//!   pointer), but it can lag: by the snapshots completed while a pass ran, by a suspend's
//!   checkpoint (retention gets 0.5 s at a suspend), by a run killed right after a completion,
//!   or a failed write. It is a safety net against snapshots deleted by hand, not a commit
//!   point; two passes racing (a cluster attempt's worker outliving it) can leave it lower,
//!   weakening the net, never refusing wrongly.
//! - a restore by the rule (`--restore latest`, a failover of a run) is refused when the
//!   recorded snapshot is one it may choose and the store lists no completed snapshot with an
//!   id at least as high ([`vanished`]): the message names the snapshot and the options.
//! - a run's first snapshot id is past the recorded one, so a snapshot id is never used twice
//!   even when its directory or pointer is gone.
//!
//! An explicit `--restore <url>` (going back on purpose) does not read it.

use super::decide::SeenSnapshot;
use crate::storage::{StorageError, Store};
use bytes::Bytes;

/// Name of the record inside the job's directory.
pub const MARK_FILE: &str = "newest-completed";

/// The newest completed snapshot of a job, as the record holds it (JSON).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CompletedMark {
    /// Its id.
    pub id: u64,
    /// A savepoint (recorded by a pointer `sp-<id>/_pointer`) rather than a checkpoint.
    pub savepoint: bool,
    /// URL of its directory (the one holding `_metadata`).
    pub url: String,
}

/// Path of the record of `job`: `<job>/newest-completed`.
pub fn mark_path(job: &str) -> String {
    format!("{job}/{MARK_FILE}")
}

/// Reads the record of `job`. `Ok(None)` when there is none (a job whose runs predate it, or
/// no snapshot completed yet). A record that does not parse, or holds an id past the largest
/// Weir uses ([`MAX_RESERVATION`](crate::cluster::fence::MAX_RESERVATION): not Weir's), is
/// warned about, naming it, and read as none: it only ever adds a refusal. Errors: the store
/// failed.
pub async fn read(store: &Store, job: &str) -> Result<Option<CompletedMark>, StorageError> {
    let path = mark_path(job);
    match store.get(&path).await {
        Ok(bytes) => match serde_json::from_slice::<CompletedMark>(&bytes) {
            Ok(mark) if mark.id >= crate::cluster::fence::MAX_RESERVATION => {
                tracing::warn!(path = %store.url(&path), id = mark.id, "the record of the newest completed snapshot holds an id Weir never uses; ignored (remove it)");
                Ok(None)
            }
            Ok(mark) => Ok(Some(mark)),
            Err(e) => {
                tracing::warn!(path = %store.url(&path), error = %e, "the record of the newest completed snapshot does not parse; ignored");
                Ok(None)
            }
        },
        Err(StorageError::NotFound(_)) => Ok(None),
        Err(e) => Err(e),
    }
}

/// Records `newest` as the newest completed snapshot of `job`, unless an id as high is already
/// known: `written`, the id this writer saw or wrote last, or when `None` (the writer's first
/// call) the record as read now. After the first call the record is not read again (one
/// request per completion), so a higher id another writer put there meanwhile (an attempt
/// outliving its run) can be overwritten by a lower one: the net weakens, nothing is refused
/// wrongly. Failures are warned about: the record is a safety net, the job goes on without it.
pub async fn record(store: &Store, job: &str, newest: &CompletedMark, written: &mut Option<u64>) {
    let recorded = match *written {
        Some(id) => Some(id),
        None => match read(store, job).await {
            Ok(recorded) => recorded.map(|r| r.id),
            Err(e) => return tracing::warn!(error = %e, "cannot read the record of the newest completed snapshot"),
        },
    };
    if recorded.is_some_and(|id| id >= newest.id) {
        *written = recorded;
        return;
    }
    let bytes = Bytes::from(serde_json::to_vec_pretty(newest).expect("a mark serializes"));
    match store.put(&mark_path(job), bytes).await {
        Ok(()) => *written = Some(newest.id),
        Err(e) => tracing::warn!(error = %e, "cannot record the newest completed snapshot"),
    }
}

/// The recorded snapshot `mark` when a restore by the rule must not go on: its id is at least
/// `min_id` (the run's first id for a failover of a run, 0 for `--restore latest`: a snapshot
/// the rule may choose) and `seen` (the store's listing) holds no completed snapshot with an id
/// at least as high, so the snapshot was deleted or moved after it completed. `None`: no record,
/// or the listing holds it or a newer one.
pub fn vanished<'a>(mark: Option<&'a CompletedMark>, seen: &[SeenSnapshot], min_id: u64) -> Option<&'a CompletedMark> {
    let mark = mark?;
    let held = seen.iter().any(|s| s.completed && s.id >= mark.id);
    (mark.id >= min_id && !held).then_some(mark)
}

/// Whose words a refusal uses to say how to restore a snapshot on purpose: `weir run`'s
/// flags, or a StreamJob's fields (the operator's restore choice).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RestoreWords {
    /// `--restore <url>`, `--restore none`.
    Cli,
    /// `spec.initialSavepointPath` with a new `spec.savepointRedeployNonce`.
    StreamJob,
}

impl RestoreWords {
    /// How to restore the snapshot at `url` explicitly.
    fn explicit(self, url: &str) -> String {
        match self {
            RestoreWords::Cli => format!("give `--restore {url}`"),
            RestoreWords::StreamJob => {
                format!("set spec.initialSavepointPath: {url} and change spec.savepointRedeployNonce")
            }
        }
    }

    /// How to go on once the files are back.
    fn retry(self) -> &'static str {
        match self {
            RestoreWords::Cli => "start again",
            RestoreWords::StreamJob => "change spec.restartNonce to retry",
        }
    }

    /// How to start without state, where there is a way.
    fn empty(self) -> &'static str {
        match self {
            RestoreWords::Cli => "; or start without state with `--restore none`",
            RestoreWords::StreamJob => {
                "; or start without state: set spec.upgradeMode: stateless and change spec.restartNonce"
            }
        }
    }
}

/// The refusal for a restore whose newest snapshot `mark` vanished: `newest_held` is the
/// newest completed snapshot the store still lists with an id at least the rule's minimum
/// (`(id, savepoint, url)`), `record_url` the record's URL, `words` whose options to name.
pub fn vanished_message(
    job: &str,
    mark: &CompletedMark,
    newest_held: Option<(u64, bool, String)>,
    record_url: &str,
    words: RestoreWords,
) -> String {
    let (name, gone, way_back) = if mark.savepoint {
        (
            format!("savepoint {}", mark.id),
            format!("its pointer `{job}/sp-{}/_pointer`", mark.id),
            format!(
                "If the savepoint is still there or was moved, restore it from where it is: {} (or its new \
                 directory)",
                words.explicit(&mark.url)
            ),
        )
    } else {
        (
            format!("checkpoint chk-{}", mark.id),
            format!("`{job}/chk-{}/_metadata`", mark.id),
            format!(
                "If you have a copy of the checkpoint's files, put them back and {}",
                words.retry()
            ),
        )
    };
    let back = match newest_held {
        Some((id, savepoint, url)) => format!(
            "The newest snapshot the storage still holds is {} {id} ({url}); restoring it would write again the \
             output committed after it. To go back to it anyway, remove that output and {}",
            if savepoint { "savepoint" } else { "checkpoint" },
            words.explicit(&url)
        ),
        None => "The storage holds no older completed snapshot to go back to".to_string(),
    };
    format!(
        "{name} of job {job} completed ({url}, recorded in {record_url}), but the checkpoint storage no longer \
         holds it: {gone} is gone from it (deleted or moved by hand?). {way_back}. {back}{empty}",
        url = mark.url,
        empty = words.empty()
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(id: u64, completed: bool, savepoint: bool) -> SeenSnapshot {
        SeenSnapshot {
            id,
            completed,
            savepoint,
        }
    }

    fn mark(id: u64) -> CompletedMark {
        CompletedMark {
            id,
            savepoint: true,
            url: format!("file:///sp/savepoint-job-{id}-x"),
        }
    }

    /// When a restore by the rule refuses because the recorded newest snapshot is gone.
    #[test]
    fn a_restore_is_refused_only_when_the_recorded_snapshot_and_every_newer_one_are_gone() {
        // (what, recorded id, listing, the rule's minimum id, refused)
        type Row = (&'static str, Option<u64>, Vec<SeenSnapshot>, u64, bool);
        let rows: Vec<Row> = vec![
            ("no record (runs before it)", None, vec![seen(3, true, false)], 0, false),
            (
                "the recorded snapshot is listed",
                Some(5),
                vec![seen(3, true, false), seen(5, true, true)],
                0,
                false,
            ),
            (
                "a newer one is listed (the record lags)",
                Some(5),
                vec![seen(5, false, true), seen(6, true, false)],
                0,
                false,
            ),
            (
                "its pointer deleted: only an older one",
                Some(5),
                vec![seen(3, true, false)],
                0,
                true,
            ),
            (
                "its _metadata deleted: listed, not completed",
                Some(5),
                vec![seen(3, true, false), seen(5, false, false)],
                0,
                true,
            ),
            (
                "an incomplete newer one does not hold it",
                Some(5),
                vec![seen(3, true, false), seen(7, false, false)],
                0,
                true,
            ),
            ("nothing left at all", Some(5), vec![], 0, true),
            (
                "a failover of a later run: not its snapshot",
                Some(5),
                vec![seen(3, true, false)],
                6,
                false,
            ),
            (
                "a failover of the run that took it",
                Some(5),
                vec![seen(3, true, false)],
                4,
                true,
            ),
        ];
        for (what, recorded, listing, min_id, refused) in rows {
            let recorded = recorded.map(mark);
            assert_eq!(
                vanished(recorded.as_ref(), &listing, min_id).is_some(),
                refused,
                "{what}"
            );
        }
    }

    /// The refusal names the snapshot, what is gone, where it was, and the way back.
    #[test]
    fn the_refusal_names_the_snapshot_what_is_gone_and_the_options() {
        let record = "file:///c/job/newest-completed";
        let message = vanished_message(
            "job",
            &mark(5),
            Some((3, false, "file:///c/job/chk-3".into())),
            record,
            RestoreWords::Cli,
        );
        for part in [
            "savepoint 5 of job job completed (file:///sp/savepoint-job-5-x, recorded in file:///c/job/newest-completed)",
            "its pointer `job/sp-5/_pointer` is gone",
            "`--restore file:///sp/savepoint-job-5-x`",
            "checkpoint 3 (file:///c/job/chk-3); restoring it would write again the output committed after it",
            "`--restore file:///c/job/chk-3`",
            "`--restore none`",
        ] {
            assert!(message.contains(part), "`{part}` in {message}");
        }
        let checkpoint = CompletedMark {
            savepoint: false,
            ..mark(9)
        };
        let message = vanished_message("job", &checkpoint, None, record, RestoreWords::Cli);
        assert!(
            message.contains("checkpoint chk-9 of job job") && message.contains("`job/chk-9/_metadata` is gone"),
            "{message}"
        );
        assert!(message.contains("holds no older completed snapshot"), "{message}");
    }

    /// The record keeps the highest id written: a lower one does not replace it.
    #[tokio::test]
    async fn the_record_only_moves_forward() {
        let dir = tempfile::tempdir().unwrap();
        let store: Store = std::sync::Arc::new(crate::storage::LocalStore::new(dir.path().to_str().unwrap()).unwrap());
        assert_eq!(read(&store, "job").await.unwrap(), None);
        let mut written = None;
        record(&store, "job", &mark(5), &mut written).await;
        assert_eq!(written, Some(5));
        record(&store, "job", &mark(4), &mut written).await;
        assert_eq!(read(&store, "job").await.unwrap(), Some(mark(5)));
        // Another writer (a new run) finds the record and does not lower it.
        let mut another = None;
        record(&store, "job", &mark(3), &mut another).await;
        assert_eq!((read(&store, "job").await.unwrap(), another), (Some(mark(5)), Some(5)));
        record(&store, "job", &mark(7), &mut written).await;
        assert_eq!(read(&store, "job").await.unwrap(), Some(mark(7)));
        std::fs::write(dir.path().join("job").join(MARK_FILE), b"not json").unwrap();
        assert_eq!(
            read(&store, "job").await.unwrap(),
            None,
            "an unreadable record reads as none"
        );
        let not_weirs = format!(r#"{{"id": {}, "savepoint": false, "url": "x"}}"#, u64::MAX);
        std::fs::write(dir.path().join("job").join(MARK_FILE), not_weirs).unwrap();
        assert_eq!(
            read(&store, "job").await.unwrap(),
            None,
            "an id Weir never uses reads as none"
        );
    }
}
