use super::*;
use crate::operators::source::SourcePending;

fn declared(fields: &[(&str, DeclaredType)]) -> Vec<SchemaField> {
    fields
        .iter()
        .map(|(name, t)| SchemaField {
            name: name.to_string(),
            field_type: *t,
        })
        .collect()
}

fn csv_row(header: &[&str], types: &[SchemaField], line: &str) -> TaskResult<String> {
    let header = CsvHeader::new(header.iter().map(|s| s.to_string()).collect(), types);
    let row = parse(
        FileFormat::Csv,
        "f.csv",
        0,
        line.as_bytes(),
        Some(&header),
        types,
        &mut SchemaCache::default(),
    )?
    .unwrap();
    Ok(serde_json::to_string(&row).unwrap())
}

fn csv_json(header: &[&str], line: &str) -> String {
    csv_row(header, &[], line).unwrap()
}

#[test]
fn csv_rows_follow_the_header_and_a_repeated_name_keeps_its_last_value() {
    assert_eq!(csv_json(&["a", "b"], "1,\"x, y\""), r#"{"a":"1","b":"x, y"}"#);
    assert_eq!(csv_json(&["a", "b", "a"], "1,2,3"), r#"{"a":"3","b":"2"}"#);
    let text = parse(
        FileFormat::Text,
        "f",
        0,
        "é \"q\"".as_bytes(),
        None,
        &[],
        &mut SchemaCache::default(),
    );
    assert_eq!(
        serde_json::to_string(&text.unwrap().unwrap()).unwrap(),
        r#"{"line":"é \"q\""}"#
    );
}

#[test]
fn csv_values_are_converted_to_their_declared_types() {
    use DeclaredType::*;
    let types = declared(&[("n", Int), ("price", Float), ("ok", Bool)]);
    let header = ["id", "n", "price", "ok"];
    let rows = [
        ("a,1,2.5,true", r#"{"id":"a","n":1,"price":2.5,"ok":true}"#),
        ("b,-3,4,false", r#"{"id":"b","n":-3,"price":4.0,"ok":false}"#),
        ("c,,,", r#"{"id":"c","n":null,"price":null,"ok":null}"#),
    ];
    for (line, want) in rows {
        assert_eq!(csv_row(&header, &types, line).unwrap(), want, "{line}");
    }
    let errors = [
        ("a,1.5,2,true", "f.csv at byte 0: column `n` is `1.5`, not an int"),
        ("a,1,x,true", "column `price` is `x`, not a float"),
        ("a,1,2,yes", "column `ok` is `yes`, not a bool"),
    ];
    for (line, want) in errors {
        let e = csv_row(&header, &types, line).unwrap_err().to_string();
        assert!(e.contains(want), "{line}: want `{want}` in `{e}`");
    }
}

#[test]
fn json_lines_are_checked_against_a_declared_schema() {
    use DeclaredType::*;
    let types = declared(&[("n", Int), ("price", Float), ("name", String)]);
    let parse_line = |line: &str| {
        parse(
            FileFormat::Jsonl,
            "f.jsonl",
            7,
            line.as_bytes(),
            None,
            &types,
            &mut SchemaCache::default(),
        )
    };
    for ok in [
        r#"{"n": 1, "price": 2, "name": "a"}"#,
        r#"{"n": null, "price": 2.5, "other": [1]}"#,
    ] {
        assert!(parse_line(ok).is_ok(), "{ok}");
    }
    let e = parse_line(r#"{"n": 1, "price": "2.5"}"#).unwrap_err().to_string();
    assert!(
        e.contains(r#"f.jsonl at byte 7: field `price` is "2.5", and the source's schema declares it float"#),
        "{e}"
    );
    let e = parse_line(r#"{"n": 1.5}"#).unwrap_err().to_string();
    assert!(e.contains("field `n` is 1.5"), "{e}");
}

#[test]
fn plan_samples_read_the_first_file_or_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let spec = |path: &str, format: FileFormat| FileSourceSpec {
        path: dir.path().join(path).to_string_lossy().into_owned(),
        format,
        ..Default::default()
    };
    std::fs::write(dir.path().join("b.csv"), "x,y\n1,2\n").unwrap();
    std::fs::write(dir.path().join("a.csv"), "p,\"q r\"\r\n1,2\n").unwrap();
    match sample(&spec("*.csv", FileFormat::Csv)) {
        Some(SourceSample::CsvHeader { file, columns }) => {
            assert!(file.ends_with("a.csv"), "{file}");
            assert_eq!(columns, ["p", "q r"]);
        }
        other => panic!("{other:?}"),
    }
    let lines: String = (0..150).map(|i| format!("{{\"i\": {i}}}\n\n")).collect();
    std::fs::write(dir.path().join("e.jsonl"), lines + "not json\n").unwrap();
    match sample(&spec("e.jsonl", FileFormat::Jsonl)) {
        Some(SourceSample::JsonRows { rows, .. }) => assert_eq!(rows.len(), JSON_SAMPLE_LINES),
        other => panic!("{other:?}"),
    }
    std::fs::write(dir.path().join("bad.jsonl"), "{\"i\": 1}\n{oops\n{\"j\": 2}\n").unwrap();
    match sample(&spec("bad.jsonl", FileFormat::Jsonl)) {
        Some(SourceSample::JsonRows { rows, .. }) => assert_eq!(rows.len(), 1, "up to the bad line"),
        other => panic!("{other:?}"),
    }
    assert_eq!(sample(&spec("missing-*.csv", FileFormat::Csv)), None);
    assert_eq!(sample(&spec("a.csv", FileFormat::Text)), None);
    let s3 = FileSourceSpec {
        path: "s3://bucket/x.csv".into(),
        format: FileFormat::Csv,
        ..Default::default()
    };
    assert_eq!(sample(&s3), None);
}

#[test]
fn pending_bytes_sums_what_is_left_of_the_splits_not_done() {
    let split = |offset, done| FileSplit {
        index: 0,
        path: "f".into(),
        offset,
        done,
    };
    for (splits, sizes, want) in [
        (
            vec![split(0, false), split(30, false)],
            vec![Some(100), Some(50)],
            Some(120),
        ),
        // A finished split adds nothing, even one whose size is unknown.
        (vec![split(100, true), split(10, false)], vec![None, Some(50)], Some(40)),
        // A split not done with an unknown size (gzip, S3): unknown.
        (vec![split(0, false), split(0, false)], vec![Some(10), None], None),
        (vec![], vec![], Some(0)),
    ] {
        assert_eq!(pending_bytes(&splits, &sizes), want, "{splits:?} {sizes:?}");
    }
}

#[tokio::test]
async fn a_local_file_source_reports_the_bytes_it_has_not_read() {
    let dir = tempfile::tempdir().unwrap();
    let text: String = (0..40).map(|i| format!("line {i}\n")).collect();
    std::fs::write(dir.path().join("a.txt"), &text).unwrap();
    std::fs::write(dir.path().join("b.txt.gz"), b"").unwrap();
    let spec = |name: &str| FileSourceSpec {
        path: dir.path().join(name).to_string_lossy().into_owned(),
        ..Default::default()
    };
    let progress = Arc::new(AtomicU64::new(0));
    let mut source = FileSource::new(
        &spec("a.txt"),
        0,
        1,
        OperatorRestore::default(),
        &S3Options::default(),
        progress.clone(),
    )
    .await
    .unwrap();
    assert_eq!(source.pending(), Some(SourcePending::Bytes(text.len() as u64)));
    let mut out = vec![];
    source.next_batch(&mut out, 10).await.unwrap();
    let read: u64 = text.lines().take(10).map(|l| l.len() as u64 + 1).sum();
    assert_eq!(source.pending(), Some(SourcePending::Bytes(text.len() as u64 - read)));
    while source.next_batch(&mut out, 10).await.unwrap() {}
    assert_eq!(source.pending(), Some(SourcePending::Bytes(0)));
    let gz = FileSource::new(
        &spec("b.txt.gz"),
        0,
        1,
        OperatorRestore::default(),
        &S3Options::default(),
        progress,
    )
    .await
    .unwrap();
    assert_eq!(gz.pending(), None, "a compressed file's size says nothing of its lines");
}

/// Found by trial (helper-112): a restored split whose file was truncated since the snapshot
/// was read from past its end, reading nothing and saying nothing; a split whose file the path
/// no longer matches was dropped silently. Now the first fails naming the file, its size and
/// the offset, and the second is found (and warned about by subtask 0).
#[tokio::test]
async fn a_restored_split_past_its_files_end_fails_and_an_unlisted_one_is_found() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("a.txt").to_string_lossy().into_owned();
    std::fs::write(&path, "short\n").unwrap();
    let restored = FileSplit {
        index: 0,
        path: path.clone(),
        offset: 1000,
        done: false,
    };
    let restore = OperatorRestore {
        key_groups: vec![],
        operator_state: vec![postcard::to_allocvec(&restored).unwrap()],
    };
    let spec = FileSourceSpec {
        path: path.clone(),
        ..Default::default()
    };
    let mut source = FileSource::new(&spec, 0, 1, restore, &S3Options::default(), Arc::new(AtomicU64::new(0)))
        .await
        .unwrap();
    let mut out = vec![];
    let err = source.next_batch(&mut out, 10).await.unwrap_err().0;
    for part in [path.as_str(), "shorter (6 bytes) than the offset 1000", "--restore"] {
        assert!(err.contains(part), "{part}: {err}");
    }
    assert!(out.is_empty());

    let gone = FileSplit {
        path: "/data/moved.txt".into(),
        ..restored.clone()
    };
    let done = FileSplit {
        path: "/data/read.txt".into(),
        done: true,
        ..restored.clone()
    };
    let unlisted = unlisted_restored_splits([&restored, &gone, &done].into_iter(), std::slice::from_ref(&path));
    assert_eq!(unlisted, vec![&gone], "only a split not done and not listed");
}
