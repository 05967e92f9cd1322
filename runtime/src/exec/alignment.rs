//! Barrier alignment (pure bookkeeping): which inputs are held, when a subtask snapshots, and
//! when it switches a checkpoint to unaligned.
//!
//! Exactly-once holds an input that delivered barrier n until every live input did (an aligned
//! checkpoint); at-least-once and at-most-once only count
//! ([`guarantee::holds_input_after_barrier`]). With unaligned checkpoints
//! (`checkpointing.unaligned`), a subtask snapshots at the first barrier of checkpoint n — a
//! priority barrier that overtook the queued records, or an in-band one — or, with
//! `alignedCheckpointTimeout`, when alignment has lasted that long. It then *records*: every
//! record it receives on an input before that input's in-band barrier n is channel state of
//! checkpoint n (it was sent before the upstream snapshot but is processed after this one), and
//! the channel state is complete when every live input delivered barrier n or ended.
//! Savepoints are always aligned, as in Flink.
//!
//! With a timeout, priority barriers are announcements: the clock starts when the first one
//! (or the first in-band barrier) arrives.
//!
//! Every decision takes the current time as an argument, so the table tests below drive it
//! without a clock.

use crate::checkpoint::{Barrier, guarantee};
use crate::control::api::SnapshotKind;
use crate::job::CheckpointMode;
use std::time::{Duration, Instant};

/// Barrier alignment bookkeeping for one subtask with several inputs.
#[derive(Debug)]
pub struct Alignment {
    /// When a checkpoint switches to unaligned: `None` never, `Some(0)` at its first barrier,
    /// `Some(t)` after aligning for `t` ([`crate::job::Job::unaligned_after`]).
    unaligned_after: Option<Duration>,
    /// Where the current checkpoint is.
    phase: Phase,
    /// The newest checkpoint this subtask snapshotted: its barriers are stale from then on.
    last_snapshot: Option<u64>,
}

#[derive(Debug)]
enum Phase {
    /// No checkpoint in progress.
    Idle,
    /// Aligning `barrier` since `started`; `arrived[i]`: input i delivered it (and is held).
    Aligning {
        barrier: Barrier,
        started: Instant,
        arrived: Vec<bool>,
    },
    /// Snapshotted checkpoint `id` unaligned; inputs with `arrived[i] == false` are being
    /// recorded as channel state until their in-band barrier `id` (or their end).
    Recording { id: u64, arrived: Vec<bool> },
}

/// What to do after an event.
#[derive(Debug)]
pub enum BarrierAction {
    /// Nothing yet (exactly-once aligning: the input that delivered the barrier is held).
    Wait,
    /// Every live input delivered it: snapshot now (aligned), after aligning this long.
    Snapshot(Barrier, Duration),
    /// Snapshot now, unaligned: forward the barrier ahead of the queued records and record the
    /// inputs whose barrier has not arrived ([`Alignment::is_recording`]) as channel state.
    SnapshotUnaligned(Barrier, Duration),
    /// Checkpoint id's channel state is complete: every live input delivered its barrier.
    ChannelStateComplete(u64),
    /// A barrier of a checkpoint this subtask already snapshotted or abandoned: ignore it.
    Stale,
}

impl Default for Alignment {
    fn default() -> Self {
        Alignment::new()
    }
}

impl Alignment {
    /// Bookkeeping for aligned checkpoints only.
    pub fn new() -> Alignment {
        Alignment::with_policy(None)
    }

    /// Bookkeeping that switches checkpoints to unaligned after `unaligned_after` (see the
    /// field). The number of inputs comes from the `live` slices of each event.
    pub fn with_policy(unaligned_after: Option<Duration>) -> Alignment {
        Alignment {
            unaligned_after,
            phase: Phase::Idle,
            last_snapshot: None,
        }
    }

