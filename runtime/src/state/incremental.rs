//! Incremental checkpoints of keyed state (`checkpointing.incremental: true`, Flink's
//! `execution.checkpointing.incremental`): what an operator subtask writes at a barrier.
//!
//! A subtask's keyed state in an incremental checkpoint is a **chain** of state files in the
//! job's `shared/` directory: one full base, then deltas, each delta holding the keys written
//! or removed since the previous link ([`keyed_block`](crate::state::keyed_block) version 3).
//! A delta extends only the chain of a **confirmed** checkpoint: the newest completed
//! checkpoint, which the coordinator names in the barrier ([`Barrier::incremental`]). Changes
//! are accumulated from the confirmed checkpoint on, so a checkpoint that failed or whose
//! `_metadata` was never written is never a base (Flink's SharedStateRegistry registers only
//! completed checkpoints for the same reason).
//!
//! A chain is compacted (the next link is a full base again) when it would hold more than
//! [`CompactionPolicy::max_deltas`] deltas, when its deltas would hold more entries than
//! [`CompactionPolicy::max_delta_ratio`] times its base's, or, where encoders report their
//! bytes (joins, whose keys hold any number of rows), when its deltas hold more bytes than
//! [`CompactionPolicy::max_delta_bytes_ratio`] times its base's: a restore then reads at most
//! `max_deltas + 1` files per subtask, at most `1 + max_delta_ratio` times the entries of a
//! full snapshot and, with bytes reported, about `1 + max_delta_bytes_ratio` times its bytes
//! plus one delta. The decisions are the pure functions [`choose_form`] and
//! [`IncrementalTracker`]'s bookkeeping, tested by tables below; docs/architecture.md,
//! "Incremental checkpoints", gives the reasoning.
//!
//! [`Barrier::incremental`]: crate::checkpoint::Barrier::incremental

use crate::state::heap::ChangedKeys;
use crate::state::snapshot::{CheckpointMetadata, StateHandle};
use std::borrow::Cow;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// When a chain is compacted into a new full base.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CompactionPolicy {
    /// Most deltas after one base (a restore reads at most this many files plus one).
    pub max_deltas: u32,
    /// Most entries in the deltas of a chain, as a fraction of the entries of its base.
    pub max_delta_ratio: f64,
    /// Most bytes the deltas of a chain may hold, as a fraction of its base's bytes, before
    /// the next link is a base; checked on the links written (their encoders report their
    /// bytes, [`SnapshotPlan::written_bytes`]), so a chain passes it by one delta at most.
    /// What bounds a chain whose keys vary in size: a join's delta holds every row of each key
    /// written, so a few hot keys holding most rows put nearly the whole state in every delta
    /// while their entries stay few.
    pub max_delta_bytes_ratio: f64,
}

/// The policy of every incremental checkpoint: at most 8 deltas, holding at most half as
/// many entries as the base (a restore reads at most 1.5 times a full snapshot's entries; a
/// slowly changing state uploads about an eighth of its size per checkpoint at worst), and,
/// where encoders report bytes, a new base once the deltas hold more bytes than the base (a
/// restore then reads at most about twice the base's bytes plus one delta).
pub const DEFAULT_POLICY: CompactionPolicy = CompactionPolicy {
    max_deltas: 8,
    max_delta_ratio: 0.5,
    max_delta_bytes_ratio: 1.0,
};

/// Where a state file of an incremental checkpoint goes: `(name relative to the snapshot
/// directory, path in the store)`, the file being `<job>/shared/<uid>-<subtask>-chk<id>.state`
/// for the snapshot directory `<job>/chk-<id>`. The checkpoint id in the name lets retention
/// tell a file of a checkpoint still in flight from an orphan ([`shared_file_checkpoint`]).
pub fn shared_state_file(snapshot_dir: &str, uid: &str, subtask: u32, checkpoint_id: u64) -> (String, String) {
    let file = format!("{uid}-{subtask}-chk{checkpoint_id}.state");
    let name = format!("../{SHARED_DIR}/{file}");
    let parent = snapshot_dir
        .trim_end_matches('/')
        .rsplit_once('/')
        .map(|(p, _)| p)
        .unwrap_or("");
    (
        name,
        crate::storage::join(&crate::storage::join(parent, SHARED_DIR), &file),
    )
}

/// The directory of a job's checkpoint store holding the files of incremental chains.
pub const SHARED_DIR: &str = "shared";

