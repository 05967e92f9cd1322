//! Disk keyed state on an embedded LSM store (Flink's RocksDB state backend; here `fjall`, a
//! pure-Rust LSM tree with MVCC snapshots).
//!
//! [`DiskKeyedState`] keeps one subtask's keyed state in a store of its own under a local
//! scratch directory: state larger than memory stays on disk, and memory is bounded by the
//! store's block cache and write buffers ([`DiskStateOptions`]), not by the key count. The
//! directory is scratch: it is recreated empty on every start and removed when the state is
//! dropped; the checkpoint is the source of truth.
//!
//! **Layout.** Store key: the key group as a big-endian `u32`, the key's stable hash
//! ([`key_hash`]) as a big-endian `u64`, then the postcard encoding of the [`Key`]; so one key
//! group's entries are one contiguous key range, and a snapshot or incremental cleanup walks
//! the groups in order. Store value: the last write as a little-endian `u64` (ms since the Unix
//! epoch), then the postcard encoding of the value.
//!
//! **Snapshots** are the store's MVCC read view: [`DiskKeyedState::snapshot`] is O(1) on the
//! task thread; [`DiskSnapshot::encode`] iterates the view off the task thread and writes the
//! same [`KeyGroupBlock`]s as the heap backend (byte for byte the same block format, so a
//! savepoint is backend-independent), splicing the stored postcard bytes without decoding them.
//!
//! **Incremental checkpoints** (`checkpointing.incremental: true`): with
//! [`DiskKeyedState::track_changes`] on, every write and removal records its key (one hash-set
//! insert; the heap backend records a write by its hash only, `state/changed_keys.rs` says
//! why not here); [`DiskSnapshot::encode_delta`] reads those keys from the read view (point
//! lookups, O(changed keys)) and writes the heap backend's delta blocks
//! (`keyed_block` version 3), so both backends share the chains, the shared-file retention and
//! the restore code of `state/incremental.rs`. Why deltas of changed keys rather than the
//! store's own immutable files (Flink's RocksDB way): docs/runtime/state-backends.md.

use crate::record::Key;
use crate::state::changed_keys::ChangedKeys;
use crate::state::disk_cache::{CachedEntry, WriteBackCache};
use crate::state::key_group::{KeyGroupRange, key_hash};
use crate::state::keyed_block;
use crate::state::parallel;

pub use crate::state::disk_snapshot::DiskSnapshot;
use crate::state::disk_store;
use crate::state::snapshot::KeyGroupBlock;
use crate::state::ttl::{StateTtl, expired};
use fjall::{Database, Keyspace};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

/// Entries examined by incremental TTL cleanup per record processed (as the heap backend,
/// Flink's default of 5 entries per state access).
pub const CLEANUP_ENTRIES_PER_RECORD: usize = crate::state::heap::CLEANUP_ENTRIES_PER_RECORD;

/// Bytes of a store key before the encoded [`Key`]: key group (4) and hash (8).
pub(crate) const KEY_PREFIX_LEN: usize = 12;
/// Bytes of a store value before the encoded value: the write time.
pub(crate) const VALUE_PREFIX_LEN: usize = 8;

/// Background threads of each store: fjall's worker pool runs memtable rotation, flushes and
/// compaction from one queue, and with more than one thread its worker 0 never compacts (it
/// keeps rotating and flushing). With a single thread a rotation waits behind a compaction,
/// and compactions of a growing store take longer and longer: the active memtable then grows
/// past its limit without bound (measured: 88 MiB of write buffer at 1M keys with a 16 MiB
/// limit, and peak RSS proportional to the store, 3.7 GiB at 2.3 GB of store in a 50M-key run;
/// docs/runtime/state-backends.md). Two threads keep the write buffer at its limit: the
/// active memtable plus at most four sealed ones (fjall halts writes at four until a flush).
pub const STORE_WORKER_THREADS: usize = 2;

/// A disk state failure: the store's directory and what failed. Never caused by user input;
/// the subtask fails and restarts from its checkpoint.
#[derive(Clone, Debug, thiserror::Error)]
#[error("disk state backend at {dir}: {problem}")]
pub struct DiskStateError {
    /// The store's local directory.
    pub dir: PathBuf,
    /// What failed (an I/O error of the store, an entry that does not decode).
    pub problem: String,
}

