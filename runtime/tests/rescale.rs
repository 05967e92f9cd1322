//! Rescale by savepoint: stop-with-savepoint at parallelism 2 mid-input, restore at 3, stop
//! again, restore at 1 and finish; the committed output equals an uninterrupted run's.

mod common;
use common::*;
use std::time::Duration;

fn stop_with_savepoint(api: &str) -> String {
    let out = std::process::Command::new(weir())
        .args(["savepoint", "trigger", "--url", api, "--stop", "--timeout", "60s"])
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "savepoint trigger failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

#[test]
fn rescale_2_to_3_to_1_through_savepoints_gives_the_same_counts() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::local(dir.path());
    let m = wordcount_manifest(dir.path(), &paths, 2, "exactly-once", "300ms", Some(5000), None);

    let w = Weir::run(&m, &[], &[]);
    let api = w.api();
    std::thread::sleep(Duration::from_millis(1500));
    let sp1 = stop_with_savepoint(&api);
    let log = w.wait_ok();
    assert!(log.contains("stopped with savepoint"), "{log}");
    assert!(sp1.contains("savepoint-wordcount-"), "{sp1}");

    let w = Weir::run(&m, &["--parallelism", "3", "--restore", &sp1], &[]);
    let api = w.api();
    std::thread::sleep(Duration::from_millis(1500));
    let sp2 = stop_with_savepoint(&api);
    w.wait_ok();

    // The savepoint records parallelism 3 and key groups split three ways.
    let inspect = std::process::Command::new(weir())
        .args(["savepoint", "inspect", "--json", &sp2])
        .output()
        .unwrap();
    assert!(inspect.status.success(), "{}", String::from_utf8_lossy(&inspect.stderr));
    let info: serde_json::Value = serde_json::from_slice(&inspect.stdout).unwrap();
    assert_eq!(info["parallelism"], 3);
    let counts = info["operators"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["uid"] == "counts")
        .unwrap();
    assert_eq!(
        counts["keyGroupRanges"],
        serde_json::json!([[0, 42], [43, 85], [86, 127]])
    );

    Weir::run(&m, &["--parallelism", "1", "--restore", &sp2], &[]).wait_ok();
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected_wordcount(),
        "2 → 3 → 1 rescale",
    );
}

#[test]
fn restore_refuses_changed_max_parallelism_and_dropped_state() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::local(dir.path());
    let m = wordcount_manifest(dir.path(), &paths, 2, "exactly-once", "300ms", Some(5000), None);
    let w = Weir::run(&m, &[], &[]);
    let api = w.api();
    std::thread::sleep(Duration::from_millis(800));
    let sp = stop_with_savepoint(&api);
    w.wait_ok();

    let (ok, err) = Weir::run(&m, &["--restore", &sp, "--set", "spec.maxParallelism=256"], &[]).wait();
    assert!(!ok && err.contains("maxParallelism was 128, the job has 256"), "{err}");

    let (ok, err) = Weir::run(&m, &["--restore", &sp, "--set", "spec.job.steps.4.uid=renamed"], &[]).wait();
    assert!(
        !ok && err.contains("`counts`") && err.contains("allowNonRestoredState"),
        "{err}"
    );

    // With allowNonRestoredState the counts' state is dropped and the job runs.
    let args = [
        "--restore",
        &sp,
        "--set",
        "spec.job.steps.4.uid=renamed",
        "--set",
        "spec.allowNonRestoredState=true",
    ];
    Weir::run(&m, &args, &[]).wait_ok();
}
