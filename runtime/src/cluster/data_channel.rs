//! Remote channels between subtasks on different workers: the upstream side connects to the
//! downstream worker's data port, authenticates ([`handshake`]), says which channel it is
//! (`Hello`), then sends one frame per credit; the downstream side hands each frame to the
//! subtask's bounded input and grants a credit back (credit-based flow control).
//!
//! Unaligned checkpoints: the upstream subtask's barrier for the downstream subtask's priority
//! lane ([`crate::exec::lanes`]) comes to the upstream side on a lane of its own, and goes out
//! at once as a `PriorityBarrier` frame, ahead of the records waiting in the channel or for
//! credits. The downstream side keeps reading frames while it waits to hand earlier ones to
//! the subtask (at most the credits it granted: one frame per credit), so a priority frame is
//! never stuck behind them; it passes it to the downstream subtask's lane at once.

use super::wire::*;
use crate::checkpoint::Barrier;
use crate::exec::messages::{Element, TaskEvent};
use crate::security::handshake;
use crate::security::refusals::{self, Surface};
use crate::security::secret::JobSecret;
use std::collections::{HashMap, VecDeque};
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
    /// The subtask input of each channel, by (upstream task, downstream task).
    pub(super) channels: HashMap<(usize, usize), InboundChannel>,
    /// Snapshot stores of the attempt (barriers name them by URL).
    pub(super) stores: StoreCache,
}

/// Where the downstream side of a remote channel hands what it receives.
pub(super) struct InboundChannel {
    /// The subtask's bounded input for this channel (records, barriers, watermarks, end).
    pub(super) input: mpsc::Sender<Element>,
    /// The subtask's priority lane (unaligned checkpoints; `None` when aligned).
    pub(super) priority: Option<mpsc::UnboundedSender<Barrier>>,
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
/// A barrier from `priority` (unaligned checkpoints) goes out at once, before anything
/// `rx` holds and without a credit. A record too large for a frame fails the upstream subtask
/// with the reason (and the channel stays open until the attempt is cancelled, so the
/// downstream subtask does not report a lost upstream first).
pub(super) async fn write_channel(
    addr: String,
    attempt: u64,
    sender: ChannelSender,
    down: usize,
    mut rx: mpsc::Receiver<Element>,
    mut priority: Option<mpsc::UnboundedReceiver<Barrier>>,
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
    loop {
        let el = tokio::select! {
            biased;
            Some(b) = crate::exec::send::recv_lane(&mut priority) => {
                if send_priority(c, &b).await.is_err() {
                    return;
                }
                continue;
            }
            el = rx.recv() => match el {
                Some(el) => el,
                None => return,
            },
        };
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
                tokio::select! {
                    biased;
                    Some(b) = crate::exec::send::recv_lane(&mut priority) => {
                        if send_priority(c, &b).await.is_err() {
                            return;
                        }
                    }
                    credit = recv::<DataFrame>(c) => match credit {
                        Ok(Some(DataFrame::Credit(n))) => credits += n,
                        _ => return,
                    },
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

/// Sends `b` as a priority frame (no credit needed).
async fn send_priority(c: &mut Conn, b: &Barrier) -> Result<(), String> {
    send_frame(
        c,
        encode_frame(&DataFrame::PriorityBarrier(WireBarrier::from_barrier(b))),
    )
    .await
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
                        .map(|ch| (ch, ib.stores.clone()))
                        .ok_or(("unknown channel".to_string(), true))
                }
            };
            let (channel, stores) = match claimed {
                Ok(x) => x,
                Err((reason, retry)) => {
                    let _ = send(&mut conn, &DataFrame::Refused { reason, retry }).await;
                    return;
                }
            };
            if send(&mut conn, &DataFrame::Credit(INITIAL_CREDITS)).await.is_err() {
                return;
            }
            read_channel(conn, channel, stores).await;
        });
    }
}

/// Downstream side: hand each frame to the subtask's bounded input, then grant a credit;
/// a priority barrier goes to the subtask's priority lane at once. Frames keep being read
/// while the input is full (at most one per credit granted, so the local queue is bounded by
/// [`INITIAL_CREDITS`]). A connection that drops before end-of-stream drops the input
/// sender, which the subtask reports as a failure.
async fn read_channel(mut conn: Conn, channel: InboundChannel, stores: StoreCache) {
    let InboundChannel { input: tx, priority } = channel;
    let mut queued: VecDeque<Element> = VecDeque::new();
    let mut ended = false;
    loop {
        let frame = tokio::select! {
            biased;
            permit = tx.reserve(), if !queued.is_empty() => {
                let Ok(permit) = permit else { return };
                let el = queued.pop_front().expect("a queued element");
                let is_end = matches!(el, Element::End);
                permit.send(el);
                if is_end {
                    return;
                }
                // The upstream side closes the connection right after end-of-stream, which
                // may already be queued here behind this frame: a credit it no longer reads
                // is no reason to drop what is queued. A connection lost before
                // end-of-stream ends this loop when reading.
                let _ = send(&mut conn, &DataFrame::Credit(1)).await;
                continue;
            }
            frame = recv_data(&mut conn), if !ended => frame,
        };
        let el = match frame {
            Ok(Some(DataFrame::Records(r))) => Element::Records(r),
            Ok(Some(DataFrame::Watermark(w))) => Element::Watermark(w),
            Ok(Some(DataFrame::Barrier(w))) => match stores.barrier(&w).await {
                Ok(b) => Element::Barrier(b),
                Err(e) => {
                    tracing::error!(error = %e, "cannot open the barrier's snapshot target");
                    return;
                }
            },
            Ok(Some(DataFrame::PriorityBarrier(w))) => {
                match (&priority, stores.barrier(&w).await) {
                    (Some(lane), Ok(b)) => {
                        // A subtask that is gone fails through its input.
                        let _ = lane.send(b);
                    }
                    (None, _) => tracing::warn!(
                        checkpoint = w.id,
                        "priority barrier on a channel without a priority lane; ignored"
                    ),
                    (_, Err(e)) => {
                        tracing::error!(error = %e, "cannot open the barrier's snapshot target");
                        return;
                    }
                }
                continue;
            }
            Ok(Some(DataFrame::End)) => {
                ended = true;
                Element::End
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
        queued.push_back(el);
    }
}

/// Encodes a small control frame (barrier, end-of-stream): these always serialize.
fn encode_frame(frame: &DataFrame) -> bytes::Bytes {
    bytes::Bytes::from(serde_json::to_vec(frame).unwrap_or_default())
}

#[cfg(test)]
#[path = "data_channel_tests.rs"]
mod tests;
