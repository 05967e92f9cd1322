//! Keyed running aggregations (`count`, `sum`, `min`, `max`) on heap keyed state.
//!
//! State lives in key groups: one hash map per key group of the subtask's
//! [`KeyGroupRange`], so a snapshot writes per-key-group blocks and a restore at another
//! parallelism takes exactly the groups it now owns.
//!
//! A key group's map is a hash table found by the key's stable hash, which `keyBy` computed
//! once ([`KeyedBy::hash`](crate::record::KeyedBy)): the aggregation neither hashes nor copies
//! the key of a record whose key it already holds.

use super::{EncodedState, OperatorRestore, SnapshotEncoder, StreamOperator, TaskError, TaskResult};
use crate::checkpoint::Barrier;
use crate::job::validate::AggregateFn;
use crate::record::cel::{self, Expr};
use crate::record::{Datum, Key, Record, Row, Schema};
use crate::state::key_group::{KeyGroupRange, key_hash};
use crate::state::snapshot::KeyGroupBlock;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::sync::Arc;

/// A key group's map: `(key, value)` entries placed by [`table_hash`] of the key's stable hash.
type GroupMap = hashbrown::HashTable<(Key, Num)>;

/// The in-memory table hash of a key whose [`key_hash`] is `hash`. The key group is
/// `hash mod maxParallelism`, so within one group the low bits of `hash` are all equal; the
/// table places entries by the low bits and tags them with the top 7, so it uses the hash
/// rotated by 32 bits (the tag then comes from bits 25-31, which no key group count up to
/// 32768 constrains).
fn table_hash(hash: u64) -> u64 {
    hash.rotate_left(32)
}

/// Rehash of an entry when a table grows.
fn entry_hash(entry: &(Key, Num)) -> u64 {
    table_hash(key_hash(&entry.0))
}

/// An aggregate value: integers stay integers until a float is aggregated.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Num {
    /// Integer.
    Int(i64),
    /// Floating point.
    Float(f64),
}

impl Num {
    fn from_datum(v: &Datum) -> Option<Num> {
        match v {
            Datum::Int(i) => Some(Num::Int(*i)),
            Datum::UInt(u) => Some(Num::Float(*u as f64)),
            Datum::Float(f) => Some(Num::Float(*f)),
            _ => None,
        }
    }

    fn to_datum(self) -> Datum {
        match self {
            Num::Int(i) => Datum::Int(i),
            Num::Float(f) => Datum::from_f64(f),
        }
    }

    fn as_f64(self) -> f64 {
        match self {
            Num::Int(i) => i as f64,
            Num::Float(f) => f,
        }
    }

    fn combine(self, func: AggregateFn, x: Num) -> Num {
        match (func, self, x) {
            (AggregateFn::Count, Num::Int(a), _) => Num::Int(a + 1),
            (AggregateFn::Sum, Num::Int(a), Num::Int(b)) => a
                .checked_add(b)
                .map(Num::Int)
                .unwrap_or(Num::Float(a as f64 + b as f64)),
            (AggregateFn::Sum, a, b) => Num::Float(a.as_f64() + b.as_f64()),
            (AggregateFn::Min, Num::Int(a), Num::Int(b)) => Num::Int(a.min(b)),
            (AggregateFn::Min, a, b) => Num::Float(a.as_f64().min(b.as_f64())),
            (AggregateFn::Max, Num::Int(a), Num::Int(b)) => Num::Int(a.max(b)),
            (AggregateFn::Max, a, b) => Num::Float(a.as_f64().max(b.as_f64())),
            (AggregateFn::Count, Num::Float(a), _) => Num::Float(a + 1.0),
        }
    }
}

/// A keyed running aggregation: for every input record, updates the key's value and emits
/// `{<keyField>: key, <asField>: value}`.
pub struct Aggregate {
    uid: String,
    func: AggregateFn,
    expr: Option<Expr>,
    /// `[key_field, as_field]` (or `[as_field]` when both are the same name: the value replaces
    /// the key, as in an object), shared by every output row.
    output: Arc<Schema>,
    range: KeyGroupRange,
    /// `groups[kg - range.start]`: the key group's map.
    groups: Vec<GroupMap>,
}

