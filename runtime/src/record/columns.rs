//! Columnar record batches: the same records as a `Vec<Record>` of [`Row`]s, stored as one
//! typed vector per field ([`Column`]) plus, after `keyBy`, vectors of keys, key groups and
//! key hashes ([`KeyColumns`]).
//!
//! The generator produces them, `keyBy` computes its key column with a column kernel, the keyed
//! exchange splits them by key group, `count`/`sum`/`min`/`max` update state from the key column
//! and append their output columns, and the discard and file sinks consume them whole. Every
//! other operator takes rows: a columnar batch becomes rows ([`ColumnBatch::into_records`]) at
//! the first operator that does not take columns ([`crate::operators::StreamOperator::process_columns`]),
//! so a job's records, and the bytes its sinks write, are the same either way (tested).
//!
//! Why our own typed vectors and not Apache Arrow's arrays: docs/architecture.md, "Records".

use super::{Datum, Key, KeyedBy, Record, Row, Schema};
use compact_str::CompactString;
use std::sync::{Arc, OnceLock};

/// Whether sources may produce columnar batches: yes unless the environment variable
/// `WEIR_RECORDS` is `rows` (a switch for benchmarks and the tests that compare both paths;
/// read once per process). Any other value than `rows` or `columns` is reported once as a
/// warning and ignored.
pub fn columns_enabled() -> bool {
    static ENABLED: OnceLock<bool> = OnceLock::new();
    *ENABLED.get_or_init(|| match std::env::var("WEIR_RECORDS").as_deref() {
        Ok("rows") => false,
        Ok("columns") | Err(_) => true,
        Ok(other) => {
            tracing::warn!("WEIR_RECORDS={other:?} is neither `rows` nor `columns`: using columns");
            true
        }
    })
}

/// Values of one type by row position, with a validity vector when some are null
/// (`validity[i] == false`: row i is null and `values[i]` is a placeholder).
#[derive(Clone, Debug, PartialEq, Default)]
pub struct Values<T> {
    /// One value per row.
    pub values: Vec<T>,
    /// `None`: no row is null.
    pub validity: Option<Vec<bool>>,
}

impl<T: Copy + Default> Values<T> {
    /// Values with no nulls.
    pub fn from_vec(values: Vec<T>) -> Values<T> {
        Values { values, validity: None }
    }

    /// Row `i`, `None` when it is null.
    #[inline]
    pub fn get(&self, i: usize) -> Option<T> {
        match &self.validity {
            Some(v) if !v[i] => None,
            _ => Some(self.values[i]),
        }
    }

    fn take(&self, rows: &[u32]) -> Values<T> {
        Values {
            values: rows.iter().map(|&i| self.values[i as usize]).collect(),
            validity: self
                .validity
                .as_ref()
                .map(|v| rows.iter().map(|&i| v[i as usize]).collect()),
        }
    }
}

/// Strings by row position: row i is `bytes[offsets[i]..offsets[i + 1]]`, with a validity
/// vector when some are null.
#[derive(Clone, Debug, PartialEq)]
pub struct Strings {
    offsets: Vec<usize>,
    bytes: String,
    validity: Option<Vec<bool>>,
}

impl Default for Strings {
    fn default() -> Strings {
        Strings::with_capacity(0, 0)
    }
}

impl Strings {
    /// Empty, with room for `rows` strings of `bytes` bytes in all.
    pub fn with_capacity(rows: usize, bytes: usize) -> Strings {
        let mut offsets = Vec::with_capacity(rows + 1);
        offsets.push(0);
        Strings {
            offsets,
            bytes: String::with_capacity(bytes),
            validity: None,
        }
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.offsets.len() - 1
    }

    /// Whether there is no row.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Appends a row.
    #[inline]
    pub fn push(&mut self, s: &str) {
        self.bytes.push_str(s);
        self.offsets.push(self.bytes.len());
        if let Some(v) = &mut self.validity {
            v.push(true);
        }
    }

