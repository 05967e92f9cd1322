//! Keyed state on heap for integer keys: one hash table per key group from `i64` to the value,
//! probed with the hash `keyBy` computed (as [`HeapKeyedState`](super::heap::HeapKeyedState)
//! does), its entries 8 bytes of key and the value, with no [`Key`] enum to compare and no
//! write time (it is used only for steps without `ttl`).
//!
//! [`KeyedState`](super::backend::KeyedState) starts every heap step without `ttl` on this
//! table and turns it into the generic one, entries moved over, at the first key that is not
//! an integer, when incremental checkpoints start tracking changes, or when a restored block
//! holds another key or is a delta. Its blocks are the generic table's version-1 blocks
//! (`postcard(Vec<(Key, V)>)`, [`keyed_block::encode_v1`]), so savepoints and checkpoints
//! restore on either table, at any parallelism.
//!
//! Snapshots are copy-on-write per key group: the synchronous part moves each non-empty
//! group's table into an `Arc` shared with the snapshot (O(key groups)), and the first write
//! to a group takes its table back: without a copy when the encoder has released it, else by
//! copying it. The copy costs about a `memcpy` of the group's entries on the task thread, once
//! per group per checkpoint while the encoder holds it, where the generic table writes into
//! small delta tables instead.

use super::heap::table_hash;
use super::key_group::{KeyGroupRange, int_key_hash};
use super::keyed_block;
use super::snapshot::KeyGroupBlock;
use crate::record::Key;
use hashbrown::HashTable;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::sync::Arc;

/// The table hash of an entry, recomputed from its key when a table grows.
#[inline]
fn entry_hash<V>(entry: &(i64, V)) -> u64 {
    table_hash(int_key_hash(entry.0))
}

/// One key group's table, shared with the snapshots that hold it.
type GroupTable<V> = Arc<HashTable<(i64, V)>>;

/// One subtask's integer-keyed state: a table per key group of its range. A group's table is
/// owned (in `tables`), or shared with a snapshot since the last barrier (in `shared`, its
/// slot in `tables` empty): the first write takes it back, copying it only if the snapshot
/// still holds it. `shared_groups` counts the shared ones, so a batch checks for them once
/// ([`IntKeyedState::update_each`]), not per record.
pub struct IntKeyedState<V> {
    range: KeyGroupRange,
    tables: Vec<HashTable<(i64, V)>>,
    shared: Vec<Option<GroupTable<V>>>,
    shared_groups: usize,
    len: usize,
}

impl<V: Clone> IntKeyedState<V> {
    /// Empty state for the key groups of `range`.
    pub fn new(range: KeyGroupRange) -> IntKeyedState<V> {
        IntKeyedState {
            range,
            tables: (0..range.len()).map(|_| HashTable::new()).collect(),
            shared: (0..range.len()).map(|_| None).collect(),
            shared_groups: 0,
            len: 0,
        }
    }

