//! The disk backend's write-back cache, by generations: the entries written most recently,
//! held as values in memory in front of the LSM store, so a key written again while it is
//! held costs a hash-table lookup instead of the store's point read (memtables, filters,
//! blocks) and memtable insert.
//!
//! Writes (updates, removals as tombstones) go into the *current* [`Generation`], a hash
//! table owned by the task thread. A generation is *frozen* ([`FrozenGeneration`], shared by
//! an `Arc`) when it reaches its size and at every barrier (an O(1) move, no store write):
//! a background thread writes it into the store in one write batch
//! (`state/disk_write_back.rs`), while the snapshot of that barrier merges the frozen
//! generations still pending over the store's read view as it scans (`state/disk_snapshot.rs`).
//! Until its write-back is done, a frozen generation is read like the store's newest layer:
//! a read looks in the current generation, then the pending ones newest first, then the store.
//!
//! Memory: [`entry_bytes`] per typed entry, plus [`ENCODED_ENTRY_BYTES`] and the encoded key
//! and value once a frozen generation is encoded for its write-back; the budget and how the
//! generations share it: `state/disk_write_back.rs`.

use crate::record::Key;
use crate::state::disk::{encode_value, store_key};
use crate::state::heap::table_hash;
use hashbrown::HashTable;
use serde::Serialize;
use std::sync::OnceLock;

/// One cached entry: a key, its value (`None`: removed, a tombstone) and the value's last
/// write.
#[derive(Clone, Debug, PartialEq)]
pub(crate) struct CachedEntry<V> {
    /// The key.
    pub key: Key,
    /// Its key group.
    pub key_group: u32,
    /// Its [`key_hash`](crate::state::key_group::key_hash).
    pub hash: u64,
    /// The value, or `None` when the key was removed.
    pub value: Option<V>,
    /// The value's last write, ms since the Unix epoch (of the removed value for a tombstone).
    pub written_ms: u64,
}

/// Bytes a typed entry of `key` is counted as: the entry itself, its index slot (4 bytes and
/// a control byte of the hash table) and the key's heap bytes (a string key longer than 24
/// bytes, which `CompactString` does not hold inline). A value's own heap bytes (a window's
/// list of windows) are counted besides, by the function the state was given
/// ([`WriteBack::count_value_bytes`](crate::state::disk_write_back::WriteBack::count_value_bytes));
/// an aggregation's values are fixed-size numbers with none.
pub(crate) fn entry_bytes<V>(key: &Key) -> u64 {
    let heap = match key {
        Key::Str(s) if s.len() > 24 => s.len(),
        _ => 0,
    };
    (std::mem::size_of::<CachedEntry<V>>() + 5 + heap) as u64
}

/// Bytes an encoded write of a frozen generation is counted as besides its key and value
/// bytes: the two `Vec` headers and the `Option` of [`StoreWrite`] (56 bytes) and the
/// allocator's rounding of two small allocations (an estimate).
pub(crate) const ENCODED_ENTRY_BYTES: u64 = 96;

/// A store key and what to write under it: the store value, or `None` to remove it.
pub(crate) type StoreWrite = (Vec<u8>, Option<Vec<u8>>);

/// A set of entries by key, each key once (the current generation; frozen, a pending one).
pub(crate) struct Generation<V> {
    /// Indexes into `entries`, hashed by the key's [`table_hash`].
    index: HashTable<u32>,
    entries: Vec<CachedEntry<V>>,
    /// Bytes counted for the entries held ([`entry_bytes`]).
    bytes: u64,
}

impl<V> Default for Generation<V> {
    fn default() -> Self {
        Generation {
            index: HashTable::new(),
            entries: Vec::new(),
            bytes: 0,
        }
    }
}

