//! Restoring at another parallelism without `spec.maxParallelism`, as Flink does it: the
//! restore point's max parallelism is adopted (its key groups stay the same), so a rescale
//! across the defaults derived from the two parallelisms (128 at parallelism 3, 256 at 86)
//! just works and the output equals a failure-free run's record by record; a job that sets
//! another `spec.maxParallelism` is refused naming the field and both values. The same with
//! `weir coordinator` and a worker (whose manifest then sets the adopted value).

mod common;
use common::cluster::*;
use common::*;
use std::path::{Path, PathBuf};
use std::time::Duration;

const RECORDS: u64 = 6000;

/// Keyed count of the generator's keys into a file sink (exactly-once), without
/// `spec.maxParallelism`, at parallelism 3, everything under `dir`.
fn keyed_count_manifest(dir: &Path) -> PathBuf {
    let yaml = format!(
        r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: keyed }}
spec:
  parallelism: 3
  checkpointing: {{ interval: 200ms, storage: "{d}/checkpoints" }}
  savepoints: {{ directory: "{d}/savepoints" }}
  job:
    steps:
      - uid: gen
        source: {{ generator: {{ seed: 11, count: {RECORDS}, keys: 300, splits: 128, maxRecordsPerSecond: 300 }} }}
      - keyBy: {{ expression: key, as: key }}
      - uid: counts
        count: {{}}
      - uid: out
        sink: {{ file: {{ path: "{d}/output" }} }}
"#,
        d = dir.display()
    );
    let f = dir.join("job.yaml");
    std::fs::write(&f, yaml).unwrap();
    f
}

/// No rate limit: a run that only has to finish.
const FAST: [&str; 2] = ["--set", "spec.job.steps.0.source.generator.maxRecordsPerSecond=1000000"];

/// The committed output of a failure-free run of the job at parallelism 3.
fn failure_free_output() -> Vec<String> {
    let clean = tempfile::tempdir().unwrap();
    Weir::run(&keyed_count_manifest(clean.path()), &FAST, &[]).wait_ok();
    let expected = local_output(&clean.path().join("output"));
    assert_eq!(expected.len() as u64, RECORDS, "one running count per record");
    expected
}

/// Runs the job in `dir` at parallelism 3 (default maxParallelism 128) until a checkpoint
/// completed, then kill -9; returns the manifest.
fn crash_after_a_checkpoint(dir: &Path) -> PathBuf {
    let m = keyed_count_manifest(dir);
    let w = Weir::run(&m, &[], &[]);
    let api = w.api();
    poll_json(
        &format!("{api}/v1/job"),
        "a completed checkpoint",
        Duration::from_secs(60),
        |job| (!job["lastCompletedCheckpoint"].is_null()).then_some(()),
    );
    w.kill9();
    m
}

/// Asserts the newest checkpoint in `dir` was taken at parallelism 86 with 128 key groups.
fn assert_newest_checkpoint_keeps_128_key_groups(dir: &Path) {
    let newest = std::fs::read_dir(dir.join("checkpoints/keyed"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.join("_metadata").exists())
        .max_by_key(|p| {
            let name = p.file_name().unwrap().to_string_lossy().into_owned();
            name.trim_start_matches("chk-").parse::<u64>().unwrap_or(0)
        })
        .expect("a checkpoint");
    let inspect = std::process::Command::new(weir())
        .args(["savepoint", "inspect", "--json"])
        .arg(&newest)
        .output()
        .unwrap();
    assert!(inspect.status.success(), "{}", String::from_utf8_lossy(&inspect.stderr));
    let info: serde_json::Value = serde_json::from_slice(&inspect.stdout).unwrap();
    assert_eq!(info["parallelism"], 86, "{info}");
    assert_eq!(info["maxParallelism"], 128, "{info}");
}

#[test]
fn a_rescale_across_the_default_max_parallelisms_adopts_the_restore_points() {
    let expected = failure_free_output();
    let dir = tempfile::tempdir().unwrap();
    let m = crash_after_a_checkpoint(dir.path());

    // Setting another maxParallelism than the restore point's is refused, naming the field,
    // both values and what to do.
    let (ok, err) = Weir::run(
        &m,
        &[
            "--parallelism",
            "86",
            "--restore",
            "latest",
            "--set",
            "spec.maxParallelism=256",
        ],
        &[],
    )
    .wait();
    assert!(!ok, "{err}");
    assert!(
        err.contains(
            "--set spec.maxParallelism=256 (spec.maxParallelism) differs from the maxParallelism 128 the restore point"
        ) && err.contains("Give --set spec.maxParallelism=128, or drop --set spec.maxParallelism=256"),
        "{err}"
    );

    // Restored at parallelism 86 (whose default would be 256) without maxParallelism: the
    // restore point's 128 is adopted and said so; the job finishes exactly once.
    let mut args = vec!["--parallelism", "86", "--restore", "latest"];
    args.extend(FAST);
    let log = Weir::run(&m, &args, &[]).wait_ok();
    assert!(
        log.contains("maxParallelism 128 adopted from the restore point")
            && log.contains("the default for parallelism 86 would be 256"),
        "{log}"
    );
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected,
        "crash at parallelism 3, restore at 86 without maxParallelism",
    );
    assert_newest_checkpoint_keeps_128_key_groups(dir.path());
}

#[test]
fn a_coordinator_adopts_the_restore_points_max_parallelism_and_its_workers_too() {
    let expected = failure_free_output();
    let dir = tempfile::tempdir().unwrap();
    let m = crash_after_a_checkpoint(dir.path());

    // A parallelism above the restore point's maxParallelism is refused naming the flag that
    // set it and what to give it, as `weir run` does.
    let mut c = Cluster::start_with_workers(dir.path(), &m, &["--parallelism", "200", "--restore", "latest"], &[], 0);
    c.add_worker_with_slots("w0", 200, &[]);
    let want = "--parallelism 200 (spec.parallelism) is above the restore point's maxParallelism 128";
    let deadline = std::time::Instant::now() + Duration::from_secs(120);
    while !c.coordinator.text().contains(want) {
        assert!(
            std::time::Instant::now() < deadline,
            "want `{want}` in {}",
            c.coordinator.text()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(
        c.coordinator.text().contains("(--parallelism 128)"),
        "{}",
        c.coordinator.text()
    );
    drop(c);

    let mut args = vec!["--parallelism", "86", "--restore", "latest"];
    args.extend(FAST);
    let mut c = Cluster::start_with_workers(dir.path(), &m, &args, &[], 0);
    c.add_worker_with_slots("w0", 86, &[]);
    c.coordinator.wait_ok(Duration::from_secs(120));
    let log = c.coordinator.text();
    assert!(
        log.contains("maxParallelism 128 adopted from the restore point"),
        "{log}"
    );
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected,
        "crash at parallelism 3, coordinator restore at 86 without maxParallelism",
    );
    assert_newest_checkpoint_keeps_128_key_groups(dir.path());
}
