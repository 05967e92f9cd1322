//! Keyed running aggregations (`count`, `sum`, `min`, `max`) on keyed state.
//!
//! State lives in a [`KeyedState`] on the job's backend: on heap, one copy-on-write hash table
//! per key group of the subtask's [`KeyGroupRange`], so a snapshot freezes the tables without
//! copying them; on disk, an LSM store whose snapshot is an MVCC read view. Either way the
//! snapshot writes per-key-group blocks off the task thread, and a restore at another
//! parallelism takes exactly the groups it now owns. With a `ttl`, a key not written for that
//! long starts over.
//!
//! Tables are found by the key's stable hash, which `keyBy` computed once
//! ([`KeyedBy::hash`](crate::record::KeyedBy)): the aggregation neither hashes nor copies
//! the key of a record whose key it already holds.

use super::{EncodedState, KeyGroupStream, OperatorRestore, SnapshotEncoder, StreamOperator, TaskError, TaskResult};
use crate::checkpoint::Barrier;
use crate::checkpoint::native_upload::{NativeUpload, UploadedTables};
use crate::job::validate::AggregateFn;
use crate::record::cel::{self, Expr};
use crate::record::{Datum, KeyedBy, Record, Schema};
use crate::state::backend::{BackendChoice, KeyedState};
use crate::state::incremental::{
    DEFAULT_POLICY, Form, IncrementalTracker, NATIVE_CHECKPOINTS_ENV, NativeConditions, native_switch, uses_native_form,
};
use crate::state::key_group::KeyGroupRange;
use crate::state::pending::{LazyRestoreFailpoints, PendingKeyGroups};
use crate::state::ttl::{Clock, StateTtl, SystemClock, expired_through};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::sync::Arc;
use std::time::Duration;

/// An aggregate value: integers stay integers until a float is aggregated.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Num {
    /// Integer.
    Int(i64),
    /// Floating point.
    Float(f64),
}

impl Num {
    fn from_datum(v: &Datum) -> Option<Num> {
        match v {
            Datum::Int(i) => Some(Num::Int(*i)),
            Datum::UInt(u) => Some(Num::Float(*u as f64)),
            Datum::Float(f) => Some(Num::Float(*f)),
            _ => None,
        }
    }

    #[inline]
    fn to_datum(self) -> Datum {
        match self {
            Num::Int(i) => Datum::Int(i),
            Num::Float(f) => Datum::from_f64(f),
        }
    }

    fn as_f64(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Float(f) => f,
        }
    }

    #[inline]
    fn combine(self, func: AggregateFn, x: Num) -> Num {
        match (func, self, x) {
            (AggregateFn::Count, Num::Int(a), _) => Num::Int(a + 1),
            (AggregateFn::Sum, Num::Int(a), Num::Int(b)) => a
                .checked_add(b)
                .map(Num::Int)
                .unwrap_or(Num::Float(a as f64 + b as f64)),
            (AggregateFn::Sum, a, b) => Num::Float(a.as_f64() + b.as_f64()),
            (AggregateFn::Min, Num::Int(a), Num::Int(b)) => Num::Int(a.min(b)),
            (AggregateFn::Min, a, b) => Num::Float(a.as_f64().min(b.as_f64())),
            (AggregateFn::Max, Num::Int(a), Num::Int(b)) => Num::Int(a.max(b)),
            (AggregateFn::Max, a, b) => Num::Float(a.as_f64().max(b.as_f64())),
            (AggregateFn::Count, Num::Float(a), _) => Num::Float(a + 1.0),
        }
    }
}

