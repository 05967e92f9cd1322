//! Table tests of dataflow validation (`job/dataflow.rs`) and of the union schema check.

use crate::job::{Job, JobSpec, OperatorKind};
use serde_json::{Value, json};

fn spec(steps: Value) -> JobSpec {
    serde_json::from_value(json!({ "parallelism": 2, "job": { "steps": steps } })).unwrap()
}

fn text(name: &str) -> Value {
    json!({"name": name, "source": {"file": {"path": format!("{name}.txt")}}})
}

fn generator(name: &str) -> Value {
    json!({"name": name, "source": {"generator": {}}})
}

fn sink() -> Value {
    json!({"sink": {"print": {}}})
}

#[test]
fn a_two_source_union_plans_each_step_with_its_inputs() {
    let job = Job::from_spec(
        "t",
        spec(json!([
            text("clicks"),
            {"name": "views-raw", "source": {"file": {"path": "v.txt"}}},
            {"name": "views", "filter": {"expression": "line != ''"}},
            {"name": "all", "union": {}, "inputs": ["clicks", "views"]},
            {"flatMap": {"field": "line", "pattern": "\\W+", "as": "word"}},
            {"keyBy": {"expression": "word", "as": "word"}},
            {"uid": "counts", "count": {}},
            sink()
        ])),
    )
    .unwrap();
    let wiring: Vec<(&str, Vec<usize>)> = job
        .operators
        .iter()
        .map(|o| (o.uid.as_str(), o.inputs.clone()))
        .collect();
    assert_eq!(
        wiring,
        [
            ("source-file-0", vec![]),
            ("source-file-1", vec![]),
            ("filter-2", vec![1]),
            ("union-3", vec![0, 2]),
            ("flatMap-4", vec![3]),
            ("keyBy-5", vec![4]),
            ("counts", vec![5]),
            ("sink-print-7", vec![6]),
        ]
    );
    assert_eq!(job.operators[3].kind, OperatorKind::Union);
    assert!(job.is_multi_input());
}

#[test]
fn named_single_line_jobs_plan_as_before() {
    let named = Job::from_spec(
        "t",
        spec(json!([text("in"), {"name": "out", "inputs": ["in"], "sink": {"print": {}}}])),
    )
    .unwrap();
    let plain = Job::from_spec("t", spec(json!([{"source": {"file": {"path": "in.txt"}}}, sink()]))).unwrap();
    assert_eq!(named.operators.len(), 2);
    for (a, b) in named.operators.iter().zip(&plain.operators) {
        assert_eq!((&a.uid, &a.inputs), (&b.uid, &b.inputs));
    }
    assert!(!named.is_multi_input());
}

