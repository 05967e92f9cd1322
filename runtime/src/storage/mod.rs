//! Object storage behind one trait: the local filesystem and S3 (aws-sdk-s3). Checkpoints,
//! savepoints, file sources and the transactional file sink all go through [`ObjectStore`].
//!
//! Paths are `/`-separated keys relative to the store's root (for S3: the bucket plus an
//! optional prefix; for local: a directory).

mod local;
mod s3;

pub use local::LocalStore;
pub use s3::{MULTIPART_PART_SIZE, MULTIPART_THRESHOLD, S3Store};

use async_trait::async_trait;
use bytes::Bytes;
use std::sync::Arc;

/// What to do about an error whose `message` says a file system is full (`No space left on
/// device`, `Disk quota exceeded`), to append to it; empty for any other message, and for one
/// that carries the advice already.
pub fn full_disk_advice(message: &str) -> &'static str {
    const ADVICE: &str = "; its file system is full: free space there, or move that directory to a larger \
         volume (state: --state-dir or WEIR_STATE_DIR, or the pods' weir-state volume; checkpoints: \
         spec.checkpointing.storage; a file sink: its path), then restore from the latest \
         checkpoint (`weir run --restore latest`; the operator restarts on its own): what was \
         committed is kept";
    let full = ["No space left on device", "Disk quota exceeded"]
        .iter()
        .any(|m| message.contains(m));
    if full && !message.contains("its file system is full") {
        ADVICE
    } else {
        ""
    }
}

/// Storage errors. `NotFound` is distinct so callers can treat a missing object as data.
#[derive(Debug, thiserror::Error)]
pub enum StorageError {
    /// The object does not exist.
    #[error("{0}: not found")]
    NotFound(String),
    /// A URL the stores cannot serve.
    #[error("invalid storage URL `{0}`: {1}")]
    InvalidUrl(String, String),
    /// Local I/O failure; a full file system adds what to do ([`full_disk_advice`]).
    #[error("{path}: {source}{advice}", advice = full_disk_advice(&source.to_string()))]
    Io {
        /// Full path or URL of the object.
        path: String,
        /// The cause.
        source: std::io::Error,
    },
    /// S3 request failure.
    #[error("{path}: S3 {op} failed: {message}")]
    S3 {
        /// Full URL of the object.
        path: String,
        /// The operation (`PutObject`, ...).
        op: &'static str,
        /// The service's message.
        message: String,
    },
}

/// Result alias.
pub type Result<T> = std::result::Result<T, StorageError>;

/// Outcome of a conditional create.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PutOutcome {
    /// The object was created.
    Created,
    /// An object already existed at the path; nothing was written.
    AlreadyExists,
}

/// One listed object.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectMeta {
    /// Path relative to the store root.
    pub path: String,
    /// Size in bytes.
    pub size: u64,
}

/// A multipart upload in progress: enough to resume and complete it from another process
/// (it is stored in the file sink's checkpointed state).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct MultipartUpload {
    /// Destination path relative to the store root.
    pub path: String,
    /// The store's upload id.
    pub upload_id: String,
    /// Completed parts as (part number starting at 1, ETag or local token), in order.
    pub parts: Vec<(i32, String)>,
}

/// The chunks of an object read by [`ObjectStore::get_stream`], in order.
pub type ByteChunks = futures::stream::BoxStream<'static, Result<Bytes>>;

/// Bytes the local store reads at a time for [`ObjectStore::get_stream`] (1 MiB).
pub const STREAM_CHUNK_BYTES: usize = 1 << 20;

/// Minimum size of every part but the last, as S3 requires.
pub const MIN_PART_SIZE: usize = 5 * 1024 * 1024;

/// An object store. Implementations must be cheap to share (`Arc<dyn ObjectStore>`).
#[async_trait]
pub trait ObjectStore: Send + Sync + std::fmt::Debug {
    /// A display URL for `path` (for messages): `file:///abs/dir/path` or `s3://bucket/key`.
    fn url(&self, path: &str) -> String;

    /// Writes an object, replacing any existing one, atomically (readers see the old or the
    /// new object, never a partial one).
    async fn put(&self, path: &str, data: Bytes) -> Result<()>;

    /// Creates an object only if none exists at `path` (S3: `If-None-Match: *`; local: a hard
    /// link that fails if the target exists). Two concurrent writers: exactly one gets
    /// `Created`.
    async fn put_if_absent(&self, path: &str, data: Bytes) -> Result<PutOutcome>;

