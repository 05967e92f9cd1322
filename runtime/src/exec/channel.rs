//! Data channels between subtasks, with credit-based flow control as in Flink's network
//! stack: a channel holds at most [`super::CHANNEL_CAPACITY`] batches of records that are
//! *not yet processed*, not merely not yet received. Barriers, watermarks and end-of-stream
//! take no credit (a few per checkpoint or batch), so a barrier never waits for room.
//!
//! Why not a bounded `tokio::sync::mpsc` channel: its capacity frees as soon as the receiver
//! takes an element. A subtask that records an input as channel state of an unaligned
//! checkpoint takes everything ahead of the in-band barrier into a local queue at once; with a
//! plain bounded channel every such drain let the upstream subtask refill the channel, so
//! back-to-back checkpoints under sustained backpressure grew the queue without limit (or,
//! with the drain bounded to one channel's worth, each checkpoint waited for a channel's worth
//! of processing: 1 checkpoint in 15 s, 8.9 s each, in `tests/unaligned.rs`). Here the
//! receiver keeps a batch's [`Credit`] until the batch is processed
//! ([`DataReceiver::try_recv_held`]), so a drain frees nothing.
//!
//! Between workers the credit is returned end to end: the receiving worker hands batches on
//! without waiting and returns a batch's credit over the network when the subtask has
//! processed it ([`returned_channel`]); the sending worker holds the upstream subtask's credit
//! of each batch until then. What is in flight on a channel, local or remote, stays within one
//! channel's capacity wherever it waits.

use super::messages::Element;
use std::sync::Arc;
use std::task::{Context, Poll};
use tokio::sync::mpsc::error::{TryRecvError, TrySendError};
use tokio::sync::{Semaphore, TryAcquireError, mpsc};

/// Where a processed batch's credit goes.
#[derive(Debug)]
enum Credits {
    /// Back to the channel's free credits, which its senders wait for.
    Local { free: Semaphore, capacity: usize },
    /// To the receiving side of a remote channel, which grants it to the upstream worker; the
    /// local senders never wait (the network credits bound what arrives).
    Returned(mpsc::UnboundedSender<()>),
}

impl Credits {
    fn release(&self) {
        match self {
            Credits::Local { free, .. } => free.add_permits(1),
            Credits::Returned(back) => {
                let _ = back.send(());
            }
        }
    }
}

fn takes_credit(el: &Element) -> bool {
    matches!(el, Element::Records(_) | Element::Columns(_))
}

/// A data channel between two subtasks of one process, of `capacity` batches
/// ([`super::CHANNEL_CAPACITY`]).
pub fn data_channel(capacity: usize) -> (DataSender, DataReceiver) {
    with_credits(Credits::Local {
        free: Semaphore::new(capacity),
        capacity,
    })
}

/// The local end of a remote channel, on the receiving worker: sends never wait, and each
/// processed batch's credit comes out of the returned receiver, for the worker to grant to
/// the upstream worker.
pub fn returned_channel() -> (DataSender, DataReceiver, mpsc::UnboundedReceiver<()>) {
    let (back, returned) = mpsc::unbounded_channel();
    let (tx, rx) = with_credits(Credits::Returned(back));
    (tx, rx, returned)
}

fn with_credits(credits: Credits) -> (DataSender, DataReceiver) {
    let (tx, rx) = mpsc::unbounded_channel();
    let credits = Arc::new(credits);
    (
        DataSender {
            tx,
            credits: credits.clone(),
        },
        DataReceiver { rx, credits },
    )
}

/// The sending side of a data channel. Cloning gives another sender of the same channel.
#[derive(Debug, Clone)]
pub struct DataSender {
    tx: mpsc::UnboundedSender<Element>,
    credits: Arc<Credits>,
}

/// A credit taken by [`DataSender::reserve`]: [`DataPermit::send`] uses it; dropping it
/// unused gives it back.
pub struct DataPermit<'a> {
    sender: &'a DataSender,
    used: bool,
}

impl DataPermit<'_> {
    /// Sends `el` on the reserved credit (a receiver that is gone drops it, as tokio's does).
    pub fn send(mut self, el: Element) {
        if takes_credit(&el) {
            self.used = true;
        }
        let _ = self.sender.tx.send(el);
    }
}

impl Drop for DataPermit<'_> {
    fn drop(&mut self) {
        if !self.used
            && let Credits::Local { free, .. } = &*self.sender.credits
        {
            free.add_permits(1);
        }
    }
}

impl DataSender {
    /// Sends `el` if it needs no credit or one is free; `Full` otherwise, `Closed` when the
    /// receiver is gone.
    pub fn try_send(&self, el: Element) -> Result<(), TrySendError<Element>> {
        if self.tx.is_closed() {
            return Err(TrySendError::Closed(el));
        }
        if let (true, Credits::Local { free, .. }) = (takes_credit(&el), &*self.credits) {
            match free.try_acquire() {
                Ok(permit) => permit.forget(),
                Err(TryAcquireError::NoPermits) => return Err(TrySendError::Full(el)),
                Err(TryAcquireError::Closed) => return Err(TrySendError::Closed(el)),
            }
        }
        self.tx.send(el).map_err(|e| TrySendError::Closed(e.0))
    }

    /// Sends `el`, first waiting for a credit if it takes one; `Err(el)` when the receiver is
    /// gone.
    pub async fn send(&self, el: Element) -> Result<(), Element> {
        if !takes_credit(&el) {
            return self.tx.send(el).map_err(|e| e.0);
        }
        match self.reserve().await {
            Ok(permit) => {
                permit.send(el);
                Ok(())
            }
            Err(()) => Err(el),
        }
    }