    /// Appends a null row.
    pub fn push_null(&mut self) {
        let rows = self.len();
        self.validity.get_or_insert_with(|| vec![true; rows]).push(false);
        self.offsets.push(self.bytes.len());
    }

    /// Row `i`, `None` when it is null.
    #[inline]
    pub fn get(&self, i: usize) -> Option<&str> {
        match &self.validity {
            Some(v) if !v[i] => None,
            _ => Some(&self.bytes[self.offsets[i]..self.offsets[i + 1]]),
        }
    }

    fn take(&self, rows: &[u32]) -> Strings {
        let mut out = Strings::with_capacity(rows.len(), self.bytes.len() / self.len().max(1) * rows.len());
        for &i in rows {
            match self.get(i as usize) {
                Some(s) => out.push(s),
                None => out.push_null(),
            }
        }
        out
    }
}

/// Strings `<prefix><n>` (`n` in decimal) stored as their numbers `n`: a string column whose
/// values share a prefix and end in an integer, as the generator's `key-<k>`, without a string
/// formatted per record. A value is formatted when it is read (a `keyBy` on the field, a row,
/// JSON output).
#[derive(Clone, Debug, PartialEq)]
pub struct PrefixedInts {
    /// The prefix of every value.
    pub prefix: &'static str,
    /// The number after the prefix, by row.
    pub values: Vec<u64>,
}

impl PrefixedInts {
    /// Row `i`'s string (inline in the `CompactString` up to 24 bytes).
    #[inline]
    pub fn get(&self, i: usize) -> CompactString {
        let mut digits = itoa::Buffer::new();
        let mut s = CompactString::const_new(self.prefix);
        s.push_str(digits.format(self.values[i]));
        s
    }
}

/// One field of a [`ColumnBatch`], typed.
#[derive(Clone, Debug, PartialEq)]
pub enum Column {
    /// Integers (`Datum::Int`).
    Int(Values<i64>),
    /// Finite floats (`Datum::Float`; a non-finite value is stored as null, as rows do).
    Float(Values<f64>),
    /// Booleans.
    Bool(Values<bool>),
    /// Strings.
    Str(Strings),
    /// Strings of a common prefix and a decimal number, stored as the numbers.
    Prefixed(PrefixedInts),
    /// Integers or prefixed strings computed from ids when read.
    Derived(DerivedInts),
}

impl Column {
    /// Number of rows.
    pub fn len(&self) -> usize {
        match self {
            Column::Int(v) => v.values.len(),
            Column::Float(v) => v.values.len(),
            Column::Bool(v) => v.values.len(),
            Column::Str(s) => s.len(),
            Column::Prefixed(p) => p.values.len(),
            Column::Derived(d) => d.ids.len(),
        }
    }

    /// Whether there is no row.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Row `i` as a row value.
    pub fn datum(&self, i: usize) -> Datum {
        match self {
            Column::Int(v) => v.get(i).map_or(Datum::Null, Datum::Int),
            Column::Float(v) => v.get(i).map_or(Datum::Null, Datum::from_f64),
            Column::Bool(v) => v.get(i).map_or(Datum::Null, Datum::Bool),
            Column::Str(s) => s.get(i).map_or(Datum::Null, |s| Datum::Str(s.into())),
            Column::Prefixed(p) => Datum::Str(p.get(i)),
            Column::Derived(d) => d.datum(i),
        }
    }

    /// The rows at positions `rows`, in that order.
    pub fn take(&self, rows: &[u32]) -> Column {
        match self {
            Column::Int(v) => Column::Int(v.take(rows)),
            Column::Float(v) => Column::Float(v.take(rows)),
            Column::Bool(v) => Column::Bool(v.take(rows)),
            Column::Str(s) => Column::Str(s.take(rows)),
            Column::Prefixed(p) => Column::Prefixed(PrefixedInts {
                prefix: p.prefix,
                values: rows.iter().map(|&i| p.values[i as usize]).collect(),
            }),
            Column::Derived(d) => Column::Derived(DerivedInts {
                ids: rows.iter().map(|&i| d.ids[i as usize]).collect(),
                ..d.clone()
            }),
        }
    }

