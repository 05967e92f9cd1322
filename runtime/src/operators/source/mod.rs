//! Replayable sources. A source's state is the position of each of its splits (file byte
//! offsets, generator record indexes); splits are assigned to source subtasks by
//! `split index mod parallelism`, so a restore at another parallelism redistributes them.

pub mod file;
pub mod generator;
pub mod kafka;
pub mod kafka_assign;

use super::{EncodedState, OperatorRestore, TaskResult};
use crate::exec::split_watermarks::SplitWatermarks;
use crate::job::{OperatorKind, validate::Operator};
use crate::record::{Batch, Record};
use crate::storage::S3Options;
use async_trait::async_trait;
use std::time::Duration;

/// A source subtask.
#[async_trait]
pub trait Source: Send {
    /// Appends at most `max` records to `out`. Returns `false` once every split of this
    /// subtask is exhausted (and nothing was appended).
    async fn next_batch(&mut self, out: &mut Vec<Record>, max: usize) -> TaskResult<bool>;

    /// [`Source::next_batch`] into a new vector: `None` once every split is exhausted.
    async fn next_rows(&mut self, max: usize) -> TaskResult<Option<Vec<Record>>> {
        let mut out = Vec::with_capacity(max);
        Ok(self.next_batch(&mut out, max).await?.then_some(out))
    }

    /// The next batch as rows or, for a source that makes them, as columns
    /// ([`crate::record::columns`]): the same records as [`Source::next_batch`]. `None` once
    /// every split is exhausted. `max` may be up to [`crate::record::COLUMN_BATCH_SIZE`]; the
    /// default gives rows, at most [`crate::record::BATCH_SIZE`] of them.
    async fn next_any_batch(&mut self, max: usize) -> TaskResult<Option<Batch>> {
        Ok(self
            .next_rows(max.min(crate::record::BATCH_SIZE))
            .await?
            .map(Batch::Rows))
    }

    /// Captures the split positions (synchronous; cheap).
    fn snapshot(&self) -> TaskResult<EncodedState>;

    /// Optional rate limit in records per second for this subtask.
    fn max_records_per_second(&self) -> Option<u64>;

    /// Tells the source which fields of its records the job's later steps read
    /// ([`crate::job::field_use::fields_read`]), called once right after it is built. A source
    /// may then skip computing the others in its columnar batches, as long as every record
    /// still reads the same wherever it is read (the generator derives them from `id` when
    /// read). The default ignores it.
    fn project(&mut self, _read: &crate::job::field_use::FieldsRead) {}

    /// The batch size the subtask asks for when nothing limits it (`records`), called once
    /// before the first read. A source whose order of records depends on its batch sizes
    /// (the generator takes each batch from one split) keeps that order when a rate limit
    /// makes batches smaller, so that which records are late, and any running aggregate, do
    /// not depend on `maxRecordsPerSecond`. The default ignores it.
    fn set_read_turn(&mut self, _records: usize) {}

    /// Called right after [`Source::snapshot`] captured the positions of checkpoint
    /// `checkpoint_id` (a source that acts on completion remembers them here).
    fn snapshot_taken(&mut self, _checkpoint_id: u64) {}

    /// Checkpoint `checkpoint_id` completed (Flink's `notifyCheckpointComplete`). Nothing here
    /// may matter for correctness: a restore starts from the checkpoint, not from what this
    /// did (the Kafka source commits its offsets to its consumer group, for lag monitoring).
    async fn checkpoint_complete(&mut self, _checkpoint_id: u64) {}

    /// What this subtask has not read yet (Flink's `pendingRecords` / `pendingBytes` source
    /// metrics, FLIP-33), or `None` when it cannot be known (an unbounded generator, a
    /// compressed or S3 file).
    fn pending(&self) -> Option<SourcePending> {
        None
    }

    /// Turns on per-split watermarks (Flink's per-split watermark generation; see
    /// [`SplitWatermarks`]) for a source with event time: called once, right after the source
    /// is built, with the `eventTime` bound (ms) and idle timeout. Returns `false` when the
    /// source does not generate them (the subtask then generates one watermark over all its
    /// records).
    fn enable_split_watermarks(&mut self, _bound_ms: i64, _idle_timeout: Option<Duration>) -> bool {
        false
    }

    /// Where record `index` of the last batch came from, for error messages (`the record at
    /// byte offset 1234 of /data/events.jsonl`), or `None` when the source cannot say.
    fn record_origin(&self, _index: usize) -> Option<String> {
        None
    }

    /// The per-split watermarks turned on by [`Source::enable_split_watermarks`]; the source
    /// notes the split of each record it appends ([`SplitWatermarks::record_from`]).
    fn split_watermarks(&mut self) -> Option<&mut SplitWatermarks> {
        None
    }
}

