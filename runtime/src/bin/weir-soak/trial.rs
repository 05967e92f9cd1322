//! One trial: write its input and job, run the planned failure sequence against real `weir`
//! processes, finish with a fault-free run, and compare all committed output with the
//! independently computed word count.

use crate::expected::{self, Diff};
use crate::moto::S3Env;
use crate::plan::{Mode, Plan, Shape, Step};
use crate::procs::{self, Proc};
use crate::proxy::FaultCounts;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// What every trial shares.
pub struct Env<'a> {
    /// The `weir` binary.
    pub weir: PathBuf,
    /// The source texts: (file name, content).
    pub texts: &'a [(String, String)],
    /// The GitHub event files (`gharchive/*.jsonl`, sorted by name: by time), for the windows
    /// mode: (file name, content); empty when no trial needs them.
    pub events: &'a [(String, String)],
    /// moto and the fault proxy, for the S3 modes.
    pub s3: Option<&'a S3Env>,
    /// Client for control APIs (it sends the job secret as a bearer token).
    pub http: reqwest::Client,
    /// The job secret file every `weir` child gets (`WEIR_JOB_SECRET_FILE`).
    pub secret_file: PathBuf,
    /// Longest a trial may take before it is abandoned (as incomplete).
    pub trial_timeout: Duration,
}

/// The result of one trial.
#[derive(Debug, Default)]
pub struct Outcome {
    /// kill -9 sent to a live process.
    pub kills: u32,
    /// Savepoints that completed (stopping or not).
    pub savepoints: u32,
    /// `weir` processes that exited non-zero on their own (storage errors, refused restores).
    pub job_failures: u32,
    /// Requests and injected faults seen by the proxy.
    pub faults: FaultCounts,
    /// Whether the job finished (the last run exited 0 with its input used up).
    pub completed: bool,
    /// Committed output against the expected multiset.
    pub diff: Diff,
    /// What happened, one line per event, with seconds since the trial started.
    pub log: Vec<String>,
}

/// Per-trial state while it runs.
pub struct Ctx<'a> {
    /// Shared environment.
    pub env: &'a Env<'a>,
    /// The trial's directory (input, job, logs, local storage).
    pub dir: PathBuf,
    /// The job manifest.
    pub manifest: PathBuf,
    /// Environment of the `weir` children.
    pub child_env: Vec<(String, String)>,
    /// Process start counter (log file names).
    pub started: u32,
    /// The outcome being filled in.
    pub out: Outcome,
    t0: Instant,
}

impl Ctx<'_> {
    /// Adds a line to the trial log.
    pub fn note(&mut self, what: impl AsRef<str>) {
        let line = format!("{:6.2}s {}", self.t0.elapsed().as_secs_f64(), what.as_ref());
        self.out.log.push(line);
    }

    /// Notes how a process ended on its own; `true` if the job finished.
    pub fn note_exit(&mut self, proc: &mut Proc, what: &str) -> bool {
        let st = proc.try_exited();
        let finished = st.is_some_and(|s| s.success()) && proc.text().contains("finished");
        if finished {
            self.note(format!("{what} finished"));
        } else {
            self.out.job_failures += 1;
            self.note(format!("{what} exited on its own ({st:?}): {}", proc.tail(3)));
        }
        finished
    }
}

fn manifest(dir: &Path, plan: &Plan, bucket: Option<&str>) -> String {
    let local = |name: &str| format!("{}/{name}", dir.display());
    let paths = match bucket {
        Some(b) => (
            format!("s3://{b}/checkpoints"),
            format!("s3://{b}/savepoints"),
            format!("s3://{b}/output"),
        ),
        None => (local("checkpoints"), local("savepoints"), local("output")),
    };
    let input = local("input");
    let guarantee = match plan.shape {
        Shape::WordCount => "exactly-once",
        Shape::Guarantee { mode } => mode,
        Shape::UnionUnaligned { .. } => return crate::shapes::union_unaligned_manifest(plan, &input, &paths),
        Shape::Windowed { window, union } => {
            return crate::shapes::windowed_manifest(plan, &input, &paths, window, union);
        }
    };
    let (ckpt, svp, out) = paths;
    format!(
        r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: wordcount }}
