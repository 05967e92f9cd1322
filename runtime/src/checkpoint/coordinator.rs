//! The checkpoint coordinator (Flink's `CheckpointCoordinator`): triggers barriers at the
//! sources, collects acknowledgements, writes `_metadata` (the commit point) with a conditional
//! put, notifies subtasks so sinks commit, runs retention off the processing path, serves
//! savepoint triggers and drives the end of bounded and stopped jobs.

use super::commit::{Pending, complete, incremental_base, next_base};
use super::completed_mark::CompletedMark;
use super::decide::{self, PendingState};
use super::failure_cause::{self, FailureDecision};
use super::retention::{RetentionScope, RetentionWorker};
use super::{Barrier, SnapshotTarget, checkpoint_dir, now_ms, savepoint_dir_name};
use crate::control::api::{CheckpointHistory, JobState, SavepointStatus, SnapshotKind, TriggerState};
use crate::exec::messages::{Control, TaskEvent};
use crate::state::snapshot::CheckpointMetadata;
use crate::storage::{self, S3Options, Store};
use std::collections::{BTreeMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};
use tokio::sync::mpsc::{UnboundedReceiver, UnboundedSender};

/// Static configuration of the coordinator.
#[derive(Debug, Clone)]
pub struct CoordinatorConfig {
    /// Job name.
    pub job: String,
    /// Parallelism.
    pub parallelism: u32,
    /// Max parallelism.
    pub max_parallelism: u32,
    /// Periodic interval (zero: none).
    pub interval: Duration,
    /// Timeout of one checkpoint.
    pub timeout: Duration,
    /// Min pause between completion and next trigger.
    pub min_pause: Duration,
    /// Completed checkpoints to keep.
    pub retained: usize,
    /// Checkpoint store (rooted at the storage URL).
    pub store: Store,
    /// Default savepoint directory URL.
    pub savepoint_dir: String,
    /// S3 settings for savepoint directories.
    pub s3: S3Options,
    /// Number of subtasks that must acknowledge.
    pub tasks: usize,
    /// Task indexes of source subtasks.
    pub sources: Vec<usize>,
    /// First checkpoint id of this run.
    pub first_id: u64,
    /// This run's id: its end markers (`lineage::write_end_marker`, read by a coordinator
    /// restarted with the same `--run-id`) are recorded under it.
    pub run_id: String,
    /// Lineage id recorded in `_metadata` and savepoint pointers; retention only deletes
    /// snapshots of this lineage ([`super::decide::run_lineage`]: the restored checkpoint's
    /// lineage, or `run_id`).
    pub lineage: String,
    /// Fencing: checked right before every `_metadata` write.
    pub fence: Option<Arc<dyn Fence>>,
    /// Consecutive failed checkpoints tolerated before the job fails with the last failure
    /// (Flink's `execution.checkpointing.tolerable-failed-checkpoints`, default 0). Savepoints,
    /// and checkpoints aborted for a stop-with-savepoint, do not count.
    pub tolerable_failures: u32,
    /// Incremental checkpoints (`checkpointing.incremental`): barriers name the newest
    /// completed checkpoint as the base of deltas, and `_metadata` lists each subtask's chain.
    pub incremental: bool,
    /// The restored checkpoint when this run claims it (`checkpoint/restore_mode.rs`,
    /// [`RestoreMode::Claim`]): the confirmed checkpoint the first barriers name, so a
    /// subtask whose store a fast restore built references its table files instead of
    /// uploading them again. `None`: no restore, or no claim (a savepoint, a checkpoint in
    /// another directory): the first barriers name no confirmed checkpoint.
    ///
    /// [`RestoreMode::Claim`]: super::restore_mode::RestoreMode::Claim
    pub restored_base: Option<CheckpointMetadata>,
    /// A suspend takes one more checkpoint once the sources paused
    /// ([`super::suspend::checkpoints_at_suspend`]: at-most-once).
    pub checkpoint_at_suspend: bool,
}

