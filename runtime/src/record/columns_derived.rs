//! Columns whose values are computed from ids when read ([`DerivedInts`]): a source's fields
//! that no later step reads (projection pushdown, docs/architecture.md "Records").

use super::{Column, PrefixedInts, Values};
use crate::record::Datum;

/// Integers computed from a vector of ids by a pure function when they are read, not when
/// the batch is made: a source's field that no later step reads
/// ([`crate::job::field_use`]), kept so that whatever does read it (a row, JSON output, a
/// record sent to another worker) gets the value the source would have stored. Read as
/// strings `<prefix><n>` (as [`PrefixedInts`]) when `prefix` is set, else as integers.
#[derive(Clone, Debug)]
pub struct DerivedInts {
    /// The ids the values are computed from, by row.
    pub ids: Vec<i64>,
    /// The function's parameters (the generator's seed and number of keys).
    pub params: [u64; 2],
    /// Row value from `(params, id)`.
    pub derive: fn(&[u64; 2], i64) -> u64,
    /// `Some(prefix)`: strings `<prefix><n>`; `None`: integers (the value as `i64`).
    pub prefix: Option<&'static str>,
}

impl DerivedInts {
    /// The values computed, as the column the source would have made.
    pub fn materialize(&self) -> Column {
        let values = self.ids.iter().map(|&id| (self.derive)(&self.params, id));
        match self.prefix {
            Some(prefix) => Column::Prefixed(PrefixedInts {
                prefix,
                values: values.collect(),
            }),
            None => Column::Int(Values::from_vec(values.map(|v| v as i64).collect())),
        }
    }

    /// Row `i`'s value.
    pub(super) fn datum(&self, i: usize) -> Datum {
        let value = (self.derive)(&self.params, self.ids[i]);
        match self.prefix {
            Some(prefix) => Datum::Str(
                PrefixedInts {
                    prefix,
                    values: vec![value],
                }
                .get(0),
            ),
            None => Datum::Int(value as i64),
        }
    }
}

/// Equal when the values are (the function is not compared).
impl PartialEq for DerivedInts {
    fn eq(&self, other: &DerivedInts) -> bool {
        self.materialize() == other.materialize()
    }
}
