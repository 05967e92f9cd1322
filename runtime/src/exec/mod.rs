//! Runs a job in one process: plan the stages, restore, spawn every subtask, run the
//! checkpoint coordinator and the control API, and wait for the end.
//!
//! Plan: the pipeline is cut after each `keyBy`; each piece is a stage of chained operators
//! run by `parallelism` subtasks, and consecutive stages are joined by a keyed exchange
//! (every upstream subtask has a bounded channel to every downstream subtask).

pub mod messages;
pub mod task;

use crate::checkpoint::coordinator::{self, CoordinatorConfig, Outcome, SavepointCommand, Shared};
use crate::checkpoint::decide;
use crate::checkpoint::restore::{self, LoadedSnapshot, RestoreFrom};
use crate::job::{Job, OperatorKind};
use crate::operators::aggregate::Aggregate;
use crate::operators::sink::{FileSink, PrintSink, commit_restored};
use crate::operators::transform::{Filter, FlatMap, KeyBy, Map};
use crate::operators::{StreamOperator, TaskError, source};
use crate::state::key_group::key_group_range;
use crate::storage::{self, S3Options};
use messages::{Control, Element, TaskEvent};
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
}

/// A running job's handle for the control API.
#[derive(Clone)]
pub struct JobHandle {
    /// Job name.
    pub job: String,
    /// This run's id.
    pub job_id: String,
    /// Parallelism.
    pub parallelism: u32,
    /// Max parallelism.
    pub max_parallelism: u32,
    /// Restored from.
    pub restored_from: Option<String>,
    /// Coordinator state.
    pub shared: Arc<Mutex<Shared>>,
    /// Savepoint commands.
    pub commands: mpsc::UnboundedSender<SavepointCommand>,
    /// Per-task counters: (task name, subtask, counters).
    pub tasks: Vec<(String, u32, Arc<TaskMetrics>)>,
    /// Bytes read by file sources (progress).
    pub bytes_read: Arc<AtomicU64>,
}

