//! Watermarks in a subtask (part of [`task`](super)): passing a watermark through the chain,
//! and a source batch cut into records and watermarks by its event times.

use super::{TaskCore, TaskError, TaskResult};
use crate::exec::messages::Element;
use crate::exec::split_watermarks::SplitWatermarks;
use crate::exec::watermark::{BoundedOutOfOrderness, Segment, Watermark, event_time_millis};
use crate::job::spec::EventTimeUnit;
use crate::operators::Firing;
use crate::record::Record;
use std::time::{Duration, Instant};

/// Event time in a source subtask: the field read from each record and the watermark
/// generator ([`BoundedOutOfOrderness`]).
pub struct SourceEventTime {
    /// Top-level field holding the event time.
    pub field: String,
    /// The unit of an integer event time (`eventTime.unit`; `None`: milliseconds, refusing
    /// ambiguous values).
    pub unit: Option<EventTimeUnit>,
    /// The field's path in the manifest, for errors (`spec.job.steps[0].source.eventTime.field`).
    pub field_path: String,
    /// Watermark generation.
    pub generator: BoundedOutOfOrderness,
    /// After this long without records the subtask sends [`Watermark::Idle`].
    pub idle_timeout: Option<Duration>,
    /// The source generates a watermark per split
    /// ([`Source::split_watermarks`](crate::operators::source::Source::split_watermarks));
    /// `generator` and `idle_timeout` are then unused.
    pub per_split: bool,
}

impl TaskCore {
    /// Passes watermark `w` through the chain: each operator sees it after the records the
    /// operators before it emitted on it (fired windows); then the watermark goes out. An
    /// operator's firing goes through the rest of the chain and out part by part
    /// ([`Firing::Partial`]), so the subtask holds one part at a time, and a part waits for
    /// room in the output channels (backpressure) before the next is fired.
    pub(crate) async fn process_watermark(&mut self, w: Watermark) -> TaskResult<()> {
        if let Watermark::Time(t) = w {
            for at in 0..self.chain.len() {
                loop {
                    let mut fired: Vec<Record> = Vec::new();
                    let firing = self.chain[at]
                        .on_watermark(t, &mut fired)
                        .await
                        .map_err(|e| e.context(format!("operator {}", self.chain_ids[at].0)))?;
                    if !fired.is_empty() {
                        self.run_chain_from(at + 1, fired.into()).await?;
                        self.flush(None, false).await?;
                    }
                    if firing == Firing::Complete {
                        break;
                    }
                }
            }
        }
        self.broadcast_in_band(|| Element::Watermark(w)).await
    }

    /// Emits a source batch with its watermarks: sends records (whose event times are
    /// `times`, from [`event_times`]) and watermarks in the order
    /// [`BoundedOutOfOrderness::split_batch`] gives.
    pub(super) async fn process_with_event_time(
        &mut self,
        batch: Vec<Record>,
        times: Vec<i64>,
        event_time: &mut SourceEventTime,
        source_uid: &str,
    ) -> TaskResult<()> {
        let segments = event_time.generator.split_batch(&times);
        self.emit_segments(batch, segments, source_uid).await
    }

    /// As [`TaskCore::process_with_event_time`] for a source with per-split watermarks
    /// ([`SplitWatermarks`]); an empty batch lets time pass (splits going idle).
    pub(super) async fn process_with_split_event_time(
        &mut self,
        batch: Vec<Record>,
        times: Vec<i64>,
        watermarks: &mut SplitWatermarks,
        source_uid: &str,
    ) -> TaskResult<()> {
        let now = Instant::now();
        if batch.is_empty() {
            if let Some(w) = watermarks.on_empty_batch(now) {
                self.process_watermark(w).await?;
            }
            return Ok(());
        }
        let segments = watermarks.split_batch(&times, now);
        self.emit_segments(batch, segments, source_uid).await
    }

