//! Helpers of the tests of incremental checkpoints (`runtime/tests/incremental.rs`,
//! `runtime/tests/restored_references.rs`): the word-count job with incremental checkpoints on
//! a state backend, its completed checkpoints' `_metadata`, and runs killed (-9) once the
//! newest checkpoint is incremental over an earlier one.

use super::*;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use weir_runtime::state::snapshot::{CheckpointMetadata, NativeFile, decode_metadata};

/// The word-count manifest with incremental checkpoints every 200 ms, keyed state on
/// `backend`, and the environment its runs need (the disk backend's state directory). Backend
/// `disk` writes chains of blocks (`WEIR_NATIVE_CHECKPOINTS=off`), `disk-native` native
/// checkpoints of the store's files (`on`).
pub fn incremental_job(dir: &Path, parallelism: u32, backend: &str) -> (PathBuf, Vec<(String, String)>) {
    let m = incremental_manifest(dir, parallelism);
    set_state_backend(&m, backend.trim_end_matches("-native"));
    (m, backend_env(&dir.join("state"), backend))
}

/// The environment of a run on `backend` (see [`incremental_job`]) with its state in `dir`.
pub fn backend_env(dir: &Path, backend: &str) -> Vec<(String, String)> {
    let mut env = state_dir_env(dir);
    let native = if backend == "disk-native" { "on" } else { "off" };
    env.push(("WEIR_NATIVE_CHECKPOINTS".into(), native.into()));
    env
}

/// The word-count manifest with incremental checkpoints every 200 ms.
pub fn incremental_manifest(dir: &Path, parallelism: u32) -> PathBuf {
    let m = wordcount_manifest(
        dir,
        &Paths::local(dir),
        parallelism,
        "exactly-once",
        "200ms",
        Some(5000),
        None,
    );
    set_incremental(&m);
    m
}

/// Switches the word-count manifest `m` to incremental checkpoints.
pub fn set_incremental(m: &Path) {
    let yaml = std::fs::read_to_string(m).unwrap();
    let changed = yaml.replace("retained: 2 }", "retained: 2, incremental: true }");
    assert_ne!(
        yaml, changed,
        "the manifest's checkpointing line changed; update this test"
    );
    std::fs::write(m, changed).unwrap();
}

pub fn job_dir(dir: &Path) -> PathBuf {
    dir.join("checkpoints").join("wordcount")
}

/// The completed checkpoints in the local store, oldest first.
pub fn completed(dir: &Path) -> Vec<CheckpointMetadata> {
    let mut out = Vec::new();
    let Ok(entries) = std::fs::read_dir(job_dir(dir)) else {
        return out;
    };
    for entry in entries.flatten() {
        let name = entry.file_name().to_string_lossy().to_string();
        if !name.starts_with("chk-") {
            continue;
        }
        let path = entry.path().join("_metadata");
        if let Ok(bytes) = std::fs::read(&path) {
            out.push(decode_metadata(&path.display().to_string(), &bytes).unwrap());
        }
    }
    out.sort_by_key(|m| m.checkpoint_id);
    out
}

/// Whether the `counts` state of `m` is incremental over an earlier checkpoint: at least one
/// delta in a chain, or (a native checkpoint of the disk backend) a table file uploaded by an
/// earlier checkpoint.
pub fn has_delta(m: &CheckpointMetadata) -> bool {
    m.operators
        .iter()
        .filter(|o| o.uid == "counts")
        .flat_map(|o| &o.handles)
        .any(|h| {
            h.chain.iter().any(|l| !l.base)
                || h.native
                    .as_ref()
                    .is_some_and(|n| n.files.iter().any(|f| f.checkpoint_id < m.checkpoint_id))
        })
}

/// Whether every `counts` handle of `m` is native (the disk store's own files).
pub fn is_native(m: &CheckpointMetadata) -> bool {
    let mut handles = m
        .operators
        .iter()
        .filter(|o| o.uid == "counts")
        .flat_map(|o| &o.handles);
    handles.all(|h| h.native.is_some() && h.chain.is_empty())
}

pub fn shared_files(dir: &Path) -> Vec<String> {
    let Ok(entries) = std::fs::read_dir(job_dir(dir).join("shared")) else {
        return vec![];
    };
    let mut out: Vec<String> = entries
        .flatten()
        .map(|e| e.file_name().to_string_lossy().to_string())
        .collect();
    out.sort();
    out
}

