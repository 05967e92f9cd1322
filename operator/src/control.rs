//! The operator's view of a job's control API (`weir_runtime::control::api`), behind a trait
//! so the controllers can be tested without a runtime: [`HttpControlApi`] talks HTTP to the
//! coordinator Service, [`FakeControlApi`] is a scripted double.

use async_trait::async_trait;
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;
use weir_runtime::control::api::{
    ApiError, CheckpointHistory, JobStatus, SavepointRequest, SavepointStatus, TriggerResponse, TriggerState,
};

/// Control API failures, split by what the caller does about them.
#[derive(Clone, Debug, PartialEq, thiserror::Error)]
pub enum ControlError {
    /// No answer (connection refused, DNS, timeout): the coordinator is not serving.
    #[error("control API unreachable: {0}")]
    Unreachable(String),
    /// 409: the job is not in a state that allows the request (e.g. not all tasks running).
    #[error("control API refused: {0}")]
    Conflict(String),
    /// 404: unknown trigger id (e.g. the coordinator restarted).
    #[error("control API: not found: {0}")]
    NotFound(String),
    /// Any other non-2xx reply or an unreadable body.
    #[error("control API error: {0}")]
    Other(String),
}

/// One job's control API.
#[async_trait]
pub trait ControlApi: Send + Sync {
    /// `GET /v1/job`.
    async fn job(&self) -> Result<JobStatus, ControlError>;
    /// `GET /v1/checkpoints`.
    async fn checkpoints(&self) -> Result<CheckpointHistory, ControlError>;
    /// `POST /v1/savepoints`; returns the trigger id.
    async fn trigger_savepoint(&self, req: &SavepointRequest) -> Result<String, ControlError>;
    /// `GET /v1/savepoints/{trigger_id}`.
    async fn savepoint(&self, trigger_id: &str) -> Result<SavepointStatus, ControlError>;
}

/// Finds the control API of a job.
pub trait ControlApiFactory: Send + Sync {
    /// The control API of StreamJob `name` in `namespace`.
    fn for_job(&self, namespace: &str, name: &str) -> Arc<dyn ControlApi>;
}

/// HTTP client of one coordinator.
#[derive(Clone, Debug)]
pub struct HttpControlApi {
    base: String,
    http: reqwest::Client,
    token: Option<String>,
}

impl HttpControlApi {
    /// A client of `base` (`http://host:port`) with a per-request timeout.
    pub fn new(base: &str, timeout: Duration) -> HttpControlApi {
        HttpControlApi {
            base: base.trim_end_matches('/').to_string(),
            http: reqwest::Client::builder()
                .timeout(timeout)
                .connect_timeout(timeout)
                .build()
                .expect("reqwest client builds"),
            token: None,
        }
    }

    /// Sends `token` (the job secret) as `Authorization: Bearer` on every request: the
    /// runtime's control API refuses `/v1/*` requests without it (docs/operations/security.md).
    pub fn with_bearer_token(mut self, token: String) -> HttpControlApi {
        self.token = Some(token);
        self
    }

    async fn send<T: serde::de::DeserializeOwned>(&self, req: reqwest::RequestBuilder) -> Result<T, ControlError> {
        let req = match &self.token {
            Some(t) => req.bearer_auth(t),
            None => req,
        };
        let r = req.send().await.map_err(|e| ControlError::Unreachable(e.to_string()))?;
        let code = r.status();
        let body = r.text().await.map_err(|e| ControlError::Unreachable(e.to_string()))?;
        if code.is_success() {
            return serde_json::from_str(&body).map_err(|e| ControlError::Other(format!("bad reply: {e}")));
        }
        let msg = serde_json::from_str::<ApiError>(&body).map(|e| e.error).unwrap_or(body);
        Err(match code.as_u16() {
            409 => ControlError::Conflict(msg),
            404 => ControlError::NotFound(msg),
            c => ControlError::Other(format!("{c}: {msg}")),
        })
    }
}