impl Aggregate {
    /// Creates the operator for the subtask owning `range`, restoring `restore.key_groups`
    /// (blocks outside the range are ignored; a block that does not decode is an error).
    pub fn new(
        uid: &str,
        func: AggregateFn,
        expression: Option<&str>,
        key_field: &str,
        as_field: &str,
        range: KeyGroupRange,
        restore: OperatorRestore,
    ) -> TaskResult<Aggregate> {
        let expr = match (func, expression) {
            (AggregateFn::Count, _) | (_, None) => None,
            (_, Some(e)) => Some(cel::compile(e)?),
        };
        let mut groups: Vec<GroupMap> = (0..range.len()).map(|_| GroupMap::new()).collect();
        for block in restore.key_groups {
            if !range.contains(block.key_group) {
                continue;
            }
            let entries: Vec<(Key, Num)> = postcard::from_bytes(&block.data).map_err(|e| {
                TaskError(format!(
                    "operator {uid}: key group {} does not decode: {e}",
                    block.key_group
                ))
            })?;
            let group = &mut groups[(block.key_group - range.start) as usize];
            group.reserve(entries.len(), entry_hash);
            for (key, num) in entries {
                let hash = table_hash(key_hash(&key));
                match group.find_mut(hash, |e| e.0 == key) {
                    Some(e) => e.1 = num,
                    None => {
                        group.insert_unique(hash, (key, num), entry_hash);
                    }
                }
            }
        }
        Ok(Aggregate {
            uid: uid.to_string(),
            func,
            expr,
            output: if key_field == as_field {
                Schema::new([as_field])
            } else {
                Schema::new([key_field, as_field])
            },
            range,
            groups,
        })
    }

    /// Number of keys held.
    pub fn len(&self) -> usize {
        self.groups.iter().map(GroupMap::len).sum()
    }

    /// Whether no key is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[async_trait]
impl StreamOperator for Aggregate {
    async fn process(&mut self, input: Vec<Record>, out: &mut Vec<Record>) -> TaskResult<()> {
        // Two passes: the first only updates state, a short loop whose table lookups (cache
        // misses on large state) the CPU can overlap across records; the second builds the
        // output rows.
        let mut updated = Vec::with_capacity(input.len());
        for r in &input {
            let keyed = r.keyed.as_ref().ok_or_else(|| {
                TaskError(format!(
                    "operator {}: record without a key (no keyBy before it)",
                    self.uid
                ))
            })?;
            if !self.range.contains(keyed.key_group) {
                return Err(TaskError(format!(
                    "operator {}: key group {} routed to the subtask owning {:?}",
                    self.uid, keyed.key_group, self.range
                )));
            }
            let x = match &self.expr {
                None => Num::Int(1),
                Some(e) => {
                    let v = e.eval(&r.row)?;
                    Num::from_datum(&v).ok_or_else(|| {
                        TaskError(format!(
                            "operator {}: `{}` gave {v}, not a number",
                            self.uid,
                            e.source()
                        ))
                    })?
                }
            };
            let group = &mut self.groups[(keyed.key_group - self.range.start) as usize];
            let func = self.func;
            let hash = table_hash(keyed.hash);
            let value = match group.find_mut(hash, |e| e.0 == keyed.key) {
                Some(entry) => {
                    entry.1 = entry.1.combine(func, x);
                    entry.1
                }
                None => {
                    let first = if func == AggregateFn::Count { Num::Int(1) } else { x };
                    group.insert_unique(hash, (keyed.key.clone(), first), entry_hash);
                    first
                }
            };
            updated.push(value);
        }
        out.reserve(input.len());
        let key_and_value = self.output.names().len() != 1;
        for (r, value) in input.into_iter().zip(updated) {
            let values = match (key_and_value, r.keyed) {
                (true, Some(keyed)) => vec![keyed.key.into_datum(), value.to_datum()],
                _ => vec![value.to_datum()],
            };
            out.push(Record::new(Row::new_unchecked(self.output.clone(), values)));
        }
        Ok(())
    }

