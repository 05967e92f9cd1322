//! Dataflows, not lines: validation of a `steps` list whose steps are named (`name`) and wired
//! by `inputs`, with several sources merged by `union` steps.
//!
//! The rules, each an error naming the field path:
//! - names are unique step identifiers; `inputs` name steps declared *above* the step (steps
//!   are listed in data order, as a Flink program can use a `DataStream` only after creating
//!   it, so a dataflow has no cycles: a cycle always contains a reference to a later step);
//! - a step without `inputs` reads the step listed before it; a source reads nothing; a
//!   `union` reads two or more; a `join` exactly two (`[left, right]`, no `keyBy` before it:
//!   it partitions both by its keys); any other step one (merge streams with a `union`);
//! - a sink has no output, so it is nobody's input;
//! - every step feeds at most one step (no branching yet) and every step but the sink feeds
//!   one: a step whose output goes nowhere is an error (Flink would run such a branch and drop
//!   its records; here it is almost always a wiring mistake);
//! - exactly one sink (several sinks would need branching or disconnected jobs: not yet);
//! - an aggregation reads a `keyBy`, and a `keyBy` feeds an aggregation.
//!
//! So a valid dataflow is a tree: sources at the leaves, the sink at the root.

use super::join::Side;
use super::spec::Step;
use super::validate::{JobError, Operator, OperatorKind, is_step_identifier, step_kind, step_uid};
use std::collections::HashMap;

/// Whether `steps` uses the dataflow form (any step has `name`, `inputs` or `union`). The
/// single-line form (none of them) keeps its own rules and messages.
pub fn is_dataflow(steps: &[Step]) -> bool {
    steps
        .iter()
        .any(|s| s.name.is_some() || s.inputs.is_some() || s.union.is_some())
}

/// Validates a dataflow: the step kinds, names, inputs and uids, by the rules of this module.
/// Operators come back in step order with their resolved inputs.
///
/// Errors: the first broken rule, naming the field (`spec.job.steps[3].inputs[1]: no step is
/// named `veiws`; the named steps are `clicks`, `views``).
pub fn validate(steps: &[Step]) -> Result<Vec<Operator>, JobError> {
    let mut names: HashMap<&str, usize> = HashMap::new();
    for (i, step) in steps.iter().enumerate() {
        if let Some(name) = &step.name {
            let at = format!("spec.job.steps[{i}].name");
            if !is_step_identifier(name) {
                return Err(JobError::new(
                    at,
                    format!("`{name}` must be 1-128 characters of letters, digits, '-', '_', '.'"),
                ));
            }
            if let Some(first) = names.insert(name, i) {
                return Err(JobError::new(
                    at,
                    format!("`{name}` is already the name of spec.job.steps[{first}]; names are unique"),
                ));
            }
        }
    }
    let mut ops: Vec<Operator> = Vec::with_capacity(steps.len());
    // consumer[j] = the step that reads step j.
    let mut consumer: Vec<Option<usize>> = vec![None; steps.len()];
    for (i, step) in steps.iter().enumerate() {
        let at = format!("spec.job.steps[{i}]");
        let kind = step_kind(i, step)?;
        let inputs = resolve_inputs(i, step, &kind, &names)?;
        for (k, &j) in inputs.iter().enumerate() {
            let field = match &step.inputs {
                Some(_) => format!("{at}.inputs[{k}]"),
                None => at.clone(),
            };
            let shown = step_label(j, steps);
            if ops[j].kind.is_sink() {
                return Err(JobError::new(
                    field,
                    format!("{shown} is a sink: it has no output to read"),
                ));
            }
            if let Some(other) = consumer[j] {
                return Err(JobError::new(
                    field,
                    format!(
                        "{shown} already feeds spec.job.steps[{other}]; a step feeds one step so far (no branching)"
                    ),
                ));
            }
            consumer[j] = Some(i);
        }
        check_keyed(&at, &kind, &inputs, &ops)?;
        let uid = step_uid(i, step, &kind, &ops)?;
        ops.push(Operator {
            uid,
            index: i,
            kind,
            inputs,
        });
    }
    check_join_side_uids(&ops)?;
    let sinks: Vec<usize> = ops.iter().filter(|o| o.kind.is_sink()).map(|o| o.index).collect();
    match sinks.as_slice() {
        [] => {
            return Err(JobError::new(
                "spec.job.steps",
                "the dataflow has no sink: add a `sink` step",
            ));
        }
        [_] => {}
        [first, second, ..] => {
            return Err(JobError::new(
                format!("spec.job.steps[{second}]"),
                format!("a job has one sink so far (spec.job.steps[{first}] is the other)"),
            ));
        }
    }
    for op in &ops {
        if !op.kind.is_sink() && consumer[op.index].is_none() {
            return Err(JobError::new(
                format!("spec.job.steps[{}]", op.index),
                format!(
                    "the output of {} goes nowhere: no step reads it; name it in a step's `inputs` or remove it",
                    step_label(op.index, steps)
                ),
            ));
        }
        if let OperatorKind::KeyBy { .. } = op.kind {
            let feeds_aggregate = consumer[op.index].is_some_and(|c| ops[c].kind.is_keyed());
            if !feeds_aggregate {
                return Err(JobError::new(
                    format!("spec.job.steps[{}]", op.index),
                    "`keyBy` must feed an aggregation (count, sum, min, max) or a `window`",
                ));
            }
        }
    }
    Ok(ops)
}

