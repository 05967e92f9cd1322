//! Heartbeat liveness that does not blame a peer for this process's own stalls.
//!
//! A peer is lost after `--heartbeat-timeout` without a message. Measured naively on the wall
//! clock, a stall of *this* process (an overloaded node, CPU throttling by a container limit, a
//! paused VM) looks like silence from every peer at once: their heartbeats wait in the socket
//! buffers while nothing reads them, and the first check after the stall declares them all lost.
//! The job then restarts for no fault of any worker (seen on a node at load 34: all four workers
//! of a job "lost" within 400 ms, four restarts in a minute).
//!
//! So the periodic check measures how late it ran itself: lateness beyond one check period is a
//! stall of this process, and it is added to every peer's last-heard instant (never past now).
//! A peer that is really silent while this process runs on time is still lost after the timeout.
//! Phi-accrual detectors (Hayashibara et al., 2004; Akka, Cassandra) solve a wider problem; this
//! is the part a fixed timeout needs.

use std::time::{Duration, Instant};

/// Measures this process's stalls from the lateness of a periodic check.
#[derive(Debug, Clone)]
pub struct StallClock {
    period: Duration,
    last_check: Instant,
}

impl StallClock {
    /// A clock for checks every `period`, the first expected one `period` after `now`.
    pub fn new(period: Duration, now: Instant) -> StallClock {
        StallClock {
            period,
            last_check: now,
        }
    }

    /// Called at each check: how long this process stalled since the previous check. A check
    /// that runs up to two periods after the previous one is on time (zero stall); beyond that,
    /// everything past one period is stall.
    pub fn check(&mut self, now: Instant) -> Duration {
        let since_last = now.saturating_duration_since(self.last_check);
        self.last_check = now;
        if since_last > self.period * 2 {
            since_last - self.period
        } else {
            Duration::ZERO
        }
    }
}

/// `last_heard` moved forward by `stall` (time this process did not run), never past `now`.
pub fn discount_stall(last_heard: Instant, stall: Duration, now: Instant) -> Instant {
    (last_heard + stall).min(now).max(last_heard)
}

/// Whether a peer last heard at `last_heard` is lost at `now` with `timeout`.
pub fn is_lost(last_heard: Instant, now: Instant, timeout: Duration) -> bool {
    now.saturating_duration_since(last_heard) > timeout
}

#[cfg(test)]
mod tests {
    use super::*;

    const MS: Duration = Duration::from_millis(1);

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    /// Checks every 200 ms from `from_ms` (exclusive) to `to_ms` (inclusive).
    fn on_time(from_ms: u64, to_ms: u64) -> Vec<u64> {
        ((from_ms / 200 + 1)..=(to_ms / 200)).map(|i| i * 200).collect()
    }

    /// One row: checks at these offsets (ms after start), a peer last heard at `heard_ms`,
    /// timeout 5 s, period 200 ms. Is the peer lost at the last check?
    #[test]
    fn liveness_table() {
        struct Row {
            name: &'static str,
            checks_ms: Vec<u64>,
            heard_ms: u64,
            lost: bool,
        }
        let rows = [
            Row {
                name: "peer silent 5.2 s while this process ran on time: lost",
                checks_ms: on_time(0, 5200),
                heard_ms: 0,
                lost: true,
            },
            Row {
                name: "peer silent 4.8 s while this process ran on time: not lost",
                checks_ms: on_time(0, 4800),
                heard_ms: 0,
                lost: false,
            },
            Row {
                name: "this process stalled 6 s (one late check): not lost",
                checks_ms: vec![200, 6200],
                heard_ms: 0,
                lost: false,
            },
            Row {
                name: "stall of 3 s after 2.4 s of real silence: 2.6 s counted, not lost",
                checks_ms: [on_time(0, 2400), vec![5400]].concat(),
                heard_ms: 0,
                lost: false,
            },
            Row {
                name: "stall of 3 s, then 5.2 s of real silence on time: lost",
                checks_ms: [on_time(0, 2400), vec![5400], on_time(5400, 10600)].concat(),
                heard_ms: 0,
                lost: true,
            },
            Row {
                name: "checks late by less than a period are on time: lost at 5.46 s",
                checks_ms: (1..=14).map(|i| i * 390).collect(),
                heard_ms: 0,
                lost: true,
            },
            Row {
                name: "heard recently: not lost",
                checks_ms: on_time(0, 5200),
                heard_ms: 4000,
                lost: false,
            },
        ];
        for row in rows {
            let start = Instant::now();
            let mut clock = StallClock::new(200 * MS, start);
            let mut last_heard = start + ms(row.heard_ms);
            let mut lost = false;
            for &at in &row.checks_ms {
                let now = start + ms(at);
                let stall = clock.check(now);
                if now >= last_heard {
                    last_heard = discount_stall(last_heard, stall, now);
                }
                lost = is_lost(last_heard, now, 5000 * MS);
            }
            assert_eq!(lost, row.lost, "{}", row.name);
        }
    }

    #[test]
    fn discount_never_moves_past_now_or_backwards() {
        let t = Instant::now();
        assert_eq!(discount_stall(t, 10 * MS, t + 4 * MS), t + 4 * MS);
        assert_eq!(discount_stall(t, 10 * MS, t + 40 * MS), t + 10 * MS);
        assert_eq!(discount_stall(t + 5 * MS, 10 * MS, t), t + 5 * MS);
    }
}
