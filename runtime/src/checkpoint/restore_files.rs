//! Which state files a restore reads (`checkpoint/restore.rs`): a process reads the files
//! holding the key groups its subtasks own, and the operator state its subtasks need: all of
//! it where each subtask wrote its own share (source splits, pending sink commits, pooled on
//! restore); where every subtask wrote the same (a join's, a window's or an aggregation's
//! shape), the copies in the files of its own key groups.
//! Pure functions of `_metadata` and the owned key groups, tested by the table in
//! `restore_tests.rs`.

use crate::state::key_group::KeyGroupRange;
use crate::state::snapshot::{CheckpointMetadata, OperatorMetadata, StateHandle};

/// The prefix of a state name whose items are the same in every subtask (Flink's broadcast
/// state): a restore needs one copy ([`operator_state_replicated`]).
pub const BROADCAST_STATE_PREFIX: &str = "broadcast:";

/// The join's state name before 2026-12-05 (now `broadcast:join-fields`): its items were its
/// stored shape, the same in every subtask, as they are now.
const JOIN_FIELDS_BEFORE: &str = "operator:join-fields";

/// Whether a subtask of an operator with the state names `state_names`
/// ([`OperatorMetadata::state_names`]) needs only the operator state items of the handles of
/// its own key groups: the items are the same in every subtask, or (`keyed:*`) only the owners
/// of a handle's key groups need them. So: its names are keyed (`keyed:*`) or broadcast
/// ([`BROADCAST_STATE_PREFIX`]) only, or the join's name before it was broadcast. A window
/// (`keyed:window`) wrote its shape as an unnamed item, the same in every subtask; since
/// 2026-12-05 (`keyed:windows`, `keyed:window-watermarks`) each subtask's item also holds the
/// watermarks of its key groups. No name (metadata that records none): false, every file read.
pub fn operator_state_replicated(state_names: &[String]) -> bool {
    !state_names.is_empty()
        && state_names.iter().all(|name| {
            name.starts_with("keyed:") || name.starts_with(BROADCAST_STATE_PREFIX) || name == JOIN_FIELDS_BEFORE
        })
}

/// The handles of `op` a process owning the key groups `owned` (`None`: every one) reads. A
/// handle whose key groups overlap `owned` is read; one none of whose key groups it owns is
/// left out when its file holds keyed state only ([`StateHandle::operator_items`] 0;
/// unrecorded: a chain or native files, only aggregations wrote them then) or when the
/// operator's items are the same in every subtask ([`operator_state_replicated`]): only a
/// subtask of the operator uses them (to check its shape), and each subtask owns key groups, so
/// the handles of its own key groups bring it a copy. A cluster's coordinator, owning none,
/// reads no such file.
fn handles_to_read<'m>(op: &'m OperatorMetadata, owned: Option<&[KeyGroupRange]>) -> Vec<&'m StateHandle> {
    let replicated = operator_state_replicated(&op.state_names);
    op.handles.iter().filter(|h| !left_out(h, owned, replicated)).collect()
}

/// Whether a process owning `owned` leaves the handle `h` out of its restore for its keyed
/// state ([`handles_to_read`]; `replicated`: the operator's items are the same in every
/// subtask).
fn left_out(h: &StateHandle, owned: Option<&[KeyGroupRange]>, replicated: bool) -> bool {
    let keyed_only = replicated
        || match h.operator_items {
            Some(items) => items == 0,
            None => !h.chain.is_empty() || h.native.is_some(),
        };
    match (owned, h.key_group_range) {
        (Some(owned), Some(range)) => keyed_only && !owned.iter().any(|o| o.intersects(&range)),
        _ => false,
    }
}

/// The state files of `metadata` to read, each once, in handle order: `(file relative to the
/// snapshot directory, size, crc32)` (a native handle's store files are read by
/// `restore::load_files` after them). With `owned`, only the handles [`handles_to_read`]
/// picks: a worker of a cluster reads its own key groups' files, and every file of operator
/// state that each subtask wrote its own share of, not every worker's keyed files.
pub fn files_to_read(metadata: &CheckpointMetadata, owned: Option<&[KeyGroupRange]>) -> Vec<(String, u64, u32)> {
    let mut wanted: Vec<(String, u64, u32)> = Vec::new();
    for op in metadata.operators.iter().chain(&metadata.channel_state) {
        for h in handles_to_read(op, owned) {
            for (file, size, crc) in h.state_files() {
                if !wanted.iter().any(|(f, _, _)| f == file) {
                    wanted.push((file.to_string(), size, crc));
                }
            }
        }
    }
    wanted
}

/// The full state files (no chain, no native files) that [`files_to_read`] leaves out for
/// `owned`: `(file relative to the snapshot directory, size)`. A restore still checks that
/// they exist with their sizes (`restore::check_unread_files`), so a savepoint missing or
/// truncating one is refused by the process that checks the restore point (a cluster's
/// coordinator) instead of failing the workers that own its key groups, attempt after attempt.
pub fn unread_full_files(metadata: &CheckpointMetadata, owned: Option<&[KeyGroupRange]>) -> Vec<(String, u64)> {
    if owned.is_none() {
        return vec![];
    }
    let read: Vec<(String, u64, u32)> = files_to_read(metadata, owned);
    metadata
        .operators
        .iter()
        .flat_map(|op| &op.handles)
        .filter(|h| h.chain.is_empty() && h.native.is_none())
        .filter(|h| !read.iter().any(|(f, _, _)| *f == h.file))
        .map(|h| (h.file.clone(), h.size))
        .collect()
}
