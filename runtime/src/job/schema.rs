//! Plan-time schemas: the fields of each step's output and their types ([`FieldType`]), so a
//! step that names a field that cannot exist, or uses a field in a way its type certainly
//! fails, is an error before the job starts.
//!
//! Where schemas come from: a generator's `id` (int), `key` (string), `value` (int); a text
//! file's `line` (string); a CSV file's header (read at plan time from the first file the
//! source names; columns are strings unless the source's `schema` declares their type); a JSON
//! lines file's declared `schema`, or else the fields and types of its first
//! [`JSON_SAMPLE_LINES`] lines; a `map` whose expression is an object literal with string keys
//! (its keys, sorted, each with its value's inferred type); a `flatMap`'s input without the
//! split field, plus the token field (a string); an aggregation's key field and value field.
//! Where no schema is known (an `s3://` source, a file that does not exist yet, a `map` with
//! computed keys), fields are checked per record when the job runs.
//!
//! What is checked: every field an expression names exists; expressions have no certain type
//! error ([`cel_types`]); a `filter` gives a bool; `sum`, `min`, `max` aggregate a number;
//! a key is a string, int or bool; a `flatMap` splits a string.

use super::types::{Field, FieldType, infer_fields};
use super::validate::{AggregateFn, JobError, Operator, OperatorKind};
use super::{FileFormat, FileSourceSpec, FlatMapSpec};
use crate::record::cel_fields::{free_identifiers, map_literal_entries};
use crate::record::{Row, cel, cel_types};

/// The fields of a step's output, in order, or `None` when only the records will tell.
pub type PlanSchema = Option<Vec<Field>>;

/// Number of lines of a JSON lines file from which its schema is inferred at plan time.
pub const JSON_SAMPLE_LINES: usize = 100;

/// What the plan read from the first file of a file source.
#[derive(Clone, Debug, PartialEq)]
pub enum SourceSample {
    /// A CSV file's header.
    CsvHeader {
        /// The file read.
        file: String,
        /// Column names, in order.
        columns: Vec<String>,
    },
    /// The first lines of a JSON lines file, parsed as the source parses them (up to the
    /// first line that does not parse; the job reports that one when it runs).
    JsonRows {
        /// The file read.
        file: String,
        /// The rows.
        rows: Vec<Row>,
    },
}

/// The schema of a file source: from its declared `schema` and, where that does not say it
/// all, from `sample`. Errors: a `schema` on a text source, a field declared twice, a declared
/// CSV column that is not in the header.
fn file_source_schema(at: &str, spec: &FileSourceSpec, sample: Option<&SourceSample>) -> Result<PlanSchema, JobError> {
    let declared = spec.schema.as_deref().unwrap_or_default();
    let schema_at = format!("{at}.source.file.schema");
    for (i, d) in declared.iter().enumerate() {
        if declared[..i].iter().any(|e| e.name == d.name) {
            return Err(JobError::new(
                format!("{schema_at}[{i}].name"),
                format!("field `{}` is declared twice", d.name),
            ));
        }
    }
    Ok(match spec.format {
        FileFormat::Text if spec.schema.is_some() => {
            return Err(JobError::new(
                schema_at,
                "a text source has one field, `line` (a string): remove `schema` or set `format: csv` or `jsonl`",
            ));
        }
        FileFormat::Text => Some(vec![Field::new("line", FieldType::String)]),
        FileFormat::Csv => match sample {
            Some(SourceSample::CsvHeader { file, columns }) => {
                if let Some((i, d)) = declared.iter().enumerate().find(|(_, d)| !columns.contains(&d.name)) {
                    return Err(JobError::new(
                        format!("{schema_at}[{i}].name"),
                        format!(
                            "column `{}` is not in the header of {file}; its columns are {}",
                            d.name,
                            quoted(columns.iter())
                        ),
                    ));
                }
                let mut fields: Vec<Field> = Vec::with_capacity(columns.len());
                for c in columns {
                    let t = declared
                        .iter()
                        .find(|d| d.name == *c)
                        .map_or(FieldType::String, |d| FieldType::declared(d.field_type));
                    // A repeated column name keeps its first position, as the source's rows do.
                    if !fields.iter().any(|f| f.name == *c) {
                        fields.push(Field::new(c.clone(), t));
                    }
                }
                Some(fields)
            }
            _ => None,
        },
        FileFormat::Jsonl if spec.schema.is_some() => Some(
            declared
                .iter()
                .map(|d| Field::new(d.name.clone(), FieldType::declared(d.field_type)))
                .collect(),
        ),
        FileFormat::Jsonl => match sample {
            Some(SourceSample::JsonRows { rows, .. }) => infer_fields(rows),
            _ => None,
        },
    })
}

