//! Runs a job in one process: plan the stages, restore, spawn every subtask, run the
//! checkpoint coordinator and the control API, and wait for the end.
//!
//! Plan ([`plan`]): the dataflow is cut at sources, unions, joins and branches and after each
//! `keyBy`; each piece is a stage of chained operators run by `parallelism` subtasks, and
//! stages are joined by edges, each with its own bounded channels: a keyed exchange (every
//! upstream subtask to every downstream subtask) or a forward one (subtask k to subtask k).

pub mod alignment;
mod build;
pub mod channel;
pub mod channel_state;
pub mod inputs;
pub mod lanes;
pub mod messages;
pub mod outputs;
pub mod panics;
pub mod plan;
pub mod send;
pub mod split_watermarks;
pub mod task;
pub mod watermark;

use crate::checkpoint::coordinator::{self, CoordinatorConfig, Outcome, SavepointCommand, Shared};
use crate::checkpoint::decide;
use crate::checkpoint::max_parallelism::{MaxParallelismOnRestore, max_parallelism_on_restore};
use crate::checkpoint::read_positions;
use crate::checkpoint::restore::{self, LoadedSnapshot, RestoreFrom};
use crate::checkpoint::run_lock::RunLock;
use crate::job::{Job, OperatorKind};
use crate::operators::sink::commit_restored;
use crate::state::local_dir;
use crate::storage::{self, S3Options};
pub use build::{BuildError, BuiltTask, build_task, create_disk_stores_early};
pub use lanes::PriorityLanes;
use messages::{Control, TaskEvent};
use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use task::TaskMetrics;
use tokio::sync::mpsc;

/// Capacity of each data channel, in batches.
pub const CHANNEL_CAPACITY: usize = 8;

/// Defaults of `weir run` (a fresh clone, no flags).
pub const DEFAULT_CHECKPOINT_STORAGE: &str = "./weir-data/checkpoints";
/// Default savepoint directory.
pub const DEFAULT_SAVEPOINT_DIR: &str = "./weir-data/savepoints";

/// How to run.
#[derive(Debug, Clone)]
pub struct RunOptions {
    /// Restore point.
    pub restore: RestoreFrom,
    /// Overrides `spec.checkpointing.storage`.
    pub checkpoint_storage: Option<String>,
    /// Root of the disk state backend's local directories (`--state-dir`; `None`: the
    /// default of [`crate::state::local_dir::root`]).
    pub state_dir: Option<std::path::PathBuf>,
}

/// A running job's handle for the control API.
#[derive(Clone)]
pub struct JobHandle {
    /// Job name.
    pub job: String,
    /// This run's id (names its sink files; [`crate::control::api::JobStatus::job_id`]).
    pub job_id: String,
    /// The lineage its checkpoints belong to ([`crate::control::api::JobStatus::lineage_id`]);
    /// a cluster coordinator's attempt sets it when it restores ([`decide::run_lineage`]).
    pub lineage_id: Arc<Mutex<String>>,
    /// Parallelism.
    pub parallelism: u32,
    /// Max parallelism: the job's, or the restore point's it adopted
    /// ([`adopt_max_parallelism`]; a coordinator's attempt sets it when it restores).
    pub max_parallelism: Arc<std::sync::atomic::AtomicU32>,
    /// Coordinator state.
    pub shared: Arc<Mutex<Shared>>,
    /// Savepoint commands.
    pub commands: mpsc::UnboundedSender<SavepointCommand>,
    /// Per-task counters: (task name, subtask, counters).
    pub tasks: Vec<(String, u32, Arc<TaskMetrics>)>,
    /// Bytes read by file sources (progress).
    pub bytes_read: Arc<AtomicU64>,
    /// Where each task runs (distributed runtime), by task index.
    pub locations: Arc<Mutex<HashMap<usize, String>>>,
    /// Registered workers (distributed runtime).
    pub workers: Arc<Mutex<Vec<crate::control::api::WorkerStatus>>>,
    /// Restarts by the restart strategy.
    pub restarts: Arc<std::sync::atomic::AtomicU32>,
    /// When this process started the run (elapsed time, uptime).
    pub started_at: std::time::Instant,
    /// Output directories of the job's file sinks.
    pub outputs: Vec<String>,
}

