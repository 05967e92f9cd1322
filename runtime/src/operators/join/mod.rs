//! The keyed two-input inner join (`join` step): Flink SQL's regular join on keyed state of
//! the job's backend (`spec.stateBackend`).
//!
//! Each input's stage ends with a [`JoinSide`]: it evaluates that side's key selector, sets the
//! record's key (so the keyed exchange routes both sides of a key to the same subtask, by the
//! same key group), and projects the record to the fields the join outputs, tagged with its
//! side in the first value. The tag travels in the row, so it survives the exchange, the wire
//! between workers and the channel state of unaligned checkpoints, none of which know sides.
//!
//! [`Join`] keeps, per key, every row of each side seen so far, on the job's backend: on heap
//! in a [`KeyedState`] of [`rows::JoinRows`] (persistent lists: a row is appended in O(1)); on
//! disk as one store entry per row ([`disk_rows`]: a record reads the rows it matches and
//! writes its own, never the rows its side already holds). Both snapshot, restore and rescale
//! by key group as an aggregation does, in the same blocks (a savepoint of a join on heap
//! restores on disk and back); with incremental checkpoints, a join writes chains of delta
//! blocks as an aggregation on heap does (`state/incremental.rs`: each delta holds every row
//! of the keys written since the chain's previous link), on either backend (no native files). A left row is stored, then joined with every right row of its key so far
//! (oldest first), and vice versa: every matching pair is emitted exactly once, when its later
//! row arrives, so the output of a whole input is the full inner join whatever the order.
//! With a `ttl`, a key's rows are forgotten when it has received no record for that long.

pub mod disk_rows;
pub mod disk_snapshot;
pub mod rows;
pub mod stored_shape;

use super::{EncodedState, KeyGroupStream, OperatorRestore, SnapshotEncoder, StreamOperator, TaskError, TaskResult};
use crate::checkpoint::Barrier;
use crate::job::join::{JoinDef, Side};
use crate::record::cel::{self, Expr};
use crate::record::{Datum, Key, KeyedBy, Record, Row, Schema};
use crate::state::backend::{BackendChoice, KeyedSnapshot, KeyedState};
use crate::state::changed_keys::ChangedKeys;
use crate::state::heap::HeapKeyedState;
use crate::state::incremental::{DEFAULT_POLICY, Form, IncrementalTracker};
use crate::state::key_group::KeyGroupRange;
use crate::state::snapshot::KeyGroupBlock;
use crate::state::ttl::{Clock, StateTtl, expired_through};
use async_trait::async_trait;
use disk_rows::DiskJoinRows;
use disk_snapshot::DiskJoinSnapshot;
use rows::JoinRows;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use stored_shape::StoredShape;

/// Name of the side tag, the first field of a [`JoinSide`]'s output rows (never output by
/// the join).
pub const SIDE_FIELD: &str = "$joinSide";

fn side_tag(side: Side) -> i64 {
    match side {
        Side::Left => 0,
        Side::Right => 1,
    }
}

/// The last operator of a join input's stage: keys each record by that side's key selector
/// and projects it to `[side tag, fields the join takes from this side...]` (a field the record
/// lacks becomes `null`).
pub struct JoinSide {
    join_uid: String,
    side: Side,
    key: Expr,
    fields: Vec<String>,
    schema: Arc<Schema>,
    max_parallelism: u32,
    /// The record fields the key selector reads (a record lacking one has no key).
    reads: Vec<String>,
    /// Whether a record without a key was dropped yet (warned once per subtask).
    dropped_without_key: bool,
}

impl JoinSide {
    /// The `side` input of join `join_uid` defined by `def`. Errors: the key selector does not
    /// compile.
    pub fn new(join_uid: &str, def: &JoinDef, side: Side, max_parallelism: u32) -> TaskResult<JoinSide> {
        let fields = def.projection(side);
        let names = std::iter::once(SIDE_FIELD.to_string()).chain(fields.iter().cloned());
        let key = cel::compile(def.key_expression(side))?;
        Ok(JoinSide {
            join_uid: join_uid.to_string(),
            side,
            reads: crate::record::cel_fields::free_identifiers(key.syntax())
                .into_iter()
                .filter(|name| name != "record")
                .collect(),
            dropped_without_key: false,
            key,
            schema: Schema::new(names),
            fields,
            max_parallelism,
        })
    }

    /// The uid under which the chain names this operator: `<join uid>.<side>`.
    pub fn uid(join_uid: &str, side: Side) -> String {
        format!("{join_uid}.{}", side.name())
    }
}

impl JoinSide {
    /// Whether `row` lacks a field the key selector reads or holds `null` there.
    fn reads_a_null(&self, row: &Row) -> bool {
        self.reads
            .iter()
            .any(|field| matches!(row.get(field), None | Some(Datum::Null)))
    }

