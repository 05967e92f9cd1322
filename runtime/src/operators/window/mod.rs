//! Keyed event-time windows (`window` step): tumbling, sliding and session windows with
//! `count`, `sum`, `min`, `max`, fired by the watermark.
//!
//! A record goes into the windows of its event time ([`assign`]); a window whose last
//! millisecond plus the allowed lateness is at or behind the watermark is late: the record is
//! not added to it, and a record all of whose windows are late is dropped and counted
//! (`weir_late_records_dropped_total`), or with `lateRecords: sideOutput` sent as it came to
//! the window's late side output (Flink's `sideOutputLateData`). When the watermark reaches a window's last millisecond
//! the window fires once, emitting `{<key>, window_start, window_end, <as>}`; a record added
//! to a fired window within the allowed lateness fires an update at once. A window's state is
//! deleted when its lateness has passed. Session windows merge when they overlap or touch.
//!
//! **State.** Each key's windows are keyed state on the job's backend (`spec.stateBackend`,
//! [`KeyedState`]): on the heap its copy-on-write tables (a checkpoint's synchronous part copies
//! no window), on disk the store behind its write-back cache (a firing scans a key group's
//! keys in the store, overlaid with the cache's generations). Checkpoints are full or, with `checkpointing.incremental`, chains of
//! delta blocks (`state/incremental.rs`), as an aggregation's on the heap; blocks are the same
//! on both backends, so a savepoint restores on either. Each key group's watermark at the
//! snapshot goes with the window's shape in each subtask's operator state item
//! ([`shape::StoredItem`]), so a restore (also at another parallelism) neither fires a window
//! twice nor opens again one that fired and was deleted. Snapshots written before 2026-12-05
//! hold one postcard block per key group with its watermark ([`state::GroupSnapshot`]) and
//! restore as before ([`keyed`]).
//!
//! **Timers.** Each key group keeps the earliest watermark at which one of its windows fires
//! or is deleted; a watermark reaching it visits that group's keys only. A restored group's is
//! unknown until its first visit, at the first watermark after the restore. Flink keeps one
//! timer per window instead (in memory or in RocksDB); here memory holds one number per key
//! group whatever the state's size, and a tumbling window's end visits each key once, as its
//! firing emits one result per key anyway.

pub mod assign;
mod keyed;
pub mod shape;
pub mod state;

use super::{Firing, OperatorRestore, SnapshotEncoder, StreamOperator, TaskError, TaskResult};
use crate::checkpoint::Barrier;
use crate::exec::watermark::{END_OF_TIME, NO_WATERMARK, event_time_millis};
use crate::job::event_time::{WINDOW_END_FIELD, WINDOW_START_FIELD, WindowAssigner, WindowDef};
use crate::job::validate::AggregateFn;
use crate::record::cel::{self, Expr};
use crate::record::{Datum, Key, Record, Row, Schema};
use crate::state::backend::{BackendChoice, KeyedState};
use crate::state::incremental::IncrementalTracker;
use crate::state::key_group::{KeyGroupRange, key_hash};
use assign::{TimeWindow, assign, is_late, merge_session};
use async_trait::async_trait;
pub use shape::{WindowKey, check_restored_shape, window_shape};
use state::{Acc, WindowEntry};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// A key's windows: open ones, and fired ones kept for `allowedLateness`.
pub type KeyWindows = Vec<WindowEntry>;

/// A key group's earliest timer before its keys were visited (after a restore): due at any
/// watermark.
const TIMER_UNKNOWN: i64 = i64::MIN;

/// No window in the key group.
const NO_TIMER: i64 = i64::MAX;

