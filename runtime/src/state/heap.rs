//! Heap keyed state with copy-on-write snapshots (Flink's hashmap state backend).
//!
//! [`HeapKeyedState`] holds one hash table per key group of a subtask's [`KeyGroupRange`].
//! Entries are found by the key's stable hash, which `keyBy` computed once
//! ([`KeyedBy::hash`](crate::record::KeyedBy)): no operation here hashes a key of a record.
//!
//! **Snapshots are copy-on-write.** [`HeapKeyedState::snapshot`] copies nothing: each
//! non-empty key group's table is frozen into an `Arc` that the returned [`HeapSnapshot`]
//! shares (O(key groups) on the task thread). While a group is frozen, writes go to a small
//! delta table read before the frozen layers (a deleted key is a tombstone). A second snapshot
//! before the first is released freezes the delta too, so each snapshot sees exactly the
//! state as of its barrier. When every snapshot of a group has been encoded (the `Arc` is
//! unique again), [`HeapKeyedState::maintain`] merges the deltas into the table: O(changed
//! keys). With no snapshot in flight a read or write is one table lookup.
//!
//! The operations (`update`, `get`, `snapshot` + off-thread `encode`, `restore`, `maintain`,
//! `len`) are what a disk backend implements too. See docs/architecture.md, "Keyed state".

use crate::record::Key;
use crate::state::key_group::{KeyGroupRange, key_hash};
use crate::state::keyed_block;
use crate::state::parallel;
use crate::state::snapshot::KeyGroupBlock;
use crate::state::ttl::{StateTtl, expired};
use hashbrown::HashTable;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::sync::Arc;

pub use crate::state::changed_keys::ChangedKeys;
use crate::state::changed_keys::{GroupChanges, SCAN_WHEN_ONE_IN};
use crate::state::heap_snapshot::GroupView;
pub use crate::state::heap_snapshot::HeapSnapshot;

/// Entries examined by incremental TTL cleanup per record processed (Flink's incremental
/// cleanup examines 5 entries per state access by default).
pub const CLEANUP_ENTRIES_PER_RECORD: usize = 5;

/// The in-memory table hash of a key whose [`key_hash`] is `hash`. The key group is
/// `hash mod maxParallelism`, so within one group the low bits of `hash` are all equal; the
/// table places entries by the low bits and tags them with the top 7, so it uses the hash
/// rotated by 32 bits (the tag then comes from bits 25-31, which no key group count up to
/// 32768 constrains).
pub fn table_hash(hash: u64) -> u64 {
    hash.rotate_left(32)
}

/// A value, the time of its last write (ms since the Unix epoch) and the write epoch of
/// that write.
#[derive(Clone, Debug, PartialEq)]
pub struct Stamped<V> {
    /// The value.
    pub value: V,
    /// Last write, ms since the Unix epoch (processing time).
    pub written_ms: u64,
    /// The write epoch of the last write: the state's count of
    /// [`HeapKeyedState::take_changes`] calls (0 for a restored entry). An incremental
    /// checkpoint's delta holds the entries written at or after the epoch its changes
    /// started at, so marking the entry itself tells a first write since then (no set to
    /// probe per write) and lets the encoder find them by scanning the table.
    pub written_epoch: u32,
}

pub(crate) type BaseTable<V> = HashTable<(Key, Stamped<V>)>;

/// A write made while the group was frozen: `slot` `None` is a deletion (tombstone).
#[derive(Clone, Debug)]
pub(crate) struct DeltaEntry<V> {
    pub(crate) table_hash: u64,
    pub(crate) key: Key,
    pub(crate) slot: Option<Stamped<V>>,
}

pub(crate) type DeltaTable<V> = HashTable<DeltaEntry<V>>;

fn base_hash<V>(entry: &(Key, Stamped<V>)) -> u64 {
    table_hash(key_hash(&entry.0))
}

fn delta_hash<V>(entry: &DeltaEntry<V>) -> u64 {
    entry.table_hash
}

/// A key group's table: owned (no snapshot holds it) or shared with in-flight snapshots.
enum Base<V> {
    Owned(BaseTable<V>),
    Shared(Arc<BaseTable<V>>),
}