/// The store path of `file` (relative to the snapshot directory `dir`, possibly starting with
/// `../`), or `None` when it leaves the store's root.
pub fn resolve_relative(dir: &str, file: &str) -> Option<String> {
    let mut parts: Vec<&str> = dir.split('/').filter(|p| !p.is_empty()).collect();
    for part in file.split('/') {
        match part {
            "" | "." => {}
            ".." => {
                parts.pop()?;
            }
            p => parts.push(p),
        }
    }
    Some(parts.join("/"))
}

/// Whether a snapshot references files outside its own directory (an incremental checkpoint),
/// so it cannot be moved.
pub fn references_outside(metadata: &CheckpointMetadata) -> bool {
    metadata
        .operators
        .iter()
        .flat_map(|o| &o.handles)
        .flat_map(|h| h.files())
        .any(|(file, _, _)| file.starts_with("../"))
}

/// The checkpoint that wrote a shared file, from its name: a chain's state file
/// (`<uid>-<subtask>-chk<id>.state`, [`shared_state_file`]) or a native checkpoint's table
/// file (`<uid>-<subtask>-chk<id>-<table file name>`, `*.sst` or a delta file's `*.delta`,
/// [`shared_table_file`]). `None`
/// for any other name (not Weir's: retention leaves it alone).
pub fn shared_file_checkpoint(name: &str) -> Option<u64> {
    if let Some(stem) = name.strip_suffix(".state") {
        return stem.rsplit_once("-chk")?.1.parse().ok();
    }
    // The table file's own name (`000012.sst`, `00000000000000001234.delta`) holds no `-chk`:
    // the last one is ours.
    let stem = name.strip_suffix(".sst").or_else(|| name.strip_suffix(".delta"))?;
    let (_, after) = stem.rsplit_once("-chk")?;
    let (id, table) = after.split_once('-')?;
    if table.is_empty() {
        return None;
    }
    id.parse().ok()
}

/// Where a table file (`table`, e.g. `000012.sst`) of a native checkpoint goes: `(name
/// relative to the snapshot directory, path in the store)`, the file being
/// `<job>/shared/<uid>-<subtask>-chk<id>-<table>` for the snapshot directory `<job>/chk-<id>`
/// (the uploading checkpoint's id in the name, as [`shared_state_file`]'s, for retention's
/// orphan rule, [`shared_file_checkpoint`]).
pub fn shared_table_file(
    snapshot_dir: &str,
    uid: &str,
    subtask: u32,
    checkpoint_id: u64,
    table: &str,
) -> (String, String) {
    let (name, path) = shared_state_file(snapshot_dir, uid, subtask, checkpoint_id);
    let strip = |s: String| s.strip_suffix(".state").map(str::to_string).unwrap_or(s);
    (format!("{}-{table}", strip(name)), format!("{}-{table}", strip(path)))
}

/// What decides whether a subtask's checkpoint of keyed state is native (the disk store's own
/// files, `state/disk_native.rs`) rather than key-group blocks ([`uses_native_form`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct NativeConditions {
    /// The subtask's keyed state is on the disk backend.
    pub disk_backend: bool,
    /// The snapshot is an incremental checkpoint (`checkpointing.incremental: true`; never a
    /// savepoint, whose barrier carries no incremental base).
    pub incremental_checkpoint: bool,
    /// The write-back cache is on (`writeCacheSize` > 0): its thread is then the store's only
    /// writer and writes the checkpoint in order with the generations.
    pub write_back_cache: bool,
    /// Restored key groups are still pending at the barrier (lazy restore,
    /// `state/pending.rs`): they are in no store yet, and building them later writes the store
    /// directly.
    pub restored_groups_pending: bool,
    /// Native checkpoints are switched on (`NATIVE_CHECKPOINTS_ENV`, see [`native_switch`]).
    pub switched_on: bool,
}

/// Whether the checkpoint is native: on the disk backend, an incremental checkpoint (not a
/// savepoint: savepoints stay full, self-contained blocks), with the write-back cache on, no
/// restored key group pending, and the switch on. Otherwise the chains of blocks of
/// [`choose_form`] as before.
pub fn uses_native_form(c: NativeConditions) -> bool {
    c.disk_backend && c.incremental_checkpoint && c.write_back_cache && !c.restored_groups_pending && c.switched_on
}

/// The environment variable that switches native checkpoints of the disk backend on or off
/// (`on`/`off`; unset: [`NATIVE_CHECKPOINTS_DEFAULT`]).
pub const NATIVE_CHECKPOINTS_ENV: &str = "WEIR_NATIVE_CHECKPOINTS";

