//! Records, keys and batches: what flows between subtasks.
//!
//! A record's value is a JSON value (`serde_json::Value`, objects keep field order). After a
//! `keyBy`, each record carries its [`Key`] and key group, computed once upstream of the keyed
//! exchange, so the exchange and the keyed state use the same number.

pub mod cel;

use serde::{Deserialize, Serialize};
use std::fmt;

/// A record's value: a JSON value, in practice an object.
pub type Value = serde_json::Value;

/// A key produced by `keyBy`: a string, an integer or a boolean.
#[derive(Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub enum Key {
    /// A string key.
    Str(String),
    /// An integer key.
    Int(i64),
    /// A boolean key.
    Bool(bool),
}

impl Key {
    /// Converts a JSON value to a key. Errors for null, floats, arrays and objects, which have
    /// no stable canonical bytes.
    pub fn from_value(v: &Value) -> Result<Key, String> {
        match v {
            Value::String(s) => Ok(Key::Str(s.clone())),
            Value::Bool(b) => Ok(Key::Bool(*b)),
            Value::Number(n) => n
                .as_i64()
                .map(Key::Int)
                .ok_or_else(|| format!("key {n} is not an integer; keys are strings, integers or booleans")),
            other => Err(format!("key {other} is not a string, integer or boolean")),
        }
    }

    /// Like [`Key::from_value`], taking the value (no copy of a string key).
    pub fn from_owned(v: Value) -> Result<Key, String> {
        match v {
            Value::String(s) => Ok(Key::Str(s)),
            other => Key::from_value(&other),
        }
    }

    /// The key as a JSON value, consuming it.
    pub fn into_value(self) -> Value {
        match self {
            Key::Str(s) => Value::String(s),
            Key::Int(i) => Value::from(i),
            Key::Bool(b) => Value::Bool(b),
        }
    }

    /// The key as a JSON value (for aggregation output).
    pub fn to_value(&self) -> Value {
        match self {
            Key::Str(s) => Value::String(s.clone()),
            Key::Int(i) => Value::from(*i),
            Key::Bool(b) => Value::Bool(*b),
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

/// A key with its key group, as computed by `keyBy`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KeyedBy {
    /// The key.
    pub key: Key,
    /// `key_group(key, maxParallelism)`.
    pub key_group: u32,
}

/// One record.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct Record {
    /// The payload.
    pub value: Value,
    /// Set by `keyBy`, consumed by the keyed aggregation that follows.
    pub keyed: Option<KeyedBy>,
}

impl Record {
    /// An unkeyed record.
    pub fn new(value: Value) -> Record {
        Record { value, keyed: None }
    }
}

/// Records travel between subtasks in batches of at most this many.
pub const BATCH_SIZE: usize = 1024;