/// The keyed window operator of one subtask.
pub struct WindowOperator {
    uid: String,
    def: WindowDef,
    expr: Option<Expr>,
    /// `[key_field, window_start, window_end, as_field]`.
    output: Arc<Schema>,
    range: KeyGroupRange,
    /// Each key's windows, on the job's backend.
    state: KeyedState<KeyWindows>,
    /// `floors[kg - range.start]`: the watermark restored with the key group (records of the
    /// group are judged late against the larger of it and the current watermark).
    floors: Vec<i64>,
    /// `timers[kg - range.start]`: the smallest watermark at which a window of the key group
    /// fires or is deleted ([`NO_TIMER`]: none; [`TIMER_UNKNOWN`]: restored, not visited yet).
    timers: Vec<i64>,
    /// The subtask's watermark.
    watermark: i64,
    /// The smallest of `timers`.
    next_timer: i64,
    /// Late records dropped (the `weir_late_records_dropped_total` counter).
    late_dropped: Arc<AtomicU64>,
    /// With `lateRecords: sideOutput`: late records not yet taken
    /// ([`StreamOperator::take_late_output`]); `None` when late records are dropped.
    late_output: Option<Vec<Record>>,
    /// Late records sent to the side output by this subtask (logged at the end of event time).
    late_sent: u64,
    /// The key selector of the `keyBy` before the window, stored with its shape
    /// ([`WindowOperator::keyed_by`]).
    key_expression: Option<String>,
    /// Chains of incremental checkpoints (`state/incremental.rs`).
    incremental: IncrementalTracker,
    /// While a watermark's firing is emitted in parts: the index in `timers` of the next key
    /// group to visit.
    firing_from: Option<usize>,
}

/// A firing is emitted in parts of about this many results (the part ends after the key group
/// that reaches it): a tumbling window's end over millions of keys fires millions of windows
/// at one watermark, and memory holds one part of them, not all.
const FIRING_PART_RESULTS: usize = 4096;

/// The state's clock: windows have no TTL, so write times are not used.
const NOW_MS: u64 = 0;

impl WindowOperator {
    /// Creates the operator for the subtask owning `range`, its state on `backend`, restoring
    /// the key groups of `restore` in the range (others are ignored). Its watermark starts at
    /// the smallest restored key-group watermark. Errors (the caller names the operator): an
    /// expression that does not compile, a block that does not decode, a restore point whose
    /// windows have another shape ([`window_shape`]), the disk store cannot be created or
    /// written.
    pub fn new(
        uid: &str,
        def: &WindowDef,
        key_field: &str,
        range: KeyGroupRange,
        restore: OperatorRestore,
        late_dropped: Arc<AtomicU64>,
        backend: &BackendChoice,
    ) -> TaskResult<WindowOperator> {
        let expr = match (def.func, &def.expression) {
            (AggregateFn::Count, _) | (_, None) => None,
            (_, Some(e)) => Some(cel::compile(e)?),
        };
        check_restored_shape(def, None, &restore.operator_state).map_err(TaskError)?;
        let mut state = keyed::open(backend, range).map_err(|e| TaskError(e.to_string()))?;
        let restored = keyed::restore(&mut state, range, restore)?;
        let next_timer = restored.timers.iter().copied().min().unwrap_or(NO_TIMER);
        Ok(WindowOperator {
            uid: uid.to_string(),
            def: def.clone(),
            expr,
            output: Schema::new([key_field, WINDOW_START_FIELD, WINDOW_END_FIELD, def.as_field.as_str()]),
            range,
            state,
            floors: restored.floors,
            timers: restored.timers,
            watermark: restored.watermark.unwrap_or(NO_WATERMARK),
            next_timer,
            late_dropped,
            late_output: def.late_side_output.then(Vec::new),
            late_sent: 0,
            key_expression: None,
            incremental: IncrementalTracker::default(),
            firing_from: None,
        })
    }

    /// Stores `key` (the key selector of the `keyBy` before the window) with the window's
    /// shape in every snapshot, so a restore under another key selector is refused
    /// ([`check_restored_shape`], which the caller runs with the same key before building).
    pub fn keyed_by(mut self, key: &str) -> WindowOperator {
        self.key_expression = Some(key.to_string());
        self
    }

    /// Number of windows held, open or fired and kept for `allowedLateness` (visits every
    /// key; for tests). Errors: the disk store fails.
    #[cfg(test)]
    pub(crate) fn windows(&self) -> TaskResult<usize> {
        let mut windows = 0;
        for key_group in self.range.start..=self.range.end {
            let entries = self
                .state
                .entries_in_group(key_group, NOW_MS)
                .map_err(|e| self.state_error(e))?;
            windows += entries.iter().map(|(_, w)| w.len()).sum::<usize>();
        }
        Ok(windows)
    }

