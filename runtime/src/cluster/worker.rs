//! `weir worker` (Flink's TaskManager role): registers its slots with the coordinator, runs
//! the subtasks it is deployed, exchanges records with other workers over TCP with
//! credit-based flow control, uploads its subtasks' state directly to checkpoint storage, and
//! acknowledges to the coordinator. It cancels its subtasks when the coordinator says so, when
//! the coordinator is lost (heartbeat timeout or closed connection), or when its registration
//! is refused as stale.

use super::data_channel::{ChannelSender, Inbound, InboundChannel, accept_data, write_channel};
use super::failure::DeploymentError;
use super::liveness::{StallClock, discount_stall, is_lost};
use super::wire::*;
use super::worker_health::{SharedMetrics, serve_health};
use crate::checkpoint::restore;
use crate::exec::channel::{DataReceiver, DataSender, data_channel, returned_channel};
use crate::exec::messages::{Control, TaskEvent};
use crate::exec::task::TaskMetrics;
use crate::exec::{self, CHANNEL_CAPACITY, RunContext, task_specs};
use crate::job;
use crate::security::handshake;
use crate::security::secret::JobSecret;
use crate::state::key_group::{KeyGroupRange, key_group_range};
use crate::storage::{self, S3Options};
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;

/// Worker settings.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Coordinator RPC address (`host:port`).
    pub coordinator: String,
    /// Task slots.
    pub slots: u32,
    /// Data listener bind address.
    pub data_listen: String,
    /// Address other workers use to reach the data listener (default: the bound address).
    pub advertise: Option<String>,
    /// Stable id (default: hostname-pid).
    pub worker_id: String,
    /// Heartbeat interval.
    pub heartbeat_interval: Duration,
    /// Coordinator considered lost after this long without a message.
    pub heartbeat_timeout: Duration,
    /// Address of the health and metrics endpoint (`/healthz`, `/metrics`), if any.
    pub listen: Option<String>,
    /// The job secret: the worker proves it holds it to the coordinator and to other workers,
    /// and requires it of workers opening data channels to it.
    pub secret: JobSecret,
    /// SIGTERM / SIGINT: leave the job (the coordinator sees the worker leave and restarts
    /// its subtasks elsewhere from the latest checkpoint) and exit.
    pub stop: crate::signals::StopSignal,
    /// Root of the disk state backend's local directories (`--state-dir`; `None`: the
    /// default of [`crate::state::local_dir::root`]).
    pub state_dir: Option<std::path::PathBuf>,
}

struct Running {
    attempt: u64,
    job: String,
    named_metrics: Vec<(String, u32, Arc<TaskMetrics>)>,
    controls: HashMap<usize, mpsc::UnboundedSender<Control>>,
    /// The subtasks of this worker.
    subtasks: Vec<JoinHandle<()>>,
    /// Their remote output channels and the event forwarder.
    helpers: Vec<JoinHandle<()>>,
    metrics: Vec<(usize, Arc<TaskMetrics>)>,
    stores: StoreCache,
    /// This attempt's run directory of disk keyed state (unused without the disk backend).
    state_dir: std::path::PathBuf,
}

/// How long a worker retries an unreachable coordinator at INFO before it warns: the time a
/// coordinator started alongside takes to listen.
const COORDINATOR_START_GRACE: Duration = Duration::from_secs(10);

/// How long a worker waits, after the job finished, for its subtasks to finish the commits the
/// coordinator asked for (the final checkpoint's) before it exits anyway.
const FINISH_TIMEOUT: Duration = Duration::from_secs(10);

impl Running {
    /// Aborts the subtasks and helpers; once the subtasks have ended and their stores are
    /// deleted (waiting up to [`CLOSING_STORES_WAIT`](crate::state::local_dir::CLOSING_STORES_WAIT)
    /// for stores still closing on other threads), removes the attempt's run directory, which this
    /// worker's later attempts would otherwise keep for as long as it lives (the sweep of a
    /// starting process only removes directories of processes that are gone).
    fn cancel(self) {
        for h in self.subtasks.iter().chain(&self.helpers) {
            h.abort();
        }
        tracing::info!(attempt = %attempt_label(self.attempt), "cancelled subtasks");
        let (subtasks, state_dir) = (self.subtasks, self.state_dir);
        tokio::spawn(async move {
            futures::future::join_all(subtasks).await;
            // A store may still be closing on an encoder thread (its checkpoint's upload).
            let wait = crate::state::local_dir::CLOSING_STORES_WAIT;
            if state_dir.exists() && !crate::state::local_dir::remove_once_only_owner(&state_dir, wait).await {
                tracing::info!(dir = %state_dir.display(), "cancelled attempt's disk state still in use; left for the next start's sweep");
            }
        });
    }

