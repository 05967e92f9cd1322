//! Pure builders of every child object of a StreamJob: the ConfigMap with the job file, the
//! coordinator Deployment and Service, and the worker StatefulSet and headless Service.
//!
//! Everything here is a function of its arguments (no I/O, no clock), so the objects the
//! operator applies are pinned by table and snapshot tests. The controller applies them with
//! server-side apply; see `controller`.

mod defaults;
mod disk_memory;
mod job_secret;
mod merge;
mod names;
mod network_policy;

pub use defaults::{BUILT_IN_RUNTIME_IMAGE, RuntimeDefaults};
pub use disk_memory::disk_memory_warning;
pub use job_secret::{
    JOB_SECRET_DIR, JOB_SECRET_ENV, JOB_SECRET_FILE_MODE, JOB_SECRET_KEY, JOB_SECRET_VOLUME, job_secret,
    job_secret_name, job_secret_path, token_of, token_to_keep,
};
pub use merge::merge_pod_template;
pub use names::{
    ANNOTATION_CONFIG_CHECKSUM, ANNOTATION_JOB_NAME, ANNOTATION_SPEC_GENERATION, Component, FIELD_MANAGER,
    LABEL_DEPLOY_GENERATION, LABEL_JOB, MAX_JOB_KEY_LEN, config_map_name, coordinator_name, job_key, job_selector,
    labels, owner_reference, run_id, selector_labels, worker_name,
};
pub use network_policy::{
    NAMESPACE_NAME_LABEL, NetworkPolicySettings, coordinator_network_policy, network_policies, worker_network_policy,
};

use crate::crd::{ImagePullPolicy, StreamJob, StreamJobSpec};
use k8s_openapi::api::apps::v1::{Deployment, StatefulSet};
use k8s_openapi::api::core::v1::{ConfigMap, PodTemplateSpec, Service};
use kube::ResourceExt;
use serde_json::{Value, json};
use weir_runtime::job::StateBackend;

/// Port of the coordinator's control API (`/healthz`, `/v1/...`, `/metrics`).
pub const CONTROL_PORT: i32 = 8081;
/// Port of the coordinator's RPC endpoint that workers register with.
pub const RPC_PORT: i32 = 6123;
/// Port of a worker's data endpoint.
pub const DATA_PORT: i32 = 6124;
/// Port of a worker's health and metrics endpoint (`/healthz`, `/metrics`).
pub const WORKER_HTTP_PORT: i32 = 8082;
/// Name of the runtime container in both pod roles (the pod template override merges by it).
pub const CONTAINER: &str = "weir";
/// Where the ConfigMap is mounted.
pub const CONFIG_DIR: &str = "/etc/weir";
/// The worker pods' volume for `stateBackend: disk` (an emptyDir; a `worker.podTemplate`
/// volume of this name replaces its settings, e.g. a `sizeLimit`).
pub const STATE_VOLUME: &str = "weir-state";
/// Where the state volume is mounted: the runtime's `--state-dir` (env `WEIR_STATE_DIR`).
pub const STATE_DIR: &str = "/var/lib/weir/state";
/// Key of the job file in the ConfigMap.
pub const JOB_FILE_KEY: &str = "job.yaml";
/// UID/GID the runtime runs as (non-root).
pub const RUN_AS_USER: i64 = 65532;

/// Number of worker pods: `ceil(parallelism / slotsPerWorker)`, at least 1.
pub fn worker_replicas(spec: &StreamJobSpec) -> i32 {
    let slots = spec.slots_per_worker.max(1);
    ((spec.parallelism.max(1) + slots - 1) / slots).max(1)
}

/// One deployment of a StreamJob: what to build.
#[derive(Clone, Copy, Debug)]
pub struct Target<'a> {
    /// The StreamJob (name, namespace and uid for names and owner references).
    pub job: &'a StreamJob,
    /// The spec to deploy (the decision's, not necessarily `job.spec`).
    pub spec: &'a StreamJobSpec,
    /// The coordinator's `--restore` URL; `None` starts empty.
    pub restore_from: Option<&'a str>,
    /// `status.deployGeneration` of this deployment.
    pub deploy_generation: u64,
    /// `metadata.generation` whose spec this is.
    pub spec_generation: i64,
    /// Operator-wide pod defaults (`WEIR_RUNTIME_IMAGE`, `WEIR_RUNTIME_DEFAULTS`) for what the
    /// spec leaves unset.
    pub defaults: &'a RuntimeDefaults,
}

