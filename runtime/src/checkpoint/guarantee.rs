//! The processing guarantee (`spec.checkpointing.mode`) as pure decisions: whether a subtask
//! holds an input that delivered a barrier, and what a restore takes from where.
//!
//! | mode | barrier on one input | restore (`latest` / failover) | after a failure |
//! |---|---|---|---|
//! | exactly-once | input held until all inputs delivered it (aligned) | state, output, source positions of the checkpoint | nothing lost, nothing twice |
//! | at-least-once | input keeps being read (counted, not aligned) | state, output, source positions of the checkpoint | records after a barrier replayed: duplicates, nothing lost |
//! | at-most-once | input keeps being read | state and output of the checkpoint; sources resume where they had read up to | records read after the checkpoint and not committed lost; nothing twice |

use super::restore::RestoreFrom;
use crate::job::CheckpointMode;

/// Whether a subtask stops reading an input that delivered barrier n until every live input
/// did (an aligned checkpoint, Flink's exactly-once), rather than counting barriers and reading
/// on (Flink's at-least-once, where the snapshot is taken when the last barrier arrives).
pub fn holds_input_after_barrier(mode: CheckpointMode) -> bool {
    match mode {
        CheckpointMode::ExactlyOnce => true,
        CheckpointMode::AtLeastOnce | CheckpointMode::AtMostOnce => false,
    }
}

/// Where a restored source subtask resumes its splits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SourcePositions {
    /// At the positions the restore point recorded (records after them are read again).
    Snapshot,
    /// At the furthest position any source subtask of the job recorded as read, or the restore
    /// point's position where that is further (nothing is read again).
    FurthestRead,
}

/// Whether source subtasks record how far they have read before they emit each batch (the
/// position log at-most-once restores from).
pub fn records_read_positions(mode: CheckpointMode) -> bool {
    mode == CheckpointMode::AtMostOnce
}

/// Where sources resume after a restore in `mode`, asked for with `request`. Operator state,
/// keyed state and the sink's pending commits always come from the restore point.
///
/// At-most-once resumes at the furthest read position only when continuing the job's own
/// history (`--restore latest`, a failover): an explicit `--restore <path>` is a request to go
/// back to that snapshot, so its positions are used as they are (as with a Flink savepoint).
/// `--restore none` has no restore point: every mode starts at the beginning.
pub fn source_positions(mode: CheckpointMode, request: &RestoreFrom) -> SourcePositions {
    match (mode, request) {
        (CheckpointMode::AtMostOnce, RestoreFrom::Latest) => SourcePositions::FurthestRead,
        _ => SourcePositions::Snapshot,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use CheckpointMode::*;

    #[test]
    fn only_exactly_once_holds_an_input_after_its_barrier() {
        for (mode, held, logged) in [
            (ExactlyOnce, true, false),
            (AtLeastOnce, false, false),
            (AtMostOnce, false, true),
        ] {
            assert_eq!(holds_input_after_barrier(mode), held, "{mode:?}");
            assert_eq!(records_read_positions(mode), logged, "{mode:?}");
        }
    }

    #[test]
    fn only_at_most_once_continuing_its_history_skips_what_was_read() {
        let path = RestoreFrom::Path("file:///ckpt/wc/chk-3".into());
        for (mode, request, want) in [
            (ExactlyOnce, &RestoreFrom::Latest, SourcePositions::Snapshot),
            (ExactlyOnce, &path, SourcePositions::Snapshot),
            (ExactlyOnce, &RestoreFrom::None, SourcePositions::Snapshot),
            (AtLeastOnce, &RestoreFrom::Latest, SourcePositions::Snapshot),
            (AtLeastOnce, &path, SourcePositions::Snapshot),
            (AtMostOnce, &RestoreFrom::Latest, SourcePositions::FurthestRead),
            (AtMostOnce, &path, SourcePositions::Snapshot),
            (AtMostOnce, &RestoreFrom::None, SourcePositions::Snapshot),
        ] {
            assert_eq!(source_positions(mode, request), want, "{mode:?} {request:?}");
        }
    }
}
