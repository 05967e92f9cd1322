//! What a Flink user writes first, through the `weir` binary over the real data sets: the
//! durations Flink accepts, Helm-style `--set` paths, a sliding window too fine to hold, an
//! event-time field that holds no time, a directory as a source path, a file or a URL typo as
//! an output location. Each is either accepted and runs to the end, or refused before anything
//! runs with an error naming the file and the field (never a crash or an abort).

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// A job over one hour of GH Archive events: event time from `dt` (or `time_field`), keyed by
/// `type`, a `window` of `window` (a YAML flow mapping's contents), a file sink in `dir`.
fn windowed_manifest(dir: &Path, time_field: &str, window: &str) -> PathBuf {
    let events = data_dir().join("gharchive/2015-02-22-21.jsonl");
    let yaml = format!(
        r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: windowed }}
spec:
  parallelism: 1
  checkpointing: {{ interval: 0s, storage: "{dir}/checkpoints" }}
  job:
    steps:
      - uid: events
        source:
          file: {{ path: "{events}", format: jsonl }}
          eventTime: {{ field: {time_field}, maxOutOfOrderness: 5s }}
      - keyBy: {{ expression: type, as: type }}
      - uid: per-type
        window: {{ {window} }}
      - uid: output
        sink: {{ file: {{ path: "{dir}/output" }} }}
"#,
        dir = dir.display(),
        events = events.display()
    );
    let f = dir.join("job.yaml");
    std::fs::write(&f, yaml).unwrap();
    f
}

/// `weir run MANIFEST EXTRA...`: (exit code, stderr).
fn run(manifest: &Path, extra: &[&str]) -> (Option<i32>, String) {
    let out = Command::new(weir())
        .arg("run")
        .arg(manifest)
        .args(["--listen", "127.0.0.1:0"])
        .args(extra)
        .env("WEIR_LOG", "warn,weir=info")
        .env(SECRET_ENV, secret_file())
        .stdin(Stdio::null())
        .output()
        .expect("run weir");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

/// Asserts a run was refused before it started: exit 1, `want` in the message, no output.
fn assert_refused(dir: &Path, (code, err): (Option<i32>, String), want: &str) {
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains(want), "wanted `{want}` in:\n{err}");
    assert!(!err.contains("panicked") && !err.contains("memory allocation"), "{err}");
    assert!(
        local_output(&dir.join("output")).is_empty(),
        "output written by a refused job"
    );
}

/// The sum of the `count` field over the job's committed output.
fn counted(dir: &Path) -> i64 {
    local_output(&dir.join("output"))
        .iter()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["count"]
                .as_i64()
                .unwrap()
        })
        .sum()
}

#[test]
fn durations_are_read_as_flink_reads_them() {
    // The hour has 29,963 events; a tumbling window counts each once, whatever its size.
    for (size, accepted) in [
        ("10 SECONDS", true),
        ("1 min", true),
        ("PT10M", true),
        ("500 milliseconds", true),
        ("1H", true),
        ("60000", false),
        ("P1M", false),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let m = windowed_manifest(dir.path(), "dt", &format!("type: tumbling, size: \"{size}\""));
        let result = run(&m, &[]);
        if accepted {
            assert_eq!(result.0, Some(0), "{size}: {}", result.1);
            assert_eq!(counted(dir.path()), 29_963, "{size}");
        } else {
            let want = format!("job.yaml: spec.job.steps[2].window.size: `{size}`");
            assert_refused(dir.path(), result, &want);
        }
    }
}

#[test]
fn a_sliding_window_with_too_many_windows_per_record_is_refused_not_an_abort() {
    let dir = tempfile::tempdir().unwrap();
    let m = windowed_manifest(dir.path(), "dt", "type: sliding, size: 36500d, slide: 1s");
    assert_refused(
        dir.path(),
        run(&m, &[]),
        "job.yaml: spec.job.steps[2].window.slide: puts each record into 3153600000 windows",
    );
}

