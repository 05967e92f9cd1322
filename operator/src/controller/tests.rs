//! API tests with a mocked API server (kube-rs' tower-test `ApiServerVerifier` pattern): each
//! scenario runs real reconciles against a mock that asserts every request's method, path,
//! field manager and body, and replies as the API server would. Every step is awaited with a
//! timeout, so a missing or extra request fails the test instead of hanging it.

use super::*;
use crate::control::{ControlError, FakeControlApi};
use crate::crd::{Savepoint, StreamJob};
use crate::snapshots::FakeSnapshots;
use http::{Request, Response};
use kube::client::Body;
use kube::core::DeserializeGuard;
use kube::runtime::controller::Action;
use serde_json::{Value, json};
use std::time::{Duration, UNIX_EPOCH};
use weir_runtime::control::api::{
    CheckpointStats, JobState, JobStatus, OperatorStateInfo, SavepointStatus, SnapshotInfo, SnapshotKind, TriggerState,
};

const STEP: Duration = Duration::from_secs(1);
const NOW: u64 = 1_700_000_000;
const SVP: &str = "s3://bucket/svp/savepoint-wc-7";

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;
type Responder = tower_test::mock::SendResponse<Response<Body>>;

/// The mock API server.
struct ApiServer(Handle);

/// One received request.
struct Received {
    method: String,
    path: String,
    query: String,
    body: Value,
    send: Responder,
}

impl Received {
    fn reply(self, code: u16, body: Value) {
        self.send.send_response(
            Response::builder()
                .status(code)
                .body(Body::from(serde_json::to_vec(&body).unwrap()))
                .unwrap(),
        );
    }
    fn ok(self, body: Value) {
        self.reply(200, body)
    }
    fn not_found(self) {
        self.reply(
            404,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": "not found", "reason": "NotFound", "code": 404}),
        )
    }
    /// Replies with the applied object itself (what SSA returns, less server fields).
    fn echo(self) {
        let b = self.body.clone();
        self.ok(b)
    }
    fn assert_ssa(&self) {
        assert!(
            self.query.contains("fieldManager=weir-operator") && self.query.contains("force=true"),
            "{} {} must be a forced server-side apply by weir-operator: {}",
            self.method,
            self.path,
            self.query
        );
    }
}

impl ApiServer {
    async fn next(&mut self) -> Received {
        let (req, send) = tokio::time::timeout(STEP, self.0.next_request())
            .await
            .expect("timed out waiting for the next API request")
            .expect("the client went away");
        let (parts, body) = req.into_parts();
        let bytes = body.collect_bytes().await.unwrap();
        let body = if bytes.is_empty() {
            Value::Null
        } else {
            serde_json::from_slice(&bytes).unwrap()
        };
        Received {
            method: parts.method.to_string(),
            path: parts.uri.path().to_string(),
            query: parts.uri.query().unwrap_or_default().to_string(),
            body,
            send,
        }
    }

    async fn expect(&mut self, method: &str, path: &str) -> Received {
        let r = self.next().await;
        assert_eq!(
            (r.method.as_str(), r.path.as_str()),
            (method, path),
            "query: {} body: {}",
            r.query,
            r.body
        );
        r
    }

    /// An Event write; asserts type and reason, replies with `code`; returns the event.
    async fn event(&mut self, type_: &str, reason: &str, code: u16) -> Value {
        let r = self.next().await;
        // A repeated event (same reason within minutes) is a PATCH of the first one's series.
        assert!(
            (r.method == "POST" && r.path == "/apis/events.k8s.io/v1/namespaces/ns/events")
                || (r.method == "PATCH" && r.path.starts_with("/apis/events.k8s.io/v1/namespaces/ns/events/")),
            "expected an event, got {} {}",
            r.method,
            r.path
        );
        assert_eq!(
            (r.body["type"].as_str(), r.body["reason"].as_str()),
            (Some(type_), Some(reason)),
            "{}",
            r.body
        );
        assert_eq!(r.body["regarding"]["name"], "wc");
        let b = r.body.clone();
        if code == 200 {
            r.ok(b.clone());
        } else {
            r.reply(
                code,
                json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "code": code,
                       "reason": "Forbidden", "message": "namespace ns is being terminated"}),
            );
        }
        b
    }
}

