//! The first native checkpoint after a fast restore (`checkpoint/native_restore.rs`) references
//! the restored table files still in the subtask's store instead of uploading them again, when
//! the run claims the restored checkpoint (`checkpoint/restore_mode.rs`: one of the job's own
//! checkpoints in its checkpoint storage, as after every kill): the output stays exactly-once
//! (compared record by record with the failure-free word count), and a later restore, after
//! retention deleted the restored checkpoint, finds every file referenced across the restore.
//! A restore from a checkpoint in another checkpoint storage claims nothing: its first
//! checkpoint uploads every table file into its own storage.

mod common;
use common::incremental::*;
use common::*;
use std::path::Path;
use std::time::Duration;
use weir_runtime::state::snapshot::{CheckpointMetadata, NativeFile};

/// The word-count job on the disk backend with native checkpoints, its sources at 2,000
/// lines/s (the text lasts about 30 s, so the runs below end by the kill, not the input).
fn slow_native_job(dir: &Path) -> (std::path::PathBuf, Vec<(String, String)>) {
    let (m, env) = incremental_job(dir, 2, "disk-native");
    let yaml = std::fs::read_to_string(&m).unwrap();
    let slowed = yaml.replace("maxRecordsPerSecond: 5000", "maxRecordsPerSecond: 2000");
    assert_ne!(yaml, slowed, "the manifest's rate line changed; update this test");
    std::fs::write(&m, slowed).unwrap();
    (m, env)
}

/// The table files of the `counts` handles of `m`, each with its subtask (local names repeat
/// across subtasks' stores).
fn subtask_table_files(m: &CheckpointMetadata) -> Vec<(u32, NativeFile)> {
    counts_native_files(m)
        .filter(|(_, f)| f.name.ends_with(".sst"))
        .map(|(subtask, f)| (subtask, f.clone()))
        .collect()
}

#[test]
fn the_first_native_checkpoint_after_a_fast_restore_references_the_restored_table_files() {
    let dir = tempfile::tempdir().unwrap();
    let (m, env) = slow_native_job(dir.path());
    let restored = run_until_newest_has_deltas_then_kill(dir.path(), &m, 2, &env);
    let checkpoints = dir.path().join("checkpoints");
    let restored_tables = subtask_table_files(&completed(dir.path()).pop().unwrap());

    // Restored from its own newest checkpoint (a claimed restore): killed once three
    // checkpoints completed after it and retention deleted the restored one.
    let w = Weir::run(&m, &["--restore", "latest"], &env);
    let log_file = w.stderr.clone();
    let restored_metadata = job_dir(dir.path()).join(format!("chk-{restored}/_metadata"));
    let after = watch_completed(&checkpoints, Duration::from_secs(60), |seen| {
        seen.range(restored + 1..).count() >= 3 && !restored_metadata.exists()
    });
    w.kill9();
    let log = std::fs::read_to_string(&log_file).unwrap();
    assert_eq!(
        log.matches(FAST_RESTORE_LINE).count(),
        2,
        "both subtasks restored by the fast path: {log}"
    );
    let (&first_id, first) = after.range(restored + 1..).next().unwrap();
    assert!(is_native(first), "checkpoint {first_id} is native");
    let (uploaded, referenced) = table_files(first);
    eprintln!(
        "checkpoint {first_id}, the first after restoring checkpoint {restored}: uploaded {}, referenced {}",
        files_and_bytes(&uploaded),
        files_and_bytes(&referenced)
    );
    assert!(
        !referenced.is_empty() && referenced.iter().all(|f| f.checkpoint_id <= restored),
        "checkpoint {first_id} references table files of the restored checkpoint {restored}: uploaded {}, \
         referenced {referenced:?}",
        files_and_bytes(&uploaded)
    );

    // No table file of the restored stores that is still there was uploaded again.
    let again: Vec<_> = subtask_table_files(first)
        .into_iter()
        .filter(|(_, f)| f.checkpoint_id == first_id)
        .filter(|(subtask, f)| {
            restored_tables
                .iter()
                .any(|(s, r)| s == subtask && r.name == f.name && r.size == f.size)
        })
        .collect();
    assert!(again.is_empty(), "restored table files uploaded again: {again:?}");

    // Every file the retained checkpoints reference is there after retention deleted the
    // restored checkpoint, and the last run restores from them exactly once.
    for c in completed(dir.path()) {
        let files = c
            .operators
            .iter()
            .flat_map(|o| &o.handles)
            .flat_map(|h| h.native.iter());
        assert_native_files_exist(dir.path(), &c, files.flat_map(|n| &n.files));
    }
    restore_both_stores_and_finish_exactly_once(
        dir.path(),
        &m,
        &env,
        "native checkpoints referencing restored table files across two kills",
    );
}

#[test]
fn a_restore_from_another_checkpoint_storage_uploads_every_table_file() {
    let dir = tempfile::tempdir().unwrap();
    let (m, env) = slow_native_job(dir.path());
    let restored = run_until_newest_has_deltas_then_kill(dir.path(), &m, 2, &env);
    let url = job_dir(dir.path()).join(format!("chk-{restored}"));

    // The same job with another checkpoint storage (and output), restored from that
    // checkpoint: the first checkpoint in the new storage must not reference the files of the
    // old one, whose retention may delete them.
    let other = dir.path().join("other");
    let yaml = std::fs::read_to_string(&m).unwrap();
    let moved = yaml
        .replace(
            &dir.path().join("checkpoints").display().to_string(),
            &other.join("checkpoints").display().to_string(),
        )
        .replace(
            &dir.path().join("output").display().to_string(),
            &other.join("output").display().to_string(),
        );
    assert_ne!(yaml, moved);
    let m2 = dir.path().join("other.yaml");
    std::fs::write(&m2, moved).unwrap();
    let w = Weir::run(&m2, &["--restore", &url.display().to_string()], &env);
    let log_file = w.stderr.clone();
    let after = watch_completed(&other.join("checkpoints"), Duration::from_secs(60), |seen| {
        !seen.is_empty()
    });
    w.kill9();
    let log = std::fs::read_to_string(&log_file).unwrap();
    assert_eq!(log.matches(FAST_RESTORE_LINE).count(), 2, "the fast path: {log}");
    let (&first_id, first) = after.iter().next().unwrap();
    assert!(first_id > restored && is_native(first), "checkpoint {first_id}");
    let (uploaded, referenced) = table_files(first);
    assert!(
        referenced.is_empty() && !uploaded.is_empty(),
        "checkpoint {first_id} in the other storage uploads every table file: uploaded {}, referenced {referenced:?}",
        files_and_bytes(&uploaded)
    );
}
