//! A join's rows on the disk backend, in the subtask's store: a key's few rows in its own
//! entry, many rows each an entry of its own, so a record costs the rows it matches, never
//! more than a few of the rows its own side already holds.
//!
//! **Why not one value per key.** Keeping every row of a key in one store value (the generic
//! disk state) read and rewrote all of them at each of its records: a key taking n rows cost
//! O(n²) in all (8,000 rows of one key: 4.0 s, 16,000 rows: 15.6 s; now 0.07 and 0.11 s;
//! docs/runtime/state-backends-log.md, "Join rows on disk, one entry per row past 16").
//! Flink's regular join keeps each side in keyed state of its own rows for the same reason
//! (`JoinRecordStateView`). But most keys hold a few rows, and for them one value is cheaper
//! (one read and one write per record, where rows of their own cost a read per matched row and
//! two writes). So a key's rows are kept in its entry while it holds at most
//! [`INLINE_ROWS_UP_TO`] rows, and as entries of their own once it holds more: a record costs
//! O(min(rows, 16)) plus the rows it matches.
//!
//! **Layout.** Under the key's store key `P` ([`store_key`]: key group, hash, encoded key;
//! the encoded key ends where it began, so no `P` is a prefix of another):
//! - `P ++ [0]`: the key's entry ([`KeyRows`]: its rows, or the rows each side holds when they
//!   are entries of their own), stamped with its last record's time ([`encode_value`]: 8 bytes
//!   little-endian, ms since the Unix epoch), which the TTL reads;
//! - `P ++ [1] ++ n` / `P ++ [2] ++ n`: the n-th left / right row of a key whose rows are
//!   entries of their own (`n` a big-endian `u64`, so a scan of `P ++ [side]` reads a side
//!   oldest first), postcard-encoded [`StoredDatum`]s.
//!
//! **Snapshots** are the heap's blocks (a savepoint is backend-independent): one block per
//! key group, each key's rows as [`StoredJoinRows`], read from a store read view (O(1) on the
//! task thread) and assembled from the stored bytes on the encoder's thread
//! ([`DiskJoinSnapshot`]). **Restores** write the rows of the
//! blocks' keys the subtask owns. **TTL**: a key is gone once its last record is `ttl` old,
//! on the next record of the key, at a snapshot, or by incremental cleanup between batches
//! (as the generic state's: [`CLEANUP_ENTRIES_PER_RECORD`] entries examined per record).

use super::disk_snapshot::DiskJoinSnapshot;
use super::rows::{StoredDatum, StoredJoinRows};
use crate::job::join::Side;
use crate::record::{Datum, Key};
use crate::state::backend::KeyedStateSize;
use crate::state::changed_keys::{ChangedKeys, ChangedKeysByKey};
use crate::state::disk::{
    CLEANUP_ENTRIES_PER_RECORD, DiskStateError, DiskStateOptions, changed_key_limit, decode_value, encode_value,
};
use crate::state::disk_key::{KEY_PREFIX_LEN, store_key};
use crate::state::disk_rocks::{Store, StoreView};
use crate::state::key_group::{KeyGroupRange, key_hash};
use crate::state::keyed_block;
use crate::state::snapshot::KeyGroupBlock;
use crate::state::ttl::StateTtl;
use serde::{Deserialize, Serialize};
use std::path::{Path, PathBuf};

/// Most rows of a side [`DiskJoinRows::read_rows`] reads by point reads rather than a scan.
const POINT_READS_UP_TO: u64 = 4;

/// Most rows (both sides) a key keeps in its own entry ([`KeyRows::Inline`]); a key with more
/// keeps them as entries of their own.
pub const INLINE_ROWS_UP_TO: usize = 16;

/// The tag after `P` of a key's entry.
pub(super) const KEY_ENTRY: u8 = 0;

/// The first byte of a [`KeyRows::Inline`] entry's encoding (after the write time): postcard's
/// variant index, followed by the [`StoredJoinRows`] bytes a snapshot copies as they are.
pub(super) const INLINE_VARIANT: u8 = 0;

/// The first byte of a [`KeyRows::Spilled`] entry's encoding (after the write time).
pub(super) const SPILLED_VARIANT: u8 = 1;