    /// Reads a whole object. Errors: `NotFound`.
    async fn get(&self, path: &str) -> Result<Bytes>;

    /// Reads from byte `offset` to the end. Errors: `NotFound`.
    async fn get_from(&self, path: &str, offset: u64) -> Result<Bytes>;

    /// Reads a whole object as a stream of chunks, in order, so a caller can write it out
    /// without holding it whole (a native checkpoint's table files, up to 64 MiB each). The
    /// default reads it whole ([`ObjectStore::get`]) as one chunk; S3 streams the response
    /// body, the local store reads the file [`STREAM_CHUNK_BYTES`] at a time. Errors:
    /// `NotFound` (before the first chunk); a failure while reading ends the stream with it.
    async fn get_stream(&self, path: &str) -> Result<ByteChunks> {
        let whole = self.get(path).await?;
        Ok(Box::pin(futures::stream::once(async move { Ok(whole) })))
    }

    /// Writes the local file `local` (which no one changes meanwhile) as the object at `path`,
    /// replacing any, atomically, without holding the file in memory where the store can: S3
    /// sends it as one streamed `PutObject` up to [`MULTIPART_THRESHOLD`] (a larger file is
    /// read whole and put as [`ObjectStore::put`] puts it), the local store copies it in the
    /// kernel (`copy_file_range`) into a temporary file that it syncs and renames into place.
    /// The default reads it whole and puts it. Errors: the file cannot be read (naming it), or
    /// the store's.
    async fn put_file(&self, path: &str, local: &std::path::Path) -> Result<()> {
        let data = tokio::fs::read(local).await.map_err(|e| StorageError::Io {
            path: local.display().to_string(),
            source: e,
        })?;
        self.put(path, Bytes::from(data)).await
    }

    /// Places the local file `local` at `path` without sending its bytes, where this store
    /// can: the local store hard-links it (as RocksDB's own checkpoints link table files) when
    /// both are on one file system, and syncs it. Only for a file no one writes again (a
    /// table file of a native checkpoint): the object and the file then share their bytes.
    /// Returns whether it placed it; `false` (the default, and whenever a link cannot be made:
    /// another file system, no permission) leaves the caller to send the bytes. Errors: a link
    /// was made but could not be synced or moved into place (naming the path).
    async fn link_from_local(&self, _path: &str, _local: &std::path::Path) -> Result<bool> {
        Ok(false)
    }

    /// Places the object at `path` as the local file `local` (replacing any) without copying
    /// its bytes, where this store can: the local store hard-links it when both are on one
    /// file system. Only for an object no one writes again whose local file is only read or
    /// deleted (a restored table file: RocksDB never writes a table file it has written, it
    /// deletes it). Returns whether it placed it; `false` (the default, and whenever a link
    /// cannot be made) leaves the caller to download the bytes. Never an error: a missing
    /// object is `false`, and the download then reports it.
    async fn link_to_local(&self, _path: &str, _local: &std::path::Path) -> bool {
        false
    }

    /// The local file that holds the object at `path`, when this store is a local directory
    /// (`None`, the default: a remote store). Only for reading an object no one writes again
    /// (a restore maps a state file in place, `checkpoint/mapped_files.rs`).
    fn local_file(&self, _path: &str) -> Option<std::path::PathBuf> {
        None
    }

    /// Whether a multipart upload's parts are writes into one local staging file (the local
    /// store) rather than requests (S3). A writer in parts then cuts small ones (1 MiB,
    /// `checkpoint::part_schedule::LOCAL_FILE_PARTS`): a part costs a write, not a request,
    /// and each part in flight is a buffer in memory. Default `false` (S3's 8 MiB parts).
    fn parts_are_local_writes(&self) -> bool {
        false
    }

    /// Whether an object exists.
    async fn exists(&self, path: &str) -> Result<bool>;

    /// Lists objects whose path starts with `prefix` (recursively), sorted by path.
    async fn list(&self, prefix: &str) -> Result<Vec<ObjectMeta>>;

    /// The names of the directories directly under `prefix` (a "directory": `job/`), sorted,
    /// each once, including a directory that holds only the temporary files of writes cut off
    /// by a crash, which [`ObjectStore::list`] does not show (a local store's). Default: the
    /// first path component after `prefix` of every listed object that has one (an object
    /// store has no directories of its own).
    async fn list_directories(&self, prefix: &str) -> Result<Vec<String>> {
        let mut names: Vec<String> = self
            .list(prefix)
            .await?
            .iter()
            .filter_map(|o| {
                o.path
                    .strip_prefix(prefix)?
                    .split_once('/')
                    .map(|(name, _)| name.to_string())
            })
            .collect();
        names.sort();
        names.dedup();
        Ok(names)
    }

