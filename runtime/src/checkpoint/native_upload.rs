//! Native checkpoints of the disk backend in the checkpoint store (issue 12, Flink's
//! incremental RocksDB checkpoints, `RocksIncrementalSnapshotStrategy`): the upload of a
//! subtask's local RocksDB checkpoint (`state/disk_native.rs`) and the download a restore reads.
//!
//! **Upload.** A table file (`*.sst`, immutable once written) that the *confirmed* checkpoint
//! (the one [`Barrier::incremental`] names, whose `_metadata` is written) uploaded from this
//! store is referenced, not uploaded again; every other table file is uploaded into the job's
//! `shared/` directory under a name carrying this checkpoint's id
//! ([`shared_table_file`]), so retention's orphan rule dates it (`checkpoint/shared_files.rs`).
//! Files of an unconfirmed checkpoint are never reused (it may never complete; Flink's
//! SharedStateRegistry registers only completed checkpoints for the same reason). The small
//! private files (`MANIFEST-*`, `CURRENT`, `OPTIONS-*`) go into the checkpoint's own directory.
//! Retention keeps every shared file a retained `_metadata` references, so a referenced table
//! file outlives every checkpoint that lists it.
//!
//! **Local stores: links, not copies.** A checkpoint store on the file system of the state's
//! directory (`weir run` with a local checkpoint directory) takes each file as a hard link
//! ([`ObjectStore::link_from_local`](crate::storage::ObjectStore::link_from_local)), as
//! RocksDB's own checkpoints and Flink's local recovery take table files: a table file is
//! never written again once RocksDB finished it (it is deleted, never changed), so the object
//! and the store's file may share their bytes. Only its checksum is read. A restore links a
//! table file back the same way (`ObjectStore::link_to_local`), then verifies it as a
//! downloaded one. Another file system, or any link refused, copies as before.
//!
//! **Restore** ([`native_blocks`]): the handle's files are streamed into a local scratch
//! directory (sizes and checksums verified on the way, `download_one`), opened read-only,
//! and the store's key groups encoded as the heap backend's blocks, which the existing restore
//! path (lazy restore, heap or disk, any parallelism) takes as it takes a state file's. A
//! subtask owning exactly the handle's key groups on the disk backend takes the fast path
//! instead (`checkpoint/native_restore.rs`): the files become its store.
//!
//! [`Barrier::incremental`]: crate::checkpoint::Barrier::incremental

use crate::checkpoint::Barrier;
use crate::operators::TaskError;
use crate::state::disk::DiskStateOptions;
use crate::state::disk_native::{
    LocalCheckpoint, LocalFile, blocks_of_native_store, each_block_of_native_store, is_table_file,
};
use crate::state::incremental::{resolve_relative, shared_table_file};
use crate::state::snapshot::{FormatError, FormatFault, KeyGroupBlock, NativeFile, NativeFiles};
use crate::state::ttl::StateTtl;
use crate::storage::Store;
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

/// Files uploaded or downloaded at the same time.
pub const PARALLEL_TRANSFERS: usize = 8;

/// Memory the files uploading at once may hold in all, MiB: a multipart upload holds its size,
/// at most a part being filled and the parts in flight of `state_upload::upload_file`
/// ([`upload_mib`]); a put streamed from its file 1 MiB.
pub const UPLOAD_BUDGET_MIB: u32 = 48;

/// The share of [`UPLOAD_BUDGET_MIB`] an upload of `file_bytes` holds, MiB: its size rounded
/// up, at most one part being filled plus the bytes of the parts in flight
/// (`part_schedule::STATE_FILE_PARTS`: 8 + 32 MiB), at least 1.
pub fn upload_mib(file_bytes: u64) -> u32 {
    let schedule = crate::checkpoint::part_schedule::STATE_FILE_PARTS;
    let most = (schedule.bytes_in_flight as u64 + crate::storage::MULTIPART_PART_SIZE as u64) >> 20;
    (file_bytes.div_ceil(1 << 20)).clamp(1, most.min(UPLOAD_BUDGET_MIB as u64)) as u32
}

