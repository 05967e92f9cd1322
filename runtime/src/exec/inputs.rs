//! An input subtask's loop: inputs → barrier alignment → chain → output, with unaligned
//! checkpoints.
//!
//! Design (bounded tokio mpsc channels cannot be searched or reordered): every data channel
//! has a companion *priority lane*, one unbounded channel per subtask that carries only
//! barriers. A subtask that snapshots a checkpoint unaligned sends the barrier on its
//! downstream subtasks' priority lanes, then in band. A downstream subtask takes the priority
//! barrier before any queued record, snapshots at once, forwards it the same way, and from
//! then on *records* each input until that input's in-band barrier arrives: those records were
//! sent before the upstream snapshot and are processed after this one, so they are the
//! checkpoint's channel state ([`super::channel_state`]), in exactly one subtask. While
//! recording, the subtask drains its recording inputs into a local queue, up to their in-band
//! barriers, so those arrive without waiting for the (slow) processing of the records ahead of
//! them; it processes the queue in order afterwards. A queued element keeps its channel
//! credit until it is processed ([`super::channel`]), so a drain frees no room for the
//! upstream subtask to refill: what an input holds stays within the channel's capacity plus
//! what one checkpoint sent past it (the unsent rest of the interrupted send and the in-band
//! barrier, [`super::send`]; across workers also the frames on the network path), however
//! closely checkpoints follow each other under sustained backpressure. The acknowledgement,
//! with the channel-state file, goes out when every live input delivered its in-band barrier.

use super::alignment::{Alignment, BarrierAction};
use super::channel::{Credit, DataReceiver};
use super::messages::Element;
use super::send::{Interrupt, Watched, recv_lane, sleep_until};
use super::task::{Flow, SnapshotParts, TaskCore, UploadExtras};
use super::watermark::InputWatermarks;
use crate::checkpoint::Barrier;
use crate::job::CheckpointMode;
use crate::operators::{TaskError, TaskResult};
use crate::record::{BATCH_SIZE, Batch, Record};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::task::Poll;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::UnboundedReceiver;

/// How an input subtask is wired.
pub struct InputSetup {
    /// One receiver per upstream subtask, ordered by stage input then upstream subtask.
    pub inputs: Vec<DataReceiver>,
    /// The guarantee (whether inputs are held for alignment).
    pub mode: CheckpointMode,
    /// This subtask's priority lane (unaligned checkpoints), `None` when aligned.
    pub priority: Option<UnboundedReceiver<Barrier>>,
    /// Uid of the stage's first operator: names the channel state.
    pub channel_uid: String,
    /// Channel state of the restore point for this subtask, replayed before any input.
    pub replay: Vec<Record>,
    /// Start alignment (jobs with event time): take each input's first element, its
    /// upstream subtask's watermark announcement, before a second element of any input, then
    /// announce this subtask's watermark ([`start_alignment`]).
    pub start_alignment: bool,
}

/// Runs an input subtask with aligned checkpoints until shutdown.
pub async fn run_inputs(core: TaskCore, inputs: Vec<DataReceiver>, mode: CheckpointMode) -> TaskResult<()> {
    run_inputs_with(
        core,
        InputSetup {
            inputs,
            mode,
            priority: None,
            channel_uid: String::new(),
            replay: vec![],
            start_alignment: false,
        },
    )
    .await
}

/// A snapshot taken unaligned whose channel state is still being recorded.
struct PendingUnaligned {
    barrier: Barrier,
    parts: SnapshotParts,
    sync_ms: u64,
    alignment: Duration,
    records: Vec<Record>,
    /// The unsent output at the snapshot, by edge ([`UploadExtras::output_channel_state`]).
    unsent: Vec<(String, Vec<Record>)>,
}

/// The loop's state besides the channels.
struct InputState {
    mode: CheckpointMode,
    live: Vec<bool>,
    align: Alignment,
    /// Received, not yet processed: each element with its channel credit.
    queued: Vec<VecDeque<(Element, Credit)>>,
    pending: Option<PendingUnaligned>,
    channel_uid: String,
    /// The subtask's event-time watermark: the minimum over its inputs'.
    watermarks: InputWatermarks,
}

enum Event {
    Control(Option<super::messages::Control>),
    Priority(Barrier),
    Deadline,
    Input(usize, Option<(Element, Credit)>),
    /// Nothing else was ready and an operator has idle work (a lazy restore's key groups).
    Idle,
}

