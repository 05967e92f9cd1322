//! The mock API server: receives the client's requests, asserts them, and replies as the API
//! server would, with helpers for the request sequences of a StreamJob reconcile.

use super::*;

type Handle = tower_test::mock::Handle<Request<Body>, Response<Body>>;
type Responder = tower_test::mock::SendResponse<Response<Body>>;

/// The mock API server, and the writers of the reconciles' watch caches (what the watches
/// would have delivered).
pub(super) struct ApiServer(pub(super) Handle, pub(super) crate::controller::cache::CacheWriters);

/// Replaces the content of a watch cache with `objects`, as a relist does (and marks it listed).
pub(super) fn relist<K>(writer: &mut crate::controller::cache::CacheWriter<K>, objects: Vec<K>)
where
    K: kube::Resource + Clone + 'static,
    K::DynamicType: Eq + std::hash::Hash + Clone + Default,
{
    use kube::runtime::watcher::Event;
    writer.apply(&Event::Init);
    for o in objects {
        writer.apply(&Event::InitApply(o));
    }
    writer.apply(&Event::InitDone);
}

/// An object of type `K` from JSON.
pub(super) fn object<K: serde::de::DeserializeOwned>(v: Value) -> K {
    serde_json::from_value(v).unwrap()
}

/// One received request.
pub(super) struct Received {
    pub(super) method: String,
    pub(super) path: String,
    pub(super) query: String,
    pub(super) body: Value,
    send: Responder,
}