    fn state_error(&self, e: crate::state::disk::DiskStateError) -> TaskError {
        TaskError(format!("operator {}: {e}", self.uid))
    }

    /// The watermark at which `entry` next needs attention: its last millisecond until it
    /// fired, then the end of its allowed lateness.
    fn timer_of(&self, entry: &WindowEntry) -> i64 {
        let max_ts = entry.end.saturating_sub(1);
        if entry.fired {
            max_ts.saturating_add(self.def.allowed_lateness_ms)
        } else {
            max_ts
        }
    }

    fn result(&self, key: &Key, entry: &WindowEntry) -> Record {
        Record::new(Row::new_unchecked(
            self.output.clone(),
            vec![
                key.clone().into_datum(),
                Datum::Int(entry.start),
                Datum::Int(entry.end),
                entry.value.to_datum(),
            ],
        ))
    }

    /// The value a record contributes.
    fn value_of(&self, row: &Row) -> TaskResult<Acc> {
        match &self.expr {
            None => Ok(Acc::Int(1)),
            Some(e) => {
                let v = e.eval(row)?;
                Acc::from_datum(&v).ok_or_else(|| {
                    TaskError(format!(
                        "operator {}: `{}` gave {v}, not a number, on the record {}",
                        self.uid,
                        e.source(),
                        cel::record_shown(row)
                    ))
                })
            }
        }
    }

    /// Adds one record of `key` (in `key_group`, hash `hash`) at event time `ts`; returns
    /// whether some window took it (else it was late). Results of windows already due go to
    /// `out`. Errors: the disk store fails.
    fn add(
        &mut self,
        key_group: u32,
        hash: u64,
        key: &Key,
        ts: i64,
        value: Acc,
        out: &mut Vec<Record>,
    ) -> TaskResult<bool> {
        let at = (key_group - self.range.start) as usize;
        let watermark = self.watermark.max(self.floors[at]);
        // One read-modify-write: a late record writes the key's windows back unchanged.
        let def = &self.def;
        let mut added = Vec::new();
        let holds_none = self
            .state
            .update_then(
                key_group,
                hash,
                key,
                NOW_MS,
                |current| {
                    let mut entries = current.cloned().unwrap_or_default();
                    added = add_to_windows(def, &mut entries, ts, value, watermark);
                    entries
                },
                |stored| stored.is_empty(),
            )
            .map_err(|e| self.state_error(e))?;
        if added.is_empty() {
            // Late; a key that held no window holds none now either.
            if holds_none {
                self.state
                    .remove(key_group, hash, key)
                    .map_err(|e| self.state_error(e))?;
            }
            return Ok(false);
        }
        for entry in &added {
            if entry.end.saturating_sub(1) <= watermark {
                out.push(self.result(key, entry));
            }
            let timer = self.timer_of(entry);
            self.timers[at] = self.timers[at].min(timer);
            self.next_timer = self.next_timer.min(timer);
        }
        Ok(true)
    }

    /// Fires the windows of `key_group` due at `watermark` into `fired` and deletes those
    /// whose lateness has passed; sets the group's timer from the windows left. Errors: the
    /// disk store fails.
    fn fire_group(
        &mut self,
        key_group: u32,
        watermark: i64,
        fired: &mut Vec<(i64, i64, Key, WindowEntry)>,
    ) -> TaskResult<()> {
        let lateness = self.def.allowed_lateness_ms;
        let mut group_timer = NO_TIMER;
        let held = self
            .state
            .entries_in_group(key_group, NOW_MS)
            .map_err(|e| self.state_error(e))?;
        for (key, mut entries) in held {
            let hash = key_hash(&key);
            let mut changed = false;
            for e in entries.iter_mut() {
                if !e.fired && e.end.saturating_sub(1) <= watermark {
                    e.fired = true;
                    changed = true;
                    fired.push((e.end, e.start, key.clone(), e.clone()));
                }
            }
            let before = entries.len();
            entries.retain(|e| {
                !is_late(
                    TimeWindow {
                        start: e.start,
                        end: e.end,
                    },
                    lateness,
                    watermark,
                )
            });
            changed |= entries.len() != before;
            for e in &entries {
                group_timer = group_timer.min(self.timer_of(e));
            }
            if !changed {
                continue;
            }
            if entries.is_empty() {
                self.state.remove(key_group, hash, &key)
            } else {
                self.state
                    .update_then(key_group, hash, &key, NOW_MS, |_| entries, |_| true)
            }
            .map_err(|e| self.state_error(e))?;
        }
        self.timers[(key_group - self.range.start) as usize] = group_timer;
        Ok(())
    }
}