#[test]
fn wiring_errors_name_the_field() {
    let cases = [
        (
            json!([text("a"), text("b"), {"union": {}, "inputs": ["a", "c"]}, sink()]),
            "spec.job.steps[2].inputs[1]: no step is named `c`; the named steps are `a`, `b`",
        ),
        // Steps with a `uid` and no `name`: inputs name steps by `name`.
        (
            json!([{"uid": "a", "source": {"file": {"path": "in.txt"}}}, {"union": {}, "inputs": ["a", "a"]}, sink()]),
            "spec.job.steps[1].inputs[0]: no step is named `a`, and no step has a `name`: `inputs` lists steps by their `name`, not their `uid`; add `name: a` to the step this one reads",
        ),
        (
            json!([text("a"), text("a"), {"union": {}, "inputs": ["a"]}, sink()]),
            "spec.job.steps[1].name: `a` is already the name of spec.job.steps[0]; names are unique",
        ),
        (
            json!([text("a b"), sink()]),
            "spec.job.steps[0].name: `a b` must be 1-128 characters",
        ),
        // A cycle a -> b -> a needs a reference to a later step.
        (
            json!([text("s"), {"name": "a", "union": {}, "inputs": ["s", "b"]}, {"name": "b", "inputs": ["a"], "filter": {"expression": "true"}}, sink()]),
            "spec.job.steps[1].inputs[1]: `b` is spec.job.steps[2], not above this step: list steps in data order (an input is declared before the steps reading it, so a dataflow has no cycles)",
        ),
        (
            json!([text("s"), {"name": "a", "inputs": ["a"], "filter": {"expression": "true"}}, sink()]),
            "spec.job.steps[1].inputs[0]: `a` is spec.job.steps[1], not above this step",
        ),
        (
            json!([text("a"), text("b"), sink()]),
            "spec.job.steps[0]: the output of step `a` goes nowhere: no step reads it",
        ),
        // A branch whose first arm ends nowhere.
        (
            json!([text("a"), {"name": "f", "filter": {"expression": "true"}}, {"name": "g", "inputs": ["a"], "filter": {"expression": "true"}}, sink()]),
            "spec.job.steps[1]: the output of step `f` goes nowhere: no step reads it",
        ),
        (
            json!([text("a"), text("b"), {"union": {}, "inputs": ["a", "b"]}]),
            "spec.job.steps: the dataflow has no sink",
        ),
        (
            json!([text("a"), {"name": "s1", "sink": {"print": {}}}, {"inputs": ["s1"], "sink": {"print": {}}}]),
            "spec.job.steps[2].inputs[0]: step `s1` is a sink: it has no output to read",
        ),
        (
            json!([text("a"), {"union": {}, "inputs": ["a"]}, sink()]),
            "spec.job.steps[1].inputs: a union merges two or more inputs, got 1",
        ),
        (
            json!([text("a"), text("b"), {"union": {}}, sink()]),
            "spec.job.steps[2].inputs: a union needs `inputs`",
        ),
        (
            json!([text("a"), text("b"), {"inputs": ["a", "b"], "filter": {"expression": "true"}}, sink()]),
            "spec.job.steps[2].inputs: this step reads one input, got 2; merge streams with a `union` step first",
        ),
        (
            json!([text("a"), {"inputs": [], "filter": {"expression": "true"}}, sink()]),
            "spec.job.steps[1].inputs: is empty: name the step this one reads, or remove `inputs`",
        ),
        (
            json!([text("a"), text("b"), {"union": {}, "inputs": ["a", "a"]}, sink()]),
            "spec.job.steps[2].inputs[1]: `a` is listed twice",
        ),
        (
            json!([text("a"), {"name": "b", "inputs": ["a"], "source": {"generator": {}}}, sink()]),
            "spec.job.steps[1].inputs: a source reads no input",
        ),
        (
            json!([{"name": "f", "filter": {"expression": "true"}}, sink()]),
            "spec.job.steps[0]: has no input: the first step must be a `source`",
        ),
        (
            json!([text("a"), text("b"), {"union": {}, "inputs": ["a", "b"]}, {"count": {}}, sink()]),
            "spec.job.steps[3]: `count` must read a `keyBy` step",
        ),
        (
            json!([text("a"), {"name": "k", "keyBy": {"expression": "line"}}, text("b"), {"union": {}, "inputs": ["k", "b"]}, sink()]),
            "spec.job.steps[1]: `keyBy` must feed only aggregations (count, sum, min, max) and windows; spec.job.steps[3] reads it",
        ),
        // A keyBy branching into a count and a filter.
        (
            json!([text("a"), {"name": "k", "keyBy": {"expression": "line"}}, {"count": {}}, sink(), {"inputs": ["k"], "filter": {"expression": "true"}}, sink()]),
            "spec.job.steps[1]: `keyBy` must feed only aggregations (count, sum, min, max) and windows; spec.job.steps[4] reads it (put a branch before the `keyBy`",
        ),
        (
            json!([text("a"), text("b"), {"union": {}, "inputs": ["a", "b"]}, {"filter": {"expression": "true"}, "union": {}}, sink()]),
            "spec.job.steps[3]: sets more than one step kind",
        ),
        (
            json!([text("a"), {"uid": "x", "name": "b", "filter": {"expression": "true"}}, {"uid": "x", "sink": {"print": {}}}]),
            "spec.job.steps[2].uid: `x` is used by another step",
        ),
    ];
    for (steps, want) in cases {
        let got = Job::from_spec("t", spec(steps.clone()));
        let e = got.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.starts_with(want), "{steps}\n want `{want}`\n got  `{e}`");
    }
}

