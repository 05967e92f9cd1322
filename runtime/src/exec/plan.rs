//! The physical plan (pure): operators grouped into stages of chained operators, and the
//! exchanges between stages.
//!
//! A stage starts at a source, at a union or a join (an operator with several inputs is never
//! chained to one of them, as in Flink) and after a `keyBy` (a keyed exchange); any other
//! operator is chained into the stage of its one input. Both inputs of a join cross a keyed
//! exchange: the stage of each ends with the join's key selector for that side
//! ([`crate::operators::join::JoinSide`]). Every stage runs `parallelism` subtasks; stage `s`
//! subtask `k` is task `s × parallelism + k`.

use crate::job::{Job, OperatorKind};

/// How records cross from an upstream stage to a downstream one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exchange {
    /// Hash exchange by key group: every upstream subtask has a channel to every downstream
    /// subtask (after a `keyBy`, and into a join).
    Keyed,
    /// Upstream subtask k → downstream subtask k, one channel (same parallelism, no
    /// repartitioning): the inputs of a union.
    Forward,
}

/// A stage: chained operators and where their input comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stage {
    /// Operator indexes ([`Job::operators`]) in chain order; the first is the head.
    pub operators: Vec<usize>,
    /// Upstream stages (lower indexes) and the exchange from each, in the head's input order;
    /// empty for a source stage. The input channels of a subtask are these inputs' channels in
    /// this order, each input's by upstream subtask.
    pub inputs: Vec<(usize, Exchange)>,
}

/// Groups the job's operators into stages (see the module doc). Stages come in data order:
/// a stage's inputs have lower indexes.
pub fn plan_graph(job: &Job) -> Vec<Stage> {
    let mut stages: Vec<Stage> = Vec::new();
    let mut stage_of: Vec<usize> = Vec::with_capacity(job.operators.len());
    for (i, op) in job.operators.iter().enumerate() {
        let exchange_from = |j: usize| match (&job.operators[j].kind, &op.kind) {
            (OperatorKind::KeyBy { .. }, _) | (_, OperatorKind::Join(_)) => Exchange::Keyed,
            _ => Exchange::Forward,
        };
        let chained_into = match op.inputs.as_slice() {
            [j] if exchange_from(*j) == Exchange::Forward => Some(stage_of[*j]),
            _ => None,
        };
        let stage = match chained_into {
            Some(s) => {
                stages[s].operators.push(i);
                s
            }
            None => {
                stages.push(Stage {
                    operators: vec![i],
                    inputs: op.inputs.iter().map(|&j| (stage_of[j], exchange_from(j))).collect(),
                });
                stages.len() - 1
            }
        };
        stage_of.push(stage);
    }
    stages
}

/// The exchange a stage's output goes through: `None` when it ends in a sink (or feeds nothing).
pub fn output_exchange(stages: &[Stage], stage: usize) -> Option<Exchange> {
    stages
        .iter()
        .flat_map(|s| s.inputs.iter())
        .find(|(up, _)| *up == stage)
        .map(|(_, e)| *e)
}

/// The head operator (first of the chain) of the stage `stage` sends to: `None` when it ends
/// in a sink. Its uid names the channel state of what `stage` had not sent at a snapshot.
pub fn downstream_head(stages: &[Stage], stage: usize) -> Option<usize> {
    stages
        .iter()
        .find(|s| s.inputs.iter().any(|(up, _)| *up == stage))
        .map(|s| s.operators[0])
}

/// The upstream tasks of task `task` (global index `stage × parallelism + subtask`), one per
/// input channel, in channel order: by stage input, then upstream subtask (every upstream
/// subtask for a keyed exchange, the same subtask for a forward one). Empty for a source.
pub fn upstream_tasks(stages: &[Stage], parallelism: usize, task: usize) -> Vec<usize> {
    let (stage, subtask) = (task / parallelism, task % parallelism);
    let mut out = Vec::new();
    for &(up_stage, exchange) in &stages[stage].inputs {
        match exchange {
            Exchange::Keyed => out.extend((0..parallelism).map(|k| up_stage * parallelism + k)),
            Exchange::Forward => out.push(up_stage * parallelism + subtask),
        }
    }
    out
}

/// The downstream tasks of task `task`, one per output channel, in channel order (by
/// downstream subtask): every subtask of the consuming stage for a keyed exchange, the same
/// subtask for a forward one; empty when the stage ends in a sink.
pub fn downstream_tasks(stages: &[Stage], parallelism: usize, task: usize) -> Vec<usize> {
    let (stage, subtask) = (task / parallelism, task % parallelism);
    for (down_stage, s) in stages.iter().enumerate() {
        if let Some(&(_, exchange)) = s.inputs.iter().find(|(up, _)| *up == stage) {
            return match exchange {
                Exchange::Keyed => (0..parallelism).map(|k| down_stage * parallelism + k).collect(),
                Exchange::Forward => vec![down_stage * parallelism + subtask],
            };
        }
    }
    vec![]
}