/// Output directories of the file sinks of `job`, in step order.
pub fn file_sink_paths(job: &Job) -> Vec<String> {
    job.operators
        .iter()
        .filter_map(|o| match &o.kind {
            OperatorKind::FileSink(s) => Some(s.path.clone()),
            _ => None,
        })
        .collect()
}

/// Groups operator indexes into stages ([`plan::plan_graph`]); for a single-line job, cut
/// after each `keyBy`.
pub fn plan_stages(job: &Job) -> Vec<Vec<usize>> {
    plan::plan_graph(job).into_iter().map(|s| s.operators).collect()
}

fn s3_options(job: &Job) -> S3Options {
    S3Options::from(job.spec.s3.as_ref())
}

/// Prepared job: restored, with the coordinator and tasks ready to spawn.
pub struct Prepared {
    /// Handle for the control API.
    pub handle: JobHandle,
    run: Box<dyn FnOnce() -> tokio::task::JoinHandle<Result<Outcome, String>> + Send>,
    /// Held until the run ends: no other run of the job in its local checkpoint storage.
    run_lock: Option<RunLock>,
}

impl Prepared {
    /// Starts everything and waits for the job to end.
    pub async fn run(self) -> Result<Outcome, String> {
        let Prepared { run, run_lock, .. } = self;
        let outcome = run()
            .await
            .map_err(|e| panics::join_failure("the checkpoint coordinator", e))?;
        drop(run_lock);
        outcome
    }
}

/// The lock of `job`'s local checkpoint storage ([`RunLock`]), recording `holder`; `None`
/// for S3. `override_url` is `--checkpoint-dir`. Errors: another run holds it, naming the
/// setting.
pub fn lock_local_storage(job: &Job, override_url: Option<&str>, holder: &str) -> Result<Option<RunLock>, String> {
    let field = storage_field(override_url);
    let url = storage_url(job, override_url);
    match storage::local_path(&url) {
        Ok(Some(dir)) => RunLock::acquire(Path::new(dir), &job.name, holder, field).map(Some),
        Ok(None) => Ok(None),
        Err(e) => Err(format!("{field}: {e}")),
    }
}

/// The restore-time context every process of a run shares.
#[derive(Clone)]
pub struct RunContext {
    /// The job.
    pub job: Arc<Job>,
    /// S3 settings.
    pub s3: S3Options,
    /// The restore point, loaded and verified.
    pub snapshot: Option<Arc<LoadedSnapshot>>,
    /// This run's id (names sink parts, so they never collide across runs).
    pub run_id: String,
    /// Bytes read by file sources of this process.
    pub bytes_read: Arc<AtomicU64>,
    /// The worker running these subtasks (distributed runtime), named in failure messages.
    pub worker_id: Option<String>,
    /// At-most-once: the store and directory of the read-position log source subtasks write
    /// before they emit ([`crate::checkpoint::read_positions`]); `None` in other modes.
    pub read_log: Option<(storage::Store, String)>,
    /// At-most-once restore: the positions recorded in the read-position log, by source uid,
    /// merged with the restore point's so each split resumes at its furthest read position.
    pub furthest_read: HashMap<String, Vec<Vec<u8>>>,
    /// This run's directory for disk keyed state (`spec.stateBackend: disk`), created by
    /// [`crate::state::local_dir::prepare_run_dir`] when the job uses it.
    pub state_dir: std::path::PathBuf,
}

/// One subtask of the plan.
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub struct TaskSpec {
    /// Global index: `stage × parallelism + subtask`.
    pub index: usize,
    /// Stage index.
    pub stage: usize,
    /// Subtask index within the stage.
    pub subtask: u32,
    /// The chained operators' uids joined by ` -> `.
    pub name: String,
}

/// Every subtask of the job, in index order.
pub fn task_specs(job: &Job) -> Vec<TaskSpec> {
    let mut out = vec![];
    for (stage, ops) in plan_stages(job).iter().enumerate() {
        let name = ops
            .iter()
            .map(|&i| job.operators[i].uid.as_str())
            .collect::<Vec<_>>()
            .join(" -> ");
        for subtask in 0..job.parallelism {
            out.push(TaskSpec {
                index: stage * job.parallelism as usize + subtask as usize,
                stage,
                subtask,
                name: name.clone(),
            });
        }
    }
    out
}

/// A subtask as failure messages name it (Flink's style): `counts -> output (2/4)`, 1-based.
pub fn subtask_label(spec: &TaskSpec, parallelism: u32) -> String {
    format!("{} ({}/{parallelism})", spec.name, spec.subtask + 1)
}