fn quoted<'a>(names: impl Iterator<Item = &'a String>) -> String {
    names.map(|f| format!("`{f}`")).collect::<Vec<_>>().join(", ")
}

fn type_of(fields: &[Field], name: &str) -> FieldType {
    fields
        .iter()
        .find(|f| f.name == name)
        .map_or(FieldType::Any, |f| f.field_type)
}

/// Checks the expression at `field_path` against `input` (when known): every field it reads
/// exists, and it has no certain type error. Returns the type of its value (`any` if unknown).
pub(super) fn check_expression(
    field_path: &str,
    expression: &str,
    input: Option<&[Field]>,
) -> Result<FieldType, JobError> {
    // The expression compiled in step validation; a failure here is reported the same way.
    let expr = cel::compile(expression)
        .map_err(|e| super::cel_errors::cel_compile_error(field_path, expression, &e.to_string()))?;
    let Some(input) = input else {
        return cel_types::infer(expr.syntax(), &|_| FieldType::Any).map_err(|m| JobError::new(field_path, m));
    };
    for name in free_identifiers(expr.syntax()) {
        if name != "record" && !input.iter().any(|f| f.name == name) {
            return Err(missing(field_path, &name, input));
        }
    }
    cel_types::infer(expr.syntax(), &|name| type_of(input, name)).map_err(|m| JobError::new(field_path, m))
}

fn missing(field_path: &str, name: &str, input: &[Field]) -> JobError {
    if input.is_empty() {
        return JobError::new(
            field_path,
            format!(
                "field `{name}` does not exist in the records this step receives: a `map` before it gives a bare \
                 value (a number, string or bool), not an object with fields; make that `map` give an object \
                 like `{{'{name}': ...}}`"
            ),
        );
    }
    let known = quoted(input.iter().map(|f| &f.name));
    JobError::new(
        field_path,
        format!("field `{name}` does not exist in the records this step receives; their fields are {known}"),
    )
}

/// The output of a `map`: the object literal's keys, sorted, with their values' types; `None`
/// when the expression is not such a literal.
fn map_output(field_path: &str, expression: &str, input: Option<&[Field]>) -> Result<PlanSchema, JobError> {
    let expr = cel::compile(expression)
        .map_err(|e| super::cel_errors::cel_compile_error(field_path, expression, &e.to_string()))?;
    let lookup = |name: &str| input.map_or(FieldType::Any, |fields| type_of(fields, name));
    let Some(entries) = map_literal_entries(expr.syntax()) else {
        // A number, string or bool is a bare record: one unnamed value, no fields to read.
        let bare = matches!(
            cel_types::infer(expr.syntax(), &lookup),
            Ok(FieldType::Bool | FieldType::Int | FieldType::Float | FieldType::String)
        );
        return Ok(bare.then(Vec::new));
    };
    let mut out = Vec::with_capacity(entries.len());
    for (key, value) in entries {
        let t = cel_types::infer_expr(value, &lookup).map_err(|m| JobError::new(field_path, m))?;
        out.push(Field::new(key, t));
    }
    Ok(Some(out))
}

/// The output of a `flatMap` on rows of `input`: the split field removed, the token field (a
/// string) appended (or replacing a field of that name in place). Errors if the split field is
/// not in `input` or is certainly not a string.
fn flat_map_output(field_path: &str, spec: &FlatMapSpec, input: &[Field]) -> Result<Vec<Field>, JobError> {
    let Some(at) = input.iter().position(|f| f.name == spec.field) else {
        return Err(missing(field_path, &spec.field, input));
    };
    let split_type = input[at].field_type;
    if split_type.is_known() && split_type != FieldType::String {
        return Err(JobError::new(
            field_path,
            format!(
                "field `{}` is {} {}, and flatMap splits strings: convert it first with a `map` (`string({})`) or declare its type in the source's `schema`",
                spec.field,
                if split_type == FieldType::Int { "an" } else { "a" },
                split_type.name(),
                spec.field
            ),
        ));
    }
    let mut out = input.to_vec();
    out.remove(at);
    let token = spec.as_field.clone().unwrap_or_else(|| spec.field.clone());
    match out.iter_mut().find(|f| f.name == token) {
        Some(f) => f.field_type = FieldType::String,
        None => out.push(Field::new(token, FieldType::String)),
    }
    Ok(out)
}

