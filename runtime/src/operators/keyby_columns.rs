//! `keyBy` over a columnar batch: the key column computed from the key field's column by the
//! key expression's [`ColumnKernel`](crate::record::cel_fast::ColumnKernel), each key hashed
//! once and its key group taken from that hash (the numbers the row path computes).

use super::KeyBy;
use crate::record::cel_fast::{BinaryOp, ColumnKernel, FastValue};
use crate::record::columns::{Column, KeyColumn, KeyColumns};
use crate::record::{ColumnBatch, Key, KeyedBy};
use crate::state::key_group::{int_key_hash, key_group_of_hash};
use strength_reduce::StrengthReducedU64;

impl KeyBy {
    /// The key columns of `batch` when the key expression is a column kernel that decides
    /// every row: an integer column without nulls whose kernel gives integers (`id`,
    /// `id % 100000`; an overflow or `% 0` is left to the row path), or a string column read
    /// as it is (`key`). `None` otherwise: the row path then decides row by row, with its
    /// errors.
    pub(super) fn key_columns(&self, batch: &ColumnBatch) -> Option<KeyColumns> {
        let kernel = self.expr.column_kernel(batch.schema())?;
        let max_parallelism = self.max_parallelism;
        let n = batch.len();
        // A derived column (a field the source left to be computed when read) computed here.
        let column = batch.columns().get(kernel.position())?.materialized();
        let keys = match &*column {
            Column::Int(v) if v.validity.is_none() => {
                return match kernel {
                    ColumnKernel::Column(_) => Some(int_key_columns(&v.values, |x| x, max_parallelism)),
                    // `% k` cannot fail for these k (the checked form fails for 0 and for
                    // i64::MIN % -1 only). `k` is known only at run time, so `x % k` would be
                    // a hardware division per record (tens of cycles; one instruction to
                    // callgrind): divide by multiplication instead, as a compiler does for a
                    // constant divisor.
                    ColumnKernel::ColumnOpInt(BinaryOp::Modulo, _, k) if k != 0 && k != -1 => {
                        let divisor = StrengthReducedU64::new(k.unsigned_abs());
                        Some(int_key_columns(
                            &v.values,
                            |x| truncated_remainder(x, divisor),
                            max_parallelism,
                        ))
                    }
                    _ => {
                        let keys: Vec<i64> = v
                            .values
                            .iter()
                            .map(|&x| match kernel.eval_int(x)? {
                                FastValue::Int(key) => Some(key),
                                _ => None,
                            })
                            .collect::<Option<_>>()?;
                        Some(int_key_columns(&keys, |x| x, max_parallelism))
                    }
                };
            }
            // A plain field read: the string is the key.
            Column::Str(s) if matches!(kernel, ColumnKernel::Column(_)) => {
                let (mut key_groups, mut hashes) = (Vec::with_capacity(n), Vec::with_capacity(n));
                let mut keys = Vec::with_capacity(n);
                for i in 0..n {
                    let keyed = KeyedBy::new(Key::Str(s.get(i)?.into()), max_parallelism);
                    hashes.push(keyed.hash);
                    key_groups.push(keyed.key_group);
                    keys.push(keyed.key);
                }
                (KeyColumn::Any(keys), key_groups, hashes)
            }
            // The generator's `key-<k>`, formatted into an inline string per record.
            Column::Prefixed(p) if matches!(kernel, ColumnKernel::Column(_)) => {
                let (mut key_groups, mut hashes) = (Vec::with_capacity(n), Vec::with_capacity(n));
                let mut keys = Vec::with_capacity(n);
                for i in 0..n {
                    let keyed = KeyedBy::new(Key::Str(p.get(i)), max_parallelism);
                    hashes.push(keyed.hash);
                    key_groups.push(keyed.key_group);
                    keys.push(keyed.key);
                }
                (KeyColumn::Any(keys), key_groups, hashes)
            }
            _ => return None,
        };
        let (keys, key_groups, hashes) = keys;
        Some(KeyColumns {
            keys,
            key_groups,
            hashes,
        })
    }
}

/// `x % k` as Rust computes it (truncated: the result has the sign of `x`), for the divisor
/// `abs_divisor` = `|k|` reduced once per batch (`strength_reduce`: a multiply and shifts per
/// value, Granlund and Montgomery, "Division by invariant integers using multiplication",
/// PLDI 1994). `|x| % |k|` is below `|k|` ≤ 2^63, so it fits an `i64`.
fn truncated_remainder(x: i64, abs_divisor: StrengthReducedU64) -> i64 {
    let remainder = (x.unsigned_abs() % abs_divisor) as i64;
    if x < 0 { -remainder } else { remainder }
}

