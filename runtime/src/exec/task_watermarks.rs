//! Watermarks in a subtask (part of [`task`](super)): passing a watermark through the chain,
//! and a source batch cut into records and watermarks by its event times.

use super::{TaskCore, TaskError, TaskResult};
use crate::exec::messages::Element;
use crate::exec::watermark::{BoundedOutOfOrderness, Segment, Watermark, event_time_millis};
use crate::record::Record;
use std::sync::atomic::Ordering;
use std::time::Duration;

/// Event time in a source subtask: the field read from each record and the watermark
/// generator ([`BoundedOutOfOrderness`]).
pub struct SourceEventTime {
    /// Top-level field holding the event time.
    pub field: String,
    /// Watermark generation.
    pub generator: BoundedOutOfOrderness,
    /// After this long without records the subtask sends [`Watermark::Idle`].
    pub idle_timeout: Option<Duration>,
}

impl TaskCore {
    /// Passes watermark `w` through the chain: each operator sees it after the records the
    /// operators before it emitted on it (fired windows); then records and watermark go out.
    pub(crate) async fn process_watermark(&mut self, w: Watermark) -> TaskResult<()> {
        let mut pending: Vec<Record> = Vec::new();
        for (op, (uid, _)) in self.chain.iter_mut().zip(&self.chain_ids) {
            if !pending.is_empty() {
                let mut next = Vec::with_capacity(pending.len());
                op.process(std::mem::take(&mut pending), &mut next)
                    .await
                    .map_err(|e| e.context(format!("operator {uid}")))?;
                pending = next;
            }
            if let Watermark::Time(t) = w {
                op.on_watermark(t, &mut pending)
                    .await
                    .map_err(|e| e.context(format!("operator {uid}")))?;
            }
        }
        self.metrics
            .records_out
            .fetch_add(pending.len() as u64, Ordering::Relaxed);
        let routed = self.output.route(pending)?;
        self.unsent.extend(routed);
        self.broadcast_in_band(|| Element::Watermark(w)).await
    }

    /// Emits a source batch with its watermarks: reads each record's event time and sends
    /// records and watermarks in the order [`BoundedOutOfOrderness::split_batch`] gives.
    pub(super) async fn process_with_event_time(
        &mut self,
        batch: Vec<Record>,
        event_time: &mut SourceEventTime,
        source_uid: &str,
    ) -> TaskResult<()> {
        let mut times = Vec::with_capacity(batch.len());
        for r in &batch {
            let value = r.row.get(&event_time.field).unwrap_or(&crate::record::Datum::Null);
            times.push(event_time_millis(value).map_err(|e| {
                TaskError(format!(
                    "operator {source_uid}: event-time field `{}` (eventTime.field): {e}",
                    event_time.field
                ))
            })?);
        }
        let mut rest = batch;
        for segment in event_time.generator.split_batch(&times) {
            match segment {
                Segment::Records(range) => {
                    let tail = rest.split_off(range.len());
                    // Event time and unaligned checkpoints are refused together at validation,
                    // so no send is interruptible here and there is no interrupt to take.
                    if self.process(std::mem::replace(&mut rest, tail), None).await?.is_some() {
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
