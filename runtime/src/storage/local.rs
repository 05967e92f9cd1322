//! Local filesystem store. Atomic writes by temp file + rename; conditional create by
//! `link(2)`, which fails if the target exists; a multipart upload is one hidden staging file
//! beside its target, each part written once at its offset, renamed into place on completion
//! (so completion copies nothing and memory stays bounded by one part).

use super::*;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A store rooted at a local directory (created on demand).
#[derive(Debug, Clone)]
pub struct LocalStore {
    root: PathBuf,
}

static TMP_SEQ: AtomicU64 = AtomicU64::new(0);

/// The object a hidden temporary file was writing, from its name: `.<name>.tmp-<pid>-<n>`
/// ([`LocalStore::tmp_for`]) or `.<name>.upload-<id>` ([`LocalStore::staging`]) gives
/// `<name>`; `None` for any other name.
pub(crate) fn temporary_target(file_name: &str) -> Option<&str> {
    let rest = file_name.strip_prefix('.')?;
    let (target, suffix) = match rest.rsplit_once(".tmp-") {
        Some((target, suffix)) => (target, suffix),
        None => rest.rsplit_once(".upload-")?,
    };
    (!target.is_empty() && !suffix.is_empty()).then_some(target)
}

fn io(path: &Path, source: std::io::Error) -> StorageError {
    if source.kind() == std::io::ErrorKind::NotFound {
        StorageError::NotFound(path.display().to_string())
    } else {
        StorageError::Io {
            path: path.display().to_string(),
            source,
        }
    }
}

impl LocalStore {
    /// A store rooted at `root` (relative paths resolve against the working directory).
    /// Errors: `root` exists and is not a directory.
    pub fn new(root: impl AsRef<Path>) -> Result<LocalStore> {
        let root = root.as_ref();
        let root = if root.is_absolute() {
            root.to_path_buf()
        } else {
            std::env::current_dir().map_err(|e| io(root, e))?.join(root)
        };
        // Drop `.` components so URLs read `file:///work/x`, not `file:///work/./x`.
        let root: PathBuf = root
            .components()
            .filter(|c| !matches!(c, std::path::Component::CurDir))
            .collect();
        if root.exists() && !root.is_dir() {
            return Err(StorageError::InvalidUrl(
                root.display().to_string(),
                "it is a file; checkpoints, savepoints and file-sink output are written into a directory: \
                 give the path of a directory (it is created when missing)"
                    .into(),
            ));
        }
        Ok(LocalStore { root })
    }

    /// The directory this store is rooted at.
    pub fn root(&self) -> &Path {
        &self.root
    }

    fn full(&self, path: &str) -> PathBuf {
        if path.is_empty() {
            self.root.clone()
        } else {
            self.root.join(path)
        }
    }

    fn tmp_for(&self, target: &Path) -> PathBuf {
        let n = TMP_SEQ.fetch_add(1, Ordering::Relaxed);
        let name = target
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        target.with_file_name(format!(".{name}.tmp-{}-{n}", std::process::id()))
    }

    fn staging(&self, upload: &MultipartUpload) -> PathBuf {
        let target = self.full(&upload.path);
        let name = target
            .file_name()
            .map(|s| s.to_string_lossy().into_owned())
            .unwrap_or_default();
        target.with_file_name(format!(".{name}.upload-{}", upload.upload_id))
    }

    fn write_tmp(&self, target: &Path, data: &[u8]) -> Result<PathBuf> {
        if let Some(dir) = target.parent() {
            std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        }
        let tmp = self.tmp_for(target);
        std::fs::write(&tmp, data).map_err(|e| io(&tmp, e))?;
        let f = std::fs::File::open(&tmp).map_err(|e| io(&tmp, e))?;
        f.sync_all().map_err(|e| io(&tmp, e))?;
        Ok(tmp)
    }
}

/// Moves the filled temporary file `tmp` to `target` durably: `tmp` synced, renamed into
/// place, the directory synced; on failure `tmp` is removed. Errors name `target`.
fn place(tmp: &Path, target: &Path) -> Result<()> {
    let placed = std::fs::File::open(tmp)
        .and_then(|f| f.sync_all())
        .and_then(|()| std::fs::rename(tmp, target));
    if let Err(e) = placed {
        let _ = std::fs::remove_file(tmp);
        return Err(io(target, e));
    }
    sync_dir(target.parent());
    Ok(())
}

