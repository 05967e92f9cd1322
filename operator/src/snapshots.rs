//! What the operator reads from (and removes in) a job's checkpoint and savepoint storage,
//! behind a trait: the newest completed checkpoint or savepoint (the restore point after every
//! pod is gone: FLINK-27804, FLINK-33011), what a restore point holds (checked against a new
//! job before it is deployed: FLINK-30638), and savepoint disposal.
//!
//! Layouts (the runtime's): checkpoints `<checkpointing.storage>/<job>/chk-<n>/_metadata`,
//! savepoints `<savepoints.directory>/savepoint-<job>-<n>/_metadata`; `_metadata` is the commit
//! point. Ids increase across restores of one job, so the highest id is the newest.

use crate::crd::StreamJobSpec;
use crate::lifecycle::Snapshot;
use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use weir_runtime::checkpoint::restore::list_checkpoints;
use weir_runtime::checkpoint::{METADATA_FILE, checkpoint_dir, savepoint_dir_name};
use weir_runtime::control::api::{SnapshotInfo, SnapshotKind};
use weir_runtime::state::snapshot::decode_metadata;
use weir_runtime::storage::{self, S3Options, Store, join};

/// Storage access of the operator.
#[async_trait]
pub trait SnapshotStore: Send + Sync {
    /// The newest completed checkpoint or savepoint of job `name` in the storage `spec` names.
    async fn newest(&self, spec: &StreamJobSpec, name: &str) -> Result<Option<Snapshot>, String>;
    /// What the restore point at `path` holds.
    async fn inspect(&self, spec: &StreamJobSpec, path: &str) -> Result<SnapshotInfo, String>;
    /// Removes the savepoint directory at `path` (idempotent).
    async fn dispose(&self, s3: &S3Options, path: &str) -> Result<(), String>;
}

/// The savepoint directory of a spec: `savepoints.directory`, else `<storage>/savepoints`.
pub fn savepoint_directory(spec: &StreamJobSpec) -> Option<String> {
    spec.savepoints
        .as_ref()
        .and_then(|s| s.runtime.directory.clone())
        .or_else(|| spec.checkpointing.storage.as_ref().map(|s| join(s, "savepoints")))
}

/// The runtime's S3 client settings of a spec.
pub fn s3_options(spec: &StreamJobSpec) -> S3Options {
    S3Options::from(spec.s3.as_ref().map(|s| &s.runtime))
}

/// Splits a directory URL into its parent URL and last segment.
fn split_dir(url: &str) -> Option<(&str, &str)> {
    let url = url.trim_end_matches('/');
    let (parent, name) = url.rsplit_once('/')?;
    if name.is_empty() || parent.ends_with(':') || parent.ends_with(":/") {
        return None;
    }
    Some((parent, name))
}

/// [`SnapshotStore`] on the runtime's object stores (local paths, `file://`, `s3://`).
#[derive(Clone, Debug, Default)]
pub struct ObjectStoreSnapshots;

async fn read_snapshot(store: &Store, dir: &str) -> Result<Snapshot, String> {
    let meta_path = join(dir, METADATA_FILE);
    let bytes = store.get(&meta_path).await.map_err(|e| e.to_string())?;
    let m = decode_metadata(&store.url(&meta_path), &bytes).map_err(|e| e.to_string())?;
    Ok(Snapshot {
        path: store.url(dir),
        id: m.checkpoint_id,
        kind: m.kind,
        // `_metadata` records the trigger time; completion follows it closely, and a stop's
        // savepoint is always triggered after the stop was recorded, which is what matters.
        completed_at_ms: m.triggered_at_ms,
    })
}

#[async_trait]
impl SnapshotStore for ObjectStoreSnapshots {
    async fn newest(&self, spec: &StreamJobSpec, name: &str) -> Result<Option<Snapshot>, String> {
        let s3 = s3_options(spec);
        let mut best: Option<Snapshot> = None;
        if let Some(url) = &spec.checkpointing.storage {
            let store = storage::open(url, &s3).await.map_err(|e| e.to_string())?;
            let seen = list_checkpoints(&store, name).await.map_err(|e| e.to_string())?;
            // Newest completed first; an unreadable `_metadata` falls back to the previous one.
            for c in seen.iter().rev().filter(|c| c.completed) {
                match read_snapshot(&store, &checkpoint_dir(name, c.id)).await {
                    Ok(s) => {
                        best = Some(s);
                        break;
                    }
                    Err(e) => tracing::warn!(checkpoint = c.id, error = %e, "unreadable checkpoint metadata"),
                }
            }
        }
        if let Some(dir) = savepoint_directory(spec) {
            let store = storage::open(&dir, &s3).await.map_err(|e| e.to_string())?;
            let prefix = format!("savepoint-{name}-");
            let mut ids: Vec<u64> = store
                .list(&prefix)
                .await
                .map_err(|e| e.to_string())?
                .iter()
                .filter_map(|o| {
                    let (dir, file) = o.path.split_once('/')?;
                    (file == METADATA_FILE).then_some(())?;
                    dir.strip_prefix(&prefix)?.parse::<u64>().ok()
                })
                .collect();
            ids.sort_unstable_by(|a, b| b.cmp(a));
            for id in ids {
                if best.as_ref().is_some_and(|b| b.id >= id) {
                    break;
                }
                match read_snapshot(&store, &savepoint_dir_name(name, id)).await {
                    Ok(s) => {
                        best = Some(s);
                        break;
                    }
                    Err(e) => tracing::warn!(savepoint = id, error = %e, "unreadable savepoint metadata"),
                }
            }
        }
        Ok(best)
    }

