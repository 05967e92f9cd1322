//! Remote channels between subtasks on different workers: the upstream side connects to the
//! downstream worker's data port, authenticates ([`handshake`]), says which channel it is
//! (`Hello`), then sends one records frame per credit; the downstream side hands each frame to
//! the subtask's input at once and grants the frame's credit back when the subtask has
//! *processed* it (credit-based flow control, end to end: [`crate::exec::channel`]). The
//! upstream side holds the upstream subtask's credit of each batch until then, so a channel
//! holds at most [`crate::exec::CHANNEL_CAPACITY`] unprocessed batches wherever they wait: in
//! the upstream side, on the wire, or queued in the downstream subtask. Barriers, watermarks
//! and end-of-stream take no credit.
//!
//! Unaligned checkpoints: the upstream subtask's barrier for the downstream subtask's priority
//! lane ([`crate::exec::lanes`]) comes to the upstream side on a lane of its own, and goes out
//! at once as a `PriorityBarrier` frame, ahead of the records waiting in the channel or for
//! credits; the downstream side passes it to the subtask's lane at once. Until the in-band
//! barrier of that checkpoint has gone out, the channel is *overtaken*: the records ahead of
//! it were sent before the upstream snapshot, so they are the downstream subtask's channel
//! state, which it cannot complete before the in-band barrier reaches it. The upstream side
//! sends them without waiting for network credits (its count goes negative and the credits
//! returned for them repay it); they still hold the upstream subtask's credits, so this moves
//! nothing beyond the channel's capacity.

