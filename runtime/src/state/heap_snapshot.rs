//! The heap backend's snapshot ([`HeapSnapshot`]): the key-group tables frozen at a barrier
//! (shared with [`HeapKeyedState`](crate::state::heap::HeapKeyedState) copy-on-write), encoded
//! off the task thread, several key groups at a time ([`parallel`]).

use crate::record::Key;
use crate::state::changed_keys::GroupChanges;
use crate::state::heap::{BaseTable, ChangedKeys, DeltaTable, Stamped, lookup_layers, table_hash};
use crate::state::key_group::key_hash;
use crate::state::keyed_block;
use crate::state::parallel;
use crate::state::snapshot::KeyGroupBlock;
use crate::state::ttl::{StateTtl, expired};
use serde::Serialize;
use std::sync::Arc;

/// One key group as of a barrier: its table and the deltas frozen before the barrier.
pub(crate) struct GroupView<V> {
    pub(crate) key_group: u32,
    pub(crate) base: Arc<BaseTable<V>>,
    pub(crate) deltas: Vec<Arc<DeltaTable<V>>>,
}

impl<V> GroupView<V> {
    /// Appends to `out` every key held as of the barrier (expired or not) whose table hash is
    /// `hash`, each once, with its newest entry: the base's and the frozen deltas' entries under
    /// `hash` (`iter_hash` yields every entry that may have it; a base entry's hash is
    /// recomputed from its key by `hash_of`, [`key_table_hash`] but in tests, to drop the
    /// others), resolved newest layer first.
    fn held_with_hash<'a>(
        &'a self,
        hash: u64,
        hash_of: &impl Fn(&Key) -> u64,
        out: &mut Vec<(&'a Key, &'a Stamped<V>)>,
    ) {
        if self.deltas.is_empty() {
            // No frozen layer (the usual case): the base's entries are the state.
            out.extend(
                self.base
                    .iter_hash(hash)
                    .filter(|e| hash_of(&e.0) == hash)
                    .map(|e| (&e.0, &e.1)),
            );
            return;
        }
        let start = out.len();
        let candidates = self
            .base
            .iter_hash(hash)
            .filter(|e| hash_of(&e.0) == hash)
            .map(|e| &e.0)
            .chain(
                self.deltas
                    .iter()
                    .flat_map(|d| d.iter_hash(hash).filter(|e| e.table_hash == hash).map(|e| &e.key)),
            );
        for key in candidates {
            if out[start..].iter().any(|(k, _)| *k == key) {
                continue;
            }
            if let Some(Some(stamped)) = lookup_layers(&self.base, &self.deltas, None, hash, key) {
                out.push((key, stamped));
            }
        }
    }

    /// The live entries as of the barrier (a key's newest layer wins), in table order, as
    /// Flink's heap snapshots: a restore needs no order, and sorting by key made the encoding
    /// of 5M keys take 2.9 s instead of 0.4 s (`benches/keyed_state.rs`, one run each).
    fn entries(&self, ttl: Option<StateTtl>, now_ms: u64) -> Vec<(&Key, &Stamped<V>)> {
        let live = |s: &Stamped<V>| !expired(ttl, s.written_ms, now_ms);
        let in_deltas = |deltas: &[Arc<DeltaTable<V>>], hash: u64, key: &Key| {
            deltas.iter().any(|d| d.find(hash, |e| e.key == *key).is_some())
        };
        let mut out = Vec::with_capacity(self.base.len());
        for (key, stamped) in self.base.iter() {
            if live(stamped) && (self.deltas.is_empty() || !in_deltas(&self.deltas, table_hash(key_hash(key)), key)) {
                out.push((key, stamped));
            }
        }
        for (i, delta) in self.deltas.iter().enumerate() {
            for entry in delta.iter() {
                if let Some(stamped) = &entry.slot
                    && live(stamped)
                    && !in_deltas(&self.deltas[i + 1..], entry.table_hash, &entry.key)
                {
                    out.push((&entry.key, stamped));
                }
            }
        }
        out
    }
}

impl<V> GroupView<V> {
    /// Every key held as of the barrier (expired or not) whose newest entry was written at
    /// write epoch `from` or later ([`Stamped::written_epoch`]), in table order: one pass over
    /// the base table and the frozen deltas, each entry checked by its epoch first (an old
    /// base entry is skipped without a lookup).
    fn written_since(&self, from: u32) -> Vec<(&Key, &Stamped<V>)> {
        let in_deltas = |deltas: &[Arc<DeltaTable<V>>], hash: u64, key: &Key| {
            deltas.iter().any(|d| d.find(hash, |e| e.key == *key).is_some())
        };
        let mut out = Vec::new();
        for (key, stamped) in self.base.iter() {
            if stamped.written_epoch >= from
                && (self.deltas.is_empty() || !in_deltas(&self.deltas, table_hash(key_hash(key)), key))
            {
                out.push((key, stamped));
            }
        }
        for (i, delta) in self.deltas.iter().enumerate() {
            for entry in delta.iter() {
                if let Some(stamped) = &entry.slot
                    && stamped.written_epoch >= from
                    && !in_deltas(&self.deltas[i + 1..], entry.table_hash, &entry.key)
                {
                    out.push((&entry.key, stamped));
                }
            }
        }
        out
    }
}