/// How long the retention worker may go on deleting when the job ends with `outcome`: the
/// pass in flight and one more that sees the last checkpoint. A finished job has no next run
/// to delete what is left, so it waits longest: the stand-in's loaded S3 (moto, ten jobs at
/// once) took 6-7 s a pass, and a CI run left 7 checkpoints where `retained` is 3 when the
/// job finished with 10 s for both passes. A stop waits 10 s and a suspend (a pod shutting
/// down within its termination grace) 0.5 s: the run that resumes the lineage deletes the
/// rest, and an upgrade should not wait on housekeeping.
pub fn retention_grace_at_exit(outcome: &Outcome) -> Duration {
    match outcome {
        Outcome::Finished => Duration::from_secs(60),
        Outcome::Stopped(_) => Duration::from_secs(10),
        Outcome::Suspended => Duration::from_millis(500),
    }
}

/// A fence that a stale coordinator fails: checked before committing a checkpoint.
#[async_trait::async_trait]
pub trait Fence: Send + Sync + std::fmt::Debug {
    /// Ok while this coordinator is the newest one of the job.
    async fn check(&self) -> Result<(), String>;

    /// Called before snapshot `id` is triggered: records in storage, where the fence keeps
    /// one, that ids up to `id` may be in use, so that a coordinator process started after
    /// this one dies takes ids past it even if none of its files is visible yet. Errors: the
    /// storage failure (the snapshot is then not triggered). Default: nothing to record.
    async fn reserve_ids(&self, _id: u64) -> Result<(), String> {
        Ok(())
    }

    /// Whether a check found a newer coordinator: this one must stop (a restart would take
    /// ids and write files the newer one uses). Default: never.
    fn is_fenced(&self) -> bool {
        false
    }
}

/// A savepoint request from the control API.
#[derive(Debug)]
pub struct SavepointCommand {
    /// Trigger id (already registered in [`Shared::triggers`]).
    pub trigger_id: String,
    /// Target directory URL, or the default.
    pub directory: Option<String>,
    /// Stop after it completes.
    pub stop: bool,
}

/// State shared with the control API.
#[derive(Debug)]
pub struct Shared {
    /// Job state.
    pub state: JobState,
    /// Failure reason.
    pub failure: Option<String>,
    /// Checkpoint history.
    pub history: CheckpointHistory,
    /// Savepoint triggers by id.
    pub triggers: BTreeMap<String, SavepointStatus>,
    /// Trigger ids whose final status a client has read (a stopped job lingers until the
    /// stop-with-savepoint trigger's result was delivered).
    pub delivered: std::collections::HashSet<String>,
    /// The trigger of the stop-with-savepoint that stopped the job.
    pub stop_trigger: Option<String>,
    /// Triggers failed because the job ended (stopped or finished) before they were taken:
    /// `weir run` lingers until their clients read that.
    pub failed_by_end: Vec<String>,
    /// The restore point of the current run (attempt).
    pub restored_from: Option<String>,
    /// Cancelled to suspend the job gracefully (SIGTERM / SIGINT); see [`super::suspend`].
    pub suspend: tokio_util::sync::CancellationToken,
    /// Checkpoints and savepoints completed by this run (`history.completed` keeps only the
    /// newest).
    pub completed_total: u64,
    /// One more than the highest snapshot id this process triggered (0: none yet). A cluster
    /// coordinator's next attempt starts past it, not only past the ids its listing shows: the
    /// failed attempt's last checkpoint may have written nothing visible yet, and a worker of
    /// that attempt still uploading would write the same shared file names.
    pub next_snapshot_id: u64,
}

impl Shared {
    /// Fresh shared state.
    pub fn new() -> Shared {
        Shared {
            state: JobState::Initializing,
            failure: None,
            history: CheckpointHistory::default(),
            triggers: BTreeMap::new(),
            delivered: Default::default(),
            stop_trigger: None,
            failed_by_end: Vec::new(),
            restored_from: None,
            suspend: Default::default(),
            completed_total: 0,
            next_snapshot_id: 0,
        }
    }
}

impl Default for Shared {
    fn default() -> Self {
        Shared::new()
    }
}

/// How the job ended.
#[derive(Debug, Clone, PartialEq)]
pub enum Outcome {
    /// Bounded input consumed and committed.
    Finished,
    /// Stopped with a savepoint at this URL.
    Stopped(String),
    /// Suspended on request ([`Shared::suspend`]): no savepoint; the job resumes from its
    /// latest completed checkpoint.
    Suspended,
}

