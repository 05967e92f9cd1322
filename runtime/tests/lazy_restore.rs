//! Lazy restore (`state/pending.rs`): a job restored from a checkpoint with many keys starts
//! processing before its key groups are built; checkpoints are taken while groups are still
//! pending (their blocks written as restored), the process is killed before every group was
//! built, and restored again from such a checkpoint. The committed output equals a
//! failure-free run's, record by record (as multisets), on both backends.

mod common;
use common::*;
use std::path::Path;

/// A keyed count over 150,000 generated records at 10,000 records/s per source subtask (two
/// subtasks): the first 10,000 records (about 0.5 s) spread over 40,000 keys (about 8,800
/// distinct keys in the state, in every key group), then all but every 400th go to the one
/// key `tail`, so after a restore from a checkpoint past record 10,000 most key groups are
/// touched rarely and stay pending for seconds (background building off by a failpoint).
/// With the spread part still running at the restore, its records touch every key group in
/// the first batches and no checkpoint would see a pending group: so the first crash comes
/// after checkpoint 10 (at least 2 s at `interval: 200ms`, four times the spread part's
/// half second, so a loaded machine that slows the sources still has them past it).
fn manifest(dir: &Path, paths: &Paths, backend: &str) -> std::path::PathBuf {
    let yaml = format!(
        r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: lazy }}
spec:
  parallelism: 2
  stateBackend: {backend}
  checkpointing: {{ interval: 200ms, mode: exactly-once, storage: "{ckpt}", retained: 2 }}
  job:
    steps:
      - uid: gen
        source: {{ generator: {{ seed: 7, count: 150000, keys: 40000, maxRecordsPerSecond: 10000 }} }}
      - keyBy: {{ expression: "id < 10000 || id % 400 == 0 ? key : 'tail'", as: key }}
      - uid: counts
        count: {{}}
      - uid: output
        sink: {{ file: {{ path: "{out}" }} }}
"#,
        ckpt = paths.checkpoints,
        out = paths.output,
    );
    let f = dir.join("job.yaml");
    std::fs::write(&f, yaml).unwrap();
    f
}

/// The highest completed checkpoint id under the job's checkpoint directory.
fn latest_checkpoint(paths: &Paths) -> u64 {
    std::fs::read_dir(Path::new(&paths.checkpoints).join("lazy"))
        .unwrap()
        .filter_map(|e| {
            let e = e.unwrap();
            let id = e.file_name().to_string_lossy().strip_prefix("chk-")?.parse().ok()?;
            e.path().join("_metadata").exists().then_some(id)
        })
        .max()
        .expect("a completed checkpoint")
}

fn crash(m: &Path, env: &[(String, String)], failpoints: &str, expect: &[&str]) -> String {
    let mut env = env.to_vec();
    env.push(("WEIR_FAILPOINT".into(), failpoints.into()));
    let (ok, stderr) = Weir::run(m, &["--restore", "latest"], &env).wait();
    assert!(!ok, "expected a crash ({failpoints}): {stderr}");
    for e in expect {
        assert!(stderr.contains(e), "expected `{e}` ({failpoints}): {stderr}");
    }
    stderr
}

fn killed_before_all_key_groups_were_built(backend: &str) {
    let reference = tempfile::tempdir().unwrap();
    let reference_paths = Paths::local(reference.path());
    let env = state_dir_env(&reference.path().join("state"));
    Weir::run(&manifest(reference.path(), &reference_paths, backend), &[], &env).wait_ok();
    let expected = local_output(&reference.path().join("output"));
    assert_eq!(expected.len(), 150_000);

    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::local(dir.path());
    let m = manifest(dir.path(), &paths, backend);
    let env = state_dir_env(&dir.path().join("state"));
    // 1. Crash right after checkpoint 10 (about 2 s in, past the spread records).
    crash(&m, &env, "after-metadata:10", &["failpoint after-metadata:10 reached"]);
    // 2. Restored lazily; groups are built only when a record touches them. Two checkpoints
    //    complete while groups are pending, then a crash after the second.
    let id = latest_checkpoint(&paths) + 2;
    crash(
        &m,
        &env,
        &format!("lazy-restore-no-background-build,after-metadata:{id}"),
        &[
            "copied into it as restored",
            &format!("failpoint after-metadata:{id} reached"),
        ],
    );
    // 3. Restored from that checkpoint (pending groups' blocks written as they were restored),
    //    killed after its first batch while groups are still pending.
    crash(
        &m,
        &env,
        "lazy-restore-no-background-build,abort-with-pending-key-groups",
        &["failpoint abort-with-pending-key-groups reached"],
    );
    // 4. Restored again, to the end.
    Weir::run(&m, &["--restore", "latest"], &env).wait_ok();
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected,
        &format!("{backend}: lazy restores with checkpoints and kills while key groups were pending"),
    );
}

#[test]
fn killed_before_all_key_groups_were_built_then_restored_is_exactly_once_on_heap() {
    killed_before_all_key_groups_were_built("heap");
}

#[test]
fn killed_before_all_key_groups_were_built_then_restored_is_exactly_once_on_disk() {
    killed_before_all_key_groups_were_built("disk");
}
