//! The disk backend's store: one RocksDB database per subtask under its scratch directory
//! (Flink's `EmbeddedRocksDBStateBackend` keeps one per subtask too), and the thin calls the
//! backend makes on it: point reads and writes, write batches, read views (RocksDB snapshots),
//! range scans, and bulk ingestion of sorted tables. Everything that decides what to read or
//! write is in `state/disk*.rs`; this file only talks to RocksDB.
//!
//! The store is scratch (recreated empty on every start, the checkpoint is the source of truth),
//! so writes skip RocksDB's write-ahead log and tables are stored uncompressed by default (point
//! reads that miss the block cache and checkpoint scans then skip decompression;
//! `spec.diskState.compression` switches LZ4 on). Index and filter blocks
//! live in the block cache, so the cache size bounds them too (Flink's managed memory does the
//! same). A checkpoint's scan does not fill the block cache (`fill_cache: false`): a scan of the
//! whole store through the cache evicted the hot blocks of point reads and left the allocator
//! holding the churned pages (docs/runtime/state-backends-log.md, "diskrss").
//!
//! RocksDB is linked from the system's library (`apt-get install librocksdb-dev libclang-dev`,
//! `.cargo/config.toml`): the `rocksdb` crate 0.20.1, whose bundled headers (7.9.2) are the
//! release nearest Debian bookworm's RocksDB 7.8.3.

use crate::state::disk::{DiskStateError, DiskStateOptions, StoreBytes, StoreCompression};
use rocksdb::{
    BlockBasedIndexType, BlockBasedOptions, Cache, DB, DBCompressionType, IngestExternalFileOptions, LogLevel, Options,
    ReadOptions, SnapshotWithThreadMode, SstFileWriter, WriteBatch, WriteOptions,
};
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// Most memtables a store holds: the active one and at most two sealed ones being flushed
/// (RocksDB's `max_write_buffer_number`; Flink's default is 2). Past them writes wait for a
/// flush (on the write-back thread, not the task thread) instead of memory growing.
pub const MAX_WRITE_BUFFERS: u64 = 3;

/// RocksDB's `level0_file_num_compaction_trigger` of every store, native checkpoints or not:
/// RocksDB's default (and Flink's RocksDB backend's), set explicitly so the choice is on
/// record. A native checkpoint that flushes (`state/disk_delta.rs` says when) turns the
/// memtable into a new level-0 table file, and every point read that misses the write-back
/// cache checks each level-0 file (its filter, then its index) before the lower levels, on the
/// task thread. Compacting at 16 files instead (native
/// stores 2026-12-03 to 12-04) cut the bytes native checkpoints every second upload at 1M keys
/// by about half, but cost the task threads 16-39 % more CPU per record and the throughput
/// with checkpoints every second fell to 0.73-0.88 of none's; at 4 it is 0.90-0.98 (1M keys,
/// four interleaved rounds, per-thread CPU read from /proc, docs/runtime/state-backends-log.md,
/// "Level 0 compacts at RocksDB's default again"; RocksDB wiki, "Leveled Compaction"). At 5M
/// and 50M keys the compactions of a level-0 file per checkpoint cost more than the reads
/// (same section): delta checkpoints flush far less often since.
pub const L0_COMPACTION_TRIGGER: i32 = 4;

/// Background jobs (flushes and compactions) of each store (RocksDB's
/// `max_background_jobs`); they run on RocksDB's process-wide thread pools.
pub const STORE_BACKGROUND_JOBS: i32 = 2;

/// An open store (one RocksDB database), shared by the subtask's state, its write-back thread
/// and the read views of its snapshots. Dropping the last reference closes the database and
/// removes its directory (scratch).
pub(crate) type Store = Arc<RocksStore>;

/// Stores open in this process: opened and not yet closed ([`wait_for_stores_to_close`]).
static OPEN_STORES: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);

