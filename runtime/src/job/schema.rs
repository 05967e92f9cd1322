//! Plan-time schemas: the fields of each step's output, where the job says them, so a step that
//! names a field that cannot exist is an error before the job starts.
//!
//! Known schemas: a generator's `id`, `key`, `value`; a text file's `line`; a `map` whose
//! expression is an object literal with string keys (its keys, sorted, as the row it builds);
//! a `flatMap`'s input without the split field, plus the token field; an aggregation's key
//! field and value field. CSV headers and JSON lines are read at run time, so after those
//! sources (until a step with a known output) fields are checked per record when the job runs.

use super::validate::{JobError, Operator, OperatorKind};
use super::{FileFormat, FlatMapSpec};
use crate::record::cel;
use crate::record::cel_fields::{free_identifiers, map_literal_keys};

/// The fields of a step's output, in order, or `None` when only the records will tell.
pub type PlanSchema = Option<Vec<String>>;

/// The schema a source step declares.
fn source_schema(kind: &OperatorKind) -> PlanSchema {
    match kind {
        OperatorKind::Generator(_) => Some(
            crate::operators::source::generator::FIELDS
                .iter()
                .map(|s| s.to_string())
                .collect(),
        ),
        OperatorKind::FileSource(f) if f.format == FileFormat::Text => Some(vec!["line".into()]),
        _ => None,
    }
}

/// Checks that every field the expression at `field_path` reads exists in `input`.
fn check_expression(field_path: &str, expression: &str, input: &[String]) -> Result<(), JobError> {
    // The expression compiled in step validation; a failure here is reported the same way.
    let expr = cel::compile(expression).map_err(|e| JobError::new(field_path, e.to_string()))?;
    for name in free_identifiers(expr.syntax()) {
        if name != "record" && !input.contains(&name) {
            return Err(missing(field_path, &name, input));
        }
    }
    Ok(())
}

fn missing(field_path: &str, name: &str, input: &[String]) -> JobError {
    let known = input.iter().map(|f| format!("`{f}`")).collect::<Vec<_>>().join(", ");
    JobError::new(
        field_path,
        format!("field `{name}` does not exist in the records this step receives; their fields are {known}"),
    )
}

/// The output of a `flatMap` on rows of `input`: the split field removed, the token field
/// appended (or replacing a field of that name in place). Errors if the split field is not in
/// `input`.
fn flat_map_output(field_path: &str, spec: &FlatMapSpec, input: &[String]) -> Result<Vec<String>, JobError> {
    let Some(at) = input.iter().position(|f| *f == spec.field) else {
        return Err(missing(field_path, &spec.field, input));
    };
    let mut out = input.to_vec();
    out.remove(at);
    let token = spec.as_field.clone().unwrap_or_else(|| spec.field.clone());
    if !out.contains(&token) {
        out.push(token);
    }
    Ok(out)
}

/// The plan schema a union of `inputs` produces: the common fields when every input's are
/// known and equal, unknown when some input's are unknown.
///
/// Errors: two inputs whose known fields differ, naming the union's `inputs` field.
fn union_schema(
    at: &str,
    inputs: &[usize],
    operators: &[Operator],
    schemas: &[PlanSchema],
) -> Result<PlanSchema, JobError> {
    let mut first: Option<(usize, &Vec<String>)> = None;
    let mut all_known = true;
    for (k, &j) in inputs.iter().enumerate() {
        let Some(fields) = &schemas[j] else {
            all_known = false;
            continue;
        };
        match first {
            None => first = Some((j, fields)),
            Some((f, want)) if want != fields => {
                let show = |v: &Vec<String>| v.iter().map(|x| format!("`{x}`")).collect::<Vec<_>>().join(", ");
                return Err(JobError::new(
                    format!("{at}.inputs[{k}]"),
                    format!(
                        "a union merges streams of the same fields: spec.job.steps[{}] has {}, but spec.job.steps[{}] has {}; \
                         make them equal with a `map` before the union",
                        operators[f].index,
                        show(want),
                        operators[j].index,
                        show(fields)
                    ),
                ));
            }
            Some(_) => {}
        }
    }
    Ok(if all_known { first.map(|(_, f)| f.clone()) } else { None })
}

