//! Whether a changed job's stateful steps can take over what the running job's steps store,
//! decided from the two jobs alone, before anything is stopped. A restore checks the shapes its
//! snapshot holds (an aggregation's key selector and expression,
//! `operators/aggregate_shape.rs`; a window's type, sizes, aggregate and key selector,
//! `operators/window/shape.rs`; a join's fields, inputs and key selectors,
//! `operators/join/stored_shape.rs`) and refuses another meaning. [`shape_refusals`] runs those
//! same checks on the shapes the running job's snapshots hold, so the operator can refuse an
//! upgrade the restore would refuse while the job still runs the previous spec (the restore's
//! own check stays as the second line).

use crate::job::{Job, Operator, OperatorKind};
use crate::operators::aggregate::shape::{AggregateShape, ShapePaths, refusal};
use crate::operators::join::stored_shape::{StoredShape, check_restored};
use crate::operators::window::shape::shape_item;
use crate::operators::window::{WindowKey, check_restored_shape};

/// Why `target`'s stateful steps cannot restore the state `deployed`'s steps store, one
/// message per step, each starting `operator <uid>: ` as a refused restore does and naming the
/// field to keep and the way out (a new uid). Empty: every step of `target` whose uid and kind
/// `deployed` has too would restore its state (steps with a new uid or another kind are
/// [`check_compatibility`](super::decide::check_compatibility)'s business).
pub fn shape_refusals(deployed: &Job, target: &Job) -> Vec<String> {
    let mut refusals = Vec::new();
    for op in &target.operators {
        let Some(before) = deployed
            .operators
            .iter()
            .find(|o| o.uid == op.uid && o.kind.name() == op.kind.name())
        else {
            continue;
        };
        let refused = match (&before.kind, &op.kind) {
            (OperatorKind::Aggregate { .. }, OperatorKind::Aggregate { func, .. }) => {
                let (Some((stored, _)), Some((job, key_step))) =
                    (aggregate_shape(deployed, before), aggregate_shape(target, op))
                else {
                    continue;
                };
                let step = format!("spec.job.steps[{}]", op.index);
                let paths = ShapePaths {
                    key: format!("spec.job.steps[{key_step}].keyBy.expression"),
                    expression: format!("{step}.{}.expression", func.name()),
                    uid: format!("{step}.uid"),
                };
                refusal(&stored, &job, &paths)
            }
            (OperatorKind::Window(stored), OperatorKind::Window(def)) => {
                let stored_key = key_by_before(deployed, before).map(|(expression, _)| expression);
                let item = shape_item(stored, stored_key, &(0, vec![]));
                let key = key_by_before(target, op).map(|(expression, key_step)| WindowKey {
                    expression: expression.to_string(),
                    expression_path: format!("spec.job.steps[{key_step}].keyBy.expression"),
                    uid_path: format!("spec.job.steps[{}].uid", op.index),
                });
                check_restored_shape(def, key.as_ref(), &[item]).err()
            }
            (OperatorKind::Join(stored), OperatorKind::Join(def)) => {
                check_restored(def, &[StoredShape::of(stored).encode()]).err()
            }
            _ => None,
        };
        if let Some(message) = refused {
            refusals.push(format!("operator {}: {message}", op.uid));
        }
    }
    refusals
}

/// The `keyBy` step `op` reads, as (its expression, its index in `spec.job.steps`), when its
/// first input is one (how the runtime finds the key selector of an aggregation or window).
fn key_by_before<'a>(job: &'a Job, op: &Operator) -> Option<(&'a str, usize)> {
    let input = &job.operators[*op.inputs.first()?];
    match &input.kind {
        OperatorKind::KeyBy { expression, .. } => Some((expression.as_str(), input.index)),
        _ => None,
    }
}

