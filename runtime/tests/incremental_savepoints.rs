//! Savepoints taken between incremental checkpoints (what the operator's periodic savepoints
//! do): the checkpoint after a savepoint extends the checkpoint before it instead of starting
//! a new base (Flink's savepoints do not touch the incremental checkpoints' shared state);
//! retention, with `retained: 1` so that a savepoint's pointer alone is the newest snapshot
//! kept, keeps that checkpoint and every file it references; and a run killed -9 afterwards
//! restores exactly once. On the heap (chains of blocks) and on disk (native checkpoints).

mod common;
use common::incremental::*;
use common::*;
use std::path::Path;
use std::time::{Duration, Instant};
use weir_runtime::state::snapshot::{CheckpointMetadata, decode_metadata};

/// Whether a `counts` handle of `m` references a shared file a checkpoint older than `id`
/// wrote (a chain link or a native file): `m` extends a checkpoint from before `id`.
fn references_before(m: &CheckpointMetadata, id: u64) -> bool {
    m.operators
        .iter()
        .filter(|o| o.uid == "counts")
        .flat_map(|o| &o.handles)
        .any(|h| {
            h.chain.iter().any(|link| link.checkpoint_id < id)
                || h.native
                    .as_ref()
                    .is_some_and(|n| n.files.iter().any(|f| f.checkpoint_id < id))
        })
}

/// Asserts that every file each completed checkpoint in `job_dir` (`checkpoints/<job>/`)
/// references exists (retention deleted none). A checkpoint retention retired after it was
/// listed is no longer completed: retention deletes its `_metadata` first, so a file missing
/// while the `_metadata` is still there is the fault (the check runs while the job runs, with
/// `retained: 1`; CI saw a retirement between the listing and the check).
fn assert_every_reference_exists(job_dir: &Path) {
    let dir = job_dir
        .parent()
        .and_then(Path::parent)
        .expect("<dir>/checkpoints/<job>");
    let job = job_dir.file_name().unwrap().to_string_lossy().to_string();
    for c in completed_of(dir, &job) {
        let checkpoint = job_dir.join(format!("chk-{}", c.checkpoint_id));
        for h in c.operators.iter().flat_map(|o| &o.handles) {
            for (file, _, _) in h.files() {
                let retired = || !checkpoint.join("_metadata").exists();
                assert!(
                    checkpoint.join(file).exists() || retired(),
                    "checkpoint {} references {file}, deleted",
                    c.checkpoint_id
                );
            }
        }
    }
}

/// Takes a savepoint of the running job at `api` (not stopping it); returns its id.
fn savepoint(api: &str, env: &[(String, String)]) -> u64 {
    let url = trigger_savepoint(api, env, false);
    let path = Path::new(url.strip_prefix("file://").unwrap_or(&url)).join("_metadata");
    decode_metadata(&path.display().to_string(), &std::fs::read(&path).unwrap())
        .unwrap()
        .checkpoint_id
}

/// The checkpoints of the job in `dir` (its `checkpoints/<job>/` directory), completed,
/// oldest first.
fn completed_of(dir: &Path, job: &str) -> Vec<CheckpointMetadata> {
    let mut out: Vec<CheckpointMetadata> = std::fs::read_dir(dir.join("checkpoints").join(job))
        .into_iter()
        .flatten()
        .flatten()
        .filter(|e| e.file_name().to_string_lossy().starts_with("chk-"))
        .filter_map(|e| {
            let path = e.path().join("_metadata");
            let bytes = std::fs::read(&path).ok()?;
            decode_metadata(&path.display().to_string(), &bytes).ok()
        })
        .collect();
    out.sort_by_key(|m| m.checkpoint_id);
    out
}

/// Takes up to three savepoints of the running job at `api` (in `dir`, job `job`), each once
/// the newest checkpoint is incremental (`has_delta`), and returns, for each, whether the
/// first checkpoint completed after it extends a checkpoint from before it. Asserts after
/// each that every file a completed checkpoint references exists.
fn savepoint_rounds(dir: &Path, job: &str, api: &str, env: &[(String, String)]) -> Vec<bool> {
    let deadline = Instant::now() + Duration::from_secs(120);
    let mut extended = Vec::new();
    for round in 0..3 {
        // A checkpoint with deltas first, so there is a chain or uploaded files to extend.
        while !completed_of(dir, job).last().is_some_and(has_delta) {
            assert!(Instant::now() < deadline, "round {round}: no checkpoint with deltas");
            std::thread::sleep(Duration::from_millis(20));
        }
        let savepoint_id = savepoint(api, env);
        let after = loop {
            if let Some(c) = completed_of(dir, job)
                .into_iter()
                .find(|c| c.checkpoint_id > savepoint_id)
            {
                break c;
            }
            assert!(
                Instant::now() < deadline,
                "round {round}: no checkpoint after savepoint {savepoint_id}"
            );
            std::thread::sleep(Duration::from_millis(20));
        };
        extended.push(references_before(&after, savepoint_id));
        assert_every_reference_exists(&dir.join("checkpoints").join(job));
    }
    extended
}

