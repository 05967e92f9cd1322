//! The coordinator's view of its workers: the registry of connected workers, the RPC server
//! that authenticates and registers them and relays messages, and the heartbeat watch that
//! loses silent ones.

use super::liveness::{StallClock, discount_stall, is_lost};
use super::wire::*;
use crate::control::api::WorkerStatus;
use crate::exec::messages::TaskEvent;
use crate::exec::task::TaskMetrics;
use crate::security::handshake;
use crate::security::refusals::{self, Surface};
use crate::security::secret::JobSecret;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// A registered worker's connection.
pub(super) struct WorkerConn {
    /// Task slots offered.
    pub(super) slots: u32,
    /// Where other workers reach its data port.
    pub(super) data_addr: String,
    /// Messages to send on its RPC connection.
    pub(super) tx: mpsc::UnboundedSender<ToWorker>,
    /// Its last message (heartbeat or other).
    pub(super) last_seen: Instant,
    /// Which connection registered it (a reconnect replaces the entry).
    pub(super) conn_id: u64,
    /// Heartbeats received on this connection (each carries the worker's record counters).
    pub(super) heartbeats: u64,
}

/// Shared between the RPC server and the attempt loop.
#[derive(Default)]
pub(super) struct Registry {
    pub(super) workers: BTreeMap<String, WorkerConn>,
    pub(super) attempt: u64,
    pub(super) events: Option<mpsc::UnboundedSender<TaskEvent>>,
    /// Workers of the current deployment, by id.
    pub(super) deployed: Vec<String>,
    /// Subtasks of the current deployment by worker id, as failure messages name them.
    pub(super) deployed_subtasks: BTreeMap<String, Vec<String>>,
    /// Workers of the current deployment lost since it was deployed: their failure messages.
    pub(super) lost: Vec<String>,
    /// Permanent deployment failures workers reported ([`WireEvent::DeployFailed`]), by
    /// attempt id, in arrival order: they make their attempt's failure permanent
    /// ([`super::failure::attempt_failure`]). Cleared when an attempt deploys.
    pub(super) permanent_deployment_failures: Vec<(u64, String)>,
    /// The worker list the control API serves (`JobStatus.workers`).
    pub(super) published: Arc<Mutex<Vec<WorkerStatus>>>,
    /// The job reached a terminal state (finished, stopped, failed) or was suspended: a worker
    /// leaving now is expected, not a loss.
    pub(super) job_ended: bool,
}

impl Registry {
    /// Hands an event a worker sent for `attempt` to the current attempt, and records a
    /// permanent deployment failure of it. An event of another attempt (an older one's, late)
    /// is dropped.
    pub(super) fn relay(&mut self, attempt: u64, event: WireEvent) {
        if attempt != self.attempt {
            return;
        }
        if let WireEvent::DeployFailed { error, permanent: true } = &event {
            self.permanent_deployment_failures.push((attempt, error.clone()));
        }
        if let Some(events) = &self.events {
            let _ = events.send(event.into());
        }
    }

    /// The permanent deployment failures workers reported for `attempt`, in arrival order.
    pub(super) fn permanent_deployment_failures_of(&self, attempt: u64) -> Vec<String> {
        self.permanent_deployment_failures
            .iter()
            .filter(|(of, _)| *of == attempt)
            .map(|(_, error)| error.clone())
            .collect()
    }

    /// Publishes the registered workers to the control API (on every register and loss, and
    /// on each heartbeat check), so a status that says RUNNING lists the workers running it.
    pub(super) fn publish(&self) {
        *self.published.lock().expect("lock") = self
            .workers
            .iter()
            .map(|(id, w)| WorkerStatus {
                id: id.clone(),
                address: w.data_addr.clone(),
                slots: w.slots,
                last_heartbeat_ms: w.last_seen.elapsed().as_millis() as u64,
            })
            .collect();
    }
}

