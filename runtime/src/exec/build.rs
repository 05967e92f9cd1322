//! Building one subtask (part of [`exec`](super)): its chain of operators with their restored
//! state, its inputs (or its source) and its output edges ([`super::outputs`]).

use super::messages::{Control, TaskEvent};
use super::task::{self, TaskCore, TaskMetrics};
use super::{PriorityLanes, RunContext, TaskSpec, channel, channel_state, panics, plan, subtask_label, watermark};
use crate::checkpoint::read_positions::ReadPositionLog;
use crate::checkpoint::restore;
use crate::job::{Job, OperatorKind};
use crate::operators::aggregate::{Aggregate, KeyedStateInit};
use crate::operators::discard::DiscardSink;
use crate::operators::sink::{FileSink, PrintSink};
use crate::operators::transform::{Filter, FlatMap, KeyBy, Map};
use crate::operators::window::WindowOperator;
use crate::operators::{StreamOperator, TaskError, source};
use crate::state::backend::BackendChoice;
use crate::state::key_group::key_group_range;
use crate::state::local_dir;
use std::path::Path;
use std::sync::Arc;
use tokio::sync::mpsc;

/// The backend of stateful step `uid`'s subtask `subtask`: the job's `stateBackend`, a disk
/// store in its own directory under the run's.
fn backend_choice(ctx: &RunContext, uid: &str, subtask: u32) -> BackendChoice {
    job_backend_choice(&ctx.job, &ctx.state_dir, uid, subtask)
}

/// [`backend_choice`] of `job` with the run directory `state_dir`.
fn job_backend_choice(job: &Job, state_dir: &Path, uid: &str, subtask: u32) -> BackendChoice {
    match job.spec.state_backend {
        crate::job::StateBackend::Heap => BackendChoice::Heap,
        crate::job::StateBackend::Disk => BackendChoice::Disk {
            dir: local_dir::store_dir(state_dir, uid, subtask),
            // Validated with the job (`Job::from_spec`): defaults only for a spec built otherwise.
            options: job.spec.disk_state_options().unwrap_or_default(),
        },
    }
}