    /// Whether input `i` is held: it delivered the barrier being aligned and `mode` aligns.
    pub fn is_held(&self, i: usize, mode: CheckpointMode) -> bool {
        match &self.phase {
            Phase::Aligning { arrived, .. } => guarantee::holds_input_after_barrier(mode) && arrived[i],
            _ => false,
        }
    }

    /// Whether what arrives on input `i` now is channel state of [`Alignment::recording_id`].
    pub fn is_recording(&self, i: usize) -> bool {
        matches!(&self.phase, Phase::Recording { arrived, .. } if !arrived[i])
    }

    /// The unaligned checkpoint whose channel state is being recorded.
    pub fn recording_id(&self) -> Option<u64> {
        match &self.phase {
            Phase::Recording { id, .. } => Some(*id),
            _ => None,
        }
    }

    /// When an alignment in progress switches to unaligned (`None`: no switch is due).
    pub fn deadline(&self) -> Option<Instant> {
        match (&self.phase, self.unaligned_after) {
            (Phase::Aligning { barrier, started, .. }, Some(t)) if may_be_unaligned(barrier) => Some(*started + t),
            _ => None,
        }
    }

    fn is_stale(&self, id: u64) -> bool {
        self.last_snapshot.is_some_and(|done| id <= done)
    }

    /// Registers in-band barrier `b` from input `i` at `now`; `live` marks inputs that have not
    /// ended. A newer barrier abandons an older alignment or recording (that checkpoint was
    /// declined or timed out).
    pub fn on_barrier(&mut self, i: usize, b: Barrier, live: &[bool], now: Instant) -> BarrierAction {
        if self.is_stale(b.id) {
            // The marker that ends input i's channel state of the checkpoint being recorded.
            if let Phase::Recording { id, arrived } = &mut self.phase
                && *id == b.id
            {
                arrived[i] = true;
                return self.check(live, now);
            }
            return BarrierAction::Stale;
        }
        let may_switch = may_be_unaligned(&b) && self.unaligned_after == Some(Duration::ZERO);
        if let Phase::Aligning { barrier, .. } = &self.phase {
            if b.id < barrier.id {
                return BarrierAction::Stale;
            }
            if b.id > barrier.id {
                self.phase = Phase::Idle;
            }
        }
        if matches!(self.phase, Phase::Idle | Phase::Recording { .. }) {
            self.phase = Phase::Aligning {
                barrier: b,
                started: now,
                arrived: vec![false; live.len()],
            };
        }
        if let Phase::Aligning { arrived, .. } = &mut self.phase {
            arrived[i] = true;
        }
        match self.check(live, now) {
            BarrierAction::Wait if may_switch => self.switch_to_unaligned(live, now),
            other => other,
        }
    }

    /// Registers a priority barrier at `now`: an upstream subtask snapshotted checkpoint
    /// `b.id` and sent the barrier ahead of its queued records. Unaligned from the start: snapshot
    /// unaligned at once. With an alignment timeout it is an announcement (as Flink's): the
    /// alignment clock starts now, and the subtask switches to unaligned at the deadline unless
    /// every in-band barrier arrived before.
    pub fn on_priority_barrier(&mut self, b: Barrier, live: &[bool], now: Instant) -> BarrierAction {
        if self.is_stale(b.id) || !may_be_unaligned(&b) || self.unaligned_after.is_none() {
            return BarrierAction::Stale;
        }
        match &self.phase {
            Phase::Aligning { barrier, .. } if b.id < barrier.id => return BarrierAction::Stale,
            Phase::Aligning { barrier, .. } if b.id == barrier.id => {}
            _ => {
                self.phase = Phase::Aligning {
                    barrier: b,
                    started: now,
                    arrived: vec![false; live.len()],
                }
            }
        }
        if self.unaligned_after == Some(Duration::ZERO) {
            self.switch_to_unaligned(live, now)
        } else {
            self.check(live, now)
        }
    }

