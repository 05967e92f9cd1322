//! The disk backend's snapshot ([`DiskSnapshot`]): the store's read view (a RocksDB snapshot) with the
//! write-back cache's generations pending at the barrier merged over it, encoded off the task
//! thread into the heap backend's key-group blocks, byte for byte (see `state/disk.rs` for the
//! store layout, `state/disk_write_back.rs` for the generations).

use crate::state::changed_keys::{ChangedKeys, GroupChanges};
use crate::state::disk::{
    DiskStateError, KEY_PREFIX_LEN, VALUE_PREFIX_LEN, key_group_end, key_group_prefix, store_key, store_key_group,
    store_key_prefix, value_written_ms,
};
use crate::state::disk_cache::{EncodedWrites, OverlayCursors, overlay_writes};
use crate::state::disk_rocks::StoreView;
use crate::state::key_group::KeyGroupRange;
use crate::state::keyed_block::{self, BLOCK_VERSION_DELTA, BLOCK_VERSION_TTL, VERSIONED_PREFIX};
use crate::state::parallel;
use crate::state::snapshot::{KeyGroupBlock, push_varint};
use crate::state::ttl::{StateTtl, expired};
use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

/// Blocks (key groups) each scan thread of a full disk snapshot may encode ahead of the
/// upload: the encoder's memory is at most `workers × 2` key-group blocks (plus the upload's
/// pieces and parts, `checkpoint/state_upload.rs`), not a share of the state.
pub const BLOCKS_IN_FLIGHT_PER_WORKER: usize = 2;

/// Threads that scan the store for a full disk snapshot: [`parallel::max_workers`].
pub fn scan_workers() -> usize {
    parallel::max_workers()
}

/// Room left at the front of a block's buffer for its header: the versioned prefix (10 bytes),
/// the version byte and the entry count as a varint (at most 10 bytes).
const HEADER_ROOM: usize = VERSIONED_PREFIX.len() + 1 + 10;

/// One key group's block being assembled from stored bytes: `data` holds [`HEADER_ROOM`] bytes
/// of room for the header, then the entries, so finishing the block writes the header in place
/// instead of copying the entries into a second buffer.
pub(crate) struct BlockBuilder {
    key_group: u32,
    /// Entries written so far.
    pub(crate) entries: u64,
    /// [`HEADER_ROOM`] bytes, then the entries written so far.
    pub(crate) data: Vec<u8>,
}

impl BlockBuilder {
    /// An empty block of `key_group` with room for `expected_bytes` of entries (the previous
    /// key group's size: key groups of one subtask hold about as many keys each, so the
    /// buffer rarely grows, and growing is a copy of everything written so far). The buffer
    /// is one the upload handed back ([`keyed_block::recycled_buffer`]) when there is one: a
    /// new one is fresh memory whose pages the kernel zeroes on first touch, as the heap
    /// encoder found (docs/runtime/state-backends-log.md, "Heap checkpoint throughput").
    pub(crate) fn new(key_group: u32, expected_bytes: usize) -> BlockBuilder {
        let mut data = keyed_block::recycled_buffer(HEADER_ROOM + expected_bytes);
        data.clear();
        data.resize(HEADER_ROOM, 0);
        BlockBuilder {
            key_group,
            entries: 0,
            data,
        }
    }

    /// Bytes of entries written so far.
    pub(crate) fn body_len(&self) -> usize {
        self.data.len() - HEADER_ROOM
    }

    /// The block: `Vec<(Key, V)>` (version 1) or `Vec<(Key, V, u64)>` after the versioned
    /// prefix (version 2), as [`keyed_block`] encodes them: postcard writes a sequence as its
    /// varint length followed by its elements, and a tuple as its fields in order. The header
    /// goes into the room in front of the entries; the unused part of the room is removed (a
    /// move of the entries within the buffer, no allocation).
    pub(crate) fn finish(self, with_times: bool) -> KeyGroupBlock {
        let mut header = Vec::with_capacity(HEADER_ROOM);
        if with_times {
            header.extend_from_slice(&VERSIONED_PREFIX);
            header.push(BLOCK_VERSION_TTL);
        }
        push_varint(&mut header, self.entries);
        let mut data = self.data;
        let start = HEADER_ROOM - header.len();
        data[start..HEADER_ROOM].copy_from_slice(&header);
        data.drain(..start);
        KeyGroupBlock {
            expired_through_ms: None,
            key_group: self.key_group,
            entries: self.entries,
            data: data.into(),
        }
    }
}

