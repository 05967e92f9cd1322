//! Lazy restore: the restored key groups of a subtask that are not built into its keyed state
//! yet, so processing starts before every key is decoded.
//!
//! A restore used to decode every entry of every owned key group into the backend before the
//! first record (83–95 % of a restore's time, docs/runtime/state-backends-log.md). With
//! [`PendingKeyGroups`] in front of a [`KeyedState`] (either backend) the restored blocks stay
//! encoded (they are in memory after the download anyway), one list per key group, and a key
//! group is built on first access: keyed access always knows the key group of its key, so
//! before a batch is processed the groups its records touch are built (several at a time, on
//! the backend's restore threads), and after each batch a few more ([`BUILD_PER_BATCH`]) are
//! built in key-group order, so the whole state is built soon and throughput returns to
//! normal.
//!
//! **Exactness.** A group is built exactly as an eager restore would have built it: its blocks
//! in the order restored (a chain's base, then its deltas), entries expired at the *restore's*
//! time dropped and entries of a block without timestamps stamped with that time (not the time
//! of the build). A pending group holds no entry in the backend, so the backend's snapshot
//! does not see it; a checkpoint or savepoint taken while groups are pending writes each
//! pending group that is one full block **as it is** (its bytes, the same block format:
//! cheapest, no decode) and first **builds** the groups it cannot write as they are: several
//! blocks (a chain's base and deltas, which a full state file must not carry as one group) or
//! any group of a step with a TTL (a snapshot leaves out entries expired at its barrier; a
//! block written as it is would keep them, and a restore with a longer TTL or none would bring
//! them back). Pending groups never have changed keys, so a delta is unaffected. Rescale needs
//! nothing here: only the blocks of the subtask's own range are kept (the others are dropped
//! at construction, as an eager restore skips them), whatever the parallelism they came from.

use crate::state::backend::KeyedState;
use crate::state::key_group::KeyGroupRange;
use crate::state::keyed_block;
use crate::state::snapshot::KeyGroupBlock;
use serde::Serialize;
use serde::de::DeserializeOwned;
use std::sync::Arc;

/// Key groups built after each batch in addition to the ones the batch touches: a small,
/// bounded pause per batch (one key group is 1/128 of a subtask's state at the default
/// maxParallelism and parallelism 1) that brings the state to fully built in a few hundred
/// batches even when the keys of the input touch few key groups.
pub const BUILD_PER_BATCH: usize = 2;

/// The restored, not yet built key groups of one subtask (see the module docs).
#[derive(Debug)]
pub struct PendingKeyGroups {
    range: KeyGroupRange,
    /// The restore's processing time (ms since the Unix epoch): what every build uses.
    restore_now_ms: u64,
    /// `groups[kg - range.start]`: the group's blocks in restore order while it is pending.
    groups: Vec<Option<Arc<Vec<KeyGroupBlock>>>>,
    /// Groups pending.
    pending: usize,
    /// Entries in the pending groups' blocks (deltas' entries included: an upper bound).
    pending_entries: u64,
    /// Where [`PendingKeyGroups::take_next`] looks first.
    cursor: usize,
    /// Whether the [`BUILD_PER_BATCH`] groups the last batch owes are still to be built
    /// ([`PendingKeyGroups::owe_extra_build`]).
    extra_owed: bool,
}

/// What a snapshot takes of the pending groups ([`PendingKeyGroups::for_snapshot`]).
#[derive(Debug, Default)]
pub struct PendingSnapshot {
    /// Full blocks written as they are, in key-group order (shared with the pending layer: no
    /// copy on the task thread).
    pub as_is: Vec<Arc<Vec<KeyGroupBlock>>>,
}

impl PendingKeyGroups {
    /// Nothing pending (a start without a restore).
    pub fn none(range: KeyGroupRange) -> PendingKeyGroups {
        PendingKeyGroups::new(range, Vec::new(), 0).expect("no block to check")
    }

    /// `blocks` of the key groups in `range` (the others are dropped) pending, each group's in
    /// the order given; `restore_now_ms` is the time every build restores at. Each block's
    /// header (version and entry count, O(1)) is checked here, so a block of a version this
    /// build does not read is refused before the first record, as an eager restore refused
    /// it. Errors: the key group and why its block does not decode.
    pub fn new(
        range: KeyGroupRange,
        blocks: Vec<KeyGroupBlock>,
        restore_now_ms: u64,
    ) -> Result<PendingKeyGroups, String> {
        let mut lists: Vec<Vec<KeyGroupBlock>> = (0..range.len()).map(|_| Vec::new()).collect();
        let mut pending_entries = 0;
        for block in blocks {
            if range.contains(block.key_group) {
                keyed_block::entry_count(&block.data)
                    .map_err(|e| format!("key group {} does not decode: {e}", block.key_group))?;
                pending_entries += block.entries;
                lists[(block.key_group - range.start) as usize].push(block);
            }
        }
        let groups: Vec<_> = lists
            .into_iter()
            .map(|blocks| (!blocks.is_empty()).then(|| Arc::new(blocks)))
            .collect();
        Ok(PendingKeyGroups {
            range,
            restore_now_ms,
            pending: groups.iter().filter(|g| g.is_some()).count(),
            pending_entries,
            groups,
            cursor: 0,
            extra_owed: false,
        })
    }

