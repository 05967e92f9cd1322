//! The one restore rule on `weir run`: the restore point is the newest snapshot whose sink
//! output may have been committed, checkpoints and savepoints alike; it is never silently
//! replaced by an older one; pending commits go where they were written; a stop request is not
//! blocked by a hung savepoint. Each test is a failure sequence that duplicated committed output
//! or blocked before (issue 8), compared record by record with the independent word count.

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};

/// `weir savepoint trigger --url API [--stop]` as a child process; returns it unwaited.
fn trigger(api: &str, stop: bool) -> std::process::Child {
    let mut args = vec!["savepoint", "trigger", "--url", api, "--timeout", "120s"];
    if stop {
        args.push("--stop");
    }
    Command::new(weir())
        .args(&args)
        .env(SECRET_ENV, secret_file())
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap()
}

/// The id of the savepoint directory at `path` (`.../savepoint-<job>-<id>-<suffix>`).
fn savepoint_id(path: &str) -> u64 {
    let name = path.trim_end_matches('/').rsplit('/').next().unwrap();
    weir_runtime::checkpoint::snapshot_dir_id(name).unwrap_or_else(|| panic!("not a savepoint directory: {path}"))
}

fn finished(child: std::process::Child) -> (bool, String, String) {
    let out = child.wait_with_output().unwrap();
    (
        out.status.success(),
        String::from_utf8_lossy(&out.stdout).trim().to_string(),
        String::from_utf8_lossy(&out.stderr).into_owned(),
    )
}

fn snapshot_ids(dir: &std::path::Path, prefix: &str) -> Vec<u64> {
    let mut ids: Vec<u64> = std::fs::read_dir(dir.join("checkpoints/wordcount"))
        .unwrap()
        .filter_map(|e| {
            e.unwrap()
                .file_name()
                .to_string_lossy()
                .strip_prefix(prefix)?
                .parse()
                .ok()
        })
        .collect();
    ids.sort();
    ids
}

/// Waits until the job's control API reports a completed checkpoint with an id above `after`;
/// returns its id.
fn wait_checkpoint_after(api: &str, after: u64) -> u64 {
    poll_json(
        &format!("{api}/v1/job"),
        &format!("a checkpoint after {after}"),
        Duration::from_secs(90),
        |job| job["lastCompletedCheckpoint"]["id"].as_u64().filter(|id| *id > after),
    )
}

fn wait_first_checkpoint(api: &str) -> u64 {
    wait_checkpoint_after(api, 0)
}

#[test]
fn a_crash_after_a_non_stopping_savepoint_restores_the_savepoint_not_an_older_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::local(dir.path());
    // Checkpoint 1 at the start, the next one only after 30 s: the savepoint is the newest
    // snapshot when the process dies, and its completion committed output.
    let m = wordcount_manifest(dir.path(), &paths, 2, "exactly-once", "30s", Some(3000), None);
    let w = Weir::run(&m, &[], &[]);
    let api = w.api();
    wait_first_checkpoint(&api);
    std::thread::sleep(Duration::from_millis(1500));
    let (ok, savepoint, err) = finished(trigger(&api, false));
    assert!(ok, "savepoint failed: {err}");
    // Let the sinks commit the savepoint's output, then crash.
    std::thread::sleep(Duration::from_millis(300));
    w.kill9();
    let committed_before = local_output(&dir.path().join("output")).len();
    assert!(committed_before > 0, "the savepoint committed output");

    let log = Weir::run(&m, &["--restore", "latest"], &[]).wait_ok();
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected_wordcount(),
        "crash after a non-stopping savepoint",
    );
    // Ids are unique across checkpoints and savepoints: no checkpoint took the savepoint's id.
    let savepoint_id = savepoint_id(&savepoint);
    assert!(
        !snapshot_ids(dir.path(), "chk-").contains(&savepoint_id),
        "a checkpoint reused savepoint id {savepoint_id}: {:?}; {log}",
        snapshot_ids(dir.path(), "chk-")
    );
}

