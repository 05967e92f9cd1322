//! The deterministic generator: record n is a pure function of (seed, n), split s of S holds
//! the records n ≡ s (mod S), and a split's state is its next record index.

use super::Source;
use crate::job::GeneratorSpec;
use crate::job::field_use::FieldsRead;
use crate::operators::{EncodedState, OperatorRestore, TaskError, TaskResult};
use crate::record::columns::{Column, DerivedInts, PrefixedInts, Values};
use crate::record::{Batch, ColumnBatch, Datum, Record, Row, Schema};
use async_trait::async_trait;
use serde::{Deserialize, Serialize};
use std::sync::{Arc, OnceLock};

/// Position of one generator split.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct GeneratorSplit {
    /// Split index s (records n ≡ s mod splits).
    pub index: u32,
    /// Next record index of this split.
    pub next: u64,
}

/// SplitMix64, the standard 64-bit mixer (Steele, Lea, Flood 2014).
pub fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// The generator's schema: `id`, `key`, `value` (also the plan-time schema of the step).
pub const FIELDS: [&str; 3] = ["id", "key", "value"];

/// The shared schema of every generated row.
pub fn schema() -> Arc<Schema> {
    static SCHEMA: OnceLock<Arc<Schema>> = OnceLock::new();
    SCHEMA.get_or_init(|| Schema::new(FIELDS)).clone()
}

/// Record n of the sequence: `{"id": n, "key": "key-<k>", "value": v}` with k < keys and
/// 0 ≤ v < 1000.
pub fn record(seed: u64, n: u64, keys: u64) -> Row {
    record_of(&schema(), seed, n, keys)
}

/// [`record`] under `schema` (the generator's, held by the caller: no lookup per record).
#[inline]
fn record_of(schema: &Arc<Schema>, seed: u64, n: u64, keys: u64) -> Row {
    let h = splitmix64(seed ^ splitmix64(n));
    let values = vec![
        Datum::from_u64(n),
        Datum::Str(key_string(h % keys)),
        Datum::Int(((h >> 40) % 1000) as i64),
    ];
    Row::new_unchecked(schema.clone(), values)
}

/// The generated key `key-<k>`, k in decimal. Built in place with `itoa` (the `fmt` machinery
/// cost about 260 instructions per record); at most 24 bytes ("key-" and up to 20 digits), so
/// the string is inline in the `CompactString` (no allocation).
#[inline]
pub fn key_string(k: u64) -> compact_str::CompactString {
    let mut digits = itoa::Buffer::new();
    let mut key = compact_str::CompactString::const_new("key-");
    key.push_str(digits.format(k));
    key
}

/// A generator source subtask.
pub struct Generator {
    seed: u64,
    keys: u64,
    count: Option<u64>,
    splits_total: u64,
    rate: Option<u64>,
    splits: Vec<GeneratorSplit>,
    schema: Arc<Schema>,
    /// The fields columnar batches compute when made ([`Source::project`]).
    computed: Computed,
    /// The last batch's first record index (sequence number) and the step between indexes,
    /// for [`Source::record_origin`].
    last_batch: (u64, u64),
    /// Records a split gives in one turn ([`Source::set_read_turn`]); `u64::MAX` until set:
    /// a turn is then one batch.
    turn: u64,
}

impl Generator {
    /// Creates subtask `subtask` of `parallelism`, taking splits `s` with
    /// `s mod parallelism == subtask` and their restored positions.
    pub fn new(
        spec: &GeneratorSpec,
        subtask: u32,
        parallelism: u32,
        restore: OperatorRestore,
    ) -> TaskResult<Generator> {
        let total = spec.splits.unwrap_or(32);
        let mut restored = std::collections::HashMap::new();
        for item in &restore.operator_state {
            let s: GeneratorSplit = postcard::from_bytes(item)
                .map_err(|e| TaskError(format!("generator split state does not decode: {e}")))?;
            restored.insert(s.index, s.next);
        }
        if !restored.is_empty() && restored.len() != total as usize {
            return Err(TaskError(format!(
                "the restore point has {} generator splits but the job has {total}; `splits` cannot change",
                restored.len()
            )));
        }
        let splits = (0..total)
            .filter(|s| s % parallelism == subtask)
            .map(|s| GeneratorSplit {
                index: s,
                next: restored.get(&s).copied().unwrap_or(u64::from(s)),
            })
            .collect();
        Ok(Generator {
            seed: spec.seed,
            keys: spec.keys.unwrap_or(1000),
            count: spec.count,
            splits_total: u64::from(total),
            rate: spec.max_records_per_second,
            splits,
            schema: schema(),
            computed: Computed::ALL,
            last_batch: (0, 0),
            turn: u64::MAX,
        })
    }