/// Memory limits of one subtask's store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiskStateOptions {
    /// Block cache, bytes.
    pub cache_bytes: u64,
    /// In-memory write buffer (memtable) before it is flushed to a file, bytes (at least
    /// 1 MiB; the store may hold a few sealed ones while they are being flushed).
    pub write_buffer_bytes: u64,
    /// Write-back cache of hot entries in front of the store, bytes (`state/disk_cache.rs`;
    /// 0: off, every access goes to the store). Its dirty entries are written to the store
    /// in the synchronous part of each snapshot, so this also bounds that part's work.
    pub write_cache_bytes: u64,
}

/// The default [`DiskStateOptions::write_cache_bytes`]: 16 MiB, about 240,000 entries of
/// short keys (`state/disk_cache.rs`, `entry_bytes`).
pub const DEFAULT_WRITE_CACHE_BYTES: u64 = 16 << 20;

impl Default for DiskStateOptions {
    /// 32 MiB of block cache, 16 MiB of write buffer and 16 MiB of write-back cache per
    /// subtask.
    fn default() -> DiskStateOptions {
        DiskStateOptions {
            cache_bytes: 32 << 20,
            write_buffer_bytes: 16 << 20,
            write_cache_bytes: DEFAULT_WRITE_CACHE_BYTES,
        }
    }
}

/// The store key of `key` (whose [`key_hash`] is `hash`) in `key_group`: see the module doc.
pub fn store_key(key_group: u32, hash: u64, key: &Key) -> Vec<u8> {
    let mut out = Vec::with_capacity(KEY_PREFIX_LEN + 16);
    out.extend_from_slice(&key_group.to_be_bytes());
    out.extend_from_slice(&hash.to_be_bytes());
    postcard::to_extend(key, out).expect("a key encodes")
}

/// The key group of a store key (its first 4 bytes, big-endian), if it has them.
pub fn store_key_group(store_key: &[u8]) -> Option<u32> {
    Some(u32::from_be_bytes(store_key.get(..4)?.try_into().ok()?))
}

/// Keyed state of one subtask in an LSM store under a local scratch directory, with an
/// optional TTL. The same operations as [`HeapKeyedState`](crate::state::heap::HeapKeyedState).
pub struct DiskKeyedState<V> {
    range: KeyGroupRange,
    ttl: Option<StateTtl>,
    dir: PathBuf,
    db: Database,
    keyspace: Keyspace,
    /// Entries held (expired ones included until cleaned up).
    len: usize,
    /// Store key where incremental TTL cleanup continues (empty: from the start).
    cleanup_cursor: Vec<u8>,
    /// Entries incremental cleanup may examine now.
    cleanup_credit: usize,
    /// Keys written or removed since the last [`DiskKeyedState::take_changes`], when changes
    /// are tracked (incremental checkpoints); `None` when they are not.
    changed: Option<ChangedKeys>,
    /// Keys in `changed`.
    changed_len: usize,
    /// Most keys `changed` holds before it overflows ([`changed_key_limit`]).
    changed_limit: usize,
    /// Most block bytes a build of absent key groups writes through the write buffer instead
    /// of a bulk ingestion ([`batch_build_bytes`]).
    batch_build_bytes: usize,
    /// Hot entries in front of the store; the store holds every entry not cached dirty.
    cache: WriteBackCache<V>,
    _value: PhantomData<fn() -> V>,
}

/// Memory one changed key takes in a changed-key set, bytes (an estimate: the key and its
/// hash in a hash table, 40 bytes, plus the table's spare room).
pub const CHANGED_KEY_BYTES: u64 = 64;

/// Most keys a subtask's changed-key set holds before it overflows (and the next incremental
/// checkpoint writes a full base instead of a delta): as many as fit in the store's write
/// buffer size ([`DiskStateOptions::write_buffer_bytes`] / [`CHANGED_KEY_BYTES`]; 262,144
/// keys at the default 16 MiB), at least 1,024. So the set's memory is bounded by the
/// configuration, not by the key count: with many keys changing between checkpoints a delta
/// would be nearly as large as a base anyway.
pub fn changed_key_limit(options: &DiskStateOptions) -> usize {
    (options.write_buffer_bytes / CHANGED_KEY_BYTES).max(1024) as usize
}

