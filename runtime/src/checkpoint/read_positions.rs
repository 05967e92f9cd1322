//! The read-position log of at-most-once mode: before a source subtask emits a batch, it
//! writes the positions of its splits *after* that batch to the checkpoint storage, so a
//! restore can resume every split past anything that may have been emitted (Kafka's
//! "commit the offset before processing"). One file per source uid and subtask:
//! `<job>/read-positions/<lineage>/<uid>-<subtask>.state`, in the state-file format (version,
//! CRC-32). The log belongs to the lineage whose checkpoints it extends, so a fresh run or a
//! restore of another history never reads it.
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
    /// `<log_dir>/<uid>-<subtask>.state`.
    pub path: String,
    /// Source uid.
    pub uid: String,
    /// Subtask index.
    pub subtask: u32,
}

impl ReadPositionLog {
    /// The log of subtask `subtask` of source `uid` in `dir` ([`log_dir`]).
    pub fn new(store: Store, dir: &str, uid: &str, subtask: u32) -> ReadPositionLog {
        ReadPositionLog {
            store,
            path: join(dir, &format!("{uid}-{subtask}.state")),
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
/// that ever wrote one (order unspecified; the caller keeps the furthest per split). Errors: a
/// file that cannot be read or fails its checks, named.
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
        if subtask.parse::<u32>().is_err() {
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
    let mut furthest = HashMap::new();
    if !guarantee::records_read_positions(mode) {
        return Ok((None, furthest));
    }
    let dir = log_dir(&job.name, lineage);
    if restored && guarantee::source_positions(mode, restore) == SourcePositions::FurthestRead {
        let sources = job.operators.iter().filter(|o| o.kind.is_source());
        for op in sources {
            let items = load(store, &dir, &op.uid).await?;
            if !items.is_empty() {
                tracing::info!(operator = %op.uid, "at-most-once: sources resume where they had read up to");
            }
            furthest.insert(op.uid.clone(), items);
        }
    }
    Ok((Some((store.clone(), dir)), furthest))
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
        let a0 = ReadPositionLog::new(store.clone(), &d, "lines", 0);
        let a1 = ReadPositionLog::new(store.clone(), &d, "lines", 1);
        let other = ReadPositionLog::new(store.clone(), &d, "lines-b", 0);
        a0.record(vec![vec![1]]).await.unwrap();
        a0.record(vec![vec![2], vec![3]]).await.unwrap();
        a1.record(vec![vec![4]]).await.unwrap();
        other.record(vec![vec![9]]).await.unwrap();
        let mut got = load(&store, &d, "lines").await.unwrap();
        got.sort();
        assert_eq!(got, vec![vec![2], vec![3], vec![4]]);
        assert!(load(&store, &log_dir("wc", "run2"), "lines").await.unwrap().is_empty());
        std::fs::write(dir.path().join(&a1.path), b"torn").unwrap();
        let err = load(&store, &d, "lines").await.unwrap_err();
        assert!(err.contains("lines-1.state"), "{err}");
    }
}