    /// The store's own temporary files directly in the directory `prefix` names (`job/shared/`),
    /// which [`ObjectStore::list`] hides: a write or multipart upload cut off by a crash leaves
    /// them (a local store's `.<name>.tmp-<pid>-<n>` and `.<name>.upload-<id>`). Each as `(its
    /// path, the path of the object it was writing)`, sorted; [`ObjectStore::delete`] removes
    /// one. Default: none (S3 shows no partial object; its incomplete multipart uploads are the
    /// bucket lifecycle rule's, docs/operations/s3.md).
    async fn list_temporaries(&self, _prefix: &str) -> Result<Vec<(String, String)>> {
        Ok(Vec::new())
    }

    /// Deletes one object; deleting a missing object is not an error.
    async fn delete(&self, path: &str) -> Result<()>;

    /// Deletes every object under `prefix` (a "directory" when it ends with `/`).
    async fn delete_prefix(&self, prefix: &str) -> Result<()> {
        for o in self.list(prefix).await? {
            self.delete(&o.path).await?;
        }
        Ok(())
    }

    /// Starts a multipart upload to `path`; nothing is visible at `path` until
    /// [`ObjectStore::complete_multipart`].
    async fn create_multipart(&self, path: &str) -> Result<MultipartUpload>;

    /// Uploads the next part (every part but the last must be at least [`MIN_PART_SIZE`] on
    /// S3) and records it in `upload.parts`.
    async fn upload_part(&self, upload: &mut MultipartUpload, data: Bytes) -> Result<()>;

    /// Uploads part `number` (from 1) of `upload`: the object's bytes from `offset` on (the
    /// lengths of the parts before it, which the caller knows), and returns the token the
    /// caller records for it in `upload.parts` (S3: the ETag; local: the length), in number
    /// order, before [`ObjectStore::complete_multipart`]. Unlike
    /// [`ObjectStore::upload_part`], parts may be uploaded concurrently and in any order, and a
    /// part need only be durable once the upload completes (the local store writes it
    /// without an `fsync` and syncs the whole file once, at completion): for an upload that the
    /// same run completes or abandons (a checkpoint's state files), not for one recorded in a
    /// checkpoint and resumed after a crash (the file sink's).
    async fn upload_part_at(&self, upload: &MultipartUpload, number: i32, offset: u64, data: Bytes) -> Result<String>;

    /// Completes the upload, making the object visible at once. Idempotent: completing an
    /// upload that was already completed (the object exists and the upload is gone) is Ok.
    async fn complete_multipart(&self, upload: &MultipartUpload) -> Result<()>;

    /// Abandons an upload and its parts; a missing upload is not an error.
    async fn abort_multipart(&self, upload: &MultipartUpload) -> Result<()>;
}

/// A shared store.
pub type Store = Arc<dyn ObjectStore>;

/// S3 client settings (from `spec.s3`, then the environment).
#[derive(Debug, Clone, Default)]
pub struct S3Options {
    /// Custom endpoint (MinIO, Ceph, moto). Falls back to `AWS_ENDPOINT_URL(_S3)`.
    pub endpoint: Option<String>,
    /// Region. Falls back to the default chain, then `us-east-1`.
    pub region: Option<String>,
    /// Path-style addressing; also enabled by `WEIR_S3_PATH_STYLE=true`.
    pub path_style: bool,
    /// Static credentials (e.g. read by the operator from a job's secret); when unset, the
    /// default AWS credential chain.
    pub credentials: Option<StaticCredentials>,
}

/// An access key pair.
#[derive(Clone, Default, PartialEq, Eq)]
pub struct StaticCredentials {
    /// Access key id.
    pub access_key_id: String,
    /// Secret access key.
    pub secret_access_key: String,
    /// Optional session token.
    pub session_token: Option<String>,
}

impl std::fmt::Debug for StaticCredentials {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("StaticCredentials")
            .field("access_key_id", &self.access_key_id)
            .finish_non_exhaustive()
    }
}

impl From<Option<&crate::job::S3Spec>> for S3Options {
    fn from(s: Option<&crate::job::S3Spec>) -> Self {
        s.map(|s| S3Options {
            endpoint: s.endpoint.clone(),
            region: s.region.clone(),
            path_style: s.path_style,
            credentials: None,
        })
        .unwrap_or_default()
    }
}

