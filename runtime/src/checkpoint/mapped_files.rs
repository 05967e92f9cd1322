//! State files a restore reads through a read-only memory map of a local file instead of into
//! the process's memory: what a process running disk-backend stores does
//! (`checkpoint/restore.rs`, `load_files`).
//!
//! A restore holds every state file it read until each subtask has taken its keyed blocks
//! (the blocks are slices of the file, `state/snapshot.rs`, `decode_state_file_shared`), and
//! the disk backend writes them into its store one key group at a time. Read into memory, a
//! savepoint of state larger than a worker's memory limit could not be restored on the
//! backend chosen for state larger than memory (issue 12). Mapped, the bytes are file pages:
//! the kernel pages them in as the store takes each key group and reclaims them under memory
//! pressure (a pod's memory limit counts them, and reclaims them before it kills), so the
//! restore's memory is the store's cache and a few key groups, not the state.
//!
//! The local file is the stored file itself for a local checkpoint directory (no copy, on any
//! file system) or else streamed from storage into the restore's download directory with a
//! chunk in memory at a time; a download is unlinked as soon as it is mapped, so its disk
//! space goes with the last block that refers to it, and a process killed mid-restore leaves
//! only what the next process's sweep of the state root removes (`state/local_dir.rs`).

use crate::storage::{StorageError, Store};
use std::io::Write;
use std::path::Path;

/// State files smaller than this (1 MiB) are read into memory on every backend: a map costs a
/// system call and a page fault per 4 KiB, and such files are not what fills memory.
pub const MAP_MIN_BYTES: u64 = 1 << 20;

/// The object at `path` of `store`, mapped: the store's own file when it is a local
/// directory ([`ObjectStore::local_file`], mapped in place), else downloaded into the local
/// file `local` and mapped ([`map_and_unlink`]). Errors: storage's, or a local I/O error
/// naming the file (it cannot be read, written or mapped).
///
/// [`ObjectStore::local_file`]: crate::storage::ObjectStore::local_file
pub async fn fetch_mapped(store: &Store, path: &str, local: &Path) -> Result<bytes::Bytes, StorageError> {
    let in_place = store.local_file(path);
    if in_place.is_none() {
        crate::checkpoint::native_upload::stream_to_file(store, path, local).await?;
    }
    let local = local.to_path_buf();
    let named = in_place.as_ref().unwrap_or(&local).display().to_string();
    tokio::task::spawn_blocking(move || match in_place {
        Some(file) => map(&file),
        None => map_and_unlink(&local),
    })
    .await
    .map_err(|e| StorageError::Io {
        path: named.clone(),
        source: std::io::Error::other(format!("the file mapper stopped: {e}")),
    })?
    .map_err(|source| match source.kind() {
        // As the local store names a missing object (`not found`, never retried).
        std::io::ErrorKind::NotFound => StorageError::NotFound(named),
        _ => StorageError::Io { path: named, source },
    })
}

/// Maps the local file `local` read-only, advised for one sequential pass, and removes its
/// name: the returned bytes are the only reference to the file left. An empty file is empty
/// bytes (no map). Errors: the file cannot be opened or mapped (it is removed either way).
pub fn map_and_unlink(local: &Path) -> std::io::Result<bytes::Bytes> {
    let mapped = map(local);
    let _ = std::fs::remove_file(local);
    mapped
}

fn map(local: &Path) -> std::io::Result<bytes::Bytes> {
    let file = std::fs::File::open(local)?;
    if file.metadata()?.len() == 0 {
        return Ok(bytes::Bytes::new());
    }
    // SAFETY: a map is undefined behaviour if the file changes while mapped. The file is a
    // state file of a snapshot in a local checkpoint directory, which Weir writes once under
    // a new name (a temporary file renamed into place) and never modifies (retention deletes
    // whole files, which a map outlives), or this restore's own download, which nothing else
    // knows of and which is unlinked right after this call.
    let map = unsafe { memmap2::Mmap::map(&file)? };
    // Only a hint: the kernel reads ahead and drops pages behind the pass more eagerly.
    let _ = map.advise(memmap2::Advice::Sequential);
    Ok(bytes::Bytes::from_owner(map))
}

/// Writes keyed blocks one by one as a state file (version 2, the streamed format, with no
/// operator state) into the local file `local`, then maps it ([`map_and_unlink`]) and
/// decodes it: the blocks, slices of the map, as `encode` handed them over. For blocks a
/// restore makes itself (a native checkpoint's store encoded as blocks,
/// `checkpoint/native_upload.rs`), so they too are file pages, not memory. `encode` gets the
/// writer for each block and returns its own errors, which stop the write. Errors: `encode`'s,
/// or a local I/O error (as `io_error` makes it from the problem) writing or mapping `local`.
pub fn blocks_through_file<E>(
    local: &Path,
    encode: impl FnOnce(&mut dyn FnMut(crate::state::snapshot::KeyGroupBlock) -> Result<(), E>) -> Result<(), E>,
    io_error: impl Fn(String) -> E,
) -> Result<Vec<crate::state::snapshot::KeyGroupBlock>, E> {
    use crate::state::snapshot::StreamedStateFile;
    let failed = |what: &str, e: std::io::Error| io_error(format!("{}: cannot {what}: {e}", local.display()));
    let file = std::fs::File::create(local).map_err(|e| failed("create the restore's block file", e))?;
    let mut out = std::io::BufWriter::with_capacity(1 << 20, file);
    let (mut writer, head) = StreamedStateFile::start("", 0, vec![]);
    out.write_all(&head)
        .map_err(|e| failed("write the restore's block file", e))?;
    let written = encode(&mut |block| {
        out.write_all(&writer.block(&block))
            .and_then(|()| out.write_all(&block.data))
            .map_err(|e| failed("write the restore's block file", e))
    });
    let finished = written.and_then(|()| {
        out.write_all(&writer.finish())
            .and_then(|()| out.flush())
            .map_err(|e| failed("write the restore's block file", e))
    });
    drop(out);
    if let Err(e) = finished {
        let _ = std::fs::remove_file(local);
        return Err(e);
    }
    let bytes = map_and_unlink(local).map_err(|e| failed("map the restore's block file", e))?;
    let named = local.display().to_string();
    crate::state::snapshot::decode_state_file_shared(&named, bytes)
        .map(|file| file.key_groups)
        .map_err(|e| io_error(e.to_string()))
}

#[cfg(test)]
#[path = "mapped_files_tests.rs"]
mod tests;
