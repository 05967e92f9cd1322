//! Remote channels between subtasks on different workers: the upstream side connects to the
//! downstream worker's data port, authenticates ([`handshake`]), says which channel it is
//! (`Hello`), then sends one frame per credit; the downstream side hands each frame to the
//! subtask's bounded input and grants a credit back (credit-based flow control).

use super::wire::*;
use crate::exec::messages::{Element, TaskEvent};
use crate::security::handshake;
use crate::security::refusals::{self, Surface};
use crate::security::secret::JobSecret;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// Credits a receiver grants when a data channel opens (frames in flight per channel).
pub const INITIAL_CREDITS: u32 = 4;

/// Inbound channels waiting for their upstream connection, per attempt.
#[derive(Default)]
pub(super) struct Inbound {
    /// The attempt the channels belong to.
    pub(super) attempt: u64,
    /// Sender into each subtask input, by (upstream task, downstream task).
    pub(super) channels: HashMap<(usize, usize), mpsc::Sender<Element>>,
    /// Snapshot stores of the attempt (barriers name them by URL).
    pub(super) stores: StoreCache,
}

/// The upstream subtask of a remote channel, for failure reports.
pub(super) struct ChannelSender {
    /// Task index.
    pub(super) up: usize,
    /// This worker's id (the handshake's peer id).
    pub(super) worker_id: String,
    /// The job secret (the handshake's key).
    pub(super) secret: JobSecret,
    /// `<chain> (i/p) on worker <id>`.
    pub(super) label: String,
    /// The worker's subtask events (to the coordinator).
    pub(super) events: mpsc::UnboundedSender<TaskEvent>,
}

/// The failure of a subtask that emitted a record too large for a frame between workers.
pub fn oversize_record_message(label: &str, o: &OversizeRecord) -> String {
    format!(
        "{label} failed: it emitted a record of {} bytes (encoded), larger than the {} MiB limit of a frame \
         between workers; records are not streamed across frames. Make records that cross a keyBy smaller \
         before the keyBy (drop or truncate fields with a map, or split them with a flatMap)",
        o.frame_bytes,
        o.limit / (1024 * 1024)
    )
}