    async fn inspect(&self, spec: &StreamJobSpec, path: &str) -> Result<SnapshotInfo, String> {
        weir_runtime::cli::snapshot_info(path, &s3_options(spec)).await
    }

    async fn dispose(&self, s3: &S3Options, path: &str) -> Result<(), String> {
        let (parent, name) = split_dir(path).ok_or_else(|| format!("refusing to dispose `{path}`: not a directory"))?;
        let store = storage::open(parent, s3).await.map_err(|e| e.to_string())?;
        // The trailing slash keeps `savepoint-j-3` from matching `savepoint-j-30`.
        store
            .delete_prefix(&format!("{name}/"))
            .await
            .map_err(|e| e.to_string())
    }
}

/// In-memory [`SnapshotStore`] for tests.
#[derive(Clone, Default)]
pub struct FakeSnapshots {
    inner: Arc<Mutex<FakeSnapshotState>>,
}

#[derive(Default)]
struct FakeSnapshotState {
    newest: Option<Snapshot>,
    infos: HashMap<String, SnapshotInfo>,
    disposed: Vec<String>,
}

impl FakeSnapshots {
    /// Sets the newest snapshot in storage.
    pub fn set_newest(&self, s: Option<Snapshot>) {
        self.inner.lock().unwrap().newest = s;
    }
    /// Registers what `path` holds.
    pub fn set_info(&self, path: &str, info: SnapshotInfo) {
        self.inner.lock().unwrap().infos.insert(path.into(), info);
    }
    /// Paths disposed so far.
    pub fn disposed(&self) -> Vec<String> {
        self.inner.lock().unwrap().disposed.clone()
    }
}

#[async_trait]
impl SnapshotStore for FakeSnapshots {
    async fn newest(&self, _spec: &StreamJobSpec, _name: &str) -> Result<Option<Snapshot>, String> {
        Ok(self.inner.lock().unwrap().newest.clone())
    }
    async fn inspect(&self, _spec: &StreamJobSpec, path: &str) -> Result<SnapshotInfo, String> {
        self.inner
            .lock()
            .unwrap()
            .infos
            .get(path)
            .cloned()
            .ok_or_else(|| format!("{path}/_metadata: not found"))
    }
    async fn dispose(&self, _s3: &S3Options, path: &str) -> Result<(), String> {
        self.inner.lock().unwrap().disposed.push(path.into());
        Ok(())
    }
}

/// Whether a snapshot is a savepoint.
pub fn is_savepoint(s: &Snapshot) -> bool {
    s.kind == SnapshotKind::Savepoint
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use weir_runtime::state::snapshot::{CheckpointMetadata, encode_metadata};

    fn spec(root: &str) -> StreamJobSpec {
        serde_yaml::from_str(&format!(
            "image: weir:1\ncheckpointing: {{storage: \"{root}/chk\"}}\njob: {{steps: [{{source: {{generator: {{}}}}}}, {{sink: {{print: {{}}}}}}]}}\n"
        ))
        .unwrap()
    }

    async fn write_meta(root: &str, dir: &str, id: u64, kind: SnapshotKind, t: u64) {
        let store = storage::open(root, &S3Options::default()).await.unwrap();
        let m = CheckpointMetadata {
            format_version: weir_runtime::state::snapshot::FORMAT_VERSION,
            job_name: "j".into(),
            checkpoint_id: id,
            kind,
            max_parallelism: 128,
            parallelism: 1,
            triggered_at_ms: t,
            completed_at_ms: t,
            run_id: None,
            operators: vec![],
        };
        store
            .put(&join(dir, METADATA_FILE), Bytes::from(encode_metadata(&m)))
            .await
            .unwrap();
    }

    #[tokio::test]
    async fn newest_over_checkpoints_and_savepoints_and_dispose() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_str().unwrap().to_string();
        let s = spec(&root);
        let snaps = ObjectStoreSnapshots;
        assert_eq!(snaps.newest(&s, "j").await.unwrap(), None);
        write_meta(&root, "chk/j/chk-3", 3, SnapshotKind::Checkpoint, 30).await;
        write_meta(&root, "chk/j/chk-5", 5, SnapshotKind::Checkpoint, 50).await;
        // An incomplete checkpoint (no _metadata) never counts.
        let store = storage::open(&root, &S3Options::default()).await.unwrap();
        store.put("chk/j/chk-9/op-0", Bytes::from_static(b"x")).await.unwrap();
        // Another job's savepoint is ignored.
        write_meta(&root, "chk/savepoints/savepoint-jj-99", 99, SnapshotKind::Savepoint, 99).await;
        let n = snaps.newest(&s, "j").await.unwrap().unwrap();
        assert_eq!((n.id, n.kind, n.completed_at_ms), (5, SnapshotKind::Checkpoint, 50));
        write_meta(&root, "chk/savepoints/savepoint-j-6", 6, SnapshotKind::Savepoint, 60).await;
        write_meta(&root, "chk/savepoints/savepoint-j-60", 60, SnapshotKind::Savepoint, 600).await;
        let n = snaps.newest(&s, "j").await.unwrap().unwrap();
        assert_eq!((n.id, n.kind), (60, SnapshotKind::Savepoint));
        assert!(n.path.ends_with("chk/savepoints/savepoint-j-60"), "{}", n.path);

        snaps
            .dispose(&S3Options::default(), &format!("{root}/chk/savepoints/savepoint-j-6"))
            .await
            .unwrap();
        assert!(!store.exists("chk/savepoints/savepoint-j-6/_metadata").await.unwrap());
        assert!(store.exists("chk/savepoints/savepoint-j-60/_metadata").await.unwrap());
        assert!(snaps.dispose(&S3Options::default(), "s3://").await.is_err());
    }
}