#[test]
fn an_unreadable_newest_checkpoint_is_refused_naming_it_and_the_options() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::local(dir.path());
    let m = wordcount_manifest(dir.path(), &paths, 2, "exactly-once", "300ms", Some(5000), None);
    let w = Weir::run(&m, &[], &[]);
    let api = w.api();
    let first = wait_first_checkpoint(&api);
    wait_checkpoint_after(&api, first);
    w.kill9();
    let completed: Vec<u64> = snapshot_ids(dir.path(), "chk-")
        .into_iter()
        .filter(|id| {
            dir.path()
                .join(format!("checkpoints/wordcount/chk-{id}/_metadata"))
                .exists()
        })
        .collect();
    assert!(completed.len() >= 2, "two completed checkpoints: {completed:?}");
    let newest = *completed.last().unwrap();
    let victim = dir
        .path()
        .join(format!("checkpoints/wordcount/chk-{newest}/counts-1.state"));
    let mut bytes = std::fs::read(&victim).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    std::fs::write(&victim, bytes).unwrap();
    let output_before = local_output(&dir.path().join("output"));

    let (ok, log) = Weir::run(&m, &["--restore", "latest"], &[]).wait();
    assert!(!ok, "restoring past an unreadable newest checkpoint must fail: {log}");
    for needle in [
        format!("checkpoint chk-{newest}"),
        "counts-1.state".to_string(),
        "checksum mismatch".to_string(),
        "--restore none".to_string(),
        "--restore <url>".to_string(),
    ] {
        assert!(log.contains(&needle), "the refusal names `{needle}`: {log}");
    }
    assert!(!log.contains("panicked"), "{log}");
    assert_eq!(
        local_output(&dir.path().join("output")),
        output_before,
        "a refused restore commits nothing"
    );
    // The way out the refusal names, an older checkpoint restored explicitly, says what it costs.
    let older = completed[completed.len() - 2];
    let older_dir = dir.path().join(format!("checkpoints/wordcount/chk-{older}"));
    let log = Weir::run(&m, &["--restore", older_dir.to_str().unwrap()], &[]).wait_ok();
    assert!(
        log.contains(&format!("completed after it (chk-{newest})")) && log.contains("duplicates"),
        "an explicit restore of chk-{older} warns that chk-{newest}'s output is written again: {log}"
    );
}

/// A savepoint of a `count` restored into a job whose step under the same uid is now a `sum`
/// is refused naming the step's field and the two ways on (helper-99, 2026-12-06: the refusal
/// named neither).
#[test]
fn a_uid_reused_for_another_kind_is_refused_naming_the_step_and_the_way_out() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::local(dir.path());
    let m = wordcount_manifest(dir.path(), &paths, 2, "exactly-once", "300ms", None, None);
    Weir::run(&m, &[], &[]).wait_ok();
    let text = std::fs::read_to_string(&m).unwrap();
    let as_sum = text.replace("count: {}", "sum: { expression: \"1\" }");
    assert_ne!(as_sum, text);
    std::fs::write(&m, as_sum).unwrap();
    let (ok, log) = Weir::run(&m, &["--restore", "latest"], &[]).wait();
    assert!(!ok, "a count's state restored into a sum: {log}");
    for needle in [
        "`counts` (spec.job.steps[4].uid) was count, is sum",
        "give the step a new uid",
        "spec.allowNonRestoredState: true",
    ] {
        assert!(log.contains(needle), "the refusal says `{needle}`: {log}");
    }
}

/// The word count at p=2 (5,000 lines/s, checkpoints every 300 ms) stopped with a savepoint
/// after its first checkpoint: its directory, manifest and the savepoint's URL.
fn word_count_stopped_with_a_savepoint() -> (tempfile::TempDir, PathBuf, String) {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::local(dir.path());
    let m = wordcount_manifest(dir.path(), &paths, 2, "exactly-once", "300ms", Some(5000), None);
    let w = Weir::run(&m, &[], &[]);
    let api = w.api();
    wait_first_checkpoint(&api);
    let savepoint = stop_with_savepoint(&api, &[]);
    w.wait_ok();
    (dir, m, savepoint)
}