/// Checks the type of an aggregation's value (`sum`, `min`, `max` need a number).
fn check_aggregate_value(field_path: &str, func: AggregateFn, expression: &str, t: FieldType) -> Result<(), JobError> {
    if func == AggregateFn::Count || !t.is_known() || t.is_numeric() {
        return Ok(());
    }
    let hint = if t == FieldType::String {
        format!(
            " (CSV columns are strings unless the source's `schema` declares their type, e.g. `{{name: {e}, type: float}}`; or convert with `double({e})`)",
            e = expression.trim()
        )
    } else {
        String::new()
    };
    Err(JobError::new(
        field_path,
        format!(
            "`{}` aggregates numbers, and `{expression}` is a {}{hint}",
            func.name(),
            t.name()
        ),
    ))
}

/// The plan schema a union of `inputs` produces: the common fields when every input's are
/// known and have the same names (each field's type joined over the inputs), unknown when
/// some input's are unknown.
///
/// Errors: two inputs whose known field names differ, naming the union's `inputs` field.
fn union_schema(
    at: &str,
    inputs: &[usize],
    operators: &[Operator],
    schemas: &[PlanSchema],
) -> Result<PlanSchema, JobError> {
    let mut first: Option<(usize, Vec<Field>)> = None;
    let mut all_known = true;
    for (k, &j) in inputs.iter().enumerate() {
        let Some(fields) = &schemas[j] else {
            all_known = false;
            continue;
        };
        match &mut first {
            None => first = Some((j, fields.clone())),
            Some((f, want)) => {
                let same_names = want.len() == fields.len() && want.iter().zip(fields).all(|(a, b)| a.name == b.name);
                if !same_names {
                    let show = |v: &[Field]| quoted(v.iter().map(|x| &x.name));
                    let names = |v: &[Field]| {
                        let mut n: Vec<String> = v.iter().map(|x| x.name.to_string()).collect();
                        n.sort_unstable();
                        n
                    };
                    // Two JSON-lines files of one data set can list the same fields in another
                    // order (inferred from their first lines): say so, or the lists look equal.
                    let order_only = if names(want) == names(fields) {
                        " (the same names in another order: a union needs the same order)"
                    } else {
                        ""
                    };
                    return Err(JobError::new(
                        format!("{at}.inputs[{k}]"),
                        format!(
                            "a union merges streams of the same fields: spec.job.steps[{}] has {}, but spec.job.steps[{}] has {}{order_only}; \
                             make them equal with a `map` before the union",
                            operators[*f].index,
                            show(want),
                            operators[j].index,
                            show(fields)
                        ),
                    ));
                }
                for (w, field) in want.iter_mut().zip(fields) {
                    w.field_type = w.field_type.join(field.field_type);
                }
            }
        }
    }
    Ok(if all_known { first.map(|(_, f)| f) } else { None })
}

/// Follows the schema from the sources through every step (operators in data order, each
/// after its inputs), checking what each step reads where its input schema is known.
/// `sample` is what the plan read from the first file of the job's first file source (`None`:
/// not read); see [`check_dataflow`] for a sample per source. Returns each operator's output
/// schema, in operator order.
///
/// Errors: the first step that reads a field its input cannot have or uses a value of a
/// type that certainly fails, naming the step's field path
/// (`spec.job.steps[2].sum.expression`), the field and what to do; a union of inputs with
/// different known fields.
pub fn check_steps(operators: &[Operator], sample: Option<&SourceSample>) -> Result<Vec<PlanSchema>, JobError> {
    let first_file_source = operators
        .iter()
        .position(|op| matches!(op.kind, OperatorKind::FileSource(_)));
    let samples: Vec<Option<&SourceSample>> = (0..operators.len())
        .map(|i| if Some(i) == first_file_source { sample } else { None })
        .collect();
    check_dataflow(operators, &samples)
}

