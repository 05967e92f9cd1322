//! The controllers: shared context, the error enum (whose variant names are Event reasons),
//! best-effort events, and the Kubernetes calls both controllers make.
//!
//! A StreamJob reconcile is observe → decide ([`crate::lifecycle`]) → persist the decided
//! status (the write-ahead log) → act (build with [`crate::build`], server-side apply, delete)
//! → record results. See [`stream_job`]; the Savepoint controller is [`savepoint`].

pub mod cache;
pub mod savepoint;
mod status;
pub mod stream_job;

#[cfg(test)]
mod tests;

pub use status::{conditions, worker_selector};

use crate::control::ControlApiFactory;
use crate::metrics::Metrics;
use crate::snapshots::SnapshotStore;
use k8s_openapi::api::core::v1::{ObjectReference, Secret};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use kube::runtime::events::{Event, EventType, Recorder, Reporter};
use kube::{Api, Client, Resource, ResourceExt};
use serde_json::json;
use std::sync::Arc;
use std::time::SystemTime;
use weir_runtime::storage::S3Options;

/// Finalizer of StreamJobs (stop, optional savepoint, cleanup) and of Savepoints with
/// `disposeOnDelete`.
pub const FINALIZER: &str = "weir.dev/finalizer";

/// Consecutive reconcile failures per object (`Kind/namespace/name`), for the per-object error
/// backoff: 5 s, 10 s, 20 s, ... up to 5 min, back to 5 s after a successful pass.
#[derive(Default)]
pub struct FailureCounts(std::sync::Mutex<std::collections::HashMap<String, u32>>);

impl FailureCounts {
    /// Records one more failure of `key`; returns how many in a row.
    pub fn failed(&self, key: &str) -> u32 {
        let mut m = self.0.lock().unwrap_or_else(|p| p.into_inner());
        let n = m.entry(key.to_string()).or_insert(0);
        *n += 1;
        *n
    }
    /// Forgets the failures of `key` (it reconciled).
    pub fn succeeded(&self, key: &str) {
        self.0.lock().unwrap_or_else(|p| p.into_inner()).remove(key);
    }
}

/// The requeue after a failed pass of the object `key`: a conflict at once (1 s: the retry
/// decides on the newer object), anything else after the object's own growing backoff.
pub fn error_requeue(ctx: &Context, key: &str, err: &Error) -> kube::runtime::controller::Action {
    match err {
        Error::Conflict(_) => kube::runtime::controller::Action::requeue(std::time::Duration::from_secs(1)),
        _ => kube::runtime::controller::Action::requeue(savepoint::backoff(ctx.failures.failed(key))),
    }
}

/// A clock (injected so tests are deterministic).
pub type Clock = Arc<dyn Fn() -> SystemTime + Send + Sync>;

/// What every reconcile needs.
pub struct Context {
    /// Kubernetes client.
    pub client: Client,
    /// Control API of each job.
    pub control: Arc<dyn ControlApiFactory>,
    /// Checkpoint/savepoint storage.
    pub snapshots: Arc<dyn SnapshotStore>,
    /// Event recorder (best effort).
    pub recorder: Recorder,
    /// Metrics.
    pub metrics: Arc<Metrics>,
    /// Wall clock.
    pub clock: Clock,
    /// Consecutive failures per object (error backoff).
    pub failures: FailureCounts,
    /// Pod defaults for what a StreamJob's spec leaves unset (image, pull policy, resources,
    /// security contexts).
    pub runtime_defaults: crate::build::RuntimeDefaults,
    /// Operator-wide settings of the per-job NetworkPolicies (`WEIR_NETWORK_POLICIES`).
    pub network_policies: crate::build::NetworkPolicySettings,
    /// The watch caches reconciles read (children, pods, Savepoints, StreamJobs).
    pub cache: cache::Cache,
}