impl<V: Serialize> GroupView<V> {
    /// This group's block (see [`HeapSnapshot::encode`]), `None` when no entry is live.
    /// Dropping `self` afterwards releases the group's tables.
    fn encode(self, ttl: Option<StateTtl>, now_ms: u64) -> Result<Option<KeyGroupBlock>, postcard::Error> {
        if ttl.is_none() && self.deltas.is_empty() {
            // The usual case: every entry of the base is live and the newest; written straight
            // from the table, without entry vectors.
            let count = self.base.len();
            if count == 0 {
                return Ok(None);
            }
            let data = keyed_block::encode_v1_each(count, self.base.iter().map(|(k, s)| (k, &s.value)))?;
            return Ok(Some(KeyGroupBlock {
                expired_through_ms: None,
                key_group: self.key_group,
                entries: count as u64,
                data: data.into(),
            }));
        }
        let entries = self.entries(ttl, now_ms);
        if entries.is_empty() {
            return Ok(None);
        }
        let data = match ttl {
            None => {
                let plain: Vec<(&Key, &V)> = entries.iter().map(|(k, s)| (*k, &s.value)).collect();
                keyed_block::encode_v1(&plain)?
            }
            Some(_) => {
                let timed: Vec<(&Key, &V, u64)> = entries.iter().map(|(k, s)| (*k, &s.value, s.written_ms)).collect();
                keyed_block::encode_v2(&timed)?
            }
        };
        Ok(Some(KeyGroupBlock {
            expired_through_ms: None,
            key_group: self.key_group,
            entries: entries.len() as u64,
            data: data.into(),
        }))
    }
}

/// Key groups each encoder thread may be ahead of the upload ([`HeapSnapshot::encode_each`]):
/// enough to keep the workers busy while a part uploads, few enough that memory holds a few
/// blocks (a block is 1/128 of the state at the default maximum parallelism).
pub const ENCODE_WINDOW_PER_WORKER: usize = 4;

/// The state of a subtask as of a barrier, sharing the frozen tables (cheap to create, `Send`
/// to an encoder thread). Dropping it releases the tables for merging.
pub struct HeapSnapshot<V> {
    pub(crate) views: Vec<GroupView<V>>,
    pub(crate) ttl: Option<StateTtl>,
    pub(crate) now_ms: u64,
}

impl<V: Serialize> HeapSnapshot<V> {
    /// Encodes one block per key group with live entries: block version 1
    /// without a TTL (the format of every earlier release), version 2 (with write times) with
    /// one ([`keyed_block`]). Entries expired at the barrier are left out. Key groups are
    /// encoded on up to [`parallel::max_workers`] threads, blocks in key-group order; each
    /// group's tables are released as soon as it is encoded.
    pub fn encode(self) -> Result<Vec<KeyGroupBlock>, postcard::Error>
    where
        V: Send + Sync,
    {
        self.encode_on(parallel::max_workers())
    }

    /// [`HeapSnapshot::encode`] as a stream: each block is handed to `emit` in key-group
    /// order as soon as it and the groups before it are encoded, so the blocks already
    /// encoded upload while later groups encode. The groups are encoded on up to
    /// [`parallel::max_workers`] threads that live for the whole snapshot
    /// ([`parallel::for_each_in_order`]): a worker goes on to the next group while `emit`
    /// waits for storage, up to [`ENCODE_WINDOW_PER_WORKER`] groups per worker ahead of it,
    /// so memory holds that many blocks. Stops at the first error of `emit` and returns it.
    pub fn encode_each<E: From<postcard::Error>>(
        self,
        emit: &mut dyn FnMut(KeyGroupBlock) -> Result<(), E>,
    ) -> Result<(), E>
    where
        V: Send + Sync,
    {
        self.encode_each_on(parallel::max_workers(), emit)
    }

    /// [`HeapSnapshot::encode_each`] on up to `workers` threads (the same blocks in the same
    /// order for any count).
    pub fn encode_each_on<E: From<postcard::Error>>(
        self,
        workers: usize,
        emit: &mut dyn FnMut(KeyGroupBlock) -> Result<(), E>,
    ) -> Result<(), E>
    where
        V: Send + Sync,
    {
        let (ttl, now_ms) = (self.ttl, self.now_ms);
        let window = workers.max(1) * ENCODE_WINDOW_PER_WORKER;
        parallel::for_each_in_order(
            self.views,
            workers,
            window,
            |view| view.encode(ttl, now_ms),
            &mut |block| match block? {
                Some(block) => emit(block),
                None => Ok(()),
            },
        )?;
        Ok(())
    }