/// Every child object of one deployment.
#[derive(Clone, Debug, PartialEq)]
pub struct Children {
    /// The job file.
    pub config_map: ConfigMap,
    /// The coordinator.
    pub coordinator: Deployment,
    /// The coordinator's Service (control API and RPC).
    pub coordinator_service: Service,
    /// The workers.
    pub workers: StatefulSet,
    /// The workers' headless Service.
    pub worker_service: Service,
}

/// The job file the pods read: a whole StreamJob manifest (the runtime ignores operator-only
/// fields). Its `metadata.namespace` tells the coordinator which StreamJob it runs, checked
/// against the checkpoint directory's `_owner` record.
pub fn job_file(name: &str, namespace: Option<&str>, spec: &StreamJobSpec) -> String {
    let mut metadata = json!({"name": name});
    if let Some(namespace) = namespace {
        metadata["namespace"] = json!(namespace);
    }
    let manifest = json!({
        "apiVersion": weir_runtime::job::API_VERSION,
        "kind": weir_runtime::job::KIND,
        "metadata": metadata,
        "spec": spec,
    });
    serde_yaml::to_string(&manifest).expect("manifest serializes")
}

/// Checksum (xxh3, hex) of what the runtime reads from the job file: the name and the
/// runtime's view of the spec. Operator-only fields (upgradeMode, rollback, health, periodic
/// savepoints, ...) do not enter it.
pub fn config_checksum(name: &str, spec: &StreamJobSpec) -> String {
    let runtime = spec
        .runtime_spec()
        .map(|s| serde_json::to_value(s).expect("runtime spec serializes"))
        .unwrap_or_else(|_| serde_json::to_value(spec).expect("spec serializes"));
    let text = serde_json::to_string(&json!({"name": name, "spec": runtime})).expect("serializes");
    format!("{:016x}", xxhash_rust::xxh3::xxh3_64(text.as_bytes()))
}

fn meta(t: &Target, name: String, component: Component) -> Value {
    json!({
        "name": name,
        "namespace": t.job.namespace(),
        "labels": labels(&t.job.name_any(), component, t.deploy_generation),
        "ownerReferences": [owner_reference(t.job)],
    })
}

fn from_json<T: serde::de::DeserializeOwned>(v: Value) -> T {
    serde_json::from_value(v).expect("builder produces a valid object")
}

/// Builds every child object.
pub fn build(t: &Target) -> Children {
    Children {
        config_map: config_map(t),
        coordinator: coordinator_deployment(t),
        coordinator_service: coordinator_service(t),
        workers: worker_statefulset(t),
        worker_service: worker_service(t),
    }
}

/// The ConfigMap `<job>-config` with `job.yaml`.
pub fn config_map(t: &Target) -> ConfigMap {
    let name = t.job.name_any();
    from_json(json!({
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": meta(t, config_map_name(&name), Component::Config),
        "data": {JOB_FILE_KEY: job_file(&name, t.job.namespace().as_deref(), t.spec)},
    }))
}

fn image(t: &Target) -> String {
    if t.spec.image.is_empty() {
        t.defaults.image().to_string()
    } else {
        t.spec.image.clone()
    }
}

fn pull_policy(t: &Target) -> Value {
    match t.spec.image_pull_policy.or(t.defaults.image_pull_policy) {
        None => Value::Null,
        Some(ImagePullPolicy::Always) => "Always".into(),
        Some(ImagePullPolicy::IfNotPresent) => "IfNotPresent".into(),
        Some(ImagePullPolicy::Never) => "Never".into(),
    }
}

