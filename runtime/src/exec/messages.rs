//! Messages between subtasks (data plane, in band with records) and between subtasks and the
//! checkpoint coordinator (control plane).

use super::watermark::Watermark;
use crate::checkpoint::{Ack, Barrier};
use crate::record::{ColumnBatch, Record};

/// An element of a data channel: records in batches, barriers and end-of-stream in band.
#[derive(Debug)]
pub enum Element {
    /// A batch of records.
    Records(Vec<Record>),
    /// A batch of records as columns (the same records; converted to rows where a consumer
    /// takes rows only: the cluster wire, channel state). Boxed: the element stays small.
    Columns(Box<ColumnBatch>),
    /// A checkpoint barrier.
    Barrier(Barrier),
    /// An event-time watermark, or the sender's idleness ([`Watermark`]).
    Watermark(Watermark),
    /// The upstream subtask will send nothing more.
    End,
}

/// Coordinator → subtask. Control channels are unbounded: they carry a few messages per
/// checkpoint and must never block the coordinator behind a backpressured subtask.
#[derive(Debug)]
pub enum Control {
    /// Sources only: inject this barrier.
    Trigger(Barrier),
    /// Checkpoint id is complete (`_metadata` written): commit (2PC phase two).
    Complete(u64),
    /// Sources only: a stop-with-savepoint failed; resume reading.
    Resume,
    /// Sources only: stop reading (the job is suspending); barriers already triggered are
    /// still injected.
    Pause,
    /// Sources only: send end-of-stream (after the final checkpoint or a stop savepoint).
    Finish,
    /// Every subtask has ended: exit.
    Shutdown,
}

/// Subtask → coordinator.
#[derive(Debug)]
// An acknowledgement (a few per checkpoint) is the large variant; boxing it would buy nothing.
#[allow(clippy::large_enum_variant)]
pub enum TaskEvent {
    /// Snapshot written.
    Ack(Ack),
    /// The subtask could not snapshot (e.g. upload failed): the checkpoint is declined.
    Declined {
        /// Checkpoint id.
        checkpoint_id: u64,
        /// Task index.
        task: usize,
        /// Why.
        reason: String,
    },
    /// A source subtask read all its splits.
    SourceExhausted {
        /// Task index.
        task: usize,
    },
    /// The subtask forwarded end-of-stream.
    Ended {
        /// Task index.
        task: usize,
    },
    /// The subtask failed.
    Failed {
        /// Task index.
        task: usize,
        /// Error message.
        error: String,
    },
}
