//! What the operator reads from (and removes in) a job's checkpoint and savepoint storage,
//! behind a trait: the newest completed checkpoint or savepoint (the restore point after every
//! pod is gone: FLINK-27804, FLINK-33011), what a restore point holds (checked against a new
//! job before it is deployed: FLINK-30638), and savepoint disposal.
//!
//! Layouts (the runtime's): checkpoints `<checkpointing.storage>/<job>/chk-<n>/_metadata`,
//! savepoints `<savepoints.directory>/savepoint-<job>-<n>-<random>/_metadata`, each recorded by
//! a pointer `<checkpointing.storage>/<job>/sp-<n>/_pointer`; `_metadata` is the commit point.
//! Ids increase across restores of one job, so the highest id is the newest.

use crate::crd::{S3Config, S3CredentialsSecret, StreamJobSpec};
use crate::lifecycle::disposal::DisposeFailure;
use crate::lifecycle::{NewestSnapshot, Snapshot, StorageClaim};
use async_trait::async_trait;
use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex};
use weir_runtime::checkpoint::owner::{self, OwnerError};
use weir_runtime::checkpoint::restore::{RestoreError, load_metadata};
use weir_runtime::control::api::{SnapshotInfo, SnapshotKind};
use weir_runtime::state::snapshot::CheckpointMetadata;
use weir_runtime::storage::{self, S3Options, StaticCredentials, StorageError, Store, join};

mod newest;

/// Why a restore point could not be inspected.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum InspectError {
    /// It has no `_metadata`, or an unreadable one: it can never be restored from (a manual
    /// restore is required).
    #[error("{0}")]
    Unusable(String),
    /// Storage did not answer (transient: the reconcile is retried).
    #[error("{0}")]
    Storage(String),
}

/// Storage access of the operator. Every call takes the S3 client settings (with the
/// credentials the operator read from the job's Secret, see [`s3_options_with_credentials`]).
#[async_trait]
pub trait SnapshotStore: Send + Sync {
    /// The newest completed checkpoint or savepoint of job `name` in the storage `spec` names,
    /// or why it cannot be the restore point (see [`newest::newest`]). Errors: storage did not
    /// answer (retried).
    async fn newest(&self, spec: &StreamJobSpec, s3: &S3Options, name: &str) -> Result<NewestSnapshot, String>;
    /// What the restore point at `path` holds (read from its `_metadata` only: the runtime
    /// verifies every state file when it restores).
    async fn inspect(&self, s3: &S3Options, path: &str) -> Result<SnapshotInfo, InspectError>;
    /// Removes the savepoint directory at `path` (idempotent); a failure says whether a retry
    /// can help ([`dispose_failure`]).
    async fn dispose(&self, s3: &S3Options, path: &str) -> Result<(), DisposeFailure>;
    /// Claims job `name`'s checkpoint directory in the storage `spec` names
    /// (`<checkpointing.storage>/<name>/`) for the StreamJob `stream_job` (`<namespace>/<name>`),
    /// or confirms its claim ([`weir_runtime::checkpoint::owner`]). A spec without checkpoint
    /// storage, or with a local path (the pods' volume), has nothing to claim. Errors: a
    /// transient storage failure; another owner is [`StorageClaim::Taken`], a storage that
    /// refuses the record for good (no `PutObject` permission) [`StorageClaim::Unrecorded`].
    async fn claim(
        &self,
        spec: &StreamJobSpec,
        s3: &S3Options,
        name: &str,
        stream_job: &str,
    ) -> Result<StorageClaim, String>;
}

/// The savepoint directory of a spec: `savepoints.directory`, else `<storage>/savepoints`.
pub fn savepoint_directory(spec: &StreamJobSpec) -> Option<String> {
    spec.savepoints
        .as_ref()
        .and_then(|s| s.runtime.directory.clone())
        .or_else(|| spec.checkpointing.storage.as_ref().map(|s| join(s, "savepoints")))
}

/// The runtime's S3 client settings of a spec, without credentials (the default AWS chain).
pub fn s3_options(spec: &StreamJobSpec) -> S3Options {
    S3Options::from(spec.s3.as_ref().map(|s| &s.runtime))
}

