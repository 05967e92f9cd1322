//! Tests of [`super`]: strict field checking, null pruning and the schema's bounds.

use super::*;

/// Nulls the API server prunes (a field not declared `nullable`) are gone, nullable ones
/// and unknown fields keep theirs.
#[test]
fn nulls_of_non_nullable_fields_are_pruned_as_the_api_server_prunes_them() {
    let mut doc: Value = serde_yaml::from_str(
        "apiVersion: weir.dev/v1alpha1\nkind: StreamJob\nmetadata: {name: x}\nspec:\n  stateBackend: ~\n  parallelism: ~\n  \
         checkpointing: {interval: ~, retained: ~, storage: ~}\n  maxParallelism: ~\n  typo: ~\n  job:\n    steps:\n      - \
         {uid: c, count: {ttl: ~}}\n",
    )
    .unwrap();
    prune_non_nullable_nulls(&mut doc);
    let spec = &doc["spec"];
    for pruned in ["stateBackend", "parallelism", "maxParallelism"] {
        assert!(spec.get(pruned).is_none(), "{pruned} pruned: {spec:?}");
    }
    let checkpointing = spec["checkpointing"].as_mapping().unwrap();
    assert_eq!(
        checkpointing.len(),
        1,
        "interval and retained pruned: {checkpointing:?}"
    );
    assert!(
        spec["checkpointing"].get("storage").is_some_and(Value::is_null),
        "nullable: kept"
    );
    assert!(
        spec.get("typo").is_some_and(Value::is_null),
        "an unknown field keeps its null"
    );
    let ttl = spec["job"]["steps"][0]["count"].get("ttl");
    assert!(ttl.is_some_and(Value::is_null), "nullable: kept");
    // What the schema says of the fields above, so the test follows the CRD.
    let nullable = |field: &str| schema_at(field).and_then(|s| s.get("nullable")) == Some(&Schema::Bool(true));
    assert!(!nullable("spec.stateBackend") && !nullable("spec.parallelism") && !nullable("spec.maxParallelism"));
    assert!(nullable("spec.checkpointing.storage") && nullable("spec.job.steps[0].count.ttl"));
}

/// A manifest (or a `--set`) with a null where the schema has a default reads as the
/// default, as after `kubectl apply` (found by trial: `stateBackend: ~` was refused with
/// "invalid type: an empty value" while `ttl: ~` was accepted).
#[test]
fn a_null_field_of_a_manifest_takes_its_default() {
    let yaml = "apiVersion: weir.dev/v1alpha1\nkind: StreamJob\nmetadata: {name: n}\nspec:\n  stateBackend: ~\n  \
                parallelism: ~\n  checkpointing: {interval: ~, retained: ~}\n  job:\n    steps:\n      - \
                {source: {generator: {keys: 5, count: 10}}}\n      - {keyBy: {expression: key, as: key}}\n      - \
                {uid: c, count: {ttl: ~}}\n      - {sink: {discard: {}}}\n";
    let job = crate::job::parse_manifest(yaml, &["spec.checkpointing.mode=null".to_string()]).unwrap();
    assert_eq!(job.spec.parallelism, 1);
    assert_eq!(job.spec.state_backend, Default::default());
    assert_eq!(job.spec.checkpointing.retained, 3);
    assert_eq!(job.spec.checkpointing.interval, "10s");
}

/// Integer bounds from `minimum`/`maximum` and from CEL rules: `&&`-joined parts count,
/// a rule with `||` or `oldSelf` does not.
#[test]
fn integer_bounds_come_from_the_schema_and_its_plain_rules() {
    let rules = |rules: &[&str]| {
        let rules: Vec<Schema> = rules.iter().map(|r| serde_json::json!({ "rule": r })).collect();
        serde_json::json!({ "type": "integer", "x-kubernetes-validations": rules })
    };
    for (node, want) in [
        (
            serde_json::json!({"minimum": 1.0, "maximum": 32768.0}),
            (Some(1), Some(32768)),
        ),
        (rules(&["self >= 1"]), (Some(1), None)),
        (rules(&["self >= 1 && self <= 32768"]), (Some(1), Some(32768))),
        (rules(&["self>=2"]), (Some(2), None)),
        (rules(&["self == 0 || self >= 1024"]), (None, None)),
        (rules(&["self == oldSelf", "self >= oldSelf"]), (None, None)),
        (rules(&["self >= 1.5"]), (None, None)),
        (rules(&["self.parallelism <= self.maxParallelism"]), (None, None)),
    ] {
        assert_eq!(integer_bounds(&node), want, "{node}");
    }
}