    /// The job finished. Every `Complete` the coordinator sent (the final checkpoint's among
    /// them) came over the connection before `JobEnded` and is queued on the subtasks' control
    /// channels: queue `Shutdown` behind it and wait (at most `timeout`) for the subtasks to end
    /// (then remove the attempt's run directory, as [`Running::cancel`] does), instead of
    /// cancelling a commit in flight, which lost the final checkpoint's output when
    /// its `Complete` reached a sink after end-of-stream (soak trial cluster 500137).
    async fn finish(self, timeout: Duration) {
        let attempt = self.attempt;
        for control in self.controls.values() {
            let _ = control.send(Control::Shutdown);
        }
        let all = futures::future::join_all(self.subtasks);
        if tokio::time::timeout(timeout, all).await.is_err() {
            tracing::warn!(
                attempt,
                timeout_s = timeout.as_secs(),
                "subtasks still running after the job finished; exiting anyway"
            );
        }
        for h in &self.helpers {
            h.abort();
        }
        // The finished attempt's run directory: its subtasks deleted their stores, so it
        // holds the owner file alone, which no later sweep would remove while this worker
        // lives on (a worker serves attempt after attempt).
        let wait = crate::state::local_dir::CLOSING_STORES_WAIT;
        if self.state_dir.exists() && !crate::state::local_dir::remove_once_only_owner(&self.state_dir, wait).await {
            tracing::info!(dir = %self.state_dir.display(), "finished attempt's disk state still in use; left for the next start's sweep");
        }
    }
}

