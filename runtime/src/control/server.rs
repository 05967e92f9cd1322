//! The control API server (axum) over a running job; see [`super::api`] for the contract.

use super::api::*;
use super::auth::{ControlAuth, require_token};
use crate::checkpoint::coordinator::SavepointCommand;
use crate::exec::JobHandle;
use axum::extract::{Path, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
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
        state: s.state,
        parallelism: h.parallelism,
        max_parallelism: h.max_parallelism,
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

async fn trigger(State(h): State<JobHandle>, body: Option<Json<SavepointRequest>>) -> Response {
    let req = body.map(|Json(b)| b).unwrap_or_default();
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

/// The router for a job: `/healthz` is open; every other route requires the job secret as a
/// bearer token ([`super::auth`]), `/metrics` only when `auth.protect_metrics`.
pub fn router(h: JobHandle, auth: ControlAuth) -> Router {
    let mut protected = Router::new()
        .route("/v1/job", get(job))
        .route("/v1/job/cancel", post(cancel))
        .route("/v1/checkpoints", get(checkpoints))
        .route("/v1/savepoints", post(trigger))
        .route("/v1/savepoints/{id}", get(savepoint));
    let mut open = Router::new().route("/healthz", get(|| async { "ok" }));
    if auth.protect_metrics {
        protected = protected.route("/metrics", get(metrics));
    } else {
        open = open.route("/metrics", get(metrics));
    }
    let protected = protected.route_layer(axum::middleware::from_fn_with_state(auth, require_token));
    open.merge(protected).with_state(h)
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
    let listener = tokio::net::TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
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

/// After a stop-with-savepoint, waits (at most `grace`) until the client that asked for the
/// stop has read the trigger's final status, so the savepoint path is never lost with the
/// process.
pub async fn linger_until_stop_delivered(h: &JobHandle, grace: std::time::Duration) {
    let deadline = tokio::time::Instant::now() + grace;
    while tokio::time::Instant::now() < deadline {
        let delivered = {
            let s = h.shared.lock().expect("lock");
            s.stop_trigger.as_ref().is_none_or(|t| s.delivered.contains(t))
        };
        if delivered {
            return;
        }
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
}