/// The setting that chose the checkpoint storage, as errors name it: `--checkpoint-dir` when
/// given (`override_url`), else `spec.checkpointing.storage`.
pub fn storage_field(override_url: Option<&str>) -> &'static str {
    if override_url.is_some() {
        "--checkpoint-dir"
    } else {
        "spec.checkpointing.storage"
    }
}

/// The job's savepoint directory: `spec.savepoints.directory`, else [`DEFAULT_SAVEPOINT_DIR`].
pub fn savepoint_dir(job: &Job) -> String {
    job.spec
        .savepoints
        .as_ref()
        .and_then(|s| s.directory.clone())
        .unwrap_or_else(|| DEFAULT_SAVEPOINT_DIR.to_string())
}

/// Checkpoint storage URL of a job: the override, then `spec.checkpointing.storage`, then the
/// default.
pub fn storage_url(job: &Job, override_url: Option<&str>) -> String {
    override_url
        .map(str::to_string)
        .or_else(|| job.spec.checkpointing.storage.clone())
        .unwrap_or_else(|| DEFAULT_CHECKPOINT_STORAGE.to_string())
}

/// Why a run could not start.
#[derive(Debug, Clone, PartialEq)]
pub struct StartError {
    /// The user-facing message.
    pub message: String,
    /// Repeating the start cannot help (a refused or incompatible restore point): the job is
    /// FAILED at once rather than restarted.
    pub permanent: bool,
}

impl From<StartError> for String {
    fn from(e: StartError) -> String {
        e.message
    }
}

impl std::fmt::Display for StartError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.message)
    }
}

