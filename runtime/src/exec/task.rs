//! Subtask execution: a source subtask (source → chain → output) or an input subtask
//! (inputs → barrier alignment → chain → output). Chained operators run in one tokio task;
//! records cross subtasks through bounded channels, so a slow consumer backpressures its
//! producers.

pub use super::inputs::{InputSetup, run_inputs, run_inputs_with};
use super::messages::{Control, Element, TaskEvent};
pub use super::send::Interrupt;
pub use watermarks::SourceEventTime;

#[path = "task_source.rs"]
mod source_loop;
#[path = "task_watermarks.rs"]
mod watermarks;
pub use super::outputs::{Output, OutputEdge, Outputs};
use crate::checkpoint::state_upload::upload_operator_state;
use crate::checkpoint::{Ack, Barrier};
use crate::operators::source::SourcePending;
use crate::operators::{EncodedState, SnapshotEncoder, StreamOperator, TaskError, TaskResult};
use crate::record::{Batch, Record};
use crate::state::backend::KeyedStateSize;
pub use source_loop::run_source;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

/// Counters of one subtask, read by the status endpoint and metrics.
#[derive(Debug, Default)]
pub struct TaskMetrics {
    /// Records received (for a source: read).
    pub records_in: AtomicU64,
    /// Records emitted by the chain's last operator (0 when it is a sink).
    pub records_out: AtomicU64,
    /// Nanoseconds spent waiting for space in output channels.
    pub backpressured_ns: AtomicU64,
    /// Nanoseconds spent aligning barriers (sum over checkpoints).
    pub alignment_ns: AtomicU64,
    /// Batches queued in this subtask's output channels, sampled after each send.
    pub output_buffers_used: AtomicU64,
    /// A source subtask's records not yet read, plus one (0: not reported).
    pending_records_plus_one: AtomicU64,
    /// A source subtask's bytes not yet read, plus one (0: not reported).
    pending_bytes_plus_one: AtomicU64,
    /// Records a window operator of this subtask dropped as late (beyond allowed lateness).
    pub late_records_dropped: Arc<AtomicU64>,
    /// The keyed state of the chain's stateful operators, `(uid, size)`, refreshed about once
    /// a second and at each barrier ([`TaskCore::refresh_keyed_state`]).
    keyed_state: std::sync::Mutex<Vec<(String, KeyedStateSize)>>,
    /// When `keyed_state` was last refreshed, ms since the Unix epoch (0: never).
    keyed_state_refreshed_ms: AtomicU64,
}

/// How often a subtask refreshes [`TaskMetrics::keyed_state`] while it processes records, ms.
pub const KEYED_STATE_REFRESH_MS: u64 = 1_000;

impl TaskMetrics {
    /// Records what a source subtask has not read yet (`None`: unknown, reported as absent).
    pub fn set_source_pending(&self, pending: Option<SourcePending>) {
        let (records, bytes) = match pending {
            Some(SourcePending::Records(n)) => (n.saturating_add(1), 0),
            Some(SourcePending::Bytes(n)) => (0, n.saturating_add(1)),
            None => (0, 0),
        };
        self.pending_records_plus_one.store(records, Ordering::Relaxed);
        self.pending_bytes_plus_one.store(bytes, Ordering::Relaxed);
    }

