//! The disk backend's reads, writes, TTL cleanup and snapshots ([`DiskKeyedState`]'s record
//! path), through its write-back cache: a read looks in the current generation, then the
//! pending ones newest first, then the store; a write goes into the current generation
//! (`state/disk_cache.rs`, `state/disk_write_back.rs`).

use super::{
    DiskKeyedState, DiskSnapshot, DiskStateError, KEY_PREFIX_LEN, StoreKeyBuf, decode_value, encode_value, store_key,
    store_key_group_and_hash,
};
use crate::record::Key;
use crate::state::disk::{CLEANUP_ENTRIES_PER_RECORD, CacheLookups, value_written_ms};
use crate::state::disk_cache::{CachedEntry, overlay_writes};
use crate::state::disk_rocks::StoreView;
use crate::state::ttl::expired;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// What TTL cleanup does with an expired entry of the store.
enum Cleanup {
    /// No generation holds the key: remove it from the store.
    FromStore(Vec<u8>),
    /// A generation holds an expired value of the key: a tombstone in the current one.
    Tombstone(u32, u64, Key, u64),
}

impl<V: Clone + Send + Sync + Serialize + DeserializeOwned + 'static> DiskKeyedState<V> {
    pub(crate) fn read(&self, store_key: &[u8]) -> Result<Option<(V, u64)>, DiskStateError> {
        match self.store.with_value(store_key, decode_value::<V>)? {
            None => Ok(None),
            Some(decoded) => decoded.map(Some).map_err(|e| self.err(e)),
        }
    }

    /// The newest version of `key` (whose [`key_hash`](crate::state::key_group::key_hash) is
    /// `hash`) in `key_group` below the current generation (the caller looked there): the
    /// pending generations' (`None` as the value: removed) or the store's, with its last
    /// write; `None`: not held. Counted as a hit or a miss of the cache ([`CacheLookups`]).
    fn newest_below_current(
        &self,
        key_group: u32,
        hash: u64,
        key: &Key,
    ) -> Result<Option<(Option<V>, u64)>, DiskStateError> {
        if let Some(pending) = self.cache.find_pending(hash, key) {
            self.count_lookup(true);
            return Ok(Some((pending.value.clone(), pending.written_ms)));
        }
        if !self.cache.is_off() {
            self.count_lookup(false);
        }
        Ok(self
            .read(&StoreKeyBuf::new(key_group, hash, key))?
            .map(|(value, written)| (Some(value), written)))
    }

    /// The live value of `key` (whose [`key_hash`](crate::state::key_group::key_hash) is
    /// `hash`) in `key_group`, if any and not expired at `now_ms`: from the write-back cache
    /// when a generation holds the key, else from the store (not added to the cache: a read
    /// takes `&self`). Errors: the store fails to read.
    pub fn get(&self, key_group: u32, hash: u64, key: &Key, now_ms: u64) -> Result<Option<V>, DiskStateError> {
        if let Some(cached) = self.cache.find(hash, key) {
            self.count_lookup(true);
            return Ok(cached
                .value
                .as_ref()
                .filter(|_| !expired(self.ttl, cached.written_ms, now_ms))
                .cloned());
        }
        if !self.cache.is_off() {
            self.count_lookup(false);
        }
        let found = self.read(&StoreKeyBuf::new(key_group, hash, key))?;
        Ok(found
            .filter(|(_, written)| !expired(self.ttl, *written, now_ms))
            .map(|(v, _)| v))
    }

    /// The live entries of `key_group` at `now_ms`, in no particular order: a scan of the
    /// group's key range in the store, overlaid with the write-back cache's pending
    /// generations (their encoded writes of the group, found by binary search: they are
    /// sorted by store key) and its current generation (a pass over its entries, at most an
    /// eighth of `writeCacheSize`), the newest version of each key winning and tombstones
    /// removing it. For an operator that visits a key group's entries (a window firing).
    /// Errors: the store fails to read, or an entry does not decode.
    pub fn entries_in_group(&self, key_group: u32, now_ms: u64) -> Result<Vec<(Key, V)>, DiskStateError> {
        let from = crate::state::disk_key::key_group_prefix(key_group);
        let until = crate::state::disk_key::key_group_end(key_group);
        let pending = self.cache.pending_writes();
        // Writes the store may not hold yet, oldest generation first, the newest write of each
        // key winning (a generation written back during the scan holds the same values).
        let overlay = overlay_writes(&pending, &from);
        let in_current = |hash: u64, key: &Key| self.cache.current_holds(hash, key);
        let decode_key = |store_key: &[u8]| -> Result<(u64, Key), DiskStateError> {
            let hash = store_key_group_and_hash(store_key).map(|(_, hash)| hash);
            let key = store_key
                .get(KEY_PREFIX_LEN..)
                .and_then(|bytes| postcard::from_bytes(bytes).ok());
            hash.zip(key).ok_or_else(|| self.err("a store key does not decode"))
        };
        let mut entries = Vec::new();
        let keep = |key: Key, value: &[u8], entries: &mut Vec<(Key, V)>| -> Result<(), DiskStateError> {
            let (value, written) = decode_value::<V>(value).map_err(|e| self.err(e))?;
            if !expired(self.ttl, written, now_ms) {
                entries.push((key, value));
            }
            Ok(())
        };
        self.store
            .scan(&from, until.as_ref().map(|u| u.as_slice()), |store_key, value| {
                if overlay.contains_key(store_key) {
                    return Ok(true);
                }
                let (hash, key) = decode_key(store_key)?;
                if !in_current(hash, &key) {
                    keep(key, value, &mut entries)?;
                }
                Ok(true)
            })?;
        for (store_key, write) in &overlay {
            let Some(value) = write else { continue };
            let (hash, key) = decode_key(store_key)?;
            if !in_current(hash, &key) {
                keep(key, value, &mut entries)?;
            }
        }
        for e in self.cache.current_entries().iter().filter(|e| e.key_group == key_group) {
            if let Some(value) = &e.value
                && !expired(self.ttl, e.written_ms, now_ms)
            {
                entries.push((e.key.clone(), value.clone()));
            }
        }
        Ok(entries)
    }

    /// Read-modify-write of `key` (whose [`key_hash`](crate::state::key_group::key_hash) is
    /// `hash`) in `key_group` at `now_ms`: stores `f(current live value)` written at `now_ms`
    /// and returns it. An expired value is passed as `None` (the key starts over). The new
    /// value goes into the current generation of the write-back cache (the store is read only
    /// when no generation holds the key); without a cache, into the store. Errors: the store
    /// fails to read or write, or a write-back failed.
    pub fn update(
        &mut self,
        key_group: u32,
        hash: u64,
        key: &Key,
        now_ms: u64,
        f: impl FnOnce(Option<&V>) -> V,
    ) -> Result<V, DiskStateError> {
        self.update_then(key_group, hash, key, now_ms, f, V::clone)
    }

    /// As [`DiskKeyedState::update`], returning `then(stored value)` instead of a copy of the
    /// value (a value that owns memory, a window's list, then goes into the cache without a
    /// copy). Errors: as [`DiskKeyedState::update`].
    pub fn update_then<R>(
        &mut self,
        key_group: u32,
        hash: u64,
        key: &Key,
        now_ms: u64,
        f: impl FnOnce(Option<&V>) -> V,
        then: impl FnOnce(&V) -> R,
    ) -> Result<R, DiskStateError> {
        self.record_change(key_group, hash, key);
        let ttl = self.ttl;
        let value_bytes = self.cache.value_bytes();
        if let Some(cached) = self.cache.current_mut(hash, key) {
            // The field alone, beside the cache's borrow (`count_lookup` borrows all of self).
            CacheLookups::count(&self.lookups, true);
            let held = cached.value.is_some();
            let before = cached.value.as_ref().map_or(0, value_bytes);
            let live = cached
                .value
                .as_ref()
                .filter(|_| !expired(ttl, cached.written_ms, now_ms));
            let value = f(live);
            let after = value_bytes(&value);
            let result = then(&value);
            cached.value = Some(value);
            cached.written_ms = now_ms;
            self.len += usize::from(!held);
            self.cache.resized_current(before, after)?;
            return Ok(result);
        }
        let found = self.newest_below_current(key_group, hash, key)?;
        let held = matches!(found, Some((Some(_), _)));
        self.len += usize::from(!held);
        let live = found.and_then(|(value, written)| value.filter(|_| !expired(ttl, written, now_ms)));
        let value = f(live.as_ref());
        let result = then(&value);
        if self.cache.is_off() {
            self.store
                .put(&store_key(key_group, hash, key), &encode_value(&value, now_ms))?;
        } else {
            self.cache.insert(CachedEntry {
                key: key.clone(),
                key_group,
                hash,
                value: Some(value),
                written_ms: now_ms,
            })?;
        }
        Ok(result)
    }

    /// Removes `key` from `key_group`. Returns whether an entry was held. A key a generation
    /// of the cache holds is removed by a tombstone in the current generation (its pending
    /// writes must not bring it back); any other from the store directly. Errors: the store
    /// fails to read or write, or a write-back failed.
    pub fn remove(&mut self, key_group: u32, hash: u64, key: &Key) -> Result<bool, DiskStateError> {
        self.record_change(key_group, hash, key);
        let value_bytes = self.cache.value_bytes();
        if let Some(cached) = self.cache.current_mut(hash, key) {
            let removed = cached.value.take();
            let held = removed.is_some();
            self.len = self.len.saturating_sub(usize::from(held));
            self.cache.resized_current(removed.as_ref().map_or(0, value_bytes), 0)?;
            return Ok(held);
        }
        if let Some(pending) = self.cache.find_pending(hash, key) {
            let held = pending.value.is_some();
            if held {
                let written_ms = pending.written_ms;
                self.cache.insert(CachedEntry {
                    key: key.clone(),
                    key_group,
                    hash,
                    value: None,
                    written_ms,
                })?;
                self.len = self.len.saturating_sub(1);
            }
            return Ok(held);
        }
        let store_key = store_key(key_group, hash, key);
        let held = self.store.contains(&store_key)?;
        if held {
            if self.cache.keeps_written() {
                // A generation kept for deltas may hold the key's older write: the removal
                // goes through the cache so that a delta sees it (`WriteBack::keep_written`).
                self.cache.insert(CachedEntry {
                    key: key.clone(),
                    key_group,
                    hash,
                    value: None,
                    written_ms: 0,
                })?;
            } else {
                self.store.delete(&store_key)?;
            }
            self.len = self.len.saturating_sub(1);
        }
        Ok(held)
    }

    /// Writes every cached entry into the store and waits until it is there, so the store
    /// alone holds the state: before anything writes to the store directly (a restore into a
    /// store that holds entries). Errors: a write-back failed.
    pub fn write_back_and_clear_cache(&mut self) -> Result<(), DiskStateError> {
        self.cache.drain()
    }

    /// Entries in the current generation, pending generations and bytes held by the
    /// write-back cache, for tests.
    #[cfg(test)]
    pub(crate) fn cached_entries(&self) -> (usize, usize, u64) {
        self.cache.held()
    }

    /// Generations kept after their write-back for deltas and their bytes, for tests.
    #[cfg(test)]
    pub(crate) fn kept_generations(&self) -> (usize, u64) {
        self.cache.kept()
    }

    /// Holds (`true`) or resumes the write-back thread, for tests.
    #[cfg(test)]
    pub(crate) fn pause_write_back(&self, paused: bool) {
        self.cache.pause_writer(paused);
    }

    /// Makes the write-back cache's next write-back fail, for tests.
    #[cfg(test)]
    pub(crate) fn fail_next_write_back(&self) {
        self.cache.fail_next_write_back();
    }

    /// Makes the next native checkpoint's memtable flush fail, for tests.
    #[cfg(test)]
    pub(crate) fn fail_next_flush(&self) {
        self.cache.fail_next_flush();
    }

    /// Waits until the write-back cache's pending generations are in the store, for tests.
    #[cfg(test)]
    pub(crate) fn wait_for_write_back(&mut self) {
        self.cache.wait_for_pending().unwrap();
    }

    /// What cleanup does with the store's expired entry under `store_key`: when a generation
    /// of the cache holds the key, its newest version decides (expired: a tombstone; live or
    /// removed already: nothing); else the store's entry is removed.
    /// While generations are kept for deltas (`WriteBack::keep_written`), an entry no
    /// generation holds is removed by a tombstone too (written `written_ms`, the store entry's
    /// write), so no kept generation's older write of the key outlives it in a delta.
    fn cleanup_of(&self, store_key: &[u8], written_ms: u64, now_ms: u64) -> Option<Cleanup> {
        let keeps_written = self.cache.keeps_written();
        if (!self.cache.holds_entries() && !keeps_written) || store_key.len() < KEY_PREFIX_LEN {
            return Some(Cleanup::FromStore(store_key.to_vec()));
        }
        let (key_group, hash) = store_key_group_and_hash(store_key)?;
        let Ok(key) = postcard::from_bytes::<Key>(&store_key[KEY_PREFIX_LEN..]) else {
            return Some(Cleanup::FromStore(store_key.to_vec()));
        };
        match self.cache.find(hash, &key) {
            None if keeps_written => Some(Cleanup::Tombstone(key_group, hash, key, written_ms)),
            None => Some(Cleanup::FromStore(store_key.to_vec())),
            Some(cached) if cached.value.is_some() && expired(self.ttl, cached.written_ms, now_ms) => {
                Some(Cleanup::Tombstone(key_group, hash, key, cached.written_ms))
            }
            Some(_) => None,
        }
    }

    /// Errors when a write-back of this store failed: for good, since the store lacks that
    /// generation's writes and no snapshot may be taken without them (`WriteBack`'s `failed`);
    /// and when a native checkpoint's memtable flush failed, after which RocksDB writes nothing
    /// more to the store until it recovers ([`DeltaLog::flush_failure`](super::disk_delta::DeltaLog::flush_failure)).
    /// Retires the generations written since (as [`DiskKeyedState::maintain`] does). A barrier
    /// checks it, so that the task fails with the cause (and the job restores its last
    /// checkpoint into a new store) instead of declining every later checkpoint while no batch
    /// arrives to fail it (helper-101, 2026-12-06: a disk-full run declined one every 10 s for
    /// two minutes, `tolerableFailedCheckpoints: 1000`).
    pub fn check_write_back(&mut self) -> Result<(), DiskStateError> {
        self.cache.retire_written()
    }

    /// Housekeeping between batches, at `now_ms`, after `records` records: with a TTL,
    /// incremental cleanup examines about [`CLEANUP_ENTRIES_PER_RECORD`] entries per record,
    /// continuing in key order where the last call stopped and wrapping around, and removes
    /// the expired ones (at most one pass over the store per call; a key the write-back cache
    /// holds is removed when its newest version expired, by a tombstone; entries still pending
    /// are cleaned once written back). First drops the cache's generations written back
    /// since the last call. Errors: the store fails, or a write-back failed.
    pub fn maintain(&mut self, now_ms: u64, records: usize) -> Result<(), DiskStateError> {
        // Generations written back since: no longer searched by reads nor counted.
        self.cache.retire_written()?;
        let Some(ttl) = self.ttl else { return Ok(()) };
        let budget = self
            .cleanup_credit
            .saturating_add(records.saturating_mul(CLEANUP_ENTRIES_PER_RECORD))
            .min(self.len.max(1));
        self.cleanup_credit = 0;
        if budget == 0 {
            return Ok(());
        }
        let mut examined = 0;
        let mut cleanups = Vec::new();
        // From where the last call stopped to the end, then (a wrap) from the first key up to
        // where this call started, never further: the budget may exceed the store's entries
        // (the live count includes keys only the write-back cache holds), and an entry
        // examined twice would be cleaned, and counted, twice.
        let start = std::mem::take(&mut self.cleanup_cursor);
        let mut wrapped = false;
        loop {
            let (from, until): (&[u8], Option<&[u8]>) = if wrapped {
                (&[], Some(start.as_slice()))
            } else {
                (start.as_slice(), None)
            };
            let mut stopped_at = None;
            self.store.scan(from, until, |key, value| {
                examined += 1;
                let written = value_written_ms(value).ok_or_else(|| self.err("an entry without its write time"))?;
                if ttl.is_expired(written, now_ms) {
                    cleanups.extend(self.cleanup_of(key, written, now_ms));
                }
                if examined >= budget {
                    let mut after = key.to_vec();
                    after.push(0);
                    stopped_at = Some(after);
                    return Ok(false);
                }
                Ok(true)
            })?;
            match stopped_at {
                // The budget ran out: the next call goes on after the last key examined.
                Some(after) => {
                    self.cleanup_cursor = after;
                    break;
                }
                // The first key reached again: every entry was examined once.
                None if wrapped => {
                    self.cleanup_cursor = start;
                    break;
                }
                // The end of the store: from its first key, once per call (the first pass
                // began there already when the last call reached the end).
                None if start.is_empty() => break,
                None => wrapped = true,
            }
        }
        for cleanup in cleanups {
            match cleanup {
                Cleanup::FromStore(key) => self.store.delete(&key)?,
                Cleanup::Tombstone(key_group, hash, key, written_ms) => match self.cache.current_mut(hash, &key) {
                    Some(cached) => {
                        let removed = cached.value.take();
                        let value_bytes = self.cache.value_bytes();
                        self.cache.resized_current(removed.as_ref().map_or(0, value_bytes), 0)?;
                    }
                    None => self.cache.insert(CachedEntry {
                        key,
                        key_group,
                        hash,
                        value: None,
                        written_ms,
                    })?,
                },
            }
            self.len = self.len.saturating_sub(1);
        }
        Ok(())
    }

    /// Whether the write-back cache is on (`writeCacheSize` above 0).
    pub fn write_back_cache_on(&self) -> bool {
        !self.cache.is_off()
    }

    /// Freezes the write-back cache's current generation for a native checkpoint
    /// (`state/disk_native.rs`). Errors: a write-back failed.
    pub(crate) fn freeze_for_native_checkpoint(&mut self) -> Result<(), DiskStateError> {
        self.cache.freeze_for_snapshot().map(|_| ())
    }

    /// Asks the write-back thread for a RocksDB checkpoint of the store in `into` after the
    /// generations frozen so far (`WriteBack::request_checkpoint`). Errors: as it.
    pub(crate) fn request_native_checkpoint(
        &mut self,
        into: std::path::PathBuf,
    ) -> Result<std::sync::mpsc::Receiver<Result<(), String>>, DiskStateError> {
        self.cache.request_checkpoint(into)
    }

    /// The synchronous part of a snapshot at `now_ms`: the write-back cache's current
    /// generation frozen (a move, no store write) and the generations pending now handed to
    /// the snapshot, then the store's MVCC read view (O(1), no entry read). The snapshot
    /// merges those generations over the view while it encodes, off the task thread
    /// ([`DiskSnapshot::encode`]); their write-back runs meanwhile on the store's write-back
    /// thread. If the write-back fell behind (pending generations over their share of
    /// `writeCacheSize`), this waits for the oldest. Should a write-back have failed, the
    /// snapshot carries the error and fails to encode.
    pub fn snapshot(&mut self, now_ms: u64) -> DiskSnapshot {
        let (overlays, write_back_error) = match self.cache.freeze_for_snapshot() {
            Ok(overlays) => (overlays, None),
            Err(e) => (Vec::new(), Some(e)),
        };
        let delta_overlays = if write_back_error.is_none() && self.cache.keeps_written() {
            self.cache.for_delta()
        } else {
            Vec::new()
        };
        DiskSnapshot {
            write_back_error,
            overlays,
            delta_overlays,
            view: StoreView::new(&self.store),
            dir: self.dir.clone(),
            ttl: self.ttl,
            now_ms,
            range: self.range,
        }
    }
}
