//! A keyed aggregation over a columnar batch: state updated from the key columns `keyBy`
//! computed (the hash and key group it already has; an integer key read from a plain vector),
//! and the output appended as columns `{<keyField>: key, <asField>: value}`, the records the
//! row path emits for the same input.

use super::{Aggregate, Num, TaskError, TaskResult};
use crate::job::validate::AggregateFn;
use crate::record::cel_fast::FastValue;
use crate::record::columns::{Column, KeyColumn, KeyColumns, Values};
use crate::record::{Batch, ColumnBatch, Record, Row};

impl Aggregate {
    /// Aggregates a keyed columnar batch. `Err(input)` (untouched) when the column path does
    /// not apply: the batch is not keyed, or the step's expression is not a column kernel over
    /// an integer column without nulls that gives integers; the caller then takes the row
    /// path, which decides (and names what is wrong) record by record.
    pub(super) fn process_key_columns(&mut self, mut input: ColumnBatch) -> Result<TaskResult<Batch>, ColumnBatch> {
        let Some(inputs) = self.input_values(&input) else {
            return Err(input);
        };
        let Some(keyed) = input.take_keyed() else {
            return Err(input);
        };
        Ok(self.update_columns(keyed, inputs))
    }

    /// What each record adds to its key's aggregate: 1 for `count` (`None`: no vector), else
    /// the expression's integer from its column kernel. `Some(None)` for `count`; `None` when
    /// the column path does not apply.
    fn input_values(&self, input: &ColumnBatch) -> Option<Option<Vec<i64>>> {
        let Some(expr) = &self.expr else {
            return (self.func == AggregateFn::Count).then_some(None);
        };
        let kernel = expr.column_kernel(input.schema())?;
        let column = input.columns().get(kernel.position())?.materialized();
        let Column::Int(v) = &*column else {
            return None;
        };
        if v.validity.is_some() {
            return None;
        }
        let mut values = Vec::with_capacity(v.values.len());
        for &x in &v.values {
            let FastValue::Int(value) = kernel.eval_int(x)? else {
                return None;
            };
            values.push(value);
        }
        Some(Some(values))
    }

