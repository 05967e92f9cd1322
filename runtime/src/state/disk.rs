//! Disk keyed state on an embedded LSM store: RocksDB, as Flink's `EmbeddedRocksDBStateBackend`
//! (`state/disk_rocks.rs` holds the calls to it).
//!
//! [`DiskKeyedState`] keeps one subtask's keyed state in a store of its own under a local
//! scratch directory: state larger than memory stays on disk, and memory is bounded by the
//! store's block cache and write buffers ([`DiskStateOptions`]), not by the key count. The
//! directory is scratch: it is recreated empty on every start and removed when the state is
//! dropped; the checkpoint is the source of truth.
//!
//! **Layout.** Store key: the key group, the key's stable hash ([`key_hash`]), then the
//! postcard encoding of the [`Key`] (`state/disk_key.rs`); so one key group's entries are one
//! contiguous key range, and a snapshot or incremental cleanup walks the groups in order.
//! Store value: the last write as a little-endian `u64` (ms since the Unix epoch), then the
//! postcard encoding of the value.
//!
//! **Write-back cache.** Writes go into an in-memory generation of entries in front of the
//! store, written into the store by a background thread when the generation is full or at a
//! barrier (`state/disk_cache.rs`, `state/disk_write_back.rs`, [`DiskStateOptions::write_cache_bytes`]);
//! reads look in the generations first, so none ever sees an older value.
//!
//! **Snapshots** are the store's read view (a RocksDB snapshot) and the cache's generations pending at the
//! barrier: [`DiskKeyedState::snapshot`] is O(1) on the task thread (it freezes the current
//! generation; no store write); [`DiskSnapshot::encode`] iterates the view off the task
//! thread, merging those generations over it, and writes the
//! same [`KeyGroupBlock`]s as the heap backend (byte for byte the same block format, so a
//! savepoint is backend-independent), splicing the stored postcard bytes without decoding them.
//!
//! **Incremental checkpoints** (`checkpointing.incremental: true`): with
//! [`DiskKeyedState::track_changes`] on, every write and removal records its key (one hash-set
//! insert; the heap backend records a write by its hash only, `state/changed_keys.rs` says
//! why not here); [`DiskSnapshot::encode_delta`] reads those keys from the read view (point
//! lookups, O(changed keys); a key a generation kept after its write-back or a pending one
//! holds is read from memory) and writes the heap backend's delta blocks
//! (`keyed_block` version 3), so both backends share the chains, the shared-file retention and
//! the restore code of `state/incremental.rs`. With the write-back cache on, an incremental
//! checkpoint is instead native by default, the store's own table files (Flink's RocksDB way,
//! `state/disk_native.rs`; `WEIR_NATIVE_CHECKPOINTS=off` keeps chains; why native is the
//! default: docs/runtime/state-backends.md, "Incremental checkpoints on disk").

use crate::record::Key;
use crate::state::changed_keys::{ChangedKeys, ChangedKeysByKey};
use crate::state::disk_delta::{DeltaLimits, NATIVE_DELTAS_ENV};
use crate::state::disk_write_back::WriteBack;
use crate::state::key_group::{KeyGroupRange, key_hash};
use crate::state::keyed_block;
use crate::state::parallel;

pub(crate) use crate::state::disk_key::{
    KEY_PREFIX_LEN, StoreKeyBuf, key_group_end, key_group_prefix, store_key_group_and_hash, store_key_prefix,
};
pub use crate::state::disk_key::{store_key, store_key_group};
use crate::state::disk_restore_entries::{SortedEntries, sorted_group_entries};
use crate::state::disk_rocks::Store;
pub use crate::state::disk_snapshot::DiskSnapshot;
use crate::state::disk_store;
use crate::state::snapshot::KeyGroupBlock;
use crate::state::ttl::{StateTtl, expired};
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::marker::PhantomData;
use std::path::{Path, PathBuf};