    /// The key groups held.
    pub fn range(&self) -> KeyGroupRange {
        self.range
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The table of group `i` (position in the range) to write into.
    #[inline(always)]
    fn owned(&mut self, i: usize) -> &mut HashTable<(i64, V)> {
        if self.shared_groups != 0 && self.shared[i].is_some() {
            self.take_back(i);
        }
        &mut self.tables[i]
    }

    /// Takes group `i`'s shared table back (once per group after a snapshot): without a copy
    /// when the snapshot released it, else by copying it.
    #[cold]
    #[inline(never)]
    fn take_back(&mut self, i: usize) {
        if let Some(shared) = self.shared[i].take() {
            self.tables[i] = Arc::try_unwrap(shared).unwrap_or_else(|still_held| (*still_held).clone());
            self.shared_groups -= 1;
        }
    }

    /// The table of group `i` to read.
    fn table(&self, i: usize) -> &HashTable<(i64, V)> {
        self.shared[i].as_deref().unwrap_or(&self.tables[i])
    }

    /// Read-modify-write of `key` (whose [`int_key_hash`] is `hash`) in `key_group`: stores
    /// `f(current value)` and returns it. Panics if `key_group` is outside the range (callers
    /// check).
    #[inline]
    pub fn update(&mut self, key_group: u32, hash: u64, key: i64, f: impl FnOnce(Option<&V>) -> V) -> V {
        let table = self.owned((key_group - self.range.start) as usize);
        let (value, inserted) = update_in(table, hash, key, f);
        self.len += usize::from(inserted);
        value
    }

    /// [`IntKeyedState::update`] of every row `i` of a batch (`key_groups[i]`, `hashes[i]`,
    /// `keys[i]`, all of the same length), in order: stores `f(i, current value)` and hands it
    /// to `out(i, value)`. Groups still shared with a snapshot are taken back before the loop,
    /// so the loop itself only probes. Panics if a key group is outside the range (callers
    /// check).
    #[inline]
    pub fn update_each(
        &mut self,
        (key_groups, hashes, keys): (&[u32], &[u64], &[i64]),
        mut f: impl FnMut(usize, Option<&V>) -> V,
        mut out: impl FnMut(usize, &V),
    ) {
        let start = self.range.start;
        if self.shared_groups != 0 {
            for &key_group in key_groups {
                self.owned((key_group - start) as usize);
            }
        }
        let mut inserted = 0;
        let rows = key_groups.iter().zip(hashes).zip(keys).enumerate();
        for (i, ((&key_group, &hash), &key)) in rows {
            let table = &mut self.tables[(key_group - start) as usize];
            let (value, new) = update_in(table, hash, key, |current| f(i, current));
            inserted += usize::from(new);
            out(i, &value);
        }
        self.len += inserted;
    }

    /// The value of `key` (whose [`int_key_hash`] is `hash`) in `key_group`, if any.
    pub fn get(&self, key_group: u32, hash: u64, key: i64) -> Option<&V> {
        self.table((key_group - self.range.start) as usize)
            .find(table_hash(hash), |e| e.0 == key)
            .map(|e| &e.1)
    }

    /// Removes `key`; whether it was held.
    pub fn remove(&mut self, key_group: u32, hash: u64, key: i64) -> bool {
        let table = self.owned((key_group - self.range.start) as usize);
        match table.find_entry(table_hash(hash), |e| e.0 == key) {
            Ok(entry) => {
                entry.remove();
                self.len -= 1;
                true
            }
            Err(_) => false,
        }
    }

    /// Every entry as `(key group, key, value)`, by key group (moving the state to another
    /// table).
    pub fn entries(&self) -> impl Iterator<Item = (u32, i64, &V)> {
        let start = self.range.start;
        (0..self.tables.len()).flat_map(move |i| self.table(i).iter().map(move |(k, v)| (start + i as u32, *k, v)))
    }

    /// The synchronous part of a snapshot: the non-empty groups' tables, shared (O(key
    /// groups); a later write to a shared group takes it back first).
    pub fn snapshot(&mut self) -> IntSnapshot<V> {
        let start = self.range.start;
        let mut groups = Vec::new();
        for (i, (table, shared)) in self.tables.iter_mut().zip(&mut self.shared).enumerate() {
            if shared.is_none() {
                if table.is_empty() {
                    continue;
                }
                *shared = Some(Arc::new(std::mem::take(table)));
                self.shared_groups += 1;
            }
            if let Some(shared) = shared {
                groups.push((start + i as u32, shared.clone()));
            }
        }
        IntSnapshot { groups }
    }
}

/// Read-modify-write of `key` in one group's `table`: `(f(current value), whether the key
/// was new)`.
#[inline(always)]
fn update_in<V: Clone>(
    table: &mut HashTable<(i64, V)>,
    hash: u64,
    key: i64,
    f: impl FnOnce(Option<&V>) -> V,
) -> (V, bool) {
    let hash = table_hash(hash);
    match table.find_mut(hash, |e| e.0 == key) {
        Some(entry) => {
            let value = f(Some(&entry.1));
            entry.1 = value.clone();
            (value, false)
        }
        None => {
            let value = f(None);
            table.insert_unique(hash, (key, value.clone()), entry_hash);
            (value, true)
        }
    }
}

impl<V: Clone + DeserializeOwned> IntKeyedState<V> {
    /// Loads restored `blocks` (those outside the range are skipped) when every one is a full
    /// block (version 1 or 2; write times are not kept, entries that had expired when the block
    /// was written, [`KeyGroupBlock::expired_at_snapshot`], are left out) holding integer keys only; `Ok(Err(blocks))`,
    /// nothing loaded, when one is a delta or holds another key (the caller restores them into
    /// the generic table). Errors: the key group and why its block does not decode.
    pub fn restore(&mut self, blocks: Vec<KeyGroupBlock>) -> Result<Result<(), Vec<KeyGroupBlock>>, String> {
        let mut decoded = Vec::with_capacity(blocks.len());
        for block in blocks.iter().filter(|b| self.range.contains(b.key_group)) {
            if keyed_block::is_delta(&block.data) {
                return Ok(Err(blocks));
            }
            let entries = keyed_block::decode::<V>(&block.data)
                .map_err(|e| format!("keyed state of key group {} does not decode: {e}", block.key_group))?;
            let mut ints = Vec::with_capacity(entries.len());
            for (key, value, written_ms) in entries {
                let Key::Int(k) = key else {
                    return Ok(Err(blocks));
                };
                if !block.expired_at_snapshot(written_ms) {
                    ints.push((k, value));
                }
            }
            decoded.push((block.key_group, ints));
        }
        for (key_group, entries) in decoded {
            for (k, v) in entries {
                self.update(key_group, int_key_hash(k), k, |_| v);
            }
        }
        Ok(Ok(()))
    }
}

/// A group's version-1 block: the bytes [`keyed_block::encode_v1`] writes for its entries as
/// `(Key::Int(k), v)`, in the table's order, written without a `Key` or an entry vector built
/// and without serde's calls for the key: postcard's sequence length (a LEB128 varint), then
/// per entry `Key::Int`'s variant index (1, one byte) and the key zigzag-encoded as a varint,
/// then the value through postcard. (serde's per-entry calls and the two entry vectors were
/// about 40 % of a checkpoint of 100,000 integer keys: benchmarks.md, "Integer keys at 0.8×".)
fn encode_v1_block<V: Serialize>(table: &HashTable<(i64, V)>) -> Result<Vec<u8>, postcard::Error> {
    fn push_varint(out: &mut Vec<u8>, mut x: u64) {
        while x >= 0x80 {
            out.push(x as u8 | 0x80);
            x >>= 7;
        }
        out.push(x as u8);
    }
    let mut data = Vec::with_capacity(5 + table.len() * 16);
    push_varint(&mut data, table.len() as u64);
    for (key, value) in table.iter() {
        data.push(KEY_INT_VARIANT);
        push_varint(&mut data, ((key << 1) ^ (key >> 63)) as u64);
        data = postcard::to_extend(value, data)?;
    }
    Ok(data)
}

/// `Key::Int`'s variant index in postcard (the second variant of [`Key`]).
const KEY_INT_VARIANT: u8 = 1;

/// A snapshot of an [`IntKeyedState`]: the tables of its non-empty key groups, as of the
/// barrier.
pub struct IntSnapshot<V> {
    groups: Vec<(u32, GroupTable<V>)>,
}

impl<V: Serialize> IntSnapshot<V> {
    /// Hands one version-1 block per non-empty key group to `emit`, in key-group order,
    /// releasing each group's table as soon as it is encoded. Errors: encoding failed (as
    /// text), or `emit`'s error.
    pub fn encode_each<E: From<String>>(self, emit: &mut dyn FnMut(KeyGroupBlock) -> Result<(), E>) -> Result<(), E> {
        for (key_group, table) in self.groups {
            let data = encode_v1_block(&table).map_err(|e| E::from(e.to_string()))?;
            let entries = table.len() as u64;
            drop(table);
            emit(KeyGroupBlock {
                expired_through_ms: None,
                key_group,
                entries,
                data: data.into(),
            })?;
        }
        Ok(())
    }

    /// Every block at once ([`IntSnapshot::encode_each`]).
    pub fn encode(self) -> Result<Vec<KeyGroupBlock>, String> {
        let mut blocks = Vec::new();
        self.encode_each::<String>(&mut |b| {
            blocks.push(b);
            Ok(())
        })?;
        Ok(blocks)
    }
}

#[cfg(test)]
#[path = "int_keyed_tests.rs"]
mod tests;
