//! Rows as JSON text, without an intermediate `serde_json::Value` tree.
//!
//! Writing: [`Row`] and [`Datum`] implement `Serialize` as the JSON object (fields in schema
//! order) or bare value they stand for, so `serde_json` writes them straight from the typed
//! values with its own number formatting (integers as integers, floats by the shortest
//! round-trip form, `1.0` not `1`) and string escaping: the bytes are those of the
//! `serde_json::Value` the row replaces. [`write_json_line`] appends one line.
//!
//! Reading: [`parse_json_row`] reads one JSON text into a row, an object's fields in their
//! order (a repeated name keeps its first position and its last value, as `serde_json` does),
//! nested arrays and objects as [`Datum::Json`]. Rows also deserialize with serde, for the
//! cluster wire format.

use super::row::{Datum, Row, RowBuilder, SchemaCache};
use compact_str::CompactString;
use serde::de::{self, DeserializeSeed, MapAccess, SeqAccess, Visitor};
use serde::ser::{SerializeMap, Serializer};
use serde::{Deserialize, Deserializer, Serialize};
use std::fmt;

impl Serialize for Datum {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        match self {
            Datum::Null => s.serialize_unit(),
            Datum::Bool(b) => s.serialize_bool(*b),
            Datum::Int(i) => s.serialize_i64(*i),
            Datum::UInt(u) => s.serialize_u64(*u),
            Datum::Float(f) => s.serialize_f64(*f),
            Datum::Str(v) => s.serialize_str(v),
            Datum::Json(v) => v.serialize(s),
        }
    }
}

impl Serialize for Row {
    fn serialize<S: Serializer>(&self, s: S) -> Result<S::Ok, S::Error> {
        if let Some(v) = self.as_bare() {
            return v.serialize(s);
        }
        let mut map = s.serialize_map(Some(self.values().len()))?;
        for (name, value) in self.fields() {
            map.serialize_entry(name, value)?;
        }
        map.end()
    }
}

/// Appends the row's JSON text and a newline to `out`.
pub fn write_json_line(row: &Row, out: &mut Vec<u8>) {
    // Writing to a Vec cannot fail, and every Datum serializes (floats are finite; a
    // non-finite one would be written as `null`, as serde_json writes it).
    let _ = serde_json::to_writer(&mut *out, row);
    out.push(b'\n');
}

/// Parses one JSON text into a row; `cache` shares the schema between rows with the same field
/// names. Errors: `serde_json`'s message (with line and column).
pub fn parse_json_row(text: &str, cache: &mut SchemaCache) -> Result<Row, serde_json::Error> {
    let mut de = serde_json::Deserializer::from_str(text);
    let row = RowSeed { cache }.deserialize(&mut de)?;
    de.end()?;
    Ok(row)
}

/// Deserializes a row with a schema cache.
struct RowSeed<'c> {
    cache: &'c mut SchemaCache,
}

impl<'de> DeserializeSeed<'de> for RowSeed<'_> {
    type Value = Row;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<Row, D::Error> {
        d.deserialize_any(RowVisitor { cache: self.cache })
    }
}

impl<'de> Deserialize<'de> for Row {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Row, D::Error> {
        RowSeed {
            cache: &mut SchemaCache::default(),
        }
        .deserialize(d)
    }
}

struct RowVisitor<'c> {
    cache: &'c mut SchemaCache,
}