/// Runs the coordinator until the job ends. `controls[i]` reaches task i.
pub async fn run(
    cfg: CoordinatorConfig,
    controls: Vec<UnboundedSender<Control>>,
    mut events: UnboundedReceiver<TaskEvent>,
    commands: &mut UnboundedReceiver<SavepointCommand>,
    shared: Arc<Mutex<Shared>>,
) -> Result<Outcome, String> {
    let mut next_id = cfg.first_id;
    let mut pending: Option<Pending> = None;
    let mut queued: VecDeque<SavepointCommand> = VecDeque::new();
    let mut last_trigger: Option<Instant> = None;
    let mut last_completion: Option<Instant> = None;
    let mut exhausted: HashSet<usize> = HashSet::new();
    let mut ended: HashSet<usize> = HashSet::new();
    let mut finishing: Option<Outcome> = None;
    let mut final_requested = false;
    let retention = RetentionWorker::start(RetentionScope {
        store: cfg.store.clone(),
        job: cfg.job.clone(),
        retained: cfg.retained,
        run_id: cfg.lineage.clone(),
        first_id: cfg.first_id,
    });
    let mut retention = Some(retention);
    let mut failures = FailureCount::default();
    // The newest completed checkpoint's metadata: the base the next deltas extend. A savepoint
    // completing leaves it (savepoints are self-contained and never a base; retention keeps
    // the newest completed checkpoint, `decide::retention_plan`), so the checkpoint after a
    // savepoint is as incremental as the one before it. Before this run completes one, the
    // restored checkpoint when the run claims it.
    let mut base_checkpoint: Option<CheckpointMetadata> = cfg.restored_base.clone();
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Skip);
    let suspend = shared.lock().expect("lock").suspend.clone();
    let mut suspend_deadline: Option<Instant> = None;
    // The suspend's checkpoint (at-most-once): its id once triggered, and whether it completed.
    let mut suspend_checkpoint: Option<u64> = None;
    let mut suspend_checkpoint_done = false;
    // Subtask failures in arrival order, and when the first one's grace for its cause ends.
    let mut task_failures: Vec<String> = Vec::new();
    let mut cause_deadline: Option<Instant> = None;
    shared.lock().expect("lock").state = JobState::Running;
    let send_all = |c: &dyn Fn() -> Control| {
        for tx in &controls {
            let _ = tx.send(c());
        }
    };
    loop {
        tokio::select! {
            ev = events.recv() => {
                let Some(ev) = ev else {
                    return Err(match failure_cause::decide(&task_failures, true) {
                        FailureDecision::Fail(m) => attempt_failed(&shared, m),
                        _ => "all subtasks are gone".into(),
                    });
                };
                match ev {
                    TaskEvent::Ack(a) => {
                        if let Some(p) = pending.as_mut()
                            && p.barrier.id == a.checkpoint_id
                            && p.acked.insert(a.task)
                        {
                            p.acks.push(a);
                        }
                    }
                    TaskEvent::Declined { checkpoint_id, task, reason } => {
                        if pending.as_ref().is_some_and(|p| p.barrier.id == checkpoint_id) {
                            let p = pending.take().expect("checked");
                            tracing::warn!(checkpoint = checkpoint_id, task, %reason, "checkpoint declined");
                            let reason = format!("declined by task {task}: {reason}");
                            fail_pending(&p, &reason, &shared, &controls, &cfg, retention.as_ref());
                            failures.failed(&p, &reason, &cfg).map_err(|m| attempt_failed(&shared, m))?;
                        }
                    }
                    TaskEvent::SourceExhausted { task } => {
                        exhausted.insert(task);
                        if cfg.sources.iter().all(|s| exhausted.contains(s)) {
                            final_requested = true;
                        }
                    }
                    TaskEvent::Ended { task } => {
                        ended.insert(task);
                        if ended.len() == cfg.tasks {
                            send_all(&|| Control::Shutdown);
                            let outcome = finishing.clone().unwrap_or(Outcome::Finished);
                            // The job is done: let the last retention pass finish (bounded).
                            if let Some(r) = retention.take() {
                                r.finish(retention_grace_at_exit(&outcome)).await;
                            }
                            let mut s = shared.lock().expect("lock");
                            s.state = match outcome { Outcome::Finished => JobState::Finished, Outcome::Stopped(_) => JobState::Stopped, Outcome::Suspended => JobState::Suspending };
                            // Triggers that came after the end began were never taken.
                            let open: Vec<String> = s
                                .triggers
                                .iter()
                                .filter(|(_, t)| t.state == TriggerState::InProgress)
                                .map(|(id, _)| id.clone())
                                .collect();
                            fail_untaken(&mut s, open, &outcome);
                            return Ok(outcome);
                        }
                    }
                    TaskEvent::Failed { error, .. } => {
                        // Producers name the subtask (`count (2/4) on worker w2 failed: ...`) or
                        // lead with the cause (`worker w2 lost: ...`). A closed channel is a
                        // symptom: wait briefly for its cause (`failure_cause`).
                        task_failures.push(error);
                        cause_deadline.get_or_insert_with(|| Instant::now() + failure_cause::SYMPTOM_GRACE);
                    }
                }
            }
            cmd = commands.recv(), if finishing.is_none() => {
                if let Some(cmd) = cmd {
                    if cmd.stop && suspend_deadline.is_none() {
                        // A stop request supersedes an in-flight checkpoint or savepoint (which
                        // may hang on its storage for its whole timeout) and goes first. Not
                        // while suspending: nothing more is taken, and the suspend's checkpoint
                        // (at-most-once) must not be aborted; the suspend fails the trigger.
                        if let Some(p) = pending.take_if(|p| !p.barrier.stop && !p.is_final) {
                            let reason = format!("aborted: superseded by stop-with-savepoint {}", cmd.trigger_id);
                            tracing::warn!(checkpoint = p.barrier.id, %reason);
                            fail_pending(&p, &reason, &shared, &controls, &cfg, retention.as_ref());
                        }
                        queued.push_front(cmd);
                    } else {
                        queued.push_back(cmd);
                    }
                }
            }
            _ = suspend.cancelled(), if suspend_deadline.is_none() => {
                suspend_deadline = Some(Instant::now() + super::suspend::IN_FLIGHT_GRACE);
                // A checkpoint failing now ends the suspend, not the job.
                failures.suspending = true;
                super::suspend::begin(&shared, &cfg.sources, &controls);
            }
            _ = tick.tick() => {}
        }

        match failure_cause::decide(&task_failures, cause_deadline.is_some_and(|d| Instant::now() >= d)) {
            FailureDecision::Fail(message) => return Err(attempt_failed(&shared, message)),
            // A subtask failed: nothing completes or starts while its cause is awaited.
            FailureDecision::WaitForCause => continue,
            FailureDecision::Running => {}
        }

        // Pending checkpoint: complete or time out.
        if let Some(p) = pending.as_ref() {
            match decide::pending_state(p.acked.len(), cfg.tasks, p.started.elapsed(), cfg.timeout) {
                PendingState::AllAcked => {
                    let p = pending.take().expect("checked");
                    let id = p.barrier.id;
                    match complete(&cfg, &p, &shared, base_checkpoint.as_ref()).await {
                        Ok((stats, metadata)) => {
                            suspend_checkpoint_done |= suspend_checkpoint == Some(id);
                            base_checkpoint = next_base(base_checkpoint, metadata);
                            last_completion = Some(Instant::now());
                            failures.completed(&p);
                            send_all(&|| Control::Complete(id));
                            if let Some(r) = &retention {
                                r.completed(CompletedMark {
                                    id,
                                    savepoint: p.barrier.kind == SnapshotKind::Savepoint,
                                    url: stats.path.clone(),
                                });
                            }
                            if p.barrier.stop {
                                shared.lock().expect("lock").stop_trigger = p.trigger_id.clone();
                                finishing = Some(Outcome::Stopped(stats.path.clone()));
                            } else if p.is_final {
                                finishing = Some(Outcome::Finished);
                            }
                            if let Some(outcome) = &finishing {
                                for s in &cfg.sources {
                                    let _ = controls[*s].send(Control::Finish);
                                }
                                fail_queued(&mut queued, &shared, outcome);
                            }
                        }
                        Err(e) => {
                            tracing::error!(checkpoint = id, error = %e, "checkpoint could not be committed");
                            fail_pending(&p, &e, &shared, &controls, &cfg, retention.as_ref());
                            failures.failed(&p, &e, &cfg).map_err(|m| attempt_failed(&shared, m))?;
                        }
                    }
                }
                PendingState::TimedOut => {
                    let p = pending.take().expect("checked");
                    tracing::warn!(
                        checkpoint = p.barrier.id,
                        "checkpoint timed out after {:?}",
                        cfg.timeout
                    );
                    let reason = format!("timed out after {:?}", cfg.timeout);
                    fail_pending(&p, &reason, &shared, &controls, &cfg, retention.as_ref());
                    failures
                        .failed(&p, &reason, &cfg)
                        .map_err(|m| attempt_failed(&shared, m))?;
                }
                PendingState::Waiting { .. } => {}
            }
        }

        // At-most-once: the suspend's checkpoint is due once the suspend began, until triggered.
        let suspend_checkpoint_due =
            cfg.checkpoint_at_suspend && suspend_deadline.is_some() && suspend_checkpoint.is_none();
        if let Some(deadline) = suspend_deadline
            && super::suspend::stop_now(
                pending.is_some(),
                finishing.is_some(),
                suspend_checkpoint_due,
                Instant::now() >= deadline,
            )
        {
            send_all(&|| Control::Shutdown);
            super::suspend::end(&shared, pending.take().map(|p| p.barrier.id));
            if cfg.checkpoint_at_suspend && !suspend_checkpoint_done {
                tracing::warn!(
                    target: "weir",
                    "at-most-once: the suspend's checkpoint did not complete, so the records read since the \
                     last completed checkpoint are lost (their output is not committed, and `--restore latest` \
                     resumes past them)"
                );
            }
            if let Some(r) = retention.take() {
                r.finish(retention_grace_at_exit(&Outcome::Suspended)).await;
            }
            return Ok(Outcome::Suspended);
        }

        // Trigger the next one: queued savepoints first, then the final checkpoint, then periodic.
        // Suspending: nothing is triggered but the suspend checkpoint, after the sources paused.
        let suspending = suspend_deadline.is_some() || suspend.is_cancelled();
        if pending.is_none() && finishing.is_none() && (!suspending || suspend_checkpoint_due) {
            let next = if suspending {
                suspend_checkpoint = Some(next_id);
                Some((SnapshotKind::Checkpoint, false, None, None, false))
            } else if let Some(cmd) = queued.pop_front() {
                Some((
                    SnapshotKind::Savepoint,
                    cmd.stop,
                    Some(cmd.trigger_id),
                    cmd.directory,
                    false,
                ))
            } else if final_requested && failures.may_retry_now() {
                Some((SnapshotKind::Checkpoint, false, None, None, true))
            } else if !final_requested
                && decide::should_trigger(
                    false,
                    last_trigger.map(|t| t.elapsed()),
                    last_completion.map(|t| t.elapsed()),
                    cfg.interval,
                    cfg.min_pause,
                )
            {
                Some((SnapshotKind::Checkpoint, false, None, None, false))
            } else {
                None
            };
            if let Some((kind, stop, trigger_id, dir, is_final)) = next {
                let id = next_id;
                next_id += 1;
                // Ids only grow: an attempt starts at or past the value recorded before it.
                shared.lock().expect("lock").next_snapshot_id = next_id;
                let reserved = match &cfg.fence {
                    Some(f) => f.reserve_ids(id).await,
                    None => Ok(()),
                };
                let target = match reserved {
                    Err(e) => Err(format!(
                        "cannot reserve snapshot id {id} in the checkpoint storage: {e}"
                    )),
                    Ok(()) => match kind {
                        SnapshotKind::Checkpoint => Ok(SnapshotTarget {
                            store: cfg.store.clone(),
                            dir: checkpoint_dir(&cfg.job, id),
                        }),
                        SnapshotKind::Savepoint => {
                            let base = dir.unwrap_or_else(|| cfg.savepoint_dir.clone());
                            storage::open(&base, &cfg.s3)
                                .await
                                .map(|store| SnapshotTarget {
                                    store,
                                    dir: savepoint_dir_name(&cfg.job, id),
                                })
                                .map_err(|e| e.to_string())
                        }
                    },
                };
                match target {
                    Ok(target) => {
                        let barrier = Barrier {
                            id,
                            kind,
                            stop,
                            target: Arc::new(target),
                            triggered_at_ms: now_ms(),
                            is_final,
                            incremental: (cfg.incremental && kind == SnapshotKind::Checkpoint)
                                .then(|| incremental_base(base_checkpoint.as_ref())),
                        };
                        if stop {
                            shared.lock().expect("lock").state = JobState::Stopping;
                        }
                        for s in &cfg.sources {
                            let _ = controls[*s].send(Control::Trigger(barrier.clone()));
                        }
                        shared.lock().expect("lock").history.in_progress = Some(id);
                        last_trigger = Some(Instant::now());
                        pending = Some(Pending {
                            barrier,
                            started: Instant::now(),
                            acks: vec![],
                            acked: HashSet::new(),
                            trigger_id,
                            is_final,
                        });
                    }
                    Err(e) => {
                        // A checkpoint counts as failed (a storage outage fails the job after
                        // the tolerable failures, as failed uploads would) and is tried again
                        // after the interval; a savepoint's trigger reports it.
                        tracing::warn!(snapshot = id, error = %e, "snapshot not triggered");
                        last_trigger = Some(Instant::now());
                        {
                            let mut s = shared.lock().expect("lock");
                            if kind == SnapshotKind::Checkpoint {
                                s.history.failed += 1;
                            }
                        }
                        failures
                            .failed_snapshot(id, kind, &e, &cfg)
                            .map_err(|m| attempt_failed(&shared, m))?;
                        if let Some(t) = trigger_id {
                            let mut s = shared.lock().expect("lock");
                            if let Some(st) = s.triggers.get_mut(&t) {
                                st.state = TriggerState::Failed;
                                st.error = Some(e);
                            }
                        }
                    }
                }
            }
        }
    }
}

