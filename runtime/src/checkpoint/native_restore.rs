//! The fast restore of a native checkpoint of the disk backend (issue 12): when a subtask of
//! this process restores a native handle whose key-group range is exactly its own (same
//! parallelism and max parallelism: every restart after a failure, every upgrade without
//! rescale), the handle's downloaded files **become the subtask's store**, as Flink's RocksDB
//! backend restores an incremental checkpoint of the same key-group range
//! (`RocksIncrementalRestoreOperation`, "restoreWithoutRescaling"): downloaded next to the
//! store's directory, renamed into it, and opened writable with the subtask's own options. No
//! key group is re-encoded as blocks, and the early-created empty store for that directory
//! (`state/disk_store.rs`) is discarded.
//!
//! Which path a handle takes is decided by [`native_restore_path`] (a pure function); every
//! other case (a rescale, the heap backend, another max parallelism, a process that does not
//! run the subtask) takes the existing path (`checkpoint/native_upload.rs`, [`native_blocks`]):
//! the files are opened read-only and encoded as key-group blocks.
//!
//! **Same semantics.** Each stored value starts with its write time (`state/disk.rs`), so the
//! restored store holds every entry with the write time it had, as the blocks path does
//! (it encodes with a TTL that expires nothing and lets the restoring step's TTL drop expired
//! entries): reads and snapshots of the restoring step apply its own TTL to those times, and
//! incremental cleanup removes expired entries later.
//!
//! **The first checkpoint after a fast restore** references the restored table files still in
//! the store (same name and size, `tables_to_upload`) instead of uploading them again, when the
//! run claims the restored checkpoint (`checkpoint/restore_mode.rs`: one of this job's own
//! checkpoints in the directory new checkpoints go to, as after every failover): the subtask's
//! record of uploaded table files (`UploadedTables`) starts with the restored handle's
//! ([`RestoredStore::table_files`]) under the restored checkpoint's id, which the coordinator
//! names as the confirmed checkpoint in the first barriers. Otherwise (a checkpoint from
//! another directory, which another job's retention may delete) the barriers name none and
//! every file is uploaded. The blocks path builds a new store whose files are all new: nothing
//! to reference. Savepoints are never native (`state/incremental.rs`, `uses_native_form`) and
//! stay self-contained.
//!
//! **Cleanup.** The download directory is a sibling of the store's directory inside the run
//! directory, whose owner file lets a later process sweep it after a `kill -9`
//! (`state/local_dir.rs`).
//!
//! [`native_blocks`]: crate::checkpoint::native_upload::native_blocks

use crate::checkpoint::native_upload::{PARALLEL_TRANSFERS, download_one};
use crate::checkpoint::restore::RestoreError;
use crate::job::{Job, OperatorKind};
use crate::state::disk::DiskStateOptions;
use crate::state::key_group::{KeyGroupRange, key_group_range};
use crate::state::local_dir;
use crate::state::snapshot::{NativeFile, NativeFiles};
use crate::state::ttl::{StateTtl, expired_through};
use crate::storage::Store;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// The keyed stores of the subtasks this process runs, as a restore needs them to decide
/// where a native handle goes ([`native_restore_path`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LocalKeyedStores {
    /// The job's parallelism.
    pub parallelism: u32,
    /// `spec.maxParallelism` when the job sets it (`None`: the restore point's is adopted).
    pub max_parallelism_set: Option<u32>,
    /// `(uid, subtask)` of every subtask of a step whose keyed state is one disk store per
    /// subtask (a keyed aggregation) that this process runs: only these stores are ever
    /// opened here, so only they are restored into.
    pub stores: Vec<(String, u32)>,
    /// The run directory (`state/local_dir.rs`) holding the subtasks' stores.
    pub run_dir: PathBuf,
    /// The store options of the disk backend; `None`: the job keeps keyed state on heap.
    pub disk: Option<DiskStateOptions>,
    /// The steps with a `ttl`, by uid: a native handle written without one restores into
    /// them as blocks without write times, never as the store ([`NativeFiles::write_times`]);
    /// one whose expired keys the `ttl` now would keep restores as blocks that leave them out
    /// ([`StateHandle::expired_through_ms`]).
    ///
    /// [`StateHandle::expired_through_ms`]: crate::state::snapshot::StateHandle::expired_through_ms
    pub ttl_steps: Vec<(String, StateTtl)>,
    /// This process needs no keyed state at all (a cluster's coordinator: it checks the
    /// snapshot, commits restored sinks and reads source positions, all operator state), so
    /// the files of incremental keyed handles (chains, native stores) are not even read.
    pub without_keyed_state: bool,
}

