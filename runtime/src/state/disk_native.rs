//! Native checkpoints of the disk backend (issue 12, Flink's incremental RocksDB checkpoints):
//! the store's own files instead of the key-group block format.
//!
//! **Synchronous part** ([`DiskKeyedState::native_snapshot`], on the task thread at the
//! barrier, O(1)): the write-back cache's current generation is frozen and handed to the
//! write-back thread (`state/disk_write_back.rs`), then a checkpoint job right after it. The
//! write-back thread is the only writer of the store while generations are kept
//! ([`WriteBack::keeps_written`](crate::state::disk_write_back::WriteBack::keeps_written):
//! removals and TTL cleanup go through the cache as tombstones), and it writes generations
//! in the order they were frozen, so when it reaches the job the store holds exactly the
//! writes before the barrier. It then writes a RocksDB checkpoint
//! (`disk_rocks::RocksStore::create_checkpoint`: memtables flushed, table files
//! hard-linked) into a local directory next to the store, or, while the writes since the last
//! such checkpoint fit in the write buffer, a delta checkpoint: that checkpoint's files plus
//! the writes since, logged in delta files (`state/disk_delta.rs`), no flush.
//!
//! **Asynchronous part** ([`NativeSnapshot::wait`], on the encoder thread, never the task
//! thread): waits for the write-back thread's reply and hands over the checkpoint's directory
//! ([`LocalCheckpoint`], removed when dropped) with its files listed: the table files, which
//! never change once written (so a later checkpoint may reference an uploaded one instead of
//! uploading it again), and the small private files (`MANIFEST-*`, `CURRENT`, `OPTIONS-*`).
//!
//! **Restore** ([`blocks_of_native_store`]): the files of a native checkpoint, downloaded into a
//! local directory, are opened read-only and the key groups a subtask owns are encoded as the
//! heap backend's blocks ([`DiskSnapshot`]'s encoding, no overlays), which either backend
//! restores at any parallelism.

use crate::state::disk::{DiskKeyedState, DiskSnapshot, DiskStateError, DiskStateOptions};
use crate::state::disk_rocks::{self, StoreView};
use crate::state::key_group::KeyGroupRange;
use crate::state::snapshot::KeyGroupBlock;
use crate::state::ttl::StateTtl;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::path::{Path, PathBuf};
use std::sync::mpsc::Receiver;

/// The local directory a native checkpoint of the store in `store_dir` is written into: a
/// sibling of the store (`<store dir>.chk<id>`), in the same run directory, so on the same
/// file system (RocksDB hard-links the table files) and removed with the run directory by a
/// later process if this one is killed (`state/local_dir.rs`).
pub fn local_checkpoint_dir(store_dir: &Path, checkpoint_id: u64) -> PathBuf {
    let mut name = store_dir.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(format!(".chk{checkpoint_id}"));
    store_dir.with_file_name(name)
}

/// A native checkpoint requested at a barrier, being written by the write-back thread (`Send`
/// to the encoder thread).
pub struct NativeSnapshot {
    into: PathBuf,
    /// `None` once [`NativeSnapshot::wait`] took it.
    reply: Option<Result<Receiver<Result<(), String>>, DiskStateError>>,
    range: KeyGroupRange,
}

impl Drop for NativeSnapshot {
    /// A snapshot dropped without [`NativeSnapshot::wait`] (its checkpoint was abandoned)
    /// removes the checkpoint the write-back thread wrote; one not written yet is removed by
    /// the thread when it finds no one waiting.
    fn drop(&mut self) {
        // The receiver goes first: from then on the write-back thread's reply fails and the
        // thread removes what it writes; what it wrote before is removed here. (Removing first
        // left a checkpoint written between the two steps in place.)
        if let Some(reply) = self.reply.take() {
            drop(reply);
            let _ = std::fs::remove_dir_all(&self.into);
        }
    }
}

/// One file of a [`LocalCheckpoint`]: its name in the directory and its size in bytes.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LocalFile {
    /// File name (no directory), e.g. `000012.sst`, `MANIFEST-000005`, `CURRENT`.
    pub name: String,
    /// Size in bytes.
    pub size: u64,
}

/// A native checkpoint written locally: a RocksDB checkpoint directory holding the store as of
/// the barrier. The directory is removed when this is dropped.
pub struct LocalCheckpoint {
    dir: PathBuf,
    range: KeyGroupRange,
    /// Table files (`*.sst`), by name.
    pub table_files: Vec<LocalFile>,
    /// Every other file (`MANIFEST-*`, `CURRENT`, `OPTIONS-*`), by name.
    pub private_files: Vec<LocalFile>,
}