/// Key groups each decoding thread of a restore may decode ahead of the store's writes
/// ([`DiskKeyedState::restore_absent_groups`]).
pub const DECODED_GROUPS_PER_WORKER: usize = 4;

/// Most bytes of restored blocks that [`DiskKeyedState::restore_absent_groups`] writes through
/// the store's write buffer (write batches: no `fsync`, no lookup) rather than by a bulk
/// ingestion, which costs about 11 `fsync`s whatever its size (the table file, its directory,
/// a new version twice; 1–30 ms each on a shared disk): a quarter of the write buffer
/// ([`DiskStateOptions::write_buffer_bytes`]; 4 MiB at the default 16 MiB). So the key group
/// a lazy restore builds for the first record (1/128 of a subtask's state at the default
/// maxParallelism) waits for no `fsync`, while the rest of the state, built in larger sets,
/// still goes in as sorted tables (no memtable, no flush, no compaction of its own writes).
pub fn batch_build_bytes(options: &DiskStateOptions) -> usize {
    (options.write_buffer_bytes / 4) as usize
}

impl<V: Clone + Send + Sync + Serialize + DeserializeOwned + 'static> DiskKeyedState<V> {
    /// Empty state for `range` in a new store at `dir` (anything already there is deleted
    /// first: scratch from an earlier run), expiring entries after `ttl` if set. The store
    /// [`disk_store::create_early`] started for `dir` with the same `options` is taken (waiting
    /// for the rest of its creation) instead of creating one now. Errors: the directory cannot
    /// be created or the store cannot open there.
    pub fn open(
        dir: &Path,
        range: KeyGroupRange,
        ttl: Option<StateTtl>,
        options: DiskStateOptions,
    ) -> Result<DiskKeyedState<V>, DiskStateError> {
        let disk_store::Store { db, keyspace } = disk_store::take_or_create(dir, options)?;
        Ok(DiskKeyedState {
            range,
            ttl,
            dir: dir.to_path_buf(),
            db,
            keyspace,
            len: 0,
            cleanup_cursor: Vec::new(),
            cleanup_credit: 0,
            changed: None,
            changed_len: 0,
            changed_limit: changed_key_limit(&options),
            batch_build_bytes: batch_build_bytes(&options),
            cache: WriteBackCache::new(options.write_cache_bytes),
            _value: PhantomData,
        })
    }

    fn err(&self, problem: impl std::fmt::Display) -> DiskStateError {
        DiskStateError {
            dir: self.dir.clone(),
            problem: problem.to_string(),
        }
    }

    /// The key groups held.
    pub fn range(&self) -> KeyGroupRange {
        self.range
    }

    /// The store's local directory.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Bytes of the store's write buffers now (active and sealed memtables, key and value
    /// bytes), for tests of the memory bound.
    #[cfg(test)]
    pub(crate) fn write_buffer_bytes(&self) -> u64 {
        self.db.write_buffer_size()
    }

    /// Entries held, expired ones included until cleanup removes them.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Records `key` as changed (by key: see `state/changed_keys.rs`) when changes are
    /// tracked; past [`changed_key_limit`] keys the set overflows (its keys are dropped, the
    /// next incremental checkpoint is a base).
    #[inline]
    fn record_change(&mut self, key_group: u32, hash: u64, key: &Key) {
        if let Some(changed) = &mut self.changed
            && changed.record_key(key_group, hash, key)
        {
            self.changed_len += 1;
            if self.changed_len > self.changed_limit {
                changed.overflow();
            }
        }
    }

    /// Starts recording the keys written or removed (by key, one hash-set insert per write;
    /// the heap backend records writes by hash, `state/changed_keys.rs` says why not here), memory
    /// O(keys changed between two snapshots), at most [`changed_key_limit`] keys: past it the
    /// set overflows and the next incremental checkpoint is a full base), for incremental
    /// checkpoints;
    /// [`DiskKeyedState::take_changes`] hands them over. Removals by TTL cleanup are not
    /// recorded (as on the heap backend): an expired entry left in a chain's base is dropped by
    /// every restore, which happens later than its expiry.
    pub fn track_changes(&mut self) {
        self.changed.get_or_insert_with(ChangedKeys::default);
    }

    /// The keys written or removed since the previous call (or since tracking started), and
    /// starts a new record; empty unless [`DiskKeyedState::track_changes`] was called. O(1).
    pub fn take_changes(&mut self) -> ChangedKeys {
        self.changed_len = 0;
        match &mut self.changed {
            Some(changed) => std::mem::take(changed),
            None => ChangedKeys::default(),
        }
    }

    /// Loads `blocks` (of any block version) into the store; blocks of key groups outside the
    /// range are skipped, entries expired at `now_ms` are dropped, entries of a block without
    /// timestamps count as written at `now_ms`. Blocks of one key group apply in the order
    /// given (a chain's base, then its deltas). Into an empty store (every start: the store is
    /// scratch) as [`DiskKeyedState::restore_absent_groups`] (decoded on up to
    /// [`parallel::max_workers`] threads; small sets by write batches, larger ones by bulk
    /// ingestion: sorted tables written directly, no journal or memtable, fjall's
    /// `start_ingestion`); into a store that holds entries, by write batches with lookups.
    /// Errors: the key group and why its block does not decode; a store write failure.
    pub fn restore(&mut self, blocks: Vec<KeyGroupBlock>, now_ms: u64) -> Result<(), String> {
        if self.len > 0 {
            return self.restore_by_batches(blocks, now_ms);
        }
        self.restore_absent_groups(blocks, now_ms)
    }

    /// [`DiskKeyedState::restore`] of the blocks of key groups that hold no entry in the store
    /// (a lazy restore's pending groups, `state/pending.rs`), whatever the store holds in other
    /// key groups: no key of theirs is in the store, so nothing is looked up or overwritten.
    /// Up to [`batch_build_bytes`] of blocks go in by write batches (through the write buffer:
    /// no `fsync` before the first record); more by one bulk ingestion (the ingested tables get
    /// a sequence number above every write so far, fjall's `Ingestion::finish`). Either way
    /// the key groups are decoded on up to [`parallel::max_workers`] threads, a few at a time.
    /// Errors: as [`DiskKeyedState::restore`].
    pub fn restore_absent_groups(&mut self, blocks: Vec<KeyGroupBlock>, now_ms: u64) -> Result<(), String> {
        let mut by_group: std::collections::BTreeMap<u32, Vec<KeyGroupBlock>> = Default::default();
        let mut bytes = 0usize;
        for block in blocks {
            if self.range.contains(block.key_group) {
                bytes += block.data.len();
                by_group.entry(block.key_group).or_default().push(block);
            }
        }
        if by_group.is_empty() {
            return Ok(());
        }
        let groups: Vec<(u32, Vec<KeyGroupBlock>)> = by_group.into_iter().collect();
        if bytes <= self.batch_build_bytes {
            let mut batch = self.db.batch();
            let mut held = 0usize;
            self.decode_groups(groups, now_ms, &mut |key, value| {
                batch.insert(&self.keyspace, key, value);
                held += 1;
                Ok(())
            })?;
            batch.commit().map_err(|e| self.err(e).to_string())?;
            self.len += held;
            return Ok(());
        }
        let mut ingestion = self.keyspace.start_ingestion().map_err(|e| self.err(e).to_string())?;
        let mut held = 0usize;
        let err = |e: fjall::Error| self.err(e).to_string();
        self.decode_groups(groups, now_ms, &mut |key, value| {
            ingestion.write(key, value).map_err(err)?;
            held += 1;
            Ok(())
        })?;
        ingestion.finish().map_err(|e| self.err(e).to_string())?;
        self.len += held;
        Ok(())
    }

    /// Hands the live entries of `groups` (each group's blocks applied in order, see
    /// [`sorted_group_entries`]) to `write` on the calling thread, in ascending store-key
    /// order. The groups are decoded on up to [`parallel::max_workers`] threads while `write`
    /// takes the groups decoded before (a pipeline, [`parallel::for_each_in_order`]: the store
    /// writes its tables on one core while the others decode), at most
    /// [`DECODED_GROUPS_PER_WORKER`] groups per worker ahead of it: memory holds a few key
    /// groups' entries, not the whole state. Errors: a block that does not decode (named by
    /// key group), `write`'s.
    fn decode_groups(
        &self,
        groups: Vec<(u32, Vec<KeyGroupBlock>)>,
        now_ms: u64,
        write: &mut dyn FnMut(Vec<u8>, Vec<u8>) -> Result<(), String>,
    ) -> Result<(), String> {
        let workers = parallel::max_workers();
        let ttl = self.ttl;
        parallel::for_each_in_order(
            groups,
            workers,
            workers * DECODED_GROUPS_PER_WORKER,
            |(key_group, blocks)| sorted_group_entries::<V>(key_group, blocks, ttl, now_ms),
            &mut |entries| {
                for (key, value) in entries? {
                    write(key, value)?;
                }
                Ok(())
            },
        )
        .map(|_| ())
    }

    /// [`DiskKeyedState::restore`] into a store that may hold entries: one write batch per
    /// block, a delta's keys looked up to keep the count.
    fn restore_by_batches(&mut self, blocks: Vec<KeyGroupBlock>, now_ms: u64) -> Result<(), String> {
        for block in blocks {
            if !self.range.contains(block.key_group) {
                continue;
            }
            // A delta block (an incremental heap checkpoint) applies over the blocks restored
            // before it: its keys may be held already, and a `None` value removes one.
            let delta = keyed_block::is_delta(&block.data);
            let entries = keyed_block::decode_with_removals::<V>(&block.data)
                .map_err(|e| format!("key group {} does not decode: {e}", block.key_group))?;
            let mut batch = self.db.batch();
            let mut added = 0usize;
            let mut removed = 0usize;
            for (key, value, written_ms) in entries {
                let written_ms = written_ms.unwrap_or(now_ms);
                let live = value.filter(|_| !expired(self.ttl, written_ms, now_ms));
                let key = store_key(block.key_group, key_hash(&key), &key);
                let held =
                    (delta || self.len > 0) && self.keyspace.contains_key(&key).map_err(|e| self.err(e).to_string())?;
                match live {
                    Some(value) => {
                        batch.insert(&self.keyspace, key, encode_value(&value, written_ms));
                        added += usize::from(!held);
                    }
                    None if held => {
                        batch.remove(&self.keyspace, key);
                        removed += 1;
                    }
                    None => {}
                }
            }
            batch.commit().map_err(|e| self.err(e).to_string())?;
            self.len = self.len + added - removed;
        }
        Ok(())
    }

    fn read(&self, store_key: &[u8]) -> Result<Option<(V, u64)>, DiskStateError> {
        match self.keyspace.get(store_key).map_err(|e| self.err(e))? {
            None => Ok(None),
            Some(bytes) => decode_value::<V>(&bytes).map(Some).map_err(|e| self.err(e)),
        }
    }

    /// The live value of `key` (whose [`key_hash`] is `hash`) in `key_group`, if any and not
    /// expired at `now_ms`: from the write-back cache when it holds the key, else from the
    /// store (not added to the cache: a read takes `&self`). Errors: the store fails to read.
    pub fn get(&self, key_group: u32, hash: u64, key: &Key, now_ms: u64) -> Result<Option<V>, DiskStateError> {
        if let Some(cached) = self.cache.peek(hash, key) {
            return Ok(cached
                .value
                .as_ref()
                .filter(|_| !expired(self.ttl, cached.written_ms, now_ms))
                .cloned());
        }
        let found = self.read(&store_key(key_group, hash, key))?;
        Ok(found
            .filter(|(_, written)| !expired(self.ttl, *written, now_ms))
            .map(|(v, _)| v))
    }

    /// Read-modify-write of `key` (whose [`key_hash`] is `hash`) in `key_group` at `now_ms`:
    /// stores `f(current live value)` written at `now_ms` and returns it. An expired value is
    /// passed as `None` (the key starts over). The new value goes into the write-back cache
    /// (the store is read only when the cache does not hold the key; an entry evicted to make
    /// room is written to the store if it changed). Errors: the store fails to read or write.
    pub fn update(
        &mut self,
        key_group: u32,
        hash: u64,
        key: &Key,
        now_ms: u64,
        f: impl FnOnce(Option<&V>) -> V,
    ) -> Result<V, DiskStateError> {
        self.record_change(key_group, hash, key);
        let ttl = self.ttl;
        if let Some((cached, dirty)) = self.cache.find_for_write(hash, key) {
            let held = cached.value.is_some();
            let live = cached
                .value
                .as_ref()
                .filter(|_| !expired(ttl, cached.written_ms, now_ms));
            let value = f(live);
            WriteBackCache::write(dirty, cached, Some(value.clone()), now_ms);
            if !held {
                self.len += 1;
            }
            return Ok(value);
        }
        let found = self.read(&store_key(key_group, hash, key))?;
        if found.is_none() {
            self.len += 1;
        }
        let live = found.filter(|(_, written)| !expired(ttl, *written, now_ms));
        let value = f(live.as_ref().map(|(v, _)| v));
        let entry = CachedEntry::new(key.clone(), key_group, hash, Some(value.clone()), now_ms, true);
        self.cache_insert(entry)?;
        Ok(value)
    }

    /// Adds `entry` (whose key is not cached) to the write-back cache, writing the dirty
    /// entries it evicts to the store. Errors: the store fails to write.
    fn cache_insert(&mut self, entry: CachedEntry<V>) -> Result<(), DiskStateError> {
        let keyspace = &self.keyspace;
        let dir = &self.dir;
        self.cache.insert(entry, |evicted| {
            write_back(keyspace, &evicted).map_err(|e| DiskStateError {
                dir: dir.clone(),
                problem: e.to_string(),
            })
        })
    }

    /// Writes every dirty entry of the write-back cache to the store (one write batch); the
    /// entries stay cached, clean. Errors: the store fails to write (the entries stay dirty).
    fn write_back_dirty(&mut self) -> Result<(), DiskStateError> {
        if self.cache.dirty() == 0 {
            return Ok(());
        }
        let mut batch = self.db.batch();
        let keyspace = &self.keyspace;
        self.cache.each_dirty(|entry| {
            let store_key = store_key(entry.key_group, entry.hash, &entry.key);
            match &entry.value {
                Some(value) => batch.insert(keyspace, store_key, encode_value(value, entry.written_ms)),
                None => batch.remove(keyspace, store_key),
            }
            Ok::<(), DiskStateError>(())
        })?;
        batch.commit().map_err(|e| self.err(e))?;
        self.cache.mark_clean();
        Ok(())
    }

    /// Writes the write-back cache's dirty entries to the store and empties the cache, so the
    /// store alone holds the state: before anything writes to the store directly (a restore
    /// into a store that holds entries). Errors: the store fails to write.
    pub fn write_back_and_clear_cache(&mut self) -> Result<(), DiskStateError> {
        let dirty = self.cache.drain_dirty();
        if dirty.is_empty() {
            return Ok(());
        }
        let mut batch = self.db.batch();
        for entry in &dirty {
            let store_key = store_key(entry.key_group, entry.hash, &entry.key);
            match &entry.value {
                Some(value) => batch.insert(&self.keyspace, store_key, encode_value(value, entry.written_ms)),
                None => batch.remove(&self.keyspace, store_key),
            }
        }
        batch.commit().map_err(|e| self.err(e))
    }

    /// Entries in the write-back cache and how many of them are dirty, for tests.
    #[cfg(test)]
    pub(crate) fn cached_entries(&self) -> (usize, usize, u64) {
        (self.cache.len(), self.cache.dirty(), self.cache.bytes())
    }

    /// Removes `key` from `key_group`. Returns whether an entry was held. Errors: the store
    /// fails to read or write.
    pub fn remove(&mut self, key_group: u32, hash: u64, key: &Key) -> Result<bool, DiskStateError> {
        self.record_change(key_group, hash, key);
        if let Some((cached, dirty)) = self.cache.find_for_write(hash, key) {
            let held = cached.value.is_some();
            if held {
                let written_ms = cached.written_ms;
                WriteBackCache::write(dirty, cached, None, written_ms);
                self.len = self.len.saturating_sub(1);
            }
            return Ok(held);
        }
        let store_key = store_key(key_group, hash, key);
        let held = self.keyspace.contains_key(&store_key).map_err(|e| self.err(e))?;
        if held {
            self.keyspace.remove(store_key).map_err(|e| self.err(e))?;
            self.len = self.len.saturating_sub(1);
        }
        Ok(held)
    }

    /// The cached entry of the key of `store_key`, if the write-back cache holds it: its key,
    /// hash and whether it holds a value (`None`: not cached).
    fn cached_store_key(&self, store_key: &[u8]) -> Option<(Key, u64, Option<u64>)> {
        if self.cache.len() == 0 || store_key.len() < KEY_PREFIX_LEN {
            return None;
        }
        let hash = u64::from_be_bytes(store_key[4..KEY_PREFIX_LEN].try_into().ok()?);
        let key = postcard::from_bytes::<Key>(&store_key[KEY_PREFIX_LEN..]).ok()?;
        let cached = self.cache.peek(hash, &key)?;
        let written = cached.value.as_ref().map(|_| cached.written_ms);
        Some((key, hash, written))
    }

    /// Housekeeping between batches, at `now_ms`, after `records` records: with a TTL,
    /// incremental cleanup examines about [`CLEANUP_ENTRIES_PER_RECORD`] entries per record,
    /// continuing in key order where the last call stopped and wrapping around, and removes
    /// the expired ones (at most one pass over the store per call). Errors: the store fails.
    pub fn maintain(&mut self, now_ms: u64, records: usize) -> Result<(), DiskStateError> {
        let Some(ttl) = self.ttl else { return Ok(()) };
        let budget = self
            .cleanup_credit
            .saturating_add(records.saturating_mul(CLEANUP_ENTRIES_PER_RECORD))
            .min(self.len.max(1));
        self.cleanup_credit = 0;
        let mut examined = 0;
        let mut expired_keys = Vec::new();
        let mut wrapped = self.cleanup_cursor.is_empty();
        let mut next_cursor = None;
        while examined < budget {
            let mut reached_end = true;
            for guard in self.keyspace.range(self.cleanup_cursor.as_slice()..) {
                let (key, value) = guard.into_inner().map_err(|e| self.err(e))?;
                examined += 1;
                let written = value_written_ms(&value).ok_or_else(|| self.err("an entry without its write time"))?;
                if ttl.is_expired(written, now_ms) {
                    // A cached key: its cached entry decides. Expired too: dropped from the
                    // cache and the store; live, or removed (the write-back removes it from
                    // the store): left alone.
                    match self.cached_store_key(&key) {
                        None => expired_keys.push((key.to_vec(), None)),
                        Some((cached_key, hash, Some(cached_written))) if ttl.is_expired(cached_written, now_ms) => {
                            expired_keys.push((key.to_vec(), Some((hash, cached_key))))
                        }
                        Some(_) => {}
                    }
                }
                if examined >= budget {
                    let mut after = key.to_vec();
                    after.push(0);
                    next_cursor = Some(after);
                    reached_end = false;
                    break;
                }
            }
            if !reached_end {
                break;
            }
            // The end of the store: start over from the first key, once per call.
            self.cleanup_cursor.clear();
            if wrapped {
                break;
            }
            wrapped = true;
        }
        if let Some(cursor) = next_cursor {
            self.cleanup_cursor = cursor;
        }
        for (key, cached) in expired_keys {
            if let Some((hash, cached_key)) = cached {
                self.cache.remove(hash, &cached_key);
            }
            self.keyspace.remove(key).map_err(|e| self.err(e))?;
            self.len = self.len.saturating_sub(1);
        }
        Ok(())
    }

    /// The synchronous part of a snapshot at `now_ms`: the write-back cache's dirty entries
    /// written to the store (one write batch, O(dirty entries), at most
    /// [`DiskStateOptions::write_cache_bytes`] of them), then the store's MVCC read view
    /// (O(1), no entry read). Encode it with [`DiskSnapshot::encode`] off the task thread.
    /// Should the store fail to take the dirty entries, the snapshot carries the error and
    /// fails to encode (the state is intact: the entries stay dirty in the cache).
    pub fn snapshot(&mut self, now_ms: u64) -> DiskSnapshot {
        let write_back_error = self.write_back_dirty().err();
        DiskSnapshot {
            write_back_error,
            view: self.db.snapshot(),
            keyspace: self.keyspace.clone(),
            dir: self.dir.clone(),
            ttl: self.ttl,
            now_ms,
            range: self.range,
        }
    }
}