/// Records that the pending snapshot `p` failed with `reason`: its savepoint request fails,
/// sources paused by a stop resume, and a savepoint's directory is handed to retention to
/// delete ([`RetentionWorker::savepoint_failed`]).
fn fail_pending(
    p: &Pending,
    reason: &str,
    shared: &Arc<Mutex<Shared>>,
    controls: &[UnboundedSender<Control>],
    cfg: &CoordinatorConfig,
    retention: Option<&RetentionWorker>,
) {
    if p.barrier.kind == SnapshotKind::Savepoint
        && let Some(retention) = retention
    {
        retention.savepoint_failed(p.barrier.id, p.barrier.target.clone());
    }
    let mut s = shared.lock().expect("lock");
    s.history.failed += 1;
    s.history.in_progress = None;
    if let Some(t) = p.trigger_id.as_ref().and_then(|t| s.triggers.get_mut(t)) {
        t.state = TriggerState::Failed;
        t.error = Some(format!("savepoint {} failed: {reason}", p.barrier.id));
    }
    if p.barrier.stop {
        s.state = JobState::Running;
        for src in &cfg.sources {
            let _ = controls[*src].send(Control::Resume);
        }
    }
}

/// Records that this attempt failed with `msg`, fails its in-progress savepoints and says
/// `RESTARTING` until the attempt's owner decides; returns `msg`. Only the owner knows whether
/// the failure is final: a cluster's restart strategy restarts the job (it stays
/// `RESTARTING`) or gives up, and `weir run` fails it, both through [`job_failed_for_good`].
/// Before, the attempt said `FAILED` here, and a client polling in the moment before the
/// restart decision (the operator's health check) took a restarting job for a failed one;
/// `RUNNING` would accept savepoint requests no attempt takes.
fn attempt_failed(shared: &Arc<Mutex<Shared>>, msg: String) -> String {
    let mut s = shared.lock().expect("lock");
    s.state = JobState::Restarting;
    s.failure = Some(msg.clone());
    fail_open_triggers(&mut s);
    msg
}

