//! The cluster modes (`cluster`, `cluster-unaligned`, `cluster-at-most-once`: the same
//! processes and steps, each mode with its own job): one `weir coordinator` (fixed ports, a run
//! id, `--exit-on-finish`) and workers with two slots each; kill -9 of a worker (a replacement
//! joins) or of the coordinator (restarted with the same arguments, so it resumes its own run),
//! and non-stopping savepoints followed by a worker kill.

use crate::plan::{Plan, Step};
use crate::procs::{self, Proc, free_port};
use crate::trial::Ctx;
use std::time::Duration;

struct Cluster {
    api: String,
    coordinator_args: Vec<String>,
    coordinator: Option<Proc>,
    workers: Vec<Proc>,
    rpc: String,
    next_worker: u32,
}

impl Cluster {
    fn start_coordinator(&mut self, ctx: &mut Ctx<'_>) {
        ctx.started += 1;
        let name = format!("coordinator-{}", ctx.started);
        ctx.note(format!("start {name}"));
        match Proc::spawn(&ctx.env.weir, &ctx.dir, &name, &self.coordinator_args, &ctx.child_env) {
            Ok(p) => self.coordinator = Some(p),
            Err(e) => ctx.note(format!("cannot start the coordinator: {e}")),
        }
    }

    fn add_worker(&mut self, ctx: &mut Ctx<'_>) {
        let id = format!("w{}", self.next_worker);
        self.next_worker += 1;
        let args: Vec<String> = [
            "worker",
            "--coordinator",
            &self.rpc,
            "--slots",
            "2",
            "--data-listen",
            "127.0.0.1:0",
            "--listen",
            "none",
            "--worker-id",
            &id,
        ]
        .iter()
        .map(|s| s.to_string())
        .collect();
        ctx.note(format!("start worker {id}"));
        match Proc::spawn(&ctx.env.weir, &ctx.dir, &id, &args, &ctx.child_env) {
            Ok(p) => self.workers.push(p),
            Err(e) => ctx.note(format!("cannot start worker {id}: {e}")),
        }
    }

    async fn kill_worker(&mut self, ctx: &mut Ctx<'_>, index: usize) {
        self.workers.retain_mut(|w| w.try_exited().is_none());
        if self.workers.is_empty() {
            return;
        }
        let mut w = self.workers.remove(index % self.workers.len());
        if w.kill9().await {
            ctx.out.kills += 1;
            ctx.note(format!("kill -9 worker ({})", w.log.display()));
        }
        self.add_worker(ctx);
    }

    /// Waits at most `timeout` for the coordinator to exit, replacing every worker that exits
    /// meanwhile, as a Deployment restarts its pods: a worker that left on `JobEnded` must
    /// come back if the coordinator was killed after the job ended but before it exited (the
    /// restarted coordinator runs the remainder from the final checkpoint and needs workers).
    /// `true` if the coordinator exited.
    async fn wait_coordinator_keeping_workers(&mut self, ctx: &mut Ctx<'_>, plan: &Plan, timeout: Duration) -> bool {
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let Some(coord) = self.coordinator.as_mut() else {
                return true;
            };
            if coord.wait(Duration::from_millis(500)).await.is_some() {
                return true;
            }
            if tokio::time::Instant::now() >= deadline {
                return false;
            }
            let before = self.workers.len();
            self.workers.retain_mut(|w| w.try_exited().is_none());
            if self.workers.len() < before {
                ctx.note(format!(
                    "{} worker(s) exited while the coordinator runs; replacing them",
                    before - self.workers.len()
                ));
            }
            while self.workers.len() < plan.parallelism.div_ceil(2) as usize {
                self.add_worker(ctx);
            }
        }
    }

    /// Sleeps `ms` or until the coordinator exits; `true` if it exited.
    async fn sleep(&mut self, ms: u64) -> bool {
        match self.coordinator.as_mut() {
            Some(c) => c.sleep_or_exit(ms).await.is_some(),
            None => true,
        }
    }
}