/// Whether native checkpoints are on when [`NATIVE_CHECKPOINTS_ENV`] is unset: on, as in
/// Flink's RocksDB backend. Measured (docs/runtime/state-backends-log.md, "Native checkpoints
/// become the default", 2026-12-04; 1M keys, checkpoints every second, three interleaved
/// rounds): peak RSS 141–172 MiB against chains' 235–270, each checkpoint's asynchronous part
/// 87–98 ms against 103–177, records/s no measurably different; restores need no re-encoding
/// without a rescale. Since level 0 compacts at RocksDB's default again (same document, "Level
/// 0 compacts at RocksDB's default again"): records/s with checkpoints / none 0.965 (median of
/// four rounds) at 1M keys, for about 3× chains' bytes per checkpoint. `off` keeps chains of
/// blocks.
pub const NATIVE_CHECKPOINTS_DEFAULT: bool = true;

/// The switch from the variable's value (`None`: unset). Errors: any value but `on` or `off`,
/// naming the variable.
pub fn native_switch(value: Option<&str>) -> Result<bool, String> {
    match value.map(str::trim) {
        None => Ok(NATIVE_CHECKPOINTS_DEFAULT),
        Some("on") => Ok(true),
        Some("off") => Ok(false),
        Some(other) => Err(format!("{NATIVE_CHECKPOINTS_ENV}: `{other}` is not `on` or `off`")),
    }
}

/// The handle `_metadata` records for `handle`, which operator `uid` acknowledged: a delta
/// over checkpoint `delta_of` gets that checkpoint's chain of the same subtask in front of its
/// own file. Errors (the checkpoint then fails) when `base` is not that checkpoint or holds no
/// chain for the subtask.
pub fn extend_chain(
    base: Option<&CheckpointMetadata>,
    uid: &str,
    mut handle: StateHandle,
    delta_of: Option<u64>,
) -> Result<StateHandle, String> {
    let Some(over) = delta_of else { return Ok(handle) };
    let earlier = base
        .filter(|m| m.checkpoint_id == over)
        .and_then(|m| m.operators.iter().find(|o| o.uid == uid))
        .and_then(|o| o.handles.iter().find(|h| h.subtask == handle.subtask))
        .filter(|h| !h.chain.is_empty())
        .ok_or_else(|| {
            format!(
                "operator {uid} subtask {}: incremental state is a delta over checkpoint {over}, \
                 whose chain for this subtask the coordinator does not hold",
                handle.subtask
            )
        })?;
    let mut chain = earlier.chain.clone();
    chain.append(&mut handle.chain);
    handle.chain = chain;
    Ok(handle)
}

/// The shape of a subtask's chain: its deltas and the entries of its base and of its deltas.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub struct ChainShape {
    /// Deltas after the base.
    pub deltas: u32,
    /// Entries (keys) of the base.
    pub base_entries: u64,
    /// Entries of all deltas together (a key changed in two deltas counts twice).
    pub delta_entries: u64,
    /// Bytes of keyed state the base's encoder reported (0: none reported).
    pub base_bytes: u64,
    /// Bytes of keyed state the deltas' encoders reported, all together.
    pub delta_bytes: u64,
}

/// What a snapshot of keyed state is written as.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Form {
    /// Every live entry, self-contained (savepoints; checkpoints without `incremental`).
    SelfContained,
    /// Every live entry, as the base of a new chain in `shared/`.
    Base,
    /// The keys changed since checkpoint `over`, extending its chain.
    Delta {
        /// The confirmed checkpoint whose chain this delta extends.
        over: u64,
    },
}

/// Chooses the form of an incremental checkpoint's keyed state: a delta over `base` (the
/// confirmed checkpoint and its chain, when this subtask wrote it), unless the chain would
/// then break `policy` with `changed_entries` more entries; otherwise a new base.
pub fn choose_form(base: Option<(u64, ChainShape)>, changed_entries: u64, policy: CompactionPolicy) -> Form {
    let Some((over, shape)) = base else {
        return Form::Base;
    };
    let too_long = shape.deltas + 1 > policy.max_deltas;
    let too_big =
        shape.delta_entries.saturating_add(changed_entries) as f64 > policy.max_delta_ratio * shape.base_entries as f64;
    let too_many_bytes =
        shape.base_bytes > 0 && shape.delta_bytes as f64 > policy.max_delta_bytes_ratio * shape.base_bytes as f64;
    if too_long || too_big || too_many_bytes {
        Form::Base
    } else {
        Form::Delta { over }
    }
}

