//! The read-position log of at-most-once mode: before a source subtask emits a batch, it
//! writes the positions of its splits *after* that batch to the checkpoint storage, so a
//! restore can resume every split past anything that may have been emitted (Kafka's
//! "commit the offset before processing"). One file per source uid, subtask and parallelism:
//! `<job>/read-positions/<lineage>/<uid>-<subtask>-of-<parallelism>.state`, in the state-file
//! format (version, CRC-32). The log belongs to the lineage whose checkpoints it extends, so a
//! fresh run or a restore of another history never reads it.
//!
//! Why the parallelism is in the name: after a rescale, subtask `i` may own other splits than
//! subtask `i` of the previous parallelism. Were its first record to replace that subtask's file,
//! the positions of the splits that moved away would be gone from the log until their new owner
//! recorded them, and a crash in between would read them again (a duplicate in at-most-once).
//! Files of an earlier parallelism are kept and pooled; a position only moves forward, so an
//! older file never holds a split further than a newer one.
//!
//! Cost: one `put` to the checkpoint storage per source batch (at most 1024 records), which is
//! why only at-most-once writes it.

use super::guarantee::{self, SourcePositions};
use super::restore::RestoreFrom;
use crate::job::Job;
use crate::state::snapshot::{StateFile, decode_state_file, encode_state_file};
use crate::storage::{Store, join};
use std::collections::HashMap;

/// Directory of the read-position log of `lineage` of `job`.
pub fn log_dir(job: &str, lineage: &str) -> String {
    format!("{job}/read-positions/{lineage}")
}

/// Where one source subtask records how far it has read.
#[derive(Clone, Debug)]
pub struct ReadPositionLog {
    /// The checkpoint store.
    pub store: Store,
    /// `<log_dir>/<uid>-<subtask>-of-<parallelism>.state`.
    pub path: String,
    /// Source uid.
    pub uid: String,
    /// Subtask index.
    pub subtask: u32,
}

impl ReadPositionLog {
    /// The log of subtask `subtask` of `parallelism` subtasks of source `uid` in `dir`
    /// ([`log_dir`]).
    pub fn new(store: Store, dir: &str, uid: &str, subtask: u32, parallelism: u32) -> ReadPositionLog {
        ReadPositionLog {
            store,
            path: join(dir, &format!("{uid}-{subtask}-of-{parallelism}.state")),
            uid: uid.to_string(),
            subtask,
        }
    }

    /// Records `items` (the source's split positions, as its snapshot encodes them), replacing
    /// the previous record atomically. Errors name the file.
    pub async fn record(&self, items: Vec<Vec<u8>>) -> Result<(), String> {
        let file = StateFile {
            uid: self.uid.clone(),
            subtask: self.subtask,
            key_groups: vec![],
            operator_state: items,
        };
        self.store
            .put(&self.path, bytes::Bytes::from(encode_state_file(&file)))
            .await
            .map_err(|e| format!("recording read positions in {}: {e}", self.store.url(&self.path)))
    }
}

/// Every position item recorded for source `uid` in log directory `dir`, over all subtasks
/// of every parallelism that ever wrote one (`<uid>-<subtask>-of-<parallelism>.state`, and
/// `<uid>-<subtask>.state` as written before the parallelism was in the name; order
/// unspecified; the caller keeps the furthest per split). Errors: a file that cannot be read or
/// fails its checks, named.
pub async fn load(store: &Store, dir: &str, uid: &str) -> Result<Vec<Vec<u8>>, String> {
    let prefix = format!("{dir}/");
    let objects = store
        .list(&prefix)
        .await
        .map_err(|e| format!("listing read positions in {}: {e}", store.url(dir)))?;
    let mut items = vec![];
    for o in objects {
        let name = &o.path[prefix.len()..];
        let Some(subtask) = name
            .strip_prefix(&format!("{uid}-"))
            .and_then(|r| r.strip_suffix(".state"))
        else {
            continue;
        };
        if !is_subtask_suffix(subtask) {
            continue;
        }
        let url = store.url(&o.path);
        let bytes = store
            .get(&o.path)
            .await
            .map_err(|e| format!("reading read positions {url}: {e}"))?;
        let file = decode_state_file(&url, &bytes).map_err(|e| e.to_string())?;
        items.extend(file.operator_state);
    }
    Ok(items)
}

/// Whether `rest` (a log file name without `<uid>-` and `.state`) is `<subtask>` or
/// `<subtask>-of-<parallelism>`: anything else belongs to another uid that starts with this one.
fn is_subtask_suffix(rest: &str) -> bool {
    let number = |s: &str| s.parse::<u32>().is_ok();
    match rest.split_once("-of-") {
        Some((subtask, parallelism)) => number(subtask) && number(parallelism),
        None => number(rest),
    }
}