/// A keyed running aggregation: for every input record, updates the key's value and emits
/// `{<keyField>: key, <asField>: value}`.
pub struct Aggregate {
    uid: String,
    func: AggregateFn,
    expr: Option<Expr>,
    /// `[key_field, as_field]` (or `[as_field]` when both are the same name: the value replaces
    /// the key, as in an object), shared by every output row.
    output: Arc<Schema>,
    range: KeyGroupRange,
    /// The running values by key.
    state: KeyedState<Num>,
    /// Restored key groups not built into `state` yet (a lazy restore, `state/pending.rs`):
    /// each batch first builds the groups its records touch, then [`BUILD_PER_BATCH`] more
    /// (before the next batch, so its output does not wait for them).
    pending: PendingKeyGroups,
    /// The step's TTL (with one, pending blocks are built before a snapshot writes them).
    ttl: Option<StateTtl>,
    /// Test hooks of the lazy restore (`WEIR_FAILPOINT`), read once at start.
    lazy_failpoints: LazyRestoreFailpoints,
    /// Processing time for TTL and write timestamps.
    clock: Arc<dyn Clock>,
    /// Incremental checkpoints: the confirmed chain and the changes since
    /// (tracked from the first barrier of an incremental checkpoint on).
    incremental: IncrementalTracker,
    /// Native checkpoints of the disk backend: the table files each checkpoint uploaded, for
    /// later ones to reference (`checkpoint/native_upload.rs`).
    native_tables: UploadedTables,
    /// The step's path in the manifest for errors (`spec.job.steps[4].sum`), once known
    /// ([`Aggregate::at_step`]).
    step_path: Option<String>,
    /// The aggregated expression as written (`None`: a `count`).
    expression_text: Option<String>,
    /// The shapes the restore brought, checked by [`Aggregate::keyed_by`].
    restored_shapes: Vec<Vec<u8>>,
    /// The shape every snapshot writes, once [`Aggregate::keyed_by`] set it
    /// (`operators/aggregate_shape.rs`).
    kept_shape: Option<Vec<u8>>,
}

/// How an [`Aggregate`]'s keyed state starts: the key groups it owns, what to restore, its
/// TTL and the clock the TTL is measured with.
pub struct KeyedStateInit {
    /// The subtask's key groups.
    pub range: KeyGroupRange,
    /// Restored blocks (those outside `range` are ignored).
    pub restore: OperatorRestore,
    /// State TTL of the step (`None`: keys live for ever).
    pub ttl: Option<Duration>,
    /// Processing time (the system clock outside tests).
    pub clock: Arc<dyn Clock>,
    /// The state backend (heap unless the job says `stateBackend: disk`).
    pub backend: BackendChoice,
    /// The store a native checkpoint's fast restore put in the disk backend's directory
    /// (`checkpoint/native_restore.rs`): opened instead of an empty one (`restore` then holds
    /// no blocks of its key groups).
    pub restored_store: Option<crate::checkpoint::native_restore::RestoredStore>,
}

impl KeyedStateInit {
    /// No TTL, system clock.
    pub fn new(range: KeyGroupRange, restore: OperatorRestore) -> KeyedStateInit {
        KeyedStateInit {
            range,
            restore,
            ttl: None,
            clock: Arc::new(SystemClock),
            backend: BackendChoice::Heap,
            restored_store: None,
        }
    }
}

impl Aggregate {
    /// Creates the operator for the subtask owning `range`, restoring `restore.key_groups`
    /// (blocks outside the range are ignored; a block that does not decode is an error).
    /// No TTL; see [`Aggregate::with_state`].
    pub fn new(
        uid: &str,
        func: AggregateFn,
        expression: Option<&str>,
        key_field: &str,
        as_field: &str,
        range: KeyGroupRange,
        restore: OperatorRestore,
    ) -> TaskResult<Aggregate> {
        Aggregate::with_state(
            uid,
            func,
            expression,
            key_field,
            as_field,
            KeyedStateInit::new(range, restore),
        )
    }