/// An enum value in another case names the value to write.
#[test]
fn an_enum_value_in_another_case_names_the_value_to_write() {
    let doc =
        |backend: &str| format!("apiVersion: weir.dev/v1alpha1\nkind: StreamJob\nspec: {{stateBackend: {backend}}}\n");
    for (given, want) in [("HEAP", Some("`heap`")), ("Disk", Some("`disk`")), ("rocks", None)] {
        let e = check(&doc(given)).unwrap_err();
        match want {
            Some(value) => assert!(
                e.contains(&format!("(values are case-sensitive: write {value})")),
                "{given}: {e}"
            ),
            None => assert!(!e.contains("case-sensitive"), "{given}: {e}"),
        }
    }
}

fn check(yaml: &str) -> Result<(), String> {
    let doc: Value = serde_yaml::from_str(yaml).unwrap();
    check_unknown_fields(&doc).map_err(|e| e.to_string())
}

#[test]
fn closest_name_suggests_near_misses_only() {
    let known = [
        "parallelism",
        "maxParallelism",
        "checkpointing",
        "s3",
        "job",
        "maxRecordsPerSecond",
    ];
    for (typo, want) in [
        ("paralellism", Some("parallelism")),
        ("paralelism", Some("parallelism")),
        ("Parallelism", Some("parallelism")),
        ("max_records_per_second", Some("maxRecordsPerSecond")),
        ("maxRecordsPerSecnd", Some("maxRecordsPerSecond")),
        ("checkpionting", Some("checkpointing")),
        ("s4", None),
        ("jbo", Some("job")),
        ("xyz", None),
        ("replicas", None),
    ] {
        assert_eq!(closest_name(typo, &known), want, "{typo}");
    }
}

#[test]
fn flink_keys_and_habits_say_where_weir_has_them() {
    for (yaml, want) in [
        (
            "spec: { checkpointing: { \"state.backend.incremental\": true } }",
            "spec.checkpointing: unknown field `state.backend.incremental`; `state.backend.incremental` is a Flink configuration key; here it is spec.checkpointing.incremental",
        ),
        (
            "spec: { \"state.checkpoints.dir\": /chk }",
            "spec: unknown field `state.checkpoints.dir`; `state.checkpoints.dir` is a Flink configuration key; here it is spec.checkpointing.storage",
        ),
        (
            "spec: { checkpointing: { dir: ./chk } }",
            "spec.checkpointing: unknown field `dir`; the checkpoint location (Flink's `state.checkpoints.dir`) is `storage`",
        ),
        (
            "spec: { job: { steps: [ {}, { ttl: 24h, count: {} } ] } }",
            "spec.job.steps[1]: unknown field `ttl`; state TTL is set on the stateful step's own settings, e.g. `spec.job.steps[1].count: { ttl: 24h }`",
        ),
    ] {
        let got = check(yaml).unwrap_err();
        assert!(got.starts_with(want), "{yaml}: {got}");
    }
}