#[test]
fn union_inputs_must_have_the_same_fields_where_the_plan_knows_them() {
    let union_of = |a: Value, b: Value| json!([a, b, {"union": {}, "inputs": ["a", "b"]}, {"filter": {"expression": "true"}}, sink()]);
    let e = Job::from_spec("t", spec(union_of(text("a"), generator("b"))))
        .unwrap_err()
        .to_string();
    assert_eq!(
        e,
        "spec.job.steps[2].inputs[1]: a union merges streams of the same fields: spec.job.steps[0] has `line`, \
         but spec.job.steps[1] has `id`, `key`, `value`; make them equal with a `map` before the union"
    );
    // The same names in another order: refused, and the message says that order is the
    // difference (the two lists would otherwise look equal to the reader).
    let events = |name: &str, fields: [&str; 2]| {
        let schema: Vec<Value> = fields.iter().map(|f| json!({"name": f, "type": "string"})).collect();
        json!({"name": name, "source": {"file": {"path": format!("{name}.jsonl"), "format": "jsonl", "schema": schema}}})
    };
    let steps = union_of(events("a", ["repo", "dt"]), events("b", ["dt", "repo"]));
    let e = Job::from_spec("t", spec(steps)).unwrap_err().to_string();
    assert_eq!(
        e,
        "spec.job.steps[2].inputs[1]: a union merges streams of the same fields: spec.job.steps[0] has `repo`, `dt`, \
         but spec.job.steps[1] has `dt`, `repo` (the same names in another order: a union needs the same order); \
         make them equal with a `map` before the union"
    );
    // Same fields, or one side known only at run time (JSON lines): accepted.
    let jsonl = json!({"name": "b", "source": {"file": {"path": "b.jsonl", "format": "jsonl"}}});
    for steps in [union_of(text("a"), text("b")), union_of(text("a"), jsonl)] {
        assert!(Job::from_spec("t", spec(steps.clone())).is_ok(), "{steps}");
    }
    // After the union the known fields are checked as after any step.
    let e = Job::from_spec(
        "t",
        spec(json!([text("a"), text("b"), {"union": {}, "inputs": ["a", "b"]}, {"filter": {"expression": "word != ''"}}, sink()])),
    )
    .unwrap_err()
    .to_string();
    assert!(
        e.starts_with("spec.job.steps[3].filter.expression: field `word` does not exist"),
        "{e}"
    );
}

/// The dataflow example in docs/concepts.md is a job the runtime accepts.
#[test]
fn the_documented_dataflow_example_validates() {
    let doc = include_str!("../../../docs/concepts.md");
    let section = doc
        .split("## Dataflows: several sources, `union`, branches and several sinks")
        .nth(1)
        .expect("docs/concepts.md has the dataflow section");
    let yaml_block = |n: usize| {
        let yaml = section
            .split("```yaml\n")
            .nth(n)
            .and_then(|s| s.split("```").next())
            .expect("the section has the yaml block");
        let indented: String = yaml.lines().map(|l| format!("    {l}\n")).collect();
        let manifest = format!(
            "apiVersion: weir.dev/v1alpha1\nkind: StreamJob\nmetadata: {{ name: doc }}\nspec:\n  job:\n{indented}"
        );
        crate::job::parse_manifest(&manifest, &[]).unwrap_or_else(|e| panic!("{e}\n{manifest}"))
    };
    let job = yaml_block(1);
    assert!(job.is_multi_input());
    assert_eq!(job.operators[2].inputs, vec![0, 1]);
    // The branch: `edits` is read by the keyBy and by `robots`; two sinks.
    let job = yaml_block(2);
    assert_eq!(job.operators[1].inputs, vec![0]);
    assert_eq!(job.operators[4].inputs, vec![0]);
    assert_eq!(job.operators.iter().filter(|o| o.kind.is_sink()).count(), 2);
}

