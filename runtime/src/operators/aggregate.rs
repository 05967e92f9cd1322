//! Keyed running aggregations (`count`, `sum`, `min`, `max`) on heap keyed state.
//!
//! State lives in key groups: one hash map per key group of the subtask's
//! [`KeyGroupRange`], so a snapshot writes per-key-group blocks and a restore at another
//! parallelism takes exactly the groups it now owns.

use super::{EncodedState, OperatorRestore, SnapshotEncoder, StreamOperator, TaskError, TaskResult};
use crate::checkpoint::Barrier;
use crate::job::validate::AggregateFn;
use crate::record::cel::{self, Expr};
use crate::record::{Key, Record, Value};
use crate::state::key_group::KeyGroupRange;
use crate::state::snapshot::KeyGroupBlock;
use async_trait::async_trait;
use serde::{Deserialize, Serialize};

/// A key group's map. In-memory only, so it uses a fast per-process seeded hasher
/// (foldhash); the key → key group assignment uses the stable xxh3 hash instead.
type GroupMap = std::collections::HashMap<Key, Num, foldhash::fast::RandomState>;

/// An aggregate value: integers stay integers until a float is aggregated.
#[derive(Clone, Copy, Debug, PartialEq, Serialize, Deserialize)]
pub enum Num {
    /// Integer.
    Int(i64),
    /// Floating point.
    Float(f64),
}

impl Num {
    fn from_value(v: &Value) -> Option<Num> {
        let n = v.as_number()?;
        n.as_i64().map(Num::Int).or_else(|| n.as_f64().map(Num::Float))
    }

    fn to_value(self) -> Value {
        match self {
            Num::Int(i) => Value::from(i),
            Num::Float(f) => serde_json::Number::from_f64(f)
                .map(Value::Number)
                .unwrap_or(Value::Null),
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
    key_field: String,
    as_field: String,
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
        let mut groups = vec![GroupMap::default(); range.len() as usize];
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
            groups[(block.key_group - range.start) as usize].extend(entries);
        }
        Ok(Aggregate {
            uid: uid.to_string(),
            func,
            expr,
            key_field: key_field.to_string(),
            as_field: as_field.to_string(),
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
        out.reserve(input.len());
        for r in input {
            let keyed = r.keyed.ok_or_else(|| {
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
                    let v = e.eval(&r.value)?;
                    Num::from_value(&v).ok_or_else(|| {
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
            let value = match group.get_mut(&keyed.key) {
                Some(cur) => {
                    *cur = cur.combine(func, x);
                    *cur
                }
                None => {
                    let first = if func == AggregateFn::Count { Num::Int(1) } else { x };
                    group.insert(keyed.key.clone(), first);
                    first
                }
            };
            let mut obj = serde_json::Map::with_capacity(2);
            obj.insert(self.key_field.clone(), keyed.key.into_value());
            obj.insert(self.as_field.clone(), value.to_value());
            out.push(Record::new(Value::Object(obj)));
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
    use crate::state::key_group::{key_group, key_group_range};
    use serde_json::json;

    fn keyed(word: &str, v: Value) -> Record {
        let key = Key::Str(word.into());
        Record {
            value: v,
            keyed: Some(KeyedBy {
                key_group: key_group(&key, 8),
                key,
            }),
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
        let vals: Vec<_> = out.iter().map(|r| r.value.clone()).collect();
        assert_eq!(
            vals,
            vec![
                json!({"word": "a", "total": 2}),
                json!({"word": "b", "total": 1}),
                json!({"word": "a", "total": 7})
            ]
        );
        assert_eq!(serde_json::to_string(&vals[0]).unwrap(), r#"{"word":"a","total":2}"#);

        let target = std::sync::Arc::new(crate::checkpoint::SnapshotTarget {
            store: std::sync::Arc::new(crate::storage::LocalStore::new("/tmp").unwrap()),
            dir: "x".into(),
        });
        let barrier = Barrier {
            id: 1,
            kind: crate::control::api::SnapshotKind::Checkpoint,
            stop: false,
            target,
            triggered_at_ms: 0,
        };
        let enc = op.snapshot(&barrier).await.unwrap().unwrap()().unwrap();
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