    /// The next batch's records, taken from the live split furthest behind (the smallest
    /// next record index; splits start at their own index, so from the start this is
    /// round-robin, one batch from each in turn): `(first record index, records, step between
    /// indexes)`, the split's position already moved past them. `None` once every split is
    /// exhausted.
    ///
    /// The order is a function of the splits' positions alone, so a restore replays the
    /// records in the order the failure-free run read them. A round-robin cursor, which no
    /// snapshot holds, restarted at the first split after a restore: splits a round ahead
    /// were read again before those behind, so records came up to two batches per split
    /// (65,536 ids with 32 splits) out of order, past a `maxOutOfOrderness` that held the
    /// failure-free run, and a window fired before them (found by a review: 1,722–20,405
    /// results differing from the failure-free run after kills -9).
    ///
    /// With a turn set ([`Source::set_read_turn`]), the split furthest behind in whole turns
    /// gives the rest of its turn, at most `max` records: the order of records is then the same
    /// for any `max` (a rate limit's smaller batches: helper-98 found 79,142 and 58,123 late
    /// records of one job without and with `maxRecordsPerSecond: 10000`).
    fn take_next(&mut self, max: usize) -> Option<(u64, u64, u64)> {
        let count = self.count;
        let step = self.splits_total;
        let turn = self.turn;
        let read = |s: &GeneratorSplit| (s.next - u64::from(s.index)) / step.max(1);
        let split = self
            .splits
            .iter_mut()
            .filter(|s| count.is_none_or(|c| s.next < c))
            .min_by_key(|s| match turn {
                // Each batch is a turn: the split with the smallest next record index.
                u64::MAX => (s.next, u64::from(s.index)),
                // The first split (by index) of those in the earliest turn: a split part-way
                // through its turn goes on before the next split starts its own.
                _ => (read(s) / turn, u64::from(s.index)),
            })?;
        // The records of this batch, counted up front: one loop that fills the batch with no
        // per-record bound check.
        let left = count.map_or(u64::MAX, |c| c.saturating_sub(split.next).div_ceil(step.max(1)));
        let rest_of_turn = turn - read(split) % turn;
        let n = left.min(max as u64).min(rest_of_turn);
        let first = split.next;
        split.next += n * step;
        self.last_batch = (first, step);
        Some((first, n, step))
    }
}

/// Which of the generated fields `key` and `value` a batch computes when it is made; the
/// others are [`Column::Derived`]: computed from `id` only where something reads them.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Computed {
    /// `key` is computed.
    pub key: bool,
    /// `value` is computed.
    pub value: bool,
}

impl Computed {
    /// Both fields (what a job that reads every field needs).
    pub const ALL: Computed = Computed { key: true, value: true };

    /// The fields `read` names.
    pub fn of(read: &FieldsRead) -> Computed {
        Computed {
            key: read.reads("key"),
            value: read.reads("value"),
        }
    }
}

/// Record `id`'s key number k (`key-<k>`) for `params` = `[seed, keys]`.
fn key_number(params: &[u64; 2], id: i64) -> u64 {
    splitmix64(params[0] ^ splitmix64(id as u64)) % params[1]
}

/// Record `id`'s `value` for `params` = `[seed, keys]`.
fn value_number(params: &[u64; 2], id: i64) -> u64 {
    (splitmix64(params[0] ^ splitmix64(id as u64)) >> 40) % 1000
}