/// Counts one open store in its counter ([`OPEN_STORES`]): made once its database opened,
/// dropped after the database closed (declared right after it in [`RocksStore`]).
struct OpenStore(&'static std::sync::atomic::AtomicUsize);

impl OpenStore {
    fn counted_in(counter: &'static std::sync::atomic::AtomicUsize) -> OpenStore {
        counter.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
        OpenStore(counter)
    }
}

impl Drop for OpenStore {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::SeqCst);
    }
}

/// Waits until every store of this process is closed, for at most `timeout` (polling every
/// 10 ms); returns whether they all are. A process calls it before it exits: a store still
/// closing on another thread while `exit` runs RocksDB's static destructors aborts the
/// process (`pthread lock: Invalid argument`, SIGABRT). CI saw it once, 2026-12-06, at the end
/// of a `weir run` on disk stopped with a savepoint that aborted a checkpoint: the aborted
/// checkpoint's encoder can hold the last handle of a store, whose close flushes memtables.
pub fn wait_for_stores_to_close(timeout: std::time::Duration) -> bool {
    wait_until_none_open(&OPEN_STORES, timeout)
}

fn wait_until_none_open(counter: &std::sync::atomic::AtomicUsize, timeout: std::time::Duration) -> bool {
    let deadline = std::time::Instant::now() + timeout;
    while counter.load(std::sync::atomic::Ordering::SeqCst) > 0 {
        if std::time::Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    true
}

/// A RocksDB database and the options every write and ingestion uses.
pub(crate) struct RocksStore {
    /// Declared first: dropped (closed) before the directory is removed.
    db: DB,
    /// Declared right after `db`: counts the store open until the database closed.
    _open: OpenStore,
    options: Options,
    writes: WriteOptions,
    /// Names the next ingestion's table file.
    ingestions: AtomicU64,
    /// Bytes of keys and values written by [`RocksStore::put`] and [`RocksStore::write`]
    /// (counted for tests).
    #[cfg(test)]
    bytes_put: AtomicU64,
    dir: PathBuf,
    /// Declared last: removes the directory once the database is closed.
    _scratch: RemoveOnDrop,
}

impl Drop for RocksStore {
    fn drop(&mut self) {
        // The database closes when its field drops, after this body: cancel its background
        // work first so the close does not wait for a compaction (the directory goes anyway).
        // Cancelling (and closing) first flushes every memtable holding writes that skipped
        // the write-ahead log (all of them here): up to `MAX_WRITE_BUFFERS` memtables written
        // and synced just before their directory is deleted, at every clean end of a subtask
        // (not after a kill). RocksDB's `avoid_flush_during_shutdown` would skip it, but
        // neither the crate 0.20.1 nor RocksDB 7.8's C API can set it (`rocksdb_set_options`
        // sets column-family options only: "Could not find option").
        self.db.cancel_all_background_work(false);
    }
}

/// Removes a directory when dropped (the store's scratch directory, after the database in it
/// was closed).
struct RemoveOnDrop(PathBuf);

impl Drop for RemoveOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// The write buffer (memtable) size a store opens with, bytes:
/// [`DiskStateOptions::write_buffer_bytes`], at least 1 MiB.
pub(crate) fn write_buffer_bytes(options: &DiskStateOptions) -> u64 {
    options.write_buffer_bytes.max(1 << 20)
}

/// The RocksDB options of a store with `options`' memory limits, its table files compressed
/// as `compression` says.
fn rocks_options(options: &DiskStateOptions, compression: StoreCompression) -> Result<Options, String> {
    let mut table = BlockBasedOptions::default();
    let cache = Cache::new_lru_cache(options.cache_bytes.max(1) as usize).map_err(|e| e.to_string())?;
    table.set_block_cache(&cache);
    table.set_bloom_filter(10.0, false);
    // Index and filter blocks in the block cache, so the cache bounds them too, partitioned
    // into blocks of about 4 KiB (Flink's `state.backend.rocksdb.memory.partitioned-index-filters`):
    // a table's whole filter (about 1.25 bytes per key) is larger than a shard of the cache
    // (RocksDB splits it into shards of at least 512 KiB), could not be cached, and was read
    // from the file at every point read (measured: 5.5x fewer records/s at 1M keys).
    table.set_index_type(BlockBasedIndexType::TwoLevelIndexSearch);
    table.set_partition_filters(true);
    table.set_metadata_block_size(4096);
    table.set_cache_index_and_filter_blocks(true);
    table.set_pin_top_level_index_and_filter(true);
    table.set_pin_l0_filter_and_index_blocks_in_cache(true);
    let mut rocks = Options::default();
    rocks.create_if_missing(true);
    rocks.set_block_based_table_factory(&table);
    rocks.set_write_buffer_size(write_buffer_bytes(options) as usize);
    rocks.set_max_write_buffer_number(MAX_WRITE_BUFFERS as i32);
    // A bloom filter over each memtable's keys (a tenth of its size): most point reads look up
    // keys the memtables do not hold, and without it each searched every memtable's skiplist
    // (a third of the CPU of a keyed count at 1M keys).
    rocks.set_memtable_whole_key_filtering(true);
    rocks.set_memtable_prefix_bloom_ratio(0.1);
    rocks.set_max_background_jobs(STORE_BACKGROUND_JOBS);
    rocks.set_level_zero_file_num_compaction_trigger(L0_COMPACTION_TRIGGER);
    let (levels, bottommost) = match compression {
        StoreCompression::None => (DBCompressionType::None, DBCompressionType::None),
        StoreCompression::Lz4 => (DBCompressionType::Lz4, DBCompressionType::Lz4),
        StoreCompression::Lz4ZstdBottommost => (DBCompressionType::Lz4, DBCompressionType::Zstd),
    };
    rocks.set_compression_type(levels);
    rocks.set_bottommost_compression_type(bottommost);
    rocks.set_level_compaction_dynamic_level_bytes(true);
    rocks.set_log_level(LogLevel::Warn);
    rocks.set_keep_log_file_num(1);
    rocks.set_max_log_file_size(1 << 20);
    rocks.set_stats_dump_period_sec(0);
    Ok(rocks)
}

/// Opens a new, empty store in `dir` (which must exist and be empty) with `options`' memory
/// limits and compression. Errors: RocksDB cannot open there (naming the directory; with a
/// compression the system's RocksDB was built without, RocksDB's "not linked with the binary",
/// naming `spec.diskState.compression`).
pub(crate) fn open_empty(dir: &Path, options: &DiskStateOptions) -> Result<Store, DiskStateError> {
    open_writable(dir, options, Opening::Empty)
}

/// Opens, writable, the store whose files are in `dir` (a native checkpoint's files restored
/// there, `checkpoint/native_restore.rs`) with `options`' memory limits, as [`open_empty`]
/// opens a new one (new table files compressed as `options` says; the restored ones keep
/// theirs, each block names its own): the store is scratch from then on (`dir` is removed when
/// the last reference is dropped). Errors: RocksDB cannot open the files there (a missing or
/// corrupt `MANIFEST` or table file; naming the directory).
pub(crate) fn open_existing(dir: &Path, options: &DiskStateOptions) -> Result<Store, DiskStateError> {
    open_writable(dir, options, Opening::Existing)
}

/// Whether [`open_writable`] creates a new store or opens the files already in its directory.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Opening {
    /// A new store in an empty directory.
    Empty,
    /// The store whose files are there; missing files are an error, never an empty store
    /// (a restore must not start from nothing).
    Existing,
}

