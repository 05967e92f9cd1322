//! One running coordinator per job and local checkpoint storage. Two `weir run`s of one job in
//! one checkpoint directory (a second terminal, a script started twice) pick the same next
//! checkpoint ids and write the same `chk-<n>/` files: the `_metadata` conditional write lets
//! only one commit each id, but the other's state files can land over the committed ones
//! (helper-99, 2026-12-06: the healthy first run failed and its files made the second run's
//! `chk-3` corrupt). A coordinator with a local checkpoint storage therefore holds an exclusive
//! lock on `<storage>/<job>/_coordinator/run.lock` for as long as it runs, and a second one is
//! refused before it restores or writes anything. The operating system releases the lock when
//! the process ends, also by kill -9, so a restart after a crash is never refused. S3 storage has
//! no such lock: on Kubernetes the operator runs one coordinator per job, and a coordinator's
//! epoch fence (`cluster/fence.rs`) stops an older one from committing.

use std::fs::{File, OpenOptions, TryLockError};
use std::io::{Read, Seek, Write};
use std::path::{Path, PathBuf};

/// The lock file of `job` in the local checkpoint storage `dir`.
pub fn lock_path(dir: &Path, job: &str) -> PathBuf {
    dir.join(job).join("_coordinator").join("run.lock")
}

/// An exclusive lock on a job's local checkpoint storage, held until dropped.
#[derive(Debug)]
pub struct RunLock {
    _file: File,
}

impl RunLock {
    /// Takes the lock of `job` in the local checkpoint storage `dir` and records `holder` in it
    /// (`pid 1234, run 3f2a…`), which a refused process names. `field` names the storage's
    /// setting in errors (`spec.checkpointing.storage`, `--checkpoint-dir`).
    ///
    /// Errors: another process holds the lock (the message names it and says what to do), or
    /// the lock file cannot be created.
    pub fn acquire(dir: &Path, job: &str, holder: &str, field: &str) -> Result<RunLock, String> {
        let path = lock_path(dir, job);
        let parent = path.parent().expect("the lock file has a parent");
        std::fs::create_dir_all(parent).map_err(|e| format!("{field}: cannot create {}: {e}", parent.display()))?;
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(|e| format!("{field}: cannot open {}: {e}", path.display()))?;
        match file.try_lock() {
            Ok(()) => {}
            Err(TryLockError::WouldBlock) => {
                let mut held_by = String::new();
                let _ = file.read_to_string(&mut held_by);
                let held_by = held_by.trim();
                let held_by = if held_by.is_empty() { "another process" } else { held_by };
                return Err(format!(
                    "{field}: job `{job}` is already running with its checkpoints in {} ({held_by} holds {}): \
                     two runs of one job in one checkpoint storage would write the same checkpoints. Stop \
                     that run first (Ctrl-C, `weir cancel`, or `weir savepoint trigger --stop` to restore \
                     from its savepoint), or give this run a checkpoint storage of its own (`--checkpoint-dir`)",
                    dir.join(job).display(),
                    path.display()
                ));
            }
            Err(TryLockError::Error(e)) => return Err(format!("{field}: cannot lock {}: {e}", path.display())),
        }
        // Best effort: the lock, not this text, is what excludes the other process.
        let _ = file
            .set_len(0)
            .and_then(|()| file.rewind())
            .and_then(|()| file.write_all(format!("{holder}\n").as_bytes()));
        Ok(RunLock { _file: file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The second holder is refused naming the first and what to do; after the first is
    /// dropped (as at process exit) the lock is free again. Another job in the same storage
    /// has its own lock.
    #[test]
    fn one_holder_per_job_and_storage() {
        let dir = tempfile::tempdir().unwrap();
        let field = "spec.checkpointing.storage";
        let first = RunLock::acquire(dir.path(), "wordcount", "pid 1, run aaaa", field).unwrap();
        let refused = RunLock::acquire(dir.path(), "wordcount", "pid 2, run bbbb", field).unwrap_err();
        for part in [
            "spec.checkpointing.storage: job `wordcount` is already running",
            "pid 1, run aaaa holds",
            "--checkpoint-dir",
        ] {
            assert!(refused.contains(part), "{part}: {refused}");
        }
        let other_job = RunLock::acquire(dir.path(), "sessions", "pid 2, run bbbb", field);
        assert!(other_job.is_ok(), "{other_job:?}");
        drop(first);
        RunLock::acquire(dir.path(), "wordcount", "pid 3, run cccc", field).expect("free after the holder ended");
    }
}