/// Resolves and verifies the restore point by the one restore rule, checks it against the job,
/// commits the pending sink parts it records (2PC recovery), and computes the first snapshot id
/// of the run.
///
/// `run_id`: the run of a coordinator whose attempts and restarts share one lineage. Its
/// [`LineageRecord`](crate::checkpoint::decide::LineageRecord) is read (a failover or a restarted
/// coordinator restores the newest snapshot of the lineage) or written (a new run). `None` for
/// `weir run`, whose process is its only attempt.
///
/// A job without `spec.maxParallelism` takes the restore point's max parallelism
/// ([`adopt_max_parallelism`]), so `job` may change; errors name the fields when it cannot.
pub async fn restore_for_run(
    job: &mut Job,
    store: &storage::Store,
    from: &RestoreFrom,
    run_id: Option<&str>,
    stores: &crate::checkpoint::native_restore::LocalKeyedStores,
) -> Result<(Option<LoadedSnapshot>, u64), StartError> {
    use crate::checkpoint::lineage;
    let transient = |message: String| StartError {
        message,
        permanent: false,
    };
    let s3 = s3_options(job);
    let recorded = match run_id {
        Some(run) => lineage::read_lineage(store, &job.name, run).await.map_err(transient)?,
        None => None,
    };
    let snapshot = restore::resolve(store, &job.name, from, &s3, recorded.as_ref(), stores)
        .await
        .map_err(|e| StartError {
            message: e.to_string(),
            permanent: e.is_permanent(),
        })?;
    if let (Some(record), Some(s)) = (&recorded, &snapshot) {
        tracing::info!(
            run = %record.run_id,
            snapshot = %s.url,
            "resuming this run from its newest snapshot"
        );
    }
    if let Some(s) = &snapshot {
        // Before anything is committed: a restore point restored by URL may come from
        // anywhere, and ids past this one are taken next.
        if s.metadata.checkpoint_id >= crate::cluster::fence::MAX_RESERVATION {
            return Err(StartError {
                message: format!(
                    "the restore point {} has snapshot id {}, past the largest Weir uses ({}): it was not \
                     written by Weir; restore another snapshot (and remove this one if it is in the job's \
                     checkpoint storage, where `--restore latest` and restarts find it)",
                    s.url,
                    s.metadata.checkpoint_id,
                    crate::cluster::fence::MAX_RESERVATION
                ),
                permanent: true,
            });
        }
        adopt_max_parallelism(job, s).map_err(|message| StartError {
            message,
            permanent: true,
        })?;
        restore::check(s, job).map_err(|e| StartError {
            message: e.to_string(),
            permanent: true,
        })?;
        tracing::info!(from = %s.url, checkpoint = s.metadata.checkpoint_id, "restoring");
        commit_restored_sinks(job, s).await.map_err(transient)?;
    }
    let seen = lineage::with_retries(&store.url(&job.name), || lineage::list_snapshots(store, &job.name))
        .await
        .map_err(|e| transient(e.to_string()))?;
    if let (RestoreFrom::Path(_), Some(s)) = (from, &snapshot)
        && s.metadata.job_name == job.name
        && let Some(warning) = decide::older_restore_warning(s.metadata.checkpoint_id, &seen)
    {
        tracing::warn!(from = %s.url, "{warning}");
    }
    let mut first_id = decide::next_snapshot_id(snapshot.as_ref().map(|s| s.metadata.checkpoint_id), &seen);
    // Past the recorded newest completed snapshot too, whose directory or pointer may be gone
    // (deleted by hand): its id is never used again (`checkpoint/completed_mark.rs`).
    let record = crate::checkpoint::completed_mark::mark_path(&job.name);
    let newest_recorded = lineage::with_retries(&store.url(&record), || {
        crate::checkpoint::completed_mark::read(store, &job.name)
    })
    .await
    .map_err(|e| transient(e.to_string()))?;
    let recorded_id = newest_recorded.map(|mark| mark.id);
    if let Some(id) = recorded_id {
        first_id = first_id.max(id.saturating_add(1));
    }
    // Past the checkpoint directories no snapshot listing shows: a local run killed while it
    // wrote a checkpoint's first file leaves `chk-<n>/` holding only that write's temporary
    // file, beside which this run's checkpoint n would be written (helper-101: completed
    // checkpoints held a dead run's `.tmp` files). Retention deletes such a directory once a
    // newer checkpoint completes.
    let directories = store
        .list_directories(&format!("{}/", job.name))
        .await
        .map_err(|e| transient(e.to_string()))?;
    let cut_off = crate::checkpoint::retention::unlisted_checkpoint_directories(&directories, &seen);
    if let Some(highest) = cut_off.iter().max() {
        first_id = first_id.max(highest.saturating_add(1));
    }
    if first_id > crate::cluster::fence::MAX_RESERVATION {
        return Err(StartError {
            message: format!(
                "the checkpoint storage of job {} ({}) holds a snapshot directory (chk-<id> or sp-<id>) with id \
                 {}, past the largest Weir uses ({}): it was not written by Weir; remove it",
                job.name,
                store.url(&job.name),
                seen.iter().map(|s| s.id).chain(cut_off).max().unwrap_or(first_id),
                crate::cluster::fence::MAX_RESERVATION
            ),
            permanent: true,
        });
    }
    // Past the ids a cluster coordinator of the job reserved (`cluster/fence.rs`): a `weir run`
    // after a cluster run, whose workers may still upload a checkpoint nothing shows yet.
    let reserved = crate::cluster::fence::highest_reservation(store, &job.name)
        .await
        .map_err(transient)?;
    first_id = first_id.max(reserved);
    if let Some(run) = run_id {
        // Past this run's end markers too: a stop whose savepoint never completed left a
        // marker of an id no snapshot holds (`decide::run_ended`).
        let markers = lineage::end_markers(store, &job.name, run).await.map_err(transient)?;
        if let Some(newest) = markers.iter().map(|(id, _)| *id).max() {
            first_id = first_id.max(newest + 1);
        }
    }
    if let (Some(run), None) = (run_id, &recorded) {
        let record = crate::checkpoint::decide::LineageRecord {
            run_id: run.to_string(),
            first_id,
            root: snapshot.as_ref().map(|s| s.url.clone()),
        };
        lineage::record_lineage(store, &job.name, &record)
            .await
            .map_err(transient)?;
    }
    Ok((snapshot, first_id))
}

/// Gives `job` the max parallelism of the snapshot it restores when `spec.maxParallelism` is
/// not set, as Flink does ([`max_parallelism_on_restore`]), and says so in the log.
///
/// Errors: `spec.maxParallelism` set to another value than the snapshot's, or a parallelism
/// above the adopted max parallelism (messages name the fields, both values and what to do).
pub fn adopt_max_parallelism(job: &mut Job, s: &LoadedSnapshot) -> Result<(), String> {
    let decision = max_parallelism_on_restore(
        job.spec.max_parallelism,
        job.max_parallelism,
        job.parallelism,
        s.metadata.max_parallelism,
        &s.url,
        &job.origins,
    )?;
    if let MaxParallelismOnRestore::Adopt { derived, restored } = decision {
        tracing::info!(
            target: "weir",
            "maxParallelism {restored} adopted from the restore point {} (spec.maxParallelism is not set; \
             the default for parallelism {} would be {derived}): keyed state keeps its {restored} key groups",
            s.url,
            job.parallelism
        );
        job.max_parallelism = restored;
    }
    Ok(())
}