/// [`check_steps`] with the sample of each file source: `samples[i]` for operator `i`.
pub fn check_dataflow(operators: &[Operator], samples: &[Option<&SourceSample>]) -> Result<Vec<PlanSchema>, JobError> {
    let inferred_from = operators
        .iter()
        .zip(samples)
        .find_map(|(op, sample)| match (&op.kind, sample) {
            (OperatorKind::FileSource(spec), Some(SourceSample::JsonRows { file, .. }))
                if spec.format == FileFormat::Jsonl && spec.schema.is_none() =>
            {
                Some(file)
            }
            _ => None,
        });
    follow_steps(operators, samples).map_err(|mut e| {
        if let Some(file) = inferred_from {
            e.message.push_str(&format!(
                " (the source's fields and types were inferred from the first {JSON_SAMPLE_LINES} lines of {file}: \
                 if later records differ, declare them in the source's `schema`)"
            ));
        }
        e
    })
}

fn follow_steps(operators: &[Operator], samples: &[Option<&SourceSample>]) -> Result<Vec<PlanSchema>, JobError> {
    let mut schemas: Vec<PlanSchema> = Vec::with_capacity(operators.len());
    // The type of the key each operator's records carry (set by `keyBy`).
    let mut key_types: Vec<FieldType> = Vec::with_capacity(operators.len());
    for (i, op) in operators.iter().enumerate() {
        let at = format!("spec.job.steps[{}]", op.index);
        // A window's late side output carries the window's input records.
        let sources = op.record_sources(operators);
        let (input, mut key_type) = match sources.as_slice() {
            [j] => (schemas[*j].clone(), key_types[*j]),
            _ => (None, FieldType::Any),
        };
        let schema = match &op.kind {
            OperatorKind::Generator(_) => Some(
                crate::operators::source::generator::FIELDS
                    .iter()
                    .zip([FieldType::Int, FieldType::String, FieldType::Int])
                    .map(|(name, t)| Field::new(*name, t))
                    .collect(),
            ),
            OperatorKind::FileSource(spec) => file_source_schema(&at, spec, samples.get(i).copied().flatten())?,
            // JSON values whose fields are only known when read.
            OperatorKind::KafkaSource(_) => None,
            OperatorKind::Union => union_schema(&at, &sources, operators, &schemas)?,
            OperatorKind::Join(def) => {
                let sides: Vec<PlanSchema> = sources.iter().map(|&j| schemas[j].clone()).collect();
                let (left, right) = (sides[0].as_deref(), sides[1].as_deref());
                let left_type = check_expression(&format!("{at}.join.leftKey"), &def.left_key, left)?;
                let right_type = check_expression(&format!("{at}.join.rightKey"), &def.right_key, right)?;
                Some(super::join::join_output(
                    &at,
                    def,
                    [left, right],
                    [left_type, right_type],
                )?)
            }
            OperatorKind::Filter(e) => {
                let path = format!("{at}.filter.expression");
                let t = check_expression(&path, e, input.as_deref())?;
                if t.is_known() && t != FieldType::Bool {
                    return Err(JobError::new(
                        path,
                        format!(
                            "`{e}` gives {} {}, and a filter needs a bool (e.g. `size(word) > 0`)",
                            article(t),
                            t.name()
                        ),
                    ));
                }
                input
            }
            OperatorKind::Map(e) => {
                let path = format!("{at}.map.expression");
                check_expression(&path, e, input.as_deref())?;
                map_output(&path, e, input.as_deref())?
            }
            OperatorKind::FlatMap(spec) => match &input {
                Some(fields) => Some(flat_map_output(&format!("{at}.flatMap.field"), spec, fields)?),
                None => None,
            },
            OperatorKind::KeyBy { expression, .. } => {
                let path = format!("{at}.keyBy.expression");
                key_type = check_expression(&path, expression, input.as_deref())?;
                if matches!(key_type, FieldType::Float | FieldType::Json) {
                    return Err(JobError::new(
                        path,
                        format!(
                            "`{expression}` gives {} {}, and keys are strings, integers or booleans (convert with `int(...)` or `string(...)`)",
                            article(key_type),
                            key_type.name()
                        ),
                    ));
                }
                input
            }
            OperatorKind::Aggregate {
                func,
                expression,
                as_field,
                ..
            } => {
                let value_type = match expression {
                    Some(e) if *func != AggregateFn::Count => {
                        let path = format!("{at}.{}.expression", func.name());
                        let t = check_expression(&path, e, input.as_deref())?;
                        check_aggregate_value(&path, *func, e, t)?;
                        if t.is_numeric() { t } else { FieldType::Any }
                    }
                    Some(e) => {
                        check_expression(&format!("{at}.count.expression"), e, input.as_deref())?;
                        FieldType::Int
                    }
                    None => FieldType::Int,
                };
                let key_field = match op.inputs.first().map(|&k| &operators[k].kind) {
                    Some(OperatorKind::KeyBy { as_field, .. }) => as_field.clone(),
                    _ => "key".into(),
                };
                // One field when both have the same name (the value replaces the key).
                if key_field == *as_field {
                    Some(vec![Field::new(as_field.clone(), value_type)])
                } else {
                    Some(vec![
                        Field::new(key_field, key_type),
                        Field::new(as_field.clone(), value_type),
                    ])
                }
            }
            OperatorKind::Window(def) => {
                let key_field = match op.inputs.first().map(|&k| &operators[k].kind) {
                    Some(OperatorKind::KeyBy { as_field, .. }) => as_field.clone(),
                    _ => "key".into(),
                };
                Some(window_output(&at, def, &key_field, key_type, input.as_deref())?)
            }
            OperatorKind::FileSink(_)
            | OperatorKind::PrintSink
            | OperatorKind::DiscardSink
            | OperatorKind::KafkaSink(_) => input,
        };
        schemas.push(schema);
        key_types.push(key_type);
    }
    Ok(schemas)
}

