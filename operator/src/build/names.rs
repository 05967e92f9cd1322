//! Names, labels and annotations of a StreamJob's child objects: the job's key in names and
//! label values (shortened for long names), the children's names, the labels that select each
//! role's pods, the owner reference, and the coordinator's run id.

use crate::crd::StreamJob;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
use kube::{Resource, ResourceExt};
use std::collections::BTreeMap;

/// Field manager of every server-side apply the operator makes.
pub const FIELD_MANAGER: &str = "weir-operator";
/// Label: the StreamJob's name, on every child and pod.
pub const LABEL_JOB: &str = "weir.dev/job";
/// Label: the deploy generation (`status.deployGeneration`) a workload belongs to.
pub const LABEL_DEPLOY_GENERATION: &str = "weir.dev/deployment-generation";
/// Annotation on the coordinator Deployment: the StreamJob `metadata.generation` whose spec it
/// runs (FKO's generation annotation), so a restarted operator can tell whether an upgrade
/// already reached the cluster.
pub const ANNOTATION_SPEC_GENERATION: &str = "weir.dev/spec-generation";
/// Pod-template annotation: checksum of the runtime-relevant part of the job file. It changes
/// only when the runtime would see a different job, so operator-only spec edits never roll pods.
pub const ANNOTATION_CONFIG_CHECKSUM: &str = "weir.dev/config-checksum";

/// Pod annotation with the StreamJob's full name, set only when [`job_key`] shortened it (so
/// the pods of jobs with short names are unchanged).
pub const ANNOTATION_JOB_NAME: &str = "weir.dev/job-name";

/// Longest StreamJob name used as is in child names and labels. With the longest suffix
/// (`-coordinator`, 12 characters) a child name stays within 52 characters: a StatefulSet's pods
/// carry the label `controller-revision-hash: <name>-<10 characters>`, which must fit in 63, and
/// Service names must fit in 63.
pub const MAX_JOB_KEY_LEN: usize = 40;

/// The job's key in child object names and in the `weir.dev/job` and
/// `app.kubernetes.io/instance` label values: the StreamJob name when it has at most
/// [`MAX_JOB_KEY_LEN`] characters and no dot (dots are not allowed in Service names);
/// otherwise its first 31 characters with dots as dashes and no trailing dash, `-`, and 8 hex
/// digits of the xxh3 hash of the full name (deterministic; two names sharing a long prefix
/// differ). Always at most 40 characters.
pub fn job_key(job: &str) -> String {
    if job.len() <= MAX_JOB_KEY_LEN && !job.contains('.') {
        return job.to_string();
    }
    let prefix: String = job
        .chars()
        .take(MAX_JOB_KEY_LEN - 9)
        .map(|c| if c == '.' { '-' } else { c })
        .collect();
    let hash = xxhash_rust::xxh3::xxh3_64(job.as_bytes()) as u32;
    format!("{}-{hash:08x}", prefix.trim_end_matches('-'))
}

/// Label selector (`weir.dev/job=<key>`) of every child and pod of a job.
pub fn job_selector(job: &str) -> String {
    format!("{LABEL_JOB}={}", job_key(job))
}

/// Name of the ConfigMap holding the job file.
pub fn config_map_name(job: &str) -> String {
    format!("{}-config", job_key(job))
}
/// Name of the coordinator Deployment and its Service.
pub fn coordinator_name(job: &str) -> String {
    format!("{}-coordinator", job_key(job))
}
/// Name of the worker StatefulSet and its headless Service.
pub fn worker_name(job: &str) -> String {
    format!("{}-worker", job_key(job))
}

/// The coordinator's `--run-id`: `<job uid>-<deploy generation>`. Stable for one deployment,
/// so a coordinator container restarted by Kubernetes resumes from its run's newest checkpoint
/// instead of going back to `--restore`; different for every new deployment.
pub fn run_id(job: &StreamJob, deploy_generation: u64) -> String {
    let uid = job.uid().unwrap_or_else(|| job.name_any());
    format!("{uid}-{deploy_generation}")
}

/// Pod role.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Component {
    /// The coordinator (Flink's JobManager).
    Coordinator,
    /// A worker (Flink's TaskManager).
    Worker,
    /// The job's configuration.
    Config,
    /// The job secret (the control API token and the workers' HMAC key).
    JobSecret,
}

impl Component {
    /// The `app.kubernetes.io/component` value.
    pub fn as_str(self) -> &'static str {
        match self {
            Component::Coordinator => "coordinator",
            Component::Worker => "worker",
            Component::Config => "config",
            Component::JobSecret => "job-secret",
        }
    }
}

/// Labels that select a role's pods. Stable across deploy generations (selectors are
/// immutable), unlike [`labels`]. The job appears as its [`job_key`] (label values have at
/// most 63 characters).
pub fn selector_labels(job: &str, component: Component) -> BTreeMap<String, String> {
    let key = job_key(job);
    BTreeMap::from([
        ("app.kubernetes.io/name".into(), "weir".into()),
        ("app.kubernetes.io/instance".into(), key.clone()),
        ("app.kubernetes.io/component".into(), component.as_str().into()),
        (LABEL_JOB.into(), key),
    ])
}

/// Labels of a child object and its pods.
pub fn labels(job: &str, component: Component, deploy_generation: u64) -> BTreeMap<String, String> {
    let mut l = selector_labels(job, component);
    l.insert("app.kubernetes.io/managed-by".into(), FIELD_MANAGER.into());
    l.insert("app.kubernetes.io/part-of".into(), "weir".into());
    l.insert(LABEL_DEPLOY_GENERATION.into(), deploy_generation.to_string());
    l
}

/// The controller owner reference to the StreamJob (garbage collection and watches).
pub fn owner_reference(job: &StreamJob) -> OwnerReference {
    OwnerReference {
        api_version: StreamJob::api_version(&()).into_owned(),
        kind: StreamJob::kind(&()).into_owned(),
        name: job.name_any(),
        uid: job.uid().unwrap_or_default(),
        controller: Some(true),
        block_owner_deletion: Some(true),
    }
}