    /// Records that a batch was processed after building only the groups it touched: the
    /// [`BUILD_PER_BATCH`] more groups each batch pays for are built before the next batch
    /// ([`PendingKeyGroups::take_extra_owed`]) or while idle, so a batch's output (the first
    /// record's, after a restore) does not wait for them.
    pub fn owe_extra_build(&mut self) {
        self.extra_owed = !self.is_empty();
    }

    /// Whether a batch owes [`BUILD_PER_BATCH`] more builds; clears the debt.
    pub fn take_extra_owed(&mut self) -> bool {
        std::mem::take(&mut self.extra_owed)
    }

    /// Whether every restored group is built (the usual state: one branch per batch).
    #[inline]
    pub fn is_empty(&self) -> bool {
        self.pending == 0
    }

    /// Key groups still pending.
    pub fn len(&self) -> usize {
        self.pending
    }

    /// Entries in the pending groups' blocks (an upper bound when a group has deltas).
    pub fn pending_entries(&self) -> u64 {
        self.pending_entries
    }

    /// Whether `key_group` is pending (false outside the range).
    pub fn is_pending(&self, key_group: u32) -> bool {
        self.range.contains(key_group) && self.groups[(key_group - self.range.start) as usize].is_some()
    }

    /// The time builds restore at (ms since the Unix epoch).
    pub fn restore_now_ms(&self) -> u64 {
        self.restore_now_ms
    }

    fn take_group(&mut self, index: usize, out: &mut Vec<KeyGroupBlock>) {
        if let Some(blocks) = self.groups[index].take() {
            self.pending -= 1;
            self.pending_entries -= blocks.iter().map(|b| b.entries).sum::<u64>();
            // A snapshot may still share the list (it writes it as it is): copy then.
            out.extend(Arc::unwrap_or_clone(blocks));
        }
    }

    /// Takes the blocks of those of `key_groups` that are pending (each once, in the order
    /// first named; groups outside the range are ignored): they count as built from now on.
    pub fn take(&mut self, key_groups: impl IntoIterator<Item = u32>) -> Vec<KeyGroupBlock> {
        let mut out = Vec::new();
        if self.is_empty() {
            return out;
        }
        for key_group in key_groups {
            if self.is_pending(key_group) {
                self.take_group((key_group - self.range.start) as usize, &mut out);
                if self.is_empty() {
                    break;
                }
            }
        }
        out
    }

    /// Takes the blocks of up to `n` pending groups, lowest key group first from where the
    /// previous call stopped.
    pub fn take_next(&mut self, n: usize) -> Vec<KeyGroupBlock> {
        let mut out = Vec::new();
        let mut taken = 0;
        while taken < n && !self.is_empty() {
            if self.groups[self.cursor].is_some() {
                self.take_group(self.cursor, &mut out);
                taken += 1;
            }
            self.cursor = (self.cursor + 1) % self.groups.len();
        }
        out
    }

    /// Takes every pending group's blocks.
    pub fn take_all(&mut self) -> Vec<KeyGroupBlock> {
        self.take_next(usize::MAX)
    }

    /// What a snapshot writes of the pending groups: without `ttl`, the groups that are one
    /// full block are shared as they are; the blocks of the
    /// others are taken (returned second) for the caller to build before it snapshots the
    /// backend.
    pub fn for_snapshot(&mut self, ttl: bool) -> (PendingSnapshot, Vec<KeyGroupBlock>) {
        let mut snapshot = PendingSnapshot::default();
        let mut build = Vec::new();
        if self.is_empty() {
            return (snapshot, build);
        }
        for index in 0..self.groups.len() {
            let Some(blocks) = &self.groups[index] else { continue };
            if writable_as_is(blocks, ttl) {
                snapshot.as_is.push(blocks.clone());
            } else {
                self.take_group(index, &mut build);
            }
        }
        (snapshot, build)
    }

    /// Builds the pending ones of `key_groups` into `state` (several at a time on the
    /// backend's restore threads). Errors: as [`KeyedState::restore`].
    pub fn build<V>(
        &mut self,
        state: &mut KeyedState<V>,
        key_groups: impl IntoIterator<Item = u32>,
    ) -> Result<(), String>
    where
        V: Clone + Send + Sync + Serialize + DeserializeOwned + 'static,
    {
        let blocks = self.take(key_groups);
        build_blocks(state, blocks, self.restore_now_ms)
    }

    /// Builds up to `n` more pending groups into `state` (between batches). Errors: as
    /// [`KeyedState::restore`].
    pub fn build_next<V>(&mut self, state: &mut KeyedState<V>, n: usize) -> Result<(), String>
    where
        V: Clone + Send + Sync + Serialize + DeserializeOwned + 'static,
    {
        if self.is_empty() {
            return Ok(());
        }
        let blocks = self.take_next(n);
        build_blocks(state, blocks, self.restore_now_ms)
    }

