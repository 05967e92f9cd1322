//! The disk backend's keyed state while its store is still being created: the first records
//! after a start are processed in memory instead of waiting for the store.
//!
//! Creating an empty store costs a few `fsync`s (`state/disk_store.rs`; fjall, the store before
//! RocksDB, needed about 19: 0.07–0.5 s on a shared disk). A run starts the creation before it reads
//! its restore point ([`disk_store::create_early`]), but when the download is shorter than the
//! creation, the first record used to wait for the rest of it. Now a subtask whose store is not
//! created yet starts on an [`OpeningDiskState`]: the heap backend's tables
//! ([`HeapKeyedState`]) hold what the first batches build and write, and at the first batch
//! after the creation ended (`KeyedState::maintain`, a check without waiting) everything they
//! hold is **handed over** to the store ([`OpeningDiskState::finish`]): encoded as key-group
//! blocks, exactly as a heap checkpoint writes them (with each entry's last write time when the
//! step has a TTL), and written into the empty store as a restore writes blocks
//! ([`DiskKeyedState::restore_absent_groups`]). So the store then holds exactly what the
//! memory held, as a savepoint taken on heap and restored on disk would.
//!
//! What waits for the store instead (the handover is done first, blocking): building a set of
//! restored key groups larger than [`batch_build_bytes`] (the first batch of spread keys, the
//! build of all the rest: they go into the store by one ingestion, as before, rather than into
//! memory and then again into the store), an eager restore, and every snapshot: the caller
//! finishes the opening before a checkpoint's synchronous part (`Aggregate::snapshot`), so no
//! change is ever tracked in memory and a checkpoint or savepoint sees only the store. Memory
//! holds at most what the first batches touch before the store exists: restored key groups
//! up to [`batch_build_bytes`] in all (a build once the creation has ended, or beyond that
//! bound, finishes the opening first) and the keys written in that time.

use crate::state::disk::{DiskKeyedState, DiskStateError, DiskStateOptions, batch_build_bytes};
use crate::state::disk_store::ClaimedCreation;
use crate::state::heap::HeapKeyedState;
use crate::state::key_group::KeyGroupRange;
use crate::state::snapshot::KeyGroupBlock;
use crate::state::ttl::StateTtl;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::path::{Path, PathBuf};

#[cfg(doc)]
use crate::state::disk_store;

/// Keyed state of the disk backend in memory while its store is created (see the module
/// docs).
pub struct OpeningDiskState<V> {
    heap: HeapKeyedState<V>,
    creation: Option<ClaimedCreation>,
    dir: PathBuf,
    range: KeyGroupRange,
    ttl: Option<StateTtl>,
    options: DiskStateOptions,
    /// Whether changes were tracked in memory (the handover refuses then: the caller finishes
    /// the opening before it tracks changes).
    tracked: bool,
    /// Bytes of restored blocks built in memory so far (bounded by [`batch_build_bytes`]).
    built_in_memory_bytes: usize,
}

impl<V: Clone + Send + Sync + Serialize + DeserializeOwned + 'static> OpeningDiskState<V> {
    /// Empty state for `range` whose store at `dir` (`options`) is being created by
    /// `creation`, expiring entries after `ttl` if set.
    pub(crate) fn new(
        dir: &Path,
        range: KeyGroupRange,
        ttl: Option<StateTtl>,
        options: DiskStateOptions,
        creation: ClaimedCreation,
    ) -> OpeningDiskState<V> {
        OpeningDiskState {
            heap: HeapKeyedState::new(range, ttl),
            creation: Some(creation),
            dir: dir.to_path_buf(),
            range,
            ttl,
            options,
            tracked: false,
            built_in_memory_bytes: 0,
        }
    }

    /// The tables that hold the state until the handover.
    pub fn memory(&self) -> &HeapKeyedState<V> {
        &self.heap
    }

    /// As [`OpeningDiskState::memory`], to write.
    pub fn memory_mut(&mut self) -> &mut HeapKeyedState<V> {
        &mut self.heap
    }

    /// Records that changes are tracked in memory (see [`OpeningDiskState::finish`]).
    pub fn track_changes(&mut self) {
        self.tracked = true;
        self.heap.track_changes();
    }

    /// Whether the store's creation has ended, so [`OpeningDiskState::finish`] waits for
    /// nothing but the handover itself.
    pub fn is_store_ready(&self) -> bool {
        self.creation.as_ref().is_none_or(ClaimedCreation::is_finished)
    }

    /// Whether restored `blocks` are built in memory rather than by the store after the
    /// handover, counting them if so: only while the store is still being created, and only
    /// up to [`batch_build_bytes`] of blocks of the range in all (what the store would take
    /// by one write batch), so that builds while the job is idle (a lazy restore's background
    /// builds) cannot decode the whole state into memory.
    pub fn builds_in_memory(&mut self, blocks: &[KeyGroupBlock]) -> bool {
        if self.is_store_ready() {
            return false;
        }
        let bytes: usize = blocks
            .iter()
            .filter(|b| self.range.contains(b.key_group))
            .map(|b| b.data.len())
            .sum();
        let total = self.built_in_memory_bytes + bytes;
        if total > batch_build_bytes(&self.options) {
            return false;
        }
        self.built_in_memory_bytes = total;
        true
    }

    /// The handover: waits for the rest of the store's creation, opens the disk state on it
    /// and writes into it everything memory holds, as blocks at `now_ms` (entries expired then
    /// are left out: they are never read). Memory is empty afterwards. Errors: the store's
    /// creation failed or a write into it failed (naming the directory); changes were tracked
    /// in memory (a caller that did not finish the opening before tracking changes: the store
    /// could not tell which of the handed-over keys changed).
    pub fn finish(&mut self, now_ms: u64) -> Result<DiskKeyedState<V>, DiskStateError> {
        let err = |problem: String| DiskStateError {
            dir: self.dir.clone(),
            problem,
        };
        if self.tracked {
            return Err(err(
                "internal error: changes were tracked before the store was open; the opening must be finished \
                 before an incremental checkpoint"
                    .into(),
            ));
        }
        let mut disk = match self.creation.take() {
            Some(creation) => {
                let store = creation.join()?;
                DiskKeyedState::on_store(store, &self.dir, self.range, self.ttl, self.options)?
            }
            None => DiskKeyedState::open(&self.dir, self.range, self.ttl, self.options)?,
        };
        let mut memory = std::mem::replace(&mut self.heap, HeapKeyedState::new(self.range, self.ttl));
        if !memory.is_empty() {
            let blocks = memory
                .snapshot(now_ms)
                .encode()
                .map_err(|e| err(format!("encoding the state held in memory for the store: {e}")))?;
            drop(memory);
            disk.restore_absent_groups(blocks, now_ms)
                .map_err(|e| err(format!("writing the state held in memory into the store: {e}")))?;
        }
        Ok(disk)
    }
}

#[cfg(test)]
#[path = "disk_opening_tests.rs"]
mod tests;