/// Opens the store for a URL and returns it with the path inside it that the URL names:
/// `s3://bucket/a/b` → (S3 store on `bucket`, `a/b`); `file:///x/y` or a plain path → (local
/// store rooted at that directory, ``).
pub async fn open(url: &str, s3: &S3Options) -> Result<Store> {
    if let Some(rest) = url.strip_prefix("s3://") {
        let (bucket, prefix) = rest.split_once('/').unwrap_or((rest, ""));
        if bucket.is_empty() {
            return Err(StorageError::InvalidUrl(url.into(), "no bucket name".into()));
        }
        Ok(Arc::new(
            S3Store::connect(bucket, prefix.trim_end_matches('/'), s3).await?,
        ))
    } else if let Some(p) = local_path(url)?.filter(|_| url.starts_with("file:")) {
        Ok(Arc::new(LocalStore::new(p)?))
    } else if url.contains("://") {
        Err(StorageError::InvalidUrl(
            url.into(),
            "supported schemes are s3:// and file://, or a plain path".into(),
        ))
    } else if let Some(scheme) = scheme_without_slashes(url) {
        Err(StorageError::InvalidUrl(
            url.into(),
            format!(
                "`{scheme}:` without `//` is not a URL and would be a local directory named `{scheme}:`; \
                 write `s3://bucket/prefix`, `file:///absolute/path` or a plain path"
            ),
        ))
    } else {
        Ok(Arc::new(LocalStore::new(url)?))
    }
}

