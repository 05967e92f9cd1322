//! The disk backend's write-back cache of hot entries ([`WriteBackCache`]): the entries read or
//! written most recently, held as values in memory in front of the LSM store, so a key read
//! and written again while it is cached costs a hash-table lookup instead of the store's
//! point read (memtables, filters, blocks) and memtable insert.
//!
//! The cache holds at most [`DiskStateOptions::write_cache_bytes`](crate::state::disk::DiskStateOptions)
//! of entries (counted as [`entry_bytes`]), whatever the key count. When a new entry would
//! go past that bound, entries are evicted in CLOCK order (a second-chance approximation of
//! least-recently-used: an entry found again since the hand last passed it stays for one more
//! turn); an evicted entry that changed since it was last written to the store (dirty) is
//! handed to the caller to write back. Before a snapshot, every dirty entry is written back
//! (`DiskKeyedState::snapshot`), so the store's read view is exact.

use crate::record::Key;
use crate::state::heap::table_hash;
use hashbrown::HashTable;

/// One cached entry: a key, its value (`None`: removed) and the value's last write.
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
    /// The value's last write, ms since the Unix epoch.
    pub written_ms: u64,
    /// Whether the entry changed since it was last written to the store.
    pub dirty: bool,
    /// CLOCK's reference bit: found again since the hand last passed.
    referenced: bool,
}

impl<V> CachedEntry<V> {
    /// A new entry, dirty when it is not what the store holds.
    pub fn new(key: Key, key_group: u32, hash: u64, value: Option<V>, written_ms: u64, dirty: bool) -> Self {
        CachedEntry {
            key,
            key_group,
            hash,
            value,
            written_ms,
            dirty,
            referenced: false,
        }
    }
}

/// Bytes an entry of `key` is counted as: the entry itself, its index slot (4 bytes and a
/// control byte of the hash table) and the key's heap bytes (a string key longer than 24
/// bytes, which `CompactString` does not hold inline). Values are small fixed-size numbers
/// (`Num`) with no heap part.
pub(crate) fn entry_bytes<V>(key: &Key) -> u64 {
    let heap = match key {
        Key::Str(s) if s.len() > 24 => s.len(),
        _ => 0,
    };
    (std::mem::size_of::<CachedEntry<V>>() + 5 + heap) as u64
}

/// A bounded write-back cache of entries (see the module doc). Not thread-safe: the task
/// thread owns it.
pub(crate) struct WriteBackCache<V> {
    /// Indexes into `entries`, hashed by the key's [`table_hash`].
    index: HashTable<u32>,
    entries: Vec<CachedEntry<V>>,
    /// CLOCK's hand: the next entry eviction looks at.
    hand: usize,
    /// Bytes counted for the entries held ([`entry_bytes`]).
    bytes: u64,
    /// Most bytes held.
    budget: u64,
    /// Dirty entries held.
    dirty: usize,
}

impl<V> WriteBackCache<V> {
    /// An empty cache holding at most `budget` bytes of entries (0: every entry is evicted
    /// as soon as it is inserted, so writes go straight through).
    pub fn new(budget: u64) -> Self {
        WriteBackCache {
            index: HashTable::new(),
            entries: Vec::new(),
            hand: 0,
            bytes: 0,
            budget,
            dirty: 0,
        }
    }

    /// Entries held.
    pub fn len(&self) -> usize {
        self.entries.len()
    }

    /// Bytes counted for the entries held (at most the budget after every insert).
    #[cfg(test)]
    pub fn bytes(&self) -> u64 {
        self.bytes
    }

