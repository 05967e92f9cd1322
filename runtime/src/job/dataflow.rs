//! Dataflows, not lines: validation of a `steps` list whose steps are named (`name`) and wired
//! by `inputs`, with several sources merged by `union` steps, branches and several sinks.
//!
//! The rules, each an error naming the field path:
//! - names are unique step identifiers; `inputs` name steps declared *above* the step (steps
//!   are listed in data order, as a Flink program can use a `DataStream` only after creating
//!   it, so a dataflow has no cycles: a cycle always contains a reference to a later step);
//! - a step without `inputs` reads the step listed before it; a source reads nothing; a
//!   `union` reads two or more; a `join` exactly two (`[left, right]`, no `keyBy` before it:
//!   it partitions both by its keys); any other step one (merge streams with a `union`);
//! - a sink has no output, so it is nobody's input;
//! - a step may feed several steps (a **branch**, as a Flink `DataStream` used by two
//!   operators): each of them receives every record. Every step but a sink feeds at least one:
//!   a step whose output goes nowhere is an error (Flink would run such a branch and drop its
//!   records; here it is almost always a wiring mistake);
//! - at least one sink; a job may have several, each committing its output with every
//!   completed checkpoint;
//! - a window with `lateRecords: sideOutput` has a second output, its **late side output**
//!   (Flink's `sideOutputLateData` / `getSideOutput`), which later steps read as
//!   `inputs: [<window name>.late]`; it must be read, and only such a window has one. A step
//!   reads at most one output of a step (not `w` and `w.late` together);
//! - an aggregation reads a `keyBy`, and a `keyBy` feeds only aggregations and windows.
//!
//! So a valid dataflow is a directed acyclic graph: sources at the start, sinks at the ends.

use super::join::Side;
use super::spec::Step;
use super::validate::{JobError, Operator, OperatorKind, is_step_identifier, step_kind, step_uid};
use std::collections::HashMap;

/// The suffix that names a window's late side output in `inputs` (`hourly.late`).
pub const LATE_SUFFIX: &str = ".late";

