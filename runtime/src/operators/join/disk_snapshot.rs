//! The snapshot of a join's rows on disk ([`DiskJoinSnapshot`]): the heap's key-group blocks
//! (`state/keyed_block.rs`, a savepoint is backend-independent), assembled from the stored bytes
//! as they are, without decoding a row.
//!
//! A key's value in a block is its [`StoredJoinRows`](super::rows::StoredJoinRows) as postcard writes them: the left rows'
//! count (a LEB128 varint) and rows, then the right rows' count and rows. A key whose rows
//! are inline holds exactly these bytes in its entry (after the write time and the variant
//! byte); a key whose rows are entries of their own has each row stored as postcard writes a
//! row, so its value is the counts written here around the rows' bytes. Decoding every row
//! into values and encoding it again took 2.5× as long (700–780 ms against 290–350 ms for
//! 4M rows over 1M keys; docs/runtime/state-backends-log.md, "Join rows on disk, one entry
//! per row past 16").

use super::disk_rows::{INLINE_VARIANT, KEY_ENTRY, SPILLED_VARIANT, parse, rows_tag};
use crate::job::join::Side;
use crate::state::changed_keys::ChangedKeys;
use crate::state::disk::{VALUE_PREFIX_LEN, value_written_ms};
use crate::state::disk_key::{KEY_PREFIX_LEN, key_group_end, key_group_prefix, store_key};
use crate::state::disk_rocks::StoreView;
use crate::state::disk_snapshot::{BLOCKS_IN_FLIGHT_PER_WORKER, BlockBuilder, scan_workers};
use crate::state::key_group::KeyGroupRange;
use crate::state::keyed_block::{BLOCK_VERSION_DELTA, VERSIONED_PREFIX};
use crate::state::parallel;
use crate::state::snapshot::{KeyGroupBlock, push_varint};
use crate::state::ttl::StateTtl;
use std::sync::atomic::{AtomicUsize, Ordering};

/// A snapshot of a join's rows on disk (`disk_rows.rs`), encoded on the encoder's thread.
pub struct DiskJoinSnapshot {
    view: StoreView,
    range: KeyGroupRange,
    ttl: Option<StateTtl>,
    now_ms: u64,
}

/// One side's rows of a key whose rows are entries of their own: how many, and their bytes
/// back to back.
#[derive(Default)]
struct SideBytes {
    count: u64,
    bytes: Vec<u8>,
}

/// One key's entries while a key group is read.
struct KeyBeingRead {
    /// The key's store key up to its tag (`P`), which ends with the key as postcard encodes it.
    prefix: Vec<u8>,
    /// Its entry's write time (`None` before the entry is read).
    written: Option<u64>,
    /// The `StoredJoinRows` bytes of an inline entry.
    inline: Option<Vec<u8>>,
    left: SideBytes,
    right: SideBytes,
}

impl KeyBeingRead {
    /// The key's `StoredJoinRows` bytes, appended to `out`.
    fn push_rows(self, out: &mut Vec<u8>) {
        match self.inline {
            Some(rows) => out.extend_from_slice(&rows),
            None => {
                for side in [self.left, self.right] {
                    push_varint(out, side.count);
                    out.extend_from_slice(&side.bytes);
                }
            }
        }
    }
}

/// A key group's block being read: its number, the block (made at its first live key) and
/// the size of the key group's block before (the next buffer's expected size).
struct GroupBeingRead {
    key_group: u32,
    block: Option<BlockBuilder>,
    expected_bytes: usize,
}

impl DiskJoinSnapshot {
    /// The snapshot of `view` (a read view of the join's store, taken on the task thread) for
    /// the key groups `range` at `now_ms` (ms since the Unix epoch), leaving out keys `ttl` old.
    pub(crate) fn new(view: StoreView, range: KeyGroupRange, ttl: Option<StateTtl>, now_ms: u64) -> DiskJoinSnapshot {
        DiskJoinSnapshot {
            view,
            range,
            ttl,
            now_ms,
        }
    }