/// Groups operator indexes into stages, cutting after each `keyBy`.
pub fn plan_stages(job: &Job) -> Vec<Vec<usize>> {
    let mut stages = vec![vec![]];
    for (i, op) in job.operators.iter().enumerate() {
        stages.last_mut().expect("non-empty").push(i);
        if matches!(op.kind, OperatorKind::KeyBy { .. }) && i + 1 < job.operators.len() {
            stages.push(vec![]);
        }
    }
    stages
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

/// Resolves the restore point, validates it, commits its pending sink parts, and wires the
/// subtasks. Errors are user-facing messages.
pub async fn prepare(job: Job, opts: RunOptions) -> Result<Prepared, String> {
    let s3 = s3_options(&job);
    let storage_url = opts
        .checkpoint_storage
        .clone()
        .or_else(|| job.spec.checkpointing.storage.clone())
        .unwrap_or_else(|| DEFAULT_CHECKPOINT_STORAGE.to_string());
    let store = storage::open(&storage_url, &s3).await.map_err(|e| e.to_string())?;
    let snapshot: Option<LoadedSnapshot> = restore::resolve(&store, &job.name, &opts.restore, &s3)
        .await
        .map_err(|e| e.to_string())?;
    if let Some(s) = &snapshot {
        restore::check(s, &job).map_err(|e| e.to_string())?;
        tracing::info!(from = %s.url, checkpoint = s.metadata.checkpoint_id, "restoring");
        for op in job.operators.iter() {
            if let OperatorKind::FileSink(spec) = &op.kind {
                let items = restore::operator_restore(Some(s), &op.uid, None).operator_state;
                let n = commit_restored(&spec.path, &items, &s3).await.map_err(|e| e.0)?;
                if n > 0 {
                    tracing::info!(operator = %op.uid, parts = n, "committed pending parts of the restore point");
                }
            }
        }
    }
    let seen = restore::list_checkpoints(&store, &job.name)
        .await
        .map_err(|e| e.to_string())?;
    let first_id = decide::next_checkpoint_id(snapshot.as_ref().map(|s| s.metadata.checkpoint_id), &seen);
    let job_id = format!("{:016x}", rand::random::<u64>());
    let p = job.parallelism;
    let max_p = job.max_parallelism;
    let stages = plan_stages(&job);
    let n_tasks = stages.len() * p as usize;

    let (ev_tx, ev_rx) = mpsc::unbounded_channel::<TaskEvent>();
    let (cmd_tx, cmd_rx) = mpsc::unbounded_channel::<SavepointCommand>();
    let mut controls = Vec::with_capacity(n_tasks);
    let mut control_rx = Vec::with_capacity(n_tasks);
    for _ in 0..n_tasks {
        let (tx, rx) = mpsc::unbounded_channel::<Control>();
        controls.push(tx);
        control_rx.push(Some(rx));
    }
    // Channels of each exchange: inputs[stage][downstream subtask] and outputs[stage][upstream].
    let mut inputs: Vec<Vec<Vec<mpsc::Receiver<Element>>>> = (0..stages.len()).map(|_| vec![]).collect();
    let mut outputs: Vec<Vec<Vec<mpsc::Sender<Element>>>> = (0..stages.len()).map(|_| vec![]).collect();
    for s in 1..stages.len() {
        let mut ins: Vec<Vec<mpsc::Receiver<Element>>> = (0..p).map(|_| vec![]).collect();
        let mut outs: Vec<Vec<mpsc::Sender<Element>>> = (0..p).map(|_| vec![]).collect();
        for up in outs.iter_mut() {
            for input in ins.iter_mut() {
                let (tx, rx) = mpsc::channel(CHANNEL_CAPACITY);
                up.push(tx);
                input.push(rx);
            }
        }
        inputs[s] = ins;
        outputs[s - 1] = outs;
    }

    let bytes_read = Arc::new(AtomicU64::new(0));
    let mut spawners: Vec<Box<dyn FnOnce() -> tokio::task::JoinHandle<()> + Send>> = Vec::new();
    let mut task_metrics = Vec::new();
    let mut sources = Vec::new();
    for (si, stage) in stages.iter().enumerate() {
        let name = stage
            .iter()
            .map(|&i| job.operators[i].uid.as_str())
            .collect::<Vec<_>>()
            .join(" -> ");
        let mut stage_inputs = std::mem::take(&mut inputs[si]).into_iter();
        let mut stage_outputs = std::mem::take(&mut outputs[si]).into_iter();
        for sub in 0..p {
            let index = si * p as usize + sub as usize;
            let range = key_group_range(sub, p, max_p);
            let first = &job.operators[stage[0]];
            let is_source = matches!(first.kind, OperatorKind::FileSource(_) | OperatorKind::Generator(_));
            let chain_ops: Vec<usize> = if is_source { stage[1..].to_vec() } else { stage.clone() };
            let mut chain: Vec<Box<dyn StreamOperator>> = Vec::new();
            let mut chain_ids = Vec::new();
            for &oi in &chain_ops {
                let op = &job.operators[oi];
                let restore_state = restore::operator_restore(snapshot.as_ref(), &op.uid, Some(range));
                let ctx = |e: TaskError| e.context(format!("operator {}", op.uid)).0;
                let boxed: Box<dyn StreamOperator> = match &op.kind {
                    OperatorKind::Filter(e) => Box::new(Filter::new(e).map_err(ctx)?),
                    OperatorKind::Map(e) => Box::new(Map::new(e).map_err(ctx)?),
                    OperatorKind::FlatMap(spec) => Box::new(FlatMap::new(spec).map_err(ctx)?),
                    OperatorKind::KeyBy { expression, .. } => Box::new(KeyBy::new(expression, max_p).map_err(ctx)?),
                    OperatorKind::Aggregate {
                        func,
                        expression,
                        as_field,
                    } => {
                        let key_field = match &job.operators[oi - 1].kind {
                            OperatorKind::KeyBy { as_field, .. } => as_field.clone(),
                            _ => "key".into(),
                        };
                        Box::new(
                            Aggregate::new(
                                &op.uid,
                                *func,
                                expression.as_deref(),
                                &key_field,
                                as_field,
                                range,
                                restore_state,
                            )
                            .map_err(ctx)?,
                        )
                    }
                    OperatorKind::FileSink(spec) => {
                        Box::new(FileSink::new(&spec.path, sub, &job_id, &s3).await.map_err(ctx)?)
                    }
                    OperatorKind::PrintSink => Box::new(PrintSink),
                    OperatorKind::FileSource(_) | OperatorKind::Generator(_) => {
                        return Err(format!("operator {}: a source must be the first step", op.uid));
                    }
                };
                chain.push(boxed);
                chain_ids.push((op.uid.clone(), op.kind.name().to_string()));
            }
            let output = match stage_outputs.next() {
                Some(senders) => Output::Keyed {
                    senders,
                    max_parallelism: max_p,
                },
                None => Output::None,
            };
            let metrics = Arc::new(TaskMetrics::default());
            task_metrics.push((name.clone(), sub, metrics.clone()));
            let core = TaskCore {
                index,
                subtask: sub,
                parallelism: p,
                chain,
                chain_ids,
                output,
                control: control_rx[index].take().expect("one receiver per task"),
                events: ev_tx.clone(),
                metrics,
            };
            let events = ev_tx.clone();
            if is_source {
                sources.push(index);
                let restore_state = restore::operator_restore(snapshot.as_ref(), &first.uid, None);
                let src = source::build(first, sub, p, restore_state, &s3, bytes_read.clone())
                    .await
                    .map_err(|e| e.0)?;
                let id = (first.uid.clone(), first.kind.name().to_string());
                spawners.push(Box::new(move || {
                    tokio::spawn(async move {
                        if let Err(e) = task::run_source(core, src, id).await {
                            let _ = events.send(TaskEvent::Failed {
                                task: index,
                                error: e.0,
                            });
                        }
                    })
                }));
            } else {
                let ins = stage_inputs.next().expect("inputs for every downstream subtask");
                let mode = job.spec.checkpointing.mode;
                spawners.push(Box::new(move || {
                    tokio::spawn(async move {
                        if let Err(e) = task::run_inputs(core, ins, mode).await {
                            let _ = events.send(TaskEvent::Failed {
                                task: index,
                                error: e.0,
                            });
                        }
                    })
                }));
            }
        }
    }
    drop(ev_tx);

    let cfg = CoordinatorConfig {
        job: job.name.clone(),
        parallelism: p,
        max_parallelism: max_p,
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
        s3: s3.clone(),
        tasks: n_tasks,
        sources,
        first_id,
    };
    let shared = Arc::new(Mutex::new(Shared::new()));
    let handle = JobHandle {
        job: job.name.clone(),
        job_id,
        parallelism: p,
        max_parallelism: max_p,
        restored_from: snapshot.as_ref().map(|s| s.url.clone()),
        shared: shared.clone(),
        commands: cmd_tx,
        tasks: task_metrics,
        bytes_read,
    };
    let run = Box::new(move || {
        tokio::spawn(async move {
            let handles: Vec<_> = spawners.into_iter().map(|s| s()).collect();
            let out = coordinator::run(cfg, controls, ev_rx, cmd_rx, shared).await;
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