/// Environment shared by both roles: the mounted job secret's path, and S3 credentials from
/// the referenced Secret (the keys the operator itself reads:
/// `crate::snapshots::credentials_from_secret`).
fn common_env(t: &Target) -> Vec<Value> {
    let mut env = vec![json!({"name": JOB_SECRET_ENV, "value": job_secret_path()})];
    if let Some(secret) = t.spec.s3.as_ref().and_then(|s| s.credentials_secret.as_ref()) {
        let key = |k: &Option<String>, d: &str| k.clone().unwrap_or_else(|| d.to_string());
        env.push(json!({"name": "AWS_ACCESS_KEY_ID", "valueFrom": {"secretKeyRef": {
            "name": secret.name, "key": key(&secret.access_key_id_key, "accessKeyId")}}}));
        env.push(json!({"name": "AWS_SECRET_ACCESS_KEY", "valueFrom": {"secretKeyRef": {
            "name": secret.name, "key": key(&secret.secret_access_key_key, "secretAccessKey")}}}));
        // Temporary credentials: used when the Secret has the key (as the operator does).
        env.push(json!({"name": "AWS_SESSION_TOKEN", "valueFrom": {"secretKeyRef": {
            "name": secret.name, "key": crate::snapshots::SESSION_TOKEN_KEY, "optional": true}}}));
    }
    env
}

/// `over` merged key by key into `base` (objects recursively; anything else replaces).
fn merge_objects(base: &mut Value, over: &Value) {
    match (base, over) {
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                merge_objects(b.entry(k.clone()).or_insert(Value::Null), v);
            }
        }
        (b, o) => *b = o.clone(),
    }
}

/// The runtime container's securityContext: the built-in one with the operator default merged
/// over it.
fn container_security_context(t: &Target) -> Value {
    let mut sc = built_in_container_security_context();
    if let Some(d) = &t.defaults.container_security_context {
        merge_objects(&mut sc, &serde_json::to_value(d).expect("security context serializes"));
    }
    sc
}

/// The runtime pods' securityContext: the built-in one with the operator default merged over it.
fn pod_security_context(t: &Target) -> Value {
    let mut sc = json!({
        "runAsNonRoot": true,
        "runAsUser": RUN_AS_USER,
        "runAsGroup": RUN_AS_USER,
        "fsGroup": RUN_AS_USER,
        "seccompProfile": {"type": "RuntimeDefault"},
    });
    if let Some(d) = &t.defaults.pod_security_context {
        merge_objects(&mut sc, &serde_json::to_value(d).expect("security context serializes"));
    }
    sc
}

fn built_in_container_security_context() -> Value {
    json!({
        "allowPrivilegeEscalation": false,
        "readOnlyRootFilesystem": true,
        "runAsNonRoot": true,
        "runAsUser": RUN_AS_USER,
        "runAsGroup": RUN_AS_USER,
        "capabilities": {"drop": ["ALL"]},
        "seccompProfile": {"type": "RuntimeDefault"},
    })
}

/// The pod template of a role before the user's override is merged over it.
fn pod_template(t: &Target, component: Component, container: Value, resources: Option<Value>) -> PodTemplateSpec {
    let name = t.job.name_any();
    let mut container = container;
    if let Some(r) = resources {
        container["resources"] = r;
    }
    let mut annotations = json!({ANNOTATION_CONFIG_CHECKSUM: config_checksum(&name, t.spec)});
    if job_key(&name) != name {
        // The label holds the shortened key; watches map pods back to the job by this.
        annotations[ANNOTATION_JOB_NAME] = json!(name);
    }
    let mut pod = json!({
        "metadata": {
            "labels": labels(&name, component, t.deploy_generation),
            "annotations": annotations,
        },
        "spec": {
            "serviceAccountName": t.spec.service_account_name,
            // The runtime needs nothing from the Kubernetes API.
            "automountServiceAccountToken": false,
            "enableServiceLinks": false,
            "terminationGracePeriodSeconds": 60,
            "securityContext": pod_security_context(t),
            "containers": [container],
            "volumes": [
                {"name": "config", "configMap": {"name": config_map_name(&name)}},
                {"name": JOB_SECRET_VOLUME, "secret": {
                    "secretName": job_secret_name(&name), "defaultMode": JOB_SECRET_FILE_MODE}},
                // The root filesystem is read-only; the runtime's scratch space.
                {"name": "tmp", "emptyDir": {}},
            ],
        },
    });
    if component == Component::Worker && t.spec.state_backend == StateBackend::Disk {
        // Disk keyed state: scratch, recreated on every start (the checkpoint is the truth).
        pod["spec"]["volumes"]
            .as_array_mut()
            .expect("volumes is a list")
            .push(json!({"name": STATE_VOLUME, "emptyDir": {}}));
    }
    let generated: PodTemplateSpec = from_json(strip_nulls(pod));
    let component_spec = match component {
        Component::Coordinator => t.spec.coordinator.as_ref(),
        _ => t.spec.worker.as_ref(),
    };
    let mut merged = merge_pod_template(generated, component_spec.and_then(|c| c.pod_template.as_ref()));
    // The selector labels and the generation label are the operator's, whatever the override says.
    merged
        .metadata
        .get_or_insert_with(Default::default)
        .labels
        .get_or_insert_with(Default::default)
        .extend(labels(&name, component, t.deploy_generation));
    merged
}