/// Polls the inputs that are not skipped, round-robin from `start`.
fn poll_inputs(
    inputs: &mut [DataReceiver],
    skip: &[bool],
    start: usize,
    cx: &mut std::task::Context<'_>,
) -> Poll<(usize, Option<(Element, Credit)>)> {
    let n = inputs.len();
    for k in 0..n {
        let i = (start + k) % n;
        if skip[i] {
            continue;
        }
        if let Poll::Ready(el) = inputs[i].poll_recv_held(cx) {
            return Poll::Ready((i, el));
        }
    }
    Poll::Pending
}

/// Runs an input subtask until shutdown: replays its channel state, then reads its inputs.
pub async fn run_inputs_with(mut core: TaskCore, setup: InputSetup) -> TaskResult<()> {
    let InputSetup {
        mut inputs,
        mode,
        priority,
        channel_uid,
        replay,
        start_alignment: align_start,
    } = setup;
    let n = inputs.len();
    let mut st = InputState {
        mode,
        live: vec![true; n],
        align: Alignment::with_policy(core.unaligned_after),
        queued: (0..n).map(|_| VecDeque::new()).collect(),
        pending: None,
        channel_uid,
        watermarks: InputWatermarks::new(n),
    };
    if !replay.is_empty() {
        tracing::info!(target: "weir", task = core.index, records = replay.len(), "replaying channel state");
    }
    // The replay is not interruptible: a snapshot taken halfway would hold neither the records
    // not yet replayed (they come from no input, so they would not be recorded as channel state)
    // nor their effect on state, and a restore from it would lose them. Priority barriers wait
    // in the lane, which is attached only once the replay is done.
    for chunk in replay.chunks(BATCH_SIZE) {
        core.metrics.records_in.fetch_add(chunk.len() as u64, Ordering::Relaxed);
        st.process(&mut core, &mut inputs, chunk.to_vec().into()).await?;
    }
    if align_start {
        match start_alignment(&mut core, &mut st, &mut inputs).await? {
            Started::Aligned => {}
            Started::Ended => return core.drain_until_shutdown().await,
            Started::Exit => return Ok(()),
        }
    }
    core.interrupt_lane = priority;
    let mut rr = 0usize;
    loop {
        if let Some(c) = core.deferred.pop_front() {
            if let Flow::Exit = core.on_control(c).await? {
                return Ok(());
            }
            continue;
        }
        if st.align.recording_id().is_some() {
            st.drain(&core, &mut inputs);
        }
        // Between queued elements too, control messages and priority barriers come first.
        if let Ok(c) = core.control.try_recv() {
            if let Flow::Exit = core.on_control(c).await? {
                return Ok(());
            }
            continue;
        }
        if let Some(b) = core.interrupt_lane.as_mut().and_then(|lane| lane.try_recv().ok()) {
            let action = st.align.on_priority_barrier(b, &st.live, Instant::now());
            st.act(&mut core, action).await?;
            continue;
        }
        if st.align.deadline().is_some_and(|d| Instant::now() >= d) {
            let action = st.align.check(&st.live, Instant::now());
            st.act(&mut core, action).await?;
        }
        if let Some(i) = st.next_queued(rr) {
            let (el, credit) = st.queued[i].pop_front().expect("a non-empty queue");
            let ended = st.handle(&mut core, &mut inputs, i, el).await?;
            // Processed: the upstream subtask may send another element.
            drop(credit);
            if ended {
                return core.drain_until_shutdown().await;
            }
            continue;
        }
        let skip: Vec<bool> = (0..n)
            .map(|i| !st.live[i] || st.align.is_held(i, mode) || !st.queued[i].is_empty())
            .collect();
        let deadline = st.align.deadline();
        let idle_work = core.has_idle_work();
        let event = {
            let inputs = &mut inputs;
            let skip = &skip;
            tokio::select! {
                biased;
                c = core.control.recv() => Event::Control(c),
                Some(b) = recv_lane(&mut core.interrupt_lane) => Event::Priority(b),
                _ = sleep_until(deadline) => Event::Deadline,
                r = std::future::poll_fn(|cx| poll_inputs(inputs, skip, rr, cx)) => Event::Input(r.0, r.1),
                // Last (`biased`): only when nothing above is ready.
                () = std::future::ready(()), if idle_work => Event::Idle,
            }
        };
        rr = rr.wrapping_add(1);
        match event {
            Event::Control(None) => return Ok(()),
            Event::Control(Some(c)) => {
                if let Flow::Exit = core.on_control(c).await? {
                    return Ok(());
                }
            }
            Event::Priority(b) => {
                let action = st.align.on_priority_barrier(b, &st.live, Instant::now());
                st.act(&mut core, action).await?;
            }
            Event::Deadline => {
                let action = st.align.check(&st.live, Instant::now());
                st.act(&mut core, action).await?;
            }
            Event::Input(i, Some((el, credit))) => st.intake(&core, i, el, credit),
            Event::Idle => {
                core.on_idle().await?;
                // The idle branch is always ready and the build runs without an await: hand
                // the worker thread back, or sources, the coordinator and the control API on
                // the same runtime wait until every pending key group is built.
                tokio::task::yield_now().await;
            }
            Event::Input(i, None) => {
                return Err(TaskError(format!(
                    "input {i} closed without end-of-stream (upstream lost)"
                )));
            }
        }
    }
}

