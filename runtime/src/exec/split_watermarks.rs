//! Per-split watermarks (pure arithmetic): a source subtask that reads several splits (Kafka
//! partitions) generates a bounded-out-of-orderness watermark per split and emits the minimum
//! over its splits, as Flink's `SourceOperator` does with per-split watermark generation
//! (`WatermarkOutputMultiplexer`): a split idle for `idleTimeout` (no record, processing time)
//! is left out of the minimum until it reads again, a finished split (a bounded partition at
//! its end offset) is left out for good, and the emitted watermark never moves back.
//!
//! So one partition far ahead of another does not make the other's records late, and which
//! records are late depends on each partition's own order, not on how the client interleaves
//! partitions. A split that has read nothing yet holds the watermark at "none" until it reads
//! or goes idle (Flink's behaviour too: an empty partition of an unbounded topic holds back
//! event time unless `idleTimeout` is set).

use super::watermark::{NO_WATERMARK, Segment, Watermark};
use std::collections::BTreeMap;
use std::time::{Duration, Instant};

/// Identifies a split within one source subtask (the source numbers its splits).
pub type SplitId = u32;

/// One split's clock.
#[derive(Clone, Debug)]
struct SplitClock {
    /// Largest event time read from the split (epoch ms), or [`NO_WATERMARK`].
    max_seen: i64,
    /// When the split last read a record (or was added).
    last_active: Instant,
    /// The split has no more records: left out of the minimum for good.
    finished: bool,
}

/// The watermarks of one source subtask's splits and the subtask's combined watermark.
#[derive(Clone, Debug)]
pub struct SplitWatermarks {
    bound_ms: i64,
    idle_timeout: Option<Duration>,
    splits: BTreeMap<SplitId, SplitClock>,
    /// When the generator was created (a subtask with no split at all goes idle after the
    /// idle timeout).
    created: Instant,
    /// The last watermark emitted.
    emitted: i64,
    /// Whether [`Watermark::Idle`] was emitted and no watermark since.
    idle_sent: bool,
    /// The split of each record of the current batch, in order ([`SplitWatermarks::record_from`]).
    batch_splits: Vec<SplitId>,
    /// Splits that finished with the current batch ([`SplitWatermarks::finish`]).
    finished: Vec<SplitId>,
}

impl SplitWatermarks {
    /// Per-split generation allowing records `bound_ms` behind their split's largest event
    /// time; splits with no record for `idle_timeout` are left out (`None`: never).
    pub fn new(bound_ms: i64, idle_timeout: Option<Duration>, now: Instant) -> SplitWatermarks {
        SplitWatermarks {
            bound_ms,
            idle_timeout,
            splits: BTreeMap::new(),
            created: now,
            emitted: NO_WATERMARK,
            idle_sent: false,
            batch_splits: Vec::new(),
            finished: Vec::new(),
        }
    }

    /// Adds split `id` with the largest event time it had read (`NO_WATERMARK`: none; a
    /// restore passes the checkpointed one).
    pub fn add_split(&mut self, id: SplitId, max_seen: i64, now: Instant) {
        self.splits.insert(
            id,
            SplitClock {
                max_seen,
                last_active: now,
                finished: false,
            },
        );
    }

    /// The largest event time split `id` has read (for the checkpoint; also after it
    /// finished), if it is tracked.
    pub fn max_seen(&self, id: SplitId) -> Option<i64> {
        self.splits.get(&id).map(|c| c.max_seen)
    }

    /// The source appended a record of split `id` to the current batch.
    pub fn record_from(&mut self, id: SplitId) {
        self.batch_splits.push(id);
    }

    /// Split `id` has no more records (it is left out after the current batch's records).
    pub fn finish(&mut self, id: SplitId) {
        self.finished.push(id);
    }

    /// The watermark of split `clock`: largest event time − bound − 1 ms.
    fn of(&self, clock: &SplitClock) -> i64 {
        if clock.max_seen == NO_WATERMARK {
            NO_WATERMARK
        } else {
            clock.max_seen.saturating_sub(self.bound_ms).saturating_sub(1)
        }
    }

    fn is_idle(&self, clock: &SplitClock, now: Instant) -> bool {
        self.idle_timeout
            .is_some_and(|t| now.saturating_duration_since(clock.last_active) >= t)
    }