    /// The keyed state of the subtask's stateful operators at the last refresh, `(uid, size)`
    /// (empty before the first, and for a chain without keyed state).
    pub fn keyed_state(&self) -> Vec<(String, KeyedStateSize)> {
        self.keyed_state.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Records the keyed state of the subtask's stateful operators, refreshed at `now_ms`.
    pub fn set_keyed_state(&self, sizes: Vec<(String, KeyedStateSize)>, now_ms: u64) {
        *self.keyed_state.lock().unwrap_or_else(|e| e.into_inner()) = sizes;
        self.keyed_state_refreshed_ms.store(now_ms, Ordering::Relaxed);
    }

    /// What the source subtask last reported it has not read (`None` for other subtasks and
    /// sources that cannot know).
    pub fn source_pending(&self) -> Option<SourcePending> {
        let records = self.pending_records_plus_one.load(Ordering::Relaxed);
        let bytes = self.pending_bytes_plus_one.load(Ordering::Relaxed);
        match (records, bytes) {
            (0, 0) => None,
            (0, b) => Some(SourcePending::Bytes(b - 1)),
            (r, _) => Some(SourcePending::Records(r - 1)),
        }
    }
}

/// What every subtask has: identity, chain, output, and its links to the coordinator.
pub struct TaskCore {
    /// Global task index.
    pub index: usize,
    /// Subtask index within its stage.
    pub subtask: u32,
    /// The subtask as messages name it: `counts -> out (1/2)`, `on worker w1` in a worker.
    pub label: String,
    /// Parallelism of the stage.
    pub parallelism: u32,
    /// Chained operators after the source/inputs.
    pub chain: Vec<Box<dyn StreamOperator>>,
    /// `(uid, kind)` of each chained operator, in order.
    pub chain_ids: Vec<(String, String)>,
    /// Output: the edges to the downstream stages.
    pub output: Outputs,
    /// From the coordinator.
    pub control: UnboundedReceiver<Control>,
    /// To the coordinator.
    pub events: UnboundedSender<TaskEvent>,
    /// Counters.
    pub metrics: Arc<TaskMetrics>,
    /// Priority lanes of the downstream subtasks (unaligned checkpoints): a barrier sent there
    /// overtakes the records queued in the data channels. Empty when checkpoints are aligned.
    pub priority_outputs: Vec<UnboundedSender<Barrier>>,
    /// When checkpoints switch to unaligned ([`crate::job::Job::unaligned_after`]).
    pub unaligned_after: Option<Duration>,
    /// Output not sent yet, `(channel index, element)` in order: what an interrupted send left.
    pub unsent: std::collections::VecDeque<(usize, Element)>,
    /// Control messages that arrived while a send was blocked, handled before new ones.
    pub deferred: std::collections::VecDeque<Control>,
    /// The priority lane (input subtasks with unaligned checkpoints): a barrier there
    /// interrupts a blocked send.
    pub interrupt_lane: Option<UnboundedReceiver<Barrier>>,
    /// Sources with unaligned checkpoints: a checkpoint trigger interrupts a blocked send.
    pub interruptible_by_trigger: bool,
}

/// Milliseconds since the coordinator triggered `barrier` (for the checkpoint timeline in the
/// debug log: trigger → source → priority barrier → channel state → acknowledgement).
pub(super) fn since_trigger_ms(barrier: &Barrier) -> u64 {
    crate::checkpoint::now_ms().saturating_sub(barrier.triggered_at_ms)
}

/// A snapshot of the chain, ready to upload: `(uid, kind, encoder)` per operator with state.
pub type SnapshotParts = Vec<(String, String, SnapshotEncoder)>;

/// What the asynchronous part of a snapshot uploads besides the operator state.
pub struct UploadExtras {
    /// Barrier alignment before the snapshot.
    pub alignment: Duration,
    /// Synchronous part, ms.
    pub sync_ms: u64,
    /// Unaligned: the channel state, `(uid of the stage's first operator, records)`.
    pub channel_state: Option<(String, Vec<Record>)>,
    /// The output this subtask had not sent when it snapshotted with unaligned checkpoints
    /// (the rest of an interrupted send), which goes out after the barrier: channel state of
    /// the downstream stage of each edge, `(uid of its first operator, records)`
    /// ([`OutputEdge::channel_uid`]), by key group for a keyed exchange. Empty otherwise.
    pub output_channel_state: Vec<(String, Vec<Record>)>,
}

impl TaskCore {
    /// Runs `batch` through the chain and sends the output. With unaligned checkpoints a
    /// blocked send is interruptible ([`TaskCore::flush`]): then the rest of the output stays
    /// in [`TaskCore::unsent`] and the interrupt is returned.
    pub(super) async fn process(&mut self, batch: Batch, deadline: Option<Instant>) -> TaskResult<Option<Interrupt>> {
        self.run_chain(batch).await?;
        self.flush(deadline, true).await
    }

    /// Runs `batch` through the chain and queues the output in [`TaskCore::unsent`] (sent by
    /// [`TaskCore::flush`]).
    pub(super) async fn run_chain(&mut self, batch: Batch) -> TaskResult<()> {
        self.run_chain_from(0, batch).await
    }

