//! Priority lanes of unaligned checkpoints ([`super::inputs`]): per subtask with inputs, an
//! unbounded channel that carries barriers ahead of the records queued in its data channels.

use super::plan;
use crate::checkpoint::Barrier;
use crate::job::Job;
use std::collections::HashMap;
use tokio::sync::mpsc;

/// A subtask's priority lanes (unaligned checkpoints, [`super::inputs`]): the unbounded channels
/// that carry barriers ahead of the records queued in the data channels. Empty when
/// checkpoints are aligned.
#[derive(Default)]
pub struct PriorityLanes {
    /// The lanes of the downstream subtasks this subtask sends to.
    pub outputs: Vec<mpsc::UnboundedSender<Barrier>>,
    /// This subtask's own lane (not for a source).
    pub input: Option<mpsc::UnboundedReceiver<Barrier>>,
}

/// The priority lanes of every subtask of `job` in one process, by global task index: every
/// subtask with inputs has one, and each upstream subtask a sender to the lanes of the
/// subtasks it sends to (the same wiring as the data channels). Empty when checkpoints are
/// aligned.
pub fn priority_lanes(job: &Job) -> HashMap<usize, PriorityLanes> {
    let mut lanes: HashMap<usize, PriorityLanes> = HashMap::new();
    let p = job.parallelism as usize;
    if job.unaligned_after().is_some() {
        for (stage, s) in plan::plan_graph(job).iter().enumerate() {
            for down in 0..p {
                if s.inputs.is_empty() {
                    continue;
                }
                let (tx, rx) = mpsc::unbounded_channel();
                lanes.entry(stage * p + down).or_default().input = Some(rx);
                for input in &s.inputs {
                    let ups: Vec<usize> = match input.exchange {
                        plan::Exchange::Keyed => (0..p).collect(),
                        plan::Exchange::Forward => vec![down],
                    };
                    for up in ups {
                        lanes.entry(input.stage * p + up).or_default().outputs.push(tx.clone());
                    }
                }
            }
        }
    }
    lanes
}

/// The priority lanes of the subtasks one worker runs ([`priority_lanes`] for the
/// distributed runtime). Channels between two local subtasks are wired as in one process;
/// a remote channel's lane crosses the network as `PriorityBarrier` frames
/// ([`crate::cluster::wire::DataFrame`]): the upstream side reads it from `outbound`, the
/// downstream side writes it into the lane `inbound` names.
#[derive(Default)]
pub struct WorkerLanes {
    /// The lanes of each local subtask, by global task index.
    pub tasks: HashMap<usize, PriorityLanes>,
    /// Remote upstream → local downstream, by `(upstream task, downstream task)`: the
    /// downstream subtask's lane, for the receiving side of the data connection.
    pub inbound: HashMap<(usize, usize), mpsc::UnboundedSender<Barrier>>,
    /// Local upstream → remote downstream, by `(upstream task, downstream task)`: what the
    /// upstream subtask sends to the downstream subtask's lane, for the sending side of the
    /// data connection.
    pub outbound: HashMap<(usize, usize), mpsc::UnboundedReceiver<Barrier>>,
}

