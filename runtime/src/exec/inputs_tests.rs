//! Tests of the input subtask loop and of a subtask's output with unaligned checkpoints
//! ([`super`]).

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
    let (tx0, rx0) = crate::exec::channel::data_channel(8);
    let (tx1, rx1) = crate::exec::channel::data_channel(8);
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
        start_alignment: false,
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
    let (out_tx, mut out_rx) = crate::exec::channel::data_channel(1);
    out_tx.send(Element::Records(vec![])).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store: crate::storage::Store = Arc::new(LocalStore::new(dir.path()).unwrap());
    let (core, ctl_tx, mut ev_rx, barrier) =
        super::super::task::tests::count_core(&store, Output::Forward(out_tx), Some(Duration::ZERO));
    let (tx0, rx0) = crate::exec::channel::data_channel(8);
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
        start_alignment: false,
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

/// Under sustained backpressure: the input channel is full (8 batches, its capacity), the
/// subtask is blocked sending the output of w0, and the upstream subtask has w8 waiting for
/// a credit, when the priority barrier of checkpoint 1 arrives. The upstream subtask then
/// sends the in-band barrier, as it does after its own snapshot (w8 stays behind it, in
/// the upstream's channel state). The checkpoint must complete while processing is still
/// blocked: the recording drains the input up to the in-band barrier (w1..w7 are the
/// channel state, w0 is in the snapshot), and since the drained batches keep their
/// credits, the upstream cannot send w8 until they are processed. (The old drain took at
/// most one channel's worth into the local queue, and each drain let the upstream refill
/// the channel: with a queue still full from the previous checkpoint, the in-band barrier
/// waited for a channel's worth of processing.)
#[tokio::test]
async fn an_unaligned_checkpoint_completes_while_processing_is_blocked_and_the_input_is_full() {
    // Room for nothing: the first processed batch blocks.
    let (out_tx, out_rx) = crate::exec::channel::data_channel(1);
    out_tx.send(Element::Records(vec![])).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store: crate::storage::Store = Arc::new(LocalStore::new(dir.path()).unwrap());
    let (core, ctl_tx, mut ev_rx, barrier) =
        super::super::task::tests::count_core(&store, Output::Forward(out_tx), Some(Duration::ZERO));
    let capacity = crate::exec::CHANNEL_CAPACITY;
    let (tx0, rx0) = crate::exec::channel::data_channel(capacity);
    let (lane_tx, lane_rx) = tokio::sync::mpsc::unbounded_channel();
    for i in 0..capacity {
        tx0.try_send(Element::Records(vec![word(&format!("w{i}"))])).unwrap();
    }
    let setup = InputSetup {
        inputs: vec![rx0],
        mode: CheckpointMode::ExactlyOnce,
        priority: Some(lane_rx),
        channel_uid: "counts".into(),
        replay: vec![],
        start_alignment: false,
    };
    let task = tokio::spawn(run_inputs_with(core, setup));
    // A current-thread runtime: yielding lets the subtask run until its send of w0 blocks.
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
    assert_eq!(
        tx0.capacity(),
        0,
        "w0 taken, not processed to the end: its credit is held"
    );
    assert!(matches!(
        tx0.try_send(Element::Records(vec![word(&format!("w{capacity}"))])),
        Err(tokio::sync::mpsc::error::TrySendError::Full(_))
    ));
    lane_tx.send(barrier.clone()).unwrap();
    tx0.try_send(Element::Barrier(barrier))
        .expect("a barrier takes no credit");
    let ack = tokio::time::timeout(Duration::from_secs(30), ev_rx.recv())
        .await
        .expect("the checkpoint completes while the output is blocked (a hang is the failure)");
    let ack = match ack.unwrap() {
        TaskEvent::Ack(a) => a,
        other => panic!("unexpected {other:?}"),
    };
    assert!(
        matches!(
            tx0.try_send(Element::Records(vec![])),
            Err(tokio::sync::mpsc::error::TrySendError::Full(_))
        ),
        "the drained batches keep their credits: no room to refill"
    );
    ctl_tx.send(Control::Shutdown).unwrap();
    drop(out_rx);
    let _ = task.await.unwrap();
    assert!(ack.unaligned);
    assert_eq!(ack.operators[0].handle.entries, 1, "w0 is in the snapshot");
    assert_eq!(
        ack.channel_state.map_or(0, |c| c.handle.entries),
        capacity as u64 - 1,
        "w1..w7 are the channel state"
    );
}

