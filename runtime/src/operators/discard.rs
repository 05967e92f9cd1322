//! The discard sink (`sink: { discard: {} }`), as Flink's `blackhole` connector: records are
//! counted by the subtask (its `records_in` metric, like every operator's) and dropped.
//!
//! It writes nothing, so it has nothing to pre-commit at a barrier and nothing to commit when
//! a checkpoint completes: it keeps no state, and exactly-once holds trivially. Benchmarks use
//! it to measure the pipeline without the cost of an output format; tests use it to run a job
//! to completion without output files.

use super::{StreamOperator, TaskResult};
use crate::record::Record;
use async_trait::async_trait;

/// The discard sink subtask: drops every batch it is given, at most `maxRecordsPerSecond`
/// records per second when throttled (it sleeps until the records it took are due, so a slow
/// sink backpressures the job as a slow external system would).
#[derive(Default)]
pub struct DiscardSink {
    /// `(limit in records per second, when the first record came, records taken)`.
    throttle: Option<(u64, Option<std::time::Instant>, u64)>,
}

impl DiscardSink {
    /// A sink taking at most `max_records_per_second` records per second (`None`: no limit).
    pub fn new(max_records_per_second: Option<u64>) -> DiscardSink {
        DiscardSink {
            throttle: max_records_per_second.filter(|r| *r > 0).map(|r| (r, None, 0)),
        }
    }
}

/// How long a throttled sink that took `taken` records since `elapsed` ago waits so that its
/// rate stays at most `rate` records per second: `taken / rate − elapsed`, or zero.
pub fn throttle_delay(rate: u64, taken: u64, elapsed: std::time::Duration) -> std::time::Duration {
    std::time::Duration::from_secs_f64(taken as f64 / rate.max(1) as f64).saturating_sub(elapsed)
}

#[async_trait]
impl StreamOperator for DiscardSink {
    async fn process(&mut self, input: Vec<Record>, _out: &mut Vec<Record>) -> TaskResult<()> {
        if let Some((rate, started, taken)) = &mut self.throttle {
            let started = *started.get_or_insert_with(std::time::Instant::now);
            *taken += input.len() as u64;
            let delay = throttle_delay(*rate, *taken, started.elapsed());
            if !delay.is_zero() {
                tokio::time::sleep(delay).await;
            }
        }
        drop(input);
        Ok(())
    }
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
