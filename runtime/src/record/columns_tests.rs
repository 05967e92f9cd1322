use super::*;
use crate::record::json::write_json_line;
use serde_json::json;

/// A batch of every column type, with nulls, escapes, unicode, floats and large integers.
fn mixed() -> ColumnBatch {
    let mut s = Strings::with_capacity(4, 16);
    s.push("plain");
    s.push_null();
    s.push("quote \" back \\ newline \n tab \t ctl \u{1}");
    s.push("ünïcödé ✓ 𝄞");
    let columns = vec![
        Column::Int(Values {
            values: vec![i64::MIN, 0, 7, i64::MAX],
            validity: Some(vec![true, true, false, true]),
        }),
        Column::Float(Values {
            values: vec![0.1, -2.5e-300, 1e21, 3.0],
            validity: None,
        }),
        Column::Bool(Values {
            values: vec![true, false, false, true],
            validity: Some(vec![true, true, true, false]),
        }),
        Column::Str(s),
        Column::Prefixed(PrefixedInts {
            prefix: "k\"é-",
            values: vec![0, 7, u64::MAX, 123],
        }),
    ];
    ColumnBatch::new(Schema::new(["i", "f \"quoted\"", "b", "s", "p"]), columns).unwrap()
}

#[test]
fn json_lines_from_columns_are_the_bytes_of_the_rows() {
    let batch = mixed();
    let mut from_columns = vec![];
    batch.write_json_lines(&mut from_columns);
    let mut from_rows = vec![];
    for r in batch.clone().into_records() {
        write_json_line(&r.row, &mut from_rows);
    }
    assert_eq!(
        String::from_utf8(from_columns).unwrap(),
        String::from_utf8(from_rows).unwrap()
    );
    // An object without fields is `{}` per record.
    let empty = ColumnBatch::new(Schema::new(Vec::<&str>::new()), vec![]).unwrap();
    let mut out = vec![];
    empty.write_json_lines(&mut out);
    assert!(out.is_empty(), "no column: no record");
}

#[test]
fn records_from_columns_hold_the_values_and_keys() {
    let mut batch = mixed();
    batch
        .set_keyed(KeyColumns {
            keys: KeyColumn::Int(vec![1, 2, 3, 4]),
            key_groups: vec![5, 6, 7, 8],
            hashes: vec![9, 10, 11, 12],
        })
        .unwrap();
    let records = batch.into_records();
    assert_eq!(
        records[1].row.to_json(),
        json!({"i": 0, "f \"quoted\"": -2.5e-300, "b": false, "s": null, "p": "k\"é-7"})
    );
    assert_eq!(records[2].row.values()[0], Datum::Null);
    assert_eq!(records[3].row.values()[2], Datum::Null);
    assert_eq!(
        records[3].keyed,
        Some(KeyedBy {
            key: Key::Int(4),
            key_group: 8,
            hash: 12
        })
    );
}

#[test]
fn batches_check_their_shape() {
    let one = || Column::Int(Values::from_vec(vec![1]));
    let two = Column::Int(Values::from_vec(vec![1, 2]));
    for (schema, columns, message) in [
        (
            Schema::new(["a"]),
            vec![one(), one()],
            "2 columns for a schema of 1 fields",
        ),
        (Schema::new(["a", "b"]), vec![one(), two], "column 1 has 2 rows"),
        (Schema::bare(), vec![one()], "not bare values"),
    ] {
        let error = ColumnBatch::new(schema, columns).unwrap_err();
        assert!(error.contains(message), "{error}");
    }
    let mut b = ColumnBatch::new(Schema::new(["a"]), vec![one()]).unwrap();
    let keyed = KeyColumns {
        keys: KeyColumn::Any(vec![]),
        key_groups: vec![],
        hashes: vec![],
    };
    assert!(b.set_keyed(keyed).unwrap_err().contains("1 rows"));
}

/// Partitioning by key group keeps each part's records in order, gives every record to
/// exactly one part, and hands an unkeyed batch back as an error.
#[test]
fn partition_splits_by_key_group_in_order() {
    let n = 10;
    let mut s = Strings::default();
    for i in 0..n {
        s.push(&format!("w{i}"));
    }
    let mut batch = ColumnBatch::new(
        Schema::new(["id", "w"]),
        vec![Column::Int(Values::from_vec((0..n).collect())), Column::Str(s)],
    )
    .unwrap();
    assert!(batch.clone().partition(3, |_| 0).is_err(), "not keyed");
    batch
        .set_keyed(KeyColumns {
            keys: KeyColumn::Any((0..n).map(|i| Key::Str(format!("w{i}").into())).collect()),
            key_groups: (0..n as u32).map(|i| i % 4).collect(),
            hashes: (0..n as u64).collect(),
        })
        .unwrap();
    let rows = batch.clone().into_records();
    let parts = batch.clone().partition(3, |kg| (kg % 3) as usize).unwrap();
    let mut seen = vec![];
    for (p, part) in parts {
        let records = part.into_records();
        assert!(
            records
                .iter()
                .all(|r| r.keyed.as_ref().unwrap().key_group % 3 == p as u32)
        );
        seen.extend(records);
    }
    seen.sort_by_key(|r| r.keyed.as_ref().unwrap().hash);
    assert_eq!(seen, rows);
    // Everything to one part: the batch goes whole.
    let whole = batch.clone().partition(3, |_| 2).unwrap();
    assert_eq!(whole.len(), 1);
    assert_eq!(whole[0].0, 2);
    assert_eq!(whole[0].1, batch);
}

#[test]
fn keys_become_a_column_when_of_one_type() {
    assert_eq!(
        Column::from_keys(&[Key::Int(3), Key::Int(-1)]),
        Some(Column::Int(Values::from_vec(vec![3, -1])))
    );
    let Some(Column::Str(s)) = Column::from_keys(&[Key::Str("a".into()), Key::Str("bc".into())]) else {
        panic!("a string column")
    };
    assert_eq!((s.get(0), s.get(1), s.len()), (Some("a"), Some("bc"), 2));
    assert_eq!(
        Column::from_keys(&[Key::Bool(true)]),
        Some(Column::Bool(Values::from_vec(vec![true])))
    );
    assert_eq!(Column::from_keys(&[Key::Int(1), Key::Str("a".into())]), None);
}