/// How [`start_alignment`] ended.
#[derive(Debug, PartialEq, Eq)]
enum Started {
    /// Every input announced itself (or ended): read on.
    Aligned,
    /// Every input ended (end-of-stream forwarded): drain until shutdown.
    Ended,
    /// The task was told to exit (or its control channel closed).
    Exit,
}

/// Start alignment, in a job with event time: processes the first element of every input
/// before a second element of any, then sends this subtask's watermark to its outputs.
///
/// Why: a window judges a record late against the minimum of its inputs' watermarks, and an
/// input that has sent nothing holds that minimum at [`NO_WATERMARK`]. Every subtask's first
/// element is its watermark announcement (`task_source.rs`: [`END_OF_TIME`] from a source
/// subtask with nothing to read, [`NO_WATERMARK`] from one that reads; an input subtask sends
/// its watermark once its own inputs announced), so which of those arrived first no longer
/// decides whether a record is late. Before, a source subtask with no split (one file read at
/// parallelism 2) reached the windows a moment after the reading subtask's first records, and
/// after a restore the windows judged the records read in that moment against the restored
/// watermark: records late in a failure-free run were counted into windows fired before
/// (found by a review: 21–29 records per restore at parallelism 3). Flink, which does not
/// restore watermarks, starts every window afresh at `Long.MIN_VALUE` instead.
///
/// No deadlock: an announcement depends only on the subtask's own inputs' announcements, and
/// sources announce before anything else. Priority barriers wait in their lane (attached
/// after this), control messages are handled as they come.
///
/// [`NO_WATERMARK`]: super::watermark::NO_WATERMARK
/// [`END_OF_TIME`]: super::watermark::END_OF_TIME
async fn start_alignment(core: &mut TaskCore, st: &mut InputState, inputs: &mut [DataReceiver]) -> TaskResult<Started> {
    let n = inputs.len();
    let mut announced = vec![false; n];
    let mut rr = 0usize;
    while announced.iter().zip(&st.live).any(|(a, live)| *live && !a) {
        if let Some(c) = core.deferred.pop_front() {
            if let Flow::Exit = core.on_control(c).await? {
                return Ok(Started::Exit);
            }
            continue;
        }
        let skip: Vec<bool> = (0..n).map(|i| announced[i] || !st.live[i]).collect();
        // `Err`: a control message (`None`: the channel closed); `Ok`: an input's element.
        let event = tokio::select! {
            biased;
            c = core.control.recv() => Err(c),
            r = std::future::poll_fn(|cx| poll_inputs(inputs, &skip, rr, cx)) => Ok(r),
        };
        rr = rr.wrapping_add(1);
        match event {
            Err(None) => return Ok(Started::Exit),
            Err(Some(c)) => {
                if let Flow::Exit = core.on_control(c).await? {
                    return Ok(Started::Exit);
                }
            }
            Ok((i, Some((el, credit)))) => {
                announced[i] = true;
                let ended = st.handle(core, inputs, i, el).await?;
                drop(credit);
                if ended {
                    return Ok(Started::Ended);
                }
            }
            Ok((i, None)) => {
                return Err(TaskError(format!(
                    "input {i} closed without end-of-stream (upstream lost)"
                )));
            }
        }
    }
    let current = st.watermarks.current();
    core.broadcast_in_band(|| Element::Watermark(super::watermark::Watermark::Time(current)))
        .await?;
    Ok(Started::Aligned)
}