    /// The join key of `row`, or `None` when it has none: the selector gives `null`, or fails
    /// on a field it reads that the record lacks or holds as `null` (SQL's null propagates:
    /// `string(id)` of a null `id` is null). Such a record
    /// never matches in an inner join (`NULL = NULL` is not true in SQL; Flink's regular join
    /// drops it the same way), so it is dropped, not a failure: a failure would restart the job
    /// onto the same record for ever. Errors: any other evaluation error, a key of another type
    /// (a float, an object).
    fn key_of(&self, row: &Row) -> TaskResult<Option<Key>> {
        let value = match self.key.eval_unshown(row) {
            Ok(value) => value,
            Err(_) if self.reads_a_null(row) => return Ok(None),
            Err(e) => return Err(e.on_record(row).into()),
        };
        if matches!(value, Datum::Null) {
            return Ok(None);
        }
        Key::from_owned(value).map(Some).map_err(|e| {
            TaskError(format!(
                "join {} {}Key `{}` on the record {}: {e}",
                self.join_uid,
                self.side.name(),
                self.key.source(),
                cel::record_shown(row)
            ))
        })
    }
}

#[async_trait]
impl StreamOperator for JoinSide {
    async fn process(&mut self, input: Vec<Record>, out: &mut Vec<Record>) -> TaskResult<()> {
        out.reserve(input.len());
        for r in input {
            let Some(key) = self.key_of(&r.row)? else {
                if !self.dropped_without_key {
                    self.dropped_without_key = true;
                    tracing::warn!(
                        "join {}: a {} record without a key (`{}` is null or reads a missing field) never matches; \
                         dropped, as every such record of this subtask will be",
                        self.join_uid,
                        self.side.name(),
                        self.key.source()
                    );
                }
                continue;
            };
            let mut values = Vec::with_capacity(self.fields.len() + 1);
            values.push(Datum::Int(side_tag(self.side)));
            values.extend(self.fields.iter().map(|f| r.row.get(f).cloned().unwrap_or(Datum::Null)));
            out.push(Record {
                row: Row::new_unchecked(self.schema.clone(), values),
                keyed: Some(KeyedBy::new(key, self.max_parallelism)),
            });
        }
        Ok(())
    }
}

/// Where an output value comes from: the new record's side or the stored side, at a position
/// of that side's projection.
#[derive(Clone, Copy, Debug)]
struct Source {
    side: Side,
    position: usize,
}

/// The keyed join of one subtask: both sides' rows by key, for the key groups it owns.
pub struct Join {
    uid: String,
    /// The [`StoredShape`] of this join, encoded: the operator state of every snapshot,
    /// checked on restore.
    kept: Vec<u8>,
    output: Arc<Schema>,
    sources: Vec<Source>,
    range: KeyGroupRange,
    state: JoinState,
    /// The step's `ttl`: a key with no record for this long is expired.
    ttl: Option<StateTtl>,
    clock: Arc<dyn Clock>,
    /// Incremental checkpoints' bookkeeping: the confirmed checkpoint and the changes since.
    incremental: IncrementalTracker,
}

/// A join subtask's rows: see the module doc.
enum JoinState {
    /// On the heap backend.
    Heap(KeyedState<JoinRows>),
    /// On the disk backend.
    Disk(DiskJoinRows),
}

impl JoinState {
    /// Empty rows for `range` on `backend`, expiring keys after `ttl` if set. Errors: the
    /// disk store cannot be created.
    fn open(
        backend: &BackendChoice,
        range: KeyGroupRange,
        ttl: Option<StateTtl>,
    ) -> Result<JoinState, crate::state::disk::DiskStateError> {
        Ok(match backend {
            BackendChoice::Heap => JoinState::Heap(KeyedState::Heap(HeapKeyedState::new(range, ttl))),
            BackendChoice::Disk { dir, options } => JoinState::Disk(DiskJoinRows::open(dir, *options, range, ttl)?),
        })
    }

    fn len(&self) -> usize {
        match self {
            JoinState::Heap(state) => state.len(),
            JoinState::Disk(state) => state.len(),
        }
    }

    /// Starts recording the keys written, for incremental checkpoints.
    fn track_changes(&mut self) {
        match self {
            JoinState::Heap(state) => state.track_changes(),
            JoinState::Disk(state) => state.track_changes(),
        }
    }

    /// The keys written since the previous call (empty unless tracked).
    fn take_changes(&mut self) -> ChangedKeys {
        match self {
            JoinState::Heap(state) => state.take_changes(),
            JoinState::Disk(state) => state.take_changes(),
        }
    }
}