/// Marks the job `FAILED` for good with `msg`, failing every savepoint request still open
/// (one accepted before the failure and never taken stays in progress otherwise, and `weir
/// savepoint trigger` waits out its timeout).
pub fn job_failed_for_good(shared: &Arc<Mutex<Shared>>, msg: String) {
    let mut s = shared.lock().expect("lock");
    s.state = JobState::Failed;
    s.failure = Some(msg);
    fail_open_triggers(&mut s);
}

fn fail_open_triggers(s: &mut Shared) {
    for t in s.triggers.values_mut().filter(|t| t.state == TriggerState::InProgress) {
        t.state = TriggerState::Failed;
        t.error = Some("the job failed".into());
    }
}

/// Savepoint requests still queued when the job ends with `outcome`: they will never be
/// taken.
fn fail_queued(queued: &mut VecDeque<SavepointCommand>, shared: &Arc<Mutex<Shared>>, outcome: &Outcome) {
    let mut s = shared.lock().expect("lock");
    fail_untaken(&mut s, queued.drain(..).map(|cmd| cmd.trigger_id), outcome);
}

/// Fails the savepoint requests `ids` that the job's end (`outcome`) left untaken, with
/// [`untaken_reason`], and records them in `failed_by_end` (the control API stays up until
/// their clients read that). An id without a trigger is skipped.
fn fail_untaken(s: &mut Shared, ids: impl IntoIterator<Item = String>, outcome: &Outcome) {
    for id in ids {
        if let Some(t) = s.triggers.get_mut(&id) {
            t.state = TriggerState::Failed;
            t.error = Some(untaken_reason(outcome));
            s.failed_by_end.push(id);
        }
    }
}

