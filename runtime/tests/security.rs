//! Issue 15 with real processes on 127.0.0.1: the control API requires the job secret as a
//! bearer token, workers authenticate with it (HMAC challenge-response) to the coordinator and
//! to each other, refusals are counted and logged once per peer and never disturb the job, and
//! no secret (job secret, S3 keys) appears in any output.

mod common;
mod support;

use common::cluster::*;
use common::*;
use std::process::Command;
use std::time::Duration;

/// `curl` of `url` with `token` as the bearer token (none when `None`), `post` sending an
/// empty JSON body: (HTTP status, body).
fn http(url: &str, token: Option<&str>, post: bool) -> (u16, String) {
    let mut c = Command::new("curl");
    c.args(["-s", "-w", "\n%{http_code}"]);
    if let Some(t) = token {
        c.args(["-H", &format!("Authorization: Bearer {t}")]);
    }
    if post {
        c.args(["-X", "POST", "-H", "content-type: application/json", "-d", "{}"]);
    }
    let out = c.arg(url).output().unwrap();
    let text = String::from_utf8(out.stdout).unwrap();
    let (body, code) = text.rsplit_once('\n').unwrap();
    (code.parse().unwrap_or(0), body.to_string())
}

/// The value of the metric line starting with `series` (`name{labels}`), if present.
/// The value of the series `name{label="v",...}` in an OpenMetrics `text`: the line of metric
/// `name` carrying every label given (other labels, such as `job`, may be there too).
fn metric(text: &str, series: &str) -> Option<u64> {
    let (name, labels) = series.split_once('{')?;
    let wanted: Vec<&str> = labels.trim_end_matches('}').split(',').collect();
    text.lines().find_map(|l| {
        let (line_series, value) = l.rsplit_once(' ')?;
        let (line_name, line_labels) = line_series.split_once('{')?;
        let line_labels: Vec<&str> = line_labels.trim_end_matches('}').split(',').collect();
        (line_name == name && wanted.iter().all(|w| line_labels.contains(w)))
            .then(|| value.parse().ok())
            .flatten()
    })
}

fn write_secret(dir: &std::path::Path, name: &str, value: &str) -> String {
    let p = dir.join(name);
    std::fs::write(&p, format!("{value}\n")).unwrap();
    p.display().to_string()
}

#[test]
fn the_control_api_refuses_a_missing_or_wrong_token_and_the_job_is_unaffected() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::local(dir.path());
    let m = wordcount_manifest(dir.path(), &paths, 2, "exactly-once", "300ms", Some(3000), None);
    let w = Weir::run(&m, &[], &[]);
    let api = w.api();
    wait_running(&api);
    let wrong = "wrong-secret-0123456789abcdef";
    for (path, post) in [
        ("/v1/job", false),
        ("/v1/checkpoints", false),
        ("/v1/savepoints", true),
        ("/v1/savepoints/0000000000000001", false),
    ] {
        for token in [None, Some(wrong), Some("")] {
            let (code, body) = http(&format!("{api}{path}"), token, post);
            assert_eq!(code, 401, "{path} with {token:?}: {body}");
            assert!(body.contains("Authorization: Bearer"), "{body}");
            assert!(!body.contains(TEST_SECRET), "{body}");
        }
    }
    // Health and metrics stay open; the refusals are counted.
    assert_eq!(http(&format!("{api}/healthz"), None, false), (200, "ok".to_string()));
    let (code, metrics) = http(&format!("{api}/metrics"), None, false);
    assert_eq!(code, 200);
    let refused = metric(&metrics, "weir_auth_failures_total{surface=\"control\"}");
    assert_eq!(refused, Some(12), "{metrics}");
    // The refused savepoint requests changed nothing: the job runs on, with no savepoint.
    let (code, job) = http(&format!("{api}/v1/job"), Some(TEST_SECRET), false);
    assert_eq!(code, 200, "{job}");
    let job: serde_json::Value = serde_json::from_str(&job).unwrap();
    assert_eq!(job["state"], "RUNNING", "{job}");
    let (_, history) = http(&format!("{api}/v1/checkpoints"), Some(TEST_SECRET), false);
    assert!(!history.contains("\"savepoint\""), "{history}");
    assert!(!std::path::Path::new(&paths.savepoints).exists());

    // `weir savepoint trigger` with a wrong secret file is refused, with the right one works.
    let wrong_file = write_secret(dir.path(), "wrong.secret", wrong);
    let trigger = |secret_file: &str| {
        Command::new(weir())
            .args(["savepoint", "trigger", "--url", &api, "--timeout", "60s"])
            .args(["--secret-file", secret_file])
            .output()
            .unwrap()
    };
    let refused = trigger(&wrong_file);
    let stderr = String::from_utf8_lossy(&refused.stderr);
    assert!(!refused.status.success() && stderr.contains("401"), "{stderr}");
    let ok = trigger(secret_file().to_str().unwrap());
    assert!(ok.status.success(), "{}", String::from_utf8_lossy(&ok.stderr));
    let savepoint = String::from_utf8(ok.stdout).unwrap().trim().to_string();
    assert!(savepoint.contains("savepoint-wordcount-"), "{savepoint}");

    let log = w.wait_ok();
    // Logged once for this peer, although refused 13 times.
    let lines: Vec<&str> = log
        .lines()
        .filter(|l| l.contains("refused an unauthenticated"))
        .collect();
    assert_eq!(lines.len(), 1, "{log}");
    assert!(
        lines[0].contains("127.0.0.1") && lines[0].contains("control"),
        "{}",
        lines[0]
    );
    assert!(!log.contains(TEST_SECRET) && !log.contains(wrong), "{log}");
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected_wordcount(),
        "a job whose control API refused 13 requests",
    );
}