/// The subtask has processed w0 and is blocked sending the count's output when the priority
/// barrier of checkpoint 1 arrives: it snapshots (w0 counted), and its in-band barrier goes
/// out *ahead* of the unsent output, which is therefore neither processed downstream before
/// the downstream snapshot nor recorded there: it is this subtask's output channel state,
/// stored under the downstream stage's uid, and it follows the barrier in the channel.
#[tokio::test]
async fn an_interrupted_sends_unsent_output_is_channel_state_of_the_downstream_stage() {
    let (out_tx, mut out_rx) = crate::exec::channel::data_channel(1);
    out_tx.send(Element::Records(vec![])).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store: crate::storage::Store = Arc::new(LocalStore::new(dir.path()).unwrap());
    let (core, ctl_tx, mut ev_rx, barrier) =
        super::super::task::tests::count_core(&store, Output::Forward(out_tx), Some(Duration::ZERO));
    let (tx0, rx0) = crate::exec::channel::data_channel(8);
    let (lane_tx, lane_rx) = tokio::sync::mpsc::unbounded_channel();
    tx0.try_send(Element::Records(vec![word("w0")])).unwrap();
    let setup = InputSetup {
        inputs: vec![rx0],
        mode: CheckpointMode::ExactlyOnce,
        priority: Some(lane_rx),
        channel_uid: "counts".into(),
        replay: vec![],
        start_alignment: false,
    };
    let task = tokio::spawn(run_inputs_with(core, setup));
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
    lane_tx.send(barrier.clone()).unwrap();
    tx0.try_send(Element::Barrier(barrier)).unwrap();
    let ack = match tokio::time::timeout(Duration::from_secs(30), ev_rx.recv()).await {
        Ok(Some(TaskEvent::Ack(a))) => a,
        other => panic!("no acknowledgement while the output is blocked: {other:?}"),
    };
    assert_eq!(ack.operators[0].handle.entries, 1, "w0 is counted in the snapshot");
    assert_eq!(ack.channel_state.as_ref().map(|c| c.handle.entries), Some(0));
    let output = ack
        .output_channel_state
        .first()
        .cloned()
        .expect("the unsent output is channel state");
    assert_eq!((output.uid.as_str(), output.handle.entries), ("downstream", 1));
    let bytes = store.get(&format!("chk-1/{}", output.handle.file)).await.unwrap();
    let file = crate::state::snapshot::decode_state_file("f", &bytes).unwrap();
    // The count's output carries no key (a forward channel): one operator-state item.
    let records = crate::cluster::record_codec::decode(&file.operator_state[0]).unwrap();
    assert_eq!(records[0].row.get("word").unwrap().to_string(), "\"w0\"");
    // Downstream: what was queued before, then the barrier, then the unsent output.
    let mut order = vec![];
    for _ in 0..3 {
        order.push(match out_rx.recv().await.unwrap() {
            Element::Records(r) if r.is_empty() => "queued before",
            Element::Records(_) => "unsent output",
            Element::Barrier(_) => "barrier",
            other => panic!("unexpected {other:?}"),
        });
    }
    assert_eq!(order, ["queued before", "barrier", "unsent output"]);
    ctl_tx.send(Control::Shutdown).unwrap();
    task.await.unwrap().unwrap();
}