/// Runs `weir run --restore latest --parallelism P` until the newest completed checkpoint was
/// written at `parallelism` and holds deltas (a chain's delta, or native files of an earlier
/// checkpoint), then kills it (-9); retries (each run goes on from the latest checkpoint) until
/// the newest checkpoint after the kill is such a one. Returns its id.
pub fn run_until_newest_has_deltas_then_kill(dir: &Path, m: &Path, parallelism: u32, env: &[(String, String)]) -> u64 {
    let newest = run_until_newest_is_then_kill(dir, m, parallelism, env, Duration::from_secs(20), "deltas", has_delta);
    newest.checkpoint_id
}

/// Runs `weir run --restore latest --parallelism P` until the newest completed checkpoint is
/// newer than the one before the run, was written at `parallelism` and is `wanted`, waiting up
/// to `wait` per run, then kills it (-9); retries up to six runs (each goes on from the latest
/// checkpoint) until the newest checkpoint after the kill is such a one, and returns it.
/// Panics naming `what` the checkpoint should hold when none became the newest.
pub fn run_until_newest_is_then_kill(
    dir: &Path,
    m: &Path,
    parallelism: u32,
    env: &[(String, String)],
    wait: Duration,
    what: &str,
    wanted: impl Fn(&CheckpointMetadata) -> bool,
) -> CheckpointMetadata {
    let p = parallelism.to_string();
    for attempt in 0..6 {
        let before = completed(dir).last().map_or(0, |c| c.checkpoint_id);
        let newer_and_wanted =
            |c: &CheckpointMetadata| c.checkpoint_id > before && c.parallelism == parallelism && wanted(c);
        let w = Weir::run(m, &["--restore", "latest", "--parallelism", &p], env);
        let _ = w.api();
        let deadline = Instant::now() + wait;
        while Instant::now() < deadline && !completed(dir).last().is_some_and(newer_and_wanted) {
            std::thread::sleep(Duration::from_millis(10));
        }
        w.kill9();
        if let Some(newest) = completed(dir).pop()
            && newer_and_wanted(&newest)
        {
            eprintln!("killed after checkpoint {} ({what})", newest.checkpoint_id);
            return newest;
        }
        eprintln!("attempt {attempt}: the newest checkpoint after the kill had no {what}; again");
    }
    panic!("no checkpoint with {what} became the newest one at parallelism {parallelism}");
}

/// Asserts that every native file checkpoint `c` references is in the job's checkpoint
/// directory under `dir` (retention deleted none of them).
pub fn assert_native_files_exist<'a>(
    dir: &Path,
    c: &CheckpointMetadata,
    files: impl IntoIterator<Item = &'a NativeFile>,
) {
    for f in files {
        let path = job_dir(dir).join(format!("chk-{}", c.checkpoint_id)).join(&f.file);
        assert!(
            path.exists(),
            "checkpoint {} references {} (deleted)",
            c.checkpoint_id,
            f.file
        );
    }
}

/// What `weir run` logs for each native handle restored into its subtask's store
/// (`checkpoint/native_restore.rs`).
pub const FAST_RESTORE_LINE: &str = "native checkpoint restored into the subtask's store";

/// The table files of the `counts` handles of `m`: `(uploaded by m, referenced from earlier
/// checkpoints)`.
pub fn table_files(m: &CheckpointMetadata) -> (Vec<NativeFile>, Vec<NativeFile>) {
    counts_native_files(m)
        .map(|(_, f)| f)
        .filter(|f| f.name.ends_with(".sst"))
        .cloned()
        .partition(|f| f.checkpoint_id == m.checkpoint_id)
}

/// Every native file the `counts` handles of `m` list, each with its handle's subtask (local
/// names repeat across subtasks' stores).
pub fn counts_native_files(m: &CheckpointMetadata) -> impl Iterator<Item = (u32, &NativeFile)> {
    m.operators
        .iter()
        .filter(|o| o.uid == "counts")
        .flat_map(|o| &o.handles)
        .flat_map(|h| h.native.iter().flat_map(|n| &n.files).map(move |f| (h.subtask, f)))
}