#[test]
fn a_worker_with_a_wrong_secret_is_refused_and_the_job_runs_on() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _) = job(dir.path(), 4, Some(3000));
    let mut c = Cluster::start(dir.path(), &m, &["--metrics-auth"], &[]);
    let wrong = write_secret(dir.path(), "wrong.secret", "wrong-secret-0123456789abcdef");
    c.add_worker("intruder", &[(SECRET_ENV, &wrong)]);
    c.wait_checkpoint_after(0);
    // The intruder tried at least twice (it retries with backoff) and never joined.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while c.workers[3]
        .text()
        .matches("authentication with the coordinator failed")
        .count()
        < 2
    {
        assert!(std::time::Instant::now() < deadline, "{}", c.workers[3].text());
        std::thread::sleep(Duration::from_millis(50));
    }
    let status = c.job_status().unwrap();
    assert!(!status["workers"].to_string().contains("intruder"), "{status}");
    // `--metrics-auth` closes /metrics too; with the token it counts the refusals.
    assert_eq!(http(&format!("{}/metrics", c.api), None, false).0, 401);
    let (_, metrics) = http(&format!("{}/metrics", c.api), Some(TEST_SECRET), false);
    let refused = metric(&metrics, "weir_auth_failures_total{surface=\"rpc\"}").unwrap();
    assert!(refused >= 2, "{metrics}");

    // A raw connection to a worker's data port that skips the handshake is closed, unread.
    let data_addr = status["workers"][0]["address"].as_str().unwrap().to_string();
    let mut raw = std::net::TcpStream::connect(&data_addr).unwrap();
    raw.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    let challenge = read_frame(&mut raw).unwrap();
    assert!(challenge["Challenge"]["nonce"].is_array(), "{challenge}");
    write_frame(
        &mut raw,
        &serde_json::json!({"Hello": {"attempt": 1, "up": 0, "down": 4}}),
    );
    assert_eq!(
        read_frame(&mut raw),
        None,
        "the data port answered an unauthenticated peer"
    );
    // A right answer under another role is refused as well.
    let mut wrong_role = std::net::TcpStream::connect(&data_addr).unwrap();
    wrong_role.set_read_timeout(Some(Duration::from_secs(20))).unwrap();
    assert_eq!(answer_handshake(&mut wrong_role, TEST_SECRET, "worker-rpc", "w9"), None);

    c.coordinator.wait_ok(Duration::from_secs(180));
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected_wordcount(),
        "a job that refused a worker and two data connections",
    );
    let log = c.coordinator.text();
    for surface in ["rpc", "control"] {
        let refusals = log
            .lines()
            .filter(|l| l.contains("refused an unauthenticated connection from 127.0.0.1:"))
            .filter(|l| l.contains(&format!("on the {surface} port")))
            .count();
        assert_eq!(refusals, 1, "logged once per peer and surface: {log}");
    }
    assert!(log.contains("wrong job secret"), "{log}");
    let data_refusals: usize = c.workers[..3]
        .iter()
        .map(|w| w.text().matches("refused an unauthenticated").count())
        .sum();
    assert_eq!(data_refusals, 1, "one peer (127.0.0.1) refused twice on one worker");
}