    /// The column with its values stored: a [`Column::Derived`] computed, any other borrowed.
    pub fn materialized(&self) -> std::borrow::Cow<'_, Column> {
        match self {
            Column::Derived(d) => std::borrow::Cow::Owned(d.materialize()),
            other => std::borrow::Cow::Borrowed(other),
        }
    }

    /// The keys as a column when they are all of one type (`None` for a mix).
    pub fn from_keys(keys: &[Key]) -> Option<Column> {
        Some(match keys.first() {
            None | Some(Key::Int(_)) => Column::Int(Values::from_vec(
                keys.iter()
                    .map(|k| if let Key::Int(i) = k { Some(*i) } else { None })
                    .collect::<Option<_>>()?,
            )),
            Some(Key::Bool(_)) => Column::Bool(Values::from_vec(
                keys.iter()
                    .map(|k| if let Key::Bool(b) = k { Some(*b) } else { None })
                    .collect::<Option<_>>()?,
            )),
            Some(Key::Str(_)) => {
                let mut s = Strings::with_capacity(keys.len(), keys.len() * 8);
                for k in keys {
                    let Key::Str(k) = k else { return None };
                    s.push(k);
                }
                Column::Str(s)
            }
        })
    }
}

/// The keys of a keyed batch: integers as a plain vector (the common `id % n` key), any other
/// key as a [`Key`].
#[derive(Clone, Debug, PartialEq)]
pub enum KeyColumn {
    /// Integer keys (`Key::Int`).
    Int(Vec<i64>),
    /// Keys of any type.
    Any(Vec<Key>),
}

impl KeyColumn {
    /// Row `i`'s key.
    pub fn key(&self, i: usize) -> Key {
        match self {
            KeyColumn::Int(v) => Key::Int(v[i]),
            KeyColumn::Any(v) => v[i].clone(),
        }
    }

    fn len(&self) -> usize {
        match self {
            KeyColumn::Int(v) => v.len(),
            KeyColumn::Any(v) => v.len(),
        }
    }

    fn take(&self, rows: &[u32]) -> KeyColumn {
        match self {
            KeyColumn::Int(v) => KeyColumn::Int(rows.iter().map(|&i| v[i as usize]).collect()),
            KeyColumn::Any(v) => KeyColumn::Any(rows.iter().map(|&i| v[i as usize].clone()).collect()),
        }
    }
}

/// What `keyBy` computed for every row of a batch: the key, its key group and its hash (the
/// numbers of [`KeyedBy`]).
#[derive(Clone, Debug, PartialEq)]
pub struct KeyColumns {
    /// Keys.
    pub keys: KeyColumn,
    /// `key_group_of_hash(hash, maxParallelism)` per row.
    pub key_groups: Vec<u32>,
    /// `key_hash(key)` per row.
    pub hashes: Vec<u64>,
}

/// A batch of records as columns: a schema of field names, one [`Column`] per field, all of
/// the same length, and the key columns once `keyBy` ran.
#[derive(Clone, Debug, PartialEq)]
pub struct ColumnBatch {
    schema: Arc<Schema>,
    columns: Vec<Column>,
    len: usize,
    keyed: Option<KeyColumns>,
}

impl ColumnBatch {
    /// A batch of `schema` (not bare) with these columns, in field order. Errors (a message)
    /// when the number of columns differs from the number of fields, or their lengths differ.
    pub fn new(schema: Arc<Schema>, columns: Vec<Column>) -> Result<ColumnBatch, String> {
        if schema.is_bare() {
            return Err("a columnar batch holds objects, not bare values".into());
        }
        if columns.len() != schema.names().len() {
            return Err(format!(
                "{} columns for a schema of {} fields",
                columns.len(),
                schema.names().len()
            ));
        }
        let len = columns.first().map_or(0, Column::len);
        if let Some(c) = columns.iter().position(|c| c.len() != len) {
            return Err(format!("column {c} has {} rows, column 0 has {len}", columns[c].len()));
        }
        Ok(ColumnBatch {
            schema,
            columns,
            len,
            keyed: None,
        })
    }

