//! Helpers for process-level tests: manifests with absolute paths, `weir` child processes,
//! reading committed output, and the independent word count.
#![allow(dead_code)]

pub mod backpressure;
pub mod cluster;
pub mod incremental;
pub mod kafka;
pub mod kafka_list_offsets;
pub mod kafka_log;
pub mod kafka_txn_offsets;
pub mod union_wordcount;

/// The log filter of the `weir` processes tests start: warnings, plus the run's own messages
/// (target `weir`: the control API address, `job … finished`, the resume hint, restarts),
/// which are info events; `weir_runtime`'s own info events stay hidden (a directive for
/// `weir` also matches `weir_runtime…`, so the longer one sets it back to warn).
pub const TEST_LOG_FILTER: &str = "warn,weir=info,weir_runtime=warn";

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// The `weir` binary under test.
pub fn weir() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_weir"))
}

/// The job secret of the tests' jobs (issue 15): every `weir` child gets its file through
/// [`SECRET_ENV`] and control API requests send it as a bearer token.
pub const TEST_SECRET: &str = "weir-test-secret-0123456789abcdef";

/// The environment variable naming the job secret file.
pub const SECRET_ENV: &str = "WEIR_JOB_SECRET_FILE";

/// The file holding [`TEST_SECRET`] (under the target's test scratch directory; written
/// atomically, so test processes running at once agree).
pub fn secret_file() -> PathBuf {
    static F: std::sync::OnceLock<PathBuf> = std::sync::OnceLock::new();
    F.get_or_init(|| {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"));
        std::fs::create_dir_all(dir).unwrap();
        let path = dir.join("weir-test-job.secret");
        let aside = dir.join(format!("weir-test-job.secret.{}", std::process::id()));
        std::fs::write(&aside, format!("{TEST_SECRET}\n")).unwrap();
        std::fs::rename(&aside, &path).unwrap();
        path
    })
    .clone()
}

/// `curl` with the test secret as the bearer token, silent and failing on HTTP errors.
pub fn curl() -> Command {
    let mut c = Command::new("curl");
    c.args(["-sf", "-H", &format!("Authorization: Bearer {TEST_SECRET}")]);
    c
}

/// `../shared/data` from the repository root, or `$WEIR_DATA_DIR` when set (for a clone
/// that is not next to `shared/`).
pub fn data_dir() -> PathBuf {
    let d = std::env::var_os("WEIR_DATA_DIR")
        .map(PathBuf::from)
        .unwrap_or_else(|| Path::new(env!("CARGO_MANIFEST_DIR")).join("../../shared/data"));
    assert!(
        d.join("text/moby_dick.txt").is_file(),
        "shared data not found at {} (set WEIR_DATA_DIR to the directory holding text/)",
        d.display()
    );
    d.canonicalize().unwrap()
}

/// Where a test's job reads and writes.
pub struct Paths {
    /// Checkpoint storage URL.
    pub checkpoints: String,
    /// Savepoint directory URL.
    pub savepoints: String,
    /// Sink output URL.
    pub output: String,
}

impl Paths {
    /// All under a local directory.
    pub fn local(dir: &Path) -> Paths {
        Paths {
            checkpoints: dir.join("checkpoints").display().to_string(),
            savepoints: dir.join("savepoints").display().to_string(),
            output: dir.join("output").display().to_string(),
        }
    }
}

/// The word-count manifest (same pipeline as examples/wordcount.yaml) with absolute paths.
pub fn wordcount_manifest(
    dir: &Path,
    paths: &Paths,
    parallelism: u32,
    mode: &str,
    interval: &str,
    rate: Option<u64>,
    source: Option<&str>,
) -> PathBuf {
    let source = source
        .map(str::to_string)
        .unwrap_or_else(|| format!("{}/text/*.txt", data_dir().display()));
    let rate = rate
        .map(|r| format!("\n            maxRecordsPerSecond: {r}"))
        .unwrap_or_default();
    let yaml = format!(
        r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: wordcount }}