/// Default key of the access key id in the credentials Secret.
pub const ACCESS_KEY_ID_KEY: &str = "accessKeyId";
/// Default key of the secret access key in the credentials Secret.
pub const SECRET_ACCESS_KEY_KEY: &str = "secretAccessKey";
/// Optional key of a session token in the credentials Secret.
pub const SESSION_TOKEN_KEY: &str = "sessionToken";

/// The static credentials in a Secret's `data` (decoded bytes) for the reference `r`. Pure.
pub fn credentials_from_secret(
    r: &S3CredentialsSecret,
    data: &BTreeMap<String, Vec<u8>>,
) -> Result<StaticCredentials, String> {
    let get = |key: &str| -> Result<String, String> {
        let v = data
            .get(key)
            .ok_or_else(|| format!("Secret {} has no key `{key}`", r.name))?;
        String::from_utf8(v.clone())
            .map(|s| s.trim().to_string())
            .map_err(|_| format!("Secret {} key `{key}` is not UTF-8", r.name))
    };
    Ok(StaticCredentials {
        access_key_id: get(r.access_key_id_key.as_deref().unwrap_or(ACCESS_KEY_ID_KEY))?,
        secret_access_key: get(r.secret_access_key_key.as_deref().unwrap_or(SECRET_ACCESS_KEY_KEY))?,
        session_token: get(SESSION_TOKEN_KEY).ok().filter(|t| !t.is_empty()),
    })
}

/// Why the S3 credentials could not be had.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum CredentialsError {
    /// The Secret does not exist or lacks a key: nothing changes until someone fixes it.
    #[error("{0}")]
    Missing(String),
    /// Reading the Secret failed (the API server did not answer): a retry may succeed.
    #[error("reading the S3 credentials Secret: {0}")]
    Unreadable(String),
}

/// [`s3_options`] with static credentials when the spec names a credentials Secret, whose
/// `data` `read_secret` returns (`None`: the Secret does not exist).
pub async fn s3_options_with_credentials<F, Fut>(
    spec: &StreamJobSpec,
    read_secret: F,
) -> Result<S3Options, CredentialsError>
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = Result<Option<BTreeMap<String, Vec<u8>>>, String>>,
{
    s3_config_with_credentials(spec.s3.as_ref(), read_secret).await
}

/// The S3 client settings of `config` (a job's `spec.s3`, or the copy a Savepoint recorded in
/// `status.s3`) with static credentials when it names a credentials Secret, whose `data`
/// `read_secret` returns (`None`: the Secret does not exist).
pub async fn s3_config_with_credentials<F, Fut>(
    config: Option<&S3Config>,
    read_secret: F,
) -> Result<S3Options, CredentialsError>
where
    F: FnOnce(String) -> Fut,
    Fut: std::future::Future<Output = Result<Option<BTreeMap<String, Vec<u8>>>, String>>,
{
    let mut opts = S3Options::from(config.map(|s| &s.runtime));
    if let Some(r) = config.and_then(|s| s.credentials_secret.as_ref()) {
        let data = read_secret(r.name.clone())
            .await
            .map_err(CredentialsError::Unreadable)?
            .ok_or_else(|| CredentialsError::Missing(format!("S3 credentials Secret {} not found", r.name)))?;
        opts.credentials = Some(credentials_from_secret(r, &data).map_err(CredentialsError::Missing)?);
    }
    Ok(opts)
}

/// S3 error codes after which a retry cannot succeed until someone changes something
/// (credentials, policy, bucket).
const PERMANENT_S3_CODES: [&str; 7] = [
    "AccessDenied",
    "AllAccessDisabled",
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "NoSuchBucket",
    "InvalidBucketName",
    "AccountProblem",
];

/// Whether a failed dispose can succeed on retry. Pure. Permanent: an unusable URL, a local
/// permission error, or an S3 answer with one of [`PERMANENT_S3_CODES`]; anything else
/// (unreachable endpoint, throttling, 5xx) is transient.
pub fn dispose_failure(e: &StorageError) -> DisposeFailure {
    let permanent = match e {
        StorageError::InvalidUrl(..) => true,
        StorageError::Io { source, .. } => source.kind() == std::io::ErrorKind::PermissionDenied,
        StorageError::S3 { message, .. } => PERMANENT_S3_CODES.iter().any(|c| message.contains(c)),
        StorageError::NotFound(_) => false,
    };
    if permanent {
        DisposeFailure::Permanent(e.to_string())
    } else {
        DisposeFailure::Transient(e.to_string())
    }
}