/// Why a savepoint request the job's end left untaken failed, by how the job ended: what
/// `weir savepoint trigger` prints, naming the snapshot that holds the end state.
fn untaken_reason(outcome: &Outcome) -> String {
    match outcome {
        Outcome::Finished => "the job finished (its input ended) before this savepoint was taken; its final \
                              checkpoint holds the end state"
            .into(),
        Outcome::Stopped(path) => {
            format!(
                "the job stopped with savepoint {path} before this savepoint was taken; that savepoint holds the end state"
            )
        }
        // Not reached (a suspend fails its triggers in `suspend::end`): the same words.
        Outcome::Suspended => "the job was suspended (SIGTERM/SIGINT) before the savepoint completed".into(),
    }
}

/// Consecutive failed checkpoints, against [`CoordinatorConfig::tolerable_failures`], and the
/// backoff before the final checkpoint of a bounded job is tried again.
#[derive(Default)]
struct FailureCount {
    consecutive: u32,
    last_failure: Option<Instant>,
    /// The job is suspending: a failed checkpoint ends the suspend, it does not fail the job.
    suspending: bool,
}

impl FailureCount {
    /// A checkpoint failed. Savepoints do not count (as in Flink). Errors when the failures
    /// exceed the tolerable number: the job fails with the cause.
    fn failed(&mut self, p: &Pending, reason: &str, cfg: &CoordinatorConfig) -> Result<(), String> {
        self.failed_snapshot(p.barrier.id, p.barrier.kind, reason, cfg)
    }