/// Which output of a step another step reads.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Port {
    /// Its records (every step but a sink has this output).
    Main = 0,
    /// A window's late side output (`lateRecords: sideOutput`): records beyond the allowed
    /// lateness, as they came in.
    Late = 1,
}

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
    for (i, step) in steps.iter().enumerate() {
        if let Some(window) = step.name.as_deref().and_then(|n| n.strip_suffix(LATE_SUFFIX))
            && names.get(window).is_some_and(|&w| steps[w].window.is_some())
        {
            return Err(JobError::new(
                format!("spec.job.steps[{i}].name"),
                format!(
                    "`{window}{LATE_SUFFIX}` names the late side output of the window `{window}`; choose another name"
                ),
            ));
        }
    }
    let mut ops: Vec<Operator> = Vec::with_capacity(steps.len());
    // consumers[j][port] = the steps that read that output of step j.
    let mut consumers: Vec<[Vec<usize>; 2]> = vec![Default::default(); steps.len()];
    for (i, step) in steps.iter().enumerate() {
        let at = format!("spec.job.steps[{i}]");
        let kind = step_kind(i, step)?;
        let inputs = resolve_inputs(i, step, &kind, &names)?;
        for (k, &(j, port)) in inputs.iter().enumerate() {
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
            if port == Port::Late && !matches!(&ops[j].kind, OperatorKind::Window(def) if def.late_side_output) {
                let what = match ops[j].kind {
                    OperatorKind::Window(_) => format!(
                        "the window {shown} drops its late records: set `lateRecords: sideOutput` on it \
                         (spec.job.steps[{j}].window.lateRecords) to read them here"
                    ),
                    _ => format!(
                        "{shown} is not a window: only a window with `lateRecords: sideOutput` has a late side output"
                    ),
                };
                return Err(JobError::new(field, what));
            }
            consumers[j][port as usize].push(i);
        }
        check_keyed(&at, &kind, &inputs, &ops)?;
        let uid = step_uid(i, step, &kind, &ops)?;
        ops.push(Operator {
            uid,
            index: i,
            kind,
            inputs: inputs.iter().map(|&(j, _)| j).collect(),
            input_ports: inputs.iter().map(|&(_, port)| port).collect(),
        });
    }
    check_join_side_uids(&ops)?;
    check_file_sink_paths(&ops)?;
    if !ops.iter().any(|o| o.kind.is_sink()) {
        return Err(JobError::new(
            "spec.job.steps",
            "the dataflow has no sink: add a `sink` step",
        ));
    }
    for op in &ops {
        let [main, late] = &consumers[op.index];
        if !op.kind.is_sink() && main.is_empty() {
            return Err(JobError::new(
                format!("spec.job.steps[{}]", op.index),
                format!(
                    "the output of {} goes nowhere: no step reads it; name it in a step's `inputs` or remove it",
                    step_label(op.index, steps)
                ),
            ));
        }
        if let OperatorKind::Window(def) = &op.kind
            && def.late_side_output
            && late.is_empty()
        {
            let read_as = match &steps[op.index].name {
                Some(n) => format!("`inputs: [{n}{LATE_SUFFIX}]`"),
                None => format!("`inputs: [<name>{LATE_SUFFIX}]` after naming it (`name`)"),
            };
            return Err(JobError::new(
                format!("spec.job.steps[{}].window.lateRecords", op.index),
                format!(
                    "`sideOutput` sends the late records to the window's side output, but no step reads it: \
                     read it in a later step with {read_as}, or remove `lateRecords` to drop and count them"
                ),
            ));
        }
        if let OperatorKind::KeyBy { .. } = op.kind
            && let Some(&c) = main.iter().find(|&&c| !ops[c].kind.is_keyed())
        {
            return Err(JobError::new(
                format!("spec.job.steps[{}]", op.index),
                format!(
                    "`keyBy` must feed only aggregations (count, sum, min, max) and windows; spec.job.steps[{c}] \
                     reads it (put a branch before the `keyBy`, not after it)"
                ),
            ));
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

/// The inputs of step `i` by index and output: its `inputs` resolved by name (`w.late`: the
/// late side output of step `w`), or the main output of the step before it.
fn resolve_inputs(
    i: usize,
    step: &Step,
    kind: &OperatorKind,
    names: &HashMap<&str, usize>,
) -> Result<Vec<(usize, Port)>, JobError> {
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
            Some(previous) => Ok(vec![(previous, Port::Main)]),
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
        let found = match names.get(name.as_str()) {
            Some(&j) => Some((j, Port::Main)),
            None => name
                .strip_suffix(LATE_SUFFIX)
                .and_then(|w| names.get(w))
                .map(|&j| (j, Port::Late)),
        };
        let Some((j, port)) = found else {
            let mut known: Vec<&str> = names.keys().copied().collect();
            known.sort_unstable();
            let message = if known.is_empty() {
                format!(
                    "no step is named `{name}`, and no step has a `name`: `inputs` lists steps by \
                     their `name`, not their `uid`; add `name: {name}` to the step this one reads"
                )
            } else {
                let known = known.iter().map(|n| format!("`{n}`")).collect::<Vec<_>>().join(", ");
                format!("no step is named `{name}`; the named steps are {known}")
            };
            return Err(JobError::new(field, message));
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
        if let Some(&(_, other)) = out.iter().find(|(o, _)| *o == j) {
            let message = match other == port {
                true => format!("`{name}` is listed twice"),
                false => format!(
                    "`{name}` is another output of a step this step already reads: read a window's output and its \
                     late side output in two steps (and `union` them after if needed)"
                ),
            };
            return Err(JobError::new(field, message));
        }
        out.push((j, port));
    }
    Ok(out)
}

/// An aggregation reads exactly a `keyBy`; a join reads no `keyBy` (it keys both inputs).
fn check_keyed(at: &str, kind: &OperatorKind, inputs: &[(usize, Port)], ops: &[Operator]) -> Result<(), JobError> {
    if matches!(kind, OperatorKind::Join(_))
        && let Some(k) = inputs
            .iter()
            .position(|&(j, _)| matches!(ops[j].kind, OperatorKind::KeyBy { .. }))
    {
        return Err(JobError::new(
            format!("{at}.inputs[{k}]"),
            "a join partitions its inputs by `leftKey` and `rightKey` itself: read the step before the `keyBy` and remove the `keyBy`",
        ));
    }
    if kind.is_keyed() {
        let reads_key_by = matches!(inputs, [(j, Port::Main)] if matches!(ops[*j].kind, OperatorKind::KeyBy { .. }));
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

/// Refuses two file sinks whose output directories are the same or one inside the other: part
/// files are named by run, subtask and sequence number, not by sink, so two sinks in one
/// directory would write the same names and one sink's committed output would replace (S3) or
/// be dropped in favour of (local) the other's.
///
/// Paths are compared lexically after trimming, dropping a trailing `/` and `.` components
/// (`out`, `./out/` and `out/.` are one directory); symbolic links are not followed.
fn check_file_sink_paths(ops: &[Operator]) -> Result<(), JobError> {
    let mut seen: Vec<(usize, String)> = Vec::new();
    for op in ops {
        let OperatorKind::FileSink(spec) = &op.kind else {
            continue;
        };
        let dir = output_dir(&spec.path);
        for (other, other_dir) in &seen {
            let inside = |a: &str, b: &str| a == b || a.starts_with(&format!("{b}/"));
            if inside(&dir, other_dir) || inside(other_dir, &dir) {
                return Err(JobError::new(
                    format!("spec.job.steps[{}].sink.file.path", op.index),
                    format!(
                        "`{}` is the output directory of spec.job.steps[{other}] too (or inside it, or it inside this one); \
                         two file sinks in one directory would overwrite each other's part files: give each sink its own directory",
                        spec.path
                    ),
                ));
            }
        }
        seen.push((op.index, dir));
    }
    Ok(())
}

/// `path` as compared by [`check_file_sink_paths`]: trimmed, without `.` components, empty
/// components or a trailing `/` (the scheme's `//` of a URL is kept).
fn output_dir(path: &str) -> String {
    let path = path.trim();
    let (scheme, rest) = match path.split_once("://") {
        Some((scheme, rest)) => (format!("{scheme}://"), rest),
        None => (String::new(), path),
    };
    let absolute = scheme.is_empty() && rest.starts_with('/');
    let parts: Vec<&str> = rest.split('/').filter(|p| !p.is_empty() && *p != ".").collect();
    format!("{scheme}{}{}", if absolute { "/" } else { "" }, parts.join("/"))
}
