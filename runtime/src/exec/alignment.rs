//! Barrier alignment (pure bookkeeping): which inputs are held, and when every live input has
//! delivered the pending barrier so the subtask snapshots. Exactly-once holds an input that
//! delivered barrier n until all did (aligned checkpoint); at-least-once and at-most-once only
//! count ([`guarantee::holds_input_after_barrier`]).

use crate::checkpoint::{Barrier, guarantee};
use crate::job::CheckpointMode;
use std::time::{Duration, Instant};

/// Barrier alignment bookkeeping for one subtask with several inputs.
#[derive(Debug, Default)]
pub struct Alignment {
    /// Checkpoint being aligned, with the time its first barrier arrived.
    pending: Option<(Barrier, Instant)>,
    /// Inputs that delivered the pending barrier.
    arrived: Vec<bool>,
}

/// What to do after a barrier arrived on an input.
#[derive(Debug)]
pub enum BarrierAction {
    /// Wait for more inputs (exactly-once: hold this input).
    Wait,
    /// Every live input delivered it: snapshot now.
    Snapshot(Barrier, Duration),
    /// A barrier of an older checkpoint than the one aligning: ignore it.
    Stale,
}

impl Alignment {
    /// Creates bookkeeping for `inputs` inputs.
    pub fn new(inputs: usize) -> Alignment {
        Alignment {
            pending: None,
            arrived: vec![false; inputs],
        }
    }

    /// Whether input `i` is held: it delivered the pending barrier and `mode` aligns.
    pub fn is_held(&self, i: usize, mode: CheckpointMode) -> bool {
        guarantee::holds_input_after_barrier(mode) && self.arrived[i]
    }

    /// Registers barrier `b` from input `i`; `live` marks inputs that have not ended. A newer
    /// barrier abandons an older alignment (that checkpoint was declined).
    pub fn on_barrier(&mut self, i: usize, b: Barrier, live: &[bool]) -> BarrierAction {
        match &self.pending {
            Some((p, _)) if b.id < p.id => return BarrierAction::Stale,
            Some((p, _)) if b.id > p.id => {
                self.pending = None;
                self.arrived.iter_mut().for_each(|a| *a = false);
            }
            _ => {}
        }
        if self.pending.is_none() {
            self.pending = Some((b, Instant::now()));
        }
        self.arrived[i] = true;
        self.check(live)
    }

    /// Re-evaluates completion (after an input ended).
    pub fn check(&mut self, live: &[bool]) -> BarrierAction {
        if self.pending.is_some() && self.arrived.iter().zip(live).all(|(a, l)| *a || !*l) {
            let (b, t) = self.pending.take().expect("pending");
            self.arrived.iter_mut().for_each(|a| *a = false);
            BarrierAction::Snapshot(b, t.elapsed())
        } else {
            BarrierAction::Wait
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::checkpoint::SnapshotTarget;
    use crate::control::api::SnapshotKind;
    use crate::storage::LocalStore;
    use std::sync::Arc;

    #[test]
    fn newer_barrier_abandons_an_older_alignment() {
        let dir = tempfile::tempdir().unwrap();
        let target = Arc::new(SnapshotTarget {
            store: Arc::new(LocalStore::new(dir.path()).unwrap()),
            dir: "x".into(),
        });
        let b = |id| Barrier {
            id,
            kind: SnapshotKind::Checkpoint,
            stop: false,
            target: target.clone(),
            triggered_at_ms: 0,
        };
        let live = [true, true];
        let mut a = Alignment::new(2);
        assert!(matches!(a.on_barrier(0, b(1), &live), BarrierAction::Wait));
        assert!(a.is_held(0, CheckpointMode::ExactlyOnce));
        assert!(!a.is_held(0, CheckpointMode::AtLeastOnce));
        assert!(!a.is_held(0, CheckpointMode::AtMostOnce));
        assert!(matches!(a.on_barrier(1, b(2), &live), BarrierAction::Wait));
        assert!(!a.is_held(0, CheckpointMode::ExactlyOnce), "checkpoint 1 abandoned");
        assert!(matches!(a.on_barrier(0, b(1), &live), BarrierAction::Stale));
        assert!(matches!(a.on_barrier(0, b(2), &live), BarrierAction::Snapshot(ref x, _) if x.id == 2));
        // An input that ends no longer counts towards alignment.
        assert!(matches!(a.on_barrier(0, b(3), &live), BarrierAction::Wait));
        assert!(matches!(a.check(&[true, false]), BarrierAction::Snapshot(ref x, _) if x.id == 3));
        // A union whose first input ended: a barrier on the other input alone aligns.
        let mut union = Alignment::new(2);
        assert!(matches!(union.on_barrier(1, b(4), &[false, true]), BarrierAction::Snapshot(ref x, _) if x.id == 4));
        assert!(
            !union.is_held(1, CheckpointMode::ExactlyOnce),
            "nothing held after the snapshot"
        );
    }
}