    /// Builds every pending group into `state`. Errors: as [`KeyedState::restore`].
    pub fn build_all<V>(&mut self, state: &mut KeyedState<V>) -> Result<(), String>
    where
        V: Clone + Send + Sync + Serialize + DeserializeOwned + 'static,
    {
        self.build_next(state, usize::MAX)
    }

    /// The synchronous part of a snapshot's share of the pending groups: builds into `state`
    /// the groups that cannot be written as they are (see [`PendingKeyGroups::for_snapshot`])
    /// and returns the others; call it before snapshotting `state`. Errors: as
    /// [`KeyedState::restore`].
    pub fn snapshot<V>(&mut self, state: &mut KeyedState<V>, ttl: bool) -> Result<PendingSnapshot, String>
    where
        V: Clone + Send + Sync + Serialize + DeserializeOwned + 'static,
    {
        let (snapshot, build) = self.for_snapshot(ttl);
        build_blocks(state, build, self.restore_now_ms)?;
        Ok(snapshot)
    }
}

fn build_blocks<V>(state: &mut KeyedState<V>, blocks: Vec<KeyGroupBlock>, now_ms: u64) -> Result<(), String>
where
    V: Clone + Send + Sync + Serialize + DeserializeOwned + 'static,
{
    if blocks.is_empty() {
        return Ok(());
    }
    state.restore_absent_groups(blocks, now_ms)
}

/// Whether a pending group's `blocks` go into a full state file as they are: one full block
/// without write times (version 1), and no TTL on the step: exactly what a snapshot of the
/// built group would write. Built first instead:
/// - with a TTL: a snapshot leaves out entries expired at its barrier; a block written as it is
///   would keep them, and a later restore with a longer TTL (or none) would bring them back;
/// - a block with write times (written with a TTL), into a step without one now: a snapshot of
///   the step records no times, so a later restore that adds a TTL counts every key as written
///   then; the block written as it is would carry the old times, which would expire its keys
///   at once (found by a review: 286 of 300 keys lost);
/// - a block that may hold entries expired when it was written
///   ([`KeyGroupBlock::expired_through_ms`]), which a restore leaves out but the block alone
///   would not;
/// - a chain's base and deltas: one full state file holds one block per key group.
fn writable_as_is(blocks: &[KeyGroupBlock], ttl: bool) -> bool {
    match blocks {
        [block] => !ttl && block.expired_through_ms.is_none() && !keyed_block::is_versioned(&block.data),
        _ => false,
    }
}

impl PendingSnapshot {
    /// Whether nothing pending is written.
    pub fn is_empty(&self) -> bool {
        self.as_is.is_empty()
    }

    /// Interleaves the pending blocks, in key-group order, with the backend's blocks that
    /// `encode_each` hands over in key-group order, passing all of them to `emit`: the blocks
    /// of one full state file. A pending group holds nothing in the backend, so no key group
    /// comes from both. Errors: `encode_each`'s or `emit`'s.
    pub fn merge_each<E>(
        self,
        encode_each: impl FnOnce(&mut dyn FnMut(KeyGroupBlock) -> Result<(), E>) -> Result<(), E>,
        emit: &mut dyn FnMut(KeyGroupBlock) -> Result<(), E>,
    ) -> Result<(), E> {
        let mut pending = self.as_is.into_iter().flat_map(Arc::unwrap_or_clone).peekable();
        encode_each(&mut |block| {
            while let Some(first) = pending.next_if(|p| p.key_group < block.key_group) {
                emit(first)?;
            }
            emit(block)
        })?;
        pending.try_for_each(emit)
    }
}

/// Test hooks of the lazy restore, from `WEIR_FAILPOINT` (comma-separated; unset in
/// production): `lazy-restore-no-background-build` builds a restored key group only when a
/// record touches it (none `BUILD_PER_BATCH` after each batch), so checkpoints are taken
/// while groups are pending; `abort-with-pending-key-groups` aborts the process (like `kill
/// -9`) after a batch's key groups were built while others are still pending.
#[derive(Clone, Copy, Debug, Default)]
pub struct LazyRestoreFailpoints {
    /// `lazy-restore-no-background-build`.
    pub no_background_build: bool,
    /// `abort-with-pending-key-groups`.
    pub abort_with_pending: bool,
}

impl LazyRestoreFailpoints {
    /// The hooks `WEIR_FAILPOINT` names.
    pub fn from_env() -> LazyRestoreFailpoints {
        LazyRestoreFailpoints {
            no_background_build: crate::failpoint::is_set("lazy-restore-no-background-build"),
            abort_with_pending: crate::failpoint::is_set("abort-with-pending-key-groups"),
        }
    }
}

#[cfg(test)]
#[path = "pending_tests.rs"]
mod tests;