/// Whether a native file of `file_bytes` is put in one request (up to
/// [`crate::storage::MULTIPART_THRESHOLD`], as `ObjectStore::put` sends a raw upload of it;
/// streamed from the file, `ObjectStore::put_file`, holding 1 MiB of the budget), rather than
/// streamed in multipart parts. A file of 9 MiB streamed took a multipart upload
/// of two parts (four requests, on the local store a staging file and one `fsync` more) where
/// a put takes one: the final checkpoint's upload on S3 (moto) took 2.7-3.3x a raw upload of
/// the same files (docs/runtime/state-backends-log.md, "nativecost").
pub fn uploads_whole(file_bytes: u64) -> bool {
    file_bytes <= crate::storage::MULTIPART_THRESHOLD as u64
}

/// The order native files upload in, by `(size in bytes, name)`: largest first (the largest
/// is the critical path; the small ones fill in beside it), then by name (deterministic).
pub fn upload_order(a: (u64, &str), b: (u64, &str)) -> std::cmp::Ordering {
    b.0.cmp(&a.0).then_with(|| a.1.cmp(b.1))
}

/// The table files a subtask's checkpoints uploaded, by checkpoint id, each by its name in the
/// store's directory: what a later checkpoint may reference instead of uploading (the ones of
/// the confirmed checkpoint only). Shared between the task (which confirms) and the encoder
/// (which records); memory: the table files of the checkpoints not yet confirmed and of the
/// confirmed one.
#[derive(Clone, Default)]
pub struct UploadedTables(Arc<Mutex<BTreeMap<u64, BTreeMap<String, NativeFile>>>>);

impl UploadedTables {
    /// The table files checkpoint `id` uploaded or referenced (empty if unknown).
    pub fn of(&self, id: u64) -> BTreeMap<String, NativeFile> {
        let tables = self.0.lock().unwrap_or_else(|e| e.into_inner());
        tables.get(&id).cloned().unwrap_or_default()
    }

    /// Records the table files checkpoint `id` uploaded or referenced.
    pub fn record(&self, id: u64, files: BTreeMap<String, NativeFile>) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).insert(id, files);
    }

    /// Checkpoint `id` completed: the records of older ones are dropped (a later checkpoint
    /// reuses only the newest confirmed one's). Not called for a savepoint, which uploads no
    /// table file and leaves the confirmed checkpoint's records to the next checkpoint.
    pub fn confirm(&self, id: u64) {
        self.0.lock().unwrap_or_else(|e| e.into_inner()).retain(|c, _| *c >= id);
    }
}

/// What the encoder hands the upload for a native checkpoint of a subtask's keyed state.
pub struct NativeUpload {
    /// The local checkpoint (removed once this is dropped).
    pub checkpoint: LocalCheckpoint,
    /// The table files the confirmed checkpoint holds, by name: referenced, not uploaded.
    pub reuse: BTreeMap<String, NativeFile>,
    /// Where the table files of this checkpoint are recorded for later ones.
    pub uploaded: UploadedTables,
    /// Entries the state held at the barrier (for `_metadata`).
    pub entries: u64,
    /// Whether the step has a `ttl` ([`NativeFiles::write_times`]).
    pub write_times: bool,
}

/// What [`damaged_table_message`] says when the damaged file's copy in the checkpoint storage
/// is damaged or missing too: `weir run` then prints no command resuming from its last
/// checkpoint, which references the file.
pub const NO_REFERENCING_CHECKPOINT_RESTORES: &str = "no checkpoint that references it restores";

/// A table file of the store on local disk at another size than the checkpoint that uploaded
/// it recorded ([`tables_to_upload`]).
#[derive(Debug, Clone, PartialEq)]
pub struct DamagedTable {
    /// Its size on local disk now, bytes.
    pub local_size: u64,
    /// What the checkpoint that uploaded it recorded (name, path in the storage, size).
    pub recorded: NativeFile,
}