#[test]
fn unknown_fields_are_named_with_their_path() {
    let steps = "job: { steps: [ { source: { file: { path: a, maxRecordsPerSecnd: 1 } } } ] }";
    for (yaml, want) in [
        (
            "spec: { paralellism: 4 }".to_string(),
            "spec: unknown field `paralellism`; did you mean `parallelism`?",
        ),
        (
            format!("spec: {{ {steps} }}"),
            "spec.job.steps[0].source.file: unknown field `maxRecordsPerSecnd`; did you mean `maxRecordsPerSecond`?",
        ),
        (
            "spec: { checkpointing: { intervall: 1s } }".into(),
            "spec.checkpointing: unknown field `intervall`; did you mean `interval`?",
        ),
        (
            "spec: { job: { steps: [ {}, { flatmap: {} } ] } }".into(),
            "spec.job.steps[1]: unknown field `flatmap`; did you mean `flatMap`?",
        ),
        (
            "spec: { job: { steps: [ { sink: { print: { pretty: true } } } ] } }".into(),
            "spec.job.steps[0].sink.print: unknown field `pretty`; this object has no fields",
        ),
        (
            "spec: { rollback: { enabeld: false } }".into(),
            "spec.rollback: unknown field `enabeld`; did you mean `enabled`?",
        ),
        (
            "metdata: { name: a }".into(),
            "unknown field `metdata`; did you mean `metadata`?",
        ),
        (
            "metadata: { lables: {} }".into(),
            "metadata: unknown field `lables`; did you mean `labels`?",
        ),
        ("spec: { zzz: 1 }".into(), "spec: unknown field `zzz`; known fields: "),
        (
            "spec: { job: { steps: [ {}, { map: { expression: {'line': line.lower()} } } ] } }".into(),
            "spec.job.steps[1].map.expression: invalid type: a mapping, expected a string; a CEL map literal must be quoted",
        ),
        // Only an expression gets the CEL hint; an enum lists its values.
        (
            "spec: { job: { steps: [ { source: { file: { path: x, format: { a: 1 } } } } ] } }".into(),
            "spec.job.steps[0].source.file.format: invalid type: a mapping, expected one of `text`, `jsonl`, `csv`",
        ),
        // Operator-only fields' values are checked as the API server checks them.
        (
            "spec: { state: rocksdb }".into(),
            "spec.state: unknown variant `rocksdb`, expected `running` or `suspended`",
        ),
        (
            "spec: { upgradeMode: blue-green }".into(),
            "spec.upgradeMode: unknown variant `blue-green`, expected one of ",
        ),
        (
            "spec: { state: { backend: rocksdb } }".into(),
            "spec.state: invalid type: a mapping, expected one of `running`, `suspended`; the state backend is \
             `spec.stateBackend` (`heap` or `disk`)",
        ),
        (
            "spec: { stateBackend: rocksdb }".into(),
            "spec.stateBackend: unknown variant `rocksdb`, expected `heap` or `disk`; Flink's `rocksdb` state \
             backend is `disk` here",
        ),
    ] {
        let e = check(&yaml).unwrap_err();
        assert!(e.starts_with(want), "want `{want}`, got `{e}`");
    }
    let e = check("spec: { job: { steps: [ { source: { file: { path: { a: 1 } } } } ] } }").unwrap_err();
    assert_eq!(
        e,
        "spec.job.steps[0].source.file.path: invalid type: a mapping, expected a string"
    );
}

#[test]
fn kubernetes_and_operator_fields_are_known() {
    let yaml = r#"
apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata:
  name: wc
  namespace: team-a
  labels: { app.kubernetes.io/name: wc }
  annotations: { anything/goes: "yes" }
spec:
  image: x
  upgradeMode: savepoint
  savepoints: { directory: /sp, periodicInterval: 6h, history: { maxCount: 5 } }
  s3: { region: us-east-1, credentialsSecret: { name: s } }
  worker:
    resources: { requests: { cpu: 500m } }
    podTemplate: { spec: { anything: { goes: here } } }
  job: { steps: [ { source: { file: { path: a } } }, { sink: { print: {} } } ] }
status: { lifecycleState: Stable }
"#;
    assert_eq!(check(yaml), Ok(()));
}

#[test]
fn set_paths_must_name_fields() {
    for ok in [
        "spec.parallelism",
        "spec.job.steps.0.source.file.maxRecordsPerSecond",
        "metadata.labels.team",
        "spec.worker.podTemplate.spec.nodeSelector",
        "spec.worker.resources.limits.cpu",
    ] {
        assert_eq!(check_set_path(ok), Ok(()), "{ok}");
    }
    for (bad, want) in [
        (
            "spec.paralelism",
            "spec: unknown field `paralelism`; did you mean `parallelism`? (in --set spec.paralelism)",
        ),
        (
            "spec.job.steps.0.source.file.maxRecordsPerSecnd",
            "spec.job.steps[0].source.file: unknown field `maxRecordsPerSecnd`; did you mean",
        ),
        ("spek.parallelism", "unknown field `spek`; did you mean `spec`?"),
        ("metadata.nmae", "metadata: unknown field `nmae`; did you mean `name`?"),
        ("spec.parallelism.x", "spec.parallelism: is not an object or list"),
    ] {
        let e = check_set_path(bad).unwrap_err().to_string();
        assert!(e.starts_with(want), "want `{want}`, got `{e}`");
    }
}