/// `--restore latest` of the job of manifest `m` in `dir` is refused (`what`), saying each of
/// `needles`, and commits nothing.
fn assert_latest_refused(dir: &Path, m: &Path, needles: &[String], what: &str) {
    let output_before = local_output(&dir.join("output"));
    let (ok, log) = Weir::run(m, &["--restore", "latest"], &[]).wait();
    assert!(!ok, "latest must not go back past {what}: {log}");
    for needle in needles {
        assert!(log.contains(needle), "the refusal says `{needle}`: {log}");
    }
    assert_eq!(
        local_output(&dir.join("output")),
        output_before,
        "a refused restore commits nothing"
    );
}

/// A savepoint moved after it was taken: `--restore latest` follows its pointer to where it
/// was written, finds nothing there and refuses, saying to restore it from its new place or,
/// if deleted, to restore an older one explicitly (its pointer named); `--restore <new
/// place>` then finishes the job exactly (helper-99, 2026-12-06: the refusal said only to put
/// the files back).
#[test]
fn a_moved_savepoint_is_refused_by_latest_saying_how_to_restore_it() {
    let (dir, m, savepoint) = word_count_stopped_with_a_savepoint();
    let moved = dir.path().join("moved-savepoint");
    std::fs::rename(savepoint.strip_prefix("file://").unwrap_or(&savepoint), &moved).unwrap();
    let needles = [
        "no longer holds it",
        "`--restore <its directory>`",
        "checkpoints/wordcount/sp-",
        "--restore none",
    ];
    assert_latest_refused(dir.path(), &m, &needles.map(String::from), "a moved savepoint");
    Weir::run(&m, &["--restore", moved.to_str().unwrap()], &[]).wait_ok();
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected_wordcount(),
        "stopped with a savepoint, moved, restored from its new place",
    );
}

/// A stop-with-savepoint whose pointer `sp-<n>/_pointer` is then deleted by hand: the store no
/// longer lists savepoint n, and `--restore latest` took the checkpoint before it without a
/// word, counting again every word committed after it, and wrote its own checkpoint n beside
/// the savepoint (helper-116's trial: 5,215 words twice). Now the job's record of its newest
/// completed snapshot refuses the restore naming the savepoint, where it is, and the options; a
/// new run takes ids past n; and `--restore <the savepoint>` finishes the job exactly.
#[test]
fn a_deleted_savepoint_pointer_is_refused_by_latest_and_its_id_is_not_used_again() {
    let (dir, m, savepoint) = word_count_stopped_with_a_savepoint();
    let id = savepoint_id(&savepoint);
    std::fs::remove_file(dir.path().join(format!("checkpoints/wordcount/sp-{id}/_pointer"))).unwrap();
    let needles = [
        format!("savepoint {id} of job wordcount completed ({savepoint}"),
        format!("its pointer `wordcount/sp-{id}/_pointer` is gone"),
        format!("`--restore {savepoint}`"),
        "would write again the output committed after it".to_string(),
        "--restore none".to_string(),
    ];
    assert_latest_refused(dir.path(), &m, &needles, "a savepoint whose pointer is gone");

    // A run started without state (its output elsewhere) takes ids past the savepoint's.
    let elsewhere = format!(
        "spec.job.steps.5.sink.file.path={}",
        dir.path().join("other-output").display()
    );
    let fresh = Weir::run(&m, &["--restore", "none", "--set", &elsewhere], &[]);
    let first = wait_first_checkpoint(&fresh.api());
    assert!(
        first > id,
        "a new run's first checkpoint {first} is past savepoint {id}"
    );
    fresh.kill9();

    Weir::run(&m, &["--restore", &savepoint], &[]).wait_ok();
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected_wordcount(),
        "stopped with a savepoint, its pointer deleted, restored from the savepoint",
    );
}