    /// Waits for a credit for one batch (cancel safe: dropping the future loses only the place
    /// in line); `Err` when the receiver is gone.
    pub async fn reserve(&self) -> Result<DataPermit<'_>, ()> {
        if let Credits::Local { free, .. } = &*self.credits {
            free.acquire().await.map_err(|_| ())?.forget();
        }
        let permit = DataPermit {
            sender: self,
            used: false,
        };
        if self.tx.is_closed() {
            return Err(());
        }
        Ok(permit)
    }

    /// Credits free now (always the capacity for the local end of a remote channel).
    pub fn capacity(&self) -> usize {
        match &*self.credits {
            Credits::Local { free, .. } => free.available_permits(),
            Credits::Returned(_) => super::CHANNEL_CAPACITY,
        }
    }

    /// The channel's capacity in batches.
    pub fn max_capacity(&self) -> usize {
        match &*self.credits {
            Credits::Local { capacity, .. } => *capacity,
            Credits::Returned(_) => super::CHANNEL_CAPACITY,
        }
    }
}

/// The receiving side of a data channel. Dropping it closes the channel: senders waiting for
/// a credit fail.
#[derive(Debug)]
pub struct DataReceiver {
    rx: mpsc::UnboundedReceiver<Element>,
    credits: Arc<Credits>,
}

impl Drop for DataReceiver {
    fn drop(&mut self) {
        if let Credits::Local { free, .. } = &*self.credits {
            free.close();
        }
    }
}

/// The credit of one received batch, given back when dropped: when the batch has been
/// processed. Other elements carry none.
#[derive(Debug)]
#[must_use = "dropping the credit gives it back at once"]
pub struct Credit(Option<Arc<Credits>>);

impl Credit {
    /// No credit (an element that takes none, or one that did not come from a channel).
    pub fn none() -> Credit {
        Credit(None)
    }
}

impl Drop for Credit {
    fn drop(&mut self) {
        if let Some(c) = self.0.take() {
            c.release();
        }
    }
}

impl DataReceiver {
    fn held(&self, el: Element) -> (Element, Credit) {
        let credit = match takes_credit(&el) {
            true => Credit(Some(self.credits.clone())),
            false => Credit::none(),
        };
        (el, credit)
    }

    /// The next element with its credit, which stays taken until the [`Credit`] is dropped.
    pub fn try_recv_held(&mut self) -> Result<(Element, Credit), TryRecvError> {
        self.rx.try_recv().map(|el| self.held(el))
    }

    /// Polls for the next element with its credit (`None`: every sender is gone).
    pub fn poll_recv_held(&mut self, cx: &mut Context<'_>) -> Poll<Option<(Element, Credit)>> {
        match self.rx.poll_recv(cx) {
            Poll::Ready(Some(el)) => Poll::Ready(Some(self.held(el))),
            Poll::Ready(None) => Poll::Ready(None),
            Poll::Pending => Poll::Pending,
        }
    }

    /// The next element with its credit (`None`: every sender is gone).
    pub async fn recv_held(&mut self) -> Option<(Element, Credit)> {
        std::future::poll_fn(|cx| self.poll_recv_held(cx)).await
    }

    /// The next element; its credit is given back at once (`None`: every sender is gone).
    pub async fn recv(&mut self) -> Option<Element> {
        self.recv_held().await.map(|(el, _)| el)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn batch() -> Element {
        Element::Records(vec![])
    }

    #[test]
    fn a_batch_held_by_the_receiver_keeps_its_credit_until_processed() {
        let (tx, mut rx) = data_channel(2);
        tx.try_send(batch()).unwrap();
        tx.try_send(batch()).unwrap();
        assert!(matches!(tx.try_send(batch()), Err(TrySendError::Full(_))));
        // Received but not processed: the channel stays full (a bounded tokio channel would
        // have room again here).
        let (_, first) = rx.try_recv_held().unwrap();
        let (_, second) = rx.try_recv_held().unwrap();
        assert!(matches!(tx.try_send(batch()), Err(TrySendError::Full(_))));
        drop(first);
        tx.try_send(batch()).unwrap();
        drop(second);
        assert_eq!(tx.capacity(), 1);
    }

    #[test]
    fn barriers_watermarks_and_end_of_stream_take_no_credit() {
        let (tx, mut rx) = data_channel(1);
        tx.try_send(batch()).unwrap();
        tx.try_send(Element::End).unwrap();
        tx.try_send(Element::Watermark(crate::exec::watermark::Watermark::Idle))
            .unwrap();
        let (_, credit) = rx.try_recv_held().unwrap();
        assert!(credit.0.is_some());
        let (el, credit) = rx.try_recv_held().unwrap();
        assert!(matches!(el, Element::End) && credit.0.is_none());
    }

    #[tokio::test]
    async fn a_sender_waiting_for_a_credit_fails_when_the_receiver_is_gone() {
        let (tx, rx) = data_channel(1);
        tx.try_send(batch()).unwrap();
        let waiting = tokio::spawn(async move { tx.send(batch()).await.is_err() });
        tokio::task::yield_now().await;
        drop(rx);
        assert!(waiting.await.unwrap());
    }

    #[tokio::test]
    async fn a_remote_channels_credit_comes_back_when_the_batch_is_processed() {
        let (tx, mut rx, mut returned) = returned_channel();
        for _ in 0..3 {
            tx.try_send(batch()).unwrap();
        }
        tx.try_send(Element::End).unwrap();
        let held: Vec<Credit> = (0..4).map(|_| rx.try_recv_held().unwrap().1).collect();
        assert!(returned.try_recv().is_err(), "nothing processed yet");
        drop(held);
        for _ in 0..3 {
            returned.try_recv().unwrap();
        }
        assert!(returned.try_recv().is_err(), "end-of-stream took no credit");
    }
}