impl Context {
    /// A context with the system clock.
    pub fn new(
        client: Client,
        control: Arc<dyn ControlApiFactory>,
        snapshots: Arc<dyn SnapshotStore>,
        metrics: Arc<Metrics>,
        runtime_defaults: crate::build::RuntimeDefaults,
        network_policies: crate::build::NetworkPolicySettings,
        cache: cache::Cache,
    ) -> Context {
        let reporter = Reporter {
            controller: "weir-operator".into(),
            instance: std::env::var("POD_NAME").ok(),
        };
        Context {
            recorder: Recorder::new(client.clone(), reporter),
            client,
            control,
            snapshots,
            metrics,
            clock: Arc::new(SystemTime::now),
            failures: FailureCounts::default(),
            runtime_defaults,
            network_policies,
            cache,
        }
    }
}

/// Reconcile errors. The variant name is the Event reason of the Warning event emitted for it.
#[derive(Debug, thiserror::Error)]
pub enum Error {
    /// Reading an object from the API server failed.
    #[error("reading {what}: {source}")]
    ObserveError {
        /// What was read.
        what: String,
        /// Cause.
        source: kube::Error,
    },
    /// Server-side apply of a child object failed.
    #[error("applying {what}: {source}")]
    ApplyError {
        /// `Kind/name`.
        what: String,
        /// Cause.
        source: kube::Error,
    },
    /// Deleting an object failed.
    #[error("deleting {what}: {source}")]
    DeleteError {
        /// `Kind/name`.
        what: String,
        /// Cause.
        source: kube::Error,
    },
    /// Writing status failed; nothing after it ran.
    #[error("writing status: {0}")]
    StatusError(#[source] kube::Error),
    /// Adding or removing the finalizer failed.
    #[error("updating finalizers: {0}")]
    FinalizerError(#[source] kube::Error),
    /// Checkpoint/savepoint storage could not be read or written.
    #[error("storage: {0}")]
    StorageError(String),
    /// The S3 credentials Secret named by `spec.s3.credentialsSecret` could not be read.
    #[error("S3 credentials: {0}")]
    CredentialsError(String),
    /// The object changed since this pass read it (409 on a resourceVersion precondition):
    /// nothing was acted on; the pass is retried at once on the newer object. No Warning event.
    #[error("conflict: {0}; retrying on the newer object")]
    Conflict(String),
    /// A watch cache cannot be read (its watch ended: the operator is stopping).
    #[error("{0}")]
    CacheError(String),
}

impl Error {
    /// The Event reason: the variant name.
    pub fn reason(&self) -> &'static str {
        match self {
            Error::ObserveError { .. } => "ObserveError",
            Error::ApplyError { .. } => "ApplyError",
            Error::DeleteError { .. } => "DeleteError",
            Error::StatusError(_) => "StatusError",
            Error::FinalizerError(_) => "FinalizerError",
            Error::StorageError(_) => "StorageError",
            Error::CredentialsError(_) => "CredentialsError",
            Error::Conflict(_) => "Conflict",
            Error::CacheError(_) => "CacheError",
        }
    }
}

/// The Event `action` of an event with `note` during `cycle` (a StreamJob's
/// `status.deployGeneration`, a Savepoint's `metadata.generation`).
///
/// kube-runtime's recorder folds every event with the same type, reason, action and object
/// into one series for six minutes, keeping the first note: with one fixed action the second
/// rescale would add no Event, and a different message would be counted as `(x2)` of the old
/// one. So the action names the cycle and a hash of the note: a repeat of the same message in
/// the same cycle still folds (counted), anything else is a new Event. At most 30 characters.
pub fn event_action(cycle: u64, note: &str) -> String {
    format!(
        "Reconcile-g{cycle}-{:08x}",
        xxhash_rust::xxh3::xxh3_64(note.as_bytes()) as u32
    )
}

/// Publishes an event for `cycle` (see [`event_action`]); failures are logged and swallowed
/// (a terminating namespace refuses events, and that must never block a reconcile or a
/// finalizer: FLINK-31860).
pub async fn publish(
    ctx: &Context,
    regarding: &ObjectReference,
    cycle: u64,
    warning: bool,
    reason: &str,
    note: String,
) {
    let ev = Event {
        type_: if warning { EventType::Warning } else { EventType::Normal },
        reason: reason.into(),
        action: event_action(cycle, &note),
        note: Some(note),
        secondary: None,
    };
    if let Err(e) = ctx.recorder.publish(&ev, regarding).await {
        tracing::warn!(reason, error = %e, "event not recorded");
    }
}

/// A reference to an object that failed to deserialize (for its ValidationError event).
pub fn invalid_ref<K: Resource<DynamicType = ()>>(meta: &ObjectMeta) -> ObjectReference {
    ObjectReference {
        api_version: Some(K::api_version(&()).into_owned()),
        kind: Some(K::kind(&()).into_owned()),
        name: meta.name.clone(),
        namespace: meta.namespace.clone(),
        uid: meta.uid.clone(),
        ..Default::default()
    }
}

/// Sets the finalizer list to `finalizers` with a merge patch guarded by `obj`'s
/// `resourceVersion` (a concurrent change makes it fail with 409 and the reconcile is retried).
pub async fn set_finalizers<K>(api: &Api<K>, obj: &K, finalizers: Vec<String>) -> Result<(), Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    set_finalizers_at(api, &obj.name_any(), obj.resource_version(), finalizers)
        .await
        .map(|_| ())
}

