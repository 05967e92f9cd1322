//! The typed row: a record's payload as a small vector of typed values ([`Datum`]) under a
//! shared [`Schema`] of field names.
//!
//! Every record of one source split, of one `map` with an object literal or of one
//! aggregation shares one `Arc<Schema>`, so a row costs one vector allocation and no per-field
//! map insert, key string or hash. Strings are [`CompactString`]s: up to 24 bytes inline (no
//! allocation; most keys and words), longer ones on the heap. Arrays and objects nested in a
//! field stay JSON ([`Datum::Json`]).
//!
//! A row whose schema is [`Schema::bare`] is a record that is not an object (a CEL `map` that
//! returns a number, a JSON line holding an array): one unnamed value, written as that value.

use compact_str::CompactString;
use std::sync::{Arc, OnceLock};

/// One value of a row.
#[derive(Clone, Debug, PartialEq)]
pub enum Datum {
    /// JSON `null`.
    Null,
    /// A boolean.
    Bool(bool),
    /// An integer that fits in an `i64`.
    Int(i64),
    /// An integer above `i64::MAX` (JSON allows up to `u64::MAX`, as `serde_json` reads it).
    UInt(u64),
    /// A finite floating-point number (non-finite results become [`Datum::Null`], as in JSON).
    Float(f64),
    /// A string.
    Str(CompactString),
    /// A nested array or object, kept as JSON.
    Json(Box<serde_json::Value>),
}

impl Datum {
    /// An unsigned integer: [`Datum::Int`] when it fits, else [`Datum::UInt`].
    pub fn from_u64(u: u64) -> Datum {
        i64::try_from(u).map_or(Datum::UInt(u), Datum::Int)
    }

    /// A float; NaN and infinities become [`Datum::Null`] (JSON has no such numbers).
    pub fn from_f64(f: f64) -> Datum {
        if f.is_finite() { Datum::Float(f) } else { Datum::Null }
    }

    /// Converts a JSON value (arrays and objects become [`Datum::Json`]).
    pub fn from_json(value: serde_json::Value) -> Datum {
        use serde_json::Value;
        match value {
            Value::Null => Datum::Null,
            Value::Bool(b) => Datum::Bool(b),
            Value::Number(n) => match (n.as_i64(), n.as_u64()) {
                (Some(i), _) => Datum::Int(i),
                (None, Some(u)) => Datum::UInt(u),
                _ => Datum::from_f64(n.as_f64().unwrap_or(f64::NAN)),
            },
            Value::String(s) => Datum::Str(CompactString::from(s)),
            other => Datum::Json(Box::new(other)),
        }
    }

    /// The value as JSON (copies strings).
    pub fn to_json(&self) -> serde_json::Value {
        use serde_json::Value;
        match self {
            Datum::Null => Value::Null,
            Datum::Bool(b) => Value::Bool(*b),
            Datum::Int(i) => Value::from(*i),
            Datum::UInt(u) => Value::from(*u),
            Datum::Float(f) => serde_json::Number::from_f64(*f).map_or(Value::Null, Value::Number),
            Datum::Str(s) => Value::String(s.to_string()),
            Datum::Json(v) => (**v).clone(),
        }
    }
}

impl std::fmt::Display for Datum {
    /// Formats the value as its JSON text (`"a"`, `3`, `[1,2]`), for error messages.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match serde_json::to_string(self) {
            Ok(s) => f.write_str(&s),
            Err(_) => f.write_str("<unprintable>"),
        }
    }
}

/// The field names of rows, in output order. Shared by every row built the same way.
#[derive(Debug, PartialEq, Eq)]
pub struct Schema {
    names: Vec<CompactString>,
    bare: bool,
}

