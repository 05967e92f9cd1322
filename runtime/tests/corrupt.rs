//! A corrupt checkpoint is detected by checksum and reported with its path (a restore past it is
//! refused: see restore_rule.rs); malformed manifests name the field.

mod common;
use common::*;

#[test]
fn corrupt_state_file_is_reported_with_its_path() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::local(dir.path());
    let m = wordcount_manifest(dir.path(), &paths, 2, "exactly-once", "200ms", Some(20000), None);
    Weir::run(&m, &[], &[]).wait_ok();
    let job_dir = dir.path().join("checkpoints/wordcount");
    let ids = common::checkpoint_ids(&job_dir, false);
    assert!(ids.len() >= 2, "retention keeps 2 checkpoints: {ids:?}");
    let (prev, newest) = (ids[ids.len() - 2], ids[ids.len() - 1]);
    let victim = job_dir.join(format!("chk-{newest}/counts-0.state"));
    let mut bytes = std::fs::read(&victim).unwrap();
    let mid = bytes.len() / 2;
    bytes[mid] ^= 0xff;
    std::fs::write(&victim, bytes).unwrap();

    let out = std::process::Command::new(weir())
        .args([
            "savepoint",
            "inspect",
            job_dir.join(format!("chk-{newest}")).to_str().unwrap(),
        ])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        !out.status.success() && err.contains("counts-0.state") && err.contains("checksum mismatch"),
        "{err}"
    );

    let (ok, log) = Weir::run(&m, &["--restore", "latest"], &[]).wait();
    assert!(
        !ok && log.contains(&format!("chk-{newest}")) && log.contains("counts-0.state"),
        "{log}"
    );
    assert!(
        !log.contains(&format!("chk-{prev}")),
        "no fallback to chk-{prev}: {log}"
    );

    // Restored explicitly, the damaged checkpoint is refused saying what is damaged and what
    // to do (helper-116: a bare "corrupt restore point: ..." or "...: not found").
    let newest_dir = job_dir.join(format!("chk-{newest}"));
    let (ok, log) = Weir::run(&m, &["--restore", newest_dir.to_str().unwrap()], &[]).wait();
    assert!(!ok, "{log}");
    for needle in [
        "is damaged: a file does not verify",
        "counts-0.state",
        "Put the file back from a copy",
    ] {
        assert!(log.contains(needle), "`{needle}` in {log}");
    }
    // A state file missing from the checkpoint before it: inspect says which and what to do.
    let prev_dir = job_dir.join(format!("chk-{prev}"));
    let state_file = std::fs::read_dir(&prev_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.extension().is_some_and(|x| x == "state"))
        .expect("a state file in the checkpoint before");
    std::fs::remove_file(&state_file).unwrap();
    let out = std::process::Command::new(weir())
        .args(["savepoint", "inspect", prev_dir.to_str().unwrap()])
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    let name = state_file.file_name().unwrap().to_string_lossy().into_owned();
    assert!(!out.status.success(), "{err}");
    for needle in [
        "is damaged: ",
        &format!("{name}, a file its `_metadata` lists, is missing"),
        "Put the file back from a copy",
    ] {
        assert!(err.contains(needle), "`{needle}` in {err}");
    }
}