    /// One block per key group with live keys, in key-group order, each handed to `emit` as
    /// soon as it is assembled: the heap's block format (version 2, with write times, when the
    /// join has a `ttl`; else version 1) and, per key group, the heap's entries byte for byte
    /// and the same length, the keys in the store's order (the heap writes its hash table's:
    /// a restore reads either). Keys `ttl` old at the snapshot are left out.
    /// Key groups are scanned on up to [`scan_workers`] threads, at most
    /// [`BLOCKS_IN_FLIGHT_PER_WORKER`] blocks each ahead of `emit`, as the aggregations' disk
    /// snapshot does. Errors: the store fails or holds an entry this module did not write;
    /// `emit`'s.
    pub fn encode_each(self, emit: &mut dyn FnMut(KeyGroupBlock) -> Result<(), String>) -> Result<(), String> {
        let workers = scan_workers();
        let key_groups: Vec<u32> = (self.range.start..=self.range.end).collect();
        // The last key group's entry bytes, to size the next one's buffer.
        let expected_bytes = AtomicUsize::new(0);
        parallel::for_each_in_order(
            key_groups,
            workers,
            workers * BLOCKS_IN_FLIGHT_PER_WORKER,
            |key_group| self.encode_key_group(key_group, &expected_bytes),
            &mut |block| match block {
                Ok(Some(block)) => emit(block),
                Ok(None) => Ok(()),
                Err(e) => Err(e),
            },
        )
        .map(|_| ())
    }

    /// The block of `key_group` if it holds live keys: one range scan of the read view.
    fn encode_key_group(&self, key_group: u32, expected_bytes: &AtomicUsize) -> Result<Option<KeyGroupBlock>, String> {
        let mut group = GroupBeingRead {
            key_group,
            block: None,
            expected_bytes: expected_bytes.load(Ordering::Relaxed),
        };
        let mut current: Option<KeyBeingRead> = None;
        let mut failed = None;
        let end = key_group_end(key_group);
        self.view
            .scan(
                &key_group_prefix(key_group),
                end.as_ref().map(|e| &e[..]),
                |store_key, value| match read_entry(store_key, value, &mut current) {
                    Ok(done) => {
                        self.finish_key(done, &mut group);
                        Ok(true)
                    }
                    Err(e) => {
                        failed = Some(e);
                        Ok(false)
                    }
                },
            )
            .map_err(|e| e.to_string())?;
        if let Some(e) = failed {
            return Err(format!("key group {key_group}: {e}"));
        }
        self.finish_key(current.take(), &mut group);
        Ok(group.block.map(|block| {
            expected_bytes.store(block.body_len(), Ordering::Relaxed);
            block.finish(self.ttl.is_some())
        }))
    }

    /// The key read, with its entry's write time, if it is live at the snapshot's time.
    fn live(&self, read: Option<KeyBeingRead>) -> Option<(KeyBeingRead, u64)> {
        // Rows sort after their key's entry, so the entry was read first; rows without an
        // entry (none are written so) are left out.
        let read = read?;
        let written = read.written?;
        if self.ttl.is_some_and(|ttl| ttl.is_expired(written, self.now_ms)) {
            return None;
        }
        Some((read, written))
    }

    /// Adds the key read to its group's block if it is live at the snapshot's time: its key
    /// (the bytes ending its prefix), its rows and, with a TTL, its write time as a varint.
    fn finish_key(&self, read: Option<KeyBeingRead>, group: &mut GroupBeingRead) {
        let Some((read, written)) = self.live(read) else { return };
        let expected = group.expected_bytes;
        let block = group
            .block
            .get_or_insert_with(|| BlockBuilder::new(group.key_group, expected + expected / 8));
        block.entries += 1;
        block.data.extend_from_slice(&read.prefix[KEY_PREFIX_LEN..]);
        read.push_rows(&mut block.data);
        if self.ttl.is_some() {
            push_varint(&mut block.data, written);
        }
    }