#[test]
fn an_event_time_field_that_holds_no_time_is_named_with_its_step_before_the_job_starts() {
    let file = data_dir().join("gharchive/2015-02-22-21.jsonl");
    // `type` holds `push`, `id` a string of digits, `commits` is missing from the third record.
    for (field, want) in [
        ("type", "`type` of record 1 of "),
        ("id", "`id` of record 1 of "),
        ("commits", "record 3 of "),
    ] {
        let dir = tempfile::tempdir().unwrap();
        let m = windowed_manifest(dir.path(), field, "type: tumbling, size: 1m");
        let (code, err) = run(&m, &[]);
        assert_refused(
            dir.path(),
            (code, err.clone()),
            "job.yaml: spec.job.steps[0].source.eventTime.field: ",
        );
        assert!(
            err.contains(want) && err.contains(&file.display().to_string()),
            "{field}: {err}"
        );
        assert!(!err.contains("upstream lost"), "{field}: {err}");
    }
}

#[test]
fn a_csv_time_with_a_space_and_no_zone_is_an_event_time() {
    let dir = tempfile::tempdir().unwrap();
    let taxi = data_dir().join("nyc-taxi/yellow_tripdata_sample_2019-01.csv");
    let yaml = format!(
        r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: taxi }}
spec:
  parallelism: 1
  checkpointing: {{ interval: 0s, storage: "{dir}/checkpoints" }}
  job:
    steps:
      - source:
          file: {{ path: "{taxi}", format: csv }}
          eventTime: {{ field: pickup_datetime, maxOutOfOrderness: 40d }}
      - keyBy: {{ expression: vendor_id }}
      - window: {{ type: tumbling, size: 1d }}
      - sink: {{ file: {{ path: "{dir}/output" }} }}
"#,
        dir = dir.path().display(),
        taxi = taxi.display()
    );
    let m = dir.path().join("taxi.yaml");
    std::fs::write(&m, yaml).unwrap();
    let (code, err) = run(&m, &[]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(counted(dir.path()), 10_000);
}