/// The chain shape after writing `form` with `entries` entries (all live entries for a base,
/// the changed keys for a delta) over `base`; the new link's bytes are added when its
/// snapshot is confirmed ([`with_written_bytes`]).
fn shape_after(form: Form, base: Option<ChainShape>, entries: u64) -> Option<ChainShape> {
    match (form, base) {
        (Form::SelfContained, _) => None,
        (Form::Delta { .. }, Some(b)) => Some(ChainShape {
            deltas: b.deltas + 1,
            delta_entries: b.delta_entries + entries,
            ..b
        }),
        (Form::Base, _) | (Form::Delta { .. }, None) => Some(ChainShape {
            base_entries: entries,
            ..ChainShape::default()
        }),
    }
}

/// `shape` (of a chain just written) with its last link's reported bytes `written` added: to
/// the base's when the chain is a base alone, else to the deltas'.
fn with_written_bytes(shape: ChainShape, written: u64) -> ChainShape {
    if shape.deltas == 0 {
        ChainShape {
            base_bytes: written,
            ..shape
        }
    } else {
        ChainShape {
            delta_bytes: shape.delta_bytes + written,
            ..shape
        }
    }
}

/// A snapshot of this subtask not yet known to be confirmed.
struct PendingSnapshot {
    id: u64,
    /// Keys changed between the previous snapshot and this one (shared with the encoder of
    /// a delta that holds them).
    changes: Arc<ChangedKeys>,
    /// The chain it wrote, if an incremental checkpoint (without the new link's bytes).
    chain: Option<ChainShape>,
    /// Bytes of keyed state its encoder reported ([`SnapshotPlan::written_bytes`]).
    written_bytes: Arc<AtomicU64>,
}

/// What to write at a barrier, from [`IncrementalTracker::plan`].
#[derive(Debug)]
pub struct SnapshotPlan {
    /// The form.
    pub form: Form,
    /// For [`Form::Delta`]: the keys changed since the base checkpoint (empty otherwise).
    pub changes: SinceBase,
    /// Where the encoder may add the bytes of keyed state it writes (the blocks' data), for
    /// [`CompactionPolicy::max_delta_bytes_ratio`]; read when the checkpoint is confirmed,
    /// after its encoder finished. An encoder that adds nothing leaves its chains bounded by
    /// entries only.
    pub written_bytes: Arc<AtomicU64>,
}

/// The keys a delta holds: the changed-key sets of every snapshot since the base checkpoint,
/// oldest first, shared with the tracker (no key copied on the task thread). Their union is
/// computed by the encoder, off the task thread ([`SinceBase::union`]): merging them at the
/// barrier copied every changed key there (65–98 ms at 5M keys, docs/runtime/state-backends-log.md).
#[derive(Clone, Debug, Default)]
pub struct SinceBase {
    sets: Vec<Arc<ChangedKeys>>,
}

impl SinceBase {
    /// The union of the sets: borrowed when there is one (the usual case: the previous
    /// checkpoint completed before this barrier), else merged here. O(changed keys).
    pub fn union(&self) -> Cow<'_, ChangedKeys> {
        match self.sets.as_slice() {
            [] => Cow::Owned(ChangedKeys::default()),
            [one] => Cow::Borrowed(&**one),
            [first, rest @ ..] => {
                let mut all = (**first).clone();
                for set in rest {
                    all.merge(set);
                }
                Cow::Owned(all)
            }
        }
    }

    /// Number of distinct keys (computes the union).
    pub fn len(&self) -> usize {
        self.union().len()
    }

    /// Whether no key changed.
    pub fn is_empty(&self) -> bool {
        self.sets.iter().all(|s| s.is_empty())
    }

    /// An upper bound of [`SinceBase::len`] in O(sets × key groups): the sum of the sets'
    /// sizes, exact when there is one set (or the sets do not overlap).
    /// `u64::MAX` when a set overflowed ([`ChangedKeys::overflow`]): the checkpoint is then a
    /// full base.
    pub fn len_upper_bound(&self) -> u64 {
        self.sets
            .iter()
            .fold(0u64, |sum, s| sum.saturating_add(s.len_upper_bound()))
    }
}

/// One operator subtask's bookkeeping of incremental checkpoints: the confirmed checkpoint
/// and its chain, and the changes of every snapshot since, kept until a checkpoint after them
/// is confirmed (memory O(keys changed since the confirmed checkpoint)).
#[derive(Default)]
pub struct IncrementalTracker {
    pending: Vec<PendingSnapshot>,
    confirmed: Option<(u64, ChainShape)>,
    /// Savepoints this subtask snapshotted whose completion has not been notified: their
    /// completion confirms no base ([`IncrementalTracker::completed`]), so the checkpoint after
    /// a savepoint stays a delta over the checkpoint before it (the coordinator names that one,
    /// `checkpoint/commit.rs`, `next_base`).
    savepoints: std::collections::BTreeSet<u64>,
}

