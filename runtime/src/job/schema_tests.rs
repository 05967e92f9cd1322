use super::*;
use crate::job::types::FieldType::{self, Float, Int, Json};
use crate::job::{Job, JobSpec};
use FieldType::String as Str;
use serde_json::{Value, json};

fn spec(steps: Value) -> JobSpec {
    serde_json::from_value(json!({ "parallelism": 2, "job": { "steps": steps } })).unwrap()
}

fn err(spec: JobSpec) -> String {
    Job::from_spec("t", spec).unwrap_err().to_string()
}

/// Validates `steps` and checks them against `sample`: each step's output schema, or the error.
fn plan(steps: Value, sample: Option<&SourceSample>) -> Result<Vec<PlanSchema>, String> {
    let job = Job::from_spec("t", spec(steps)).map_err(|e| e.to_string())?;
    check_steps(&job.operators, sample).map_err(|e| e.to_string())
}

fn fields(list: &[(&str, FieldType)]) -> PlanSchema {
    Some(list.iter().map(|(n, t)| Field::new(*n, *t)).collect())
}

fn csv(columns: &[&str]) -> SourceSample {
    SourceSample::CsvHeader {
        file: "trips.csv".into(),
        columns: columns.iter().map(|c| c.to_string()).collect(),
    }
}

fn jsonl(lines: &[Value]) -> SourceSample {
    SourceSample::JsonRows {
        file: "events.jsonl".into(),
        rows: lines.iter().cloned().map(Row::from_json).collect(),
    }
}

fn csv_source(schema: Value) -> Value {
    json!({"source": {"file": {"path": "trips.csv", "format": "csv", "schema": schema}}})
}

fn sink() -> Value {
    json!({"sink": {"print": {}}})
}

