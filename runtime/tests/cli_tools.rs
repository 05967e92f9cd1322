//! `weir checkpoints list` (id, type, status, completion time, size, run and location, as a
//! table, JSON or YAML; a clear error when nothing matches), `weir list` (running jobs behind
//! control APIs, lineages in a checkpoint storage), `weir status|cancel`, the control API's
//! JSON error bodies, and `weir completion`.

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
        // A fresh run's checkpoints belong to the lineage it began: its run id.
        assert_eq!(r["lineageId"], run_id.as_str(), "{r}");
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
    // YAML holds the same rows as JSON; an unknown format is a usage error (exit 2).
    let out = weir_output(&["checkpoints", "list", storage, "--job", "listed", "-o", "yaml"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let yaml_rows: Vec<serde_json::Value> = serde_yaml::from_slice(&out.stdout).expect("a YAML sequence");
    assert_eq!(yaml_rows, rows);
    let out = weir_output(&["checkpoints", "list", storage, "--job", "listed", "-o", "xml"]);
    assert_eq!(out.status.code(), Some(2), "a usage error: {}", text(&out.stderr));

    // `weir list --storage`: the job's lineage, its newest completed snapshot the savepoint.
    let out = weir_output(&["list", "--storage", storage, "-o", "yaml"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let lineages: Vec<serde_json::Value> = serde_yaml::from_slice(&out.stdout).expect("a YAML sequence");
    assert_eq!(lineages.len(), 1, "{lineages:?}");
    assert_eq!(lineages[0]["job"], "listed");
    assert_eq!(lineages[0]["snapshots"], rows.len());
    assert_eq!(lineages[0]["latest"], rows[0]);
    let out = weir_output(&["list", "--storage", storage]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    let lines: Vec<&str> = table.lines().collect();
    assert!(lines[0].starts_with("JOB ") && lines.len() == 2, "{table}");
    assert!(
        lines[1].starts_with("listed ") && lines[1].ends_with(savepoint.as_str()),
        "{table}"
    );
    let empty = dir.path().join("empty");
    std::fs::create_dir_all(&empty).unwrap();
    // An empty list is a success, as with `kubectl get`: a message on stderr, nothing on
    // stdout (an empty array with -o json); a job's own directory is a mistake that is named.
    let out = weir_output(&["list", "--storage", empty.to_str().unwrap()]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout), "");
    assert!(
        text(&out.stderr).contains(&format!("No jobs found in {}", empty.display())),
        "{}",
        text(&out.stderr)
    );
    let out = weir_output(&["list", "--storage", empty.to_str().unwrap(), "-o", "json"]);
    assert_eq!(out.status.code(), Some(0), "{}", text(&out.stderr));
    assert_eq!(text(&out.stdout).trim(), "[]");
    let job_dir = format!("{storage}/listed");
    let out = weir_output(&["list", "--storage", &job_dir]);
    assert_eq!(out.status.code(), Some(1));
    assert!(
        text(&out.stderr).contains("is a job's directory"),
        "{}",
        text(&out.stderr)
    );
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

    // `weir list --url`: the running job, as a table and as YAML.
    let out = weir_output(&["list", "--url", &api]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let table = text(&out.stdout);
    let lines: Vec<&str> = table.lines().collect();
    assert_eq!(lines.len(), 2, "{table}");
    assert!(lines[0].starts_with("JOB ") && lines[0].ends_with(" URL"), "{table}");
    assert!(
        lines[1].starts_with("listed ") && lines[1].contains(" RUNNING ") && lines[1].ends_with(api.as_str()),
        "{table}"
    );
    let out = weir_output(&["list", "--url", &api, "-o", "yaml"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listed: Vec<serde_json::Value> = serde_yaml::from_slice(&out.stdout).expect("a YAML sequence");
    assert_eq!(listed[0]["job"], "listed", "{listed:?}");
    assert_eq!(listed[0]["runId"], job["jobId"], "{listed:?}");
    // A fresh run begins its own lineage: both columns name it.
    assert_eq!(listed[0]["lineageId"], job["jobId"], "{listed:?}");
    assert_eq!(job["lineageId"], job["jobId"], "{job}");
    assert_eq!(listed[0]["url"], api.as_str(), "{listed:?}");
    let out = weir_output(&["status", "--url", &api, "-o", "yaml"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let yaml: serde_json::Value = serde_yaml::from_slice(&out.stdout).expect("the /v1/job document as YAML");
    assert_eq!(yaml["jobName"], "listed", "{yaml}");
    // `savepoint trigger -o json`: the trigger's final status (`-o table` prints only the path).
    let out = weir_output(&["savepoint", "trigger", "--url", &api, "--timeout", "60s", "-o", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let trigger: serde_json::Value = serde_json::from_slice(&out.stdout).expect("the SavepointStatus document");
    assert_eq!(trigger["state"], "COMPLETED", "{trigger}");
    assert!(
        trigger["path"]
            .as_str()
            .is_some_and(|p| p.contains("savepoint-listed-")),
        "{trigger}"
    );
    let out = weir_output(&["list", "--url", &api, "--storage", "x"]);
    assert_eq!(
        out.status.code(),
        Some(2),
        "--url with --storage: {}",
        text(&out.stderr)
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
    assert!(
        stderr.contains("--restore file://") && stderr.contains("/checkpoints/listed/chk-"),
        "the hint names this run's checkpoint: {stderr}"
    );
    // Nothing answers any more: list, status and cancel fail alike (exit 1, nothing on
    // stdout), naming the URL and what to start.
    for (args, what) in [
        (
            ["status", "--url", &api],
            format!("cannot get the job's status from {api}: nothing answers"),
        ),
        (
            ["cancel", "--url", &api],
            format!("cannot reach the job's control API at {api}: nothing answers"),
        ),
        (
            ["list", "--url", &api],
            format!("no running job answered at {api}: nothing answers"),
        ),
    ] {
        let out = weir_output(&args);
        assert_eq!(out.status.code(), Some(1), "{args:?}");
        assert_eq!(text(&out.stdout), "", "{args:?}");
        let stderr = text(&out.stderr);
        assert!(stderr.contains(&what), "{args:?}: {stderr}");
        assert!(
            stderr.contains("start a job with `weir run FILE`"),
            "{args:?}: {stderr}"
        );
    }

    // A run resumed with `--restore latest` is a new run continuing the first run's lineage:
    // `weir list` names both, the lineage as `weir checkpoints list` does.
    let resumed = Weir::run(&dir.path().join("job.yaml"), &["--restore", "latest"], &[]);
    let api = resumed.api();
    wait_running(&api);
    let out = weir_output(&["list", "--url", &api, "-o", "json"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let listed: Vec<serde_json::Value> = serde_json::from_slice(&out.stdout).expect("a JSON array");
    assert_eq!(listed[0]["lineageId"], job["jobId"], "{listed:?}");
    assert_ne!(listed[0]["runId"], job["jobId"], "{listed:?}");
    let out = weir_output(&["list", "--url", &api]);
    let table = text(&out.stdout);
    let header: Vec<&str> = table.lines().next().unwrap().split_whitespace().collect();
    let row: Vec<&str> = table.lines().nth(1).unwrap().split_whitespace().collect();
    let column = |name: &str| row[header.iter().position(|h| *h == name).unwrap()];
    assert_eq!(column("RUN"), listed[0]["runId"].as_str().unwrap(), "{table}");
    assert_eq!(column("LINEAGE"), job["jobId"].as_str().unwrap(), "{table}");
    let out = weir_output(&["cancel", "--url", &api, "--timeout", "30s"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    resumed.wait_ok();
}

/// `curl` of `method path` on `api` with the test secret and `body` (JSON) when given:
/// (HTTP status, content type, body).
fn call(api: &str, method: &str, path: &str, body: Option<&str>) -> (u16, String, String) {
    let mut c = Command::new("curl");
    c.args(["-s", "-X", method, "-w", "\n%{http_code} %{content_type}"]);
    c.args(["-H", &format!("Authorization: Bearer {TEST_SECRET}")]);
    if let Some(b) = body {
        c.args(["-H", "content-type: application/json", "-d", b]);
    }
    let out = c.arg(format!("{api}{path}")).output().unwrap();
    let all = text(&out.stdout);
    let (body, tail) = all.rsplit_once('\n').unwrap();
    let (code, content_type) = tail.split_once(' ').unwrap_or((tail, ""));
    (code.parse().unwrap_or(0), content_type.to_string(), body.to_string())
}

#[test]
fn control_api_errors_are_json_error_bodies() {
    let dir = tempfile::tempdir().unwrap();
    let weir = Weir::run(&manifest(dir.path()), &[], &[]);
    let api = weir.api();
    wait_running(&api);
    for (method, path, body, code, mentions) in [
        ("GET", "/v1/nothing-here", None, 404, "/v1/nothing-here"),
        ("GET", "/v1/savepoints/0000000000000001", None, 404, "0000000000000001"),
        ("DELETE", "/v1/job", None, 405, "DELETE"),
        ("POST", "/v1/savepoints", Some("{not json"), 422, "SavepointRequest"),
        (
            "POST",
            "/v1/savepoints",
            Some(r#"{"stop": "yes"}"#),
            422,
            "invalid type",
        ),
        (
            "POST",
            "/v1/savepoints",
            Some(r#"{"directry": "/tmp/x"}"#),
            422,
            "directry",
        ),
    ] {
        let (got, content_type, answer) = call(&api, method, path, body);
        assert_eq!(got, code, "{method} {path} {body:?}: {answer}");
        assert!(
            content_type.starts_with("application/json"),
            "{method} {path}: {content_type}"
        );
        let error: serde_json::Value = serde_json::from_str(&answer).unwrap_or_else(|e| panic!("{answer}: {e}"));
        let message = error["error"]
            .as_str()
            .unwrap_or_else(|| panic!("no error field: {answer}"));
        assert!(message.contains(mentions), "{method} {path}: {message}");
    }
    // None of the refused requests touched the job: an empty body still triggers a savepoint.
    let (got, _, answer) = call(&api, "POST", "/v1/savepoints", None);
    assert_eq!(got, 202, "{answer}");
    let out = weir_output(&["cancel", "--url", &api, "--timeout", "30s"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    weir.wait_ok();
}