/// The key columns of integer keys `key(x)` for the values `x`: each key, its hash
/// ([`int_key_hash`]) and its key group ([`key_group_of_hash`]; a mask when
/// `max_parallelism` is a power of two, the same number, in a loop the compiler vectorizes).
///
/// Three loops, each collected from an exact-size iterator, measured against one fused loop
/// (callgrind, benchmarks.md "Integer keys at 0.8×"): a fused loop either pushes into three
/// vectors (a capacity check per value: 65 instructions per record against 57) or writes
/// into vectors zeroed first (37, plus a `memset` per vector that callgrind counts at one
/// instruction per byte: 20 more).
fn int_key_columns(values: &[i64], key: impl Fn(i64) -> i64, max_parallelism: u32) -> KeyColumns {
    let keys: Vec<i64> = values.iter().map(|&x| key(x)).collect();
    let hashes: Vec<u64> = keys.iter().map(|&k| int_key_hash(k)).collect();
    let key_groups: Vec<u32> = if max_parallelism.is_power_of_two() {
        let mask = u64::from(max_parallelism) - 1;
        hashes.iter().map(|&hash| (hash & mask) as u32).collect()
    } else {
        hashes
            .iter()
            .map(|&hash| key_group_of_hash(hash, max_parallelism))
            .collect()
    };
    KeyColumns {
        keys: KeyColumn::Int(keys),
        key_groups,
        hashes,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_strength_reduced_remainder_is_rusts_remainder() {
        let divisors = [1, 2, 3, 7, 10, 100_000, 1 << 32, i64::MAX, i64::MIN, -2, -7, -100_000];
        let values = [
            0,
            1,
            -1,
            99_999,
            100_000,
            -100_001,
            123_456_789_012,
            -123_456_789_012,
            i64::MAX,
            i64::MIN,
            i64::MIN + 1,
        ];
        for k in divisors {
            let divisor = StrengthReducedU64::new(k.unsigned_abs());
            for x in values.into_iter().chain((-5000..5000).map(|i| i * 7919)) {
                assert_eq!(truncated_remainder(x, divisor), x % k, "{x} % {k}");
            }
        }
    }
    use crate::operators::StreamOperator;
    use crate::record::columns::{DerivedInts, PrefixedInts, Strings, Values};
    use crate::record::{Batch, Record, Schema};

    fn batch(ids: &[i64]) -> ColumnBatch {
        let mut s = Strings::default();
        for i in 0..ids.len() {
            s.push(if i % 2 == 0 {
                "a"
            } else {
                "a string longer than twenty-four bytes"
            });
        }
        let p = PrefixedInts {
            prefix: "key-",
            values: ids.iter().map(|i| i.unsigned_abs()).collect(),
        };
        // Integers derived from the ids when read (a field the generator did not compute).
        let d = DerivedInts {
            ids: ids.to_vec(),
            params: [7, 1000],
            derive: |params, id| (id as u64).wrapping_mul(params[0]) % params[1],
            prefix: None,
        };
        let columns = vec![
            Column::Str(s),
            Column::Int(Values::from_vec(ids.to_vec())),
            Column::Prefixed(p),
            Column::Derived(d),
        ];
        ColumnBatch::new(Schema::new(["s", "id", "p", "d"]), columns).unwrap()
    }

    /// Over columns, `keyBy` gives every record the key, key group and hash of the row path,
    /// as columns when the kernel decides every row (a derived column computed first); what
    /// the kernel leaves (a boolean result, an overflow, `% 0`, another expression) goes to
    /// the row path, which decides and names the expression in its errors. Key groups by a
    /// mask (a power-of-two maxParallelism) and by `%` (any other) alike.
    #[tokio::test]
    async fn column_keys_equal_the_row_keys() {
        for max_parallelism in [128, 100] {
            column_keys_equal_the_row_keys_at(max_parallelism).await;
        }
    }

    async fn column_keys_equal_the_row_keys_at(max_parallelism: u32) {
        let ids = [0, 1, -7, 123_456, i64::MAX, i64::MIN + 1, 99_999];
        for (source, columnar) in [
            ("d", true),
            ("d % 13", true),
            ("id", true),
            ("s", true),
            ("p", true),
            ("id % 100000", true),
            ("id / 7", true),
            ("id - 1", true),
            ("id > 5", false),
            ("s + '!'", false),
            ("id * 2", false),
        ] {
            let mut by = KeyBy::new(source, max_parallelism).unwrap();
            let input = batch(&ids);
            let rows = by.process(input.clone().into_records(), &mut Vec::new()).await;
            let mut by = KeyBy::new(source, max_parallelism).unwrap();
            let columns = by.process_columns(input).await;
            match (rows, columns) {
                (Ok(()), Ok(out)) => {
                    assert_eq!(matches!(out, Batch::Columns(_)), columnar, "{source}");
                    let mut want = Vec::new();
                    KeyBy::new(source, max_parallelism)
                        .unwrap()
                        .process(batch(&ids).into_records(), &mut want)
                        .await
                        .unwrap();
                    let got: Vec<Record> = out.into_records();
                    assert_eq!(got, want, "{source} at {max_parallelism}");
                }
                (Err(r), Err(c)) => {
                    assert_eq!(r.0, c.0, "{source}");
                    assert!(c.0.contains(source), "{source}: {}", c.0);
                }
                (r, c) => panic!("{source}: rows {r:?}, columns {:?}", c.map(|b| b.len())),
            }
        }
    }
}