/// Starts creating the disk stores of every keyed aggregation's subtasks in `subtasks` under
/// the run directory `state_dir`, each on a thread of its own
/// ([`disk_store::create_early`](crate::state::disk_store::create_early)), so their creation
/// (RocksDB's `fsync`s) overlaps the restore's download instead of following it; the subtasks
/// built later take them. Nothing for the heap backend.
pub fn create_disk_stores_early(job: &Job, state_dir: &Path, subtasks: impl Iterator<Item = u32> + Clone) {
    for op in &job.operators {
        if !matches!(op.kind, OperatorKind::Aggregate { .. }) {
            continue;
        }
        for subtask in subtasks.clone() {
            if let BackendChoice::Disk { dir, options } = job_backend_choice(job, state_dir, &op.uid, subtask) {
                crate::state::disk_store::create_early(&dir, options);
            }
        }
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

/// Why a subtask could not be built.
#[derive(Debug)]
pub struct BuildError {
    /// What failed, naming the operator.
    pub message: String,
    /// The restore point's state does not fit the job (a join's, window's or aggregation's
    /// stored shape differs from the step's, or does not decode): building again cannot help,
    /// so a cluster fails the job at once rather than restarting it.
    pub restore_refused: bool,
}

/// Any other build failure may pass (a storage or network error): a restart may succeed.
impl From<String> for BuildError {
    fn from(message: String) -> BuildError {
        BuildError {
            message,
            restore_refused: false,
        }
    }
}

impl From<BuildError> for String {
    fn from(error: BuildError) -> String {
        error.message
    }
}

/// The restore refusal of operator `uid` ([`BuildError::restore_refused`]).
fn refused(uid: &str, message: String) -> BuildError {
    BuildError {
        message: format!("operator {uid}: {message}"),
        restore_refused: true,
    }
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
) -> Result<BuiltTask, BuildError> {
    let job = &ctx.job;
    let graph = plan::plan_graph(job);
    let stage = &graph[spec.stage].operators;
    let (p, max_p, sub, index) = (job.parallelism, job.max_parallelism, spec.subtask, spec.index);
    let range = key_group_range(sub, p, max_p);
    let snapshot = ctx.snapshot.as_deref();
    let first = &job.operators[stage[0]];
    let is_source = first.kind.is_source();
    let subtask = match &ctx.worker_id {
        Some(w) => format!("{} on worker {w}", subtask_label(spec, p)),
        None => subtask_label(spec, p),
    };
    let failed_prefix = format!("{subtask} failed");
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
                let key_by = op.inputs.first().map(|&k| &job.operators[k]);
                let key_field = match key_by.map(|k| &k.kind) {
                    Some(OperatorKind::KeyBy { as_field, .. }) => as_field.clone(),
                    _ => "key".into(),
                };
                let state = KeyedStateInit {
                    ttl: *ttl,
                    backend: backend_choice(ctx, &op.uid, sub),
                    restored_store: restore::restored_store(snapshot, &op.uid, range),
                    ..KeyedStateInit::new(range, restore_state)
                };
                let aggregate =
                    Aggregate::with_state(&op.uid, *func, expression.as_deref(), &key_field, as_field, state)
                        .map_err(ctx_err)?
                        .at_step(op.index);
                // Its stored values' meaning, checked against the restore point's.
                let aggregate = match key_by {
                    Some(
                        key_by @ crate::job::Operator {
                            kind: OperatorKind::KeyBy { expression, .. },
                            ..
                        },
                    ) => aggregate
                        .keyed_by(expression, key_by.index)
                        .map_err(|e| refused(&op.uid, e.0))?,
                    _ => aggregate,
                };
                Box::new(aggregate)
            }
            OperatorKind::Window(def) => {
                let key_by = op.inputs.first().map(|&k| &job.operators[k]);
                let (key_field, key) = match key_by {
                    Some(
                        key_by @ crate::job::Operator {
                            kind: OperatorKind::KeyBy { as_field, expression },
                            ..
                        },
                    ) => (
                        as_field.clone(),
                        Some(crate::operators::window::WindowKey {
                            expression: expression.clone(),
                            expression_path: format!("spec.job.steps[{}].keyBy.expression", key_by.index),
                            uid_path: format!("spec.job.steps[{}].uid", op.index),
                        }),
                    ),
                    _ => ("key".into(), None),
                };
                crate::operators::window::check_restored_shape(def, key.as_ref(), &restore_state.operator_state)
                    .map_err(|e| refused(&op.uid, e))?;
                let window = WindowOperator::new(
                    &op.uid,
                    def,
                    &key_field,
                    range,
                    restore_state,
                    metrics.late_records_dropped.clone(),
                    &backend_choice(ctx, &op.uid, sub),
                )
                .map_err(ctx_err)?;
                Box::new(match &key {
                    Some(key) => window.keyed_by(&key.expression),
                    None => window,
                })
            }
            OperatorKind::Join(def) => {
                // A changed shape is refused as a restore error (the constructor checks it too).
                crate::operators::join::stored_shape::check_restored(def, &restore_state.operator_state)
                    .map_err(|e| refused(&op.uid, e))?;
                Box::new(
                    crate::operators::join::Join::new(
                        &op.uid,
                        def,
                        range,
                        restore_state,
                        Arc::new(crate::state::ttl::SystemClock),
                        &backend_choice(ctx, &op.uid, sub),
                    )
                    .map_err(ctx_err)?,
                )
            }
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
                return Err(format!("operator {}: must head its stage", op.uid).into());
            }
        };
        let boxed = crate::operators::throttle::Throttled::wrap(
            boxed,
            crate::operators::throttle::sink_rate_limit(job, op.index),
        );
        chain.push(boxed);
        chain_ids.push((op.uid.clone(), op.kind.name().to_string()));
    }
    let output = build_outputs(job, &graph, spec, outputs)?;
    let core = TaskCore {
        index,
        subtask: sub,
        label: subtask.clone(),
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
    };
    // In a job with event time, the subtask's first output is its watermark, and an input
    // subtask waits for each input's before reading on (start alignment: `task_source.rs`,
    // `inputs.rs`).
    let announce = crate::job::event_time::job_has_event_time(&job.operators, &job.spec.job.steps);
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
        src.project(&crate::job::field_use::fields_read(&job.operators, first.index));
        let id = (first.uid.clone(), first.kind.name().to_string());
        let event_time = crate::job::event_time::source_event_time(first, &job.spec.job.steps)
            .map_err(|e| e.to_string())?
            .map(|et| task::SourceEventTime {
                per_split: src.enable_split_watermarks(et.max_out_of_orderness_ms, et.idle_timeout),
                field: et.field,
                unit: et.unit,
                field_path: format!("spec.job.steps[{}].source.eventTime.field", first.index),
                generator: watermark::BoundedOutOfOrderness::new(et.max_out_of_orderness_ms),
                idle_timeout: et.idle_timeout,
            });
        let first_uid = first.uid.clone();
        Box::new(move || {
            tokio::spawn(async move {
                let run = async {
                    panics::panic_failpoint(&first_uid, sub);
                    task::run_source(core, src, id, read_log, event_time, announce).await
                };
                panics::run_reporting_failure(
                    run,
                    index,
                    &subtask,
                    &failed_prefix,
                    &events,
                    slow_failure_report_failpoint,
                )
                .await;
            })
        })
    } else {
        let setup = task::InputSetup {
            inputs,
            mode: job.spec.checkpointing.mode,
            priority: lanes.input,
            channel_uid: first.uid.clone(),
            replay: channel_state::records_for_subtask(snapshot, &first.uid, sub, p, range)?,
            start_alignment: announce,
        };
        let first_uid = first.uid.clone();
        Box::new(move || {
            tokio::spawn(async move {
                let run = async {
                    panics::panic_failpoint(&first_uid, sub);
                    task::run_inputs_with(core, setup).await
                };
                panics::run_reporting_failure(run, index, &subtask, &failed_prefix, &events, || async {}).await;
            })
        })
    };
    Ok(BuiltTask {
        start,
        metrics,
        is_source,
    })
}

