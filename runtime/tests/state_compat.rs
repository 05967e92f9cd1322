//! State compatibility: a checkpoint written by an earlier Weir (main at f59af61, before typed
//! records; `tests/fixtures/main-f59af61`) restores with this build, at the parallelism it was
//! written with and rescaled, and the job finishes exactly once.

mod common;
use common::*;
use std::collections::BTreeMap;
use weir_runtime::record::Datum;

const RECORDS: u64 = 6000;

/// Runs the fixture's job restored from its checkpoint at `parallelism`; returns the printed
/// lines.
fn restore_and_run(parallelism: u32) -> Vec<String> {
    let dir = tempfile::tempdir().unwrap();
    let fixture = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/main-f59af61/compat/chk-3");
    let chk = dir.path().join("old/compat/chk-3");
    std::fs::create_dir_all(&chk).unwrap();
    for f in std::fs::read_dir(&fixture).unwrap() {
        let f = f.unwrap().path();
        std::fs::copy(&f, chk.join(f.file_name().unwrap())).unwrap();
    }
    let manifest = dir.path().join("job.yaml");
    std::fs::write(
        &manifest,
        format!(
            r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: compat }}
spec:
  parallelism: {parallelism}
  checkpointing: {{ interval: 1s, storage: "{}/checkpoints" }}
  job:
    steps:
      - uid: gen
        source: {{ generator: {{ seed: 7, count: {RECORDS}, keys: 50, splits: 4 }} }}
      - keyBy: {{ expression: key, as: key }}
      - uid: counts
        count: {{}}
      - uid: out
        sink: {{ print: {{}} }}
"#,
            dir.path().display()
        ),
    )
    .unwrap();
    let out = std::process::Command::new(weir())
        .args([
            "run",
            manifest.to_str().unwrap(),
            "--listen",
            "127.0.0.1:0",
            "--restore",
        ])
        .arg(&chk)
        .env(SECRET_ENV, secret_file())
        .output()
        .unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(str::to_string)
        .collect()
}

/// Each key's count over all records of the generator.
fn totals() -> BTreeMap<String, u64> {
    let mut totals = BTreeMap::new();
    for n in 0..RECORDS {
        let row = weir_runtime::operators::source::generator::record(7, n, 50);
        let Some(Datum::Str(key)) = row.get("key") else {
            panic!("generator row without a string key: {row}");
        };
        *totals.entry(key.to_string()).or_default() += 1;
    }
    totals
}

fn check(parallelism: u32) {
    let lines = restore_and_run(parallelism);
    let mut printed: BTreeMap<String, Vec<u64>> = BTreeMap::new();
    for line in &lines {
        let v: serde_json::Value = serde_json::from_str(line).unwrap();
        let key = v["key"].as_str().unwrap().to_string();
        printed.entry(key).or_default().push(v["count"].as_u64().unwrap());
    }
    let totals = totals();
    let mut restored_records = 0;
    for (key, total) in &totals {
        let mut counts = printed.remove(key).unwrap_or_default();
        counts.sort_unstable();
        // The counts continue from the restored one up to the total, each once.
        let first = counts.first().copied().unwrap_or(total + 1);
        assert_eq!(
            counts,
            (first..=*total).collect::<Vec<_>>(),
            "key {key} at p={parallelism}"
        );
        restored_records += first - 1;
    }
    assert!(printed.is_empty(), "unknown keys {printed:?}");
    // The checkpoint held part of the input: restored counts plus new records are every record.
    assert!(restored_records > 0, "nothing restored at p={parallelism}");
    assert_eq!(restored_records + lines.len() as u64, RECORDS);
}

#[test]
fn a_checkpoint_of_main_before_typed_records_restores_exactly_once() {
    check(2);
}

#[test]
fn a_checkpoint_of_main_before_typed_records_restores_rescaled() {
    check(1);
    check(3);
}

/// Integer keys: a checkpoint of the generic key table and row batches (`WEIR_RECORDS=rows`:
/// the state every earlier release wrote for integer keys) restores into the integer-key
/// table (`state/int_keyed.rs`) at another parallelism, and the job finishes exactly once.
#[test]
fn integer_key_state_of_the_generic_table_restores_into_the_integer_table() {
    let dir = tempfile::tempdir().unwrap();
    let manifest = dir.path().join("job.yaml");
    std::fs::write(
        &manifest,
        format!(
            r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: compat-int }}
spec:
  parallelism: 2
  checkpointing: {{ interval: 200ms, storage: "{d}/checkpoints" }}
  job:
    steps:
      - source: {{ generator: {{ seed: 5, count: 40000, keys: 10, maxRecordsPerSecond: 4000 }} }}
      - keyBy: {{ expression: "id % 500", as: k }}
      - uid: counts
        count: {{}}
      - uid: out
        sink: {{ file: {{ path: "{d}/output" }} }}
"#,
            d = dir.path().display()
        ),
    )
    .unwrap();
    let rows = vec![("WEIR_RECORDS".to_string(), "rows".to_string())];
    let w = Weir::run(&manifest, &[], &rows);
    let _ = w.api();
    std::thread::sleep(std::time::Duration::from_millis(1500));
    w.kill9();
    // The killed run committed output: a second run that did not restore its state would
    // repeat those counts.
    assert!(
        !local_output(&dir.path().join("output")).is_empty(),
        "the first run committed output"
    );
    Weir::run(&manifest, &["--parallelism", "3", "--restore", "latest"], &[]).wait_ok();
    let mut expected: Vec<String> = (0..500u64)
        .flat_map(|k| (1..=80u64).map(move |c| format!(r#"{{"k":{k},"count":{c}}}"#)))
        .collect();
    expected.sort();
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected,
        "rows then columns",
    );
}