impl LocalKeyedStores {
    /// No subtask (a coordinator, a tool reading a snapshot): every native handle is restored
    /// as blocks.
    pub fn none() -> LocalKeyedStores {
        LocalKeyedStores::default()
    }

    /// A process that runs no subtask and needs no keyed state (a cluster's coordinator):
    /// incremental keyed handles are skipped, not downloaded
    /// ([`LocalKeyedStores::without_keyed_state`]).
    pub fn without_keyed_state() -> LocalKeyedStores {
        LocalKeyedStores {
            without_keyed_state: true,
            ..LocalKeyedStores::default()
        }
    }

    /// The stores of `job`'s keyed aggregations in the tasks this process runs (`runs_task`
    /// of a task's global index, `exec::TaskSpec::index`) under the run directory `run_dir`
    /// (disk backend only; on heap [`LocalKeyedStores::disk`] is `None`).
    pub fn of_job(job: &Job, run_dir: &Path, runs_task: impl Fn(usize) -> bool) -> LocalKeyedStores {
        let disk = match job.spec.state_backend {
            crate::job::StateBackend::Heap => None,
            crate::job::StateBackend::Disk => Some(job.spec.disk_state_options().unwrap_or_default()),
        };
        let graph = crate::exec::plan::plan_graph(job);
        let mut stores = Vec::new();
        let ttl_steps = job
            .operators
            .iter()
            .filter_map(|op| match &op.kind {
                OperatorKind::Aggregate { ttl: Some(ttl), .. } => Some((op.uid.clone(), StateTtl::new(*ttl))),
                _ => None,
            })
            .collect();
        for task in crate::exec::task_specs(job).into_iter().filter(|t| runs_task(t.index)) {
            for &operator in &graph[task.stage].operators {
                let op = &job.operators[operator];
                if matches!(op.kind, OperatorKind::Aggregate { .. }) {
                    stores.push((op.uid.clone(), task.subtask));
                }
            }
        }
        LocalKeyedStores {
            parallelism: job.parallelism,
            max_parallelism_set: job.spec.max_parallelism,
            stores,
            run_dir: run_dir.to_path_buf(),
            disk,
            without_keyed_state: false,
            ttl_steps,
        }
    }

    /// The local directory a native handle restored as blocks is downloaded under
    /// (`native_upload::native_blocks`): the state root the run directory is in (`--state-dir`,
    /// `WEIR_STATE_DIR` or the default, `state/local_dir.rs::run_dir`), so the download lands on
    /// the volume sized for keyed state, as the fast path's does; `env_root` (the variable's
    /// value) or the default root only when no run directory is known (a tool reading a
    /// snapshot). A rescale of a large native checkpoint downloaded into the system's temp
    /// directory before, whatever `--state-dir` said.
    pub fn download_root(&self, env_root: Option<&Path>) -> PathBuf {
        match self.run_dir.parent() {
            Some(root) if !root.as_os_str().is_empty() => root.to_path_buf(),
            _ => local_dir::root(env_root),
        }
    }
}

/// Where a native handle's files go on restore.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NativeRestorePath {
    /// They become the store of subtask `subtask` of this process (the fast path).
    IntoStore {
        /// The subtask whose key-group range is the handle's.
        subtask: u32,
    },
    /// Opened read-only and encoded as key-group blocks (any backend, any parallelism).
    AsBlocks,
}

