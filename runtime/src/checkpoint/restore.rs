//! Restore: find and load a restore point (checkpoint or savepoint), verify every file it
//! references, check it against the new job, and hand each new subtask its share.
//!
//! Keyed state is redistributed by key group: a new subtask reads only the state files whose
//! key-group range overlaps its own and keeps the groups it owns. Operator state items (source
//! splits, pending sink commits) of all old subtasks are pooled; each operator takes its share.

use super::completed_mark;
use super::decide::{self, Compatibility, LineageRecord, RestoreChoice};
use super::lineage;
use super::mapped_files::MAP_MIN_BYTES;
use super::native_restore::{LocalKeyedStores, NativeRestorePath, RestoredStore, native_restore_path};
use super::native_upload::RemovedOnDrop;
pub use super::restore_files::{files_to_read, unread_full_files};
use super::{METADATA_FILE, checkpoint_dir};
use crate::job::Job;
use crate::operators::OperatorRestore;
use crate::state::key_group::KeyGroupRange;
use crate::state::snapshot::{
    CheckpointMetadata, FormatError, FormatFault, KeyGroupBlock, NativeFiles, StateFile, StateHandle, decode_metadata,
    decode_state_file_shared,
};
use crate::state::ttl::{Clock, SystemClock};
use crate::storage::{self, S3Options, StorageError, Store, join};
use std::collections::HashMap;
use std::path::Path;

