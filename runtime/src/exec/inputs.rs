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
//! recording, the subtask drains its recording inputs into a local queue so the in-band
//! barriers arrive without waiting for the (slow) processing of the records ahead of them; it
//! processes the queue in order afterwards. What it drains is bounded by what the upstream
//! subtask sent before its own snapshot (the channel's capacity plus the one batch it was
//! sending: a blocked send is interrupted by the priority barrier, [`super::send`]; across
//! workers also the frames on credit and in the receiving worker), and by
//! [`MAX_QUEUED_WHILE_RECORDING`]: a queue still holding an earlier checkpoint's drain takes
//! more only as processing makes room, so memory stays bounded when checkpoints follow each
//! other under sustained backpressure. The acknowledgement, with the channel-state file, goes
//! out when every live input delivered its in-band barrier.

use super::alignment::{Alignment, BarrierAction};
use super::messages::Element;
use super::send::{Interrupt, recv_lane, sleep_until};
use super::task::{Flow, SnapshotParts, TaskCore, UploadExtras};
use super::watermark::InputWatermarks;
use crate::checkpoint::Barrier;
use crate::job::CheckpointMode;
use crate::operators::{TaskError, TaskResult};
use crate::record::{BATCH_SIZE, Record};
use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::task::Poll;
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{Receiver, UnboundedReceiver};

/// The most elements an input's local queue takes from its channel while it is recorded as
/// channel state: one channel's worth. Every drain frees the channel, and the upstream subtask
/// fills it again, so without a bound, back-to-back unaligned checkpoints under sustained
/// backpressure would each add up to a channel's capacity to the queue (the bench
/// `unaligned_checkpoints`: end-to-end latency 5.4× the aligned run's and growing, checkpoints
/// up to 11 s). With it, what an input holds stays within two channels' worth (latency 1.4×
/// the aligned run's); a checkpoint whose in-band barrier is further back waits until
/// processing has made room (mean checkpoint duration 3.8 s instead of 2.5 s, the aligned
/// run's 5.9 s).
pub const MAX_QUEUED_WHILE_RECORDING: usize = super::CHANNEL_CAPACITY;

/// How an input subtask is wired.
pub struct InputSetup {
    /// One receiver per upstream subtask, ordered by stage input then upstream subtask.
    pub inputs: Vec<Receiver<Element>>,
    /// The guarantee (whether inputs are held for alignment).
    pub mode: CheckpointMode,
    /// This subtask's priority lane (unaligned checkpoints), `None` when aligned.
    pub priority: Option<UnboundedReceiver<Barrier>>,
    /// Uid of the stage's first operator: names the channel state.
    pub channel_uid: String,
    /// Channel state of the restore point for this subtask, replayed before any input.
    pub replay: Vec<Record>,
}