/// Adds a record at event time `ts` with `value` to `entries` (a key's windows) under `def`,
/// judged against `watermark`: into each of its windows that is not late, merging session
/// windows it bridges. Returns the windows it went into, as they are now (none: late, and
/// `entries` unchanged).
fn add_to_windows(def: &WindowDef, entries: &mut KeyWindows, ts: i64, value: Acc, watermark: i64) -> Vec<WindowEntry> {
    let (func, lateness) = (def.func, def.allowed_lateness_ms);
    if let WindowAssigner::Session { .. } = def.assigner {
        let new = assign(def.assigner, ts)[0];
        let existing: Vec<TimeWindow> = entries
            .iter()
            .map(|e| TimeWindow {
                start: e.start,
                end: e.end,
            })
            .collect();
        let (merged, absorbed) = merge_session(&existing, new);
        if is_late(merged, lateness, watermark) {
            return vec![];
        }
        let mut total = value;
        for &i in absorbed.iter().rev() {
            total = entries.remove(i).value.merge(func, total);
        }
        let entry = WindowEntry {
            start: merged.start,
            end: merged.end,
            value: total,
            fired: merged.max_timestamp() <= watermark,
        };
        entries.push(entry.clone());
        return vec![entry];
    }
    let mut added = Vec::new();
    for w in assign(def.assigner, ts) {
        if is_late(w, lateness, watermark) {
            continue;
        }
        let fire_now = w.max_timestamp() <= watermark;
        let entry = match entries.iter_mut().find(|e| e.start == w.start) {
            Some(e) => {
                e.value = e.value.merge(func, value);
                e.fired |= fire_now;
                e
            }
            None => {
                entries.push(WindowEntry {
                    start: w.start,
                    end: w.end,
                    value,
                    fired: fire_now,
                });
                entries.last_mut().expect("just pushed")
            }
        };
        added.push(entry.clone());
    }
    added
}

#[async_trait]
impl StreamOperator for WindowOperator {
    async fn process(&mut self, input: Vec<Record>, out: &mut Vec<Record>) -> TaskResult<()> {
        // Releases the tables of encoded snapshots (heap) and written-back generations (disk).
        self.state
            .maintain(NOW_MS, input.len())
            .map_err(|e| self.state_error(e))?;
        for r in input {
            let keyed = r.keyed.as_ref().ok_or_else(|| {
                TaskError(format!(
                    "operator {}: record without a key (no keyBy before it)",
                    self.uid
                ))
            })?;
            if !self.range.contains(keyed.key_group) {
                return Err(TaskError(format!(
                    "operator {}: key group {} routed to the subtask owning {:?}",
                    self.uid, keyed.key_group, self.range
                )));
            }
            let field = &self.def.time_field;
            let ts = event_time_millis(r.row.get(field).unwrap_or(&Datum::Null), self.def.time_unit).map_err(|e| {
                TaskError(format!(
                    "operator {}: event-time field `{field}` of the record {}: {e}",
                    self.uid,
                    cel::record_shown(&r.row)
                ))
            })?;
            // The first value decided the unit (an ambiguous one was refused): later integers
            // are milliseconds, as for a source's event time (`exec::watermarks`).
            self.def
                .time_unit
                .get_or_insert(crate::job::spec::EventTimeUnit::Milliseconds);
            let value = self.value_of(&r.row)?;
            if !self.add(keyed.key_group, keyed.hash, &keyed.key, ts, value, out)? {
                match &mut self.late_output {
                    Some(late) => {
                        late.push(r);
                        self.late_sent += 1;
                    }
                    None => {
                        self.late_dropped.fetch_add(1, Ordering::Relaxed);
                    }
                }
            }
        }
        Ok(())
    }