impl Schema {
    /// A schema with these field names, in order. Names must be distinct (callers building
    /// rows from untrusted input use [`RowBuilder`], which keeps the last value of a repeated
    /// name, as JSON parsers do).
    pub fn new<I, S>(names: I) -> Arc<Schema>
    where
        I: IntoIterator<Item = S>,
        S: Into<CompactString>,
    {
        Arc::new(Schema {
            names: names.into_iter().map(Into::into).collect(),
            bare: false,
        })
    }

    /// The schema of a record that is not an object: one unnamed value.
    pub fn bare() -> Arc<Schema> {
        static BARE: OnceLock<Arc<Schema>> = OnceLock::new();
        BARE.get_or_init(|| {
            Arc::new(Schema {
                names: vec![],
                bare: true,
            })
        })
        .clone()
    }

    /// Whether rows of this schema are bare values rather than objects.
    pub fn is_bare(&self) -> bool {
        self.bare
    }

    /// Field names, in order (empty for a bare schema).
    pub fn names(&self) -> &[CompactString] {
        &self.names
    }

    /// Position of field `name`, by a linear scan (rows have few fields).
    pub fn index_of(&self, name: &str) -> Option<usize> {
        self.names.iter().position(|n| n == name)
    }

    /// Whether the names equal `names`, in order (for reusing a schema).
    fn same_names(&self, names: &[CompactString]) -> bool {
        !self.bare && self.names == names
    }
}

/// Reuses the last schema built when the next row has the same field names (every row of a
/// JSON lines file or a `map` usually does), so equal rows share one `Arc<Schema>`.
#[derive(Debug, Default)]
pub struct SchemaCache {
    last: Option<Arc<Schema>>,
}

impl SchemaCache {
    /// The schema built last, if any (its names are distinct: every cached schema comes from
    /// a [`RowBuilder`]).
    pub fn last(&self) -> Option<&Arc<Schema>> {
        self.last.as_ref()
    }

    /// The schema for `names`: the cached one when the names are equal, else a new one
    /// (which becomes the cached one).
    pub fn schema(&mut self, names: Vec<CompactString>) -> Arc<Schema> {
        if let Some(s) = &self.last
            && s.same_names(&names)
        {
            return s.clone();
        }
        let s = Arc::new(Schema { names, bare: false });
        self.last = Some(s.clone());
        s
    }
}

/// A record's payload: values by position under a schema.
#[derive(Clone, Debug)]
pub struct Row {
    schema: Arc<Schema>,
    values: Vec<Datum>,
}

impl PartialEq for Row {
    fn eq(&self, other: &Row) -> bool {
        (Arc::ptr_eq(&self.schema, &other.schema) || self.schema == other.schema) && self.values == other.values
    }
}

impl std::fmt::Display for Row {
    /// Formats the row as its JSON text, for error messages.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match serde_json::to_string(self) {
            Ok(s) => f.write_str(&s),
            Err(_) => f.write_str("<unprintable>"),
        }
    }
}

impl Row {
    /// A row of `schema`. Errors (a message) if the number of values differs from the number
    /// of fields (exactly one value for a bare schema).
    pub fn new(schema: Arc<Schema>, values: Vec<Datum>) -> Result<Row, String> {
        let want = if schema.bare { 1 } else { schema.names.len() };
        if values.len() != want {
            return Err(format!("{} values for a schema of {want} fields", values.len()));
        }
        Ok(Row { schema, values })
    }

    /// A row of `schema`, for callers that build exactly one value per field.
    pub(crate) fn new_unchecked(schema: Arc<Schema>, values: Vec<Datum>) -> Row {
        debug_assert_eq!(values.len(), if schema.bare { 1 } else { schema.names.len() });
        Row { schema, values }
    }

    /// A record that is not an object: one bare value.
    pub fn bare(value: Datum) -> Row {
        Row {
            schema: Schema::bare(),
            values: vec![value],
        }
    }