#[test]
fn no_secret_appears_in_logs_api_answers_or_checkpoint_files() {
    use support::moto::{MotoServer, init_test_credentials};
    use weir_runtime::storage::{self, S3Options};
    const ACCESS_KEY: &str = "AKIAWEIRSECURITYTEST";
    const SECRET_KEY: &str = "weirS3SecretKeyThatMustNeverBePrinted0";
    let moto = MotoServer::start_with_bucket("weir-secrets");
    init_test_credentials();
    let rt = tokio::runtime::Runtime::new().unwrap();
    let opts = S3Options {
        endpoint: Some(moto.endpoint()),
        region: Some("us-east-1".into()),
        path_style: true,
        credentials: None,
    };
    let store = rt.block_on(storage::open("s3://weir-secrets", &opts)).unwrap();
    // The job's processes get their own S3 keys (moto does not check them) and log at debug.
    let mut env: Vec<(&str, String)> = moto
        .env()
        .into_iter()
        .filter(|(k, _)| !k.starts_with("AWS_ACCESS") && !k.starts_with("AWS_SECRET"))
        .collect();
    env.push(("AWS_ACCESS_KEY_ID", ACCESS_KEY.into()));
    env.push(("AWS_SECRET_ACCESS_KEY", SECRET_KEY.into()));
    env.push((
        "WEIR_LOG",
        "debug,aws_smithy_runtime=info,aws_smithy_runtime_api=info,aws_sdk_s3=info,aws_config=info,\
         hyper=info,hyper_util=info,h2=info,rustls=info"
            .into(),
    ));
    let env_refs: Vec<(&str, &str)> = env.iter().map(|(k, v)| (*k, v.as_str())).collect();
    let dir = tempfile::tempdir().unwrap();
    let m = wordcount_manifest(
        dir.path(),
        &s3_paths("weir-secrets"),
        4,
        "exactly-once",
        "300ms",
        Some(3000),
        None,
    );
    let mut c = Cluster::start_with_workers(dir.path(), &m, &[], &env_refs, 2);
    c.wait_checkpoint_after(0);

    let mut outputs: Vec<(String, String)> = vec![];
    let trigger = Command::new(weir())
        .args(["savepoint", "trigger", "--url", &c.api, "--timeout", "60s"])
        .env(SECRET_ENV, secret_file())
        .envs(env_refs.iter().copied())
        .output()
        .unwrap();
    assert!(trigger.status.success(), "{}", String::from_utf8_lossy(&trigger.stderr));
    outputs.push((
        "savepoint trigger stdout".into(),
        String::from_utf8_lossy(&trigger.stdout).into(),
    ));
    outputs.push((
        "savepoint trigger stderr".into(),
        String::from_utf8_lossy(&trigger.stderr).into(),
    ));
    for path in ["/v1/job", "/v1/checkpoints", "/metrics", "/healthz"] {
        let (code, body) = http(&format!("{}{path}", c.api), Some(TEST_SECRET), false);
        assert_eq!(code, 200, "{path}: {body}");
        outputs.push((path.into(), body));
    }
    c.coordinator.wait_ok(Duration::from_secs(180));
    for w in &mut c.workers {
        w.wait_ok(Duration::from_secs(30));
    }
    for entry in std::fs::read_dir(dir.path()).unwrap() {
        let p = entry.unwrap().path();
        if p.extension().is_some_and(|e| e == "log") {
            outputs.push((p.display().to_string(), std::fs::read_to_string(&p).unwrap()));
        }
    }
    let mut metadata_files = 0;
    for o in rt.block_on(store.list("")).unwrap() {
        let bytes = rt.block_on(store.get(&o.path)).unwrap();
        metadata_files += usize::from(o.path.ends_with("/_metadata"));
        outputs.push((o.path.clone(), String::from_utf8_lossy(&bytes).into_owned()));
    }
    assert!(metadata_files >= 2, "a checkpoint and a savepoint `_metadata` at least");
    let logged: usize = outputs
        .iter()
        .filter(|(n, _)| n.ends_with(".log"))
        .map(|(_, t)| t.len())
        .sum();
    assert!(logged > 1000, "the processes logged ({logged} bytes)");
    for (name, text) in &outputs {
        for secret in [TEST_SECRET, ACCESS_KEY, SECRET_KEY] {
            assert!(!text.contains(secret), "{name} holds a secret");
        }
    }
}