/// The table files to upload and those to reference: a table file is referenced when `reuse`
/// (the confirmed checkpoint's, this store's own: its uploads, or the files a fast restore
/// built it from) holds one of the same name. Returns `(to upload, referenced)`, each in
/// `tables`' order.
///
/// Errors: a table file of a name `reuse` holds at another size. RocksDB never changes a
/// finished table file and never reuses a name, so the store on local disk was damaged (a
/// truncation, an in-place write, a failing disk): the checkpoint fails naming the file
/// ([`damaged_table_message`]), instead of uploading the damaged file as new and letting
/// retention delete the intact copy every retained checkpoint references (helper-101,
/// 2026-12-06: after that, no retained checkpoint restored).
pub fn tables_to_upload<'a>(
    tables: &'a [LocalFile],
    reuse: &BTreeMap<String, NativeFile>,
) -> Result<(Vec<&'a LocalFile>, Vec<NativeFile>), DamagedTable> {
    let mut upload = Vec::new();
    let mut referenced = Vec::new();
    for table in tables {
        match reuse.get(&table.name) {
            Some(file) if file.size == table.size => referenced.push(file.clone()),
            Some(file) => {
                return Err(DamagedTable {
                    local_size: table.size,
                    recorded: file.clone(),
                });
            }
            None => upload.push(table),
        }
    }
    Ok((upload, referenced))
}

/// What the checkpoint storage holds of a [`DamagedTable`]'s copy ([`stored_copy`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoredCopy {
    /// Listed at this size, bytes.
    Size(u64),
    /// Not there.
    Missing,
    /// The listing failed with this error: nothing is known of the copy.
    Unknown(String),
}

/// The error of a [`DamagedTable`], given its copy in the checkpoint storage: its URL `copy`
/// and what the storage holds there. A copy at the recorded size is intact and the job
/// restores from its last completed checkpoint. A copy at another size was damaged with the
/// store's file (in a local checkpoint directory on the state dir's file system table files
/// are hard links of the store's, one file), and a missing one is gone: then no checkpoint
/// that references it restores, and the message says so and what restores instead. A copy
/// that could not be listed is said to be unchecked (found by trial, 2026-12-07: the message
/// claimed an intact copy, and the resume command printed after it failed on the same file).
pub fn damaged_table_message(damaged: &DamagedTable, copy: &str, stored: &StoredCopy) -> String {
    let recorded = &damaged.recorded;
    let id = recorded.checkpoint_id;
    let what = format!(
        "table file {} of the subtask's store on local disk is {} bytes, but {} bytes when checkpoint {id} \
         recorded it: a finished table file never changes, so the store was damaged (truncated or written in \
         place: check the state dir's disk)",
        recorded.name, damaged.local_size, recorded.size
    );
    let none_restores = format!(
        "so {NO_REFERENCING_CHECKPOINT_RESTORES} (checkpoint {id} and those after it that kept the file): \
         restore from a savepoint, which holds its own copies, or from a checkpoint older than {id}"
    );
    match stored {
        StoredCopy::Size(size) if *size == recorded.size => format!(
            "{what}; its copy in the checkpoint storage (`{copy}`) is intact, so the job restores from its last \
             completed checkpoint"
        ),
        StoredCopy::Size(size) => {
            let linked = if copy.starts_with("file:") || !copy.contains("://") {
                " (a local checkpoint directory on the state dir's file system holds table files as hard links \
                 of the store's: the same file)"
            } else {
                ""
            };
            format!(
                "{what}; its copy in the checkpoint storage (`{copy}`, {size} bytes) is damaged too{linked}, \
                 {none_restores}"
            )
        }
        StoredCopy::Missing => {
            format!("{what}; its copy in the checkpoint storage (`{copy}`) is missing, {none_restores}")
        }
        StoredCopy::Unknown(error) => format!(
            "{what}; its copy in the checkpoint storage (`{copy}`) could not be checked ({error}): the job \
             restores from its last completed checkpoint if that copy is intact (`weir savepoint inspect` \
             verifies it)"
        ),
    }
}