/// Where the native handle `native` of step `uid`, in a snapshot of max parallelism
/// `snapshot_max_parallelism`, restored at `now_ms` (ms since the Unix epoch), goes: into the
/// store of the subtask of `uid` in `stores` whose key-group range is exactly the handle's
/// when the job keeps keyed state on disk, the max parallelism stays (not set by the job, or
/// set to the snapshot's), the store's write times mean to the step what they meant when it
/// was written (the handle written with a `ttl`, or the step without one now:
/// [`NativeFiles::write_times`]), and the step's `ttl` now expires every key that had expired
/// when the handle was written (`expired_through_ms`, the handle's
/// [`StateHandle::expired_through_ms`]: the store still holds such keys, and a longer `ttl`,
/// or none, would bring them back); else as blocks, which leave those keys out. Ranges are
/// Flink's key-group assignment ([`key_group_range`]).
///
/// [`StateHandle::expired_through_ms`]: crate::state::snapshot::StateHandle::expired_through_ms
pub fn native_restore_path(
    uid: &str,
    native: &NativeFiles,
    expired_through_ms: Option<u64>,
    snapshot_max_parallelism: u32,
    stores: &LocalKeyedStores,
    now_ms: u64,
) -> NativeRestorePath {
    let handle_range = native.key_group_range;
    let same_max_parallelism = stores.max_parallelism_set.is_none_or(|m| m == snapshot_max_parallelism);
    let ttl_now = stores
        .ttl_steps
        .iter()
        .find(|(step, _)| step == uid)
        .map(|(_, ttl)| *ttl);
    let ttl_added = !native.write_times && ttl_now.is_some();
    let expired_kept = expired_through_ms
        .is_some_and(|then| expired_through(ttl_now, now_ms).is_none_or(|expires_now| expires_now < then));
    if stores.disk.is_none() || !same_max_parallelism || ttl_added || expired_kept {
        return NativeRestorePath::AsBlocks;
    }
    let subtask = stores
        .stores
        .iter()
        .filter(|(u, _)| u == uid)
        .map(|&(_, s)| s)
        .find(|&s| {
            s < stores.parallelism && key_group_range(s, stores.parallelism, snapshot_max_parallelism) == handle_range
        });
    match subtask {
        Some(subtask) => NativeRestorePath::IntoStore { subtask },
        None => NativeRestorePath::AsBlocks,
    }
}

/// A native handle restored into a subtask's store directory by the fast path: the subtask
/// of step `uid` owning `range` opens the store in `dir` instead of an empty one.
#[derive(Clone, Debug, PartialEq)]
pub struct RestoredStore {
    /// The step's uid.
    pub uid: String,
    /// The key groups of the store (the subtask's range).
    pub range: KeyGroupRange,
    /// The subtask's store directory, holding the handle's files.
    pub dir: PathBuf,
    /// Entries the store holds (the handle's count in `_metadata`, expired ones included).
    pub entries: u64,
    /// The restored checkpoint's id.
    pub checkpoint_id: u64,
    /// The handle's table files by their name in the store (`000012.sst`), each as
    /// `_metadata` records it (its path in `shared/` and the checkpoint that uploaded it): what
    /// the subtask's first checkpoint references instead of uploading when the coordinator
    /// names the restored checkpoint as the confirmed one (a claimed restore,
    /// `checkpoint/restore_mode.rs`) and the store still holds the file with the same size.
    pub table_files: BTreeMap<String, NativeFile>,
}

/// The table file among `files` that RocksDB's `problem` (a store that does not open from a
/// native checkpoint's files) names by its local path (`.../counts-0/000008.sst`), if any.
pub fn damaged_table_file<'a>(
    problem: &str,
    files: impl IntoIterator<Item = &'a NativeFile>,
) -> Option<&'a NativeFile> {
    files
        .into_iter()
        .filter(|f| crate::state::disk_native::is_table_file(&f.name))
        .find(|f| problem.contains(&format!("/{}", f.name)))
}