/// A bounded job that finished, whose final checkpoint's `_metadata` is then deleted by hand:
/// `--restore latest` is refused naming the checkpoint, where it took the retained checkpoint
/// before it and counted its words again.
#[test]
fn a_deleted_final_checkpoint_is_refused_by_latest() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::local(dir.path());
    let m = wordcount_manifest(dir.path(), &paths, 2, "exactly-once", "300ms", Some(20_000), None);
    Weir::run(&m, &[], &[]).wait_ok();
    let ids = snapshot_ids(dir.path(), "chk-");
    assert!(ids.len() >= 2, "two checkpoints retained: {ids:?}");
    let newest = *ids.last().unwrap();
    std::fs::remove_file(dir.path().join(format!("checkpoints/wordcount/chk-{newest}/_metadata"))).unwrap();
    let needles = [
        format!("checkpoint chk-{newest} of job wordcount completed"),
        format!("`wordcount/chk-{newest}/_metadata` is gone"),
        "put them back".to_string(),
        format!("checkpoints/wordcount/chk-{}", ids[ids.len() - 2]),
    ];
    assert_latest_refused(dir.path(), &m, &needles, "a deleted checkpoint");
}

#[test]
fn pending_commits_go_to_the_output_path_they_were_written_to_after_the_path_changes() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::local(dir.path());
    let m = wordcount_manifest(dir.path(), &paths, 2, "exactly-once", "30s", Some(3000), None);
    let w = Weir::run(&m, &[], &[]);
    let api = w.api();
    wait_first_checkpoint(&api);
    std::thread::sleep(Duration::from_millis(1000));
    let savepoint = stop_with_savepoint(&api, &[]);
    w.wait_ok();
    let moved = dir.path().join("output-moved");
    let set = format!("spec.job.steps.5.sink.file.path={}", moved.display());
    Weir::run(&m, &["--restore", &savepoint, "--set", &set], &[]).wait_ok();
    let old = local_output(&dir.path().join("output"));
    let new = local_output(&moved);
    assert!(!old.is_empty() && !new.is_empty(), "output in both directories");
    let mut all = [old, new].concat();
    all.sort();
    assert_same_multiset(&all, &expected_wordcount(), "output path changed across a savepoint");
}

/// The word count at p=2 crashed right after checkpoint 1's commit point (its `_metadata`
/// written, the file sink's parts not yet committed): its directory, paths and manifest.
fn word_count_crashed_past_its_first_commit_point() -> (tempfile::TempDir, Paths, std::path::PathBuf) {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::local(dir.path());
    let m = wordcount_manifest(dir.path(), &paths, 2, "exactly-once", "0s", None, None);
    let crash = [("WEIR_FAILPOINT".to_string(), "after-metadata:1".to_string())];
    let (ok, stderr) = Weir::run(&m, &[], &crash).wait();
    assert!(!ok && stderr.contains("failpoint after-metadata:1 reached"), "{stderr}");
    (dir, paths, m)
}

/// A crash right after a checkpoint's commit point (its `_metadata` written, the sink's parts
/// not yet committed), then a restore with the sink's uid changed and
/// `allowNonRestoredState: true` (what the refusal suggests after a step's default uid shifts):
/// the dropped sink's pending parts are committed still, so the output is the word count
/// exactly, not missing the checkpoint's records (it lost all 427,149 before).
#[test]
fn pending_commits_of_a_sink_dropped_by_allow_non_restored_state_are_committed() {
    let (dir, _, m) = word_count_crashed_past_its_first_commit_point();
    let renamed = [
        "--restore",
        "latest",
        "--set",
        "spec.job.steps.5.uid=output-v2",
        "--set",
        "spec.allowNonRestoredState=true",
    ];
    Weir::run(&m, &renamed, &[]).wait_ok();
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected_wordcount(),
        "sink uid changed after a crash past the commit point",
    );
}