    /// Dirty entries held.
    pub fn dirty(&self) -> usize {
        self.dirty
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

    /// The entry of `key` (whose hash is `hash`), if cached, without marking it used.
    pub fn peek(&self, hash: u64, key: &Key) -> Option<&CachedEntry<V>> {
        self.position(hash, key).map(|i| &self.entries[i])
    }

    /// Sets `entry` to `value` written at `written_ms`, dirty (`entry` is one [`WriteBackCache::find`]
    /// returned: the dirty count is kept here).
    pub fn write(dirty: &mut usize, entry: &mut CachedEntry<V>, value: Option<V>, written_ms: u64) {
        if !entry.dirty {
            *dirty += 1;
        }
        entry.value = value;
        entry.written_ms = written_ms;
        entry.dirty = true;
    }

    /// [`WriteBackCache::find`] and the dirty count, to change the entry with
    /// [`WriteBackCache::write`].
    pub fn find_for_write(&mut self, hash: u64, key: &Key) -> Option<(&mut CachedEntry<V>, &mut usize)> {
        let i = self.position(hash, key)?;
        let entry = &mut self.entries[i];
        entry.referenced = true;
        Some((entry, &mut self.dirty))
    }

    /// Adds `entry`, whose key is not cached, then evicts entries in CLOCK order while more
    /// than the budget is held (possibly `entry` itself), handing each evicted dirty entry to
    /// `write_back`. Errors: the first error of `write_back` (the entry it failed on is lost:
    /// the caller's state fails).
    pub fn insert<E>(
        &mut self,
        entry: CachedEntry<V>,
        mut write_back: impl FnMut(CachedEntry<V>) -> Result<(), E>,
    ) -> Result<(), E> {
        debug_assert!(
            self.position(entry.hash, &entry.key).is_none(),
            "inserting a cached key"
        );
        self.bytes += entry_bytes::<V>(&entry.key);
        self.dirty += usize::from(entry.dirty);
        let at = self.entries.len() as u32;
        let entries = &self.entries;
        self.index
            .insert_unique(table_hash(entry.hash), at, |&i| table_hash(entries[i as usize].hash));
        self.entries.push(entry);
        while self.bytes > self.budget && !self.entries.is_empty() {
            if self.hand >= self.entries.len() {
                self.hand = 0;
            }
            let candidate = &mut self.entries[self.hand];
            if candidate.referenced {
                candidate.referenced = false;
                self.hand += 1;
                continue;
            }
            let evicted = self.remove_at(self.hand);
            if evicted.dirty {
                write_back(evicted)?;
            }
        }
        Ok(())
    }

    /// Removes the entry of `key` (whose hash is `hash`) without writing it anywhere, and
    /// returns it, if cached.
    pub fn remove(&mut self, hash: u64, key: &Key) -> Option<CachedEntry<V>> {
        let at = self.position(hash, key)?;
        Some(self.remove_at(at))
    }

    /// Removes the entry at `at` (the last entry moves into its place) and returns it.
    fn remove_at(&mut self, at: usize) -> CachedEntry<V> {
        let hash = table_hash(self.entries[at].hash);
        if let Ok(slot) = self.index.find_entry(hash, |&i| i as usize == at) {
            slot.remove();
        }
        let evicted = self.entries.swap_remove(at);
        if at < self.entries.len() {
            // The former last entry is now at `at`.
            let moved_from = self.entries.len() as u32;
            let moved_hash = table_hash(self.entries[at].hash);
            if let Some(i) = self.index.find_mut(moved_hash, |&i| i == moved_from) {
                *i = at as u32;
            }
        }
        self.bytes -= entry_bytes::<V>(&evicted.key);
        self.dirty -= usize::from(evicted.dirty);
        evicted
    }

    /// Hands every dirty entry to `write_back` (by reference, in no particular order); they
    /// stay dirty until [`WriteBackCache::mark_clean`]. Errors: the first error of
    /// `write_back`.
    pub fn each_dirty<E>(&self, write_back: impl FnMut(&CachedEntry<V>) -> Result<(), E>) -> Result<(), E> {
        if self.dirty == 0 {
            return Ok(());
        }
        self.entries.iter().filter(|e| e.dirty).try_for_each(write_back)
    }

    /// Marks every entry clean (after the dirty ones were written to the store).
    pub fn mark_clean(&mut self) {
        if self.dirty == 0 {
            return;
        }
        for entry in &mut self.entries {
            entry.dirty = false;
        }
        self.dirty = 0;
    }

    /// Removes every entry, returning the dirty ones (to write back).
    pub fn drain_dirty(&mut self) -> Vec<CachedEntry<V>> {
        self.index.clear();
        self.hand = 0;
        self.bytes = 0;
        self.dirty = 0;
        std::mem::take(&mut self.entries)
            .into_iter()
            .filter(|e| e.dirty)
            .collect()
    }
}

#[cfg(test)]
#[path = "disk_cache_tests.rs"]
mod tests;