/// Accepts worker connections: authenticates each ([`handshake`]), takes its registration,
/// then relays messages both ways and heartbeats until the connection ends.
pub(super) async fn serve_rpc(
    listener: TcpListener,
    registry: Arc<Mutex<Registry>>,
    metrics: Vec<Arc<TaskMetrics>>,
    heartbeat: Duration,
    secret: JobSecret,
) {
    let next_conn = Arc::new(AtomicU64::new(1));
    loop {
        let Ok((stream, peer)) = listener.accept().await else {
            continue;
        };
        let registry = registry.clone();
        let metrics = metrics.clone();
        let secret = secret.clone();
        let conn_id = next_conn.fetch_add(1, Ordering::Relaxed);
        tokio::spawn(async move {
            let mut conn = framed(stream);
            let authenticated = match handshake::accept(&mut conn, &secret, handshake::ROLE_WORKER_RPC).await {
                Ok(id) => id,
                Err(reason) => return refusals::refuse(Surface::Rpc, peer, &reason),
            };
            let Ok(Some(ToCoordinator::Register {
                worker_id,
                slots,
                data_addr,
                running_attempt,
            })) = recv(&mut conn).await
            else {
                return;
            };
            if worker_id != authenticated {
                let reason = format!("registered as {worker_id:?} after authenticating as {authenticated:?}");
                return refusals::refuse(Surface::Rpc, peer, &reason);
            }
            let current = registry.lock().expect("lock").attempt;
            if let Some(a) = running_attempt
                && a != current
            {
                let reason = format!(
                    "stale attempt {}: the job is at attempt {}; cancel and register again",
                    super::wire::attempt_label(a),
                    super::wire::attempt_label(current)
                );
                tracing::warn!(worker = %worker_id, %reason, "refusing worker");
                let _ = send(&mut conn, &ToWorker::Refused { reason }).await;
                return;
            }
            if send(&mut conn, &ToWorker::Registered).await.is_err() {
                return;
            }
            tracing::info!(worker = %worker_id, %peer, slots, %data_addr, "worker registered");
            let (tx, mut rx) = mpsc::unbounded_channel::<ToWorker>();
            let replaced = {
                let mut r = registry.lock().expect("lock");
                let replaced = r.workers.insert(
                    worker_id.clone(),
                    WorkerConn {
                        slots,
                        data_addr,
                        tx,
                        last_seen: Instant::now(),
                        conn_id,
                        heartbeats: 0,
                    },
                );
                r.publish();
                replaced
            };
            if replaced.is_some() {
                lose_worker(&registry, &worker_id, "re-registered", None);
                // lose_worker removed the new entry too if it matched; re-insert is not needed
                // because it only removes when conn ids match.
            }
            let mut tick = tokio::time::interval(heartbeat);
            loop {
                tokio::select! {
                    msg = recv::<ToCoordinator>(&mut conn) => match msg {
                        Ok(Some(ToCoordinator::Heartbeat { counters })) => {
                            for (t, i, o, bp) in counters {
                                if let Some(m) = metrics.get(t) {
                                    m.records_in.store(i, Ordering::Relaxed);
                                    m.records_out.store(o, Ordering::Relaxed);
                                    m.backpressured_ns.store(bp, Ordering::Relaxed);
                                }
                            }
                            // Counted after the counters are stored: `await_final_counters`
                            // reads them once the count moved.
                            if let Some(w) = registry.lock().expect("lock").workers.get_mut(&worker_id) {
                                w.last_seen = Instant::now();
                                w.heartbeats += 1;
                            }
                        }
                        Ok(Some(ToCoordinator::Event { attempt, event })) => {
                            registry.lock().expect("lock").relay(attempt, event);
                        }
                        Ok(Some(ToCoordinator::Register { .. })) => {}
                        Ok(Some(ToCoordinator::Leaving { reason })) => {
                            lose_worker(&registry, &worker_id, &reason, Some(conn_id));
                            break;
                        }
                        Ok(None) | Err(_) => break,
                    },
                    out = rx.recv() => match out {
                        Some(m) => if send(&mut conn, &m).await.is_err() { break },
                        None => break,
                    },
                    _ = tick.tick() => {
                        if send(&mut conn, &ToWorker::Heartbeat).await.is_err() {
                            break;
                        }
                    }
                }
            }
            lose_worker(&registry, &worker_id, "connection closed", Some(conn_id));
        });
    }
}

