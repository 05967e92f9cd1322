//! The control API server (axum) over a running job; see [`super::api`] for the contract.

use super::api::*;
use super::auth::{ControlAuth, require_token};
use super::routes::{Endpoint, Method, ROUTES, Route, RouteAuth};
use crate::checkpoint::coordinator::SavepointCommand;
use crate::exec::JobHandle;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{MethodFilter, MethodRouter, on};
use axum::{Json, Router};
use std::sync::atomic::Ordering;

fn status(h: &JobHandle) -> JobStatus {
    let summary = h.summary();
    let locations = h.locations.lock().expect("lock").clone();
    let workers = h.workers.lock().expect("lock").clone();
    let s = h.shared.lock().expect("lock");
    JobStatus {
        job_name: h.job.clone(),
        job_id: h.job_id.clone(),
        lineage_id: Some(h.lineage_id.lock().expect("lock").clone()),
        state: s.state,
        parallelism: h.parallelism,
        max_parallelism: h.max_parallelism.load(std::sync::atomic::Ordering::Relaxed),
        restored_from: s.restored_from.clone(),
        last_completed_checkpoint: s.history.completed.last().cloned(),
        subtasks: h
            .tasks
            .iter()
            .enumerate()
            .map(|(i, (task, subtask, m))| SubtaskStatus {
                task: task.clone(),
                subtask: *subtask,
                records_in: m.records_in.load(Ordering::Relaxed),
                records_out: m.records_out.load(Ordering::Relaxed),
                backpressured_ms: m.backpressured_ns.load(Ordering::Relaxed) / 1_000_000,
                location: locations.get(&i).cloned().unwrap_or_default(),
            })
            .collect(),
        failure: s.failure.clone(),
        restarts: h.restarts.load(Ordering::Relaxed),
        workers,
        summary: Some(summary),
    }
}

fn error(code: StatusCode, msg: impl Into<String>) -> Response {
    (code, Json(ApiError { error: msg.into() })).into_response()
}

async fn job(State(h): State<JobHandle>) -> Json<JobStatus> {
    Json(status(&h))
}

async fn checkpoints(State(h): State<JobHandle>) -> Json<CheckpointHistory> {
    Json(h.shared.lock().expect("lock").history.clone())
}

/// Parses a `POST /v1/savepoints` body: empty (all defaults) or a [`SavepointRequest`]
/// object. Errors: the serde message (it names an unknown or mistyped field).
pub fn parse_savepoint_request(body: &[u8]) -> Result<SavepointRequest, String> {
    if body.iter().all(u8::is_ascii_whitespace) {
        return Ok(SavepointRequest::default());
    }
    serde_json::from_slice(body).map_err(|e| format!("the body is not a SavepointRequest ({{directory?, stop?}}): {e}"))
}

async fn trigger(State(h): State<JobHandle>, body: axum::body::Bytes) -> Response {
    let req = match parse_savepoint_request(&body) {
        Ok(r) => r,
        Err(e) => return error(StatusCode::UNPROCESSABLE_ENTITY, e),
    };
    let trigger_id = format!("{:016x}", rand::random::<u64>());
    {
        let mut s = h.shared.lock().expect("lock");
        if s.state != JobState::Running {
            return error(StatusCode::CONFLICT, format!("the job is {:?}, not RUNNING", s.state));
        }
        s.triggers.insert(
            trigger_id.clone(),
            SavepointStatus {
                trigger_id: trigger_id.clone(),
                state: TriggerState::InProgress,
                path: None,
                checkpoint_id: None,
                error: None,
            },
        );
    }
    let cmd = SavepointCommand {
        trigger_id: trigger_id.clone(),
        directory: req.directory,
        stop: req.stop,
    };
    if h.commands.send(cmd).is_err() {
        return error(StatusCode::CONFLICT, "the job is ending");
    }
    (StatusCode::ACCEPTED, Json(TriggerResponse { trigger_id })).into_response()
}

/// `POST /v1/job/cancel`: stops the job without a savepoint, as SIGTERM does (Flink's
/// `cancel`): the in-flight checkpoint completes or is aborted, nothing is committed beyond the
/// last completed checkpoint, and the process exits; `--restore latest` resumes the job.
async fn cancel(State(h): State<JobHandle>) -> Response {
    let s = h.shared.lock().expect("lock");
    if s.state.is_terminal() || s.state == JobState::Suspending {
        return error(
            StatusCode::CONFLICT,
            format!("the job is {:?}, nothing to cancel", s.state),
        );
    }
    s.suspend.cancel();
    (StatusCode::ACCEPTED, Json(serde_json::json!({}))).into_response()
}