/// The state of a subtask as of a barrier: a read view of its store and the write-back
/// cache's generations pending at the barrier, oldest first, merged over it (`Send` to an
/// encoder thread). Dropping it lets the store discard versions only it still needed, and
/// the generations be freed once written back.
pub struct DiskSnapshot {
    /// A write-back of the cache failed before the barrier: the state is unknown, so encoding
    /// fails with this error.
    pub(crate) write_back_error: Option<DiskStateError>,
    /// The generations pending at the barrier, oldest first: each store key's newest write
    /// among them wins over the view (which may hold some of them already: the same values).
    pub(crate) overlays: Vec<Arc<dyn EncodedWrites>>,
    /// What a delta reads changed keys from before the view, oldest first: the generations
    /// kept after their write-back then `overlays` (`WriteBack::for_delta`; empty when none
    /// are kept, and then `overlays` serve).
    pub(crate) delta_overlays: Vec<Arc<dyn EncodedWrites>>,
    pub(crate) view: StoreView,
    pub(crate) dir: PathBuf,
    pub(crate) ttl: Option<StateTtl>,
    pub(crate) now_ms: u64,
    /// The key groups of the store (each one range scan of a full encode).
    pub(crate) range: KeyGroupRange,
}

impl DiskSnapshot {
    /// Encodes one block per key group with live entries, in key-group order: version 1
    /// without a TTL, version 2 (with write times) with one, exactly as the heap backend.
    /// Entries expired at the barrier are left out. Errors: the store fails to read, or holds
    /// an entry it did not write.
    pub fn encode(self) -> Result<Vec<KeyGroupBlock>, DiskStateError> {
        let mut blocks = Vec::new();
        self.encode_each(&mut |block| {
            blocks.push(block);
            Ok::<(), DiskStateError>(())
        })?;
        Ok(blocks)
    }

    /// [`DiskSnapshot::encode`] as a stream: blocks are handed to `emit` in key-group order.
    /// Each key group is one range scan of the read view (shared by the threads), encoded on
    /// one of up to [`scan_workers`] threads that live for the whole encode; at most
    /// [`BLOCKS_IN_FLIGHT_PER_WORKER`] blocks per worker are encoded ahead of `emit`
    /// ([`parallel::for_each_in_order`]), so memory holds a few key groups' blocks whatever the
    /// size of the state. Stops at the first error of `emit`.
    pub fn encode_each<E: From<DiskStateError>>(
        self,
        emit: &mut dyn FnMut(KeyGroupBlock) -> Result<(), E>,
    ) -> Result<(), E> {
        self.encode_each_on(scan_workers(), emit).map(|_| ())
    }

    /// [`DiskSnapshot::encode_each`] on up to `workers` threads (the same blocks for any
    /// count). Returns the most blocks that were encoded and not yet handed over at once (at
    /// most `workers` × [`BLOCKS_IN_FLIGHT_PER_WORKER`]).
    pub fn encode_each_on<E: From<DiskStateError>>(
        self,
        workers: usize,
        emit: &mut dyn FnMut(KeyGroupBlock) -> Result<(), E>,
    ) -> Result<usize, E> {
        if let Some(e) = &self.write_back_error {
            return Err(E::from(e.clone()));
        }
        let workers = workers.max(1);
        let key_groups: Vec<u32> = (self.range.start..=self.range.end).collect();
        // The last key group's entry bytes, to size the next one's buffer (key groups of one
        // subtask hold about as many keys each).
        let expected_bytes = AtomicUsize::new(0);
        parallel::for_each_in_order(
            key_groups,
            workers,
            workers * BLOCKS_IN_FLIGHT_PER_WORKER,
            |key_group| self.encode_key_group(key_group, &expected_bytes),
            &mut |block| match block {
                Ok(Some(block)) => emit(block),
                Ok(None) => Ok(()),
                Err(e) => Err(E::from(e)),
            },
        )
    }

