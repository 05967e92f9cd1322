//! Per-checkpoint alignment statistics and channel-state entries of `_metadata` (pure): what
//! the coordinator writes from the subtasks' acknowledgements.

use super::Ack;
use crate::control::api::{CheckpointAlignment, SubtaskCheckpointStats};
use crate::state::snapshot::OperatorMetadata;
use std::collections::BTreeMap;

/// The channel-state entries of `_metadata` (one per stage, handles by subtask) and the
/// alignment statistics of a fully acknowledged checkpoint.
pub fn alignment_of(acks: &[Ack], parallelism: u32) -> (Vec<OperatorMetadata>, CheckpointAlignment) {
    let mut channel: BTreeMap<String, OperatorMetadata> = BTreeMap::new();
    let mut subtasks = Vec::with_capacity(acks.len());
    for a in acks {
        if let Some(c) = &a.channel_state {
            channel
                .entry(c.uid.clone())
                .or_insert_with(|| OperatorMetadata {
                    uid: c.uid.clone(),
                    kind: c.kind.clone(),
                    parallelism,
                    state_names: c.state_names.clone(),
                    handles: vec![],
                })
                .handles
                .push(c.handle.clone());
        }
        subtasks.push(SubtaskCheckpointStats {
            task: a.task,
            unaligned: a.unaligned,
            alignment_ms: a.alignment_ms,
            state_bytes: a.operators.iter().map(|o| o.handle.size).sum(),
            channel_state_bytes: a.channel_state.as_ref().map_or(0, |c| c.handle.size),
            channel_state_records: a.channel_state.as_ref().map_or(0, |c| c.handle.entries),
        });
    }
    subtasks.sort_by_key(|s| s.task);
    let channel: Vec<OperatorMetadata> = channel
        .into_values()
        .map(|mut o| {
            o.handles.sort_by_key(|h| h.subtask);
            o
        })
        .collect();
    let alignment = CheckpointAlignment {
        unaligned: subtasks.iter().any(|s| s.unaligned),
        alignment_ms: subtasks.iter().map(|s| s.alignment_ms).max().unwrap_or(0),
        channel_state_bytes: subtasks.iter().map(|s| s.channel_state_bytes).sum(),
        subtasks,
    };
    (channel, alignment)
}
