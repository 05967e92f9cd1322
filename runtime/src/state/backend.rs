//! The keyed state of a stateful step on either backend (`spec.stateBackend`): heap
//! ([`HeapKeyedState`], Flink's `hashmap`) or disk ([`DiskKeyedState`], Flink's `rocksdb`).
//! Both write the same per-key-group blocks, so a savepoint taken on one restores on the other,
//! and the same delta blocks for incremental checkpoints (`state/incremental.rs`).

use crate::record::Key;
use crate::state::disk::{DiskKeyedState, DiskSnapshot, DiskStateError, DiskStateOptions};
use crate::state::disk_opening::OpeningDiskState;
use crate::state::heap::{ChangedKeys, HeapKeyedState, HeapSnapshot};
use crate::state::int_keyed::{IntKeyedState, IntSnapshot};
use crate::state::key_group::KeyGroupRange;
use crate::state::snapshot::KeyGroupBlock;
use crate::state::ttl::StateTtl;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::path::PathBuf;

/// Where a step's keyed state lives.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub enum BackendChoice {
    /// In memory (the default).
    #[default]
    Heap,
    /// In an LSM store under the given local scratch directory (one per subtask and step).
    Disk {
        /// The store's directory (recreated empty on open).
        dir: PathBuf,
        /// Memory limits of the store.
        options: DiskStateOptions,
    },
}

/// One subtask's keyed state of `V` on the chosen backend. Heap operations never fail; disk
/// operations fail only when the local store does ([`DiskStateError`]).
pub enum KeyedState<V> {
    /// Heap backend.
    Heap(HeapKeyedState<V>),
    /// Heap backend, integer keys only (a step without `ttl` starts here and moves to
    /// [`KeyedState::Heap`] at the first other key; see [`IntKeyedState`]).
    HeapInt(IntKeyedState<V>),
    /// Disk backend.
    Disk(DiskKeyedState<V>),
    /// Disk backend whose store is still being created: in memory until the first batch
    /// after the creation ended, then [`KeyedState::Disk`] (`state/disk_opening.rs`).
    DiskOpening(OpeningDiskState<V>),
}

/// How much keyed state one subtask of a stateful step holds, for its metrics
/// (`weir_keyed_state_*`, `metrics.rs`).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct KeyedStateSize {
    /// Keys held (expired ones included until cleanup removes them; a window: keys holding a
    /// window, open or fired and kept for `allowedLateness`).
    pub entries: u64,
    /// Disk backend: bytes the subtask takes on local disk: its store's table files
    /// ([`StoreBytes::table_files`](crate::state::disk::StoreBytes)) and the files only the
    /// base of its native checkpoints holds ([`DiskKeyedState::checkpoint_base_bytes`]).
    /// `None` on the heap.
    ///
    /// [`DiskKeyedState::checkpoint_base_bytes`]: crate::state::disk::DiskKeyedState::checkpoint_base_bytes
    pub disk_bytes: Option<u64>,
    /// Disk backend: bytes of memory the store and its write-back cache use (block cache,
    /// memtables, cached writes). `None` on the heap.
    pub memory_bytes: Option<u64>,
    /// Disk backend with the write-back cache on: its hits and misses since the state opened.
    /// `None` otherwise.
    pub cache_lookups: Option<crate::state::disk::CacheLookups>,
}

/// A snapshot of a [`KeyedState`] as of a barrier, to encode off the task thread.
pub enum KeyedSnapshot<V> {
    /// Frozen heap tables.
    Heap(HeapSnapshot<V>),
    /// Shared integer-key tables.
    HeapInt(IntSnapshot<V>),
    /// The store's read view.
    Disk(DiskSnapshot),
}

