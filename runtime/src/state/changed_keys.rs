//! The keys written or removed since some point, by key group: what a delta block of an
//! incremental checkpoint holds, on both state backends (`state/incremental.rs`).
//!
//! **On the heap backend a written key is recorded by its hash only** (its [`key_hash`], 8
//! bytes in a set of `u64`s: no key clone, no allocation, no key comparison per write), and
//! only at its first write since the changes were last taken: each entry carries the write
//! epoch of its last write (`Stamped::written_epoch`), which the write reads anyway. A key
//! group more than one in [`SCAN_WHEN_ONE_IN`] of whose entries were written stops recording
//! hashes and only counts: its encoder scans the group's tables for entries of recent epochs
//! instead ([`GroupChanges::scan_from_epoch`]), and the next interval starts that way when
//! the group was written as densely. A removed key is recorded by key, since a removal's
//! tombstone must name a key the snapshot no longer holds (removals are rare in the jobs this
//! serves: counts, aggregates). The encoder of a delta resolves each written hash to the keys
//! the snapshot holds under it, off the task thread ([`HeapSnapshot::encode_delta`]: the
//! frozen tables' `iter_hash`). Two keys sharing a hash both go into the delta, the unchanged
//! one with its own value as of the barrier: a delta entry always states a key's state as of
//! the barrier, so any superset of the changed keys restores exactly.
//!
//! **The disk backend records every change by key**: its encoder reads a key by a point lookup
//! (bloom filters skip most tables), where resolving a hash takes a prefix scan of key group +
//! hash that seeks in every table of the store; measured on a keyed count (1M keys, 2M
//! records, checkpoints every second, release, load 10-13), hashes made the delta's
//! asynchronous part 1.29 s instead of 0.24-0.29 s. [`DiskSnapshot::encode_delta`] still
//! resolves hashes (a prefix scan each), so every set encodes exactly on either backend.
//!
//! Measured on the heap (keyed count, 20M records over 1M keys, checkpoints every second):
//! recording written keys by key (a second table probe comparing keys and a key clone per
//! write) took a quarter of all CPU samples and doubled peak RSS;
//! docs/runtime/state-backends-log.md, "Changed keys by hash".
//!
//! [`HeapKeyedState::take_changes`]: crate::state::heap::HeapKeyedState::take_changes
//! [`DiskKeyedState::take_changes`]: crate::state::disk::DiskKeyedState::take_changes
//! [`HeapSnapshot::encode_delta`]: crate::state::heap::HeapSnapshot::encode_delta
//! [`DiskSnapshot::encode_delta`]: crate::state::disk::DiskSnapshot::encode_delta

use crate::record::Key;
use crate::state::heap::table_hash;
use crate::state::key_group::key_hash;
use hashbrown::HashTable;
use std::collections::BTreeMap;

/// The changes of one key group since some point.
#[derive(Default, Clone, Debug)]
pub struct GroupChanges {
    /// Table hashes ([`table_hash`]) of the keys written, each once (heap backend).
    pub(crate) written: HashTable<u64>,
    /// Keys recorded by key, each once with its table hash: removals (both backends) and
    /// writes on the disk backend.
    pub(crate) keys: HashTable<(u64, Key)>,
    /// Heap backend, when many of the group's keys were written: `Some(epoch)` says every
    /// entry whose write epoch ([`Stamped::written_epoch`]) is at least `epoch` was written,
    /// and `written` is then empty (the encoder scans the group's tables instead of looking
    /// hashes up; see [`GroupChanges::record_first_write`]).
    ///
    /// [`Stamped::written_epoch`]: crate::state::heap::Stamped::written_epoch
    pub(crate) scan_from_epoch: Option<u32>,
    /// Keys first written since the set started and not held in `written` (scan mode).
    pub(crate) scanned_writes: usize,
}

/// A heap key group's written keys switch from hashes to a scan by write epoch once more
/// than one in this many of its entries were written since the set started: looking a
/// hash up costs a cache miss on the task thread (recording) and another on the encoder
/// (resolving), where the scan reads the group's table in order once. Measured on the keyed
/// count (20M records over 1M keys, incremental checkpoints every second), the hash set's
/// probe was 35 % of `HeapKeyedState::update`'s samples (docs/runtime/state-backends-log.md).
pub(crate) const SCAN_WHEN_ONE_IN: usize = 8;

/// Written hashes a group records at least before it may switch to a scan (a small group
/// of a few keys keeps its exact set).
pub(crate) const SCAN_MIN_WRITES: usize = 64;

impl GroupChanges {
    /// Heap backend: records the first write since the set started (`from_epoch`, the
    /// epoch of the set's first writes) of the key whose table hash is `table_hash`, the
    /// group holding `entries` entries. By hash while few keys were written, then (more than
    /// one in [`SCAN_WHEN_ONE_IN`] of `entries`) as a scan from `from_epoch`: the hashes
    /// are dropped and only counted. Callers call it once per key and set (the write epoch
    /// of the key's entry says whether it was written already).
    #[inline]
    pub(crate) fn record_first_write(&mut self, table_hash: u64, from_epoch: u32, entries: usize) {
        if self.scan_from_epoch.is_some() {
            self.scanned_writes += 1;
            return;
        }
        self.record_write(table_hash);
        let written = self.written.len();
        if written > SCAN_MIN_WRITES && written.saturating_mul(SCAN_WHEN_ONE_IN) > entries {
            self.start_scan(from_epoch);
        }
    }

