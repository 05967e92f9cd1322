//! Runs a job in one process: plan the stages, restore, spawn every subtask, run the
//! checkpoint coordinator and the control API, and wait for the end.
//!
//! Plan: the pipeline is cut after each `keyBy`; each piece is a stage of chained operators
//! run by `parallelism` subtasks, and consecutive stages are joined by a keyed exchange
//! (every upstream subtask has a bounded channel to every downstream subtask).

pub mod alignment;
pub mod channel;
pub mod channel_state;
pub mod inputs;
pub mod lanes;
pub mod messages;
pub mod plan;
pub mod send;
pub mod split_watermarks;
pub mod task;
pub mod watermark;

use crate::checkpoint::coordinator::{self, CoordinatorConfig, Outcome, SavepointCommand, Shared};
use crate::checkpoint::decide;
use crate::checkpoint::read_positions::{self, ReadPositionLog};
use crate::checkpoint::restore::{self, LoadedSnapshot, RestoreFrom};
use crate::job::{Job, OperatorKind};
use crate::operators::aggregate::{Aggregate, KeyedStateInit};
use crate::operators::discard::DiscardSink;
use crate::operators::sink::{FileSink, PrintSink, commit_restored};
use crate::operators::transform::{Filter, FlatMap, KeyBy, Map};
use crate::operators::window::WindowOperator;
use crate::operators::{StreamOperator, TaskError, source};
use crate::state::backend::BackendChoice;
use crate::state::key_group::key_group_range;
use crate::state::local_dir;
use crate::storage::{self, S3Options};
pub use lanes::PriorityLanes;
use messages::{Control, TaskEvent};
use std::collections::HashMap;
use std::sync::atomic::AtomicU64;
use std::sync::{Arc, Mutex};
use task::{Output, TaskCore, TaskMetrics};
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
    /// The lineage its checkpoints belong to ([`crate::control::api::JobStatus::lineage_id`]).
    pub lineage_id: String,
    /// Parallelism.
    pub parallelism: u32,
    /// Max parallelism.
    pub max_parallelism: u32,
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
}

