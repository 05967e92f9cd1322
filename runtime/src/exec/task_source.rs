//! A source subtask's loop (part of [`task`](super)): read a batch, run it through the chain
//! and send it, between control messages (checkpoint triggers, pause, finish), at the
//! source's rate and with its event time.

use super::watermarks::{SourceEventTime, event_times, settle_event_time_unit};
use super::{Flow, Interrupt, TaskCore, since_trigger_ms};
use crate::checkpoint::Barrier;
use crate::checkpoint::read_positions::ReadPositionLog;
use crate::exec::messages::{Control, Element, TaskEvent};
use crate::exec::watermark::{END_OF_TIME, Watermark};
use crate::operators::source::Source;
use crate::operators::{TaskError, TaskResult};
use crate::record::{BATCH_SIZE, Batch, COLUMN_BATCH_SIZE};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

/// Runs a source subtask until shutdown. With a `read_log` (at-most-once), the positions after
/// each batch are recorded there before the batch is emitted, so a restore never reads it again.
pub async fn run_source(
    mut core: TaskCore,
    mut source: Box<dyn Source>,
    source_id: (String, String),
    read_log: Option<ReadPositionLog>,
    mut event_time: Option<SourceEventTime>,
    announce: bool,
) -> TaskResult<()> {
    let mut paused = false;
    let mut last_records = Instant::now();
    let mut idle = false;
    let mut exhausted = false;
    let rate = source.max_records_per_second();
    let batch_max = rate.map_or(BATCH_SIZE, |r| ((r / 20).max(1) as usize).min(BATCH_SIZE));
    // Larger batches where the source makes columns (rows stay at `batch_max`: the default
    // `next_any_batch` caps them), none larger under a rate limit.
    let any_batch_max = if rate.is_some() { batch_max } else { COLUMN_BATCH_SIZE };
    // Columns are read where the job has no event time (`read_batch`); the unthrottled batch
    // of that path fixes the order in which the source reads.
    source.set_read_turn(if event_time.is_none() {
        COLUMN_BATCH_SIZE
    } else {
        BATCH_SIZE
    });
    let started = Instant::now();
    let mut emitted: u64 = 0;
    core.metrics.set_source_pending(source.pending());
    // In a job with event time the first element out is this subtask's watermark, before any
    // barrier or record (the downstream subtasks' start alignment, `inputs.rs`): the end of
    // time when the first read finds nothing (a subtask without splits), else none yet.
    let mut first_read = None;
    if announce {
        let first = read_batch(&mut source, event_time.is_none(), batch_max, any_batch_max, &source_id).await?;
        let watermark = match (&first, &event_time) {
            (None, Some(_)) => END_OF_TIME,
            _ => crate::exec::watermark::NO_WATERMARK,
        };
        core.broadcast_in_band(|| Element::Watermark(Watermark::Time(watermark)))
            .await?;
        first_read = Some(first);
    }
    loop {
        // The first batch, read before the announcement, goes out before any control message:
        // the source's position is already past it, so a snapshot taken first would skip it.
        let c = if first_read.is_some() {
            None
        } else if let Some(c) = core.deferred.pop_front() {
            Some(c)
        } else if paused || exhausted {
            match core.control.recv().await {
                Some(c) => Some(c),
                None => return Ok(()),
            }
        } else if let Some(delay) = rate.and_then(|r| {
            let due = Duration::from_secs_f64(emitted as f64 / r as f64);
            due.checked_sub(started.elapsed()).filter(|d| !d.is_zero())
        }) {
            tokio::select! {
                c = core.control.recv() => match c { Some(c) => Some(c), None => return Ok(()) },
                _ = tokio::time::sleep(delay) => None,
            }
        } else {
            core.control.try_recv().ok()
        };
        if let Some(c) = c {
            if let Control::Complete(id) = &c {
                source.checkpoint_complete(*id).await;
            }
            match core.on_control(c).await? {
                Flow::Continue => {}
                Flow::Exit => return Ok(()),
                Flow::Source(Control::Trigger(barrier)) => {
                    tracing::debug!(
                        checkpoint = barrier.id,
                        task = core.index,
                        since_trigger_ms = since_trigger_ms(&barrier),
                        "source: trigger taken between batches"
                    );
                    paused = paused || barrier.stop;
                    snapshot_source(&mut core, &mut source, &source_id, barrier).await?;
                }
                Flow::Source(Control::Resume) => paused = false,
                Flow::Source(Control::Pause) => paused = true,
                Flow::Source(Control::Finish) => {
                    core.broadcast_in_band(|| Element::End).await?;
                    return core.drain_until_shutdown().await;
                }
                Flow::Source(_) => {}
            }
            continue;
        }
        let next = match first_read.take() {
            Some(first) => first,
            None => read_batch(&mut source, event_time.is_none(), batch_max, any_batch_max, &source_id).await?,
        };
        core.metrics.set_source_pending(source.pending());
        let Some(batch) = next else {
            if event_time.is_some() && !exhausted {
                // A bounded source ends with the watermark of the end of time: every window fires.
                core.process_watermark(Watermark::Time(END_OF_TIME)).await?;
            }
            exhausted = true;
            let _ = core.events.send(TaskEvent::SourceExhausted { task: core.index });
            continue;
        };
        if let Some(log) = &read_log {
            log.record(source.snapshot()?.operator_state)
                .await
                .map_err(|e| TaskError(format!("operator {}: {e}", source_id.0)))?;
        }
        emitted += batch.len() as u64;
        core.metrics.records_in.fetch_add(batch.len() as u64, Ordering::Relaxed);
        match &mut event_time {
            None => {
                let mut interrupt = core.process(batch, None).await?;
                while let Some(Interrupt::Barrier(barrier)) = interrupt {
                    tracing::debug!(
                        checkpoint = barrier.id,
                        task = core.index,
                        since_trigger_ms = since_trigger_ms(&barrier),
                        "source: trigger taken in a blocked send"
                    );
                    // A checkpoint triggered while the output was blocked: the position includes
                    // this batch, whose unsent rest goes out after the in-band barrier and is
                    // stored as channel state of the downstream stage (`forward_barrier`). The
                    // rest is sent before the next batch is read: reading on would add a batch
                    // to what waits here at every checkpoint.
                    snapshot_source(&mut core, &mut source, &source_id, barrier).await?;
                    interrupt = core.flush(None, true).await?;
                }
            }
            Some(et) if et.per_split => {
                // `per_split` is set only when the source turned per-split watermarks on, so it
                // has them; a batch is never dropped silently if that ever breaks.
                let records = batch.into_records();
                let times = event_times(&records, et, &source_id.0, &|i| source.record_origin(i))?;
                settle_event_time_unit(et, &records);
                let batch = records;
                let Some(w) = source.split_watermarks() else {
                    return Err(TaskError(format!(
                        "source `{}`: per-split watermarks are on but the source keeps none",
                        source_id.0
                    )));
                };
                core.process_with_split_event_time(batch, times, w, &source_id.0)
                    .await?;
            }
            Some(et) if batch.is_empty() => {
                if !idle && et.idle_timeout.is_some_and(|t| last_records.elapsed() >= t) {
                    idle = true;
                    core.process_watermark(Watermark::Idle).await?;
                }
            }
            Some(et) => {
                last_records = Instant::now();
                let records = batch.into_records();
                let times = event_times(&records, et, &source_id.0, &|i| source.record_origin(i))?;
                settle_event_time_unit(et, &records);
                core.process_with_event_time(records, times, et, &source_id.0).await?;
                if std::mem::replace(&mut idle, false) {
                    core.process_watermark(Watermark::Time(et.generator.current())).await?;
                }
            }
        }
        // A source chained with every operator of its job never waits on a channel: yield once
        // per batch, or the tasks it spawned (the asynchronous part of a snapshot, which acks
        // the checkpoint) wait in this worker thread's LIFO slot, which other workers cannot
        // steal, until the input is used up.
        tokio::task::yield_now().await;
    }
}

/// The source's next batch: columns where the source makes them and `columns` allows it
/// (no event time), else rows; `None` once it has read everything. Errors name the operator.
async fn read_batch(
    source: &mut Box<dyn Source>,
    columns: bool,
    batch_max: usize,
    any_batch_max: usize,
    source_id: &(String, String),
) -> TaskResult<Option<Batch>> {
    let next = match columns && crate::record::columns::columns_enabled() {
        true => source.next_any_batch(any_batch_max).await,
        false => source.next_rows(batch_max).await.map(|rows| rows.map(Batch::Rows)),
    };
    next.map_err(|e| e.context(format!("operator {}", source_id.0)))
}

/// A source subtask's snapshot at `barrier`: its positions with the chain's state, then the
/// barrier forwarded ([`TaskCore::snapshot_and_forward`]).
async fn snapshot_source(
    core: &mut TaskCore,
    source: &mut Box<dyn Source>,
    source_id: &(String, String),
    barrier: Barrier,
) -> TaskResult<()> {
    let state = source.snapshot()?;
    source.snapshot_taken(barrier.id);
    let id = Some((source_id.0.clone(), source_id.1.clone(), state));
    core.snapshot_and_forward(barrier, id, Duration::ZERO).await
}