/// The tag after `P` of `side`'s rows.
pub(super) fn rows_tag(side: Side) -> u8 {
    match side {
        Side::Left => 1,
        Side::Right => 2,
    }
}

/// Rows each side of a key holds.
#[derive(Clone, Copy, Debug, Default, Serialize, Deserialize)]
struct Counts {
    left: u64,
    right: u64,
}

/// A key's entry: its rows while they are few, else how many each side holds as entries of
/// their own.
#[derive(Debug, Serialize, Deserialize)]
enum KeyRows {
    /// Both sides' rows, oldest first.
    Inline(StoredJoinRows),
    /// Rows each side holds as entries `P ++ [side] ++ n`.
    Spilled(Counts),
}

impl Counts {
    fn of(&mut self, side: Side) -> &mut u64 {
        match side {
            Side::Left => &mut self.left,
            Side::Right => &mut self.right,
        }
    }
}

/// `prefix ++ [tag]`.
fn tagged(prefix: &[u8], tag: u8) -> Vec<u8> {
    let mut out = Vec::with_capacity(prefix.len() + 9);
    out.extend_from_slice(prefix);
    out.push(tag);
    out
}

/// The key and tag of store key `store_key` (`P ++ [tag] ++ ...`), with the length of `P`.
/// Errors: the bytes are not such a key (a store this module did not write).
pub(super) fn parse(store_key: &[u8]) -> Result<(Key, usize, u8), String> {
    let encoded = store_key
        .get(KEY_PREFIX_LEN..)
        .ok_or("a store key shorter than its prefix")?;
    let (key, rest): (Key, &[u8]) =
        postcard::take_from_bytes(encoded).map_err(|e| format!("a store key does not decode: {e}"))?;
    let prefix_len = store_key.len() - rest.len();
    let tag = *rest.first().ok_or("a store key without its tag")?;
    Ok((key, prefix_len, tag))
}

fn decode_row(bytes: &[u8]) -> Result<Vec<StoredDatum>, String> {
    postcard::from_bytes(bytes).map_err(|e| format!("a stored join row does not decode: {e}"))
}

fn encode_row(row: &[StoredDatum]) -> Vec<u8> {
    postcard::to_allocvec(row).expect("a row encodes")
}

/// The store key of the `n`-th row of `side` of the key with prefix `prefix`.
fn row_key(prefix: &[u8], side: Side, n: u64) -> Vec<u8> {
    let mut key = tagged(prefix, rows_tag(side));
    key.extend_from_slice(&n.to_be_bytes());
    key
}

/// Adds to `batch` each of `rows` as an entry of its own under `prefix`; returns how many
/// each side holds.
fn spill(batch: &mut rocksdb::WriteBatch, prefix: &[u8], rows: StoredJoinRows) -> Counts {
    let counts = Counts {
        left: rows.left.len() as u64,
        right: rows.right.len() as u64,
    };
    for (side, side_rows) in [(Side::Left, rows.left), (Side::Right, rows.right)] {
        for (n, row) in side_rows.iter().enumerate() {
            batch.put(row_key(prefix, side, n as u64), encode_row(row));
        }
    }
    counts
}

/// The rows of both sides of a join subtask, by key, in its store: see the module doc.
pub struct DiskJoinRows {
    range: KeyGroupRange,
    ttl: Option<StateTtl>,
    dir: PathBuf,
    store: Store,
    /// Keys held (expired ones included until they are cleaned up).
    len: usize,
    /// Store key where incremental TTL cleanup continues (empty: from the start).
    cleanup_cursor: Vec<u8>,
    /// Keys written since the last [`DiskJoinRows::take_changes`], by key, when changes are
    /// tracked (incremental checkpoints), at most [`changed_key_limit`].
    changed: ChangedKeysByKey,
}