fn sync_dir(dir: Option<&Path>) {
    if let Some(d) = dir
        && let Ok(f) = std::fs::File::open(d)
    {
        let _ = f.sync_all();
    }
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    walk_matching(dir, "", out)
}

/// As [`walk`], entering only the entries of `dir` whose names start with `name_prefix` (every
/// entry below them).
fn walk_matching(dir: &Path, name_prefix: &str, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in rd {
        let entry = entry?;
        if !name_prefix.is_empty() && !entry.file_name().to_string_lossy().starts_with(name_prefix) {
            continue;
        }
        let ft = entry.file_type()?;
        if ft.is_dir() {
            walk(&entry.path(), out)?;
        } else if ft.is_file() {
            out.push(entry.path());
        }
    }
    Ok(())
}

/// The blocking bodies of the [`ObjectStore`] methods; the trait runs each on tokio's blocking
/// pool, so a slow disk (an `fsync` of a large part can take seconds) never stalls the async
/// threads that carry heartbeats and records.
impl LocalStore {
    fn put_blocking(&self, path: &str, data: Bytes) -> Result<()> {
        let target = self.full(path);
        let tmp = self.write_tmp(&target, &data)?;
        std::fs::rename(&tmp, &target).map_err(|e| io(&target, e))?;
        sync_dir(target.parent());
        Ok(())
    }

    /// [`ObjectStore::put_file`]: `local` copied by the kernel into a temporary file beside
    /// the target, synced, renamed into place, the directory synced.
    fn put_file_blocking(&self, path: &str, local: &Path) -> Result<()> {
        let target = self.full(path);
        if let Some(dir) = target.parent() {
            std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        }
        let tmp = self.tmp_for(&target);
        // Opened first, so an error names the file that failed: reading `local`, or writing
        // the copy (a full checkpoint directory names the checkpoint's file, not the source).
        let mut from = std::fs::File::open(local).map_err(|e| io(local, e))?;
        let copied = std::fs::File::create(&tmp).and_then(|mut to| std::io::copy(&mut from, &mut to));
        if let Err(e) = copied {
            let _ = std::fs::remove_file(&tmp);
            return Err(StorageError::Io {
                path: format!("{} (copying {})", tmp.display(), local.display()),
                source: e,
            });
        }
        place(&tmp, &target)
    }

    /// [`ObjectStore::link_from_local`]: `local` linked under a temporary name beside the
    /// target, synced, renamed into place, the directory synced (as [`LocalStore::put_blocking`]
    /// does for written bytes).
    fn link_from_local_blocking(&self, path: &str, local: &Path) -> Result<bool> {
        let target = self.full(path);
        if let Some(dir) = target.parent() {
            std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        }
        let tmp = self.tmp_for(&target);
        if std::fs::hard_link(local, &tmp).is_err() {
            return Ok(false);
        }
        place(&tmp, &target).map(|()| true)
    }

    /// [`ObjectStore::link_to_local`]: any file at `local` removed, then the object linked
    /// there.
    fn link_to_local_blocking(&self, path: &str, local: &Path) -> bool {
        let _ = std::fs::remove_file(local);
        std::fs::hard_link(self.full(path), local).is_ok()
    }

    fn put_if_absent_blocking(&self, path: &str, data: Bytes) -> Result<PutOutcome> {
        let target = self.full(path);
        let tmp = self.write_tmp(&target, &data)?;
        let res = std::fs::hard_link(&tmp, &target);
        let _ = std::fs::remove_file(&tmp);
        match res {
            Ok(()) => {
                sync_dir(target.parent());
                Ok(PutOutcome::Created)
            }
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(PutOutcome::AlreadyExists),
            Err(e) => Err(io(&target, e)),
        }
    }

    fn get_blocking(&self, path: &str) -> Result<Bytes> {
        let p = self.full(path);
        std::fs::read(&p).map(Bytes::from).map_err(|e| io(&p, e))
    }

    fn get_from_blocking(&self, path: &str, offset: u64) -> Result<Bytes> {
        use std::io::{Read, Seek, SeekFrom};
        let p = self.full(path);
        let mut f = std::fs::File::open(&p).map_err(|e| io(&p, e))?;
        f.seek(SeekFrom::Start(offset)).map_err(|e| io(&p, e))?;
        let mut buf = Vec::new();
        f.read_to_end(&mut buf).map_err(|e| io(&p, e))?;
        Ok(Bytes::from(buf))
    }

    fn exists_blocking(&self, path: &str) -> Result<bool> {
        Ok(self.full(path).is_file())
    }

