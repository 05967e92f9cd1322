//! Operators: sources ([`source`]), stateless transforms ([`transform`]), keyed running
//! aggregations ([`aggregate`]), event-time windows ([`window`]) and sinks ([`sink`], [`discard`]).
//!
//! Chained operators of one subtask implement [`StreamOperator`]: records in, records out, a
//! synchronous snapshot at each barrier that returns an encoder run asynchronously, and a
//! notification when a checkpoint completes (the commit phase of two-phase commit).

pub mod aggregate;
pub mod discard;
pub mod join;
pub mod sink;
pub mod sink_kafka;
mod sink_kafka_broker;
pub mod sink_kafka_recovery;
pub mod source;
pub mod throttle;
pub mod transform;
pub mod window;

use crate::checkpoint::Barrier;
use crate::record::{Batch, ColumnBatch, Record};
use crate::state::key_group::KeyGroupRange;
use crate::state::snapshot::KeyGroupBlock;
use async_trait::async_trait;

/// A task failure: the message says what and where (operator uid, file, offset).
#[derive(Debug, Clone, thiserror::Error)]
#[error("{0}")]
pub struct TaskError(pub String);

impl TaskError {
    /// Prefixes the message with context (`operator count-4: ...`), unless it already starts
    /// with that context (an operator that names itself is not named twice).
    pub fn context(self, ctx: impl std::fmt::Display) -> TaskError {
        let ctx = ctx.to_string();
        if self
            .0
            .strip_prefix(ctx.as_str())
            .is_some_and(|rest| rest.starts_with(": "))
        {
            return self;
        }
        TaskError(format!("{ctx}: {}", self.0))
    }
}

macro_rules! task_error_from {
    ($($t:ty),*) => {$(
        impl From<$t> for TaskError {
            fn from(e: $t) -> Self { TaskError(e.to_string()) }
        }
    )*};
}
task_error_from!(
    crate::record::cel::CelError,
    crate::storage::StorageError,
    crate::state::snapshot::FormatError,
    std::io::Error,
    postcard::Error
);

/// Result alias for operator code.
pub type TaskResult<T> = Result<T, TaskError>;

/// State captured by an operator's synchronous snapshot, encoded later off the record path.
pub struct EncodedState {
    /// State names held (`keyed:aggregate`, `operator:splits`, ...).
    pub state_names: Vec<String>,
    /// Key-group range of the subtask, for keyed state.
    pub key_group_range: Option<KeyGroupRange>,
    /// Keyed state blocks.
    pub key_groups: Vec<KeyGroupBlock>,
    /// Operator state items.
    pub operator_state: Vec<Vec<u8>>,
    /// The keyed state's form in an incremental checkpoint ([`crate::state::incremental`]):
    /// `None` writes a self-contained file into the snapshot directory.
    pub incremental: Option<crate::state::incremental::Form>,
    /// More keyed blocks, after `key_groups`, produced while the state file uploads (a full
    /// snapshot of keyed state: the blocks already encoded go to storage while later key
    /// groups encode). `None` when `key_groups` holds them all.
    pub key_group_stream: Option<KeyGroupStream>,
    /// A native checkpoint of the disk backend's store (`checkpoint/native_upload.rs`): its
    /// files hold the keyed state (then `key_groups` and `key_group_stream` hold none and
    /// `incremental` is `None`: the state file holds the operator state only).
    pub native: Option<crate::checkpoint::native_upload::NativeUpload>,
    /// For keyed state that may hold entries already expired under the step's `ttl` (a delta
    /// of a chain, a native checkpoint): the snapshot's time minus the `ttl`, recorded on the
    /// handle ([`StateHandle::expired_through_ms`]) so a restore leaves those entries out
    /// whatever the `ttl` is then ([`crate::state::ttl::expired_through`]). `None` otherwise.
    ///
    /// [`StateHandle::expired_through_ms`]: crate::state::snapshot::StateHandle::expired_through_ms
    pub expired_through_ms: Option<u64>,
    /// For a delta of a chain: the entries the whole chain holds at the barrier (the state's
    /// `len()` then, expired entries not yet cleaned up included), which `_metadata` records
    /// on the handle so `weir savepoint inspect` shows the state's keys, not the delta's
    /// changed ones. `None` otherwise (the file's entries are the state's).
    pub chain_entries: Option<u64>,
}

impl EncodedState {
    /// Operator state only (sources, sinks): `items` under the one state name `state_name`,
    /// no keyed state.
    pub fn operator_only(state_name: &str, items: Vec<Vec<u8>>) -> EncodedState {
        EncodedState {
            state_names: vec![state_name.into()],
            key_group_range: None,
            key_groups: vec![],
            operator_state: items,
            incremental: None,
            key_group_stream: None,
            native: None,
            expired_through_ms: None,
            chain_entries: None,
        }
    }

