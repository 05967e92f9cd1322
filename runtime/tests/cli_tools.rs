//! `weir checkpoints list` (id, type, status, completion time, size, run and location, as a
//! table or JSON; a clear error when nothing matches) and `weir completion`.

mod common;
use common::*;
use std::path::Path;
use std::process::{Command, Output};
use std::time::Duration;

fn weir_output(args: &[&str]) -> Output {
    Command::new(weir())
        .args(args)
        .env("WEIR_LOG", TEST_LOG_FILTER)
        .env(SECRET_ENV, secret_file())
        .output()
        .expect("run weir")
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

/// A rate-limited generator job (about 5 s of input) with checkpoints every 100 ms and
/// savepoints under `dir/savepoints`.
fn manifest(dir: &Path) -> std::path::PathBuf {
    let yaml = format!(
        r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: listed }}
spec:
  parallelism: 1
  checkpointing: {{ interval: 100ms, storage: "{d}/checkpoints" }}
  savepoints: {{ directory: "{d}/savepoints" }}
  job:
    steps:
      - source: {{ generator: {{ seed: 5, count: 100000, keys: 20, maxRecordsPerSecond: 20000 }} }}
      - keyBy: {{ expression: key }}
      - count: {{}}
      - sink: {{ discard: {{}} }}
"#,
        d = dir.display()
    );
    let path = dir.join("job.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

#[test]
fn checkpoints_list_shows_checkpoints_and_savepoints_as_table_and_json() {
    let dir = tempfile::tempdir().unwrap();
    let weir = Weir::run(&manifest(dir.path()), &[], &[]);
    let api = weir.api();
    let run_id = poll_json(
        &format!("{api}/v1/job"),
        "a checkpoint completes",
        Duration::from_secs(60),
        |job| {
            job["lastCompletedCheckpoint"]["id"].as_u64()?;
            job["jobId"].as_str().map(str::to_string)
        },
    );
    let savepoint = stop_with_savepoint(&api, &[]);
    weir.wait_ok();
    let storage = dir.path().join("checkpoints");
    let storage = storage.to_str().unwrap();

    let out = weir_output(&["checkpoints", "list", storage, "--job", "listed", "-o", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let rows: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("a JSON array");
    assert!(rows.len() >= 2, "a checkpoint and the savepoint: {rows:?}");
    // Newest first: the stop-with-savepoint is the newest snapshot.
    let newest = &rows[0];
    assert_eq!(newest["type"], "savepoint", "{newest}");
    assert_eq!(newest["location"], savepoint.as_str(), "{newest}");
    let ids: Vec<u64> = rows.iter().map(|r| r["id"].as_u64().unwrap()).collect();
    assert!(ids.windows(2).all(|w| w[0] > w[1]), "newest first: {ids:?}");
    for r in rows.iter().filter(|r| r["completed"] == true) {
        assert_eq!(r["runId"], run_id.as_str(), "{r}");
        assert!(r["sizeBytes"].as_u64().unwrap() > 0, "{r}");
        let at = r["completedAt"].as_str().expect("a completion time");
        humantime::parse_rfc3339(at).unwrap_or_else(|e| panic!("{at}: {e}"));
    }
    let checkpoint = rows
        .iter()
        .find(|r| r["type"] == "checkpoint" && r["completed"] == true)
        .expect("a completed checkpoint");
    assert!(
        checkpoint["location"]
            .as_str()
            .unwrap()
            .ends_with(&format!("/listed/chk-{}", checkpoint["id"])),
        "{checkpoint}"
    );

    let out = weir_output(&["checkpoints", "list", storage, "--job", "listed"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(
        lines.len(),
        rows.len() + 1,
        "a header and one line per snapshot: {table}"
    );
    assert!(
        lines[0].starts_with("ID ") && lines[0].ends_with(" LOCATION"),
        "{table}"
    );
    let first: Vec<&str> = lines[1].split_whitespace().collect();
    assert_eq!(
        first[..3],
        [newest["id"].to_string().as_str(), "savepoint", "completed"],
        "{table}"
    );
    assert_eq!(first.last(), Some(&savepoint.as_str()), "{table}");
    assert!(lines[1].contains(&run_id), "{table}");

    // Nothing matches: a message naming what is wrong, exit 1, nothing on stdout (JSON too).
    let out = weir_output(&["checkpoints", "list", storage, "--job", "other", "-o", "json"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(text(&out.stdout), "");
    assert!(
        text(&out.stderr).contains("holds no checkpoints of job `other`"),
        "{}",
        text(&out.stderr)
    );
    let out = weir_output(&["checkpoints", "list", storage, "--job", "listed", "-o", "yaml"]);
    assert_eq!(out.status.code(), Some(2), "a usage error: {}", text(&out.stderr));
}

#[test]
fn completion_scripts_cover_the_subcommands() {
    for (shell, marker) in [
        ("bash", "_weir()"),
        ("zsh", "#compdef weir"),
        ("fish", "complete -c weir"),
    ] {
        let out = weir_output(&["completion", shell]);
        assert!(out.status.success(), "{shell}: {}", text(&out.stderr));
        let script = text(&out.stdout);
        assert!(script.contains(marker), "{shell}: {script}");
        for sub in ["run", "savepoint", "checkpoints", "completion"] {
            assert!(script.contains(sub), "{shell} completes {sub}");
        }
    }
    let out = weir_output(&["completion", "tcsh"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("tcsh"), "{}", text(&out.stderr));
}

#[test]
fn status_and_cancel_work_against_a_running_job() {
    let dir = tempfile::tempdir().unwrap();
    let weir = Weir::run(&manifest(dir.path()), &[], &[]);
    let api = weir.api();
    // Running, with a checkpoint to resume from after the cancel.
    poll_json(
        &format!("{api}/v1/job"),
        "a checkpoint completes",
        Duration::from_secs(60),
        |job| job["lastCompletedCheckpoint"]["id"].as_u64(),
    );

    // Another job's secret is refused (issue 15): status names the refusal.
    let wrong = dir.path().join("other.secret");
    std::fs::write(&wrong, "another-jobs-secret-0123456789abcdef\n").unwrap();
    let out = weir_output(&["status", "--url", &api, "--secret-file", wrong.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    assert!(text(&out.stderr).contains("401"), "{}", text(&out.stderr));

    let out = weir_output(&["status", "--url", &api, "-o", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let job: serde_json::Value = serde_json::from_slice(&out.stdout).expect("the /v1/job document");
    assert_eq!(job["jobName"], "listed", "{job}");
    let out = weir_output(&["status", "--url", &api]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    assert!(
        table.starts_with("job          listed (") && table.contains("\nstate        RUNNING\n"),
        "{table}"
    );
    assert!(
        table.contains("\ntask         source-generator-0 -> keyBy-1 in "),
        "{table}"
    );

    let out = weir_output(&["cancel", "--url", &api, "--timeout", "30s"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(
        text(&out.stderr).contains("job listed cancelled without a savepoint"),
        "{}",
        text(&out.stderr)
    );
    // The job stopped as on SIGTERM: exit 0, the resume hint, nothing more to cancel.
    let stderr = weir.wait_ok();
    assert!(stderr.contains("job listed suspended"), "{stderr}");
    assert!(stderr.contains("--restore latest"), "{stderr}");
    let out = weir_output(&["status", "--url", &api]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains(&format!("cannot get the job's status from {api}")),
        "{}",
        text(&out.stderr)
    );
    let out = weir_output(&["cancel", "--url", &api]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("cannot reach the job's control API"),
        "{}",
        text(&out.stderr)
    );
}
