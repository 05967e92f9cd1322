//! API tests with a mocked API server (kube-rs' tower-test `ApiServerVerifier` pattern): each
//! scenario runs real reconciles against a mock that asserts every request's method, path,
//! field manager and body, and replies as the API server would. Every step is awaited with a
//! timeout, so a missing or extra request fails the test instead of hanging it.
//!
//! This module holds the shared fixtures; the mock API server is in `mock`, the scenarios are
//! grouped by controller in the other submodules.

use super::*;
use crate::control::{ControlError, FakeControlApi};
use crate::crd::{Savepoint, StreamJob};
use crate::snapshots::FakeSnapshots;
use http::{Request, Response};
use kube::client::Body;
use kube::core::DeserializeGuard;
use kube::runtime::controller::Action;
use mock::ApiServer;
use serde_json::{Value, json};
use std::time::{Duration, UNIX_EPOCH};
use weir_runtime::control::api::{
    CheckpointStats, JobState, JobStatus, OperatorStateInfo, SavepointStatus, SnapshotInfo, SnapshotKind, TriggerState,
};

mod cache_reads;
mod events;
mod job_reconcile;
mod mock;
mod savepoint_reconcile;

const STEP: Duration = Duration::from_secs(1);
const NOW: u64 = 1_700_000_000;
const SVP: &str = "s3://bucket/svp/savepoint-wc-7";

fn spec_json() -> Value {
    json!({
        "image": "weir:1",
        "parallelism": 2,
        "checkpointing": {"storage": "s3://bucket/chk"},
        "savepoints": {"directory": "s3://bucket/svp"},
        "job": {"steps": [
            {"source": {"generator": {"seed": 1}}},
            {"keyBy": {"expression": "key"}},
            {"uid": "counts", "count": {}},
            {"sink": {"print": {}}},
        ]},
    })
}

fn job_json(extra_meta: &Value) -> Value {
    let mut j = json!({
        "apiVersion": "weir.dev/v1alpha1",
        "kind": "StreamJob",
        "metadata": {"name": "wc", "namespace": "ns", "uid": "uid-1", "generation": 1,
                     "resourceVersion": "10", "finalizers": ["weir.dev/finalizer"]},
        "spec": spec_json(),
    });
    for (k, v) in extra_meta.as_object().unwrap() {
        j["metadata"][k] = v.clone();
    }
    j
}

fn guard(v: Value) -> Arc<DeserializeGuard<StreamJob>> {
    Arc::new(serde_json::from_value(v).unwrap())
}

fn setup() -> (Arc<Context>, ApiServer, FakeControlApi, FakeSnapshots) {
    let (svc, handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let client = kube::Client::new(svc, "ns");
    let control = FakeControlApi::new();
    let snaps = FakeSnapshots::default();
    let mut reg = prometheus_client::registry::Registry::default();
    let (cache, mut writers) = super::cache::cache();
    mock::relist(&mut writers.jobs, vec![]);
    mock::relist(&mut writers.savepoints, vec![]);
    mock::relist(&mut writers.deployments, vec![]);
    mock::relist(&mut writers.stateful_sets, vec![]);
    mock::relist(&mut writers.pods, vec![]);
    let ctx = Context {
        recorder: kube::runtime::events::Recorder::new(
            client.clone(),
            kube::runtime::events::Reporter {
                controller: "weir-operator".into(),
                instance: None,
            },
        ),
        client,
        control: Arc::new(control.clone()),
        snapshots: Arc::new(snaps.clone()),
        metrics: Arc::new(crate::metrics::Metrics::new(&mut reg)),
        clock: Arc::new(|| UNIX_EPOCH + Duration::from_secs(NOW)),
        failures: Default::default(),
        runtime_defaults: crate::build::RuntimeDefaults {
            image: "weir:default".into(),
            ..Default::default()
        },
        network_policies: crate::build::NetworkPolicySettings {
            enabled: true,
            operator_namespace: "weir-system".into(),
            operator_pod_labels: [("app.kubernetes.io/name".to_string(), "weir-operator".to_string())].into(),
            monitoring_namespace_selector: None,
        },
        cache,
    };
    (Arc::new(ctx), ApiServer(handle, writers), control, snaps)
}

fn job_status(state: JobState, checkpoint: Option<(u64, SnapshotKind, &str)>) -> JobStatus {
    JobStatus {
        job_name: "wc".into(),
        job_id: "run-1".into(),
        lineage_id: None,
        state,
        parallelism: 2,
        max_parallelism: 128,
        restored_from: None,
        last_completed_checkpoint: checkpoint.map(|(id, kind, path)| CheckpointStats {
            id,
            kind,
            path: path.into(),
            triggered_at_ms: NOW * 1000,
            completed_at_ms: NOW * 1000,
            duration_ms: 1,
            max_sync_ms: 0,
            max_async_ms: 0,
            max_alignment_ms: 0,
            size_bytes: 1,
            full_size_bytes: 1,
            alignment: Default::default(),
        }),
        subtasks: vec![],
        failure: None,
        restarts: 0,
        workers: vec![],
        summary: None,
    }
}

fn info(uids: &[&str]) -> SnapshotInfo {
    SnapshotInfo {
        job_name: "wc".into(),
        checkpoint_id: 7,
        kind: SnapshotKind::Savepoint,
        max_parallelism: 128,
        parallelism: 2,
        alignment: Default::default(),
        operators: uids
            .iter()
            .map(|u| OperatorStateInfo {
                uid: u.to_string(),
                kind: "count".into(),
                state_names: vec!["keyed:aggregate".into()],
                key_group_ranges: vec![],
                bytes: 1,
                entries: 1,
                subtasks: vec![],
            })
            .collect(),
    }
}

async fn finish<T>(task: tokio::task::JoinHandle<T>) -> T {
    tokio::time::timeout(STEP, task)
        .await
        .expect("reconcile did not finish")
        .unwrap()
}

/// A running, deployed job (generation 1 deployed as deploy generation 1) whose spec is now
/// `spec` at `generation`.
fn running_job(spec: Value, generation: i64) -> Value {
    let deployed: crate::crd::StreamJobSpec = serde_json::from_value(spec_json()).unwrap();
    let deployed = serde_json::to_string(&deployed).unwrap();
    let mut j = job_json(&json!({"generation": generation}));
    j["spec"] = spec;
    j["status"] = json!({
        "observedGeneration": 1,
        "lifecycleState": "Running",
        "deployGeneration": 1,
        "lastReconciledSpec": deployed,
        "lastStableSpec": deployed,
        "deployedAt": "2023-11-14T22:10:00Z",
        "jobStatus": {"jobId": "run-1", "state": "RUNNING",
                      "lastCheckpoint": {"id": 5, "path": "s3://bucket/chk/wc/chk-5"}},
    });
    j
}

fn with_status(mut job: Value, status: &Value) -> Value {
    job["status"] = status.clone();
    job
}
