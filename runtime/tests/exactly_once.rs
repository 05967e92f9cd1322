//! End-to-end exactly-once on the real text: kill -9 at random points, restore from the
//! latest checkpoint, and compare the committed output with a failure-free run, record by
//! record (as multisets).

mod common;
use common::*;

#[test]
fn failure_free_run_matches_an_independent_word_count() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::local(dir.path());
    let m = wordcount_manifest(dir.path(), &paths, 2, "exactly-once", "500ms", None, None);
    Weir::run(&m, &[], &[]).wait_ok();
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected_wordcount(),
        "failure-free run",
    );
}

#[test]
fn kill_9_three_times_then_restore_latest_is_exactly_once() {
    let mut rng = Rng(seed());
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::local(dir.path());
    let m = wordcount_manifest(dir.path(), &paths, 2, "exactly-once", "200ms", Some(6000), None);
    crash_in_both_commit_windows(&m, &[]);
    run_with_kills(&m, 3, &[], &mut rng);
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected_wordcount(),
        "run with 5 crashes",
    );
}

/// The same on the disk state backend (`stateBackend: disk`): keyed state lives in the local
/// LSM store, which every restart recreates from the checkpoint.
#[test]
fn kill_9_three_times_on_the_disk_backend_is_exactly_once() {
    let mut rng = Rng(seed());
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::local(dir.path());
    let m = wordcount_manifest(dir.path(), &paths, 2, "exactly-once", "200ms", Some(6000), None);
    set_state_backend(&m, "disk");
    let state = dir.path().join("state");
    let env = state_dir_env(&state);
    crash_in_both_commit_windows(&m, &env);
    run_with_kills(&m, 3, &env, &mut rng);
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected_wordcount(),
        "disk backend, run with 5 crashes",
    );
    // Each start deleted the directories of the runs that were killed: only the last is left.
    let runs: Vec<_> = std::fs::read_dir(&state)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
}
