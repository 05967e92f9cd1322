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
        (
            json!([src, {"flatMap": {"field": "line", "pattern": ""}}, sink]),
            "spec.job.steps[1].flatMap.pattern: `` matches the empty string",
        ),
        (
            json!([src, {"flatMap": {"field": "line", "pattern": "\\s*"}}, sink]),
            "spec.job.steps[1].flatMap.pattern: `\\s*` matches the empty string, so it would split between every character",
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
        (
            json!([src, {"keyBy": {"expression": "line"}}, {"count": {"ttl": "a day"}}, sink]),
            "spec.job.steps[2].count.ttl: `a day` is not a duration",
        ),
        (
            json!([src, {"keyBy": {"expression": "line"}}, {"sum": {"expression": "1", "ttl": "0ms"}}, sink]),
            "spec.job.steps[2].sum.ttl: `0ms` is shorter than 1ms",
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
fn aggregate_ttl_parses_to_a_duration() {
    use serde_json::json;
    let src = json!({"source": {"file": {"path": "a"}}});
    let sink = json!({"sink": {"print": {}}});
    for (ttl, want) in [
        (None, None),
        (Some("24h"), Some(Duration::from_secs(86_400))),
        (Some("1ms"), Some(Duration::from_millis(1))),
        (Some(" 90s "), Some(Duration::from_secs(90))),
    ] {
        let count = match ttl {
            Some(t) => json!({"count": {"ttl": t}}),
            None => json!({"count": {}}),
        };
        let job = Job::from_spec("t", spec(json!([src, {"keyBy": {"expression": "line"}}, count, sink]))).unwrap();
        let got = job.operators.iter().find_map(|o| match &o.kind {
            OperatorKind::Aggregate { ttl, .. } => Some(*ttl),
            _ => None,
        });
        assert_eq!(got, Some(want), "ttl {ttl:?}");
    }
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

/// Window jobs: event time comes from the source, the time field and the window's output are
/// checked at plan time, and the distributed runtime runs them.
#[test]
fn window_steps_need_event_time_and_are_type_checked() {
    use serde_json::json;
    let gen_src =
        |event_time: serde_json::Value| json!({"source": {"generator": {"count": 10}, "eventTime": event_time}});
    let key_by = json!({"keyBy": {"expression": "key"}});
    let tumbling = json!({"window": {"type": "tumbling", "size": "1m"}});
    let sink = json!({"sink": {"print": {}}});
    let ok = Job::from_spec(
        "t",
        spec(json!([gen_src(json!({"field": "id"})), key_by, tumbling, sink])),
    )
    .unwrap();
    let OperatorKind::Window(def) = &ok.operators[2].kind else {
        panic!("not a window: {:?}", ok.operators[2].kind)
    };
    assert_eq!(def.time_field, "id");
    let no_event_time = json!({"source": {"generator": {"count": 10}}});
    let cases = [
        (
            json!([no_event_time, key_by, tumbling, sink]),
            "spec.job.steps[2].window: a window needs event time: set `eventTime` on the source spec.job.steps[0].source",
        ),
        (
            json!([gen_src(json!({"field": "idd"})), key_by, tumbling, sink]),
            "spec.job.steps[2].window: the event-time field `idd` (the source's `eventTime.field`) does not exist",
        ),
        (
            json!([
                gen_src(json!({"field": "id", "maxOutOfOrderness": "soon"})),
                key_by,
                tumbling,
                sink
            ]),
            "spec.job.steps[0].source.eventTime.maxOutOfOrderness: `soon` is not a duration",
        ),
        (
            json!([gen_src(json!({"field": "idd"})), sink]),
            "spec.job.steps[0].source.eventTime.field: the source's records have no field `idd`; their fields are `id`, `key`, `value`",
        ),
        (
            json!([{"source": {"file": {"path": "x", "format": "jsonl", "schema": [{"name": "t", "type": "float"}]}, "eventTime": {"field": "t"}}}, sink]),
            "spec.job.steps[0].source.eventTime.field: `t` is a float field; event time is an ISO-8601 string",
        ),
        (
            json!([gen_src(json!({"field": "id"})), tumbling, sink]),
            "spec.job.steps[1]: `window` must directly follow a `keyBy` step: it keeps state per key, so add a `keyBy`",
        ),
        (
            json!([gen_src(json!({"field": "id"})), key_by, {"window": {"type": "tumbling", "size": "1m", "aggregate": "sum", "expression": "key"}}, sink]),
            "spec.job.steps[2].window.expression: `sum` aggregates numbers",
        ),
        (
            json!([gen_src(json!({"field": "id"})), key_by, tumbling, {"filter": {"expression": "window_end > 0 && count > 1 && key != ''"}}, sink]),
            "",
        ),
        (
            json!([gen_src(json!({"field": "id"})), key_by, tumbling, {"filter": {"expression": "window_end + ''"}}, sink]),
            "spec.job.steps[3].filter.expression",
        ),
    ];
    for (steps, want) in cases {
        match Job::from_spec("t", spec(steps.clone())) {
            Ok(_) => assert_eq!(want, "", "{steps} was accepted"),
            Err(e) => assert!(
                !want.is_empty() && e.to_string().starts_with(want),
                "{steps}: {e}\nwanted: {want}"
            ),
        }
    }
}

#[test]
fn unaligned_checkpoints_refuse_event_time_naming_both_fields() {
    use serde_json::json;
    let mut s = spec(json!([
        {"source": {"file": {"path": "events.jsonl", "format": "jsonl"}, "eventTime": {"field": "dt", "maxOutOfOrderness": "5s"}}},
        {"sink": {"discard": {}}}
    ]));
    s.checkpointing.unaligned = true;
    let e = err(s);
    assert!(
        e.starts_with("spec.checkpointing.unaligned: unaligned checkpoints do not support event time yet (spec.job.steps[0].source.eventTime)"),
        "{e}"
    );
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
}

#[test]
fn a_discard_sink_throttle_must_be_at_least_one() {
    use serde_json::json;
    let throttled =
        |rate: u64| spec(json!([{"source": {"generator": {}}}, {"sink": {"discard": {"maxRecordsPerSecond": rate}}}]));
    assert!(Job::from_spec("t", throttled(10)).is_ok());
    assert!(err(throttled(0)).starts_with("spec.job.steps[1].sink.discard.maxRecordsPerSecond: must be at least 1"));
}

/// Every duration field refuses a negative value the same way, naming the field and saying that
/// durations are positive (humantime's own message, "expected number at 0", said neither).
#[test]
fn negative_durations_are_refused_in_every_duration_field() {
    use serde_json::json;
    let src = |event_time: serde_json::Value| json!({"source": {"generator": {"count": 10}, "eventTime": event_time}});
    let key_by = json!({"keyBy": {"expression": "key"}});
    let sink = json!({"sink": {"print": {}}});
    let window = |w: serde_json::Value| json!([src(json!({"field": "id"})), key_by, {"window": w}, sink]);
    let steps_cases = [
        (
            json!([src(json!({"field": "id", "maxOutOfOrderness": "-5s"})), sink]),
            "spec.job.steps[0].source.eventTime.maxOutOfOrderness",
        ),
        (
            json!([src(json!({"field": "id", "idleTimeout": "-1m"})), sink]),
            "spec.job.steps[0].source.eventTime.idleTimeout",
        ),
        (
            window(json!({"type": "tumbling", "size": "-1m"})),
            "spec.job.steps[2].window.size",
        ),
        (
            window(json!({"type": "sliding", "size": "1m", "slide": "-30s"})),
            "spec.job.steps[2].window.slide",
        ),
        (
            window(json!({"type": "session", "gap": "-30s"})),
            "spec.job.steps[2].window.gap",
        ),
        (
            window(json!({"type": "tumbling", "size": "1m", "allowedLateness": "-1s"})),
            "spec.job.steps[2].window.allowedLateness",
        ),
        (
            json!([src(json!(null)), key_by, {"count": {"ttl": "-5m"}}, sink]),
            "spec.job.steps[2].count.ttl",
        ),
    ];
    for (steps, field) in steps_cases {
        let mut steps = steps;
        if steps[0]["source"]["eventTime"].is_null() {
            steps[0]["source"].as_object_mut().unwrap().remove("eventTime");
        }
        let e = err(spec(steps.clone()));
        assert!(e.starts_with(&format!("{field}: `-")), "{steps}: {e}");
        // A TTL is never `0s` (that is no TTL: the field left out), so it is not suggested.
        let positive = if field.ends_with(".ttl") {
            "is negative; set a positive duration like `24h`, or remove `ttl` to keep keys for ever"
        } else {
            "is negative; a duration is positive"
        };
        assert!(e.contains(positive), "{steps}: {e}");
    }
    let base = spec(json!([src(json!({"field": "id"})), sink]));
    for field in ["interval", "timeout", "minPause"] {
        let mut s = base.clone();
        match field {
            "interval" => s.checkpointing.interval = "-1s".into(),
            "timeout" => s.checkpointing.timeout = "-1s".into(),
            _ => s.checkpointing.min_pause = "-1s".into(),
        }
        let e = err(s);
        assert!(
            e.starts_with(&format!(
                "spec.checkpointing.{field}: `-1s` is negative; a duration is positive"
            )),
            "{e}"
        );
    }
    let mut s = base;
    s.checkpointing.unaligned = true;
    s.checkpointing.aligned_checkpoint_timeout = Some("-2s".into());
    let e = err(s);
    assert!(
        e.starts_with("spec.checkpointing.alignedCheckpointTimeout: `-2s` is negative"),
        "{e}"
    );
}

/// A keyed count on the disk backend with `spec.diskState` set to `disk_state` (YAML flow).
fn disk_count_manifest(disk_state: &str) -> String {
    format!(
        "apiVersion: weir.dev/v1alpha1\nkind: StreamJob\nmetadata: {{name: counts}}\nspec:\n  \
         stateBackend: disk\n  diskState: {disk_state}\n  job:\n    steps:\n      \
         - source: {{generator: {{keys: 10}}}}\n      - keyBy: {{expression: key, as: key}}\n      \
         - count: {{}}\n      - sink: {{print: {{}}}}\n"
    )
}

/// Sizes in `spec.diskState` are Kubernetes quantities, int-or-string as the API server takes
/// them: a plain integer (`writeCacheSize: 0`) is a number of bytes, as the quoted `"0"`; a
/// negative or fractional number is refused naming the field (`writeCacheSize: 0` was refused
/// as "expected a string" before 2026-12-02). Strings take Kubernetes' whole quantity grammar
/// (`1.5Gi` and `1e3` were refused before 2026-12-04), and `64MB` is refused saying to write
/// `64Mi` or `64M`.
#[test]
fn disk_state_sizes_take_integers_and_quantity_strings() {
    let manifest = disk_count_manifest;
    // (cache, write buffer, write cache) bytes of a manifest's `diskState`.
    let sizes = |disk_state: &str| {
        let job = crate::job::parse_manifest(&manifest(disk_state), &[]).unwrap();
        let options = job.spec.disk_state_options().unwrap();
        (
            options.cache_bytes,
            options.write_buffer_bytes,
            options.write_cache_bytes,
        )
    };
    assert_eq!(
        sizes("{cacheSize: 268435456, writeBufferSize: \"2Mi\", writeCacheSize: 0}"),
        (256 << 20, 2 << 20, 0)
    );
    // The whole quantity grammar: fractions, exponents (quoted, or a YAML float that is whole).
    assert_eq!(
        sizes("{cacheSize: \"1.5Gi\", writeBufferSize: 2e6, writeCacheSize: \"2e6\"}"),
        (3 << 29, 2_000_000, 2_000_000)
    );
    for (disk_state, want) in [
        ("{writeCacheSize: -1}", "spec.diskState.writeCacheSize"),
        ("{cacheSize: 1.5}", "spec.diskState.cacheSize"),
        ("{cacheSize: {size: 1}}", "spec.diskState.cacheSize"),
        (
            "{cacheSize: 64MB}",
            "spec.diskState.cacheSize: `64MB` is not a Kubernetes quantity: units take no `B`; write `64Mi` (a power of 1024) or `64M` (a power of 1000)",
        ),
        (
            "{writeCacheSize: 0.1Ki}",
            "spec.diskState.writeCacheSize: `0.1Ki` is 102.4 bytes, not a whole number of bytes",
        ),
    ] {
        let e = crate::job::parse_manifest(&manifest(disk_state), &[]).unwrap_err();
        assert!(e.to_string().contains(want), "{disk_state}: {e}");
        assert!(
            ["size in bytes", "negative", "quantity"]
                .iter()
                .any(|w| e.to_string().contains(w)),
            "{disk_state}: {e}"
        );
    }
}

/// `spec.diskState.compression` takes `none`, `lz4` and `lz4-zstd` into the stores' options
/// (unset: none); any other value is refused naming the field and the values it takes.
#[test]
fn disk_state_compression_takes_the_named_values_only() {
    let manifest = disk_count_manifest;
    use crate::state::disk::StoreCompression;
    for (disk_state, want) in [
        ("{}", StoreCompression::None),
        ("{compression: none}", StoreCompression::None),
        ("{compression: lz4}", StoreCompression::Lz4),
        ("{compression: lz4-zstd}", StoreCompression::Lz4ZstdBottommost),
    ] {
        let job = crate::job::parse_manifest(&manifest(disk_state), &[]).unwrap();
        assert_eq!(job.spec.disk_state_options().unwrap().compression, want, "{disk_state}");
    }
    for disk_state in ["{compression: snappy}", "{compression: LZ4}", "{compression: true}"] {
        let e = crate::job::parse_manifest(&manifest(disk_state), &[])
            .unwrap_err()
            .to_string();
        assert!(e.contains("spec.diskState.compression"), "{disk_state}: {e}");
        assert!(e.contains("lz4-zstd"), "{disk_state}: {e}");
    }
}

/// `spec.diskState`: read into the disk stores' options, refused with a heap backend or a
/// value that is not a size, naming the field.
#[test]
fn disk_state_settings_are_checked_with_the_job() {
    use serde_json::json;
    let steps = json!([{"source": {"file": {"path": "a"}}}, {"sink": {"print": {}}}]);
    let with = |extra: serde_json::Value| -> JobSpec {
        let mut v = json!({ "parallelism": 1, "job": { "steps": steps } });
        v.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        serde_json::from_value(v).unwrap()
    };
    let ok = with(json!({"stateBackend": "disk", "diskState": {"cacheSize": "256Mi"}}));
    let job = Job::from_spec("t", ok).unwrap();
    let options = job.spec.disk_state_options().unwrap();
    assert_eq!(options.cache_bytes, 256 << 20);
    assert_eq!(options.write_buffer_bytes, 16 << 20);
    for (extra, want) in [
        (
            json!({"diskState": {"cacheSize": "256Mi"}}),
            "spec.diskState: sets the disk state backend's memory, but spec.stateBackend is heap",
        ),
        (
            json!({"stateBackend": "disk", "diskState": {"cacheSize": "lots"}}),
            "spec.diskState.cacheSize: `lots` is not a Kubernetes quantity",
        ),
        (
            json!({"stateBackend": "disk", "diskState": {"writeBufferSize": "4Ki"}}),
            "spec.diskState.writeBufferSize: must be at least 1Mi",
        ),
    ] {
        let e = err(with(extra));
        assert!(e.starts_with(want), "{e}");
    }
}

/// A `file://` URL naming a host (`file://tmp/x`, once taken as the relative `tmp/x`) is
/// refused in every location field, naming it; `file:/abs` (Flink's form) and
/// `file:///abs` are local paths.
#[test]
fn file_urls_naming_a_host_are_refused_naming_the_field() {
    use serde_json::json;
    let steps =
        |source: &str, sink: &str| json!([{"source": {"file": {"path": source}}}, {"sink": {"file": {"path": sink}}}]);
    let with = |extra: serde_json::Value, steps: serde_json::Value| {
        let mut doc = json!({ "parallelism": 2, "job": { "steps": steps } });
        for (k, v) in extra.as_object().unwrap() {
            doc[k] = v.clone();
        }
        serde_json::from_value::<JobSpec>(doc).unwrap()
    };
    let ok = steps("file:/data/*.txt", "file:///out");
    let cases = [
        (
            with(json!({"checkpointing": {"storage": "file://tmp/chk"}}), ok.clone()),
            "spec.checkpointing.storage: invalid storage URL `file://tmp/chk`",
        ),
        (
            with(json!({"savepoints": {"directory": "file://svp"}}), ok.clone()),
            "spec.savepoints.directory:",
        ),
        (
            with(json!({}), steps("file://data/*.txt", "/out")),
            "spec.job.steps[0].source.file.path:",
        ),
        (
            with(json!({}), steps("/data/*.txt", "file://out")),
            "spec.job.steps[1].sink.file.path:",
        ),
    ];
    for (spec, want) in cases {
        let e = err(spec);
        assert!(e.starts_with(want) && e.contains("three slashes"), "{want}: {e}");
    }
    let fine = with(
        json!({"checkpointing": {"storage": "file:/tmp/chk"}, "savepoints": {"directory": "file://localhost/svp"}}),
        ok,
    );
    assert!(Job::from_spec("t", fine).is_ok());
}