/// What one observation pass sees.
struct World {
    deployment: Option<Value>,
    statefulset: Option<Value>,
    pods: usize,
    savepoints: Vec<Value>,
}

impl World {
    fn empty() -> World {
        World {
            deployment: None,
            statefulset: None,
            pods: 0,
            savepoints: vec![],
        }
    }
    fn deployed(generation: u64) -> World {
        let meta = |name: &str| {
            json!({"name": name, "namespace": "ns",
                   "labels": {"weir.dev/job": "wc", "weir.dev/deployment-generation": generation.to_string()},
                   "annotations": {"weir.dev/spec-generation": "1"}})
        };
        World {
            deployment: Some(
                json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta("wc-coordinator")}),
            ),
            statefulset: Some(json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta("wc-worker")})),
            pods: 2,
            savepoints: vec![],
        }
    }
}

impl ApiServer {
    /// The reads of one StreamJob observation.
    async fn observe(&mut self, w: World) {
        let r = self
            .expect("GET", "/apis/apps/v1/namespaces/ns/deployments/wc-coordinator")
            .await;
        match w.deployment {
            Some(d) => r.ok(d),
            None => r.not_found(),
        }
        let r = self
            .expect("GET", "/apis/apps/v1/namespaces/ns/statefulsets/wc-worker")
            .await;
        match w.statefulset {
            Some(d) => r.ok(d),
            None => r.not_found(),
        }
        let r = self.expect("GET", "/api/v1/namespaces/ns/pods").await;
        assert!(r.query.contains("labelSelector=weir.dev%2Fjob%3Dwc"), "{}", r.query);
        let pods: Vec<Value> = (0..w.pods)
            .map(|i| json!({"metadata": {"name": format!("wc-{i}"), "namespace": "ns"}}))
            .collect();
        r.ok(json!({"apiVersion": "v1", "kind": "PodList", "metadata": {}, "items": pods}));
        self.expect("GET", "/apis/weir.dev/v1alpha1/namespaces/ns/savepoints")
            .await
            .ok(json!({"apiVersion": "weir.dev/v1alpha1", "kind": "SavepointList", "metadata": {}, "items": w.savepoints}));
    }

    /// The StreamJob status write; returns the written status.
    async fn status(&mut self) -> Value {
        let r = self
            .expect("PATCH", "/apis/weir.dev/v1alpha1/namespaces/ns/streamjobs/wc/status")
            .await;
        r.assert_ssa();
        assert_eq!(r.body["apiVersion"], "weir.dev/v1alpha1");
        assert_eq!(r.body["kind"], "StreamJob");
        let status = r.body["status"].clone();
        let mut obj = job_json(&json!({}));
        obj["status"] = status.clone();
        r.ok(obj);
        status
    }

    /// The server-side applies of a deployment; returns (Deployment, StatefulSet) bodies.
    async fn apply_children(&mut self) -> (Value, Value) {
        for path in [
            "/api/v1/namespaces/ns/configmaps/wc-config",
            "/api/v1/namespaces/ns/services/wc-coordinator",
            "/api/v1/namespaces/ns/services/wc-worker",
        ] {
            let r = self.expect("PATCH", path).await;
            r.assert_ssa();
            r.echo();
        }
        let r = self
            .expect("PATCH", "/apis/apps/v1/namespaces/ns/deployments/wc-coordinator")
            .await;
        r.assert_ssa();
        let d = r.body.clone();
        r.echo();
        let r = self
            .expect("PATCH", "/apis/apps/v1/namespaces/ns/statefulsets/wc-worker")
            .await;
        r.assert_ssa();
        let s = r.body.clone();
        r.echo();
        (d, s)
    }