    /// Sends `batch` cut into records and watermarks by `segments`, in order.
    async fn emit_segments(&mut self, batch: Vec<Record>, segments: Vec<Segment>, source_uid: &str) -> TaskResult<()> {
        let mut rest = batch;
        for segment in segments {
            match segment {
                Segment::Records(range) => {
                    let tail = rest.split_off(range.len());
                    // Event time and unaligned checkpoints are refused together at validation,
                    // so no send is interruptible here and there is no interrupt to take.
                    if self
                        .process(std::mem::replace(&mut rest, tail).into(), None)
                        .await?
                        .is_some()
                    {
                        return Err(TaskError(format!(
                            "operator {source_uid}: a checkpoint interrupted an event-time source's send; \
                             event time with unaligned checkpoints is not supported"
                        )));
                    }
                }
                Segment::Watermark(t) => self.process_watermark(Watermark::Time(t)).await?,
            }
        }
        Ok(())
    }
}

/// Once a subtask has read event times without a declared unit, the first value has decided
/// it: milliseconds (an ambiguous first value was refused). Later integers are read as
/// milliseconds without the ambiguity check, so a stream that starts at small values (a
/// generator's `id`) does not fail when it passes epoch seconds' range hours later.
pub(super) fn settle_event_time_unit(event_time: &mut SourceEventTime, batch: &[Record]) {
    if event_time.unit.is_none() && !batch.is_empty() {
        event_time.unit = Some(EventTimeUnit::Milliseconds);
    }
}

/// The event time of each record of `batch` (`origin(i)` says where record `i` came from, when
/// the source knows). Errors: a record without a valid event time, naming the operator, the
/// field's path in the manifest, the record and what to do.
pub(super) fn event_times(
    batch: &[Record],
    event_time: &SourceEventTime,
    source_uid: &str,
    origin: &dyn Fn(usize) -> Option<String>,
) -> TaskResult<Vec<i64>> {
    let field = &event_time.field;
    // Without a declared unit the first value decides (see `settle_event_time_unit`), within
    // the first batch too.
    let mut unit = event_time.unit;
    batch
        .iter()
        .enumerate()
        .map(|(i, r)| {
            let value = r.row.get(field).unwrap_or(&crate::record::Datum::Null);
            let read = event_time_millis(value, unit);
            if read.is_ok() {
                unit.get_or_insert(EventTimeUnit::Milliseconds);
            }
            read.map_err(|why| {
                let record = origin(i).unwrap_or_else(|| "a record".to_string());
                let fix = match value {
                    crate::record::Datum::Int(_) => String::new(),
                    _ => "; every record needs an event time: correct or drop that record, or name a field every \
                          record holds as an ISO-8601 time in UTC or epoch milliseconds"
                        .to_string(),
                };
                TaskError(format!(
                    "operator {source_uid}: {}: `{field}` of {record} is not an event time: {why}{fix}",
                    event_time.field_path
                ))
            })
        })
        .collect()
}

#[cfg(test)]
mod settle_tests {
    use super::*;

    #[test]
    fn a_batch_read_without_a_unit_settles_milliseconds_and_an_empty_one_does_not() {
        let mut event_time = SourceEventTime {
            field: "t".into(),
            unit: None,
            field_path: "spec.job.steps[0].source.eventTime.field".into(),
            generator: BoundedOutOfOrderness::new(0),
            idle_timeout: None,
            per_split: false,
        };
        settle_event_time_unit(&mut event_time, &[]);
        assert_eq!(event_time.unit, None);
        let record = Record {
            row: crate::record::Row::from_json(serde_json::json!({ "t": 5 })),
            keyed: None,
        };
        settle_event_time_unit(&mut event_time, std::slice::from_ref(&record));
        assert_eq!(event_time.unit, Some(EventTimeUnit::Milliseconds));
        // Read with the settled unit, a value in epoch seconds' range is milliseconds.
        let late = Record {
            row: crate::record::Row::from_json(serde_json::json!({ "t": 1_500_000_000i64 })),
            keyed: None,
        };
        let times = event_times(std::slice::from_ref(&late), &event_time, "src", &|_| None).unwrap();
        assert_eq!(times, [1_500_000_000]);
    }
}