/// Removes a worker; if it ran subtasks of the current attempt, fails the attempt.
pub(super) fn lose_worker(registry: &Arc<Mutex<Registry>>, worker_id: &str, why: &str, conn_id: Option<u64>) {
    let mut r = registry.lock().expect("lock");
    let matches = r
        .workers
        .get(worker_id)
        .is_some_and(|w| conn_id.is_none_or(|c| c == w.conn_id));
    if conn_id.is_some() && !matches {
        return; // a newer connection of the same worker replaced this one
    }
    if conn_id.is_some() {
        r.workers.remove(worker_id);
        r.publish();
    }
    match departure(r.job_ended, r.deployed.iter().any(|w| w == worker_id)) {
        Departure::AfterTheJobEnded => {
            tracing::info!(worker = worker_id, why, "worker left after the job ended");
        }
        Departure::Spare => tracing::warn!(worker = worker_id, why, "worker lost (it ran no subtasks)"),
        Departure::FailsTheAttempt => {
            tracing::warn!(worker = worker_id, why, "worker lost");
            let subtasks = r.deployed_subtasks.get(worker_id).cloned().unwrap_or_default();
            let error = super::failure::worker_lost(worker_id, why, &subtasks);
            r.lost.push(error.clone());
            if let Some(ev) = &r.events {
                let _ = ev.send(TaskEvent::Failed {
                    task: usize::MAX,
                    error,
                });
            }
        }
    }
}

/// What a worker's departure means to the job.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Departure {
    /// The job already ended (finished, stopped, failed or suspended): workers exit when told,
    /// or are stopped; logged at INFO, nothing fails.
    AfterTheJobEnded,
    /// A worker that runs no subtask of the current deployment (a spare): logged at WARN,
    /// nothing fails.
    Spare,
    /// A worker running subtasks of the current deployment: the attempt fails (WARN, then the
    /// restart strategy decides).
    FailsTheAttempt,
}

/// Classifies the departure of a worker: `job_ended` as [`Registry::job_ended`], `deployed`
/// whether it runs subtasks of the current deployment.
pub(super) fn departure(job_ended: bool, deployed: bool) -> Departure {
    match (job_ended, deployed) {
        (true, _) => Departure::AfterTheJobEnded,
        (false, false) => Departure::Spare,
        (false, true) => Departure::FailsTheAttempt,
    }
}