    fn list_blocking(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        // Walk the deepest directory the prefix names, entering only the entries whose names
        // start with the prefix's last, partial component (`job/chk-` walks `job/chk-*`, not
        // `job/shared/`), then filter by the full prefix.
        let (dir_part, partial) = match prefix.rfind('/') {
            Some(i) => (&prefix[..i], &prefix[i + 1..]),
            None => ("", prefix),
        };
        let base = self.full(dir_part);
        let mut files = Vec::new();
        walk_matching(&base, partial, &mut files).map_err(|e| io(&base, e))?;
        let mut out = Vec::new();
        for f in files {
            let Ok(rel) = f.strip_prefix(&self.root) else {
                continue;
            };
            let rel = rel.to_string_lossy().replace(std::path::MAIN_SEPARATOR, "/");
            let hidden = rel.split('/').any(|c| c.starts_with('.'));
            if rel.starts_with(prefix) && !hidden {
                let size = f.metadata().map(|m| m.len()).unwrap_or(0);
                out.push(ObjectMeta { path: rel, size });
            }
        }
        out.sort_by(|a, b| a.path.cmp(&b.path));
        Ok(out)
    }

    /// [`ObjectStore::list_temporaries`]: the hidden temporary files directly in the directory
    /// `prefix` names ([`LocalStore::tmp_for`], [`LocalStore::staging`]), with the object each
    /// was writing; none when the directory does not exist.
    fn list_temporaries_blocking(&self, prefix: &str) -> Result<Vec<(String, String)>> {
        let dir_path = prefix.trim_end_matches('/');
        let dir = self.full(dir_path);
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io(&dir, e)),
        };
        let mut out = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| io(&dir, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if let Some(target) = temporary_target(&name) {
                out.push((join(dir_path, &name), join(dir_path, target)));
            }
        }
        out.sort();
        Ok(out)
    }

    /// [`ObjectStore::list_directories`]: the subdirectories of the directory `prefix` names,
    /// hidden ones (`.`) left out, whatever they hold (temporary files too); none when it does
    /// not exist.
    fn list_directories_blocking(&self, prefix: &str) -> Result<Vec<String>> {
        let dir = self.full(prefix.trim_end_matches('/'));
        let entries = match std::fs::read_dir(&dir) {
            Ok(entries) => entries,
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(e) => return Err(io(&dir, e)),
        };
        let mut names = Vec::new();
        for entry in entries {
            let entry = entry.map_err(|e| io(&dir, e))?;
            let name = entry.file_name().to_string_lossy().into_owned();
            if !name.starts_with('.') && entry.file_type().is_ok_and(|t| t.is_dir()) {
                names.push(name);
            }
        }
        names.sort();
        Ok(names)
    }

    fn delete_blocking(&self, path: &str) -> Result<()> {
        let p = self.full(path);
        match std::fs::remove_file(&p) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
            Err(e) => return Err(io(&p, e)),
        }
        // Remove now-empty parent directories up to the root, as object stores have none.
        let mut dir = p.parent();
        while let Some(d) = dir {
            if d == self.root || std::fs::remove_dir(d).is_err() {
                break;
            }
            dir = d.parent();
        }
        Ok(())
    }

    fn delete_prefix_blocking(&self, prefix: &str) -> Result<()> {
        let p = self.full(prefix.trim_end_matches('/'));
        if prefix.ends_with('/') && p.is_dir() {
            return match std::fs::remove_dir_all(&p) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(io(&p, e)),
            };
        }
        for o in self.list_blocking(prefix)? {
            self.delete_blocking(&o.path)?;
        }
        Ok(())
    }

    fn create_multipart_blocking(&self, path: &str) -> Result<MultipartUpload> {
        let n = TMP_SEQ.fetch_add(1, Ordering::Relaxed);
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        let upload = MultipartUpload {
            path: path.to_string(),
            upload_id: format!("{:x}-{}-{n}", nanos, std::process::id()),
            parts: Vec::new(),
        };
        let staging = self.staging(&upload);
        if let Some(dir) = staging.parent() {
            std::fs::create_dir_all(dir).map_err(|e| io(dir, e))?;
        }
        std::fs::File::create_new(&staging).map_err(|e| io(&staging, e))?;
        // The checkpoint that records this upload must find its staging file after a crash.
        sync_dir(staging.parent());
        Ok(upload)
    }

    /// Writes the part at its offset in the upload's staging file (the sum of the recorded
    /// parts' lengths: every recorded part precedes it) and fsyncs it, so each byte is written
    /// once. The part number follows the last recorded one, as on S3. Uploading part n again
    /// from the same recorded state (a retry, or a run restored from a checkpoint taken before
    /// part n) writes at the same offset, so the same bytes give the same object. The staging
    /// file is opened without `create`: uploading to a completed or aborted upload is
    /// `NotFound`, never a new orphaned file.
    fn upload_part_blocking(&self, upload: &mut MultipartUpload, data: Bytes) -> Result<()> {
        use std::os::unix::fs::FileExt;
        let staging = self.staging(upload);
        let offset = recorded_length(upload, &staging)?;
        let number = upload.parts.last().map_or(0, |(n, _)| *n) + 1;
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&staging)
            .map_err(|e| io(&staging, e))?;
        file.write_all_at(&data, offset).map_err(|e| io(&staging, e))?;
        file.sync_data().map_err(|e| io(&staging, e))?;
        upload.parts.push((number, data.len().to_string()));
        Ok(())
    }

    /// Writes part `number` at `offset` of the upload's staging file, without an `fsync`
    /// (completion syncs the whole file before the rename that makes it visible), and starts
    /// the part's writeback to the device ([`start_writeback`]); returns its length as the
    /// part's token.
    fn upload_part_at_blocking(&self, upload: &MultipartUpload, offset: u64, data: &[u8]) -> Result<String> {
        use std::os::unix::fs::FileExt;
        let staging = self.staging(upload);
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&staging)
            .map_err(|e| io(&staging, e))?;
        file.write_all_at(data, offset).map_err(|e| io(&staging, e))?;
        start_writeback(&file, offset, data.len());
        Ok(data.len().to_string())
    }

    /// Commits the upload: cuts the staging file to the recorded length (a re-uploaded part
    /// may have left bytes of an earlier, longer attempt behind it), fsyncs it and renames it
    /// into place. The rename is the commit point; nothing is copied.
    fn complete_multipart_blocking(&self, upload: &MultipartUpload) -> Result<()> {
        let target = self.full(&upload.path);
        let staging = self.staging(upload);
        if target.is_file() {
            // Already completed: the rename is the commit point and part names are unique per
            // run, so an existing target is this upload's result. Staging left beside it can
            // only be a directory of the earlier layout whose cleanup a crash interrupted:
            // finish removing it.
            return remove_staging(&staging);
        }
        let metadata = match std::fs::symlink_metadata(&staging) {
            Ok(m) => m,
            Err(e) => return Err(io(&staging, e)),
        };
        if metadata.is_dir() {
            return self.complete_legacy_staging_directory(upload, &staging, &target);
        }
        let expected = recorded_length(upload, &staging)?;
        if metadata.len() < expected {
            return Err(io(
                &staging,
                std::io::Error::other(format!(
                    "staging data has {} bytes, the recorded parts add up to {expected}",
                    metadata.len()
                )),
            ));
        }
        let file = std::fs::OpenOptions::new()
            .write(true)
            .open(&staging)
            .map_err(|e| io(&staging, e))?;
        if metadata.len() > expected {
            file.set_len(expected).map_err(|e| io(&staging, e))?;
        }
        file.sync_all().map_err(|e| io(&staging, e))?;
        drop(file);
        std::fs::rename(&staging, &target).map_err(|e| io(&target, e))?;
        sync_dir(target.parent());
        Ok(())
    }

    /// Completes an upload staged by an earlier version as a directory of numbered part files
    /// (a restore point written before the upgrade may still name one): concatenates the parts
    /// by streaming into a temporary file, renames it into place, removes the directory.
    fn complete_legacy_staging_directory(&self, upload: &MultipartUpload, dir: &Path, target: &Path) -> Result<()> {
        let tmp = self.tmp_for(target);
        let mut out = std::fs::File::create(&tmp).map_err(|e| io(&tmp, e))?;
        for (number, len) in &upload.parts {
            let part = dir.join(format!("{number:05}"));
            let mut input = std::fs::File::open(&part).map_err(|e| io(&part, e))?;
            let copied = std::io::copy(&mut input, &mut out).map_err(|e| io(&part, e))?;
            if copied.to_string() != *len {
                let _ = std::fs::remove_file(&tmp);
                return Err(io(
                    &part,
                    std::io::Error::other(format!("part has {copied} bytes, expected {len}")),
                ));
            }
        }
        out.sync_all().map_err(|e| io(&tmp, e))?;
        drop(out);
        std::fs::rename(&tmp, target).map_err(|e| io(target, e))?;
        sync_dir(target.parent());
        remove_staging(dir)
    }

    fn abort_multipart_blocking(&self, upload: &MultipartUpload) -> Result<()> {
        remove_staging(&self.staging(upload))
    }
}