/// The path of `damaged`'s copy in the store whose snapshot directory `snapshot_dir` its
/// recorded path is relative to (`../shared/...`), and what the store holds there.
async fn stored_copy(
    store: &crate::storage::Store,
    snapshot_dir: &str,
    damaged: &DamagedTable,
) -> (String, StoredCopy) {
    let Some(path) = crate::state::incremental::resolve_relative(snapshot_dir, &damaged.recorded.file) else {
        let outside = format!("`{}` leaves the checkpoint storage", damaged.recorded.file);
        return (damaged.recorded.file.clone(), StoredCopy::Unknown(outside));
    };
    let stored = match store.list(&path).await {
        Ok(listed) => listed
            .into_iter()
            .find(|object| object.path == path)
            .map_or(StoredCopy::Missing, |object| StoredCopy::Size(object.size)),
        Err(e) => StoredCopy::Unknown(e.to_string()),
    };
    (path, stored)
}

/// Uploads `native`'s files for operator `uid`'s `subtask` at `barrier` (see the module doc) and
/// returns the handle's [`NativeFiles`], table files first, by name. Records the table files
/// for later checkpoints. Errors: a local file cannot be read, or storage fails (the files
/// uploaded so far stay as orphans that retention removes once a newer checkpoint completed).
pub async fn upload_native(
    barrier: &Barrier,
    uid: &str,
    subtask: u32,
    native: NativeUpload,
) -> Result<NativeFiles, TaskError> {
    use futures::{StreamExt, TryStreamExt};
    let checkpoint = &native.checkpoint;
    let store = &barrier.target.store;
    let dir = &barrier.target.dir;
    let (to_upload, mut files) = match tables_to_upload(&checkpoint.table_files, &native.reuse) {
        Ok(split) => split,
        Err(damaged) => {
            let (copy, stored) = stored_copy(store, dir, &damaged).await;
            return Err(TaskError(damaged_table_message(&damaged, &store.url(&copy), &stored)));
        }
    };
    let mut targets: Vec<(u64, PathBuf, String, String, String)> = to_upload
        .iter()
        .map(|t| {
            let (name, path) = shared_table_file(dir, uid, subtask, barrier.id, &t.name);
            (t.size, checkpoint.dir().join(&t.name), t.name.clone(), name, path)
        })
        .chain(checkpoint.private_files.iter().map(|f| {
            let name = format!("{uid}-{subtask}-{}", f.name);
            let path = crate::storage::join(dir, &name);
            (f.size, checkpoint.dir().join(&f.name), f.name.clone(), name, path)
        }))
        .collect();
    // Largest first: the largest file is the upload's critical path (a compaction's output is
    // most of the store), so it starts at once and the small ones fill in beside it.
    targets.sort_by(|a, b| upload_order((a.0, &a.2), (b.0, &b.2)));
    // A file up to `MULTIPART_THRESHOLD` is put in one request, as a raw upload of it is,
    // streamed from the file (`ObjectStore::put_file`); a larger one streams from disk in
    // multipart parts (`state_upload::upload_file`), which hold up to 40 MiB each. The files
    // uploading at once share a budget of bytes held, so puts go up side by side and
    // multipart uploads a few at a time.
    let budget = tokio::sync::Semaphore::new(UPLOAD_BUDGET_MIB as usize);
    let budget = &budget;
    let start = std::time::Instant::now();
    let referenced = files.len();
    let uploaded: Vec<NativeFile> = futures::stream::iter(targets)
        .map(|(file_bytes, local, local_name, name, path)| async move {
            let queued = start.elapsed();
            // A store that can place the file without its bytes (the local store, one file
            // system: a hard link) holds no budget; its checksum is read from the file.
            let linked = store
                .link_from_local(&path, &local)
                .await
                .map_err(|e| TaskError(format!("native checkpoint: {e}")))?;
            let _held = if linked {
                None
            } else {
                Some(
                    budget
                        .acquire_many(if uploads_whole(file_bytes) {
                            1
                        } else {
                            upload_mib(file_bytes)
                        })
                        .await
                        .map_err(|_| TaskError("native checkpoint: the upload budget was closed".into()))?,
                )
            };
            let began = start.elapsed();
            let (size, crc32) = if linked || uploads_whole(file_bytes) {
                // Linked, or one request streamed from the file (never held whole): its
                // checksum read from the file first.
                let read = size_and_crc(&local)
                    .await
                    .map_err(|e| TaskError(format!("native checkpoint: cannot read {}: {e}", local.display())))?;
                if !linked {
                    store
                        .put_file(&path, &local)
                        .await
                        .map_err(|e| TaskError(format!("native checkpoint: {e}")))?;
                }
                read
            } else {
                crate::checkpoint::state_upload::upload_file(store, &path, &local)
                    .await
                    .map_err(|e| TaskError(format!("native checkpoint: {}", e.0)))?
            };
            tracing::debug!(
                target: "weir_runtime::checkpoint::native",
                file = local_name,
                size,
                queued_ms = queued.as_secs_f64() * 1e3,
                linked,
                waited_for_budget_ms = (began - queued).as_secs_f64() * 1e3,
                uploaded_ms = (start.elapsed() - began).as_secs_f64() * 1e3,
                "native file uploaded"
            );
            Ok::<NativeFile, TaskError>(NativeFile {
                file: name,
                name: local_name,
                checkpoint_id: barrier.id,
                size,
                crc32,
            })
        })
        .buffered(PARALLEL_TRANSFERS)
        .try_collect()
        .await?;
    tracing::debug!(
        target: "weir_runtime::checkpoint::native",
        uploaded = uploaded.len(),
        uploaded_bytes = uploaded.iter().map(|f| f.size).sum::<u64>(),
        referenced,
        upload_ms = start.elapsed().as_secs_f64() * 1e3,
        "native checkpoint uploaded"
    );
    files.extend(uploaded);
    files.sort_by(|a, b| {
        let table = |f: &NativeFile| !crate::state::disk_native::is_table_file(&f.name);
        (table(a), &a.name).cmp(&(table(b), &b.name))
    });
    let tables = files
        .iter()
        .filter(|f| crate::state::disk_native::is_table_file(&f.name))
        .map(|f| (f.name.clone(), f.clone()))
        .collect();
    native.uploaded.record(barrier.id, tables);
    Ok(NativeFiles {
        key_group_range: checkpoint.range(),
        files,
        write_times: native.write_times,
    })
}

