//! Incremental checkpoints (`checkpointing.incremental: true`) end to end on the real text:
//! exactly-once under kill -9 compared record by record with a failure-free run, rescale
//! 2 → 3 → 1 through incremental checkpoints whose chains hold deltas, and a crash between
//! the upload of the state files and `_metadata`: the unconfirmed checkpoint is never a base,
//! its files are collected, and every retained checkpoint still restores.

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};
use weir_runtime::operators::aggregate::Num;
use weir_runtime::state::heap::HeapKeyedState;
use weir_runtime::state::key_group::key_group_range;
use weir_runtime::state::keyed_block::is_delta;
use weir_runtime::state::snapshot::{CheckpointMetadata, decode_metadata, decode_state_file};

/// The word-count manifest with incremental checkpoints every 200 ms.
fn incremental_manifest(dir: &Path, parallelism: u32) -> PathBuf {
    let m = wordcount_manifest(
        dir,
        &Paths::local(dir),
        parallelism,
        "exactly-once",
        "200ms",
        Some(5000),
        None,
    );
    let yaml = std::fs::read_to_string(&m).unwrap();
    let changed = yaml.replace("retained: 2 }", "retained: 2, incremental: true }");
    assert_ne!(
        yaml, changed,
        "the manifest's checkpointing line changed; update this test"
    );
    std::fs::write(&m, changed).unwrap();
    m
}

fn job_dir(dir: &Path) -> PathBuf {
    dir.join("checkpoints").join("wordcount")
}

/// The completed checkpoints in the local store, oldest first.
fn completed(dir: &Path) -> Vec<CheckpointMetadata> {
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

/// Whether the `counts` state of `m` has at least one delta in a chain.
fn has_delta(m: &CheckpointMetadata) -> bool {
    m.operators
        .iter()
        .filter(|o| o.uid == "counts")
        .flat_map(|o| &o.handles)
        .any(|h| h.chain.iter().any(|l| !l.base))
}

fn shared_files(dir: &Path) -> Vec<String> {
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

/// Runs `weir run --restore latest ARGS` until the newest completed checkpoint was written at
/// `parallelism` with deltas in its chains, then kills it (-9); retries (each run goes on
/// from the latest checkpoint) until the newest checkpoint after the kill is such a one.
/// Returns its id.
fn run_until_newest_has_deltas_then_kill(dir: &Path, m: &Path, parallelism: u32) -> u64 {
    let p = parallelism.to_string();
    for attempt in 0..6 {
        let before = completed(dir).last().map_or(0, |c| c.checkpoint_id);
        let wanted = |c: &CheckpointMetadata| c.checkpoint_id > before && c.parallelism == parallelism && has_delta(c);
        let w = Weir::run(m, &["--restore", "latest", "--parallelism", &p], &[]);
        let _ = w.api();
        let deadline = Instant::now() + Duration::from_secs(20);
        while Instant::now() < deadline && !completed(dir).last().is_some_and(wanted) {
            std::thread::sleep(Duration::from_millis(20));
        }
        w.kill9();
        if let Some(newest) = completed(dir).last()
            && wanted(newest)
        {
            return newest.checkpoint_id;
        }
        eprintln!("attempt {attempt}: the newest checkpoint after the kill had no delta; again");
    }
    panic!("no incremental checkpoint with deltas became the newest one at parallelism {parallelism}");
}

/// Loads the checkpoint directory `url` with the restore code (every file of every chain
/// verified) and restores each subtask's `counts` state at `parallelism`; returns the keys.
fn restore_counts(url: &str, parallelism: u32) -> usize {
    let rt = tokio::runtime::Runtime::new().unwrap();
    let loaded = rt
        .block_on(weir_runtime::checkpoint::restore::load_url(url, &Default::default()))
        .unwrap_or_else(|e| panic!("{url} does not restore: {e}"));
    let max_p = loaded.metadata.max_parallelism;
    let mut keys = 0;
    for subtask in 0..parallelism {
        let range = key_group_range(subtask, parallelism, max_p);
        let restore = weir_runtime::checkpoint::restore::operator_restore(Some(&loaded), "counts", Some(range));
        let mut state = HeapKeyedState::<Num>::new(range, None);
        state.restore(restore.key_groups, 0).unwrap();
        keys += state.len();
    }
    keys
}

#[test]
fn kill_9_with_incremental_checkpoints_is_exactly_once() {
    let mut rng = Rng(seed());
    let dir = tempfile::tempdir().unwrap();
    let m = incremental_manifest(dir.path(), 2);
    crash_in_both_commit_windows(&m, &[]);
    for i in 0..3 {
        let w = Weir::run(&m, &["--restore", "latest"], &[]);
        let _ = w.api();
        let ms = rng.range(400, 1800);
        std::thread::sleep(Duration::from_millis(ms));
        eprintln!("kill -9 #{} after {ms} ms", i + 1);
        w.kill9();
    }
    // The last crash comes when the newest checkpoint holds deltas: the final run restores
    // a chain (random kill points alone may always land before the first delta).
    run_until_newest_has_deltas_then_kill(dir.path(), &m, 2);
    Weir::run(&m, &["--restore", "latest"], &[]).wait_ok();
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected_wordcount(),
        "incremental checkpoints, 6 crashes",
    );
}

#[test]
fn rescale_2_to_3_to_1_through_incremental_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    let m = incremental_manifest(dir.path(), 2);
    run_until_newest_has_deltas_then_kill(dir.path(), &m, 2);
    // Restored at 3 from a p=2 chain; the next checkpoints start new chains at p=3.
    run_until_newest_has_deltas_then_kill(dir.path(), &m, 3);
    let newest = completed(dir.path()).pop().unwrap();
    let url = job_dir(dir.path()).join(format!("chk-{}", newest.checkpoint_id));
    let keys_at_3 = restore_counts(&url.display().to_string(), 3);
    assert_eq!(
        restore_counts(&url.display().to_string(), 1),
        keys_at_3,
        "the same keys restored at 1 and at 3"
    );
    assert!(keys_at_3 > 1000, "{keys_at_3} keys");
    Weir::run(&m, &["--restore", "latest", "--parallelism", "1"], &[]).wait_ok();
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected_wordcount(),
        "2 → 3 → 1 through incremental checkpoints",
    );
}