/// The least free space a store opens in ([`open_writable`]): 16 MiB, the default write
/// buffer (a store that cannot flush one memtable cannot take a checkpoint). Debian's RocksDB
/// 7.8 is built with assertions, and an open whose first writes (its info log's header) fail
/// on a file system with a few KiB or a MiB left aborts the process (`Assertion
/// 'sync_without_flush_called_' failed`; helper-101, 2026-12-06: 76 of 270 starts on a nearly
/// full state dir, and with 1.1 MiB free for two stores) instead of returning the error.
/// Measured with two stores: 1.5 MiB free and more fail at the first checkpoint's flush with
/// the error, not an abort.
pub const MIN_FREE_TO_OPEN: u64 = 16 << 20;

/// The bytes an unprivileged process may still write on the file system holding `path` (the
/// nearest existing ancestor's), from `statvfs(3)`: `f_bavail × f_frsize`. `None` when it
/// cannot be read.
pub fn free_bytes(path: &Path) -> Option<u64> {
    use std::os::unix::ffi::OsStrExt;
    let existing = path.ancestors().find(|p| p.exists())?;
    let c_path = std::ffi::CString::new(existing.as_os_str().as_bytes()).ok()?;
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: `c_path` is a valid NUL-terminated string and `stat` a writable statvfs.
    let rc = unsafe { libc::statvfs(c_path.as_ptr(), &mut stat) };
    (rc == 0).then(|| (stat.f_bavail as u64).saturating_mul(stat.f_frsize as u64))
}