    /// A delta block (version 3, `state/keyed_block.rs`) for each key group with keys in
    /// `changes`, in key-group order, as the heap writes one: each changed key with its rows
    /// and write time at the snapshot (0 without `ttl`), or as removed when the view holds none or they are
    /// `ttl` old. Each key costs a point read of its entry, plus a scan of its rows when they
    /// are entries of their own. Errors: `changes` overflowed or holds keys by hash only (the
    /// heap's record; [`DiskJoinRows`](super::disk_rows::DiskJoinRows) records keys); the
    /// store fails or holds an entry this module did not write.
    pub fn encode_delta(&self, changes: &ChangedKeys) -> Result<Vec<KeyGroupBlock>, String> {
        if changes.is_overflowed() {
            return Err("a join's delta was asked for from an overflowed changed-key set".into());
        }
        let mut blocks = Vec::new();
        for (key_group, group) in changes.by_key_group() {
            if !group.written.is_empty() || group.scan_from_epoch.is_some() {
                return Err(format!(
                    "key group {key_group}: a join's changed keys on disk are recorded by key"
                ));
            }
            // `rotate_right(32)` inverts the set's table hash (`state/changed_keys.rs`).
            let mut prefixes: Vec<Vec<u8>> = group
                .keys
                .iter()
                .map(|(hash, key)| store_key(key_group, hash.rotate_right(32), key))
                .collect();
            prefixes.sort_unstable();
            let mut data = Vec::with_capacity(VERSIONED_PREFIX.len() + 1 + 10 + prefixes.len() * 32);
            data.extend_from_slice(&VERSIONED_PREFIX);
            data.push(BLOCK_VERSION_DELTA);
            push_varint(&mut data, prefixes.len() as u64);
            for prefix in &prefixes {
                // postcard: the key, an `Option` as a tag byte (0 none, 1 some) and the
                // value, the write time as a varint (0 for a removal).
                data.extend_from_slice(&prefix[KEY_PREFIX_LEN..]);
                match self
                    .read_key(prefix)
                    .map_err(|e| format!("key group {key_group}: {e}"))?
                {
                    Some((read, written)) => {
                        data.push(1);
                        read.push_rows(&mut data);
                        // Without `ttl`, no write time (0; `state/keyed_block.rs`).
                        push_varint(&mut data, if self.ttl.is_some() { written } else { 0 });
                    }
                    None => {
                        data.push(0);
                        push_varint(&mut data, 0);
                    }
                }
            }
            blocks.push(KeyGroupBlock {
                expired_through_ms: None,
                key_group,
                entries: prefixes.len() as u64,
                data: data.into(),
            });
        }
        Ok(blocks)
    }

    /// The key with store-key prefix `prefix` as the view holds it, if live: a point read of
    /// its entry, then a scan of its rows when they are entries of their own.
    fn read_key(&self, prefix: &[u8]) -> Result<Option<(KeyBeingRead, u64)>, String> {
        let mut entry_key = prefix.to_vec();
        entry_key.push(KEY_ENTRY);
        let Some(value) = self.view.get(&entry_key).map_err(|e| e.to_string())? else {
            return Ok(None);
        };
        let mut current = None;
        read_entry(&entry_key, &value, &mut current)?;
        if current.as_ref().is_some_and(|key| key.inline.is_none()) {
            let mut from = prefix.to_vec();
            from.push(rows_tag(Side::Left));
            let mut until = prefix.to_vec();
            until.push(rows_tag(Side::Right) + 1);
            let mut failed = None;
            self.view
                .scan(&from, Some(&until), |store_key, value| {
                    match read_entry(store_key, value, &mut current) {
                        Ok(_) => Ok(true),
                        Err(e) => {
                            failed = Some(e);
                            Ok(false)
                        }
                    }
                })
                .map_err(|e| e.to_string())?;
            if let Some(e) = failed {
                return Err(e);
            }
        }
        Ok(self.live(current))
    }
}

/// Adds one store entry to the key being read (`current`); when the entry is another key's,
/// the one before is returned, finished, and `current` starts the new one.
fn read_entry(
    store_key: &[u8],
    value: &[u8],
    current: &mut Option<KeyBeingRead>,
) -> Result<Option<KeyBeingRead>, String> {
    let (_, prefix_len, tag) = parse(store_key)?;
    let prefix = &store_key[..prefix_len];
    let mut finished = None;
    if current.as_ref().is_none_or(|c| c.prefix != prefix) {
        finished = current.take();
        *current = Some(KeyBeingRead {
            prefix: prefix.to_vec(),
            written: None,
            inline: None,
            left: SideBytes::default(),
            right: SideBytes::default(),
        });
    }
    let reading = current.as_mut().expect("set above");
    let side = match tag {
        KEY_ENTRY => {
            let written = value_written_ms(value).ok_or("a join entry shorter than its write time")?;
            reading.written = Some(written);
            let encoded = &value[VALUE_PREFIX_LEN..];
            match encoded.first() {
                Some(&INLINE_VARIANT) => reading.inline = Some(encoded[1..].to_vec()),
                Some(&SPILLED_VARIANT) => {}
                _ => return Err("a join entry of an unknown kind".into()),
            }
            return Ok(finished);
        }
        tag if tag == rows_tag(Side::Left) => &mut reading.left,
        tag if tag == rows_tag(Side::Right) => &mut reading.right,
        other => return Err(format!("a store key with the unknown tag {other}")),
    };
    side.count += 1;
    side.bytes.extend_from_slice(value);
    Ok(finished)
}