    /// Creates the operator with the keyed state of `init`. Restored blocks are kept encoded
    /// and each key group is built on first access (a lazy restore, `state/pending.rs`),
    /// entries already expired under the TTL at this time dropped then. Errors: the
    /// expression does not compile; a block's header does not decode (an unknown version,
    /// named by key group; a block whose entries do not decode fails the batch that first
    /// touches its key group instead); the disk store cannot be created.
    pub fn with_state(
        uid: &str,
        func: AggregateFn,
        expression: Option<&str>,
        key_field: &str,
        as_field: &str,
        init: KeyedStateInit,
    ) -> TaskResult<Aggregate> {
        let expr = match (func, expression) {
            (AggregateFn::Count, _) | (_, None) => None,
            (_, Some(e)) => Some(cel::compile(e)?),
        };
        // No `operator <uid>` prefix: the caller (exec) adds it to every constructor error.
        let ttl = init.ttl.map(StateTtl::new);
        let state = match &init.restored_store {
            Some(restored) => KeyedState::open_restored(&init.backend, init.range, ttl, restored),
            None => KeyedState::open(&init.backend, init.range, ttl),
        }
        .map_err(|e| TaskError(e.to_string()))?;
        let pending =
            PendingKeyGroups::new(init.range, init.restore.key_groups, init.clock.now_ms()).map_err(TaskError)?;
        // A store built by the fast restore holds the restored handle's table files: the first
        // native checkpoint references them when the barrier names the restored checkpoint
        // (a claimed restore, `checkpoint/restore_mode.rs`); otherwise this record is unused
        // and dropped at the first completion.
        let native_tables = UploadedTables::default();
        if let Some(restored) = &init.restored_store {
            native_tables.record(restored.checkpoint_id, restored.table_files.clone());
        }
        Ok(Aggregate {
            uid: uid.to_string(),
            func,
            expr,
            output: if key_field == as_field {
                Schema::new([as_field])
            } else {
                Schema::new([key_field, as_field])
            },
            range: init.range,
            state,
            pending,
            ttl,
            lazy_failpoints: LazyRestoreFailpoints::from_env(),
            clock: init.clock,
            incremental: IncrementalTracker::default(),
            native_tables,
            step_path: None,
            expression_text: expression.filter(|_| func != AggregateFn::Count).map(String::from),
            restored_shapes: init.restore.operator_state,
            kept_shape: None,
        })
    }

    /// Names the step in errors by its path in the manifest: `index` is its position in
    /// `spec.job.steps` (`spec.job.steps[4].sum.expression: ...`).
    pub fn at_step(mut self, index: usize) -> Aggregate {
        self.step_path = Some(format!("spec.job.steps[{index}].{}", self.func.name()));
        self
    }

    /// Number of keys held (expired keys included until incremental cleanup removes them;
    /// a pending key group counts the entries of its blocks, an upper bound when it has
    /// deltas).
    pub fn len(&self) -> usize {
        self.state.len() + self.pending.pending_entries() as usize
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

/// Input rows whose value vector has at most this capacity become the output row in place
/// (a larger one is freed rather than kept under a two-field row).
const REUSED_CAPACITY_MAX: usize = 8;

/// The key of `r`, checked: set by a `keyBy` and in the subtask's key-group range.
#[inline(always)]
fn checked_key<'r>(uid: &str, range: &KeyGroupRange, r: &'r Record) -> TaskResult<&'r KeyedBy> {
    let keyed = r
        .keyed
        .as_ref()
        .ok_or_else(|| TaskError(format!("operator {uid}: record without a key (no keyBy before it)")))?;
    if !range.contains(keyed.key_group) {
        return Err(TaskError(format!(
            "operator {uid}: key group {} routed to the subtask owning {range:?}",
            keyed.key_group
        )));
    }
    Ok(keyed)
}

/// What `r` adds to its key's aggregate: 1 without an expression (`count`), else the
/// expression's number.
#[inline(always)]
fn input_value(uid: &str, expr: Option<&Expr>, r: &Record) -> TaskResult<Num> {
    match expr {
        None => Ok(Num::Int(1)),
        Some(e) => expression_value(uid, e, r),
    }
}

/// The number `e` gives for `r`. Errors: evaluation fails, the value is not a number (a
/// double beyond ±1.8e308 is said to have overflowed, not to be null).
fn expression_value(uid: &str, e: &Expr, r: &Record) -> TaskResult<Num> {
    let v = e.eval(&r.row)?;
    Num::from_datum(&v).ok_or_else(|| {
        let found = match e.non_finite_result(&r.row) {
            Some(f) => format!("overflowed to {} (a double holds at most ±1.8e308)", non_finite_name(f)),
            None => format!("gave {v}, not a number"),
        };
        TaskError(format!(
            "operator {uid}: `{}` {found}, on the record {}",
            e.source(),
            cel::record_shown(&r.row)
        ))
    })
}

/// `err` with the step's field path after the operator's uid, when known:
/// `operator sm: spec.job.steps[3].sum.expression: ...`.
fn at_field(err: TaskError, uid: &str, step_path: Option<&str>, field: &str) -> TaskError {
    match (step_path, err.0.strip_prefix(&format!("operator {uid}: "))) {
        (Some(path), Some(rest)) => TaskError(format!("operator {uid}: {path}{field}: {rest}")),
        _ => err,
    }
}