/// Splits a directory URL into its parent URL and last segment.
fn split_dir(url: &str) -> Option<(&str, &str)> {
    let url = url.trim_end_matches('/');
    let (parent, name) = url.rsplit_once('/')?;
    if name.is_empty() || parent.ends_with(':') || parent.ends_with(":/") {
        return None;
    }
    Some((parent, name))
}

/// [`SnapshotStore`] on the runtime's object stores (local paths, `file://`, `s3://`).
#[derive(Clone, Debug, Default)]
pub struct ObjectStoreSnapshots;

/// The completion time of a snapshot: `completedAtMs`, or the trigger time for files written
/// before the runtime recorded it.
pub fn completion_ms(m: &CheckpointMetadata) -> u64 {
    if m.completed_at_ms > 0 {
        m.completed_at_ms
    } else {
        m.triggered_at_ms
    }
}

/// The operator's summary of a snapshot's `_metadata` (the runtime's own summary).
pub fn snapshot_info(m: &CheckpointMetadata) -> SnapshotInfo {
    m.info()
}

#[async_trait]
impl SnapshotStore for ObjectStoreSnapshots {
    async fn newest(&self, spec: &StreamJobSpec, s3: &S3Options, name: &str) -> Result<NewestSnapshot, String> {
        newest::newest(spec, s3, name).await
    }

    async fn inspect(&self, s3: &S3Options, path: &str) -> Result<SnapshotInfo, InspectError> {
        let (parent, dir) = split_dir(path).unwrap_or((path, ""));
        let store = storage::open(parent, s3)
            .await
            .map_err(|e| InspectError::Unusable(e.to_string()))?;
        match load_metadata(&store, dir).await {
            Ok(m) => Ok(snapshot_info(&m)),
            Err(e @ (RestoreError::Storage(StorageError::NotFound(_)) | RestoreError::Corrupt(_))) => {
                Err(InspectError::Unusable(e.to_string()))
            }
            Err(e) => Err(InspectError::Storage(e.to_string())),
        }
    }

    async fn dispose(&self, s3: &S3Options, path: &str) -> Result<(), DisposeFailure> {
        let (parent, name) = split_dir(path)
            .ok_or_else(|| DisposeFailure::Permanent(format!("refusing to dispose `{path}`: not a directory")))?;
        let store = storage::open(parent, s3).await.map_err(|e| dispose_failure(&e))?;
        // The trailing slash keeps `savepoint-j-3` from matching `savepoint-j-30`.
        store
            .delete_prefix(&format!("{name}/"))
            .await
            .map_err(|e| dispose_failure(&e))
    }

    async fn claim(
        &self,
        spec: &StreamJobSpec,
        s3: &S3Options,
        name: &str,
        stream_job: &str,
    ) -> Result<StorageClaim, String> {
        let Some(url) = &spec.checkpointing.storage else {
            return Ok(StorageClaim::Ours);
        };
        if !matches!(storage::local_path(url), Ok(None)) {
            // A local path is a volume of the job's pods, not one the operator sees (and its
            // own root file system is read-only): only object storage is claimed.
            return Ok(StorageClaim::Ours);
        }
        match storage::open(url, s3).await {
            Ok(store) => claim_in(&store, name, stream_job).await,
            Err(e) => unrecorded_or_retry(&e),
        }
    }
}

/// Claims job `name`'s directory in `store` for `stream_job` ([`SnapshotStore::claim`]).
async fn claim_in(store: &Store, name: &str, stream_job: &str) -> Result<StorageClaim, String> {
    match owner::claim(store, name, stream_job).await {
        Ok(()) => Ok(StorageClaim::Ours),
        Err(OwnerError::Taken(message)) => Ok(StorageClaim::Taken(message)),
        Err(OwnerError::Storage(e)) => unrecorded_or_retry(&e),
    }
}

