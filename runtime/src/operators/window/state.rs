//! Window state: each key's windows ([`WindowEntry`]) with their aggregate ([`Acc`]), kept as
//! keyed state (`window/keyed.rs`), and [`GroupSnapshot`], the per-key-group block of
//! snapshots written before 2026-12-05, which restores still read.

use crate::job::validate::AggregateFn;
use crate::record::{Datum, Key};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;

/// A window aggregate: integers stay integers until a float is aggregated (or a sum
/// overflows).
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Acc {
    /// Integer.
    Int(i64),
    /// Floating point.
    Float(f64),
}

impl Acc {
    /// The value of a record for `func`; `None` if `v` is not a number.
    pub fn from_datum(v: &Datum) -> Option<Acc> {
        match v {
            Datum::Int(i) => Some(Acc::Int(*i)),
            Datum::UInt(u) => Some(Acc::Float(*u as f64)),
            Datum::Float(f) => Some(Acc::Float(*f)),
            _ => None,
        }
    }

    /// As a row value.
    pub fn to_datum(self) -> Datum {
        match self {
            Acc::Int(i) => Datum::Int(i),
            Acc::Float(f) => Datum::from_f64(f),
        }
    }

    fn as_f64(self) -> f64 {
        match self {
            Acc::Int(i) => i as f64,
            Acc::Float(f) => f,
        }
    }

    /// Combines two partial aggregates of `func` (two counts add up, as two sums do).
    pub fn merge(self, func: AggregateFn, other: Acc) -> Acc {
        match (func, self, other) {
            (AggregateFn::Count | AggregateFn::Sum, Acc::Int(a), Acc::Int(b)) => a
                .checked_add(b)
                .map(Acc::Int)
                .unwrap_or(Acc::Float(a as f64 + b as f64)),
            (AggregateFn::Count | AggregateFn::Sum, a, b) => Acc::Float(a.as_f64() + b.as_f64()),
            (AggregateFn::Min, Acc::Int(a), Acc::Int(b)) => Acc::Int(a.min(b)),
            (AggregateFn::Min, a, b) => Acc::Float(a.as_f64().min(b.as_f64())),
            (AggregateFn::Max, Acc::Int(a), Acc::Int(b)) => Acc::Int(a.max(b)),
            (AggregateFn::Max, a, b) => Acc::Float(a.as_f64().max(b.as_f64())),
        }
    }
}

/// One open window of a key.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct WindowEntry {
    /// Window start, epoch ms.
    pub start: i64,
    /// Window end (exclusive), epoch ms.
    pub end: i64,
    /// The aggregate so far.
    pub value: Acc,
    /// Whether the window has fired (later records within the allowed lateness fire updates).
    pub fired: bool,
}

/// A key group's windows in memory (the form [`GroupSnapshot::of`] took).
pub type GroupWindows = HashMap<Key, Vec<WindowEntry>>;

/// A key group's state as checkpoints stored it before 2026-12-05 (one
/// [`KeyGroupBlock`](crate::state::snapshot::KeyGroupBlock)); today's blocks are the keyed
/// state's.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GroupSnapshot {
    /// The window operator's watermark when the snapshot was taken: a restore judges records
    /// of this key group late against it (so a window fired and deleted before the snapshot is
    /// not opened again), whichever subtask owns the key group after a rescale.
    pub watermark: i64,
    /// Keys with open windows, sorted by key.
    pub keys: Vec<(Key, Vec<WindowEntry>)>,
}

impl GroupSnapshot {
    /// The snapshot of `windows` at `watermark`, keys sorted (the blocks of earlier releases,
    /// for tests of their restore).
    pub fn of(watermark: i64, windows: &GroupWindows) -> GroupSnapshot {
        let mut keys: Vec<(Key, Vec<WindowEntry>)> = windows.iter().map(|(k, v)| (k.clone(), v.clone())).collect();
        keys.sort_by(|a, b| a.0.cmp(&b.0));
        GroupSnapshot { watermark, keys }
    }

    /// Number of windows held.
    pub fn windows(&self) -> u64 {
        self.keys.iter().map(|(_, v)| v.len() as u64).sum()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn merge_table() {
        use AggregateFn::*;
        let rows = [
            (Count, Acc::Int(2), Acc::Int(3), Acc::Int(5)),
            (Sum, Acc::Int(2), Acc::Float(0.5), Acc::Float(2.5)),
            (Sum, Acc::Int(i64::MAX), Acc::Int(1), Acc::Float(i64::MAX as f64 + 1.0)),
            (Min, Acc::Int(2), Acc::Int(-3), Acc::Int(-3)),
            (Max, Acc::Float(2.0), Acc::Int(3), Acc::Float(3.0)),
        ];
        for (f, a, b, want) in rows {
            assert_eq!(a.merge(f, b), want, "{f:?} {a:?} {b:?}");
        }
    }

    #[test]
    fn snapshot_round_trips_and_sorts_keys() {
        let mut g = GroupWindows::new();
        let e = |start| WindowEntry {
            start,
            end: start + 10,
            value: Acc::Int(1),
            fired: false,
        };
        g.insert(Key::Str("b".into()), vec![e(0), e(10)]);
        g.insert(Key::Int(7), vec![e(0)]);
        let snap = GroupSnapshot::of(42, &g);
        assert_eq!(snap.windows(), 3);
        let bytes = postcard::to_stdvec(&snap).unwrap();
        let back: GroupSnapshot = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back, snap);
        let mut sorted = snap.keys.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>();
        sorted.sort();
        assert_eq!(snap.keys.iter().map(|(k, _)| k.clone()).collect::<Vec<_>>(), sorted);
    }
}