/// Sets the finalizer list of `name` with a merge patch guarded by `resource_version` (the
/// newest this pass knows, e.g. from its own status write); returns the new resourceVersion.
pub async fn set_finalizers_at<K>(
    api: &Api<K>,
    name: &str,
    resource_version: Option<String>,
    finalizers: Vec<String>,
) -> Result<Option<String>, Error>
where
    K: Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let patch = json!({"metadata": {"finalizers": finalizers, "resourceVersion": resource_version}});
    api.patch(
        name,
        &kube::api::PatchParams::default(),
        &kube::api::Patch::Merge(&patch),
    )
    .await
    .map(|o| o.resource_version())
    .map_err(|e| match e {
        kube::Error::Api(s) if s.code == 409 => Error::Conflict(format!("finalizers of {name}: {}", s.message)),
        e => Error::FinalizerError(e),
    })
}

/// The S3 client settings of `spec` with the credentials from its Secret (in `ns`), for the
/// operator's own storage reads and deletes. The Secret is read only when named.
pub async fn s3_options_for(ctx: &Context, ns: &str, spec: &crate::crd::StreamJobSpec) -> Result<S3Options, Error> {
    s3_config_options(ctx, ns, spec.s3.as_ref())
        .await
        .map_err(|e| Error::CredentialsError(e.to_string()))
}

/// The S3 client settings of `config` (a job's `spec.s3` or a Savepoint's recorded
/// `status.s3`) with the credentials from the Secret it names (in `ns`).
pub async fn s3_config_options(
    ctx: &Context,
    ns: &str,
    config: Option<&crate::crd::S3Config>,
) -> Result<S3Options, crate::snapshots::CredentialsError> {
    let secrets: Api<Secret> = Api::namespaced(ctx.client.clone(), ns);
    crate::snapshots::s3_config_with_credentials(config, |name| async move {
        let secret = secrets.get_opt(&name).await.map_err(|e| e.to_string())?;
        Ok(secret.map(|s| {
            s.data
                .unwrap_or_default()
                .into_iter()
                .map(|(k, v)| (k, v.0))
                .chain(
                    s.string_data
                        .unwrap_or_default()
                        .into_iter()
                        .map(|(k, v)| (k, v.into_bytes())),
                )
                .collect()
        }))
    })
    .await
}

/// Converts an API time to a `SystemTime`.
pub fn system_time(t: &k8s_openapi::apimachinery::pkg::apis::meta::v1::Time) -> SystemTime {
    SystemTime::from(t.0)
}