/// A claim the storage refused for good (no permission, no such bucket: [`dispose_failure`]'s
/// permanent errors) is [`StorageClaim::Unrecorded`], so the deploy goes on as before owner
/// records; any other failure is an error, and the reconcile is retried.
fn unrecorded_or_retry(e: &StorageError) -> Result<StorageClaim, String> {
    match dispose_failure(e) {
        DisposeFailure::Permanent(message) => Ok(StorageClaim::Unrecorded(message)),
        DisposeFailure::Transient(message) => Err(message),
    }
}

/// In-memory [`SnapshotStore`] for tests.
#[derive(Clone, Default)]
pub struct FakeSnapshots {
    inner: Arc<Mutex<FakeSnapshotState>>,
}

#[derive(Default)]
struct FakeSnapshotState {
    newest: NewestSnapshot,
    /// Every read of the newest snapshot fails with this (transient) error.
    newest_error: Option<String>,
    infos: HashMap<String, SnapshotInfo>,
    disposed: Vec<String>,
    disposed_with: Vec<(String, S3Options)>,
    dispose_error: Option<DisposeFailure>,
    /// Owners by job name (`<namespace>/<name>`), as `claim` recorded them.
    owners: HashMap<String, String>,
    /// Every claim fails with this (transient) error.
    claim_error: Option<String>,
}

impl FakeSnapshots {
    /// Sets the newest snapshot in storage.
    pub fn set_newest(&self, s: Option<Snapshot>) {
        self.inner.lock().unwrap().newest = s.map_or(NewestSnapshot::None, NewestSnapshot::Found);
    }
    /// Storage refuses its newest snapshot `id` with `why` ([`NewestSnapshot::Refused`]).
    pub fn refuse_newest(&self, id: u64, why: &str) {
        self.inner.lock().unwrap().newest = NewestSnapshot::Refused {
            id,
            message: why.into(),
        };
    }
    /// Every read of the newest snapshot fails with the transient `error` (None: reads
    /// succeed again).
    pub fn fail_newest(&self, error: Option<&str>) {
        self.inner.lock().unwrap().newest_error = error.map(str::to_string);
    }
    /// Registers what `path` holds.
    pub fn set_info(&self, path: &str, info: SnapshotInfo) {
        self.inner.lock().unwrap().infos.insert(path.into(), info);
    }
    /// Paths disposed so far.
    pub fn disposed(&self) -> Vec<String> {
        self.inner.lock().unwrap().disposed.clone()
    }
    /// The S3 settings of every dispose call so far (attempts that failed included), with the
    /// path.
    pub fn disposed_with(&self) -> Vec<(String, S3Options)> {
        self.inner.lock().unwrap().disposed_with.clone()
    }
    /// Every dispose fails with a transient `error` (None: disposes succeed again).
    pub fn fail_disposes(&self, error: Option<&str>) {
        self.fail_disposes_with(error.map(|e| DisposeFailure::Transient(e.into())));
    }
    /// Records `stream_job` (`<namespace>/<name>`) as the owner of job `name`'s checkpoint
    /// directory, as another StreamJob's claim would.
    pub fn set_owner(&self, name: &str, stream_job: &str) {
        self.inner.lock().unwrap().owners.insert(name.into(), stream_job.into());
    }
    /// Every claim fails with the transient `error` (None: claims succeed again).
    pub fn fail_claims(&self, error: Option<&str>) {
        self.inner.lock().unwrap().claim_error = error.map(str::to_string);
    }
    /// Every dispose fails with `failure` (None: disposes succeed again).
    pub fn fail_disposes_with(&self, failure: Option<DisposeFailure>) {
        self.inner.lock().unwrap().dispose_error = failure;
    }
}