    /// As [`TaskCore::run_chain`] from the chain's operator `first` on (records an operator
    /// before it emitted; `first` = the chain's length: straight to the output).
    pub(super) async fn run_chain_from(&mut self, first: usize, batch: Batch) -> TaskResult<()> {
        let mut cur = batch;
        for (op, (uid, _)) in self.chain.iter_mut().zip(&self.chain_ids).skip(first) {
            cur = match cur {
                Batch::Rows(rows) => {
                    let mut next = Vec::with_capacity(rows.len());
                    op.process(rows, &mut next).await.map(|()| Batch::Rows(next))
                }
                // An operator that does not take columns turns them into rows.
                Batch::Columns(columns) => op.process_columns(columns).await,
            }
            .map_err(|e| e.context(format!("operator {uid}")))?;
        }
        self.metrics.records_out.fetch_add(cur.len() as u64, Ordering::Relaxed);
        self.refresh_keyed_state(false);
        let late = self.take_late_output();
        let routed = self.output.route(cur, late).await?;
        self.unsent.extend(routed);
        Ok(())
    }

    /// The late records the chain's last operator sent to its side output (a window with
    /// `lateRecords: sideOutput`, which always ends its stage: [`super::plan`]).
    pub(super) fn take_late_output(&mut self) -> Vec<Record> {
        self.chain
            .last_mut()
            .map(|op| op.take_late_output())
            .unwrap_or_default()
    }

    /// Refreshes [`TaskMetrics::keyed_state`] from the chain's operators
    /// ([`StreamOperator::keyed_state_size`]): with `force`, now; else when the last refresh
    /// is [`KEYED_STATE_REFRESH_MS`] old (called after every batch: one clock read).
    pub(super) fn refresh_keyed_state(&self, force: bool) {
        let now_ms = crate::checkpoint::now_ms();
        let last = self.metrics.keyed_state_refreshed_ms.load(Ordering::Relaxed);
        if !force && now_ms.saturating_sub(last) < KEYED_STATE_REFRESH_MS {
            return;
        }
        let sizes = self
            .chain
            .iter()
            .zip(&self.chain_ids)
            .filter_map(|(op, (uid, _))| op.keyed_state_size().map(|size| (uid.clone(), size)))
            .collect();
        self.metrics.set_keyed_state(sizes, now_ms);
    }

    /// Whether an operator of the chain has idle work ([`StreamOperator::has_idle_work`]).
    pub(super) fn has_idle_work(&self) -> bool {
        self.chain.iter().any(|op| op.has_idle_work())
    }

    /// Runs one step of the chain's idle work ([`StreamOperator::on_idle`]).
    pub(super) async fn on_idle(&mut self) -> TaskResult<()> {
        for (op, (uid, _)) in self.chain.iter_mut().zip(&self.chain_ids) {
            if op.has_idle_work() {
                op.on_idle().await.map_err(|e| e.context(format!("operator {uid}")))?;
            }
        }
        Ok(())
    }

    /// Snapshots the chain (plus an optional source state) at `barrier`, forwards the barrier,
    /// and uploads asynchronously; the upload task acknowledges to the coordinator. With
    /// unaligned checkpoints, a checkpoint barrier goes on the priority lanes too, so it
    /// overtakes the records queued downstream (with an alignment timeout, as an announcement).
    pub(super) async fn snapshot_and_forward(
        &mut self,
        barrier: Barrier,
        source: Option<(String, String, EncodedState)>,
        alignment: Duration,
    ) -> TaskResult<()> {
        let priority = barrier.kind == crate::control::api::SnapshotKind::Checkpoint && self.unaligned_after.is_some();
        let (parts, sync_ms) = self.snapshot_chain(&barrier, source).await?;
        let output_channel_state = self.forward_barrier(&barrier, priority).await?;
        self.spawn_upload(
            barrier,
            parts,
            UploadExtras {
                alignment,
                sync_ms,
                channel_state: None,
                output_channel_state,
            },
        );
        Ok(())
    }

    /// The synchronous part of a snapshot: every chained operator's encoder (and the source's
    /// state), with its duration in ms.
    pub(super) async fn snapshot_chain(
        &mut self,
        barrier: &Barrier,
        source: Option<(String, String, EncodedState)>,
    ) -> TaskResult<(SnapshotParts, u64)> {
        let t = Instant::now();
        let mut parts: SnapshotParts = Vec::new();
        if let Some((uid, kind, state)) = source {
            parts.push((uid, kind, Box::new(move || Ok(state))));
        }
        for (op, (uid, kind)) in self.chain.iter_mut().zip(&self.chain_ids) {
            if let Some(enc) = op
                .snapshot(barrier)
                .await
                .map_err(|e| e.context(format!("operator {uid}")))?
            {
                parts.push((uid.clone(), kind.clone(), enc));
            }
        }
        // After the snapshots: the state is as of the barrier, and a disk store still being
        // created has been handed its entries (`Aggregate::snapshot`), so it reports its bytes.
        self.refresh_keyed_state(true);
        Ok((parts, t.elapsed().as_millis() as u64))
    }