struct Group<V> {
    base: Base<V>,
    /// Deltas frozen by snapshots taken while the base was shared, oldest first.
    frozen: Vec<Arc<DeltaTable<V>>>,
    /// Writes since the newest snapshot, while the base is shared.
    delta: DeltaTable<V>,
    /// Entries held (expired ones included until cleaned up).
    len: usize,
    /// Keys written (by hash) or removed since the last [`HeapKeyedState::take_changes`],
    /// when changes are tracked (incremental checkpoints).
    changed: GroupChanges,
}

impl<V: Clone> Group<V> {
    fn new() -> Group<V> {
        Group {
            base: Base::Owned(HashTable::new()),
            frozen: Vec::new(),
            delta: HashTable::new(),
            len: 0,
            changed: GroupChanges::default(),
        }
    }

    /// If no snapshot holds the base any more, merges the deltas into it (O(changed keys)).
    /// Returns whether the group is owned afterwards.
    fn try_release(&mut self) -> bool {
        match &self.base {
            Base::Owned(_) => return true,
            Base::Shared(shared) if Arc::strong_count(shared) != 1 => return false,
            Base::Shared(_) => {}
        }
        let Base::Shared(shared) = std::mem::replace(&mut self.base, Base::Owned(HashTable::new())) else {
            unreachable!("checked above")
        };
        let mut table = match Arc::try_unwrap(shared) {
            Ok(table) => table,
            Err(shared) => {
                self.base = Base::Shared(shared);
                return false;
            }
        };
        // A snapshot holding a frozen delta also holds the base: all are free now.
        for delta in std::mem::take(&mut self.frozen) {
            apply_delta(&mut table, Arc::unwrap_or_clone(delta));
        }
        apply_delta(&mut table, std::mem::take(&mut self.delta));
        debug_assert_eq!(table.len(), self.len);
        self.base = Base::Owned(table);
        true
    }
}

fn apply_delta<V>(table: &mut BaseTable<V>, delta: DeltaTable<V>) {
    for entry in delta {
        let found = table.find_entry(entry.table_hash, |e| e.0 == entry.key);
        match (found, entry.slot) {
            (Ok(mut occupied), Some(stamped)) => occupied.get_mut().1 = stamped,
            (Ok(occupied), None) => {
                occupied.remove();
            }
            (Err(_), Some(stamped)) => {
                table.insert_unique(entry.table_hash, (entry.key, stamped), base_hash);
            }
            (Err(_), None) => {}
        }
    }
}

/// Keyed state of one subtask: per key group a copy-on-write hash table of `V`, with an
/// optional TTL.
pub struct HeapKeyedState<V> {
    range: KeyGroupRange,
    ttl: Option<StateTtl>,
    /// `groups[kg - range.start]`.
    groups: Vec<Group<V>>,
    /// Indices of groups whose base is shared with a snapshot.
    shared: Vec<usize>,
    /// Next group incremental TTL cleanup visits.
    cleanup_cursor: usize,
    /// Entries incremental cleanup may examine now.
    cleanup_credit: usize,
    /// Whether writes and removals are recorded for incremental checkpoints.
    track_changes: bool,
    /// The write epoch of writes now ([`Stamped::written_epoch`]); one more at each
    /// [`HeapKeyedState::take_changes`].
    epoch: u32,
}

