//! Mistakes a user makes that the job finds only once it runs, through the `weir` binary: each
//! fails with one message that leads with the cause (not a symptom in another subtask), names
//! the manifest field, the file and record where known, and says what to do. Also the flags
//! and environments that used to hang or warn (`--parallelism 2000`, S3 without `AWS_REGION`).

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

/// `weir run` of a job reading `input` (`format` json lines or csv; `source_extra` added to
/// the source step, e.g. its `eventTime`) at parallelism `p`, keyed by `repo` into `agg`,
/// written to `dir/out`.
fn manifest(dir: &Path, input: &Path, format: &str, source_extra: &str, p: u32, agg: &str) -> PathBuf {
    let yaml = format!(
        r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: et }}
spec:
  parallelism: {p}
  checkpointing: {{ interval: 0s, storage: "{dir}/checkpoints" }}
  job:
    steps:
      - uid: events
        source:
          file: {{ path: "{input}", format: {format} }}{source_extra}
      - keyBy: {{ expression: repo, as: repo }}
      - uid: sm
        {agg}
      - sink: {{ file: {{ path: "{dir}/out" }} }}
"#,
        dir = dir.display(),
        input = input.display(),
    );
    let f = dir.join("job.yaml");
    std::fs::write(&f, yaml).unwrap();
    f
}

/// Runs `weir ARGS` with `env` (an empty value removes the variable): (exit code, stderr).
fn weir_run(args: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let mut cmd = Command::new(weir());
    cmd.args(args)
        .env("WEIR_LOG", "warn,weir=info")
        .env(SECRET_ENV, secret_file())
        .stdin(Stdio::null());
    for (k, v) in env {
        match v.is_empty() {
            true => cmd.env_remove(k),
            false => cmd.env(k, v),
        };
    }
    let out = cmd.output().expect("run weir");
    (out.status.code(), String::from_utf8_lossy(&out.stderr).into_owned())
}

fn run(manifest: &Path, extra: &[&str], env: &[(&str, &str)]) -> (Option<i32>, String) {
    let m = manifest.display().to_string();
    let mut args = vec!["run", m.as_str(), "--listen", "127.0.0.1:0"];
    args.extend(extra);
    weir_run(&args, env)
}

/// The line of `stderr` that says why the job failed.
fn failure_line(stderr: &str) -> &str {
    stderr
        .lines()
        .find(|l| l.contains("failed:") && l.contains("job et failed"))
        .unwrap_or_else(|| panic!("no `job et failed` line in:\n{stderr}"))
}

/// JSON lines of `n` events, one per second from 2015-02-22T21:00:00Z in `dt` (or the
/// value `bad(i)` gives for line i), with `repo` and `added`.
fn events_jsonl(path: &Path, n: usize, bad: impl Fn(usize) -> Option<serde_json::Value>) {
    let mut text = String::new();
    for i in 0..n {
        let dt = bad(i).unwrap_or_else(|| format!("2015-02-22T21:{:02}:{:02}Z", i / 60 % 60, i % 60).into());
        text.push_str(&serde_json::json!({"dt": dt, "repo": format!("r{}", i % 7), "added": i}).to_string());
        text.push('\n');
    }
    std::fs::write(path, text).unwrap();
}

/// A source whose record 2,501 has no event time fails; the downstream subtasks whose input
/// closed report first (the source's report is delayed by a failpoint, as load can delay it),
/// yet `weir run` names the source's error: the field path, the file and the byte offset of
/// the record, and what to do. Three runs, each must name the cause.
#[test]
fn weir_run_names_the_source_failure_not_the_closed_inputs_it_caused() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("events.jsonl");
    events_jsonl(&input, 3000, |i| (i == 2500).then(|| "push".into()));
    let offset = std::fs::read_to_string(&input)
        .unwrap()
        .lines()
        .take(2500)
        .map(|l| l.len() + 1)
        .sum::<usize>();
    let m = manifest(
        dir.path(),
        &input,
        "jsonl",
        "\n          eventTime: { field: dt }",
        2,
        "sum: { expression: added }",
    );
    for attempt in 0..3 {
        let _ = std::fs::remove_dir_all(dir.path().join("checkpoints"));
        let (code, stderr) = run(&m, &[], &[("WEIR_FAILPOINT", "slow-failure-report")]);
        assert_eq!(code, Some(1), "attempt {attempt}: {stderr}");
        let line = failure_line(&stderr);
        let want = format!(
            "failed: operator events: spec.job.steps[0].source.eventTime.field: `dt` of the record at byte offset \
             {offset} of {} is not an event time: `push` is not an ISO-8601 timestamp",
            input.display()
        );
        assert!(line.contains(&want), "attempt {attempt}: want `{want}` in `{line}`");
        assert!(line.contains("correct or drop that record"), "{line}");
        assert!(!line.contains("closed without end-of-stream"), "{line}");
    }
}

