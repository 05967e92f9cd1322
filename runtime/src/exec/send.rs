//! Sending a subtask's output, interruptibly under unaligned checkpoints.
//!
//! A subtask blocked on a full output channel cannot take a barrier from its inputs. With
//! unaligned checkpoints that would hold every checkpoint behind the slowest downstream batch,
//! so a blocked send also listens for what starts an unaligned snapshot — a barrier on the
//! subtask's priority lane, a checkpoint trigger at a source, the alignment deadline — and
//! returns it, leaving the rest of the output in [`TaskCore::unsent`]. The chain has processed
//! the whole input batch by then, so the snapshot may be taken at once; the in-band barrier
//! overtakes the unsent rest, which the subtask stores as channel state of the downstream stage
//! ([`TaskCore::forward_barrier`]). While the subtask records its inputs as channel state, a
//! blocked send also returns what arrives on them ([`Interrupt::Input`]), so the in-band
//! barriers that complete the checkpoint are taken while the output is still blocked.

use super::channel::{Credit, DataPermit, DataReceiver, DataSender};
use super::messages::{Control, Element};
use super::task::TaskCore;
use crate::checkpoint::Barrier;
use crate::control::api::SnapshotKind;
use crate::operators::{TaskError, TaskResult};
use std::sync::atomic::Ordering;
use std::time::Instant;
use tokio::sync::mpsc::error::TrySendError;

/// What interrupted a blocked send.
#[derive(Debug)]
pub enum Interrupt {
    /// A checkpoint barrier to take unaligned (or, with an alignment timeout, its announcement).
    Barrier(Barrier),
    /// The alignment deadline passed.
    Deadline,
    /// An element (with its credit) arrived on input `.0`, which is being recorded as channel
    /// state.
    Input(usize, Element, Credit),
}

/// The inputs a blocked send also watches: those being recorded as channel state
/// (`recording[i]`).
pub struct Watched<'a> {
    /// The subtask's input channels.
    pub inputs: &'a mut [DataReceiver],
    /// Which of them are being recorded.
    pub recording: Vec<bool>,
}

/// The next element of a watched input; never, without one.
fn poll_watched(
    watched: &mut Option<Watched<'_>>,
    cx: &mut std::task::Context<'_>,
) -> std::task::Poll<(usize, Option<(Element, Credit)>)> {
    let Some(w) = watched else {
        return std::task::Poll::Pending;
    };
    for (i, input) in w.inputs.iter_mut().enumerate() {
        if w.recording[i]
            && let std::task::Poll::Ready(el) = input.poll_recv_held(cx)
        {
            return std::task::Poll::Ready((i, el));
        }
    }
    std::task::Poll::Pending
}

enum Waited<'a> {
    Permit(DataPermit<'a>),
    Interrupted(Interrupt),
    Deferred(Control),
    Gone,
}

fn gone() -> TaskError {
    TaskError("downstream subtask is gone".into())
}

impl TaskCore {
    /// Sends [`TaskCore::unsent`] in order. When `interruptible` and checkpoints may be
    /// unaligned, a blocked send returns early with what interrupted it (the element stays
    /// first in `unsent`); other control messages that arrive meanwhile are deferred to
    /// [`TaskCore::deferred`].
    pub(super) async fn flush(
        &mut self,
        deadline: Option<Instant>,
        interruptible: bool,
    ) -> TaskResult<Option<Interrupt>> {
        self.flush_watching(deadline, interruptible, None).await
    }

    /// [`TaskCore::flush`], returning also what arrives meanwhile on the `watched` inputs.
    pub(super) async fn flush_watching(
        &mut self,
        deadline: Option<Instant>,
        interruptible: bool,
        mut watched: Option<Watched<'_>>,
    ) -> TaskResult<Option<Interrupt>> {
        let interruptible = interruptible && self.unaligned_after.is_some();
        while let Some((i, el)) = self.unsent.pop_front() {
            let sender = self.output.senders()[i].clone();
            let el = match sender.try_send(el) {
                Ok(()) => {
                    self.sampled_buffers(&sender);
                    continue;
                }
                Err(TrySendError::Closed(_)) => return Err(gone()),
                Err(TrySendError::Full(el)) => el,
            };
            let t = Instant::now();
            if !interruptible {
                let r = sender.send(el).await;
                self.waited(t, &sender);
                r.map_err(|_| gone())?;
                continue;
            }
            loop {
                let waited = tokio::select! {
                    biased;
                    c = self.control.recv(), if self.interruptible_by_trigger => match c {
                        Some(Control::Trigger(b)) if b.kind == SnapshotKind::Checkpoint && !b.is_final => {
                            Waited::Interrupted(Interrupt::Barrier(b))
                        }
                        Some(other) => Waited::Deferred(other),
                        None => Waited::Gone,
                    },
                    Some(b) = recv_lane(&mut self.interrupt_lane) => Waited::Interrupted(Interrupt::Barrier(b)),
                    _ = sleep_until(deadline) => Waited::Interrupted(Interrupt::Deadline),
                    (i, el) = std::future::poll_fn(|cx| poll_watched(&mut watched, cx)) => match el {
                        Some((el, credit)) => Waited::Interrupted(Interrupt::Input(i, el, credit)),
                        None => {
                            return Err(TaskError(format!(
                                "input {i} closed without end-of-stream (upstream lost)"
                            )));
                        }
                    },
                    permit = sender.reserve() => match permit {
                        Ok(permit) => Waited::Permit(permit),
                        Err(_) => Waited::Gone,
                    },
                };
                match waited {
                    Waited::Deferred(c) => self.deferred.push_back(c),
                    Waited::Gone => return Err(gone()),
                    Waited::Permit(permit) => {
                        permit.send(el);
                        self.waited(t, &sender);
                        break;
                    }
                    Waited::Interrupted(x) => {
                        self.waited(t, &sender);
                        self.unsent.push_front((i, el));
                        return Ok(Some(x));
                    }
                }
            }
        }
        Ok(None)
    }

    /// Sends an element made by `make` to every output channel, in band, after the unsent
    /// output (not interruptible: a barrier or end-of-stream must follow what precedes it).
    pub(super) async fn broadcast_in_band(&mut self, make: impl Fn() -> Element) -> TaskResult<()> {
        self.flush(None, false).await?;
        super::outputs::Outputs::broadcast(self.output.senders(), make, &self.metrics).await
    }

    fn sampled_buffers(&self, sender: &DataSender) {
        self.metrics
            .output_buffers_used
            .store((sender.max_capacity() - sender.capacity()) as u64, Ordering::Relaxed);
    }

    fn waited(&self, since: Instant, sender: &DataSender) {
        self.metrics
            .backpressured_ns
            .fetch_add(since.elapsed().as_nanos() as u64, Ordering::Relaxed);
        self.sampled_buffers(sender);
    }
}

/// The next barrier of a priority lane; never, without one.
pub async fn recv_lane(lane: &mut Option<tokio::sync::mpsc::UnboundedReceiver<Barrier>>) -> Option<Barrier> {
    match lane {
        Some(r) => r.recv().await,
        None => std::future::pending().await,
    }
}

/// Sleeps until `deadline`; for ever, without one.
pub(super) async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(d.into()).await,
        None => std::future::pending().await,
    }
}