/// A writable scratch store in `dir` with `options`' memory limits and compression, new or
/// existing as `opening` says; writes skip the write-ahead log. Errors: RocksDB's, naming
/// `spec.diskState.compression` when a compression is set; less than [`MIN_FREE_TO_OPEN`] free
/// on `dir`'s file system (`No space left on device`, with the disk-full advice).
fn open_writable(dir: &Path, options: &DiskStateOptions, opening: Opening) -> Result<Store, DiskStateError> {
    let compression = options.compression;
    let err = |problem: String| DiskStateError {
        dir: dir.to_path_buf(),
        problem,
    };
    let mut rocks = rocks_options(options, compression).map_err(|e| err(format!("cannot configure the store: {e}")))?;
    rocks.create_if_missing(opening == Opening::Empty);
    let what = match opening {
        Opening::Empty => "cannot open the store",
        Opening::Existing => "cannot open the restored store",
    };
    if let Some(free) = free_bytes(dir)
        && free < MIN_FREE_TO_OPEN
    {
        return Err(err(format!(
            "{what}: No space left on device ({free} bytes free on its file system; a store needs at least {MIN_FREE_TO_OPEN})"
        )));
    }
    let db = DB::open(&rocks, dir).map_err(|e| match compression {
        StoreCompression::None => err(format!("{what}: {e}")),
        _ => err(format!(
            "{what} with spec.diskState.compression `{}`: {e}",
            compression.spec_name()
        )),
    })?;
    let mut writes = WriteOptions::default();
    writes.disable_wal(true);
    Ok(Arc::new(RocksStore {
        db,
        _open: OpenStore::counted_in(&OPEN_STORES),
        options: rocks,
        writes,
        ingestions: AtomicU64::new(0),
        #[cfg(test)]
        bytes_put: AtomicU64::new(0),
        dir: dir.to_path_buf(),
        _scratch: RemoveOnDrop(dir.to_path_buf()),
    }))
}

/// Opens, read-only, the store whose files are in `dir` (a RocksDB checkpoint written by
/// [`RocksStore::create_checkpoint`], or a native checkpoint's files downloaded there), with
/// `options`' memory limits. The store is scratch like every other: `dir` is removed when the
/// last reference is dropped. Writes to it fail. Errors: RocksDB cannot open the files there
/// (a missing or corrupt `MANIFEST` or table file; naming the directory).
pub(crate) fn open_read_only(dir: &Path, options: &DiskStateOptions) -> Result<Store, DiskStateError> {
    let err = |problem: String| DiskStateError {
        dir: dir.to_path_buf(),
        problem,
    };
    // Reading needs no compression setting: each block names its own.
    let mut rocks =
        rocks_options(options, StoreCompression::None).map_err(|e| err(format!("cannot configure the store: {e}")))?;
    rocks.create_if_missing(false);
    let db = DB::open_for_read_only(&rocks, dir, false)
        .map_err(|e| err(format!("cannot open the checkpoint's store: {e}")))?;
    Ok(Arc::new(RocksStore {
        db,
        _open: OpenStore::counted_in(&OPEN_STORES),
        options: rocks,
        writes: WriteOptions::default(),
        ingestions: AtomicU64::new(0),
        #[cfg(test)]
        bytes_put: AtomicU64::new(0),
        dir: dir.to_path_buf(),
        _scratch: RemoveOnDrop(dir.to_path_buf()),
    }))
}