#[test]
fn malformed_manifest_is_rejected_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::local(dir.path());
    let m = wordcount_manifest(dir.path(), &paths, 2, "exactly-once", "1s", None, None);
    for (set, field) in [
        ("spec.parallelism=0", "spec.parallelism"),
        (
            "spec.job.steps.2.flatMap.pattern=(",
            "spec.job.steps[2].flatMap.pattern",
        ),
        ("spec.checkpointing.interval=soon", "spec.checkpointing.interval"),
        (
            "spec.job.steps.3.keyBy.expression=word +",
            "spec.job.steps[3].keyBy.expression",
        ),
    ] {
        let (ok, err) = Weir::run(&m, &["--set", set], &[]).wait();
        assert!(!ok && err.contains(field), "--set {set}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}

fn checkpoint_ids(dir: &std::path::Path) -> Vec<u64> {
    common::checkpoint_ids(&dir.join("checkpoints/wordcount"), false)
}

#[test]
fn retention_only_deletes_checkpoints_of_its_own_lineage() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::local(dir.path());
    let m = wordcount_manifest(dir.path(), &paths, 2, "exactly-once", "200ms", Some(20000), None);
    Weir::run(&m, &[], &[]).wait_ok();
    let first = checkpoint_ids(dir.path());
    assert_eq!(first.len(), 2, "retained: 2 → {first:?}");
    // A fresh run of the same job name keeps the first run's restore points.
    Weir::run(&m, &[], &[]).wait_ok();
    let after_fresh = checkpoint_ids(dir.path());
    assert!(
        first.iter().all(|id| after_fresh.contains(id)),
        "{first:?} deleted: {after_fresh:?}"
    );
    // A run continuing from the newest checkpoint inherits its lineage and applies retention to it.
    let before = checkpoint_ids(dir.path());
    Weir::run(&m, &["--restore", "latest"], &[]).wait_ok();
    let after_continue = checkpoint_ids(dir.path());
    let newest_before = *before.last().unwrap();
    assert!(
        !after_continue.contains(&newest_before),
        "{newest_before} should have been retired: {after_continue:?}"
    );
    assert!(
        first.iter().all(|id| after_continue.contains(id)),
        "first run's {first:?} kept: {after_continue:?}"
    );
}

/// A table file of a disk store damaged on local disk (truncated) while the local checkpoint
/// directory holds it as a hard link (the same file): the job fails saying the checkpoint's
/// copy is damaged too and no checkpoint that references it restores, and prints no command
/// resuming from its last checkpoint (which would fail on the same file). Found by trial
/// (2026-12-07): the error said the checkpoint's copy was intact, and the resume command it
/// printed failed.
#[test]
fn a_damaged_hard_linked_table_file_is_reported_as_damaged_in_the_checkpoint_too() {
    // A compaction that drops the chosen file from the store between the listing and the
    // truncation leaves nothing damaged that the store or a later checkpoint reads (only a
    // checkpoint retention then retires holds it), and the job rightly finishes: try again
    // (under a loaded CI machine, 2026-12-07 evening, three runs in a row saw it).
    const ATTEMPTS: u32 = 6;
    for attempt in 1..=ATTEMPTS {
        let (ok, log) = run_with_a_truncated_linked_table_file();
        if ok {
            assert!(attempt < ATTEMPTS, "the job never failed on its damaged store: {log}");
            continue;
        }
        let failure = log
            .lines()
            .find(|l| l.contains("job gen failed"))
            .unwrap_or_else(|| panic!("no failure line in {log}"));
        assert!(
            failure.contains("is damaged too")
                && failure.contains("no checkpoint that references it restores")
                && failure.contains("savepoint")
                && !failure.contains("is intact")
                && !failure.contains("resume with"),
            "{failure}"
        );
        return;
    }
}

/// Runs a disk-backend job, truncates a table file its store shares with a checkpoint, and
/// waits for the job: (finished without failure, log).
fn run_with_a_truncated_linked_table_file() -> (bool, String) {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::local(dir.path());
    // Many keys, so the first checkpoints flush the store into table files.
    let m = dir.path().join("gen.yaml");
    std::fs::write(
        &m,
        format!(
            r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: gen }}
spec:
  parallelism: 1
  stateBackend: disk
  checkpointing: {{ interval: 500ms, storage: "{}", incremental: true }}
  job:
    steps:
      - {{ uid: src, source: {{ generator: {{ seed: 1, keys: 2000000, count: 600000, maxRecordsPerSecond: 20000 }} }} }}
      - {{ keyBy: {{ expression: key, as: key }} }}
      - {{ uid: sums, sum: {{ expression: value, as: total }} }}
      - {{ uid: output, sink: {{ file: {{ path: "{}" }} }} }}
"#,
            paths.checkpoints, paths.output
        ),
    )
    .unwrap();
    let state = dir.path().join("state");
    let args = ["--state-dir", state.to_str().unwrap()];
    let run = Weir::run(&m, &args, &[]);
    // A table file a checkpoint linked (two links: the store's and the checkpoint's).
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
    let linked = loop {
        let found = files_under(&state)
            .into_iter()
            .find(|p| p.extension().is_some_and(|e| e == "sst") && p.metadata().is_ok_and(|m| m.nlink() >= 2));
        if let Some(found) = found {
            break found;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "no table file linked into a checkpoint"
        );
        std::thread::sleep(std::time::Duration::from_millis(50));
    };
    let size = linked.metadata().unwrap().len();
    std::fs::OpenOptions::new()
        .write(true)
        .open(&linked)
        .unwrap()
        .set_len(size - 10)
        .unwrap();
    run.wait()
}