    /// The block of `key_group` if it holds live entries: one range scan of the read view.
    /// `expected_bytes` carries the previous block's size to the next (a buffer sized right
    /// is not copied while it grows).
    fn encode_key_group(
        &self,
        key_group: u32,
        expected_bytes: &AtomicUsize,
    ) -> Result<Option<KeyGroupBlock>, DiskStateError> {
        let err = |problem: String| DiskStateError {
            dir: self.dir.clone(),
            problem,
        };
        let with_times = self.ttl.is_some();
        let mut block: Option<BlockBuilder> = None;
        let from = key_group_prefix(key_group);
        let mut add = |key: &[u8], value: &[u8]| -> Result<(), DiskStateError> {
            let (Some(entry_group), Some(written)) = (store_key_group(key), value_written_ms(value)) else {
                return Err(err("an entry the disk backend did not write".into()));
            };
            if entry_group != key_group || key.len() < KEY_PREFIX_LEN {
                return Err(err("an entry the disk backend did not write".into()));
            }
            if expired(self.ttl, written, self.now_ms) {
                return Ok(());
            }
            let block = block.get_or_insert_with(|| {
                let expected = expected_bytes.load(Ordering::Relaxed);
                BlockBuilder::new(key_group, expected + expected / 8)
            });
            block.entries += 1;
            block.data.extend_from_slice(&key[KEY_PREFIX_LEN..]);
            block.data.extend_from_slice(&value[VALUE_PREFIX_LEN..]);
            if with_times {
                push_varint(&mut block.data, written);
            }
            Ok(())
        };
        // The pending generations' writes to this key group, merged with the scan in
        // store-key order: a written key's newest write replaces the view's entry.
        let mut writes = overlay_writes(&self.overlays, &from).into_iter().peekable();
        let until = key_group_end(key_group);
        self.view
            .scan(&from, until.as_ref().map(|after| after.as_slice()), |key, value| {
                while let Some((written_key, written)) = writes.next_if(|(k, _)| *k < key) {
                    if let Some(written) = written {
                        add(written_key, written)?;
                    }
                }
                match writes.next_if(|(k, _)| *k == key) {
                    Some((_, Some(written))) => add(key, written)?,
                    Some((_, None)) => {}
                    None => add(key, value)?,
                }
                Ok(true)
            })?;
        for (written_key, written) in writes {
            if let Some(written) = written {
                add(written_key, written)?;
            }
        }
        Ok(block.map(|done| {
            expected_bytes.store(done.body_len(), Ordering::Relaxed);
            done.finish(with_times)
        }))
    }

    /// Encodes one delta block (`keyed_block` version 3, byte for byte what the heap backend
    /// writes for the same entries) per key group of `changes`: each changed key with its value
    /// and last write as of the barrier, or as removed (`None`, write time 0) when the view does
    /// not hold it or it expired by then; entries in store-key order. A key recorded by key is
    /// read from the newest generation holding it (`delta_overlays`: kept after their
    /// write-back, or pending), else by a point lookup of the view; a written hash is resolved
    /// by a prefix scan of key group + hash; a key
    /// sharing a written hash is written with its own state (see `state/changed_keys.rs`).
    /// O(changed keys), whatever the size of the state. Errors: the store fails to read, or
    /// holds an entry it did not write.
    pub fn encode_delta(self, changes: &ChangedKeys) -> Result<Vec<KeyGroupBlock>, DiskStateError> {
        if let Some(e) = &self.write_back_error {
            return Err(e.clone());
        }
        let err = |problem: String| DiskStateError {
            dir: self.dir.clone(),
            problem,
        };
        if changes.is_overflowed() {
            // The incremental tracker writes a base for an overflowed set; a delta from it
            // would leave changed keys out.
            return Err(err("a delta was asked for from an overflowed changed-key set".into()));
        }
        let mut blocks = Vec::new();
        for (key_group, group_changes) in changes.by_key_group() {
            let entries = self.changed_entries(key_group, group_changes)?;
            let mut body = Vec::with_capacity(entries.len() * 24);
            for (key, value) in &entries {
                body.extend_from_slice(&key[KEY_PREFIX_LEN..]);
                let live = match value {
                    Some(value) => {
                        let written = value_written_ms(value)
                            .ok_or_else(|| err("an entry the disk backend did not write".into()))?;
                        (!expired(self.ttl, written, self.now_ms)).then_some((value, written))
                    }
                    None => None,
                };
                // postcard: an `Option` is a tag byte (0 none, 1 some) and the value; the write
                // time a varint.
                match live {
                    Some((value, written)) => {
                        body.push(1);
                        body.extend_from_slice(&value[VALUE_PREFIX_LEN..]);
                        // Without `ttl`, no write time (0; `state/keyed_block.rs`).
                        push_varint(&mut body, if self.ttl.is_some() { written } else { 0 });
                    }
                    None => {
                        body.push(0);
                        push_varint(&mut body, 0);
                    }
                }
            }
            let mut data = Vec::with_capacity(body.len() + 24);
            data.extend_from_slice(&VERSIONED_PREFIX);
            data.push(BLOCK_VERSION_DELTA);
            push_varint(&mut data, entries.len() as u64);
            data.extend_from_slice(&body);
            blocks.push(KeyGroupBlock {
                expired_through_ms: None,
                key_group,
                entries: entries.len() as u64,
                data: data.into(),
            });
        }
        Ok(blocks)
    }

