use super::*;

/// An event-time error names the record's topic, partition and offset (before, Kafka
/// records had no origin: `of a record`).
#[test]
fn a_records_origin_names_its_topic_partition_and_offset() {
    assert_eq!(
        kafka_record_origin("orders", 2, 17),
        "the record at offset 17 of topic `orders` partition 2"
    );
}

fn spec(key: Option<&str>, partition: Option<&str>, offset: Option<&str>, timestamp: Option<&str>) -> KafkaSourceSpec {
    KafkaSourceSpec {
        key_field: key.map(String::from),
        partition_field: partition.map(String::from),
        offset_field: offset.map(String::from),
        timestamp_field: timestamp.map(String::from),
        ..Default::default()
    }
}

#[test]
fn metadata_fields_are_added_as_configured() {
    let all = spec(Some("k"), Some("p"), Some("o"), Some("ts"));
    let meta = |key: Option<&'static [u8]>, ts: Option<i64>| MessageMetadata {
        key,
        partition: 3,
        offset: 41,
        timestamp_ms: ts,
    };
    let cases: Vec<(&str, KafkaSourceSpec, MessageMetadata<'static>, Result<&str, &str>)> = vec![
        (
            r#"{"a":1}"#,
            spec(None, None, None, None),
            meta(Some(b"x"), Some(5)),
            Ok(r#"{"a":1}"#),
        ),
        (
            r#"{"a":1}"#,
            all.clone(),
            meta(Some(b"user-7"), Some(1_700_000_000_000)),
            Ok(r#"{"a":1,"k":"user-7","p":3,"o":41,"ts":1700000000000}"#),
        ),
        (
            r#"{"a":1}"#,
            all.clone(),
            meta(None, None),
            Ok(r#"{"a":1,"k":null,"p":3,"o":41,"ts":null}"#),
        ),
        (
            r#"{"a":1}"#,
            spec(None, None, Some("o"), None),
            meta(None, None),
            Ok(r#"{"a":1,"o":41}"#),
        ),
        (
            r#"{"k":1}"#,
            all.clone(),
            meta(None, None),
            Err("already has a field `k` (source.kafka.keyField)"),
        ),
        (r#"7"#, all, meta(None, None), Err("not a JSON object")),
    ];
    for (value, spec, metadata, want) in cases {
        let row = parse_json_row(value, &mut SchemaCache::default()).unwrap();
        let got = add_metadata(row, &spec, &metadata, &mut SchemaCache::default()).map(|r| {
            let mut out = Vec::new();
            crate::record::json::write_json_line(&r, &mut out);
            String::from_utf8(out).unwrap().trim_end().to_string()
        });
        match (&got, want) {
            (Ok(text), Ok(w)) => assert_eq!(text, w, "{value}"),
            (Err(e), Err(w)) => assert!(e.contains(w), "{value}: {e}"),
            _ => panic!("{value}: got {got:?}, want {want:?}"),
        }
    }
}