/// A keyed count of 100,000 keys of which 1 % change per checkpoint (the policy keeps
/// extending the chain), with incremental checkpoints every 200 ms and one retained.
fn one_percent_job(dir: &Path, backend: &str) -> std::path::PathBuf {
    let yaml = format!(
        r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: touch }}
spec:
  parallelism: 1
  stateBackend: {backend}
  checkpointing: {{ interval: 200ms, storage: "{ckpt}", retained: 1, incremental: true }}
  savepoints: {{ directory: "{savepoints}" }}
  job:
    steps:
      - uid: gen
        source: {{ generator: {{ seed: 7, keys: 10, splits: 1, maxRecordsPerSecond: 50000 }} }}
      - keyBy: {{ expression: "id < 100000 ? id : id % 1000", as: k }}
      - uid: counts
        count: {{}}
      - uid: out
        sink: {{ discard: {{}} }}
"#,
        backend = backend.trim_end_matches("-native"),
        ckpt = dir.join("checkpoints").display(),
        savepoints = dir.join("savepoints").display(),
    );
    let m = dir.join("touch.yaml");
    std::fs::write(&m, yaml).unwrap();
    m
}

/// The checkpoint after a savepoint extends the one before it. Chains (heap): every time, the
/// changes are 1 % of the keys. Native (disk): a store compaction may rewrite every table
/// file at any checkpoint, so at least once in three.
fn a_checkpoint_after_a_savepoint_extends_the_one_before_it(backend: &str) {
    let dir = tempfile::tempdir().unwrap();
    let m = one_percent_job(dir.path(), backend);
    let env = backend_env(&dir.path().join("state"), backend);
    let w = Weir::run(&m, &[], &env);
    // Until all 100,000 keys are in (the first 100,000 records), each delta adds keys and the
    // compaction policy soon starts a new base: wait for them first.
    let deadline = Instant::now() + Duration::from_secs(60);
    let keys = |c: &CheckpointMetadata| -> u64 {
        c.operators
            .iter()
            .filter(|o| o.uid == "counts")
            .flat_map(|o| &o.handles)
            .map(|h| h.entries)
            .sum()
    };
    let holds_every_key = || {
        completed_of(dir.path(), "touch")
            .last()
            .is_some_and(|c| keys(c) >= 100_000)
    };
    while !holds_every_key() {
        assert!(Instant::now() < deadline, "the state never held 100,000 keys");
        std::thread::sleep(Duration::from_millis(20));
    }
    let extended = savepoint_rounds(dir.path(), "touch", &w.api(), &env);
    w.kill9();
    let want = if backend == "heap" {
        extended.iter().all(|e| *e)
    } else {
        extended.iter().any(|e| *e)
    };
    assert!(
        want,
        "{backend}: checkpoints after savepoints that extended one before: {extended:?} \
         (before the fix none did: a savepoint reset the base)"
    );
}

#[test]
fn a_heap_checkpoint_after_a_savepoint_extends_the_one_before_it() {
    a_checkpoint_after_a_savepoint_extends_the_one_before_it("heap");
}

#[test]
fn a_native_disk_checkpoint_after_a_savepoint_extends_the_one_before_it() {
    a_checkpoint_after_a_savepoint_extends_the_one_before_it("disk-native");
}

/// The word count with savepoints between its incremental checkpoints and one retained
/// checkpoint, killed -9 and restored from the latest checkpoint, is exactly once, and no
/// completed checkpoint ever references a deleted file.
fn savepoints_between_incremental_checkpoints(backend: &str) {
    let dir = tempfile::tempdir().unwrap();
    let (m, env) = incremental_job(dir.path(), 2, backend);
    let yaml = std::fs::read_to_string(&m).unwrap();
    // One retained checkpoint; a fifth of the usual rate, so the text lasts the three rounds.
    let changed = yaml
        .replace("retained: 2,", "retained: 1,")
        .replace("maxRecordsPerSecond: 5000", "maxRecordsPerSecond: 1000");
    assert_eq!(changed.matches("retained: 1,").count(), 1, "update this test: {yaml}");
    assert!(
        changed.contains("maxRecordsPerSecond: 1000"),
        "update this test: {yaml}"
    );
    std::fs::write(&m, changed).unwrap();
    let w = Weir::run(&m, &[], &env);
    let extended = savepoint_rounds(dir.path(), "wordcount", &w.api(), &env);
    eprintln!("{backend}: checkpoints after savepoints extending one before: {extended:?}");
    w.kill9();
    assert_every_reference_exists(&job_dir(dir.path()));
    std::fs::write(&m, yaml.replace("retained: 2,", "retained: 1,")).unwrap();
    Weir::run(&m, &["--restore", "latest"], &env).wait_ok();
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected_wordcount(),
        &format!("{backend}: savepoints between incremental checkpoints, kill -9, restore latest"),
    );
}

#[test]
fn savepoints_between_incremental_heap_checkpoints_are_exactly_once() {
    savepoints_between_incremental_checkpoints("heap");
}

#[test]
fn savepoints_between_native_disk_checkpoints_are_exactly_once() {
    savepoints_between_incremental_checkpoints("disk-native");
}
