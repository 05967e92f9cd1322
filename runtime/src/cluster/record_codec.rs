//! The binary form of a batch of records between workers (no JSON on the data path).
//!
//! Layout, integers little-endian, `varint` = unsigned LEB128:
//!
//! ```text
//! frame   = MAGIC, varint S, S × schema, varint N, N × record
//! schema  = 0x00 (bare) | 0x01, varint F, F × (varint len, UTF-8 name)
//! record  = varint schema index, values (1 for a bare schema, else F), keyed
//! value   = 0 null | 1 false | 2 true | 3 i64 (8 bytes) | 4 u64 (8 bytes) | 5 f64 (8 bytes)
//!         | 6 string (varint len, UTF-8) | 7 nested JSON (varint len, JSON text)
//! keyed   = 0x00 | 0x01, key, u32 key group, u64 key hash
//! key     = 6 string (varint len, UTF-8) | 3 i64 | 1 false | 2 true
//! ```
//!
//! Each distinct schema of the batch is written once, and rows refer to it by index. The
//! first byte, [`MAGIC`], never starts a JSON frame (`{`, `"`), so a data connection carries
//! both: binary record batches, and JSON control frames (hello, barriers, credits).

use crate::record::{Datum, Key, KeyedBy, Record, Row, Schema};
use compact_str::CompactString;
use std::sync::Arc;

/// First byte of a binary record batch frame.
pub const MAGIC: u8 = 0xB1;

fn put_varint(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

fn put_str(out: &mut Vec<u8>, s: &str) {
    put_varint(out, s.len() as u64);
    out.extend_from_slice(s.as_bytes());
}

fn put_datum(out: &mut Vec<u8>, d: &Datum) {
    match d {
        Datum::Null => out.push(0),
        Datum::Bool(false) => out.push(1),
        Datum::Bool(true) => out.push(2),
        Datum::Int(i) => {
            out.push(3);
            out.extend_from_slice(&i.to_le_bytes());
        }
        Datum::UInt(u) => {
            out.push(4);
            out.extend_from_slice(&u.to_le_bytes());
        }
        Datum::Float(f) => {
            out.push(5);
            out.extend_from_slice(&f.to_le_bytes());
        }
        Datum::Str(s) => {
            out.push(6);
            put_str(out, s);
        }
        Datum::Json(v) => {
            out.push(7);
            // A JSON value always serializes.
            put_str(out, &serde_json::to_string(v).unwrap_or_default());
        }
    }
}

/// Encodes records as one binary batch frame.
pub fn encode(records: &[Record]) -> Vec<u8> {
    let mut schemas: Vec<&Arc<Schema>> = Vec::new();
    let mut index = Vec::with_capacity(records.len());
    for r in records {
        let s = r.row.schema();
        let i = match schemas.iter().position(|k| Arc::ptr_eq(k, s) || ***k == **s) {
            Some(i) => i,
            None => {
                schemas.push(s);
                schemas.len() - 1
            }
        };
        index.push(i);
    }
    let mut out = Vec::with_capacity(16 + records.len() * 32);
    out.push(MAGIC);
    put_varint(&mut out, schemas.len() as u64);
    for s in &schemas {
        if s.is_bare() {
            out.push(0);
        } else {
            out.push(1);
            put_varint(&mut out, s.names().len() as u64);
            for n in s.names() {
                put_str(&mut out, n);
            }
        }
    }
    put_varint(&mut out, records.len() as u64);
    for (r, i) in records.iter().zip(index) {
        put_varint(&mut out, i as u64);
        for d in r.row.values() {
            put_datum(&mut out, d);
        }
        match &r.keyed {
            None => out.push(0),
            Some(k) => {
                out.push(1);
                match &k.key {
                    Key::Str(s) => {
                        out.push(6);
                        put_str(&mut out, s);
                    }
                    Key::Int(i) => {
                        out.push(3);
                        out.extend_from_slice(&i.to_le_bytes());
                    }
                    Key::Bool(b) => out.push(if *b { 2 } else { 1 }),
                }
                out.extend_from_slice(&k.key_group.to_le_bytes());
                out.extend_from_slice(&k.hash.to_le_bytes());
            }
        }
    }
    out
}

/// A cursor over a frame; every read checks bounds.
struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Result<&'a [u8], String> {
        let end = self.at.checked_add(n).filter(|&e| e <= self.bytes.len());
        let end = end.ok_or_else(|| format!("truncated at byte {}", self.at))?;
        let s = &self.bytes[self.at..end];
        self.at = end;
        Ok(s)
    }

    fn byte(&mut self) -> Result<u8, String> {
        Ok(self.take(1)?[0])
    }

    fn array<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let mut a = [0u8; N];
        a.copy_from_slice(self.take(N)?);
        Ok(a)
    }

    fn varint(&mut self) -> Result<u64, String> {
        let mut v = 0u64;
        for shift in (0..64).step_by(7) {
            let b = self.byte()?;
            v |= u64::from(b & 0x7f) << shift;
            if b & 0x80 == 0 {
                return Ok(v);
            }
        }
        Err(format!("varint too long at byte {}", self.at))
    }

    /// A count, bounded by the bytes left (each counted item takes at least one byte).
    fn count(&mut self) -> Result<usize, String> {
        let n = self.varint()?;
        if n > (self.bytes.len() - self.at) as u64 {
            return Err(format!("count {n} exceeds the frame at byte {}", self.at));
        }
        Ok(n as usize)
    }

    fn str(&mut self) -> Result<&'a str, String> {
        let n = self.count()?;
        let at = self.at;
        std::str::from_utf8(self.take(n)?).map_err(|e| format!("invalid UTF-8 at byte {at}: {e}"))
    }

    fn datum(&mut self) -> Result<Datum, String> {
        Ok(match self.byte()? {
            0 => Datum::Null,
            1 => Datum::Bool(false),
            2 => Datum::Bool(true),
            3 => Datum::Int(i64::from_le_bytes(self.array()?)),
            4 => Datum::UInt(u64::from_le_bytes(self.array()?)),
            5 => Datum::Float(f64::from_le_bytes(self.array()?)),
            6 => Datum::Str(CompactString::from(self.str()?)),
            7 => {
                let text = self.str()?;
                Datum::Json(Box::new(
                    serde_json::from_str(text).map_err(|e| format!("nested JSON: {e}"))?,
                ))
            }
            t => return Err(format!("unknown value tag {t} at byte {}", self.at - 1)),
        })
    }
}