use super::wire::*;
use crate::checkpoint::Barrier;
use crate::exec::channel::{Credit, DataReceiver, DataSender};
use crate::exec::messages::{Element, TaskEvent};
use crate::security::handshake;
use crate::security::refusals::{self, Surface};
use crate::security::secret::JobSecret;
use std::collections::{HashMap, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;

/// Credits a receiver grants when a data channel opens: records frames sent and not yet
/// processed by the downstream subtask, the capacity of a data channel.
pub const INITIAL_CREDITS: u32 = crate::exec::CHANNEL_CAPACITY as u32;

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
    /// The subtask's input for this channel (records, barriers, watermarks, end): the local
    /// end of a [`crate::exec::channel::returned_channel`].
    pub(super) input: DataSender,
    /// The credits of the batches the subtask has processed, to grant back.
    pub(super) returned: mpsc::UnboundedReceiver<()>,
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

/// Upstream side of a remote channel: connect, say hello, then send one records frame per
/// credit, holding each batch's credit of `rx` until the downstream side returns it. A barrier
/// from `priority` (unaligned checkpoints) goes out at once, before anything `rx` holds and
/// without a credit, and so do the records ahead of its in-band barrier. A record too large for a frame fails the upstream subtask
/// with the reason (and the channel stays open until the attempt is cancelled, so the
/// downstream subtask does not report a lost upstream first).
pub(super) async fn write_channel(
    addr: String,
    attempt: u64,
    sender: ChannelSender,
    down: usize,
    mut rx: DataReceiver,
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
    let (c, mut credits) = (&mut conn.0, i64::from(conn.1));
    // The newest checkpoint whose priority barrier went out and whose in-band barrier did not:
    // until it does, records go without waiting for credits.
    let mut overtaken: Option<u64> = None;
    // The upstream subtask's credit of each records frame sent, oldest first, until the
    // downstream side returns the frame's credit.
    let mut outstanding: VecDeque<Credit> = VecDeque::new();
    let returned = |outstanding: &mut VecDeque<Credit>, n: u32| {
        for _ in 0..n {
            outstanding.pop_front();
        }
    };
    loop {
        let (el, credit) = tokio::select! {
            biased;
            Some(b) = crate::exec::send::recv_lane(&mut priority) => {
                if send_priority(c, &b).await.is_err() {
                    return;
                }
                overtaken = overtaken.max(Some(b.id));
                continue;
            }
            // Credits come back while nothing is to be sent too: they release the upstream
            // subtask's credits, which it may be waiting for.
            frame = recv::<DataFrame>(c) => match frame {
                Ok(Some(DataFrame::Credit(n))) => {
                    credits += i64::from(n);
                    returned(&mut outstanding, n);
                    continue;
                }
                _ => return,
            },
            el = rx.recv_held() => match el {
                Some(el) => el,
                None => return,
            },
        };
        let in_band_id = match &el {
            Element::Barrier(b) => Some(b.id),
            _ => None,
        };
        // Columnar batches cross workers as rows for now (the record codec's frames).
        let el = match el {
            Element::Columns(c) => Element::Records(c.into_records()),
            el => el,
        };
        let takes_credits = matches!(el, Element::Records(_));
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
            // Converted to rows above.
            Element::Columns(_) => (vec![], false),
            Element::Watermark(w) => (vec![encode_frame(&DataFrame::Watermark(w))], false),
        };
        let mut credit = Some(credit);
        let last = frames.len().saturating_sub(1);
        for (k, frame) in frames.into_iter().enumerate() {
            while takes_credits && credits <= 0 && overtaken.is_none() {
                tokio::select! {
                    biased;
                    Some(b) = crate::exec::send::recv_lane(&mut priority) => {
                        if send_priority(c, &b).await.is_err() {
                            return;
                        }
                        overtaken = overtaken.max(Some(b.id));
                    }
                    credit = recv::<DataFrame>(c) => match credit {
                        Ok(Some(DataFrame::Credit(n))) => {
                            credits += i64::from(n);
                            returned(&mut outstanding, n);
                        }
                        _ => return,
                    },
                }
            }
            if send_frame(c, frame).await.is_err() {
                return;
            }
            if takes_credits {
                credits -= 1;
                // One entry per frame (the downstream side returns one credit per frame); the
                // batch's own credit goes with its last frame.
                let held = if k == last { credit.take() } else { None };
                outstanding.push_back(held.unwrap_or_else(Credit::none));
            }
        }
        if in_band_id.is_some() && in_band_id >= overtaken {
            overtaken = None;
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
            // A panic here (a bug) is logged naming the channel; the subtask's input then
            // closes without end-of-stream, which fails the subtask.
            let what = || format!("the data channel from task {up} to task {down}");
            let _ = crate::exec::panics::catch_panic(what, read_channel(conn, channel, stores)).await;
        });
    }
}

/// Downstream side: hands each frame to the subtask's input at once (a priority barrier to
/// its priority lane) and grants a records frame's credit back when the subtask has processed
/// it. A connection that drops before end-of-stream drops the input sender, which the subtask
/// reports as a failure.
async fn read_channel(mut conn: Conn, channel: InboundChannel, stores: StoreCache) {
    let InboundChannel {
        input: tx,
        mut returned,
        priority,
    } = channel;
    loop {
        let frame = tokio::select! {
            biased;
            Some(()) = returned.recv() => {
                let mut n = 1;
                while returned.try_recv().is_ok() {
                    n += 1;
                }
                // A connection lost is found when reading.
                let _ = send(&mut conn, &DataFrame::Credit(n)).await;
                continue;
            }
            frame = recv_data(&mut conn) => frame,
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
            Ok(Some(DataFrame::End)) => Element::End,
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
        let is_end = matches!(el, Element::End);
        // The local end of a remote channel never waits: the network credits bound it.
        if tx.try_send(el).is_err() || is_end {
            return;
        }
    }
}

/// Encodes a small control frame (barrier, end-of-stream): these always serialize.
fn encode_frame(frame: &DataFrame) -> bytes::Bytes {
    bytes::Bytes::from(serde_json::to_vec(frame).unwrap_or_default())
}

#[cfg(test)]
#[path = "data_channel_tests.rs"]
mod tests;