/// The local path a location names when it is local: a plain path as written;
/// `file:///abs` and `file://localhost/abs` as `/abs`; `file:/abs` (one slash, the form Flink
/// prints) as `/abs`. `Ok(None)`: not a local location (`s3://…`, another scheme, or
/// `s3:/typo`, which [`open`] refuses with its own message). Errors: a `file://` URL naming
/// another host (RFC 8089: in `file://tmp/x` the host is `tmp`, so it is not the local
/// `/tmp/x` nor the relative `tmp/x`), or `file:` followed by a relative path.
pub fn local_path(url: &str) -> Result<Option<&str>> {
    if let Some(rest) = url.strip_prefix("file://") {
        let (host, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
        return match host {
            "" | "localhost" if !path.is_empty() => Ok(Some(path)),
            _ => Err(StorageError::InvalidUrl(
                url.into(),
                format!(
                    "a `file://` URL names a host before its path (here `{host}`), and Weir reads and writes \
                     this machine's files only: write `file:///{rest}` (three slashes) or the path `/{rest}`"
                ),
            )),
        };
    }
    if let Some(path) = url.strip_prefix("file:") {
        return if path.starts_with('/') {
            Ok(Some(path))
        } else {
            Err(StorageError::InvalidUrl(
                url.into(),
                format!("`file:` takes an absolute path: write `file:///…` or a plain path like `{path}`"),
            ))
        };
    }
    if url.contains("://") || scheme_without_slashes(url).is_some() {
        return Ok(None);
    }
    Ok(Some(url))
}

/// The scheme of a URL written with fewer than two slashes after it (`s3:/bucket`,
/// `s3:bucket`, `hdfs:/x`; `file:/x` is local, [`local_path`]): a first path segment that is a URL scheme (a letter, then letters,
/// digits, `+`, `-`, `.`) followed by `:`. `None` for plain paths.
pub(crate) fn scheme_without_slashes(url: &str) -> Option<&str> {
    let (scheme, _) = url.split_once(':')?;
    let mut chars = scheme.chars();
    let valid = chars.next().is_some_and(|c| c.is_ascii_alphabetic())
        && chars.all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
    valid.then_some(scheme)
}

/// Joins path segments with `/`, skipping empty ones.
pub fn join(a: &str, b: &str) -> String {
    match (a.trim_end_matches('/'), b.trim_start_matches('/')) {
        ("", b) => b.to_string(),
        (a, "") => a.to_string(),
        (a, b) => format!("{a}/{b}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Local paths from plain paths and `file:` URLs; a `file://` URL naming a host, or `file:`
    /// with a relative path, is refused saying what to write; other schemes are not local.
    #[test]
    fn local_path_table() {
        let rows: [(&str, std::result::Result<Option<&str>, &str>); 11] = [
            ("/tmp/chk", Ok(Some("/tmp/chk"))),
            ("weir-data/chk", Ok(Some("weir-data/chk"))),
            ("file:///tmp/chk", Ok(Some("/tmp/chk"))),
            ("file://localhost/tmp/chk", Ok(Some("/tmp/chk"))),
            ("file:/tmp/chk", Ok(Some("/tmp/chk"))),
            ("s3://bucket/chk", Ok(None)),
            ("hdfs://nn/chk", Ok(None)),
            ("s3:/bucket/chk", Ok(None)),
            (
                "file://tmp/review/chk",
                Err("write `file:///tmp/review/chk` (three slashes) or the path `/tmp/review/chk`"),
            ),
            ("file://localhost", Err("here `localhost`")),
            ("file:tmp/chk", Err("write `file:///…` or a plain path like `tmp/chk`")),
        ];
        for (url, want) in rows {
            match (local_path(url), want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{url}"),
                (Err(e), Err(part)) => {
                    let text = e.to_string();
                    assert!(text.contains(part) && text.contains(url), "{url}: {text}");
                }
                (got, want) => panic!("{url}: got {got:?}, want {want:?}"),
            }
        }
    }

    /// `open` serves `file:/abs` (Flink's form) as the local directory, and refuses a `file://`
    /// URL naming a host instead of writing under a relative directory named after it.
    #[tokio::test]
    async fn open_takes_file_urls_as_rfc_8089_reads_them() {
        let dir = tempfile::tempdir().unwrap();
        let s3 = S3Options::default();
        let store = open(&format!("file:{}", dir.path().display()), &s3).await.unwrap();
        store.put("probe", bytes::Bytes::from_static(b"x")).await.unwrap();
        assert!(dir.path().join("probe").exists());
        let cwd_relative = "file://weir-open-test-host/chk";
        let refused = open(cwd_relative, &s3).await.map(|_| ()).unwrap_err().to_string();
        assert!(refused.contains("three slashes"), "{refused}");
        assert!(
            !std::path::Path::new("weir-open-test-host").exists(),
            "created a relative directory"
        );
    }

    /// A full file system's errors say what to do, once; other errors are left as they are.
    #[test]
    fn full_disk_errors_say_what_to_do() {
        let full = StorageError::Io {
            path: "/chk/job/chk-7/.cnt-0.state.tmp".into(),
            source: std::io::Error::from_raw_os_error(28),
        };
        let text = full.to_string();
        assert!(
            text.starts_with("/chk/job/chk-7/.cnt-0.state.tmp: No space left on device"),
            "{text}"
        );
        for part in [
            "its file system is full",
            "spec.checkpointing.storage",
            "WEIR_STATE_DIR",
            "--restore latest",
        ] {
            assert!(text.contains(part), "{part}: {text}");
        }
        let quota = StorageError::Io {
            path: "/out".into(),
            source: std::io::Error::from_raw_os_error(122),
        };
        assert!(quota.to_string().contains("its file system is full"), "{quota}");
        let denied = StorageError::Io {
            path: "/chk".into(),
            source: std::io::Error::from_raw_os_error(13),
        };
        assert_eq!(denied.to_string(), "/chk: Permission denied (os error 13)");
        // RocksDB's text, wrapped by the disk backend; and advice already given is not repeated.
        let store = crate::state::disk::DiskStateError {
            dir: "/state/job/cnt-0".into(),
            problem: "IO error: No space left on device: While appending to file: /state/job/cnt-0/000015.sst".into(),
        };
        assert!(store.to_string().contains("its file system is full"), "{store}");
        let wrapped = crate::state::disk::DiskStateError {
            dir: "/state/job/cnt-0".into(),
            problem: text.clone(),
        };
        assert_eq!(
            wrapped.to_string().matches("its file system is full").count(),
            1,
            "{wrapped}"
        );
    }

    #[tokio::test]
    async fn a_url_with_a_missing_slash_is_refused_not_made_a_local_directory() {
        let dir = tempfile::tempdir().unwrap();
        for url in ["s3:/bucket/checkpoints", "s3:bucket", "hdfs:/nn/x"] {
            let Err(e) = open(url, &S3Options::default()).await else {
                panic!("{url} was opened");
            };
            let text = e.to_string();
            assert!(text.contains("without `//` is not a URL"), "{url}: {text}");
            assert!(text.contains("s3://bucket/prefix"), "{url}: {text}");
        }
        let plain = dir.path().join("with:colon").display().to_string();
        assert!(open(&plain, &S3Options::default()).await.is_ok(), "{plain}");
        assert_eq!(scheme_without_slashes("./weir-data/checkpoints"), None);
        assert_eq!(scheme_without_slashes("/abs/a:b"), None);
        assert_eq!(scheme_without_slashes("s3:/b"), Some("s3"));
    }
}
