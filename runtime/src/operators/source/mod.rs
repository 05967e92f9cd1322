//! Replayable sources. A source's state is the position of each of its splits (file byte
//! offsets, generator record indexes); splits are assigned to source subtasks by
//! `split index mod parallelism`, so a restore at another parallelism redistributes them.

pub mod file;
pub mod generator;

use super::{EncodedState, OperatorRestore, TaskResult};
use crate::job::{OperatorKind, validate::Operator};
use crate::record::Record;
use crate::storage::S3Options;
use async_trait::async_trait;

/// A source subtask.
#[async_trait]
pub trait Source: Send {
    /// Appends at most `max` records to `out`. Returns `false` once every split of this
    /// subtask is exhausted (and nothing was appended).
    async fn next_batch(&mut self, out: &mut Vec<Record>, max: usize) -> TaskResult<bool>;

    /// Captures the split positions (synchronous; cheap).
    fn snapshot(&self) -> TaskResult<EncodedState>;

    /// Optional rate limit in records per second for this subtask.
    fn max_records_per_second(&self) -> Option<u64>;
}

/// Builds source subtask `subtask` of `parallelism` for a source operator, restoring split
/// positions from `restore` (items of all old subtasks, pooled).
pub async fn build(
    op: &Operator,
    subtask: u32,
    parallelism: u32,
    restore: OperatorRestore,
    s3: &S3Options,
    progress: std::sync::Arc<std::sync::atomic::AtomicU64>,
) -> TaskResult<Box<dyn Source>> {
    match &op.kind {
        OperatorKind::FileSource(spec) => Ok(Box::new(
            file::FileSource::new(spec, subtask, parallelism, restore, s3, progress)
                .await
                .map_err(|e| e.context(format!("operator {}", op.uid)))?,
        )),
        OperatorKind::Generator(spec) => Ok(Box::new(
            generator::Generator::new(spec, subtask, parallelism, restore)
                .map_err(|e| e.context(format!("operator {}", op.uid)))?,
        )),
        other => Err(super::TaskError(format!(
            "operator {} ({}) is not a source",
            op.uid,
            other.name()
        ))),
    }
}