#[test]
fn set_paths_take_list_indexes_in_brackets_as_the_errors_print_them() {
    let dir = tempfile::tempdir().unwrap();
    let m = windowed_manifest(dir.path(), "dt", "type: tumbling, size: 1m");
    let (code, err) = run(&m, &["--set", "spec.job.steps[2].window.size=1h"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(counted(dir.path()), 29_963);
    let (code, err) = run(&m, &["--set", "spec.job.steps[2].window.sise=1h"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("unknown field `sise`; did you mean `size`?"), "{err}");
}

#[test]
fn a_directory_as_source_path_says_which_glob_reads_its_files() {
    let dir = tempfile::tempdir().unwrap();
    let m = windowed_manifest(dir.path(), "dt", "type: tumbling, size: 1m");
    let gharchive = data_dir().join("gharchive");
    let set = format!("spec.job.steps[0].source.file.path={}/", gharchive.display());
    let (code, err) = run(&m, &["--set", &set]);
    assert_eq!(code, Some(1), "{err}");
    let want = format!("give a glob of its files, like `{}/*`", gharchive.display());
    assert!(
        err.contains("operator events (spec.job.steps[0].source.file): "),
        "{err}"
    );
    assert!(err.contains("names a directory") && err.contains(&want), "{err}");
    // A file that cannot be reached (here: under a file; as another user, in a directory it
    // cannot search) is not a file that does not exist.
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let set = format!("spec.job.steps[0].source.file.path={}/events.jsonl", file.display());
    let (code, err) = run(&m, &["--set", &set]);
    assert_eq!(code, Some(1), "{err}");
    let want = format!("cannot read `{}/events.jsonl`: Not a directory", file.display());
    assert!(err.contains(&want) && !err.contains("no file matches"), "{err}");
}

#[test]
fn a_file_or_a_url_typo_as_output_location_is_refused_without_writing_elsewhere() {
    let dir = tempfile::tempdir().unwrap();
    let m = windowed_manifest(dir.path(), "dt", "type: tumbling, size: 1m");
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let set = format!("spec.job.steps[3].sink.file.path={}", file.display());
    let (code, err) = run(&m, &["--set", &set]);
    assert_eq!(code, Some(1), "{err}");
    let want = format!(
        "spec.job.steps[3].sink.file.path: cannot write to {}: it is a file",
        file.display()
    );
    assert!(err.contains(&want), "{err}");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "x");

    let (code, err) = Command::new(weir())
        .current_dir(dir.path())
        .args([
            "run",
            "job.yaml",
            "--listen",
            "127.0.0.1:0",
            "--set",
            "spec.checkpointing.storage=s3:/bucket/chk",
        ])
        .env("WEIR_LOG", "warn,weir=info")
        .env(SECRET_ENV, secret_file())
        .output()
        .map(|o| (o.status.code(), String::from_utf8_lossy(&o.stderr).into_owned()))
        .unwrap();
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("`s3:` without `//` is not a URL"), "{err}");
    assert!(!dir.path().join("s3:").exists(), "a local directory `s3:` was made");
}

#[test]
fn has_on_a_record_field_says_how_to_test_for_a_field() {
    let dir = tempfile::tempdir().unwrap();
    let m = windowed_manifest(dir.path(), "dt", "type: tumbling, size: 1m");
    let (code, err) = run(&m, &["--set", "spec.job.steps[1].keyBy.expression=has(commits)"]);
    assert_eq!(code, Some(1), "{err}");
    assert!(err.contains("spec.job.steps[1].keyBy.expression: "), "{err}");
    assert!(
        err.contains("test whether a record has a field with `has(record.commits)`"),
        "{err}"
    );
}

#[test]
fn savepoint_trigger_with_no_job_answering_says_what_to_start_as_every_command_does() {
    for command in [&["savepoint", "trigger"][..], &["status"][..], &["cancel"][..]] {
        let out = Command::new(weir())
            .args(command)
            .args(["--url", "http://127.0.0.1:1"])
            .env("WEIR_LOG", "warn,weir=info")
            .env(SECRET_ENV, secret_file())
            .output()
            .unwrap();
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{command:?}: {err}");
        assert!(
            err.contains("http://127.0.0.1:1: nothing answers"),
            "{command:?}: {err}"
        );
        assert!(err.contains("start a job with `weir run FILE`"), "{command:?}: {err}");
    }
}

#[test]
fn an_s3_endpoint_that_does_not_answer_says_where_the_tools_read_the_endpoint() {
    let out = Command::new(weir())
        .args(["checkpoints", "list", "s3://weir/checkpoints", "--job", "wordcount"])
        .env("WEIR_LOG", "warn,weir=info")
        .env("AWS_ENDPOINT_URL", "http://127.0.0.1:1")
        .env("AWS_REGION", "us-east-1")
        .env("AWS_EC2_METADATA_DISABLED", "true")
        .env("AWS_ACCESS_KEY_ID", "test")
        .env("AWS_SECRET_ACCESS_KEY", "test")
        .output()
        .unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(
        err.contains("nothing answered at the S3 endpoint http://127.0.0.1:1"),
        "{err}"
    );
    assert!(
        err.contains("`AWS_ENDPOINT_URL` and `WEIR_S3_PATH_STYLE=true` for `weir checkpoints list`"),
        "{err}"
    );
}

/// Files written by Windows tools start with a UTF-8 byte order mark; it is not part of the
/// CSV header's first column name nor of the first JSON line.
#[test]
fn a_byte_order_mark_at_the_start_of_a_file_is_not_content() {
    let dir = tempfile::tempdir().unwrap();
    let csv = dir.path().join("fares.csv");
    std::fs::write(&csv, b"\xEF\xBB\xBFzone,fare\r\n1,2.5\r\n2,4.0\r\n1,1.5\r\n").unwrap();
    let jsonl = dir.path().join("events.jsonl");
    std::fs::write(
        &jsonl,
        b"\xEF\xBB\xBF{\"zone\":1,\"t\":\"2020-01-01T00:00:00Z\"}\n{\"zone\":1,\"t\":\"2020-01-01T00:00:01Z\"}\n",
    )
    .unwrap();
    let sources = [
        format!(
            "{{ file: {{ path: \"{}\", format: csv, schema: [ {{ name: zone, type: int }} ] }} }}",
            csv.display()
        ),
        format!(
            "{{ file: {{ path: \"{}\", format: jsonl }}, eventTime: {{ field: t }} }}",
            jsonl.display()
        ),
    ];
    for (source, want) in sources.iter().zip([
        vec![r#"{"zone":1,"count":2}"#, r#"{"zone":2,"count":1}"#],
        vec![r#"{"zone":1,"count":2}"#],
    ]) {
        let out = dir.path().join("output");
        let _ = std::fs::remove_dir_all(&out);
        let yaml = format!(
            r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: bom }}
spec:
  parallelism: 1
  checkpointing: {{ interval: 0s, storage: "{dir}/checkpoints" }}
  job:
    steps:
      - source: {source}
      - keyBy: {{ expression: zone, as: zone }}
      - count: {{}}
      - sink: {{ file: {{ path: "{out}" }} }}
"#,
            dir = dir.path().display(),
            out = out.display()
        );
        let m = dir.path().join("bom.yaml");
        std::fs::write(&m, yaml).unwrap();
        let (code, err) = run(&m, &["--restore", "none"]);
        assert_eq!(code, Some(0), "{source}: {err}");
        let mut finals: Vec<String> = local_output(&out);
        finals.retain(|l| want.iter().any(|w| w == l));
        finals.sort();
        finals.dedup();
        assert_eq!(finals, want, "{source}: {:?}", local_output(&out));
    }
}

/// A checkpoint storage that cannot be written is refused before the job reads anything, naming
/// the field (it failed at the first checkpoint, with the input read and nothing committed).
#[test]
fn a_checkpoint_storage_that_cannot_be_written_is_refused_before_the_job_starts() {
    let dir = tempfile::tempdir().unwrap();
    let m = windowed_manifest(dir.path(), "dt", "type: tumbling, size: 1m");
    let file = dir.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let set = format!("spec.checkpointing.storage={}/checkpoints", file.display());
    let (code, err) = run(&m, &["--set", &set]);
    assert_eq!(code, Some(1), "{err}");
    let want = format!(
        "job.yaml: spec.checkpointing.storage: cannot write to {}/checkpoints: ",
        file.display()
    );
    assert!(err.contains(&want), "{err}");
    assert!(!err.contains("run summary"), "the job started: {err}");
}

/// 100,000,000 generator splits ran out of memory (each split is state in every checkpoint and
/// every batch visits them all); the schema bounds them by the largest maxParallelism.
#[test]
fn generator_splits_beyond_the_largest_max_parallelism_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let yaml = format!(
        r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: gen }}
spec:
  checkpointing: {{ interval: 0s, storage: "{dir}/checkpoints" }}
  job:
    steps:
      - source: {{ generator: {{ count: 10, splits: 100000000 }} }}
      - sink: {{ file: {{ path: "{dir}/output" }} }}
"#,
        dir = dir.path().display()
    );
    let m = dir.path().join("gen.yaml");
    std::fs::write(&m, yaml).unwrap();
    let (code, err) = run(&m, &[]);
    assert_eq!(code, Some(1), "{err}");
    assert!(
        err.contains("gen.yaml: spec.job.steps[0].source.generator.splits: must be at most 32768, got 100000000"),
        "{err}"
    );
    let (code, err) = run(&m, &["--set", "spec.job.steps[0].source.generator.splits=32768"]);
    assert_eq!(code, Some(0), "{err}");
    assert_eq!(local_output(&dir.path().join("output")).len(), 10);
}