    /// Switches to a scan from `from_epoch` (see [`GroupChanges::scan_from_epoch`]); the
    /// written hashes are dropped and counted.
    pub(crate) fn start_scan(&mut self, from_epoch: u32) {
        self.scanned_writes += self.written.len();
        self.written = HashTable::new();
        self.scan_from_epoch = Some(self.scan_from_epoch.map_or(from_epoch, |e| e.min(from_epoch)));
    }

    /// Records a write of the key whose table hash is `table_hash`; whether the hash was not
    /// recorded yet. One probe of a table of `u64`s, no allocation unless the table grows.
    #[inline]
    pub(crate) fn record_write(&mut self, table_hash: u64) -> bool {
        match self.written.entry(table_hash, |h| *h == table_hash, |h| *h) {
            hashbrown::hash_table::Entry::Occupied(_) => false,
            hashbrown::hash_table::Entry::Vacant(vacant) => {
                vacant.insert(table_hash);
                true
            }
        }
    }

    /// Records a change of `key` (a removal, or a write on the disk backend) by key; its table
    /// hash is `table_hash`. Whether it was not recorded yet.
    pub(crate) fn record_key(&mut self, table_hash: u64, key: &Key) -> bool {
        if self.keys.find(table_hash, |e| e.1 == *key).is_some() {
            return false;
        }
        self.keys.insert_unique(table_hash, (table_hash, key.clone()), |e| e.0);
        true
    }

    /// Whether a key with table hash `table_hash` was written.
    pub(crate) fn was_written(&self, table_hash: u64) -> bool {
        self.written.find(table_hash, |h| *h == table_hash).is_some()
    }

    /// Written hashes plus keys recorded by key plus keys written in scan mode (an upper
    /// bound of the distinct keys after a union of sets in scan mode).
    pub(crate) fn len(&self) -> usize {
        self.written.len() + self.keys.len() + self.scanned_writes
    }

    /// Whether nothing was recorded.
    pub(crate) fn is_empty(&self) -> bool {
        self.written.is_empty() && self.keys.is_empty() && self.scanned_writes == 0
    }

    /// Adds the records of `other` (a set union). `from_epoch` is the earlier start of the
    /// two sets (a scan must cover both: written hashes of a set that did not scan are
    /// dropped then).
    fn merge(&mut self, other: &GroupChanges, from_epoch: Option<u32>) {
        if let Some(scan) = other.scan_from_epoch {
            self.start_scan(from_epoch.map_or(scan, |e| e.min(scan)));
        } else if let (Some(_), Some(from)) = (self.scan_from_epoch, from_epoch) {
            self.start_scan(from);
        }
        self.scanned_writes += other.scanned_writes;
        for hash in other.written.iter() {
            if self.scan_from_epoch.is_some() {
                self.scanned_writes += 1;
            } else {
                self.record_write(*hash);
            }
        }
        for (hash, key) in other.keys.iter() {
            self.record_key(*hash, key);
        }
    }
}

/// Keys written or removed since some point, by key group: what an incremental checkpoint's
/// delta holds ([`HeapKeyedState::take_changes`], [`DiskKeyedState::take_changes`],
/// [`HeapSnapshot::encode_delta`], [`DiskSnapshot::encode_delta`]). Keys written on the heap
/// are held as hashes, removed keys and keys written on disk as keys (see the module doc).
///
/// A set may be **overflowed** ([`ChangedKeys::overflow`]): more keys changed than its owner
/// keeps in memory (the disk backend's bound), so it no longer says which; it holds no keys,
/// counts as unbounded ([`ChangedKeys::len_upper_bound`]), and the incremental checkpoint
/// that would need it writes a full base instead of a delta (`state/incremental.rs`).
#[derive(Default, Clone, Debug)]
pub struct ChangedKeys {
    pub(crate) groups: BTreeMap<u32, GroupChanges>,
    overflowed: bool,
    /// Heap backend: the write epoch of the set's first writes (entries written since have
    /// at least this epoch); what a group in scan mode scans from after a union.
    pub(crate) from_epoch: Option<u32>,
}

impl ChangedKeys {
    /// Forgets the keys (their memory is freed) and marks the set as overflowed: every key
    /// may have changed.
    pub fn overflow(&mut self) {
        self.groups.clear();
        self.overflowed = true;
    }

    /// Whether the set overflowed (see the type's doc).
    pub fn is_overflowed(&self) -> bool {
        self.overflowed
    }