impl Join {
    /// The join `uid` of `def` for the subtask owning `range`, its state on `backend`,
    /// restoring `restore.key_groups` (blocks of other key groups are ignored; rows expired
    /// under the TTL at `clock`'s time are dropped). Errors: a block that does not decode,
    /// named by operator and key group; a restore point whose join stored rows of another
    /// meaning ([`stored_shape::refusal`]: other kept fields, swapped inputs, other key
    /// selectors); the disk store cannot be created or written.
    pub fn new(
        uid: &str,
        def: &JoinDef,
        range: KeyGroupRange,
        restore: OperatorRestore,
        clock: Arc<dyn Clock>,
        backend: &BackendChoice,
    ) -> TaskResult<Join> {
        let (left, right) = (def.projection(Side::Left), def.projection(Side::Right));
        let shape = StoredShape::of(def);
        // No `operator <uid>` prefix: the caller (exec) adds it to every constructor error.
        stored_shape::check_restored(def, &restore.operator_state).map_err(TaskError)?;
        let ttl = def.ttl.map(StateTtl::new);
        let mut state = JoinState::open(backend, range, ttl).map_err(|e| TaskError(e.to_string()))?;
        match &mut state {
            JoinState::Heap(rows) => rows.restore(restore.key_groups, clock.now_ms()),
            JoinState::Disk(rows) => rows.restore(restore.key_groups, clock.now_ms()),
        }
        .map_err(TaskError)?;
        let sources = def
            .fields
            .iter()
            .map(|f| {
                let projection = if f.side == Side::Left { &left } else { &right };
                Source {
                    side: f.side,
                    position: projection.iter().position(|p| *p == f.from).expect("projected"),
                }
            })
            .collect();
        let names = std::iter::once(def.key_field.clone()).chain(def.fields.iter().map(|f| f.name.clone()));
        Ok(Join {
            kept: shape.encode(),
            uid: uid.to_string(),
            output: Schema::new(names),
            sources,
            range,
            state,
            ttl,
            clock,
            incremental: IncrementalTracker::default(),
        })
    }

