//! The physical plan (pure): operators grouped into stages of chained operators, and the
//! exchanges (edges) between stages.
//!
//! A stage starts at a source, at a union or a join (an operator with several inputs is never
//! chained to one of them, as in Flink), after a `keyBy` (a keyed exchange), and after an
//! operator with several consumers (a branch) or with a late side output: such an operator
//! ends its stage, whose output then goes to several downstream stages, each edge with its own
//! channels. Any other operator is chained into the stage of its one input. Both inputs of a
//! join cross a keyed exchange: each edge into a join runs the join's key selector for that
//! side ([`crate::operators::join::JoinSide`]) before the exchange. Every stage runs
//! `parallelism` subtasks; stage `s` subtask `k` is task `s × parallelism + k`.
//!
//! Edges out of a stage are ordered by downstream stage (ascending); a subtask's output
//! channels are its edges' channels in that order, each edge's by downstream subtask.

use crate::job::dataflow::Port;
use crate::job::{Job, OperatorKind};

/// How records cross from an upstream stage to a downstream one.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Exchange {
    /// Hash exchange by key group: every upstream subtask has a channel to every downstream
    /// subtask (after a `keyBy`, and into a join).
    Keyed,
    /// Upstream subtask k → downstream subtask k, one channel (same parallelism, no
    /// repartitioning): the inputs of a union, and the branches of an operator with several
    /// consumers.
    Forward,
}

/// One input of a stage: the upstream stage, the exchange, and which output of the upstream
/// stage's last operator it carries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StageInput {
    /// Upstream stage index (lower than the reading stage's).
    pub stage: usize,
    /// How records cross.
    pub exchange: Exchange,
    /// The main output, or a window's late side output.
    pub port: Port,
}

/// A stage: chained operators and where their input comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Stage {
    /// Operator indexes ([`Job::operators`]) in chain order; the first is the head.
    pub operators: Vec<usize>,
    /// Upstream stages (lower indexes) and the exchange from each, in the head's input order;
    /// empty for a source stage. The input channels of a subtask are these inputs' channels in
    /// this order, each input's by upstream subtask.
    pub inputs: Vec<StageInput>,
}

/// An edge out of a stage, as the upstream subtask sees it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StageOutput {
    /// Downstream stage.
    pub stage: usize,
    /// How records cross.
    pub exchange: Exchange,
    /// Which output of the upstream stage it carries.
    pub port: Port,
}

/// Groups the job's operators into stages (see the module doc). Stages come in data order:
/// a stage's inputs have lower indexes.
pub fn plan_graph(job: &Job) -> Vec<Stage> {
    // How many edges leave each operator (its consumers, over both outputs).
    let mut consumers = vec![0usize; job.operators.len()];
    let mut has_late = vec![false; job.operators.len()];
    for op in &job.operators {
        for (&j, &port) in op.inputs.iter().zip(&op.input_ports) {
            consumers[j] += 1;
            has_late[j] |= port == Port::Late;
        }
    }
    let mut stages: Vec<Stage> = Vec::new();
    let mut stage_of: Vec<usize> = Vec::with_capacity(job.operators.len());
    for (i, op) in job.operators.iter().enumerate() {
        let exchange_from = |j: usize| match (&job.operators[j].kind, &op.kind) {
            (OperatorKind::KeyBy { .. }, _) | (_, OperatorKind::Join(_)) => Exchange::Keyed,
            _ => Exchange::Forward,
        };
        let chained_into = match (op.inputs.as_slice(), op.input_ports.as_slice()) {
            ([j], [Port::Main]) if exchange_from(*j) == Exchange::Forward && consumers[*j] == 1 && !has_late[*j] => {
                Some(stage_of[*j])
            }
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
                    inputs: op
                        .inputs
                        .iter()
                        .zip(&op.input_ports)
                        .map(|(&j, &port)| StageInput {
                            stage: stage_of[j],
                            exchange: exchange_from(j),
                            port,
                        })
                        .collect(),
                });
                stages.len() - 1
            }
        };
        stage_of.push(stage);
    }
    stages
}

/// The edges out of `stage`, by downstream stage (ascending): empty when it ends in a sink.
pub fn stage_outputs(stages: &[Stage], stage: usize) -> Vec<StageOutput> {
    stages
        .iter()
        .enumerate()
        .flat_map(|(down, s)| {
            s.inputs
                .iter()
                .filter(move |i| i.stage == stage)
                .map(move |i| StageOutput {
                    stage: down,
                    exchange: i.exchange,
                    port: i.port,
                })
        })
        .collect()
}

/// The upstream tasks of task `task` (global index `stage × parallelism + subtask`), one per
/// input channel, in channel order: by stage input, then upstream subtask (every upstream
/// subtask for a keyed exchange, the same subtask for a forward one). Empty for a source.
pub fn upstream_tasks(stages: &[Stage], parallelism: usize, task: usize) -> Vec<usize> {
    let (stage, subtask) = (task / parallelism, task % parallelism);
    let mut out = Vec::new();
    for input in &stages[stage].inputs {
        match input.exchange {
            Exchange::Keyed => out.extend((0..parallelism).map(|k| input.stage * parallelism + k)),
            Exchange::Forward => out.push(input.stage * parallelism + subtask),
        }
    }
    out
}