    /// Converts a JSON value: an object becomes a row of its fields (in order), anything else
    /// a bare row.
    pub fn from_json(value: serde_json::Value) -> Row {
        match value {
            serde_json::Value::Object(map) => {
                let (names, values): (Vec<CompactString>, Vec<Datum>) = map
                    .into_iter()
                    .map(|(k, v)| (CompactString::from(k), Datum::from_json(v)))
                    .unzip();
                Row {
                    schema: Arc::new(Schema { names, bare: false }),
                    values,
                }
            }
            other => Row::bare(Datum::from_json(other)),
        }
    }

    /// The row as JSON (copies every value): an object, or the bare value.
    pub fn to_json(&self) -> serde_json::Value {
        if self.schema.bare {
            return self.values[0].to_json();
        }
        serde_json::Value::Object(
            self.schema
                .names
                .iter()
                .zip(&self.values)
                .map(|(k, v)| (k.to_string(), v.to_json()))
                .collect(),
        )
    }

    /// The schema.
    pub fn schema(&self) -> &Arc<Schema> {
        &self.schema
    }

    /// Values, by field position.
    pub fn values(&self) -> &[Datum] {
        &self.values
    }

    /// `(name, value)` of every field, in order (nothing for a bare row).
    pub fn fields(&self) -> impl Iterator<Item = (&str, &Datum)> {
        self.schema.names.iter().map(CompactString::as_str).zip(&self.values)
    }

    /// The bare value, if the row is not an object.
    pub fn as_bare(&self) -> Option<&Datum> {
        self.schema.bare.then(|| &self.values[0])
    }

    /// The value of field `name`.
    pub fn get(&self, name: &str) -> Option<&Datum> {
        self.schema.index_of(name).map(|i| &self.values[i])
    }

    /// Makes the row empty under `schema`, in place, and returns its value vector to fill
    /// with exactly one value per field of `schema` (the caller's duty, as for
    /// [`Row::new_unchecked`]). The vector is kept when its capacity is between `min` and
    /// `max` (no allocation; a row turned into another without moving it), else replaced by
    /// one with room for `min` values.
    #[inline]
    pub(crate) fn reset(&mut self, schema: &Arc<Schema>, min: usize, max: usize) -> &mut Vec<Datum> {
        if !Arc::ptr_eq(&self.schema, schema) {
            self.schema = schema.clone();
        }
        if self.values.capacity() >= min && self.values.capacity() <= max {
            self.values.clear();
        } else {
            self.values = Vec::with_capacity(min);
        }
        &mut self.values
    }

    /// Takes the parts apart.
    pub fn into_parts(self) -> (Arc<Schema>, Vec<Datum>) {
        (self.schema, self.values)
    }
}

/// Builds a row field by field from input whose names may repeat (a JSON object): a repeated
/// name replaces the earlier value in its position, as `serde_json` does.
#[derive(Debug, Default)]
pub struct RowBuilder {
    names: Vec<CompactString>,
    values: Vec<Datum>,
}

impl RowBuilder {
    /// An empty builder with room for `n` fields.
    pub fn with_capacity(n: usize) -> RowBuilder {
        RowBuilder {
            names: Vec::with_capacity(n),
            values: Vec::with_capacity(n),
        }
    }

    /// A builder holding `names` (which must be distinct) with their `values`, in order.
    pub(crate) fn from_parts(names: Vec<CompactString>, values: Vec<Datum>) -> RowBuilder {
        debug_assert_eq!(names.len(), values.len());
        RowBuilder { names, values }
    }

    /// Adds a field (or replaces the value of an earlier field of the same name).
    pub fn push(&mut self, name: CompactString, value: Datum) {
        match self.names.iter().position(|n| *n == name) {
            Some(i) => self.values[i] = value,
            None => {
                self.names.push(name);
                self.values.push(value);
            }
        }
    }

    /// The row, its schema taken from `cache` when the names are the same as last time.
    pub fn finish(self, cache: &mut SchemaCache) -> Row {
        Row {
            schema: cache.schema(self.names),
            values: self.values,
        }
    }
}