impl InputState {
    /// The next input (round-robin from `start`) with a queued element that is not held.
    fn next_queued(&self, start: usize) -> Option<usize> {
        let n = self.queued.len();
        (0..n)
            .map(|k| (start + k) % n)
            .find(|&i| !self.queued[i].is_empty() && !self.align.is_held(i, self.mode))
    }

    /// Moves what the recording inputs have in their channels into the local queues, up to
    /// their in-band barrier. The queued elements keep their credits, so the upstream subtask
    /// cannot refill what this frees ([`super::channel`]).
    fn drain(&mut self, core: &TaskCore, inputs: &mut [DataReceiver]) {
        for (i, input) in inputs.iter_mut().enumerate() {
            while self.align.is_recording(i) {
                match input.try_recv_held() {
                    Ok((el, credit)) => self.intake(core, i, el, credit),
                    // Empty, or closed (the closing is found by the next poll).
                    Err(_) => break,
                }
            }
        }
    }

    /// An element received on input `i`: recorded as channel state while input `i` is being
    /// recorded; the in-band barrier that ends the recording is consumed here; everything else
    /// is queued for processing in order.
    fn intake(&mut self, core: &TaskCore, i: usize, el: Element, credit: Credit) {
        if self.align.is_recording(i) {
            match &el {
                Element::Records(batch) => {
                    if let Some(p) = &mut self.pending {
                        p.records.extend(batch.iter().cloned());
                    }
                }
                Element::Columns(batch) => {
                    if let Some(p) = &mut self.pending {
                        p.records.extend((**batch).clone().into_records());
                    }
                }
                Element::Barrier(b) if Some(b.id) == self.align.recording_id() => {
                    if let BarrierAction::ChannelStateComplete(id) =
                        self.align.on_barrier(i, b.clone(), &self.live, Instant::now())
                    {
                        self.finish(core, id);
                    }
                    return;
                }
                _ => {}
            }
        }
        self.queued[i].push_back((el, credit));
    }

    /// Processes element `el` of input `i`; `true` when every input has ended (end-of-stream
    /// forwarded).
    async fn handle(
        &mut self,
        core: &mut TaskCore,
        inputs: &mut [DataReceiver],
        i: usize,
        el: Element,
    ) -> TaskResult<bool> {
        match el {
            Element::Records(batch) => {
                core.metrics.records_in.fetch_add(batch.len() as u64, Ordering::Relaxed);
                self.process(core, inputs, batch.into()).await?;
            }
            Element::Columns(batch) => {
                core.metrics.records_in.fetch_add(batch.len() as u64, Ordering::Relaxed);
                self.process(core, inputs, Batch::Columns(*batch)).await?;
            }
            Element::Watermark(w) => {
                if let Some(forward) = self.watermarks.on_watermark(i, w) {
                    core.process_watermark(forward).await?;
                }
            }
            Element::Barrier(b) => {
                let action = self.align.on_barrier(i, b, &self.live, Instant::now());
                self.act(core, action).await?;
            }
            Element::End => {
                self.live[i] = false;
                let action = self.align.check(&self.live, Instant::now());
                self.act(core, action).await?;
                if self.live.iter().all(|l| !l) {
                    core.broadcast_in_band(|| Element::End).await?;
                    return Ok(true);
                }
            }
        }
        Ok(false)
    }

    /// Runs `batch` through the chain and sends the output. A send interrupted by a priority
    /// barrier or the alignment deadline is handled (an unaligned snapshot may be taken
    /// mid-send); while inputs are recorded as channel state, what arrives on them is taken
    /// in mid-send too, so their in-band barriers complete the checkpoint although the output
    /// is blocked. Then the rest is sent.
    async fn process(&mut self, core: &mut TaskCore, inputs: &mut [DataReceiver], batch: Batch) -> TaskResult<()> {
        core.run_chain(batch).await?;
        loop {
            if self.align.recording_id().is_some() {
                self.drain(core, inputs);
            }
            let recording: Vec<bool> = (0..inputs.len()).map(|i| self.align.is_recording(i)).collect();
            let watched = recording.iter().any(|r| *r).then_some(Watched {
                inputs: &mut *inputs,
                recording,
            });
            let action = match core.flush_watching(self.align.deadline(), true, watched).await? {
                None => return Ok(()),
                Some(Interrupt::Input(i, el, credit)) => {
                    self.intake(core, i, el, credit);
                    continue;
                }
                Some(Interrupt::Barrier(b)) => self.align.on_priority_barrier(b, &self.live, Instant::now()),
                Some(Interrupt::Deadline) => self.align.check(&self.live, Instant::now()),
            };
            self.act(core, action).await?;
        }
    }

