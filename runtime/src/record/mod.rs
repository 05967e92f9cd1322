//! Records, keys and batches: what flows between subtasks.
//!
//! A record's payload is a typed [`Row`] (field names in a shared [`Schema`], values as
//! [`Datum`]s; see [`row`]), written as JSON only by sinks ([`json`]). After a `keyBy`, each
//! record carries its [`Key`], key group and key hash, computed once upstream of the keyed
//! exchange, so the exchange and the keyed state use the same numbers and nothing downstream
//! hashes the key again.
//!
//! Where the job allows, a batch of records travels as columns instead ([`columns`]: one typed
//! vector per field and vectors of keys, key groups and hashes): from the generator through
//! `keyBy`, the keyed exchange and `count`/`sum`/`min`/`max` to the discard and file sinks.

pub mod cel;
pub mod cel_fast;
pub mod cel_fields;
pub mod cel_types;
pub mod columns;
pub mod json;
pub mod row;

pub use columns::{Batch, ColumnBatch};
pub use row::{Datum, Row, RowBuilder, Schema, SchemaCache};

use compact_str::CompactString;
use serde::{Deserialize, Serialize};
use std::fmt;

/// A key produced by `keyBy`: a string, an integer or a boolean.
///
/// Its serialized form (postcard, in keyed state of checkpoints and savepoints) is the same as
/// when `Str` held a `String`: a `CompactString` serializes as a string.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Key {
    /// A string key.
    Str(CompactString),
    /// An integer key.
    Int(i64),
    /// A boolean key.
    Bool(bool),
}

impl Key {
    /// Converts a value to a key. Errors for null, floats, arrays and objects, which have no
    /// stable canonical bytes.
    pub fn from_datum(v: &Datum) -> Result<Key, String> {
        match v {
            Datum::Str(s) => Ok(Key::Str(s.clone())),
            other => Key::from_owned(other.clone()),
        }
    }

    /// Like [`Key::from_datum`], taking the value (no copy of a string key).
    pub fn from_owned(v: Datum) -> Result<Key, String> {
        match v {
            Datum::Str(s) => Ok(Key::Str(s)),
            Datum::Bool(b) => Ok(Key::Bool(b)),
            Datum::Int(i) => Ok(Key::Int(i)),
            n @ Datum::UInt(_) => Err(format!(
                "key {n} is above the largest integer key, {}; keys are strings, integers of 64 bits or booleans \
                 (write `string(...)` of a larger number)",
                i64::MAX
            )),
            n @ Datum::Float(_) => Err(format!(
                "key {n} is not an integer; keys are strings, integers or booleans"
            )),
            other => Err(format!("key {other} is not a string, integer or boolean")),
        }
    }

    /// Converts a JSON value to a key (see [`Key::from_datum`]).
    pub fn from_value(v: &serde_json::Value) -> Result<Key, String> {
        Key::from_owned(Datum::from_json(v.clone()))
    }

    /// The key as a row value, consuming it.
    pub fn into_datum(self) -> Datum {
        match self {
            Key::Str(s) => Datum::Str(s),
            Key::Int(i) => Datum::Int(i),
            Key::Bool(b) => Datum::Bool(b),
        }
    }

    /// Canonical bytes, the input of the key-group hash: a type tag, then UTF-8 for strings,
    /// 8 bytes little-endian for integers, one byte for booleans. Stable across processes,
    /// platforms and versions.
    pub fn canonical_bytes(&self, out: &mut Vec<u8>) {
        match self {
            Key::Str(s) => {
                out.push(b's');
                out.extend_from_slice(s.as_bytes());
            }
            Key::Int(i) => {
                out.push(b'i');
                out.extend_from_slice(&i.to_le_bytes());
            }
            Key::Bool(b) => {
                out.push(b'b');
                out.push(u8::from(*b));
            }
        }
    }
}

impl fmt::Display for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Key::Str(s) => write!(f, "{s:?}"),
            Key::Int(i) => write!(f, "{i}"),
            Key::Bool(b) => write!(f, "{b}"),
        }
    }
}

/// A key with its key group and hash, as computed by `keyBy`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyedBy {
    /// The key.
    pub key: Key,
    /// `key_group(key, maxParallelism)`.
    pub key_group: u32,
    /// The key's stable hash ([`key_hash`](crate::state::key_group::key_hash)), from which the
    /// key group was computed; keyed state reuses it for its in-memory tables.
    pub hash: u64,
}

impl KeyedBy {
    /// Hashes `key` once and derives its key group for `max_parallelism` key groups.
    #[inline]
    pub fn new(key: Key, max_parallelism: u32) -> KeyedBy {
        let hash = crate::state::key_group::key_hash(&key);
        KeyedBy {
            key_group: crate::state::key_group::key_group_of_hash(hash, max_parallelism),
            key,
            hash,
        }
    }
}

/// One record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The payload.
    pub row: Row,
    /// Set by `keyBy`, consumed by the keyed aggregation that follows.
    pub keyed: Option<KeyedBy>,
}

impl Record {
    /// An unkeyed record.
    pub fn new(row: Row) -> Record {
        Record { row, keyed: None }
    }
}

/// Records travel between subtasks in batches of at most this many (rows).
pub const BATCH_SIZE: usize = 1024;

/// A source that makes columnar batches fills them with up to this many records when it has
/// no rate limit. A batch is one hand-over between subtasks, often between threads, and a
/// thread's wake-up costs about as much as a few thousand records on the columnar path:
/// keyed count with integer keys went from 0.67× to 0.83× the `HashMap` baseline's
/// records/s with batches of 4,096 instead of 1,024 (docs/benchmarks.md, "Integer keys at
/// 0.8×"). Columns of 4,096 integers are 32 KiB each, Flink's network buffer size.
pub const COLUMN_BATCH_SIZE: usize = 4 * BATCH_SIZE;

#[cfg(test)]
mod tests {
    use super::*;

    /// `Key` as it was declared before `Str` held a `CompactString`: state written by earlier
    /// versions must decode, and new state must be readable by them.
    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    enum KeyBefore {
        Str(String),
        Int(i64),
        Bool(bool),
    }

    #[test]
    fn key_serialized_form_is_unchanged() {
        let long = "a key longer than twenty-four bytes, stored on the heap".to_string();
        let pairs = [
            (Key::Str("w".into()), KeyBefore::Str("w".into())),
            (Key::Str(long.as_str().into()), KeyBefore::Str(long.clone())),
            (Key::Int(-5), KeyBefore::Int(-5)),
            (Key::Bool(true), KeyBefore::Bool(true)),
        ];
        for (new, old) in pairs {
            let new_bytes = postcard::to_stdvec(&(new.clone(), 7u64)).unwrap();
            assert_eq!(new_bytes, postcard::to_stdvec(&(old, 7u64)).unwrap());
            assert_eq!(postcard::from_bytes::<(Key, u64)>(&new_bytes).unwrap(), (new, 7));
        }
    }

    #[test]
    fn keys_from_values() {
        assert_eq!(Key::from_owned(Datum::Str("a".into())), Ok(Key::Str("a".into())));
        assert_eq!(Key::from_datum(&Datum::Int(3)), Ok(Key::Int(3)));
        assert!(
            Key::from_datum(&Datum::Float(1.5))
                .unwrap_err()
                .contains("not an integer")
        );
        assert!(Key::from_datum(&Datum::Null).unwrap_err().contains("not a string"));
        assert_eq!(Key::Str("k".into()).into_datum(), Datum::Str("k".into()));
    }
}