/// Whether a barrier overtakes the unsent rest of an interrupted send: a periodic checkpoint's
/// does (the rest is returned as output channel state), the final checkpoint's does not (it is
/// aligned: the rest goes first and nothing is channel state, since no later checkpoint would
/// commit the output of channel state).
#[tokio::test]
async fn only_a_periodic_barrier_overtakes_the_unsent_output() {
    for is_final in [false, true] {
        let (out_tx, mut out_rx) = crate::exec::channel::data_channel(1);
        out_tx.send(Element::Records(vec![])).await.unwrap();
        let dir = tempfile::tempdir().unwrap();
        let store: crate::storage::Store = Arc::new(LocalStore::new(dir.path()).unwrap());
        let (mut core, _ctl, _ev, mut barrier) =
            super::super::task::tests::count_core(&store, Output::Forward(out_tx), Some(Duration::ZERO));
        barrier.is_final = is_final;
        core.unsent.push_back((0, Element::Records(vec![word("rest")])));
        let forwarded = tokio::spawn(async move {
            let unsent = core.forward_barrier(&barrier, true).await.unwrap();
            (unsent.len(), core)
        });
        let mut order = vec![];
        for _ in 0..3 {
            order.push(match out_rx.recv().await.unwrap() {
                Element::Records(r) if r.is_empty() => "queued before",
                Element::Records(_) => "rest",
                Element::Barrier(_) => "barrier",
                other => panic!("unexpected {other:?}"),
            });
            if order.len() == 2 && !is_final {
                break;
            }
        }
        let (channel_state, mut core) = forwarded.await.unwrap();
        if is_final {
            assert_eq!(order, ["queued before", "rest", "barrier"]);
            assert_eq!(channel_state, 0);
        } else {
            assert_eq!(order, ["queued before", "barrier"]);
            assert_eq!(channel_state, 1, "the rest is output channel state");
            core.flush(None, false).await.unwrap();
            assert!(matches!(out_rx.recv().await, Some(Element::Records(r)) if r.len() == 1));
        }
    }
}

