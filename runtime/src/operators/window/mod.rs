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
//! State is keyed state by key group ([`state`]): each group's windows and the watermark at
//! the snapshot, so a restore (also at another parallelism) neither fires a window twice nor
//! opens again one that fired and was deleted.

pub mod assign;
pub mod state;

use super::{EncodedState, OperatorRestore, SnapshotEncoder, StreamOperator, TaskError, TaskResult};
use crate::checkpoint::Barrier;
use crate::exec::watermark::{END_OF_TIME, NO_WATERMARK, event_time_millis};
use crate::job::event_time::{WINDOW_END_FIELD, WINDOW_START_FIELD, WindowAssigner, WindowDef};
use crate::job::validate::AggregateFn;
use crate::record::cel::{self, Expr};
use crate::record::{Datum, Key, Record, Row, Schema};
use crate::state::key_group::KeyGroupRange;
use crate::state::snapshot::KeyGroupBlock;
use assign::{TimeWindow, assign, is_late, merge_session};
use async_trait::async_trait;
use state::{Acc, GroupSnapshot, GroupWindows, WindowEntry};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};

/// The keyed window operator of one subtask.
pub struct WindowOperator {
    uid: String,
    def: WindowDef,
    expr: Option<Expr>,
    /// `[key_field, window_start, window_end, as_field]`.
    output: Arc<Schema>,
    range: KeyGroupRange,
    /// `groups[kg - range.start]`: the key group's windows.
    groups: Vec<GroupWindows>,
    /// `floors[kg - range.start]`: the watermark restored with the key group (records of the
    /// group are judged late against the larger of it and the current watermark).
    floors: Vec<i64>,
    /// The subtask's watermark.
    watermark: i64,
    /// The smallest watermark at which some window fires or is deleted.
    next_timer: i64,
    /// Late records dropped (the `weir_late_records_dropped_total` counter).
    late_dropped: Arc<AtomicU64>,
    /// With `lateRecords: sideOutput`: late records not yet taken
    /// ([`StreamOperator::take_late_output`]); `None` when late records are dropped.
    late_output: Option<Vec<Record>>,
    /// Late records sent to the side output by this subtask (logged at the end of event time).
    late_sent: u64,
}

impl WindowOperator {
    /// Creates the operator for the subtask owning `range`, restoring the key groups of
    /// `restore` in the range (others are ignored). Its watermark starts at the smallest
    /// restored key-group watermark. Errors (the caller names the operator): an expression that
    /// does not compile, a block that does not decode, a restore point whose windows have another
    /// shape ([`window_shape`]).
    pub fn new(
        uid: &str,
        def: &WindowDef,
        key_field: &str,
        range: KeyGroupRange,
        restore: OperatorRestore,
        late_dropped: Arc<AtomicU64>,
    ) -> TaskResult<WindowOperator> {
        let expr = match (def.func, &def.expression) {
            (AggregateFn::Count, _) | (_, None) => None,
            (_, Some(e)) => Some(cel::compile(e)?),
        };
        check_restored_shape(def, &restore.operator_state).map_err(TaskError)?;
        let mut groups: Vec<GroupWindows> = (0..range.len()).map(|_| GroupWindows::new()).collect();
        let mut floors = vec![NO_WATERMARK; range.len() as usize];
        let mut restored_min: Option<i64> = None;
        for block in restore.key_groups {
            if !range.contains(block.key_group) {
                continue;
            }
            let snap: GroupSnapshot = postcard::from_bytes(&block.data).map_err(|e| {
                TaskError(format!(
                    "window state of key group {} does not decode: {e}",
                    block.key_group
                ))
            })?;
            let at = (block.key_group - range.start) as usize;
            floors[at] = snap.watermark;
            restored_min = Some(restored_min.map_or(snap.watermark, |m| m.min(snap.watermark)));
            groups[at] = snap.keys.into_iter().collect();
        }
        let mut op = WindowOperator {
            uid: uid.to_string(),
            def: def.clone(),
            expr,
            output: Schema::new([key_field, WINDOW_START_FIELD, WINDOW_END_FIELD, def.as_field.as_str()]),
            range,
            groups,
            floors,
            watermark: restored_min.unwrap_or(NO_WATERMARK),
            next_timer: i64::MAX,
            late_dropped,
            late_output: def.late_side_output.then(Vec::new),
            late_sent: 0,
        };
        op.next_timer = op.earliest_timer();
        Ok(op)
    }

