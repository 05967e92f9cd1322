//! Thin process and control-API helpers: `weir` children with their stderr in a log file,
//! kill -9, the control API's job state, and savepoints through `weir savepoint trigger`.

use std::path::{Path, PathBuf};
use std::process::{ExitStatus, Stdio};
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};

/// A `weir` child process.
pub struct Proc {
    child: Child,
    /// Its stderr.
    pub log: PathBuf,
    /// Its exit status once it exited.
    pub exited: Option<ExitStatus>,
}

impl Proc {
    /// Starts `weir ARGS...` with `env`, stdout discarded and stderr in `dir/<name>.log`.
    pub fn spawn(
        weir: &Path,
        dir: &Path,
        name: &str,
        args: &[String],
        env: &[(String, String)],
    ) -> std::io::Result<Proc> {
        let log = dir.join(format!("{name}.log"));
        let child = Command::new(weir)
            .args(args)
            // Warnings plus the run's own messages (target `weir`), among them the control API
            // address `api_url` waits for.
            .env("WEIR_LOG", "warn,weir=info,weir_runtime=warn")
            .env("NO_COLOR", "1")
            .envs(env.iter().map(|(k, v)| (k, v)))
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .kill_on_drop(true)
            .spawn()?;
        Ok(Proc {
            child,
            log,
            exited: None,
        })
    }

    /// SIGKILL and reap; `true` if it was still running.
    pub async fn kill9(&mut self) -> bool {
        if self.try_exited().is_some() {
            return false;
        }
        let _ = self.child.start_kill();
        if let Ok(st) = self.child.wait().await {
            self.exited = Some(st);
        }
        true
    }

    /// The exit status if it exited.
    pub fn try_exited(&mut self) -> Option<ExitStatus> {
        if self.exited.is_none() {
            self.exited = self.child.try_wait().ok().flatten();
        }
        self.exited
    }

    /// Waits at most `timeout` for exit.
    pub async fn wait(&mut self, timeout: Duration) -> Option<ExitStatus> {
        if self.try_exited().is_none()
            && let Ok(Ok(st)) = tokio::time::timeout(timeout, self.child.wait()).await
        {
            self.exited = Some(st);
        }
        self.exited
    }

    /// Sleeps `ms` or until the process exits, whichever is first; returns the exit status if
    /// it exited.
    pub async fn sleep_or_exit(&mut self, ms: u64) -> Option<ExitStatus> {
        self.wait(Duration::from_millis(ms)).await
    }

    /// The stderr text so far.
    pub fn text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The last `n` lines of stderr, one string.
    pub fn tail(&self, n: usize) -> String {
        let t = self.text();
        let lines: Vec<&str> = t.lines().collect();
        lines[lines.len().saturating_sub(n)..].join(" | ")
    }

    /// The control API URL `weir run` prints (`control API on http://...`), waiting at most
    /// `timeout`; `None` if it exited first or timed out.
    pub async fn api_url(&mut self, timeout: Duration) -> Option<String> {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(l) = self.text().lines().find(|l| l.contains("control API on ")) {
                return l.rsplit(' ').next().map(str::to_string);
            }
            if self.try_exited().is_some() || Instant::now() > deadline {
                return None;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    }
}

/// The job's `/v1/job` document, if the API answers.
pub async fn job_status(http: &reqwest::Client, api: &str) -> Option<serde_json::Value> {
    let r = http
        .get(format!("{api}/v1/job"))
        .timeout(Duration::from_secs(2))
        .send()
        .await
        .ok()?;
    r.json().await.ok()
}

/// Waits until the job is RUNNING (with a completed checkpoint newer than `after` when given);
/// `false` after `timeout` or when `proc` exited.
pub async fn wait_running(
    http: &reqwest::Client,
    api: &str,
    proc: &mut Proc,
    after: Option<u64>,
    timeout: Duration,
) -> bool {
    let deadline = Instant::now() + timeout;
    while Instant::now() < deadline {
        if proc.try_exited().is_some() {
            return false;
        }
        if let Some(s) = job_status(http, api).await
            && s["state"] == "RUNNING"
            && after.is_none_or(|a| s["lastCompletedCheckpoint"]["id"].as_u64().is_some_and(|id| id > a))
        {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
    }
    false
}

/// `weir savepoint trigger --url API [--stop] --timeout 60s`: the savepoint URL, or the
/// command's error text.
pub async fn trigger_savepoint(weir: &Path, api: &str, stop: bool, env: &[(String, String)]) -> Result<String, String> {
    let mut cmd = Command::new(weir);
    cmd.args(["savepoint", "trigger", "--url", api, "--timeout", "60s"])
        .env("WEIR_LOG", "warn")
        .envs(env.iter().map(|(k, v)| (k, v)))
        .kill_on_drop(true);
    if stop {
        cmd.arg("--stop");
    }
    let out = cmd
        .output()
        .await
        .map_err(|e| format!("spawning weir savepoint trigger: {e}"))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).trim().to_string())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().replace('\n', " | "))
    }
}

/// A free TCP port on 127.0.0.1.
pub fn free_port() -> std::io::Result<u16> {
    weir_runtime::ports::unused_loopback_port()
}