    fn keyed_state_size(&self) -> Option<crate::state::backend::KeyedStateSize> {
        // Keys holding a window (open, or fired and kept for allowedLateness).
        Some(self.state.size())
    }

    fn take_late_output(&mut self) -> Vec<Record> {
        self.late_output.as_mut().map(std::mem::take).unwrap_or_default()
    }

    async fn on_watermark(&mut self, watermark: i64, out: &mut Vec<Record>) -> TaskResult<Firing> {
        let mut at = match self.firing_from {
            // The rest of this watermark's firing (the caller sends nothing else before it).
            Some(at) => at,
            None => {
                if watermark <= self.watermark {
                    return Ok(Firing::Complete);
                }
                self.watermark = watermark;
                if watermark == END_OF_TIME {
                    self.log_end_of_event_time();
                }
                if watermark < self.next_timer {
                    return Ok(Firing::Complete);
                }
                // Tables of encoded snapshots merged first, so a firing without records between
                // checkpoints does not stack write layers on them.
                self.state.maintain(NOW_MS, 0).map_err(|e| self.state_error(e))?;
                0
            }
        };
        debug_assert_eq!(
            watermark, self.watermark,
            "a partial firing continued at another watermark"
        );
        let mut fired: Vec<(i64, i64, Key, WindowEntry)> = Vec::new();
        while at < self.timers.len() && fired.len() < FIRING_PART_RESULTS {
            if self.timers[at] <= watermark {
                self.fire_group(self.range.start + at as u32, watermark, &mut fired)?;
            }
            at += 1;
        }
        fired.sort_by(|a, b| (a.0, a.1, &a.2).cmp(&(b.0, b.1, &b.2)));
        out.extend(fired.iter().map(|(_, _, key, e)| self.result(key, e)));
        if at < self.timers.len() {
            self.firing_from = Some(at);
            return Ok(Firing::Partial);
        }
        self.firing_from = None;
        self.next_timer = self.timers.iter().copied().min().unwrap_or(NO_TIMER);
        Ok(Firing::Complete)
    }

    async fn snapshot(&mut self, barrier: &Barrier) -> TaskResult<Option<SnapshotEncoder>> {
        self.incremental.taking(barrier.id, barrier.kind);
        let watermarks = (
            self.range.start,
            self.floors.iter().map(|floor| self.watermark.max(*floor)).collect(),
        );
        let item = shape::shape_item(&self.def, self.key_expression.as_deref(), &watermarks);
        keyed::snapshot(&mut self.state, &mut self.incremental, barrier, self.range, item).map(Some)
    }

    async fn notify_complete(&mut self, id: u64) -> TaskResult<()> {
        self.incremental.completed(id);
        Ok(())
    }
}

impl WindowOperator {
    /// Logs this subtask's late records at the end of event time.
    fn log_end_of_event_time(&self) {
        if self.late_output.is_some() {
            tracing::info!(
                target: "weir",
                "operator {}: end of event time; {} late records sent to the side output by this subtask",
                self.uid,
                self.late_sent
            );
            return;
        }
        match self.late_dropped.load(Ordering::Relaxed) {
            0 => tracing::info!(
                target: "weir",
                "operator {}: end of event time; 0 late records dropped by this subtask",
                self.uid
            ),
            // Not just a count at info level: a source out of event-time order by more than
            // its bound loses most of its records here, and the output looks merely small.
            late => tracing::warn!(
                target: "weir",
                "operator {}: end of event time; {late} late records dropped by this subtask (their \
                 windows had fired and their allowed lateness had passed): if the input is further out \
                 of event-time order than the source's `eventTime.maxOutOfOrderness`, raise it or the \
                 window's `allowedLateness`",
                self.uid
            ),
        }
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