impl DiskJoinRows {
    /// Empty rows for `range` in a new store at `dir` (the one created early for it, if any;
    /// `state/disk_store.rs`), expiring keys after `ttl` if set. Errors: the store cannot be
    /// created there.
    pub fn open(
        dir: &Path,
        options: DiskStateOptions,
        range: KeyGroupRange,
        ttl: Option<StateTtl>,
    ) -> Result<DiskJoinRows, DiskStateError> {
        Ok(DiskJoinRows {
            range,
            ttl,
            dir: dir.to_path_buf(),
            store: crate::state::disk_store::take_or_create(dir, options)?,
            len: 0,
            cleanup_cursor: Vec::new(),
            changed: ChangedKeysByKey::new(changed_key_limit(&options)),
        })
    }

    fn err(&self, problem: impl std::fmt::Display) -> DiskStateError {
        DiskStateError {
            dir: self.dir.clone(),
            problem: problem.to_string(),
        }
    }

    /// Keys held (expired ones included until cleanup removes them).
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Keys held, the store's table files on disk and its memory (block cache, memtables).
    pub fn size(&self) -> KeyedStateSize {
        let bytes = self.store.bytes();
        KeyedStateSize {
            entries: self.len as u64,
            disk_bytes: Some(bytes.table_files),
            memory_bytes: Some(bytes.block_cache + bytes.memtables),
            // A join's rows on disk have no write-back cache.
            cache_lookups: None,
        }
    }

    /// The live entry of the key with prefix `prefix` at `now_ms`; an expired key is removed
    /// (and `None`). Errors: the store fails; a stored value does not decode.
    fn live_entry(&mut self, prefix: &[u8], now_ms: u64) -> Result<Option<KeyRows>, DiskStateError> {
        let stored = self
            .store
            .with_value(&tagged(prefix, KEY_ENTRY), decode_value::<KeyRows>)?;
        match stored.transpose().map_err(|e| self.err(e))? {
            Some((_, written)) if self.ttl.is_some_and(|ttl| ttl.is_expired(written, now_ms)) => {
                self.remove_key(prefix)?;
                Ok(None)
            }
            Some((entry, _)) => Ok(Some(entry)),
            None => Ok(None),
        }
    }

    /// Removes every entry of the key with prefix `prefix`. Errors: the store fails.
    fn remove_key(&mut self, prefix: &[u8]) -> Result<(), DiskStateError> {
        let mut keys = Vec::new();
        self.store
            .scan(&tagged(prefix, KEY_ENTRY), Some(&tagged(prefix, 3)), |key, _| {
                keys.push(key.to_vec());
                Ok(true)
            })?;
        for key in keys {
            self.store.delete(&key)?;
        }
        self.len = self.len.saturating_sub(1);
        Ok(())
    }

    /// Adds `row` to `side` of `key` (in `key_group`, of hash `hash`) at `now_ms`, after calling
    /// `matched` with each row the other side holds, oldest first: O(rows matched) plus
    /// O([`INLINE_ROWS_UP_TO`]), whatever the rows `side` holds. Errors: the store fails; a
    /// stored row does not decode.
    #[allow(clippy::too_many_arguments)]
    pub fn add(
        &mut self,
        key_group: u32,
        hash: u64,
        key: &Key,
        side: Side,
        row: &[Datum],
        now_ms: u64,
        mut matched: impl FnMut(&[Datum]),
    ) -> Result<(), DiskStateError> {
        let prefix = store_key(key_group, hash, key);
        self.changed.record(key_group, hash, key);
        let entry = match self.live_entry(&prefix, now_ms)? {
            Some(entry) => entry,
            None => {
                self.len += 1;
                KeyRows::Inline(StoredJoinRows::default())
            }
        };
        let stored_row: Vec<StoredDatum> = row.iter().map(StoredDatum::of).collect();
        let mut batch = rocksdb::WriteBatch::default();
        let entry = match entry {
            KeyRows::Inline(mut rows) => {
                for other in rows.side(side.other()) {
                    let other = other
                        .iter()
                        .map(StoredDatum::to_datum)
                        .collect::<Result<Vec<_>, _>>()
                        .map_err(|e| self.err(e))?;
                    matched(&other);
                }
                rows.side_mut(side).push(stored_row);
                if rows.left.len() + rows.right.len() <= INLINE_ROWS_UP_TO {
                    KeyRows::Inline(rows)
                } else {
                    KeyRows::Spilled(spill(&mut batch, &prefix, rows))
                }
            }
            KeyRows::Spilled(mut counts) => {
                self.read_rows(&prefix, side.other(), *counts.of(side.other()), &mut matched)?;
                let count = counts.of(side);
                batch.put(row_key(&prefix, side, *count), encode_row(&stored_row));
                *count += 1;
                KeyRows::Spilled(counts)
            }
        };
        batch.put(tagged(&prefix, KEY_ENTRY), encode_value(&entry, now_ms));
        self.store.write(batch)
    }