    /// The minimum over the active splits' watermarks (not finished, not idle); `None` when
    /// no split is active (all idle, or none unfinished and the idle timeout passed since
    /// creation: the subtask is idle). With no unfinished split and no idle timeout elapsed,
    /// [`NO_WATERMARK`].
    fn combined(&self, now: Instant) -> Option<i64> {
        let mut live = self.splits.values().filter(|c| !c.finished).peekable();
        if live.peek().is_none() {
            let idle = self
                .idle_timeout
                .is_some_and(|t| now.saturating_duration_since(self.created) >= t);
            return (!idle).then_some(NO_WATERMARK);
        }
        live.filter(|c| !self.is_idle(c, now)).map(|c| self.of(c)).min()
    }

    /// Cuts the current batch (records with event times `times`, their splits as
    /// [`SplitWatermarks::record_from`] gave them) into records and watermarks, as
    /// [`BoundedOutOfOrderness::split_batch`](super::watermark::BoundedOutOfOrderness::split_batch)
    /// does for one split: the combined watermark goes out after the batch when it advanced,
    /// and just before any record at or behind it. A subtask that had sent `Idle` first sends
    /// its watermark again (active). Splits finished with the batch are left out after its
    /// records.
    pub fn split_batch(&mut self, times: &[i64], now: Instant) -> Vec<Segment> {
        let splits = std::mem::take(&mut self.batch_splits);
        debug_assert_eq!(splits.len(), times.len(), "one split per record of the batch");
        let mut out = Vec::with_capacity(2);
        if !times.is_empty() && std::mem::replace(&mut self.idle_sent, false) {
            out.push(Segment::Watermark(self.emitted));
        }
        let mut start = 0;
        let mut current = self.combined(now);
        for (i, (&t, split)) in times.iter().zip(&splits).enumerate() {
            if let Some(c) = current
                && t <= c
                && c > self.emitted
            {
                if start < i {
                    out.push(Segment::Records(start..i));
                }
                out.push(Segment::Watermark(c));
                self.emitted = c;
                start = i;
            }
            let was_idle = self.splits.get(split).is_some_and(|c| self.is_idle(c, now));
            if let Some(clock) = self.splits.get_mut(split) {
                let advanced = t > clock.max_seen;
                clock.max_seen = clock.max_seen.max(t);
                clock.last_active = now;
                if advanced || was_idle {
                    current = self.combined(now);
                }
            }
        }
        if start < times.len() {
            out.push(Segment::Records(start..times.len()));
        }
        if let Some(w) = self.after_batch(now) {
            match w {
                Watermark::Time(t) => out.push(Segment::Watermark(t)),
                // Every split finished or idle with records in the batch: the next tick says so.
                Watermark::Idle => self.idle_sent = false,
            }
        }
        out
    }

    /// Leaves out the splits finished with the batch and returns what to emit: a higher watermark, or `Idle` when no
    /// split is active (once).
    fn after_batch(&mut self, now: Instant) -> Option<Watermark> {
        for id in std::mem::take(&mut self.finished) {
            if let Some(clock) = self.splits.get_mut(&id) {
                clock.finished = true;
            }
        }
        match self.combined(now) {
            Some(c) if c > self.emitted => {
                self.emitted = c;
                self.idle_sent = false;
                Some(Watermark::Time(c))
            }
            Some(_) => None,
            None if self.idle_sent => None,
            None => {
                self.idle_sent = true;
                Some(Watermark::Idle)
            }
        }
    }

