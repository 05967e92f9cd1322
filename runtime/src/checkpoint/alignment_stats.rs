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
    // Input channel state first, then the upstream subtasks' unsent output (sent after it on
    // each channel), each by subtask: the order a restore replays them in.
    let entry = |channel: &mut BTreeMap<String, OperatorMetadata>, c: &super::AckedOperator| {
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
    };
    for a in acks {
        if let Some(c) = a.channel_state.as_deref() {
            entry(&mut channel, c);
        }
    }
    for o in channel.values_mut() {
        o.handles.sort_by_key(|h| h.subtask);
    }
    let mut outputs: Vec<&super::AckedOperator> = acks.iter().flat_map(|a| a.output_channel_state.iter()).collect();
    outputs.sort_by_key(|c| c.handle.subtask);
    for c in outputs {
        entry(&mut channel, c);
    }
    for a in acks {
        let files = || {
            a.channel_state
                .as_deref()
                .into_iter()
                .chain(a.output_channel_state.iter())
        };
        subtasks.push(SubtaskCheckpointStats {
            task: a.task,
            unaligned: a.unaligned,
            alignment_ms: a.alignment_ms,
            state_bytes: a.operators.iter().map(|o| o.handle.size).sum(),
            channel_state_bytes: files().map(|c| c.handle.size).sum(),
            channel_state_records: files().map(|c| c.handle.entries).sum(),
        });
    }
    subtasks.sort_by_key(|s| s.task);
    let channel: Vec<OperatorMetadata> = channel.into_values().collect();
    let alignment = CheckpointAlignment {
        unaligned: subtasks.iter().any(|s| s.unaligned),
        alignment_ms: subtasks.iter().map(|s| s.alignment_ms).max().unwrap_or(0),
        channel_state_bytes: subtasks.iter().map(|s| s.channel_state_bytes).sum(),
        subtasks,
    };
    (channel, alignment)
}