spec:
  parallelism: {p}
  checkpointing: {{ interval: {i}ms, mode: {guarantee}, storage: "{ckpt}", retained: 2 }}
  savepoints: {{ directory: "{svp}" }}
  job:
    steps:
      - uid: lines
        source:
          file:
            path: "{input}/*.txt"
            maxRecordsPerSecond: {rate}
      - map: {{ expression: "{{'line': line.lower()}}" }}
      - flatMap: {{ field: line, pattern: '\W+', as: word }}
      - keyBy: {{ expression: word, as: word }}
      - uid: counts
        count: {{}}
      - uid: output
        sink: {{ file: {{ path: "{out}" }} }}
"#,
        p = plan.parallelism,
        i = plan.interval_ms,
        rate = plan.rate,
    )
}

/// Committed lines of a local sink directory (hidden in-progress files excluded).
fn local_lines(dir: &Path) -> Result<Vec<String>, String> {
    let mut lines = vec![];
    let Ok(rd) = std::fs::read_dir(dir) else {
        return Ok(lines);
    };
    for e in rd.flatten() {
        let p = e.path();
        if e.file_name().to_string_lossy().starts_with('.') || !p.is_file() {
            continue;
        }
        let text = std::fs::read(&p).map_err(|e| format!("reading {}: {e}", p.display()))?;
        lines.extend(String::from_utf8_lossy(&text).lines().map(str::to_string));
    }
    Ok(lines)
}

/// Runs trial `seed` of `mode` in `dir` (created, left in place for the caller to keep or
/// remove). Setup errors (moto, disk) are returned; everything the job does is in the outcome.
pub async fn run(env: &Env<'_>, mode: Mode, seed: u64, dir: &Path) -> Result<Outcome, String> {
    let plan = crate::plan::plan(mode, seed);
    let mut slice_rng = StdRng::seed_from_u64(plan.sub_seed);
    let (inputs, expected) = match plan.shape {
        Shape::Windowed { window, .. } => {
            // Two of the event files, in time order (one source subtask reads them in name
            // order, so no record is late), a slice of each.
            if env.events.len() < 2 {
                return Err("the windows mode needs two or more gharchive/*.jsonl files".into());
            }
            let first = slice_rng.random_range(0..env.events.len() - 1);
            let second = slice_rng.random_range(first + 1..env.events.len());
            let chosen = [env.events[first].clone(), env.events[second].clone()];
            let inputs = expected::slice_inputs(&mut slice_rng, &chosen, plan.lines_per_file);
            let expected = crate::shapes::expected_windows(&inputs, window);
            (inputs, expected)
        }
        _ => {
            let inputs = expected::slice_inputs(&mut slice_rng, env.texts, plan.lines_per_file);
            let expected = expected::expected_records(&inputs);
            (inputs, expected)
        }
    };
    std::fs::create_dir_all(dir.join("input")).map_err(|e| format!("creating {}: {e}", dir.display()))?;
    for f in &inputs {
        std::fs::write(dir.join("input").join(&f.name), &f.text).map_err(|e| format!("writing input: {e}"))?;
    }
    let bucket = mode.uses_s3().then(|| format!("soak-{}-{seed:x}", mode.name()));
    let s3 = if mode.uses_s3() {
        Some(env.s3.ok_or("an S3 mode needs moto")?)
    } else {
        None
    };
    if let (Some(s3), Some(b)) = (s3, &bucket) {
        s3.create_bucket(b).await?;
    }
    let manifest_path = dir.join("job.yaml");
    std::fs::write(&manifest_path, manifest(dir, &plan, bucket.as_deref())).map_err(|e| format!("writing job: {e}"))?;
    let mut ctx = Ctx {
        env,
        dir: dir.to_path_buf(),
        manifest: manifest_path,
        child_env: {
            let mut e = s3.map(S3Env::child_env).unwrap_or_default();
            e.push(("WEIR_JOB_SECRET_FILE".into(), env.secret_file.display().to_string()));
            e
        },
        started: 0,
        out: Outcome::default(),
        t0: Instant::now(),
    };
    ctx.note(format!(
        "plan: p={} rate={}/s interval={}ms lines/file={} faults={:?} steps={:?} shape={:?}",
        plan.parallelism, plan.rate, plan.interval_ms, plan.lines_per_file, plan.faults, plan.steps, plan.shape
    ));
    if let Some(s3) = s3 {
        s3.proxy.take_counts();
        s3.proxy.set_faults(plan.faults.clone(), plan.sub_seed);
    }
    let run = async {
        if mode.is_cluster() {
            crate::cluster::run(&mut ctx, &plan, seed).await
        } else {
            run_single(&mut ctx, &plan).await
        }
    };
    let completed = tokio::time::timeout(env.trial_timeout, run).await;
    // Children are killed on drop; the trial's processes are gone once `run` is.
    if let Some(s3) = s3 {
        s3.proxy.set_faults(None, 0);
        ctx.out.faults = s3.proxy.take_counts();
        ctx.note(format!("proxy: {:?}", ctx.out.faults));
    }
    match completed {
        Ok(c) => ctx.out.completed = c,
        Err(_) => ctx.note(format!("trial timed out after {:?}", env.trial_timeout)),
    }
    let lines = match (s3, &bucket) {
        (Some(s3), Some(b)) => s3.committed_lines(b).await?,
        _ => local_lines(&dir.join("output"))?,
    };
    ctx.out.diff = match plan.shape {
        Shape::Windowed { .. } => expected::compare(&expected, lines.into_iter().map(crate::shapes::normalize_result)),
        _ => expected::compare(&expected, lines),
    };
    Ok(ctx.out)
}