spec:
  parallelism: {parallelism}
  checkpointing: {{ interval: {interval}, mode: {mode}, storage: "{ckpt}", retained: 2 }}
  savepoints: {{ directory: "{svp}" }}
  job:
    steps:
      - uid: lines
        source:
          file:
            path: "{source}"{rate}
      - map: {{ expression: "{{'line': line.lower()}}" }}
      - flatMap: {{ field: line, pattern: '\W+', as: word }}
      - keyBy: {{ expression: word, as: word }}
      - uid: counts
        count: {{}}
      - uid: output
        sink: {{ file: {{ path: "{out}" }} }}
"#,
        ckpt = paths.checkpoints,
        svp = paths.savepoints,
        out = paths.output,
    );
    let f = dir.join("job.yaml");
    std::fs::write(&f, yaml).unwrap();
    f
}

/// Sets `spec.stateBackend` (`heap`, `disk`) of a manifest whose `spec:` line starts a line
/// (as [`wordcount_manifest`] writes it), replacing an earlier setting.
pub fn set_state_backend(manifest: &Path, backend: &str) {
    let text = std::fs::read_to_string(manifest).unwrap();
    let kept: Vec<&str> = text.lines().filter(|l| !l.starts_with("  stateBackend:")).collect();
    let text = kept.join("\n") + "\n";
    let with = text.replacen("\nspec:\n", &format!("\nspec:\n  stateBackend: {backend}\n"), 1);
    assert_ne!(with, text, "no `spec:` line in {}", manifest.display());
    std::fs::write(manifest, with).unwrap();
}

/// The checkpoint ids (`chk-<n>/`) in a job's local checkpoint directory `job_dir`, ascending;
/// with `completed_only`, those whose `_metadata` is there.
pub fn checkpoint_ids(job_dir: &Path, completed_only: bool) -> Vec<u64> {
    let mut ids: Vec<u64> = std::fs::read_dir(job_dir)
        .unwrap()
        .filter_map(|e| {
            e.unwrap()
                .file_name()
                .to_string_lossy()
                .strip_prefix("chk-")?
                .parse::<u64>()
                .ok()
        })
        .filter(|id| !completed_only || job_dir.join(format!("chk-{id}/_metadata")).exists())
        .collect();
    ids.sort_unstable();
    ids
}

/// The environment pointing `weir run`'s disk state directory (`WEIR_STATE_DIR`) at `dir`.
pub fn state_dir_env(dir: &Path) -> Vec<(String, String)> {
    vec![("WEIR_STATE_DIR".into(), dir.display().to_string())]
}

/// A running `weir` child; its stderr goes to a file.
pub struct Weir {
    pub child: Child,
    pub stderr: PathBuf,
}