    /// A batch without records at `now`: splits may have finished or gone idle. Returns a
    /// higher watermark, or `Idle` once when no split is active any more.
    pub fn on_empty_batch(&mut self, now: Instant) -> Option<Watermark> {
        self.batch_splits.clear();
        self.after_batch(now)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use Segment::{Records, Watermark as Wm};

    /// One step: records `(split, time)` at `at_ms` after the start, splits finished with
    /// them, and the segments (`None`: an empty batch, whose result is `empty`).
    struct Step {
        at_ms: u64,
        records: Vec<(SplitId, i64)>,
        finished: Vec<SplitId>,
        want: Vec<Segment>,
        empty: Option<Watermark>,
    }

    fn batch(at_ms: u64, records: &[(SplitId, i64)], want: Vec<Segment>) -> Step {
        Step {
            at_ms,
            records: records.to_vec(),
            finished: vec![],
            want,
            empty: None,
        }
    }

    fn tick(at_ms: u64, empty: Option<Watermark>) -> Step {
        Step {
            at_ms,
            records: vec![],
            finished: vec![],
            want: vec![],
            empty,
        }
    }

    fn run(name: &str, bound: i64, idle_ms: Option<u64>, splits: &[(SplitId, i64)], steps: Vec<Step>) {
        let t0 = Instant::now();
        let mut w = SplitWatermarks::new(bound, idle_ms.map(Duration::from_millis), t0);
        for &(id, max_seen) in splits {
            w.add_split(id, max_seen, t0);
        }
        for (k, step) in steps.into_iter().enumerate() {
            let now = t0 + Duration::from_millis(step.at_ms);
            for (split, _) in &step.records {
                w.record_from(*split);
            }
            for id in &step.finished {
                w.finish(*id);
            }
            if step.records.is_empty() {
                assert_eq!(w.on_empty_batch(now), step.empty, "{name}: step {k} (empty batch)");
            } else {
                let times: Vec<i64> = step.records.iter().map(|r| r.1).collect();
                assert_eq!(w.split_batch(&times, now), step.want, "{name}: step {k}");
            }
        }
    }

    #[test]
    fn the_subtask_watermark_is_the_minimum_over_its_splits() {
        // Partition 0 far ahead of partition 1: the watermark follows partition 1, so its
        // records are on time (one watermark per subtask would have made 12 late).
        run(
            "skewed partitions",
            0,
            None,
            &[(0, NO_WATERMARK), (1, NO_WATERMARK)],
            vec![
                batch(0, &[(0, 100), (0, 200)], vec![Records(0..2)]),
                batch(1, &[(1, 10), (1, 12)], vec![Records(0..2), Wm(11)]),
                batch(2, &[(1, 50)], vec![Records(0..1), Wm(49)]),
                // 30 is behind the watermark 49: the watermark was sent already, no cut.
                batch(3, &[(1, 30), (0, 300)], vec![Records(0..2)]),
            ],
        );
        // A record behind the combined watermark within a batch gets the watermark before it.
        run(
            "cut before a late record",
            0,
            None,
            &[(0, NO_WATERMARK)],
            vec![batch(
                0,
                &[(0, 10), (0, 30), (0, 12)],
                vec![Records(0..2), Wm(29), Records(2..3)],
            )],
        );
        // Restored clocks: the watermark resumes from the checkpointed event times.
        run(
            "restored",
            5,
            None,
            &[(0, 1_000), (1, 2_000)],
            vec![batch(0, &[(1, 2_001)], vec![Records(0..1), Wm(994)])],
        );
    }

    #[test]
    fn finished_and_idle_splits_are_left_out() {
        // A finished split (bounded partition at its end) no longer holds the watermark.
        run(
            "finished",
            0,
            None,
            &[(0, NO_WATERMARK), (1, NO_WATERMARK)],
            vec![
                batch(0, &[(0, 10), (1, 100)], vec![Records(0..2), Wm(9)]),
                Step {
                    finished: vec![0],
                    ..batch(1, &[(0, 20)], vec![Records(0..1), Wm(99)])
                },
                tick(2, None),
            ],
        );
        // An empty partition holds the watermark until it is idle (1 s here); then the others
        // decide; when every split is idle the subtask says so once; a record wakes it.
        run(
            "idle",
            0,
            Some(1_000),
            &[(0, NO_WATERMARK), (1, NO_WATERMARK)],
            vec![
                batch(0, &[(0, 50)], vec![Records(0..1)]),
                tick(500, None),
                batch(900, &[(0, 60)], vec![Records(0..1)]),
                tick(1_000, Some(Watermark::Time(59))), // split 1 idle since 0 ms
                tick(1_899, None),
                tick(1_900, Some(Watermark::Idle)), // split 0 idle since 900 ms
                tick(2_000, None),
                batch(2_100, &[(1, 40)], vec![Wm(59), Records(0..1)]),
                batch(2_200, &[(1, 70)], vec![Records(0..1), Wm(69)]),
            ],
        );
        // No split at all: idle after the timeout; never without one.
        run(
            "no splits",
            0,
            Some(100),
            &[],
            vec![tick(50, None), tick(100, Some(Watermark::Idle))],
        );
        run("no splits, no timeout", 0, None, &[], vec![tick(10_000, None)]);
    }
}