impl<V: Clone + Send + Sync + Serialize + DeserializeOwned + 'static> HeapKeyedState<V> {
    /// Empty state for the key groups of `range`, expiring entries after `ttl` if set.
    pub fn new(range: KeyGroupRange, ttl: Option<StateTtl>) -> HeapKeyedState<V> {
        HeapKeyedState {
            range,
            ttl,
            groups: (0..range.len()).map(|_| Group::new()).collect(),
            shared: Vec::new(),
            cleanup_cursor: 0,
            cleanup_credit: 0,
            track_changes: false,
            epoch: 1,
        }
    }

    /// Starts recording the keys written or removed, for incremental checkpoints;
    /// [`HeapKeyedState::take_changes`] hands them over. A key's first write since the
    /// previous `take_changes` is told by its entry's write epoch ([`Stamped::written_epoch`],
    /// no lookup), and recorded by hash (a set of `u64`s, no key cloned) while few of its key
    /// group's entries were written, else only counted: the encoder then scans the group for
    /// entries of recent epochs ([`GroupChanges::record_first_write`]). Removals are recorded
    /// by key.
    pub fn track_changes(&mut self) {
        if !self.track_changes {
            self.track_changes = true;
            self.epoch += 1;
        }
    }

    /// The keys written or removed since the previous call (or since tracking started), and
    /// starts a new record and a new write epoch. Empty unless
    /// [`HeapKeyedState::track_changes`] was called. O(key groups + changed keys).
    pub fn take_changes(&mut self) -> ChangedKeys {
        let mut out = ChangedKeys::default();
        if !self.track_changes {
            return out;
        }
        out.from_epoch = Some(self.epoch);
        for (i, group) in self.groups.iter_mut().enumerate() {
            if !group.changed.is_empty() {
                let taken = std::mem::take(&mut group.changed);
                // A group most of whose entries were written in this interval starts the
                // next one scanning (no hash recorded per write), else by hashes.
                if taken.scan_from_epoch.is_some() && taken.len().saturating_mul(SCAN_WHEN_ONE_IN) > group.len {
                    group.changed.scan_from_epoch = Some(self.epoch + 1);
                }
                out.groups.insert(self.range.start + i as u32, taken);
            }
        }
        self.epoch += 1;
        out
    }

    /// The key groups held.
    pub fn range(&self) -> KeyGroupRange {
        self.range
    }

    /// Entries held, expired ones included until cleanup removes them.
    pub fn len(&self) -> usize {
        self.groups.iter().map(|g| g.len).sum()
    }

    /// Whether no entry is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Loads `blocks` (of any block version); blocks of key groups outside the range are
    /// skipped, entries expired at `now_ms` are dropped, entries of a block without timestamps
    /// count as written at `now_ms`. Blocks of one key group apply in the order given (a
    /// chain's base, then its deltas). Key groups are decoded and built on up to
    /// [`parallel::max_workers`] threads; a group's full block is built into a table sized
    /// for its entries up front, each entry inserted without a lookup (a full block holds
    /// each key once), and only delta blocks look keys up. Errors: the key group and why its
    /// block does not decode.
    pub fn restore(&mut self, blocks: Vec<KeyGroupBlock>, now_ms: u64) -> Result<(), String> {
        self.restore_on(blocks, now_ms, parallel::max_workers())
    }

    /// [`HeapKeyedState::restore`] on up to `workers` threads (the same state for any count).
    pub fn restore_on(&mut self, blocks: Vec<KeyGroupBlock>, now_ms: u64, workers: usize) -> Result<(), String> {
        let mut by_group: Vec<Vec<KeyGroupBlock>> = (0..self.range.len()).map(|_| Vec::new()).collect();
        for block in blocks {
            if self.range.contains(block.key_group) {
                by_group[(block.key_group - self.range.start) as usize].push(block);
            }
        }
        let mut work = Vec::new();
        for (i, blocks) in by_group.into_iter().enumerate() {
            if blocks.is_empty() {
                continue;
            }
            let Base::Owned(table) = &mut self.groups[i].base else {
                unreachable!("restore runs before any snapshot")
            };
            work.push((i, std::mem::take(table), blocks));
        }
        let ttl = self.ttl;
        let built = parallel::map_in_order(work, workers, |(i, table, blocks)| {
            restore_group(table, blocks, ttl, now_ms).map(|table| (i, table))
        });
        for result in built {
            let (i, table) = result?;
            let group = &mut self.groups[i];
            group.len = table.len();
            group.base = Base::Owned(table);
        }
        Ok(())
    }

    /// The live value of `key` (whose [`key_hash`] is `hash`) in `key_group`, if any and not
    /// expired at `now_ms`. Panics if `key_group` is outside the range (callers check).
    pub fn get(&self, key_group: u32, hash: u64, key: &Key, now_ms: u64) -> Option<&V> {
        let group = &self.groups[(key_group - self.range.start) as usize];
        let hash = table_hash(hash);
        let stamped = match &group.base {
            Base::Owned(table) => table.find(hash, |e| e.0 == *key).map(|e| &e.1),
            Base::Shared(base) => lookup_layers(base, &group.frozen, Some(&group.delta), hash, key).flatten(),
        }?;
        (!expired(self.ttl, stamped.written_ms, now_ms)).then_some(&stamped.value)
    }

    /// The live entries of `key_group` at `now_ms` (its values cloned), in no particular order:
    /// O(the group's keys and the writes made while a snapshot holds it). For an operator that
    /// visits a key group's entries (a window firing). Panics if `key_group` is outside the
    /// range.
    pub fn entries_in_group(&self, key_group: u32, now_ms: u64) -> Vec<(Key, V)> {
        let group = &self.groups[(key_group - self.range.start) as usize];
        let live = |stamped: &Stamped<V>| !expired(self.ttl, stamped.written_ms, now_ms);
        match &group.base {
            Base::Owned(table) => table
                .iter()
                .filter(|(_, stamped)| live(stamped))
                .map(|(key, stamped)| (key.clone(), stamped.value.clone()))
                .collect(),
            Base::Shared(base) => {
                // Every key of any layer, once; its newest version decides.
                let mut keys: Vec<&Key> = base
                    .iter()
                    .map(|e| &e.0)
                    .chain(group.frozen.iter().flat_map(|d| d.iter().map(|e| &e.key)))
                    .chain(group.delta.iter().map(|e| &e.key))
                    .collect();
                keys.sort_unstable();
                keys.dedup();
                keys.into_iter()
                    .filter_map(|key| {
                        let hash = table_hash(key_hash(key));
                        let stamped = lookup_layers(base, &group.frozen, Some(&group.delta), hash, key).flatten()?;
                        live(stamped).then(|| (key.clone(), stamped.value.clone()))
                    })
                    .collect()
            }
        }
    }

    /// Read-modify-write of `key` (whose [`key_hash`] is `hash`) in `key_group` at `now_ms`:
    /// stores `f(current live value)` written at `now_ms` and returns it. An expired value is
    /// passed as `None` (the key starts over). Panics if `key_group` is outside the range.
    pub fn update(&mut self, key_group: u32, hash: u64, key: &Key, now_ms: u64, f: impl FnOnce(Option<&V>) -> V) -> V {
        self.update_then(key_group, hash, key, now_ms, f, V::clone)
    }

    /// As [`HeapKeyedState::update`], returning `then(stored value)` instead of a copy of the
    /// value (a value that owns memory, a window's list, is then stored without a copy).
    pub fn update_then<R>(
        &mut self,
        key_group: u32,
        hash: u64,
        key: &Key,
        now_ms: u64,
        f: impl FnOnce(Option<&V>) -> V,
        then: impl FnOnce(&V) -> R,
    ) -> R {
        let ttl = self.ttl;
        let Group {
            base,
            frozen,
            delta,
            len,
            changed,
        } = &mut self.groups[(key_group - self.range.start) as usize];
        let hash = table_hash(hash);
        let epoch = self.epoch;
        // Whether this is the key's first write since the changes were last taken (its entry
        // is older, absent, or a tombstone), when changes are tracked.
        let track = self.track_changes;
        let first_write = |older: Option<&Stamped<V>>| track && older.is_none_or(|s| s.written_epoch < epoch);
        let live = |s: &Stamped<V>| !expired(ttl, s.written_ms, now_ms);
        let stamped = |value: V| Stamped {
            value,
            written_ms: now_ms,
            written_epoch: epoch,
        };
        let (result, first) = match base {
            Base::Owned(table) => match table.find_mut(hash, |e| e.0 == *key) {
                Some(entry) => {
                    let first = first_write(Some(&entry.1));
                    let value = f(Some(&entry.1.value).filter(|_| live(&entry.1)));
                    entry.1 = stamped(value);
                    (then(&entry.1.value), first)
                }
                None => {
                    let value = f(None);
                    let result = then(&value);
                    table.insert_unique(hash, (key.clone(), stamped(value)), base_hash);
                    *len += 1;
                    (result, first_write(None))
                }
            },
            Base::Shared(shared) => {
                if let Some(entry) = delta.find_mut(hash, |e| e.key == *key) {
                    let first = first_write(entry.slot.as_ref());
                    let value = f(entry.slot.as_ref().filter(|s| live(s)).map(|s| &s.value));
                    if entry.slot.is_none() {
                        *len += 1;
                    }
                    let result = then(&value);
                    entry.slot = Some(stamped(value));
                    (result, first)
                } else {
                    let older = lookup_layers(shared, frozen, None, hash, key);
                    if !matches!(older, Some(Some(_))) {
                        *len += 1;
                    }
                    let first = first_write(older.flatten());
                    let value = f(older.flatten().filter(|s| live(s)).map(|s| &s.value));
                    let result = then(&value);
                    let entry = DeltaEntry {
                        table_hash: hash,
                        key: key.clone(),
                        slot: Some(stamped(value)),
                    };
                    delta.insert_unique(hash, entry, delta_hash);
                    (result, first)
                }
            }
        };
        if first {
            changed.record_first_write(hash, epoch, *len);
        }
        result
    }

    /// Removes `key` from `key_group` (a tombstone while the group is frozen). Returns whether
    /// an entry was held. Panics if `key_group` is outside the range.
    pub fn remove(&mut self, key_group: u32, hash: u64, key: &Key) -> bool {
        let Group {
            base,
            frozen,
            delta,
            len,
            changed,
        } = &mut self.groups[(key_group - self.range.start) as usize];
        let hash = table_hash(hash);
        if self.track_changes {
            changed.record_key(hash, key);
        }
        let held = match base {
            Base::Owned(table) => match table.find_entry(hash, |e| e.0 == *key) {
                Ok(occupied) => {
                    occupied.remove();
                    true
                }
                Err(_) => false,
            },
            Base::Shared(shared) => {
                let held = matches!(lookup_layers(shared, frozen, Some(delta), hash, key), Some(Some(_)));
                if held {
                    match delta.find_mut(hash, |e| e.key == *key) {
                        Some(entry) => entry.slot = None,
                        None => {
                            let entry = DeltaEntry {
                                table_hash: hash,
                                key: key.clone(),
                                slot: None,
                            };
                            delta.insert_unique(hash, entry, delta_hash);
                        }
                    }
                }
                held
            }
        };
        if held {
            *len -= 1;
        }
        held
    }

    /// Housekeeping between batches, at `now_ms`, after `records` records: merges the deltas
    /// of groups no snapshot holds any more, then lets incremental TTL cleanup examine about
    /// [`CLEANUP_ENTRIES_PER_RECORD`] entries per record (whole key groups at a time, each
    /// when enough credit has accrued; frozen groups are skipped until released).
    pub fn maintain(&mut self, now_ms: u64, records: usize) {
        if !self.shared.is_empty() {
            let groups = &mut self.groups;
            self.shared.retain(|&i| !groups[i].try_release());
        }
        let Some(ttl) = self.ttl else { return };
        if self.groups.is_empty() {
            return;
        }
        self.cleanup_credit = self
            .cleanup_credit
            .saturating_add(records.saturating_mul(CLEANUP_ENTRIES_PER_RECORD));
        for _ in 0..self.groups.len() {
            let group = &mut self.groups[self.cleanup_cursor];
            if let Base::Owned(table) = &mut group.base {
                let cost = table.len().max(1);
                if cost > self.cleanup_credit {
                    return;
                }
                self.cleanup_credit -= cost;
                table.retain(|e| !ttl.is_expired(e.1.written_ms, now_ms));
                if table.len() * 4 < table.capacity() {
                    table.shrink_to_fit(base_hash);
                }
                group.len = table.len();
            }
            self.cleanup_cursor = (self.cleanup_cursor + 1) % self.groups.len();
        }
        // One full pass per call at most; credit beyond it is not kept.
        self.cleanup_credit = 0;
    }

    /// The synchronous part of a snapshot at `now_ms`: freezes every non-empty key group
    /// (O(key groups), no entry copied). Encode the result with [`HeapSnapshot::encode`] off
    /// the task thread.
    pub fn snapshot(&mut self, now_ms: u64) -> HeapSnapshot<V> {
        let mut views = Vec::new();
        for (i, group) in self.groups.iter_mut().enumerate() {
            if group.len == 0 {
                continue;
            }
            let base = match std::mem::replace(&mut group.base, Base::Owned(HashTable::new())) {
                Base::Owned(table) => {
                    self.shared.push(i);
                    Arc::new(table)
                }
                Base::Shared(shared) => shared,
            };
            if !group.delta.is_empty() {
                group.frozen.push(Arc::new(std::mem::take(&mut group.delta)));
            }
            views.push(GroupView {
                key_group: self.range.start + i as u32,
                base: base.clone(),
                deltas: group.frozen.clone(),
            });
            group.base = Base::Shared(base);
        }
        HeapSnapshot {
            views,
            ttl: self.ttl,
            now_ms,
        }
    }
}