/// Commits the pending parts a snapshot records for every file sink of the job, and for every
/// file sink of the snapshot the job no longer has (a uid renamed or a step removed, restored
/// with `allowNonRestoredState`): its parts are output the snapshot's completion committed to,
/// and each records the directory it was written to. Idempotent.
///
/// Errors: a part of a file sink the job still has that cannot be committed, naming it. A
/// part of a file sink the job no longer has that cannot be committed is a warning, not an
/// error (the restore allowed that sink's state to be dropped).
pub async fn commit_restored_sinks(job: &Job, s: &LoadedSnapshot) -> Result<(), String> {
    let s3 = s3_options(job);
    for op in job.operators.iter() {
        if let OperatorKind::FileSink(spec) = &op.kind {
            let items = restore::operator_restore(Some(s), &op.uid, None).operator_state;
            let n = commit_restored(&spec.path, &items, &s3).await.map_err(|e| e.0)?;
            if n > 0 {
                tracing::info!(operator = %op.uid, parts = n, "committed pending parts of the restore point");
            }
        }
    }
    let file_sink_kind = "sink-file";
    let still_a_file_sink = |uid: &str| {
        job.operators
            .iter()
            .any(|j| j.uid == uid && matches!(j.kind, OperatorKind::FileSink(_)))
    };
    for dropped in s
        .metadata
        .operators
        .iter()
        .filter(|o| o.kind == file_sink_kind && !still_a_file_sink(&o.uid))
    {
        // The job no longer writes this sink (step removed, uid renamed, or the uid now names
        // another kind of step; `allowNonRestoredState`): its parts past the commit point are
        // committed where they were written. If that fails (the location is gone, other
        // credentials), the restore goes on, as Flink drops a removed operator's state: the
        // user chose to drop it, and a restart would fail the same way.
        let items = restore::operator_restore(Some(s), &dropped.uid, None).operator_state;
        match commit_restored("", &items, &s3).await {
            Ok(0) => {}
            Ok(n) => {
                tracing::info!(operator = %dropped.uid, parts = n, "committed pending parts of a file sink the job no longer has")
            }
            Err(e) => tracing::warn!(
                operator = %dropped.uid,
                restore_point = %s.url,
                "file sink `{}` is no longer in the job and its pending parts could not be committed, so their records are not in its output: {}",
                dropped.uid,
                e.0
            ),
        }
    }
    Ok(())
}

/// The run directory of disk keyed state under `root` (`--state-dir`), prepared (stale
/// siblings swept, created) when the job uses `stateBackend: disk`. Errors: it cannot be
/// written, naming it and the flag.
pub fn local_state_dir(job: &Job, root: Option<&std::path::Path>, run: &str) -> Result<std::path::PathBuf, String> {
    let dir = local_dir::run_dir(&local_dir::root(root), &job.name, run);
    if job.spec.state_backend == crate::job::StateBackend::Disk {
        local_dir::prepare_run_dir(&dir)?;
    }
    Ok(dir)
}

/// The restored checkpoint's metadata when the run claims it
/// ([`restore_mode`](crate::checkpoint::restore_mode::restore_mode)): a checkpoint of job `job`
/// in the checkpoint `store` new checkpoints go to. `None` for no restore, a savepoint, or a
/// checkpoint elsewhere (logged: its files are all uploaded again by the first checkpoint).
pub fn claimed_restore(
    job: &str,
    store: &storage::Store,
    snapshot: Option<&LoadedSnapshot>,
) -> Option<crate::state::snapshot::CheckpointMetadata> {
    use crate::checkpoint::restore_mode::{RestoreMode, RestoredSnapshot, own_checkpoint_url, restore_mode};
    let s = snapshot?;
    let restored = RestoredSnapshot {
        kind: s.metadata.kind,
        checkpoint_id: s.metadata.checkpoint_id,
        url: &s.url,
    };
    let own = own_checkpoint_url(store, job, s.metadata.checkpoint_id);
    match restore_mode(restored, &own) {
        RestoreMode::Claim { .. } => Some(s.metadata.clone()),
        RestoreMode::NoClaim => {
            tracing::debug!(
                restored = %s.url,
                "restore mode: no claim (not one of this job's checkpoints in its checkpoint storage): \
                 the first incremental checkpoint shares no file with it"
            );
            None
        }
    }
}