#[async_trait]
impl ControlApi for HttpControlApi {
    async fn job(&self) -> Result<JobStatus, ControlError> {
        self.send(self.http.get(format!("{}/v1/job", self.base))).await
    }
    async fn checkpoints(&self) -> Result<CheckpointHistory, ControlError> {
        self.send(self.http.get(format!("{}/v1/checkpoints", self.base))).await
    }
    async fn trigger_savepoint(&self, req: &SavepointRequest) -> Result<String, ControlError> {
        let r: TriggerResponse = self
            .send(self.http.post(format!("{}/v1/savepoints", self.base)).json(req))
            .await?;
        Ok(r.trigger_id)
    }
    async fn savepoint(&self, trigger_id: &str) -> Result<SavepointStatus, ControlError> {
        self.send(self.http.get(format!("{}/v1/savepoints/{trigger_id}", self.base)))
            .await
    }
}

/// Reaches coordinators through their Service: `http://<job>-coordinator.<ns>.svc:8081`,
/// with the job's token read from its Secret (`<job>-job-secret`, see
/// [`crate::build::job_secret`]) before every request.
#[derive(Clone)]
pub struct ServiceControlApiFactory {
    /// Per-request timeout.
    pub timeout: Duration,
    /// Reads the job Secrets.
    pub client: kube::Client,
}

impl ControlApiFactory for ServiceControlApiFactory {
    fn for_job(&self, namespace: &str, name: &str) -> Arc<dyn ControlApi> {
        let base = format!(
            "http://{}.{namespace}.svc:{}",
            crate::build::coordinator_name(name),
            crate::build::CONTROL_PORT
        );
        Arc::new(JobSecretControlApi {
            http: HttpControlApi::new(&base, self.timeout),
            secrets: kube::Api::namespaced(self.client.clone(), namespace),
            secret_name: crate::build::job_secret_name(name),
        })
    }
}

/// [`HttpControlApi`] sending the token of a job Secret, read at each request (the token
/// changes with each deployment generation; one read per control API call).
struct JobSecretControlApi {
    http: HttpControlApi,
    secrets: kube::Api<k8s_openapi::api::core::v1::Secret>,
    secret_name: String,
}

impl JobSecretControlApi {
    /// The client with the current token. A missing Secret is [`ControlError::Unreachable`]
    /// (no coordinator can run without it); a failed read or an unusable token,
    /// [`ControlError::Other`].
    async fn authorized(&self) -> Result<HttpControlApi, ControlError> {
        let name = &self.secret_name;
        let secret = self
            .secrets
            .get_opt(name)
            .await
            .map_err(|e| ControlError::Other(format!("cannot read the job secret (Secret {name}): {e}")))?
            .ok_or_else(|| ControlError::Unreachable(format!("the job secret (Secret {name}) does not exist yet")))?;
        let token = crate::build::token_of(&secret).map_err(ControlError::Other)?;
        Ok(self.http.clone().with_bearer_token(token.expose().to_string()))
    }
}

#[async_trait]
impl ControlApi for JobSecretControlApi {
    async fn job(&self) -> Result<JobStatus, ControlError> {
        self.authorized().await?.job().await
    }
    async fn checkpoints(&self) -> Result<CheckpointHistory, ControlError> {
        self.authorized().await?.checkpoints().await
    }
    async fn trigger_savepoint(&self, req: &SavepointRequest) -> Result<String, ControlError> {
        self.authorized().await?.trigger_savepoint(req).await
    }
    async fn savepoint(&self, trigger_id: &str) -> Result<SavepointStatus, ControlError> {
        self.authorized().await?.savepoint(trigger_id).await
    }
}

/// Scripted control API for tests: a job status (or unreachable), trigger outcomes, and a log
/// of the savepoint requests it received.
#[derive(Clone, Default)]
pub struct FakeControlApi {
    inner: Arc<Mutex<FakeState>>,
}

#[derive(Default)]
struct FakeState {
    job: Option<JobStatus>,
    triggers: HashMap<String, SavepointStatus>,
    refuse_triggers: Vec<ControlError>,
    requests: Vec<SavepointRequest>,
    next_id: u32,
    complete_as: Option<(String, u64)>,
}