/// Starts `weir run` at `parallelism`, restoring `restore` when given.
pub fn start_run(ctx: &mut Ctx<'_>, parallelism: u32, restore: Option<&str>) -> Option<Proc> {
    let mut args: Vec<String> = vec!["run".into(), ctx.manifest.display().to_string()];
    args.extend([
        "--listen".into(),
        "127.0.0.1:0".into(),
        "--parallelism".into(),
        parallelism.to_string(),
    ]);
    if let Some(r) = restore {
        args.extend(["--restore".into(), r.to_string()]);
    }
    ctx.started += 1;
    let name = format!("run-{}", ctx.started);
    ctx.note(format!(
        "start {name}: p={parallelism} restore={}",
        restore.unwrap_or("none")
    ));
    match Proc::spawn(&ctx.env.weir, &ctx.dir, &name, &args, &ctx.child_env) {
        Ok(p) => Some(p),
        Err(e) => {
            ctx.note(format!("cannot start weir: {e}"));
            None
        }
    }
}

/// The `weir run` modes: each step starts a process (restoring `latest`, or the savepoint of a
/// stop), waits for RUNNING and acts; then a fault-free run finishes the input. Returns whether
/// the job finished.
async fn run_single(ctx: &mut Ctx<'_>, plan: &Plan) -> bool {
    let mut restore: Option<String> = None;
    let mut p = plan.parallelism;
    let http = ctx.env.http.clone();
    let weir = ctx.env.weir.clone();
    for step in &plan.steps {
        let Some(mut proc) = start_run(ctx, p, restore.as_deref()) else {
            return false;
        };
        restore = Some("latest".into());
        if let Step::KillAtStart { after_ms } = *step {
            // During the restore itself: loading the snapshot, committing its pending sink
            // parts, replaying channel state.
            if proc.sleep_or_exit(after_ms).await.is_some() {
                if ctx.note_exit(&mut proc, "run") {
                    return true;
                }
            } else if proc.kill9().await {
                ctx.out.kills += 1;
                ctx.note(format!("kill -9 run {after_ms} ms after its start"));
            }
            continue;
        }
        let api = proc.api_url(Duration::from_secs(30)).await;
        let running = match &api {
            Some(api) => procs::wait_running(&http, api, &mut proc, None, Duration::from_secs(30)).await,
            None => false,
        };
        if !running {
            if proc.wait(Duration::from_secs(1)).await.is_some() {
                if ctx.note_exit(&mut proc, "run") {
                    return true;
                }
            } else {
                ctx.note("not RUNNING within 30 s; kill -9");
                proc.kill9().await;
            }
            continue;
        }
        let api = api.unwrap_or_default();
        note_restored_from(ctx, &http, &api).await;
        match *step {
            // (Cluster steps are only planned for the cluster mode; here they are plain kills.)
            Step::Kill { after_ms }
            | Step::SavepointThenKill { after_ms, .. }
            | Step::KillWorker { after_ms, .. }
            | Step::KillCoordinator { after_ms }
            | Step::SavepointThenKillWorker { after_ms, .. }
            | Step::KillThenRescale { after_ms, .. }
            | Step::KillAtStart { after_ms } => {
                if proc.sleep_or_exit(after_ms).await.is_some() {
                    if ctx.note_exit(&mut proc, "run") {
                        return true;
                    }
                    continue;
                }
                if let Step::SavepointThenKill { kill_ms, .. } = *step {
                    let r = procs::trigger_savepoint(&weir, &api, false, &ctx.child_env).await;
                    ctx.out.savepoints += u32::from(r.is_ok());
                    ctx.note(format!("savepoint (no stop): {r:?}"));
                    if proc.sleep_or_exit(kill_ms).await.is_some() {
                        if ctx.note_exit(&mut proc, "run") {
                            return true;
                        }
                        continue;
                    }
                }
                if proc.kill9().await {
                    ctx.out.kills += 1;
                    ctx.note("kill -9 run");
                }
                if let Step::KillThenRescale { parallelism, .. } = *step {
                    p = parallelism;
                }
            }
            Step::KillDuringStop { after_ms, kill_ms } => {
                if proc.sleep_or_exit(after_ms).await.is_some() {
                    if ctx.note_exit(&mut proc, "run") {
                        return true;
                    }
                    continue;
                }
                let stop = procs::trigger_savepoint(&weir, &api, true, &ctx.child_env);
                let outcome = tokio::select! {
                    r = stop => format!("stop-with-savepoint returned before the kill: {r:?}"),
                    _ = tokio::time::sleep(Duration::from_millis(kill_ms)) => "stop-with-savepoint under way".into(),
                };
                ctx.note(outcome);
                if proc.kill9().await {
                    ctx.out.kills += 1;
                    ctx.note("kill -9 run");
                } else {
                    // The stop finished first: the next start restores `latest`, its savepoint.
                    ctx.note(format!("run had already exited: {}", proc.tail(1)));
                }
            }
            Step::StopAndRescale { after_ms, parallelism } => {
                if proc.sleep_or_exit(after_ms).await.is_some() {
                    if ctx.note_exit(&mut proc, "run") {
                        return true;
                    }
                    continue;
                }
                let r = procs::trigger_savepoint(&weir, &api, true, &ctx.child_env).await;
                ctx.note(format!("stop-with-savepoint: {r:?}"));
                let exited = proc.wait(Duration::from_secs(60)).await;
                match r {
                    Ok(sp) if exited.is_some_and(|s| s.success()) => {
                        ctx.out.savepoints += 1;
                        restore = Some(sp);
                        p = parallelism;
                    }
                    _ if exited.is_some() => {
                        if ctx.note_exit(&mut proc, "run") {
                            return true;
                        }
                    }
                    _ => {
                        ctx.note("still running 60 s after stop-with-savepoint; kill -9");
                        proc.kill9().await;
                    }
                }
            }
        }
    }
    finish_single(ctx, p, restore).await
}