/// A TTL that expires nothing: native stores written with a `ttl` are encoded with every
/// entry's write time (block version 2) and nothing dropped; the restoring operator applies
/// its own TTL.
const KEEP_EVERYTHING: StateTtl = StateTtl { ttl_ms: u64::MAX };

/// A local directory removed with everything in it when dropped (a restore's download or
/// mapped-file directory, whether the restore ends or fails).
pub(crate) struct RemovedOnDrop(pub(crate) PathBuf);

impl Drop for RemovedOnDrop {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Creates the local directory a restore downloads a native handle's files into, under the
/// state directory's root `root` (`WEIR_STATE_DIR`, else the system's temp directory), one per
/// download, with this process's owner file: a process killed (`kill -9`) before it removed
/// the directory leaves it to the next process's sweep of the root (`state/local_dir.rs`),
/// which this function also runs first (not every process sweeps its root at start: the heap
/// backend's, the coordinator). Errors: the directory or its owner file cannot be written (a
/// storage I/O error naming the directory, which restarts the job; never a corrupt checkpoint).
pub fn create_download_dir(root: &Path) -> Result<PathBuf, crate::checkpoint::restore::RestoreError> {
    let dir = root.join(format!(
        "native-restore-{}-{:016x}",
        std::process::id(),
        rand::random::<u64>()
    ));
    let what = "cannot create the directory to download a native checkpoint into";
    let failed = |e: std::io::Error| crate::checkpoint::native_restore::local_io_error(&dir, what, e);
    // The root checked first: a default root planted by another user is not swept.
    crate::state::local_dir::prepare_root(root).map_err(|message| failed(std::io::Error::other(message)))?;
    // What earlier processes killed during a restore left here (any backend, the coordinator
    // too: not every process sweeps its root at start).
    crate::state::local_dir::sweep_stale(root);
    std::fs::create_dir_all(&dir).map_err(failed)?;
    crate::state::local_dir::write_owner_file(&dir).map_err(|e| {
        let _ = std::fs::remove_dir_all(&dir);
        failed(e)
    })?;
    Ok(dir)
}

/// The keyed blocks a native handle holds (every key group of its store, entries with their
/// write times): its files downloaded from `store` (paths relative to the snapshot directory
/// `dir`) into a local scratch directory under `download_root` (the state root,
/// `LocalKeyedStores::download_root`), verified against their sizes and checksums, opened
/// read-only and encoded (`state/disk_native.rs`); the directory is removed after. Errors: a
/// file is missing, corrupt, or outside the store; the files do not open as a store; the
/// blocks cannot be written to or mapped from `blocks_file`.
///
/// With `blocks_file` (a process with disk stores), the blocks are written there as they are
/// encoded and returned as slices of a map of it (`checkpoint/mapped_files.rs`): file pages,
/// not memory; without it, they are encoded into memory.
pub async fn native_blocks(
    store: &Store,
    dir: &str,
    native: &NativeFiles,
    download_root: &Path,
    blocks_file: Option<&Path>,
) -> Result<Vec<KeyGroupBlock>, crate::checkpoint::restore::RestoreError> {
    use futures::{StreamExt, TryStreamExt};
    let local = create_download_dir(download_root)?;
    // Also removes the directory when the store does not open (an opened store removes it).
    let _guard = RemovedOnDrop(local.clone());
    futures::stream::iter(&native.files)
        .map(|f| download_one(store, dir, f, &local))
        .buffer_unordered(PARALLEL_TRANSFERS)
        .try_collect::<Vec<()>>()
        .await?;
    let range = native.key_group_range;
    let now_ms = crate::state::ttl::Clock::now_ms(&crate::state::ttl::SystemClock);
    let opened = local.clone();
    // Write times only when they are TTL times: blocks without them restore as written at
    // the restore ([`NativeFiles::write_times`]).
    let times = native.write_times.then_some(KEEP_EVERYTHING);
    let blocks_file = blocks_file.map(Path::to_path_buf);
    let blocks = tokio::task::spawn_blocking(move || {
        let options = DiskStateOptions::default();
        match blocks_file {
            None => blocks_of_native_store(&opened, &options, range, times, now_ms),
            Some(file) => crate::checkpoint::mapped_files::blocks_through_file(
                &file,
                |emit| each_block_of_native_store(&opened, &options, range, times, now_ms, emit),
                |problem| crate::state::disk::DiskStateError {
                    dir: opened.clone(),
                    problem,
                },
            ),
        }
    })
    .await
    .map_err(|e| {
        crate::checkpoint::restore::RestoreError::Incompatible(crate::exec::panics::join_failure(
            "the native checkpoint decoder",
            e,
        ))
    })?;
    blocks.map_err(|e| {
        let note = crate::checkpoint::native_restore::damaged_table_file(&e.problem, &native.files)
            .map(|file| format!("; {}", crate::checkpoint::native_restore::damaged_table_file_note(file)))
            .unwrap_or_default();
        FormatError {
            path: store.url(dir),
            problem: format!("a native checkpoint's store: {e}{note}"),
            fault: native_store_fault(&e.problem),
        }
        .into()
    })
}

/// The fault of a native store that does not open from files that verified against their
/// checksums: a table format this build's RocksDB does not read ("Corrupt or unsupported
/// format_version", "... unsupported checksum type": a store written by a newer RocksDB) is
/// not damage to put back; anything else is damage. RocksDB's status is text only, so its
/// words are read here, the one place they are.
fn native_store_fault(problem: &str) -> FormatFault {
    if problem.contains("unsupported") {
        FormatFault::UnsupportedVersion
    } else {
        FormatFault::Damage
    }
}

/// Downloads one native file into `local` under its name, streamed ([`ObjectStore::get_stream`]:
/// memory holds a chunk, not the file), its size and CRC-32 computed as it streams and checked
/// against `_metadata` at the end. A transient storage error repeats the file's download
/// (`lineage::with_retries`). Errors: the file is missing, outside the store, not a plain file
/// name, of another size or checksum; the local file cannot be written.
///
/// [`ObjectStore::get_stream`]: crate::storage::ObjectStore::get_stream
pub(crate) async fn download_one(
    store: &Store,
    dir: &str,
    f: &NativeFile,
    local: &Path,
) -> Result<(), crate::checkpoint::restore::RestoreError> {
    let path = resolve_relative(dir, &f.file).ok_or_else(|| FormatError {
        path: store.url(dir),
        problem: format!("_metadata references `{}`, outside the store", f.file),
        fault: FormatFault::OutsideStore,
    })?;
    let url = store.url(&path);
    if f.name.contains('/') || f.name.is_empty() || f.name.starts_with('.') {
        return Err(FormatError {
            path: url,
            problem: format!("native file name `{}` is not a plain file name", f.name),
            fault: FormatFault::Damage,
        }
        .into());
    }
    let target = local.join(&f.name);
    // A table file the store can place without copying it (the local store, one file system:
    // a hard link) is read once for its checksum; any other file is streamed.
    let linked = is_table_file(&f.name) && store.link_to_local(&path, &target).await;
    let (size, crc) = if linked {
        size_and_crc(&target)
            .await
            .map_err(|e| crate::storage::StorageError::Io {
                path: target.display().to_string(),
                source: e,
            })?
    } else {
        crate::checkpoint::lineage::with_retries(&url, || stream_to_file(store, &path, &target)).await?
    };
    if size != f.size {
        return Err(FormatError {
            path: url,
            problem: format!("size {size} bytes, _metadata says {}", f.size),
            fault: FormatFault::Damage,
        }
        .into());
    }
    if crc != f.crc32 {
        return Err(FormatError {
            path: url,
            problem: format!("checksum mismatch: crc32 {crc:08x}, _metadata says {:08x}", f.crc32),
            fault: FormatFault::Damage,
        }
        .into());
    }
    Ok(())
}

/// The size in bytes and CRC-32 of the local file `local`, read
/// [`FILE_READ_BYTES`](crate::checkpoint::state_upload::FILE_READ_BYTES) at a time on the
/// blocking pool. Errors: the file cannot be read.
async fn size_and_crc(local: &Path) -> std::io::Result<(u64, u32)> {
    let local = local.to_path_buf();
    tokio::task::spawn_blocking(move || {
        use std::io::Read;
        let mut file = std::fs::File::open(&local)?;
        let mut buffer = vec![0u8; crate::checkpoint::state_upload::FILE_READ_BYTES];
        let (mut crc, mut size) = (crc32fast::Hasher::new(), 0u64);
        loop {
            match file.read(&mut buffer) {
                Ok(0) => return Ok((size, crc.finalize())),
                Ok(read) => {
                    crc.update(&buffer[..read]);
                    size += read as u64;
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
        }
    })
    .await
    .map_err(|e| std::io::Error::other(crate::exec::panics::join_failure("the checksum of a native file", e)))?
}

/// Streams the object at `path` of `store` into the local file `target` (created, or
/// truncated when a retry writes it again); returns its size in bytes and CRC-32. Errors: the
/// store's; the local file cannot be written (`StorageError::Io`, naming it).
pub(crate) async fn stream_to_file(
    store: &Store,
    path: &str,
    target: &Path,
) -> Result<(u64, u32), crate::storage::StorageError> {
    use futures::StreamExt;
    use tokio::io::AsyncWriteExt;
    let local_err = |e: std::io::Error| crate::storage::StorageError::Io {
        path: target.display().to_string(),
        source: e,
    };
    let mut chunks = store.get_stream(path).await?;
    // Writes of 1 MiB: each write of a tokio file is a trip to the blocking pool, and an S3
    // response comes in chunks of a few KiB.
    let mut file =
        tokio::io::BufWriter::with_capacity(1 << 20, tokio::fs::File::create(target).await.map_err(local_err)?);
    let mut crc = crc32fast::Hasher::new();
    let mut size = 0u64;
    while let Some(chunk) = chunks.next().await {
        let chunk = chunk?;
        crc.update(&chunk);
        size += chunk.len() as u64;
        file.write_all(&chunk).await.map_err(local_err)?;
    }
    file.flush().await.map_err(local_err)?;
    Ok((size, crc.finalize()))
}

#[cfg(test)]
#[path = "native_upload_tests.rs"]
mod tests;