/// The shape an aggregation `op` of `job` keeps, and the index of its `keyBy` step; `None`
/// without a `keyBy` before it (then the runtime keeps no shape either).
fn aggregate_shape(job: &Job, op: &Operator) -> Option<(AggregateShape, usize)> {
    let OperatorKind::Aggregate { expression, .. } = &op.kind else {
        return None;
    };
    let (key, key_step) = key_by_before(job, op)?;
    Some((
        AggregateShape {
            key: key.to_string(),
            expression: expression.clone(),
        },
        key_step,
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(steps: &str) -> Job {
        let yaml = format!(
            "apiVersion: weir.dev/v1alpha1\nkind: StreamJob\nmetadata: {{ name: j }}\nspec:\n  job:\n    steps:\n{steps}"
        );
        crate::job::parse_manifest(&yaml, &[]).unwrap_or_else(|e| panic!("{e}\n{yaml}"))
    }

    const COUNT: &str = "      - { source: { generator: {} } }\n      - { keyBy: { expression: key } }\n      - { uid: counts, sum: { expression: value } }\n      - { sink: { print: {} } }\n";

    /// (what, deployed steps, target steps, refused naming)
    #[test]
    fn refusals_table() {
        let window = |size: &str, key: &str| {
            format!(
                "      - {{ source: {{ generator: {{}}, eventTime: {{ field: id }} }} }}\n      - {{ keyBy: {{ expression: {key} }} }}\n      - {{ uid: hourly, window: {{ type: tumbling, size: {size} }} }}\n      - {{ sink: {{ print: {{}} }} }}\n"
            )
        };
        let rows: Vec<(&str, String, String, Option<&str>)> = vec![
            ("same job", COUNT.into(), COUNT.into(), None),
            (
                "spacing of the key",
                COUNT.into(),
                COUNT.replace("expression: key }", "expression: \"key \" }"),
                None,
            ),
            (
                "another key",
                COUNT.into(),
                COUNT.replace("expression: key }", "expression: \"key + 'x'\" }"),
                Some("operator counts: spec.job.steps[1].keyBy.expression"),
            ),
            (
                "another sum",
                COUNT.into(),
                COUNT.replace("expression: value", "expression: \"value * 2\""),
                Some("operator counts: spec.job.steps[2].sum.expression"),
            ),
            (
                "a new uid is not refused here",
                COUNT.into(),
                COUNT
                    .replace("uid: counts", "uid: counts-v2")
                    .replace("expression: key }", "expression: \"string(id)\" }"),
                None,
            ),
            ("same window", window("1h", "key"), window("1h", "key"), None),
            (
                "another size",
                window("1h", "key"),
                window("2h", "key"),
                Some("operator hourly: the restore point holds windows"),
            ),
            (
                "another window key",
                window("1h", "key"),
                window("1h", "\"string(value)\""),
                Some("operator hourly: spec.job.steps[1].keyBy.expression"),
            ),
        ];
        for (what, deployed, target, want) in rows {
            let got = shape_refusals(&job(&deployed), &job(&target));
            match want {
                None => assert!(got.is_empty(), "{what}: {got:?}"),
                Some(start) => {
                    assert_eq!(got.len(), 1, "{what}: {got:?}");
                    assert!(got[0].starts_with(start), "{what}: {got:?}");
                    assert!(got[0].contains("uid"), "{what}: the way out: {got:?}");
                }
            }
        }
    }

    /// A join's changed key selector or kept fields are refused as its restore refuses them.
    #[test]
    fn a_join_with_another_key_is_refused() {
        let join = |right_key: &str| {
            format!(
                "      - {{ name: a, source: {{ generator: {{}} }} }}\n      - {{ name: b, source: {{ generator: {{}} }} }}\n      - {{ uid: joined, inputs: [a, b], join: {{ leftKey: key, rightKey: {right_key}, fields: [{{ from: left.value, as: amount }}] }} }}\n      - {{ sink: {{ print: {{}} }} }}\n"
            )
        };
        assert!(shape_refusals(&job(&join("key")), &job(&join("key"))).is_empty());
        let got = shape_refusals(&job(&join("key")), &job(&join("\"string(value)\"")));
        assert_eq!(got.len(), 1, "{got:?}");
        assert!(got[0].starts_with("operator joined: "), "{got:?}");
    }
}