impl<V> Generation<V> {
    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.entries.is_empty()
    }

    /// Bytes counted for the entries held.
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    fn position(&self, hash: u64, key: &Key) -> Option<usize> {
        let entries = &self.entries;
        self.index
            .find(table_hash(hash), |&i| {
                let e = &entries[i as usize];
                e.hash == hash && e.key == *key
            })
            .map(|&i| i as usize)
    }

    /// The entry of `key` (whose hash is `hash`), if held.
    pub fn find(&self, hash: u64, key: &Key) -> Option<&CachedEntry<V>> {
        self.position(hash, key).map(|i| &self.entries[i])
    }

    /// The entry of `key` (whose hash is `hash`) to change in place, if held.
    pub fn find_mut(&mut self, hash: u64, key: &Key) -> Option<&mut CachedEntry<V>> {
        self.position(hash, key).map(|i| &mut self.entries[i])
    }

    /// Adds `entry`, whose key is not held, counted as [`entry_bytes`] plus `value_bytes`
    /// (the heap bytes of its value, if it has any).
    pub fn insert(&mut self, entry: CachedEntry<V>, value_bytes: u64) {
        debug_assert!(self.position(entry.hash, &entry.key).is_none(), "inserting a held key");
        self.bytes += entry_bytes::<V>(&entry.key) + value_bytes;
        let at = self.entries.len() as u32;
        let entries = &self.entries;
        self.index
            .insert_unique(table_hash(entry.hash), at, |&i| table_hash(entries[i as usize].hash));
        self.entries.push(entry);
    }

    /// Counts an entry's value changed in place as `after` heap bytes where it was counted as
    /// `before`.
    pub fn resize(&mut self, before: u64, after: u64) {
        self.bytes = (self.bytes + after).saturating_sub(before);
    }

    /// Every entry, in no particular order.
    pub fn entries(&self) -> &[CachedEntry<V>] {
        &self.entries
    }
}

/// A generation no longer written: shared by the task thread (reads), the write-back thread
/// and the snapshots of the barriers while it was pending.
pub(crate) struct FrozenGeneration<V> {
    generation: Generation<V>,
    /// Its writes in store-key order, encoded once by whoever needs them first.
    encoded: OnceLock<Vec<StoreWrite>>,
}

impl<V: Serialize> FrozenGeneration<V> {
    /// Freezes `generation`.
    pub fn new(generation: Generation<V>) -> Self {
        FrozenGeneration {
            generation,
            encoded: OnceLock::new(),
        }
    }

    /// The entry of `key` (whose hash is `hash`), if held.
    pub fn find(&self, hash: u64, key: &Key) -> Option<&CachedEntry<V>> {
        self.generation.find(hash, key)
    }

    /// Bytes it is counted as: its typed entries and their encoded writes (estimated before
    /// they are encoded: the typed bytes again, at least [`ENCODED_ENTRY_BYTES`] per entry).
    pub fn bytes(&self) -> u64 {
        let typed = self.generation.bytes();
        typed + typed.max(ENCODED_ENTRY_BYTES * self.generation.len() as u64)
    }
}

/// The writes of a frozen generation, whatever its value type: what a snapshot merges over
/// the store's read view and the write-back thread writes.
pub(crate) trait EncodedWrites: Send + Sync {
    /// Every write, in ascending store-key order, each store key once.
    fn writes(&self) -> &[StoreWrite];
}

impl<V: Serialize + Send + Sync> EncodedWrites for FrozenGeneration<V> {
    fn writes(&self) -> &[StoreWrite] {
        self.encoded.get_or_init(|| {
            let mut writes: Vec<StoreWrite> = self
                .generation
                .entries()
                .iter()
                .map(|e| {
                    let value = e.value.as_ref().map(|v| encode_value(v, e.written_ms));
                    (store_key(e.key_group, e.hash, &e.key), value)
                })
                .collect();
            writes.sort_unstable_by(|a, b| a.0.cmp(&b.0));
            writes
        })
    }
}

