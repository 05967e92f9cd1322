//! A one-machine cluster for process tests: a `weir coordinator` and `weir worker`s on
//! 127.0.0.1, their logs, and the job's status through the control API.

use super::*;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

pub struct Proc {
    pub child: Child,
    pub log: std::path::PathBuf,
}

impl Proc {
    pub fn spawn(dir: &Path, name: &str, args: &[&str], env: &[(&str, &str)]) -> Proc {
        let log = dir.join(format!("{name}.log"));
        let child = Command::new(weir())
            .args(args)
            .env("WEIR_LOG", TEST_LOG_FILTER)
            .env(SECRET_ENV, secret_file())
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .unwrap();
        Proc { child, log }
    }
    pub fn kill9(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
    pub fn text(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }
    pub fn wait_ok(&mut self, timeout: Duration) {
        let deadline = Instant::now() + timeout;
        loop {
            if let Some(st) = self.child.try_wait().unwrap() {
                assert!(st.success(), "{} exited with {st}: {}", self.log.display(), self.text());
                return;
            }
            assert!(
                Instant::now() < deadline,
                "{} still running after {timeout:?}: {}",
                self.log.display(),
                self.text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
    pub fn pid(&self) -> u32 {
        self.child.id()
    }
}

impl Drop for Proc {
    fn drop(&mut self) {
        self.kill9();
    }
}

/// A port on 127.0.0.1 no process is bound to, for a child to bind.
pub fn free_port() -> u16 {
    weir_runtime::ports::unused_loopback_port().expect("an unused loopback port")
}

pub struct Cluster {
    pub dir: std::path::PathBuf,
    pub job: std::path::PathBuf,
    pub api: String,
    pub rpc: String,
    pub coordinator: Proc,
    pub workers: Vec<Proc>,
    pub extra: Vec<String>,
}

impl Cluster {
    pub fn coordinator_args(&self) -> Vec<String> {
        let mut a: Vec<String> = vec![
            "coordinator".into(),
            "--job".into(),
            self.job.display().to_string(),
            "--listen".into(),
            self.api.trim_start_matches("http://").into(),
            "--rpc-listen".into(),
            self.rpc.clone(),
            "--exit-on-finish".into(),
            "--restart-backoff".into(),
            "200ms".into(),
            "--heartbeat-timeout".into(),
            "3s".into(),
        ];
        if !self.extra.iter().any(|a| a == "--run-id") {
            a.extend(["--run-id".into(), "test-run".into()]);
        }
        a.extend(self.extra.iter().cloned());
        a
    }

    pub fn start(dir: &Path, job: &Path, extra: &[&str], env: &[(&str, &str)]) -> Cluster {
        Cluster::start_with_workers(dir, job, extra, env, 3)
    }

    /// Like [`Cluster::start`] with `workers` workers of 2 slots (2 for parallelism 4: no spare).
    pub fn start_with_workers(dir: &Path, job: &Path, extra: &[&str], env: &[(&str, &str)], workers: usize) -> Cluster {
        let api = format!("http://127.0.0.1:{}", free_port());
        let rpc = format!("127.0.0.1:{}", free_port());
        let mut c = Cluster {
            dir: dir.to_path_buf(),
            job: job.to_path_buf(),
            api,
            rpc,
            coordinator: Proc {
                child: Command::new("true").spawn().unwrap(),
                log: dir.join("none"),
            },
            workers: vec![],
            extra: extra.iter().map(|s| s.to_string()).collect(),
        };
        c.restart_coordinator(env);
        for i in 0..workers {
            c.add_worker(&format!("w{i}"), env);
        }
        c
    }

    /// A coordinator with two one-slot workers (`w0` runs subtask 0 of every stage, `w1`
    /// subtask 1: each reads only its own keyed state files of a restore point at parallelism 2).
    pub fn one_slot_each(dir: &Path, manifest: &Path, extra: &[&str], env: &[(&str, &str)]) -> Cluster {
        let mut c = Cluster::start_with_workers(dir, manifest, extra, env, 0);
        c.add_worker_with_slots("w0", 1, env);
        c.add_worker_with_slots("w1", 1, env);
        c
    }

    pub fn restart_coordinator(&mut self, env: &[(&str, &str)]) {
        let args = self.coordinator_args();
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let n = self.dir.read_dir().unwrap().count();
        self.coordinator = Proc::spawn(&self.dir, &format!("coordinator-{n}"), &args, env);
    }

    pub fn add_worker(&mut self, id: &str, env: &[(&str, &str)]) {
        self.add_worker_with_slots(id, 2, env);
    }

    /// Starts worker `id` with `slots` task slots (one slot per worker puts subtask k of
    /// every stage on its own worker: every keyed exchange crosses the network).
    pub fn add_worker_with_slots(&mut self, id: &str, slots: u32, env: &[(&str, &str)]) {
        let slots = slots.to_string();
        let args = [
            "worker",
            "--coordinator",
            &self.rpc,
            "--slots",
            &slots,
            "--data-listen",
            "127.0.0.1:0",
            "--listen",
            "127.0.0.1:0",
            "--worker-id",
            id,
        ];
        self.workers.push(Proc::spawn(&self.dir, id, &args, env));
    }

    pub fn job_status(&self) -> Option<serde_json::Value> {
        let out = curl().arg(format!("{}/v1/job", self.api)).output().ok()?;
        serde_json::from_slice(&out.stdout).ok()
    }

    /// The worker that runs subtask 1/4 of the first stage (two of the three workers run the
    /// job: the first two to register): its index in `workers` and its id.
    pub fn busy_worker(&self) -> (usize, String) {
        let status = self.job_status().unwrap();
        let id = status["subtasks"][0]["location"].as_str().unwrap().to_string();
        (id.trim_start_matches('w').parse().unwrap(), id)
    }

    /// Waits until the job is RUNNING with at least one completed checkpoint after `after`.
    pub fn wait_checkpoint_after(&self, after: u64) -> u64 {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(s) = self.job_status()
                && s["state"] == "RUNNING"
                && let Some(id) = s["lastCompletedCheckpoint"]["id"].as_u64()
                && id > after
            {
                return id;
            }
            assert!(
                Instant::now() < deadline,
                "no checkpoint after {after}: {}",
                self.coordinator.text()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

pub fn job(dir: &Path, parallelism: u32, rate: Option<u64>) -> (std::path::PathBuf, Paths) {
    let paths = Paths::local(dir);
    let m = wordcount_manifest(dir, &paths, parallelism, "exactly-once", "300ms", rate, None);
    (m, paths)
}

/// Writes one frame of the wire protocol (4-byte big-endian length, then the JSON body).
pub fn write_frame(s: &mut std::net::TcpStream, body: &serde_json::Value) {
    use std::io::Write;
    let bytes = serde_json::to_vec(body).unwrap();
    s.write_all(&(bytes.len() as u32).to_be_bytes()).unwrap();
    s.write_all(&bytes).unwrap();
}

/// Reads one frame; `None` when the peer closed the connection (or reset it) first.
pub fn read_frame(s: &mut std::net::TcpStream) -> Option<serde_json::Value> {
    use std::io::Read;
    let mut len = [0u8; 4];
    s.read_exact(&mut len).ok()?;
    let mut body = vec![0u8; u32::from_be_bytes(len) as usize];
    s.read_exact(&mut body).ok()?;
    Some(serde_json::from_slice(&body).unwrap())
}

/// Answers the handshake a Weir port opens with (a `Challenge` frame) as `role` / `peer_id`
/// with `secret`; returns the verdict frame (`"Accepted"`), or `None` when the peer closed
/// the connection instead.
pub fn answer_handshake(
    s: &mut std::net::TcpStream,
    secret: &str,
    role: &str,
    peer_id: &str,
) -> Option<serde_json::Value> {
    use weir_runtime::security::{handshake, secret::JobSecret};
    let challenge = read_frame(s).expect("a challenge frame first");
    let nonce: Vec<u8> = serde_json::from_value(challenge["Challenge"]["nonce"].clone()).unwrap();
    let mac = handshake::answer_mac(&JobSecret::parse(secret, "test").unwrap(), &nonce, role, peer_id);
    write_frame(
        s,
        &serde_json::json!({"Answer": {"role": role, "peer_id": peer_id, "mac": mac}}),
    );
    read_frame(s)
}

/// Stops the cluster's job with a savepoint and waits for every process to exit; returns the
/// savepoint's URL.
pub fn stop_with_savepoint_and_exit(c: &mut Cluster) -> String {
    let savepoint = super::stop_with_savepoint(&c.api, &[]);
    c.coordinator.wait_ok(Duration::from_secs(60));
    for w in &mut c.workers {
        w.wait_ok(Duration::from_secs(30));
    }
    savepoint
}

/// Waits up to `within` for the coordinator of `c` to exit, which must be a failure of job
/// `job`; returns the failure message (after `FAILED: `) and the coordinator's whole log.
pub fn wait_failed(c: &mut Cluster, job: &str, within: Duration) -> (String, String) {
    let started = Instant::now();
    let exited = loop {
        if let Some(status) = c.coordinator.child.try_wait().unwrap() {
            break status;
        }
        assert!(
            started.elapsed() < within,
            "not FAILED within {within:?}: {}",
            c.coordinator.text()
        );
        std::thread::sleep(Duration::from_millis(50));
    };
    let log = c.coordinator.text();
    assert!(!exited.success(), "the job is FAILED: {log}");
    let failed = log
        .lines()
        .find(|l| l.contains(&format!("job {job} FAILED: ")))
        .unwrap_or_else(|| panic!("no FAILED line: {log}"));
    let message = failed.split_once("FAILED: ").unwrap().1.trim_end().to_string();
    (message, log)
}

/// The arguments of a second generation restoring `savepoint` once: run id `gen-2`, and
/// restarts allowed 1000 times, so a refusal that fails the job at once is told apart from
/// one that restarts it.
pub fn restore_once(savepoint: &str) -> Vec<&str> {
    vec![
        "--restore",
        savepoint,
        "--run-id",
        "gen-2",
        "--restart-max-attempts",
        "1000",
    ]
}

/// The highest snapshot id reservation a coordinator recorded in the job's local checkpoint
/// directory `job_dir` (`_coordinator/ids-<epoch>`, `cluster/fence.rs`), 0 when none: a
/// coordinator started now takes its ids from at least this one.
pub fn highest_id_reservation(job_dir: &Path) -> u64 {
    let Ok(entries) = std::fs::read_dir(job_dir.join("_coordinator")) else {
        return 0;
    };
    entries
        .filter_map(|e| {
            let e = e.unwrap();
            e.file_name().to_string_lossy().starts_with("ids-").then(|| {
                let text = std::fs::read_to_string(e.path()).unwrap();
                text.trim().parse::<u64>().unwrap()
            })
        })
        .max()
        .unwrap_or(0)
}