impl RocksStore {
    fn err(&self, problem: impl std::fmt::Display) -> DiskStateError {
        DiskStateError {
            dir: self.dir.clone(),
            problem: problem.to_string(),
        }
    }

    /// Calls `read` with the value stored under `key`, if any (no copy: RocksDB's pinned
    /// slice). Errors: the store fails to read.
    pub(crate) fn with_value<T>(&self, key: &[u8], read: impl FnOnce(&[u8]) -> T) -> Result<Option<T>, DiskStateError> {
        let found = self.db.get_pinned(key).map_err(|e| self.err(e))?;
        Ok(found.map(|value| read(&value)))
    }

    /// Whether `key` is held. Errors: the store fails to read.
    pub(crate) fn contains(&self, key: &[u8]) -> Result<bool, DiskStateError> {
        Ok(self.with_value(key, |_| ())?.is_some())
    }

    /// Stores `value` under `key`. Errors: the store fails to write.
    pub(crate) fn put(&self, key: &[u8], value: &[u8]) -> Result<(), DiskStateError> {
        #[cfg(test)]
        self.bytes_put
            .fetch_add((key.len() + value.len()) as u64, Ordering::Relaxed);
        self.db.put_opt(key, value, &self.writes).map_err(|e| self.err(e))
    }

    /// Removes `key`. Errors: the store fails to write.
    pub(crate) fn delete(&self, key: &[u8]) -> Result<(), DiskStateError> {
        self.db.delete_opt(key, &self.writes).map_err(|e| self.err(e))
    }

    /// Applies `batch` atomically. Errors: the store fails to write.
    pub(crate) fn write(&self, batch: WriteBatch) -> Result<(), DiskStateError> {
        #[cfg(test)]
        self.bytes_put
            .fetch_add(batch.size_in_bytes() as u64, Ordering::Relaxed);
        self.db.write_opt(batch, &self.writes).map_err(|e| self.err(e))
    }

    /// Bytes written by [`RocksStore::put`] (keys and values) and [`RocksStore::write`] (the
    /// batches' sizes) since the store opened: what the state's writes cost, whatever RocksDB
    /// kept of them (an overwritten value leaves the memtable at its flush).
    #[cfg(test)]
    pub(crate) fn bytes_put(&self) -> u64 {
        self.bytes_put.load(Ordering::Relaxed)
    }

    /// Calls `each` with every entry whose key is in `from..until` (`None`: to the end), in key
    /// order, until it returns `false`. The blocks read are cached (TTL cleanup's short walks).
    /// Errors: the store fails to read; `each`'s.
    pub(crate) fn scan(
        &self,
        from: &[u8],
        until: Option<&[u8]>,
        each: impl FnMut(&[u8], &[u8]) -> Result<bool, DiskStateError>,
    ) -> Result<(), DiskStateError> {
        let iterator = self.db.raw_iterator_opt(scan_options(true, until));
        scan_with(iterator, from, each).map_err(|e| self.err(e))?
    }