/// How messages name step `j`: `step `clicks`` or `spec.job.steps[2]`.
fn step_label(j: usize, steps: &[Step]) -> String {
    match &steps[j].name {
        Some(n) => format!("step `{n}`"),
        None => format!("spec.job.steps[{j}]"),
    }
}

/// The inputs of step `i` by index: its `inputs` resolved by name, or the step before it.
fn resolve_inputs(
    i: usize,
    step: &Step,
    kind: &OperatorKind,
    names: &HashMap<&str, usize>,
) -> Result<Vec<usize>, JobError> {
    let at = format!("spec.job.steps[{i}]");
    if kind.is_source() {
        if step.inputs.is_some() {
            return Err(JobError::new(
                format!("{at}.inputs"),
                "a source reads no input; remove `inputs`",
            ));
        }
        return Ok(vec![]);
    }
    let Some(listed) = &step.inputs else {
        if *kind == OperatorKind::Union {
            return Err(JobError::new(
                format!("{at}.inputs"),
                "a union needs `inputs`: the names of the two or more steps it merges",
            ));
        }
        if matches!(kind, OperatorKind::Join(_)) {
            return Err(JobError::new(
                format!("{at}.inputs"),
                "a join needs `inputs`: the names of its left and right steps, `[left, right]`",
            ));
        }
        return match i.checked_sub(1) {
            Some(previous) => Ok(vec![previous]),
            None => Err(JobError::new(
                at,
                "has no input: the first step must be a `source` (or name this step's input in `inputs`)",
            )),
        };
    };
    match (kind, listed.len()) {
        (OperatorKind::Union, n) if n < 2 => {
            return Err(JobError::new(
                format!("{at}.inputs"),
                format!("a union merges two or more inputs, got {n}"),
            ));
        }
        (OperatorKind::Join(_), 2) => {}
        (OperatorKind::Join(_), n) => {
            return Err(JobError::new(
                format!("{at}.inputs"),
                format!("a join reads exactly two inputs, `[left, right]`, got {n}"),
            ));
        }
        (OperatorKind::Union, _) | (_, 1) => {}
        (_, 0) => {
            return Err(JobError::new(
                format!("{at}.inputs"),
                "is empty: name the step this one reads, or remove `inputs` to read the step listed before it",
            ));
        }
        (_, n) => {
            return Err(JobError::new(
                format!("{at}.inputs"),
                format!("this step reads one input, got {n}; merge streams with a `union` step first"),
            ));
        }
    }
    let mut out = Vec::with_capacity(listed.len());
    for (k, name) in listed.iter().enumerate() {
        let field = format!("{at}.inputs[{k}]");
        let Some(&j) = names.get(name.as_str()) else {
            let mut known: Vec<&str> = names.keys().copied().collect();
            known.sort_unstable();
            let known = known.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
            return Err(JobError::new(
                field,
                format!("no step is named `{name}`; the named steps are {known}"),
            ));
        };
        if j >= i {
            return Err(JobError::new(
                field,
                format!(
                    "`{name}` is spec.job.steps[{j}], not above this step: list steps in data order \
                     (an input is declared before the steps reading it, so a dataflow has no cycles)"
                ),
            ));
        }
        if out.contains(&j) {
            return Err(JobError::new(field, format!("`{name}` is listed twice")));
        }
        out.push(j);
    }
    Ok(out)
}

/// An aggregation reads exactly a `keyBy`; a join reads no `keyBy` (it keys both inputs).
fn check_keyed(at: &str, kind: &OperatorKind, inputs: &[usize], ops: &[Operator]) -> Result<(), JobError> {
    if matches!(kind, OperatorKind::Join(_))
        && let Some(k) = inputs
            .iter()
            .position(|&j| matches!(ops[j].kind, OperatorKind::KeyBy { .. }))
    {
        return Err(JobError::new(
            format!("{at}.inputs[{k}]"),
            "a join partitions its inputs by `leftKey` and `rightKey` itself: read the step before the `keyBy` and remove the `keyBy`",
        ));
    }
    if kind.is_keyed() {
        let reads_key_by = matches!(inputs, [j] if matches!(ops[*j].kind, OperatorKind::KeyBy { .. }));
        if !reads_key_by {
            return Err(JobError::new(
                at,
                format!(
                    "`{}` must read a `keyBy` step (its input or the step before it)",
                    kind.name()
                ),
            ));
        }
    }
    Ok(())
}

/// A join runs the key selectors of its inputs as operators `<join uid>.left` and
/// `<join uid>.right` (task names, metrics, channel state): no step may have one of those uids.
/// Errors: the step that has one, on its `uid`.
fn check_join_side_uids(ops: &[Operator]) -> Result<(), JobError> {
    for join in ops.iter().filter(|o| matches!(o.kind, OperatorKind::Join(_))) {
        for side in [Side::Left, Side::Right] {
            let reserved = format!("{}.{}", join.uid, side.name());
            if let Some(op) = ops.iter().find(|o| o.uid == reserved) {
                return Err(JobError::new(
                    format!("spec.job.steps[{}].uid", op.index),
                    format!(
                        "`{reserved}` is the uid of the {} input of the join spec.job.steps[{}] (`<join uid>.{}`); \
                         choose another uid",
                        side.name(),
                        join.index,
                        side.name()
                    ),
                ));
            }
        }
    }
    Ok(())
}

#[cfg(test)]
#[path = "dataflow_tests.rs"]
mod tests;
