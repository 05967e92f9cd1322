//! Local filesystem store. Atomic writes by temp file + rename; conditional create by
//! `link(2)`, which fails if the target exists; multipart uploads staged as numbered part
//! files in a hidden directory and concatenated + renamed on completion.

use super::*;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

/// A store rooted at a local directory (created on demand).
#[derive(Debug, Clone)]
pub struct LocalStore {
    root: PathBuf,
}

static TMP_SEQ: AtomicU64 = AtomicU64::new(0);

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

fn sync_dir(dir: Option<&Path>) {
    if let Some(d) = dir
        && let Ok(f) = std::fs::File::open(d)
    {
        let _ = f.sync_all();
    }
}

fn walk(dir: &Path, out: &mut Vec<PathBuf>) -> std::io::Result<()> {
    let rd = match std::fs::read_dir(dir) {
        Ok(rd) => rd,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    for entry in rd {
        let entry = entry?;
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
        // Walk the deepest directory the prefix names, then filter by the full prefix.
        let dir_part = match prefix.rfind('/') {
            Some(i) => &prefix[..i],
            None => "",
        };
        let base = self.full(dir_part);
        let mut files = Vec::new();
        walk(&base, &mut files).map_err(|e| io(&base, e))?;
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
        let dir = self.staging(&upload);
        std::fs::create_dir_all(&dir).map_err(|e| io(&dir, e))?;
        Ok(upload)
    }

    fn upload_part_blocking(&self, upload: &mut MultipartUpload, data: Bytes) -> Result<()> {
        let number = upload.parts.len() as i32 + 1;
        let dir = self.staging(upload);
        let part = dir.join(format!("{number:05}"));
        std::fs::write(&part, &data).map_err(|e| io(&part, e))?;
        std::fs::File::open(&part)
            .and_then(|f| f.sync_all())
            .map_err(|e| io(&part, e))?;
        upload.parts.push((number, format!("{}", data.len())));
        Ok(())
    }

    fn complete_multipart_blocking(&self, upload: &MultipartUpload) -> Result<()> {
        let target = self.full(&upload.path);
        let dir = self.staging(upload);
        if target.is_file() {
            // Already completed: the rename below is the commit point and part names are
            // unique per run, so an existing target is this upload's result. A crash during
            // the staging cleanup can leave the directory half-removed; finish removing it.
            return match std::fs::remove_dir_all(&dir) {
                Ok(()) => Ok(()),
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
                Err(e) => Err(io(&dir, e)),
            };
        }
        if !dir.exists() {
            return Err(StorageError::NotFound(dir.display().to_string()));
        }
        // Concatenate the parts into a temporary file by streaming (never all in memory).
        if let Some(parent) = target.parent() {
            std::fs::create_dir_all(parent).map_err(|e| io(parent, e))?;
        }
        let tmp = self.tmp_for(&target);
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
        std::fs::rename(&tmp, &target).map_err(|e| io(&target, e))?;
        sync_dir(target.parent());
        std::fs::remove_dir_all(&dir).map_err(|e| io(&dir, e))?;
        Ok(())
    }

    fn abort_multipart_blocking(&self, upload: &MultipartUpload) -> Result<()> {
        let dir = self.staging(upload);
        match std::fs::remove_dir_all(&dir) {
            Ok(()) => Ok(()),
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(()),
            Err(e) => Err(io(&dir, e)),
        }
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
            source: std::io::Error::other(format!("blocking task failed: {e}")),
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
mod tests {
    use super::*;

    /// A crash inside `complete_multipart`'s cleanup (after the rename, while the staging
    /// directory is being removed) leaves the directory without its part files. Completing
    /// again on restore must succeed and keep the committed bytes.
    #[tokio::test]
    async fn completion_after_a_crash_during_staging_cleanup_is_ok() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::new(dir.path()).unwrap();
        let mut upload = store.create_multipart("out/part-0").await.unwrap();
        store
            .upload_part(&mut upload, Bytes::from_static(b"a\nb\n"))
            .await
            .unwrap();
        store.complete_multipart(&upload).await.unwrap();
        let staging = store.staging(&upload);
        std::fs::create_dir_all(&staging).unwrap(); // files gone, directory not yet
        store.complete_multipart(&upload).await.unwrap();
        assert_eq!(store.get("out/part-0").await.unwrap(), Bytes::from_static(b"a\nb\n"));
        assert!(!staging.exists(), "leftover staging directory is removed");
    }

    /// An upload that was never completed and whose staging is gone is reported, not
    /// silently turned into an empty object.
    #[tokio::test]
    async fn completion_without_staging_or_target_is_not_found() {
        let dir = tempfile::tempdir().unwrap();
        let store = LocalStore::new(dir.path()).unwrap();
        let mut upload = store.create_multipart("out/part-1").await.unwrap();
        store
            .upload_part(&mut upload, Bytes::from_static(b"x\n"))
            .await
            .unwrap();
        std::fs::remove_dir_all(store.staging(&upload)).unwrap();
        let err = store.complete_multipart(&upload).await.unwrap_err();
        assert!(matches!(err, StorageError::NotFound(_)), "{err}");
    }
}