    /// Calls `each` with the `count` rows `side` of the key with prefix `prefix` holds, oldest
    /// first: up to [`POINT_READS_UP_TO`] rows by point reads (each skips the table files
    /// without the row by their filters, where a scan seeks into every level), more by a scan.
    /// Errors: the store fails; a row is missing or does not decode.
    fn read_rows(
        &self,
        prefix: &[u8],
        side: Side,
        count: u64,
        each: &mut impl FnMut(&[Datum]),
    ) -> Result<(), DiskStateError> {
        let tag = rows_tag(side);
        let mut failed = None;
        let mut deliver = |bytes: &[u8]| match decode_row(bytes).and_then(|row| {
            row.into_iter()
                .map(StoredDatum::into_datum)
                .collect::<Result<Vec<_>, _>>()
        }) {
            Ok(row) => {
                each(&row);
                true
            }
            Err(e) => {
                failed = Some(e);
                false
            }
        };
        if count <= POINT_READS_UP_TO {
            for n in 0..count {
                match self.store.with_value(&row_key(prefix, side, n), &mut deliver)? {
                    Some(true) => {}
                    Some(false) => break,
                    None => {
                        failed = Some(format!("row {n} of a key's {} side is missing", side.name()));
                        break;
                    }
                }
            }
        } else {
            self.store
                .scan(&tagged(prefix, tag), Some(&tagged(prefix, tag + 1)), |_, value| {
                    Ok(deliver(value))
                })?;
        }
        match failed {
            Some(e) => Err(self.err(e)),
            None => Ok(()),
        }
    }

    /// Incremental TTL cleanup between batches: examines about [`CLEANUP_ENTRIES_PER_RECORD`]
    /// store entries per record of the batch (`records`), from where the last call stopped,
    /// and removes the keys whose last record is `ttl` old at `now_ms`. No-op without a TTL.
    /// Errors: the store fails; a store key does not decode.
    pub fn maintain(&mut self, now_ms: u64, records: usize) -> Result<(), DiskStateError> {
        let Some(ttl) = self.ttl else { return Ok(()) };
        let budget = records.saturating_mul(CLEANUP_ENTRIES_PER_RECORD);
        if budget == 0 || self.len == 0 {
            return Ok(());
        }
        let (mut examined, mut expired, mut stopped_at) = (0, Vec::new(), None);
        let mut failed = None;
        let start = std::mem::take(&mut self.cleanup_cursor);
        self.store.scan(&start, None, |key, value| {
            examined += 1;
            match parse(key) {
                Ok((_, prefix_len, KEY_ENTRY)) => match crate::state::disk::value_written_ms(value) {
                    Some(written) if ttl.is_expired(written, now_ms) => expired.push(key[..prefix_len].to_vec()),
                    Some(_) => {}
                    None => failed = Some("a key's entry without its write time".to_string()),
                },
                Ok(_) => {}
                Err(e) => failed = Some(e),
            }
            if failed.is_some() {
                return Ok(false);
            }
            if examined >= budget {
                let mut after = key.to_vec();
                after.push(0);
                stopped_at = Some(after);
                return Ok(false);
            }
            Ok(true)
        })?;
        if let Some(e) = failed {
            return Err(self.err(e));
        }
        // The end of the store reached: the next call starts from its first key.
        self.cleanup_cursor = stopped_at.unwrap_or_default();
        for prefix in expired {
            self.remove_key(&prefix)?;
        }
        Ok(())
    }