    /// Writes the entries `fill` hands to the writer it is given (strictly ascending keys) into
    /// a new table file and ingests it (RocksDB's `IngestExternalFile`, the file moved into the
    /// store: no memtable, no write-ahead log, no flush of these entries). The ingested entries
    /// are newer than every write before. Returns the entries ingested. Errors: a key out of
    /// order, the table cannot be written or ingested; `fill`'s.
    pub(crate) fn ingest(
        &self,
        fill: impl FnOnce(&mut dyn FnMut(&[u8], &[u8]) -> Result<(), String>) -> Result<(), String>,
    ) -> Result<usize, String> {
        let number = self.ingestions.fetch_add(1, Ordering::Relaxed);
        let path = self.dir.join(format!("ingest-{number}.sst"));
        let mut writer = SstFileWriter::create(&self.options);
        writer
            .open(&path)
            .map_err(|e| self.err(format!("cannot write a table to ingest: {e}")).to_string())?;
        let mut written = 0usize;
        fill(&mut |key, value| {
            written += 1;
            writer
                .put(key, value)
                .map_err(|e| format!("cannot write a table to ingest: {e}"))
        })
        .map_err(|e| self.err(e).to_string())?;
        if written == 0 {
            // RocksDB refuses to finish a table without entries.
            drop(writer);
            let _ = std::fs::remove_file(&path);
            return Ok(0);
        }
        writer
            .finish()
            .map_err(|e| self.err(format!("cannot finish a table to ingest: {e}")).to_string())?;
        let mut ingest = IngestExternalFileOptions::default();
        ingest.set_move_files(true);
        self.db
            .ingest_external_file_opts(&ingest, vec![&path])
            .map_err(|e| self.err(format!("cannot ingest a table: {e}")).to_string())?;
        Ok(written)
    }

    /// Writes a RocksDB checkpoint of the store into `into`, a directory that must not exist
    /// (RocksDB's `Checkpoint::CreateCheckpoint`): the memtables are flushed, the live table
    /// files (`*.sst`) hard-linked (copied across file systems), `MANIFEST`, `CURRENT` and
    /// `OPTIONS` copied. The checkpoint holds every write applied before the call and none
    /// after it; the store goes on meanwhile. Errors: RocksDB cannot flush or write there
    /// (naming the store's directory and `into`).
    pub(crate) fn create_checkpoint(&self, into: &Path) -> Result<(), DiskStateError> {
        let failed = |e: rocksdb::Error| self.err(format!("cannot write a checkpoint into {}: {e}", into.display()));
        let checkpoint = rocksdb::checkpoint::Checkpoint::new(&self.db).map_err(failed)?;
        checkpoint.create_checkpoint(into).map_err(failed)
    }

    /// The sequence number of the newest write (RocksDB's `GetLatestSequenceNumber`): every
    /// put or delete of a write batch takes the next one, an ingestion one more; a flush, a
    /// compaction or a checkpoint takes none. `state/disk_delta.rs` compares it with the writes
    /// it logged to know that nothing else wrote the store.
    pub(crate) fn latest_sequence_number(&self) -> u64 {
        self.db.latest_sequence_number()
    }

    /// What the store holds now ([`StoreBytes`]), from RocksDB's properties: reads counters,
    /// no file.
    pub(crate) fn bytes(&self) -> StoreBytes {
        let property = |name: &str| self.db.property_int_value(name).ok().flatten().unwrap_or(0);
        StoreBytes {
            table_files: property("rocksdb.total-sst-files-size"),
            memtables: property("rocksdb.cur-size-all-mem-tables"),
            block_cache: property("rocksdb.block-cache-usage"),
        }
    }

    /// Table files on level 0 now, for tests of the compaction options.
    #[cfg(test)]
    pub(crate) fn level0_files(&self) -> u64 {
        self.db
            .property_int_value("rocksdb.num-files-at-level0")
            .ok()
            .flatten()
            .unwrap_or(0)
    }

    /// Flushes the memtables into table files and waits for it. Errors: RocksDB cannot
    /// flush (naming the store's directory).
    pub(crate) fn flush(&self) -> Result<(), DiskStateError> {
        self.db
            .flush()
            .map_err(|e| self.err(format!("cannot flush the memtables: {e}")))
    }

    /// Bytes of the store's memtables now (active and sealed), for tests of the memory bound.
    #[cfg(test)]
    pub(crate) fn memtable_bytes(&self) -> u64 {
        self.db
            .property_int_value("rocksdb.cur-size-all-mem-tables")
            .ok()
            .flatten()
            .unwrap_or(0)
    }

    /// Entries in the store, counted by a scan, for tests.
    #[cfg(test)]
    pub(crate) fn count_entries(&self) -> usize {
        let mut entries = 0;
        self.scan(&[], None, |_, _| {
            entries += 1;
            Ok(true)
        })
        .unwrap();
        entries
    }
}

