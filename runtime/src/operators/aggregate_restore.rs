//! The lazy restore of an aggregation's keyed state (`state/pending.rs`): restored key groups
//! are built when a batch first touches them, and a few more after each batch.

use super::{Aggregate, TaskError, TaskResult};
use crate::state::pending::BUILD_PER_BATCH;

impl Aggregate {
    /// Key groups restored but not built yet (0 once the restore is complete).
    pub fn pending_key_groups(&self) -> usize {
        self.pending.len()
    }

    /// Builds every pending key group now (what an eager restore did before the first
    /// record). Errors: a block does not decode (named by operator and key group), the disk
    /// store fails.
    pub fn build_pending(&mut self) -> TaskResult<()> {
        let uid = &self.uid;
        self.pending
            .build_all(&mut self.state)
            .map_err(|e| TaskError(format!("operator {uid}: {e}")))
    }

    /// Builds the pending ones of `key_groups`, then [`BUILD_PER_BATCH`] more, before a batch.
    pub(super) fn build_for_batch(&mut self, key_groups: impl IntoIterator<Item = u32>) -> TaskResult<()> {
        let uid = &self.uid;
        let failed = |e: String| TaskError(format!("operator {uid}: {e}"));
        self.pending.build(&mut self.state, key_groups).map_err(failed)?;
        if self.lazy_failpoints.abort_with_pending && !self.pending.is_empty() {
            tracing::warn!(
                target: "weir",
                "failpoint abort-with-pending-key-groups reached: operator {uid} has {} key groups pending, aborting",
                self.pending.len()
            );
            std::process::abort();
        }
        if self.lazy_failpoints.no_background_build {
            return Ok(());
        }
        self.pending
            .build_next(&mut self.state, BUILD_PER_BATCH)
            .map_err(failed)
    }
}