/// The output of a `window` on rows of `input` (when known): `{<key_field>, window_start,
/// window_end, <as>}`. Errors: the event-time field missing from `input` or of a type that is
/// not a string or an integer; a non-numeric value for `sum`, `min`, `max`; an `as` equal to
/// the key field.
fn window_output(
    at: &str,
    def: &super::event_time::WindowDef,
    key_field: &str,
    key_type: FieldType,
    input: Option<&[Field]>,
) -> Result<Vec<Field>, JobError> {
    use super::event_time::{WINDOW_END_FIELD, WINDOW_START_FIELD};
    if let Some(fields) = input {
        let Some(time) = fields.iter().find(|f| f.name == def.time_field) else {
            let known = quoted(fields.iter().map(|f| &f.name));
            return Err(JobError::new(
                format!("{at}.window"),
                format!(
                    "the event-time field `{}` (the source's `eventTime.field`) does not exist in the records this step receives; their fields are {known}: keep it through any `map` before the window",
                    def.time_field
                ),
            ));
        };
        if !matches!(time.field_type, FieldType::String | FieldType::Int | FieldType::Any) {
            return Err(JobError::new(
                format!("{at}.window"),
                format!(
                    "the event-time field `{}` is {} {}; event time is an ISO-8601 string or an integer of epoch milliseconds",
                    def.time_field,
                    article(time.field_type),
                    time.field_type.name()
                ),
            ));
        }
    }
    let value_type = match (&def.expression, def.func) {
        (Some(e), func) if func != AggregateFn::Count => {
            let path = format!("{at}.window.expression");
            let t = check_expression(&path, e, input)?;
            check_aggregate_value(&path, func, e, t)?;
            if t.is_numeric() { t } else { FieldType::Any }
        }
        _ => FieldType::Int,
    };
    if key_field == def.as_field {
        return Err(JobError::new(
            format!("{at}.window.as"),
            format!("`{key_field}` is also the key's field (the keyBy's `as`); choose another name for the aggregate"),
        ));
    }
    Ok(vec![
        Field::new(key_field, key_type),
        Field::new(WINDOW_START_FIELD, FieldType::Int),
        Field::new(WINDOW_END_FIELD, FieldType::Int),
        Field::new(def.as_field.clone(), value_type),
    ])
}

fn article(t: FieldType) -> &'static str {
    if matches!(t, FieldType::Int | FieldType::Any) {
        "an"
    } else {
        "a"
    }
}

#[cfg(test)]
#[path = "schema_tests.rs"]
mod tests;