    /// [`ChangedKeys::len`], or `u64::MAX` when overflowed.
    pub fn len_upper_bound(&self) -> u64 {
        if self.overflowed { u64::MAX } else { self.len() as u64 }
    }

    /// Adds the keys of `other` (a set union; overflowed if either is).
    pub fn merge(&mut self, other: &ChangedKeys) {
        if other.overflowed {
            self.overflow();
        }
        if self.overflowed {
            return;
        }
        let from_epoch = match (self.from_epoch, other.from_epoch) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        };
        for (key_group, changes) in &other.groups {
            match self.groups.entry(*key_group) {
                std::collections::btree_map::Entry::Vacant(vacant) => {
                    let mut copy = changes.clone();
                    if let (Some(_), Some(from)) = (copy.scan_from_epoch, from_epoch) {
                        copy.start_scan(from);
                    }
                    vacant.insert(copy);
                }
                std::collections::btree_map::Entry::Occupied(mut occupied) => {
                    occupied.get_mut().merge(changes, from_epoch)
                }
            }
        }
        // A group of `self` in scan mode must now cover `other`'s writes too.
        if from_epoch != self.from_epoch
            && let Some(from) = from_epoch
        {
            for changes in self.groups.values_mut() {
                if changes.scan_from_epoch.is_some() {
                    changes.start_scan(from);
                }
            }
        }
        self.from_epoch = from_epoch;
    }

    /// Records a write of `key` in `key_group` (by hash).
    pub fn insert(&mut self, key_group: u32, key: &Key) {
        self.record_write(key_group, key_hash(key));
    }

    /// Records a write of the key of `key_group` whose [`key_hash`] is `hash`, by the hash
    /// only; returns whether the hash was not recorded yet (nothing is recorded in an
    /// overflowed set).
    #[inline]
    pub fn record_write(&mut self, key_group: u32, hash: u64) -> bool {
        !self.overflowed && self.groups.entry(key_group).or_default().record_write(table_hash(hash))
    }

    /// Records a change of `key` of `key_group` (a removal, or a write on the disk backend),
    /// whose [`key_hash`] is `hash`, by key; returns whether it was not recorded yet (nothing
    /// is recorded in an overflowed set).
    pub fn record_key(&mut self, key_group: u32, hash: u64, key: &Key) -> bool {
        !self.overflowed
            && self
                .groups
                .entry(key_group)
                .or_default()
                .record_key(table_hash(hash), key)
    }

    /// The changes by key group, in key-group order; groups without changes are left out.
    pub fn by_key_group(&self) -> impl Iterator<Item = (u32, &GroupChanges)> + '_ {
        self.groups
            .iter()
            .filter(|(_, changes)| !changes.is_empty())
            .map(|(key_group, changes)| (*key_group, changes))
    }

    /// Records held: written hashes plus keys recorded by key, per key group. The entries of
    /// the delta the set makes, but for a key both written (by hash) and removed (one entry,
    /// counted twice) and for keys sharing a written hash (each an entry, counted once: a
    /// 64-bit hash, so practically never).
    pub fn len(&self) -> usize {
        self.groups.values().map(|g| g.len()).sum()
    }

    /// Whether no key changed.
    pub fn is_empty(&self) -> bool {
        self.groups.values().all(|g| g.is_empty())
    }
}

/// The disk backend's record of changed keys (aggregations and joins): off until
/// [`ChangedKeysByKey::track`], then each change recorded by key, at most `limit` keys (past
/// it the set overflows: its keys are dropped and the next incremental checkpoint is a base).
#[derive(Debug)]
pub struct ChangedKeysByKey {
    /// `None` while changes are not tracked.
    changed: Option<ChangedKeys>,
    /// Keys in `changed`.
    len: usize,
    limit: usize,
}

impl ChangedKeysByKey {
    /// Not tracking; once tracking, at most `limit` keys per set.
    pub fn new(limit: usize) -> ChangedKeysByKey {
        ChangedKeysByKey {
            changed: None,
            len: 0,
            limit,
        }
    }

    /// Starts recording (a set being recorded goes on).
    pub fn track(&mut self) {
        self.changed.get_or_insert_with(ChangedKeys::default);
    }

    /// Stops recording and drops the set recorded so far.
    pub fn stop(&mut self) {
        self.changed = None;
        self.len = 0;
    }

    /// The keys recorded since the previous call (empty when not tracking), starting a new
    /// set. O(1).
    pub fn take(&mut self) -> ChangedKeys {
        self.len = 0;
        self.changed.as_mut().map(std::mem::take).unwrap_or_default()
    }

    /// Records `key` of `key_group` (its [`key_hash`] is `hash`) when tracking; past the
    /// limit the set overflows.
    #[inline]
    pub fn record(&mut self, key_group: u32, hash: u64, key: &Key) {
        if let Some(changed) = &mut self.changed
            && changed.record_key(key_group, hash, key)
        {
            self.len += 1;
            if self.len > self.limit {
                changed.overflow();
            }
        }
    }
}

#[cfg(test)]
#[path = "changed_keys_tests.rs"]
mod tests;