impl<'de> Visitor<'de> for RowVisitor<'_> {
    type Value = Row;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<Row, A::Error> {
        // Fast path: the names of the schema built last, in its order (every line of a JSON
        // lines file, in practice). Each name is compared in place with the one expected at
        // its position: no name copied, no search for a repeated name (the schema's names are
        // distinct), no schema lookup. The first other name (or a missing one) hands the
        // fields read so far to the builder, which goes on as below.
        let mut b = match self.cache.last().cloned() {
            Some(schema) => {
                let names = schema.names();
                let mut values = Vec::with_capacity(names.len());
                loop {
                    let expected = names.get(values.len()).map(CompactString::as_str);
                    match map.next_key_seed(ExpectedName(expected))? {
                        Some(NameMatch::Expected) => values.push(map.next_value::<Datum>()?),
                        None if values.len() == names.len() => return Ok(Row::new_unchecked(schema, values)),
                        other => {
                            let mut b = RowBuilder::from_parts(names[..values.len()].to_vec(), values);
                            match other {
                                Some(NameMatch::Other(name)) => b.push(name, map.next_value::<Datum>()?),
                                _ => return Ok(b.finish(self.cache)),
                            }
                            break b;
                        }
                    }
                }
            }
            None => RowBuilder::with_capacity(map.size_hint().unwrap_or(8)),
        };
        while let Some(name) = map.next_key::<NameKey>()? {
            b.push(name.0, map.next_value::<Datum>()?);
        }
        Ok(b.finish(self.cache))
    }

    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Row, E> {
        DatumVisitor.visit_bool(v).map(Row::bare)
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Row, E> {
        DatumVisitor.visit_i64(v).map(Row::bare)
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Row, E> {
        DatumVisitor.visit_u64(v).map(Row::bare)
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Row, E> {
        DatumVisitor.visit_f64(v).map(Row::bare)
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Row, E> {
        DatumVisitor.visit_str(v).map(Row::bare)
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Row, E> {
        DatumVisitor.visit_string(v).map(Row::bare)
    }
    fn visit_unit<E: de::Error>(self) -> Result<Row, E> {
        Ok(Row::bare(Datum::Null))
    }
    fn visit_none<E: de::Error>(self) -> Result<Row, E> {
        Ok(Row::bare(Datum::Null))
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Row, A::Error> {
        DatumVisitor.visit_seq(seq).map(Row::bare)
    }
}

/// A field name compared with the name expected at its position (`None`: no more expected).
struct ExpectedName<'n>(Option<&'n str>);

/// What [`ExpectedName`] found: the expected name, or another one (copied).
enum NameMatch {
    Expected,
    Other(CompactString),
}

impl<'de> DeserializeSeed<'de> for ExpectedName<'_> {
    type Value = NameMatch;

    fn deserialize<D: Deserializer<'de>>(self, d: D) -> Result<NameMatch, D::Error> {
        d.deserialize_str(self)
    }
}

impl Visitor<'_> for ExpectedName<'_> {
    type Value = NameMatch;
    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a field name")
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<NameMatch, E> {
        Ok(if self.0 == Some(v) {
            NameMatch::Expected
        } else {
            NameMatch::Other(CompactString::from(v))
        })
    }
}

/// A field name, borrowed from the input when it can be (no `String` per key).
struct NameKey(CompactString);

impl<'de> Deserialize<'de> for NameKey {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<NameKey, D::Error> {
        struct V;
        impl Visitor<'_> for V {
            type Value = NameKey;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a field name")
            }
            fn visit_str<E: de::Error>(self, v: &str) -> Result<NameKey, E> {
                Ok(NameKey(CompactString::from(v)))
            }
            fn visit_string<E: de::Error>(self, v: String) -> Result<NameKey, E> {
                Ok(NameKey(CompactString::from(v)))
            }
        }
        d.deserialize_str(V)
    }
}

impl<'de> Deserialize<'de> for Datum {
    fn deserialize<D: Deserializer<'de>>(d: D) -> Result<Datum, D::Error> {
        d.deserialize_any(DatumVisitor)
    }
}

struct DatumVisitor;