impl<V: Clone + Send + Sync + Serialize + DeserializeOwned + 'static> KeyedState<V> {
    /// Empty state for `range` on `backend`, expiring entries after `ttl` if set. Errors: the
    /// disk store cannot be created.
    pub fn open(backend: &BackendChoice, range: KeyGroupRange, ttl: Option<StateTtl>) -> Result<Self, DiskStateError> {
        Ok(match backend {
            // Integer keys first (the generic table at the first other key), unless
            // `WEIR_RECORDS=rows` asks for the row path of earlier releases throughout.
            BackendChoice::Heap if ttl.is_none() && crate::record::columns::columns_enabled() => {
                KeyedState::HeapInt(IntKeyedState::new(range))
            }
            BackendChoice::Heap => KeyedState::Heap(HeapKeyedState::new(range, ttl)),
            // A store whose creation started early and is still running is not waited for:
            // the first records are processed in memory (`state/disk_opening.rs`).
            BackendChoice::Disk { dir, options } => match crate::state::disk_store::claim_unfinished(dir, *options) {
                Some(creation) => KeyedState::DiskOpening(OpeningDiskState::new(dir, range, ttl, *options, creation)),
                None => KeyedState::Disk(DiskKeyedState::open(dir, range, ttl, *options)?),
            },
        })
    }

    /// State for `range` on `backend` in the store a native checkpoint's fast restore put in
    /// `restored.dir` (`checkpoint/native_restore.rs`), expiring entries after `ttl` if set.
    /// Errors: `backend` is not that directory's disk store (an internal error: the restore
    /// decided the fast path for another backend or range); the store does not open.
    pub fn open_restored(
        backend: &BackendChoice,
        range: KeyGroupRange,
        ttl: Option<StateTtl>,
        restored: &crate::checkpoint::native_restore::RestoredStore,
    ) -> Result<Self, DiskStateError> {
        match backend {
            BackendChoice::Disk { dir, options } if *dir == restored.dir && range == restored.range => {
                let opened = DiskKeyedState::open_restored(dir, range, ttl, *options, restored.entries);
                Ok(KeyedState::Disk(opened.map_err(|e| {
                    match crate::checkpoint::native_restore::unopenable_store_problem(&e.problem, restored) {
                        Some(problem) => DiskStateError { problem, ..e },
                        None => e,
                    }
                })?))
            }
            _ => Err(DiskStateError {
                dir: restored.dir.clone(),
                problem: format!(
                    "internal error: a native checkpoint was restored into this directory for key groups {range:?} \
                     of another backend or range ({backend:?}, restored {:?})",
                    restored.range
                ),
            }),
        }
    }

    /// Whether the disk backend's store is still being created (the state is in memory).
    pub fn is_opening(&self) -> bool {
        matches!(self, KeyedState::DiskOpening(_))
    }

    /// Ends the disk backend's opening (no-op on any other state): waits for the rest of the
    /// store's creation and hands what memory holds over to the store
    /// ([`OpeningDiskState::finish`]). Call it before a snapshot's synchronous part
    /// (`Aggregate::snapshot` does), so changes are tracked only in the store. Errors: the
    /// store's creation or a write into it failed.
    pub fn finish_opening(&mut self, now_ms: u64) -> Result<(), DiskStateError> {
        if let KeyedState::DiskOpening(opening) = self {
            *self = KeyedState::Disk(opening.finish(now_ms)?);
        }
        Ok(())
    }

    /// Entries held, expired ones included until cleanup removes them.
    pub fn len(&self) -> usize {
        match self {
            KeyedState::Heap(s) => s.len(),
            KeyedState::HeapInt(s) => s.len(),
            KeyedState::Disk(s) => s.len(),
            KeyedState::DiskOpening(s) => s.memory().len(),
        }
    }

    /// The state's size now ([`KeyedStateSize`]): O(key groups) on heap, counters of the
    /// store on disk. A disk store still being created reports its memory's entries only.
    pub fn size(&self) -> KeyedStateSize {
        match self {
            KeyedState::Disk(s) => {
                let (store, write_cache) = s.bytes();
                KeyedStateSize {
                    entries: s.len() as u64,
                    disk_bytes: Some(store.table_files + s.checkpoint_base_bytes()),
                    memory_bytes: Some(store.block_cache + store.memtables + write_cache),
                    cache_lookups: s.cache_lookups(),
                }
            }
            _ => KeyedStateSize {
                entries: self.len() as u64,
                ..KeyedStateSize::default()
            },
        }
    }

    /// Moves an integer-key state into the generic heap table (no-op otherwise) and returns
    /// that table, or `None` for the disk backend.
    fn generic(&mut self) -> Option<&mut HeapKeyedState<V>> {
        if let KeyedState::HeapInt(ints) = self {
            let mut heap = HeapKeyedState::new(ints.range(), None);
            for (key_group, k, v) in ints.entries() {
                let key = Key::Int(k);
                heap.update(key_group, crate::state::key_group::int_key_hash(k), &key, 0, |_| {
                    v.clone()
                });
            }
            *self = KeyedState::Heap(heap);
        }
        match self {
            KeyedState::Heap(heap) => Some(heap),
            _ => None,
        }
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Loads restored blocks (see [`HeapKeyedState::restore`]). Errors: a block that does not
    /// decode (named by key group), a store write failure.
    pub fn restore(&mut self, blocks: Vec<KeyGroupBlock>, now_ms: u64) -> Result<(), String> {
        // An eager restore goes into the store.
        self.finish_opening(now_ms).map_err(|e| e.to_string())?;
        match self {
            KeyedState::Heap(s) => s.restore(blocks, now_ms),
            KeyedState::HeapInt(s) => match s.restore(blocks)? {
                Ok(()) => Ok(()),
                // A delta or a key of another type: the generic table restores them.
                Err(blocks) => self.generic().map_or(Ok(()), |heap| heap.restore(blocks, now_ms)),
            },
            // The store alone must hold the state before blocks are written into it (a
            // restore into a store that holds entries writes and looks up keys directly).
            KeyedState::Disk(s) => {
                s.write_back_and_clear_cache().map_err(|e| e.to_string())?;
                s.restore(blocks, now_ms)
            }
            KeyedState::DiskOpening(_) => unreachable!("the opening was finished above"),
        }
    }

    /// [`KeyedState::restore`] of blocks whose key groups hold no entry yet (a lazy
    /// restore's pending groups, `state/pending.rs`): on disk by bulk ingestion even into a
    /// store that holds other key groups (the write-back cache holds no entry of those groups,
    /// so it stays: ingested keys are none of its keys). Errors: as [`KeyedState::restore`].
    pub fn restore_absent_groups(&mut self, blocks: Vec<KeyGroupBlock>, now_ms: u64) -> Result<(), String> {
        // While the store is created, a few groups are built in memory (up to a bound in all);
        // more, or any once the creation has ended, wait for the store and go in by its
        // ingestion.
        if let KeyedState::DiskOpening(opening) = self {
            if opening.builds_in_memory(&blocks) {
                return opening.memory_mut().restore(blocks, now_ms);
            }
            self.finish_opening(now_ms).map_err(|e| e.to_string())?;
        }
        match self {
            KeyedState::Disk(s) => s.restore_absent_groups(blocks, now_ms),
            _ => self.restore(blocks, now_ms),
        }
    }

    /// The live value of `key` at `now_ms` (cloned). Errors: the disk store fails.
    pub fn get(&self, key_group: u32, hash: u64, key: &Key, now_ms: u64) -> Result<Option<V>, DiskStateError> {
        match self {
            KeyedState::Heap(s) => Ok(s.get(key_group, hash, key, now_ms).cloned()),
            KeyedState::HeapInt(s) => Ok(match key {
                Key::Int(k) => s.get(key_group, hash, *k).cloned(),
                _ => None,
            }),
            KeyedState::Disk(s) => s.get(key_group, hash, key, now_ms),
            KeyedState::DiskOpening(s) => Ok(s.memory().get(key_group, hash, key, now_ms).cloned()),
        }
    }

    /// Read-modify-write of `key` at `now_ms` (see [`HeapKeyedState::update`]). Errors: the
    /// disk store fails.
    #[inline]
    pub fn update(
        &mut self,
        key_group: u32,
        hash: u64,
        key: &Key,
        now_ms: u64,
        f: impl FnOnce(Option<&V>) -> V,
    ) -> Result<V, DiskStateError> {
        match (self, key) {
            (KeyedState::Heap(s), _) => Ok(s.update(key_group, hash, key, now_ms, f)),
            (KeyedState::HeapInt(s), Key::Int(k)) => Ok(s.update(key_group, hash, *k, f)),
            (KeyedState::Disk(s), _) => s.update(key_group, hash, key, now_ms, f),
            (KeyedState::DiskOpening(s), _) => Ok(s.memory_mut().update(key_group, hash, key, now_ms, f)),
            (state, _) => match state.generic() {
                Some(heap) => Ok(heap.update(key_group, hash, key, now_ms, f)),
                None => unreachable!("only an integer-key state moves to the generic table"),
            },
        }
    }

    /// As [`KeyedState::update`], returning `then(stored value)` instead of a copy of the value:
    /// on heap and disk the value is stored without a copy (a window's list of windows).
    /// Errors: as [`KeyedState::update`].
    pub fn update_then<R>(
        &mut self,
        key_group: u32,
        hash: u64,
        key: &Key,
        now_ms: u64,
        f: impl FnOnce(Option<&V>) -> V,
        then: impl FnOnce(&V) -> R,
    ) -> Result<R, DiskStateError> {
        match self {
            KeyedState::Heap(s) => Ok(s.update_then(key_group, hash, key, now_ms, f, then)),
            KeyedState::Disk(s) => s.update_then(key_group, hash, key, now_ms, f, then),
            other => other.update(key_group, hash, key, now_ms, f).map(|value| then(&value)),
        }
    }

    /// [`KeyedState::update`] of the integer key `key` (`keyBy`'s integer key column).
    #[inline]
    pub fn update_int(
        &mut self,
        key_group: u32,
        hash: u64,
        key: i64,
        now_ms: u64,
        f: impl FnOnce(Option<&V>) -> V,
    ) -> Result<V, DiskStateError> {
        match self {
            KeyedState::HeapInt(s) => Ok(s.update(key_group, hash, key, f)),
            other => other.update(key_group, hash, &Key::Int(key), now_ms, f),
        }
    }

    /// The integer-key table, while the state is on it (a heap step without `ttl` whose keys
    /// so far are all integers): for a batch's loop over integer keys
    /// ([`IntKeyedState::update_each`]) with the backend chosen once.
    #[inline]
    pub fn int_table(&mut self) -> Option<&mut IntKeyedState<V>> {
        match self {
            KeyedState::HeapInt(s) => Some(s),
            _ => None,
        }
    }

    /// Removes `key`; whether an entry was held. Errors: the disk store fails.
    pub fn remove(&mut self, key_group: u32, hash: u64, key: &Key) -> Result<bool, DiskStateError> {
        match self {
            KeyedState::Heap(s) => Ok(s.remove(key_group, hash, key)),
            KeyedState::HeapInt(s) => Ok(matches!(key, Key::Int(k) if s.remove(key_group, hash, *k))),
            KeyedState::Disk(s) => s.remove(key_group, hash, key),
            KeyedState::DiskOpening(s) => Ok(s.memory_mut().remove(key_group, hash, key)),
        }
    }

    /// The live entries of `key_group` at `now_ms`, values cloned, in no particular order. For
    /// an operator that visits a key group's entries (a window firing): O(the group's keys) on
    /// heap, a scan of the group's key range on disk overlaid with the write-back cache
    /// ([`DiskKeyedState::entries_in_group`]). Errors: the disk store fails.
    pub fn entries_in_group(&self, key_group: u32, now_ms: u64) -> Result<Vec<(Key, V)>, DiskStateError> {
        match self {
            KeyedState::Heap(s) => Ok(s.entries_in_group(key_group, now_ms)),
            KeyedState::HeapInt(s) => Ok(s
                .entries()
                .filter(|(group, _, _)| *group == key_group)
                .map(|(_, key, value)| (Key::Int(key), value.clone()))
                .collect()),
            KeyedState::Disk(s) => s.entries_in_group(key_group, now_ms),
            KeyedState::DiskOpening(s) => Ok(s.memory().entries_in_group(key_group, now_ms)),
        }
    }

    /// Housekeeping between batches (snapshot release, incremental TTL cleanup). Errors: the
    /// disk store fails.
    pub fn maintain(&mut self, now_ms: u64, records: usize) -> Result<(), DiskStateError> {
        match self {
            KeyedState::Heap(s) => {
                s.maintain(now_ms, records);
                Ok(())
            }
            // No TTL, and a snapshot's tables are released when the encoder drops them.
            KeyedState::HeapInt(_) => Ok(()),
            KeyedState::Disk(s) => s.maintain(now_ms, records),
            // The handover, once the store's creation has ended (checked without waiting).
            KeyedState::DiskOpening(s) => {
                s.memory_mut().maintain(now_ms, records);
                match s.is_store_ready() {
                    true => self.finish_opening(now_ms),
                    false => Ok(()),
                }
            }
        }
    }

    /// Errors when the disk store's write-back failed (see
    /// [`DiskKeyedState::check_write_back`]); nothing to check on the heap, or while the store
    /// is being created (no write-back yet).
    pub fn check_write_back(&mut self) -> Result<(), DiskStateError> {
        match self {
            KeyedState::Disk(s) => s.check_write_back(),
            KeyedState::Heap(_) | KeyedState::HeapInt(_) | KeyedState::DiskOpening(_) => Ok(()),
        }
    }

    /// Starts recording changed keys for incremental checkpoints (see
    /// [`HeapKeyedState::track_changes`], [`DiskKeyedState::track_changes`]).
    pub fn track_changes(&mut self) {
        match self {
            KeyedState::Heap(s) => s.track_changes(),
            // Incremental checkpoints track changed keys in the generic table.
            KeyedState::HeapInt(_) => {
                if let Some(heap) = self.generic() {
                    heap.track_changes();
                }
            }
            KeyedState::Disk(s) => s.track_changes(),
            // Refused at the handover: callers finish the opening first.
            KeyedState::DiskOpening(s) => s.track_changes(),
        }
    }

    /// What native checkpoints need (the disk backend only, nothing otherwise): see
    /// [`DiskKeyedState::track_for_native_checkpoints`].
    pub fn track_for_native_checkpoints(&mut self) {
        if let KeyedState::Disk(s) = self {
            s.track_for_native_checkpoints();
        }
    }

    /// The keys changed since the previous call; empty unless changes are tracked.
    pub fn take_changes(&mut self) -> ChangedKeys {
        match self {
            KeyedState::Heap(s) => s.take_changes(),
            // Changes are never tracked here (tracking moves the state to the generic table).
            KeyedState::HeapInt(_) => ChangedKeys::default(),
            KeyedState::Disk(s) => s.take_changes(),
            KeyedState::DiskOpening(s) => s.memory_mut().take_changes(),
        }
    }

    /// Whether the state is on the disk backend with its write-back cache on (what a native
    /// checkpoint needs of the backend, `state/disk_native.rs`).
    pub fn disk_with_write_back_cache(&self) -> (bool, bool) {
        match self {
            KeyedState::Heap(_) | KeyedState::HeapInt(_) => (false, false),
            KeyedState::Disk(s) => (true, s.write_back_cache_on()),
            KeyedState::DiskOpening(_) => (true, false),
        }
    }

    /// The synchronous part of a native checkpoint `checkpoint_id` (the disk backend only,
    /// `None` otherwise): see [`DiskKeyedState::native_snapshot`].
    pub fn native_snapshot(&mut self, checkpoint_id: u64) -> Option<crate::state::disk_native::NativeSnapshot> {
        match self {
            KeyedState::Disk(s) => Some(s.native_snapshot(checkpoint_id)),
            _ => None,
        }
    }

    /// The synchronous part of a snapshot at `now_ms`: O(key groups) on heap, O(1) on disk.
    pub fn snapshot(&mut self, now_ms: u64) -> KeyedSnapshot<V> {
        match self {
            KeyedState::Heap(s) => KeyedSnapshot::Heap(s.snapshot(now_ms)),
            KeyedState::HeapInt(s) => KeyedSnapshot::HeapInt(s.snapshot()),
            KeyedState::Disk(s) => KeyedSnapshot::Disk(s.snapshot(now_ms)),
            // Memory's tables, the same blocks (callers finish the opening first).
            KeyedState::DiskOpening(s) => KeyedSnapshot::Heap(s.memory_mut().snapshot(now_ms)),
        }
    }
}

