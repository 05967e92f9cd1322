//! The keys written or removed since some point, by key group: what a delta block of an
//! incremental checkpoint holds, on both state backends (`state/incremental.rs`).
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

/// Keys of one key group written or removed, each with its table hash ([`table_hash`]).
pub(crate) type ChangedTable = HashTable<(u64, Key)>;

/// Keys written or removed since some point, by key group: what an incremental checkpoint's
/// delta holds ([`HeapKeyedState::take_changes`], [`DiskKeyedState::take_changes`],
/// [`HeapSnapshot::encode_delta`], [`DiskSnapshot::encode_delta`]).
///
/// A set may be **overflowed** ([`ChangedKeys::overflow`]): more keys changed than its owner
/// keeps in memory (the disk backend's bound), so it no longer says which; it holds no keys,
/// counts as unbounded ([`ChangedKeys::len_upper_bound`]), and the incremental checkpoint
/// that would need it writes a full base instead of a delta (`state/incremental.rs`).
#[derive(Default, Clone, Debug)]
pub struct ChangedKeys {
    pub(crate) groups: BTreeMap<u32, ChangedTable>,
    overflowed: bool,
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
        for (key_group, keys) in &other.groups {
            let mine = self.groups.entry(*key_group).or_default();
            for (hash, key) in keys.iter() {
                record_change(mine, *hash, key);
            }
        }
    }

    /// Records `key` of `key_group` as changed.
    pub fn insert(&mut self, key_group: u32, key: &Key) {
        record_change(
            self.groups.entry(key_group).or_default(),
            table_hash(key_hash(key)),
            key,
        );
    }

    /// Records `key` of `key_group`, whose [`key_hash`] is `hash`, as changed (without
    /// hashing the key again).
    #[inline]
    pub fn insert_hashed(&mut self, key_group: u32, hash: u64, key: &Key) {
        record_change(self.groups.entry(key_group).or_default(), table_hash(hash), key);
    }

    /// As [`ChangedKeys::insert_hashed`]; returns whether the key was not recorded yet
    /// (nothing is recorded in an overflowed set).
    #[inline]
    pub fn insert_hashed_new(&mut self, key_group: u32, hash: u64, key: &Key) -> bool {
        if self.overflowed {
            return false;
        }
        let changed = self.groups.entry(key_group).or_default();
        let hash = table_hash(hash);
        if changed.find(hash, |e| e.1 == *key).is_some() {
            return false;
        }
        changed.insert_unique(hash, (hash, key.clone()), |e| e.0);
        true
    }

    /// The changed keys by key group, in key-group order: the group and its keys, each with
    /// its [`key_hash`] (in no particular order within a group). Groups without keys are
    /// left out.
    pub fn by_key_group(&self) -> impl Iterator<Item = (u32, Vec<(u64, &Key)>)> + '_ {
        self.groups
            .iter()
            .filter(|(_, keys)| !keys.is_empty())
            .map(|(key_group, keys)| {
                // The inverse of `table_hash` (a rotation by 32 bits).
                let keys = keys.iter().map(|(hash, key)| (hash.rotate_right(32), key)).collect();
                (*key_group, keys)
            })
    }

    /// Number of keys (per key group, each key once).
    pub fn len(&self) -> usize {
        self.groups.values().map(|g| g.len()).sum()
    }

    /// Whether no key changed.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

pub(crate) fn record_change(changed: &mut ChangedTable, hash: u64, key: &Key) {
    if changed.find(hash, |e| e.1 == *key).is_none() {
        changed.insert_unique(hash, (hash, key.clone()), |e| e.0);
    }
}