/// Runs the cluster trial; returns whether the job finished.
pub async fn run(ctx: &mut Ctx<'_>, plan: &Plan, seed: u64) -> bool {
    let (Ok(api_port), Ok(rpc_port)) = (free_port(), free_port()) else {
        ctx.note("no free port");
        return false;
    };
    let api = format!("http://127.0.0.1:{api_port}");
    let rpc = format!("127.0.0.1:{rpc_port}");
    let coordinator_args: Vec<String> = [
        "coordinator",
        "--job",
        &ctx.manifest.display().to_string(),
        "--parallelism",
        &plan.parallelism.to_string(),
        "--listen",
        &format!("127.0.0.1:{api_port}"),
        "--rpc-listen",
        &rpc,
        "--run-id",
        &format!("soak-{seed:x}"),
        "--exit-on-finish",
        "--restart-backoff",
        "200ms",
        "--heartbeat-timeout",
        "3s",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut c = Cluster {
        api: api.clone(),
        coordinator_args,
        coordinator: None,
        workers: vec![],
        rpc,
        next_worker: 0,
    };
    c.start_coordinator(ctx);
    for _ in 0..plan.parallelism.div_ceil(2) {
        c.add_worker(ctx);
    }
    let http = ctx.env.http.clone();
    let weir = ctx.env.weir.clone();
    for step in &plan.steps {
        let Some(coord) = c.coordinator.as_mut() else {
            return false;
        };
        if !procs::wait_running(&http, &c.api, coord, None, Duration::from_secs(60)).await {
            break;
        }
        crate::trial::note_restored_from(ctx, &http, &c.api).await;
        match *step {
            Step::KillWorker { after_ms, worker } => {
                if c.sleep(after_ms).await {
                    break;
                }
                c.kill_worker(ctx, worker).await;
            }
            Step::SavepointThenKillWorker {
                after_ms,
                kill_ms,
                worker,
            } => {
                if c.sleep(after_ms).await {
                    break;
                }
                let r = procs::trigger_savepoint(&weir, &c.api, false, &ctx.child_env).await;
                ctx.out.savepoints += u32::from(r.is_ok());
                ctx.note(format!("savepoint (no stop): {r:?}"));
                if c.sleep(kill_ms).await {
                    break;
                }
                c.kill_worker(ctx, worker).await;
            }
            Step::KillCoordinator { after_ms }
            | Step::Kill { after_ms }
            | Step::SavepointThenKill { after_ms, .. }
            | Step::StopAndRescale { after_ms, .. }
            | Step::KillThenRescale { after_ms, .. }
            | Step::KillDuringStop { after_ms, .. }
            | Step::KillAtStart { after_ms } => {
                if c.sleep(after_ms).await {
                    break;
                }
                if let Some(mut coord) = c.coordinator.take()
                    && coord.kill9().await
                {
                    ctx.out.kills += 1;
                    ctx.note("kill -9 coordinator");
                }
                c.start_coordinator(ctx);
            }
        }
    }
    if let Some(s3) = ctx.env.s3 {
        s3.proxy.set_faults(None, 0);
    }
    ctx.note("faults off; waiting for the job to finish");
    // A coordinator that exits non-zero is restarted (same run id) at most twice.
    for _ in 0..3 {
        if c.coordinator.is_none() {
            return false;
        }
        if !c
            .wait_coordinator_keeping_workers(ctx, plan, Duration::from_secs(240))
            .await
        {
            let tail = c.coordinator.as_ref().map(|coord| coord.tail(3)).unwrap_or_default();
            ctx.note(format!("coordinator still running after 240 s: {tail}"));
            return false;
        }
        let mut coord = c.coordinator.take().expect("checked above");
        if ctx.note_exit(&mut coord, "coordinator") {
            return true;
        }
        c.workers.retain_mut(|w| w.try_exited().is_none());
        while c.workers.len() < plan.parallelism.div_ceil(2) as usize {
            c.add_worker(ctx);
        }
        c.start_coordinator(ctx);
    }
    false
}