/// Restore errors; each names the path or the operator concerned.
#[derive(Debug, thiserror::Error)]
pub enum RestoreError {
    /// A file failed its checksum, size or format check.
    #[error("corrupt restore point: {0}")]
    Corrupt(#[from] FormatError),
    /// Storage failure (including a missing `_metadata` or state file).
    #[error("{0}")]
    Storage(#[from] StorageError),
    /// The restore point does not fit the job.
    #[error("{0}")]
    Incompatible(String),
    /// The snapshot the restore rule chose cannot be restored, and no other may be used.
    #[error("{0}")]
    Refused(String),
}

impl RestoreError {
    /// Whether repeating the restore cannot help (everything but a transient storage error):
    /// a job whose restore fails permanently is FAILED at once instead of restarting.
    pub fn is_permanent(&self) -> bool {
        match self {
            RestoreError::Storage(e) => !lineage::is_transient(e),
            RestoreError::Corrupt(_) | RestoreError::Incompatible(_) | RestoreError::Refused(_) => true,
        }
    }
}

/// Which restore point to use.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RestoreFrom {
    /// Start empty.
    None,
    /// The newest completed snapshot (checkpoint or savepoint) recorded in the job's checkpoint
    /// store; empty start if none exists. It must verify: there is no fallback.
    Latest,
    /// A checkpoint or savepoint directory URL (the one holding `_metadata`).
    Path(String),
}

/// A loaded and verified snapshot.
#[derive(Debug, Clone)]
pub struct LoadedSnapshot {
    /// URL of the snapshot directory.
    pub url: String,
    /// Its metadata.
    pub metadata: CheckpointMetadata,
    /// State files by relative name.
    pub files: HashMap<String, StateFile>,
    /// Native handles restored into a subtask's store directory by the fast path
    /// (`checkpoint/native_restore.rs`); their state files hold no blocks.
    pub restored_stores: Vec<RestoredStore>,
}

/// Reads and verifies only `<dir>/_metadata` (cheap: no state file is read). A missing
/// `_metadata` is `RestoreError::Storage(StorageError::NotFound(..))`.
pub async fn load_metadata(store: &Store, dir: &str) -> Result<CheckpointMetadata, RestoreError> {
    let meta_path = join(dir, METADATA_FILE);
    let bytes = lineage::with_retries(&store.url(&meta_path), || store.get(&meta_path)).await?;
    Ok(decode_metadata(&store.url(&meta_path), &bytes)?)
}

/// Loads `<dir>/_metadata` and every state file it references (an incremental checkpoint's
/// chains included, up to [`PARALLEL_READS`] files at a time), verifying sizes and checksums.
pub async fn load(store: &Store, dir: &str) -> Result<LoadedSnapshot, RestoreError> {
    load_for(store, dir, &LocalKeyedStores::none()).await
}

/// As [`load`], for a process running the subtasks of `stores`: a native handle whose
/// key-group range is one of their stores' is restored into that store's directory
/// (`checkpoint/native_restore.rs`) instead of as blocks.
pub async fn load_for(store: &Store, dir: &str, stores: &LocalKeyedStores) -> Result<LoadedSnapshot, RestoreError> {
    let metadata = load_metadata(store, dir).await?;
    load_files(store, dir, metadata, None, stores).await
}

/// Checks that each of `unread` (files relative to the snapshot directory `dir`) exists in
/// `store` with its size, by one listing of `dir` (not a read: the files' checksums are
/// verified by the processes that read them). Errors: a file is missing or of another size
/// (corrupt, naming it), or the listing fails (storage).
async fn check_unread_files(store: &Store, dir: &str, unread: &[(String, u64)]) -> Result<(), RestoreError> {
    if unread.is_empty() {
        return Ok(());
    }
    let prefix = if dir.is_empty() {
        String::new()
    } else {
        format!("{dir}/")
    };
    let listed: HashMap<String, u64> = store
        .list(&prefix)
        .await?
        .into_iter()
        .map(|meta| (meta.path, meta.size))
        .collect();
    for (file, size) in unread {
        let path = join(dir, file);
        let problem = match listed.get(&path) {
            Some(listed) if listed == size => continue,
            Some(listed) => format!("size {listed} bytes, _metadata says {size}"),
            // Said as a read of it would say it ([`damaged_snapshot_message`]'s "is missing").
            None => return Err(StorageError::NotFound(store.url(&path)).into()),
        };
        return Err(FormatError {
            path: store.url(&path),
            problem,
            fault: FormatFault::Damage,
        }
        .into());
    }
    Ok(())
}

/// State files read at the same time by a restore.
pub const PARALLEL_READS: usize = 8;

async fn load_files(
    store: &Store,
    dir: &str,
    metadata: CheckpointMetadata,
    owned: Option<&[KeyGroupRange]>,
    stores: &LocalKeyedStores,
) -> Result<LoadedSnapshot, RestoreError> {
    use futures::{StreamExt, TryStreamExt};
    // No key group owned: `files_to_read` leaves out every chain and native handle, and the
    // files of joins, windows and aggregations.
    let owned = if stores.without_keyed_state {
        Some(&[][..])
    } else {
        owned
    };
    let wanted = files_to_read(&metadata, owned);
    check_unread_files(store, dir, &unread_full_files(&metadata, owned)).await?;
    let env_root = std::env::var_os(crate::state::local_dir::STATE_DIR_ENV).map(std::path::PathBuf::from);
    let download_root = stores.download_root(env_root.as_deref());
    // A process with disk stores maps its large state files from local disk
    // (`checkpoint/mapped_files.rs`): their blocks are file pages, not memory. The directory
    // holds each file only until it is mapped; it goes when the load ends, either way.
    let map_dir = if stores.disk.is_some() && wanted.iter().any(|(_, size, _)| *size >= MAP_MIN_BYTES) {
        Some(RemovedOnDrop(super::native_upload::create_download_dir(
            &download_root,
        )?))
    } else {
        None
    };
    let map_dir = map_dir.as_ref().map(|d| d.0.as_path());
    let mut files: HashMap<String, StateFile> = futures::stream::iter(wanted.into_iter().enumerate())
        .map(|(index, (file, size, crc))| {
            let map_into = map_dir
                .filter(|_| size >= MAP_MIN_BYTES)
                .map(|d| d.join(format!("{index}.state")));
            read_state_file(store, dir, file, size, crc, map_into)
        })
        .buffer_unordered(PARALLEL_READS)
        .try_collect()
        .await?;
    // A native handle's keyed state is its store's files: restored into the store of the
    // subtask here with the same key groups (`checkpoint/native_restore.rs`), or else
    // downloaded, opened and encoded as blocks into the handle's own state file, which holds
    // none (`checkpoint/native_upload.rs`), so the rest of the restore reads them as any state
    // file's blocks. Handles whose state file was not read are skipped: their key groups
    // belong to no subtask of this process. Up to [`PARALLEL_NATIVE_RESTORES`] at a time.
    let natives: Vec<(&str, &StateHandle, &NativeFiles)> = metadata
        .operators
        .iter()
        .flat_map(|op| {
            op.handles
                .iter()
                .filter_map(move |h| h.native.as_ref().map(|native| (op.uid.as_str(), h, native)))
        })
        .filter(|(_, h, _)| files.contains_key(&h.file))
        .collect();
    let outcomes: Vec<Result<NativeRestored, RestoreError>> = futures::stream::iter(natives)
        .map(|(uid, h, native)| restore_native(store, dir, uid, h, native, &metadata, stores, &download_root))
        .buffer_unordered(PARALLEL_NATIVE_RESTORES)
        .collect()
        .await;
    let mut restored_stores = Vec::new();
    let mut first_error = None;
    for outcome in outcomes {
        match outcome {
            Ok(NativeRestored::IntoStore(restored)) => restored_stores.push(restored),
            Ok(NativeRestored::AsBlocks { file, blocks }) => {
                if let Some(read) = files.get_mut(&file) {
                    read.key_groups = blocks;
                }
            }
            Err(e) => {
                first_error.get_or_insert(e);
            }
        }
    }
    if let Some(e) = first_error {
        // No subtask will open the stores restored: their files go now, not with the run
        // directory.
        for restored in &restored_stores {
            let _ = std::fs::remove_dir_all(&restored.dir);
        }
        return Err(e);
    }
    restored_stores.sort_by(|a, b| (&a.uid, a.range.start).cmp(&(&b.uid, b.range.start)));
    Ok(LoadedSnapshot {
        url: store.url(dir),
        metadata,
        files,
        restored_stores,
    })
}

/// Native handles a restore restores at the same time (each downloads up to
/// `native_upload::PARALLEL_TRANSFERS` files at a time): a process running several subtasks
/// of a disk job restores their stores together, not one after another.
pub const PARALLEL_NATIVE_RESTORES: usize = 4;

/// What became of one native handle in a restore.
enum NativeRestored {
    /// Its files are the store of a subtask of this process.
    IntoStore(RestoredStore),
    /// Its key groups as blocks, for the handle's state file `file`.
    AsBlocks {
        file: String,
        blocks: Vec<crate::state::snapshot::KeyGroupBlock>,
    },
}

/// Restores the native handle `h` (its `native` files) of step `uid` by the path
/// [`native_restore_path`] picks: into its subtask's store, or as blocks (through a mapped
/// file in a process with disk stores, `checkpoint/mapped_files.rs`). Errors: the files are
/// missing, corrupt or do not open as a store; local I/O.
#[allow(clippy::too_many_arguments)]
async fn restore_native(
    store: &Store,
    dir: &str,
    uid: &str,
    h: &StateHandle,
    native: &NativeFiles,
    metadata: &CheckpointMetadata,
    stores: &LocalKeyedStores,
    download_root: &std::path::Path,
) -> Result<NativeRestored, RestoreError> {
    let now_ms = SystemClock.now_ms();
    match native_restore_path(
        uid,
        native,
        h.expired_through_ms,
        metadata.max_parallelism,
        stores,
        now_ms,
    ) {
        NativeRestorePath::IntoStore { subtask } => {
            // Its keys: the shape item beside them in the state file is not one.
            let keys = h.listed_entries();
            let restored =
                super::native_restore::restore_into_store(store, dir, uid, subtask, native, keys, stores).await?;
            let restored = RestoredStore {
                checkpoint_id: metadata.checkpoint_id,
                ..restored
            };
            super::native_restore::log_restored(&restored, subtask);
            Ok(NativeRestored::IntoStore(restored))
        }
        NativeRestorePath::AsBlocks => {
            let map_into = if stores.disk.is_some() {
                Some(RemovedOnDrop(super::native_upload::create_download_dir(download_root)?))
            } else {
                None
            };
            let blocks_file = map_into.as_ref().map(|d| d.0.join("blocks.state"));
            let blocks =
                super::native_upload::native_blocks(store, dir, native, download_root, blocks_file.as_deref()).await?;
            Ok(NativeRestored::AsBlocks {
                file: h.file.clone(),
                blocks,
            })
        }
    }
}

/// Reads and verifies one state file `file` (relative to `dir`) against its handle: into
/// memory, or with `map_into` through a map of that local file (`checkpoint/mapped_files.rs`).
async fn read_state_file(
    store: &Store,
    dir: &str,
    file: String,
    size: u64,
    crc32: u32,
    map_into: Option<std::path::PathBuf>,
) -> Result<(String, StateFile), RestoreError> {
    let path = crate::state::incremental::resolve_relative(dir, &file).ok_or_else(|| FormatError {
        path: store.url(dir),
        problem: format!(
            "_metadata references `{file}`, outside the store; an incremental checkpoint is restored \
             from its place in the job's checkpoint directory (or take a savepoint, which is self-contained)"
        ),
        fault: FormatFault::OutsideStore,
    })?;
    let url = store.url(&path);
    let bytes = match &map_into {
        Some(local) => lineage::with_retries(&url, || super::mapped_files::fetch_mapped(store, &path, local)).await?,
        None => lineage::with_retries(&url, || store.get(&path)).await?,
    };
    if bytes.len() as u64 != size {
        return Err(FormatError {
            path: url,
            problem: format!("size {} bytes, _metadata says {size}", bytes.len()),
            fault: FormatFault::Damage,
        }
        .into());
    }
    // Checksums and decoding on the blocking pool (two passes over the bytes: the handle's
    // CRC of the file, the format's of its body); the keyed blocks stay slices of the file's
    // buffer, so nothing is copied.
    let decoded = tokio::task::spawn_blocking(move || {
        let crc = crc32fast::hash(&bytes);
        if crc != crc32 {
            return Err(FormatError {
                path: url,
                problem: format!("checksum mismatch: crc32 {crc:08x}, _metadata says {crc32:08x}"),
                fault: FormatFault::Damage,
            });
        }
        decode_state_file_shared(&url, bytes)
    })
    .await
    .map_err(|e| RestoreError::Incompatible(crate::exec::panics::join_failure("the state file decoder", e)))??;
    Ok((file, decoded))
}

/// Resolves and loads the restore point by the one restore rule
/// ([`decide::choose_restore_point`]): `lineage` is the run's own record when it has one (a
/// failover restart or a restarted coordinator of the same run), `None` for a new run.
///
/// Transient storage errors are retried ([`lineage::with_retries`]) and then returned as they
/// are. A chosen snapshot that is missing or corrupt is never replaced by an older one: the
/// result is [`RestoreError::Refused`], naming the snapshot and the options.
pub async fn resolve(
    store: &Store,
    job: &str,
    from: &RestoreFrom,
    s3: &S3Options,
    lineage: Option<&LineageRecord>,
    stores: &LocalKeyedStores,
) -> Result<Option<LoadedSnapshot>, RestoreError> {
    // A restore by the rule whose newest snapshot is gone from the listing is refused, not
    // taken from the one before it (`checkpoint/completed_mark.rs`). The record is read before
    // the listing: a recorded snapshot's `_metadata` was written before the record, so the
    // listing holds it unless it was deleted or moved since.
    let min_id = match (lineage, from) {
        (Some(l), _) => Some(l.first_id),
        (None, RestoreFrom::Latest) => Some(0),
        (None, _) => None,
    };
    let mark = match min_id {
        Some(_) => {
            lineage::with_retries(&store.url(&completed_mark::mark_path(job)), || {
                completed_mark::read(store, job)
            })
            .await?
        }
        None => None,
    };
    let seen = lineage::with_retries(&store.url(job), || lineage::list_snapshots(store, job)).await?;
    if let Some(min_id) = min_id
        && let Some(gone) = completed_mark::vanished(mark.as_ref(), &seen, min_id)
    {
        return Err(RestoreError::Refused(
            vanished_refusal(store, job, gone, &seen, completed_mark::RestoreWords::Cli).await,
        ));
    }
    match decide::choose_restore_point(from, lineage, &seen) {
        RestoreChoice::Empty => {
            if *from == RestoreFrom::Latest {
                tracing::info!(
                    job,
                    "no completed checkpoint or savepoint found; starting without state"
                );
            }
            Ok(None)
        }
        RestoreChoice::Url(url) => match load_url_owned(&url, s3, None, stores).await {
            // The store's own message is about output locations ("created when missing").
            Err(RestoreError::Storage(StorageError::InvalidUrl(path, _))) if Path::new(&path).is_file() => {
                Err(RestoreError::Refused(format!(
                    "--restore {url}: {path} is a file, not a checkpoint or savepoint directory; give \
                     the `chk-<n>` or `savepoint-...` directory (`weir checkpoints list <storage> --job \
                     {job}` lists them), or `--restore latest`"
                )))
            }
            Err(RestoreError::Storage(StorageError::NotFound(path))) if path.ends_with(METADATA_FILE) => {
                let why = match savepoint_pointer_message(&url, s3).await {
                    Some(pointer) => pointer,
                    None => not_a_snapshot(&url, Some(job)),
                };
                Err(RestoreError::Refused(format!(
                    "restore point {why}; or restore the newest completed one with `--restore latest`, or start \
                     without state with `--restore none`"
                )))
            }
            Err(RestoreError::Storage(StorageError::NotFound(path))) if path.rsplit('/').nth(1) == Some("shared") => {
                Err(RestoreError::Refused(format!(
                    "restore point {url}: {path} is missing. An incremental checkpoint references files in \
                     its job's `shared/` directory, beside its `chk-<n>` directory: a `chk-<n>` copied or \
                     moved alone restores only together with that directory. Copy the job's whole directory \
                     (`<storage>/{job}/`), or take a savepoint (self-contained) to move state"
                )))
            }
            Err(e) => match damaged_snapshot_message(&url, &e, Some(job)) {
                Some(damaged) => Err(RestoreError::Refused(format!(
                    "restore point {damaged}; or start without state with `--restore none`"
                ))),
                None => Err(e),
            },
            Ok(loaded) => Ok(Some(loaded)),
        },
        RestoreChoice::Stored { id, savepoint } => {
            let (name, url, loaded) = if savepoint {
                let name = format!("savepoint {id}");
                match lineage::read_pointer(store, job, id).await {
                    Ok(pointer) => {
                        let loaded = load_url_owned(&pointer.url, s3, None, stores).await;
                        (name, pointer.url, loaded)
                    }
                    Err(e) => {
                        let url = store.url(&lineage::pointer_dir(job, id));
                        (name, url, Err(RestoreError::Refused(e)))
                    }
                }
            } else {
                let dir = checkpoint_dir(job, id);
                let loaded = load_for(store, &dir, stores).await;
                (format!("checkpoint chk-{id}"), store.url(&dir), loaded)
            };
            match loaded {
                Ok(snapshot) => Ok(Some(snapshot)),
                Err(e) if !e.is_permanent() => Err(e),
                Err(RestoreError::Storage(StorageError::NotFound(path)))
                    if savepoint && path.ends_with(METADATA_FILE) =>
                {
                    let pointer = store.url(&lineage::pointer_dir(job, id));
                    Err(RestoreError::Refused(moved_savepoint(job, &name, &url, &pointer)))
                }
                Err(e) => Err(RestoreError::Refused(refusal(job, &name, &url, &e))),
            }
        }
    }
}

/// [`completed_mark::vanished_message`] for `gone`, naming the newest completed snapshot the
/// store still lists in `seen` (of any run: the way back is an explicit restore) and its URL
/// (a savepoint's from its pointer), in `words`.
pub async fn vanished_refusal(
    store: &Store,
    job: &str,
    gone: &completed_mark::CompletedMark,
    seen: &[decide::SeenSnapshot],
    words: completed_mark::RestoreWords,
) -> String {
    let newest = seen.iter().filter(|s| s.completed).max_by_key(|s| s.id);
    let newest_held = match newest {
        Some(s) if s.savepoint => {
            let url = match lineage::read_pointer(store, job, s.id).await {
                Ok(pointer) => pointer.url,
                Err(_) => store.url(&lineage::pointer_dir(job, s.id)),
            };
            Some((s.id, true, url))
        }
        Some(s) => Some((s.id, false, store.url(&checkpoint_dir(job, s.id)))),
        None => None,
    };
    completed_mark::vanished_message(
        job,
        gone,
        newest_held,
        &store.url(&completed_mark::mark_path(job)),
        words,
    )
}

/// For an explicit restore point or an inspected snapshot at `url` that failed to load with
/// `error`: what is damaged and what to do, when a file its `_metadata` lists is missing or
/// fails its checks (`None` for other errors, said as they are). Inside [`resolve`], a missing
/// file of the job's `shared/` directory gets its own message first (an incremental checkpoint
/// moved without it); elsewhere (`weir savepoint inspect`) it gets this message.
pub fn damaged_snapshot_message(url: &str, error: &RestoreError, job: Option<&str>) -> Option<String> {
    let what = match error {
        RestoreError::Storage(StorageError::NotFound(path)) if !path.ends_with(METADATA_FILE) => {
            format!("{path}, a file its `{METADATA_FILE}` lists, is missing (deleted, or not copied with the snapshot)")
        }
        // Damage, not a file of another version or place (those say what to do themselves).
        RestoreError::Corrupt(fault) if is_damage(fault) => format!("a file does not verify: {fault}"),
        _ => return None,
    };
    let job = job.unwrap_or("<job>");
    Some(format!(
        "{url} is damaged: {what}. Put the file back from a copy of the snapshot, or use another snapshot \
         (`weir checkpoints list <checkpoint storage> --job {job}` lists the job's checkpoints)"
    ))
}

/// Whether a state or `_metadata` file's fault ([`FormatError::fault`]) is damage to its bytes
/// (a checksum, a size, a truncation, bytes that do not decode) rather than a format version
/// this build does not read or a reference outside the store.
pub fn is_damage(error: &FormatError) -> bool {
    error.fault == FormatFault::Damage
}

/// The message for a snapshot URL (`--restore URL`, a StreamJob's restore point, `weir
/// savepoint inspect URL`) with no `_metadata`: not a snapshot directory (the storage or
/// savepoints directory above the snapshots, a typo, or a checkpoint that never completed).
/// `job` names the job in the listing command when known.
pub fn not_a_snapshot(url: &str, job: Option<&str>) -> String {
    let job = job.unwrap_or("<job>");
    format!(
        "{url} has no `{METADATA_FILE}`: it is not a checkpoint or savepoint directory (or one that \
         never completed). Give the directory of one snapshot: a `chk-<n>` directory (`weir checkpoints \
         list <checkpoint storage> --job {job}` lists them) or a `savepoint-{job}-<n>-<suffix>` directory \
         (`weir savepoint trigger` prints it)"
    )
}

/// When `url` (a directory without `_metadata`) is a savepoint pointer `<job>/sp-<n>/`: the
/// message saying which savepoint it records and to give that instead. `None` for any other
/// directory, or a pointer that cannot be read.
pub async fn savepoint_pointer_message(url: &str, s3: &S3Options) -> Option<String> {
    let store = crate::storage::open(url, s3).await.ok()?;
    let bytes = store.get(lineage::POINTER_FILE).await.ok()?;
    let pointer: lineage::SavepointPointer = serde_json::from_slice(&bytes).ok()?;
    Some(format!(
        "{url} is the record of savepoint {} in its job's checkpoint storage (`{}`), not the \
         savepoint: give the savepoint's directory, {}",
        pointer.id,
        lineage::POINTER_FILE,
        pointer.url
    ))
}

/// The message for a newest snapshot that is a savepoint no longer where it was written
/// (moved or deleted): its pointer `pointer` in the checkpoint storage still names `url`.
fn moved_savepoint(job: &str, name: &str, url: &str, pointer: &str) -> String {
    format!(
        "{name} is the newest snapshot of job {job}, but {url} no longer holds it (its `{METADATA_FILE}` \
         is not there: moved or deleted?). If you moved it, restore it from where it is now: `--restore \
         <its directory>`. If you deleted it, restore an older snapshot explicitly with `--restore <url>` \
         (`weir checkpoints list <checkpoint storage> --job {job}` shows them) after removing the output \
         committed after it, which going back writes again; or start without state with `--restore none`. \
         (Its record in the checkpoint storage: {pointer}.)"
    )
}

/// The message for a newest snapshot that cannot be restored.
fn refusal(job: &str, name: &str, url: &str, error: &RestoreError) -> String {
    format!(
        "{name} ({url}) is the newest snapshot of job {job} and cannot be restored: {error}. \
         Its sink output may already be committed, so Weir does not go back to an older snapshot \
         (that would write committed output a second time). Options: put the snapshot's files back \
         from a copy and start again; or restore an older snapshot explicitly with `--restore <url>` \
         (`weir checkpoints list` shows them) after removing the output committed after it; or start \
         without state with `--restore none`"
    )
}

/// Loads the snapshot whose directory URL is `url` (a trailing `/_metadata` is accepted).
pub async fn load_url(url: &str, s3: &S3Options) -> Result<LoadedSnapshot, RestoreError> {
    load_url_owned(url, s3, None, &LocalKeyedStores::none()).await
}

/// As [`load_url`], for a process that runs only the subtasks owning the key groups of
/// `owned` (a worker; `None`: every subtask): the files of an incremental chain whose
/// key-group range overlaps none of them are not read ([`files_to_read`]). Chains are written
/// only by keyed aggregations, whose files hold no operator state, so nothing another
/// operator needs is skipped. A native handle whose key-group range is one of `stores`' is
/// restored into that subtask's store directory ([`load_for`]).
pub async fn load_url_owned(
    url: &str,
    s3: &S3Options,
    owned: Option<&[KeyGroupRange]>,
    stores: &LocalKeyedStores,
) -> Result<LoadedSnapshot, RestoreError> {
    let url = url.trim_end_matches('/');
    let url = url
        .strip_suffix(METADATA_FILE)
        .map(|u| u.trim_end_matches('/'))
        .unwrap_or(url);
    let store = storage::open(url, s3).await?;
    let metadata = load_metadata(&store, "").await?;
    // An incremental checkpoint's chains live next to it (`../shared/`): read from the parent.
    if crate::state::incremental::references_outside(&metadata)
        && let Some((parent, name)) = url.rsplit_once('/')
        && !parent.is_empty()
        && !parent.ends_with('/')
    {
        let parent_store = storage::open(parent, s3).await?;
        return load_files(&parent_store, name, metadata, owned, stores).await;
    }
    load_files(&store, "", metadata, owned, stores).await
}

/// Checks a snapshot against the job: max parallelism unchanged, operator kinds unchanged, and
/// no state without an operator unless `allowNonRestoredState`.
pub fn check(snapshot: &LoadedSnapshot, job: &Job) -> Result<(), RestoreError> {
    check_channel_state(snapshot, job)?;
    let snap_ops: Vec<(String, String)> = snapshot
        .metadata
        .operators
        .iter()
        .map(|o| (o.uid.clone(), o.kind.clone()))
        .collect();
    let job_ops: Vec<(String, String)> = job
        .operators
        .iter()
        .filter(|o| o.kind.is_stateful())
        .map(|o| (o.uid.clone(), o.kind.name().to_string()))
        .collect();
    match decide::check_compatibility(
        snapshot.metadata.max_parallelism,
        &snap_ops,
        job.max_parallelism,
        &job_ops,
    ) {
        Compatibility::Compatible => Ok(()),
        Compatibility::MaxParallelismChanged(old, _) if job.parallelism > old => Err(RestoreError::Incompatible(
            crate::checkpoint::max_parallelism::parallelism_above_restored(
                &job.origins.parallelism,
                job.parallelism,
                old,
                &format!("{}; maxParallelism is fixed for the life of the state", snapshot.url),
            ),
        )),
        Compatibility::MaxParallelismChanged(old, new) => Err(RestoreError::Incompatible(
            crate::checkpoint::max_parallelism::max_parallelism_differs(
                &job.origins.max_parallelism,
                new,
                old,
                &snapshot.url,
            ),
        )),
        Compatibility::KindChanged(list) => Err(RestoreError::Incompatible(format!(
            "{}: operator uid reused for another kind of operator: {}. A step's state restores only into \
             a step of the same kind; keep the kind, or give the step a new uid and set \
             spec.allowNonRestoredState: true to start it empty (dropping the old state)",
            snapshot.url,
            list.iter()
                .map(|(u, a, b)| {
                    let at = job
                        .operators
                        .iter()
                        .find(|o| &o.uid == u)
                        .map_or(String::new(), |o| format!(" (spec.job.steps[{}].uid)", o.index));
                    format!("`{u}`{at} was {a}, is {b}")
                })
                .collect::<Vec<_>>()
                .join(", ")
        ))),
        Compatibility::NonRestoredState(uids) if job.spec.allow_non_restored_state => {
            tracing::warn!(
                ?uids,
                "dropping state of operators the job no longer has (allowNonRestoredState)"
            );
            Ok(())
        }
        Compatibility::NonRestoredState(uids) => Err(RestoreError::Incompatible(non_restored_message(
            &snapshot.url,
            &uids,
            &job_ops,
            &snap_ops,
        ))),
    }
}

/// The refusal of a restore point holding state for `uids` that no stateful step of the job
/// (`job_ops`, `(uid, kind)`) has: names them, the job's stateful uids the snapshot
/// (`snap_ops`) has no state for, and the two ways on (a step without `uid` is saved as
/// `<kind>-<index>`, which shifts when steps are inserted or removed).
fn non_restored_message(
    url: &str,
    uids: &[String],
    job_ops: &[(String, String)],
    snap_ops: &[(String, String)],
) -> String {
    let quoted = |list: Vec<&String>| list.iter().map(|u| format!("`{u}`")).collect::<Vec<_>>().join(", ");
    let new: Vec<&String> = job_ops
        .iter()
        .filter(|(u, _)| !snap_ops.iter().any(|(s, _)| s == u))
        .map(|(u, _)| u)
        .collect();
    let new = match new.is_empty() {
        true => String::new(),
        false => format!(" (the job's {} have no state there)", quoted(new)),
    };
    format!(
        "{url}: state for operator uid(s) {} has no operator in the job{new}; a step without `uid` is saved as \
         `<kind>-<index>`, which changes when steps are inserted or removed: set each stateful step's `uid` to \
         the one its state has (`uid: {}`), or set spec.allowNonRestoredState: true to drop that state",
        quoted(uids.iter().collect()),
        uids.first().map_or("<uid>", String::as_str)
    )
}

/// Channel state (of an unaligned checkpoint) is replayed into the stage its uid heads: that
/// operator must still head a stage with inputs, or the in-flight records would be lost.
/// `allowNonRestoredState` drops channel state of a uid the job no longer has, as it drops
/// operator state.
fn check_channel_state(snapshot: &LoadedSnapshot, job: &Job) -> Result<(), RestoreError> {
    let graph = crate::exec::plan::plan_graph(job);
    for c in &snapshot.metadata.channel_state {
        let heads_a_stage = graph
            .iter()
            .any(|st| !st.inputs.is_empty() && job.operators[st.operators[0]].uid == c.uid);
        if heads_a_stage {
            continue;
        }
        if job.operator(&c.uid).is_none() && job.spec.allow_non_restored_state {
            tracing::warn!(uid = %c.uid, "dropping channel state of an operator the job no longer has (allowNonRestoredState)");
            continue;
        }
        return Err(RestoreError::Incompatible(format!(
            "{}: the unaligned checkpoint holds in-flight records (channel state) for the input of operator `{}`, which no longer reads from another task in this job; restore it with the same dataflow shape (or take a savepoint, which is always aligned, and restore that)",
            snapshot.url, c.uid
        )));
    }
    Ok(())
}

/// The store a native checkpoint's fast restore put in place for the subtask of step `uid`
/// owning `range` (`checkpoint/native_restore.rs`), if any.
pub fn restored_store(snapshot: Option<&LoadedSnapshot>, uid: &str, range: KeyGroupRange) -> Option<RestoredStore> {
    snapshot?
        .restored_stores
        .iter()
        .find(|r| r.uid == uid && r.range == range)
        .cloned()
}

/// The state for one new subtask of operator `uid`: keyed blocks of the key groups in `range`
/// (only files whose range overlaps are read), and all operator state items pooled. The
/// blocks' bytes are shared with `snapshot` (a clone of a [`bytes::Bytes`]), never copied.
/// Each block carries its handle's [`StateHandle::expired_through_ms`], so the keyed state
/// leaves out the entries that had expired when the handle was written.
pub fn operator_restore(snapshot: Option<&LoadedSnapshot>, uid: &str, range: Option<KeyGroupRange>) -> OperatorRestore {
    let mut out = OperatorRestore::default();
    let Some(s) = snapshot else { return out };
    let Some(op) = s.metadata.operators.iter().find(|o| o.uid == uid) else {
        return out;
    };
    for h in &op.handles {
        // An incremental handle's chain: base first, then the deltas in order (the keyed
        // state applies them in that order); operator state is in the newest file only.
        if let (Some(r), Some(hr)) = (range, h.key_group_range)
            && r.intersects(&hr)
        {
            for (name, _, _) in h.files() {
                if let Some(file) = s.files.get(name) {
                    out.key_groups
                        .extend(
                            file.key_groups
                                .iter()
                                .filter(|b| r.contains(b.key_group))
                                .map(|b| KeyGroupBlock {
                                    expired_through_ms: h.expired_through_ms,
                                    ..b.clone()
                                }),
                        );
                }
            }
        }
        let Some(file) = s.files.get(&h.file) else {
            continue;
        };
        out.operator_state.extend(file.operator_state.iter().cloned());
    }
    out
}

#[cfg(test)]
#[path = "restore_tests.rs"]
mod tests;