#[test]
fn a_step_reading_a_field_its_input_cannot_have_is_an_error_naming_step_and_field() {
    let sink = sink();
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
fn without_a_sample_csv_and_undeclared_json_lines_are_checked_when_the_job_runs() {
    let sink = sink();
    let ok = [
        json!([{"source": {"file": {"path": "a", "format": "jsonl"}}}, {"keyBy": {"expression": "anything"}}, {"count": {}}, sink]),
        json!([{"source": {"file": {"path": "a", "format": "csv"}}}, {"flatMap": {"field": "x", "pattern": " "}}, sink]),
        json!([csv_source(json!([{"name": "x", "type": "int"}])), {"keyBy": {"expression": "y"}}, {"sum": {"expression": "z"}}, sink]),
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
        assert!(
            plan(steps.clone(), None).is_ok(),
            "{steps}: {:?}",
            plan(steps.clone(), None)
        );
    }
}

#[test]
fn types_follow_the_records_through_every_step_kind() {
    let steps = json!([
        csv_source(json!([{"name": "fare", "type": "float"}, {"name": "n", "type": "int"}])),
        {"filter": {"expression": "fare > 0.0 && vendor != ''"}},
        {"map": {"expression": "{'vendor': vendor, 'fare': fare, 'twice': n * 2, 'label': vendor + ' ' + zone, 'tags': [zone]}"}},
        {"flatMap": {"field": "label", "pattern": " ", "as": "word"}},
        {"keyBy": {"expression": "vendor", "as": "vendor"}},
        {"sum": {"expression": "fare", "as": "total"}},
        sink(),
    ]);
    let got = plan(steps, Some(&csv(&["vendor", "fare", "n", "zone"]))).unwrap();
    let source = fields(&[("vendor", Str), ("fare", Float), ("n", Int), ("zone", Str)]);
    let mapped = fields(&[
        ("fare", Float),
        ("label", Str),
        ("tags", Json),
        ("twice", Int),
        ("vendor", Str),
    ]);
    let split = fields(&[
        ("fare", Float),
        ("tags", Json),
        ("twice", Int),
        ("vendor", Str),
        ("word", Str),
    ]);
    let summed = fields(&[("vendor", Str), ("total", Float)]);
    let want = [
        source.clone(),
        source,
        mapped,
        split.clone(),
        split,
        summed.clone(),
        summed,
    ];
    assert_eq!(got, want);

    let generator = json!([
        {"source": {"generator": {}}},
        {"keyBy": {"expression": "key"}},
        {"count": {}},
        sink(),
    ]);
    let got = plan(generator, None).unwrap();
    assert_eq!(got[0], fields(&[("id", Int), ("key", Str), ("value", Int)]));
    assert_eq!(got[2], fields(&[("key", Str), ("count", Int)]));
    // JSON lines: inferred from the sample (first-seen order, types joined).
    let events = json!([
        {"source": {"file": {"path": "e.jsonl", "format": "jsonl"}}},
        {"keyBy": {"expression": "type", "as": "type"}},
        {"max": {"expression": "commits"}},
        sink(),
    ]);
    let sample = jsonl(&[
        json!({"type": "push", "commits": 1}),
        json!({"type": "watch", "action": "started"}),
    ]);
    let got = plan(events, Some(&sample)).unwrap();
    assert_eq!(got[0], fields(&[("type", Str), ("commits", Int), ("action", Str)]));
    assert_eq!(got[2], fields(&[("type", Str), ("max", Int)]));
}

#[test]
fn type_errors_name_the_field_path_and_what_to_do() {
    let taxi = csv(&["vendor", "fare", "n"]);
    let text = json!({"source": {"file": {"path": "a"}}});
    let plain_csv = csv_source(Value::Null);
    let typed_csv = csv_source(json!([{"name": "fare", "type": "float"}, {"name": "n", "type": "int"}]));
    let events = json!({"source": {"file": {"path": "e.jsonl", "format": "jsonl"}}});
    let declared_events = json!({"source": {"file": {"path": "e.jsonl", "format": "jsonl", "schema": [{"name": "user", "type": "string"}, {"name": "price", "type": "float"}]}}});
    let event_sample = jsonl(&[json!({"user": "u1", "price": 2.5, "ok": true})]);
    let cases: Vec<(Value, Option<&SourceSample>, &str)> = vec![
        (
            json!([plain_csv, {"keyBy": {"expression": "vendor"}}, {"sum": {"expression": "fare"}}, sink()]),
            Some(&taxi),
            "spec.job.steps[2].sum.expression: `sum` aggregates numbers, and `fare` is a string (CSV columns are strings unless the source's `schema` declares their type, e.g. `{name: fare, type: float}`; or convert with `double(fare)`)",
        ),
        (
            json!([typed_csv, {"keyBy": {"expression": "vendor"}}, {"min": {"expression": "vendor"}}, sink()]),
            Some(&taxi),
            "spec.job.steps[2].min.expression: `min` aggregates numbers, and `vendor` is a string",
        ),
        (
            json!([typed_csv, {"keyBy": {"expression": "vendr"}}, {"count": {}}, sink()]),
            Some(&taxi),
            "spec.job.steps[1].keyBy.expression: field `vendr` does not exist in the records this step receives; their fields are `vendor`, `fare`, `n`",
        ),
        (
            json!([typed_csv, {"keyBy": {"expression": "fare"}}, {"count": {}}, sink()]),
            Some(&taxi),
            "spec.job.steps[1].keyBy.expression: `fare` gives a float, and keys are strings, integers or booleans",
        ),
        (
            json!([typed_csv, {"map": {"expression": "{'v': vendor * 2}"}}, sink()]),
            Some(&taxi),
            "spec.job.steps[1].map.expression: `*` of field `vendor` (string) and an int literal: arithmetic needs numbers",
        ),
        (
            json!([typed_csv, {"filter": {"expression": "vendor > 2"}}, sink()]),
            Some(&taxi),
            "spec.job.steps[1].filter.expression: `>` compares field `vendor` (string) with an int literal",
        ),
        (
            json!([typed_csv, {"filter": {"expression": "n + 1"}}, sink()]),
            Some(&taxi),
            "spec.job.steps[1].filter.expression: `n + 1` gives an int, and a filter needs a bool",
        ),
        (
            json!([typed_csv, {"flatMap": {"field": "n", "pattern": " "}}, sink()]),
            Some(&taxi),
            "spec.job.steps[1].flatMap.field: field `n` is an int, and flatMap splits strings",
        ),
        (
            json!([csv_source(json!([{"name": "price", "type": "float"}])), sink()]),
            Some(&taxi),
            "spec.job.steps[0].source.file.schema[0].name: column `price` is not in the header of trips.csv; its columns are `vendor`, `fare`, `n`",
        ),
        (
            json!([
                csv_source(json!([{"name": "n", "type": "int"}, {"name": "n", "type": "float"}])),
                sink()
            ]),
            None,
            "spec.job.steps[0].source.file.schema[1].name: field `n` is declared twice",
        ),
        (
            json!([{"source": {"file": {"path": "a", "schema": [{"name": "line", "type": "string"}]}}}, sink()]),
            None,
            "spec.job.steps[0].source.file.schema: a text source has one field",
        ),
        (
            json!([text, {"map": {"expression": "line + 1"}}, sink()]),
            None,
            "spec.job.steps[1].map.expression: `+` of field `line` (string) and an int literal",
        ),
        (
            json!([events, {"filter": {"expression": "ok == 'yes'"}}, sink()]),
            Some(&event_sample),
            "spec.job.steps[1].filter.expression: `==` compares field `ok` (bool) with a string literal: they are never equal; CEL does not convert between types: convert with `int(x)`, `double(x)` or `string(x)`, or declare the field's type in the source's `schema` (the source's fields and types were inferred from the first 100 lines of events.jsonl: if later records differ, declare them in the source's `schema`)",
        ),
        (
            json!([declared_events, {"filter": {"expression": "ok"}}, sink()]),
            Some(&event_sample),
            "spec.job.steps[1].filter.expression: field `ok` does not exist in the records this step receives; their fields are `user`, `price`",
        ),
        (
            json!([declared_events, {"keyBy": {"expression": "user"}}, {"sum": {"expression": "price"}}, {"map": {"expression": "{'k': key + sum}"}}, sink()]),
            None,
            "spec.job.steps[3].map.expression: `+` of field `key` (string) and field `sum` (float)",
        ),
    ];
    for (steps, sample, want) in cases {
        let e = plan(steps.clone(), sample).unwrap_err();
        assert!(e.contains(want), "{steps}\nwant `{want}`\nin   `{e}`");
    }
}

#[test]
fn valid_jobs_over_typed_sources_plan() {
    let taxi = csv(&["vendor", "fare", "n", "when"]);
    let typed_csv = csv_source(json!([{"name": "fare", "type": "float"}, {"name": "n", "type": "int"}]));
    let events = json!({"source": {"file": {"path": "e.jsonl", "format": "jsonl"}}});
    let mixed = jsonl(&[
        json!({"id": "1", "n": 1, "x": 1, "v": null}),
        json!({"id": "2", "n": 2.5, "x": "one", "v": null}),
    ]);
    let cases: Vec<(Value, Option<&SourceSample>)> = vec![
        (
            json!([typed_csv, {"filter": {"expression": "fare > 2.0 && n >= 1 && vendor == '1' && when.startsWith('2019')"}}, {"keyBy": {"expression": "vendor"}}, {"sum": {"expression": "fare"}}, sink()]),
            Some(&taxi),
        ),
        (
            json!([csv_source(Value::Null), {"keyBy": {"expression": "vendor"}}, {"sum": {"expression": "double(fare)"}}, sink()]),
            Some(&taxi),
        ),
        (
            json!([typed_csv, {"map": {"expression": "{'k': vendor + '-' + string(n), 'f': fare * 1.1, 'i': n + 1}"}}, {"keyBy": {"expression": "k"}}, {"max": {"expression": "i"}}, sink()]),
            Some(&taxi),
        ),
        // int and float mixed, a field of two types, a field only ever null: nothing certain.
        (
            json!([events, {"filter": {"expression": "n > 1 && x == 1 && v == 'a'"}}, {"keyBy": {"expression": "id"}}, {"sum": {"expression": "n + x"}}, sink()]),
            Some(&mixed),
        ),
        (
            json!([events, {"filter": {"expression": "record.n > 'a' || has(record.x)"}}, sink()]),
            Some(&mixed),
        ),
    ];
    for (steps, sample) in cases {
        assert!(
            plan(steps.clone(), sample).is_ok(),
            "{steps}: {:?}",
            plan(steps.clone(), sample)
        );
    }
}

#[test]
fn a_step_after_a_map_to_a_bare_value_cannot_read_a_field() {
    let generator = json!({"source": {"generator": {}}});
    let steps = json!([
        generator,
        {"map": {"expression": "value * 2"}},
        {"keyBy": {"expression": "key"}},
        {"count": {}},
        sink()
    ]);
    let e = plan(steps, None).unwrap_err();
    assert!(
        e.starts_with("spec.job.steps[2].keyBy.expression: field `key` does not exist in the records this step receives: a `map` before it gives a bare value"),
        "{e}"
    );
    // A bare value may still go to the sink; a computed map's fields stay unknown.
    let bare = plan(json!([generator, {"map": {"expression": "key + '!'"}}, sink()]), None).unwrap();
    assert_eq!(bare[1], Some(vec![]));
    let computed = plan(json!([generator, {"map": {"expression": "record"}}, sink()]), None).unwrap();
    assert_eq!(computed[1], None);
}