async fn savepoint(State(h): State<JobHandle>, Path(id): Path<String>) -> Response {
    let mut shared = h.shared.lock().expect("lock");
    match shared.triggers.get(&id).cloned() {
        Some(s) => {
            if s.state != TriggerState::InProgress {
                shared.delivered.insert(id);
            }
            Json(s).into_response()
        }
        None => error(StatusCode::NOT_FOUND, format!("no savepoint trigger `{id}`")),
    }
}

async fn metrics(State(h): State<JobHandle>) -> Response {
    let (failed_checkpoints, last_checkpoint) = {
        let s = h.shared.lock().expect("lock");
        (s.history.failed, s.history.completed.last().cloned())
    };
    let body = crate::metrics::render(&crate::metrics::Scrape {
        job: &h.job,
        tasks: &h.tasks,
        uptime: h.started_at.elapsed(),
        coordinator: Some(crate::metrics::CoordinatorNumbers {
            failed_checkpoints,
            restarts: u64::from(h.restarts.load(Ordering::Relaxed)),
            last_checkpoint,
            now_ms: crate::checkpoint::now_ms(),
        }),
    });
    (
        [(
            "content-type",
            "application/openmetrics-text; version=1.0.0; charset=utf-8",
        )],
        body,
    )
        .into_response()
}

/// The handler of `route`, on its method.
fn method_router(route: &Route) -> MethodRouter<JobHandle> {
    let filter = match route.method {
        Method::Get => MethodFilter::GET,
        Method::Post => MethodFilter::POST,
    };
    match route.endpoint {
        Endpoint::Healthz => on(filter, || async { "ok" }),
        Endpoint::Job => on(filter, job),
        Endpoint::Cancel => on(filter, cancel),
        Endpoint::Checkpoints => on(filter, checkpoints),
        Endpoint::TriggerSavepoint => on(filter, trigger),
        Endpoint::SavepointStatus => on(filter, savepoint),
        Endpoint::Metrics => on(filter, metrics),
    }
}

async fn not_found(uri: axum::http::Uri) -> Response {
    error(
        StatusCode::NOT_FOUND,
        format!("no route {}: see docs/reference/control-api.md", uri.path()),
    )
}

async fn method_not_allowed(method: axum::http::Method, uri: axum::http::Uri) -> Response {
    error(
        StatusCode::METHOD_NOT_ALLOWED,
        format!(
            "{method} is not allowed on {}: see docs/reference/control-api.md",
            uri.path()
        ),
    )
}

/// The router for a job, built from [`ROUTES`]: open routes answer anyone; the others require
/// the job secret as a bearer token ([`super::auth`]), `/metrics` only when
/// `auth.protect_metrics`. An unknown path answers 404 and a wrong method 405, both with an
/// [`ApiError`] body.
pub fn router(h: JobHandle, auth: ControlAuth) -> Router {
    let (mut open, mut protected) = (Router::new(), Router::new());
    for route in ROUTES {
        let needs_token = match route.auth {
            RouteAuth::Open => false,
            RouteAuth::Token => true,
            RouteAuth::TokenWithMetricsAuth => auth.protect_metrics,
        };
        if needs_token {
            protected = protected.route(route.path, method_router(route));
        } else {
            open = open.route(route.path, method_router(route));
        }
    }
    let protected = protected.route_layer(axum::middleware::from_fn_with_state(auth, require_token));
    open.merge(protected)
        .fallback(not_found)
        .method_not_allowed_fallback(method_not_allowed)
        .with_state(h)
}

/// A running control API server.
pub struct ControlServer {
    /// The bound address.
    pub addr: std::net::SocketAddr,
    stop: tokio::sync::oneshot::Sender<()>,
    task: tokio::task::JoinHandle<()>,
}