/// Asks the kernel to start writing `len` bytes of `file` at `offset` to the device without
/// waiting (Linux `sync_file_range(SYNC_FILE_RANGE_WRITE)`, as RocksDB's `bytes_per_sync`
/// does), so the `fsync` that completes an upload finds most of its file written instead of
/// writing all of it then. Best effort: an error is ignored (that `fsync` is the durability
/// point and reports any), and elsewhere it does nothing.
fn start_writeback(file: &std::fs::File, offset: u64, len: usize) {
    #[cfg(target_os = "linux")]
    {
        use std::os::fd::AsRawFd;
        // SAFETY: the descriptor is open for the call's duration (`file` is borrowed); the
        // call only reads the range's arguments.
        unsafe {
            libc::sync_file_range(
                file.as_raw_fd(),
                offset as libc::off64_t,
                len as libc::off64_t,
                libc::SYNC_FILE_RANGE_WRITE,
            );
        }
    }
    #[cfg(not(target_os = "linux"))]
    let _ = (file, offset, len);
}

/// The sum of the lengths recorded for `upload`'s parts (the local store records each part's
/// length as its token). Errors name the staging path when a token is not a length.
fn recorded_length(upload: &MultipartUpload, staging: &Path) -> Result<u64> {
    upload.parts.iter().try_fold(0u64, |total, (number, token)| {
        let len: u64 = token.parse().map_err(|_| {
            io(
                staging,
                std::io::Error::other(format!(
                    "part {number} of upload {} records `{token}`, not a length: \
                     the upload was not made by the local store",
                    upload.upload_id
                )),
            )
        })?;
        Ok(total + len)
    })
}