/// How a message names a double that is not finite.
fn non_finite_name(f: f64) -> &'static str {
    if f.is_nan() {
        "NaN (not a number)"
    } else if f > 0.0 {
        "infinity"
    } else {
        "-infinity"
    }
}

/// Errors: a running sum that left the doubles' range (infinity, which JSON cannot write).
#[inline]
fn finite(uid: &str, step_path: Option<&str>, value: Num) -> TaskResult<Num> {
    match value {
        Num::Float(f) if !f.is_finite() => Err(TaskError(format!(
            "operator {uid}: {}: a running value overflowed to {} (a double holds at most ±1.8e308); \
             aggregate smaller numbers (scale the expression down) or use `count`",
            step_path.unwrap_or("the aggregation"),
            non_finite_name(f)
        ))),
        v => Ok(v),
    }
}

#[path = "aggregate_columns.rs"]
mod columns;

#[path = "aggregate_restore.rs"]
mod restore;

#[path = "aggregate_shape.rs"]
pub mod shape;

#[cfg(test)]
#[path = "aggregate_savepoint_tests.rs"]
mod savepoint_tests;

#[async_trait]
impl StreamOperator for Aggregate {
    async fn process_columns(&mut self, input: crate::record::ColumnBatch) -> TaskResult<crate::record::Batch> {
        if !self.pending.is_empty()
            && let Some(keyed) = input.keyed()
        {
            let key_groups = keyed.key_groups.clone();
            self.build_for_batch(key_groups)?;
        }
        match self.process_key_columns(input) {
            Ok(output) => output,
            Err(input) => {
                let mut out = Vec::with_capacity(input.len());
                self.process(input.into_records(), &mut out).await?;
                Ok(crate::record::Batch::Rows(out))
            }
        }
    }

    async fn process(&mut self, input: Vec<Record>, out: &mut Vec<Record>) -> TaskResult<()> {
        // Batch at a time, in two passes: the first only updates state, a short loop whose
        // table lookups (cache misses on large state) the CPU can overlap across records,
        // with the backend chosen once per batch; the second builds every output row.
        if !self.pending.is_empty() {
            let key_groups: Vec<u32> = input
                .iter()
                .filter_map(|r| r.keyed.as_ref().map(|k| k.key_group))
                .collect();
            self.build_for_batch(key_groups)?;
        }
        let now_ms = self.clock.now_ms();
        let Aggregate {
            uid,
            func,
            expr,
            output,
            range,
            state,
            step_path,
            ..
        } = self;
        let (uid, func, expr, step_path) = (uid.as_str(), *func, expr.as_ref(), step_path.as_deref());
        let input_value = |uid: &str, expr: Option<&Expr>, r: &Record| {
            input_value(uid, expr, r).map_err(|e| at_field(e, uid, step_path, ".expression"))
        };
        let state_err = |e: crate::state::disk::DiskStateError| TaskError(format!("operator {uid}: {e}"));
        state.maintain(now_ms, input.len()).map_err(state_err)?;
        let combine = |x: Num| {
            move |current: Option<&Num>| match current {
                Some(old) => old.combine(func, x),
                None if func == AggregateFn::Count => Num::Int(1),
                None => x,
            }
        };
        let mut updated = Vec::with_capacity(input.len());
        match state {
            KeyedState::Heap(heap) => {
                for r in &input {
                    let keyed = checked_key(uid, range, r)?;
                    let x = input_value(uid, expr, r)?;
                    updated.push(heap.update(keyed.key_group, keyed.hash, &keyed.key, now_ms, combine(x)));
                }
            }
            // The integer-key table (a key of another type moves it to the generic one) and
            // the disk backend, through `KeyedState::update`.
            KeyedState::HeapInt(_) | KeyedState::Disk(_) | KeyedState::DiskOpening(_) => {
                for r in &input {
                    let keyed = checked_key(uid, range, r)?;
                    let x = input_value(uid, expr, r)?;
                    let value = state
                        .update(keyed.key_group, keyed.hash, &keyed.key, now_ms, combine(x))
                        .map_err(state_err)?;
                    updated.push(value);
                }
            }
        }
        // Each input record becomes its output record in place (its row's value vector reused
        // when small: no allocation, no record moved), and the batch goes on whole.
        let key_and_value = output.names().len() != 1;
        let mut input = input;
        for (r, value) in input.iter_mut().zip(updated) {
            let keyed = r.keyed.take();
            let values = r.row.reset(output, 2, REUSED_CAPACITY_MAX);
            if let (true, Some(keyed)) = (key_and_value, keyed) {
                values.push(keyed.key.into_datum());
            }
            values.push(finite(uid, step_path, value)?.to_datum());
        }
        if out.is_empty() {
            *out = input;
        } else {
            out.append(&mut input);
        }
        Ok(())
    }

