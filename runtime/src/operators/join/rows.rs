//! The keyed state of a join: per key, the rows of each side seen so far ([`JoinRows`]), as
//! persistent lists so the copy-on-write heap state ([`HeapKeyedState`](crate::state::heap))
//! shares them between the live table and in-flight snapshots: appending a row is O(1) and
//! copies no earlier row, however many the key holds.
//!
//! Encoded (postcard, inside the heap state's key-group blocks) as two lists of rows, oldest
//! first, each row the projected field values of its side ([`StoredDatum`]s).

use crate::job::join::Side;
use crate::record::Datum;
use compact_str::CompactString;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use std::sync::Arc;

/// An immutable list of rows (each the projected values of one record), newest first,
/// sharing its tail with the list it was pushed onto.
#[derive(Clone, Default, Debug)]
pub struct RowList {
    head: Option<Arc<Node>>,
    len: usize,
}

#[derive(Debug)]
struct Node {
    values: Vec<Datum>,
    next: Option<Arc<Node>>,
}

impl Drop for Node {
    /// Drops the tail iteratively: a recursive drop of a long list would overflow the stack.
    fn drop(&mut self) {
        let mut next = self.next.take();
        while let Some(node) = next {
            match Arc::try_unwrap(node) {
                Ok(mut owned) => next = owned.next.take(),
                Err(_) => break,
            }
        }
    }
}

impl RowList {
    /// This list with `values` added (O(1); `self` is unchanged).
    pub fn pushed(&self, values: Vec<Datum>) -> RowList {
        RowList {
            head: Some(Arc::new(Node {
                values,
                next: self.head.clone(),
            })),
            len: self.len + 1,
        }
    }

    /// Number of rows.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the list holds no row.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The rows, oldest first.
    pub fn oldest_first(&self) -> Vec<&[Datum]> {
        let mut out = Vec::with_capacity(self.len);
        let mut cur = self.head.as_deref();
        while let Some(node) = cur {
            out.push(node.values.as_slice());
            cur = node.next.as_deref();
        }
        out.reverse();
        out
    }
}

/// The rows of one join key: those of the left input and those of the right input.
#[derive(Clone, Default, Debug)]
pub struct JoinRows {
    /// Left rows.
    pub left: RowList,
    /// Right rows.
    pub right: RowList,
}

impl JoinRows {
    /// The rows of `side`.
    pub fn side(&self, side: Side) -> &RowList {
        match side {
            Side::Left => &self.left,
            Side::Right => &self.right,
        }
    }

    /// These rows with `values` added to `side`.
    pub fn pushed(&self, side: Side, values: Vec<Datum>) -> JoinRows {
        match side {
            Side::Left => JoinRows {
                left: self.left.pushed(values),
                right: self.right.clone(),
            },
            Side::Right => JoinRows {
                left: self.left.clone(),
                right: self.right.pushed(values),
            },
        }
    }
}

/// A [`Datum`] as join state stores it (postcard cannot read `Datum`'s JSON-shaped serde
/// form): nested JSON as its text.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub enum StoredDatum {
    /// `null`.
    Null,
    /// A boolean.
    Bool(bool),
    /// A signed integer.
    Int(i64),
    /// An integer above `i64::MAX`.
    UInt(u64),
    /// A float.
    Float(f64),
    /// A string.
    Str(CompactString),
    /// A nested array or object, as JSON text.
    Json(String),
}

impl StoredDatum {
    /// The stored form of `d`.
    pub(super) fn of(d: &Datum) -> StoredDatum {
        match d {
            Datum::Null => StoredDatum::Null,
            Datum::Bool(b) => StoredDatum::Bool(*b),
            Datum::Int(i) => StoredDatum::Int(*i),
            Datum::UInt(u) => StoredDatum::UInt(*u),
            Datum::Float(f) => StoredDatum::Float(*f),
            Datum::Str(s) => StoredDatum::Str(s.clone()),
            Datum::Json(v) => StoredDatum::Json(v.to_string()),
        }
    }

    /// The value, copied. Errors: as [`StoredDatum::into_datum`].
    pub(super) fn to_datum(&self) -> Result<Datum, String> {
        self.clone().into_datum()
    }

