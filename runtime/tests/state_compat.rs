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