/// Runs an input subtask with aligned checkpoints until shutdown.
pub async fn run_inputs(core: TaskCore, inputs: Vec<Receiver<Element>>, mode: CheckpointMode) -> TaskResult<()> {
    run_inputs_with(
        core,
        InputSetup {
            inputs,
            mode,
            priority: None,
            channel_uid: String::new(),
            replay: vec![],
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
}

/// The loop's state besides the channels.
struct InputState {
    mode: CheckpointMode,
    live: Vec<bool>,
    align: Alignment,
    queued: Vec<VecDeque<Element>>,
    pending: Option<PendingUnaligned>,
    channel_uid: String,
    /// The subtask's event-time watermark: the minimum over its inputs'.
    watermarks: InputWatermarks,
}

enum Event {
    Control(Option<super::messages::Control>),
    Priority(Barrier),
    Deadline,
    Input(usize, Option<Element>),
}

/// Polls the inputs that are not skipped, round-robin from `start`.
fn poll_inputs(
    inputs: &mut [Receiver<Element>],
    skip: &[bool],
    start: usize,
    cx: &mut std::task::Context<'_>,
) -> Poll<(usize, Option<Element>)> {
    let n = inputs.len();
    for k in 0..n {
        let i = (start + k) % n;
        if skip[i] {
            continue;
        }
        if let Poll::Ready(el) = inputs[i].poll_recv(cx) {
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
        st.process(&mut core, chunk.to_vec()).await?;
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
            let el = st.queued[i].pop_front().expect("a non-empty queue");
            if st.handle(&mut core, i, el).await? {
                return core.drain_until_shutdown().await;
            }
            continue;
        }
        let skip: Vec<bool> = (0..n)
            .map(|i| !st.live[i] || st.align.is_held(i, mode) || !st.queued[i].is_empty())
            .collect();
        let deadline = st.align.deadline();
        let event = {
            let inputs = &mut inputs;
            let skip = &skip;
            tokio::select! {
                biased;
                c = core.control.recv() => Event::Control(c),
                Some(b) = recv_lane(&mut core.interrupt_lane) => Event::Priority(b),
                _ = sleep_until(deadline) => Event::Deadline,
                r = std::future::poll_fn(|cx| poll_inputs(inputs, skip, rr, cx)) => Event::Input(r.0, r.1),
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
            Event::Input(i, Some(el)) => st.intake(&core, i, el),
            Event::Input(i, None) => {
                return Err(TaskError(format!(
                    "input {i} closed without end-of-stream (upstream lost)"
                )));
            }
        }
    }
}

impl InputState {
    /// The next input (round-robin from `start`) with a queued element that is not held.
    fn next_queued(&self, start: usize) -> Option<usize> {
        let n = self.queued.len();
        (0..n)
            .map(|k| (start + k) % n)
            .find(|&i| !self.queued[i].is_empty() && !self.align.is_held(i, self.mode))
    }

    /// Moves what the recording inputs have queued in their channels into the local queues,
    /// up to their in-band barrier, while a local queue holds fewer than
    /// [`MAX_QUEUED_WHILE_RECORDING`] elements.
    fn drain(&mut self, core: &TaskCore, inputs: &mut [Receiver<Element>]) {
        for (i, input) in inputs.iter_mut().enumerate() {
            while self.align.is_recording(i) && self.queued[i].len() < MAX_QUEUED_WHILE_RECORDING {
                match input.try_recv() {
                    Ok(el) => self.intake(core, i, el),
                    // Empty, or closed (the closing is found by the next poll).
                    Err(_) => break,
                }
            }
        }
    }

    /// An element received on input `i`: recorded as channel state while input `i` is being
    /// recorded; the in-band barrier that ends the recording is consumed here; everything else
    /// is queued for processing in order.
    fn intake(&mut self, core: &TaskCore, i: usize, el: Element) {
        if self.align.is_recording(i) {
            match &el {
                Element::Records(batch) => {
                    if let Some(p) = &mut self.pending {
                        p.records.extend(batch.iter().cloned());
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
        self.queued[i].push_back(el);
    }

    /// Processes element `el` of input `i`; `true` when every input has ended (end-of-stream
    /// forwarded).
    async fn handle(&mut self, core: &mut TaskCore, i: usize, el: Element) -> TaskResult<bool> {
        match el {
            Element::Records(batch) => {
                core.metrics.records_in.fetch_add(batch.len() as u64, Ordering::Relaxed);
                self.process(core, batch).await?;
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

    /// Runs `batch` through the chain; a send interrupted by a priority barrier or the alignment
    /// deadline is handled (an unaligned snapshot may be taken mid-send), then the rest is sent.
    async fn process(&mut self, core: &mut TaskCore, batch: Vec<Record>) -> TaskResult<()> {
        let mut interrupt = core.process(batch, self.align.deadline()).await?;
        while let Some(x) = interrupt {
            let action = match x {
                Interrupt::Barrier(b) => self.align.on_priority_barrier(b, &self.live, Instant::now()),
                Interrupt::Deadline => self.align.check(&self.live, Instant::now()),
            };
            self.act(core, action).await?;
            interrupt = core.flush(self.align.deadline(), true).await?;
        }
        Ok(())
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
                self.abandon_older(b.id);
                let (parts, sync_ms) = core.snapshot_chain(&b, None).await?;
                core.forward_barrier(&b, true).await?;
                let id = b.id;
                self.pending = Some(PendingUnaligned {
                    barrier: b,
                    parts,
                    sync_ms,
                    alignment: waited,
                    records: vec![],
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
                .position(|el| matches!(el, Element::Barrier(b) if b.id == id));
            let upto = marker.unwrap_or(self.queued[i].len());
            if let Some(p) = &mut self.pending {
                for el in self.queued[i].iter().take(upto) {
                    if let Element::Records(batch) = el {
                        p.records.extend(batch.iter().cloned());
                    }
                }
            }
            if let Some(k) = marker
                && let Some(Element::Barrier(b)) = self.queued[i].remove(k)
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
        core.spawn_upload(
            p.barrier,
            p.parts,
            UploadExtras {
                alignment: p.alignment,
                sync_ms: p.sync_ms,
                channel_state: Some((self.channel_uid.clone(), p.records)),
            },
        );
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::exec::messages::{Control, TaskEvent};
    use crate::exec::task::Output;
    use crate::record::{Key, KeyedBy};
    use crate::storage::LocalStore;
    use std::sync::Arc;

    fn word(w: &str) -> Record {
        Record {
            row: crate::record::Row::from_json(serde_json::json!({ "word": w })),
            keyed: Some(KeyedBy::new(Key::Str(w.into()), 128)),
        }
    }

    /// Two inputs into a keyed count with unaligned checkpoints. The priority barrier of
    /// checkpoint 1 is there before anything: the snapshot holds no word, and every record
    /// queued ahead of its input's in-band barrier is channel state; "after" follows the
    /// barrier on input 0 and is in neither.
    #[tokio::test]
    async fn a_priority_barrier_snapshots_at_once_and_records_the_overtaken_records() {
        let dir = tempfile::tempdir().unwrap();
        let store: crate::storage::Store = Arc::new(LocalStore::new(dir.path()).unwrap());
        let (core, ctl_tx, mut ev_rx, barrier) =
            super::super::task::tests::count_core(&store, Output::None, Some(Duration::ZERO));
        let (tx0, rx0) = tokio::sync::mpsc::channel(8);
        let (tx1, rx1) = tokio::sync::mpsc::channel(8);
        let (lane_tx, lane_rx) = tokio::sync::mpsc::unbounded_channel();
        lane_tx.send(barrier.clone()).unwrap();
        tx0.send(Element::Records(vec![word("a0")])).await.unwrap();
        tx0.send(Element::Barrier(barrier.clone())).await.unwrap();
        tx0.send(Element::Records(vec![word("after")])).await.unwrap();
        tx1.send(Element::Records(vec![word("b0"), word("b1")])).await.unwrap();
        tx1.send(Element::Barrier(barrier)).await.unwrap();
        let setup = InputSetup {
            inputs: vec![rx0, rx1],
            mode: CheckpointMode::ExactlyOnce,
            priority: Some(lane_rx),
            channel_uid: "counts".into(),
            replay: vec![],
        };
        let task = tokio::spawn(run_inputs_with(core, setup));
        let ack = match ev_rx.recv().await.unwrap() {
            TaskEvent::Ack(a) => a,
            other => panic!("unexpected {other:?}"),
        };
        ctl_tx.send(Control::Shutdown).unwrap();
        task.await.unwrap().unwrap();
        assert!(ack.unaligned);
        let state = &ack.operators[0].handle;
        assert_eq!(state.entries, 0, "snapshot taken before any record was processed");
        let channel = ack.channel_state.expect("channel state");
        assert_eq!(channel.handle.entries, 3);
        let bytes = store.get(&format!("chk-1/{}", channel.handle.file)).await.unwrap();
        let file = crate::state::snapshot::decode_state_file("f", &bytes).unwrap();
        let mut words: Vec<String> = file
            .key_groups
            .iter()
            .flat_map(|b| crate::cluster::record_codec::decode(&b.data).unwrap())
            .map(|r| r.row.get("word").unwrap().to_string())
            .collect();
        words.sort();
        assert_eq!(words, ["\"a0\"", "\"b0\"", "\"b1\""].map(String::from));
    }

    /// A restore replays 1,500 records of channel state (two chunks of at most `BATCH_SIZE`)
    /// into a count whose output channel is full, while the priority barrier of checkpoint 1
    /// already waits in the lane. The replay must finish before the snapshot: a snapshot taken
    /// when the first chunk's send blocked would hold 1,024 keys, and the 476 records not yet
    /// replayed would be in neither the state nor the channel state (lost by a restore from it).
    #[tokio::test]
    async fn a_priority_barrier_waits_for_the_channel_state_replay() {
        let (out_tx, mut out_rx) = tokio::sync::mpsc::channel(1);
        out_tx.send(Element::Records(vec![])).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let store: crate::storage::Store = Arc::new(LocalStore::new(dir.path()).unwrap());
        let (core, ctl_tx, mut ev_rx, barrier) =
            super::super::task::tests::count_core(&store, Output::Forward(out_tx), Some(Duration::ZERO));
        let (tx0, rx0) = tokio::sync::mpsc::channel(8);
        let (lane_tx, lane_rx) = tokio::sync::mpsc::unbounded_channel();
        lane_tx.send(barrier.clone()).unwrap();
        tx0.send(Element::Barrier(barrier)).await.unwrap();
        let replay: Vec<Record> = (0..1500).map(|i| word(&format!("w{i}"))).collect();
        let setup = InputSetup {
            inputs: vec![rx0],
            mode: CheckpointMode::ExactlyOnce,
            priority: Some(lane_rx),
            channel_uid: "counts".into(),
            replay,
        };
        let task = tokio::spawn(run_inputs_with(core, setup));
        // The consumer downstream starts late, so the replay's first send finds the channel full.
        let drain = tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(200)).await;
            while out_rx.recv().await.is_some() {}
        });
        let ack = match ev_rx.recv().await.unwrap() {
            TaskEvent::Ack(a) => a,
            other => panic!("unexpected {other:?}"),
        };
        ctl_tx.send(Control::Shutdown).unwrap();
        task.await.unwrap().unwrap();
        drain.abort();
        assert_eq!(ack.checkpoint_id, 1);
        assert_eq!(
            ack.operators[0].handle.entries, 1500,
            "the snapshot holds every replayed record's key"
        );
        assert_eq!(ack.channel_state.map_or(0, |c| c.handle.entries), 0);
    }

    /// Processing is blocked (the output channel is full) while an unaligned checkpoint records
    /// an input holding 40 batches before its in-band barrier: the subtask takes at most
    /// [`MAX_QUEUED_WHILE_RECORDING`] of them into its local queue, so the upstream cannot
    /// refill the channel beyond it. Once the output drains, every batch ahead of the barrier
    /// is in the channel state and none in the snapshot.
    #[tokio::test]
    async fn a_recorded_input_takes_at_most_one_channel_into_its_queue() {
        // Room for the forwarded barrier only: the first processed batch blocks.
        let (out_tx, mut out_rx) = tokio::sync::mpsc::channel(2);
        out_tx.send(Element::Records(vec![])).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let store: crate::storage::Store = Arc::new(LocalStore::new(dir.path()).unwrap());
        let (core, ctl_tx, mut ev_rx, barrier) =
            super::super::task::tests::count_core(&store, Output::Forward(out_tx), Some(Duration::ZERO));
        let (tx0, rx0) = tokio::sync::mpsc::channel(64);
        let (lane_tx, lane_rx) = tokio::sync::mpsc::unbounded_channel();
        lane_tx.send(barrier.clone()).unwrap();
        let batches = 40;
        for i in 0..batches {
            tx0.send(Element::Records(vec![word(&format!("w{i}"))])).await.unwrap();
        }
        tx0.send(Element::Barrier(barrier)).await.unwrap();
        let setup = InputSetup {
            inputs: vec![rx0],
            mode: CheckpointMode::ExactlyOnce,
            priority: Some(lane_rx),
            channel_uid: "counts".into(),
            replay: vec![],
        };
        let task = tokio::spawn(run_inputs_with(core, setup));
        // A current-thread runtime: yielding lets the subtask run until its send blocks.
        for _ in 0..200 {
            tokio::task::yield_now().await;
        }
        let in_channel = 64 - tx0.capacity();
        assert_eq!(
            in_channel,
            batches + 1 - MAX_QUEUED_WHILE_RECORDING,
            "drained exactly MAX_QUEUED_WHILE_RECORDING batches"
        );
        let drain = tokio::spawn(async move { while out_rx.recv().await.is_some() {} });
        let ack = match ev_rx.recv().await.unwrap() {
            TaskEvent::Ack(a) => a,
            other => panic!("unexpected {other:?}"),
        };
        ctl_tx.send(Control::Shutdown).unwrap();
        task.await.unwrap().unwrap();
        drain.abort();
        assert!(ack.unaligned);
        assert_eq!(ack.operators[0].handle.entries, 0, "snapshot before any batch");
        assert_eq!(ack.channel_state.map_or(0, |c| c.handle.entries), batches as u64);
    }
}