/// A store key and its store value (see the module doc).
type StoreEntry = (Vec<u8>, Vec<u8>);

/// One key group's live entries after applying its `blocks` in order, as `(store key, store
/// value)` in ascending store-key order (what bulk ingestion takes). A single full block is
/// sorted in place; a chain (a base and deltas) is applied in a sorted map. Errors: the key
/// group and why a block does not decode.
fn sorted_group_entries<V: Serialize + DeserializeOwned>(
    key_group: u32,
    blocks: Vec<KeyGroupBlock>,
    ttl: Option<StateTtl>,
    now_ms: u64,
) -> Result<Vec<StoreEntry>, String> {
    let undecodable = |e: String| format!("key group {key_group} does not decode: {e}");
    let live = |value: Option<V>, written_ms: Option<u64>| {
        let written_ms = written_ms.unwrap_or(now_ms);
        value
            .filter(|_| !expired(ttl, written_ms, now_ms))
            .map(|v| encode_value(&v, written_ms))
    };
    if let [block] = blocks.as_slice()
        && !keyed_block::is_delta(&block.data)
    {
        let mut out: Vec<StoreEntry> = Vec::with_capacity(keyed_block::entry_count(&block.data).map_err(undecodable)?);
        keyed_block::decode_each::<V>(&block.data, |key, value, written_ms| {
            if let Some(v) = live(value, written_ms) {
                out.push((store_key(key_group, key_hash(&key), &key), v));
            }
        })
        .map_err(undecodable)?;
        out.sort_unstable_by(|a, b| a.0.cmp(&b.0));
        // A full block holds each key once; should one not, the later entry wins (as the
        // batch path would do) and ingestion still sees strictly ascending keys.
        out.dedup_by(|later, earlier| {
            let same = later.0 == earlier.0;
            if same {
                std::mem::swap(later, earlier);
            }
            same
        });
        return Ok(out);
    }
    let mut applied = std::collections::BTreeMap::new();
    for block in &blocks {
        keyed_block::decode_each::<V>(&block.data, |key, value, written_ms| {
            let store_key = store_key(key_group, key_hash(&key), &key);
            match live(value, written_ms) {
                Some(v) => applied.insert(store_key, v),
                None => applied.remove(&store_key),
            };
        })
        .map_err(undecodable)?;
    }
    Ok(applied.into_iter().collect())
}

