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
                for &(up_stage, exchange) in &s.inputs {
                    let ups: Vec<usize> = match exchange {
                        plan::Exchange::Keyed => (0..p).collect(),
                        plan::Exchange::Forward => vec![down],
                    };
                    for up in ups {
                        lanes.entry(up_stage * p + up).or_default().outputs.push(tx.clone());
                    }
                }
            }
        }
    }
    lanes
}