/// Entries examined by incremental TTL cleanup per record processed (as the heap backend,
/// Flink's default of 5 entries per state access).
pub const CLEANUP_ENTRIES_PER_RECORD: usize = crate::state::heap::CLEANUP_ENTRIES_PER_RECORD;

/// Bytes of a store value before the encoded value: the write time.
pub(crate) const VALUE_PREFIX_LEN: usize = 8;

/// What to do about a disk store's I/O error `problem` that the state directory's loss or
/// permissions explain, to append to it: the store's directory is gone (`No such file or
/// directory`, and `dir_exists` is false: something removed it while the job ran), or cannot be
/// written (`Permission denied`, `Operation not permitted`, `Read-only file system`). Empty
/// otherwise (a missing file in a directory that still exists is the store's own fault).
pub fn state_dir_advice(problem: &str, dir_exists: bool) -> &'static str {
    if problem.contains("No such file or directory") && !dir_exists {
        return "; the store's directory is gone: something removed it while the job ran (a cleanup of the \
             temporary directory, `rm -rf` of the state directory); give the job a state directory of its \
             own (--state-dir or WEIR_STATE_DIR, or the pods' weir-state volume) that nothing else cleans; \
             the job restores from its latest checkpoint (`weir run --restore latest`; the operator \
             restarts on its own), and what was committed is kept";
    }
    if ["Permission denied", "Operation not permitted", "Read-only file system"]
        .iter()
        .any(|m| problem.contains(m))
    {
        return "; the store's directory cannot be written (its permissions, a read-only mount, an immutable \
             attribute): the state directory (--state-dir or WEIR_STATE_DIR, or the pods' weir-state volume) \
             must be writable by the job's user; the job restores from its latest checkpoint (`weir run \
             --restore latest`; the operator restarts on its own), and what was committed is kept";
    }
    ""
}

/// A disk state failure: the store's directory and what failed. Never caused by user input;
/// the subtask fails and restarts from its checkpoint. Displayed with advice for a full file
/// system ([`crate::storage::full_disk_advice`]) or a lost or unwritable state directory
/// ([`state_dir_advice`], which looks whether `dir` still exists).
#[derive(Clone, Debug, thiserror::Error)]
#[error(
    "disk state backend at {dir}: {problem}{full}{state_dir}",
    dir = dir.display(),
    full = crate::storage::full_disk_advice(problem),
    state_dir = state_dir_advice(problem, dir.exists())
)]
pub struct DiskStateError {
    /// The store's local directory.
    pub dir: PathBuf,
    /// What failed (an I/O error of the store, an entry that does not decode).
    pub problem: String,
}

/// How a subtask's store compresses its table files: `none` (the default: block reads and
/// checkpoint scans skip decompression), `lz4` (every level: about 40 % fewer bytes per native
/// checkpoint and on local disk at 1M keys, a decompression at every block read) or
/// `lz4-zstd` (LZ4, and ZSTD on the bottommost level, which holds most of the state). RocksDB
/// compresses each data block and names the type in it, so a checkpoint written under one
/// setting restores under any other. Measured: docs/runtime/state-backends.md, "Memory of
/// the disk backend".
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, serde::Deserialize, schemars::JsonSchema)]
pub enum StoreCompression {
    /// Uncompressed (the default): a point read that misses the block cache and a checkpoint's
    /// scan skip decompression; checkpoints and local disk hold the most bytes.
    #[default]
    #[serde(rename = "none")]
    None,
    /// LZ4 on every level, memtable flushes included: fewer bytes uploaded and on local disk,
    /// a decompression at every block read.
    #[serde(rename = "lz4")]
    Lz4,
    /// LZ4, and ZSTD on the bottommost level (most of the state, rewritten only by
    /// compactions): the fewest bytes, the most CPU in compactions.
    #[serde(rename = "lz4-zstd")]
    Lz4ZstdBottommost,
}