    /// One key group's changed entries in the read view, `(store key, stored value or None
    /// when the view does not hold the key)`, in store-key order, each key once: each key
    /// recorded by key (a point lookup, in store-key order; what this backend records) and
    /// every entry under a written hash (a prefix scan of key group + hash: two keys sharing
    /// the hash are both read; only a set recorded on the heap holds hashes). Errors: the store
    /// fails to read.
    fn changed_entries(&self, key_group: u32, changes: &GroupChanges) -> Result<Vec<StoreRead>, DiskStateError> {
        let mut store_keys: Vec<Vec<u8>> = changes
            .keys
            .iter()
            .map(|(hash, key)| store_key(key_group, hash.rotate_right(32), key))
            .collect();
        store_keys.sort_unstable();
        let mut out = Vec::with_capacity(changes.len());
        // The kept and pending generations, newest first, each searched from where the
        // previous (smaller) key was found.
        let overlays = if self.delta_overlays.is_empty() {
            &self.overlays
        } else {
            &self.delta_overlays
        };
        let mut writes = OverlayCursors::new(overlays);
        for key in store_keys {
            // The newest write of a generation, else the view's entry.
            let value = match writes.newest_write(&key) {
                Some(written) => written.map(<[u8]>::to_vec),
                None => self.view.get(&key)?,
            };
            out.push((key, value));
        }
        if changes.written.is_empty() {
            return Ok(out);
        }
        // The inverse of `table_hash` (a rotation by 32 bits); in store-key order.
        let mut hashes: Vec<u64> = changes.written.iter().map(|h| h.rotate_right(32)).collect();
        hashes.sort_unstable();
        for hash in hashes {
            let prefix = store_key_prefix(key_group, hash);
            let mut under_hash = std::collections::BTreeMap::new();
            let after = prefix_end(&prefix);
            self.view.scan(&prefix, after.as_deref(), |key, value| {
                under_hash.insert(key.to_vec(), Some(value.to_vec()));
                Ok(true)
            })?;
            for (key, written) in overlay_writes(&self.overlays, &prefix) {
                under_hash.insert(key.to_vec(), written.map(<[u8]>::to_vec));
            }
            // A key removed by a pending write is not held (a written hash lists held keys).
            out.extend(under_hash.into_iter().filter(|(_, value)| value.is_some()));
        }
        // A key recorded by key and found under a written hash too: one entry (the same
        // read view, so the same state).
        out.sort_by(|a, b| a.0.cmp(&b.0));
        out.dedup_by(|a, b| a.0 == b.0);
        Ok(out)
    }
}

/// A store key and what the read view holds under it (see
/// [`DiskSnapshot::encode_delta`]).
type StoreRead = (Vec<u8>, Option<Vec<u8>>);

/// The first key after every key that starts with `prefix` (`None`: no such key, the prefix is
/// all `0xff`).
fn prefix_end(prefix: &[u8]) -> Option<Vec<u8>> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < u8::MAX {
            end.push(last + 1);
            return Some(end);
        }
    }
    None
}

#[cfg(test)]
mod tests {
    use crate::record::Key;
    use crate::state::disk::{DiskKeyedState, DiskStateOptions};
    use crate::state::key_group::{key_group_of_hash, key_group_range, key_hash};
    use crate::state::keyed_block;

    /// Blocks encoded into buffers the upload handed back (full of an earlier block's bytes)
    /// are byte for byte the blocks encoded into new buffers. The key groups are large enough
    /// (about 70 KB of entries each) that their buffers come from the recycled ones.
    #[test]
    fn blocks_encoded_into_recycled_buffers_are_the_same_bytes() {
        let dir = tempfile::tempdir().unwrap();
        let range = key_group_range(0, 1, 8);
        let mut state =
            DiskKeyedState::<i64>::open(&dir.path().join("count-0"), range, None, DiskStateOptions::default()).unwrap();
        for i in 0..40_000i64 {
            let key = Key::Str(format!("key-{i}").into());
            let hash = key_hash(&key);
            state
                .update(key_group_of_hash(hash, 8), hash, &key, 0, |_| i * 3)
                .unwrap();
        }
        keyed_block::drop_recycled();
        let fresh = state.snapshot(0).encode().unwrap();
        assert!(
            fresh.iter().all(|b| b.data.len() > 40_000),
            "key groups too small to recycle"
        );
        for _ in 0..4 {
            let mut junk = vec![0xAB; 1 << 20];
            junk.truncate(70_000);
            keyed_block::recycle(junk);
        }
        let recycled = state.snapshot(0).encode().unwrap();
        keyed_block::drop_recycled();
        assert_eq!(recycled, fresh);
    }
}