/// As above, but the file sink is replaced by a discard sink that keeps its uid `output`: the
/// uid is still in the job, yet no file sink has it, so the old sink's pending parts are
/// committed still (they were skipped, because only the uid was compared).
#[test]
fn pending_commits_of_a_file_sink_whose_uid_now_names_another_step_are_committed() {
    let (dir, paths, m) = word_count_crashed_past_its_first_commit_point();
    let text = std::fs::read_to_string(&m).unwrap();
    let file_sink = format!("sink: {{ file: {{ path: \"{}\" }} }}", paths.output);
    assert!(text.contains(&file_sink), "{text}");
    let discard = dir.path().join("discard.yaml");
    std::fs::write(&discard, text.replace(&file_sink, "sink: { discard: {} }")).unwrap();
    Weir::run(
        &discard,
        &["--restore", "latest", "--set", "spec.allowNonRestoredState=true"],
        &[],
    )
    .wait_ok();
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected_wordcount(),
        "file sink replaced by a discard sink with the same uid after a crash past the commit point",
    );
}

#[test]
fn stop_with_savepoint_supersedes_a_hung_savepoint() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::local(dir.path());
    // Checkpoint 1 at the start; the savepoint gets id 2 and its uploads hang.
    let m = wordcount_manifest(dir.path(), &paths, 2, "exactly-once", "1h", Some(3000), None);
    let env = [("WEIR_FAILPOINT".to_string(), "hang-upload:2".to_string())];
    let w = Weir::run(&m, &[], &env);
    let api = w.api();
    wait_first_checkpoint(&api);
    let hung = trigger(&api, false);
    // The stop request must come after the hung savepoint (id 2) is in flight.
    poll_json(
        &format!("{api}/v1/checkpoints"),
        "savepoint 2 in flight",
        Duration::from_secs(60),
        |history| (history["inProgress"].as_u64() == Some(2)).then_some(()),
    );
    let started = Instant::now();
    let (ok, savepoint, err) = finished(trigger(&api, true));
    assert!(ok, "stop-with-savepoint failed: {err}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "stop-with-savepoint waited {:?} behind the hung savepoint",
        started.elapsed()
    );
    w.wait_ok();
    let (hung_ok, _, hung_err) = finished(hung);
    assert!(
        !hung_ok && hung_err.contains("superseded by stop-with-savepoint"),
        "{hung_err}"
    );
    Weir::run(&m, &["--restore", &savepoint], &[]).wait_ok();
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected_wordcount(),
        "stop after a hung savepoint",
    );
}

#[test]
fn unwritable_checkpoint_storage_fails_the_job_with_the_storage_error() {
    let dir = tempfile::tempdir().unwrap();
    // Checkpoint storage under /proc: listing works (nothing there), every write fails, for
    // root too (as storage without write permission does for a pod).
    let paths = Paths {
        checkpoints: "/proc/weir-unwritable".into(),
        ..Paths::local(dir.path())
    };
    let m = wordcount_manifest(dir.path(), &paths, 2, "exactly-once", "200ms", None, None);
    let started = Instant::now();
    let (ok, log) = Weir::run(&m, &[], &[]).wait();
    assert!(!ok, "the job must fail: {log}");
    assert!(
        started.elapsed() < Duration::from_secs(60),
        "failed only after {:?}",
        started.elapsed()
    );
    // `weir run` writes a probe before it starts (cli_preflight.rs), so the storage is refused
    // naming the setting before any input is read, not at the first checkpoint.
    assert!(
        log.contains("spec.checkpointing.storage: cannot write to /proc/weir-unwritable")
            && !log.contains("run summary"),
        "the failure names the storage error and the setting, before the job starts: {log}"
    );
    assert!(
        local_output(&dir.path().join("output")).is_empty(),
        "nothing is committed without a checkpoint"
    );
}