/// The read options of a scan up to `until` (exclusive; `None`: to the end), adding the blocks
/// it reads to the block cache when `fill_cache`.
fn scan_options(fill_cache: bool, until: Option<&[u8]>) -> ReadOptions {
    let mut read = ReadOptions::default();
    read.fill_cache(fill_cache);
    if let Some(until) = until {
        read.set_iterate_upper_bound(until);
    }
    read
}

/// Seeks `iterator` to `from` and calls `each` with every entry until it returns `false` or the
/// iterator ends. The outer error is the iterator's status, the inner one `each`'s.
fn scan_with<D: rocksdb::DBAccess>(
    mut iterator: rocksdb::DBRawIteratorWithThreadMode<'_, D>,
    from: &[u8],
    mut each: impl FnMut(&[u8], &[u8]) -> Result<bool, DiskStateError>,
) -> Result<Result<(), DiskStateError>, rocksdb::Error> {
    iterator.seek(from);
    while let Some((key, value)) = iterator.item() {
        match each(key, value) {
            Ok(true) => iterator.next(),
            Ok(false) => return Ok(Ok(())),
            Err(e) => return Ok(Err(e)),
        }
    }
    iterator.status()?;
    Ok(Ok(()))
}

/// A consistent read view of a store as of its creation (a RocksDB snapshot), owned: it keeps
/// its store open and can move to the threads that encode a checkpoint. O(1) to take; while it
/// lives the store keeps the versions it reads.
pub(crate) struct StoreView {
    /// Declared before `store`: released before the store it reads can close.
    snapshot: SnapshotWithThreadMode<'static, DB>,
    store: Store,
}

impl StoreView {
    /// A read view of `store` now.
    pub(crate) fn new(store: &Store) -> StoreView {
        let store = store.clone();
        let snapshot = store.db.snapshot();
        // SAFETY: the snapshot borrows the database inside the `Arc` that this view holds (a
        // heap allocation that does not move), and is dropped before it (field order); no
        // iterator made from it outlives a method of this view. (The crate makes snapshots
        // `Send` and `Sync`: RocksDB allows reading one from any thread.)
        let snapshot = unsafe {
            std::mem::transmute::<SnapshotWithThreadMode<'_, DB>, SnapshotWithThreadMode<'static, DB>>(snapshot)
        };
        StoreView { snapshot, store }
    }

    /// The value the view holds under `key`. Errors: the store fails to read.
    pub(crate) fn get(&self, key: &[u8]) -> Result<Option<Vec<u8>>, DiskStateError> {
        self.snapshot.get(key).map_err(|e| self.store.err(e))
    }