fn strip_nulls(v: Value) -> Value {
    match v {
        Value::Object(m) => Value::Object(
            m.into_iter()
                .filter(|(_, v)| !v.is_null())
                .map(|(k, v)| (k, strip_nulls(v)))
                .collect(),
        ),
        Value::Array(a) => Value::Array(a.into_iter().map(strip_nulls).collect()),
        v => v,
    }
}

fn volume_mounts() -> Value {
    json!([
        {"name": "config", "mountPath": CONFIG_DIR, "readOnly": true},
        {"name": JOB_SECRET_VOLUME, "mountPath": JOB_SECRET_DIR, "readOnly": true},
        {"name": "tmp", "mountPath": "/tmp"},
    ])
}

/// Mounts the state volume at [`STATE_DIR`] in the worker container and points the runtime's
/// `WEIR_STATE_DIR` at it.
fn add_state_volume_mount(container: &mut Value) {
    container["volumeMounts"]
        .as_array_mut()
        .expect("volumeMounts is a list")
        .push(json!({"name": STATE_VOLUME, "mountPath": STATE_DIR}));
    container["env"]
        .as_array_mut()
        .expect("env is a list")
        .push(json!({"name": weir_runtime::state::local_dir::STATE_DIR_ENV, "value": STATE_DIR}));
}

/// The role's resources: the spec's, else the operator default, else none.
fn resources(
    c: Option<&crate::crd::ComponentSpec>,
    default: Option<&k8s_openapi::api::core::v1::ResourceRequirements>,
) -> Option<Value> {
    c.and_then(|c| c.resources.as_ref())
        .or(default)
        .map(|r| serde_json::to_value(r).expect("resources serialize"))
}

/// The coordinator Deployment `<job>-coordinator`: one replica, `Recreate` (never two
/// coordinators of one job), restoring from `restore_from`.
pub fn coordinator_deployment(t: &Target) -> Deployment {
    let name = t.job.name_any();
    let restore = t.restore_from.unwrap_or("none");
    let mut env = vec![json!({"name": "HOME", "value": "/tmp"})];
    env.extend(common_env(t));
    let container = json!({
        "name": CONTAINER,
        "image": image(t),
        "imagePullPolicy": pull_policy(t),
        "command": ["weir"],
        "args": [
            "coordinator",
            "--job", format!("{CONFIG_DIR}/{JOB_FILE_KEY}"),
            "--restore", restore,
            "--listen", format!("0.0.0.0:{CONTROL_PORT}"),
            "--rpc-listen", format!("0.0.0.0:{RPC_PORT}"),
            "--run-id", run_id(t.job, t.deploy_generation),
        ],
        "workingDir": "/tmp",
        "env": env,
        "ports": [
            {"name": "http", "containerPort": CONTROL_PORT, "protocol": "TCP"},
            {"name": "rpc", "containerPort": RPC_PORT, "protocol": "TCP"},
        ],
        "readinessProbe": {
            "httpGet": {"path": "/healthz", "port": "http"},
            "periodSeconds": 5, "failureThreshold": 3, "timeoutSeconds": 2,
        },
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": "http"},
            "initialDelaySeconds": 15, "periodSeconds": 10, "failureThreshold": 6, "timeoutSeconds": 2,
        },
        "securityContext": container_security_context(t),
        "volumeMounts": volume_mounts(),
    });
    let template = pod_template(
        t,
        Component::Coordinator,
        container,
        resources(t.spec.coordinator.as_ref(), t.defaults.coordinator_resources.as_ref()),
    );
    let mut metadata = meta(t, coordinator_name(&name), Component::Coordinator);
    metadata["annotations"] = json!({ANNOTATION_SPEC_GENERATION: t.spec_generation.to_string()});
    from_json(strip_nulls(json!({
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": metadata,
        "spec": {
            "replicas": 1,
            "strategy": {"type": "Recreate"},
            "revisionHistoryLimit": 1,
            "selector": {"matchLabels": selector_labels(&name, Component::Coordinator)},
            "template": template,
        },
    })))
}