/// Files and bytes of `files`, for the messages and the docs' numbers.
pub fn files_and_bytes(files: &[NativeFile]) -> String {
    format!(
        "{} files, {} bytes",
        files.len(),
        files.iter().map(|f| f.size).sum::<u64>()
    )
}

/// The `_metadata` of every checkpoint of the job under `checkpoints` completed while
/// `until` is false (polled every 5 ms: retention deletes all but the newest two), by id.
pub fn watch_completed(
    checkpoints: &Path,
    timeout: Duration,
    mut until: impl FnMut(&BTreeMap<u64, CheckpointMetadata>) -> bool,
) -> BTreeMap<u64, CheckpointMetadata> {
    let mut seen = BTreeMap::new();
    let deadline = Instant::now() + timeout;
    while !until(&seen) {
        assert!(Instant::now() < deadline, "timed out; completed: {:?}", seen.keys());
        for entry in std::fs::read_dir(checkpoints.join("wordcount"))
            .into_iter()
            .flatten()
            .flatten()
        {
            let name = entry.file_name().to_string_lossy().to_string();
            let Some(id) = name.strip_prefix("chk-").and_then(|i| i.parse::<u64>().ok()) else {
                continue;
            };
            if seen.contains_key(&id) {
                continue;
            }
            let path = entry.path().join("_metadata");
            if let Ok(bytes) = std::fs::read(&path) {
                seen.insert(id, decode_metadata(&path.display().to_string(), &bytes).unwrap());
            }
        }
        std::thread::sleep(Duration::from_millis(5));
    }
    seen
}

/// A cluster's redeployment (`runtime/tests/cluster.rs`) restored the job's own newest checkpoint (a claimed restore,
/// `checkpoint/restore_mode.rs`), each store by the fast path: the first checkpoint completed
/// after it references table files of the restored checkpoint (or older) instead of uploading
/// every table file again.
pub fn first_checkpoint_after_the_redeployment_references_the_restored_files(c: &super::cluster::Cluster, dir: &Path) {
    // The restored checkpoint, from the workers' fast restore lines (`... of checkpoint <id>,`).
    let restored = || -> Option<u64> {
        c.workers
            .iter()
            .flat_map(|w| {
                let text = w.text();
                let ids: Vec<u64> = text
                    .lines()
                    .filter(|l| l.contains("native checkpoint restored into the subtask's store"))
                    .filter_map(|l| l.split(" of checkpoint ").nth(1)?.split(',').next()?.parse().ok())
                    .collect();
                ids
            })
            .max()
    };
    let seen = watch_completed(&dir.join("checkpoints"), Duration::from_secs(120), |seen| {
        restored().is_some_and(|k| seen.range(k + 1..).next().is_some())
    });
    let k = restored().unwrap();
    let (id, first) = seen.range(k + 1..).next().unwrap();
    assert!(
        is_native(first),
        "checkpoint {id}, the first after restoring checkpoint {k}, is native: {:?}",
        first.operators
    );
    let (uploaded, referenced) = table_files(first);
    eprintln!(
        "checkpoint {id}, the first after restoring checkpoint {k}: uploaded {}, referenced {}",
        files_and_bytes(&uploaded),
        files_and_bytes(&referenced)
    );
    assert!(
        !referenced.is_empty() && referenced.iter().all(|f| f.checkpoint_id <= k),
        "checkpoint {id} references table files of the restored checkpoint {k}: uploaded {}, referenced {referenced:?}",
        files_and_bytes(&uploaded)
    );
}

/// The delta files the `counts` handles of `m` list.
pub fn delta_files(m: &CheckpointMetadata) -> usize {
    counts_native_files(m)
        .filter(|(_, f)| f.name.ends_with(".delta"))
        .count()
}

/// Runs the word count `m` (parallelism 2, native disk checkpoints) to its end from the latest
/// checkpoint, asserts that both subtasks' stores were restored from their native handles
/// (the fast path), and that the committed output under `dir` is the failure-free word count,
/// record by record (`what` names the run in the failure message).
pub fn restore_both_stores_and_finish_exactly_once(dir: &Path, m: &Path, env: &[(String, String)], what: &str) {
    let log = Weir::run(m, &["--restore", "latest"], env).wait_ok();
    assert_eq!(log.matches(FAST_RESTORE_LINE).count(), 2, "{what}: {log}");
    assert_same_multiset(&local_output(&dir.join("output")), &expected_wordcount(), what);
}