impl<V: Serialize + Send + Sync> KeyedSnapshot<V> {
    /// One block per key group with live entries, in the same format on both backends.
    /// Errors: encoding (heap) or reading the store (disk) failed.
    pub fn encode(self) -> Result<Vec<KeyGroupBlock>, String> {
        match self {
            KeyedSnapshot::Heap(s) => s.encode().map_err(|e| e.to_string()),
            KeyedSnapshot::HeapInt(s) => s.encode(),
            KeyedSnapshot::Disk(s) => s.encode().map_err(|e| e.to_string()),
        }
    }

    /// [`KeyedSnapshot::encode`] as a stream: each block is handed to `emit` in key-group
    /// order as soon as it is encoded. Errors: encoding or reading the store failed (as a
    /// `String`), or `emit`'s error.
    pub fn encode_each<E: From<String>>(self, emit: &mut dyn FnMut(KeyGroupBlock) -> Result<(), E>) -> Result<(), E> {
        match self {
            KeyedSnapshot::Heap(s) => s.encode_each(&mut |block| emit(block).map_err(Failure::Emit)),
            KeyedSnapshot::HeapInt(s) => s.encode_each(&mut |block| emit(block).map_err(Failure::Emit)),
            KeyedSnapshot::Disk(s) => s.encode_each(&mut |block| emit(block).map_err(Failure::Emit)),
        }
        .map_err(|f| match f {
            Failure::Emit(e) => e,
            Failure::Encode(e) => E::from(e),
        })
    }

