//! A worker's health and metrics endpoint (`weir worker --listen`): `/healthz` and `/metrics`
//! for the subtasks it runs.

use crate::exec::task::TaskMetrics;
use std::sync::{Arc, Mutex};
use std::time::Instant;
use tokio::net::TcpListener;

/// The job's name and the counters of this worker's subtasks, for `/metrics`.
pub type SharedMetrics = Arc<Mutex<(String, Vec<(String, u32, Arc<TaskMetrics>)>)>>;

/// Serves `/healthz` (200 while the process runs) and `/metrics` (its subtasks' counters and
/// the process's uptime, labelled with the job). Errors: `addr` cannot be bound (named).
pub async fn serve_health(addr: &str, metrics: SharedMetrics) -> Result<std::net::SocketAddr, String> {
    use axum::routing::get;
    let listener = TcpListener::bind(addr)
        .await
        .map_err(|e| format!("cannot listen on {addr}: {e}"))?;
    let local = listener.local_addr().map_err(|e| e.to_string())?;
    let started = Instant::now();
    let app = axum::Router::new().route("/healthz", get(|| async { "ok" })).route(
        "/metrics",
        get(move || {
            let m = metrics.clone();
            async move {
                let (job, tasks) = m.lock().expect("lock").clone();
                let (uptime, coordinator) = (started.elapsed(), None);
                crate::metrics::render(&crate::metrics::Scrape {
                    job: &job,
                    tasks: &tasks,
                    uptime,
                    coordinator,
                })
            }
        }),
    );
    tokio::spawn(async move {
        let _ = axum::serve(listener, app).await;
    });
    Ok(local)
}
