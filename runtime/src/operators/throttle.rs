//! A sink throttle (`maxRecordsPerSecond` on the `file` and `discard` sinks): the wrapped sink
//! takes at most that many records per second per subtask; it sleeps until the records it took
//! are due, so a slow sink backpressures the job as a slow external system would. For studying
//! checkpoints under backpressure (aligned vs unaligned) and for benchmarks.

use super::{SnapshotEncoder, StreamOperator, TaskResult};
use crate::checkpoint::Barrier;
use crate::record::Record;
use async_trait::async_trait;
use std::time::{Duration, Instant};

/// A sink wrapped with a rate limit.
pub struct Throttled {
    inner: Box<dyn StreamOperator>,
    rate: u64,
    /// When the first record came, and records taken since.
    started: Option<Instant>,
    taken: u64,
}

impl Throttled {
    /// `inner`, at most `max_records_per_second` records per second; `None` leaves it as it is.
    pub fn wrap(inner: Box<dyn StreamOperator>, max_records_per_second: Option<u64>) -> Box<dyn StreamOperator> {
        match max_records_per_second.filter(|r| *r > 0) {
            Some(rate) => Box::new(Throttled {
                inner,
                rate,
                started: None,
                taken: 0,
            }),
            None => inner,
        }
    }
}

/// How long a throttled sink that took `taken` records since `elapsed` ago waits so that its
/// rate stays at most `rate` records per second: `taken / rate − elapsed`, or zero.
pub fn throttle_delay(rate: u64, taken: u64, elapsed: Duration) -> Duration {
    Duration::from_secs_f64(taken as f64 / rate.max(1) as f64).saturating_sub(elapsed)
}

#[async_trait]
impl StreamOperator for Throttled {
    async fn process(&mut self, input: Vec<Record>, out: &mut Vec<Record>) -> TaskResult<()> {
        let started = *self.started.get_or_insert_with(Instant::now);
        self.taken += input.len() as u64;
        let delay = throttle_delay(self.rate, self.taken, started.elapsed());
        if !delay.is_zero() {
            tokio::time::sleep(delay).await;
        }
        self.inner.process(input, out).await
    }

    async fn snapshot(&mut self, barrier: &Barrier) -> TaskResult<Option<SnapshotEncoder>> {
        self.inner.snapshot(barrier).await
    }

    async fn notify_complete(&mut self, id: u64) -> TaskResult<()> {
        self.inner.notify_complete(id).await
    }
}

/// `maxRecordsPerSecond` of the sink at step `index` (file or discard), if any.
pub fn sink_rate_limit(job: &crate::job::Job, index: usize) -> Option<u64> {
    let sink = job.spec.job.steps.get(index)?.sink.as_ref()?;
    sink.file
        .as_ref()
        .and_then(|f| f.max_records_per_second)
        .or_else(|| sink.discard.as_ref().and_then(|d| d.max_records_per_second))
}

#[cfg(test)]
mod tests {
    use super::throttle_delay;
    use std::time::Duration;

    #[test]
    fn throttle_delay_keeps_the_rate() {
        let ms = Duration::from_millis;
        // (rate, taken, elapsed) -> delay
        for (rate, taken, elapsed, want) in [
            (100, 100, ms(0), ms(1000)),
            (100, 100, ms(400), ms(600)),
            (100, 100, ms(1500), ms(0)),
            (1000, 10, ms(0), ms(10)),
        ] {
            assert_eq!(throttle_delay(rate, taken, elapsed), want, "{rate} {taken} {elapsed:?}");
        }
    }
}