/// The coordinator Service `<job>-coordinator` (control API and worker RPC).
pub fn coordinator_service(t: &Target) -> Service {
    let name = t.job.name_any();
    from_json(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta(t, coordinator_name(&name), Component::Coordinator),
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(&name, Component::Coordinator),
            "ports": [
                {"name": "http", "port": CONTROL_PORT, "targetPort": "http", "protocol": "TCP"},
                {"name": "rpc", "port": RPC_PORT, "targetPort": "rpc", "protocol": "TCP"},
            ],
        },
    }))
}

/// The worker StatefulSet `<job>-worker`: `ceil(parallelism / slotsPerWorker)` pods, started
/// in parallel, each advertising its pod IP to the coordinator.
pub fn worker_statefulset(t: &Target) -> StatefulSet {
    let name = t.job.name_any();
    let mut env = vec![
        json!({"name": "HOME", "value": "/tmp"}),
        json!({"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}),
    ];
    env.extend(common_env(t));
    let container = json!({
        "name": CONTAINER,
        "image": image(t),
        "imagePullPolicy": pull_policy(t),
        "command": ["weir"],
        "args": [
            "worker",
            "--coordinator", format!("{}:{RPC_PORT}", coordinator_name(&name)),
            "--slots", t.spec.slots_per_worker.max(1).to_string(),
            "--data-listen", format!("0.0.0.0:{DATA_PORT}"),
            "--advertise", format!("$(POD_IP):{DATA_PORT}"),
            "--listen", format!("0.0.0.0:{WORKER_HTTP_PORT}"),
        ],
        "workingDir": "/tmp",
        "env": env,
        "ports": [
            {"name": "data", "containerPort": DATA_PORT, "protocol": "TCP"},
            {"name": "http", "containerPort": WORKER_HTTP_PORT, "protocol": "TCP"},
        ],
        "readinessProbe": {
            "httpGet": {"path": "/healthz", "port": "http"},
            "periodSeconds": 5, "failureThreshold": 3, "timeoutSeconds": 2,
        },
        "livenessProbe": {
            "httpGet": {"path": "/healthz", "port": "http"},
            "initialDelaySeconds": 15, "periodSeconds": 10, "failureThreshold": 6, "timeoutSeconds": 2,
        },
        "securityContext": container_security_context(t),
        "volumeMounts": volume_mounts(),
    });
    let mut container = container;
    if t.spec.state_backend == StateBackend::Disk {
        add_state_volume_mount(&mut container);
    }
    let template = pod_template(
        t,
        Component::Worker,
        container,
        resources(t.spec.worker.as_ref(), t.defaults.worker_resources.as_ref()),
    );
    from_json(strip_nulls(json!({
        "apiVersion": "apps/v1",
        "kind": "StatefulSet",
        "metadata": meta(t, worker_name(&name), Component::Worker),
        "spec": {
            "replicas": worker_replicas(t.spec),
            "serviceName": worker_name(&name),
            "podManagementPolicy": "Parallel",
            "revisionHistoryLimit": 1,
            "selector": {"matchLabels": selector_labels(&name, Component::Worker)},
            "template": template,
        },
    })))
}

/// The workers' headless Service `<job>-worker` (stable pod DNS names for the StatefulSet).
pub fn worker_service(t: &Target) -> Service {
    let name = t.job.name_any();
    from_json(json!({
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": meta(t, worker_name(&name), Component::Worker),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": true,
            "selector": selector_labels(&name, Component::Worker),
            "ports": [{"name": "data", "port": DATA_PORT, "targetPort": "data", "protocol": "TCP"}],
        },
    }))
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod state_volume_tests;