/// Writes a cached entry (evicted or written back) to the store: its value, or its removal.
fn write_back<V: Serialize>(keyspace: &Keyspace, entry: &CachedEntry<V>) -> Result<(), fjall::Error> {
    let store_key = store_key(entry.key_group, entry.hash, &entry.key);
    match &entry.value {
        Some(value) => keyspace.insert(store_key, encode_value(value, entry.written_ms)),
        None => keyspace.remove(store_key),
    }
}

/// The store value of `value` written at `written_ms`: see the module doc.
fn encode_value<V: Serialize>(value: &V, written_ms: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(VALUE_PREFIX_LEN + 16);
    out.extend_from_slice(&written_ms.to_le_bytes());
    postcard::to_extend(value, out).expect("a state value encodes")
}

pub(crate) fn value_written_ms(bytes: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(bytes.get(..VALUE_PREFIX_LEN)?.try_into().ok()?))
}

fn decode_value<V: DeserializeOwned>(bytes: &[u8]) -> Result<(V, u64), String> {
    let written = value_written_ms(bytes).ok_or("a stored value shorter than its write time")?;
    let value = postcard::from_bytes(&bytes[VALUE_PREFIX_LEN..]).map_err(|e| format!("a stored value: {e}"))?;
    Ok((value, written))
}

#[cfg(test)]
#[path = "disk_tests.rs"]
mod tests;