/// Decodes a binary batch frame. Errors: a message naming what is malformed and where.
pub fn decode(bytes: &[u8]) -> Result<Vec<Record>, String> {
    let mut r = Reader { bytes, at: 0 };
    if r.byte()? != MAGIC {
        return Err("not a binary record batch".into());
    }
    let mut schemas = Vec::new();
    for _ in 0..r.count()? {
        schemas.push(match r.byte()? {
            0 => Schema::bare(),
            1 => {
                let n = r.count()?;
                let names = (0..n).map(|_| r.str()).collect::<Result<Vec<_>, _>>()?;
                Schema::new(names)
            }
            t => return Err(format!("unknown schema kind {t}")),
        });
    }
    let n = r.count()?;
    let mut records = Vec::with_capacity(n);
    for _ in 0..n {
        let i = r.varint()? as usize;
        let schema = schemas
            .get(i)
            .ok_or_else(|| format!("schema index {i} out of range"))?
            .clone();
        let fields = if schema.is_bare() { 1 } else { schema.names().len() };
        let values = (0..fields).map(|_| r.datum()).collect::<Result<Vec<_>, _>>()?;
        let row = Row::new(schema, values)?;
        let keyed = match r.byte()? {
            0 => None,
            1 => {
                let key = match r.byte()? {
                    6 => Key::Str(CompactString::from(r.str()?)),
                    3 => Key::Int(i64::from_le_bytes(r.array()?)),
                    1 => Key::Bool(false),
                    2 => Key::Bool(true),
                    t => return Err(format!("unknown key tag {t}")),
                };
                let key_group = u32::from_le_bytes(r.array()?);
                let hash = u64::from_le_bytes(r.array()?);
                Some(KeyedBy { key, key_group, hash })
            }
            t => return Err(format!("unknown keyed flag {t}")),
        };
        records.push(Record { row, keyed });
    }
    if r.at != bytes.len() {
        return Err(format!("{} bytes after the last record", bytes.len() - r.at));
    }
    Ok(records)
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn sample() -> Vec<Record> {
        let values = [
            json!({"a": 1, "b": "x", "c": 2.5, "d": null, "e": true, "f": u64::MAX, "g": [1, {"z": 0}]}),
            json!({"a": -1, "b": "a string longer than twenty-four bytes", "c": -0.0, "d": false, "e": "é😀", "f": 0, "g": {}}),
            json!("bare"),
            json!({"word": "the"}),
        ];
        let mut records: Vec<Record> = values.into_iter().map(|v| Record::new(Row::from_json(v))).collect();
        records[3].keyed = Some(KeyedBy::new(Key::Str("the".into()), 128));
        records[0].keyed = Some(KeyedBy::new(Key::Int(-3), 128));
        records[1].keyed = Some(KeyedBy::new(Key::Bool(true), 128));
        records
    }

    #[test]
    fn batches_round_trip_with_each_schema_once() {
        let records = sample();
        let bytes = encode(&records);
        assert_eq!(decode(&bytes).unwrap(), records);
        // Two rows with the same field names: the names are written once.
        let same: Vec<_> = (0..50)
            .map(|i| Record::new(Row::from_json(json!({"field_name_1": i, "field_name_2": "v"}))))
            .collect();
        let bytes = encode(&same);
        assert_eq!(String::from_utf8_lossy(&bytes).matches("field_name_1").count(), 1);
        assert_eq!(decode(&bytes).unwrap(), same);
        assert_eq!(decode(&encode(&[])).unwrap(), vec![]);
    }

    #[test]
    fn malformed_frames_are_errors_not_panics() {
        let bytes = encode(&sample());
        for cut in 0..bytes.len() {
            assert!(decode(&bytes[..cut]).is_err(), "cut at {cut}");
        }
        let mut extra = bytes.clone();
        extra.push(0);
        assert!(decode(&extra).unwrap_err().contains("after the last record"));
        assert!(decode(b"{\"Records\":[]}").is_err());
        let huge_count = [MAGIC, 0xff, 0xff, 0xff, 0xff, 0x0f];
        assert!(decode(&huge_count).unwrap_err().contains("exceeds"));
    }
}