/// A branch: the count's output goes down two forward edges (to stages headed by `branch-a`
/// and `branch-b`), both blocked. At the priority barrier the unsent output of *each* edge is
/// stored as channel state of that edge's downstream stage, in its own file, and on each
/// channel the barrier goes ahead of that edge's unsent output.
#[tokio::test]
async fn the_unsent_output_of_each_edge_is_channel_state_of_its_own_downstream_stage() {
    use crate::exec::outputs::{OutputEdge, Outputs};
    let (a_tx, mut a_rx) = crate::exec::channel::data_channel(1);
    let (b_tx, mut b_rx) = crate::exec::channel::data_channel(1);
    a_tx.send(Element::Records(vec![])).await.unwrap();
    b_tx.send(Element::Records(vec![])).await.unwrap();
    let dir = tempfile::tempdir().unwrap();
    let store: crate::storage::Store = Arc::new(LocalStore::new(dir.path()).unwrap());
    let (mut core, ctl_tx, mut ev_rx, barrier) =
        super::super::task::tests::count_core(&store, Output::None, Some(Duration::ZERO));
    let edge = |sender, uid: &str| OutputEdge {
        route: Output::Forward(sender),
        port: crate::job::dataflow::Port::Main,
        channel_uid: uid.into(),
        transform: None,
    };
    core.output = Outputs::new(vec![edge(a_tx, "branch-a"), edge(b_tx, "branch-b")]);
    let (tx0, rx0) = crate::exec::channel::data_channel(8);
    let (lane_tx, lane_rx) = tokio::sync::mpsc::unbounded_channel();
    tx0.try_send(Element::Records(vec![word("w0")])).unwrap();
    let setup = InputSetup {
        inputs: vec![rx0],
        mode: CheckpointMode::ExactlyOnce,
        priority: Some(lane_rx),
        channel_uid: "counts".into(),
        replay: vec![],
        start_alignment: false,
    };
    let task = tokio::spawn(run_inputs_with(core, setup));
    for _ in 0..50 {
        tokio::task::yield_now().await;
    }
    lane_tx.send(barrier.clone()).unwrap();
    tx0.try_send(Element::Barrier(barrier)).unwrap();
    let ack = match tokio::time::timeout(Duration::from_secs(30), ev_rx.recv()).await {
        Ok(Some(TaskEvent::Ack(a))) => a,
        other => panic!("no acknowledgement while the outputs are blocked: {other:?}"),
    };
    let outputs: Vec<(&str, &str, u64)> = ack
        .output_channel_state
        .iter()
        .map(|o| (o.uid.as_str(), o.handle.file.as_str(), o.handle.entries))
        .collect();
    assert_eq!(
        outputs,
        [
            ("branch-a", "channel-branch-a-output-of-task-0.state", 1),
            ("branch-b", "channel-branch-b-output-of-task-0.state", 1)
        ]
    );
    for (o, rx) in ack.output_channel_state.iter().zip([&mut a_rx, &mut b_rx]) {
        let bytes = store.get(&format!("chk-1/{}", o.handle.file)).await.unwrap();
        let file = crate::state::snapshot::decode_state_file("f", &bytes).unwrap();
        let records = crate::cluster::record_codec::decode(&file.operator_state[0]).unwrap();
        assert_eq!(records[0].row.get("word").unwrap().to_string(), "\"w0\"", "{}", o.uid);
        let mut order = vec![];
        for _ in 0..3 {
            order.push(match rx.recv().await.unwrap() {
                Element::Records(r) if r.is_empty() => "queued before",
                Element::Records(_) => "unsent output",
                Element::Barrier(_) => "barrier",
                other => panic!("unexpected {other:?}"),
            });
        }
        assert_eq!(order, ["queued before", "barrier", "unsent output"], "{}", o.uid);
    }
    ctl_tx.send(Control::Shutdown).unwrap();
    task.await.unwrap().unwrap();
}

/// Start alignment: a second element of an input waits until every input has sent its first
/// (its upstream subtask's watermark announcement), so an input that announces late (a source
/// subtask with nothing to read sends the end of time) is counted before any record is
/// judged against the inputs' watermarks.
#[tokio::test]
async fn start_alignment_takes_every_inputs_first_element_before_a_second() {
    use crate::exec::watermark::{END_OF_TIME, NO_WATERMARK, Watermark};
    let dir = tempfile::tempdir().unwrap();
    let store: crate::storage::Store = Arc::new(LocalStore::new(dir.path()).unwrap());
    let (core, ctl_tx, _ev_rx, _barrier) = super::super::task::tests::count_core(&store, Output::None, None);
    let metrics = core.metrics.clone();
    let (tx0, rx0) = crate::exec::channel::data_channel(8);
    let (tx1, rx1) = crate::exec::channel::data_channel(8);
    tx0.send(Element::Watermark(Watermark::Time(NO_WATERMARK)))
        .await
        .unwrap();
    tx0.send(Element::Records(vec![word("a0")])).await.unwrap();
    let setup = InputSetup {
        inputs: vec![rx0, rx1],
        mode: CheckpointMode::ExactlyOnce,
        priority: None,
        channel_uid: "counts".into(),
        replay: vec![],
        start_alignment: true,
    };
    let task = tokio::spawn(run_inputs_with(core, setup));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(
        metrics.records_in.load(Ordering::Relaxed),
        0,
        "input 0's records wait for input 1's announcement"
    );
    tx1.send(Element::Watermark(Watermark::Time(END_OF_TIME)))
        .await
        .unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while metrics.records_in.load(Ordering::Relaxed) == 0 {
        assert!(std::time::Instant::now() < deadline, "input 0's records were not taken");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    ctl_tx.send(Control::Shutdown).unwrap();
    task.await.unwrap().unwrap();
}