#[test]
fn a_checkpoint_killed_before_its_metadata_is_never_a_base_and_retention_keeps_every_reference() {
    let dir = tempfile::tempdir().unwrap();
    let m = incremental_manifest(dir.path(), 2);
    // Checkpoint 20 (about 4 s in, when the chains hold deltas) is acknowledged, its files
    // uploaded, but `_metadata` is never written.
    const UNCONFIRMED: u64 = 20;
    let env = [("WEIR_FAILPOINT".to_string(), format!("before-metadata:{UNCONFIRMED}"))];
    let (ok, stderr) = Weir::run(&m, &[], &env).wait();
    assert!(
        !ok && stderr.contains(&format!("failpoint before-metadata:{UNCONFIRMED} reached")),
        "{stderr}"
    );
    let orphans = |files: &[String]| -> Vec<String> {
        files
            .iter()
            .filter(|f| f.ends_with(&format!("-chk{UNCONFIRMED}.state")))
            .cloned()
            .collect()
    };
    assert_eq!(
        orphans(&shared_files(dir.path())).len(),
        2,
        "both counts subtasks uploaded checkpoint {UNCONFIRMED}: {:?}",
        shared_files(dir.path())
    );
    let unconfirmed_deltas = orphans(&shared_files(dir.path()))
        .iter()
        .filter(|f| {
            let path = job_dir(dir.path()).join("shared").join(f);
            let file = decode_state_file(f, &std::fs::read(path).unwrap()).unwrap();
            file.key_groups.iter().any(|b| is_delta(&b.data))
        })
        .count();
    assert!(
        unconfirmed_deltas > 0 || completed(dir.path()).iter().any(has_delta),
        "the chains held deltas before the crash"
    );

    let newest = run_until_newest_has_deltas_then_kill(dir.path(), &m, 2);
    assert!(newest > UNCONFIRMED + 1);
    let retained = completed(dir.path());
    assert!(!retained.is_empty());
    for c in &retained {
        for h in c.operators.iter().flat_map(|o| &o.handles) {
            assert!(
                h.chain.iter().all(|l| l.checkpoint_id != UNCONFIRMED),
                "checkpoint {} references the unconfirmed checkpoint {UNCONFIRMED}: {:?}",
                c.checkpoint_id,
                h.chain
            );
            if let Some(first) = h.chain.first() {
                assert!(first.base, "a chain starts with a full base: {:?}", h.chain);
            }
        }
    }
    assert_eq!(
        orphans(&shared_files(dir.path())),
        Vec::<String>::new(),
        "retention collected the unconfirmed checkpoint's files"
    );
    // Every retained checkpoint restores: every file of every chain is there and verifies.
    for c in &retained {
        let url = job_dir(dir.path()).join(format!("chk-{}", c.checkpoint_id));
        assert!(restore_counts(&url.display().to_string(), 2) > 1000);
        let inspect = std::process::Command::new(weir())
            .args(["savepoint", "inspect", "--json"])
            .arg(&url)
            .output()
            .unwrap();
        assert!(inspect.status.success(), "{}", String::from_utf8_lossy(&inspect.stderr));
    }
    Weir::run(&m, &["--restore", "latest"], &[]).wait_ok();
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected_wordcount(),
        "incremental checkpoints after a crash before _metadata",
    );
}