impl StoreCompression {
    /// The value `spec.diskState.compression` takes for this compression (`none`, `lz4`,
    /// `lz4-zstd`), for messages.
    pub fn spec_name(self) -> &'static str {
        match self {
            StoreCompression::None => "none",
            StoreCompression::Lz4 => "lz4",
            StoreCompression::Lz4ZstdBottommost => "lz4-zstd",
        }
    }
}

/// Memory limits and compression of one subtask's store.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DiskStateOptions {
    /// Block cache, bytes.
    pub cache_bytes: u64,
    /// In-memory write buffer (memtable) before it is flushed to a file, bytes (at least
    /// 1 MiB; the store may hold a few sealed ones while they are being flushed).
    pub write_buffer_bytes: u64,
    /// Write-back cache in front of the store, bytes (`state/disk_cache.rs`,
    /// `state/disk_write_back.rs`; 0: off, every access goes to the store): the entries
    /// written most recently, by generations written into the store by a background thread.
    /// Everything the cache holds (the current generation, the pending ones) counts against
    /// it; a barrier freezes the current generation (no store write on the task thread).
    /// With changes tracked (incremental checkpoints), generations written back are kept up
    /// to as many bytes more, for deltas to read changed keys from.
    pub write_cache_bytes: u64,
    /// How new table files are compressed ([`StoreCompression`]).
    pub compression: StoreCompression,
}

/// What a disk store holds now, bytes, from RocksDB's properties (0 where RocksDB does not
/// say): what `weir_keyed_state_disk_bytes` and `weir_keyed_state_memory_bytes` report.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StoreBytes {
    /// Table files on local disk, obsolete ones a snapshot or checkpoint in flight still pins
    /// included (`rocksdb.total-sst-files-size`): the state dir's share of this store.
    pub table_files: u64,
    /// Memtables, active and sealed (`rocksdb.cur-size-all-mem-tables`; bounded by
    /// [`DiskStateOptions::write_buffer_bytes`] times the memtables kept).
    pub memtables: u64,
    /// Block cache in use (`rocksdb.block-cache-usage`; bounded by
    /// [`DiskStateOptions::cache_bytes`]).
    pub block_cache: u64,
}

/// The default [`DiskStateOptions::write_cache_bytes`]: 16 MiB, about 27,000 entries of short
/// keys per generation (an eighth of it; `state/disk_cache.rs`, `entry_bytes`).
pub const DEFAULT_WRITE_CACHE_BYTES: u64 = 16 << 20;

impl Default for DiskStateOptions {
    /// 32 MiB of block cache, 16 MiB of write buffer and 16 MiB of write-back cache per
    /// subtask; table files uncompressed.
    fn default() -> DiskStateOptions {
        DiskStateOptions {
            cache_bytes: 32 << 20,
            write_buffer_bytes: 16 << 20,
            write_cache_bytes: DEFAULT_WRITE_CACHE_BYTES,
            compression: StoreCompression::None,
        }
    }
}

/// Keyed state of one subtask in an LSM store under a local scratch directory, with an
/// optional TTL. The same operations as [`HeapKeyedState`](crate::state::heap::HeapKeyedState).
pub struct DiskKeyedState<V> {
    range: KeyGroupRange,
    ttl: Option<StateTtl>,
    dir: PathBuf,
    store: Store,
    /// Entries held (expired ones included until cleaned up).
    len: usize,
    /// Store key where incremental TTL cleanup continues (empty: from the start).
    cleanup_cursor: Vec<u8>,
    /// Entries incremental cleanup may examine now.
    cleanup_credit: usize,
    /// Keys written or removed since the last [`DiskKeyedState::take_changes`], when changes
    /// are tracked (incremental checkpoints), at most [`changed_key_limit`].
    changed: ChangedKeysByKey,
    /// Most block bytes a build of absent key groups writes through the write buffer instead
    /// of a bulk ingestion ([`batch_build_bytes`]).
    batch_build_bytes: usize,
    /// The write-back cache in front of the store: the state is the store overlaid with its
    /// pending generations and its current one (`state/disk_write_back.rs`). Boxed: it is
    /// most of this struct's size, and `KeyedState` holds a heap state or this one inline.
    cache: Box<WriteBack<V>>,
    /// Reads of the write-back cache since the state opened ([`CacheLookups`]); a `Cell`
    /// because [`DiskKeyedState::get`] reads through `&self` (the state lives on its task
    /// thread).
    lookups: std::cell::Cell<CacheLookups>,
    _value: PhantomData<fn() -> V>,
}