/// Runs the worker until the process is stopped. Errors only for setup failures.
pub async fn run(cfg: WorkerConfig) -> Result<(), String> {
    let listener = TcpListener::bind(&cfg.data_listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", cfg.data_listen))?;
    let bound = listener.local_addr().map_err(|e| e.to_string())?;
    let advertise = cfg.advertise.clone().unwrap_or_else(|| bound.to_string());
    tracing::info!(
        target: "weir",
        "worker {} data listener on {bound} (advertised as {advertise})",
        cfg.worker_id
    );
    let health_metrics: SharedMetrics = Arc::default();
    if let Some(addr) = &cfg.listen {
        let bound = serve_health(addr, health_metrics.clone()).await?;
        tracing::info!(target: "weir", "worker {} health and metrics on http://{bound}", cfg.worker_id);
    }
    let inbound: Arc<Mutex<Inbound>> = Arc::default();
    crate::exec::panics::spawn_vital(
        "the worker's data channel listener",
        accept_data(listener, inbound.clone(), cfg.secret.clone()),
    );
    let (out_tx, mut out_rx) = mpsc::unbounded_channel::<ToCoordinator>();
    let mut running: Option<Running> = None;
    let mut backoff = Duration::from_millis(200);
    let mut unreachable_since: Option<Instant> = None;
    loop {
        if cfg.stop.is_requested() {
            tracing::info!(target: "weir", "worker {} stopped", cfg.worker_id);
            return Ok(());
        }
        let mut conn = match TcpStream::connect(&cfg.coordinator).await {
            Ok(s) => {
                unreachable_since = None;
                framed(s)
            }
            Err(e) => {
                // Workers often start before their coordinator listens (pods, the README's
                // commands): INFO while that is plausible, WARN once it has lasted.
                let since = *unreachable_since.get_or_insert_with(Instant::now);
                if since.elapsed() < COORDINATOR_START_GRACE {
                    tracing::info!(coordinator = %cfg.coordinator, error = %e, "cannot reach the coordinator yet; retrying");
                } else {
                    tracing::warn!(coordinator = %cfg.coordinator, error = %e, "cannot reach the coordinator; retrying");
                }
                tokio::select! {
                    _ = tokio::time::sleep(backoff) => {}
                    _ = cfg.stop.requested() => {}
                }
                backoff = (backoff * 2).min(Duration::from_secs(5));
                continue;
            }
        };
        if let Err(e) = handshake::connect(&mut conn, &cfg.secret, handshake::ROLE_WORKER_RPC, &cfg.worker_id).await {
            tracing::warn!(target: "weir", coordinator = %cfg.coordinator, "worker {}: authentication with the coordinator failed: {e}; retrying", cfg.worker_id);
            tokio::select! {
                _ = tokio::time::sleep(backoff) => {}
                _ = cfg.stop.requested() => {}
            }
            backoff = (backoff * 2).min(Duration::from_secs(5));
            continue;
        }
        backoff = Duration::from_millis(200);
        let register = ToCoordinator::Register {
            worker_id: cfg.worker_id.clone(),
            slots: cfg.slots,
            data_addr: advertise.clone(),
            running_attempt: running.as_ref().map(|r| r.attempt),
        };
        if send(&mut conn, &register).await.is_err() {
            continue;
        }
        match recv::<ToWorker>(&mut conn).await {
            Ok(Some(ToWorker::Registered)) => {
                tracing::info!(target: "weir", "worker {} registered with {} slots", cfg.worker_id, cfg.slots);
            }
            Ok(Some(ToWorker::Refused { reason })) => {
                tracing::warn!(target: "weir", "worker {} registration refused: {reason}", cfg.worker_id);
                if let Some(r) = running.take() {
                    r.cancel();
                }
                continue;
            }
            _ => continue,
        }
        let mut last_seen = Instant::now();
        let mut stall_clock = StallClock::new(cfg.heartbeat_interval, Instant::now());
        let mut tick = tokio::time::interval(cfg.heartbeat_interval);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                msg = recv::<ToWorker>(&mut conn) => {
                    let msg = match msg {
                        Ok(Some(m)) => m,
                        Ok(None) | Err(_) => {
                            // After its subtasks all ended (the job finished or stopped and the
                            // coordinator was then stopped) nothing is lost.
                            if running.as_ref().is_some_and(|r| r.subtasks.iter().all(|h| h.is_finished())) {
                                tracing::info!("connection to the coordinator closed after the job's subtasks ended");
                            } else {
                                tracing::warn!("connection to the coordinator lost");
                            }
                            break;
                        }
                    };
                    last_seen = Instant::now();
                    match msg {
                        ToWorker::Deploy(d) => {
                            if let Some(r) = running.take() {
                                r.cancel();
                            }
                            let attempt = d.attempt;
                            let deploying = deploy(*d, &inbound, out_tx.clone(), &cfg.worker_id, &cfg.secret, cfg.state_dir.as_deref());
                            tokio::pin!(deploying);
                            // A restore downloads for as long as the keyed state takes, which
                            // can pass the heartbeat timeout (large state): heartbeats go on
                            // meanwhile, or the coordinator would count this worker lost and
                            // redeploy, again and again. A failed send is found by the loop.
                            let deployed = loop {
                                tokio::select! {
                                    deployed = &mut deploying => break deployed,
                                    _ = tick.tick() => {
                                        let _ = send(&mut conn, &ToCoordinator::Heartbeat { counters: Vec::new() }).await;
                                    }
                                }
                            };
                            // The coordinator's messages waited in the socket meanwhile.
                            last_seen = Instant::now();
                            match deployed {
                                Ok(r) => {
                                    *health_metrics.lock().expect("lock") = (r.job.clone(), r.named_metrics.clone());
                                    running = Some(r);
                                }
                                Err(e) => {
                                    tracing::error!(attempt = %attempt_label(attempt), error = %e, permanent = e.permanent, "deployment failed");
                                    let error = format!("worker {} could not deploy attempt {}: {e}", cfg.worker_id, attempt_label(attempt));
                                    let event = WireEvent::DeployFailed { error, permanent: e.permanent };
                                    let _ = out_tx.send(ToCoordinator::Event { attempt, event });
                                }
                            }
                        }
                        ToWorker::Control { attempt, task, control } => {
                            if let Some(r) = running.as_ref().filter(|r| r.attempt == attempt)
                                && let Some(tx) = r.controls.get(&task)
                            {
                                match control.into_control(&r.stores).await {
                                    Ok(c) => { let _ = tx.send(c); }
                                    Err(e) => {
                                        let e = format!("task {task} on worker {}: {e}", cfg.worker_id);
                                        let _ = out_tx.send(ToCoordinator::Event { attempt, event: WireEvent::Failed(task, e) });
                                    }
                                }
                            }
                        }
                        ToWorker::Cancel { attempt } => {
                            if running.as_ref().is_some_and(|r| r.attempt == attempt)
                                && let Some(r) = running.take()
                            {
                                r.cancel();
                            }
                        }
                        ToWorker::JobEnded { failed } => {
                            if let Some(r) = running.take() {
                                if failed {
                                    r.cancel();
                                } else {
                                    r.finish(FINISH_TIMEOUT).await;
                                }
                            }
                            tracing::info!(target: "weir", "worker {}: the job ended; exiting", cfg.worker_id);
                            return if failed { Err("the job failed".into()) } else { Ok(()) };
                        }
                        ToWorker::Heartbeat | ToWorker::Registered | ToWorker::Refused { .. } => {}
                    }
                }
                _ = cfg.stop.requested() => {
                    // Leave first, so the coordinator names the cause before other workers
                    // report their broken data channels; then stop the subtasks (no commit
                    // after this point: pending sink parts stay pending for the restore).
                    let reason = format!("it left on {}", cfg.stop.signal_name().unwrap_or("request"));
                    let leaving = ToCoordinator::Leaving { reason };
                    let _ = tokio::time::timeout(Duration::from_secs(2), send(&mut conn, &leaving)).await;
                    if let Some(r) = running.take() {
                        r.cancel();
                    }
                    tracing::info!(target: "weir", "worker {} left the job; exiting", cfg.worker_id);
                    return Ok(());
                }
                Some(out) = out_rx.recv() => {
                    if send(&mut conn, &out).await.is_err() {
                        break;
                    }
                }
                _ = tick.tick() => {
                    let now = Instant::now();
                    last_seen = discount_stall(last_seen, stall_clock.check(now), now);
                    if is_lost(last_seen, now, cfg.heartbeat_timeout) {
                        tracing::warn!("coordinator heartbeat timed out");
                        break;
                    }
                    let counters = running.as_ref().map(|r| r.metrics.iter().map(|(t, m)| {
                        (*t, m.records_in.load(Ordering::Relaxed), m.records_out.load(Ordering::Relaxed), m.backpressured_ns.load(Ordering::Relaxed))
                    }).collect()).unwrap_or_default();
                    if send(&mut conn, &ToCoordinator::Heartbeat { counters }).await.is_err() {
                        break;
                    }
                }
            }
        }
        // The coordinator is gone: its attempt's subtasks must not keep running (a new
        // coordinator redeploys from the latest checkpoint).
        if let Some(r) = running.take() {
            r.cancel();
        }
    }
}

