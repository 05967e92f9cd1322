//! Table tests of the `join` step at plan time: wiring, output schema and every refusal, each
//! naming its field.

use crate::job::join::{JoinField, Side};
use crate::job::types::FieldType;
use crate::job::{Job, JobSpec, OperatorKind};
use serde_json::{Value, json};

fn job(steps: Value) -> Result<Job, String> {
    let spec: JobSpec = serde_json::from_value(json!({ "parallelism": 2, "job": { "steps": steps } })).unwrap();
    Job::from_spec("t", spec).map_err(|e| e.to_string())
}

/// Two generators (`id` int, `key` string, `value` int) joined by `join`, then printed.
fn steps_with(join: Value, inputs: Value) -> Value {
    json!([
        {"name": "orders", "source": {"generator": {"count": 10}}},
        {"name": "users", "source": {"generator": {"count": 10}}},
        {"name": "joined", "inputs": inputs, "join": join},
        {"sink": {"print": {}}}
    ])
}

fn join_of(left_key: &str, right_key: &str, fields: Value) -> Value {
    json!({"leftKey": left_key, "rightKey": right_key, "fields": fields})
}

#[test]
fn a_join_reads_two_inputs_and_outputs_the_key_and_the_chosen_fields() {
    let j = job(steps_with(
        json!({"leftKey": "key", "rightKey": "key", "as": "user", "ttl": "1h",
               "fields": [{"from": "left.value", "as": "amount"}, {"from": "right.id"}, {"from": "left.id", "as": "order"}]}),
        json!(["orders", "users"]),
    ))
    .unwrap();
    let op = &j.operators[2];
    assert_eq!(op.inputs, vec![0, 1]);
    let OperatorKind::Join(def) = &op.kind else {
        panic!("{:?}", op.kind)
    };
    assert_eq!(def.key_field, "user");
    assert_eq!(def.ttl, Some(std::time::Duration::from_secs(3600)));
    assert_eq!(
        def.inputs,
        ["orders".to_string(), "users".to_string()],
        "kept with the state"
    );
    assert_eq!(
        def.fields,
        vec![
            JoinField {
                side: Side::Left,
                from: "value".into(),
                name: "amount".into()
            },
            JoinField {
                side: Side::Right,
                from: "id".into(),
                name: "id".into()
            },
            JoinField {
                side: Side::Left,
                from: "id".into(),
                name: "order".into()
            },
        ]
    );
    assert_eq!(def.projection(Side::Left), vec!["value", "id"]);
    assert_eq!(def.projection(Side::Right), vec!["id"]);
    assert!(op.kind.is_stateful());
    assert_eq!(op.uid, "join-2");
    let schemas = crate::job::schema::check_steps(&j.operators, None).unwrap();
    let out: Vec<(String, FieldType)> = schemas[2]
        .as_ref()
        .unwrap()
        .iter()
        .map(|f| (f.name.clone(), f.field_type))
        .collect();
    assert_eq!(
        out,
        vec![
            ("user".into(), FieldType::String),
            ("amount".into(), FieldType::Int),
            ("id".into(), FieldType::Int),
            ("order".into(), FieldType::Int),
        ]
    );
}

#[test]
fn a_join_plans_both_inputs_as_keyed_exchanges_into_its_own_stage() {
    use crate::exec::plan::{Exchange, plan_graph};
    let j = job(json!([
        {"name": "orders", "source": {"generator": {"count": 10}}},
        {"name": "big", "filter": {"expression": "value > 10"}},
        {"name": "users", "source": {"generator": {"count": 10}}},
        {"inputs": ["big", "users"], "join": join_of("key", "key", json!([{"from": "right.id"}]))},
        {"filter": {"expression": "id > 0"}},
        {"sink": {"print": {}}}
    ]))
    .unwrap();
    type StageRow = (Vec<usize>, Vec<(usize, Exchange)>);
    let stages: Vec<StageRow> = plan_graph(&j)
        .into_iter()
        .map(|s| (s.operators, s.inputs.iter().map(|i| (i.stage, i.exchange)).collect()))
        .collect();
    assert_eq!(
        stages,
        vec![
            (vec![0, 1], vec![]),
            (vec![2], vec![]),
            (vec![3, 4, 5], vec![(0, Exchange::Keyed), (1, Exchange::Keyed)]),
        ]
    );
}