/// How often a disk subtask found the key a record reads in its write-back cache
/// (`spec.diskState.writeCacheSize`), since the state opened: a hit found it in one of the
/// cache's generations, a miss read the store. Counted only with the cache on. A low hit
/// ratio, hits / (hits + misses), means records rarely come back to a key while the cache
/// still holds it (many keys, few records each), where the cache costs more than it saves.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct CacheLookups {
    /// Keys found in the cache.
    pub hits: u64,
    /// Keys read from the store.
    pub misses: u64,
}

impl CacheLookups {
    /// Adds one read to `lookups`: a hit or a miss.
    pub(crate) fn count(lookups: &std::cell::Cell<CacheLookups>, hit: bool) {
        let mut now = lookups.get();
        if hit {
            now.hits += 1;
        } else {
            now.misses += 1;
        }
        lookups.set(now);
    }
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
        let store = disk_store::take_or_create(dir, options)?;
        DiskKeyedState::on_store(store, dir, range, ttl, options)
    }

    /// State for `range` in the store whose files a native checkpoint's fast restore put in
    /// `dir` (`checkpoint/native_restore.rs`), opened writable with `options` and the delta
    /// files among them applied (`state/disk_delta.rs`), holding `entries` entries (expired ones included: each keeps its write time, and reads,
    /// snapshots and incremental cleanup apply `ttl` to it as to any other entry). Errors: the
    /// files do not open as a store; a delta file is corrupt; the write-back thread cannot be
    /// started.
    pub fn open_restored(
        dir: &Path,
        range: KeyGroupRange,
        ttl: Option<StateTtl>,
        options: DiskStateOptions,
        entries: u64,
    ) -> Result<DiskKeyedState<V>, DiskStateError> {
        let store = crate::state::disk_rocks::open_existing(dir, &options)?;
        crate::state::disk_delta::apply_deltas(&store, dir)?;
        let mut state = DiskKeyedState::on_store(store, dir, range, ttl, options)?;
        state.len = entries as usize;
        Ok(state)
    }

    /// As [`DiskKeyedState::open`] on `store`, the empty store at `dir` created with
    /// `options` (the disk opening's claimed creation, `state/disk_opening.rs`). Errors: the
    /// write-back thread cannot be started.
    pub(crate) fn on_store(
        store: disk_store::Store,
        dir: &Path,
        range: KeyGroupRange,
        ttl: Option<StateTtl>,
        options: DiskStateOptions,
    ) -> Result<DiskKeyedState<V>, DiskStateError> {
        let deltas = DeltaLimits::for_store(
            crate::state::disk_rocks::write_buffer_bytes(&options),
            std::env::var(NATIVE_DELTAS_ENV).ok().as_deref(),
        )
        .map_err(|problem| DiskStateError {
            dir: dir.to_path_buf(),
            problem,
        })?;
        let cache = Box::new(WriteBack::new(options.write_cache_bytes, &store, dir, deltas)?);
        Ok(DiskKeyedState {
            range,
            ttl,
            dir: dir.to_path_buf(),
            store,
            len: 0,
            cleanup_cursor: Vec::new(),
            cleanup_credit: 0,
            changed: ChangedKeysByKey::new(changed_key_limit(&options)),
            batch_build_bytes: batch_build_bytes(&options),
            cache,
            lookups: Default::default(),
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

    /// Bytes of the store's write buffers now (active and sealed memtables, as RocksDB's
    /// arenas count them), for tests of the memory bound.
    #[cfg(test)]
    pub(crate) fn write_buffer_bytes(&self) -> u64 {
        self.store.memtable_bytes()
    }

    /// Table files on the store's level 0 now, for tests of its compaction options.
    #[cfg(test)]
    pub(crate) fn level0_files(&self) -> u64 {
        self.store.level0_files()
    }

    /// Entries held, expired ones included until cleanup removes them.
    pub fn len(&self) -> usize {
        self.len
    }

    /// What the store holds now ([`StoreBytes`]) and the bytes of the write-back cache
    /// ([`DiskStateOptions::write_cache_bytes`]). Reads counters only: cheap enough for every
    /// metrics refresh.
    pub fn bytes(&self) -> (StoreBytes, u64) {
        (self.store.bytes(), self.cache.bytes())
    }

    /// Bytes on local disk of the last native checkpoint's base that the store no longer
    /// holds itself ([`base_only_bytes`](crate::state::disk_delta::base_only_bytes): logged
    /// delta files, table files compacted away since): with the store's table files, what
    /// the subtask takes in the state dir. One directory listing (at most about 40 files).
    pub fn checkpoint_base_bytes(&self) -> u64 {
        crate::state::disk_delta::base_only_bytes(&self.dir)
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The write-back cache's hits and misses since the state opened; `None` with the cache
    /// off.
    pub fn cache_lookups(&self) -> Option<CacheLookups> {
        (!self.cache.is_off()).then(|| self.lookups.get())
    }

    /// Counts one read of the write-back cache.
    pub(crate) fn count_lookup(&self, hit: bool) {
        CacheLookups::count(&self.lookups, hit);
    }

    /// Counts each value's heap bytes as `value_bytes` says in the write-back cache's budget
    /// (`writeCacheSize`), besides its entry: for values that own memory (a window's list of
    /// windows). By default values count none (an aggregation's numbers).
    pub fn count_value_bytes(mut self, value_bytes: fn(&V) -> u64) -> Self {
        self.cache.count_value_bytes(value_bytes);
        self
    }

    /// Records `key` as changed (by key: see `state/changed_keys.rs`) when changes are
    /// tracked; past [`changed_key_limit`] keys the set overflows (its keys are dropped, the
    /// next incremental checkpoint is a base).
    #[inline]
    fn record_change(&mut self, key_group: u32, hash: u64, key: &Key) {
        self.changed.record(key_group, hash, key);
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
        self.changed.track();
        // Deltas read changed keys from generations kept after their write-back.
        self.cache.keep_written();
    }

    /// What native checkpoints need instead of [`DiskKeyedState::track_changes`]
    /// (`state/disk_native.rs`): every write goes through the write-back cache's generations
    /// (removals and TTL cleanup as tombstones), but no key is recorded and no generation kept
    /// after its write-back; a set recorded so far is dropped. A native checkpoint reads the
    /// store's files, so the per-write hash-set insert of a changed key (and the set's memory,
    /// up to [`changed_key_limit`] keys) bought nothing. Level 0 compacts at the same trigger
    /// as before ([`L0_COMPACTION_TRIGGER`]: a later one uploads fewer compaction outputs but
    /// makes every point read slower).
    ///
    /// [`L0_COMPACTION_TRIGGER`]: crate::state::disk_rocks::L0_COMPACTION_TRIGGER
    pub fn track_for_native_checkpoints(&mut self) {
        self.changed.stop();
        self.cache.write_through_generations_only();
    }

    /// The keys written or removed since the previous call (or since tracking started), and
    /// starts a new record; empty unless [`DiskKeyedState::track_changes`] was called. O(1).
    pub fn take_changes(&mut self) -> ChangedKeys {
        self.changed.take()
    }

    /// Loads `blocks` (of any block version) into the store; blocks of key groups outside the
    /// range are skipped, entries expired at `now_ms` are dropped, entries of a block without
    /// timestamps count as written at `now_ms`. Blocks of one key group apply in the order
    /// given (a chain's base, then its deltas). Into an empty store (every start: the store is
    /// scratch) as [`DiskKeyedState::restore_absent_groups`] (decoded on up to
    /// [`parallel::max_workers`] threads; small sets by write batches, larger ones by bulk
    /// ingestion: a sorted table written directly and ingested, no memtable, RocksDB's
    /// `IngestExternalFile`); into a store that holds entries, by write batches with lookups.
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
    /// a sequence number above every write so far, RocksDB's `IngestExternalFile`). Either way
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
            let mut batch = rocksdb::WriteBatch::default();
            let mut held = 0usize;
            self.decode_groups(groups, now_ms, &mut |key, value| {
                batch.put(key, value);
                held += 1;
                Ok(())
            })?;
            self.store.write(batch).map_err(|e| e.to_string())?;
            self.len += held;
            return Ok(());
        }
        let store = self.store.clone();
        let held = store.ingest(|write| self.decode_groups(groups, now_ms, write))?;
        self.len += held;
        Ok(())
    }

    /// Hands the live entries of `groups` (each group's blocks applied in order, see
    /// [`sorted_group_entries`], one buffer per group) to `write` on the calling thread, in ascending store-key
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
        write: &mut StoreWrite<'_>,
    ) -> Result<(), String> {
        let workers = parallel::max_workers();
        let ttl = self.ttl;
        parallel::for_each_in_order(
            groups,
            workers,
            workers * DECODED_GROUPS_PER_WORKER,
            |(key_group, blocks)| sorted_group_entries::<V>(key_group, blocks, ttl, now_ms),
            &mut |entries: Result<SortedEntries, String>| {
                for (key, value) in entries?.iter() {
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
            let mut batch = rocksdb::WriteBatch::default();
            let mut added = 0usize;
            let mut removed = 0usize;
            for (key, value, written_ms) in entries {
                let expired_then = block.expired_at_snapshot(written_ms);
                let written_ms = written_ms.unwrap_or(now_ms);
                let live = value.filter(|_| !expired_then && !expired(self.ttl, written_ms, now_ms));
                let key = store_key(block.key_group, key_hash(&key), &key);
                let held = (delta || self.len > 0) && self.store.contains(&key).map_err(|e| e.to_string())?;
                match live {
                    Some(value) => {
                        batch.put(key, encode_value(&value, written_ms));
                        added += usize::from(!held);
                    }
                    None if held => {
                        batch.delete(key);
                        removed += 1;
                    }
                    None => {}
                }
            }
            self.store.write(batch).map_err(|e| e.to_string())?;
            self.len = self.len + added - removed;
        }
        Ok(())
    }
}

/// Takes one store entry, `(store key, store value)`, during a restore (a write batch's
/// insert or an ingestion's write). Errors: the store's, as text.
type StoreWrite<'a> = dyn FnMut(&[u8], &[u8]) -> Result<(), String> + 'a;

/// The store value of `value` written at `written_ms`: see the module doc.
pub(crate) fn encode_value<V: Serialize>(value: &V, written_ms: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(VALUE_PREFIX_LEN + 16);
    out.extend_from_slice(&written_ms.to_le_bytes());
    postcard::to_extend(value, out).expect("a state value encodes")
}

pub(crate) fn value_written_ms(bytes: &[u8]) -> Option<u64> {
    Some(u64::from_le_bytes(bytes.get(..VALUE_PREFIX_LEN)?.try_into().ok()?))
}

pub(crate) fn decode_value<V: DeserializeOwned>(bytes: &[u8]) -> Result<(V, u64), String> {
    let written = value_written_ms(bytes).ok_or("a stored value shorter than its write time")?;
    let value = postcard::from_bytes(&bytes[VALUE_PREFIX_LEN..]).map_err(|e| format!("a stored value: {e}"))?;
    Ok((value, written))
}

#[path = "disk_access.rs"]
mod access;

#[cfg(test)]
#[path = "disk_tests.rs"]
mod tests;