    /// [`FailureCount::failed`] for snapshot `id` of `kind` (one that may not have been
    /// triggered: its id could not be reserved).
    fn failed_snapshot(
        &mut self,
        id: u64,
        kind: SnapshotKind,
        reason: &str,
        cfg: &CoordinatorConfig,
    ) -> Result<(), String> {
        self.last_failure = Some(Instant::now());
        // A fenced coordinator stops at once, whatever the tolerable failures: a newer one runs.
        if cfg.fence.as_ref().is_some_and(|f| f.is_fenced()) {
            return Err(format!("snapshot {id} failed: {reason}"));
        }
        if kind == SnapshotKind::Savepoint || self.suspending {
            return Ok(());
        }
        self.consecutive += 1;
        if self.consecutive > cfg.tolerable_failures {
            return Err(format!(
                "checkpoint {} failed: {reason} ({} consecutive checkpoint failure(s); \
                 spec.checkpointing.tolerableFailedCheckpoints is {})",
                id, self.consecutive, cfg.tolerable_failures
            ));
        }
        Ok(())
    }

    /// A snapshot completed.
    fn completed(&mut self, p: &Pending) {
        if p.barrier.kind == SnapshotKind::Checkpoint {
            self.consecutive = 0;
        }
    }

    /// Whether a retry may start now: at once without failures, then after 0.2 s doubled per
    /// consecutive failure, at most 10 s.
    fn may_retry_now(&self) -> bool {
        let Some(at) = self.last_failure else { return true };
        let backoff = Duration::from_millis(200)
            .saturating_mul(1 << self.consecutive.min(6))
            .min(Duration::from_secs(10));
        at.elapsed() >= backoff
    }
}

