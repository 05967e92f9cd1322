//! The discard sink (`sink: { discard: {} }`), as Flink's `blackhole` connector: records are
//! counted by the subtask (its `records_in` metric, like every operator's) and dropped.
//!
//! It writes nothing, so it has nothing to pre-commit at a barrier and nothing to commit when
//! a checkpoint completes: it keeps no state, and exactly-once holds trivially. Benchmarks use
//! it to measure the pipeline without the cost of an output format; tests use it to run a job
//! to completion without output files.

use super::{StreamOperator, TaskResult};
use crate::record::{Batch, ColumnBatch, Record};
use async_trait::async_trait;

/// The discard sink subtask: drops every batch it is given.
pub struct DiscardSink;

#[async_trait]
impl StreamOperator for DiscardSink {
    async fn process(&mut self, input: Vec<Record>, _out: &mut Vec<Record>) -> TaskResult<()> {
        drop(input);
        Ok(())
    }

    async fn process_columns(&mut self, input: ColumnBatch) -> TaskResult<Batch> {
        // A few vectors per batch, not a row per record.
        drop(input);
        Ok(Batch::Rows(vec![]))
    }
}