/// `WEIR_FAILPOINT=slow-restore` (tests): a deployment that restores waits 5 s first, as the
/// download of a large keyed state does; longer than the tests' heartbeat timeout.
fn slow_restore_failpoint() -> Option<Duration> {
    crate::failpoint::is_set("slow-restore").then_some(Duration::from_secs(5))
}

/// `WEIR_FAILPOINT=transient-restore-error` (tests): the first deployment of this worker that
/// restores fails with a transient storage error, as a restore from an unreachable S3 does.
fn transient_restore_error_failpoint(url: &str) -> Option<restore::RestoreError> {
    static FIRED: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);
    let set = crate::failpoint::is_set("transient-restore-error");
    (set && !FIRED.swap(true, Ordering::Relaxed)).then(|| {
        restore::RestoreError::Storage(storage::StorageError::S3 {
            path: url.to_string(),
            op: "GetObject",
            message: "request timed out (failpoint transient-restore-error)".into(),
        })
    })
}

/// Deploys the subtasks of `d` on this worker: restores their share of the restore point (the
/// keyed state files of their key groups, verified by checksum), wires their local and remote
/// channels, and starts them. Errors: the restore failed (permanent when the restore point is
/// corrupt, incompatible or refused: [`DeploymentError::restore`]), or any other step did
/// (transient).
async fn deploy(
    d: Deployment,
    inbound: &Arc<Mutex<Inbound>>,
    out: mpsc::UnboundedSender<ToCoordinator>,
    worker_id: &str,
    secret: &JobSecret,
    state_root: Option<&std::path::Path>,
) -> Result<Running, DeploymentError> {
    let job = job::parse_manifest(&d.manifest, &[]).map_err(|e| e.to_string())?;
    let s3 = S3Options::from(job.spec.s3.as_ref());
    // Only the chains of incremental checkpoints that hold this worker's key groups are read
    // (an incremental checkpoint's chains live in `../shared/`, which `load_url_owned` finds).
    let owned: Vec<KeyGroupRange> = d
        .tasks
        .iter()
        .map(|&task| key_group_range(task as u32 % job.parallelism, job.parallelism, job.max_parallelism))
        .collect();
    // Each attempt its own directory (an earlier attempt's subtasks may still be closing), and
    // each worker process its own (workers on one machine may share a state root): a worker
    // removes its cancelled attempt's directory whole, and a starting process sweeps a dead
    // worker's, never one holding a live worker's stores beside a dead one's.
    let run = format!("{}-a{}-p{}", d.run_id, d.attempt, std::process::id());
    let state_dir = crate::exec::local_state_dir(&job, state_root, &run)?;
    // A deployment failing from here on removes its directory (after the guard below has
    // dropped the early stores): stores restored into it would otherwise stay for as long as
    // this worker lives, one copy of its keyed state per failed attempt.
    let remove_on_failure = crate::state::local_dir::RemoveOnFailure::new(&state_dir);
    // The disk stores of this worker's subtasks are created while the restore point
    // downloads; the subtasks built below take them, and the guard drops any left untaken
    // (a deployment that fails first, or a subtask index of a stage without keyed state).
    let subtasks: std::collections::BTreeSet<u32> = d.tasks.iter().map(|&t| t as u32 % job.parallelism).collect();
    exec::create_disk_stores_early(&job, &state_dir, subtasks.iter().copied());
    crate::state::disk_memory::warn_if_over_limit(&job, subtasks.len() as u64);
    let _untaken_stores = crate::state::disk_store::DiscardEarlyOnDrop::new(&state_dir);
    if d.restore.is_some()
        && let Some(delay) = slow_restore_failpoint()
    {
        tokio::time::sleep(delay).await;
    }
    if let Some(url) = &d.restore
        && let Some(error) = transient_restore_error_failpoint(url)
    {
        return Err(DeploymentError::restore(error));
    }
    let snapshot = match &d.restore {
        Some(url) => Some(Arc::new(
            restore::load_url_owned(
                url,
                &s3,
                Some(&owned),
                // Only the stores of the aggregation subtasks this worker runs.
                &crate::checkpoint::native_restore::LocalKeyedStores::of_job(&job, &state_dir, |task| {
                    d.tasks.contains(&task)
                }),
            )
            .await
            .map_err(DeploymentError::restore)?,
        )),
        None => None,
    };
    // At-most-once: the log the coordinator named, in the checkpoint store it named.
    let (read_log, furthest_read) = match d.read_positions {
        Some(r) => {
            let store = storage::open(&r.store_url, &s3).await.map_err(|e| e.to_string())?;
            (Some((store, r.dir)), r.furthest)
        }
        None => (None, HashMap::new()),
    };
    let ctx = RunContext {
        job: Arc::new(job),
        s3: s3.clone(),
        snapshot,
        run_id: d.run_id.clone(),
        bytes_read: Arc::new(AtomicU64::new(0)),
        worker_id: Some(worker_id.to_string()),
        read_log,
        furthest_read,
        state_dir,
    };
    let p = ctx.job.parallelism as usize;
    let specs = task_specs(&ctx.job);
    let local: HashSet<usize> = d.tasks.iter().copied().collect();
    let stores = StoreCache::new(s3);
    let attempt = d.attempt;
    let mut handles = Vec::new();
    let (ev_tx, mut ev_rx) = mpsc::unbounded_channel::<TaskEvent>();

    // Inputs first: local pairs and inbound registrations, by the plan's exchanges (a
    // subtask's receivers by stage input, then upstream subtask, as `exec::prepare` wires them).
    let graph = exec::plan::plan_graph(&ctx.job);
    let mut local_senders: HashMap<(usize, usize), DataSender> = HashMap::new();
    let mut inputs: HashMap<usize, Vec<DataReceiver>> = HashMap::new();
    let mut registered = HashMap::new();
    // Unaligned checkpoints: priority lanes, local or across the data connections.
    let mut lanes = exec::lanes::worker_lanes(&ctx.job, &d.tasks);
    for &t in &d.tasks {
        for u in exec::plan::upstream_tasks(&graph, p, t) {
            let rx = if local.contains(&u) {
                let (tx, rx) = data_channel(CHANNEL_CAPACITY);
                local_senders.insert((u, t), tx);
                rx
            } else {
                // Credits of a remote channel are the network's, returned end to end.
                let (tx, rx, returned) = returned_channel();
                let priority = lanes.inbound.remove(&(u, t));
                let input = InboundChannel {
                    input: tx,
                    returned,
                    priority,
                };
                registered.insert((u, t), input);
                rx
            };
            inputs.entry(t).or_default().push(rx);
        }
    }
    {
        let mut ib = inbound.lock().expect("lock");
        ib.attempt = attempt;
        ib.channels = registered;
        ib.stores = stores.clone();
    }
    // Outputs: local senders or network writers.
    let mut outputs: HashMap<usize, Vec<DataSender>> = HashMap::new();
    for &t in &d.tasks {
        for dn in exec::plan::downstream_tasks(&graph, p, t) {
            let tx = match local_senders.remove(&(t, dn)) {
                Some(tx) => tx,
                None => {
                    let (tx, rx) = data_channel(CHANNEL_CAPACITY);
                    let addr = d
                        .locations
                        .get(dn)
                        .cloned()
                        .ok_or_else(|| format!("no location for task {dn}"))?;
                    let sender = ChannelSender {
                        up: t,
                        worker_id: worker_id.to_string(),
                        secret: secret.clone(),
                        label: format!("{} on worker {worker_id}", exec::subtask_label(&specs[t], p as u32)),
                        events: ev_tx.clone(),
                    };
                    let priority = lanes.outbound.remove(&(t, dn));
                    // A panic in the channel's writer (a bug) fails its subtask, naming it,
                    // instead of leaving the subtask's send to fail on a closed channel.
                    let (events, label) = (sender.events.clone(), sender.label.clone());
                    handles.push(tokio::spawn(async move {
                        let what = || format!("the data channel of subtask {label} to task {dn}");
                        let writing = write_channel(addr, attempt, sender, dn, rx, priority);
                        if let Err(error) = crate::exec::panics::catch_panic(what, writing).await {
                            let _ = events.send(TaskEvent::Failed { task: t, error });
                        }
                    }));
                    tx
                }
            };
            outputs.entry(t).or_default().push(tx);
        }
    }
    // Subtasks.
    let mut controls = HashMap::new();
    let mut metrics = Vec::new();
    let mut named_metrics = Vec::new();
    let mut starts = Vec::new();
    for &t in &d.tasks {
        let spec = specs.get(t).ok_or_else(|| format!("task {t} is not in the plan"))?;
        let (ctl_tx, ctl_rx) = mpsc::unbounded_channel();
        let built = exec::build_task(
            &ctx,
            spec,
            inputs.remove(&t).unwrap_or_default(),
            outputs.remove(&t),
            ctl_rx,
            ev_tx.clone(),
            lanes.tasks.remove(&t).unwrap_or_default(),
        )
        .await?;
        controls.insert(t, ctl_tx);
        named_metrics.push((spec.name.clone(), spec.subtask, built.metrics.clone()));
        metrics.push((t, built.metrics));
        starts.push(built.start);
    }
    drop(ev_tx);
    let subtasks = starts.into_iter().map(|s| s()).collect();
    handles.push(crate::exec::panics::spawn_vital(
        "the worker's subtask event forwarder",
        async move {
            while let Some(ev) = ev_rx.recv().await {
                let _ = out.send(ToCoordinator::Event {
                    attempt,
                    event: ev.into(),
                });
            }
        },
    ));
    tracing::info!(attempt = %attempt_label(attempt), tasks = ?d.tasks, "deployed subtasks");
    remove_on_failure.keep();
    Ok(Running {
        attempt,
        job: ctx.job.name.clone(),
        named_metrics,
        controls,
        subtasks,
        helpers: handles,
        metrics,
        stores,
        state_dir: ctx.state_dir.clone(),
    })
}