/// What `file` (named by [`damaged_table_file`]) is in the checkpoint storage, for an error:
/// its path there and the checkpoint that uploaded it. It passed its size and checksum check,
/// so it was already damaged when it was uploaded.
pub fn damaged_table_file_note(file: &NativeFile) -> String {
    format!(
        "`{}` is the checkpoint's file `{}` (uploaded by checkpoint {}), whose size and checksum match \
         its `_metadata`: it was damaged before it was uploaded, and every checkpoint that references it \
         restores the same bytes",
        file.name,
        file.file.trim_start_matches("../"),
        file.checkpoint_id
    )
}

/// The error of a store that does not open from the files a native checkpoint's fast restore
/// put in its directory, when RocksDB's `problem` names one of `restored`'s table files: the
/// same problem, which file of the checkpoint storage that is ([`damaged_table_file_note`]),
/// and what to do. `None` when it names none of them (the error is then kept as it is).
pub fn unopenable_store_problem(problem: &str, restored: &RestoredStore) -> Option<String> {
    let file = damaged_table_file(problem, restored.table_files.values())?;
    Some(format!(
        "{problem}. {}. Options: restore a snapshot that does not reference it with `--restore <url>` \
         (a savepoint, or a checkpoint older than {}; `weir checkpoints list` shows them) after removing \
         the output committed after it; or start without state with `--restore none`",
        damaged_table_file_note(file),
        file.checkpoint_id
    ))
}

/// The table files of `native` by their name in the store (what a subtask whose store was
/// restored from it may reference, [`RestoredStore::table_files`]); the private files
/// (`MANIFEST-*`, `CURRENT`, `OPTIONS-*`) are always uploaded again.
pub fn restored_table_files(native: &NativeFiles) -> BTreeMap<String, NativeFile> {
    native
        .files
        .iter()
        .filter(|f| crate::state::disk_native::is_table_file(&f.name))
        .map(|f| (f.name.clone(), f.clone()))
        .collect()
}

/// Logs a native handle restored by the fast path into the store of `subtask` (what `weir run`
/// and workers print; tests count these lines).
pub fn log_restored(restored: &RestoredStore, subtask: u32) {
    tracing::info!(
        target: "weir",
        "operator {} subtask {subtask}: native checkpoint restored into the subtask's store ({} table files \
         of checkpoint {}, key groups {}..={})",
        restored.uid,
        restored.table_files.len(),
        restored.checkpoint_id,
        restored.range.start,
        restored.range.end
    );
}

/// Native handles restored by the fast path in this process (for tests and the log).
static RESTORED_INTO_STORES: AtomicU64 = AtomicU64::new(0);

/// How many native handles this process restored by the fast path so far.
pub fn restored_into_stores() -> u64 {
    RESTORED_INTO_STORES.load(Ordering::Relaxed)
}

/// The directory the fast path downloads the files of the store in `store_dir` into before
/// renaming it there: a sibling in the same run directory (same file system, swept with it).
pub fn store_download_dir(store_dir: &Path) -> PathBuf {
    let mut name = store_dir.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".download");
    store_dir.with_file_name(name)
}

/// A local file system failure at `path` while restoring (`what` failed): a storage I/O error
/// naming the local path, never a corrupt restore point (`RestoreError::is_permanent` treats
/// it as the other I/O errors of a restore).
pub(crate) fn local_io_error(path: &Path, what: &str, e: std::io::Error) -> RestoreError {
    RestoreError::Storage(crate::storage::StorageError::Io {
        path: path.display().to_string(),
        source: std::io::Error::new(e.kind(), format!("{what}: {e}")),
    })
}