/// Records `first`, `first + step`, … (`n` of them) as columns `id`, `key`, `value`: the
/// values of [`record`] for the same indexes, `key` and `value` computed now only when
/// `computed` says so (else derived from `id` when read). `None` when an index does not fit
/// in an `i64` (its `id` is a `Datum::UInt`, which the integer column does not hold).
fn columns_of(
    schema: &Arc<Schema>,
    seed: u64,
    keys: u64,
    (first, n, step): (u64, u64, u64),
    computed: Computed,
) -> Option<ColumnBatch> {
    let last = first.checked_add(n.saturating_sub(1).checked_mul(step)?)?;
    i64::try_from(last).ok()?;
    let rows = n as usize;
    let params = [seed, keys];
    let ids: Vec<i64> = (0..n).map(|j| (first + j * step) as i64).collect();
    // `key-<k>` kept as the numbers k (formatted where a key string is read).
    let key_column = |key_numbers| {
        Column::Prefixed(PrefixedInts {
            prefix: "key-",
            values: key_numbers,
        })
    };
    let derived = |derive, prefix| {
        Column::Derived(DerivedInts {
            ids: ids.clone(),
            params,
            derive,
            prefix,
        })
    };
    let (key, value) = match computed {
        // Both from one hash per record.
        Computed { key: true, value: true } => {
            let (mut key_numbers, mut values) = (Vec::with_capacity(rows), Vec::with_capacity(rows));
            for &id in &ids {
                let h = splitmix64(seed ^ splitmix64(id as u64));
                key_numbers.push(h % keys);
                values.push(((h >> 40) % 1000) as i64);
            }
            (key_column(key_numbers), Column::Int(Values::from_vec(values)))
        }
        Computed {
            key: true,
            value: false,
        } => (
            key_column(ids.iter().map(|&id| key_number(&params, id)).collect()),
            derived(value_number, None),
        ),
        Computed {
            key: false,
            value: true,
        } => (
            derived(key_number, Some("key-")),
            Column::Int(Values::from_vec(
                ids.iter().map(|&id| value_number(&params, id) as i64).collect(),
            )),
        ),
        Computed {
            key: false,
            value: false,
        } => (derived(key_number, Some("key-")), derived(value_number, None)),
    };
    ColumnBatch::new(schema.clone(), vec![Column::Int(Values::from_vec(ids)), key, value]).ok()
}

/// Records left in `splits` of a generator of `count` records whose splits step by `step`
/// (the number of splits): split s yields n = next, next + step, … while n < count, so it has
/// ⌈(count − next) / step⌉ left. `None` when the generator is unbounded (`count` absent).
pub fn pending_records(splits: &[GeneratorSplit], count: Option<u64>, step: u64) -> Option<u64> {
    let count = count?;
    let step = step.max(1);
    Some(splits.iter().map(|s| count.saturating_sub(s.next).div_ceil(step)).sum())
}

#[async_trait]
impl Source for Generator {
    fn pending(&self) -> Option<super::SourcePending> {
        pending_records(&self.splits, self.count, self.splits_total).map(super::SourcePending::Records)
    }

    fn set_read_turn(&mut self, records: usize) {
        self.turn = (records as u64).max(1);
    }

    async fn next_batch(&mut self, out: &mut Vec<Record>, max: usize) -> TaskResult<bool> {
        let Some((first, n, step)) = self.take_next(max) else {
            return Ok(false);
        };
        let (seed, keys, schema) = (self.seed, self.keys, &self.schema);
        out.reserve(n as usize);
        out.extend((0..n).map(|j| Record::new(record_of(schema, seed, first + j * step, keys))));
        Ok(true)
    }

    async fn next_any_batch(&mut self, max: usize) -> TaskResult<Option<Batch>> {
        let Some((first, n, step)) = self.take_next(max) else {
            return Ok(None);
        };
        let (seed, keys, schema) = (self.seed, self.keys, &self.schema);
        Ok(Some(
            match columns_of(schema, seed, keys, (first, n, step), self.computed) {
                Some(columns) => Batch::Columns(columns),
                None => Batch::Rows(
                    (0..n)
                        .map(|j| Record::new(record_of(schema, seed, first + j * step, keys)))
                        .collect(),
                ),
            },
        ))
    }

    fn snapshot(&self) -> TaskResult<EncodedState> {
        Ok(EncodedState::operator_only(
            "operator:splits",
            self.splits.iter().map(postcard::to_stdvec).collect::<Result<_, _>>()?,
        ))
    }

    fn max_records_per_second(&self) -> Option<u64> {
        self.rate
    }

    fn project(&mut self, read: &FieldsRead) {
        self.computed = Computed::of(read);
    }

    fn record_origin(&self, index: usize) -> Option<String> {
        let (first, step) = self.last_batch;
        let n = first.checked_add((index as u64).checked_mul(step)?)?;
        Some(generated_record_origin(n, self.splits_total))
    }
}

