//! Delta checkpoints of the disk backend (`state/disk_delta.rs`: a native checkpoint that is
//! the last flushed one's table files plus `<sequence>.delta` files of the writes since) end
//! to end, each compared record by record with the failure-free word count: kill -9 when the
//! newest checkpoint holds delta files and again before the restored run's first checkpoint
//! completes; 32 delta files per store, then the flush the file limit forces, and a kill over
//! many delta files; checkpoints failed (uploads refused) between delta checkpoints, whose
//! files the next completed checkpoint uploads. Kills at random points, rescale, savepoints
//! to heap and back, and a crash before `_metadata` run with delta checkpoints (the default)
//! in `tests/incremental.rs`.

mod common;
use common::incremental::*;
use common::*;
use std::path::Path;
use std::time::{Duration, Instant};
use weir_runtime::state::snapshot::CheckpointMetadata;

/// Whether a `counts` handle of `m` holds delta files (`*.delta`): its store's writes since
/// the last flushed checkpoint.
fn has_delta_files(m: &CheckpointMetadata) -> bool {
    delta_files(m) > 0
}

/// The fewest delta files a `counts` handle of `m` lists (0 without handles).
fn fewest_delta_files_of_a_subtask(m: &CheckpointMetadata) -> usize {
    delta_files_by_subtask(m).into_values().min().unwrap_or(0)
}

/// Runs the word count from the latest checkpoint until the newest completed checkpoint was
/// written at `parallelism` and lists delta files, kills it (-9), and returns that checkpoint
/// ([`run_until_newest_is_then_kill`]).
fn run_until_newest_has_delta_files_then_kill(
    dir: &Path,
    m: &Path,
    parallelism: u32,
    env: &[(String, String)],
) -> CheckpointMetadata {
    run_until_newest_has_delta_files_per_subtask_then_kill(dir, m, parallelism, env, 0)
}

/// As [`run_until_newest_has_delta_files_then_kill`], the newest checkpoint listing more than
/// `more_than` delta files for each subtask.
fn run_until_newest_has_delta_files_per_subtask_then_kill(
    dir: &Path,
    m: &Path,
    parallelism: u32,
    env: &[(String, String)],
    more_than: usize,
) -> CheckpointMetadata {
    let what = format!("more than {more_than} delta files per subtask");
    run_until_newest_is_then_kill(dir, m, parallelism, env, Duration::from_secs(30), &what, |c| {
        has_delta_files(c) && fewest_delta_files_of_a_subtask(c) > more_than
    })
}

/// Every native file every completed checkpoint references is in the job's directory.
fn assert_every_referenced_file_exists(dir: &Path) {
    for c in completed(dir) {
        let files = c
            .operators
            .iter()
            .flat_map(|o| &o.handles)
            .flat_map(|h| h.native.iter().flat_map(|n| &n.files));
        assert_native_files_exist(dir, &c, files);
    }
}

/// Kill -9 right after a checkpoint with delta files completed; then the restored run (each
/// store restored by the fast path: base files opened, delta files applied and removed) is
/// killed again as soon as its stores are restored, before its first checkpoint completes;
/// then once more after a checkpoint with delta files of the restored lineage; the last run
/// finishes the word count exactly once. The first checkpoint completed after a restore of
/// delta files references table files of the restored checkpoint (a claimed restore).
#[test]
fn kill_9_after_a_delta_checkpoint_and_again_before_the_restores_first_checkpoint_is_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let (m, env) = incremental_job(dir.path(), 2, "disk-native");
    let restored = run_until_newest_has_delta_files_then_kill(dir.path(), &m, 2, &env);
    // The second failure: after the fast restore of the delta checkpoint, before any
    // checkpoint of the restored run completed.
    let mut killed_early = false;
    for attempt in 0..4 {
        let before = completed(dir.path()).pop().unwrap().checkpoint_id;
        let w = Weir::run(&m, &["--restore", "latest"], &env);
        let deadline = Instant::now() + Duration::from_secs(30);
        while Instant::now() < deadline
            && std::fs::read_to_string(&w.stderr)
                .unwrap_or_default()
                .matches(FAST_RESTORE_LINE)
                .count()
                < 2
        {
            std::thread::sleep(Duration::from_millis(5));
        }
        w.kill9();
        let after = completed(dir.path()).pop().unwrap();
        if after.checkpoint_id == before && has_delta_files(&after) {
            killed_early = true;
            break;
        }
        eprintln!("attempt {attempt}: a checkpoint completed before the kill; again from a delta checkpoint");
        run_until_newest_has_delta_files_then_kill(dir.path(), &m, 2, &env);
    }
    assert!(
        killed_early,
        "no kill landed before the restored run's first checkpoint"
    );
    // The third: once the restored lineage has a flushed base and delta files over it.
    let newest = run_until_newest_has_delta_files_then_kill(dir.path(), &m, 2, &env);
    assert!(newest.checkpoint_id > restored.checkpoint_id);
    assert_every_referenced_file_exists(dir.path());
    restore_both_stores_and_finish_exactly_once(
        dir.path(),
        &m,
        &env,
        "kill -9 after a delta checkpoint, again before the restore's first checkpoint",
    );
}

/// The delta files each `counts` handle of `m` lists, by subtask.
fn delta_files_by_subtask(m: &CheckpointMetadata) -> std::collections::BTreeMap<u32, usize> {
    m.operators
        .iter()
        .filter(|o| o.uid == "counts")
        .flat_map(|o| &o.handles)
        .map(|h| {
            let deltas = h.native.iter().flat_map(|n| &n.files);
            (h.subtask, deltas.filter(|f| f.name.ends_with(".delta")).count())
        })
        .collect()
}