/// Upstream side of a remote channel: connect, say hello, then send one frame per credit.
/// A record too large for a frame fails the upstream subtask with the reason (and the
/// channel stays open until the attempt is cancelled, so the downstream subtask does not
/// report a lost upstream first).
pub(super) async fn write_channel(
    addr: String,
    attempt: u64,
    sender: ChannelSender,
    down: usize,
    mut rx: mpsc::Receiver<Element>,
) {
    let up = sender.up;
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut conn = loop {
        let attempt_conn = async {
            let mut c = framed(TcpStream::connect(&addr).await.map_err(|e| (e.to_string(), true))?);
            handshake::connect(&mut c, &sender.secret, handshake::ROLE_WORKER_DATA, &sender.worker_id)
                .await
                .map_err(|e| (e, true))?;
            send(&mut c, &DataFrame::Hello { attempt, up, down })
                .await
                .map_err(|e| (e, true))?;
            match recv::<DataFrame>(&mut c).await {
                Ok(Some(DataFrame::Credit(n))) => Ok((c, n)),
                Ok(Some(DataFrame::Refused { reason, retry })) => Err((reason, retry)),
                other => Err((format!("unexpected reply {other:?}"), true)),
            }
        };
        match attempt_conn.await {
            Ok(c) => break c,
            Err((e, retry)) if retry && Instant::now() < deadline => {
                tracing::debug!(%addr, up, down, error = %e, "data channel not ready; retrying");
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
            Err((e, _)) => {
                tracing::error!(%addr, up, down, error = %e, "data channel refused");
                return;
            }
        }
    };
    let (c, mut credits) = (&mut conn.0, conn.1);
    while let Some(el) = rx.recv().await {
        let (frames, end) = match el {
            Element::Records(r) => match encode_records(&r, MAX_FRAME) {
                Ok(frames) => (frames, false),
                Err(o) => {
                    let error = oversize_record_message(&sender.label, &o);
                    tracing::error!(up, down, %error, "record too large for a frame");
                    let _ = sender.events.send(TaskEvent::Failed { task: up, error });
                    std::future::pending::<()>().await;
                    return;
                }
            },
            Element::Barrier(b) => (
                vec![encode_frame(&DataFrame::Barrier(WireBarrier::from_barrier(&b)))],
                false,
            ),
            Element::End => (vec![encode_frame(&DataFrame::End)], true),
            Element::Watermark(w) => (vec![encode_frame(&DataFrame::Watermark(w))], false),
        };
        for frame in frames {
            while credits == 0 {
                match recv::<DataFrame>(c).await {
                    Ok(Some(DataFrame::Credit(n))) => credits += n,
                    _ => return,
                }
            }
            if send_frame(c, frame).await.is_err() {
                return;
            }
            credits -= 1;
        }
        if end {
            return;
        }
    }
}

/// Downstream side of remote channels: authenticates each connection
/// ([`handshake`]), then wires it to the subtask input its `Hello` names.
pub(super) async fn accept_data(listener: TcpListener, inbound: Arc<Mutex<Inbound>>, secret: JobSecret) {
    loop {
        let Ok((stream, peer)) = listener.accept().await else {
            continue;
        };
        let inbound = inbound.clone();
        let secret = secret.clone();
        tokio::spawn(async move {
            let mut conn = framed(stream);
            if let Err(reason) = handshake::accept(&mut conn, &secret, handshake::ROLE_WORKER_DATA).await {
                return refusals::refuse(Surface::Data, peer, &reason);
            }
            let Ok(Some(DataFrame::Hello { attempt, up, down })) = recv::<DataFrame>(&mut conn).await else {
                return;
            };
            let claimed = {
                let mut ib = inbound.lock().expect("lock");
                if attempt < ib.attempt {
                    Err((
                        format!(
                            "stale attempt {}, current {}",
                            attempt_label(attempt),
                            attempt_label(ib.attempt)
                        ),
                        false,
                    ))
                } else if attempt > ib.attempt {
                    Err(("not deployed yet".to_string(), true))
                } else {
                    ib.channels
                        .remove(&(up, down))
                        .map(|tx| (tx, ib.stores.clone()))
                        .ok_or(("unknown channel".to_string(), true))
                }
            };
            let (tx, stores) = match claimed {
                Ok(x) => x,
                Err((reason, retry)) => {
                    let _ = send(&mut conn, &DataFrame::Refused { reason, retry }).await;
                    return;
                }
            };
            if send(&mut conn, &DataFrame::Credit(INITIAL_CREDITS)).await.is_err() {
                return;
            }
            read_channel(conn, tx, stores).await;
        });
    }
}

/// Downstream side: hand each frame to the subtask's bounded input, then grant a credit. A
/// connection that drops before end-of-stream drops the input sender, which the subtask
/// reports as a failure.
async fn read_channel(mut conn: Conn, tx: mpsc::Sender<Element>, stores: StoreCache) {
    loop {
        let el = match recv_data(&mut conn).await {
            Ok(Some(DataFrame::Records(r))) => Element::Records(r),
            Ok(Some(DataFrame::Watermark(w))) => Element::Watermark(w),
            Ok(Some(DataFrame::Barrier(w))) => match stores.barrier(&w).await {
                Ok(b) => Element::Barrier(b),
                Err(e) => {
                    tracing::error!(error = %e, "cannot open the barrier's snapshot target");
                    return;
                }
            },
            Ok(Some(DataFrame::End)) => {
                let _ = tx.send(Element::End).await;
                return;
            }
            // The connection broke (the upstream worker is gone): a symptom of a worker loss
            // that the coordinator names and restarts from, not a protocol error.
            Err(e) if e.starts_with("receive failed") => {
                tracing::warn!(error = %e, "data channel from an upstream worker broke; closing the channel");
                return;
            }
            Err(e) => {
                tracing::error!(error = %e, "data channel frame does not decode; closing the channel");
                return;
            }
            _ => return,
        };
        if tx.send(el).await.is_err() {
            return;
        }
        if send(&mut conn, &DataFrame::Credit(1)).await.is_err() {
            return;
        }
    }
}

/// Encodes a small control frame (barrier, end-of-stream): these always serialize.
fn encode_frame(frame: &DataFrame) -> bytes::Bytes {
    bytes::Bytes::from(serde_json::to_vec(frame).unwrap_or_default())
}
