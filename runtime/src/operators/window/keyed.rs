//! The window's keyed state on the job's backend: opening it, restoring it (today's blocks and
//! the per-group snapshots written before 2026-12-05), and the synchronous part of a snapshot.

use super::shape::{StoredItem, decode_item};
use super::state::GroupSnapshot;
use super::{KeyWindows, NO_TIMER, NOW_MS, TIMER_UNKNOWN};
use crate::checkpoint::Barrier;
use crate::exec::watermark::NO_WATERMARK;
use crate::operators::{EncodedState, OperatorRestore, SnapshotEncoder, TaskError, TaskResult};
use crate::state::backend::{BackendChoice, KeyedState};
use crate::state::disk::{DiskKeyedState, DiskStateError};
use crate::state::heap::HeapKeyedState;
use crate::state::incremental::{DEFAULT_POLICY, Form, IncrementalTracker};
use crate::state::key_group::{KeyGroupRange, key_hash};

/// The state names of a window's snapshots: its keys' windows, and one operator state item
/// per subtask with the shape (the same in every subtask) and the watermarks of the subtask's
/// key groups, which only the owners of those key groups read (`checkpoint/restore_files.rs`).
const STATE_NAMES: [&str; 3] = ["keyed:windows", "keyed:window-watermarks", "broadcast:window-shape"];

/// Empty window state for `range` on `backend`. On disk with the job's `diskState`, its
/// write-back cache counting each key's list of windows by its heap bytes
/// ([`window_list_bytes`]). Errors: the disk store cannot be created.
pub(super) fn open(backend: &BackendChoice, range: KeyGroupRange) -> Result<KeyedState<KeyWindows>, DiskStateError> {
    Ok(match backend {
        BackendChoice::Heap => KeyedState::Heap(HeapKeyedState::new(range, None)),
        BackendChoice::Disk { dir, options } => {
            KeyedState::Disk(DiskKeyedState::open(dir, range, None, *options)?.count_value_bytes(window_list_bytes))
        }
    })
}

/// The heap bytes of a key's list of windows: its allocation (a sliding window of an hour
/// every minute holds 60 windows per key, 2,400 bytes).
fn window_list_bytes(windows: &KeyWindows) -> u64 {
    (windows.capacity() * std::mem::size_of::<super::state::WindowEntry>()) as u64
}

/// What a restore gives the operator besides its state.
pub(super) struct Restored {
    /// Per key group of the range, the watermark restored with it ([`NO_WATERMARK`]: none).
    pub floors: Vec<i64>,
    /// Per key group of the range, [`TIMER_UNKNOWN`] where windows were restored, else
    /// [`NO_TIMER`].
    pub timers: Vec<i64>,
    /// The smallest restored key-group watermark of the range, if any was restored.
    pub watermark: Option<i64>,
}

/// Restores the key groups of `range` that `restore` holds into `state` (empty). Today's
/// snapshots hold keyed blocks and their watermarks in the operator state items; those written
/// before 2026-12-05 hold one [`GroupSnapshot`] block per key group, and items of the shape
/// alone (or none). Errors: an item or a block does not decode (named by key group); the disk
/// store fails.
pub(super) fn restore(
    state: &mut KeyedState<KeyWindows>,
    range: KeyGroupRange,
    restore: OperatorRestore,
) -> TaskResult<Restored> {
    let groups = range.len() as usize;
    let mut restored = Restored {
        floors: vec![NO_WATERMARK; groups],
        timers: vec![NO_TIMER; groups],
        watermark: None,
    };
    let items: Vec<StoredItem> = restore
        .operator_state
        .iter()
        .map(|item| decode_item(item))
        .collect::<Result<_, _>>()
        .map_err(TaskError)?;
    let floor = |restored: &mut Restored, key_group: u32, watermark: i64| {
        restored.floors[(key_group - range.start) as usize] = watermark;
        restored.watermark = Some(restored.watermark.map_or(watermark, |m| m.min(watermark)));
    };
    let blocks: Vec<_> = restore
        .key_groups
        .into_iter()
        .filter(|block| range.contains(block.key_group))
        .collect();
    if items.iter().any(|item| item.watermarks.is_some()) {
        for (first, watermarks) in items.iter().filter_map(|item| item.watermarks.as_ref()) {
            for (key_group, watermark) in (*first..).zip(watermarks) {
                if range.contains(key_group) {
                    floor(&mut restored, key_group, *watermark);
                }
            }
        }
        for block in &blocks {
            restored.timers[(block.key_group - range.start) as usize] = TIMER_UNKNOWN;
        }
        return state.restore(blocks, NOW_MS).map(|()| restored).map_err(TaskError);
    }
    for block in blocks {
        let snap: GroupSnapshot = postcard::from_bytes(&block.data).map_err(|e| {
            TaskError(format!(
                "window state of key group {} does not decode: {e}",
                block.key_group
            ))
        })?;
        floor(&mut restored, block.key_group, snap.watermark);
        for (key, windows) in snap.keys {
            if windows.is_empty() {
                continue;
            }
            restored.timers[(block.key_group - range.start) as usize] = TIMER_UNKNOWN;
            state
                .update(block.key_group, key_hash(&key), &key, NOW_MS, |_| windows)
                .map_err(|e| TaskError(e.to_string()))?;
        }
    }
    Ok(restored)
}

/// The synchronous part of a snapshot of `state` at `barrier`: freezes the heap's tables (no
/// window copied) or takes the store's read view and, for an incremental checkpoint, the keys
/// written since the last one; `item` is the subtask's operator state item. The encoder streams
/// a full snapshot's blocks and writes a delta's whole (O(changed keys)), as a join's.
pub(super) fn snapshot(
    state: &mut KeyedState<KeyWindows>,
    incremental: &mut IncrementalTracker,
    barrier: &Barrier,
    range: KeyGroupRange,
    item: Vec<u8>,
) -> TaskResult<SnapshotEncoder> {
    // A failed write-back fails the task here: every snapshot of the store would lack it.
    state.check_write_back().map_err(|e| TaskError(e.to_string()))?;
    if barrier.incremental.is_some() {
        // The first incremental checkpoint is a full base: changes before it do not matter.
        state.track_changes();
    }
    let changes = state.take_changes();
    let live_entries = state.len() as u64;
    let plan = incremental.plan(barrier.id, barrier.incremental, changes, live_entries, DEFAULT_POLICY);
    let view = state.snapshot(NOW_MS);
    Ok(Box::new(move || {
        let mut encoded = EncodedState::keyed_in_memory(
            STATE_NAMES.iter().map(|name| name.to_string()).collect(),
            range,
            vec![],
            vec![item],
        );
        match plan.form {
            Form::SelfContained | Form::Base => {
                encoded.key_group_stream = Some(Box::new(move |emit| {
                    view.encode_each::<String>(&mut |block| emit(block).map_err(|e| e.0))
                        .map_err(TaskError)
                }));
                encoded.incremental = (plan.form == Form::Base).then_some(Form::Base);
            }
            Form::Delta { .. } => {
                encoded.key_groups = view.encode_delta(&plan.changes.union()).map_err(TaskError)?;
                encoded.incremental = Some(plan.form);
                encoded.chain_entries = Some(live_entries);
            }
        }
        Ok(encoded)
    }))
}
