//! `weir coordinator` (Flink's JobManager role): accepts worker registrations, assigns
//! subtasks to slots once enough are registered, deploys them, runs the checkpoint
//! coordinator over the network, serves the control API, and on the loss of a worker or the
//! failure of a subtask restarts the whole job from the latest completed checkpoint under the
//! restart strategy. Every deployment has an attempt number; messages of older attempts are
//! ignored and workers still running an older attempt are refused.

use super::fence::EpochFence;
use super::registry::{Registry, await_final_counters, serve_rpc, watch_heartbeats};
use super::restart::{self, RestartDecision, RestartPolicy};
use super::wire::*;
use crate::checkpoint::coordinator::{self as ckpt, Outcome, SavepointCommand, Shared};
use crate::checkpoint::read_positions;
use crate::checkpoint::restore::RestoreFrom;
use crate::control::api::JobState;
use crate::exec::messages::{Control, TaskEvent};
use crate::exec::task::TaskMetrics;
use crate::exec::{self, JobHandle, task_specs};
use crate::job::{self, Job};
use crate::security::secret;
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
    /// `--set` overrides (`--parallelism` among them, last).
    pub sets: Vec<String>,
    /// What set the parallelism, as errors name it.
    pub parallelism_source: crate::cli_parallelism::ParallelismSource,
    /// Where the values that restore errors concern came from (flags, `--set`, the manifest).
    pub origins: crate::job::origins::ValueOrigins,
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

