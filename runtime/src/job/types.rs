//! Field types as the plan knows them: a small lattice over the value kinds a row holds
//! ([`Datum`]), with [`FieldType::Any`] where the plan cannot tell.
//!
//! Null is not a type of its own: every field may be null (a JSON `null`, an empty CSV value of
//! a declared column), so a field seen as null and as `int` is `int`. Integers that do not fit
//! an `i64` ([`Datum::UInt`]) are `int` too. A field seen as `int` and as `float` is `float`
//! (both are numbers to `sum`, `min`, `max`); any other pair of different types is `any`.

use super::spec::DeclaredType;
use crate::record::Datum;

/// The type of a field or of an expression's value.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum FieldType {
    /// `true` or `false`.
    Bool,
    /// An integer.
    Int,
    /// A floating-point number.
    Float,
    /// A string.
    String,
    /// A nested list or object (kept as JSON in a row).
    Json,
    /// Unknown: any of the above, or differing between records.
    Any,
}

impl FieldType {
    /// The name users see in messages and in a source's `schema` (`int`, `float`, ...).
    pub fn name(self) -> &'static str {
        match self {
            FieldType::Bool => "bool",
            FieldType::Int => "int",
            FieldType::Float => "float",
            FieldType::String => "string",
            FieldType::Json => "list or object",
            FieldType::Any => "any",
        }
    }

    /// The type a declared field has.
    pub fn declared(t: DeclaredType) -> FieldType {
        match t {
            DeclaredType::String => FieldType::String,
            DeclaredType::Int => FieldType::Int,
            DeclaredType::Float => FieldType::Float,
            DeclaredType::Bool => FieldType::Bool,
        }
    }

    /// The type of a value; `None` for null (which any type admits).
    pub fn of_datum(value: &Datum) -> Option<FieldType> {
        match value {
            Datum::Null => None,
            Datum::Bool(_) => Some(FieldType::Bool),
            Datum::Int(_) | Datum::UInt(_) => Some(FieldType::Int),
            Datum::Float(_) => Some(FieldType::Float),
            Datum::Str(_) => Some(FieldType::String),
            Datum::Json(_) => Some(FieldType::Json),
        }
    }

    /// The least type holding both: equal types stay, `int` and `float` give `float`, anything
    /// else `any`.
    pub fn join(self, other: FieldType) -> FieldType {
        match (self, other) {
            (a, b) if a == b => a,
            (FieldType::Int, FieldType::Float) | (FieldType::Float, FieldType::Int) => FieldType::Float,
            _ => FieldType::Any,
        }
    }

    /// Whether the plan knows the type (not [`FieldType::Any`]).
    pub fn is_known(self) -> bool {
        self != FieldType::Any
    }

    /// Whether values are numbers (`int` or `float`).
    pub fn is_numeric(self) -> bool {
        matches!(self, FieldType::Int | FieldType::Float)
    }
}

/// A field of a plan schema: its name and type.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Field {
    /// The field name.
    pub name: String,
    /// Its type.
    pub field_type: FieldType,
}

impl Field {
    /// A field named `name` of type `field_type`.
    pub fn new(name: impl Into<String>, field_type: FieldType) -> Field {
        Field {
            name: name.into(),
            field_type,
        }
    }
}

/// Fields and types common to a sample of rows (JSON lines as the source reads them): every
/// field any row has, in first-seen order, each with the join of its non-null values' types
/// (`any` if only null was seen). `None` if a row is not an object (the schema is then unknown)
/// or there are no rows.
pub fn infer_fields<'r>(rows: impl IntoIterator<Item = &'r crate::record::Row>) -> Option<Vec<Field>> {
    let mut fields: Vec<(String, Option<FieldType>)> = Vec::new();
    let mut any_row = false;
    for row in rows {
        if row.schema().is_bare() {
            return None;
        }
        any_row = true;
        for (name, value) in row.fields() {
            let seen = FieldType::of_datum(value);
            match fields.iter_mut().find(|(n, _)| n == name) {
                Some((_, t)) => {
                    *t = match (*t, seen) {
                        (Some(a), Some(b)) => Some(a.join(b)),
                        (a, b) => a.or(b),
                    }
                }
                None => fields.push((name.to_string(), seen)),
            }
        }
    }
    any_row.then(|| {
        fields
            .into_iter()
            .map(|(name, t)| Field::new(name, t.unwrap_or(FieldType::Any)))
            .collect()
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::Row;
    use serde_json::json;

    #[test]
    fn join_table() {
        use FieldType::*;
        let rows = [
            (Int, Int, Int),
            (Int, Float, Float),
            (Float, Int, Float),
            (String, String, String),
            (String, Int, Any),
            (Bool, Float, Any),
            (Json, Json, Json),
            (Any, Int, Any),
        ];
        for (a, b, want) in rows {
            assert_eq!(a.join(b), want, "{a:?} ⊔ {b:?}");
        }
    }

    #[test]
    fn inference_joins_types_over_rows_and_ignores_nulls() {
        let rows: Vec<Row> = [
            json!({"id": 1, "price": 2, "name": "a", "note": null, "tags": [1]}),
            json!({"id": 2, "price": 2.5, "name": 3, "note": null, "extra": true}),
            json!({"id": 18446744073709551615u64, "price": null, "name": "b"}),
        ]
        .into_iter()
        .map(Row::from_json)
        .collect();
        let got = infer_fields(&rows).unwrap();
        let want = [
            ("id", FieldType::Int),
            ("price", FieldType::Float),
            ("name", FieldType::Any),
            ("note", FieldType::Any),
            ("tags", FieldType::Json),
            ("extra", FieldType::Bool),
        ];
        let got: Vec<(&str, FieldType)> = got.iter().map(|f| (f.name.as_str(), f.field_type)).collect();
        assert_eq!(got, want);
        assert_eq!(infer_fields(&[Row::from_json(json!([1]))]), None, "not objects");
        assert_eq!(infer_fields(&[]), None, "no rows");
    }
}