/// The read-position log of an at-most-once run of lineage `lineage`: where its sources record
/// how far they have read, and (restoring with `--restore latest`, [`guarantee::source_positions`])
/// the positions already recorded there, by source uid. Other modes: neither. Errors: a log
/// file that cannot be listed, read or decoded, named.
pub async fn for_run(
    job: &Job,
    store: &Store,
    restore: &RestoreFrom,
    lineage: &str,
    restored: bool,
) -> Result<(Option<(Store, String)>, HashMap<String, Vec<Vec<u8>>>), String> {
    let mode = job.spec.checkpointing.mode;
    if !guarantee::records_read_positions(mode) {
        return Ok((None, HashMap::new()));
    }
    let dir = log_dir(&job.name, lineage);
    let mut furthest = HashMap::new();
    if restored && guarantee::source_positions(mode, restore) == SourcePositions::FurthestRead {
        furthest = load_sources(job, store, std::slice::from_ref(&dir)).await?;
    }
    Ok((Some((store.clone(), dir)), furthest))
}

/// The lineages whose read-position logs a restored attempt of the distributed runtime (run
/// `run_id`, started with `request`) resumes its sources from, when it restored a snapshot
/// written by lineage `restored_lineage` (`_metadata`'s `run_id`); `restored: false` (nothing
/// to restore: the sources start at the beginning, as in `weir run`) reads none.
///
/// Every attempt of a run and every coordinator restarted with its run id continue that run's
/// history, so the run's own log is always read: it holds what earlier attempts read past the
/// restore point (a failover is `weir run --restore latest` for the cluster). A run started
/// with `--restore latest` also continues the history of the snapshot it restored, as
/// `weir run --restore latest` does, so that snapshot's lineage is read too while the restore
/// point is one of that lineage's (once the run completed a checkpoint of its own, that
/// checkpoint's positions are already at least as far). A run started from an explicit
/// `--restore <path>` goes back to that snapshot's positions: the other lineage is not read.
pub fn cluster_lineages_to_read(
    request: &RestoreFrom,
    run_id: &str,
    restored: bool,
    restored_lineage: Option<&str>,
) -> Vec<String> {
    if !restored {
        return vec![];
    }
    let mut lineages = vec![run_id.to_string()];
    if let (RestoreFrom::Latest, Some(other)) = (request, restored_lineage)
        && other != run_id
    {
        lineages.push(other.to_string());
    }
    lineages
}

/// The read-position log of one attempt of the distributed runtime: the directory its source
/// subtasks write (the run's own, [`log_dir`] of `run_id`) and the positions recorded in the
/// logs of [`cluster_lineages_to_read`], by source uid, which workers merge with the restore
/// point's. `None` unless the job runs at-most-once. Errors: a log file that cannot be listed,
/// read or decoded, named.
pub async fn for_cluster_attempt(
    job: &Job,
    store: &Store,
    request: &RestoreFrom,
    run_id: &str,
    restored: Option<&crate::checkpoint::restore::LoadedSnapshot>,
) -> Result<Option<(String, HashMap<String, Vec<Vec<u8>>>)>, String> {
    if !guarantee::records_read_positions(job.spec.checkpointing.mode) {
        return Ok(None);
    }
    let lineages = cluster_lineages_to_read(
        request,
        run_id,
        restored.is_some(),
        restored.and_then(|s| s.metadata.run_id.as_deref()),
    );
    let dirs: Vec<String> = lineages.iter().map(|l| log_dir(&job.name, l)).collect();
    let furthest = load_sources(job, store, &dirs).await?;
    Ok(Some((log_dir(&job.name, run_id), furthest)))
}