impl Weir {
    /// Starts `weir run FILE ARGS...` with a free control port and extra environment.
    pub fn run(manifest: &Path, args: &[&str], env: &[(String, String)]) -> Weir {
        let stderr = manifest.with_file_name(format!("stderr-{}.log", rand_suffix()));
        let mut cmd = Command::new(weir());
        cmd.arg("run")
            .arg(manifest)
            .args(["--listen", "127.0.0.1:0"])
            .args(args);
        cmd.env("WEIR_LOG", TEST_LOG_FILTER)
            .env(SECRET_ENV, secret_file())
            .envs(env.iter().map(|(k, v)| (k, v)));
        cmd.stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap());
        Weir {
            child: cmd.spawn().expect("spawn weir"),
            stderr,
        }
    }

    /// The control API base URL, once the process printed it.
    pub fn api(&self) -> String {
        let deadline = Instant::now() + Duration::from_secs(30);
        loop {
            let text = std::fs::read_to_string(&self.stderr).unwrap_or_default();
            if let Some(l) = text.lines().find(|l| l.contains("control API on ")) {
                return l.rsplit(' ').next().unwrap().to_string();
            }
            assert!(Instant::now() < deadline, "weir did not start: {text}");
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// Waits for exit; panics with stderr unless it exits 0.
    pub fn wait_ok(mut self) -> String {
        let st = self.child.wait().unwrap();
        let text = std::fs::read_to_string(&self.stderr).unwrap_or_default();
        assert!(st.success(), "weir exited with {st}: {text}");
        text
    }

    /// Waits for exit and returns (success, stderr).
    pub fn wait(mut self) -> (bool, String) {
        let st = self.child.wait().unwrap();
        (st.success(), std::fs::read_to_string(&self.stderr).unwrap_or_default())
    }

    /// SIGKILL.
    pub fn kill9(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn rand_suffix() -> String {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    format!("{}-{}", std::process::id(), N.fetch_add(1, Ordering::Relaxed))
}

/// Committed output lines of a local sink directory (hidden in-progress files excluded), sorted.
pub fn local_output(dir: &Path) -> Vec<String> {
    let mut lines = vec![];
    let Ok(rd) = std::fs::read_dir(dir) else { return lines };
    for e in rd {
        let p = e.unwrap().path();
        let name = p.file_name().unwrap().to_string_lossy().into_owned();
        if name.starts_with('.') || !p.is_file() {
            continue;
        }
        lines.extend(
            BufReader::new(std::fs::File::open(&p).unwrap())
                .lines()
                .map(Result::unwrap),
        );
    }
    lines.sort();
    lines
}

/// The expected running-count records, computed independently of Weir: every `(word, k)` for
/// k = 1..N(word), as `{"word":"<w>","count":<k>}`, sorted.
pub fn expected_wordcount() -> Vec<String> {
    let re = regex::Regex::new(r"\W+").unwrap();
    let mut counts: BTreeMap<String, u64> = BTreeMap::new();
    let mut files: Vec<_> = std::fs::read_dir(data_dir().join("text"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .collect();
    files.sort();
    for f in files.iter().filter(|p| p.extension().is_some_and(|e| e == "txt")) {
        for line in std::fs::read_to_string(f).unwrap().lines() {
            for w in re.split(&line.to_lowercase()) {
                if !w.is_empty() {
                    *counts.entry(w.to_string()).or_default() += 1;
                }
            }
        }
    }
    let mut out = vec![];
    for (w, n) in counts {
        for k in 1..=n {
            out.push(serde_json::json!({"word": w, "count": k}).to_string());
        }
    }
    out.sort();
    out
}

/// Actual against expected as multisets: `(missing, extra)` — records of `expected` the output
/// lacks, and records the output has beyond `expected` (written twice, or counted twice).
pub fn lost_and_extra(actual: &[String], expected: &[String]) -> (usize, usize) {
    let mut count: BTreeMap<&str, i64> = BTreeMap::new();
    for r in expected {
        *count.entry(r).or_default() += 1;
    }
    for r in actual {
        *count.entry(r).or_default() -= 1;
    }
    let missing = count.values().filter(|&&c| c > 0).sum::<i64>() as usize;
    let extra = count.values().filter(|&&c| c < 0).map(|c| -c).sum::<i64>() as usize;
    (missing, extra)
}

/// The committed output in `<dir>/output` against the independent word count
/// ([`expected_wordcount`]) as multisets: `(lost, extra)` ([`lost_and_extra`]); prints both
/// after `what` (the mode and the failures of the run).
pub fn wordcount_lost_and_extra(dir: &Path, what: &str) -> (usize, usize) {
    let expected = expected_wordcount();
    let (lost, extra) = lost_and_extra(&local_output(&dir.join("output")), &expected);
    eprintln!("{what}: {lost} lost, {extra} extra of {}", expected.len());
    (lost, extra)
}

/// Asserts that at-most-once's read-position log directory `log_dir` holds a file.
pub fn assert_read_position_log_written(log_dir: &Path) {
    assert!(
        std::fs::read_dir(log_dir).is_ok_and(|mut d| d.next().is_some()),
        "no read-position log in {}",
        log_dir.display()
    );
}

/// Asserts two sorted multisets are equal, reporting the first differences.
pub fn assert_same_multiset(actual: &[String], expected: &[String], what: &str) {
    if actual == expected {
        return;
    }
    let mut a = actual.iter().peekable();
    let mut e = expected.iter().peekable();
    let (mut missing, mut extra) = (vec![], vec![]);
    loop {
        match (a.peek(), e.peek()) {
            (Some(x), Some(y)) if x == y => {
                a.next();
                e.next();
            }
            (Some(x), Some(y)) if x < y => extra.push(a.next().unwrap().clone()),
            (Some(_), Some(_)) | (None, Some(_)) => missing.push(e.next().unwrap().clone()),
            (Some(_), None) => extra.push(a.next().unwrap().clone()),
            (None, None) => break,
        }
    }
    panic!(
        "{what}: {} records, expected {}; {} missing (first {:?}), {} extra/duplicated (first {:?})",
        actual.len(),
        expected.len(),
        missing.len(),
        missing.iter().take(5).collect::<Vec<_>>(),
        extra.len(),
        extra.iter().take(5).collect::<Vec<_>>()
    );
}

/// A small deterministic PRNG for kill timings (seed printed by the test).
pub struct Rng(pub u64);

impl Rng {
    /// Next value in [lo, hi).
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        lo + self.0 % (hi - lo)
    }
}

/// A seed from the clock, printed so a failure can be replayed with WEIR_TEST_SEED.
pub fn seed() -> u64 {
    let s = std::env::var("WEIR_TEST_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
                | 1
        });
    eprintln!("WEIR_TEST_SEED={s}");
    s
}

/// Runs the job with `kills` SIGKILLs at random points, restarting with `--restore latest`
/// each time, then lets the last run finish.
pub fn run_with_kills(manifest: &Path, kills: usize, env: &[(String, String)], rng: &mut Rng) {
    kill_at_random(manifest, kills, env, rng);
    let w = Weir::run(manifest, &["--restore", "latest"], env);
    w.wait_ok();
}

/// Runs the job `kills` times with `--restore latest`, each run SIGKILLed 400-1800 ms after
/// its control API answers.
pub fn kill_at_random(manifest: &Path, kills: usize, env: &[(String, String)], rng: &mut Rng) {
    for i in 0..kills {
        let w = Weir::run(manifest, &["--restore", "latest"], env);
        let _ = w.api();
        let ms = rng.range(400, 1800);
        std::thread::sleep(Duration::from_millis(ms));
        eprintln!("kill -9 #{} after {ms} ms", i + 1);
        w.kill9();
    }
}

/// Crashes the job (abort, like kill -9) once in each window of two-phase commit: after every
/// sink pre-committed checkpoint 3 but before its `_metadata` (its parts must never become
/// visible), and right after checkpoint 6's `_metadata` but before sinks were told (the
/// restore must commit its parts). Ids keep increasing across restores, so 6 is reached in
/// the second run.
pub fn crash_in_both_commit_windows(manifest: &Path, env: &[(String, String)]) {
    for point in ["before-metadata:3", "after-metadata:6"] {
        let mut env = env.to_vec();
        env.push(("WEIR_FAILPOINT".into(), point.into()));
        let (ok, stderr) = Weir::run(manifest, &["--restore", "latest"], &env).wait();
        assert!(
            !ok && stderr.contains(&format!("failpoint {point} reached")),
            "expected a crash at {point}: {stderr}"
        );
    }
}

/// GETs `url` (a control API path) every 50 ms until `ready` returns `Some` for its JSON body
/// (`Null` while the API does not answer), at most `timeout`; panics naming `what` and the last
/// body.
pub fn poll_json<T>(url: &str, what: &str, timeout: Duration, ready: impl Fn(&serde_json::Value) -> Option<T>) -> T {
    let deadline = Instant::now() + timeout;
    loop {
        let out = curl().arg(url).output().unwrap();
        let body: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap_or_default();
        if let Some(found) = ready(&body) {
            return found;
        }
        assert!(
            Instant::now() < deadline,
            "{what} within {timeout:?}; last answer of {url}: {body}"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Waits (at most 60 s) until the job's control API reports RUNNING: a savepoint is only
/// accepted then (as in Flink, not while tasks are still being deployed).
pub fn wait_running(api: &str) {
    poll_json(
        &format!("{api}/v1/job"),
        "the job reaches RUNNING",
        Duration::from_secs(60),
        |job| (job["state"] == "RUNNING").then_some(()),
    );
}

/// Stop-with-savepoint through `weir savepoint trigger --stop` once the job is RUNNING;
/// returns the savepoint URL.
pub fn stop_with_savepoint(api: &str, env: &[(String, String)]) -> String {
    wait_running(api);
    trigger_savepoint(api, env, true)
}

/// `weir savepoint trigger` of the job at `api` (`--stop` with `stop`), waiting up to 60 s;
/// returns the savepoint URL. Panics with the command's stderr when it fails.
pub fn trigger_savepoint(api: &str, env: &[(String, String)], stop: bool) -> String {
    let mut args = vec!["savepoint", "trigger", "--url", api, "--timeout", "60s"];
    if stop {
        args.push("--stop");
    }
    let out = Command::new(weir())
        .args(args)
        .env(SECRET_ENV, secret_file())
        .envs(env.iter().map(|(k, v)| (k, v)))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "savepoint (stop: {stop}) failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap().trim().to_string()
}

/// Checkpoints, savepoints and output under `s3://bucket/`.
pub fn s3_paths(bucket: &str) -> Paths {
    Paths {
        checkpoints: format!("s3://{bucket}/checkpoints"),
        savepoints: format!("s3://{bucket}/savepoints"),
        output: format!("s3://{bucket}/output"),
    }
}

/// Committed output lines under `output/` of an S3 store, sorted.
pub fn s3_output(rt: &tokio::runtime::Runtime, store: &weir_runtime::storage::Store) -> Vec<String> {
    let mut lines = vec![];
    for o in rt.block_on(store.list("output/")).unwrap() {
        let bytes = rt.block_on(store.get(&o.path)).unwrap();
        lines.extend(String::from_utf8(bytes.to_vec()).unwrap().lines().map(str::to_string));
    }
    lines.sort();
    lines
}

/// The control API's `/v1/job` answer at `api` (`null` when it does not answer).
pub fn job_status(api: &str) -> serde_json::Value {
    let out = curl().arg(format!("{api}/v1/job")).output().unwrap();
    serde_json::from_slice(&out.stdout).unwrap_or_default()
}

/// The `_metadata` body (JSON, the line after the header) of the newest completed checkpoint in
/// `job_checkpoints` (`<checkpoint dir>/<job name>`), with its id; `None` while there is none.
pub fn newest_checkpoint_in(job_checkpoints: &Path) -> Option<(u64, serde_json::Value)> {
    let (id, dir) = std::fs::read_dir(job_checkpoints)
        .ok()?
        .filter_map(|e| {
            let p = e.ok()?.path();
            let id: u64 = p.file_name()?.to_str()?.strip_prefix("chk-")?.parse().ok()?;
            p.join("_metadata").exists().then_some((id, p))
        })
        .max()?;
    let text = std::fs::read_to_string(dir.join("_metadata")).ok()?;
    Some((id, serde_json::from_str(text.split_once('\n')?.1).ok()?))
}

/// Records of channel state `metadata` (a checkpoint's `_metadata` body) holds for the stage
/// headed by `uid` (`None`: every stage): the sum of its channel-state handles' `entries`.
pub fn channel_state_records(metadata: &serde_json::Value, uid: Option<&str>) -> u64 {
    metadata["channelState"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|c| uid.is_none_or(|u| c["uid"] == u))
        .flat_map(|c| c["handles"].as_array().into_iter().flatten())
        .map(|h| h["entries"].as_u64().unwrap_or(0))
        .sum()
}

/// Runs `m` at `parallelism` (restoring the newest checkpoint) until it completed a checkpoint
/// after `after_id` whose channel state holds records of the stage `uid` (`None`: any stage),
/// then kill -9; returns that checkpoint's id. The checkpoints are read from `job_checkpoints`
/// (`<checkpoint dir>/<job name>`).
///
/// A restore from `latest` must then replay channel state, so when a newer checkpoint without
/// such records completed between the check and the kill (or the run's first checkpoints
/// held only empty channel-state files), the job is run again from the newest checkpoint, up
/// to five times: each attempt is one more kill -9 of the same lineage, so the exactly-once
/// comparison the callers make still covers every run.
pub fn run_until_channel_state(
    m: &Path,
    parallelism: &str,
    after_id: u64,
    job_checkpoints: &Path,
    uid: Option<&str>,
) -> u64 {
    for _attempt in 0..5 {
        let w = Weir::run(m, &["--parallelism", parallelism, "--restore", "latest"], &[]);
        let api = w.api();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            let last = &job_status(&api)["lastCompletedCheckpoint"];
            if let Some(id) = last["id"].as_u64()
                && id > after_id
                && last["alignment"]["channelStateBytes"].as_u64().unwrap_or(0) > 0
                && let Some((newest, metadata)) = newest_checkpoint_in(job_checkpoints)
                && newest >= id
                && channel_state_records(&metadata, uid) > 0
            {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "no unaligned checkpoint with channel state of {uid:?}: {last}"
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        w.kill9();
        let (newest, metadata) = newest_checkpoint_in(job_checkpoints).expect("a completed checkpoint");
        if channel_state_records(&metadata, uid) > 0 {
            return newest;
        }
        eprintln!("checkpoint {newest} completed before the kill holds no channel state of {uid:?}: running again");
    }
    panic!("five runs at parallelism {parallelism} never ended on a checkpoint with channel state of {uid:?}");
}

/// Records counted per `(key, window start, window end)`.
pub type WindowCounts = BTreeMap<(String, i64, i64), u64>;

/// Tumbling windows of `size_ms` per key as one reader in order sees them, with no allowed
/// lateness: the watermark before each record is the largest event time so far minus
/// `bound_ms` minus 1 ms, and a record whose window's last millisecond is at or behind it is
/// late. `records` are `(event time ms, key, the record as its late line)`. Returns the count
/// per `(key, window start, window end)` of the records that are not late, and the late
/// records' lines in input order: the independent computation the window tests compare with.
pub fn one_reader_tumbling_counts(
    records: impl IntoIterator<Item = (i64, String, String)>,
    size_ms: i64,
    bound_ms: i64,
) -> (WindowCounts, Vec<String>) {
    let mut counts = WindowCounts::new();
    let mut late = Vec::new();
    let mut max_seen = i64::MIN;
    for (t, key, late_line) in records {
        let watermark = if max_seen == i64::MIN {
            i64::MIN
        } else {
            max_seen - bound_ms - 1
        };
        let start = t - t.rem_euclid(size_ms);
        if start + size_ms - 1 <= watermark {
            late.push(late_line);
        } else {
            *counts.entry((key, start, start + size_ms)).or_default() += 1;
        }
        max_seen = max_seen.max(t);
    }
    (counts, late)
}

/// [`one_reader_tumbling_counts`] as lines: the window results `key|start|end|count` and the
/// late records' lines, both sorted.
pub fn one_reader_tumbling(
    records: impl IntoIterator<Item = (i64, String, String)>,
    size_ms: i64,
    bound_ms: i64,
) -> (Vec<String>, Vec<String>) {
    let (counts, mut late) = one_reader_tumbling_counts(records, size_ms, bound_ms);
    let mut windows: Vec<String> = counts
        .into_iter()
        .map(|((key, start, end), n)| format!("{key}|{start}|{end}|{n}"))
        .collect();
    windows.sort();
    late.sort();
    (windows, late)
}

/// Every file under `dir`, recursively (none when `dir` is missing).
pub fn files_under(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    for entry in std::fs::read_dir(dir).into_iter().flatten().flatten() {
        let path = entry.path();
        if path.is_dir() {
            out.extend(files_under(&path));
        } else {
            out.push(path);
        }
    }
    out
}

/// The names in directory `dir`, sorted.
pub fn dir_names(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}