/// Where generated record `n` came from, for error messages: `the record with sequence number
/// 64 (its id; split 0 of 32)`. The sequence number is the record's `id` and replays the
/// record (record n is a pure function of the seed and n).
pub fn generated_record_origin(n: u64, splits_total: u64) -> String {
    format!(
        "the record with sequence number {n} (its id; split {} of {splits_total})",
        n % splits_total.max(1)
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn id_of(r: &Record) -> u64 {
        match r.row.get("id") {
            Some(Datum::Int(i)) => *i as u64,
            other => panic!("id {other:?}"),
        }
    }

    /// Each record of the last batch names its sequence number (its `id`) and split.
    #[tokio::test]
    async fn a_records_origin_is_its_sequence_number() {
        let spec = GeneratorSpec {
            count: Some(100),
            splits: Some(4),
            ..Default::default()
        };
        let mut g = Generator::new(&spec, 1, 2, OperatorRestore::default()).unwrap();
        for _ in 0..3 {
            let mut out = vec![];
            assert!(g.next_batch(&mut out, 5).await.unwrap());
            for (i, r) in out.iter().enumerate() {
                let n = id_of(r);
                let want = format!("the record with sequence number {n} (its id; split {} of 4)", n % 4);
                assert_eq!(g.record_origin(i).as_deref(), Some(want.as_str()), "record {i}");
            }
        }
    }

    async fn drain(g: &mut Generator) -> Vec<u64> {
        let mut ids = vec![];
        let mut out = vec![];
        while g.next_batch(&mut out, 7).await.unwrap() {
            ids.extend(out.drain(..).map(|r| id_of(&r)));
        }
        ids
    }

    /// Columnar batches hold the records of the row path, split by split in the same order,
    /// and the positions move the same way; an id beyond `i64::MAX` gives rows.
    #[tokio::test]
    async fn columnar_batches_hold_the_records_of_the_row_path() {
        let spec = GeneratorSpec {
            seed: 9,
            count: Some(1000),
            splits: Some(3),
            keys: Some(77),
            ..Default::default()
        };
        let mut rows = Generator::new(&spec, 0, 1, OperatorRestore::default()).unwrap();
        let mut columns = Generator::new(&spec, 0, 1, OperatorRestore::default()).unwrap();
        let mut want = vec![];
        while rows.next_batch(&mut want, 64).await.unwrap() {}
        let mut got = vec![];
        while let Some(batch) = columns.next_any_batch(64).await.unwrap() {
            assert!(matches!(batch, Batch::Columns(_)));
            got.extend(batch.into_records());
        }
        assert_eq!(got, want);
        assert_eq!(
            columns.snapshot().unwrap().operator_state,
            rows.snapshot().unwrap().operator_state
        );
        let beyond = columns_of(&schema(), 1, 10, (i64::MAX as u64 - 2, 4, 1), Computed::ALL);
        assert!(beyond.is_none(), "an id beyond i64::MAX is not an integer column value");
        assert_eq!(
            columns_of(&schema(), 1, 10, (i64::MAX as u64 - 3, 4, 1), Computed::ALL).map(|b| b.len()),
            Some(4)
        );
    }

    /// A projected generator (fields not read are derived from `id` when read) gives the same
    /// records, the same JSON lines and the same columns once materialized, for every choice of
    /// computed fields, also after a keyed exchange's gather.
    #[tokio::test]
    async fn projected_batches_hold_the_same_records() {
        let spec = GeneratorSpec {
            seed: 5,
            count: Some(300),
            splits: Some(2),
            keys: Some(13),
            ..Default::default()
        };
        let mut full = Generator::new(&spec, 0, 1, OperatorRestore::default()).unwrap();
        let mut want = vec![];
        while let Some(batch) = full.next_any_batch(50).await.unwrap() {
            let Batch::Columns(batch) = batch else { panic!("rows") };
            want.push(batch);
        }
        for (key, value) in [(false, false), (true, false), (false, true)] {
            let computed = Computed { key, value };
            let mut projected = Generator::new(&spec, 0, 1, OperatorRestore::default()).unwrap();
            let read = FieldsRead::Only(
                [("id", true), ("key", key), ("value", value)]
                    .iter()
                    .filter(|(_, read)| *read)
                    .map(|(f, _)| f.to_string())
                    .collect(),
            );
            projected.project(&read);
            assert_eq!(projected.computed, computed);
            for want in &want {
                let Some(Batch::Columns(got)) = projected.next_any_batch(50).await.unwrap() else {
                    panic!("{computed:?}: no columnar batch")
                };
                let derived = got.columns().iter().filter(|c| matches!(c, Column::Derived(_))).count();
                assert_eq!(derived, usize::from(!key) + usize::from(!value), "{computed:?}");
                let (mut a, mut b) = (Vec::new(), Vec::new());
                want.write_json_lines(&mut a);
                got.write_json_lines(&mut b);
                assert_eq!(
                    String::from_utf8(a).unwrap(),
                    String::from_utf8(b).unwrap(),
                    "{computed:?}"
                );
                let rows = [3, 0, 7];
                assert_eq!(got.take(&rows).into_records(), want.take(&rows).into_records());
                let materialized: Vec<Column> = got.columns().iter().map(|c| c.materialized().into_owned()).collect();
                assert_eq!(materialized, want.columns(), "{computed:?}");
                assert_eq!(got.clone().into_records(), want.clone().into_records(), "{computed:?}");
            }
        }
    }

    #[test]
    fn key_string_is_the_decimal_key_after_the_prefix() {
        for k in [0, 7, 10, 99_999, 100_000, u64::from(u32::MAX), u64::MAX] {
            let key = key_string(k);
            assert_eq!(key, format!("key-{k}"));
            assert!(!key.is_heap_allocated(), "{key} is inline");
        }
    }

    #[test]
    fn pending_records_counts_what_each_split_has_left() {
        let split = |index, next| GeneratorSplit { index, next };
        for (splits, count, step, want) in [
            // 10 records over 4 splits: split 1 yields 1, 5, 9 (3 records), split 3 yields 3, 7.
            (vec![split(1, 1), split(3, 3)], Some(10), 4, Some(5)),
            // Part read: split 1 at 9 has one left; split 3 at 11 is done.
            (vec![split(1, 9), split(3, 11)], Some(10), 4, Some(1)),
            (vec![split(0, 0)], Some(0), 1, Some(0)),
            (vec![], Some(10), 4, Some(0)),
            // Unbounded: unknown.
            (vec![split(0, 0)], None, 1, None),
        ] {
            assert_eq!(
                pending_records(&splits, count, step),
                want,
                "{splits:?} {count:?} {step}"
            );
        }
    }

    #[tokio::test]
    async fn pending_falls_to_zero_as_the_generator_is_read() {
        let spec = GeneratorSpec {
            count: Some(100),
            splits: Some(4),
            ..Default::default()
        };
        let mut g = Generator::new(&spec, 1, 2, OperatorRestore::default()).unwrap();
        // Subtask 1 of 2 holds splits 1 and 3: 50 records.
        assert_eq!(g.pending(), Some(super::super::SourcePending::Records(50)));
        let mut out = vec![];
        g.next_batch(&mut out, 7).await.unwrap();
        assert_eq!(g.pending(), Some(super::super::SourcePending::Records(43)));
        let rest = drain(&mut g).await.len() as u64;
        assert_eq!(rest, 43);
        assert_eq!(g.pending(), Some(super::super::SourcePending::Records(0)));
        let unbounded = Generator::new(&GeneratorSpec::default(), 0, 1, OperatorRestore::default()).unwrap();
        assert_eq!(unbounded.pending(), None);
    }

    /// A subtask restored from a snapshot taken in the middle of a round (some splits a batch
    /// ahead of the others) goes on in the order the subtask that took it would have: the
    /// records after the snapshot are the same, in the same order, at every cut.
    #[tokio::test]
    async fn a_restore_in_the_middle_of_a_round_replays_the_failure_free_order() {
        let spec = GeneratorSpec {
            seed: 3,
            count: Some(20_000),
            splits: Some(8),
            ..Default::default()
        };
        for (subtask, parallelism) in [(0, 1), (1, 2)] {
            for batches_before in [1, 3, 5, 9, 14] {
                let mut failure_free = Generator::new(&spec, subtask, parallelism, OperatorRestore::default()).unwrap();
                let mut before = vec![];
                for _ in 0..batches_before {
                    failure_free.next_batch(&mut before, 100).await.unwrap();
                }
                // Every split's item, as a restore pools them: the other subtasks' unread.
                let mut items = failure_free.snapshot().unwrap().operator_state;
                for other in (0..parallelism).filter(|&other| other != subtask) {
                    let unread = Generator::new(&spec, other, parallelism, OperatorRestore::default()).unwrap();
                    items.extend(unread.snapshot().unwrap().operator_state);
                }
                let restore = OperatorRestore {
                    key_groups: vec![],
                    operator_state: items,
                };
                let mut restored = Generator::new(&spec, subtask, parallelism, restore).unwrap();
                let (mut want, mut got) = (vec![], vec![]);
                for _ in 0..12 {
                    failure_free.next_batch(&mut want, 100).await.unwrap();
                    restored.next_batch(&mut got, 100).await.unwrap();
                }
                assert_eq!(
                    got.iter().map(id_of).collect::<Vec<_>>(),
                    want.iter().map(id_of).collect::<Vec<_>>(),
                    "subtask {subtask} of {parallelism}, cut after {batches_before} batches"
                );
            }
        }
    }

    #[tokio::test]
    async fn replay_from_snapshot_at_other_parallelism_yields_each_record_once() {
        let spec = GeneratorSpec {
            seed: 7,
            count: Some(500),
            splits: Some(5),
            ..Default::default()
        };
        // Run 2 subtasks partially, snapshot, restore as 3 subtasks, finish.
        let mut seen = vec![];
        let mut items = vec![];
        for s in 0..2 {
            let mut g = Generator::new(&spec, s, 2, OperatorRestore::default()).unwrap();
            let mut out = vec![];
            for _ in 0..4 {
                g.next_batch(&mut out, 9).await.unwrap();
            }
            seen.extend(out.iter().map(id_of));
            items.extend(g.snapshot().unwrap().operator_state);
        }
        for s in 0..3 {
            let restore = OperatorRestore {
                key_groups: vec![],
                operator_state: items.clone(),
            };
            seen.extend(drain(&mut Generator::new(&spec, s, 3, restore).unwrap()).await);
        }
        seen.sort_unstable();
        assert_eq!(seen, (0..500).collect::<Vec<_>>());
        assert_eq!(record(7, 3, 10), record(7, 3, 10));
        // The same JSON as when records were built as JSON objects.
        let h = splitmix64(7 ^ splitmix64(3));
        let want = serde_json::json!({"id": 3, "key": format!("key-{}", h % 10), "value": (h >> 40) % 1000});
        assert_eq!(
            serde_json::to_string(&record(7, 3, 10)).unwrap(),
            serde_json::to_string(&want).unwrap()
        );
    }

    /// With a turn set, the order of records is the same for every batch size (a rate limit's
    /// smaller batches), also across a restore between batches of another size; without one, a
    /// batch is a turn (the order then followed the batch size: helper-98).
    #[tokio::test]
    async fn with_a_turn_the_order_does_not_depend_on_the_batch_size() {
        let spec = GeneratorSpec {
            seed: 5,
            count: Some(9_000),
            splits: Some(4),
            ..Default::default()
        };
        let read_all = |max: usize, cut: Option<usize>| {
            let spec = spec.clone();
            async move {
                let mut g = Generator::new(&spec, 0, 1, OperatorRestore::default()).unwrap();
                g.set_read_turn(1024);
                let mut ids = vec![];
                let mut out = vec![];
                let mut batches = 0;
                while g.next_batch(&mut out, max).await.unwrap() {
                    ids.extend(out.drain(..).map(|r| id_of(&r)));
                    batches += 1;
                    if Some(batches) == cut {
                        // A restore here, reading on in batches of 1,024.
                        let restore = OperatorRestore {
                            key_groups: vec![],
                            operator_state: g.snapshot().unwrap().operator_state,
                        };
                        g = Generator::new(&spec, 0, 1, restore).unwrap();
                        g.set_read_turn(1024);
                        while g.next_batch(&mut out, 1024).await.unwrap() {
                            ids.extend(out.drain(..).map(|r| id_of(&r)));
                        }
                        break;
                    }
                }
                ids
            }
        };
        let unthrottled = read_all(1024, None).await;
        assert_eq!(unthrottled.len(), 9_000);
        assert_eq!(
            &unthrottled[1023..1026],
            &[4 * 1023, 1, 5],
            "split 0's turn, then split 1's"
        );
        for (max, cut) in [
            (500, None),
            (7, None),
            (1000, None),
            (4096, None),
            (500, Some(3)),
            (7, Some(200)),
        ] {
            assert_eq!(
                read_all(max, cut).await,
                unthrottled,
                "batches of {max}, restored after {cut:?}"
            );
        }
        let mut untold = Generator::new(&spec, 0, 1, OperatorRestore::default()).unwrap();
        let mut out = vec![];
        untold.next_batch(&mut out, 500).await.unwrap();
        untold.next_batch(&mut out, 500).await.unwrap();
        assert_eq!(id_of(&out[500]), 1, "without a turn, the second batch is split 1's");
    }
}