/// The coordinator's configuration for a job; `run_id`: this run's (its end markers),
/// `lineage`: the lineage its snapshots join ([`decide::run_lineage`]); `restored`: the
/// snapshot this run restored (its checkpoint becomes the first barriers' confirmed one when
/// the run claims it, [`claimed_restore`]).
pub fn coordinator_config(
    job: &Job,
    store: storage::Store,
    first_id: u64,
    sources: Vec<usize>,
    (run_id, lineage): (&str, &str),
    restored: Option<&LoadedSnapshot>,
) -> CoordinatorConfig {
    let restored_base = claimed_restore(&job.name, &store, restored);
    CoordinatorConfig {
        job: job.name.clone(),
        parallelism: job.parallelism,
        max_parallelism: job.max_parallelism,
        interval: job.checkpoint_interval,
        timeout: job.checkpoint_timeout,
        min_pause: job.min_pause,
        retained: job.spec.checkpointing.retained as usize,
        store,
        savepoint_dir: savepoint_dir(job),
        s3: s3_options(job),
        tasks: task_specs(job).len(),
        sources,
        first_id,
        run_id: run_id.to_string(),
        lineage: lineage.to_string(),
        fence: None,
        tolerable_failures: job.spec.checkpointing.tolerable_failed_checkpoints,
        incremental: job.spec.checkpointing.incremental,
        restored_base,
        checkpoint_at_suspend: crate::checkpoint::suspend::checkpoints_at_suspend(job.spec.checkpointing.mode),
    }
}