/// Field types flow through a union: each field's type is the join over the inputs (int and
/// float give float; other mixes give "any", which no check rejects), and the steps after
/// the union are checked against it.
#[test]
fn union_field_types_are_joined_over_the_inputs() {
    let with_map = |expression: &str, then: Value| {
        json!([
            generator("g1"),
            generator("g2"),
            {"name": "m", "inputs": ["g2"], "map": {"expression": expression}},
            {"union": {}, "inputs": ["g1", "m"]},
            then,
            {"count": {}},
            sink()
        ])
    };
    let plan = |steps: Value| Job::from_spec("t", spec(steps)).map(|_| ()).map_err(|e| e.to_string());
    // `id`: int in g1, float in m → float, which cannot be a key.
    let e = plan(with_map(
        "{'id': 1.5, 'key': key, 'value': value}",
        json!({"keyBy": {"expression": "id"}}),
    ))
    .unwrap_err();
    assert!(
        e.starts_with("spec.job.steps[4].keyBy.expression: `id` gives a float"),
        "{e}"
    );
    // Both int → int: a fine key.
    plan(with_map(
        "{'id': 2, 'key': key, 'value': value}",
        json!({"keyBy": {"expression": "id"}}),
    ))
    .unwrap();
    // `key`: string in g1, int in m → any: not rejected at plan time.
    plan(with_map(
        "{'id': id, 'key': 1, 'value': value}",
        json!({"keyBy": {"expression": "key"}}),
    ))
    .unwrap();
    // Both string, summed after the union: rejected with the aggregation's field path.
    let summed = json!([
        generator("g1"),
        generator("g2"),
        {"union": {}, "inputs": ["g1", "g2"]},
        {"keyBy": {"expression": "id"}},
        {"sum": {"expression": "key"}},
        sink()
    ]);
    let e = plan(summed).unwrap_err();
    assert!(
        e.starts_with("spec.job.steps[4].sum.expression: `sum` aggregates numbers, and `key` is a string"),
        "{e}"
    );
}

/// A source of JSON lines with event time `t` and a `user` field.
fn events(name: &str) -> Value {
    json!({"name": name, "source": {
        "file": {"path": "e.jsonl", "format": "jsonl", "schema": [{"name": "t", "type": "int"}, {"name": "user", "type": "string"}]},
        "eventTime": {"field": "t", "maxOutOfOrderness": "1s"}
    }})
}

fn window(name: &str, late: Option<&str>) -> Value {
    let mut w = json!({"type": "tumbling", "size": "1m"});
    if let Some(l) = late {
        w["lateRecords"] = json!(l);
    }
    json!({"name": name, "window": w})
}

/// A branch: one source read by two steps, each into its own sink; every consumer of a step
/// is listed, and the plan ends the source's stage there (two edges).
#[test]
fn a_step_may_feed_several_steps_and_a_job_may_have_several_sinks() {
    let job = Job::from_spec(
        "t",
        spec(json!([
            text("lines"),
            {"keyBy": {"expression": "line", "as": "line"}},
            {"count": {}},
            {"uid": "counts-out", "sink": {"print": {}}},
            {"inputs": ["lines"], "filter": {"expression": "line != ''"}},
            {"uid": "lines-out", "sink": {"discard": {}}},
            // Two disconnected dataflows in one job are fine too, each with its sink.
            generator("g"),
            {"uid": "generated-out", "sink": {"discard": {}}}
        ])),
    )
    .unwrap();
    let wiring: Vec<(&str, Vec<usize>)> = job
        .operators
        .iter()
        .map(|o| (o.uid.as_str(), o.inputs.clone()))
        .collect();
    assert_eq!(
        wiring,
        [
            ("source-file-0", vec![]),
            ("keyBy-1", vec![0]),
            ("count-2", vec![1]),
            ("counts-out", vec![2]),
            ("filter-4", vec![0]),
            ("lines-out", vec![4]),
            ("source-generator-6", vec![]),
            ("generated-out", vec![6]),
        ]
    );
    let sinks = job.operators.iter().filter(|o| o.kind.is_sink()).count();
    assert_eq!(sinks, 3);
}