    /// [`HeapSnapshot::encode`] on up to `workers` threads (the same bytes for any count).
    pub fn encode_on(self, workers: usize) -> Result<Vec<KeyGroupBlock>, postcard::Error>
    where
        V: Send + Sync,
    {
        let (ttl, now_ms) = (self.ttl, self.now_ms);
        let blocks = parallel::map_in_order(self.views, workers, |view| view.encode(ttl, now_ms));
        blocks.into_iter().filter_map(Result::transpose).collect()
    }

    /// Encodes a delta block ([`keyed_block::encode_delta`]) per key group of `changes`: the
    /// keys held as of the barrier under each written hash (with their values; an expired one
    /// as removed), and each removed key with its state as of the barrier (removed, or its
    /// value when written again). Groups without changes have no block. O(changed keys).
    /// Each group's tables are released as soon as its block is encoded (groups without
    /// changes at once), as [`HeapSnapshot::encode`] does: until then the task writes that
    /// group into a delta table and merges it back afterwards, which at 50M keys with
    /// checkpoints every second was a fifth of the task thread's time (`perf record`,
    /// 2026-12-04: `lookup_layers` 10 %, merging 10 % of the job's CPU).
    pub fn encode_delta(self, changes: &ChangedKeys) -> Result<Vec<KeyGroupBlock>, postcard::Error> {
        let mut blocks = Vec::with_capacity(changes.groups.len());
        self.encode_delta_each(changes, &mut |block| {
            blocks.push(block);
            Ok(())
        })?;
        Ok(blocks)
    }

    /// [`HeapSnapshot::encode_delta`] block by block: `emit` gets each group's block in
    /// key-group order, after that group's tables are released. Stops at the first error of
    /// `emit` and returns it.
    pub fn encode_delta_each<E: From<postcard::Error>>(
        self,
        changes: &ChangedKeys,
        emit: &mut dyn FnMut(KeyGroupBlock) -> Result<(), E>,
    ) -> Result<(), E> {
        let (ttl, now_ms) = (self.ttl, self.now_ms);
        let mut views = self.views.into_iter().peekable();
        // `views` and `by_key_group` are both in key-group order.
        for (key_group, group_changes) in changes.by_key_group() {
            while views.next_if(|v| v.key_group < key_group).is_some() {}
            let view = views.next_if(|v| v.key_group == key_group);
            let block = {
                let entries = delta_entries(view.as_ref(), group_changes, ttl, now_ms, &key_table_hash);
                KeyGroupBlock {
                    expired_through_ms: None,
                    key_group,
                    entries: entries.len() as u64,
                    data: keyed_block::encode_delta(&entries)?.into(),
                }
            };
            drop(view);
            emit(block)?;
        }
        Ok(())
    }
}

/// The table hash of `key` ([`table_hash`] of its [`key_hash`]).
pub(crate) fn key_table_hash(key: &Key) -> u64 {
    table_hash(key_hash(key))
}

/// One key group's delta entries as of the barrier (see [`HeapSnapshot::encode_delta`]):
/// `(key, live value, its write time)` (0 without `ttl`: see `state/keyed_block.rs`), or
/// `(key, None, 0)` for a key not held or expired at the barrier. `view` is `None` when the group held no entry at the barrier. A written hash
/// yields every key held under it (two keys sharing a hash: both, each with its own state);
/// a key recorded by key is left out when a written hash already yielded it. `hash_of`: a key's
/// table hash ([`key_table_hash`]; tests substitute one to make keys collide).
pub(crate) fn delta_entries<'a, V>(
    view: Option<&'a GroupView<V>>,
    changes: &'a GroupChanges,
    ttl: Option<StateTtl>,
    now_ms: u64,
    hash_of: &impl Fn(&Key) -> u64,
) -> Vec<(&'a Key, Option<&'a V>, u64)> {
    let state_of = |key: &'a Key, stamped: Option<&'a Stamped<V>>| match stamped {
        Some(s) if !expired(ttl, s.written_ms, now_ms) => {
            (key, Some(&s.value), if ttl.is_some() { s.written_ms } else { 0 })
        }
        _ => (key, None, 0),
    };
    let mut entries = Vec::with_capacity(changes.len());
    if let Some(view) = view {
        let mut keys = Vec::new();
        for &hash in changes.written.iter() {
            view.held_with_hash(hash, hash_of, &mut keys);
            entries.extend(keys.drain(..).map(|(key, stamped)| state_of(key, Some(stamped))));
        }
        if let Some(from) = changes.scan_from_epoch {
            let written = view.written_since(from);
            entries.extend(written.into_iter().map(|(key, stamped)| state_of(key, Some(stamped))));
        }
    }
    for (hash, key) in changes.keys.iter() {
        let held = view.and_then(|v| lookup_layers(&v.base, &v.deltas, None, *hash, key).flatten());
        let scanned = |s: &Stamped<V>| changes.scan_from_epoch.is_some_and(|from| s.written_epoch >= from);
        if held.is_some_and(|s| changes.was_written(*hash) || scanned(s)) {
            // Held and written (removed, then written again): yielded above.
            continue;
        }
        entries.push(state_of(key, held));
    }
    entries
}