/// Notes which snapshot the running job restored (`restoredFrom` of `/v1/job`).
pub async fn note_restored_from(ctx: &mut Ctx<'_>, http: &reqwest::Client, api: &str) {
    let from = procs::job_status(http, api)
        .await
        .and_then(|s| s["restoredFrom"].as_str().map(str::to_string));
    ctx.note(format!(
        "RUNNING, restored from {}",
        from.as_deref().unwrap_or("nothing")
    ));
}

/// The fault-free end: up to three starts (restore as given, then `latest`), each allowed to
/// run to the end.
async fn finish_single(ctx: &mut Ctx<'_>, p: u32, mut restore: Option<String>) -> bool {
    if let Some(s3) = ctx.env.s3 {
        s3.proxy.set_faults(None, 0);
    }
    ctx.note("faults off; final run");
    for _ in 0..3 {
        let Some(mut proc) = start_run(ctx, p, restore.as_deref()) else {
            return false;
        };
        let http = ctx.env.http.clone();
        if let Some(api) = proc.api_url(Duration::from_secs(30)).await
            && procs::wait_running(&http, &api, &mut proc, None, Duration::from_secs(30)).await
        {
            note_restored_from(ctx, &http, &api).await;
        }
        if proc.wait(Duration::from_secs(240)).await.is_none() {
            ctx.note(format!("final run still going after 240 s: {}", proc.tail(3)));
            proc.kill9().await;
            return false;
        }
        if ctx.note_exit(&mut proc, "final run") {
            return true;
        }
        restore = Some("latest".into());
    }
    false
}