/// Removes an upload's staging data, a file or (earlier layout) a directory; missing is Ok.
fn remove_staging(staging: &Path) -> Result<()> {
    let removed = match std::fs::symlink_metadata(staging) {
        Ok(m) if m.is_dir() => std::fs::remove_dir_all(staging),
        Ok(_) => std::fs::remove_file(staging),
        Err(e) => Err(e),
    };
    match removed {
        Ok(()) => Ok(()),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
        Err(e) => Err(io(staging, e)),
    }
}

/// Runs `work` on tokio's blocking pool with a clone of the store.
async fn blocking<T: Send + 'static>(
    store: &LocalStore,
    work: impl FnOnce(LocalStore) -> Result<T> + Send + 'static,
) -> Result<T> {
    let store = store.clone();
    tokio::task::spawn_blocking(move || work(store))
        .await
        .map_err(|e| StorageError::Io {
            path: "local store".into(),
            source: std::io::Error::other(crate::exec::panics::join_failure("the local store's file operation", e)),
        })?
}

#[async_trait]
impl ObjectStore for LocalStore {
    fn url(&self, path: &str) -> String {
        format!("file://{}", self.full(path).display())
    }

    async fn put(&self, path: &str, data: Bytes) -> Result<()> {
        let path = path.to_string();
        blocking(self, move |s| s.put_blocking(&path, data)).await
    }

    async fn put_if_absent(&self, path: &str, data: Bytes) -> Result<PutOutcome> {
        let path = path.to_string();
        blocking(self, move |s| s.put_if_absent_blocking(&path, data)).await
    }

    async fn get(&self, path: &str) -> Result<Bytes> {
        let path = path.to_string();
        blocking(self, move |s| s.get_blocking(&path)).await
    }

    async fn put_file(&self, path: &str, local: &Path) -> Result<()> {
        let (path, local) = (path.to_string(), local.to_path_buf());
        blocking(self, move |s| s.put_file_blocking(&path, &local)).await
    }

    async fn link_from_local(&self, path: &str, local: &Path) -> Result<bool> {
        let (path, local) = (path.to_string(), local.to_path_buf());
        blocking(self, move |s| s.link_from_local_blocking(&path, &local)).await
    }

    fn parts_are_local_writes(&self) -> bool {
        true
    }

    fn local_file(&self, path: &str) -> Option<PathBuf> {
        Some(self.full(path))
    }

