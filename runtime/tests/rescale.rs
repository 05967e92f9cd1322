//! Rescale by savepoint: stop-with-savepoint at parallelism 2 mid-input, restore at 3, stop
//! again, restore at 1 and finish; the committed output equals an uninterrupted run's.

mod common;
mod support;
use common::*;
use std::time::Duration;
use support::moto::{MotoServer, init_test_credentials};
use weir_runtime::storage::{self, S3Options};

#[test]
fn rescale_2_to_3_to_1_through_savepoints_gives_the_same_counts() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::local(dir.path());
    let m = wordcount_manifest(dir.path(), &paths, 2, "exactly-once", "300ms", Some(5000), None);
    rescale_2_3_1(&m, &[], ["heap"; 3]);
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected_wordcount(),
        "2 → 3 → 1 rescale",
    );
}

/// The same rescale with keyed state on the disk backend in every run.
#[test]
fn rescale_2_to_3_to_1_on_the_disk_backend() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::local(dir.path());
    let m = wordcount_manifest(dir.path(), &paths, 2, "exactly-once", "300ms", Some(5000), None);
    rescale_2_3_1(&m, &state_dir_env(&dir.path().join("state")), ["disk"; 3]);
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected_wordcount(),
        "2 → 3 → 1 rescale on disk",
    );
    // The runs kept their keyed state under the state directory.
    assert!(dir.path().join("state").read_dir().unwrap().next().is_some());
}

/// A savepoint is backend-independent: heap at parallelism 2, restored on disk at 3, restored
/// on heap at 1; the output equals an uninterrupted run's.
#[test]
fn savepoints_move_from_heap_to_disk_and_back() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::local(dir.path());
    let m = wordcount_manifest(dir.path(), &paths, 2, "exactly-once", "300ms", Some(5000), None);
    rescale_2_3_1(&m, &state_dir_env(&dir.path().join("state")), ["heap", "disk", "heap"]);
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected_wordcount(),
        "heap → disk → heap",
    );
    // The middle run kept its keyed state on disk (heap runs create nothing there).
    assert!(
        dir.path()
            .join("state")
            .read_dir()
            .is_ok_and(|mut d| d.next().is_some()),
        "the disk run left no directory under the state dir"
    );
}

#[test]
fn rescale_2_to_3_to_1_with_s3_storage_and_sink() {
    init_test_credentials();
    let moto = MotoServer::start_with_bucket("weir-rescale");
    let b = moto.bucket().to_string();
    let env: Vec<(String, String)> = moto.env().into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    let dir = tempfile::tempdir().unwrap();
    let paths = s3_paths(&b);
    let m = wordcount_manifest(dir.path(), &paths, 2, "exactly-once", "300ms", Some(5000), None);
    rescale_2_3_1(&m, &env, ["heap"; 3]);
    let rt = tokio::runtime::Runtime::new().unwrap();
    let opts = S3Options {
        endpoint: Some(moto.endpoint()),
        region: Some("us-east-1".into()),
        path_style: true,
        credentials: None,
    };
    let store = rt.block_on(storage::open(&format!("s3://{b}"), &opts)).unwrap();
    let lines = s3_output(&rt, &store);
    assert_same_multiset(&lines, &expected_wordcount(), "2 → 3 → 1 rescale on S3");
}

/// Runs at parallelism 2, stops with a savepoint mid-input, restores at 3, stops again,
/// restores at 1 and finishes, each run on the state backend of `backends`; checks the
/// parallelism-3 savepoint's key-group split.
fn rescale_2_3_1(m: &std::path::Path, env: &[(String, String)], backends: [&str; 3]) {
    set_state_backend(m, backends[0]);
    let w = Weir::run(m, &[], env);
    let api = w.api();
    std::thread::sleep(Duration::from_millis(1500));
    let sp1 = stop_with_savepoint(&api, env);
    let log = w.wait_ok();
    assert!(log.contains("stopped with savepoint"), "{log}");
    assert!(sp1.contains("savepoint-wordcount-"), "{sp1}");
    // The run names the command that resumes from its savepoint.
    let savepoint_id = sp1
        .rsplit("savepoint-wordcount-")
        .next()
        .and_then(|s| s.split('-').next())
        .unwrap();
    assert!(
        log.contains(&format!("--restore {sp1}` (resumes from savepoint {savepoint_id})")),
        "no resume hint naming {sp1}: {log}"
    );

    set_state_backend(m, backends[1]);
    let w = Weir::run(m, &["--parallelism", "3", "--restore", &sp1], env);
    let api = w.api();
    std::thread::sleep(Duration::from_millis(1500));
    let sp2 = stop_with_savepoint(&api, env);
    w.wait_ok();

    // The savepoint records parallelism 3 and key groups split three ways.
    let inspect = std::process::Command::new(weir())
        .args(["savepoint", "inspect", "--json", &sp2])
        .envs(env.iter().map(|(k, v)| (k, v)))
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

    set_state_backend(m, backends[2]);
    Weir::run(m, &["--parallelism", "1", "--restore", &sp2], env).wait_ok();
}

#[test]
fn restore_refuses_changed_max_parallelism_and_dropped_state() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::local(dir.path());
    let m = wordcount_manifest(dir.path(), &paths, 2, "exactly-once", "300ms", Some(5000), None);
    let w = Weir::run(&m, &[], &[]);
    let api = w.api();
    std::thread::sleep(Duration::from_millis(800));
    let sp = stop_with_savepoint(&api, &[]);
    w.wait_ok();

    let (ok, err) = Weir::run(&m, &["--restore", &sp, "--set", "spec.maxParallelism=256"], &[]).wait();
    assert!(
        !ok && err.contains("--set spec.maxParallelism=256 (spec.maxParallelism) differs from the maxParallelism 128")
            && err.contains("Give --set spec.maxParallelism=128, or drop --set spec.maxParallelism=256"),
        "{err}"
    );

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