/// A generator's event time that is none (its `key` strings, `key-<k>`) names the record by
/// its sequence number (its `id`, which replays it) and split, as a file source names the byte
/// offset; before, the error said only `of a record`.
#[test]
fn a_generated_event_time_that_is_none_names_the_records_sequence_number() {
    let dir = tempfile::tempdir().unwrap();
    let m = dir.path().join("job.yaml");
    std::fs::write(
        &m,
        format!(
            r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: et }}
spec:
  parallelism: 1
  checkpointing: {{ interval: 0s, storage: "{dir}/checkpoints" }}
  job:
    steps:
      - uid: gen
        source:
          generator: {{ seed: 3, count: 1000, keys: 10, splits: 8 }}
          eventTime: {{ field: key }}
      - sink: {{ discard: {{}} }}
"#,
            dir = dir.path().display()
        ),
    )
    .unwrap();
    let (code, stderr) = run(&m, &[], &[]);
    assert_eq!(code, Some(1), "{stderr}");
    let line = failure_line(&stderr);
    // At parallelism 1 the first batch is split 0's: records 0, 8, 16, ...
    let want = "failed: operator gen: spec.job.steps[0].source.eventTime.field: `key` of the record with sequence \
                number 0 (its id; split 0 of 8) is not an event time:";
    assert!(line.contains(want), "want `{want}` in `{line}`");
}

/// In CSV (whose event times the plan does not sample) a value that is no timestamp names the
/// field path and the record's byte offset in its file.
#[test]
fn a_csv_event_time_that_is_no_timestamp_names_the_field_and_record() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("events.csv");
    let mut text = String::from("dt,repo,added\n");
    let mut offset = 0;
    for i in 0..200 {
        if i == 150 {
            offset = text.len();
            text.push_str("yesterday,r1,1\n");
        } else {
            text.push_str(&format!("2015-02-22 21:00:{:02},r{},{i}\n", i % 60, i % 3));
        }
    }
    std::fs::write(&input, text).unwrap();
    let m = manifest(
        dir.path(),
        &input,
        "csv",
        "\n          eventTime: { field: dt }",
        1,
        "count: {}",
    );
    let (code, stderr) = run(&m, &[], &[]);
    assert_eq!(code, Some(1), "{stderr}");
    let want = format!(
        "operator events: spec.job.steps[0].source.eventTime.field: `dt` of the record at byte offset {offset} of {} \
         is not an event time: `yesterday` is not an ISO-8601 timestamp",
        input.display()
    );
    assert!(failure_line(&stderr).contains(&want), "want `{want}` in:\n{stderr}");
}

/// The manifest of hourly tumbling windows over the JSON-lines `input` with the source's
/// `eventTime` set to `event_time` (a YAML flow mapping), at p=1.
fn hourly_windows(dir: &Path, input: &Path, event_time: &str) -> PathBuf {
    let window = "window: { type: tumbling, size: 1h, as: events }";
    manifest(
        dir,
        input,
        "jsonl",
        &format!("\n          eventTime: {event_time}"),
        1,
        window,
    )
}

/// Integer event times in epoch seconds are refused before the job starts (they would be
/// read as milliseconds in January 1970), naming the field and `unit: seconds`; with
/// `unit: seconds` the same file gives hourly windows of 2015.
#[test]
fn epoch_seconds_need_their_unit_declared() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("events.jsonl");
    let start: i64 = 1_424_638_800; // 2015-02-22T21:00:00Z
    events_jsonl(&input, 7200, |i| Some((start + i as i64).into()));
    let m = hourly_windows(dir.path(), &input, "{ field: dt }");
    let (code, stderr) = run(&m, &[], &[]);
    assert_eq!(code, Some(1), "{stderr}");
    let want = format!(
        "spec.job.steps[0].source.eventTime.field: `dt` of record 1 of {}: 1424638800 looks like epoch seconds \
         (2015-02-22T21:00:00.000Z), but an integer event time is epoch milliseconds (as in Flink), where it \
         would be 1970-01-17T11:43:58.800Z: set `unit: seconds`",
        input.display()
    );
    assert!(stderr.contains(&want), "want `{want}` in:\n{stderr}");
    assert!(
        !dir.path().join("checkpoints").exists(),
        "refused before the job started"
    );

    let m = hourly_windows(dir.path(), &input, "{ field: dt, unit: seconds }");
    let (code, stderr) = run(&m, &[], &[]);
    assert_eq!(code, Some(0), "{stderr}");
    let mut windows: Vec<(i64, String)> = local_output(&dir.path().join("out"))
        .iter()
        .map(|l| serde_json::from_str::<serde_json::Value>(l).unwrap())
        .map(|v| {
            (
                v["window_start"].as_i64().unwrap(),
                v["repo"].as_str().unwrap().to_string(),
            )
        })
        .collect();
    windows.sort();
    windows.dedup();
    let starts: std::collections::BTreeSet<i64> = windows.iter().map(|w| w.0).collect();
    assert_eq!(
        starts.into_iter().collect::<Vec<_>>(),
        vec![start * 1000, (start + 3600) * 1000],
        "two hourly windows of 2015"
    );
}