    async fn snapshot(&mut self, barrier: &Barrier) -> TaskResult<Option<SnapshotEncoder>> {
        // Synchronous part: freeze the key-group tables (heap, no copy) or take the store's read
        // view (disk, O(1)) and, for an incremental checkpoint, take the changed keys
        // (O(changed keys)); encode on the encoder thread. Both backends write the same
        // delta blocks.
        self.incremental.taking(barrier.id, barrier.kind);
        let uid = &self.uid;
        // A disk store still being created is waited for, and what memory holds handed over
        // to it (`state/disk_opening.rs`): a snapshot sees only the store.
        self.state
            .finish_opening(self.clock.now_ms())
            .map_err(|e| TaskError(format!("operator {uid}: {e}")))?;
        // A failed write-back fails the task here: every snapshot of the store would lack it.
        self.state
            .check_write_back()
            .map_err(|e| TaskError(format!("operator {uid}: {e}")))?;
        // Pending key groups: written as they are, or built first (`state/pending.rs`).
        let pending_before = self.pending.len();
        let pending = self
            .pending
            .snapshot(&mut self.state, self.ttl.is_some())
            .map_err(|e| TaskError(format!("operator {uid}: {e}")))?;
        let built = pending_before - pending.as_is.len();
        if built > 0 {
            tracing::info!(
                target: "weir",
                "operator {uid}: checkpoint {}: {built} restored key groups were still loading in the \
                 background; loaded them first, before the snapshot (their restored data carries a \
                 state TTL, or write times, that this step's snapshot must apply instead of copying)",
                barrier.id,
            );
        }
        if !pending.is_empty() {
            tracing::info!(
                target: "weir",
                "operator {uid}: checkpoint {}: {} restored key groups still loading in the background \
                 are copied into it as restored",
                barrier.id,
                pending.as_is.len()
            );
        }
        let incremental = barrier.incremental;
        let (disk_backend, write_back_cache) = self.state.disk_with_write_back_cache();
        let native = uses_native_form(NativeConditions {
            disk_backend,
            incremental_checkpoint: incremental.is_some(),
            write_back_cache,
            restored_groups_pending: !pending.is_empty() || !self.pending.is_empty(),
            switched_on: native_switch(std::env::var(NATIVE_CHECKPOINTS_ENV).ok().as_deref())
                .map_err(|e| TaskError(format!("operator {uid}: {e}")))?,
        });
        if native {
            // Every write through the write-back cache, but no changed key recorded: a native
            // checkpoint reads the store's files (a later checkpoint of blocks is a new base).
            self.state.track_for_native_checkpoints();
        } else if incremental.is_some() {
            // The first incremental checkpoint is a full base: changes before it do not matter.
            self.state.track_changes();
        }
        if native && let Some(local) = self.state.native_snapshot(barrier.id) {
            // The store's own files (`state/disk_native.rs`): the write-back thread writes a
            // RocksDB checkpoint after the generations frozen before this barrier; the encoder
            // waits for it. No changed key is recorded in native mode (the set is empty), and
            // the chains' tracker is not told: a later checkpoint of blocks starts a new base.
            let changes = self.state.take_changes();
            let reuse = incremental
                .flatten()
                .map(|c| self.native_tables.of(c))
                .unwrap_or_default();
            let uploaded = self.native_tables.clone();
            let entries = self.len() as u64;
            let range = self.range;
            let shape_items = self.shape_items();
            let write_times = self.ttl.is_some();
            // The store keeps expired keys until they are read or cleaned up.
            let expired_through_ms = expired_through(self.ttl, self.clock.now_ms());
            return Ok(Some(Box::new(move || {
                drop(changes);
                let checkpoint = local.wait().map_err(|e| TaskError(e.to_string()))?;
                Ok(EncodedState {
                    incremental: None,
                    state_names: vec!["keyed:aggregate".into(), "broadcast:aggregate-shape".into()],
                    key_group_range: Some(range),
                    key_groups: vec![],
                    operator_state: shape_items,
                    key_group_stream: None,
                    native: Some(NativeUpload {
                        checkpoint,
                        reuse,
                        uploaded,
                        entries,
                        write_times,
                    }),
                    expired_through_ms,
                    chain_entries: None,
                })
            })));
        }
        let changes = self.state.take_changes();
        let live_entries = self.len() as u64;
        let plan = self
            .incremental
            .plan(barrier.id, incremental, changes, live_entries, DEFAULT_POLICY);
        let now_ms = self.clock.now_ms();
        let view = self.state.snapshot(now_ms);
        let range = self.range;
        let shape_items = self.shape_items();
        // A delta's chain keeps in its base the keys expired since the base was written.
        let expired_through_ms = match plan.form {
            Form::Delta { .. } => expired_through(self.ttl, now_ms),
            _ => None,
        };
        Ok(Some(Box::new(move || {
            // A full snapshot streams its blocks (the state file uploads while later key
            // groups encode); a delta, O(changed keys), is encoded whole.
            let (key_groups, key_group_stream, incremental): (_, Option<KeyGroupStream>, _) = match plan.form {
                Form::SelfContained | Form::Base => (
                    vec![],
                    Some(Box::new(move |emit| {
                        pending
                            .merge_each(|each| view.encode_each(each), &mut |block| emit(block).map_err(|e| e.0))
                            .map_err(TaskError)
                    })),
                    (plan.form == Form::Base).then_some(Form::Base),
                ),
                Form::Delta { over } => (
                    view.encode_delta(&plan.changes.union()).map_err(TaskError)?,
                    None,
                    Some(Form::Delta { over }),
                ),
            };
            Ok(EncodedState {
                incremental,
                state_names: vec!["keyed:aggregate".into(), "broadcast:aggregate-shape".into()],
                key_group_range: Some(range),
                key_groups,
                operator_state: shape_items,
                key_group_stream,
                native: None,
                expired_through_ms,
                chain_entries: matches!(plan.form, Form::Delta { .. }).then_some(live_entries),
            })
        })))
    }