/// Follows the schema from the sources through every step (operators in data order, each
/// after its inputs), checking the fields each step reads where its input schema is known.
/// Errors: the first step that reads a field its input cannot have, naming the step's field
/// path (`spec.job.steps[2].keyBy.expression`) and the field; a union of inputs with different
/// known fields.
pub fn check_steps(operators: &[Operator]) -> Result<(), JobError> {
    let mut schemas: Vec<PlanSchema> = Vec::with_capacity(operators.len());
    for op in operators {
        let at = format!("spec.job.steps[{}]", op.index);
        let input: PlanSchema = match op.inputs.as_slice() {
            [j] => schemas[*j].clone(),
            _ => None,
        };
        let schema = match &op.kind {
            OperatorKind::FileSource(_) | OperatorKind::Generator(_) => source_schema(&op.kind),
            OperatorKind::Union => union_schema(&at, &op.inputs, operators, &schemas)?,
            OperatorKind::Filter(e) => {
                if let Some(fields) = &input {
                    check_expression(&format!("{at}.filter.expression"), e, fields)?;
                }
                input
            }
            OperatorKind::Map(e) => {
                let path = format!("{at}.map.expression");
                if let Some(fields) = &input {
                    check_expression(&path, e, fields)?;
                }
                let expr = cel::compile(e).map_err(|err| JobError::new(path, err.to_string()))?;
                map_literal_keys(expr.syntax())
            }
            OperatorKind::FlatMap(spec) => match &input {
                Some(fields) => Some(flat_map_output(&format!("{at}.flatMap.field"), spec, fields)?),
                None => None,
            },
            OperatorKind::KeyBy { expression, .. } => {
                if let Some(fields) = &input {
                    check_expression(&format!("{at}.keyBy.expression"), expression, fields)?;
                }
                input
            }
            OperatorKind::Aggregate {
                func,
                expression,
                as_field,
            } => {
                if let (Some(e), Some(fields)) = (expression, &input) {
                    check_expression(&format!("{at}.{}.expression", func.name()), e, fields)?;
                }
                let key_field = match op.inputs.first().map(|&k| &operators[k].kind) {
                    Some(OperatorKind::KeyBy { as_field, .. }) => as_field.clone(),
                    _ => "key".into(),
                };
                // One field when both have the same name (the value replaces the key).
                let mut out = vec![key_field];
                if !out.contains(as_field) {
                    out.push(as_field.clone());
                }
                Some(out)
            }
            OperatorKind::FileSink(_) | OperatorKind::PrintSink | OperatorKind::DiscardSink => input,
        };
        schemas.push(schema);
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use crate::job::{Job, JobSpec};
    use serde_json::json;

    fn spec(steps: serde_json::Value) -> JobSpec {
        serde_json::from_value(json!({ "parallelism": 2, "job": { "steps": steps } })).unwrap()
    }

    fn err(spec: JobSpec) -> String {
        Job::from_spec("t", spec).unwrap_err().to_string()
    }

    #[test]
    fn a_step_reading_a_field_its_input_cannot_have_is_an_error_naming_step_and_field() {
        let sink = json!({"sink": {"print": {}}});
        let generator = json!({"source": {"generator": {}}});
        let text = json!({"source": {"file": {"path": "a"}}});
        let plan_cases = [
            (
                json!([generator, {"keyBy": {"expression": "word"}}, {"count": {}}, sink]),
                "spec.job.steps[1].keyBy.expression: field `word` does not exist in the records this step receives; their fields are `id`, `key`, `value`",
            ),
            (
                json!([text, {"flatMap": {"field": "text", "pattern": " "}}, sink]),
                "spec.job.steps[1].flatMap.field: field `text` does not exist",
            ),
            (
                json!([text, {"map": {"expression": "{'w': line}"}}, {"filter": {"expression": "line != ''"}}, sink]),
                "spec.job.steps[2].filter.expression: field `line` does not exist",
            ),
            (
                json!([generator, {"keyBy": {"expression": "key"}}, {"sum": {"expression": "valu"}}, sink]),
                "spec.job.steps[2].sum.expression: field `valu` does not exist",
            ),
            (
                json!([generator, {"keyBy": {"expression": "key"}}, {"count": {}}, {"map": {"expression": "{'k': key, 'c': cnt}"}}, sink]),
                "spec.job.steps[3].map.expression: field `cnt` does not exist in the records this step receives; their fields are `key`, `count`",
            ),
        ];
        for (steps, want) in plan_cases {
            let e = err(spec(steps));
            assert!(e.contains(want), "want `{want}` in `{e}`");
        }
    }

    #[test]
    fn fields_are_checked_only_where_the_source_declares_them() {
        let sink = json!({"sink": {"print": {}}});
        let ok = [
            // JSON lines and CSV: fields are known only at run time.
            json!([{"source": {"file": {"path": "a", "format": "jsonl"}}}, {"keyBy": {"expression": "anything"}}, {"count": {}}, sink]),
            json!([{"source": {"file": {"path": "a", "format": "csv"}}}, {"flatMap": {"field": "x", "pattern": " "}}, sink]),
            // The word count: text → map literal → flatMap → keyBy → count → map of its output.
            json!([
                {"source": {"file": {"path": "a"}}},
                {"map": {"expression": "{'line': line.lower()}"}},
                {"flatMap": {"field": "line", "pattern": "\\W+", "as": "word"}},
                {"filter": {"expression": "size(word) > 1 && [word].exists(w, w != '')"}},
                {"keyBy": {"expression": "word", "as": "word"}},
                {"count": {}},
                {"map": {"expression": "{'w': word, 'n': count, 'all': record}"}},
                sink
            ]),
            // A map whose keys are computed: unknown schema after it.
            json!([{"source": {"generator": {}}}, {"map": {"expression": "{key: value}"}}, {"keyBy": {"expression": "x"}}, {"count": {}}, sink]),
        ];
        for steps in ok {
            let s = spec(steps.clone());
            assert!(
                Job::from_spec("t", s).is_ok(),
                "{steps}: {:?}",
                Job::from_spec("t", spec(steps.clone())).err()
            );
        }
    }
}