/// Without `unit`, the first integer event time decides: a stream starting at small
/// milliseconds (a generator's `id`, a test clock) that reaches epoch seconds' range later,
/// both within the lines sampled before the start and past them, runs, and its windows are
/// the milliseconds' windows.
#[test]
fn a_first_event_time_in_milliseconds_settles_the_unit_for_later_values() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("events.jsonl");
    // Records 0..50 at t = i ms, 50..400 at 1,500,000,000 + i ms (in epoch seconds' range).
    events_jsonl(&input, 400, |i| {
        Some(if i < 50 { i as i64 } else { 1_500_000_000 + i as i64 }.into())
    });
    let m = hourly_windows(dir.path(), &input, "{ field: dt }");
    let (code, stderr) = run(&m, &[], &[]);
    assert_eq!(code, Some(0), "{stderr}");
    let starts: std::collections::BTreeSet<i64> = local_output(&dir.path().join("out"))
        .iter()
        .map(|l| {
            serde_json::from_str::<serde_json::Value>(l).unwrap()["window_start"]
                .as_i64()
                .unwrap()
        })
        .collect();
    let hour = 3_600_000;
    assert_eq!(
        starts.into_iter().collect::<Vec<_>>(),
        vec![0, 1_500_000_000 / hour * hour],
        "the first hour of 1970 and the hour holding 1,500,000,000 ms"
    );
}

/// A `sum` whose expression overflows a double, or whose running value does, fails with one
/// `operator sm:` prefix, the step's field path and "overflowed to infinity", never "null".
#[test]
fn a_sum_that_overflows_says_so_once_naming_the_step() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("events.jsonl");
    events_jsonl(&input, 50, |_| None);
    for (agg, want) in [
        (
            r#"sum: { expression: "double(added) * 1e308" }"#,
            "failed: operator sm: spec.job.steps[2].sum.expression: `double(added) * 1e308` overflowed to infinity \
             (a double holds at most ±1.8e308), on the record {",
        ),
        (
            r#"sum: { expression: "1.0e308" }"#,
            "failed: operator sm: spec.job.steps[2].sum: a running value overflowed to infinity",
        ),
    ] {
        let m = manifest(dir.path(), &input, "jsonl", "", 1, agg);
        let (code, stderr) = run(&m, &[], &[]);
        assert_eq!(code, Some(1), "{agg}: {stderr}");
        let line = failure_line(&stderr);
        assert!(line.contains(want), "{agg}: want `{want}` in `{line}`");
        assert!(!line.contains("null"), "{line}");
        assert_eq!(line.matches("operator sm:").count(), 1, "{line}");
    }
}

/// `--parallelism` above what `weir run` holds, or above the job's maxParallelism, is refused
/// at once naming the flag.
#[test]
fn a_parallelism_weir_run_cannot_hold_is_refused_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("events.jsonl");
    events_jsonl(&input, 10, |_| None);
    let m = manifest(dir.path(), &input, "jsonl", "", 1, "count: {}");
    let started = std::time::Instant::now();
    let (code, stderr) = run(&m, &["--parallelism", "2000"], &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("job.yaml: --parallelism 2000 is above 256, the most `weir run` runs"),
        "{stderr}"
    );
    assert!(
        started.elapsed() < std::time::Duration::from_secs(60),
        "refused, not started"
    );

    let text = std::fs::read_to_string(&m).unwrap();
    std::fs::write(
        &m,
        text.replace("  parallelism: 1\n", "  parallelism: 1\n  maxParallelism: 128\n"),
    )
    .unwrap();
    let (code, stderr) = run(&m, &["--parallelism", "200"], &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains(
            "job.yaml: --parallelism 200 (spec.parallelism): must be between 1 and maxParallelism (128), got 200"
        ),
        "{stderr}"
    );
}