    /// Carries out an alignment decision.
    async fn act(&mut self, core: &mut TaskCore, action: BarrierAction) -> TaskResult<()> {
        match action {
            BarrierAction::Wait | BarrierAction::Stale => {}
            BarrierAction::Snapshot(b, waited) => {
                self.abandon_older(b.id);
                core.snapshot_and_forward(b, None, waited).await?;
            }
            BarrierAction::SnapshotUnaligned(b, waited) => {
                tracing::debug!(
                    checkpoint = b.id,
                    task = core.index,
                    since_trigger_ms = super::task::since_trigger_ms(&b),
                    "unaligned snapshot: priority barrier taken"
                );
                self.abandon_older(b.id);
                let (parts, sync_ms) = core.snapshot_chain(&b, None).await?;
                let unsent = core.forward_barrier(&b, true).await?;
                let id = b.id;
                self.pending = Some(PendingUnaligned {
                    barrier: b,
                    parts,
                    sync_ms,
                    alignment: waited,
                    records: vec![],
                    unsent,
                });
                self.record_queued(core, id);
                if let BarrierAction::ChannelStateComplete(id) = self.align.check(&self.live, Instant::now()) {
                    self.finish(core, id);
                }
            }
            BarrierAction::ChannelStateComplete(id) => self.finish(core, id),
        }
        Ok(())
    }

    /// At an unaligned snapshot of checkpoint `id`: what the recording inputs already have in
    /// their local queues was received before their barrier `id` and is not processed yet, so
    /// it is channel state too (up to that barrier, if it is already queued: it ends the
    /// recording of that input and leaves the queue).
    fn record_queued(&mut self, core: &TaskCore, id: u64) {
        for i in 0..self.queued.len() {
            if !self.align.is_recording(i) {
                continue;
            }
            let marker = self.queued[i]
                .iter()
                .position(|(el, _)| matches!(el, Element::Barrier(b) if b.id == id));
            let upto = marker.unwrap_or(self.queued[i].len());
            if let Some(p) = &mut self.pending {
                for (el, _) in self.queued[i].iter().take(upto) {
                    match el {
                        Element::Records(batch) => p.records.extend(batch.iter().cloned()),
                        Element::Columns(batch) => p.records.extend((**batch).clone().into_records()),
                        _ => {}
                    }
                }
            }
            if let Some(k) = marker
                && let Some((Element::Barrier(b), _)) = self.queued[i].remove(k)
                && let BarrierAction::ChannelStateComplete(done) =
                    self.align.on_barrier(i, b, &self.live, Instant::now())
            {
                self.finish(core, done);
            }
        }
    }

    /// Drops an unaligned snapshot older than `id` whose channel state never completed (the
    /// coordinator declines or times it out).
    fn abandon_older(&mut self, id: u64) {
        if let Some(p) = self.pending.take_if(|p| p.barrier.id < id) {
            tracing::debug!(
                checkpoint = p.barrier.id,
                "unaligned snapshot abandoned before its channel state was complete"
            );
        }
    }

    /// Channel state of checkpoint `id` complete: upload it with the snapshot and acknowledge.
    fn finish(&mut self, core: &TaskCore, id: u64) {
        let Some(p) = self.pending.take_if(|p| p.barrier.id == id) else {
            return;
        };
        tracing::debug!(
            checkpoint = id,
            task = core.index,
            since_trigger_ms = super::task::since_trigger_ms(&p.barrier),
            records = p.records.len(),
            "unaligned snapshot: channel state complete (every in-band barrier arrived)"
        );
        core.spawn_upload(
            p.barrier,
            p.parts,
            UploadExtras {
                alignment: p.alignment,
                sync_ms: p.sync_ms,
                channel_state: Some((self.channel_uid.clone(), p.records)),
                output_channel_state: p.unsent,
            },
        );
    }
}

#[cfg(test)]
#[path = "inputs_tests.rs"]
mod tests;
