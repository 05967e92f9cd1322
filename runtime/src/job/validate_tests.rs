//! Table tests of single-line step validation, defaults and uids (`job/validate.rs`).

use super::*;

#[test]
fn default_max_parallelism_follows_flink() {
    // (p, expected) from min(max(roundUpToPow2(p + p/2), 128), 32768)
    for (p, want) in [
        (1, 128),
        (2, 128),
        (85, 128),
        (86, 256),
        (100, 256),
        (1000, 2048),
        (30000, 32768),
    ] {
        assert_eq!(default_max_parallelism(p), want, "p={p}");
    }
}

fn spec(steps: serde_json::Value) -> JobSpec {
    serde_json::from_value(serde_json::json!({ "parallelism": 2, "job": { "steps": steps } })).unwrap()
}

fn err(spec: JobSpec) -> String {
    Job::from_spec("t", spec).unwrap_err().to_string()
}

#[test]
fn errors_name_the_field() {
    use serde_json::json;
    let src = json!({"source": {"file": {"path": "a"}}});
    let sink = json!({"sink": {"print": {}}});
    let cases = [
        (
            json!([src, {"keyBy": {"expression": "word +"}}, {"count": {}}, sink]),
            "spec.job.steps[1].keyBy.expression",
        ),
        (
            json!([src, {"count": {}}, sink]),
            "spec.job.steps[1]: `count` must directly follow",
        ),
        (
            json!([src, {"flatMap": {"field": "line", "pattern": "("}}, sink]),
            "spec.job.steps[1].flatMap.pattern",
        ),
        (json!([src, {}, sink]), "spec.job.steps[1]: set exactly one"),
        (
            json!([src, {"filter": {"expression": "true"}, "map": {"expression": "record"}}, sink]),
            "more than one",
        ),
        (json!([sink, src]), "spec.job.steps[0]: the first step"),
        (
            json!([src, {"uid": "a", "filter": {"expression": "true"}}, {"uid": "a", "map": {"expression": "record"}}, sink]),
            "spec.job.steps[2].uid",
        ),
        (
            json!([src, {"keyBy": {"expression": "line"}}, {"sum": {}}, sink]),
            "spec.job.steps[2].sum.expression",
        ),
        (
            json!([{"source": {"file": {"path": "a", "maxRecordsPerSecond": 0}}}, sink]),
            "spec.job.steps[0].source.file.maxRecordsPerSecond: must be at least 1; omit it for no limit",
        ),
        (
            json!([{"source": {"generator": {"maxRecordsPerSecond": 0}}}, sink]),
            "spec.job.steps[0].source.generator.maxRecordsPerSecond: must be at least 1",
        ),
        (
            json!([{"source": {"generator": {"splits": 0}}}, sink]),
            "spec.job.steps[0].source.generator.splits: must be at least 1",
        ),
        (
            json!([{"source": {"generator": {"keys": 0}}}, sink]),
            "spec.job.steps[0].source.generator.keys: must be at least 1",
        ),
        (
            json!([src, {"sink": {"print": {}, "discard": {}}}]),
            "spec.job.steps[1].sink: set exactly one of `file`, `print`, `discard`",
        ),
        (
            json!([src, {"sink": {"discard": {}}}, sink]),
            "spec.job.steps[1]: the last step, and only it, must be a `sink`",
        ),
    ];
    for (steps, want) in cases {
        let e = err(spec(steps));
        assert!(e.contains(want), "want `{want}` in `{e}`");
    }
    let mut s = spec(json!([src, sink]));
    s.parallelism = 0;
    assert!(err(s.clone()).starts_with("spec.parallelism:"));
    s.parallelism = 5;
    s.max_parallelism = Some(4);
    assert!(err(s.clone()).starts_with("spec.parallelism:"));
    s.max_parallelism = Some(40000);
    assert!(err(s.clone()).starts_with("spec.maxParallelism:"));
    s.max_parallelism = None;
    s.checkpointing.interval = "soon".into();
    assert!(err(s).starts_with("spec.checkpointing.interval:"));
}