/// After the job ended: waits until every worker of the deployment sent a heartbeat after
/// this call (their subtasks have ended, so it carries their final record counters), at most
/// two heartbeat intervals and a second, so the run summary counts every record. A worker that
/// leaves meanwhile is not waited for.
pub(super) async fn await_final_counters(registry: &Arc<Mutex<Registry>>, heartbeat_interval: Duration) {
    let before: Vec<(String, u64)> = {
        let r = registry.lock().expect("lock");
        r.deployed
            .iter()
            .filter_map(|id| r.workers.get(id).map(|w| (id.clone(), w.heartbeats)))
            .collect()
    };
    let deadline = Instant::now() + heartbeat_interval * 2 + Duration::from_secs(1);
    while Instant::now() < deadline {
        let all_heard = {
            let r = registry.lock().expect("lock");
            before
                .iter()
                .all(|(id, n)| r.workers.get(id).is_none_or(|w| w.heartbeats > *n))
        };
        if all_heard {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every 200 ms: loses workers silent for longer than `timeout`, not counting time this process
/// itself stalled ([`liveness`](super::liveness)).
pub(super) async fn watch_heartbeats(registry: Arc<Mutex<Registry>>, timeout: Duration) {
    const PERIOD: Duration = Duration::from_millis(200);
    let mut clock = StallClock::new(PERIOD, Instant::now());
    loop {
        tokio::time::sleep(PERIOD).await;
        let stale: Vec<(String, u64)> = {
            let mut r = registry.lock().expect("lock");
            r.publish();
            let now = Instant::now();
            let stall = clock.check(now);
            if !stall.is_zero() {
                tracing::warn!(
                    stall_ms = stall.as_millis() as u64,
                    "this process stalled; worker heartbeat timeouts extended by the stall"
                );
            }
            r.workers
                .iter_mut()
                .filter_map(|(id, w)| {
                    w.last_seen = discount_stall(w.last_seen, stall, now);
                    is_lost(w.last_seen, now, timeout).then(|| (id.clone(), w.conn_id))
                })
                .collect()
        };
        for (id, conn) in stale {
            lose_worker(&registry, &id, "heartbeat timeout", Some(conn));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What a worker sends, through its JSON frame, as the registry receives it.
    fn over_the_wire(attempt: u64, event: WireEvent) -> (u64, WireEvent) {
        let json = serde_json::to_vec(&ToCoordinator::Event { attempt, event }).unwrap();
        match serde_json::from_slice(&json).unwrap() {
            ToCoordinator::Event { attempt, event } => (attempt, event),
            other => panic!("not an event: {other:?}"),
        }
    }

    /// A permanent deployment failure of the current attempt is recorded (it makes the
    /// attempt's failure permanent) and reaches the attempt as a failure; a transient one only
    /// reaches it; one of an older attempt does neither.
    #[test]
    fn the_registry_records_the_permanent_deployment_failures_of_the_current_attempt() {
        let (events, mut received) = mpsc::unbounded_channel();
        let mut registry = Registry {
            attempt: 2,
            events: Some(events),
            ..Registry::default()
        };
        let failed = |error: &str, permanent: bool| WireEvent::DeployFailed {
            error: error.into(),
            permanent,
        };
        for (attempt, event) in [
            (2, failed("worker w1 could not deploy attempt 2: S3 timeout", false)),
            (
                1,
                failed("worker w1 could not deploy attempt 1: corrupt restore point", true),
            ),
            (
                2,
                failed("worker w2 could not deploy attempt 2: corrupt restore point", true),
            ),
        ] {
            let (attempt, event) = over_the_wire(attempt, event);
            registry.relay(attempt, event);
        }
        assert_eq!(
            registry.permanent_deployment_failures_of(2),
            ["worker w2 could not deploy attempt 2: corrupt restore point"]
        );
        assert_eq!(registry.permanent_deployment_failures_of(1), Vec::<String>::new());
        let mut relayed = Vec::new();
        while let Ok(TaskEvent::Failed { task, error }) = received.try_recv() {
            relayed.push((task, error));
        }
        assert_eq!(
            relayed,
            [
                (
                    usize::MAX,
                    "worker w1 could not deploy attempt 2: S3 timeout".to_string()
                ),
                (
                    usize::MAX,
                    "worker w2 could not deploy attempt 2: corrupt restore point".to_string()
                ),
            ]
        );
    }

    #[test]
    fn a_departure_fails_the_attempt_only_while_the_job_runs_on_that_worker() {
        for (job_ended, deployed, want) in [
            (true, true, Departure::AfterTheJobEnded),
            (true, false, Departure::AfterTheJobEnded),
            (false, false, Departure::Spare),
            (false, true, Departure::FailsTheAttempt),
        ] {
            assert_eq!(
                departure(job_ended, deployed),
                want,
                "job_ended {job_ended}, deployed {deployed}"
            );
        }
    }
}