#[async_trait]
impl SnapshotStore for FakeSnapshots {
    async fn newest(&self, _spec: &StreamJobSpec, _s3: &S3Options, _name: &str) -> Result<NewestSnapshot, String> {
        let inner = self.inner.lock().unwrap();
        match &inner.newest_error {
            Some(e) => Err(e.clone()),
            // Nothing set: storage holds none.
            None if inner.newest == NewestSnapshot::NotRead => Ok(NewestSnapshot::None),
            None => Ok(inner.newest.clone()),
        }
    }
    async fn inspect(&self, _s3: &S3Options, path: &str) -> Result<SnapshotInfo, InspectError> {
        self.inner
            .lock()
            .unwrap()
            .infos
            .get(path)
            .cloned()
            .ok_or_else(|| InspectError::Unusable(format!("{path}/_metadata: not found")))
    }
    async fn dispose(&self, s3: &S3Options, path: &str) -> Result<(), DisposeFailure> {
        let mut inner = self.inner.lock().unwrap();
        inner.disposed_with.push((path.into(), s3.clone()));
        if let Some(e) = &inner.dispose_error {
            return Err(e.clone());
        }
        inner.disposed.push(path.into());
        Ok(())
    }
    async fn claim(
        &self,
        _spec: &StreamJobSpec,
        _s3: &S3Options,
        name: &str,
        stream_job: &str,
    ) -> Result<StorageClaim, String> {
        let mut inner = self.inner.lock().unwrap();
        if let Some(e) = &inner.claim_error {
            return Err(e.clone());
        }
        let owner = inner.owners.entry(name.into()).or_insert_with(|| stream_job.into());
        Ok(if owner == stream_job {
            StorageClaim::Ours
        } else {
            StorageClaim::Taken(format!("{name}/_owner names StreamJob {owner}"))
        })
    }
}