/// Every position item recorded for each source of `job` in the log directories `dirs`, by
/// source uid (subtasks and directories pooled; the source keeps the furthest per split).
async fn load_sources(job: &Job, store: &Store, dirs: &[String]) -> Result<HashMap<String, Vec<Vec<u8>>>, String> {
    let mut furthest = HashMap::new();
    for op in job.operators.iter().filter(|o| o.kind.is_source()) {
        let mut items = vec![];
        for dir in dirs {
            items.extend(load(store, dir, &op.uid).await?);
        }
        if !items.is_empty() {
            tracing::info!(operator = %op.uid, "at-most-once: sources resume where they had read up to");
        }
        furthest.insert(op.uid.clone(), items);
    }
    Ok(furthest)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::storage::LocalStore;
    use std::sync::Arc;

    #[tokio::test]
    async fn records_replace_and_load_pools_subtasks_of_one_uid_only() {
        let dir = tempfile::tempdir().unwrap();
        let store: Store = Arc::new(LocalStore::new(dir.path()).unwrap());
        let d = log_dir("wc", "run1");
        let a0 = ReadPositionLog::new(store.clone(), &d, "lines", 0, 2);
        let a1 = ReadPositionLog::new(store.clone(), &d, "lines", 1, 2);
        let other = ReadPositionLog::new(store.clone(), &d, "lines-b", 0, 2);
        let other_of = ReadPositionLog::new(store.clone(), &d, "lines-1-of", 0, 1);
        a0.record(vec![vec![1]]).await.unwrap();
        a0.record(vec![vec![2], vec![3]]).await.unwrap();
        a1.record(vec![vec![4]]).await.unwrap();
        other.record(vec![vec![9]]).await.unwrap();
        other_of.record(vec![vec![8]]).await.unwrap();
        let mut got = load(&store, &d, "lines").await.unwrap();
        got.sort();
        assert_eq!(got, vec![vec![2], vec![3], vec![4]]);
        assert!(load(&store, &log_dir("wc", "run2"), "lines").await.unwrap().is_empty());
        std::fs::write(dir.path().join(&a1.path), b"torn").unwrap();
        let err = load(&store, &d, "lines").await.unwrap_err();
        assert!(err.contains("lines-1-of-2.state"), "{err}");
    }

    /// A rescale 2 → 3 in the same lineage: subtask 1 of 3 records its first batch, which holds
    /// only its own splits. Subtask 1 of 2's record of the splits that moved to subtask 0 stays
    /// in the log until (and after) their new owner records them; a file written before the
    /// parallelism was in the name is read too.
    #[tokio::test]
    async fn a_rescaled_subtask_keeps_the_records_of_the_splits_it_no_longer_owns() {
        let dir = tempfile::tempdir().unwrap();
        let store: Store = Arc::new(LocalStore::new(dir.path()).unwrap());
        let d = log_dir("wc", "run1");
        let old_1 = ReadPositionLog::new(store.clone(), &d, "lines", 1, 2);
        old_1.record(vec![vec![1, 7], vec![3, 7]]).await.unwrap();
        let new_1 = ReadPositionLog::new(store.clone(), &d, "lines", 1, 3);
        new_1.record(vec![vec![1, 9]]).await.unwrap();
        std::fs::create_dir_all(dir.path().join(&d)).unwrap();
        let legacy = StateFile {
            uid: "lines".into(),
            subtask: 0,
            key_groups: vec![],
            operator_state: vec![vec![5, 2]],
        };
        std::fs::write(dir.path().join(&d).join("lines-0.state"), encode_state_file(&legacy)).unwrap();
        let mut got = load(&store, &d, "lines").await.unwrap();
        got.sort();
        assert_eq!(got, vec![vec![1, 7], vec![1, 9], vec![3, 7], vec![5, 2]]);
    }

    #[test]
    fn only_subtask_and_parallelism_suffixes_belong_to_the_uid() {
        for (rest, want) in [
            ("0", true),
            ("12-of-16", true),
            ("b-0", false),
            ("1-of-", false),
            ("-of-2", false),
            ("0-of-2-of-3", false),
            ("1-of-0-of-1", false),
        ] {
            assert_eq!(is_subtask_suffix(rest), want, "{rest}");
        }
    }

    #[test]
    fn a_cluster_attempt_reads_its_own_log_and_the_restored_lineage_only_when_asked_for_latest() {
        let path = RestoreFrom::Path("file:///ckpt/wc/chk-3".into());
        let own = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        for (request, restored, lineage, want) in [
            // Nothing restored: every source starts at the beginning.
            (&RestoreFrom::None, false, None, own(&[])),
            (&RestoreFrom::Latest, false, None, own(&[])),
            // A failover (or a restarted coordinator) restoring the run's own checkpoint.
            (&RestoreFrom::None, true, Some("run"), own(&["run"])),
            (&path, true, Some("run"), own(&["run"])),
            (&RestoreFrom::Latest, true, Some("run"), own(&["run"])),
            // `--restore latest` picked another run's snapshot: its history continues.
            (&RestoreFrom::Latest, true, Some("old"), own(&["run", "old"])),
            // An explicit path goes back to that snapshot's positions.
            (&path, true, Some("old"), own(&["run"])),
            // A snapshot that names no run.
            (&RestoreFrom::Latest, true, None, own(&["run"])),
        ] {
            assert_eq!(
                cluster_lineages_to_read(request, "run", restored, lineage),
                want,
                "{request:?} restored={restored} lineage={lineage:?}"
            );
        }
    }
}