/// The fast path for the native handle `native` of step `uid` (entries `entries`): its files
/// downloaded from `store` (paths relative to `dir`) and verified, then made the store of
/// `subtask` in `stores`' run directory (the early-created empty store there is discarded).
/// The returned [`RestoredStore::checkpoint_id`] is 0: the caller sets the snapshot's and logs
/// the restore ([`log_restored`]).
/// Errors: a file is missing, corrupt or outside the store; the local directory cannot be
/// written.
pub async fn restore_into_store(
    store: &Store,
    dir: &str,
    uid: &str,
    subtask: u32,
    native: &NativeFiles,
    entries: u64,
    stores: &LocalKeyedStores,
) -> Result<RestoredStore, RestoreError> {
    use futures::{StreamExt, TryStreamExt};
    let store_dir = local_dir::store_dir(&stores.run_dir, uid, subtask);
    let download = store_download_dir(&store_dir);
    // A local disk's failure (full, not writable) is not the checkpoint's: it must not be
    // reported as a corrupt restore point (which refuses it for good and advises an older one),
    // but as the local path's I/O error, which restarts the job like a failed download.
    let local_err = |path: &Path, what: &str, e: std::io::Error| -> RestoreError { local_io_error(path, what, e) };
    if download.exists() {
        std::fs::remove_dir_all(&download).map_err(|e| local_err(&download, "cannot remove an earlier download", e))?;
    }
    std::fs::create_dir_all(&download).map_err(|e| {
        local_err(
            &download,
            "cannot create the directory to download a native checkpoint into",
            e,
        )
    })?;
    let downloaded = futures::stream::iter(&native.files)
        .map(|f| download_one(store, dir, f, &download))
        .buffer_unordered(PARALLEL_TRANSFERS)
        .try_collect::<Vec<()>>()
        .await;
    if let Err(e) = downloaded {
        let _ = std::fs::remove_dir_all(&download);
        return Err(e);
    }
    // The empty store created early for this directory is dropped (its creation waited for:
    // dropping it removes the directory), then the download takes its place.
    let (moved_from, moved_to) = (download.clone(), store_dir.clone());
    tokio::task::spawn_blocking(move || {
        crate::state::disk_store::discard_early_at(&moved_to);
        if moved_to.exists() {
            std::fs::remove_dir_all(&moved_to)?;
        }
        std::fs::rename(&moved_from, &moved_to)
    })
    .await
    .map_err(|e| RestoreError::Incompatible(crate::exec::panics::join_failure("the native restore", e)))?
    .map_err(|e| {
        local_err(
            &store_dir,
            "cannot move a downloaded native checkpoint into the store's directory",
            e,
        )
    })?;
    RESTORED_INTO_STORES.fetch_add(1, Ordering::Relaxed);
    Ok(RestoredStore {
        uid: uid.to_string(),
        range: native.key_group_range,
        dir: store_dir,
        entries,
        checkpoint_id: 0,
        table_files: restored_table_files(native),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn stores(disk: bool, max_parallelism_set: Option<u32>, subtasks: &[u32]) -> LocalKeyedStores {
        LocalKeyedStores {
            parallelism: 2,
            max_parallelism_set,
            stores: subtasks.iter().map(|&s| ("counts".to_string(), s)).collect(),
            run_dir: PathBuf::from("/state/job-run"),
            disk: disk.then(DiskStateOptions::default),
            without_keyed_state: false,
            ttl_steps: vec![],
        }
    }

    /// A rescale's download goes under the run directory's state root (`--state-dir`), not the
    /// variable's or the temp directory, whenever the process has a run directory.
    #[test]
    fn where_a_native_handle_restored_as_blocks_is_downloaded_table() {
        let env = Some(Path::new("/from-env"));
        let with_run = |run_dir: &str| LocalKeyedStores {
            run_dir: PathBuf::from(run_dir),
            ..LocalKeyedStores::none()
        };
        // (what, run directory, variable, root)
        let cases: [(&str, &str, Option<&Path>, PathBuf); 5] = [
            (
                "--state-dir",
                "/volume/state/job-run",
                env,
                PathBuf::from("/volume/state"),
            ),
            (
                "--state-dir, no variable",
                "/volume/state/job-run",
                None,
                PathBuf::from("/volume/state"),
            ),
            ("relative --state-dir", "state/job-run", env, PathBuf::from("state")),
            ("no run directory: the variable", "", env, PathBuf::from("/from-env")),
            ("no run directory, no variable", "", None, local_dir::root(None)),
        ];
        for (what, run_dir, env_root, root) in cases {
            assert_eq!(with_run(run_dir).download_root(env_root), root, "{what}");
        }
    }

    /// A store that does not open names the checkpoint's file behind the local table file
    /// RocksDB's error names (helper-101: the scratch path alone told nothing), and no file
    /// when the error names none of the restored table files.
    #[test]
    fn an_unopenable_store_names_the_checkpoints_file_table() {
        let table = NativeFile {
            file: "../shared/counts-0-chk7-000008.sst".into(),
            name: "000008.sst".into(),
            checkpoint_id: 7,
            size: 10,
            crc32: 1,
        };
        let restored = RestoredStore {
            uid: "counts".into(),
            range: key_group_range(0, 1, 128),
            dir: PathBuf::from("/state/job-run/counts-0"),
            entries: 1,
            checkpoint_id: 9,
            table_files: [(table.name.clone(), table)].into(),
        };
        // (RocksDB's problem, whether the message names the checkpoint's file)
        let rows = [
            (
                "cannot open the restored store: Corruption: bad block contents in file /state/job-run/counts-0/000008.sst",
                true,
            ),
            (
                "cannot open the restored store: Corruption: /state/job-run/counts-0/000080.sst",
                false,
            ),
            (
                "cannot open the restored store: IO error: No space left on device",
                false,
            ),
        ];
        for (problem, names) in rows {
            let said = unopenable_store_problem(problem, &restored);
            assert_eq!(said.is_some(), names, "{problem}");
            if let Some(said) = said {
                assert!(said.starts_with(problem), "{said}");
                assert!(
                    said.contains("`shared/counts-0-chk7-000008.sst` (uploaded by checkpoint 7)")
                        && said.contains("--restore none"),
                    "{said}"
                );
            }
        }
    }

    /// The fast path only for a disk store whose subtask here owns exactly the handle's key
    /// groups at the same max parallelism, and whose write times mean what they meant when it
    /// was written; everything else as blocks.
    #[test]
    fn which_path_a_native_handle_takes_table() {
        let first_of_2 = key_group_range(0, 2, 128);
        let second_of_2 = key_group_range(1, 2, 128);
        let first_of_3 = key_group_range(0, 3, 128);
        let into = |subtask| NativeRestorePath::IntoStore { subtask };
        let minute = StateTtl::new(std::time::Duration::from_secs(60));
        let with_ttl = |here: LocalKeyedStores| LocalKeyedStores {
            ttl_steps: vec![("counts".to_string(), minute)],
            ..here
        };
        // (what, uid, handle range, snapshot max parallelism, stores here, path); handles
        // written without `ttl` unless the row says so
        let mut rows: Vec<(&str, &str, KeyGroupRange, u32, LocalKeyedStores, NativeRestorePath)> = vec![
            (
                "restart, same parallelism",
                "counts",
                first_of_2,
                128,
                stores(true, None, &[0, 1]),
                into(0),
            ),
            (
                "the second subtask's handle",
                "counts",
                second_of_2,
                128,
                stores(true, None, &[0, 1]),
                into(1),
            ),
            (
                "max parallelism set to the snapshot's",
                "counts",
                second_of_2,
                128,
                stores(true, Some(128), &[1]),
                into(1),
            ),
            (
                "a worker without the subtask",
                "counts",
                second_of_2,
                128,
                stores(true, None, &[0]),
                NativeRestorePath::AsBlocks,
            ),
            (
                "rescale 3 -> 2: ranges differ",
                "counts",
                first_of_3,
                128,
                stores(true, None, &[0, 1]),
                NativeRestorePath::AsBlocks,
            ),
            (
                "heap backend",
                "counts",
                first_of_2,
                128,
                stores(false, None, &[0, 1]),
                NativeRestorePath::AsBlocks,
            ),
            (
                "another max parallelism",
                "counts",
                first_of_2,
                128,
                stores(true, Some(256), &[0, 1]),
                NativeRestorePath::AsBlocks,
            ),
            (
                "a step without a disk store",
                "other",
                first_of_2,
                128,
                stores(true, None, &[0, 1]),
                NativeRestorePath::AsBlocks,
            ),
            (
                "no subtask here (a coordinator)",
                "counts",
                first_of_2,
                128,
                LocalKeyedStores::none(),
                NativeRestorePath::AsBlocks,
            ),
            (
                "ttl added since the handle was written: its times are no TTL times",
                "counts",
                first_of_2,
                128,
                with_ttl(stores(true, None, &[0, 1])),
                NativeRestorePath::AsBlocks,
            ),
        ];
        let handle = |range, write_times| NativeFiles {
            key_group_range: range,
            files: vec![],
            write_times,
        };
        let now = 10_000_000;
        for (what, uid, range, max_p, here, want) in rows.drain(..) {
            assert_eq!(
                native_restore_path(uid, &handle(range, false), None, max_p, &here, now),
                want,
                "{what}"
            );
        }
        // Written with `ttl` (a minute) at `written_at`: the store as it is when the step's
        // `ttl` now expires every key that had expired then; as blocks, which leave those keys
        // out, when it would keep some (a longer `ttl` soon after, or none).
        let with = |ttl: Option<u64>| LocalKeyedStores {
            ttl_steps: ttl
                .map(|s| ("counts".to_string(), StateTtl::new(std::time::Duration::from_secs(s))))
                .into_iter()
                .collect(),
            ..stores(true, None, &[0, 1])
        };
        let written_at = now - 5_000;
        let then = expired_through(Some(minute), written_at);
        // (what, ttl now in seconds, path)
        let rows = [
            ("same ttl", Some(60), into(0)),
            ("shorter ttl", Some(30), into(0)),
            ("ttl removed", None, NativeRestorePath::AsBlocks),
            (
                "a longer ttl keeps keys that had expired",
                Some(3_600),
                NativeRestorePath::AsBlocks,
            ),
            (
                "a ttl 5 s longer, 5 s later: what it keeps had not expired",
                Some(65),
                into(0),
            ),
            ("a ttl 6 s longer, 5 s later", Some(66), NativeRestorePath::AsBlocks),
        ];
        for (what, ttl, want) in rows {
            let got = native_restore_path("counts", &handle(first_of_2, true), then, 128, &with(ttl), now);
            assert_eq!(got, want, "{what}");
        }
        // A handle without the bound (written before it was recorded): as it was.
        let got = native_restore_path("counts", &handle(first_of_2, true), None, 128, &with(None), now);
        assert_eq!(got, into(0), "no bound recorded");
    }

    /// What a store restored by the fast path may reference: the handle's table files by their
    /// name in the store, as `_metadata` records them (path in `shared/`, uploading
    /// checkpoint); never the private files, which every checkpoint uploads.
    #[test]
    fn a_restored_stores_referenceable_files_are_its_table_files() {
        let file = |name: &str, by: u64| NativeFile {
            file: if name.ends_with(".sst") {
                format!("../shared/counts-0-chk{by}-{name}")
            } else {
                format!("counts-0-{name}")
            },
            name: name.to_string(),
            checkpoint_id: by,
            size: 10,
            crc32: 1,
        };
        let native = NativeFiles {
            key_group_range: key_group_range(0, 2, 128),
            files: vec![
                file("000008.sst", 3),
                file("000011.sst", 5),
                file("CURRENT", 5),
                file("MANIFEST-000010", 5),
                file("OPTIONS-000007", 5),
            ],
            write_times: false,
        };
        let tables = restored_table_files(&native);
        assert_eq!(tables.keys().collect::<Vec<_>>(), ["000008.sst", "000011.sst"]);
        assert_eq!(
            tables["000008.sst"],
            file("000008.sst", 3),
            "kept as _metadata recorded it"
        );
    }
}
