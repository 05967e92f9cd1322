//! The network part of unaligned checkpoints: credits return end to end (when the downstream
//! subtask has processed a batch), a priority barrier overtakes the batches not yet processed,
//! the in-band barrier needs no credit, and the in-band order of records, barrier and
//! end-of-stream is kept.

use super::*;
use crate::checkpoint::SnapshotTarget;
use crate::control::api::SnapshotKind;
use crate::exec::CHANNEL_CAPACITY;
use crate::exec::channel::{data_channel, returned_channel};
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

/// The upstream subtask fills its channel (8 batches, the capacity) and the downstream subtask
/// receives them all but processes none: no credit comes back, so the upstream cannot send a
/// ninth batch, although nothing waits in its local channel any more (credits are returned
/// end to end). The priority barrier overtakes everything; the in-band barrier takes no
/// credit, so it reaches the subtask while nothing was processed (an unaligned checkpoint
/// need not wait for processing). Processing one batch returns one credit across the network.
#[tokio::test]
async fn credits_return_end_to_end_and_the_barriers_need_none() {
    let dir = tempfile::tempdir().unwrap();
    let secret = JobSecret::parse("0123456789abcdef0123456789abcdef", "test").unwrap();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap().to_string();
    let (input_tx, mut input_rx, returned) = returned_channel();
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
                returned,
                priority: Some(lane_tx),
            },
        );
    }
    tokio::spawn(accept_data(listener, inbound, secret.clone()));
    let (out_tx, out_rx) = data_channel(CHANNEL_CAPACITY);
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
    let batches = CHANNEL_CAPACITY;
    for i in 0..batches {
        out_tx.try_send(Element::Records(vec![record(i)])).unwrap();
    }
    let name = |el: &Element| match el {
        Element::Records(r) => format!("r{}", r[0].row.get("i").unwrap()),
        Element::Barrier(b) => format!("b{}", b.id),
        other => panic!("unexpected {other:?}"),
    };
    let mut seen = vec![];
    let mut held = vec![];
    for _ in 0..batches {
        let (el, credit) = within("a batch, while the subtask processes nothing", input_rx.recv_held()).await;
        seen.push(name(&el));
        held.push(credit);
    }
    assert!(
        matches!(
            out_tx.try_send(Element::Records(vec![record(99)])),
            Err(tokio::sync::mpsc::error::TrySendError::Full(_))
        ),
        "no credit comes back before the batches are processed"
    );
    priority_tx.send(barrier(dir.path(), 7)).unwrap();
    let overtaking = within("the priority barrier", lane_rx.recv()).await;
    assert_eq!(overtaking.id, 7);
    assert!(!overtaking.is_final);
    out_tx
        .try_send(Element::Barrier(barrier(dir.path(), 7)))
        .expect("a barrier takes no credit");
    let (el, _) = within("the in-band barrier, with nothing processed", input_rx.recv_held()).await;
    seen.push(name(&el));
    let mut want: Vec<String> = (0..batches).map(|i| format!("r{i}")).collect();
    want.push("b7".into());
    assert_eq!(seen, want, "in band, in order");
    assert!(lane_rx.try_recv().is_err(), "the in-band barrier stays in band");
    // One batch processed: its credit crosses back to the upstream subtask.
    drop(held.remove(0));
    within("a credit back across the network", async {
        while out_tx.capacity() == 0 {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        Some(())
    })
    .await;
    drop(held);
    out_tx.send(Element::End).await.unwrap();
    assert!(matches!(within("end-of-stream", input_rx.recv()).await, Element::End));
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