    /// One delta block per key group in `changes`, in the same format on both backends.
    /// Errors: encoding (heap) or reading the store (disk) failed.
    pub fn encode_delta(self, changes: &ChangedKeys) -> Result<Vec<KeyGroupBlock>, String> {
        match self {
            KeyedSnapshot::Heap(s) => s.encode_delta(changes).map_err(|e| e.to_string()),
            // Never tracked changes (tracking moves the state to the generic table): no
            // change, no delta block.
            KeyedSnapshot::HeapInt(_) if changes.groups.is_empty() => Ok(vec![]),
            KeyedSnapshot::HeapInt(_) => {
                Err("an integer-key state snapshot has no changed keys to encode as a delta".into())
            }
            KeyedSnapshot::Disk(s) => s.encode_delta(changes).map_err(|e| e.to_string()),
        }
    }
}

/// An error of [`KeyedSnapshot::encode_each`]: the encoder's (as text) or the consumer's.
enum Failure<E> {
    Encode(String),
    Emit(E),
}

impl<E> From<String> for Failure<E> {
    fn from(e: String) -> Self {
        Failure::Encode(e)
    }
}

impl<E> From<postcard::Error> for Failure<E> {
    fn from(e: postcard::Error) -> Self {
        Failure::Encode(e.to_string())
    }
}

impl<E> From<DiskStateError> for Failure<E> {
    fn from(e: DiskStateError) -> Self {
        Failure::Encode(e.to_string())
    }
}