impl Drop for LocalCheckpoint {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

impl LocalCheckpoint {
    /// The checkpoint's directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The key groups of the store it holds.
    pub fn range(&self) -> KeyGroupRange {
        self.range
    }
}

/// Whether a file of a native checkpoint's directory is a table file (immutable once written,
/// shareable between checkpoints), by its name: RocksDB's table files (`*.sst`) and delta
/// files (`*.delta`, `state/disk_delta.rs`).
pub fn is_table_file(name: &str) -> bool {
    name.ends_with(".sst") || crate::state::disk_delta::is_delta_file(name)
}

impl NativeSnapshot {
    /// Waits (off the task thread) for the write-back thread to write the checkpoint, and lists
    /// its files, sorted by name. Errors: the request failed at the barrier (no cache, a
    /// write-back failed), the write-back thread ended or failed to write the checkpoint, or
    /// the directory cannot be listed.
    pub fn wait(mut self) -> Result<LocalCheckpoint, DiskStateError> {
        let err = |problem: String| DiskStateError {
            dir: self.into.clone(),
            problem,
        };
        let reply = self.reply.take().expect("waited for once")?;
        reply
            .recv()
            .map_err(|_| err("the write-back thread ended before the checkpoint".into()))?
            .map_err(|problem| err(format!("native checkpoint: {problem}")))?;
        let mut checkpoint = LocalCheckpoint {
            dir: self.into.clone(),
            range: self.range,
            table_files: Vec::new(),
            private_files: Vec::new(),
        };
        let listed = std::fs::read_dir(&self.into).map_err(|e| err(format!("cannot list the checkpoint: {e}")))?;
        for entry in listed {
            let entry = entry.map_err(|e| err(format!("cannot list the checkpoint: {e}")))?;
            let size = entry
                .metadata()
                .map_err(|e| err(format!("cannot read a checkpoint file's size: {e}")))?
                .len();
            let name = entry.file_name().to_string_lossy().into_owned();
            let file = LocalFile { name, size };
            if is_table_file(&file.name) {
                checkpoint.table_files.push(file);
            } else {
                checkpoint.private_files.push(file);
            }
        }
        checkpoint.table_files.sort_by(|a, b| a.name.cmp(&b.name));
        checkpoint.private_files.sort_by(|a, b| a.name.cmp(&b.name));
        Ok(checkpoint)
    }
}

impl<V: Clone + Send + Sync + Serialize + DeserializeOwned + 'static> DiskKeyedState<V> {
    /// The synchronous part of a native checkpoint `checkpoint_id` (see the module doc): O(1),
    /// no store write on this thread. A failure (no write-back cache, changes not tracked so
    /// writes may bypass the cache, a write-back failed) is reported by [`NativeSnapshot::wait`].
    pub fn native_snapshot(&mut self, checkpoint_id: u64) -> NativeSnapshot {
        let into = local_checkpoint_dir(self.dir(), checkpoint_id);
        let reply = self
            .freeze_for_native_checkpoint()
            .and_then(|()| self.request_native_checkpoint(into.clone()));
        NativeSnapshot {
            into,
            reply: Some(reply),
            range: self.range(),
        }
    }
}

/// The blocks of the key groups of `range` (one per key group holding live entries, in order;
/// entries expired at `now_ms` left out) that the native checkpoint whose files are in `dir`
/// holds (a delta checkpoint's delta files applied, `state/disk_delta.rs`), encoded as
/// [`DiskSnapshot::encode`] encodes a store (the heap backend's block format): what a restore
/// on either backend, at any parallelism, reads. `dir` is removed afterwards. Errors: the
/// files do not open as a store, a delta file is corrupt, or they hold an entry the disk
/// backend did not write.
pub fn blocks_of_native_store(
    dir: &Path,
    options: &DiskStateOptions,
    range: KeyGroupRange,
    ttl: Option<StateTtl>,
    now_ms: u64,
) -> Result<Vec<KeyGroupBlock>, DiskStateError> {
    native_store_snapshot(dir, options, range, ttl, now_ms)?.encode()
}

/// As [`blocks_of_native_store`], the blocks handed to `emit` one by one in key-group order
/// ([`DiskSnapshot::encode_each`]) instead of collected. Errors: as
/// [`blocks_of_native_store`]'s, or `emit`'s (which stop the encode).
pub fn each_block_of_native_store<E: From<DiskStateError>>(
    dir: &Path,
    options: &DiskStateOptions,
    range: KeyGroupRange,
    ttl: Option<StateTtl>,
    now_ms: u64,
    emit: &mut dyn FnMut(KeyGroupBlock) -> Result<(), E>,
) -> Result<(), E> {
    native_store_snapshot(dir, options, range, ttl, now_ms)?.encode_each(emit)
}

/// The files of a native checkpoint in `dir` opened as a read view to encode (see
/// [`blocks_of_native_store`]).
fn native_store_snapshot(
    dir: &Path,
    options: &DiskStateOptions,
    range: KeyGroupRange,
    ttl: Option<StateTtl>,
    now_ms: u64,
) -> Result<DiskSnapshot, DiskStateError> {
    let deltas = crate::state::disk_delta::delta_files_in(dir).map_err(|e| DiskStateError {
        dir: dir.to_path_buf(),
        problem: format!("cannot list the checkpoint's files: {e}"),
    })?;
    let store = if deltas.is_empty() {
        disk_rocks::open_read_only(dir, options)?
    } else {
        // A delta checkpoint: its writes go into the base's store first.
        let store = disk_rocks::open_existing(dir, options)?;
        crate::state::disk_delta::apply_deltas(&store, dir)?;
        store
    };
    let snapshot = DiskSnapshot {
        write_back_error: None,
        overlays: Vec::new(),
        delta_overlays: Vec::new(),
        view: StoreView::new(&store),
        dir: dir.to_path_buf(),
        ttl,
        now_ms,
        range,
    };
    drop(store);
    Ok(snapshot)
}

#[cfg(test)]
#[path = "disk_native_tests.rs"]
mod tests;