    /// Number of open windows held.
    pub fn windows(&self) -> usize {
        self.groups.iter().flat_map(|g| g.values()).map(Vec::len).sum()
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

    fn earliest_timer(&self) -> i64 {
        self.groups
            .iter()
            .flat_map(|g| g.values())
            .flatten()
            .map(|e| self.timer_of(e))
            .min()
            .unwrap_or(i64::MAX)
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
                        "operator {}: `{}` gave {v}, not a number",
                        self.uid,
                        e.source()
                    ))
                })
            }
        }
    }

    /// Adds one record of `key` (key group offset `at`) at event time `ts`; returns whether
    /// some window took it (else it was late). Results of windows already due go to `out`.
    fn add(&mut self, at: usize, key: &Key, ts: i64, value: Acc, out: &mut Vec<Record>) -> bool {
        let watermark = self.watermark.max(self.floors[at]);
        let (func, lateness) = (self.def.func, self.def.allowed_lateness_ms);
        let mut added: Vec<WindowEntry> = Vec::new();
        if let WindowAssigner::Session { .. } = self.def.assigner {
            let new = assign(self.def.assigner, ts)[0];
            let entries = self.groups[at].entry(key.clone()).or_default();
            let existing: Vec<TimeWindow> = entries
                .iter()
                .map(|e| TimeWindow {
                    start: e.start,
                    end: e.end,
                })
                .collect();
            let (merged, absorbed) = merge_session(&existing, new);
            if is_late(merged, lateness, watermark) {
                if entries.is_empty() {
                    self.groups[at].remove(key);
                }
                return false;
            }
            let mut total = value;
            for &i in absorbed.iter().rev() {
                total = entries.remove(i).value.merge(func, total);
            }
            let fired = merged.max_timestamp() <= watermark;
            let entry = WindowEntry {
                start: merged.start,
                end: merged.end,
                value: total,
                fired,
            };
            entries.push(entry.clone());
            added.push(entry);
        } else {
            let windows = assign(self.def.assigner, ts);
            let entries = self.groups[at].entry(key.clone()).or_default();
            for w in windows {
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
            if entries.is_empty() {
                self.groups[at].remove(key);
            }
            if added.is_empty() {
                return false;
            }
        }
        for entry in &added {
            if entry.end.saturating_sub(1) <= watermark {
                out.push(self.result(key, entry));
            }
            self.next_timer = self.next_timer.min(self.timer_of(entry));
        }
        true
    }
}

