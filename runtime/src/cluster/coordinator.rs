//! `weir coordinator` (Flink's JobManager role): accepts worker registrations, assigns
//! subtasks to slots once enough are registered, deploys them, runs the checkpoint
//! coordinator over the network, serves the control API, and on the loss of a worker or the
//! failure of a subtask restarts the whole job from the latest completed checkpoint under the
//! restart strategy. Every deployment has an attempt number; messages of older attempts are
//! ignored and workers still running an older attempt are refused.

use super::fence::EpochFence;
use super::liveness::{StallClock, discount_stall, is_lost};
use super::restart::{self, RestartDecision, RestartPolicy};
use super::wire::*;
use crate::checkpoint::coordinator::{self as ckpt, Outcome, SavepointCommand, Shared};
use crate::checkpoint::restore::RestoreFrom;
use crate::control::api::{JobState, WorkerStatus};
use crate::exec::messages::{Control, TaskEvent};
use crate::exec::task::TaskMetrics;
use crate::exec::{self, JobHandle, task_specs};
use crate::job::{self, Job};
use crate::security::handshake;
use crate::security::refusals::{self, Surface};
use crate::security::secret::{self, JobSecret};
use crate::storage::{self, S3Options, Store};
use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::TcpListener;
use tokio::sync::mpsc;

/// Coordinator settings.
#[derive(Debug, Clone)]
pub struct CoordinatorOptions {
    /// The StreamJob manifest.
    pub job_file: PathBuf,
    /// `--set` overrides.
    pub sets: Vec<String>,
    /// Restore point of the first deployment.
    pub restore: RestoreFrom,
    /// Checkpoint storage override.
    pub checkpoint_dir: Option<String>,
    /// Control API address.
    pub listen: String,
    /// RPC address for workers.
    pub rpc_listen: String,
    /// Run id (stable across coordinator restarts of the same deployment).
    pub run_id: String,
    /// Heartbeat interval.
    pub heartbeat_interval: Duration,
    /// A worker is lost after this long without a message.
    pub heartbeat_timeout: Duration,
    /// Restart strategy.
    pub restart: RestartPolicy,
    /// Exit when the job reaches a terminal state instead of serving its final status.
    pub exit_on_finish: bool,
    /// The job secret file (`None`: `./weir-data/job.secret`, created when missing): the
    /// control API's bearer token and what workers authenticate with.
    pub secret_file: Option<PathBuf>,
    /// Whether `/metrics` requires the bearer token too.
    pub protect_metrics: bool,
    /// SIGTERM / SIGINT: suspend the job (stop the workers' subtasks without a savepoint)
    /// and exit 0; a coordinator of the same `--run-id` resumes from the latest checkpoint.
    pub stop: crate::signals::StopSignal,
}

struct WorkerConn {
    slots: u32,
    data_addr: String,
    tx: mpsc::UnboundedSender<ToWorker>,
    last_seen: Instant,
    conn_id: u64,
}

/// Shared between the RPC server and the attempt loop.
#[derive(Default)]
struct Registry {
    workers: BTreeMap<String, WorkerConn>,
    attempt: u64,
    events: Option<mpsc::UnboundedSender<TaskEvent>>,
    /// Workers of the current deployment, by id.
    deployed: Vec<String>,
    /// Subtasks of the current deployment by worker id, as failure messages name them.
    deployed_subtasks: BTreeMap<String, Vec<String>>,
    /// Workers of the current deployment lost since it was deployed: their failure messages.
    lost: Vec<String>,
    /// The worker list the control API serves (`JobStatus.workers`).
    published: Arc<Mutex<Vec<WorkerStatus>>>,
}