impl FakeControlApi {
    /// A fake whose job is unreachable until [`FakeControlApi::set_job`].
    pub fn new() -> FakeControlApi {
        FakeControlApi::default()
    }
    /// Sets (or clears: unreachable) the job status.
    pub fn set_job(&self, job: Option<JobStatus>) {
        self.inner.lock().unwrap().job = job;
    }
    /// The next triggers fail with these errors, in order.
    pub fn refuse_next_triggers(&self, errors: Vec<ControlError>) {
        self.inner.lock().unwrap().refuse_triggers = errors;
    }
    /// New triggers complete at once with this path and checkpoint id (otherwise they stay
    /// IN_PROGRESS until [`FakeControlApi::set_trigger`]).
    pub fn complete_triggers_as(&self, path: &str, checkpoint_id: u64) {
        self.inner.lock().unwrap().complete_as = Some((path.into(), checkpoint_id));
    }
    /// Sets a trigger's status.
    pub fn set_trigger(&self, status: SavepointStatus) {
        self.inner
            .lock()
            .unwrap()
            .triggers
            .insert(status.trigger_id.clone(), status);
    }
    /// The savepoint requests received so far.
    pub fn requests(&self) -> Vec<SavepointRequest> {
        self.inner.lock().unwrap().requests.clone()
    }
}

/// A [`ControlApiFactory`] handing out one fake for every job.
impl ControlApiFactory for FakeControlApi {
    fn for_job(&self, _namespace: &str, _name: &str) -> Arc<dyn ControlApi> {
        Arc::new(self.clone())
    }
}