    /// [`RocksStore::scan`] of the view, not filling the block cache (a checkpoint's scan).
    pub(crate) fn scan(
        &self,
        from: &[u8],
        until: Option<&[u8]>,
        each: impl FnMut(&[u8], &[u8]) -> Result<bool, DiskStateError>,
    ) -> Result<(), DiskStateError> {
        let iterator = self.snapshot.raw_iterator_opt(scan_options(false, until));
        scan_with(iterator, from, each).map_err(|e| self.store.err(e))?
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The wait before exit returns as soon as the last counted store closed on another
    /// thread, and gives up at its timeout while one stays open.
    #[test]
    fn the_exit_waits_for_a_store_closing_on_another_thread() {
        static COUNTED: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let held = OpenStore::counted_in(&COUNTED);
        let started = std::time::Instant::now();
        assert!(!wait_until_none_open(&COUNTED, std::time::Duration::from_millis(50)));
        assert!(started.elapsed() >= std::time::Duration::from_millis(50));
        let closing = OpenStore::counted_in(&COUNTED);
        let closer = std::thread::spawn(move || {
            std::thread::sleep(std::time::Duration::from_millis(200));
            drop(closing);
        });
        drop(held);
        let started = std::time::Instant::now();
        assert!(wait_until_none_open(&COUNTED, std::time::Duration::from_secs(30)));
        let waited = started.elapsed();
        assert!(
            waited >= std::time::Duration::from_millis(150),
            "returned before the close: {waited:?}"
        );
        closer.join().unwrap();
    }

    /// A restored store's directory without a store in it is an error naming the directory,
    /// never a new empty store (a restore must not start from nothing); a store written there
    /// opens with its entries.
    #[test]
    fn a_restored_store_opens_only_the_files_there() {
        let options = DiskStateOptions::default();
        let empty = tempfile::tempdir().unwrap();
        let e = open_existing(empty.path(), &options).err().expect("no store there");
        assert_eq!(e.dir, empty.path());
        assert!(e.problem.contains("cannot open the restored store"), "{}", e.problem);
        assert!(!empty.path().join("CURRENT").exists(), "no store was created");

        let written = tempfile::tempdir().unwrap();
        let dir = written.path().join("store");
        std::fs::create_dir(&dir).unwrap();
        let store = open_empty(&dir, &options).unwrap();
        store.put(b"key", b"value").unwrap();
        let copy = written.path().join("checkpoint");
        store.create_checkpoint(&copy).unwrap();
        drop(store);
        let reopened = open_existing(&copy, &options).unwrap();
        assert_eq!(
            reopened.with_value(b"key", |v| v.to_vec()).unwrap().as_deref(),
            Some(&b"value"[..])
        );
    }

    /// A checkpoint of a store written with each compression opens read-only (as a restore
    /// opens a native checkpoint, without a compression setting) with every entry; the
    /// compressed ones' table files are smaller. Fails if the system's RocksDB lacks LZ4 or
    /// ZSTD (the open's error then names `spec.diskState.compression`).
    #[test]
    fn a_checkpoint_of_a_store_written_with_any_compression_reads_back() {
        let dir = tempfile::tempdir().unwrap();
        let mut table_bytes = Vec::new();
        for compression in [
            StoreCompression::None,
            StoreCompression::Lz4,
            StoreCompression::Lz4ZstdBottommost,
        ] {
            let store_dir = dir.path().join(format!("{compression:?}"));
            std::fs::create_dir(&store_dir).unwrap();
            let options = DiskStateOptions {
                compression,
                ..DiskStateOptions::default()
            };
            let store = open_empty(&store_dir, &options).unwrap();
            let value = |i: u32| format!("value {:08}", i % 100).into_bytes();
            for i in 0..20_000u32 {
                store.put(&i.to_be_bytes(), &value(i)).unwrap();
            }
            let into = dir.path().join(format!("{compression:?}.chk"));
            store.create_checkpoint(&into).unwrap();
            table_bytes.push(
                std::fs::read_dir(&into)
                    .unwrap()
                    .map(|f| f.unwrap())
                    .filter(|f| f.file_name().to_string_lossy().ends_with(".sst"))
                    .map(|f| f.metadata().unwrap().len())
                    .sum::<u64>(),
            );
            let read = open_read_only(&into, &DiskStateOptions::default()).unwrap();
            assert_eq!(read.count_entries(), 20_000, "{compression:?}");
            for i in [0u32, 7_777, 19_999] {
                assert_eq!(
                    read.with_value(&i.to_be_bytes(), |v| v.to_vec()).unwrap(),
                    Some(value(i)),
                    "{compression:?}"
                );
            }
        }
        assert!(
            table_bytes[1] < table_bytes[0] && table_bytes[2] < table_bytes[0],
            "compressed tables are smaller: {table_bytes:?}"
        );
    }

    #[test]
    fn free_bytes_reads_the_file_system_of_the_nearest_existing_directory() {
        let dir = tempfile::tempdir().unwrap();
        let free = free_bytes(dir.path()).expect("statvfs of a temporary directory");
        assert!(free > 0);
        // A store directory not created yet: its parent's file system.
        let not_yet = dir.path().join("run/counts-0");
        let nested = free_bytes(&not_yet).expect("the nearest existing ancestor");
        // Other processes write meanwhile: the same file system, within 64 MiB.
        assert!(free.abs_diff(nested) < 64 << 20, "{free} vs {nested}");
    }
}