impl Registry {
    /// Publishes the registered workers to the control API (on every register and loss, and
    /// on each heartbeat check), so a status that says RUNNING lists the workers running it.
    fn publish(&self) {
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

/// Runs the coordinator. Returns when the job ends (with `exit_on_finish`) or fails to start.
pub async fn run(opts: CoordinatorOptions) -> Result<(), String> {
    let job: Job =
        job::load_manifest(&opts.job_file, &opts.sets).map_err(|e| format!("{}: {e}", opts.job_file.display()))?;
    job.check_distributed()
        .map_err(|e| format!("{}: {e}", opts.job_file.display()))?;
    let manifest = render_manifest(&opts.job_file, &opts.sets)?;
    let s3 = S3Options::from(job.spec.s3.as_ref());
    let store = storage::open(&exec::storage_url(&job, opts.checkpoint_dir.as_deref()), &s3)
        .await
        .map_err(|e| e.to_string())?;
    let fence = Arc::new(EpochFence::claim(store.clone(), &job.name).await?);
    tracing::info!(epoch = fence.epoch(), "coordinator epoch claimed");
    let specs = task_specs(&job);
    let n_tasks = specs.len();
    let p = job.parallelism as usize;
    let metrics: Vec<Arc<TaskMetrics>> = specs.iter().map(|_| Arc::new(TaskMetrics::default())).collect();
    let shared = Arc::new(Mutex::new(Shared::new()));
    shared.lock().expect("lock").suspend = opts.stop.token();
    let (cmd_tx, mut cmd_rx) = mpsc::unbounded_channel::<SavepointCommand>();
    let handle = JobHandle {
        job: job.name.clone(),
        job_id: opts.run_id.clone(),
        parallelism: job.parallelism,
        max_parallelism: job.max_parallelism,
        shared: shared.clone(),
        commands: cmd_tx,
        tasks: specs
            .iter()
            .zip(&metrics)
            .map(|(s, m)| (s.name.clone(), s.subtask, m.clone()))
            .collect(),
        bytes_read: Arc::new(AtomicU64::new(0)),
        locations: Arc::default(),
        workers: Arc::default(),
        restarts: Arc::default(),
    };
    let secret = secret::for_server(opts.secret_file.as_deref())?;
    let auth = crate::control::auth::ControlAuth {
        secret: secret.clone(),
        protect_metrics: opts.protect_metrics,
    };
    let server = crate::control::server::serve(&opts.listen, handle.clone(), auth).await?;
    let api = server.addr;
    let rpc = TcpListener::bind(&opts.rpc_listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", opts.rpc_listen))?;
    tracing::info!(
        target: "weir",
        "coordinator of job {} control API on http://{api} rpc on {}",
        job.name,
        rpc.local_addr().map_err(|e| e.to_string())?
    );
    let registry = Arc::new(Mutex::new(Registry {
        published: handle.workers.clone(),
        ..Registry::default()
    }));
    tokio::spawn(serve_rpc(
        rpc,
        registry.clone(),
        metrics.clone(),
        opts.heartbeat_interval,
        secret,
    ));
    tokio::spawn(watch_heartbeats(registry.clone(), opts.heartbeat_timeout));

    let started = Instant::now();
    let mut restarts: Vec<Duration> = vec![];
    let mut attempt = 0u64;
    loop {
        attempt += 1;
        // Every attempt applies the one restore rule to this run's lineage (see
        // `exec::restore_for_run`): the first start of the run restores `--restore`; a failover
        // or a restarted coordinator of the same run id, the newest snapshot of the lineage.
        if opts.stop.is_requested() {
            return suspended(&handle, &registry, attempt, server).await;
        }
        let result = run_attempt(
            &job,
            &manifest,
            &store,
            &fence,
            &opts.restore,
            attempt,
            &opts,
            &registry,
            &handle,
            &mut cmd_rx,
            p,
            n_tasks,
        )
        .await;
        match result {
            Ok(Outcome::Suspended) => return suspended(&handle, &registry, attempt, server).await,
            Ok(outcome) => {
                if let Outcome::Stopped(path) = &outcome {
                    tracing::info!(target: "weir", "job {} stopped with savepoint {path}", job.name);
                } else {
                    tracing::info!(target: "weir", "job {} finished", job.name);
                }
                if opts.exit_on_finish {
                    if matches!(outcome, Outcome::Stopped(_)) {
                        tokio::select! {
                            _ = crate::control::server::linger_until_stop_delivered(&handle, Duration::from_secs(30)) => {}
                            _ = opts.stop.requested() => {}
                        }
                    }
                    end_workers(&registry, false).await;
                    server.shutdown(Duration::from_secs(5)).await;
                    return Ok(());
                }
                return serve_until_stopped(server, &opts.stop).await;
            }
            Err(failure) => {
                let reason = lead_with_cause(&registry, failure.message).await;
                cancel_attempt(&registry, attempt);
                let now = started.elapsed();
                let decision = if failure.permanent {
                    RestartDecision::GiveUp("restarting cannot help".into())
                } else {
                    restart::decide(&opts.restart, &restarts, now)
                };
                match decision {
                    RestartDecision::Restart(delay) => {
                        restarts.push(now);
                        handle.restarts.fetch_add(1, Ordering::Relaxed);
                        tracing::warn!(
                            target: "weir",
                            attempt,
                            "attempt {attempt} failed: {reason}; restarting in {delay:?} from the latest checkpoint"
                        );
                        {
                            let mut s = shared.lock().expect("lock");
                            s.state = JobState::Restarting;
                            s.failure = Some(reason);
                        }
                        tokio::select! {
                            _ = tokio::time::sleep(delay) => {}
                            _ = opts.stop.requested() => {}
                        }
                    }
                    RestartDecision::GiveUp(why) => {
                        let msg = format!("{reason}; {why}");
                        tracing::error!(target: "weir", "job {} FAILED: {msg}", job.name);
                        {
                            let mut s = shared.lock().expect("lock");
                            s.state = JobState::Failed;
                            s.failure = Some(msg.clone());
                        }
                        if opts.exit_on_finish {
                            end_workers(&registry, true).await;
                            return Err(msg);
                        }
                        return serve_until_stopped(server, &opts.stop).await;
                    }
                }
            }
        }
    }
}

/// Tells every registered worker that the job ended, and gives the messages a moment to go out.
async fn end_workers(registry: &Arc<Mutex<Registry>>, failed: bool) {
    for w in registry.lock().expect("lock").workers.values() {
        let _ = w.tx.send(ToWorker::JobEnded { failed });
    }
    tokio::time::sleep(Duration::from_millis(200)).await;
}

/// Serves the final status until SIGTERM / SIGINT (as pods do), then exits 0.
async fn serve_until_stopped(
    server: crate::control::server::ControlServer,
    stop: &crate::signals::StopSignal,
) -> Result<(), String> {
    stop.requested().await;
    server.shutdown(Duration::from_secs(5)).await;
    Ok(())
}

/// After SIGTERM / SIGINT suspended the job: cancels the attempt on every worker (their
/// subtasks already got `Shutdown`), lets the messages go out, stops the control API.
async fn suspended(
    handle: &JobHandle,
    registry: &Arc<Mutex<Registry>>,
    attempt: u64,
    server: crate::control::server::ControlServer,
) -> Result<(), String> {
    cancel_attempt(registry, attempt);
    tokio::time::sleep(Duration::from_millis(200)).await;
    server.shutdown(Duration::from_secs(2)).await;
    let last = handle.shared.lock().expect("lock").history.completed.last().cloned();
    let from = last.map_or("its restore point".to_string(), |c| {
        format!("checkpoint {} at {}", c.id, c.path)
    });
    tracing::info!(
        target: "weir",
        "job {} suspended: subtasks stopped without a savepoint; a coordinator with --run-id {} resumes from {from}",
        handle.job,
        handle.job_id
    );
    Ok(())
}

/// The failure message of an attempt, leading with its cause: when the first failure is the
/// symptom of a lost peer (a broken data channel), waits briefly for the loss of the worker
/// behind it to be noticed and names that worker instead.
async fn lead_with_cause(registry: &Arc<Mutex<Registry>>, first_failure: String) -> String {
    if super::failure::is_peer_loss_symptom(&first_failure) {
        let deadline = Instant::now() + Duration::from_millis(500);
        while registry.lock().expect("lock").lost.is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let lost = registry.lock().expect("lock").lost.clone();
    if !lost.is_empty() && lost[0] != first_failure {
        tracing::info!(first_failure = %first_failure, "a symptom of the worker loss");
    }
    super::failure::lead_with_cause(&first_failure, &lost)
}

/// The manifest text workers receive (the file with `--set` overrides applied).
fn render_manifest(file: &std::path::Path, sets: &[String]) -> Result<String, String> {
    let text = std::fs::read_to_string(file).map_err(|e| format!("{}: {e}", file.display()))?;
    if sets.is_empty() {
        return Ok(text);
    }
    let mut doc: serde_yaml::Value = serde_yaml::from_str(&text).map_err(|e| e.to_string())?;
    for s in sets {
        job::apply_override(&mut doc, s).map_err(|e| e.to_string())?;
    }
    serde_yaml::to_string(&doc).map_err(|e| e.to_string())
}

fn cancel_attempt(registry: &Arc<Mutex<Registry>>, attempt: u64) {
    let mut r = registry.lock().expect("lock");
    r.events = None;
    for w in r.workers.values() {
        let _ = w.tx.send(ToWorker::Cancel { attempt });
    }
}

#[allow(clippy::too_many_arguments)]
async fn run_attempt(
    job: &Job,
    manifest: &str,
    store: &Store,
    fence: &Arc<EpochFence>,
    from: &RestoreFrom,
    attempt: u64,
    opts: &CoordinatorOptions,
    registry: &Arc<Mutex<Registry>>,
    handle: &JobHandle,
    commands: &mut mpsc::UnboundedReceiver<SavepointCommand>,
    p: usize,
    n_tasks: usize,
) -> Result<Outcome, exec::StartError> {
    let transient = |message: String| exec::StartError {
        message,
        permanent: false,
    };
    handle.shared.lock().expect("lock").state = JobState::Initializing;
    // Wait for enough slots.
    let mut waited = Instant::now();
    let assignment: Vec<(String, String, u32)> = loop {
        if opts.stop.is_requested() {
            return Ok(Outcome::Suspended);
        }
        {
            let r = registry.lock().expect("lock");
            let total: u32 = r.workers.values().map(|w| w.slots).sum();
            if total as usize >= p {
                break r
                    .workers
                    .iter()
                    .map(|(id, w)| (id.clone(), w.data_addr.clone(), w.slots))
                    .collect();
            }
            if waited.elapsed() > Duration::from_secs(10) {
                tracing::info!(have = total, need = p, "waiting for task slots");
                waited = Instant::now();
            }
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    let (snapshot, first_id) = exec::restore_for_run(job, store, from, Some(&opts.run_id)).await?;
    let restore_url = snapshot.as_ref().map(|s| s.url.clone());
    handle.shared.lock().expect("lock").restored_from = restore_url.clone();
    // Slot sharing, as in Flink: slot k runs subtask k of every stage (one pipeline slice),
    // so a job needs `parallelism` slots. Slots are filled in worker-id order.
    let slots: Vec<(&String, &String)> = assignment
        .iter()
        .flat_map(|(id, addr, n)| std::iter::repeat_n((id, addr), *n as usize))
        .take(p)
        .collect();
    let worker_of: Vec<String> = (0..n_tasks).map(|t| slots[t % p].0.clone()).collect();
    let locations: Vec<String> = (0..n_tasks).map(|t| slots[t % p].1.clone()).collect();
    let (ev_tx, ev_rx) = mpsc::unbounded_channel::<TaskEvent>();
    {
        let mut r = registry.lock().expect("lock");
        r.attempt = attempt;
        r.events = Some(ev_tx.clone());
        // Only workers that run subtasks: losing a spare one fails nothing.
        r.deployed = assignment
            .iter()
            .map(|a| a.0.clone())
            .filter(|id| worker_of.contains(id))
            .collect();
        r.lost.clear();
        let specs = task_specs(job);
        r.deployed_subtasks = BTreeMap::new();
        for (t, w) in worker_of.iter().enumerate() {
            let label = exec::subtask_label(&specs[t], job.parallelism);
            r.deployed_subtasks.entry(w.clone()).or_default().push(label);
        }
        for (id, _, _) in &assignment {
            let tasks: Vec<usize> = (0..n_tasks).filter(|t| &worker_of[*t] == id).collect();
            if tasks.is_empty() {
                continue;
            }
            let d = Deployment {
                attempt,
                manifest: manifest.to_string(),
                restore: restore_url.clone(),
                // Unique per coordinator epoch and attempt: sink part names never collide
                // with parts of an earlier process or attempt.
                run_id: format!("{}-e{}-a{attempt}", opts.run_id, fence.epoch()),
                tasks,
                locations: locations.clone(),
            };
            match r.workers.get(id) {
                Some(w) => {
                    let _ = w.tx.send(ToWorker::Deploy(Box::new(d)));
                }
                None => return Err(transient(format!("worker {id} left before deployment"))),
            }
        }
    }
    {
        let mut l = handle.locations.lock().expect("lock");
        *l = worker_of.iter().enumerate().map(|(t, w)| (t, w.clone())).collect();
    }
    tracing::info!(attempt, restore = ?restore_url, first_checkpoint = first_id, "deployed");
    // Control messages go to the worker running each task.
    let mut controls = Vec::with_capacity(n_tasks);
    let mut forwarders = Vec::with_capacity(n_tasks);
    for (t, worker) in worker_of.iter().enumerate() {
        let (tx, mut rx) = mpsc::unbounded_channel::<Control>();
        controls.push(tx);
        let registry = registry.clone();
        let worker = worker.clone();
        forwarders.push(tokio::spawn(async move {
            while let Some(c) = rx.recv().await {
                let r = registry.lock().expect("lock");
                if r.attempt != attempt {
                    return;
                }
                if let Some(w) = r.workers.get(&worker) {
                    let _ = w.tx.send(ToWorker::Control {
                        attempt,
                        task: t,
                        control: WireControl::from_control(&c),
                    });
                }
            }
        }));
    }
    let mut cfg = exec::coordinator_config(job, store.clone(), first_id, (0..p).collect(), &opts.run_id);
    cfg.fence = Some(fence.clone());
    drop(ev_tx);
    let outcome = ckpt::run(cfg, controls, ev_rx, commands, handle.shared.clone()).await;
    // `controls` is dropped: let the forwarders hand every queued message (the final
    // checkpoint's `Complete` among them) to the workers' connections before the caller sends
    // `JobEnded` on the same connections, so a worker never exits ahead of a commit.
    let drained = futures::future::join_all(forwarders);
    if tokio::time::timeout(Duration::from_secs(5), drained).await.is_err() {
        tracing::warn!(attempt, "control messages still queued 5 s after the attempt ended");
    }
    outcome.map_err(transient)
}

async fn serve_rpc(
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
                let reason = format!("stale attempt {a}: the job is at attempt {current}; cancel and register again");
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
                            if let Some(w) = registry.lock().expect("lock").workers.get_mut(&worker_id) {
                                w.last_seen = Instant::now();
                            }
                            for (t, i, o, bp) in counters {
                                if let Some(m) = metrics.get(t) {
                                    m.records_in.store(i, Ordering::Relaxed);
                                    m.records_out.store(o, Ordering::Relaxed);
                                    m.backpressured_ns.store(bp, Ordering::Relaxed);
                                }
                            }
                        }
                        Ok(Some(ToCoordinator::Event { attempt, event })) => {
                            let r = registry.lock().expect("lock");
                            if attempt == r.attempt
                                && let Some(ev) = &r.events
                            {
                                let _ = ev.send(event.into());
                            }
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
fn lose_worker(registry: &Arc<Mutex<Registry>>, worker_id: &str, why: &str, conn_id: Option<u64>) {
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
    tracing::warn!(worker = worker_id, why, "worker lost");
    if r.deployed.iter().any(|w| w == worker_id) {
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

/// Every 200 ms: loses workers silent for longer than `timeout`, not counting time this process
/// itself stalled ([`liveness`](super::liveness)).
async fn watch_heartbeats(registry: Arc<Mutex<Registry>>, timeout: Duration) {
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