    /// Writes the keys of `blocks` (the heap's blocks: [`StoredJoinRows`] by key) in the key
    /// groups this subtask owns into the store, each stamped with its block's write time (a
    /// block without times: `now_ms`), dropping keys already `ttl` old at `now_ms`. Blocks of
    /// other key groups are ignored. A delta block (version 3, an incremental checkpoint's)
    /// applies over the blocks before it, as on the heap: each of its keys replaces the rows
    /// held (a removal leaves none). Errors: a block does not decode, named by key group; the
    /// store fails.
    pub fn restore(&mut self, blocks: Vec<KeyGroupBlock>, now_ms: u64) -> Result<(), String> {
        let range = self.range;
        for block in blocks.iter().filter(|b| range.contains(b.key_group)) {
            let delta = keyed_block::is_delta(&block.data);
            let mut keys = Vec::new();
            keyed_block::decode_each::<StoredJoinRows>(&block.data, |key, rows, written| {
                keys.push((key, rows, written));
            })
            .map_err(|e| format!("key group {}: join rows do not decode: {e}", block.key_group))?;
            let failed = |e: DiskStateError| format!("key group {}: {e}", block.key_group);
            for (key, rows, written) in keys {
                if delta {
                    // Blocks before it may hold the key: its rows are replaced.
                    let prefix = store_key(block.key_group, key_hash(&key), &key);
                    if self
                        .store
                        .with_value(&tagged(&prefix, KEY_ENTRY), |_| ())
                        .map_err(failed)?
                        .is_some()
                    {
                        self.remove_key(&prefix).map_err(failed)?;
                    }
                }
                // `None`: a delta's removal (decoding refuses one outside a delta).
                let Some(rows) = rows else { continue };
                let expired_then = block.expired_at_snapshot(written);
                let written = written.unwrap_or(now_ms);
                if expired_then || self.ttl.is_some_and(|ttl| ttl.is_expired(written, now_ms)) {
                    continue;
                }
                self.write_key(block.key_group, &key, rows, written).map_err(failed)?;
            }
        }
        Ok(())
    }

    /// Writes `rows` as the rows of `key`, last written at `written_ms` (a key not held yet),
    /// in one write batch: in its entry if they are few, else as entries of their own.
    fn write_key(
        &mut self,
        key_group: u32,
        key: &Key,
        rows: StoredJoinRows,
        written_ms: u64,
    ) -> Result<(), DiskStateError> {
        let prefix = store_key(key_group, key_hash(key), key);
        let mut batch = rocksdb::WriteBatch::default();
        let entry = if rows.left.len() + rows.right.len() <= INLINE_ROWS_UP_TO {
            KeyRows::Inline(rows)
        } else {
            KeyRows::Spilled(spill(&mut batch, &prefix, rows))
        };
        batch.put(tagged(&prefix, KEY_ENTRY), encode_value(&entry, written_ms));
        self.store.write(batch)?;
        self.len += 1;
        Ok(())
    }

    /// Entries in the store (keys' entries and rows of their own), counted by a scan.
    #[cfg(test)]
    pub(super) fn store_entries(&self) -> usize {
        self.store.count_entries()
    }

    /// Bytes written into the store so far (keys and values).
    #[cfg(test)]
    pub(super) fn store_bytes_written(&self) -> u64 {
        self.store.bytes_put()
    }

    /// Starts recording the keys written (by key, one hash-set insert per record; memory
    /// O(keys written between two snapshots), at most [`changed_key_limit`] keys: past it the
    /// set overflows and the next incremental checkpoint is a full base), for incremental
    /// checkpoints; [`DiskJoinRows::take_changes`] hands them over. Keys removed by TTL are
    /// not recorded, as the aggregations' (`state/disk.rs`): a restore drops a key its
    /// chain's base holds once it is `ttl` old, which is later than its removal.
    pub fn track_changes(&mut self) {
        self.changed.track();
    }

    /// The keys written since the previous call (or since tracking started), and starts a
    /// new record; empty unless [`DiskJoinRows::track_changes`] was called. O(1).
    pub fn take_changes(&mut self) -> ChangedKeys {
        self.changed.take()
    }

    /// The synchronous part of a snapshot at `now_ms`: a read view of the store (O(1)).
    pub fn snapshot(&self, now_ms: u64) -> DiskJoinSnapshot {
        DiskJoinSnapshot::new(StoreView::new(&self.store), self.range, self.ttl, now_ms)
    }
}