    /// Re-evaluates at `now` (after an input ended, or at the [`Alignment::deadline`]).
    pub fn check(&mut self, live: &[bool], now: Instant) -> BarrierAction {
        match &self.phase {
            Phase::Idle => BarrierAction::Wait,
            Phase::Recording { id, arrived } => {
                if arrived.iter().zip(live).all(|(a, l)| *a || !*l) {
                    let id = *id;
                    self.phase = Phase::Idle;
                    BarrierAction::ChannelStateComplete(id)
                } else {
                    BarrierAction::Wait
                }
            }
            Phase::Aligning {
                barrier,
                started,
                arrived,
            } => {
                if arrived.iter().zip(live).all(|(a, l)| *a || !*l) {
                    let (b, waited) = (barrier.clone(), now.saturating_duration_since(*started));
                    self.last_snapshot = Some(b.id);
                    self.phase = Phase::Idle;
                    BarrierAction::Snapshot(b, waited)
                } else if self.deadline().is_some_and(|d| now >= d) {
                    self.switch_to_unaligned(live, now)
                } else {
                    BarrierAction::Wait
                }
            }
        }
    }

    /// Aligning → snapshot unaligned and record the inputs whose barrier has not arrived.
    fn switch_to_unaligned(&mut self, live: &[bool], now: Instant) -> BarrierAction {
        let Phase::Aligning {
            barrier,
            started,
            arrived,
        } = std::mem::replace(&mut self.phase, Phase::Idle)
        else {
            return BarrierAction::Wait;
        };
        self.last_snapshot = Some(barrier.id);
        let arrived = arrived.iter().zip(live).map(|(a, l)| *a || !*l).collect();
        self.phase = Phase::Recording {
            id: barrier.id,
            arrived,
        };
        BarrierAction::SnapshotUnaligned(barrier, now.saturating_duration_since(started))
    }
}