/// Applies one key group's restored `blocks`, in order, over `table` (see
/// [`HeapKeyedState::restore`]). Errors: the key group and why a block does not decode.
fn restore_group<V: DeserializeOwned>(
    mut table: BaseTable<V>,
    blocks: Vec<KeyGroupBlock>,
    ttl: Option<StateTtl>,
    now_ms: u64,
) -> Result<BaseTable<V>, String> {
    for block in blocks {
        let key_group = block.key_group;
        let undecodable = |e: String| format!("key group {key_group} does not decode: {e}");
        let expired_at_snapshot = |written_ms| block.expired_at_snapshot(written_ms);
        let stamp = |value: Option<V>, written_ms: Option<u64>| {
            let expired_then = expired_at_snapshot(written_ms);
            let written_ms = written_ms.unwrap_or(now_ms);
            value
                .filter(|_| !expired_then && !expired(ttl, written_ms, now_ms))
                .map(|value| Stamped {
                    value,
                    written_ms,
                    written_epoch: 0,
                })
        };
        table.reserve(keyed_block::entry_count(&block.data).map_err(undecodable)?, base_hash);
        if table.is_empty() && !keyed_block::is_delta(&block.data) {
            // Bulk build, straight from the block's bytes: no list of decoded entries, no probe
            // for an existing key (a full block holds each key once).
            keyed_block::decode_each::<V>(&block.data, |key, value, written_ms| {
                if let Some(stamped) = stamp(value, written_ms) {
                    table.insert_unique(table_hash(key_hash(&key)), (key, stamped), base_hash);
                }
            })
            .map_err(undecodable)?;
            continue;
        }
        // A delta block (incremental checkpoint) comes after its base block: a removal or an
        // expired write there removes the key restored so far.
        keyed_block::decode_each::<V>(&block.data, |key, value, written_ms| {
            let hash = table_hash(key_hash(&key));
            match (table.find_entry(hash, |e| e.0 == key), stamp(value, written_ms)) {
                (Ok(mut occupied), Some(stamped)) => occupied.get_mut().1 = stamped,
                (Ok(occupied), None) => {
                    occupied.remove();
                }
                (Err(absent), Some(stamped)) => {
                    absent.into_table().insert_unique(hash, (key, stamped), base_hash);
                }
                (Err(_), None) => {}
            }
        })
        .map_err(undecodable)?;
    }
    Ok(table)
}

/// Looks `key` up in the current delta, then the frozen layers, newest first:
/// `Some(Some(_))` held, `Some(None)` deleted (tombstone), `None` never written.
pub(crate) fn lookup_layers<'a, V>(
    base: &'a BaseTable<V>,
    frozen: &'a [Arc<DeltaTable<V>>],
    delta: Option<&'a DeltaTable<V>>,
    hash: u64,
    key: &Key,
) -> Option<Option<&'a Stamped<V>>> {
    delta
        .into_iter()
        .chain(frozen.iter().rev().map(|d| &**d))
        .find_map(|d| d.find(hash, |e| e.key == *key).map(|e| e.slot.as_ref()))
        .or_else(|| base.find(hash, |e| e.0 == *key).map(|e| Some(&e.1)))
}

#[cfg(test)]
#[path = "heap_tests.rs"]
mod tests;