/// A store's checkpoint listing the most delta files a base collects (`MAX_DELTA_FILES`, 32)
/// is followed by a flushed one (a new base, no delta file) and no checkpoint lists more; a
/// kill -9 right after a checkpoint with over 24 delta files per store restores them all (each
/// applied as one write batch, in sequence order) and the word count is exactly once.
#[test]
fn thirty_two_delta_files_then_a_flush_and_a_kill_after_many_delta_files_is_exactly_once() {
    use weir_runtime::state::disk_delta::MAX_DELTA_FILES;
    let dir = tempfile::tempdir().unwrap();
    let (m, env) = incremental_job(dir.path(), 2, "disk-native");
    let yaml = std::fs::read_to_string(&m).unwrap();
    let slower = yaml.replace("maxRecordsPerSecond: 5000", "maxRecordsPerSecond: 1000");
    assert_ne!(yaml, slower, "the manifest's source rate changed; update this test");
    std::fs::write(&m, slower).unwrap();
    // (checkpoint, subtask) of a store's checkpoint with the most delta files, whose next
    // checkpoint completed too.
    let full_then_next = |seen: &std::collections::BTreeMap<u64, CheckpointMetadata>| {
        seen.iter().find_map(|(id, c)| {
            let subtask = delta_files_by_subtask(c)
                .into_iter()
                .find(|(_, n)| *n == MAX_DELTA_FILES)?
                .0;
            seen.contains_key(&(id + 1)).then_some((*id, subtask))
        })
    };
    let w = Weir::run(&m, &[], &env);
    let _ = w.api();
    let seen = watch_completed(&dir.path().join("checkpoints"), Duration::from_secs(120), |seen| {
        full_then_next(seen).is_some()
    });
    w.kill9();
    let counts: Vec<(u64, Vec<usize>)> = seen
        .iter()
        .map(|(id, c)| (*id, delta_files_by_subtask(c).into_values().collect()))
        .collect();
    eprintln!("(checkpoint, delta files per store): {counts:?}");
    assert!(
        counts.iter().flat_map(|(_, n)| n).all(|n| *n <= MAX_DELTA_FILES),
        "never more than {MAX_DELTA_FILES} delta files per store: {counts:?}"
    );
    let (id, subtask) = full_then_next(&seen).unwrap();
    assert_eq!(
        delta_files_by_subtask(&seen[&(id + 1)])[&subtask],
        0,
        "checkpoint {}, after one with {MAX_DELTA_FILES} delta files of subtask {subtask}, flushed it: {counts:?}",
        id + 1
    );
    run_until_newest_has_delta_files_per_subtask_then_kill(dir.path(), &m, 2, &env, 24);
    assert_every_referenced_file_exists(dir.path());
    std::fs::write(&m, yaml).unwrap();
    restore_both_stores_and_finish_exactly_once(
        dir.path(),
        &m,
        &env,
        "a kill after a checkpoint of over 24 delta files per store",
    );
}

/// Checkpoints 2, 3 and 6 fail (their uploads refused, `tolerableFailedCheckpoints` 3): the
/// delta files and the base their stores wrote locally are never confirmed, so the next
/// completed checkpoints upload them instead of referencing them; a kill -9 after a later
/// checkpoint with delta files restores exactly once, and every file a retained checkpoint
/// references exists.
#[test]
fn failed_checkpoints_between_delta_checkpoints_leave_nothing_unuploaded_and_are_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let (m, env) = incremental_job(dir.path(), 2, "disk-native");
    let yaml = std::fs::read_to_string(&m).unwrap();
    let tolerant = yaml.replace(
        "incremental: true }",
        "incremental: true, tolerableFailedCheckpoints: 3 }",
    );
    assert_ne!(
        yaml, tolerant,
        "the manifest's checkpointing line changed; update this test"
    );
    std::fs::write(&m, tolerant).unwrap();
    let mut failing = env.clone();
    failing.push((
        "WEIR_FAILPOINT".to_string(),
        "fail-upload:2,fail-upload:3,fail-upload:6".to_string(),
    ));
    let w = Weir::run(&m, &[], &failing);
    let _ = w.api();
    let deadline = Instant::now() + Duration::from_secs(60);
    while !completed(dir.path())
        .last()
        .is_some_and(|c| c.checkpoint_id > 6 && has_delta_files(c))
    {
        assert!(
            Instant::now() < deadline,
            "no checkpoint with delta files after 6 within 60 s"
        );
        std::thread::sleep(Duration::from_millis(10));
    }
    w.kill9();
    let newest = completed(dir.path()).pop().unwrap();
    eprintln!(
        "killed after checkpoint {} ({} delta files)",
        newest.checkpoint_id,
        delta_files(&newest)
    );
    for c in completed(dir.path()) {
        let files = c
            .operators
            .iter()
            .flat_map(|o| &o.handles)
            .flat_map(|h| h.native.iter().flat_map(|n| &n.files));
        for f in files {
            assert!(
                ![2, 3, 6].contains(&f.checkpoint_id),
                "checkpoint {} references a file of a failed checkpoint: {f:?}",
                c.checkpoint_id
            );
        }
    }
    assert_every_referenced_file_exists(dir.path());
    Weir::run(&m, &["--restore", "latest"], &env).wait_ok();
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected_wordcount(),
        "failed checkpoints 2, 3 and 6 between delta checkpoints, then a kill",
    );
}