/// The downstream tasks of one edge of subtask `subtask`, in channel order: every subtask of
/// the consuming stage for a keyed exchange, the same subtask for a forward one.
pub fn edge_tasks(edge: &StageOutput, parallelism: usize, subtask: usize) -> Vec<usize> {
    match edge.exchange {
        Exchange::Keyed => (0..parallelism).map(|k| edge.stage * parallelism + k).collect(),
        Exchange::Forward => vec![edge.stage * parallelism + subtask],
    }
}

/// The downstream tasks of task `task`, one per output channel, in channel order: by edge
/// ([`stage_outputs`]), then by downstream subtask ([`edge_tasks`]); empty when the stage ends
/// in a sink.
pub fn downstream_tasks(stages: &[Stage], parallelism: usize, task: usize) -> Vec<usize> {
    let (stage, subtask) = (task / parallelism, task % parallelism);
    stage_outputs(stages, stage)
        .iter()
        .flat_map(|e| edge_tasks(e, parallelism, subtask))
        .collect()
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

    /// A stage as the table writes it: (operators, inputs as (stage, exchange), main outputs only).
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
                .map(|s| (s.operators, s.inputs.iter().map(|i| (i.stage, i.exchange)).collect()))
                .collect();
            assert_eq!(got, want, "{steps}");
        }
    }

    /// A branch: the source feeds a keyBy (into a count) and a filter; the source ends its
    /// stage, and each consumer heads a stage of its own behind a forward edge. A window with
    /// a late side output ends its stage too; its late edge is port `Late`.
    #[test]
    fn an_operator_with_several_consumers_or_a_side_output_ends_its_stage() {
        use crate::job::dataflow::Port;
        let text = json!({"name": "lines", "source": {"file": {"path": "x"}}});
        let j = job(
            json!([text, {"keyBy": {"expression": "line"}}, {"count": {}}, {"sink": {"print": {}}},
            {"inputs": ["lines"], "filter": {"expression": "true"}}, {"sink": {"discard": {}}}]),
        );
        let g = plan_graph(&j);
        let got: Vec<StageRow> = g
            .iter()
            .map(|s| {
                (
                    s.operators.clone(),
                    s.inputs.iter().map(|i| (i.stage, i.exchange)).collect(),
                )
            })
            .collect();
        assert_eq!(
            got,
            vec![
                (vec![0], vec![]),
                (vec![1], vec![(0, Exchange::Forward)]),
                (vec![2, 3], vec![(1, Exchange::Keyed)]),
                (vec![4, 5], vec![(0, Exchange::Forward)]),
            ]
        );
        let edges: Vec<(usize, Exchange)> = stage_outputs(&g, 0).iter().map(|e| (e.stage, e.exchange)).collect();
        assert_eq!(edges, [(1, Exchange::Forward), (3, Exchange::Forward)]);
        // Task 0 (source subtask 0) sends to stage 1 subtask 0 and stage 3 subtask 0; task 2
        // (keyBy subtask 0) to both count subtasks.
        assert_eq!(downstream_tasks(&g, 2, 0), vec![2, 6]);
        assert_eq!(downstream_tasks(&g, 2, 1), vec![3, 7]);
        assert_eq!(downstream_tasks(&g, 2, 2), vec![4, 5]);
        assert_eq!(upstream_tasks(&g, 2, 6), vec![0]);
        // Every channel is wired on both ends.
        for task in 0..8 {
            for down in downstream_tasks(&g, 2, task) {
                assert!(upstream_tasks(&g, 2, down).contains(&task), "{task} -> {down}");
            }
        }

        let events = json!({"name": "e", "source": {"file": {"path": "e.jsonl", "format": "jsonl",
            "schema": [{"name": "t", "type": "int"}, {"name": "u", "type": "string"}]},
            "eventTime": {"field": "t", "maxOutOfOrderness": "1s"}}});
        let j = job(json!([events, {"keyBy": {"expression": "u", "as": "u"}},
            {"name": "w", "window": {"type": "tumbling", "size": "1m", "lateRecords": "sideOutput"}},
            {"map": {"expression": "{'u': u}"}}, {"sink": {"print": {}}},
            {"inputs": ["w.late"], "sink": {"discard": {}}}]));
        let g = plan_graph(&j);
        let stages: Vec<Vec<usize>> = g.iter().map(|s| s.operators.clone()).collect();
        assert_eq!(stages, vec![vec![0, 1], vec![2], vec![3, 4], vec![5]]);
        let edges: Vec<(usize, Exchange, Port)> = stage_outputs(&g, 1)
            .iter()
            .map(|e| (e.stage, e.exchange, e.port))
            .collect();
        assert_eq!(
            edges,
            [(2, Exchange::Forward, Port::Main), (3, Exchange::Forward, Port::Late)]
        );
    }
}