/// Whether barrier `b` may be taken unaligned: checkpoints may; savepoints never (Flink), nor
/// the final checkpoint of a bounded job ([`Barrier::is_final`]).
fn may_be_unaligned(b: &Barrier) -> bool {
    b.kind == SnapshotKind::Checkpoint && !b.is_final
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::SnapshotTarget;
    use crate::storage::LocalStore;
    use std::sync::Arc;

    fn barrier_maker() -> (tempfile::TempDir, impl Fn(u64, SnapshotKind) -> Barrier) {
        let dir = tempfile::tempdir().unwrap();
        let target = Arc::new(SnapshotTarget {
            store: Arc::new(LocalStore::new(dir.path()).unwrap()),
            dir: "x".into(),
        });
        let make = move |id, kind| Barrier {
            id,
            kind,
            stop: false,
            target: target.clone(),
            triggered_at_ms: 0,
            is_final: false,
            incremental: None,
        };
        (dir, make)
    }

    #[test]
    fn newer_barrier_abandons_an_older_alignment() {
        let (_dir, make) = barrier_maker();
        let b = |id| make(id, SnapshotKind::Checkpoint);
        let now = Instant::now();
        let live = [true, true];
        let mut a = Alignment::new();
        assert!(matches!(a.on_barrier(0, b(1), &live, now), BarrierAction::Wait));
        assert!(a.is_held(0, CheckpointMode::ExactlyOnce));
        assert!(!a.is_held(0, CheckpointMode::AtLeastOnce));
        assert!(!a.is_held(0, CheckpointMode::AtMostOnce));
        assert!(matches!(a.on_barrier(1, b(2), &live, now), BarrierAction::Wait));
        assert!(!a.is_held(0, CheckpointMode::ExactlyOnce), "checkpoint 1 abandoned");
        assert!(matches!(a.on_barrier(0, b(1), &live, now), BarrierAction::Stale));
        assert!(matches!(a.on_barrier(0, b(2), &live, now), BarrierAction::Snapshot(ref x, _) if x.id == 2));
        // An input that ends no longer counts towards alignment.
        assert!(matches!(a.on_barrier(0, b(3), &live, now), BarrierAction::Wait));
        assert!(matches!(a.check(&[true, false], now), BarrierAction::Snapshot(ref x, _) if x.id == 3));
        // A union whose first input ended: a barrier on the other input alone aligns.
        let mut union = Alignment::new();
        assert!(
            matches!(union.on_barrier(1, b(4), &[false, true], now), BarrierAction::Snapshot(ref x, _) if x.id == 4)
        );
        assert!(
            !union.is_held(1, CheckpointMode::ExactlyOnce),
            "nothing held after the snapshot"
        );
    }

    /// One event of a table row.
    #[derive(Clone, Copy, Debug)]
    enum Event {
        /// In-band barrier (id, input) at t ms.
        InBand(u64, usize, u64),
        /// Savepoint barrier (id, input) at t ms.
        SavepointInBand(u64, usize, u64),
        /// Barrier of the final checkpoint of a bounded job (id, input) at t ms.
        FinalInBand(u64, usize, u64),
        /// Priority barrier id at t ms.
        Priority(u64, u64),
        /// Input ends at t ms.
        End(usize, u64),
        /// Re-check at t ms (the deadline timer).
        Tick(u64),
    }

    /// The expected outcome, compact: W wait, S(id, aligned ms) aligned snapshot, U(id, ms)
    /// unaligned snapshot, C(id) channel state complete, X stale.
    #[derive(Debug, PartialEq)]
    enum Want {
        W,
        S(u64, u64),
        U(u64, u64),
        C(u64),
        X,
    }

    /// A table row: name, inputs, unaligned_after, events with expected outcomes, inputs
    /// recorded at the end.
    type Row = (&'static str, usize, Option<Duration>, Vec<(Event, Want)>, Vec<bool>);

    #[test]
    fn alignment_decisions_table() {
        use Event::*;
        use Want::*;
        let ms = Duration::from_millis;
        let table: Vec<Row> = vec![
            (
                "aligned: waits for both, never switches",
                2,
                None,
                vec![
                    (InBand(1, 0, 0), W),
                    (Tick(60_000), W),
                    (InBand(1, 1, 60_001), S(1, 60_001)),
                ],
                vec![false, false],
            ),
            (
                "unaligned: first in-band barrier snapshots at once, records the other input",
                2,
                Some(ms(0)),
                vec![(InBand(1, 0, 5), U(1, 0)), (InBand(1, 1, 9), C(1))],
                vec![false, false],
            ),
            (
                "unaligned: a priority barrier snapshots at once and records every input",
                2,
                Some(ms(0)),
                vec![
                    (Priority(1, 0), U(1, 0)),
                    (Priority(1, 1), X),
                    (InBand(1, 1, 2), W),
                    (InBand(1, 0, 3), C(1)),
                    (InBand(1, 0, 4), X),
                ],
                vec![false, false],
            ),
            (
                "unaligned: one input, in-band barrier alone is an aligned snapshot",
                1,
                Some(ms(0)),
                vec![(InBand(1, 0, 0), S(1, 0))],
                vec![false],
            ),
            (
                "timeout: aligned when the last barrier comes in time",
                2,
                Some(ms(2000)),
                vec![(InBand(1, 0, 0), W), (Tick(1999), W), (InBand(1, 1, 1500), S(1, 1500))],
                vec![false, false],
            ),
            (
                "timeout: switches to unaligned at the deadline, records the late input",
                3,
                Some(ms(2000)),
                vec![
                    (InBand(1, 0, 0), W),
                    (InBand(1, 1, 10), W),
                    (Tick(1999), W),
                    (Tick(2000), U(1, 2000)),
                ],
                vec![false, false, true],
            ),
            (
                "timeout: the late input's barrier completes the channel state",
                2,
                Some(ms(2000)),
                vec![
                    (InBand(1, 0, 0), W),
                    (Tick(2500), U(1, 2500)),
                    (InBand(1, 1, 3000), C(1)),
                ],
                vec![false, false],
            ),
            (
                "timeout: a priority barrier during alignment keeps the clock",
                2,
                Some(ms(2000)),
                vec![(InBand(1, 0, 0), W), (Priority(1, 100), W), (Tick(2000), U(1, 2000))],
                vec![false, true],
            ),
            (
                "timeout: a priority barrier announces the checkpoint and starts the clock",
                2,
                Some(ms(2000)),
                vec![
                    (Priority(1, 100), W),
                    (InBand(1, 1, 500), W),
                    (Tick(2100), U(1, 2000)),
                    (InBand(1, 0, 2200), C(1)),
                ],
                vec![false, false],
            ),
            (
                "timeout: announced and aligned in time",
                2,
                Some(ms(2000)),
                vec![(Priority(1, 0), W), (InBand(1, 0, 10), W), (InBand(1, 1, 20), S(1, 20))],
                vec![false, false],
            ),
            (
                "savepoints are always aligned, even with unaligned checkpoints",
                2,
                Some(ms(0)),
                vec![
                    (SavepointInBand(7, 0, 0), W),
                    (Tick(99_000), W),
                    (SavepointInBand(7, 1, 99_000), S(7, 99_000)),
                ],
                vec![false, false],
            ),
            (
                "the final checkpoint of a bounded job is always aligned",
                2,
                Some(ms(0)),
                vec![
                    (FinalInBand(9, 1, 0), W),
                    (Tick(60_000), W),
                    (FinalInBand(9, 0, 60_000), S(9, 60_000)),
                ],
                vec![false, false],
            ),
            (
                "an input ending completes the channel state",
                2,
                Some(ms(0)),
                vec![(Priority(1, 0), U(1, 0)), (InBand(1, 0, 1), W), (End(1, 2), C(1))],
                vec![false, false],
            ),
            (
                "a newer barrier abandons an incomplete recording",
                2,
                Some(ms(0)),
                vec![
                    (Priority(1, 0), U(1, 0)),
                    (Priority(2, 5), U(2, 0)),
                    (InBand(1, 0, 6), X),
                ],
                vec![true, true],
            ),
        ];
        for (name, inputs, policy, events, recording_at_end) in table {
            let (_dir, make) = barrier_maker();
            let t0 = Instant::now();
            let at = |t: u64| t0 + Duration::from_millis(t);
            let mut live = vec![true; inputs];
            let mut a = Alignment::with_policy(policy);
            for (k, (event, want)) in events.into_iter().enumerate() {
                let got = match event {
                    InBand(id, i, t) => a.on_barrier(i, make(id, SnapshotKind::Checkpoint), &live, at(t)),
                    SavepointInBand(id, i, t) => a.on_barrier(i, make(id, SnapshotKind::Savepoint), &live, at(t)),
                    FinalInBand(id, i, t) => {
                        let mut b = make(id, SnapshotKind::Checkpoint);
                        b.is_final = true;
                        a.on_barrier(i, b, &live, at(t))
                    }
                    Priority(id, t) => a.on_priority_barrier(make(id, SnapshotKind::Checkpoint), &live, at(t)),
                    End(i, t) => {
                        live[i] = false;
                        a.check(&live, at(t))
                    }
                    Tick(t) => a.check(&live, at(t)),
                };
                let got = match got {
                    BarrierAction::Wait => W,
                    BarrierAction::Snapshot(b, d) => S(b.id, d.as_millis() as u64),
                    BarrierAction::SnapshotUnaligned(b, d) => U(b.id, d.as_millis() as u64),
                    BarrierAction::ChannelStateComplete(id) => C(id),
                    BarrierAction::Stale => X,
                };
                assert_eq!(got, want, "{name}: event {k} {event:?}");
            }
            let recording: Vec<bool> = (0..inputs).map(|i| a.is_recording(i)).collect();
            assert_eq!(recording, recording_at_end, "{name}: inputs recorded at the end");
        }
    }
}