/// The priority lanes of the subtasks `local` (global task indexes) of `job` on one worker:
/// every local subtask with inputs has a lane; a local upstream subtask sends to it directly,
/// a remote one through [`WorkerLanes::inbound`]; a local subtask's barriers for a remote
/// downstream subtask go through [`WorkerLanes::outbound`]. Empty when checkpoints are aligned.
pub fn worker_lanes(job: &Job, local: &[usize]) -> WorkerLanes {
    let mut out = WorkerLanes::default();
    if job.unaligned_after().is_none() {
        return out;
    }
    let graph = plan::plan_graph(job);
    let p = job.parallelism as usize;
    let is_local = |t: usize| local.contains(&t);
    for &down in local {
        let ups = plan::upstream_tasks(&graph, p, down);
        if ups.is_empty() {
            continue;
        }
        let (tx, rx) = mpsc::unbounded_channel();
        out.tasks.entry(down).or_default().input = Some(rx);
        for up in ups {
            if is_local(up) {
                out.tasks.entry(up).or_default().outputs.push(tx.clone());
            } else {
                out.inbound.insert((up, down), tx.clone());
            }
        }
    }
    for &up in local {
        for down in plan::downstream_tasks(&graph, p, up) {
            if !is_local(down) {
                let (tx, rx) = mpsc::unbounded_channel();
                out.tasks.entry(up).or_default().outputs.push(tx);
                out.outbound.insert((up, down), rx);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    /// Two text sources into a union, a word count after a `keyBy`, p = 2: stages 0 and 1 are
    /// the sources (tasks 0–3), stage 2 the union chain (4, 5), stage 3 the count (6, 7).
    fn union_count(unaligned: bool) -> Job {
        let spec = json!({
            "parallelism": 2,
            "checkpointing": { "unaligned": unaligned },
            "job": { "steps": [
                {"name": "a", "source": {"file": {"path": "a.txt"}}},
                {"name": "b", "source": {"file": {"path": "b.txt"}}},
                {"union": {}, "inputs": ["a", "b"]},
                {"flatMap": {"field": "line", "pattern": "\\W+", "as": "word"}},
                {"keyBy": {"expression": "word", "as": "word"}},
                {"count": {}},
                {"sink": {"discard": {}}}
            ]}
        });
        Job::from_spec("t", serde_json::from_value(spec).unwrap()).unwrap()
    }

    fn sorted<T>(m: &HashMap<(usize, usize), T>) -> Vec<(usize, usize)> {
        let mut keys: Vec<_> = m.keys().copied().collect();
        keys.sort();
        keys
    }

    /// Slot 0 of the cluster (subtask 0 of every stage): the forward channels into the union
    /// are local; of the keyed exchange, 4 → 6 is local, 5 → 6 comes in over the network and
    /// 4 → 7 goes out over it.
    #[test]
    fn a_workers_lanes_are_local_where_both_ends_are_and_cross_the_network_otherwise() {
        let job = union_count(true);
        let lanes = worker_lanes(&job, &[0, 2, 4, 6]);
        let outputs = |t: usize| lanes.tasks.get(&t).map_or(0, |l| l.outputs.len());
        let has_input = |t: usize| lanes.tasks.get(&t).is_some_and(|l| l.input.is_some());
        assert_eq!(
            [0, 2, 4, 6].map(outputs),
            [1, 1, 2, 0],
            "sources to the union; the union to counts 0 (local) and 1 (remote)"
        );
        assert_eq!([0, 2, 4, 6].map(has_input), [false, false, true, true]);
        assert_eq!(sorted(&lanes.inbound), [(5, 6)]);
        assert_eq!(sorted(&lanes.outbound), [(4, 7)]);
        // A barrier a remote upstream passes in reaches the local subtask's lane.
        let mut lanes = lanes;
        let dir = tempfile::tempdir().unwrap();
        let barrier = Barrier {
            id: 1,
            kind: crate::control::api::SnapshotKind::Checkpoint,
            stop: false,
            target: std::sync::Arc::new(crate::checkpoint::SnapshotTarget {
                store: std::sync::Arc::new(crate::storage::LocalStore::new(dir.path()).unwrap()),
                dir: "x".into(),
            }),
            triggered_at_ms: 0,
            is_final: false,
            incremental: None,
        };
        lanes.inbound[&(5, 6)].send(barrier).unwrap();
        let got = lanes
            .tasks
            .get_mut(&6)
            .unwrap()
            .input
            .as_mut()
            .unwrap()
            .try_recv()
            .unwrap();
        assert_eq!(got.id, 1);
    }

    #[test]
    fn aligned_checkpoints_have_no_lanes_on_a_worker() {
        let lanes = worker_lanes(&union_count(false), &[0, 2, 4, 6]);
        assert!(lanes.tasks.is_empty() && lanes.inbound.is_empty() && lanes.outbound.is_empty());
    }
}