    /// Number of records.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether there is no record.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The field names.
    pub fn schema(&self) -> &Arc<Schema> {
        &self.schema
    }

    /// The columns, in field order.
    pub fn columns(&self) -> &[Column] {
        &self.columns
    }

    /// The key columns, once `keyBy` set them.
    pub fn keyed(&self) -> Option<&KeyColumns> {
        self.keyed.as_ref()
    }

    /// Sets the key columns. Errors when their length is not the batch's.
    pub fn set_keyed(&mut self, keyed: KeyColumns) -> Result<(), String> {
        let n = self.len;
        if keyed.keys.len() != n || keyed.key_groups.len() != n || keyed.hashes.len() != n {
            return Err(format!("key columns of another length than the batch's {n} rows"));
        }
        self.keyed = Some(keyed);
        Ok(())
    }

    /// Takes the key columns out.
    pub fn take_keyed(&mut self) -> Option<KeyColumns> {
        self.keyed.take()
    }

    /// The records, in order, each with its key when the batch is keyed: exactly the records
    /// the row path builds for the same input.
    pub fn into_records(self) -> Vec<Record> {
        let ColumnBatch {
            schema,
            columns,
            len,
            keyed,
        } = self;
        (0..len)
            .map(|i| Record {
                row: Row::new_unchecked(schema.clone(), columns.iter().map(|c| c.datum(i)).collect()),
                keyed: keyed.as_ref().map(|k| KeyedBy {
                    key: k.keys.key(i),
                    key_group: k.key_groups[i],
                    hash: k.hashes[i],
                }),
            })
            .collect()
    }

    /// The records at positions `rows`, in that order (a keyed exchange's part for one
    /// downstream subtask).
    pub fn take(&self, rows: &[u32]) -> ColumnBatch {
        ColumnBatch {
            schema: self.schema.clone(),
            columns: self.columns.iter().map(|c| c.take(rows)).collect(),
            len: rows.len(),
            keyed: self.keyed.as_ref().map(|k| KeyColumns {
                keys: k.keys.take(rows),
                key_groups: rows.iter().map(|&i| k.key_groups[i as usize]).collect(),
                hashes: rows.iter().map(|&i| k.hashes[i as usize]).collect(),
            }),
        }
    }

    /// Splits a keyed batch into `parts` batches by `part_of(key group)`, records in order
    /// within each: `(part, batch)` for every part that gets a record (with one part, or when
    /// every record goes to one, the batch whole). Errors when the batch is not keyed.
    pub fn partition(self, parts: usize, part_of: impl Fn(u32) -> usize) -> Result<Vec<(usize, ColumnBatch)>, String> {
        let Some(keyed) = &self.keyed else {
            return Err("record without a key at a keyed exchange".into());
        };
        if parts == 1 {
            return Ok(vec![(0, self)]);
        }
        let mut rows: Vec<Vec<u32>> = vec![Vec::with_capacity(self.len / parts.max(1) + 1); parts];
        for (i, &kg) in keyed.key_groups.iter().enumerate() {
            rows[part_of(kg)].push(i as u32);
        }
        if rows.iter().filter(|r| !r.is_empty()).count() == 1 {
            let part = rows.iter().position(|r| !r.is_empty()).unwrap_or(0);
            return Ok(vec![(part, self)]);
        }
        Ok(rows
            .iter()
            .enumerate()
            .filter(|(_, r)| !r.is_empty())
            .map(|(p, r)| (p, self.take(r)))
            .collect())
    }