/// `lateRecords: sideOutput` and `inputs: [w.late]`: the late records' schema is the window's
/// input's (a filter on `user` checks), and every misuse is an error naming the field.
#[test]
fn a_windows_late_side_output_is_read_by_name_and_checked() {
    use crate::job::dataflow::Port;
    let ok = json!([
        events("e"),
        {"keyBy": {"expression": "user", "as": "user"}},
        window("w", Some("sideOutput")),
        {"uid": "windows-out", "sink": {"print": {}}},
        {"inputs": ["w.late"], "filter": {"expression": "user != ''"}},
        {"uid": "late-out", "sink": {"print": {}}}
    ]);
    let job = Job::from_spec("t", spec(ok)).unwrap();
    assert_eq!(job.operators[4].inputs, vec![2]);
    assert_eq!(job.operators[4].input_ports, vec![Port::Late]);
    assert_eq!(job.operators[3].input_ports, vec![Port::Main]);
    let cases = [
        // A field the window's input does not have.
        (
            json!([events("e"), {"keyBy": {"expression": "user", "as": "user"}}, window("w", Some("sideOutput")), sink(),
                {"inputs": ["w.late"], "filter": {"expression": "repo != ''"}}, sink()]),
            "spec.job.steps[4].filter.expression",
        ),
        (
            json!([events("e"), {"keyBy": {"expression": "user", "as": "user"}}, window("w", None), sink(),
                {"inputs": ["w.late"], "filter": {"expression": "true"}}, sink()]),
            "spec.job.steps[4].inputs[0]: the window step `w` drops its late records: set `lateRecords: sideOutput` on it (spec.job.steps[2].window.lateRecords)",
        ),
        (
            json!([events("e"), {"inputs": ["e.late"], "filter": {"expression": "true"}}, sink()]),
            "spec.job.steps[1].inputs[0]: step `e` is not a window: only a window with `lateRecords: sideOutput` has a late side output",
        ),
        (
            json!([events("e"), {"keyBy": {"expression": "user", "as": "user"}}, window("w", Some("sideOutput")), sink()]),
            "spec.job.steps[2].window.lateRecords: `sideOutput` sends the late records to the window's side output, but no step reads it: read it in a later step with `inputs: [w.late]`",
        ),
        (
            json!([events("e"), {"keyBy": {"expression": "user", "as": "user"}}, window("w", Some("sideOutput")),
                {"name": "m", "map": {"expression": "{'user': user}"}},
                {"union": {}, "inputs": ["m", "w.late"]}, sink()]),
            "spec.job.steps[4].inputs[1]: a union merges streams of the same fields",
        ),
        (
            json!([events("e"), {"keyBy": {"expression": "user", "as": "user"}}, window("w", Some("sideOutput")),
                {"union": {}, "inputs": ["w", "w.late"]}, sink()]),
            "spec.job.steps[3].inputs[1]: `w.late` is another output of a step this step already reads",
        ),
        (
            json!([events("e"), {"keyBy": {"expression": "user", "as": "user"}}, window("w", None),
                {"name": "w.late", "filter": {"expression": "true"}}, sink()]),
            "spec.job.steps[3].name: `w.late` names the late side output of the window `w`; choose another name",
        ),
        // The single-line form has no way to read the side output.
        (
            json!([{"source": events("e")["source"]}, {"keyBy": {"expression": "user", "as": "user"}},
                {"window": {"type": "tumbling", "size": "1m", "lateRecords": "sideOutput"}}, sink()]),
            "spec.job.steps[2].window.lateRecords: `sideOutput` sends the late records to the window's side output",
        ),
    ];
    for (steps, want) in cases {
        let got = Job::from_spec("t", spec(steps.clone()));
        let e = got.err().map(|e| e.to_string()).unwrap_or_default();
        assert!(e.starts_with(want), "{steps}\n want `{want}`\n got  `{e}`");
    }
}

/// Two file sinks in one directory would write the same part-file names: refused, naming the
/// second sink's path, for the same directory spelt differently and for one inside the other;
/// distinct directories (also sharing a name prefix) are accepted.
#[test]
fn two_file_sinks_in_one_directory_are_refused() {
    let job = |a: &str, b: &str| {
        Job::from_spec(
            "t",
            spec(json!([
                text("edits"),
                {"name": "a", "filter": {"expression": "line != ''"}, "inputs": ["edits"]},
                {"sink": {"file": {"path": a}}, "inputs": ["a"]},
                {"name": "b", "filter": {"expression": "line == ''"}, "inputs": ["edits"]},
                {"sink": {"file": {"path": b}}, "inputs": ["b"]}
            ])),
        )
    };
    for (a, b) in [
        ("out", "out"),
        ("out", "./out/"),
        ("/data/out", "/data/./out"),
        ("s3://bucket/out", "s3://bucket/out/"),
        ("out", "out/robots"),
        ("out/robots", "out"),
    ] {
        let e = job(a, b).unwrap_err().to_string();
        assert!(
            e.starts_with("spec.job.steps[4].sink.file.path:")
                && e.contains("spec.job.steps[2]")
                && e.contains("its own directory"),
            "{a} and {b}: {e}"
        );
    }
    for (a, b) in [
        ("out-a", "out-b"),
        ("out", "output"),
        ("s3://bucket/out", "s3://other/out"),
    ] {
        job(a, b).unwrap_or_else(|e| panic!("{a} and {b} are distinct directories: {e}"));
    }
}