impl ControlServer {
    /// Graceful shutdown: stops accepting connections and waits (at most `timeout`) for
    /// in-flight responses to be written, so a client that was just told a stop-with-savepoint
    /// completed gets the whole answer before the process exits.
    pub async fn shutdown(self, timeout: std::time::Duration) {
        let _ = self.stop.send(());
        let _ = tokio::time::timeout(timeout, self.task).await;
    }
}

/// Binds `addr` and serves until [`ControlServer::shutdown`] or the process exits.
/// Errors: the address cannot be bound (message names it).
pub async fn serve(addr: &str, h: JobHandle, auth: ControlAuth) -> Result<ControlServer, String> {
    serve_on(bind(addr).await?, h, auth)
}

/// Binds the control API's address, so a process can claim it before it touches any state
/// (`weir run` and `weir coordinator` bind first: a second process on the same port fails
/// before it restores, commits or fences anything).
///
/// Errors: the address cannot be bound (in use, not local), naming it.
pub async fn bind(addr: &str) -> Result<tokio::net::TcpListener, String> {
    tokio::net::TcpListener::bind(addr).await.map_err(|e| {
        let hint = match e.kind() {
            std::io::ErrorKind::AddrInUse => {
                " (another job's control API? stop it, or pick another address with --listen, e.g. 127.0.0.1:0 for a free port)"
            }
            _ if addr.parse::<std::net::SocketAddr>().is_err() && !addr.contains(':') => {
                " (--listen takes HOST:PORT, e.g. 127.0.0.1:8081, or 127.0.0.1:0 for a free port)"
            }
            _ => "",
        };
        format!("cannot listen on {addr}: {e}{hint}")
    })
}

/// Serves the control API over `h` on a bound `listener` ([`bind`]).
///
/// Errors: the listener has no local address.
pub fn serve_on(listener: tokio::net::TcpListener, h: JobHandle, auth: ControlAuth) -> Result<ControlServer, String> {
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let task = tokio::spawn(async move {
        let app = router(h, auth).into_make_service_with_connect_info::<std::net::SocketAddr>();
        let _ = axum::serve(listener, app)
            .with_graceful_shutdown(async move {
                let _ = stopped.await;
            })
            .await;
    });
    Ok(ControlServer {
        addr: local,
        stop,
        task,
    })
}

/// When the job has ended, waits (at most `grace`) until the clients that asked for savepoints
/// have read their triggers' final status: the stop-with-savepoint's (so the savepoint path is
/// never lost with the process), and those failed by the end (a stop sent as a bounded job finished
/// is answered "the job finished", not by a control API that stopped answering: found by
/// trial, helper-111). Returns at once when there is nothing to deliver.
pub async fn linger_until_stop_delivered(h: &JobHandle, grace: std::time::Duration) {
    let deadline = tokio::time::Instant::now() + grace;
    while tokio::time::Instant::now() < deadline {
        let delivered = {
            let s = h.shared.lock().expect("lock");
            s.stop_trigger.as_ref().is_none_or(|t| s.delivered.contains(t))
                && s.failed_by_end.iter().all(|id| s.delivered.contains(id))
        };
        if delivered {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn savepoint_request_bodies_parse_or_name_the_problem() {
        for (body, want) in [
            ("", Ok(SavepointRequest::default())),
            (" \n", Ok(SavepointRequest::default())),
            ("{}", Ok(SavepointRequest::default())),
            (
                r#"{"directory": "/sp", "stop": true}"#,
                Ok(SavepointRequest {
                    directory: Some("/sp".into()),
                    stop: true,
                }),
            ),
            (r#"{"directry": "/sp"}"#, Err("unknown field `directry`")),
            (r#"{"stop": "yes"}"#, Err("invalid type")),
            ("{oops", Err("not a SavepointRequest")),
        ] {
            match (parse_savepoint_request(body.as_bytes()), want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{body}"),
                (Err(got), Err(want)) => assert!(got.contains(want), "{body}: {got}"),
                (got, want) => panic!("{body}: {got:?}, want {want:?}"),
            }
        }
    }

    #[test]
    fn the_route_table_lists_every_route_once() {
        let table = crate::control::routes::route_table();
        assert_eq!(table.lines().count(), ROUTES.len() + 2, "{table}");
        for r in ROUTES {
            let row = format!("| {} | `{}` |", r.method.name(), r.path);
            assert_eq!(table.matches(&row).count(), 1, "{row}:\n{table}");
        }
    }
}