    /// Forwards `barrier` to every downstream subtask: first on the priority lanes when
    /// `priority` (unaligned: it overtakes the queued records), then in band, where it marks
    /// the end of this channel's part of the checkpoint; returns the output channel state.
    ///
    /// In band, a barrier takes no credit ([`super::channel`]), so it never waits for the
    /// downstream subtask to process anything. Without `priority` the unsent output (none
    /// outside unaligned checkpoints) goes first. With it, the unsent rest of an interrupted
    /// send stays behind the barrier, as Flink's output buffers do: the downstream subtask
    /// processes it after its snapshot and does not record it, so it is returned here, to be
    /// stored as channel state of the downstream stage ([`UploadExtras::output_channel_state`]).
    pub(super) async fn forward_barrier(
        &mut self,
        barrier: &Barrier,
        priority: bool,
    ) -> TaskResult<Vec<(String, Vec<Record>)>> {
        if priority {
            for lane in &self.priority_outputs {
                // A downstream subtask that is gone fails through its data channel.
                let _ = lane.send(barrier.clone());
            }
        }
        if !priority || barrier.is_final {
            // The final checkpoint is aligned: no later checkpoint would commit the output of
            // channel state, so what precedes it is sent (and processed) before it.
            self.broadcast_in_band(|| Element::Barrier(barrier.clone())).await?;
            return Ok(vec![]);
        }
        Outputs::broadcast(
            self.output.senders(),
            || Element::Barrier(barrier.clone()),
            &self.metrics,
        )
        .await?;
        Ok(self.output.unsent_by_edge(self.unsent.iter()))
    }

    /// The asynchronous part: encodes and uploads `parts` (and the channel state), then
    /// acknowledges `barrier` to the coordinator, or declines it on failure: an error, or a
    /// panic (`the asynchronous part of checkpoint 3 of subtask counts (1/2) panicked: ...`),
    /// as Flink declines a checkpoint whose asynchronous part failed. Uncaught, a panic here
    /// ended only this tokio task: the checkpoint neither completed nor failed until its timeout.
    pub(super) fn spawn_upload(&self, barrier: Barrier, parts: SnapshotParts, extras: UploadExtras) {
        let UploadExtras {
            alignment,
            sync_ms,
            channel_state,
            output_channel_state,
        } = extras;
        self.metrics
            .alignment_ns
            .fetch_add(alignment.as_nanos() as u64, Ordering::Relaxed);
        let (task, subtask, parallelism, events) = (self.index, self.subtask, self.parallelism, self.events.clone());
        let label = self.label.clone();
        tokio::spawn(async move {
            let t = Instant::now();
            if upload_hangs(barrier.id) {
                return std::future::pending::<()>().await;
            }
            let unaligned = channel_state.is_some() || !output_channel_state.is_empty();
            let what = || format!("the asynchronous part of checkpoint {} of subtask {label}", barrier.id);
            let uploaded = super::panics::catch_panic(what, async {
                super::panics::async_snapshot_panic_failpoint(barrier.id);
                if upload_fails(barrier.id) {
                    return Err(TaskError(format!(
                        "failpoint fail-upload:{}: the checkpoint storage refused the write",
                        barrier.id
                    )));
                }
                let operators = upload_operator_state(&barrier, subtask, parallelism, parts).await?;
                let channel_state = match channel_state {
                    Some((uid, records)) => {
                        let name = super::channel_state::file_name(&uid, subtask);
                        let c = super::channel_state::upload(&barrier, subtask, parallelism, uid, name, records);
                        Some(c.await?)
                    }
                    None => None,
                };
                // One file per edge: each names its downstream stage, so they are distinct.
                let mut uploaded_outputs = Vec::with_capacity(output_channel_state.len());
                for (uid, records) in output_channel_state {
                    let name = super::channel_state::output_file_name(&uid, task);
                    let c = super::channel_state::upload(&barrier, subtask, parallelism, uid, name, records);
                    uploaded_outputs.push(c.await?);
                }
                let output_channel_state = uploaded_outputs;
                if barrier.kind == crate::control::api::SnapshotKind::Savepoint && savepoint_fails_after_upload() {
                    return Err(TaskError(format!(
                        "failpoint fail-savepoint-after-upload: savepoint {} declined after its files were written",
                        barrier.id
                    )));
                }
                Ok::<_, TaskError>((operators, channel_state, output_channel_state))
            })
            .await
            .unwrap_or_else(|panicked| Err(TaskError(panicked)));
            tracing::debug!(
                checkpoint = barrier.id,
                task,
                since_trigger_ms = since_trigger_ms(&barrier),
                "snapshot uploaded: acknowledging"
            );
            match uploaded {
                Ok((operators, channel_state, output_channel_state)) => {
                    let _ = events.send(TaskEvent::Ack(Ack {
                        checkpoint_id: barrier.id,
                        task,
                        operators,
                        sync_ms,
                        async_ms: t.elapsed().as_millis() as u64,
                        alignment_ms: alignment.as_millis() as u64,
                        unaligned,
                        channel_state: channel_state.map(Box::new),
                        output_channel_state,
                    }));
                }
                Err(e) => {
                    let _ = events.send(TaskEvent::Declined {
                        checkpoint_id: barrier.id,
                        task,
                        reason: e.0,
                    });
                }
            }
        });
    }