/// A checkpoint whose upload fails mid-run (the storage refuses a write after the job started,
/// which `weir run`'s start-up probe cannot see): with `tolerableFailedCheckpoints` 0 (the
/// default) the job fails naming the setting and the storage error, and commits nothing past
/// the last completed checkpoint; with 1, the job goes on and its output is exactly the
/// failure-free word count.
#[test]
fn a_checkpoint_failing_mid_run_fails_the_job_only_past_tolerable_failed_checkpoints() {
    let failpoint = [("WEIR_FAILPOINT".to_string(), "fail-upload:3".to_string())];
    let manifest = |dir: &std::path::Path| {
        wordcount_manifest(dir, &Paths::local(dir), 2, "exactly-once", "200ms", Some(5000), None)
    };
    let dir = tempfile::tempdir().unwrap();
    let m = manifest(dir.path());
    let (ok, log) = Weir::run(&m, &[], &failpoint).wait();
    assert!(!ok, "the job must fail at its third checkpoint: {log}");
    assert!(
        log.contains("tolerableFailedCheckpoints") && log.contains("fail-upload:3"),
        "the failure names the setting and the storage error: {log}"
    );
    // As after a SIGTERM, the failure says how to go on from what the run committed.
    assert!(
        log.contains("once its cause is fixed, resume with `") && log.contains("/checkpoints/wordcount/chk-"),
        "the failure gives the command that resumes from the last completed checkpoint: {log}"
    );
    Weir::run(&m, &["--restore", "latest"], &[]).wait_ok();
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected_wordcount(),
        "restored after a failed checkpoint",
    );

    let dir = tempfile::tempdir().unwrap();
    let m = manifest(dir.path());
    let yaml = std::fs::read_to_string(&m).unwrap();
    let tolerant = yaml.replace("retained: 2 }", "retained: 2, tolerableFailedCheckpoints: 1 }");
    assert_ne!(
        yaml, tolerant,
        "the manifest's checkpointing line changed; update this test"
    );
    std::fs::write(&m, tolerant).unwrap();
    let (ok, log) = Weir::run(&m, &[], &failpoint).wait();
    assert!(ok, "one failed checkpoint is tolerated: {log}");
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected_wordcount(),
        "one failed checkpoint tolerated",
    );
}

/// A run killed while it wrote a checkpoint's first file leaves `chk-<n>/` holding only that
/// write's temporary file, which no listing of snapshots shows. The next run takes ids past
/// it instead of writing its own checkpoint n beside the dead run's file (helper-101: completed
/// checkpoints held an earlier attempt's `.tmp` files), retention deletes the directory once
/// a newer checkpoint completed, and the output is the word count exactly.
#[test]
fn a_run_takes_ids_past_a_checkpoint_directory_holding_only_a_killed_runs_temporary_file() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::local(dir.path());
    let m = wordcount_manifest(dir.path(), &paths, 2, "exactly-once", "200ms", None, None);
    let cut_off = dir.path().join("checkpoints/wordcount/chk-3");
    std::fs::create_dir_all(&cut_off).unwrap();
    std::fs::write(cut_off.join(".gen-1.state.tmp-4194304-1"), b"cut off").unwrap();
    let completions = [(
        "WEIR_LOG".to_string(),
        "warn,weir_runtime::checkpoint::commit=info".to_string(),
    )];
    let log = Weir::run(&m, &[], &completions).wait_ok();
    let completed: Vec<u64> = log
        .split("checkpoint completed checkpoint=")
        .skip(1)
        .filter_map(|rest| rest.split(|c: char| !c.is_ascii_digit()).next()?.parse().ok())
        .collect();
    assert!(!completed.is_empty(), "no checkpoint completed: {log}");
    assert!(
        completed.iter().all(|id| *id > 3),
        "checkpoint ids {completed:?} reuse the cut-off chk-3: {log}"
    );
    assert!(
        !cut_off.exists(),
        "the cut-off chk-3 stays after newer checkpoints completed: {:?}",
        snapshot_ids(dir.path(), "chk-")
    );
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected_wordcount(),
        "a run after a cut-off checkpoint directory",
    );
}