/// The output of subtask `spec`: one edge per downstream stage ([`plan::stage_outputs`]),
/// taking its channels from `senders` (flat, in edge order: a keyed edge one per downstream
/// subtask, a forward edge one); an edge into a join runs that side's key selector first.
/// Errors: `senders` does not match the plan (a bug), a join key that does not compile.
fn build_outputs(
    job: &Job,
    graph: &[plan::Stage],
    spec: &TaskSpec,
    senders: Option<Vec<channel::DataSender>>,
) -> Result<task::Outputs, String> {
    let edges = plan::stage_outputs(graph, spec.stage);
    let p = job.parallelism as usize;
    let want: usize = edges
        .iter()
        .map(|e| match e.exchange {
            plan::Exchange::Keyed => p,
            plan::Exchange::Forward => 1,
        })
        .sum();
    let mut senders = senders.unwrap_or_default().into_iter();
    if senders.len() != want {
        return Err(format!(
            "task {}: {} output channels for {} edges needing {want} (a bug in the plan)",
            spec.index,
            senders.len(),
            edges.len()
        ));
    }
    let last = *graph[spec.stage].operators.last().expect("a stage has an operator");
    let mut out = Vec::with_capacity(edges.len());
    for edge in edges {
        let head = &job.operators[graph[edge.stage].operators[0]];
        let route = match edge.exchange {
            plan::Exchange::Keyed => task::Output::Keyed {
                senders: senders.by_ref().take(p).collect(),
                max_parallelism: job.max_parallelism,
            },
            plan::Exchange::Forward => task::Output::Forward(senders.next().expect("counted above")),
        };
        let transform = match &head.kind {
            OperatorKind::Join(def) => {
                let k = head.inputs.iter().position(|&j| j == last).ok_or_else(|| {
                    format!(
                        "task {}: join {} does not read this stage (a bug in the plan)",
                        spec.index, head.uid
                    )
                })?;
                let side = crate::job::join::Side::of_input(k);
                let op = crate::operators::join::JoinSide::new(&head.uid, def, side, job.max_parallelism)
                    .map_err(|e| e.context(format!("operator {}", head.uid)).0)?;
                let side_op: Box<dyn StreamOperator> = Box::new(op);
                Some((crate::operators::join::JoinSide::uid(&head.uid, side), side_op))
            }
            _ => None,
        };
        out.push(task::OutputEdge {
            route,
            port: edge.port,
            channel_uid: head.uid.clone(),
            transform,
        });
    }
    Ok(task::Outputs::new(out))
}

/// Test hook: `WEIR_FAILPOINT=slow-failure-report` delays a failed source subtask's report by
/// 200 ms, so the symptoms of its failure (downstream subtasks whose input closed) reach the
/// coordinator first, as they can on a loaded machine. Unset in production.
async fn slow_failure_report_failpoint() {
    if crate::failpoint::is_set("slow-failure-report") {
        tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    }
}