    /// The value. Errors: a nested value's JSON text does not parse (a corrupt snapshot).
    pub(super) fn into_datum(self) -> Result<Datum, String> {
        Ok(match self {
            StoredDatum::Null => Datum::Null,
            StoredDatum::Bool(b) => Datum::Bool(b),
            StoredDatum::Int(i) => Datum::Int(i),
            StoredDatum::UInt(u) => Datum::UInt(u),
            StoredDatum::Float(f) => Datum::Float(f),
            StoredDatum::Str(s) => Datum::Str(s),
            StoredDatum::Json(text) => Datum::Json(Box::new(
                serde_json::from_str(&text).map_err(|e| format!("stored JSON value does not parse: {e}"))?,
            )),
        })
    }
}

/// The encoded form of [`JoinRows`]: both sides' rows, oldest first (the disk backend
/// encodes and decodes snapshot blocks in this form directly, `disk_rows.rs`).
#[derive(Serialize, Deserialize, Default, Debug, PartialEq)]
pub(super) struct StoredJoinRows {
    /// Left rows, oldest first.
    pub(super) left: Vec<Vec<StoredDatum>>,
    /// Right rows, oldest first.
    pub(super) right: Vec<Vec<StoredDatum>>,
}

impl StoredJoinRows {
    /// The rows of `side`.
    pub(super) fn side(&self, side: Side) -> &Vec<Vec<StoredDatum>> {
        match side {
            Side::Left => &self.left,
            Side::Right => &self.right,
        }
    }

    /// The rows of `side`, to add to.
    pub(super) fn side_mut(&mut self, side: Side) -> &mut Vec<Vec<StoredDatum>> {
        match side {
            Side::Left => &mut self.left,
            Side::Right => &mut self.right,
        }
    }
}

fn store(list: &RowList) -> Vec<Vec<StoredDatum>> {
    list.oldest_first()
        .into_iter()
        .map(|row| row.iter().map(StoredDatum::of).collect())
        .collect()
}

fn load(rows: Vec<Vec<StoredDatum>>) -> Result<RowList, String> {
    let mut list = RowList::default();
    for row in rows {
        list = list.pushed(row.into_iter().map(StoredDatum::into_datum).collect::<Result<_, _>>()?);
    }
    Ok(list)
}

impl Serialize for JoinRows {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        StoredJoinRows {
            left: store(&self.left),
            right: store(&self.right),
        }
        .serialize(s)
    }
}

impl<'de> Deserialize<'de> for JoinRows {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<JoinRows, D::Error> {
        let stored = StoredJoinRows::deserialize(d)?;
        Ok(JoinRows {
            left: load(stored.left).map_err(serde::de::Error::custom)?,
            right: load(stored.right).map_err(serde::de::Error::custom)?,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pushed_list_shares_its_past_and_keeps_insertion_order() {
        let one = RowList::default().pushed(vec![Datum::Int(1)]);
        let two = one.pushed(vec![Datum::Int(2)]);
        assert_eq!(one.oldest_first(), vec![&[Datum::Int(1)][..]]);
        assert_eq!(two.oldest_first(), vec![&[Datum::Int(1)][..], &[Datum::Int(2)][..]]);
        assert_eq!((one.len(), two.len()), (1, 2));
    }

    #[test]
    fn join_rows_round_trip_through_postcard_with_every_kind_of_value() {
        let values = vec![
            Datum::Null,
            Datum::Bool(true),
            Datum::Int(-7),
            Datum::UInt(u64::MAX),
            Datum::Float(1.5),
            Datum::Str("a string longer than twenty-four bytes".into()),
            Datum::Json(Box::new(serde_json::json!({"a": [1, 2]}))),
        ];
        let rows = JoinRows::default()
            .pushed(Side::Left, values.clone())
            .pushed(Side::Right, vec![Datum::Str("r1".into())])
            .pushed(Side::Left, vec![Datum::Int(2)])
            .pushed(Side::Right, vec![Datum::Str("r2".into())]);
        let bytes = postcard::to_allocvec(&rows).unwrap();
        let back: JoinRows = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back.left.oldest_first(), vec![values.as_slice(), &[Datum::Int(2)][..]]);
        assert_eq!(
            back.right.oldest_first(),
            vec![&[Datum::Str("r1".into())][..], &[Datum::Str("r2".into())][..]]
        );
    }

    #[test]
    fn dropping_a_list_of_a_million_rows_does_not_overflow_the_stack() {
        let mut list = RowList::default();
        for i in 0..1_000_000 {
            list = list.pushed(vec![Datum::Int(i)]);
        }
        let shared = list.clone();
        drop(list);
        assert_eq!(shared.len(), 1_000_000);
        drop(shared);
    }
}