impl IncrementalTracker {
    /// The snapshot `id` being taken is of `kind`: a savepoint is remembered until its
    /// completion ([`IncrementalTracker::completed`]). Call at every snapshot's barrier.
    pub fn taking(&mut self, id: u64, kind: crate::control::api::SnapshotKind) {
        if kind == crate::control::api::SnapshotKind::Savepoint {
            self.savepoints.insert(id);
        }
    }

    /// Snapshot `id` completed. A savepoint is self-contained and never a base: its
    /// completion keeps the confirmed checkpoint and the changes since it (the savepoint's
    /// among them) for the next delta; savepoints up to `id` not notified (they failed) are
    /// forgotten. A checkpoint is confirmed ([`IncrementalTracker::confirm`]). Returns whether
    /// `id` was a checkpoint.
    pub fn completed(&mut self, id: u64) -> bool {
        let savepoint = self.savepoints.contains(&id);
        self.savepoints.retain(|s| *s > id);
        if !savepoint {
            self.confirm(id);
        }
        !savepoint
    }

    /// Checkpoint `id` completed (its `_metadata` is written): it becomes the base of the
    /// next delta if this subtask wrote it as part of a chain, and the changes up to it are
    /// dropped. Any other completion (a self-contained snapshot, a snapshot this subtask did
    /// not take) leaves no base: the next incremental checkpoint writes a new one; so
    /// savepoints are not confirmed ([`IncrementalTracker::completed`]), which keeps the base
    /// and their changes for the next delta. Repeating a confirmation, or confirming one older than the
    /// confirmed checkpoint, changes nothing.
    pub fn confirm(&mut self, id: u64) {
        if self.confirmed.is_some_and(|(c, _)| c >= id) {
            return;
        }
        let chain = self.pending.iter().find(|p| p.id == id).and_then(|p| {
            p.chain
                .map(|c| with_written_bytes(c, p.written_bytes.load(Ordering::Relaxed)))
        });
        self.pending.retain(|p| p.id > id);
        self.confirmed = chain.map(|c| (id, c));
    }

    /// Decides what the snapshot `id` at a barrier writes and records its changes.
    /// `incremental`: `Some(confirmed)` for a checkpoint of a job with incremental
    /// checkpoints (`confirmed`: the newest completed checkpoint, per the coordinator),
    /// `None` for a savepoint or a job without them. `changes`: keys changed since the
    /// previous snapshot; `live_entries`: entries held now.
    pub fn plan(
        &mut self,
        id: u64,
        incremental: Option<Option<u64>>,
        changes: ChangedKeys,
        live_entries: u64,
        policy: CompactionPolicy,
    ) -> SnapshotPlan {
        let written_bytes = Arc::new(AtomicU64::new(0));
        let Some(confirmed) = incremental else {
            self.pending.push(PendingSnapshot {
                id,
                changes: Arc::new(changes),
                chain: None,
                written_bytes: written_bytes.clone(),
            });
            return SnapshotPlan {
                form: Form::SelfContained,
                changes: SinceBase::default(),
                written_bytes,
            };
        };
        if let Some(c) = confirmed {
            self.confirm(c);
        }
        // The coordinator composes a delta's chain from the checkpoint it names: only that
        // one may be the base.
        let base = self.confirmed.filter(|(c, _)| Some(*c) == confirmed);
        let changes = Arc::new(changes);
        let mut since_base = SinceBase::default();
        if base.is_some() {
            since_base.sets = self.pending.iter().map(|p| p.changes.clone()).collect();
            since_base.sets.push(changes.clone());
        }
        // The decision counts keys without merging the sets (an upper bound when several
        // snapshots since the base changed the same key: the chain may then compact early,
        // never late).
        let changed_entries = since_base.len_upper_bound();
        let form = choose_form(base, changed_entries, policy);
        let entries = match form {
            Form::Delta { .. } => changed_entries,
            _ => live_entries,
        };
        self.pending.push(PendingSnapshot {
            id,
            changes,
            chain: shape_after(form, base.map(|(_, s)| s), entries),
            written_bytes: written_bytes.clone(),
        });
        let changes = if matches!(form, Form::Delta { .. }) {
            since_base
        } else {
            SinceBase::default()
        };
        SnapshotPlan {
            form,
            changes,
            written_bytes,
        }
    }
}

#[cfg(test)]
#[path = "incremental_tests.rs"]
mod tests;