/// Whether a snapshot is a savepoint.
pub fn is_savepoint(s: &Snapshot) -> bool {
    s.kind == SnapshotKind::Savepoint
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use weir_runtime::state::snapshot::{CheckpointMetadata, encode_metadata};

    pub(super) fn spec(root: &str) -> StreamJobSpec {
        serde_yaml::from_str(&format!(
            "image: weir:1\ncheckpointing: {{storage: \"{root}/chk\"}}\njob: {{steps: [{{source: {{generator: {{}}}}}}, {{sink: {{print: {{}}}}}}]}}\n"
        ))
        .unwrap()
    }

    pub(super) async fn write_meta(root: &str, dir: &str, id: u64, kind: SnapshotKind, t: u64) {
        let store = storage::open(root, &S3Options::default()).await.unwrap();
        let m = CheckpointMetadata {
            format_version: weir_runtime::state::snapshot::FORMAT_VERSION,
            job_name: "j".into(),
            checkpoint_id: id,
            kind,
            max_parallelism: 128,
            parallelism: 1,
            triggered_at_ms: t,
            // Files written before `completedAtMs` existed have 0: the trigger time is used.
            completed_at_ms: if t == 50 { 0 } else { t + 1 },
            run_id: None,
            operators: vec![],
            channel_state: vec![],
            alignment: Default::default(),
        };
        store
            .put(
                &join(dir, weir_runtime::checkpoint::METADATA_FILE),
                Bytes::from(encode_metadata(&m)),
            )
            .await
            .unwrap();
    }

    /// The operator's claim goes to the runtime's owner record: one StreamJob per checkpoint
    /// directory, whichever namespace asks second. A spec without storage, or with a local path
    /// (the pods' volume, not the operator's), has none to claim and writes nothing.
    #[tokio::test]
    async fn the_checkpoint_directory_is_claimed_by_the_first_stream_job_of_its_name() {
        let dir = tempfile::tempdir().unwrap();
        let root = dir.path().to_str().unwrap();
        let store = storage::open(root, &S3Options::default()).await.unwrap();
        assert_eq!(claim_in(&store, "j", "team-a/j").await, Ok(StorageClaim::Ours));
        assert_eq!(
            claim_in(&store, "j", "team-a/j").await,
            Ok(StorageClaim::Ours),
            "its own claim again"
        );
        assert!(dir.path().join("j/_owner").exists());
        match claim_in(&store, "j", "team-b/j").await {
            Ok(StorageClaim::Taken(message)) => assert!(message.contains("StreamJob team-a/j"), "{message}"),
            other => panic!("team-b/j was let into team-a/j's directory: {other:?}"),
        }

        let (snaps, s3) = (ObjectStoreSnapshots, S3Options::default());
        let local = spec(root);
        assert_eq!(snaps.claim(&local, &s3, "k", "team-b/k").await, Ok(StorageClaim::Ours));
        assert!(!dir.path().join("chk/k").exists(), "a local path is not claimed");
        let mut stateless = spec(root);
        stateless.checkpointing.storage = None;
        assert_eq!(
            snaps.claim(&stateless, &s3, "j", "team-b/j").await,
            Ok(StorageClaim::Ours)
        );
    }

    /// A claim the storage refuses for good lets the deploy go on (with a Warning); a transient
    /// failure is retried.
    #[test]
    fn claims_the_storage_refuses_for_good_are_unrecorded_others_retried() {
        let s3 = |message: &str| StorageError::S3 {
            path: "s3://b/chk/j/_owner".into(),
            op: "PutObject",
            message: message.into(),
        };
        assert!(matches!(
            unrecorded_or_retry(&s3("AccessDenied: Access Denied")),
            Ok(StorageClaim::Unrecorded(m)) if m.contains("AccessDenied")
        ));
        assert!(matches!(
            unrecorded_or_retry(&s3("NoSuchBucket")),
            Ok(StorageClaim::Unrecorded(_))
        ));
        assert!(unrecorded_or_retry(&s3("dispatch failure: timed out")).is_err());
    }

    #[tokio::test]
    async fn newest_over_checkpoints_and_savepoints_and_dispose() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_str().unwrap().to_string();
        let s = spec(&root);
        let snaps = &ObjectStoreSnapshots;
        let newest_of = |spec: &StreamJobSpec| {
            let spec = spec.clone();
            async move {
                snaps
                    .newest(&spec, &S3Options::default(), "j")
                    .await
                    .unwrap()
                    .found()
                    .cloned()
            }
        };
        assert_eq!(newest_of(&s).await, None);
        write_meta(&root, "chk/j/chk-3", 3, SnapshotKind::Checkpoint, 30).await;
        write_meta(&root, "chk/j/chk-5", 5, SnapshotKind::Checkpoint, 50).await;
        // An incomplete checkpoint (no _metadata) never counts.
        let store = storage::open(&root, &S3Options::default()).await.unwrap();
        store.put("chk/j/chk-9/op-0", Bytes::from_static(b"x")).await.unwrap();
        // Another job's savepoint is ignored.
        write_meta(&root, "chk/savepoints/savepoint-jj-99", 99, SnapshotKind::Savepoint, 99).await;
        let n = newest_of(&s).await.unwrap();
        assert_eq!((n.id, n.kind, n.completed_at_ms), (5, SnapshotKind::Checkpoint, 50));
        write_meta(&root, "chk/j/chk-7", 7, SnapshotKind::Checkpoint, 70).await;
        let n = newest_of(&s).await.unwrap();
        assert_eq!(
            (n.id, n.completed_at_ms),
            (7, 71),
            "completedAtMs is the completion time"
        );
        write_meta(&root, "chk/savepoints/savepoint-j-6", 6, SnapshotKind::Savepoint, 60).await;
        write_meta(&root, "chk/savepoints/savepoint-j-60", 60, SnapshotKind::Savepoint, 600).await;
        // With checkpoint storage only pointers count: the savepoints directory may hold the
        // savepoints of a StreamJob of the same name in another namespace.
        let n = newest_of(&s).await.unwrap();
        assert_eq!((n.id, n.kind), (7, SnapshotKind::Checkpoint));
        let pointer = weir_runtime::checkpoint::lineage::pointer_for(
            8,
            format!("file://{root}/chk/savepoints/savepoint-j-8-kqzbtwma"),
            "run",
        );
        write_meta(
            &root,
            "chk/savepoints/savepoint-j-8-kqzbtwma",
            8,
            SnapshotKind::Savepoint,
            80,
        )
        .await;
        let store_chk = storage::open(&format!("{root}/chk"), &S3Options::default())
            .await
            .unwrap();
        weir_runtime::checkpoint::lineage::write_pointer(&store_chk, "j", &pointer)
            .await
            .unwrap();
        let n = newest_of(&s).await.unwrap();
        assert_eq!((n.id, n.kind), (8, SnapshotKind::Savepoint));
        assert!(n.path.ends_with("chk/savepoints/savepoint-j-8-kqzbtwma"), "{}", n.path);
        // Without checkpoint storage (stateless) the savepoints directory is listed, in both
        // name forms; another job's names are not taken for this one's.
        let mut stateless = s.clone();
        stateless.checkpointing.storage = None;
        stateless.savepoints = serde_yaml::from_str(&format!("directory: {root}/chk/savepoints")).unwrap();
        write_meta(
            &root,
            "chk/savepoints/savepoint-j-x-99",
            99,
            SnapshotKind::Savepoint,
            990,
        )
        .await;
        let n = newest_of(&stateless).await.unwrap();
        assert_eq!((n.id, n.kind), (60, SnapshotKind::Savepoint));
        assert!(n.path.ends_with("chk/savepoints/savepoint-j-60"), "{}", n.path);
        write_meta(
            &root,
            "chk/savepoints/savepoint-j-61-kqzbtwma",
            61,
            SnapshotKind::Savepoint,
            610,
        )
        .await;
        let n = newest_of(&stateless).await.unwrap();
        assert!(n.path.ends_with("chk/savepoints/savepoint-j-61-kqzbtwma"), "{}", n.path);

        snaps
            .dispose(&S3Options::default(), &format!("{root}/chk/savepoints/savepoint-j-6"))
            .await
            .unwrap();
        assert!(!store.exists("chk/savepoints/savepoint-j-6/_metadata").await.unwrap());
        assert!(store.exists("chk/savepoints/savepoint-j-60/_metadata").await.unwrap());
        assert!(snaps.dispose(&S3Options::default(), "s3://").await.is_err());
    }

    #[tokio::test]
    async fn newest_refuses_an_unreadable_newest_snapshot_and_follows_savepoint_pointers() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_str().unwrap().to_string();
        let s = spec(&root);
        let snaps = ObjectStoreSnapshots;
        let store = storage::open(&root, &S3Options::default()).await.unwrap();
        write_meta(&root, "chk/j/chk-3", 3, SnapshotKind::Checkpoint, 30).await;
        // A non-stopping savepoint taken into a directory of the trigger's choosing: only its
        // pointer in the checkpoint store says it exists.
        write_meta(&root, "elsewhere/savepoint-j-4", 4, SnapshotKind::Savepoint, 40).await;
        let pointer =
            weir_runtime::checkpoint::lineage::pointer_for(4, format!("file://{root}/elsewhere/savepoint-j-4"), "run");
        let store_chk = storage::open(&format!("{root}/chk"), &S3Options::default())
            .await
            .unwrap();
        weir_runtime::checkpoint::lineage::write_pointer(&store_chk, "j", &pointer)
            .await
            .unwrap();
        let n = snaps.newest(&s, &S3Options::default(), "j").await.unwrap();
        let n = n.found().unwrap();
        assert_eq!((n.id, n.kind), (4, SnapshotKind::Savepoint));
        // The newest checkpoint's `_metadata` is damaged: no silent fallback to savepoint 4.
        store
            .put("chk/j/chk-5/_metadata", Bytes::from_static(b"garbage"))
            .await
            .unwrap();
        match snaps.newest(&s, &S3Options::default(), "j").await {
            Ok(NewestSnapshot::Refused { message: why, .. }) => assert!(
                why.contains("snapshot 5") && why.contains("chk-5") && why.contains("spec.restartNonce"),
                "{why}"
            ),
            other => panic!("a damaged newest snapshot must be refused: {other:?}"),
        }
    }

    #[tokio::test]
    async fn inspect_reads_metadata_and_classifies_failures() {
        let tmp = tempfile::tempdir().unwrap();
        let root = tmp.path().to_str().unwrap().to_string();
        write_meta(&root, "sp/savepoint-j-4", 4, SnapshotKind::Savepoint, 40).await;
        let snaps = ObjectStoreSnapshots;
        let s3 = S3Options::default();
        let info = snaps.inspect(&s3, &format!("{root}/sp/savepoint-j-4")).await.unwrap();
        assert_eq!((info.checkpoint_id, info.kind), (4, SnapshotKind::Savepoint));
        let info = snaps
            .inspect(&s3, &format!("file://{root}/sp/savepoint-j-4/"))
            .await
            .unwrap();
        assert_eq!(info.checkpoint_id, 4);
        let missing = snaps.inspect(&s3, &format!("{root}/sp/savepoint-j-5")).await;
        assert!(
            matches!(missing, Err(InspectError::Unusable(ref m)) if m.contains("not found")),
            "{missing:?}"
        );
        let store = storage::open(&root, &s3).await.unwrap();
        store
            .put("sp/bad/_metadata", bytes::Bytes::from_static(b"garbage"))
            .await
            .unwrap();
        assert!(matches!(
            snaps.inspect(&s3, &format!("{root}/sp/bad")).await,
            Err(InspectError::Unusable(_))
        ));
    }

    /// Which dispose failures a retry can cure (table).
    #[test]
    fn dispose_failures_are_permanent_or_transient() {
        let s3 = |message: &str| StorageError::S3 {
            path: "s3://b/svp/savepoint-j-7/".into(),
            op: "ListObjectsV2",
            message: message.into(),
        };
        let io = |kind: std::io::ErrorKind| StorageError::Io {
            path: "/data/svp".into(),
            source: std::io::Error::new(kind, "x"),
        };
        let rows: Vec<(&str, StorageError, bool)> = vec![
            (
                "access denied",
                s3("service error: unhandled error (AccessDenied): Access Denied"),
                true,
            ),
            (
                "bucket gone",
                s3("service error: NoSuchBucket: The specified bucket does not exist"),
                true,
            ),
            ("wrong key", s3("unhandled error (InvalidAccessKeyId)"), true),
            ("wrong secret", s3("unhandled error (SignatureDoesNotMatch)"), true),
            (
                "per-key failure",
                s3("1 of 3 keys not deleted: a: AccessDenied (no)"),
                true,
            ),
            (
                "endpoint unreachable",
                s3("dispatch failure: io error: Connection refused"),
                false,
            ),
            (
                "throttled",
                s3("unhandled error (SlowDown): Please reduce your request rate"),
                false,
            ),
            ("server error", s3("unhandled error (InternalError)"), false),
            (
                "bad URL",
                StorageError::InvalidUrl("s3:/x".into(), "no bucket".into()),
                true,
            ),
            ("local permission", io(std::io::ErrorKind::PermissionDenied), true),
            ("local other", io(std::io::ErrorKind::Other), false),
        ];
        for (row, e, permanent) in rows {
            assert_eq!(
                matches!(dispose_failure(&e), DisposeFailure::Permanent(_)),
                permanent,
                "{row}"
            );
        }
    }

    #[tokio::test]
    async fn credentials_come_from_the_referenced_secret() {
        let mut spec = spec("/tmp/x");
        let no_secret = |_: String| async { panic!("no Secret is read without a reference") };
        assert_eq!(
            s3_options_with_credentials(&spec, no_secret).await.unwrap().credentials,
            None
        );
        spec.s3 = Some(
            serde_json::from_value(serde_json::json!({
                "endpoint": "http://minio:9000",
                "credentialsSecret": {"name": "s3", "accessKeyIdKey": "user"},
            }))
            .unwrap(),
        );
        let data = BTreeMap::from([
            ("user".to_string(), b"AKIA\n".to_vec()),
            (SECRET_ACCESS_KEY_KEY.to_string(), b"shh".to_vec()),
        ]);
        let d = data.clone();
        let opts = s3_options_with_credentials(&spec, |name| async move {
            assert_eq!(name, "s3");
            Ok(Some(d))
        })
        .await
        .unwrap();
        assert_eq!(opts.endpoint.as_deref(), Some("http://minio:9000"));
        let c = opts.credentials.unwrap();
        assert_eq!(
            (c.access_key_id.as_str(), c.secret_access_key.as_str()),
            ("AKIA", "shh")
        );
        assert_eq!(c.session_token, None);
        let missing = s3_options_with_credentials(&spec, |_| async { Ok(None) }).await;
        assert!(
            matches!(&missing, Err(CredentialsError::Missing(m)) if m.contains("not found")),
            "{missing:?}"
        );
        let unreadable = s3_options_with_credentials(&spec, |_| async { Err("503 Service Unavailable".into()) }).await;
        assert!(
            matches!(unreadable, Err(CredentialsError::Unreadable(_))),
            "{unreadable:?}"
        );
        let mut partial = data;
        partial.remove(SECRET_ACCESS_KEY_KEY);
        let e = credentials_from_secret(spec.s3.as_ref().unwrap().credentials_secret.as_ref().unwrap(), &partial);
        assert!(e.unwrap_err().contains("secretAccessKey"));
    }
}