    async fn link_to_local(&self, path: &str, local: &Path) -> bool {
        let (path, local) = (path.to_string(), local.to_path_buf());
        blocking(self, move |s| Ok(s.link_to_local_blocking(&path, &local)))
            .await
            .unwrap_or(false)
    }

    async fn get_stream(&self, path: &str) -> Result<ByteChunks> {
        let full = self.full(path);
        let opened = full.clone();
        let file = tokio::task::spawn_blocking(move || std::fs::File::open(&opened))
            .await
            .map_err(|e| StorageError::Io {
                path: "local store".into(),
                source: std::io::Error::other(crate::exec::panics::join_failure("the local store's file operation", e)),
            })?
            .map_err(|e| io(&full, e))?;
        // The file, `STREAM_CHUNK_BYTES` at a time, each read on the blocking pool.
        Ok(Box::pin(futures::stream::unfold(Some(file), move |file| {
            let full = full.clone();
            async move {
                let mut file = file?;
                let read = tokio::task::spawn_blocking(move || {
                    use std::io::Read;
                    let mut chunk = vec![0u8; STREAM_CHUNK_BYTES];
                    let mut filled = 0;
                    while filled < chunk.len() {
                        match file.read(&mut chunk[filled..]) {
                            Ok(0) => break,
                            Ok(n) => filled += n,
                            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
                            Err(e) => return (Err(e), None),
                        }
                    }
                    chunk.truncate(filled);
                    (Ok(chunk), Some(file))
                })
                .await;
                match read {
                    Ok((Ok(chunk), _)) if chunk.is_empty() => None,
                    Ok((Ok(chunk), file)) => Some((Ok(Bytes::from(chunk)), file)),
                    Ok((Err(e), _)) => Some((Err(io(&full, e)), None)),
                    Err(e) => Some((
                        Err(StorageError::Io {
                            path: full.display().to_string(),
                            source: std::io::Error::other(crate::exec::panics::join_failure(
                                "the local store's file read",
                                e,
                            )),
                        }),
                        None,
                    )),
                }
            }
        })))
    }

    async fn get_from(&self, path: &str, offset: u64) -> Result<Bytes> {
        let path = path.to_string();
        blocking(self, move |s| s.get_from_blocking(&path, offset)).await
    }

    async fn exists(&self, path: &str) -> Result<bool> {
        let path = path.to_string();
        blocking(self, move |s| s.exists_blocking(&path)).await
    }

    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>> {
        let prefix = prefix.to_string();
        blocking(self, move |s| s.list_blocking(&prefix)).await
    }

    async fn delete(&self, path: &str) -> Result<()> {
        let path = path.to_string();
        blocking(self, move |s| s.delete_blocking(&path)).await
    }

    async fn delete_prefix(&self, prefix: &str) -> Result<()> {
        let prefix = prefix.to_string();
        blocking(self, move |s| s.delete_prefix_blocking(&prefix)).await
    }

    async fn list_directories(&self, prefix: &str) -> Result<Vec<String>> {
        let prefix = prefix.to_string();
        blocking(self, move |s| s.list_directories_blocking(&prefix)).await
    }

    async fn list_temporaries(&self, prefix: &str) -> Result<Vec<(String, String)>> {
        let prefix = prefix.to_string();
        blocking(self, move |s| s.list_temporaries_blocking(&prefix)).await
    }

    async fn create_multipart(&self, path: &str) -> Result<MultipartUpload> {
        let path = path.to_string();
        blocking(self, move |s| s.create_multipart_blocking(&path)).await
    }

    async fn upload_part(&self, upload: &mut MultipartUpload, data: Bytes) -> Result<()> {
        let mut owned = upload.clone();
        let owned = blocking(self, move |s| s.upload_part_blocking(&mut owned, data).map(|()| owned)).await?;
        *upload = owned;
        Ok(())
    }

    async fn upload_part_at(&self, upload: &MultipartUpload, _number: i32, offset: u64, data: Bytes) -> Result<String> {
        let upload = upload.clone();
        blocking(self, move |s| s.upload_part_at_blocking(&upload, offset, &data)).await
    }

    async fn complete_multipart(&self, upload: &MultipartUpload) -> Result<()> {
        let upload = upload.clone();
        blocking(self, move |s| s.complete_multipart_blocking(&upload)).await
    }

    async fn abort_multipart(&self, upload: &MultipartUpload) -> Result<()> {
        let upload = upload.clone();
        blocking(self, move |s| s.abort_multipart_blocking(&upload)).await
    }
}

#[cfg(test)]
mod tests;