/// The backlog of a source subtask: records or bytes not yet read.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SourcePending {
    /// Records left (a bounded generator).
    Records(u64),
    /// Bytes left in the files of the subtask's splits (local uncompressed files).
    Bytes(u64),
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
                .map_err(|e| {
                    e.context(format!(
                        "operator {} (spec.job.steps[{}].source.file)",
                        op.uid, op.index
                    ))
                })?,
        )),
        OperatorKind::Generator(spec) => Ok(Box::new(
            generator::Generator::new(spec, subtask, parallelism, restore)
                .map_err(|e| e.context(format!("operator {}", op.uid)))?,
        )),
        OperatorKind::KafkaSource(spec) => Ok(Box::new(
            kafka::KafkaSource::new(spec, subtask, parallelism, restore)
                .await
                .map_err(|e| e.context(format!("operator {}", op.uid)))?,
        )),
        other => Err(super::TaskError(format!(
            "operator {} ({}) is not a source",
            op.uid,
            other.name()
        ))),
    }
}

/// The furthest position of each split among `items` (split positions of source `kind`, as
/// snapshots and the read-position log encode them, possibly several per split): for a file,
/// a finished split, else the larger byte offset; for the generator, the larger next index.
/// At-most-once restores sources from this so nothing already read is read again.
///
/// Errors: an item that does not decode as a position of `kind`, or `kind` is not a source.
pub fn furthest_positions(kind: &OperatorKind, items: &[Vec<u8>]) -> TaskResult<Vec<Vec<u8>>> {
    use std::collections::BTreeMap;
    let bad = |e: postcard::Error| super::TaskError(format!("source position does not decode: {e}"));
    match kind {
        OperatorKind::FileSource(_) => {
            let mut by_path: BTreeMap<String, file::FileSplit> = BTreeMap::new();
            for item in items {
                let s: file::FileSplit = postcard::from_bytes(item).map_err(bad)?;
                let further = by_path
                    .get(&s.path)
                    .is_none_or(|old| (s.done, s.offset) > (old.done, old.offset));
                if further {
                    by_path.insert(s.path.clone(), s);
                }
            }
            by_path.values().map(|s| Ok(postcard::to_stdvec(s)?)).collect()
        }
        OperatorKind::Generator(_) => {
            let mut by_index: BTreeMap<u32, generator::GeneratorSplit> = BTreeMap::new();
            for item in items {
                let s: generator::GeneratorSplit = postcard::from_bytes(item).map_err(bad)?;
                if by_index.get(&s.index).is_none_or(|old| s.next > old.next) {
                    by_index.insert(s.index, s);
                }
            }
            by_index.values().map(|s| Ok(postcard::to_stdvec(s)?)).collect()
        }
        OperatorKind::KafkaSource(_) => {
            let times = kafka_assign::restored_event_times(items).map_err(super::TaskError)?;
            kafka_assign::restored_offsets(items)
                .map_err(super::TaskError)?
                .into_iter()
                .map(|((topic, partition), next_offset)| {
                    let max_event_time = times.get(&(topic.clone(), partition)).copied();
                    Ok(postcard::to_stdvec(&kafka_assign::KafkaSplit {
                        topic,
                        partition,
                        next_offset,
                        max_event_time,
                    })?)
                })
                .collect()
        }
        other => Err(super::TaskError(format!("{} is not a source", other.name()))),
    }
}

#[cfg(test)]
mod tests {
    use super::file::FileSplit;
    use super::generator::GeneratorSplit;
    use super::*;

    fn file(path: &str, offset: u64, done: bool) -> Vec<u8> {
        postcard::to_stdvec(&FileSplit {
            index: 0,
            path: path.into(),
            offset,
            done,
        })
        .unwrap()
    }

    fn generator(index: u32, next: u64) -> Vec<u8> {
        postcard::to_stdvec(&GeneratorSplit { index, next }).unwrap()
    }

    #[test]
    fn furthest_positions_keep_the_furthest_per_split() {
        let files = OperatorKind::FileSource(Default::default());
        let gen_kind = OperatorKind::Generator(Default::default());
        for (kind, items, want) in [
            // Snapshot behind the log: the log wins; a stale log file behind: ignored.
            (
                &files,
                vec![file("a", 10, false), file("a", 70, false), file("a", 40, false)],
                vec![file("a", 70, false)],
            ),
            // A finished split beats any offset; splits are kept apart by path.
            (
                &files,
                vec![file("b", 5, false), file("a", 90, true), file("a", 95, false)],
                vec![file("a", 90, true), file("b", 5, false)],
            ),
            (&files, vec![], vec![]),
            (
                &gen_kind,
                vec![generator(1, 33), generator(0, 64), generator(1, 65), generator(0, 32)],
                vec![generator(0, 64), generator(1, 65)],
            ),
        ] {
            assert_eq!(furthest_positions(kind, &items).unwrap(), want, "{items:?}");
        }
        assert!(furthest_positions(&files, &[vec![0xff; 3]]).is_err());
        assert!(furthest_positions(&OperatorKind::Union, &[]).is_err());
    }
}