impl<'de> Visitor<'de> for DatumVisitor {
    type Value = Datum;

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("a JSON value")
    }
    fn visit_bool<E: de::Error>(self, v: bool) -> Result<Datum, E> {
        Ok(Datum::Bool(v))
    }
    fn visit_i64<E: de::Error>(self, v: i64) -> Result<Datum, E> {
        Ok(Datum::Int(v))
    }
    fn visit_u64<E: de::Error>(self, v: u64) -> Result<Datum, E> {
        Ok(Datum::from_u64(v))
    }
    fn visit_f64<E: de::Error>(self, v: f64) -> Result<Datum, E> {
        Ok(Datum::from_f64(v))
    }
    fn visit_str<E: de::Error>(self, v: &str) -> Result<Datum, E> {
        Ok(Datum::Str(CompactString::from(v)))
    }
    fn visit_string<E: de::Error>(self, v: String) -> Result<Datum, E> {
        Ok(Datum::Str(CompactString::from(v)))
    }
    fn visit_unit<E: de::Error>(self) -> Result<Datum, E> {
        Ok(Datum::Null)
    }
    fn visit_none<E: de::Error>(self) -> Result<Datum, E> {
        Ok(Datum::Null)
    }
    fn visit_seq<A: SeqAccess<'de>>(self, seq: A) -> Result<Datum, A::Error> {
        let v = serde_json::Value::deserialize(de::value::SeqAccessDeserializer::new(seq))?;
        Ok(Datum::Json(Box::new(v)))
    }
    fn visit_map<A: MapAccess<'de>>(self, map: A) -> Result<Datum, A::Error> {
        let v = serde_json::Value::deserialize(de::value::MapAccessDeserializer::new(map))?;
        Ok(Datum::Json(Box::new(v)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::row::Schema;
    use std::sync::Arc;

    /// Lines whose bytes after a parse and a write must equal serde_json's own round trip.
    const TRICKY: &[&str] = &[
        r#"{"a":1,"b":-2,"c":1.0,"d":0.1,"e":1e300,"f":-0.0,"g":123456789.125}"#,
        r#"{"big":18446744073709551615,"min":-9223372036854775808,"max":9223372036854775807}"#,
        r#"{"s":"quote \" backslash \\ slash / tab \t nl \n cr \r bell \u0007 del \u007f"}"#,
        r#"{"u":"Ÿes ünïcödé 日本語 😀 \ud83d\ude00 \u2028"}"#,
        r#"{"nested":{"z":1,"a":[1,"x",{"k":null}]},"arr":[],"obj":{},"n":null,"t":true,"f":false}"#,
        r#"{"dup":1,"other":2,"dup":3}"#,
        r#"{"e1":1E2,"e2":2.5e-8,"e3":100000000000000000000000,"f":3.141592653589793}"#,
        r#"{}"#,
        r#"42"#,
        r#""just a string""#,
        r#"[1,{"b":2,"a":1}]"#,
        r#"null"#,
        r#"{"long":"a string longer than twenty-four bytes, on the heap"}"#,
    ];

    #[test]
    fn writes_the_bytes_serde_json_writes_for_tricky_values() {
        let mut cache = SchemaCache::default();
        for text in TRICKY {
            let want = serde_json::to_string(&serde_json::from_str::<serde_json::Value>(text).unwrap()).unwrap();
            let row = parse_json_row(text, &mut cache).unwrap();
            let mut out = Vec::new();
            write_json_line(&row, &mut out);
            assert_eq!(String::from_utf8(out).unwrap(), format!("{want}\n"), "input {text}");
            // And through the JSON value conversions.
            let via_value = Row::from_json(serde_json::from_str(text).unwrap());
            assert_eq!(serde_json::to_string(&via_value).unwrap(), want, "input {text}");
            assert_eq!(via_value, row, "input {text}");
            assert_eq!(row.to_json(), serde_json::from_str::<serde_json::Value>(text).unwrap());
        }
    }

    /// Lines read one after another through one cache (the fast path expects the last
    /// schema's names in order) give the rows of their JSON values: same names, another
    /// order, fewer, more, a repeated name after the expected ones, an escaped name.
    #[test]
    fn lines_that_leave_the_last_schema_read_as_their_json_values() {
        let lines = [
            r#"{"a":1,"b":"x"}"#,
            r#"{"a":2,"b":"y"}"#,
            r#"{"b":"z","a":3}"#,
            r#"{"b":"z"}"#,
            r#"{"b":"z","a":4,"c":null}"#,
            r#"{"b":"z","a":5}"#,
            r#"{"b":"z","a":5,"b":[1]}"#,
            r#"{"b":"z","a":6,"b":"w","a":7}"#,
            r#"{"b":"e","a":8}"#,
            r#"{}"#,
            r#"{}"#,
            r#"{"a":9}"#,
            r#"7"#,
            r#"{"a":10}"#,
        ];
        let mut cache = SchemaCache::default();
        let mut previous: Option<Row> = None;
        for text in lines {
            let row = parse_json_row(text, &mut cache).unwrap();
            let want = Row::from_json(serde_json::from_str(text).unwrap());
            assert_eq!(row, want, "input {text}");
            assert_eq!(
                serde_json::to_string(&row).unwrap(),
                serde_json::to_string(&want).unwrap(),
                "input {text}"
            );
            if let Some(p) = &previous
                && p.schema().names() == row.schema().names()
                && !row.schema().is_bare()
            {
                assert!(Arc::ptr_eq(p.schema(), row.schema()), "input {text} shares the schema");
            }
            previous = Some(row);
        }
        assert!(parse_json_row(r#"{"a":1,"b":}"#, &mut cache).is_err());
        assert!(parse_json_row(r#"{"a":1,"c":}"#, &mut cache).is_err());
    }

    #[test]
    fn typed_values_write_as_serde_json_numbers_and_strings() {
        let schema = Schema::new(["i", "u", "f", "whole", "nan", "s"]);
        let row = Row::new(
            schema,
            vec![
                Datum::Int(-7),
                Datum::from_u64(u64::MAX),
                Datum::from_f64(2.5),
                Datum::from_f64(3.0),
                Datum::from_f64(f64::NAN),
                Datum::Str("é\u{1}".into()),
            ],
        )
        .unwrap();
        let want = serde_json::json!({"i": -7, "u": u64::MAX, "f": 2.5, "whole": 3.0, "nan": null, "s": "é\u{1}"});
        assert_eq!(
            serde_json::to_string(&row).unwrap(),
            serde_json::to_string(&want).unwrap()
        );
        assert_eq!(Datum::from_u64(5), Datum::Int(5));
        assert_eq!(Datum::Str("x".into()).to_string(), "\"x\"");
    }

    #[test]
    fn rows_with_the_same_names_share_a_schema_and_errors_are_reported() {
        let mut cache = SchemaCache::default();
        let a = parse_json_row(r#"{"x":1,"y":"a"}"#, &mut cache).unwrap();
        let b = parse_json_row(r#"{"x":2,"y":"b"}"#, &mut cache).unwrap();
        assert!(std::sync::Arc::ptr_eq(a.schema(), b.schema()));
        let c = parse_json_row(r#"{"y":"b","x":2}"#, &mut cache).unwrap();
        assert!(!std::sync::Arc::ptr_eq(a.schema(), c.schema()));
        assert_eq!(c.get("x"), Some(&Datum::Int(2)));
        assert!(parse_json_row(r#"{"x":1"#, &mut cache).is_err());
        assert!(parse_json_row(r#"{"x":1} 2"#, &mut cache).is_err());
        assert!(Row::new(Schema::new(["a"]), vec![]).is_err());
    }
}
