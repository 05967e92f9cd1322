//! A subtask that panics (a bug, never user input: the test hook `WEIR_FAILPOINT=panic-subtask:<uid>`
//! stands in for one) fails the job at once with its own message, `subtask counts -> out
//! (1/2) panicked: ...`, not with the symptom its neighbours report (`downstream subtask is gone`,
//! `input 0 closed without end-of-stream`) after the coordinator's wait for a cause.

mod common;
use common::*;

/// A keyed count at parallelism 2 whose subtask 1/2 of the stage starting at step `uid` panics.
fn run_with_a_panic_in(uid: &str) -> String {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("job.yaml");
    std::fs::write(
        &m,
        format!(
            r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: panics }}
spec:
  parallelism: 2
  checkpointing: {{ interval: 1s, storage: "{}/checkpoints" }}
  job:
    steps:
      - uid: gen
        source: {{ generator: {{ seed: 1, count: 100000, keys: 100 }} }}
      - keyBy: {{ expression: key, as: key }}
      - uid: counts
        count: {{}}
      - uid: out
        sink: {{ discard: {{}} }}
"#,
            dir.path().display()
        ),
    )
    .unwrap();
    let failpoint = [("WEIR_FAILPOINT".to_string(), format!("panic-subtask:{uid}"))];
    let (ok, err) = Weir::run(&m, &[], &failpoint).wait();
    assert!(!ok, "the job must fail: {err}");
    err
}

#[test]
fn a_panicking_subtask_is_the_cause_of_the_jobs_failure() {
    for (uid, subtask) in [("counts", "counts -> out (1/2)"), ("gen", "gen -> keyBy-1 (1/2)")] {
        let err = run_with_a_panic_in(uid);
        let want = format!("job panics failed: subtask {subtask} panicked: failpoint panic-subtask:{uid}");
        assert!(err.contains(&want), "want `{want}` in {err}");
    }
}

/// The committed counts of checkpoints in the `run summary: …` line of `log`: (completed,
/// failed).
fn checkpoints_in_summary(log: &str) -> (u64, u64) {
    let line = log
        .lines()
        .find(|l| l.contains("run summary: "))
        .unwrap_or_else(|| panic!("no run summary in {log}"));
    let rest = line.split("checkpoints: ").nth(1).expect("checkpoints in the summary");
    let mut numbers = rest.split(|c: char| !c.is_ascii_digit()).filter(|s| !s.is_empty());
    let mut next = || numbers.next().unwrap().parse::<u64>().unwrap();
    (next(), next())
}

/// The asynchronous part of a checkpoint that panics (`WEIR_FAILPOINT=panic-upload:3`: in
/// every subtask, after the synchronous part) declines the checkpoint naming what panicked, as
/// Flink declines a checkpoint whose asynchronous part failed; `tolerableFailedCheckpoints`
/// then decides. With 1 the job goes on, later checkpoints complete and the output is exactly
/// the failure-free word count; with 0 (the default) the job fails at once with the panic as
/// the cause and a restore from the last completed checkpoint gives that output too. Before,
/// the panic ended only the upload's tokio task: checkpoint 3 neither completed nor failed
/// until its timeout (20 s here), which then failed it without naming the panic.
#[test]
fn a_panicking_asynchronous_checkpoint_part_declines_the_checkpoint() {
    let failpoint = [("WEIR_FAILPOINT".to_string(), "panic-upload:3".to_string())];
    let timeout = ["--set", "spec.checkpointing.timeout=20s"];
    let manifest = |dir: &std::path::Path| {
        wordcount_manifest(dir, &Paths::local(dir), 2, "exactly-once", "200ms", Some(5000), None)
    };
    let declined = "the asynchronous part of checkpoint 3 of subtask";
    let panicked = "panicked: failpoint panic-upload:3";

    // Tolerated: the job keeps running, the next checkpoints complete, exactly once.
    let dir = tempfile::tempdir().unwrap();
    let m = manifest(dir.path());
    let mut args = timeout.to_vec();
    args.extend(["--set", "spec.checkpointing.tolerableFailedCheckpoints=1"]);
    let log = Weir::run(&m, &args, &failpoint).wait_ok();
    assert!(
        log.contains("checkpoint declined") && log.contains(declined) && log.contains(panicked),
        "the decline names what panicked: {log}"
    );
    let (completed, failed) = checkpoints_in_summary(&log);
    assert_eq!(failed, 1, "only checkpoint 3 failed: {log}");
    assert!(
        completed >= 3,
        "checkpoints after 3 completed (1 and 2 before it): {log}"
    );
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected_wordcount(),
        "a panicking asynchronous checkpoint part tolerated",
    );

    // Not tolerated: the job fails with the panic as the cause; the restore is exactly once.
    let dir = tempfile::tempdir().unwrap();
    let m = manifest(dir.path());
    let (ok, log) = Weir::run(&m, &timeout, &failpoint).wait();
    assert!(!ok, "the job must fail at its third checkpoint: {log}");
    let failure = log
        .lines()
        .find(|l| l.contains("job wordcount failed"))
        .unwrap_or_else(|| panic!("no failure line in {log}"));
    assert!(
        failure.contains("checkpoint 3 failed: declined by task")
            && failure.contains(declined)
            && failure.contains(panicked)
            && failure.contains("tolerableFailedCheckpoints is 0"),
        "the failure names the panic and the setting: {failure}"
    );
    Weir::run(&m, &["--restore", "latest"], &[]).wait_ok();
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected_wordcount(),
        "restored after a panicking asynchronous checkpoint part",
    );
}