    /// Orphan listing after a new deploy generation.
    async fn orphans(&mut self) {
        let r = self.expect("GET", "/apis/apps/v1/namespaces/ns/deployments").await;
        assert!(r.query.contains("labelSelector=weir.dev%2Fjob%3Dwc"));
        r.ok(json!({"apiVersion": "apps/v1", "kind": "DeploymentList", "metadata": {}, "items": []}));
        self.expect("GET", "/apis/apps/v1/namespaces/ns/statefulsets")
            .await
            .ok(json!({"apiVersion": "apps/v1", "kind": "StatefulSetList", "metadata": {}, "items": []}));
    }

    async fn delete_workloads(&mut self) {
        for path in [
            "/apis/apps/v1/namespaces/ns/deployments/wc-coordinator",
            "/apis/apps/v1/namespaces/ns/statefulsets/wc-worker",
        ] {
            let r = self.expect("DELETE", path).await;
            assert_eq!(r.body["propagationPolicy"], "Foreground", "{}", r.body);
            r.ok(json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}));
        }
    }
}

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
        default_image: "weir:default".into(),
    };
    (Arc::new(ctx), ApiServer(handle), control, snaps)
}

fn job_status(state: JobState, checkpoint: Option<(u64, SnapshotKind, &str)>) -> JobStatus {
    JobStatus {
        job_name: "wc".into(),
        job_id: "run-1".into(),
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
        }),
        subtasks: vec![],
        failure: None,
        restarts: 0,
        workers: vec![],
    }
}

