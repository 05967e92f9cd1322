//! File source formats on the real data: gzip JSON lines (Wikipedia edits) with kill -9 and
//! restore inside the compressed stream, and CSV with a header (NYC taxi trips) with a keyed sum.

mod common;
use common::*;
use std::collections::BTreeMap;
use std::io::Read;

fn write(dir: &std::path::Path, yaml: String) -> std::path::PathBuf {
    let f = dir.join("job.yaml");
    std::fs::write(&f, yaml).unwrap();
    f
}

#[test]
fn gzip_json_lines_count_per_channel_is_exactly_once_across_kills() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let src = data_dir().join("wikiticker/wikiticker-2015-09-12.jsonl.gz");
    let m = write(
        dir.path(),
        format!(
            r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: edits }}
spec:
  parallelism: 2
  checkpointing: {{ interval: 200ms, storage: "{d}/checkpoints" }}
  job:
    steps:
      - source: {{ file: {{ path: "{src}", format: jsonl, maxRecordsPerSecond: 12000 }} }}
      - keyBy: {{ expression: channel, as: channel }}
      - count: {{}}
      - sink: {{ file: {{ path: "{d}/output" }} }}
"#,
            src = src.display()
        ),
    );
    let mut rng = Rng(seed());
    run_with_kills(&m, 2, &[], &mut rng);

    let mut text = String::new();
    flate2::read::MultiGzDecoder::new(std::fs::File::open(&src).unwrap())
        .read_to_string(&mut text)
        .unwrap();
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    for line in text.lines().filter(|l| !l.trim().is_empty()) {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        *counts.entry(v["channel"].as_str().unwrap().to_string()).or_default() += 1;
    }
    let mut expected: Vec<String> = counts
        .iter()
        .flat_map(|(c, &n)| (1..=n).map(move |k| serde_json::json!({"channel": c, "count": k}).to_string()))
        .collect();
    expected.sort();
    assert_eq!(counts.values().sum::<u64>(), 39_244);
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected,
        "gzip JSON lines with kills",
    );
}

#[test]
fn csv_with_header_keyed_sum_of_a_converted_field() {
    let dir = tempfile::tempdir().unwrap();
    let d = dir.path().display();
    let src = data_dir().join("nyc-taxi/yellow_tripdata_sample_2019-01.csv");
    let m = write(
        dir.path(),
        format!(
            r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: taxi }}
spec:
  parallelism: 1
  checkpointing: {{ interval: 1s, storage: "{d}/checkpoints" }}
  job:
    steps:
      - source: {{ file: {{ path: "{src}", format: csv }} }}
      - filter: {{ expression: "passenger_count != ''" }}
      - keyBy: {{ expression: vendor_id, as: vendor }}
      - sum: {{ expression: "int(passenger_count)", as: passengers }}
      - sink: {{ file: {{ path: "{d}/output" }} }}
"#,
            src = src.display()
        ),
    );
    Weir::run(&m, &[], &[]).wait_ok();

    // Expected: the running sum per vendor in file order (parallelism 1 keeps the order).
    let mut rdr = csv::Reader::from_path(&src).unwrap();
    let headers = rdr.headers().unwrap().clone();
    let (vi, pi) = (
        headers.iter().position(|h| h == "vendor_id").unwrap(),
        headers.iter().position(|h| h == "passenger_count").unwrap(),
    );
    let mut sums: BTreeMap<String, i64> = BTreeMap::new();
    let mut expected = vec![];
    for rec in rdr.records() {
        let rec = rec.unwrap();
        if rec[pi].is_empty() {
            continue;
        }
        let s = sums.entry(rec[vi].to_string()).or_default();
        *s += rec[pi].parse::<i64>().unwrap();
        expected.push(serde_json::json!({"vendor": rec[vi].to_string(), "passengers": *s}).to_string());
    }
    expected.sort();
    assert!(expected.len() > 9_000, "{}", expected.len());
    assert_same_multiset(&local_output(&dir.path().join("output")), &expected, "CSV keyed sum");
}