/// A snapshot directory whose id Weir never writes (past 2^62, here `u64::MAX`) is refused
/// naming it and what to do, before any input is read; before, the id after it overflowed (a
/// panic in a debug build, ids from 0 in a release build).
#[test]
fn a_snapshot_directory_with_an_id_weir_never_writes_is_refused_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::local(dir.path());
    let m = wordcount_manifest(dir.path(), &paths, 1, "exactly-once", "200ms", None, None);
    let foreign = dir.path().join(format!("checkpoints/wordcount/chk-{}", u64::MAX));
    std::fs::create_dir_all(&foreign).unwrap();
    std::fs::write(foreign.join(".x.tmp-4194304-1"), b"").unwrap();
    let (ok, log) = Weir::run(&m, &[], &[]).wait();
    assert!(!ok, "the run must be refused: {log}");
    assert!(
        log.contains(&format!("with id {}", u64::MAX)) && log.contains("remove it") && !log.contains("panicked"),
        "{log}"
    );
    assert!(local_output(&dir.path().join("output")).is_empty());
}

/// A restore point whose `_metadata` carries an id Weir never writes (past 2^62; here a
/// checkpoint edited by hand and moved out of the job's storage) is refused naming the restore
/// point, not the job's storage, which holds no such directory, and before its pending sink
/// parts are committed.
#[test]
fn a_restore_point_with_an_id_weir_never_writes_is_refused_naming_the_restore_point() {
    use weir_runtime::state::snapshot::{decode_metadata, encode_metadata};
    let (dir, _paths, m) = word_count_crashed_past_its_first_commit_point();
    let moved = dir.path().join("edited-checkpoint");
    std::fs::rename(dir.path().join("checkpoints/wordcount/chk-1"), &moved).unwrap();
    let file = moved.join("_metadata");
    let mut metadata = decode_metadata("_metadata", &std::fs::read(&file).unwrap()).unwrap();
    metadata.checkpoint_id = u64::MAX;
    std::fs::write(&file, encode_metadata(&metadata)).unwrap();
    let (ok, log) = Weir::run(&m, &["--restore", moved.to_str().unwrap()], &[]).wait();
    assert!(!ok, "the run must be refused: {log}");
    assert!(
        log.contains(&format!("{} has snapshot id {}", moved.display(), u64::MAX))
            && log.contains("restore another snapshot")
            && !log.contains("panicked"),
        "{log}"
    );
    assert!(local_output(&dir.path().join("output")).is_empty(), "nothing committed");
}

/// The savepoint directories `savepoint-wordcount-*` under `dir/savepoints`, with the files
/// each holds.
fn savepoint_directories(dir: &std::path::Path) -> Vec<(String, Vec<String>)> {
    let Ok(entries) = std::fs::read_dir(dir.join("savepoints")) else {
        return Vec::new();
    };
    let mut found: Vec<(String, Vec<String>)> = entries
        .map(|e| e.unwrap().path())
        .filter(|p| p.is_dir())
        .map(|p| {
            let mut files: Vec<String> = std::fs::read_dir(&p)
                .map(|files| {
                    files
                        .map(|f| f.unwrap().file_name().to_string_lossy().into_owned())
                        .collect()
                })
                .unwrap_or_default();
            files.sort();
            (p.file_name().unwrap().to_string_lossy().into_owned(), files)
        })
        .collect();
    found.sort();
    found
}