    async fn notify_complete(&mut self, id: u64) -> TaskResult<()> {
        // A savepoint's completion also keeps the table files it uploaded, which the next
        // checkpoint extends.
        if self.incremental.completed(id) {
            self.native_tables.confirm(id);
        }
        Ok(())
    }

    fn keyed_state_size(&self) -> Option<crate::state::backend::KeyedStateSize> {
        let mut size = self.state.size();
        size.entries = self.len() as u64;
        Some(size)
    }

    fn has_idle_work(&self) -> bool {
        !self.pending.is_empty() && !self.lazy_failpoints.no_background_build
    }

    async fn on_idle(&mut self) -> TaskResult<()> {
        self.build_when_idle()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Key, KeyedBy, Row};
    use crate::state::key_group::key_group_range;
    use serde_json::json;

    fn keyed(word: &str, v: serde_json::Value) -> Record {
        Record {
            row: Row::from_json(v),
            keyed: Some(KeyedBy::new(Key::Str(word.into()), 8)),
        }
    }

    /// Each output record is its input record turned in place: a small value vector is
    /// reused (same allocation), a wide or too small one replaced; keys are consumed.
    #[tokio::test]
    async fn output_rows_are_the_input_rows_turned_in_place() {
        let all = key_group_range(0, 1, 8);
        let mut op = Aggregate::new(
            "c",
            AggregateFn::Count,
            None,
            "word",
            "count",
            all,
            OperatorRestore::default(),
        )
        .unwrap();
        let small = keyed("a", json!({"x": 1, "y": "s", "z": null}));
        let pointer = small.row.values().as_ptr();
        let names: Vec<String> = (0..20).map(|i| format!("f{i}")).collect();
        let wide = Record {
            row: Row::new(Schema::new(names), vec![Datum::Null; 20]).unwrap(),
            keyed: Some(KeyedBy::new(Key::Str("a".into()), 8)),
        };
        let bare = Record {
            row: Row::bare(Datum::Int(1)),
            keyed: Some(KeyedBy::new(Key::Str("b".into()), 8)),
        };
        let mut out = vec![keyed("before", json!({}))];
        op.process(vec![small, wide, bare], &mut out).await.unwrap();
        assert_eq!(out[1].row.values().as_ptr(), pointer, "the input's vector is reused");
        let rows: Vec<_> = out[1..].iter().map(|r| r.row.to_json()).collect();
        assert_eq!(
            rows,
            [
                json!({"word": "a", "count": 1}),
                json!({"word": "a", "count": 2}),
                json!({"word": "b", "count": 1})
            ]
        );
        assert!(out[1..].iter().all(|r| r.keyed.is_none()));
        assert_eq!(out[0].row.to_json(), json!({}), "what `out` held stays first");
        let (_, wide_values) = out.swap_remove(2).row.into_parts();
        assert!(wide_values.capacity() < 20, "a wide row's vector is not kept");
    }