    /// Appends every record's JSON text and a newline to `out`: the bytes
    /// [`super::json::write_json_line`] writes for the same rows (serde_json's number
    /// formatting and string escaping), without building a row.
    pub fn write_json_lines(&self, out: &mut Vec<u8>) {
        // `{"name":` before the first field, `,"name":` before the others, escaped once.
        let prefixes: Vec<Vec<u8>> = self
            .schema
            .names()
            .iter()
            .enumerate()
            .map(|(j, name)| {
                let mut p = vec![if j == 0 { b'{' } else { b',' }];
                let _ = serde_json::to_writer(&mut p, name.as_str());
                p.push(b':');
                p
            })
            .collect();
        // A prefixed column's `"prefix`, escaped once.
        // Derived columns computed once for the batch.
        let columns: Vec<std::borrow::Cow<'_, Column>> = self.columns.iter().map(Column::materialized).collect();
        let quoted_prefixes: Vec<Vec<u8>> = columns
            .iter()
            .map(|c| match &**c {
                Column::Prefixed(p) => {
                    let mut q = serde_json::to_vec(p.prefix).unwrap_or_default();
                    q.pop();
                    q
                }
                _ => vec![],
            })
            .collect();
        let mut digits = itoa::Buffer::new();
        for i in 0..self.len {
            if prefixes.is_empty() {
                out.push(b'{');
            }
            for ((column, prefix), quoted_prefix) in columns.iter().zip(&prefixes).zip(&quoted_prefixes) {
                out.extend_from_slice(prefix);
                match &**column {
                    Column::Int(v) => match v.get(i) {
                        Some(x) => out.extend_from_slice(digits.format(x).as_bytes()),
                        None => out.extend_from_slice(b"null"),
                    },
                    Column::Float(v) => match v.get(i).filter(|f| f.is_finite()) {
                        Some(x) => {
                            let _ = serde_json::to_writer(&mut *out, &x);
                        }
                        None => out.extend_from_slice(b"null"),
                    },
                    Column::Bool(v) => match v.get(i) {
                        Some(b) => out.extend_from_slice(if b { b"true" } else { b"false" }),
                        None => out.extend_from_slice(b"null"),
                    },
                    Column::Str(s) => match s.get(i) {
                        Some(s) => {
                            let _ = serde_json::to_writer(&mut *out, s);
                        }
                        None => out.extend_from_slice(b"null"),
                    },
                    Column::Prefixed(p) => {
                        // Decimal digits need no escaping.
                        out.extend_from_slice(quoted_prefix);
                        out.extend_from_slice(digits.format(p.values[i]).as_bytes());
                        out.push(b'"');
                    }
                    // Not left after `materialized`; written through the row value if it were.
                    Column::Derived(d) => {
                        let _ = serde_json::to_writer(&mut *out, &d.datum(i));
                    }
                }
            }
            out.extend_from_slice(b"}\n");
        }
    }
}

/// What flows through a subtask's chain: records as rows, or as columns.
#[derive(Debug)]
pub enum Batch {
    /// Rows.
    Rows(Vec<Record>),
    /// Columns.
    Columns(ColumnBatch),
}

impl Batch {
    /// Number of records.
    pub fn len(&self) -> usize {
        match self {
            Batch::Rows(r) => r.len(),
            Batch::Columns(c) => c.len(),
        }
    }

    /// Whether there is no record.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The records as rows (a columnar batch converted, [`ColumnBatch::into_records`]).
    pub fn into_records(self) -> Vec<Record> {
        match self {
            Batch::Rows(r) => r,
            Batch::Columns(c) => c.into_records(),
        }
    }
}

impl From<Vec<Record>> for Batch {
    fn from(rows: Vec<Record>) -> Batch {
        Batch::Rows(rows)
    }
}

#[path = "columns_derived.rs"]
mod derived;
pub use derived::DerivedInts;

#[cfg(test)]
#[path = "columns_tests.rs"]
mod tests;