impl Prepared {
    /// Starts everything and waits for the job to end.
    pub async fn run(self) -> Result<Outcome, String> {
        (self.run)().await.map_err(|e| format!("coordinator panicked: {e}"))?
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
pub async fn restore_for_run(
    job: &Job,
    store: &storage::Store,
    from: &RestoreFrom,
    run_id: Option<&str>,
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
    let snapshot = restore::resolve(store, &job.name, from, &s3, recorded.as_ref())
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
    let first_id = decide::next_snapshot_id(snapshot.as_ref().map(|s| s.metadata.checkpoint_id), &seen);
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

/// Commits the pending parts a snapshot records for every file sink of the job (idempotent).
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

/// The backend of stateful step `uid`'s subtask `subtask`: the job's `stateBackend`, a disk
/// store in its own directory under the run's.
fn backend_choice(ctx: &RunContext, uid: &str, subtask: u32) -> BackendChoice {
    match ctx.job.spec.state_backend {
        crate::job::StateBackend::Heap => BackendChoice::Heap,
        crate::job::StateBackend::Disk => BackendChoice::Disk {
            dir: local_dir::store_dir(&ctx.state_dir, uid, subtask),
            // Validated with the job (`Job::from_spec`): defaults only for a spec built otherwise.
            options: ctx.job.spec.disk_state_options().unwrap_or_default(),
        },
    }
}

/// A subtask ready to start.
pub struct BuiltTask {
    /// Starts it; the task reports failure as [`TaskEvent::Failed`].
    pub start: Box<dyn FnOnce() -> tokio::task::JoinHandle<()> + Send>,
    /// Its counters.
    pub metrics: Arc<TaskMetrics>,
    /// Whether it is a source subtask.
    pub is_source: bool,
}

/// Builds subtask `spec`: its chained operators with their restored state, reading `inputs`
/// (one receiver per upstream subtask, by index; empty for sources) and writing `outputs`
/// (one sender per downstream subtask; `None` when the chain ends in a sink).
pub async fn build_task(
    ctx: &RunContext,
    spec: &TaskSpec,
    inputs: Vec<channel::DataReceiver>,
    outputs: Option<Vec<channel::DataSender>>,
    control: mpsc::UnboundedReceiver<Control>,
    events: mpsc::UnboundedSender<TaskEvent>,
    lanes: PriorityLanes,
) -> Result<BuiltTask, String> {
    let job = &ctx.job;
    let graph = plan::plan_graph(job);
    let stage = &graph[spec.stage].operators;
    let (p, max_p, sub, index) = (job.parallelism, job.max_parallelism, spec.subtask, spec.index);
    let range = key_group_range(sub, p, max_p);
    let snapshot = ctx.snapshot.as_deref();
    let first = &job.operators[stage[0]];
    let is_source = first.kind.is_source();
    let failed_prefix = match &ctx.worker_id {
        Some(w) => format!("{} on worker {w} failed", subtask_label(spec, p)),
        None => format!("{} failed", subtask_label(spec, p)),
    };
    // A source runs outside the chain; a union only merges its input channels.
    let chain_ops: Vec<usize> = stage
        .iter()
        .copied()
        .filter(|&oi| oi != stage[0] || !(is_source || first.kind == OperatorKind::Union))
        .collect();
    let metrics = Arc::new(TaskMetrics::default());
    let mut chain: Vec<Box<dyn StreamOperator>> = Vec::new();
    let mut chain_ids = Vec::new();
    for &oi in &chain_ops {
        let op = &job.operators[oi];
        let restore_state = restore::operator_restore(snapshot, &op.uid, Some(range));
        let ctx_err = |e: TaskError| e.context(format!("operator {}", op.uid)).0;
        let boxed: Box<dyn StreamOperator> = match &op.kind {
            OperatorKind::Filter(e) => Box::new(Filter::new(e).map_err(ctx_err)?),
            OperatorKind::Map(e) => Box::new(Map::new(e).map_err(ctx_err)?),
            OperatorKind::FlatMap(spec) => Box::new(FlatMap::new(spec).map_err(ctx_err)?),
            OperatorKind::KeyBy { expression, .. } => Box::new(KeyBy::new(expression, max_p).map_err(ctx_err)?),
            OperatorKind::Aggregate {
                func,
                expression,
                as_field,
                ttl,
            } => {
                let key_field = match op.inputs.first().map(|&k| &job.operators[k].kind) {
                    Some(OperatorKind::KeyBy { as_field, .. }) => as_field.clone(),
                    _ => "key".into(),
                };
                let state = KeyedStateInit {
                    ttl: *ttl,
                    backend: backend_choice(ctx, &op.uid, sub),
                    ..KeyedStateInit::new(range, restore_state)
                };
                Box::new(
                    Aggregate::with_state(&op.uid, *func, expression.as_deref(), &key_field, as_field, state)
                        .map_err(ctx_err)?,
                )
            }
            OperatorKind::Window(def) => {
                let key_field = match op.inputs.first().map(|&k| &job.operators[k].kind) {
                    Some(OperatorKind::KeyBy { as_field, .. }) => as_field.clone(),
                    _ => "key".into(),
                };
                Box::new(
                    WindowOperator::new(
                        &op.uid,
                        def,
                        &key_field,
                        range,
                        restore_state,
                        metrics.late_records_dropped.clone(),
                    )
                    .map_err(ctx_err)?,
                )
            }
            OperatorKind::Join(def) => Box::new(
                crate::operators::join::Join::new(
                    &op.uid,
                    def,
                    range,
                    restore_state,
                    Arc::new(crate::state::ttl::SystemClock),
                )
                .map_err(ctx_err)?,
            ),
            OperatorKind::FileSink(spec) => Box::new(
                FileSink::new(&spec.path, sub, &ctx.run_id, &ctx.s3)
                    .await
                    .map_err(ctx_err)?,
            ),
            OperatorKind::KafkaSink(spec) => Box::new(
                crate::operators::sink_kafka::KafkaSink::new(
                    spec,
                    &format!("weir-{}-{}", job.name, op.uid),
                    sub,
                    p,
                    restore_state,
                )
                .await
                .map_err(ctx_err)?,
            ),
            OperatorKind::PrintSink => Box::new(PrintSink),
            OperatorKind::DiscardSink => Box::new(DiscardSink),
            OperatorKind::FileSource(_)
            | OperatorKind::Generator(_)
            | OperatorKind::KafkaSource(_)
            | OperatorKind::Union => {
                return Err(format!("operator {}: must head its stage", op.uid));
            }
        };
        let boxed = crate::operators::throttle::Throttled::wrap(
            boxed,
            crate::operators::throttle::sink_rate_limit(job, op.index),
        );
        chain.push(boxed);
        chain_ids.push((op.uid.clone(), op.kind.name().to_string()));
    }
    if let Some((join, side)) = feeds_join(job, stage) {
        let OperatorKind::Join(def) = &join.kind else {
            unreachable!("feeds_join returns a join")
        };
        let side_op = crate::operators::join::JoinSide::new(&join.uid, def, side, max_p)
            .map_err(|e| e.context(format!("operator {}", join.uid)).0)?;
        chain.push(Box::new(side_op));
        chain_ids.push((
            crate::operators::join::JoinSide::uid(&join.uid, side),
            "joinSide".to_string(),
        ));
    }
    let output = match (outputs, plan::output_exchange(&graph, spec.stage)) {
        (Some(senders), Some(plan::Exchange::Keyed)) => Output::Keyed {
            senders,
            max_parallelism: max_p,
        },
        (Some(mut senders), Some(plan::Exchange::Forward)) if senders.len() == 1 => {
            Output::Forward(senders.pop().expect("one sender"))
        }
        (None, None) => Output::None,
        (senders, exchange) => {
            return Err(format!(
                "task {index}: {} output channels for exchange {exchange:?} (a bug in the plan)",
                senders.map_or(0, |s| s.len())
            ));
        }
    };
    let core = TaskCore {
        index,
        subtask: sub,
        parallelism: p,
        chain,
        chain_ids,
        output,
        control,
        events: events.clone(),
        metrics: metrics.clone(),
        priority_outputs: lanes.outputs,
        unaligned_after: job.unaligned_after(),
        unsent: Default::default(),
        deferred: Default::default(),
        interrupt_lane: None,
        interruptible_by_trigger: is_source && job.unaligned_after().is_some(),
        output_channel_uid: plan::downstream_head(&graph, spec.stage)
            .map(|head| job.operators[head].uid.clone())
            .unwrap_or_default(),
    };
    let start: Box<dyn FnOnce() -> tokio::task::JoinHandle<()> + Send> = if is_source {
        let mut restore_state = restore::operator_restore(snapshot, &first.uid, None);
        if let Some(read) = ctx.furthest_read.get(&first.uid) {
            restore_state.operator_state.extend(read.iter().cloned());
            restore_state.operator_state = source::furthest_positions(&first.kind, &restore_state.operator_state)
                .map_err(|e| e.context(format!("operator {}: read-position log", first.uid)).0)?;
        }
        let read_log = ctx
            .read_log
            .as_ref()
            .map(|(store, dir)| ReadPositionLog::new(store.clone(), dir, &first.uid, sub, p));
        let mut src = source::build(first, sub, p, restore_state, &ctx.s3, ctx.bytes_read.clone())
            .await
            .map_err(|e| e.0)?;
        let id = (first.uid.clone(), first.kind.name().to_string());
        let event_time = crate::job::event_time::source_event_time(first, &job.spec.job.steps)
            .map_err(|e| e.to_string())?
            .map(|et| task::SourceEventTime {
                per_split: src.enable_split_watermarks(et.max_out_of_orderness_ms, et.idle_timeout),
                field: et.field,
                generator: watermark::BoundedOutOfOrderness::new(et.max_out_of_orderness_ms),
                idle_timeout: et.idle_timeout,
            });
        Box::new(move || {
            tokio::spawn(async move {
                if let Err(e) = task::run_source(core, src, id, read_log, event_time).await {
                    let _ = events.send(TaskEvent::Failed {
                        task: index,
                        error: format!("{failed_prefix}: {}", e.0),
                    });
                }
            })
        })
    } else {
        let setup = task::InputSetup {
            inputs,
            mode: job.spec.checkpointing.mode,
            priority: lanes.input,
            channel_uid: first.uid.clone(),
            replay: channel_state::records_for_subtask(snapshot, &first.uid, sub, p, range)?,
        };
        Box::new(move || {
            tokio::spawn(async move {
                if let Err(e) = task::run_inputs_with(core, setup).await {
                    let _ = events.send(TaskEvent::Failed {
                        task: index,
                        error: format!("{failed_prefix}: {}", e.0),
                    });
                }
            })
        })
    };
    Ok(BuiltTask {
        start,
        metrics,
        is_source,
    })
}

/// The join the stage of operators `stage` feeds, and as which side: its output then goes
/// through that side's [`JoinSide`](crate::operators::join::JoinSide) before the exchange.
fn feeds_join<'a>(job: &'a Job, stage: &[usize]) -> Option<(&'a crate::job::Operator, crate::job::join::Side)> {
    let last = *stage.last()?;
    job.operators.iter().find_map(|o| match o.kind {
        OperatorKind::Join(_) => o
            .inputs
            .iter()
            .position(|&j| j == last)
            .map(|k| (o, crate::job::join::Side::of_input(k))),
        _ => None,
    })
}

/// The coordinator's configuration for a job.
pub fn coordinator_config(
    job: &Job,
    store: storage::Store,
    first_id: u64,
    sources: Vec<usize>,
    run_id: &str,
) -> CoordinatorConfig {
    CoordinatorConfig {
        job: job.name.clone(),
        parallelism: job.parallelism,
        max_parallelism: job.max_parallelism,
        interval: job.checkpoint_interval,
        timeout: job.checkpoint_timeout,
        min_pause: job.min_pause,
        retained: job.spec.checkpointing.retained as usize,
        store,
        savepoint_dir: job
            .spec
            .savepoints
            .as_ref()
            .and_then(|s| s.directory.clone())
            .unwrap_or_else(|| DEFAULT_SAVEPOINT_DIR.to_string()),
        s3: s3_options(job),
        tasks: task_specs(job).len(),
        sources,
        first_id,
        run_id: run_id.to_string(),
        fence: None,
        tolerable_failures: job.spec.checkpointing.tolerable_failed_checkpoints,
        incremental: job.spec.checkpointing.incremental,
    }
}

/// Resolves the restore point, validates it, commits its pending sink parts, and wires every
/// subtask in this process with local bounded channels. Errors are user-facing messages.
pub async fn prepare(job: Job, opts: RunOptions) -> Result<Prepared, String> {
    let s3 = s3_options(&job);
    let store = storage::open(&storage_url(&job, opts.checkpoint_storage.as_deref()), &s3)
        .await
        .map_err(|e| e.to_string())?;
    let (snapshot, first_id) = restore_for_run(&job, &store, &opts.restore, None).await?;
    let run_id = format!("{:016x}", rand::random::<u64>());
    // The lineage continues when this run restored one of the job's own checkpoints, so
    // retention keeps managing them; a fresh run (or one from a savepoint) starts a new one.
    // `--restore latest` continues the lineage of whatever it picked (a checkpoint or a
    // non-stopping savepoint of that run).
    let lineage = snapshot
        .as_ref()
        .filter(|s| {
            s.metadata.kind == crate::control::api::SnapshotKind::Checkpoint || opts.restore == RestoreFrom::Latest
        })
        .and_then(|s| s.metadata.run_id.clone())
        .unwrap_or_else(|| run_id.clone());
    let (read_log, furthest_read) =
        read_positions::for_run(&job, &store, &opts.restore, &lineage, snapshot.is_some()).await?;
    let state_dir = local_state_dir(&job, opts.state_dir.as_deref(), &run_id)?;
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
    // The channels of every exchange, by global task index: a keyed exchange connects every
    // upstream subtask to every downstream one, a forward exchange subtask k to subtask k. A
    // downstream subtask's receivers are ordered by stage input, then upstream subtask.
    let mut senders: HashMap<usize, Vec<channel::DataSender>> = HashMap::new();
    let mut receivers: HashMap<usize, Vec<channel::DataReceiver>> = HashMap::new();
    for (stage, s) in plan::plan_graph(&job).iter().enumerate() {
        for &(up_stage, exchange) in &s.inputs {
            for down in 0..p {
                let ups: Vec<usize> = match exchange {
                    plan::Exchange::Keyed => (0..p).collect(),
                    plan::Exchange::Forward => vec![down],
                };
                for up in ups {
                    let (tx, rx) = channel::data_channel(CHANNEL_CAPACITY);
                    senders.entry(up_stage * p + up).or_default().push(tx);
                    receivers.entry(stage * p + down).or_default().push(rx);
                }
            }
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
    let cfg = coordinator_config(&job, store, first_id, sources, &lineage);
    let shared = Arc::new(Mutex::new(Shared::new()));
    shared.lock().expect("lock").restored_from = ctx.snapshot.as_ref().map(|s| s.url.clone());
    let handle = JobHandle {
        job: job.name.clone(),
        job_id: ctx.run_id.clone(),
        lineage_id: lineage.clone(),
        parallelism: job.parallelism,
        max_parallelism: job.max_parallelism,
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
            let out = coordinator::run(cfg, controls, ev_rx, &mut cmd_rx, shared).await;
            if out.is_err() {
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
    Ok(Prepared { handle, run })
}