    #[test]
    fn num_combine_table() {
        use AggregateFn::*;
        let rows = [
            (Count, Num::Int(2), Num::Int(9), Num::Int(3)),
            (Sum, Num::Int(2), Num::Int(3), Num::Int(5)),
            (Sum, Num::Int(2), Num::Float(0.5), Num::Float(2.5)),
            (Sum, Num::Int(i64::MAX), Num::Int(1), Num::Float(i64::MAX as f64 + 1.0)),
            (Min, Num::Int(2), Num::Int(-3), Num::Int(-3)),
            (Max, Num::Float(2.0), Num::Int(3), Num::Float(3.0)),
        ];
        for (f, a, b, want) in rows {
            assert_eq!(a.combine(f, b), want, "{f:?} {a:?} {b:?}");
        }
    }

    pub(super) fn barrier() -> Barrier {
        let target = std::sync::Arc::new(crate::checkpoint::SnapshotTarget {
            store: std::sync::Arc::new(crate::storage::LocalStore::new("/tmp").unwrap()),
            dir: "x".into(),
        });
        Barrier {
            id: 1,
            kind: crate::control::api::SnapshotKind::Checkpoint,
            stop: false,
            target,
            triggered_at_ms: 0,
            is_final: false,
            incremental: None,
        }
    }