/// Fresh shared state holding the savepoint triggers `(id, state)`, for tests.
#[cfg(test)]
pub(crate) fn shared_with_triggers(triggers: &[(&str, crate::control::api::TriggerState)]) -> Arc<Mutex<Shared>> {
    let mut shared = Shared::new();
    for (id, state) in triggers {
        let status = crate::control::api::SavepointStatus {
            trigger_id: id.to_string(),
            state: *state,
            path: None,
            checkpoint_id: None,
            error: None,
        };
        shared.triggers.insert(id.to_string(), status);
    }
    Arc::new(Mutex::new(shared))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::api::TriggerState;

    /// Savepoint requests still queued when the job ends fail saying how it ended and which
    /// snapshot holds the end state (the stop's savepoint by its path), and are recorded for
    /// the control API to linger for.
    #[test]
    fn queued_savepoints_fail_naming_how_the_job_ended() {
        let path = "file:///checkpoints/savepoints/savepoint-7";
        for (outcome, says) in [
            (Outcome::Finished, "the job finished (its input ended)".to_string()),
            (
                Outcome::Stopped(path.into()),
                format!("the job stopped with savepoint {path} before this savepoint was taken"),
            ),
        ] {
            let shared = shared_with_triggers(&[("q", TriggerState::InProgress)]);
            let mut queued = VecDeque::from([SavepointCommand {
                trigger_id: "q".into(),
                stop: false,
                directory: None,
            }]);
            fail_queued(&mut queued, &shared, &outcome);
            let s = shared.lock().unwrap();
            assert!(queued.is_empty());
            assert_eq!(s.triggers["q"].state, TriggerState::Failed);
            let error = s.triggers["q"].error.clone().unwrap_or_default();
            assert!(error.starts_with(&says), "{error}");
            assert_eq!(s.failed_by_end, vec!["q".to_string()]);
        }
    }

    /// A failed attempt records its failure, fails its savepoints in progress and says
    /// `RESTARTING` until the attempt's owner decides: a cluster restarting it must never be
    /// seen as `FAILED` (the operator would restart it a second time), nor as `RUNNING`
    /// (savepoint requests would be accepted). Failing for good then fails the requests
    /// still open.
    #[test]
    fn a_failed_attempt_says_restarting_until_its_owner_fails_the_job_for_good() {
        let shared = shared_with_triggers(&[("a", TriggerState::InProgress), ("b", TriggerState::Completed)]);
        shared.lock().unwrap().state = JobState::Running;
        let message = attempt_failed(&shared, "subtask 1 failed: boom".into());
        assert_eq!(message, "subtask 1 failed: boom");
        {
            let s = shared.lock().unwrap();
            assert_eq!(s.state, JobState::Restarting, "until the owner decides");
            assert_eq!(s.failure.as_deref(), Some("subtask 1 failed: boom"));
            assert_eq!(s.triggers["a"].state, TriggerState::Failed);
            assert_eq!(s.triggers["a"].error.as_deref(), Some("the job failed"));
            assert_eq!(
                s.triggers["b"].state,
                TriggerState::Completed,
                "a completed savepoint stays"
            );
        }
        // A request accepted before the failure, never taken by an attempt.
        let open = shared_with_triggers(&[("c", TriggerState::InProgress)]);
        let request = open.lock().unwrap().triggers["c"].clone();
        shared.lock().unwrap().triggers.insert("c".into(), request);
        job_failed_for_good(&shared, "3 restarts within 60s: giving up".into());
        let s = shared.lock().unwrap();
        assert_eq!(s.state, JobState::Failed);
        assert_eq!(s.failure.as_deref(), Some("3 restarts within 60s: giving up"));
        assert_eq!(s.triggers["c"].state, TriggerState::Failed);
        assert_eq!(s.triggers["b"].state, TriggerState::Completed);
    }
}