#[async_trait]
impl ControlApi for FakeControlApi {
    async fn job(&self) -> Result<JobStatus, ControlError> {
        self.inner
            .lock()
            .unwrap()
            .job
            .clone()
            .ok_or_else(|| ControlError::Unreachable("fake: no coordinator".into()))
    }
    async fn checkpoints(&self) -> Result<CheckpointHistory, ControlError> {
        let s = self.inner.lock().unwrap();
        let job = s
            .job
            .as_ref()
            .ok_or_else(|| ControlError::Unreachable("fake: no coordinator".into()))?;
        Ok(CheckpointHistory {
            completed: job.last_completed_checkpoint.iter().cloned().collect(),
            in_progress: None,
            failed: 0,
        })
    }
    async fn trigger_savepoint(&self, req: &SavepointRequest) -> Result<String, ControlError> {
        let mut s = self.inner.lock().unwrap();
        if s.job.is_none() {
            return Err(ControlError::Unreachable("fake: no coordinator".into()));
        }
        s.requests.push(req.clone());
        if !s.refuse_triggers.is_empty() {
            return Err(s.refuse_triggers.remove(0));
        }
        s.next_id += 1;
        let id = format!("t{}", s.next_id);
        let status = match s.complete_as.clone() {
            Some((path, cid)) => SavepointStatus {
                trigger_id: id.clone(),
                state: TriggerState::Completed,
                path: Some(path),
                checkpoint_id: Some(cid),
                error: None,
            },
            None => SavepointStatus {
                trigger_id: id.clone(),
                state: TriggerState::InProgress,
                path: None,
                checkpoint_id: None,
                error: None,
            },
        };
        s.triggers.insert(id.clone(), status);
        Ok(id)
    }
    async fn savepoint(&self, trigger_id: &str) -> Result<SavepointStatus, ControlError> {
        let s = self.inner.lock().unwrap();
        if s.job.is_none() {
            return Err(ControlError::Unreachable("fake: no coordinator".into()));
        }
        s.triggers
            .get(trigger_id)
            .cloned()
            .ok_or_else(|| ControlError::NotFound(format!("unknown trigger {trigger_id}")))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use axum::Json;
    use axum::http::StatusCode;
    use axum::routing::{get, post};

    /// The HTTP client against a tiny server speaking the control API's wire format.
    #[tokio::test]
    async fn http_client_maps_replies() {
        let app = axum::Router::new()
            .route(
                "/v1/savepoints",
                post(|Json(req): Json<SavepointRequest>| async move {
                    if req.stop {
                        (
                            StatusCode::CONFLICT,
                            Json(serde_json::json!({"error": "not all tasks running"})),
                        )
                    } else {
                        (StatusCode::ACCEPTED, Json(serde_json::json!({"triggerId": "abc"})))
                    }
                }),
            )
            .route(
                "/v1/savepoints/{id}",
                get(|axum::extract::Path(id): axum::extract::Path<String>| async move {
                    if id == "abc" {
                        (
                            StatusCode::OK,
                            Json(serde_json::json!({"triggerId": "abc", "state": "COMPLETED",
                                "path": "file:///sp/savepoint-j-3", "checkpointId": 3})),
                        )
                    } else {
                        (
                            StatusCode::NOT_FOUND,
                            Json(serde_json::json!({"error": "unknown trigger"})),
                        )
                    }
                }),
            );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let c = HttpControlApi::new(&format!("http://{addr}"), Duration::from_secs(2));
        let id = c
            .trigger_savepoint(&SavepointRequest {
                directory: None,
                stop: false,
            })
            .await
            .unwrap();
        assert_eq!(id, "abc");
        assert_eq!(
            c.trigger_savepoint(&SavepointRequest {
                directory: None,
                stop: true
            })
            .await,
            Err(ControlError::Conflict("not all tasks running".into()))
        );
        let s = c.savepoint("abc").await.unwrap();
        assert_eq!(s.state, TriggerState::Completed);
        assert_eq!(s.checkpoint_id, Some(3));
        assert!(matches!(c.savepoint("zzz").await, Err(ControlError::NotFound(_))));
        assert!(matches!(
            c.job().await,
            Err(ControlError::Other(_)) | Err(ControlError::NotFound(_))
        ));
        let dead = HttpControlApi::new("http://127.0.0.1:1", Duration::from_millis(300));
        assert!(matches!(dead.job().await, Err(ControlError::Unreachable(_))));
    }

    /// The Service client reads the job Secret before each call and sends its token; without
    /// the Secret the coordinator counts as unreachable and no HTTP request is made.
    #[tokio::test]
    async fn the_service_client_sends_the_token_of_the_job_secret() {
        use http::{Request, Response};
        use kube::client::Body;
        let seen: Arc<Mutex<Vec<Option<String>>>> = Arc::default();
        let seen_by_server = seen.clone();
        let app = axum::Router::new().route(
            "/v1/checkpoints",
            get(move |headers: axum::http::HeaderMap| {
                let seen = seen_by_server.clone();
                async move {
                    let auth = headers.get("authorization").map(|v| v.to_str().unwrap().to_string());
                    seen.lock().unwrap().push(auth);
                    (
                        StatusCode::UNAUTHORIZED,
                        Json(ApiError {
                            error: "wrong token".into(),
                        }),
                    )
                }
            }),
        );
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let base = format!("http://{}", listener.local_addr().unwrap());
        tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
        let (service, mut api_server) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let control = JobSecretControlApi {
            http: HttpControlApi::new(&base, Duration::from_secs(5)),
            secrets: kube::Api::namespaced(kube::Client::new(service, "ns"), "ns"),
            secret_name: crate::build::job_secret_name("wc"),
        };
        let reply = |code: u16, body: serde_json::Value| {
            Response::builder()
                .status(code)
                .body(Body::from(serde_json::to_vec(&body).unwrap()))
                .unwrap()
        };
        let token = "0123456789abcdef0123456789abcdef";
        let call = tokio::spawn(async move {
            let missing = control.checkpoints().await;
            let with_secret = control.checkpoints().await;
            (missing, with_secret)
        });
        let (request, send) = api_server.next_request().await.unwrap();
        assert_eq!(request.uri().path(), "/api/v1/namespaces/ns/secrets/wc-job-secret");
        send.send_response(reply(
            404,
            serde_json::json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                "message": "not found", "reason": "NotFound", "code": 404}),
        ));
        let (request, send) = api_server.next_request().await.unwrap();
        assert_eq!(request.uri().path(), "/api/v1/namespaces/ns/secrets/wc-job-secret");
        send.send_response(reply(
            200,
            serde_json::json!({"apiVersion": "v1", "kind": "Secret",
                "metadata": {"name": "wc-job-secret", "namespace": "ns"},
                "data": {"job.secret": "MDEyMzQ1Njc4OWFiY2RlZjAxMjM0NTY3ODlhYmNkZWY="}}),
        ));
        let (missing, with_secret) = call.await.unwrap();
        match missing {
            Err(ControlError::Unreachable(m)) => assert!(m.contains("wc-job-secret"), "{m}"),
            other => panic!("a missing Secret is an unreachable coordinator: {other:?}"),
        }
        assert_eq!(with_secret, Err(ControlError::Other("401: wrong token".into())));
        assert_eq!(
            *seen.lock().unwrap(),
            vec![Some(format!("Bearer {token}"))],
            "one HTTP request, with the Secret's token"
        );
    }
}