    async fn snapshot(&mut self, _barrier: &Barrier) -> TaskResult<Option<SnapshotEncoder>> {
        // Synchronous part: a copy of the non-empty groups is the consistent view.
        let view: Vec<(u32, GroupMap)> = self
            .groups
            .iter()
            .enumerate()
            .filter(|(_, g)| !g.is_empty())
            .map(|(i, g)| (self.range.start + i as u32, g.clone()))
            .collect();
        let range = self.range;
        Ok(Some(Box::new(move || {
            let mut blocks = Vec::with_capacity(view.len());
            for (kg, map) in view {
                let mut entries: Vec<(Key, Num)> = map.into_iter().collect();
                entries.sort_by(|a, b| a.0.cmp(&b.0));
                blocks.push(KeyGroupBlock {
                    key_group: kg,
                    entries: entries.len() as u64,
                    data: postcard::to_stdvec(&entries)?,
                });
            }
            Ok(EncodedState {
                state_names: vec!["keyed:aggregate".into()],
                key_group_range: Some(range),
                key_groups: blocks,
                operator_state: vec![],
            })
        })))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::KeyedBy;
    use crate::state::key_group::key_group_range;
    use serde_json::json;

    fn keyed(word: &str, v: serde_json::Value) -> Record {
        Record {
            row: Row::from_json(v),
            keyed: Some(KeyedBy::new(Key::Str(word.into()), 8)),
        }
    }

    #[test]
    fn num_combine_table() {
        use AggregateFn::*;
        let rows = [
            (Count, Num::Int(2), Num::Int(9), Num::Int(3)),
            (Sum, Num::Int(2), Num::Int(3), Num::Int(5)),
            (Sum, Num::Int(2), Num::Float(0.5), Num::Float(2.5)),
            (Sum, Num::Int(i64::MAX), Num::Int(1), Num::Float(i64::MAX as f64 + 1.0)),
            (Min, Num::Int(2), Num::Int(-3), Num::Int(-3)),
            (Max, Num::Float(2.0), Num::Int(3), Num::Float(3.0)),
        ];
        for (f, a, b, want) in rows {
            assert_eq!(a.combine(f, b), want, "{f:?} {a:?} {b:?}");
        }
    }

    fn barrier() -> Barrier {
        let target = std::sync::Arc::new(crate::checkpoint::SnapshotTarget {
            store: std::sync::Arc::new(crate::storage::LocalStore::new("/tmp").unwrap()),
            dir: "x".into(),
        });
        Barrier {
            id: 1,
            kind: crate::control::api::SnapshotKind::Checkpoint,
            stop: false,
            target,
            triggered_at_ms: 0,
            is_final: false,
        }
    }

    /// Many keys per key group (the table grows and rehashes), string and integer keys, and
    /// the count carries over a snapshot and restore.
    #[tokio::test]
    async fn counts_many_keys_per_key_group_across_a_restore() {
        let all = key_group_range(0, 1, 8);
        let keys: Vec<Key> = (0..3000)
            .map(|i| {
                if i % 2 == 0 {
                    Key::Str(format!("word-{i}").into())
                } else {
                    Key::Int(i)
                }
            })
            .collect();
        let batch = || {
            keys.iter()
                .map(|k| Record {
                    row: Row::from_json(serde_json::json!({})),
                    keyed: Some(KeyedBy::new(k.clone(), 8)),
                })
                .collect::<Vec<_>>()
        };
        let new = |restore| Aggregate::new("c", AggregateFn::Count, None, "k", "k", all, restore).unwrap();
        let mut op = new(OperatorRestore::default());
        let mut out = Vec::new();
        op.process(batch(), &mut out).await.unwrap();
        op.process(batch(), &mut out).await.unwrap();
        assert_eq!(op.len(), 3000);
        // Key field and value field of the same name: the value replaces the key.
        assert_eq!(serde_json::to_string(&out[3000].row).unwrap(), r#"{"k":2}"#);
        let enc = op.snapshot(&barrier()).await.unwrap().unwrap()().unwrap();
        let mut restored = new(OperatorRestore {
            key_groups: enc.key_groups,
            operator_state: vec![],
        });
        let mut out = Vec::new();
        restored.process(batch(), &mut out).await.unwrap();
        assert!(out.iter().all(|r| r.row.values() == [Datum::Int(3)]));
        assert_eq!(restored.len(), 3000);
    }

    #[tokio::test]
    async fn running_sum_emits_updates_and_snapshot_restores_by_key_group() {
        let all = key_group_range(0, 1, 8);
        let mut op = Aggregate::new(
            "s",
            AggregateFn::Sum,
            Some("n"),
            "word",
            "total",
            all,
            OperatorRestore::default(),
        )
        .unwrap();
        let mut out = Vec::new();
        let input = vec![
            keyed("a", json!({"n": 2})),
            keyed("b", json!({"n": 1})),
            keyed("a", json!({"n": 5})),
        ];
        op.process(input, &mut out).await.unwrap();
        let vals: Vec<_> = out.iter().map(|r| r.row.to_json()).collect();
        assert_eq!(
            vals,
            vec![
                json!({"word": "a", "total": 2}),
                json!({"word": "b", "total": 1}),
                json!({"word": "a", "total": 7})
            ]
        );
        assert_eq!(serde_json::to_string(&out[0].row).unwrap(), r#"{"word":"a","total":2}"#);

        let enc = op.snapshot(&barrier()).await.unwrap().unwrap()().unwrap();
        // Restore into two subtasks of parallelism 2: each gets only its key groups, together all keys.
        let mut total = 0;
        for i in 0..2 {
            let r = key_group_range(i, 2, 8);
            let restored = Aggregate::new(
                "s",
                AggregateFn::Sum,
                Some("n"),
                "word",
                "total",
                r,
                OperatorRestore {
                    key_groups: enc.key_groups.clone(),
                    operator_state: vec![],
                },
            )
            .unwrap();
            total += restored.len();
        }
        assert_eq!(total, 2);
    }
}
