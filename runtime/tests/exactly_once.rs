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
    let owners = weir_runtime::state::local_dir::OWNER_LOCKS_DIR;
    let runs: Vec<_> = std::fs::read_dir(&state)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .filter(|name| name != owners)
        .collect();
    assert_eq!(runs.len(), 1, "{runs:?}");
    // The killed runs' owner lock files went with their directories: the last run's is left.
    let locks: Vec<_> = std::fs::read_dir(state.join(owners)).unwrap().collect();
    assert_eq!(locks.len(), 1, "{locks:?}");
}

/// Two `weir run`s of one job in one checkpoint storage (a second terminal, a script started
/// twice): the second is refused before it restores or writes anything, naming the setting and
/// the running process, and the first finishes with exactly the failure-free output; every
/// checkpoint it left passes `weir savepoint inspect`. Before the run lock (helper-99,
/// 2026-12-06) both took checkpoint 3: the healthy first run failed at its `_metadata`, and its
/// state files, written over the second run's, made that committed chk-3 corrupt.
#[test]
fn a_second_run_of_a_running_job_in_its_checkpoint_storage_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::local(dir.path());
    let m = wordcount_manifest(dir.path(), &paths, 2, "exactly-once", "200ms", Some(20_000), None);
    let first = Weir::run(&m, &[], &[]);
    let _ = first.api();
    let first_pid = first.child.id();
    let (ok, stderr) = Weir::run(&m, &[], &[]).wait();
    assert!(!ok, "a second run of the running job started: {stderr}");
    for part in [
        "spec.checkpointing.storage: job `wordcount` is already running",
        &format!("weir run (pid {first_pid}, run "),
        "--checkpoint-dir",
    ] {
        assert!(stderr.contains(part), "{part}: {stderr}");
    }
    assert!(!stderr.contains("restoring"), "the refused run restored: {stderr}");
    first.wait_ok();
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected_wordcount(),
        "the first run's output, beside a refused second run",
    );
    let job_dir = dir.path().join("checkpoints").join("wordcount");
    let checkpoints: Vec<_> = std::fs::read_dir(&job_dir)
        .unwrap()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("chk-"))
        .map(|e| e.path())
        .collect();
    assert!(!checkpoints.is_empty(), "no checkpoint in {}", job_dir.display());
    for chk in checkpoints {
        let out = std::process::Command::new(weir())
            .args(["savepoint", "inspect", chk.to_str().unwrap()])
            .output()
            .unwrap();
        assert!(
            out.status.success(),
            "{}: {}",
            chk.display(),
            String::from_utf8_lossy(&out.stderr)
        );
    }
}