/// A savepoint that fails after its subtasks wrote their state files
/// (`fail-savepoint-after-upload`: every subtask declines it then) leaves no directory once a
/// newer checkpoint completed, as Flink disposes of a failed savepoint's location; the job goes
/// on and its output is exactly the word count. Before, the failed savepoint's files stayed
/// for ever (a state-sized leak per failed periodic or upgrade savepoint).
#[test]
fn a_failed_savepoints_files_are_deleted_once_a_newer_checkpoint_completed() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::local(dir.path());
    // Checkpoints 2 s apart: the failed savepoint's files are listed before a newer checkpoint
    // completes (its retention pass deletes them).
    let m = wordcount_manifest(dir.path(), &paths, 2, "exactly-once", "2s", Some(3000), None);
    let env = [("WEIR_FAILPOINT".to_string(), "fail-savepoint-after-upload".to_string())];
    let w = Weir::run(&m, &[], &env);
    let api = w.api();
    wait_first_checkpoint(&api);
    let (ok, _, err) = finished(trigger(&api, false));
    assert!(
        !ok && err.contains("fail-savepoint-after-upload"),
        "the savepoint must fail: {err}"
    );
    // The failed savepoint's files were written (what would leak).
    let written = savepoint_directories(dir.path());
    assert!(
        written.len() == 1 && written[0].1.iter().any(|f| f.ends_with(".state")),
        "the failed savepoint wrote its state files: {written:?}"
    );
    let failed_id = savepoint_id(&written[0].0);
    wait_checkpoint_after(&api, failed_id);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !savepoint_directories(dir.path()).is_empty() {
        assert!(
            Instant::now() < deadline,
            "the failed savepoint's directory stays after newer checkpoints: {:?}",
            savepoint_directories(dir.path())
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    w.wait_ok();
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected_wordcount(),
        "a failed savepoint deleted",
    );
}

/// Two jobs of one name (StreamJobs `wordcount` in two namespaces: their own checkpoint
/// storages, one savepoints directory) stop with a savepoint at the same id: each gets a
/// directory of its own, and each job restored from its savepoint ends with exactly its word
/// count. Before the random suffix both wrote `savepoint-wordcount-<id>/`: the second's files
/// went over the first's, and its `_metadata` was refused.
#[test]
fn jobs_of_one_name_sharing_a_savepoints_directory_each_restore_their_own_savepoint() {
    let dir = tempfile::tempdir().unwrap();
    let jobs: Vec<(std::path::PathBuf, std::path::PathBuf)> = ["team-a", "team-b"]
        .iter()
        .map(|team| {
            let job_dir = dir.path().join(team);
            std::fs::create_dir_all(&job_dir).unwrap();
            let paths = Paths {
                checkpoints: job_dir.join("checkpoints").display().to_string(),
                savepoints: dir.path().join("savepoints").display().to_string(),
                output: job_dir.join("output").display().to_string(),
            };
            // No periodic checkpoint: each job's savepoint takes its storage's first id.
            let manifest = wordcount_manifest(&job_dir, &paths, 2, "exactly-once", "1h", Some(20_000), None);
            (job_dir, manifest)
        })
        .collect();
    let runs: Vec<Weir> = jobs.iter().map(|(_, m)| Weir::run(m, &[], &[])).collect();
    let savepoints: Vec<String> = runs.iter().map(|run| stop_with_savepoint(&run.api(), &[])).collect();
    for run in runs {
        run.wait_ok();
    }
    // The same id in both (what made them collide), in different directories.
    let without_suffix: Vec<&str> = savepoints.iter().map(|s| s.rsplit_once('-').unwrap().0).collect();
    assert_eq!(without_suffix[0], without_suffix[1], "{savepoints:?}");
    assert!(
        without_suffix[0].contains("/savepoints/savepoint-wordcount-"),
        "{savepoints:?}"
    );
    assert_ne!(savepoints[0], savepoints[1], "both jobs wrote one savepoint directory");
    for ((job_dir, manifest), savepoint) in jobs.iter().zip(&savepoints) {
        Weir::run(manifest, &["--restore", savepoint], &[]).wait_ok();
        assert_same_multiset(
            &local_output(&job_dir.join("output")),
            &expected_wordcount(),
            &format!("{} restored from {savepoint}", job_dir.display()),
        );
    }
}