/// The same check wherever a parallelism enters: `--set spec.parallelism` on `weir run`, and
/// `--parallelism` or `--set` on `weir coordinator` above the job's maxParallelism, are refused
/// at once naming what set it (the coordinator would otherwise wait for the slots).
#[test]
fn a_parallelism_from_set_or_the_coordinator_is_refused_naming_what_set_it() {
    let dir = tempfile::tempdir().unwrap();
    let input = dir.path().join("events.jsonl");
    events_jsonl(&input, 10, |_| None);
    let m = manifest(dir.path(), &input, "jsonl", "", 1, "count: {}");
    let (code, stderr) = run(&m, &["--set", "spec.parallelism=2000"], &[]);
    assert_eq!(code, Some(1), "{stderr}");
    assert!(
        stderr.contains("job.yaml: --set spec.parallelism=2000 is above 256, the most `weir run` runs"),
        "{stderr}"
    );

    let text = std::fs::read_to_string(&m).unwrap();
    std::fs::write(
        &m,
        text.replace(
            "  parallelism: 1
",
            "  parallelism: 1
  maxParallelism: 128
",
        ),
    )
    .unwrap();
    let job = m.display().to_string();
    let coordinator = [
        "coordinator",
        "--job",
        &job,
        "--listen",
        "127.0.0.1:0",
        "--rpc-listen",
        "127.0.0.1:0",
    ];
    for (extra, want) in [
        (
            ["--parallelism", "200"],
            "job.yaml: --parallelism 200 (spec.parallelism): must be between 1 and maxParallelism (128), got 200",
        ),
        (
            ["--set", "spec.parallelism=300"],
            "job.yaml: --set spec.parallelism=300 (spec.parallelism): must be between 1 and maxParallelism (128), got 300",
        ),
    ] {
        let args: Vec<&str> = coordinator.iter().chain(&extra).copied().collect();
        let (code, stderr) = weir_run(&args, &[]);
        assert_eq!(code, Some(1), "{stderr}");
        assert!(stderr.contains(want), "want `{want}` in {stderr}");
    }
}

/// `weir checkpoints list s3://…` without `AWS_REGION` uses us-east-1 without asking the
/// instance metadata service: no IMDS warnings (the endpoint here refuses connections, so the
/// command fails with the S3 error alone).
#[test]
fn s3_commands_without_a_region_do_not_warn_about_imds() {
    let home = tempfile::tempdir().unwrap(); // no ~/.aws/config naming a region
    let home = home.path().display().to_string();
    let (code, stderr) = weir_run(
        &["checkpoints", "list", "s3://bucket/checkpoints", "--job", "wc"],
        &[
            ("AWS_ENDPOINT_URL", "http://127.0.0.1:1"),
            ("AWS_ACCESS_KEY_ID", "test"),
            ("AWS_SECRET_ACCESS_KEY", "test"),
            ("AWS_REGION", ""),
            ("AWS_DEFAULT_REGION", ""),
            ("AWS_CONFIG_FILE", ""),
            ("AWS_PROFILE", ""),
            ("HOME", home.as_str()),
        ],
    );
    assert_eq!(code, Some(1), "{stderr}");
    assert!(!stderr.contains("IMDS") && !stderr.contains("WARN"), "{stderr}");
    assert!(stderr.contains("S3 ListObjectsV2 failed"), "{stderr}");
}

/// A restore whose `keyBy` selector or aggregated expression changed would go on with stored
/// values of another meaning; it is refused before the job runs, naming the field, the two
/// selectors and the way out, which works: a new `uid` with `allowNonRestoredState` starts
/// the step empty. A change of spacing only restores.
#[test]
fn a_restore_under_another_key_selector_is_refused_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::local(dir.path());
    let m = wordcount_manifest(dir.path(), &paths, 1, "exactly-once", "100ms", None, None);
    let (code, stderr) = run(&m, &[], &[]);
    assert_eq!(code, Some(0), "{stderr}");
    let restore = |extra: &[&str]| {
        let mut args = vec!["--restore", "latest"];
        args.extend(extra);
        run(&m, &args, &[])
    };
    let (code, stderr) = restore(&["--set", "spec.job.steps.3.keyBy.expression=word + '!'"]);
    assert_ne!(code, Some(0), "refused: {stderr}");
    assert!(
        stderr.contains("spec.job.steps[3].keyBy.expression: the restore point's values are keyed by `word`, this job keys by `word + '!'`")
            && stderr.contains("give the aggregation a new uid (spec.job.steps[4].uid)"),
        "{stderr}"
    );
    let (code, stderr) = restore(&["--set", "spec.job.steps.3.keyBy.expression= word "]);
    assert_eq!(code, Some(0), "spacing only: {stderr}");
    let (code, stderr) = restore(&[
        "--set",
        "spec.job.steps.3.keyBy.expression=word + '!'",
        "--set",
        "spec.job.steps.4.uid=counts-by-marked-word",
        "--set",
        "spec.allowNonRestoredState=true",
    ]);
    assert_eq!(code, Some(0), "the way out starts the step empty: {stderr}");
}