/// Resolves the restore point, validates it, commits its pending sink parts, and wires every
/// subtask in this process with local bounded channels. Errors are user-facing messages.
pub async fn prepare(mut job: Job, opts: RunOptions) -> Result<Prepared, String> {
    let s3 = s3_options(&job);
    let store = storage::open(&storage_url(&job, opts.checkpoint_storage.as_deref()), &s3)
        .await
        .map_err(|e| e.to_string())?;
    let run_id = format!("{:016x}", rand::random::<u64>());
    // Before the run lock: a refused run leaves the directory as it was.
    let field = storage_field(opts.checkpoint_storage.as_deref());
    crate::checkpoint::owner::check_unowned(&store, &job.name, field)
        .await
        .map_err(|e| e.to_string())?;
    let run_lock = lock_local_storage(
        &job,
        opts.checkpoint_storage.as_deref(),
        &format!("weir run (pid {}, run {run_id})", std::process::id()),
    )?;
    let state_dir = local_state_dir(&job, opts.state_dir.as_deref(), &run_id)?;
    // The disk stores are created while the restore point downloads (their `fsync`s would
    // otherwise come after it, before the first record).
    // The subtasks built below take them; a start that fails first drops them (the guard).
    build::create_disk_stores_early(&job, &state_dir, 0..job.parallelism);
    crate::state::disk_memory::warn_if_over_limit(&job, u64::from(job.parallelism));
    let _untaken_stores = crate::state::disk_store::DiscardEarlyOnDrop::new(&state_dir);
    // A native checkpoint of a subtask's own key groups becomes its store (the fast path,
    // `checkpoint/native_restore.rs`).
    let stores = crate::checkpoint::native_restore::LocalKeyedStores::of_job(&job, &state_dir, |_| true);
    let (snapshot, first_id) = restore_for_run(&mut job, &store, &opts.restore, None, &stores).await?;
    // The lineage continues when this run restored one of the job's own checkpoints, so
    // retention keeps managing them; a fresh run (or one from a savepoint) starts a new one.
    // `--restore latest` continues the lineage of whatever it picked (a checkpoint or a
    // non-stopping savepoint of that run).
    let lineage = decide::run_lineage(
        &run_id,
        snapshot
            .as_ref()
            .map(|s| (s.metadata.kind, s.metadata.run_id.as_deref())),
        opts.restore == RestoreFrom::Latest,
    );
    let (read_log, furthest_read) =
        read_positions::for_run(&job, &store, &opts.restore, &lineage, snapshot.is_some()).await?;
    let ctx = RunContext {
        job: Arc::new(job),
        s3,
        snapshot: snapshot.map(Arc::new),
        run_id,
        bytes_read: Arc::new(AtomicU64::new(0)),
        worker_id: None,
        read_log,
        furthest_read,
        state_dir,
    };
    let job = ctx.job.clone();
    let p = job.parallelism as usize;
    let specs = task_specs(&job);
    let (ev_tx, ev_rx) = mpsc::unbounded_channel::<TaskEvent>();
    let (cmd_tx, mut cmd_rx) = mpsc::unbounded_channel::<SavepointCommand>();
    // The channels of every edge, by global task index: a keyed exchange connects every
    // upstream subtask to every downstream one, a forward exchange subtask k to subtask k. A
    // downstream subtask's receivers are ordered by stage input, then upstream subtask; an
    // upstream subtask's senders by edge, then downstream subtask (`plan::downstream_tasks`).
    let graph = plan::plan_graph(&job);
    let mut by_pair: HashMap<(usize, usize), channel::DataReceiver> = HashMap::new();
    let mut senders: HashMap<usize, Vec<channel::DataSender>> = HashMap::new();
    for up in 0..specs.len() {
        for down in plan::downstream_tasks(&graph, p, up) {
            let (tx, rx) = channel::data_channel(CHANNEL_CAPACITY);
            senders.entry(up).or_default().push(tx);
            by_pair.insert((up, down), rx);
        }
    }
    let mut receivers: HashMap<usize, Vec<channel::DataReceiver>> = HashMap::new();
    for down in 0..specs.len() {
        for up in plan::upstream_tasks(&graph, p, down) {
            let rx = by_pair
                .remove(&(up, down))
                .ok_or_else(|| format!("no channel from task {up} to task {down} (a bug in the plan)"))?;
            receivers.entry(down).or_default().push(rx);
        }
    }
    let mut lanes = lanes::priority_lanes(&job);
    let mut controls = Vec::with_capacity(specs.len());
    let mut starts = Vec::with_capacity(specs.len());
    let mut task_metrics = Vec::with_capacity(specs.len());
    let mut sources = Vec::new();
    for spec in &specs {
        let (tx, rx) = mpsc::unbounded_channel::<Control>();
        controls.push(tx);
        let built = build_task(
            &ctx,
            spec,
            receivers.remove(&spec.index).unwrap_or_default(),
            senders.remove(&spec.index),
            rx,
            ev_tx.clone(),
            lanes.remove(&spec.index).unwrap_or_default(),
        )
        .await?;
        if built.is_source {
            sources.push(spec.index);
        }
        task_metrics.push((spec.name.clone(), spec.subtask, built.metrics));
        starts.push(built.start);
    }
    drop(ev_tx);
    let cfg = coordinator_config(
        &job,
        store,
        first_id,
        sources,
        (&ctx.run_id, &lineage),
        ctx.snapshot.as_deref(),
    );
    let shared = Arc::new(Mutex::new(Shared::new()));
    shared.lock().expect("lock").restored_from = ctx.snapshot.as_ref().map(|s| s.url.clone());
    let handle = JobHandle {
        job: job.name.clone(),
        job_id: ctx.run_id.clone(),
        lineage_id: Arc::new(Mutex::new(lineage.clone())),
        parallelism: job.parallelism,
        max_parallelism: Arc::new(job.max_parallelism.into()),
        shared: shared.clone(),
        commands: cmd_tx,
        tasks: task_metrics,
        bytes_read: ctx.bytes_read.clone(),
        locations: Arc::default(),
        workers: Arc::default(),
        restarts: Arc::default(),
        started_at: std::time::Instant::now(),
        outputs: file_sink_paths(&job),
    };
    let run = Box::new(move || {
        tokio::spawn(async move {
            let handles: Vec<_> = starts.into_iter().map(|s| s()).collect();
            let out = coordinator::run(cfg, controls, ev_rx, &mut cmd_rx, shared.clone()).await;
            if let Err(message) = &out {
                // `weir run` has no restart strategy: a failed attempt fails the job.
                coordinator::job_failed_for_good(&shared, message.clone());
                for h in &handles {
                    h.abort();
                }
            }
            for h in handles {
                let _ = h.await;
            }
            out
        })
    });
    Ok(Prepared { handle, run, run_lock })
}