    /// Keyed state whose blocks are all encoded (`key_groups`, for the subtask's `range`), plus
    /// operator state `items`; a self-contained file, not incremental.
    pub fn keyed_in_memory(
        state_names: Vec<String>,
        range: KeyGroupRange,
        key_groups: Vec<KeyGroupBlock>,
        items: Vec<Vec<u8>>,
    ) -> EncodedState {
        EncodedState {
            state_names,
            key_group_range: Some(range),
            key_groups,
            operator_state: items,
            incremental: None,
            key_group_stream: None,
            native: None,
            expired_through_ms: None,
            chain_entries: None,
        }
    }

    /// Runs the [`EncodedState::key_group_stream`], if any, appending its blocks to
    /// `key_groups`: the whole state in memory (tests, and callers that need every block).
    /// Errors: the stream's.
    pub fn collect_stream(mut self) -> TaskResult<EncodedState> {
        if let Some(stream) = self.key_group_stream.take() {
            let blocks = &mut self.key_groups;
            stream(&mut |block| {
                blocks.push(block);
                Ok(())
            })?;
        }
        Ok(self)
    }
}

/// Produces keyed blocks one by one, in key-group order, handing each to the function it is
/// given; stops at that function's first error and returns it.
pub type KeyGroupStream = Box<dyn FnOnce(&mut dyn FnMut(KeyGroupBlock) -> TaskResult<()>) -> TaskResult<()> + Send>;

/// The asynchronous part of a snapshot: a closure that encodes the captured view.
pub type SnapshotEncoder = Box<dyn FnOnce() -> TaskResult<EncodedState> + Send>;

/// Restored state handed to an operator when its subtask starts.
#[derive(Default, Clone, Debug)]
pub struct OperatorRestore {
    /// Keyed state blocks of the key groups this subtask owns.
    pub key_groups: Vec<KeyGroupBlock>,
    /// Operator state items of all old subtasks, pooled (each operator takes its share).
    pub operator_state: Vec<Vec<u8>>,
}

/// How much of a watermark's firing [`StreamOperator::on_watermark`] emitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Firing {
    /// All of it: the operator is done with this watermark.
    Complete,
    /// A part: call `on_watermark` again with the same watermark for the rest, before
    /// anything else reaches the operator.
    Partial,
}

/// One operator in a subtask's chain.
#[async_trait]
pub trait StreamOperator: Send {
    /// Processes a batch, appending results to `out`.
    async fn process(&mut self, input: Vec<Record>, out: &mut Vec<Record>) -> TaskResult<()>;

    /// Processes a columnar batch ([`crate::record::columns`]) and returns the output batch.
    /// The default turns it into rows and calls [`StreamOperator::process`]; operators that
    /// work on columns override it (their output may be rows or columns).
    async fn process_columns(&mut self, input: ColumnBatch) -> TaskResult<Batch> {
        let mut out = Vec::with_capacity(input.len());
        self.process(input.into_records(), &mut out).await?;
        Ok(Batch::Rows(out))
    }

    /// Synchronous part of a snapshot at `barrier`: capture a consistent view and return its
    /// encoder, or `None` for stateless operators. Sinks pre-commit here.
    async fn snapshot(&mut self, _barrier: &Barrier) -> TaskResult<Option<SnapshotEncoder>> {
        Ok(None)
    }

    /// The subtask's event-time watermark advanced to `watermark` (epoch ms): fire what it
    /// closes, appending results to `out`. Called after every record before the watermark;
    /// the watermark then goes on to the next operator. Most operators ignore it.
    ///
    /// An operator whose firing is large may emit it in parts: it returns
    /// [`Firing::Partial`] after a part, and the caller sends that part on and calls again
    /// with the same watermark, before any record, barrier or other watermark, until
    /// [`Firing::Complete`]. So memory holds one part of a firing, not all of it.
    async fn on_watermark(&mut self, _watermark: i64, _out: &mut Vec<Record>) -> TaskResult<Firing> {
        Ok(Firing::Complete)
    }

    /// Checkpoint `id` is complete (its `_metadata` is written): commit what it covers.
    async fn notify_complete(&mut self, _id: u64) -> TaskResult<()> {
        Ok(())
    }

    /// The records this operator sent to its late side output since the last call (a window
    /// with `lateRecords: sideOutput`: its input records beyond the allowed lateness, in the
    /// order they came). Taken after every batch and watermark; most operators have none.
    fn take_late_output(&mut self) -> Vec<Record> {
        Vec::new()
    }

    /// How much keyed state the operator holds now, for the subtask's metrics (`None`: it
    /// keeps no keyed state). Called about once a second and at each barrier, on the task
    /// thread: it must be cheap (counters, no scan).
    fn keyed_state_size(&self) -> Option<crate::state::backend::KeyedStateSize> {
        None
    }

    /// Whether the operator has work to do when its subtask is idle (no input, control
    /// message or barrier ready): an aggregation whose restored key groups are not all built
    /// yet (`state/pending.rs`). Most operators have none.
    fn has_idle_work(&self) -> bool {
        false
    }

    /// Does a small, bounded part of that work (an aggregation builds a few pending key
    /// groups); the subtask calls it again while it stays idle and there is work left.
    async fn on_idle(&mut self) -> TaskResult<()> {
        Ok(())
    }
}