    /// Number of keys held (expired keys included until incremental cleanup removes them).
    pub fn len(&self) -> usize {
        self.state.len()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// The output row of the pair (`new` of `side`, `stored` of the other side) for `key`: the
/// key, then each of `sources` from its side's row, as `output`'s fields.
fn pair(output: &Arc<Schema>, sources: &[Source], key: &Key, side: Side, new: &[Datum], stored: &[Datum]) -> Row {
    let mut values = Vec::with_capacity(sources.len() + 1);
    values.push(key.clone().into_datum());
    for s in sources {
        let from = if s.side == side { new } else { stored };
        values.push(from[s.position].clone());
    }
    Row::new_unchecked(output.clone(), values)
}

#[async_trait]
impl StreamOperator for Join {
    async fn process(&mut self, input: Vec<Record>, out: &mut Vec<Record>) -> TaskResult<()> {
        let now_ms = self.clock.now_ms();
        let Join {
            uid,
            output,
            sources,
            range,
            state,
            ..
        } = self;
        let state_failed = |e: crate::state::disk::DiskStateError| TaskError(format!("operator {uid}: {e}"));
        match state {
            JoinState::Heap(rows) => rows.maintain(now_ms, input.len()),
            JoinState::Disk(rows) => rows.maintain(now_ms, input.len()),
        }
        .map_err(state_failed)?;
        for r in input {
            let Some(keyed) = r.keyed else {
                return Err(TaskError(format!("operator {uid}: record without a join key")));
            };
            if !range.contains(keyed.key_group) {
                return Err(TaskError(format!(
                    "operator {uid}: key group {} routed to the subtask owning {range:?}",
                    keyed.key_group
                )));
            }
            let (_, mut values) = r.row.into_parts();
            let side = match values.first() {
                Some(Datum::Int(0)) => Side::Left,
                Some(Datum::Int(1)) => Side::Right,
                _ => {
                    return Err(TaskError(format!(
                        "operator {uid}: record without its join side (`{SIDE_FIELD}`)"
                    )));
                }
            };
            values.remove(0);
            let emit =
                |stored: &[Datum]| out.push(Record::new(pair(output, sources, &keyed.key, side, &values, stored)));
            match state {
                JoinState::Heap(state) => {
                    let rows = state
                        .update(keyed.key_group, keyed.hash, &keyed.key, now_ms, |current| {
                            current.cloned().unwrap_or_default().pushed(side, values.clone())
                        })
                        .map_err(state_failed)?;
                    rows.side(side.other()).oldest_first().into_iter().for_each(emit);
                }
                JoinState::Disk(state) => state
                    .add(keyed.key_group, keyed.hash, &keyed.key, side, &values, now_ms, emit)
                    .map_err(state_failed)?,
            }
        }
        Ok(())
    }

    fn keyed_state_size(&self) -> Option<crate::state::backend::KeyedStateSize> {
        Some(match &self.state {
            JoinState::Heap(rows) => rows.size(),
            JoinState::Disk(rows) => rows.size(),
        })
    }

    async fn snapshot(&mut self, barrier: &Barrier) -> TaskResult<Option<SnapshotEncoder>> {
        // Synchronous part: freeze the key-group tables (heap, no copy) or take the store's
        // read view (disk, O(1)) and, for an incremental checkpoint, take the keys written
        // since the last snapshot (O(1)); encode on the encoder thread. A full snapshot
        // streams its blocks to the state file as they are encoded (state larger than memory
        // is never held whole); a delta, O(changed keys), is encoded whole.
        self.incremental.taking(barrier.id, barrier.kind);
        let incremental = barrier.incremental;
        if incremental.is_some() {
            // The first incremental checkpoint is a full base: changes before it do not matter.
            self.state.track_changes();
        }
        let changes = self.state.take_changes();
        let live_entries = self.len() as u64;
        let plan = self
            .incremental
            .plan(barrier.id, incremental, changes, live_entries, DEFAULT_POLICY);
        let now_ms = self.clock.now_ms();
        let view = match &mut self.state {
            JoinState::Heap(rows) => JoinSnapshot::Heap(rows.snapshot(now_ms)),
            JoinState::Disk(rows) => JoinSnapshot::Disk(rows.snapshot(now_ms)),
        };
        let range = self.range;
        let kept = self.kept.clone();
        let ttl = self.ttl;
        Ok(Some(Box::new(move || {
            let mut encoded = EncodedState::keyed_in_memory(
                // The stored shape is the same in every subtask: a restore reads one copy
                // (`checkpoint/restore_files.rs`), not every subtask's files.
                vec!["keyed:join".into(), "broadcast:join-fields".into()],
                range,
                vec![],
                vec![kept],
            );
            // The blocks' bytes go to the tracker: a join's keys hold any number of rows, so
            // a chain is bounded by bytes too (`CompactionPolicy::max_delta_bytes_ratio`).
            let written_bytes = plan.written_bytes;
            match plan.form {
                Form::SelfContained | Form::Base => {
                    encoded.key_group_stream = Some(view.into_stream(written_bytes));
                    encoded.incremental = (plan.form == Form::Base).then_some(Form::Base);
                }
                Form::Delta { .. } => {
                    encoded.key_groups = view.encode_delta(&plan.changes.union()).map_err(TaskError)?;
                    let bytes: usize = encoded.key_groups.iter().map(|block| block.data.len()).sum();
                    written_bytes.fetch_add(bytes as u64, Ordering::Relaxed);
                    encoded.incremental = Some(plan.form);
                    encoded.chain_entries = Some(live_entries);
                    // The chain's base keeps the keys expired since it was written.
                    encoded.expired_through_ms = expired_through(ttl, now_ms);
                }
            }
            Ok(encoded)
        })))
    }

    async fn notify_complete(&mut self, id: u64) -> TaskResult<()> {
        self.incremental.completed(id);
        Ok(())
    }
}

/// A join subtask's snapshot, taken on the task thread, encoded on the encoder's.
enum JoinSnapshot {
    Heap(KeyedSnapshot<JoinRows>),
    Disk(DiskJoinSnapshot),
}

impl JoinSnapshot {
    /// Every live key, one block per key group, streamed as encoded; the blocks' bytes are
    /// added to `written_bytes`.
    fn into_stream(self, written_bytes: Arc<AtomicU64>) -> KeyGroupStream {
        Box::new(move |emit| {
            let mut counted = |block: KeyGroupBlock| {
                written_bytes.fetch_add(block.data.len() as u64, Ordering::Relaxed);
                emit(block).map_err(|e| e.0)
            };
            match self {
                JoinSnapshot::Heap(view) => view.encode_each::<String>(&mut counted),
                JoinSnapshot::Disk(view) => view.encode_each(&mut counted),
            }
            .map_err(TaskError)
        })
    }

    /// The delta blocks of the keys in `changes` (`state/incremental.rs`). Errors: the
    /// backend's.
    fn encode_delta(self, changes: &ChangedKeys) -> Result<Vec<KeyGroupBlock>, String> {
        match self {
            JoinSnapshot::Heap(view) => view.encode_delta(changes),
            JoinSnapshot::Disk(view) => view.encode_delta(changes),
        }
    }
}

#[cfg(test)]
mod tests;