#[test]
fn discard_sink_is_a_sink_without_state() {
    use serde_json::json;
    let job = Job::from_spec(
        "t",
        spec(json!([{"source": {"generator": {}}}, {"sink": {"discard": {}}}])),
    )
    .unwrap();
    assert_eq!(job.operators[1].kind, OperatorKind::DiscardSink);
    assert_eq!(job.operators[1].uid, "sink-discard-1");
    assert!(!job.operators[1].kind.is_stateful());
    let manifest = "apiVersion: weir.dev/v1alpha1\nkind: StreamJob\nmetadata: { name: t }\nspec:\n  job:\n    steps:\n      - source: { generator: {} }\n      - sink: { discard: { path: x } }\n";
    let unknown = crate::job::parse_manifest(manifest, &[]).unwrap_err().to_string();
    assert!(unknown.contains("spec.job.steps[1].sink.discard"), "{unknown}");
}

#[test]
fn default_uids_are_kind_and_position() {
    use serde_json::json;
    let job = Job::from_spec(
        "t",
        spec(json!([
            {"source": {"file": {"path": "a"}}},
            {"keyBy": {"expression": "line"}},
            {"uid": "counts", "count": {}},
            {"sink": {"print": {}}}
        ])),
    )
    .unwrap();
    let uids: Vec<_> = job.operators.iter().map(|o| o.uid.as_str()).collect();
    assert_eq!(uids, ["source-file-0", "keyBy-1", "counts", "sink-print-3"]);
    assert_eq!(job.max_parallelism, 128);
}

#[test]
fn unaligned_checkpoint_settings_are_validated_and_parsed() {
    use serde_json::json;
    use std::time::Duration;
    let steps = json!([{"source": {"generator": {}}}, {"sink": {"discard": {}}}]);
    // (mode, unaligned, alignedCheckpointTimeout) -> Ok(unaligned_after) or the field in error.
    type Case = (
        &'static str,
        bool,
        Option<&'static str>,
        Result<Option<Duration>, &'static str>,
    );
    let cases: [Case; 7] = [
        ("exactly-once", false, None, Ok(None)),
        ("exactly-once", true, None, Ok(Some(Duration::ZERO))),
        ("exactly-once", true, Some("2s"), Ok(Some(Duration::from_secs(2)))),
        (
            "exactly-once",
            false,
            Some("2s"),
            Err("spec.checkpointing.alignedCheckpointTimeout: applies only with `unaligned: true`"),
        ),
        (
            "exactly-once",
            true,
            Some("soon"),
            Err("spec.checkpointing.alignedCheckpointTimeout: `soon` is not a duration"),
        ),
        (
            "at-least-once",
            true,
            None,
            Err("spec.checkpointing.unaligned: unaligned checkpoints apply to `mode: exactly-once` only"),
        ),
        ("at-most-once", true, None, Err("spec.checkpointing.unaligned:")),
    ];
    for (mode, unaligned, timeout, want) in cases {
        let mut s = spec(steps.clone());
        s.checkpointing.mode = serde_json::from_value(json!(mode)).unwrap();
        s.checkpointing.unaligned = unaligned;
        s.checkpointing.aligned_checkpoint_timeout = timeout.map(str::to_string);
        match (Job::from_spec("t", s), want) {
            (Ok(job), Ok(after)) => assert_eq!(job.unaligned_after(), after, "{mode} {unaligned} {timeout:?}"),
            (Err(e), Err(prefix)) => assert!(e.to_string().starts_with(prefix), "{e}"),
            (got, want) => panic!("{mode} {unaligned} {timeout:?}: got {got:?}, want {want:?}"),
        }
    }
    let mut s = spec(steps);
    s.checkpointing.unaligned = true;
    let e = Job::from_spec("t", s).unwrap().check_distributed().unwrap_err();
    assert_eq!(
        e.to_string(),
        format!("spec.checkpointing.unaligned: {UNALIGNED_ONLY_LOCAL}")
    );
}

#[test]
fn a_discard_sink_throttle_must_be_at_least_one() {
    use serde_json::json;
    let throttled =
        |rate: u64| spec(json!([{"source": {"generator": {}}}, {"sink": {"discard": {"maxRecordsPerSecond": rate}}}]));
    assert!(Job::from_spec("t", throttled(10)).is_ok());
    assert!(err(throttled(0)).starts_with("spec.job.steps[1].sink.discard.maxRecordsPerSecond: must be at least 1"));
}