/// The writes of `overlays` (oldest first) to the store keys from `from` on that start with
/// `prefix`, the newest write of each key winning, in ascending store-key order: what a
/// read view taken while they were pending misses (or holds already: the same values).
pub(crate) fn overlay_writes<'a>(
    overlays: &'a [std::sync::Arc<dyn EncodedWrites>],
    prefix: &[u8],
) -> std::collections::BTreeMap<&'a [u8], Option<&'a [u8]>> {
    let mut out = std::collections::BTreeMap::new();
    for overlay in overlays {
        let writes = overlay.writes();
        let start = writes.partition_point(|(k, _)| k.as_slice() < prefix);
        for (key, value) in writes[start..].iter().take_while(|(k, _)| k.starts_with(prefix)) {
            out.insert(key.as_slice(), value.as_deref());
        }
    }
    out
}

/// The newest write of `overlays` (oldest first) to `store_key`, if any: `Some(None)` for a
/// removal (one binary search per generation: the tests' reference for [`OverlayCursors`]).
#[cfg(test)]
pub(crate) fn overlay_write<'a>(
    overlays: &'a [std::sync::Arc<dyn EncodedWrites>],
    store_key: &[u8],
) -> Option<Option<&'a [u8]>> {
    overlays.iter().rev().find_map(|overlay| {
        let writes = overlay.writes();
        writes
            .binary_search_by(|(k, _)| k.as_slice().cmp(store_key))
            .ok()
            .map(|at| writes[at].1.as_deref())
    })
}

/// Lookups of store keys in ascending order in the writes of generations ([`EncodedWrites`],
/// oldest first): each generation's position moves only forward, by galloping (1, 2, 4, ...
/// entries, then a binary search within the last step), so looking up n sorted keys in a
/// generation of m writes costs O(n log(m / n)) comparisons at most, not n binary searches
/// over all m.
pub(crate) struct OverlayCursors<'a> {
    /// Each generation's writes and the index of its first write not below the last key
    /// looked up, newest generation first.
    cursors: Vec<(&'a [StoreWrite], usize)>,
}

impl<'a> OverlayCursors<'a> {
    /// Cursors at the start of `overlays` (oldest first).
    pub fn new(overlays: &'a [std::sync::Arc<dyn EncodedWrites>]) -> Self {
        OverlayCursors {
            cursors: overlays.iter().rev().map(|o| (o.writes(), 0)).collect(),
        }
    }

    /// The newest write of the generations to `store_key` (`Some(None)`: a removal), as
    /// [`overlay_write`]; keys must come in ascending order (a smaller key than the last one
    /// is not found).
    pub fn newest_write(&mut self, store_key: &[u8]) -> Option<Option<&'a [u8]>> {
        for (writes, at) in &mut self.cursors {
            *at = gallop_to(writes, *at, store_key);
            if let Some((key, value)) = writes.get(*at)
                && key.as_slice() == store_key
            {
                return Some(value.as_deref());
            }
        }
        None
    }
}

/// The index of the first write of `writes` (ascending) from `from` on whose key is not
/// below `key`: galloping from `from`, then a binary search within the last step.
fn gallop_to(writes: &[StoreWrite], from: usize, key: &[u8]) -> usize {
    let below = |i: usize| writes[i].0.as_slice() < key;
    if from >= writes.len() || !below(from) {
        return from;
    }
    // writes[lo] is below `key`; find hi with writes[hi] not below (or the end).
    let (mut lo, mut step) = (from, 1usize);
    let hi = loop {
        let next = lo.saturating_add(step);
        if next >= writes.len() {
            break writes.len();
        }
        if !below(next) {
            break next;
        }
        lo = next;
        step = step.saturating_mul(2);
    };
    lo + 1 + writes[lo + 1..hi].partition_point(|(k, _)| k.as_slice() < key)
}

#[cfg(test)]
#[path = "disk_cache_tests.rs"]
mod tests;