#[test]
fn bad_joins_are_refused_naming_the_field() {
    let fields = json!([{"from": "left.value"}]);
    let ok_join = join_of("key", "key", fields.clone());
    let cases: Vec<(Value, &str)> = vec![
        (
            json!([
                {"name": "orders", "source": {"generator": {}}},
                {"join": ok_join.clone()},
                {"sink": {"print": {}}}
            ]),
            "spec.job.steps[1].inputs: a join needs `inputs`",
        ),
        (
            steps_with(ok_join.clone(), json!(["orders"])),
            "spec.job.steps[2].inputs: a join reads exactly two inputs, `[left, right]`, got 1",
        ),
        (
            steps_with(ok_join.clone(), json!(["orders", "userz"])),
            "spec.job.steps[2].inputs[1]: no step is named `userz`",
        ),
        (
            steps_with(join_of("id", "key", fields.clone()), json!(["orders", "users"])),
            "spec.job.steps[2].join.rightKey: `key` gives a string, and leftKey `id` gives an int",
        ),
        (
            steps_with(join_of("double(id)", "key", fields.clone()), json!(["orders", "users"])),
            "spec.job.steps[2].join.leftKey: `double(id)` gives a float",
        ),
        (
            steps_with(join_of("key", "name", fields.clone()), json!(["orders", "users"])),
            "spec.job.steps[2].join.rightKey: field `name` does not exist",
        ),
        (
            steps_with(
                join_of("key", "key", json!([{"from": "right.price"}])),
                json!(["orders", "users"]),
            ),
            "spec.job.steps[2].join.fields[0].from: field `price` does not exist in the right input's records",
        ),
        (
            steps_with(
                join_of("key", "key", json!([{"from": "middle.id"}])),
                json!(["orders", "users"]),
            ),
            "spec.job.steps[2].join.fields[0].from: `middle.id` must be `left.<field>` or `right.<field>`",
        ),
        (
            steps_with(
                join_of("key", "key", json!([{"from": "left.id"}, {"from": "right.id"}])),
                json!(["orders", "users"]),
            ),
            "spec.job.steps[2].join.fields[1].from: output field `id` is also fields[0]'s",
        ),
        (
            steps_with(
                join_of("key", "key", json!([{"from": "left.id", "as": "key"}])),
                json!(["orders", "users"]),
            ),
            "spec.job.steps[2].join.fields[0].as: `key` is the key's output field",
        ),
        (
            steps_with(join_of("key", "key", json!([])), json!(["orders", "users"])),
            "spec.job.steps[2].join.fields: list the output fields",
        ),
        (
            steps_with(join_of("key +", "key", fields.clone()), json!(["orders", "users"])),
            "spec.job.steps[2].join.leftKey: ",
        ),
        (
            steps_with(
                json!({"leftKey": "key", "rightKey": "key", "fields": fields, "ttl": "soon"}),
                json!(["orders", "users"]),
            ),
            "spec.job.steps[2].join.ttl: `soon` is not a duration",
        ),
        (
            json!([
                {"name": "orders", "source": {"generator": {}}},
                {"name": "by-key", "keyBy": {"expression": "key"}},
                {"name": "users", "source": {"generator": {}}},
                {"inputs": ["by-key", "users"], "join": ok_join.clone()},
                {"sink": {"print": {}}}
            ]),
            "spec.job.steps[3].inputs[0]: a join partitions its inputs by `leftKey` and `rightKey` itself",
        ),
        (
            json!([
                {"name": "orders", "uid": "j.left", "source": {"generator": {}}},
                {"name": "users", "source": {"generator": {}}},
                {"uid": "j", "inputs": ["orders", "users"], "join": ok_join.clone()},
                {"sink": {"print": {}}}
            ]),
            "spec.job.steps[0].uid: `j.left` is the uid of the left input of the join spec.job.steps[2]",
        ),
        (
            json!([
                {"name": "orders", "source": {"generator": {}}},
                {"name": "users", "source": {"generator": {}}},
                {"inputs": ["orders", "users"], "join": ok_join.clone()},
                {"uid": "join-2.right", "sink": {"print": {}}}
            ]),
            "spec.job.steps[3].uid: `join-2.right` is the uid of the right input of the join spec.job.steps[2]",
        ),
    ];
    for (steps, want) in cases {
        let err = job(steps.clone()).expect_err(&steps.to_string());
        assert!(err.starts_with(want), "{steps}\n got: {err}\nwant: {want}");
    }
}