    /// Updates state for every record (its key, key group and hash from `keyed`) and returns
    /// the output batch: columns when every value is an integer and the keys are of one type,
    /// else rows.
    fn update_columns(&mut self, keyed: KeyColumns, inputs: Option<Vec<i64>>) -> TaskResult<Batch> {
        let now_ms = self.clock.now_ms();
        let n = keyed.key_groups.len();
        let Aggregate {
            uid,
            func,
            output,
            range,
            state,
            ..
        } = self;
        let (uid, func) = (uid.as_str(), *func);
        let state_err = |e: crate::state::disk::DiskStateError| TaskError(format!("operator {uid}: {e}"));
        state.maintain(now_ms, n).map_err(state_err)?;
        if let Some(kg) = keyed.key_groups.iter().find(|kg| !range.contains(**kg)) {
            return Err(TaskError(format!(
                "operator {uid}: key group {kg} routed to the subtask owning {range:?}"
            )));
        }
        let combine = |i: usize| {
            let x = inputs.as_ref().map_or(Num::Int(1), |v| Num::Int(v[i]));
            move |current: Option<&Num>| match current {
                Some(old) => old.combine(func, x),
                None if func == AggregateFn::Count => Num::Int(1),
                None => x,
            }
        };
        let (key_groups, hashes) = (&keyed.key_groups, &keyed.hashes);
        // The output values, handed out in row order: integers (no `Num` vector; a float's
        // row holds 0 there), and any float value by row (a sum turned to floats by overflow,
        // or restored as one).
        let mut integers: Vec<i64> = Vec::with_capacity(n);
        let mut floats: Vec<(usize, f64)> = Vec::new();
        let mut out = |i: usize, value: &Num| match *value {
            Num::Int(x) => integers.push(x),
            Num::Float(f) => {
                integers.push(0);
                floats.push((i, f));
            }
        };
        match (&keyed.keys, state.int_table()) {
            // Integer keys on the integer-key table: one loop of probes, the backend chosen
            // and shared groups taken back once per batch.
            (KeyColumn::Int(keys), Some(table)) => {
                let rows = (&key_groups[..], &hashes[..], &keys[..]);
                if func == AggregateFn::Count {
                    let count = |_, current: Option<&Num>| match current {
                        Some(Num::Int(c)) => Num::Int(c + 1),
                        Some(other) => other.combine(func, Num::Int(1)),
                        None => Num::Int(1),
                    };
                    table.update_each(rows, count, &mut out);
                } else {
                    table.update_each(rows, |i, current| combine(i)(current), &mut out);
                }
            }
            // Integer keys on another backend: no `Key` built until it needs one.
            (KeyColumn::Int(keys), None) => {
                for (i, &k) in keys.iter().enumerate() {
                    let value = state.update_int(key_groups[i], hashes[i], k, now_ms, combine(i));
                    out(i, &value.map_err(state_err)?);
                }
            }
            (KeyColumn::Any(keys), _) => {
                for (i, k) in keys.iter().enumerate() {
                    let value = state.update(key_groups[i], hashes[i], k, now_ms, combine(i));
                    out(i, &value.map_err(state_err)?);
                }
            }
        }
        let key_and_value = output.names().len() != 1;
        let mut keys = keyed.keys;
        // The output columns when every value is an integer: the key column (an integer key
        // vector moved, not copied; none when the keys mix types) and the value column.
        if floats.is_empty() {
            let key_column = match &mut keys {
                _ if !key_and_value => None,
                KeyColumn::Int(keys) => Some(Column::Int(Values::from_vec(std::mem::take(keys)))),
                KeyColumn::Any(keys) => Column::from_keys(keys),
            };
            if !key_and_value || key_column.is_some() {
                let mut columns = Vec::with_capacity(2);
                columns.extend(key_column);
                columns.push(Column::Int(Values::from_vec(integers)));
                return Ok(Batch::Columns(
                    ColumnBatch::new(output.clone(), columns).map_err(TaskError)?,
                ));
            }
        }
        // Rows otherwise.
        let mut values: Vec<Num> = integers.into_iter().map(Num::Int).collect();
        for &(i, f) in &floats {
            values[i] = Num::Float(f);
        }
        Ok(Batch::Rows(
            values
                .into_iter()
                .enumerate()
                .map(|(i, value)| {
                    let mut row = Vec::with_capacity(2);
                    if key_and_value {
                        row.push(keys.key(i).into_datum());
                    }
                    row.push(value.to_datum());
                    Record::new(Row::new_unchecked(output.clone(), row))
                })
                .collect(),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::operators::transform::KeyBy;
    use crate::operators::{OperatorRestore, StreamOperator};
    use crate::record::columns::Strings;
    use crate::record::{Datum, Key, Schema};
    use crate::state::key_group::key_group_range;

    /// 3,000 records `{id, w, value}`: integer ids, 40 words, values 0..1000.
    fn input() -> ColumnBatch {
        let mut words = Strings::default();
        for i in 0..3000 {
            words.push(&format!("w{}", i % 40));
        }
        let columns = vec![
            Column::Int(Values::from_vec((0..3000).collect())),
            Column::Str(words),
            Column::Int(Values::from_vec((0..3000).map(|i| (i * 7919) % 1000).collect())),
        ];
        ColumnBatch::new(Schema::new(["id", "w", "value"]), columns).unwrap()
    }

    async fn blocks(op: &mut Aggregate) -> Vec<crate::state::snapshot::KeyGroupBlock> {
        let barrier = crate::operators::aggregate::tests::barrier();
        let enc = op.snapshot(&barrier).await.unwrap().unwrap()().unwrap();
        enc.collect_stream().unwrap().key_groups
    }

    /// A keyed count or sum over columns emits the row path's records and leaves the same
    /// state (the same blocks in a snapshot), for integer and string keys, a sum of a column,
    /// a key field and value field of the same name, and an expression the column path does
    /// not take (a float: the row path decides); a sum that overflows turns to floats as rows
    /// do.
    #[tokio::test]
    async fn columns_give_the_records_and_state_of_rows() {
        for (key, func, expression, key_field, as_field) in [
            ("id % 100", AggregateFn::Count, None, "k", "count"),
            ("w", AggregateFn::Count, None, "w", "count"),
            ("id % 7", AggregateFn::Sum, Some("value"), "k", "total"),
            ("id % 7", AggregateFn::Max, Some("value % 13"), "k", "k"),
            ("w", AggregateFn::Sum, Some("value * 9223372036854775"), "w", "total"),
            ("id % 3", AggregateFn::Min, Some("double(value) / 3.0"), "k", "m"),
        ] {
            let what = format!("{key} {func:?} {expression:?}");
            let range = key_group_range(0, 1, 64);
            let new = || {
                Aggregate::new(
                    "a",
                    func,
                    expression,
                    key_field,
                    as_field,
                    range,
                    OperatorRestore::default(),
                )
                .unwrap()
            };
            let (mut by_rows, mut by_columns) = (new(), new());
            let mut want = Vec::new();
            for _ in 0..2 {
                let mut keyed = Vec::new();
                KeyBy::new(key, 64)
                    .unwrap()
                    .process(input().into_records(), &mut keyed)
                    .await
                    .unwrap();
                by_rows.process(keyed, &mut want).await.unwrap();
            }
            let mut got = Vec::new();
            for _ in 0..2 {
                let keyed = KeyBy::new(key, 64).unwrap().process_columns(input()).await.unwrap();
                let Batch::Columns(keyed) = keyed else {
                    panic!("{what}: keyBy gave rows")
                };
                got.extend(by_columns.process_columns(keyed).await.unwrap().into_records());
            }
            assert_eq!(got, want, "{what}");
            assert!(got.iter().all(|r| r.keyed.is_none()));
            let (a, b) = (blocks(&mut by_rows).await, blocks(&mut by_columns).await);
            assert_eq!(a.len(), b.len(), "{what}");
            for (a, b) in a.iter().zip(&b) {
                assert_eq!((a.key_group, &a.data), (b.key_group, &b.data), "{what}");
            }
        }
        // Overflowing sums become floats, and the output rows (not columns) say so.
        let range = key_group_range(0, 1, 64);
        let mut op = Aggregate::new(
            "a",
            AggregateFn::Sum,
            Some("id"),
            "k",
            "s",
            range,
            OperatorRestore::default(),
        )
        .unwrap();
        let mut big = ColumnBatch::new(
            Schema::new(["id"]),
            vec![Column::Int(Values::from_vec(vec![i64::MAX, i64::MAX]))],
        )
        .unwrap();
        let keyed = KeyColumns {
            keys: KeyColumn::Int(vec![1, 1]),
            key_groups: vec![crate::state::key_group::key_group(&Key::Int(1), 64); 2],
            hashes: vec![crate::state::key_group::key_hash(&Key::Int(1)); 2],
        };
        big.set_keyed(keyed).unwrap();
        let out = op.process_columns(big).await.unwrap();
        assert!(matches!(out, Batch::Rows(_)));
        let values: Vec<Datum> = out.into_records().iter().map(|r| r.row.values()[1].clone()).collect();
        assert_eq!(values, [Datum::Int(i64::MAX), Datum::Float(i64::MAX as f64 * 2.0)]);
    }
}
