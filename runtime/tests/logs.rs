//! Logs of the `weir` binary: `--log-format json` makes every stderr line a JSON object (the
//! `weir: …` messages included) while stdout keeps the data; piped logs carry no ANSI codes;
//! `RUST_LOG` takes precedence over `WEIR_LOG`, and an invalid one is refused by name.

mod common;
use common::*;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// A bounded generator job (100 records, keyed count) with checkpoints every 50 ms, writing to
/// `sink` (YAML of the sink step) under `dir`.
fn manifest(dir: &Path, file: &str, sink: &str) -> PathBuf {
    let yaml = format!(
        r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: gen }}
spec:
  parallelism: 1
  checkpointing: {{ interval: 50ms, storage: "{dir}/checkpoints" }}
  job:
    steps:
      - source: {{ generator: {{ seed: 1, count: 100 }} }}
      - keyBy: {{ expression: key }}
      - count: {{}}
      - sink: {{ {sink} }}
"#,
        dir = dir.display()
    );
    let path = dir.join(file);
    std::fs::write(&path, yaml).unwrap();
    path
}

fn file_sink_manifest(dir: &Path) -> PathBuf {
    let sink = format!(r#"file: {{ path: "{}/output" }}"#, dir.display());
    manifest(dir, "job.yaml", &sink)
}

/// Runs `weir ARGS` with stdout and stderr piped, `WEIR_LOG` and `RUST_LOG` as given (unset
/// when `None`).
fn weir_logged(args: &[&str], weir_log: Option<&str>, rust_log: Option<&str>) -> Output {
    let mut cmd = Command::new(weir());
    cmd.args(args)
        .env_remove("WEIR_LOG")
        .env_remove("RUST_LOG")
        .env_remove("WEIR_LOG_FORMAT")
        .env_remove("NO_COLOR")
        .env(SECRET_ENV, secret_file())
        .stdin(Stdio::null());
    if let Some(v) = weir_log {
        cmd.env("WEIR_LOG", v);
    }
    if let Some(v) = rust_log {
        cmd.env("RUST_LOG", v);
    }
    cmd.output().expect("run weir")
}

fn run_args(manifest: &Path) -> Vec<String> {
    vec![
        "run".into(),
        manifest.display().to_string(),
        "--listen".into(),
        "127.0.0.1:0".into(),
    ]
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// Every non-empty line of `stderr` parsed as a JSON object; panics naming the first line that
/// is not one.
fn json_lines(stderr: &str) -> Vec<serde_json::Map<String, serde_json::Value>> {
    stderr
        .lines()
        .filter(|l| !l.trim().is_empty())
        .map(|l| match serde_json::from_str::<serde_json::Value>(l) {
            Ok(serde_json::Value::Object(o)) => o,
            other => panic!("not a JSON object ({other:?}): {l:?}\nstderr:\n{stderr}"),
        })
        .collect()
}

fn messages(lines: &[serde_json::Map<String, serde_json::Value>], level: &str) -> Vec<String> {
    lines
        .iter()
        .filter(|o| o.get("level").and_then(|l| l.as_str()) == Some(level))
        .filter_map(|o| o.get("message")?.as_str().map(str::to_string))
        .collect()
}

#[test]
fn json_log_format_makes_every_stderr_line_json() {
    let dir = tempfile::tempdir().unwrap();
    let job = file_sink_manifest(dir.path());
    let mut args = vec!["--log-format".to_string(), "json".to_string()];
    args.extend(run_args(&job));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = weir_logged(&args, Some("info"), None);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let lines = json_lines(&stderr);
    let info = messages(&lines, "INFO");
    // The messages once printed as plain `weir: …` lines are JSON events now, once each.
    for expected in [
        "control API on http://127.0.0.1:",
        "job gen finished",
        "committed output in ",
    ] {
        let found = info.iter().filter(|m| m.contains(expected)).count();
        assert_eq!(found, 1, "one INFO event containing {expected:?}: {stderr}");
    }
    assert!(
        info.iter().any(|m| m == "checkpoint completed"),
        "tracing events too: {stderr}"
    );

    // An error is a JSON line too, at ERROR.
    let missing = dir.path().join("missing.yaml");
    let out = weir_logged(
        &["--log-format", "json", "run", missing.to_str().unwrap()],
        Some("info"),
        None,
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    let errors = messages(&json_lines(&stderr), "ERROR");
    assert!(
        errors.len() == 1 && errors[0].contains("missing.yaml"),
        "one ERROR event naming the file: {stderr}"
    );
}

/// The print sink's records stay on stdout as plain JSON lines; the logs (stderr) are JSON
/// events. Neither stream carries the other's lines.
#[test]
fn json_logs_leave_the_print_sinks_stdout_data_alone() {
    let dir = tempfile::tempdir().unwrap();
    let job = manifest(dir.path(), "print.yaml", "print: {}");
    let mut args = vec!["--log-format".to_string(), "json".to_string()];
    args.extend(run_args(&job));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = weir_logged(&args, Some("info"), None);
    let (stdout, stderr) = (text(&out.stdout), text(&out.stderr));
    assert!(out.status.success(), "{stderr}");
    let records = json_lines(&stdout);
    assert_eq!(records.len(), 100, "one line per record on stdout:\n{stdout}");
    assert!(
        records
            .iter()
            .all(|r| r.contains_key("key") && !r.contains_key("level")),
        "stdout holds records, no log events:\n{stdout}"
    );
    let logs = json_lines(&stderr);
    assert!(
        !logs.is_empty() && logs.iter().all(|o| o.contains_key("level") && !o.contains_key("key")),
        "stderr holds log events, no records:\n{stderr}"
    );
}

#[test]
fn piped_text_logs_have_no_ansi_codes() {
    let dir = tempfile::tempdir().unwrap();
    let job = file_sink_manifest(dir.path());
    let args = run_args(&job);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = weir_logged(&args, Some("info"), None);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    assert!(stderr.contains(" INFO weir: job gen finished"), "{stderr}");
    assert!(!stderr.contains("\x1b["), "no ANSI escape codes in a pipe: {stderr:?}");
}

/// `RUST_LOG` wins over `WEIR_LOG` both ways: `warn` hides the info lines `WEIR_LOG=info`
/// would show (errors still show), and `info` shows what `WEIR_LOG=warn` would hide.
#[test]
fn rust_log_takes_precedence_over_weir_log() {
    let dir = tempfile::tempdir().unwrap();
    let job = file_sink_manifest(dir.path());
    let args = run_args(&job);
    let args: Vec<&str> = args.iter().map(String::as_str).collect();

    let quiet = weir_logged(&args, Some("info"), Some("warn"));
    let stderr = text(&quiet.stderr);
    assert!(quiet.status.success(), "{stderr}");
    assert!(
        !stderr.contains(" INFO "),
        "RUST_LOG=warn suppresses info lines: {stderr}"
    );
    let committed = std::fs::read_dir(dir.path().join("output")).unwrap().count();
    assert!(committed > 0, "the job still ran and committed its output");

    let loud = weir_logged(&args, Some("warn"), Some("info"));
    let stderr = text(&loud.stderr);
    assert!(loud.status.success(), "{stderr}");
    assert!(stderr.contains(" INFO weir: job gen finished"), "{stderr}");

    let missing = dir.path().join("missing.yaml");
    let failed = weir_logged(&["run", missing.to_str().unwrap()], Some("info"), Some("warn"));
    let stderr = text(&failed.stderr);
    assert_eq!(failed.status.code(), Some(1), "{stderr}");
    assert!(
        stderr.contains(" ERROR weir: ") && stderr.contains("missing.yaml") && !stderr.contains(" INFO "),
        "errors still show under RUST_LOG=warn: {stderr}"
    );
}

#[test]
fn an_invalid_rust_log_is_refused_by_name() {
    let out = weir_logged(
        &["checkpoints", "list", "/nowhere", "--job", "gen"],
        None,
        Some("info,weir=loud"),
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    assert!(
        stderr.contains("invalid log filter \"info,weir=loud\" (RUST_LOG)"),
        "{stderr}"
    );
    let out = weir_logged(
        &[
            "--log-format",
            "json",
            "checkpoints",
            "list",
            "/nowhere",
            "--job",
            "gen",
        ],
        None,
        Some("info,weir=loud"),
    );
    let stderr = text(&out.stderr);
    assert_eq!(out.status.code(), Some(2), "{stderr}");
    let lines = json_lines(&stderr);
    assert!(
        lines.len() == 1 && messages(&lines, "ERROR")[0].contains("(RUST_LOG)"),
        "{stderr}"
    );
}

/// The run ends with one summary event: records per task, checkpoints, and the committed
/// output (directory and run id) that is really there; its fields carry the same numbers.
#[test]
fn a_run_ends_with_a_summary_naming_records_checkpoints_and_output() {
    let dir = tempfile::tempdir().unwrap();
    let job = file_sink_manifest(dir.path());
    let mut args = vec!["--log-format".to_string(), "json".to_string()];
    args.extend(run_args(&job));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let out = weir_logged(&args, Some("info"), None);
    let stderr = text(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    let lines = json_lines(&stderr);
    let summaries: Vec<_> = lines
        .iter()
        .filter(|o| o["message"].as_str().is_some_and(|m| m.starts_with("run summary: ")))
        .collect();
    assert_eq!(summaries.len(), 1, "{stderr}");
    let summary = summaries[0];
    assert_eq!(summary["target"], "weir", "{stderr}");
    let message = summary["message"].as_str().unwrap();
    let completed = summary["checkpoints_completed"].as_u64().expect("a number");
    assert!(completed >= 1, "the final checkpoint at least: {message}");
    assert!(
        message.contains(&format!("checkpoints: {completed} completed, 0 failed")),
        "{message}"
    );
    // The generator's 100 records pass the source task and reach the count's task; a chain
    // ending in a sink emits nothing downstream.
    assert!(
        message.contains("; records in/out: source-generator-0 -> keyBy-1 100/100, count-2 -> sink-file-3 100/0; "),
        "{message}"
    );
    let run_id = summary["run_id"].as_str().expect("run id");
    let output = dir.path().join("output");
    assert!(
        message.ends_with(&format!(
            "committed output in {} (files part-{run_id}-*.jsonl)",
            output.display()
        )),
        "{message}"
    );
    let parts: Vec<String> = std::fs::read_dir(&output)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    assert!(
        !parts.is_empty() && parts.iter().all(|p| p.starts_with(&format!("part-{run_id}-"))),
        "{parts:?}"
    );
    // The last line of the run is the summary.
    let last = lines.last().unwrap()["message"].as_str().unwrap();
    assert!(last.starts_with("run summary: "), "{stderr}");
}
