//! The network part of unaligned checkpoints: a priority barrier overtakes the frames queued
//! on a remote channel (at the sender, on credit, and at the receiver while the subtask's
//! input is full), and the in-band order of records, barrier and end-of-stream is kept.

use super::*;
use crate::checkpoint::SnapshotTarget;
use crate::control::api::SnapshotKind;
use crate::record::Record;
use crate::storage::{LocalStore, S3Options};

fn record(i: usize) -> Record {
    Record {
        row: crate::record::Row::from_json(serde_json::json!({ "i": i })),
        keyed: None,
    }
}

fn barrier(dir: &std::path::Path, id: u64) -> Barrier {
    Barrier {
        id,
        kind: SnapshotKind::Checkpoint,
        stop: false,
        target: Arc::new(SnapshotTarget {
            store: Arc::new(LocalStore::new(dir).unwrap()),
            dir: format!("chk-{id}"),
        }),
        triggered_at_ms: 0,
        is_final: false,
        incremental: None,
    }
}

/// Receives within a generous bound (a hang is a failure, not a speed measurement).
async fn within<T>(what: &str, f: impl std::future::Future<Output = Option<T>>) -> T {
    tokio::time::timeout(Duration::from_secs(30), f)
        .await
        .unwrap_or_else(|_| panic!("{what}: nothing after 30 s"))
        .unwrap_or_else(|| panic!("{what}: channel closed"))
}

#[tokio::test]
async fn a_priority_barrier_overtakes_the_frames_queued_on_a_remote_channel() {
    let dir = tempfile::tempdir().unwrap();
    let secret = JobSecret::parse("0123456789abcdef0123456789abcdef", "test").unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    // The downstream subtask's input holds one frame, and the subtask reads nothing until the
    // priority barrier has arrived: what the sender sent is queued everywhere on the way.
    let (input_tx, mut input_rx) = mpsc::channel(1);
    let (lane_tx, mut lane_rx) = mpsc::unbounded_channel();
    let inbound: Arc<Mutex<Inbound>> = Arc::default();
    {
        let mut ib = inbound.lock().unwrap();
        ib.attempt = 1;
        ib.stores = StoreCache::new(S3Options::default());
        ib.channels.insert(
            (0, 1),
            InboundChannel {
                input: input_tx,
                priority: Some(lane_tx),
            },
        );
    }
    tokio::spawn(accept_data(listener, inbound, secret.clone()));
    let (out_tx, out_rx) = mpsc::channel(8);
    let (priority_tx, priority_rx) = mpsc::unbounded_channel();
    let (events, _events_rx) = mpsc::unbounded_channel();
    let sender = ChannelSender {
        up: 0,
        worker_id: "w-up".into(),
        secret,
        label: "up (1/1) on worker w-up".into(),
        events,
    };
    tokio::spawn(write_channel(addr, 1, sender, 1, out_rx, Some(priority_rx)));
    // 12 batches: 1 in the input, 4 on credit (3 of them read by the receiving side and held
    // there), the rest in the sender's channel or waiting for a credit.
    let batches = 12;
    for i in 0..batches {
        within("room in the sender's channel", async {
            out_tx.send(Element::Records(vec![record(i)])).await.ok()
        })
        .await;
    }
    priority_tx.send(barrier(dir.path(), 7)).unwrap();
    let overtaking = within("the priority barrier", lane_rx.recv()).await;
    assert_eq!(overtaking.id, 7);
    assert!(!overtaking.is_final);
    // Nothing was taken from the input: the barrier overtook every queued batch. In band,
    // the batches, then the barrier, then end-of-stream, in order.
    out_tx.send(Element::Barrier(barrier(dir.path(), 7))).await.unwrap();
    out_tx.send(Element::End).await.unwrap();
    let mut seen = vec![];
    loop {
        match within("the in-band elements", input_rx.recv()).await {
            Element::Records(r) => seen.push(format!("r{}", r[0].row.get("i").unwrap())),
            Element::Barrier(b) => seen.push(format!("b{}", b.id)),
            Element::End => break,
            Element::Watermark(_) => panic!("no watermark was sent"),
        }
    }
    let mut want: Vec<String> = (0..batches).map(|i| format!("r{i}")).collect();
    want.push("b7".into());
    assert_eq!(seen, want);
    assert!(lane_rx.try_recv().is_err(), "the in-band barrier stays in band");
}

/// A barrier's `is_final` crosses the wire: the final checkpoint of a bounded job is taken
/// aligned on workers too.
#[tokio::test]
async fn the_final_checkpoint_flag_crosses_the_wire() {
    let dir = tempfile::tempdir().unwrap();
    let mut b = barrier(dir.path(), 3);
    b.is_final = true;
    let wire: WireBarrier =
        serde_json::from_slice(&serde_json::to_vec(&WireBarrier::from_barrier(&b)).unwrap()).unwrap();
    let back = StoreCache::new(S3Options::default()).barrier(&wire).await.unwrap();
    assert!(back.is_final);
    let older: WireBarrier = serde_json::from_value(serde_json::json!({
        "id": 3, "kind": "checkpoint", "stop": false, "store_url": wire.store_url,
        "dir": "chk-3", "triggered_at_ms": 0
    }))
    .unwrap();
    assert!(!older.is_final, "a frame without the field is not final");
}