#[async_trait]
impl StreamOperator for WindowOperator {
    async fn process(&mut self, input: Vec<Record>, out: &mut Vec<Record>) -> TaskResult<()> {
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
            let ts = event_time_millis(r.row.get(field).unwrap_or(&Datum::Null), self.def.time_unit)
                .map_err(|e| TaskError(format!("operator {}: event-time field `{field}`: {e}", self.uid)))?;
            // The first value decided the unit (an ambiguous one was refused): later integers
            // are milliseconds, as for a source's event time (`exec::watermarks`).
            self.def
                .time_unit
                .get_or_insert(crate::job::spec::EventTimeUnit::Milliseconds);
            let value = self.value_of(&r.row)?;
            let at = (keyed.key_group - self.range.start) as usize;
            if !self.add(at, &keyed.key, ts, value, out) {
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
        // Keys holding a window (open, or fired and kept for allowedLateness): O(key groups),
        // where counting windows would visit them all.
        Some(crate::state::backend::KeyedStateSize {
            entries: self.groups.iter().map(|g| g.len() as u64).sum(),
            ..Default::default()
        })
    }

    fn take_late_output(&mut self) -> Vec<Record> {
        self.late_output.as_mut().map(std::mem::take).unwrap_or_default()
    }

    async fn on_watermark(&mut self, watermark: i64, out: &mut Vec<Record>) -> TaskResult<()> {
        if watermark <= self.watermark {
            return Ok(());
        }
        self.watermark = watermark;
        if watermark == END_OF_TIME && self.late_output.is_some() {
            tracing::info!(
                target: "weir",
                "operator {}: end of event time; {} late records sent to the side output by this subtask",
                self.uid,
                self.late_sent
            );
        } else if watermark == END_OF_TIME {
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
        if watermark < self.next_timer {
            return Ok(());
        }
        let lateness = self.def.allowed_lateness_ms;
        let mut fired: Vec<(i64, i64, Key, WindowEntry)> = Vec::new();
        for group in &mut self.groups {
            group.retain(|key, entries| {
                for e in entries.iter_mut() {
                    if !e.fired && e.end.saturating_sub(1) <= watermark {
                        e.fired = true;
                        fired.push((e.end, e.start, key.clone(), e.clone()));
                    }
                }
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
                !entries.is_empty()
            });
        }
        fired.sort_by(|a, b| (a.0, a.1, &a.2).cmp(&(b.0, b.1, &b.2)));
        out.extend(fired.iter().map(|(_, _, key, e)| self.result(key, e)));
        self.next_timer = self.earliest_timer();
        Ok(())
    }

    async fn snapshot(&mut self, _barrier: &Barrier) -> TaskResult<Option<SnapshotEncoder>> {
        let view: Vec<(u32, i64, GroupWindows)> = self
            .groups
            .iter()
            .zip(&self.floors)
            .enumerate()
            .map(|(i, (g, floor))| (self.range.start + i as u32, self.watermark.max(*floor), g.clone()))
            .filter(|(_, watermark, g)| !g.is_empty() || *watermark != NO_WATERMARK)
            .collect();
        let range = self.range;
        let shape = window_shape(&self.def);
        Ok(Some(Box::new(move || {
            let mut blocks = Vec::with_capacity(view.len());
            for (kg, watermark, windows) in view {
                let snap = GroupSnapshot::of(watermark, &windows);
                blocks.push(KeyGroupBlock {
                    expired_through_ms: None,
                    key_group: kg,
                    entries: snap.windows(),
                    data: postcard::to_stdvec(&snap)?.into(),
                });
            }
            Ok(EncodedState {
                incremental: None,
                // The shape is the same in every subtask: a restore reads one copy.
                state_names: vec!["keyed:window".into(), "broadcast:window-shape".into()],
                key_group_range: Some(range),
                key_groups: blocks,
                operator_state: vec![postcard::to_stdvec(&shape)?],
                key_group_stream: None,
                native: None,
                expired_through_ms: None,
            })
        })))
    }
}

/// Checks the shapes a restore brought (`items`, the window's operator state) against the
/// window `def` ([`window_shape`]). Errors: an item does not decode, or names another shape.
pub fn check_restored_shape(def: &WindowDef, items: &[Vec<u8>]) -> Result<(), String> {
    let shape = window_shape(def);
    for item in items {
        let stored: String =
            postcard::from_bytes(item).map_err(|e| format!("the window's stored shape does not decode: {e}"))?;
        if stored != shape {
            return Err(format!(
                "the restore point holds windows `{stored}`, this job's window is `{shape}`: \
                 open windows of one shape (type, size, slide, gap, aggregate) cannot be carried into another. \
                 Keep the window's settings when restoring, or give it a new `uid` (and set \
                 spec.allowNonRestoredState: true) to start it empty"
            ));
        }
    }
    Ok(())
}

/// What a window's state means, in the manifest's words: its type with sizes, and its
/// aggregate (`sliding 10m every 5m, count`; `session gap 30s, sum of commits`). Every snapshot
/// stores it as the window's operator state, and a restore into a window of another shape is
/// refused before the job starts ([`WindowOperator::new`]): a sliding window's partial counts
/// are not a session's, and a `count` is not a `max`. The output field name, allowed lateness
/// and event-time field may change. Snapshots written before the shape was stored restore
/// into any window.
pub fn window_shape(def: &WindowDef) -> String {
    let ms = |ms: i64| humantime::format_duration(std::time::Duration::from_millis(ms.max(0) as u64)).to_string();
    let windows = match def.assigner {
        WindowAssigner::Tumbling { size_ms } => format!("tumbling {}", ms(size_ms)),
        WindowAssigner::Sliding { size_ms, slide_ms } => format!("sliding {} every {}", ms(size_ms), ms(slide_ms)),
        WindowAssigner::Session { gap_ms } => format!("session gap {}", ms(gap_ms)),
    };
    match (def.func, &def.expression) {
        (AggregateFn::Count, _) | (_, None) => format!("{windows}, {}", def.func.name()),
        (func, Some(e)) => format!("{windows}, {} of {e}", func.name()),
    }
}

#[cfg(test)]
#[path = "tests.rs"]
mod tests;