fn info(uids: &[&str]) -> SnapshotInfo {
    SnapshotInfo {
        job_name: "wc".into(),
        checkpoint_id: 7,
        kind: SnapshotKind::Savepoint,
        max_parallelism: 128,
        parallelism: 2,
        operators: uids
            .iter()
            .map(|u| OperatorStateInfo {
                uid: u.to_string(),
                kind: "count".into(),
                state_names: vec!["keyed:aggregate".into()],
                key_group_ranges: vec![],
                bytes: 1,
                entries: 1,
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

#[tokio::test]
async fn first_deploy() {
    let (ctx, mut api, _control, _snaps) = setup();
    let mut job = job_json(&json!({}));
    job["metadata"].as_object_mut().unwrap().remove("finalizers");
    let task = tokio::spawn(stream_job::reconcile(guard(job), ctx));

    // The finalizer first, guarded by resourceVersion.
    let r = api
        .expect("PATCH", "/apis/weir.dev/v1alpha1/namespaces/ns/streamjobs/wc")
        .await;
    assert_eq!(
        r.body,
        json!({"metadata": {"finalizers": ["weir.dev/finalizer"], "resourceVersion": "10"}})
    );
    r.ok(job_json(&json!({})));
    api.observe(World::empty()).await;
    // Intent before action: status says Deploying generation 1 before anything is applied.
    let status = api.status().await;
    assert_eq!(status["lifecycleState"], "Deploying");
    assert_eq!(status["deployGeneration"], 1);
    assert_eq!(status["observedGeneration"], 1);
    assert_eq!(status["selector"], super::worker_selector("wc"));
    let ready = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Progressing")
        .unwrap();
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("True"), Some("Deploying"))
    );
    api.event("Normal", "Submit", 200).await;
    let (deployment, sts) = api.apply_children().await;
    let args = &deployment["spec"]["template"]["spec"]["containers"][0]["args"];
    assert_eq!(args[3], "--restore");
    assert_eq!(args[4], "none");
    assert_eq!(deployment["metadata"]["labels"]["weir.dev/deployment-generation"], "1");
    assert_eq!(deployment["metadata"]["annotations"]["weir.dev/spec-generation"], "1");
    assert_eq!(deployment["metadata"]["ownerReferences"][0]["uid"], "uid-1");
    assert_eq!(sts["spec"]["replicas"], 2);
    api.orphans().await;
    let action = finish(task).await.unwrap();
    assert_eq!(action, Action::requeue(crate::lifecycle::POLL));
}

#[tokio::test]
async fn savepoint_upgrade() {
    let (ctx, mut api, control, snaps) = setup();
    let mut spec = spec_json();
    spec["image"] = json!("weir:2");
    let job = running_job(spec.clone(), 2);
    control.set_job(Some(job_status(
        JobState::Running,
        Some((5, SnapshotKind::Checkpoint, "s3://bucket/chk/wc/chk-5")),
    )));

    // Pass 1: record the upgrade, then stop with a savepoint and record the trigger id.
    let task = tokio::spawn(stream_job::reconcile(guard(job.clone()), ctx.clone()));
    api.observe(World::deployed(1)).await;
    let status = api.status().await;
    assert_eq!(status["lifecycleState"], "Upgrading");
    assert_eq!(status["pending"]["kind"], "Upgrade");
    assert_eq!(status["pending"]["phase"], "AwaitingStop");
    assert!(
        status["pending"]["triggerId"].is_null(),
        "the trigger id is written after the request"
    );
    api.event("Normal", "SpecChanged", 200).await;
    let status = api.status().await;
    assert_eq!(status["pending"]["triggerId"], "t1");
    finish(task).await.unwrap();
    assert_eq!(control.requests().len(), 1);
    assert!(control.requests()[0].stop);
    assert_eq!(control.requests()[0].directory.as_deref(), Some("s3://bucket/svp"));

    // Pass 2: the savepoint completed and the job stopped: restore point recorded, the
    // savepoint recorded as a Savepoint object, workloads deleted.
    control.set_trigger(SavepointStatus {
        trigger_id: "t1".into(),
        state: TriggerState::Completed,
        path: Some(SVP.into()),
        checkpoint_id: Some(7),
        error: None,
    });
    control.set_job(Some(job_status(
        JobState::Stopped,
        Some((7, SnapshotKind::Savepoint, SVP)),
    )));
    let job = with_status(job, &status);
    let task = tokio::spawn(stream_job::reconcile(guard(job.clone()), ctx.clone()));
    api.observe(World::deployed(1)).await;
    let status = api.status().await;
    assert_eq!(status["restorePoint"]["path"], SVP);
    assert_eq!(status["restorePoint"]["origin"], "UpgradeSavepoint");
    assert_eq!(status["pending"]["phase"], "AwaitingTermination");
    let ev = api.event("Normal", "JobStatusChanged", 200).await;
    assert_eq!(ev["note"], "job state RUNNING → STOPPED");
    let r = api
        .expect("PATCH", "/apis/weir.dev/v1alpha1/namespaces/ns/savepoints/wc-upgrade-7")
        .await;
    r.assert_ssa();
    assert_eq!(
        r.body["spec"],
        json!({"jobRef": {"name": "wc"}, "origin": "Upgrade", "disposeOnDelete": false})
    );
    assert_eq!(r.body["metadata"]["ownerReferences"][0]["kind"], "StreamJob");
    r.echo();
    let r = api
        .expect(
            "PATCH",
            "/apis/weir.dev/v1alpha1/namespaces/ns/savepoints/wc-upgrade-7/status",
        )
        .await;
    r.assert_ssa();
    assert_eq!(r.body["status"]["state"], "Completed");
    assert_eq!(r.body["status"]["path"], SVP);
    let mut sp = r.body.clone();
    sp["metadata"] = json!({"name": "wc-upgrade-7", "namespace": "ns"});
    sp["spec"] = json!({"jobRef": {"name": "wc"}, "origin": "Upgrade"});
    r.ok(sp.clone());
    api.delete_workloads().await;
    finish(task).await.unwrap();

    // Pass 3: pods still terminating: delete again and wait (never two generations at once).
    let job = with_status(job, &status);
    control.set_job(None);
    let task = tokio::spawn(stream_job::reconcile(guard(job.clone()), ctx.clone()));
    api.observe(World {
        pods: 1,
        ..World::empty()
    })
    .await;
    let status = api.status().await;
    assert_eq!(status["jobStatus"]["state"], "UNKNOWN", "the coordinator is gone");
    assert_eq!(status["pending"]["phase"], "AwaitingTermination");
    api.delete_workloads().await;
    finish(task).await.unwrap();

    // Pass 4: every pod gone: move to Deploying (the restore point is inspected next pass).
    let job = with_status(job, &status);
    let task = tokio::spawn(stream_job::reconcile(guard(job.clone()), ctx.clone()));
    api.observe(World {
        savepoints: vec![sp.clone()],
        ..World::empty()
    })
    .await;
    let status = api.status().await;
    assert_eq!(status["pending"]["phase"], "Deploying");
    assert_eq!(status["savepointHistory"][0]["savepointName"], "wc-upgrade-7");
    finish(task).await.unwrap();

    // Pass 5: the restore point holds state only for uids the new job has: deploy from it.
    snaps.set_info(SVP, info(&["counts"]));
    let job = with_status(job, &status);
    let task = tokio::spawn(stream_job::reconcile(guard(job), ctx.clone()));
    api.observe(World {
        savepoints: vec![sp],
        ..World::empty()
    })
    .await;
    let status = api.status().await;
    assert_eq!(status["lifecycleState"], "Deploying");
    assert_eq!(status["deployGeneration"], 2);
    assert_eq!(status["deployedFrom"], SVP);
    assert!(status["pending"].is_null());
    api.event("Normal", "Submit", 200).await;
    let (deployment, _) = api.apply_children().await;
    let args = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(args["args"][4], SVP);
    assert_eq!(args["image"], "weir:2");
    assert_eq!(deployment["metadata"]["labels"]["weir.dev/deployment-generation"], "2");
    assert_eq!(deployment["metadata"]["annotations"]["weir.dev/spec-generation"], "2");
    api.orphans().await;
    finish(task).await.unwrap();
}

#[tokio::test]
async fn upgrade_refused_when_state_would_be_dropped() {
    let (ctx, mut api, _control, snaps) = setup();
    let job = running_job(spec_json(), 2);
    let deployed = job["status"]["lastReconciledSpec"].clone();
    let mut j = job.clone();
    j["status"] = json!({
        "lifecycleState": "Upgrading",
        "deployGeneration": 1,
        "lastReconciledSpec": deployed,
        "restorePoint": {"path": SVP, "origin": "UpgradeSavepoint", "checkpointId": 7},
        "pending": {"kind": "Upgrade", "mode": "savepoint", "targetSpec": deployed, "targetGeneration": 2,
                    "phase": "Deploying", "startedAt": "2023-11-14T22:13:00Z", "savepointPath": SVP},
    });
    snaps.set_info(SVP, info(&["counts", "dedup"]));
    let task = tokio::spawn(stream_job::reconcile(guard(j), ctx));
    api.observe(World::empty()).await;
    let status = api.status().await;
    assert_eq!(status["lifecycleState"], "Failed");
    assert!(
        status["error"].as_str().unwrap().contains("dedup"),
        "{}",
        status["error"]
    );
    assert_eq!(status["restorePoint"]["path"], SVP, "the restore point is kept");
    let degraded = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Degraded")
        .unwrap();
    assert_eq!(degraded["status"], "True");
    api.event("Warning", "ValidationError", 200).await;
    finish(task).await.unwrap();
}

#[tokio::test]
async fn suspend_then_resume() {
    let (ctx, mut api, control, snaps) = setup();
    let mut spec = spec_json();
    spec["state"] = json!("suspended");
    let job = running_job(spec.clone(), 2);
    control.set_job(Some(job_status(JobState::Running, None)));
    control.complete_triggers_as(SVP, 7);

    // Pass 1: suspend = stop with a savepoint.
    let task = tokio::spawn(stream_job::reconcile(guard(job.clone()), ctx.clone()));
    api.observe(World::deployed(1)).await;
    let status = api.status().await;
    assert_eq!(status["pending"]["kind"], "Suspend");
    api.event("Normal", "SpecChanged", 200).await;
    let status = api.status().await;
    finish(task).await.unwrap();

    // Pass 2: savepoint done; delete workloads.
    control.set_job(Some(job_status(
        JobState::Stopped,
        Some((7, SnapshotKind::Savepoint, SVP)),
    )));
    let job = with_status(job, &status);
    let task = tokio::spawn(stream_job::reconcile(guard(job.clone()), ctx.clone()));
    api.observe(World::deployed(1)).await;
    let status = api.status().await;
    api.event("Normal", "JobStatusChanged", 200).await;
    api.expect("PATCH", "/apis/weir.dev/v1alpha1/namespaces/ns/savepoints/wc-upgrade-7")
        .await
        .echo();
    let r = api
        .expect(
            "PATCH",
            "/apis/weir.dev/v1alpha1/namespaces/ns/savepoints/wc-upgrade-7/status",
        )
        .await;
    let mut sp = r.body.clone();
    sp["metadata"] = json!({"name": "wc-upgrade-7", "namespace": "ns"});
    sp["spec"] = json!({"jobRef": {"name": "wc"}, "origin": "Upgrade"});
    r.ok(sp);
    api.delete_workloads().await;
    finish(task).await.unwrap();

    // Pass 3: pods gone: Suspended, restore point kept.
    let job = with_status(job, &status);
    control.set_job(None);
    let task = tokio::spawn(stream_job::reconcile(guard(job.clone()), ctx.clone()));
    api.observe(World::empty()).await;
    let status = api.status().await;
    assert_eq!(status["lifecycleState"], "Suspended");
    assert_eq!(status["restorePoint"]["path"], SVP);
    assert!(status["pending"].is_null());
    assert_eq!(status["parallelism"], 0);
    api.event("Normal", "Suspended", 200).await;
    finish(task).await.unwrap();

    // Resume, pass 1: the intent (deploy from the restore point) is recorded; the restore
    // point is inspected before anything is deployed.
    let mut job = with_status(job, &status);
    job["spec"]["state"] = json!("running");
    job["metadata"]["generation"] = json!(3);
    let task = tokio::spawn(stream_job::reconcile(guard(job.clone()), ctx.clone()));
    api.observe(World::empty()).await;
    let status = api.status().await;
    assert_eq!(status["lifecycleState"], "Upgrading");
    assert_eq!(status["pending"]["phase"], "Deploying");
    api.event("Normal", "SpecChanged", 200).await;
    finish(task).await.unwrap();

    // Resume, pass 2: deploy from the savepoint.
    snaps.set_info(SVP, info(&["counts"]));
    let job = with_status(job, &status);
    let task = tokio::spawn(stream_job::reconcile(guard(job), ctx.clone()));
    api.observe(World::empty()).await;
    let status = api.status().await;
    assert_eq!(status["deployGeneration"], 2);
    api.event("Normal", "Submit", 200).await;
    let (deployment, _) = api.apply_children().await;
    assert_eq!(deployment["spec"]["template"]["spec"]["containers"][0]["args"][4], SVP);
    assert_eq!(deployment["metadata"]["annotations"]["weir.dev/spec-generation"], "3");
    api.orphans().await;
    finish(task).await.unwrap();
}

#[tokio::test]
async fn deletion_completes_when_event_writes_fail() {
    let (ctx, mut api, control, _snaps) = setup();
    let job = running_job(spec_json(), 1);
    let mut job = job;
    job["metadata"]["deletionTimestamp"] = json!("2023-11-14T22:13:20Z");
    control.set_job(Some(job_status(JobState::Running, None)));

    // Pass 1: record Deleting, delete workloads.
    let task = tokio::spawn(stream_job::reconcile(guard(job.clone()), ctx.clone()));
    api.observe(World::deployed(1)).await;
    let status = api.status().await;
    assert_eq!(status["lifecycleState"], "Deleting");
    assert_eq!(status["pending"]["kind"], "Delete");
    api.delete_workloads().await;
    finish(task).await.unwrap();

    // Pass 2: everything gone: the Cleanup event is refused (terminating namespace), the
    // finalizer is removed anyway.
    let job = with_status(job, &status);
    control.set_job(None);
    let task = tokio::spawn(stream_job::reconcile(guard(job), ctx.clone()));
    api.observe(World::empty()).await;
    api.status().await;
    api.event("Normal", "Cleanup", 403).await;
    let r = api
        .expect("PATCH", "/apis/weir.dev/v1alpha1/namespaces/ns/streamjobs/wc")
        .await;
    assert_eq!(r.body, json!({"metadata": {"finalizers": [], "resourceVersion": "10"}}));
    r.ok(job_json(&json!({"finalizers": []})));
    let action = finish(task).await.unwrap();
    assert_eq!(action, Action::requeue(Duration::from_secs(60)));
}

#[tokio::test]
async fn invalid_object_gets_a_validation_event() {
    let (ctx, mut api, _control, _snaps) = setup();
    let mut job = job_json(&json!({}));
    job["spec"]["parallelism"] = json!("many");
    let task = tokio::spawn(stream_job::reconcile(guard(job), ctx));
    api.event("Warning", "ValidationError", 200).await;
    assert_eq!(finish(task).await.unwrap(), Action::await_change());
}

fn savepoint_json(status: Option<Value>) -> Value {
    let mut s = json!({
        "apiVersion": "weir.dev/v1alpha1",
        "kind": "Savepoint",
        "metadata": {"name": "wc-manual", "namespace": "ns", "uid": "svp-uid", "resourceVersion": "3"},
        "spec": {"jobRef": {"name": "wc"}},
    });
    if let Some(st) = status {
        s["status"] = st;
    }
    s
}

fn svp_guard(v: Value) -> Arc<DeserializeGuard<Savepoint>> {
    Arc::new(serde_json::from_value(v).unwrap())
}

impl ApiServer {
    async fn get_job(&mut self, job: Value) {
        self.expect("GET", "/apis/weir.dev/v1alpha1/namespaces/ns/streamjobs/wc")
            .await
            .ok(job);
    }
    async fn savepoint_status(&mut self) -> Value {
        let r = self
            .expect(
                "PATCH",
                "/apis/weir.dev/v1alpha1/namespaces/ns/savepoints/wc-manual/status",
            )
            .await;
        r.assert_ssa();
        assert_eq!(r.body["kind"], "Savepoint");
        let st = r.body["status"].clone();
        r.ok(savepoint_json(Some(st.clone())));
        st
    }
}

#[tokio::test]
async fn savepoint_trigger_retry_and_completion() {
    let (ctx, mut api, control, _snaps) = setup();
    let job = running_job(spec_json(), 1);
    control.set_job(Some(job_status(JobState::Running, None)));
    control.refuse_next_triggers(vec![ControlError::Conflict("not all tasks running".into())]);

    // Attempt 1 is refused: Pending with one failure, retried after the backoff.
    let task = tokio::spawn(savepoint::reconcile(svp_guard(savepoint_json(None)), ctx.clone()));
    api.get_job(job.clone()).await;
    let st = api.savepoint_status().await;
    assert_eq!(
        (st["state"].as_str(), st["failures"].as_u64()),
        (Some("Pending"), Some(1))
    );
    assert!(st["error"].as_str().unwrap().contains("not all tasks running"));
    let r = api.expect("POST", "/apis/events.k8s.io/v1/namespaces/ns/events").await;
    assert_eq!(r.body["reason"], "SavepointError");
    assert_eq!(r.body["regarding"]["name"], "wc-manual");
    let b = r.body.clone();
    r.ok(b);
    assert_eq!(finish(task).await.unwrap(), Action::requeue(savepoint::backoff(1)));

    // Attempt 2 triggers (not a stop).
    let task = tokio::spawn(savepoint::reconcile(svp_guard(savepoint_json(Some(st))), ctx.clone()));
    api.get_job(job.clone()).await;
    let st = api.savepoint_status().await;
    assert_eq!(
        (st["state"].as_str(), st["triggerId"].as_str()),
        (Some("InProgress"), Some("t1"))
    );
    finish(task).await.unwrap();
    let reqs = control.requests();
    assert_eq!(reqs.len(), 2);
    assert!(!reqs[1].stop);
    assert_eq!(reqs[1].directory.as_deref(), Some("s3://bucket/svp"));

    // Still in progress: nothing written.
    let task = tokio::spawn(savepoint::reconcile(
        svp_guard(savepoint_json(Some(st.clone()))),
        ctx.clone(),
    ));
    api.get_job(job.clone()).await;
    finish(task).await.unwrap();

    // Completed.
    control.set_trigger(SavepointStatus {
        trigger_id: "t1".into(),
        state: TriggerState::Completed,
        path: Some("s3://bucket/svp/savepoint-wc-8".into()),
        checkpoint_id: Some(8),
        error: None,
    });
    let task = tokio::spawn(savepoint::reconcile(svp_guard(savepoint_json(Some(st))), ctx.clone()));
    api.get_job(job.clone()).await;
    let st = api.savepoint_status().await;
    assert_eq!(st["state"], "Completed");
    assert_eq!(st["path"], "s3://bucket/svp/savepoint-wc-8");
    assert_eq!(st["completedAt"], "2023-11-14T22:13:20Z");
    let r = api.expect("POST", "/apis/events.k8s.io/v1/namespaces/ns/events").await;
    assert_eq!(
        (r.body["type"].as_str(), r.body["reason"].as_str()),
        (Some("Normal"), Some("SavepointCompleted"))
    );
    let b = r.body.clone();
    r.ok(b);
    assert_eq!(finish(task).await.unwrap(), Action::await_change());
}

#[tokio::test]
async fn savepoint_abandoned_when_job_suspended() {
    let (ctx, mut api, _control, _snaps) = setup();
    let mut job = running_job(spec_json(), 1);
    job["status"]["lifecycleState"] = json!("Suspended");
    let task = tokio::spawn(savepoint::reconcile(svp_guard(savepoint_json(None)), ctx));
    api.get_job(job).await;
    let st = api.savepoint_status().await;
    assert_eq!(st["state"], "Abandoned");
    let r = api.expect("POST", "/apis/events.k8s.io/v1/namespaces/ns/events").await;
    let b = r.body.clone();
    r.ok(b);
    finish(task).await.unwrap();
}

#[tokio::test]
async fn savepoint_dispose_on_delete_spares_the_restore_point() {
    for (restore, disposed) in [(SVP, false), ("s3://bucket/svp/savepoint-wc-9", true)] {
        let (ctx, mut api, _control, snaps) = setup();
        let mut sp = savepoint_json(Some(json!({"state": "Completed", "path": SVP})));
        sp["spec"]["disposeOnDelete"] = json!(true);
        sp["metadata"]["finalizers"] = json!(["weir.dev/finalizer"]);
        sp["metadata"]["deletionTimestamp"] = json!("2023-11-14T22:13:20Z");
        let mut job = running_job(spec_json(), 1);
        job["status"]["restorePoint"] = json!({"path": restore, "origin": "UpgradeSavepoint"});
        let task = tokio::spawn(savepoint::reconcile(svp_guard(sp), ctx));
        api.get_job(job).await;
        let r = api.expect("POST", "/apis/events.k8s.io/v1/namespaces/ns/events").await;
        assert_eq!(r.body["reason"], "Cleanup");
        assert_eq!(r.body["type"], if disposed { "Normal" } else { "Warning" });
        let b = r.body.clone();
        r.ok(b);
        let r = api
            .expect("PATCH", "/apis/weir.dev/v1alpha1/namespaces/ns/savepoints/wc-manual")
            .await;
        assert_eq!(r.body, json!({"metadata": {"finalizers": [], "resourceVersion": "3"}}));
        r.ok(savepoint_json(None));
        finish(task).await.unwrap();
        assert_eq!(snaps.disposed(), if disposed { vec![SVP.to_string()] } else { vec![] });
    }
}