/// Runs the coordinator. Returns when the job ends (with `exit_on_finish`) or fails to start.
pub async fn run(opts: CoordinatorOptions) -> Result<(), String> {
    let mut job: Job = crate::cli_parallelism::check_parallelism(
        job::load_manifest(&opts.job_file, &opts.sets),
        &opts.parallelism_source,
        crate::cli_parallelism::Runner::Distributed,
    )
    .map_err(|e| format!("{}: {e}", opts.job_file.display()))?;
    job.origins = opts.origins.clone();
    let manifest = render_manifest(&opts.job_file, &opts.sets)?;
    // Both ports before the epoch claim: a second coordinator started on the same ports by
    // mistake fails without fencing out the running one.
    let api_listener = crate::control::server::bind(&opts.listen).await?;
    let rpc = TcpListener::bind(&opts.rpc_listen)
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", opts.rpc_listen))?;
    let s3 = S3Options::from(job.spec.s3.as_ref());
    let store = storage::open(&exec::storage_url(&job, opts.checkpoint_dir.as_deref()), &s3)
        .await
        .map_err(|e| e.to_string())?;
    // A directory another StreamJob owns is refused before anything is written there.
    let stream_job = job.namespace.as_ref().map(|ns| format!("{ns}/{}", job.name));
    crate::checkpoint::owner::check_coordinator(
        &store,
        &job.name,
        exec::storage_field(opts.checkpoint_dir.as_deref()),
        stream_job.as_deref(),
    )
    .await
    .map_err(|e| e.to_string())?;
    // A second coordinator of the job on the same local storage is refused before it claims
    // an epoch (which would fence out the running one); held until this function returns.
    let holder = format!("weir coordinator (pid {}, run {})", std::process::id(), opts.run_id);
    let run_lock = exec::lock_local_storage(&job, opts.checkpoint_dir.as_deref(), &holder)?;
    let fence = Arc::new(EpochFence::claim(store.clone(), &job.name).await?);
    tracing::info!(epoch = fence.epoch(), "coordinator epoch claimed");
    let specs = task_specs(&job);
    let n_tasks = specs.len();
    let p = job.parallelism as usize;
    let metrics: Vec<Arc<TaskMetrics>> = specs.iter().map(|_| Arc::new(TaskMetrics::default())).collect();
    let shared = Arc::new(Mutex::new(Shared::new()));
    shared.lock().expect("lock").suspend = opts.stop.token();
    // Past every id an earlier coordinator process reserved (triggered or about to be), visible
    // in the store or not (`fence.rs`).
    shared.lock().expect("lock").next_snapshot_id = fence.first_unreserved();
    let (cmd_tx, mut cmd_rx) = mpsc::unbounded_channel::<SavepointCommand>();
    let handle = JobHandle {
        job: job.name.clone(),
        job_id: opts.run_id.clone(),
        // The run's own until an attempt restores a checkpoint of an earlier run, whose lineage
        // every attempt and restarted coordinator of the run then continues.
        lineage_id: Arc::new(Mutex::new(opts.run_id.clone())),
        parallelism: job.parallelism,
        max_parallelism: Arc::new(job.max_parallelism.into()),
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
        started_at: std::time::Instant::now(),
        outputs: exec::file_sink_paths(&job),
    };
    let secret = secret::for_server(opts.secret_file.as_deref())?;
    let auth = crate::control::auth::ControlAuth {
        secret: secret.clone(),
        protect_metrics: opts.protect_metrics,
    };
    let server = crate::control::server::serve_on(api_listener, handle.clone(), auth)?;
    let api = server.addr;
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
    crate::exec::panics::spawn_vital(
        "the coordinator's RPC listener",
        serve_rpc(rpc, registry.clone(), metrics.clone(), opts.heartbeat_interval, secret),
    );
    crate::exec::panics::spawn_vital(
        "the coordinator's heartbeat watch",
        watch_heartbeats(registry.clone(), opts.heartbeat_timeout),
    );

    let started = Instant::now();
    let mut restarts: Vec<Duration> = vec![];
    // The attempt's number (1, 2, ... for this coordinator, as users read it) and its id on
    // the wire, unique across coordinators ([`wire::attempt_id`]).
    let mut attempt_number = 0u64;
    loop {
        attempt_number += 1;
        let attempt = super::wire::attempt_id(fence.epoch(), attempt_number);
        // Every attempt applies the one restore rule to this run's lineage (see
        // `exec::restore_for_run`): the first start of the run restores `--restore`; a failover
        // or a restarted coordinator of the same run id, the newest snapshot of the lineage.
        if opts.stop.is_requested() {
            return suspended(&handle, &registry, attempt, server).await;
        }
        // A run that stopped with a savepoint is not deployed again, by a coordinator restarted
        // with its run id or by a failover after the savepoint completed (a worker lost while
        // the job finished stopping): running on from the savepoint would commit output that
        // the next deployment, restoring it, writes again.
        if stopped_with_savepoint(&job, &store, &opts.run_id).await? {
            shared.lock().expect("lock").state = JobState::Stopped;
            registry.lock().expect("lock").job_ended = true;
            drop(run_lock);
            if opts.exit_on_finish {
                end_workers(&registry, false).await;
                server.shutdown(Duration::from_secs(5)).await;
                return Ok(());
            }
            return serve_until_stopped(server, &opts.stop).await;
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
                registry.lock().expect("lock").job_ended = true;
                if let Outcome::Stopped(path) = &outcome {
                    tracing::info!(target: "weir", "job {} stopped with savepoint {path}", job.name);
                } else {
                    tracing::info!(target: "weir", "job {} finished", job.name);
                }
                await_final_counters(&registry, opts.heartbeat_interval).await;
                crate::summary::log_run_summary(&handle);
                // The run ended: another run of the job may use the storage now.
                drop(run_lock);
                if opts.exit_on_finish {
                    // Stopped or finished: until the stop's result, and those of the triggers
                    // the end left untaken, were read (at once when none).
                    tokio::select! {
                        _ = crate::control::server::linger_until_stop_delivered(&handle, Duration::from_secs(30)) => {}
                        _ = opts.stop.requested() => {}
                    }
                    end_workers(&registry, false).await;
                    server.shutdown(Duration::from_secs(5)).await;
                    return Ok(());
                }
                return serve_until_stopped(server, &opts.stop).await;
            }
            Err(failure) => {
                let mut failure = attempt_failure(&registry, attempt, failure).await;
                // A fenced coordinator never restarts: a newer one of the job runs, and an
                // attempt here would take ids and write files of its checkpoints.
                failure.permanent |= crate::checkpoint::coordinator::Fence::is_fenced(&*fence);
                let reason = failure.message;
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
                            attempt = attempt_number,
                            "attempt {attempt_number} failed: {reason}; restarting in {delay:?} from the latest checkpoint"
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
                        ckpt::job_failed_for_good(&shared, msg.clone());
                        registry.lock().expect("lock").job_ended = true;
                        crate::summary::log_run_summary(&handle);
                        drop(run_lock);
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

/// Whether run `run_id` of `job` stopped with a savepoint ([`lineage::run_end`]). When it did,
/// commits the savepoint's pending file-sink parts (2PC recovery, idempotent: the crash or
/// failure may have come before their commit; a Kafka sink's transaction is committed by the
/// next run, which restores the savepoint) and logs that the run is not deployed again.
/// Errors: the store, the savepoint or a commit cannot be read or written.
///
/// [`lineage::run_end`]: crate::checkpoint::lineage::run_end
async fn stopped_with_savepoint(job: &Job, store: &Store, run_id: &str) -> Result<bool, String> {
    use crate::checkpoint::lineage;
    let Some((id, lineage::RunEnd::Stopped)) = lineage::run_end(store, &job.name, run_id).await? else {
        return Ok(false);
    };
    let pointer = lineage::read_pointer(store, &job.name, id).await?;
    // As an attempt's restore on the coordinator: operator state only, keyed state is the
    // workers' (and no worker restores it here).
    let savepoint = crate::checkpoint::restore::load_url_owned(
        &pointer.url,
        &S3Options::from(job.spec.s3.as_ref()),
        None,
        &crate::checkpoint::native_restore::LocalKeyedStores::without_keyed_state(),
    )
    .await
    .map_err(|e| format!("savepoint {id} that stopped run {run_id}: {e}"))?;
    exec::commit_restored_sinks(job, &savepoint).await?;
    tracing::info!(
        target: "weir",
        "run {run_id} of job {} already stopped with savepoint {id} at {}: not deploying it again; a new run \
         restores that savepoint to go on",
        job.name,
        pointer.url
    );
    Ok(true)
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
    registry.lock().expect("lock").job_ended = true;
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
    crate::summary::log_run_summary(handle);
    Ok(())
}

/// The failure of `attempt` ([`super::failure::attempt_failure`]): permanent when the attempt's
/// own error is, or a worker reported a permanent deployment failure of it (a corrupt keyed
/// state file only that worker reads), led by it; otherwise transient, leading with its cause:
/// when the first failure is the symptom of a lost peer (a broken data channel), waits briefly
/// for the loss of the worker behind it to be noticed and names that worker instead.
async fn attempt_failure(
    registry: &Arc<Mutex<Registry>>,
    attempt: u64,
    first_failure: exec::StartError,
) -> exec::StartError {
    if super::failure::is_peer_loss_symptom(&first_failure.message) {
        let deadline = Instant::now() + Duration::from_millis(500);
        while registry.lock().expect("lock").lost.is_empty() && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
    let (lost, permanent_deployment_failures) = {
        let r = registry.lock().expect("lock");
        (r.lost.clone(), r.permanent_deployment_failures_of(attempt))
    };
    let failure = super::failure::attempt_failure(&first_failure, &lost, &permanent_deployment_failures);
    if failure.message != first_failure.message {
        tracing::info!(first_failure = %first_failure.message, "a symptom of the attempt's cause");
    }
    failure
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

/// The manifest workers receive for `restored` (the coordinator's job after its restore): with
/// `spec.maxParallelism` set when the restore adopted the restore point's, so workers compute
/// the same key groups; `manifest` unchanged otherwise.
fn with_max_parallelism(manifest: &str, job: &Job, restored: &Job) -> Result<String, String> {
    if restored.max_parallelism == job.max_parallelism {
        return Ok(manifest.to_string());
    }
    let mut doc: serde_yaml::Value = serde_yaml::from_str(manifest).map_err(|e| e.to_string())?;
    job::apply_override(&mut doc, &format!("spec.maxParallelism={}", restored.max_parallelism))
        .map_err(|e| e.to_string())?;
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
    // Without `spec.maxParallelism` the job takes the restore point's (`exec::adopt_max_parallelism`),
    // and so do the workers: their manifest then sets it.
    let mut restored_job = job.clone();
    let (snapshot, first_id) = exec::restore_for_run(
        &mut restored_job,
        store,
        from,
        Some(&opts.run_id),
        // The coordinator runs no subtask and needs no keyed state: the files of incremental
        // keyed handles (chains, native stores) are not downloaded here, only by the workers.
        &crate::checkpoint::native_restore::LocalKeyedStores::without_keyed_state(),
    )
    .await?;
    let manifest = &with_max_parallelism(manifest, job, &restored_job).map_err(|message| exec::StartError {
        message,
        permanent: true,
    })?;
    let job = &restored_job;
    // Past every id an earlier attempt of this process triggered, or an earlier process
    // reserved, visible in the store or not.
    let first_id = first_id.max(handle.shared.lock().expect("lock").next_snapshot_id);
    handle.max_parallelism.store(job.max_parallelism, Ordering::Relaxed);
    let restore_url = snapshot.as_ref().map(|s| s.url.clone());
    // A restored checkpoint's lineage continues (the operator's last-state redeploys pass one
    // by URL under a new run id), so retention retires the deployments before.
    let lineage = crate::checkpoint::decide::run_lineage(
        &opts.run_id,
        snapshot
            .as_ref()
            .map(|s| (s.metadata.kind, s.metadata.run_id.as_deref())),
        *from == RestoreFrom::Latest,
    );
    *handle.lineage_id.lock().expect("lock") = lineage.clone();
    // At-most-once: where sources resume (the furthest positions any earlier attempt read) and
    // where this attempt's sources record theirs. Read after the previous attempt was cancelled
    // and the restart delay passed, so its sources no longer write.
    let read_positions = read_positions::for_cluster_attempt(job, store, from, &opts.run_id, snapshot.as_ref())
        .await
        .map_err(transient)?
        .map(|(dir, furthest)| DeployedReadPositions {
            store_url: store.url(""),
            dir,
            furthest,
        });
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
        r.permanent_deployment_failures.clear();
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
                run_id: format!("{}-e{}-a{}", opts.run_id, fence.epoch(), attempt & 0xffff_ffff),
                tasks,
                locations: locations.clone(),
                read_positions: read_positions.clone(),
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
    tracing::info!(attempt = %attempt_label(attempt), restore = ?restore_url, first_checkpoint = first_id, "deployed");
    // Control messages go to the worker running each task.
    let mut controls = Vec::with_capacity(n_tasks);
    let mut forwarders = Vec::with_capacity(n_tasks);
    for (t, worker) in worker_of.iter().enumerate() {
        let (tx, mut rx) = mpsc::unbounded_channel::<Control>();
        controls.push(tx);
        let registry = registry.clone();
        let worker = worker.clone();
        let what = format!("the coordinator's control forwarder of task {t}");
        forwarders.push(crate::exec::panics::spawn_vital(what, async move {
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
    let sources = exec::plan::source_tasks(&exec::plan::plan_graph(job), p);
    let mut cfg = exec::coordinator_config(
        job,
        store.clone(),
        first_id,
        sources,
        (&opts.run_id, &lineage),
        snapshot.as_ref(),
    );
    cfg.fence = Some(fence.clone());
    drop(ev_tx);
    let outcome = ckpt::run(cfg, controls, ev_rx, commands, handle.shared.clone()).await;
    // `controls` is dropped: let the forwarders hand every queued message (the final
    // checkpoint's `Complete` among them) to the workers' connections before the caller sends
    // `JobEnded` on the same connections, so a worker never exits ahead of a commit.
    let drained = futures::future::join_all(forwarders);
    if tokio::time::timeout(Duration::from_secs(5), drained).await.is_err() {
        tracing::warn!(attempt = %attempt_label(attempt), "control messages still queued 5 s after the attempt ended");
    }
    outcome.map_err(transient)
}
