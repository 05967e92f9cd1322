//! Which records are late does not depend on restores or on source subtasks with nothing to
//! read. One file read at parallelism 2 and 3 leaves one and two source subtasks without a
//! split: their watermark (the end of time) reached the windows a moment after the reading
//! subtask's first records, and after a restore the windows judged the records of that moment
//! against the restored watermark, so records late in a failure-free run were counted into
//! windows fired before (a review found 21–29 such records per restore at parallelism 3).
//! Every subtask now announces its watermark first and waits for its inputs' announcements
//! (start alignment, `exec/inputs.rs`). Checked record by record against an independent
//! computation of the windows and the late records, failure-free and through a
//! stop-with-savepoint at parallelism 2 restored at 3, then kill -9 at 3.

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::time::Duration;

const RECORDS: u64 = 60_000;
const KEYS: u64 = 200;
const SIZE_MS: i64 = 10_000;
const BOUND_MS: i64 = 2_000;
const BASE_MS: i64 = 1_700_000_000_000;

/// `(id, ts, key)` of the generated records, in file order: 50 ms apart with up to 800 ms of
/// jitter; from record 1,000 on, one in eight is up to 30 s behind (many of them late).
fn records() -> Vec<(u64, i64, String)> {
    let mut state: u64 = 0x9e37_79b9_7f4a_7c15;
    let mut next = move |n: u64| {
        // SplitMix64.
        state = state.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = state;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % n
    };
    (0..RECORDS)
        .map(|i| {
            let mut ts = BASE_MS + 50 * i as i64 + next(801) as i64;
            if i >= 1_000 && next(8) == 0 {
                ts -= next(30_001) as i64;
            }
            (i, ts, format!("k{}", next(KEYS)))
        })
        .collect()
}

/// Computed here: the watermark before each record is the largest event time so far minus
/// the bound minus 1 ms (one reader, in file order); a record whose window's last millisecond
/// is at or behind it is late. Returns the window results `key|start|end|count` of the records
/// that are not late, and the late records' ids, both sorted.
fn expected() -> (Vec<String>, Vec<String>) {
    let records = records().into_iter().map(|(id, ts, key)| (ts, key, id.to_string()));
    one_reader_tumbling(records, SIZE_MS, BOUND_MS)
}

/// The records as one JSON-lines file in `dir`, and a job reading it at `parallelism` with
/// tumbling 10 s windows per key and late records to a side output.
fn manifest(dir: &Path, parallelism: u32, rate: u64) -> PathBuf {
    let data = dir.join("late.jsonl");
    let text: String = records()
        .iter()
        .map(|(id, ts, key)| format!("{{\"id\":{id},\"ts\":{ts},\"key\":\"{key}\"}}\n"))
        .collect();
    std::fs::write(&data, text).unwrap();
    let yaml = format!(
        r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: late-after-restore }}
spec:
  parallelism: {parallelism}
  checkpointing: {{ interval: 300ms, storage: "{dir}/checkpoints", retained: 2 }}
  savepoints: {{ directory: "{dir}/savepoints" }}
  job:
    steps:
      - uid: records
        source:
          file: {{ path: "{data}", format: jsonl, maxRecordsPerSecond: {rate} }}
          eventTime: {{ field: ts, unit: milliseconds, maxOutOfOrderness: 2s }}
      - keyBy: {{ expression: key, as: key }}
      - {{ name: windows, uid: windows, window: {{ type: tumbling, size: 10s, as: n, lateRecords: sideOutput }} }}
      - {{ uid: windows-out, sink: {{ file: {{ path: "{dir}/windows" }} }} }}
      - {{ inputs: [windows.late], map: {{ expression: "{{'id': id}}" }} }}
      - {{ uid: late-out, sink: {{ file: {{ path: "{dir}/late" }} }} }}
"#,
        dir = dir.display(),
        data = data.display(),
    );
    let f = dir.join("job.yaml");
    std::fs::write(&f, yaml).unwrap();
    f
}

/// Both sinks' committed output as [`expected`] writes it.
fn outputs(dir: &Path) -> (Vec<String>, Vec<String>) {
    let read = |name: &str, fields: &[&str]| {
        let mut out: Vec<String> = local_output(&dir.join(name))
            .iter()
            .map(|l| {
                let v: serde_json::Value = serde_json::from_str(l).unwrap();
                fields
                    .iter()
                    .map(|f| v[*f].to_string().trim_matches('"').to_string())
                    .collect::<Vec<_>>()
                    .join("|")
            })
            .collect();
        out.sort();
        out
    };
    (
        read("windows", &["key", "window_start", "window_end", "n"]),
        read("late", &["id"]),
    )
}

fn assert_outputs(dir: &Path, want: &(Vec<String>, Vec<String>), what: &str) {
    let (windows, late) = outputs(dir);
    assert_same_multiset(&late, &want.1, &format!("{what}: late records"));
    assert_same_multiset(&windows, &want.0, &format!("{what}: window results"));
}

#[test]
fn one_file_at_parallelism_3_judges_lateness_as_one_reader_does() {
    let want = expected();
    assert!(want.1.len() > 1_000, "the data has late records: {}", want.1.len());
    let dir = tempfile::tempdir().unwrap();
    Weir::run(&manifest(dir.path(), 3, 1_000_000), &[], &[]).wait_ok();
    assert_outputs(dir.path(), &want, "failure-free at parallelism 3");
}

#[test]
fn lateness_is_unchanged_by_a_restore_at_another_parallelism_and_by_kill_9() {
    let want = expected();
    let dir = tempfile::tempdir().unwrap();
    // 12,000 records/s: the input takes 5 s.
    let m = manifest(dir.path(), 2, 12_000);
    let first = Weir::run(&m, &[], &[]);
    let api = first.api();
    wait_running(&api);
    std::thread::sleep(Duration::from_millis(1_500));
    let savepoint = stop_with_savepoint(&api, &[]);
    first.wait_ok();
    // At parallelism 3 from the savepoint; killed once mid-input, then on from its latest
    // checkpoint.
    let second = Weir::run(&m, &["--restore", &savepoint, "--parallelism", "3"], &[]);
    wait_running(&second.api());
    std::thread::sleep(Duration::from_millis(1_500));
    second.kill9();
    Weir::run(&m, &["--restore", "latest", "--parallelism", "3"], &[]).wait_ok();
    assert_outputs(
        dir.path(),
        &want,
        "stop-with-savepoint at parallelism 2, restored at 3, kill -9 at 3",
    );
}