/// The tasks of every source stage (stages without inputs), in index order.
pub fn source_tasks(stages: &[Stage], parallelism: usize) -> Vec<usize> {
    stages
        .iter()
        .enumerate()
        .filter(|(_, s)| s.inputs.is_empty())
        .flat_map(|(i, _)| (0..parallelism).map(move |k| i * parallelism + k))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::job::{Job, JobSpec};
    use serde_json::json;

    fn job(steps: serde_json::Value) -> Job {
        let spec: JobSpec = serde_json::from_value(json!({ "parallelism": 2, "job": { "steps": steps } })).unwrap();
        Job::from_spec("t", spec).unwrap()
    }

    /// A stage as the table writes it: (operators, inputs).
    type StageRow = (Vec<usize>, Vec<(usize, Exchange)>);

    /// Two sources (stages 0, 1) into a union (stage 2, forward), keyed into a count (stage 3),
    /// at parallelism 2: channels by stage input then upstream subtask, the same on both ends.
    #[test]
    fn tasks_are_wired_by_the_exchanges_of_the_plan() {
        let text = |n: &str| json!({"name": n, "source": {"file": {"path": "x"}}});
        let j = job(json!([text("a"), text("b"), {"union": {}, "inputs": ["a", "b"]},
            {"keyBy": {"expression": "line"}}, {"count": {}}, {"sink": {"print": {}}}]));
        let g = plan_graph(&j);
        let cases: [(usize, Vec<usize>, Vec<usize>); 8] = [
            (0, vec![], vec![4]),
            (1, vec![], vec![5]),
            (2, vec![], vec![4]),
            (3, vec![], vec![5]),
            (4, vec![0, 2], vec![6, 7]),
            (5, vec![1, 3], vec![6, 7]),
            (6, vec![4, 5], vec![]),
            (7, vec![4, 5], vec![]),
        ];
        for (task, up, down) in cases {
            assert_eq!(upstream_tasks(&g, 2, task), up, "upstream of task {task}");
            assert_eq!(downstream_tasks(&g, 2, task), down, "downstream of task {task}");
        }
        assert_eq!(source_tasks(&g, 2), vec![0, 1, 2, 3]);
    }

    #[test]
    fn stages_cut_at_sources_unions_and_after_key_by() {
        let text = |n: &str| json!({"name": n, "source": {"file": {"path": "x"}}});
        let filter = json!({"filter": {"expression": "true"}});
        let key_by = json!({"keyBy": {"expression": "line"}});
        let sink = json!({"sink": {"print": {}}});
        let cases = [
            // The single line: cut after keyBy only.
            (
                json!([{"source": {"file": {"path": "x"}}}, filter, key_by, {"count": {}}, sink]),
                vec![(vec![0, 1, 2], vec![]), (vec![3, 4], vec![(0, Exchange::Keyed)])],
            ),
            // Two sources, one with a chained filter, a union, then a keyed count.
            (
                json!([text("a"), text("b-raw"), {"name": "b", "filter": {"expression": "true"}}, {"union": {}, "inputs": ["a", "b"]}, key_by, {"count": {}}, sink]),
                vec![
                    (vec![0], vec![]),
                    (vec![1, 2], vec![]),
                    (vec![3, 4], vec![(0, Exchange::Forward), (1, Exchange::Forward)]),
                    (vec![5, 6], vec![(2, Exchange::Keyed)]),
                ],
            ),
            // A union after a keyed count: the count's output is forwarded.
            (
                json!([text("a"), key_by, {"name": "c", "count": {}}, {"name": "g", "source": {"file": {"path": "y", "format": "jsonl"}}}, {"union": {}, "inputs": ["c", "g"]}, sink]),
                vec![
                    (vec![0, 1], vec![]),
                    (vec![2], vec![(0, Exchange::Keyed)]),
                    (vec![3], vec![]),
                    (vec![4, 5], vec![(1, Exchange::Forward), (2, Exchange::Forward)]),
                ],
            ),
        ];
        for (steps, want) in cases {
            let got: Vec<StageRow> = plan_graph(&job(steps.clone()))
                .into_iter()
                .map(|s| (s.operators, s.inputs))
                .collect();
            assert_eq!(got, want, "{steps}");
        }
    }
}
