//! Completing a checkpoint (part of the [coordinator](super::coordinator)): once every subtask
//! acknowledged, write `_metadata` with a conditional put (the commit point), record a
//! savepoint in the checkpoint store, and keep its statistics for the control API.

use super::coordinator::{CoordinatorConfig, Shared};
use super::lineage::{self, CommitError};
use super::{Ack, Barrier, METADATA_FILE, now_ms};
use crate::control::api::{CheckpointStats, SnapshotKind, TriggerState};
use crate::state::snapshot::{CheckpointMetadata, FORMAT_VERSION, OperatorMetadata, encode_metadata};
use crate::storage::join;
use std::collections::{BTreeMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Instant;

/// Completed snapshots the control API's history keeps.
const HISTORY: usize = 50;

/// A snapshot in flight: its barrier and the acknowledgements received so far.
pub(super) struct Pending {
    pub(super) barrier: Barrier,
    pub(super) started: Instant,
    pub(super) acks: Vec<Ack>,
    pub(super) acked: HashSet<usize>,
    pub(super) trigger_id: Option<String>,
    pub(super) is_final: bool,
}

/// The base that deltas of the next checkpoint may extend: the newest completed checkpoint
/// ([`next_base`]; a savepoint is self-contained and never a base).
pub(super) fn incremental_base(base_checkpoint: Option<&CheckpointMetadata>) -> Option<u64> {
    base_checkpoint
        .filter(|m| m.kind == SnapshotKind::Checkpoint)
        .map(|m| m.checkpoint_id)
}

/// The base after `completed` completed: it, if a checkpoint; else (a savepoint) still
/// `base`, so the checkpoint after a savepoint extends the one before it, as in Flink, where a
/// savepoint does not touch the incremental checkpoints' shared state.
pub(super) fn next_base(base: Option<CheckpointMetadata>, completed: CheckpointMetadata) -> Option<CheckpointMetadata> {
    match completed.kind {
        SnapshotKind::Checkpoint => Some(completed),
        SnapshotKind::Savepoint => base,
    }
}

/// Writes `_metadata` for a fully acknowledged checkpoint and records its statistics.
/// `base`: the newest completed snapshot, whose chains deltas extend.
pub(super) async fn complete(
    cfg: &CoordinatorConfig,
    p: &Pending,
    shared: &Arc<Mutex<Shared>>,
    base: Option<&CheckpointMetadata>,
) -> Result<(CheckpointStats, CheckpointMetadata), String> {
    let mut ops: BTreeMap<String, OperatorMetadata> = BTreeMap::new();
    for a in &p.acks {
        for o in &a.operators {
            let handle = crate::state::incremental::extend_chain(base, &o.uid, o.handle.clone(), o.delta_of)?;
            let e = ops.entry(o.uid.clone()).or_insert_with(|| OperatorMetadata {
                uid: o.uid.clone(),
                kind: o.kind.clone(),
                parallelism: o.parallelism,
                state_names: o.state_names.clone(),
                handles: vec![],
            });
            e.handles.push(handle);
        }
    }
    for o in ops.values_mut() {
        o.handles.sort_by_key(|h| h.subtask);
    }
    let (channel_state, alignment) = super::alignment_stats::alignment_of(&p.acks, cfg.parallelism);
    let meta = CheckpointMetadata {
        format_version: FORMAT_VERSION,
        job_name: cfg.job.clone(),
        checkpoint_id: p.barrier.id,
        kind: p.barrier.kind,
        max_parallelism: cfg.max_parallelism,
        parallelism: cfg.parallelism,
        triggered_at_ms: p.barrier.triggered_at_ms,
        completed_at_ms: now_ms(),
        run_id: Some(cfg.lineage.clone()),
        operators: ops.into_values().collect(),
        channel_state,
        alignment: alignment.clone(),
    };
    if let Some(f) = &cfg.fence {
        f.check().await?;
    }
    let bytes = encode_metadata(&meta);
    let (size, full_size) = meta.written_and_full_size(bytes.len() as u64);
    let target = &p.barrier.target;
    let path = join(&target.dir, METADATA_FILE);
    failpoint("before-metadata", p.barrier.id);
    // A stop-with-savepoint's savepoint says first that it ends the run: a coordinator
    // restarted with this run id then stays stopped instead of running on from it
    // (`decide::run_ended`).
    if p.barrier.stop {
        lineage::write_end_marker(
            &cfg.store,
            &cfg.job,
            &cfg.run_id,
            p.barrier.id,
            lineage::RunEnd::Stopped,
        )
        .await
        .map_err(|e| format!("recording that savepoint {} ends the run: {e}", p.barrier.id))?;
    }
    match lineage::put_once(&target.store, &path, bytes::Bytes::from(bytes)).await {
        Ok(()) => {}
        Err(CommitError::Conflict { url }) => {
            return Err(format!(
                "{url} already exists with other content: another coordinator committed snapshot {}",
                p.barrier.id
            ));
        }
        Err(CommitError::Storage(e)) => return Err(e.to_string()),
    }
    if p.barrier.kind == SnapshotKind::Savepoint {
        // Before any sink commits this savepoint's output: record it in the checkpoint store,
        // so that a failover restores it rather than an older checkpoint.
        let pointer = lineage::pointer_for(p.barrier.id, target.url(), &cfg.lineage);
        lineage::write_pointer(&cfg.store, &cfg.job, &pointer)
            .await
            .map_err(|e| format!("recording savepoint {} in the checkpoint store: {e}", p.barrier.id))?;
    }
    failpoint("after-metadata", p.barrier.id);
    let completed_at_ms = now_ms();
    let stats = CheckpointStats {
        id: p.barrier.id,
        kind: p.barrier.kind,
        path: target.url(),
        triggered_at_ms: p.barrier.triggered_at_ms,
        completed_at_ms,
        duration_ms: completed_at_ms.saturating_sub(p.barrier.triggered_at_ms),
        max_sync_ms: p.acks.iter().map(|a| a.sync_ms).max().unwrap_or(0),
        max_async_ms: p.acks.iter().map(|a| a.async_ms).max().unwrap_or(0),
        max_alignment_ms: p.acks.iter().map(|a| a.alignment_ms).max().unwrap_or(0),
        size_bytes: size,
        full_size_bytes: full_size,
        alignment,
    };
    tracing::info!(
        checkpoint = stats.id, kind = ?stats.kind, path = %stats.path, duration_ms = stats.duration_ms,
        sync_ms = stats.max_sync_ms, async_ms = stats.max_async_ms, alignment_ms = stats.max_alignment_ms,
        size_bytes = stats.size_bytes, unaligned = stats.alignment.unaligned,
        channel_state_bytes = stats.alignment.channel_state_bytes, "checkpoint completed"
    );
    crate::metrics::record_checkpoint(&stats);
    let mut s = shared.lock().expect("lock");
    s.history.in_progress = None;
    s.history.completed.push(stats.clone());
    s.completed_total += 1;
    if s.history.completed.len() > HISTORY {
        s.history.completed.remove(0);
    }
    if let Some(t) = p.trigger_id.as_ref().and_then(|t| s.triggers.get_mut(t)) {
        t.state = TriggerState::Completed;
        t.path = Some(stats.path.clone());
        t.checkpoint_id = Some(stats.id);
    }
    Ok((stats, meta))
}

/// Test hook for the two-phase-commit windows: `WEIR_FAILPOINT=<point>:<checkpoint id>`
/// aborts the process (like `kill -9`) at `before-metadata` (every subtask acknowledged,
/// sinks pre-committed, `_metadata` not written) or `after-metadata` (committed, sinks not yet
/// notified) of that checkpoint. Unset in production.
fn failpoint(point: &str, id: u64) {
    if crate::failpoint::is_set(&format!("{point}:{id}")) {
        tracing::warn!(target: "weir", "failpoint {point}:{id} reached, aborting");
        std::process::abort();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn completed(id: u64, kind: SnapshotKind) -> CheckpointMetadata {
        CheckpointMetadata {
            format_version: FORMAT_VERSION,
            job_name: "job".into(),
            checkpoint_id: id,
            kind,
            max_parallelism: 128,
            parallelism: 1,
            triggered_at_ms: 0,
            completed_at_ms: 0,
            run_id: None,
            operators: vec![],
            channel_state: vec![],
            alignment: Default::default(),
        }
    }

    /// The base after each completion, and the id the next barrier names: savepoints leave
    /// the newest checkpoint the base.
    #[test]
    fn savepoints_leave_the_incremental_base_table() {
        use SnapshotKind::{Checkpoint, Savepoint};
        // (completions in order, the base id the next barrier names)
        type Completions = Vec<(u64, SnapshotKind)>;
        let rows: Vec<(Completions, Option<u64>)> = vec![
            (vec![], None),
            (vec![(1, Checkpoint)], Some(1)),
            (vec![(1, Checkpoint), (2, Savepoint)], Some(1)),
            (vec![(1, Checkpoint), (2, Savepoint), (3, Savepoint)], Some(1)),
            (vec![(1, Checkpoint), (2, Savepoint), (3, Checkpoint)], Some(3)),
            // a savepoint first (a run restored from a savepoint): no base yet
            (vec![(1, Savepoint)], None),
        ];
        for (completions, want) in rows {
            let mut base = None;
            for (id, kind) in &completions {
                base = next_base(base, completed(*id, *kind));
            }
            assert_eq!(incremental_base(base.as_ref()), want, "{completions:?}");
        }
    }
}