impl Received {
    pub(super) fn reply(self, code: u16, body: Value) {
        self.send.send_response(
            Response::builder()
                .status(code)
                .body(Body::from(serde_json::to_vec(&body).unwrap()))
                .unwrap(),
        );
    }
    pub(super) fn ok(self, body: Value) {
        self.reply(200, body)
    }
    pub(super) fn not_found(self) {
        self.reply(
            404,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": "not found", "reason": "NotFound", "code": 404}),
        )
    }
    /// Replies with the applied object itself (what SSA returns, less server fields).
    pub(super) fn echo(self) {
        let b = self.body.clone();
        self.ok(b)
    }
    pub(super) fn assert_ssa(&self) {
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
    pub(super) async fn next(&mut self) -> Received {
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

    pub(super) async fn expect(&mut self, method: &str, path: &str) -> Received {
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
    pub(super) async fn event(&mut self, type_: &str, reason: &str, code: u16) -> Value {
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
pub(super) struct World {
    pub(super) deployment: Option<Value>,
    pub(super) statefulset: Option<Value>,
    pub(super) pods: usize,
    pub(super) savepoints: Vec<Value>,
}

impl World {
    pub(super) fn empty() -> World {
        World {
            deployment: None,
            statefulset: None,
            pods: 0,
            savepoints: vec![],
        }
    }
    pub(super) fn deployed(generation: u64) -> World {
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
    /// What the watch caches hold for one StreamJob observation. Synchronous until its end
    /// (the tests run on one thread, so a reconcile spawned before reads what it shows).
    pub(super) async fn observe(&mut self, w: World) {
        let writers = &mut self.1;
        relist(&mut writers.deployments, w.deployment.into_iter().map(object).collect());
        relist(
            &mut writers.stateful_sets,
            w.statefulset.into_iter().map(object).collect(),
        );
        let pods = (0..w.pods)
            .map(|i| object(json!({"metadata": {"name": format!("wc-{i}"), "namespace": "ns", "labels": {"weir.dev/job": "wc"}}})))
            .collect();
        relist(&mut writers.pods, pods);
        relist(&mut writers.savepoints, w.savepoints.into_iter().map(object).collect());
    }

    /// What the StreamJob watch cache holds.
    pub(super) fn cached_jobs(&mut self, jobs: Vec<Value>) {
        relist(&mut self.1.jobs, jobs.into_iter().map(object).collect());
    }

    /// The StreamJob status write, conditioned on a resourceVersion (which it asserts and
    /// answers with that version + 1, as the API server moves it on); returns the status.
    pub(super) async fn status(&mut self) -> Value {
        let r = self
            .expect("PATCH", "/apis/weir.dev/v1alpha1/namespaces/ns/streamjobs/wc/status")
            .await;
        r.assert_ssa();
        assert_eq!(r.body["apiVersion"], "weir.dev/v1alpha1");
        assert_eq!(r.body["kind"], "StreamJob");
        let rv: u64 = r.body["metadata"]["resourceVersion"]
            .as_str()
            .expect("a status write carries a resourceVersion precondition")
            .parse()
            .unwrap();
        let status = r.body["status"].clone();
        let mut obj = job_json(&json!({"resourceVersion": (rv + 1).to_string()}));
        obj["status"] = status.clone();
        r.ok(obj);
        status
    }

    /// A status write refused with 409 (the object moved on since the pass read it).
    pub(super) async fn status_conflict(&mut self) {
        let r = self
            .expect("PATCH", "/apis/weir.dev/v1alpha1/namespaces/ns/streamjobs/wc/status")
            .await;
        assert!(r.body["metadata"]["resourceVersion"].is_string(), "{}", r.body);
        r.reply(
            409,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure", "code": 409,
                   "reason": "Conflict", "message": "the object has been modified"}),
        );
    }

    /// The server-side applies of a deployment, after the job Secret is read (none yet) and
    /// applied; returns (Deployment, StatefulSet) bodies.
    pub(super) async fn apply_children(&mut self) -> (Value, Value) {
        self.new_job_secret().await;
        self.apply_workloads().await
    }

    /// The job Secret's read (answered 404) and server-side apply; returns the applied Secret.
    pub(super) async fn new_job_secret(&mut self) -> Value {
        let path = "/api/v1/namespaces/ns/secrets/wc-job-secret";
        self.expect("GET", path).await.not_found();
        let r = self.expect("PATCH", path).await;
        r.assert_ssa();
        let secret = r.body.clone();
        r.echo();
        secret
    }

    /// The job Secret's read, answered with a Secret made for `deploy_generation`: a pass of
    /// that generation keeps its token (no apply of the Secret follows).
    pub(super) async fn existing_job_secret(&mut self, deploy_generation: u64) {
        self.expect("GET", "/api/v1/namespaces/ns/secrets/wc-job-secret")
            .await
            .ok(json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "wc-job-secret", "namespace": "ns",
                    "labels": {"weir.dev/deployment-generation": deploy_generation.to_string()}},
                // "0123456789abcdef0123456789abcdef"
                "data": {"job.secret": "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="}}));
    }

    /// The server-side applies of a deployment's ConfigMap, Services and workloads; returns
    /// (Deployment, StatefulSet) bodies.
    pub(super) async fn apply_workloads(&mut self) -> (Value, Value) {
        for path in [
            "/api/v1/namespaces/ns/configmaps/wc-config",
            "/api/v1/namespaces/ns/services/wc-coordinator",
            "/api/v1/namespaces/ns/services/wc-worker",
            "/apis/networking.k8s.io/v1/namespaces/ns/networkpolicies/wc-coordinator",
            "/apis/networking.k8s.io/v1/namespaces/ns/networkpolicies/wc-worker",
        ] {
            let r = self.expect("PATCH", path).await;
            r.assert_ssa();
            if path.contains("/networkpolicies/") {
                // The per-job policies (the test context enables them), applied before the pods.
                assert_eq!(r.body["kind"], "NetworkPolicy", "{}", r.body);
                assert_eq!(
                    r.body["spec"]["podSelector"]["matchLabels"]["weir.dev/job"], "wc",
                    "{}",
                    r.body
                );
                assert_eq!(
                    r.body["metadata"]["ownerReferences"][0]["kind"], "StreamJob",
                    "{}",
                    r.body
                );
            }
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

    pub(super) async fn delete_workloads(&mut self) {
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