    /// Many keys per key group (the table grows and rehashes), string and integer keys, and
    /// the count carries over a snapshot and restore.
    #[tokio::test]
    async fn counts_many_keys_per_key_group_across_a_restore() {
        let all = key_group_range(0, 1, 8);
        let keys: Vec<Key> = (0..3000)
            .map(|i| {
                if i % 2 == 0 {
                    Key::Str(format!("word-{i}").into())
                } else {
                    Key::Int(i)
                }
            })
            .collect();
        let batch = || {
            keys.iter()
                .map(|k| Record {
                    row: Row::from_json(serde_json::json!({})),
                    keyed: Some(KeyedBy::new(k.clone(), 8)),
                })
                .collect::<Vec<_>>()
        };
        let new = |restore| Aggregate::new("c", AggregateFn::Count, None, "k", "k", all, restore).unwrap();
        let mut op = new(OperatorRestore::default());
        let mut out = Vec::new();
        op.process(batch(), &mut out).await.unwrap();
        op.process(batch(), &mut out).await.unwrap();
        assert_eq!(op.len(), 3000);
        // Key field and value field of the same name: the value replaces the key.
        assert_eq!(serde_json::to_string(&out[3000].row).unwrap(), r#"{"k":2}"#);
        let enc = op.snapshot(&barrier()).await.unwrap().unwrap()()
            .unwrap()
            .collect_stream()
            .unwrap();
        let mut restored = new(OperatorRestore {
            key_groups: enc.key_groups,
            operator_state: vec![],
        });
        let mut out = Vec::new();
        restored.process(batch(), &mut out).await.unwrap();
        assert!(out.iter().all(|r| r.row.values() == [Datum::Int(3)]));
        assert_eq!(restored.len(), 3000);
    }

    #[tokio::test]
    async fn running_sum_emits_updates_and_snapshot_restores_by_key_group() {
        let all = key_group_range(0, 1, 8);
        let mut op = Aggregate::new(
            "s",
            AggregateFn::Sum,
            Some("n"),
            "word",
            "total",
            all,
            OperatorRestore::default(),
        )
        .unwrap();
        let mut out = Vec::new();
        let input = vec![
            keyed("a", json!({"n": 2})),
            keyed("b", json!({"n": 1})),
            keyed("a", json!({"n": 5})),
        ];
        op.process(input, &mut out).await.unwrap();
        let vals: Vec<_> = out.iter().map(|r| r.row.to_json()).collect();
        assert_eq!(
            vals,
            vec![
                json!({"word": "a", "total": 2}),
                json!({"word": "b", "total": 1}),
                json!({"word": "a", "total": 7})
            ]
        );
        assert_eq!(serde_json::to_string(&out[0].row).unwrap(), r#"{"word":"a","total":2}"#);

        let enc = op.snapshot(&barrier()).await.unwrap().unwrap()()
            .unwrap()
            .collect_stream()
            .unwrap();
        // Restore into two subtasks of parallelism 2: each gets only its key groups, together all keys.
        let mut total = 0;
        for i in 0..2 {
            let r = key_group_range(i, 2, 8);
            let restored = Aggregate::new(
                "s",
                AggregateFn::Sum,
                Some("n"),
                "word",
                "total",
                r,
                OperatorRestore {
                    key_groups: enc.key_groups.clone(),
                    operator_state: vec![],
                },
            )
            .unwrap();
            total += restored.len();
        }
        assert_eq!(total, 2);
    }

    /// With `ttl` and an injected clock: a key not written for the TTL counts from zero again,
    /// incremental cleanup shrinks the state, and a snapshot leaves expired keys out.
    #[tokio::test]
    async fn keys_expire_after_the_ttl_and_count_from_zero_again() {
        let clock = crate::state::ttl::ManualClock::new(1_000_000);
        let all = key_group_range(0, 1, 8);
        let mut op = Aggregate::with_state(
            "c",
            AggregateFn::Count,
            None,
            "word",
            "count",
            KeyedStateInit {
                ttl: Some(Duration::from_secs(60)),
                clock: clock.clone(),
                ..KeyedStateInit::new(all, OperatorRestore::default())
            },
        )
        .unwrap();
        let words = |ws: &[&str]| ws.iter().map(|w| keyed(w, json!({}))).collect::<Vec<_>>();
        let counts = |out: &[Record]| {
            out.iter()
                .map(|r| r.row.to_json()["count"].as_i64().unwrap())
                .collect::<Vec<_>>()
        };
        let cold: Vec<String> = (0..500).map(|i| format!("cold-{i}")).collect();
        let mut out = Vec::new();
        op.process(words(&cold.iter().map(String::as_str).collect::<Vec<_>>()), &mut out)
            .await
            .unwrap();
        op.process(words(&["hot", "hot"]), &mut out).await.unwrap();
        assert_eq!(op.len(), 501);
        clock.advance(Duration::from_secs(59));
        out.clear();
        op.process(words(&["hot", "cold-0"]), &mut out).await.unwrap();
        assert_eq!(counts(&out), [3, 2], "within the TTL: values kept");
        clock.advance(Duration::from_secs(59));
        out.clear();
        // 118 s after the cold keys were written (cold-0: 59 s), 59 s after `hot`.
        op.process(words(&["hot", "cold-1", "cold-0"]), &mut out).await.unwrap();
        assert_eq!(counts(&out), [4, 1, 3], "cold-1 expired: counts from zero");
        // Incremental cleanup removes the 498 expired keys over the next batches.
        for _ in 0..200 {
            op.process(words(&["hot"]), &mut out).await.unwrap();
        }
        assert_eq!(op.len(), 3, "only hot, cold-0 and cold-1 are held");
        let enc = op.snapshot(&barrier()).await.unwrap().unwrap()()
            .unwrap()
            .collect_stream()
            .unwrap();
        assert_eq!(enc.key_groups.iter().map(|b| b.entries).sum::<u64>(), 3);
        clock.advance(Duration::from_secs(61));
        let enc = op.snapshot(&barrier()).await.unwrap().unwrap()()
            .unwrap()
            .collect_stream()
            .unwrap();
        assert!(enc.key_groups.is_empty(), "all expired at this barrier");
    }
}