    pub(super) async fn on_control(&mut self, c: Control) -> TaskResult<Flow> {
        match c {
            Control::Complete(id) => {
                for (op, (uid, _)) in self.chain.iter_mut().zip(&self.chain_ids) {
                    op.notify_complete(id)
                        .await
                        .map_err(|e| e.context(format!("operator {uid}: commit of checkpoint {id}")))?;
                }
                Ok(Flow::Continue)
            }
            Control::Shutdown => Ok(Flow::Exit),
            other => Ok(Flow::Source(other)),
        }
    }

    /// After end-of-stream: keep committing on `Complete` until `Shutdown`.
    pub(super) async fn drain_until_shutdown(&mut self) -> TaskResult<()> {
        let _ = self.events.send(TaskEvent::Ended { task: self.index });
        while let Some(c) = self.control.recv().await {
            if let Flow::Exit = self.on_control(c).await? {
                return Ok(());
            }
        }
        Ok(())
    }
}

pub(super) enum Flow {
    Continue,
    Exit,
    Source(Control),
}

/// Test hook: `WEIR_FAILPOINT=hang-upload:<id>` makes every subtask's upload of snapshot `id`
/// hang for ever, as on storage that stopped answering. Unset in production.
fn upload_hangs(id: u64) -> bool {
    crate::failpoint::is_set(&format!("hang-upload:{id}"))
}

/// Test hook: `WEIR_FAILPOINT=fail-savepoint-after-upload` makes every subtask decline every
/// savepoint after writing its files, as a savepoint failing part-way leaves them. Unset in
/// production.
fn savepoint_fails_after_upload() -> bool {
    crate::failpoint::is_set("fail-savepoint-after-upload")
}

/// Test hook: `WEIR_FAILPOINT=fail-upload:<id>` makes every subtask's upload of snapshot `id`
/// fail, as on storage that refuses a write mid-run (the subtask declines the checkpoint).
/// Unset in production.
fn upload_fails(id: u64) -> bool {
    crate::failpoint::is_set(&format!("fail-upload:{id}"))
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::checkpoint::SnapshotTarget;
    use crate::control::api::SnapshotKind;
    use crate::job::CheckpointMode;
    use crate::job::validate::AggregateFn;
    use crate::operators::aggregate::Aggregate;
    use crate::record::{Key, KeyedBy};
    use crate::state::key_group::key_group_range;
    use crate::storage::LocalStore;
    use serde_json::json;

    /// Test support: a keyed word count subtask (key groups 0..128 of one subtask) with output
    /// `output` and unaligned policy `unaligned_after`, and barrier 1 of a checkpoint into
    /// `store` under `chk-1`. Returns the core, its control sender, its event receiver and the
    /// barrier.
    pub(in crate::exec) fn count_core(
        store: &crate::storage::Store,
        output: Output,
        unaligned_after: Option<Duration>,
    ) -> (
        TaskCore,
        tokio::sync::mpsc::UnboundedSender<Control>,
        tokio::sync::mpsc::UnboundedReceiver<TaskEvent>,
        Barrier,
    ) {
        let barrier = Barrier {
            id: 1,
            kind: SnapshotKind::Checkpoint,
            stop: false,
            target: Arc::new(SnapshotTarget {
                store: store.clone(),
                dir: "chk-1".into(),
            }),
            triggered_at_ms: 0,
            is_final: false,
            incremental: None,
        };
        let count = Aggregate::new(
            "counts",
            AggregateFn::Count,
            None,
            "word",
            "count",
            key_group_range(0, 1, 128),
            Default::default(),
        )
        .unwrap();
        let (ctl_tx, ctl_rx) = tokio::sync::mpsc::unbounded_channel();
        let (ev_tx, ev_rx) = tokio::sync::mpsc::unbounded_channel();
        let core = TaskCore {
            index: 0,
            subtask: 0,
            label: "counts (1/1)".into(),
            parallelism: 1,
            chain: vec![Box::new(count)],
            chain_ids: vec![("counts".into(), "count".into())],
            output: Outputs::single(output, "downstream"),
            control: ctl_rx,
            events: ev_tx,
            metrics: Arc::default(),
            priority_outputs: vec![],
            unaligned_after,
            unsent: Default::default(),
            deferred: Default::default(),
            interrupt_lane: None,
            interruptible_by_trigger: false,
        };
        (core, ctl_tx, ev_rx, barrier)
    }

    fn word(w: &str) -> Record {
        Record {
            row: crate::record::Row::from_json(json!({ "word": w })),
            keyed: Some(KeyedBy::new(Key::Str(w.into()), 128)),
        }
    }

    /// Two inputs into a keyed count. Input 0 delivers barrier 1 and then a record "late";
    /// input 1 delivers "early" and then barrier 1. Exactly-once: "late" is held until
    /// alignment, so checkpoint 1's state holds "early" but not "late". At-least-once: "late"
    /// is processed before the snapshot and is in checkpoint 1's state.
    async fn state_at_checkpoint_1(mode: CheckpointMode) -> Vec<String> {
        let dir = tempfile::tempdir().unwrap();
        let store: crate::storage::Store = Arc::new(LocalStore::new(dir.path()).unwrap());
        let (core, ctl_tx, mut ev_rx, barrier) = count_core(&store, Output::None, None);
        let (tx0, rx0) = crate::exec::channel::data_channel(8);
        let (tx1, rx1) = crate::exec::channel::data_channel(8);
        // Everything is queued before the task starts, so the order seen is the order sent.
        tx0.send(Element::Barrier(barrier.clone())).await.unwrap();
        tx0.send(Element::Records(vec![word("late")])).await.unwrap();
        tx1.send(Element::Records(vec![word("early")])).await.unwrap();
        tx1.send(Element::Barrier(barrier)).await.unwrap();
        let task = tokio::spawn(run_inputs(core, vec![rx0, rx1], mode));
        let ack = match ev_rx.recv().await.unwrap() {
            TaskEvent::Ack(a) => a,
            other => panic!("unexpected {other:?}"),
        };
        ctl_tx.send(Control::Shutdown).unwrap();
        task.await.unwrap().unwrap();
        let h = &ack.operators[0].handle;
        let bytes = store.get(&format!("chk-1/{}", h.file)).await.unwrap();
        let file = crate::state::snapshot::decode_state_file("f", &bytes).unwrap();
        let mut words = vec![];
        for b in file.key_groups {
            let entries: Vec<(Key, crate::operators::aggregate::Num)> = postcard::from_bytes(&b.data).unwrap();
            words.extend(entries.into_iter().map(|(k, _)| match k {
                Key::Str(s) => s.to_string(),
                other => other.to_string(),
            }));
        }
        words.sort();
        words
    }

    #[tokio::test]
    async fn exactly_once_alignment_keeps_post_barrier_records_out_of_the_checkpoint() {
        assert_eq!(
            state_at_checkpoint_1(CheckpointMode::ExactlyOnce).await,
            vec!["early".to_string()]
        );
    }

    #[tokio::test]
    async fn at_least_once_and_at_most_once_do_not_hold_inputs() {
        for mode in [CheckpointMode::AtLeastOnce, CheckpointMode::AtMostOnce] {
            assert_eq!(
                state_at_checkpoint_1(mode).await,
                vec!["early".to_string(), "late".to_string()],
                "{mode:?}"
            );
        }
    }
}
