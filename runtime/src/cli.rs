//! The `weir` command line: `run`, `coordinator`, `worker`, `savepoint trigger|inspect`,
//! `checkpoints list` ([`crate::cli_checkpoints`]), `list` ([`crate::cli_list`]), `status`,
//! `cancel`, `completion`.
//!
//! Exit codes: 0 success; 1 failure (the job failed, a request was refused, nothing matched);
//! 2 usage (a bad argument, clap's error; a bad `RUST_LOG` or `--log-filter`).

use crate::cli_checkpoints::OutputFormat;
use crate::cli_input::{local_path_exists, parse_restore_arg, positive_duration};
use crate::cli_resume::{resume_hint, snapshot_kind_word};
use crate::control::api::SavepointRequest;
use crate::control::auth::ControlAuth;
use crate::exec::{self, RunOptions};
use crate::job::{self, OperatorKind};
use crate::logging::{LogFormat, LogSettings, LogStream};
use crate::output;
use crate::security::secret;
use clap::{Parser, Subcommand};
use std::io::IsTerminal;
use std::path::PathBuf;
use std::time::Duration;

/// Weir: stateful stream jobs with Flink-style checkpoints.
#[derive(Parser, Debug)]
#[command(name = "weir", version, about)]
pub struct Cli {
    /// Log format: `text` or `json` (every log line one JSON object). Logs go to stderr.
    #[arg(long, global = true, value_enum, default_value = "text", env = "WEIR_LOG_FORMAT")]
    pub log_format: LogFormat,
    /// Log filter (tracing EnvFilter syntax, e.g. `info` or `warn,weir=info`; default `info`).
    /// `RUST_LOG`, when set, takes precedence.
    #[arg(long, global = true, env = "WEIR_LOG", value_parser = parse_log_filter)]
    pub log_filter: Option<String>,
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Run a StreamJob manifest in this process (all subtasks), with checkpoints.
    Run(RunArgs),
    /// Run the coordinator of a distributed job (JobManager role).
    Coordinator(CoordinatorArgs),
    /// Run a worker offering task slots to a coordinator (TaskManager role).
    Worker(WorkerArgs),
    /// Savepoint tools.
    #[command(subcommand)]
    Savepoint(SavepointCmd),
    /// Checkpoint tools.
    #[command(subcommand)]
    Checkpoints(CheckpointsCmd),
    /// List jobs: the running jobs behind control APIs (`--url`, repeatable; default
    /// `http://127.0.0.1:8081`, where `weir run` listens), or with `--storage` the jobs that
    /// have checkpoints in a checkpoint storage, each with its newest completed snapshot.
    List {
        /// Control API base URL of a running job (repeat for several jobs).
        #[arg(long, env = "WEIR_URL", value_delimiter = ',', conflicts_with = "storage")]
        url: Vec<String>,
        /// Checkpoint storage URL (`spec.checkpointing.storage`, e.g.
        /// `./weir-data/checkpoints` or `s3://bucket/checkpoints`): list its jobs instead.
        #[arg(long, value_name = "URL", value_parser = crate::cli_preflight::non_empty_location)]
        storage: Option<String>,
        /// Output format: `table`, `json` or `yaml` (an array of rows).
        #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
        output: OutputFormat,
        /// File holding the job secret, sent as the bearer token. Default
        /// `./weir-data/job.secret` (where `weir run` writes it).
        #[arg(long, value_name = "PATH", env = "WEIR_JOB_SECRET_FILE")]
        secret_file: Option<PathBuf>,
    },
    /// Print the status of a running job (its control API's `GET /v1/job`).
    Status {
        /// Control API base URL.
        #[arg(long, default_value = "http://127.0.0.1:8081", env = "WEIR_URL")]
        url: String,
        /// Output format: `table`, `json` or `yaml` (the `/v1/job` document).
        #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
        output: OutputFormat,
        /// File holding the job secret, sent as the bearer token. Default
        /// `./weir-data/job.secret` (where `weir run` writes it).
        #[arg(long, value_name = "PATH", env = "WEIR_JOB_SECRET_FILE")]
        secret_file: Option<PathBuf>,
    },
    /// Stop a running job without a savepoint (as SIGTERM does; `--restore latest` resumes it)
    /// and wait until it stopped.
    Cancel {
        /// Control API base URL.
        #[arg(long, default_value = "http://127.0.0.1:8081", env = "WEIR_URL")]
        url: String,
        /// How long to wait for the job to stop (greater than 0).
        #[arg(long, default_value = "60s", value_parser = positive_duration)]
        timeout: humantime::Duration,
        /// File holding the job secret, sent as the bearer token. Default
        /// `./weir-data/job.secret` (where `weir run` writes it).
        #[arg(long, value_name = "PATH", env = "WEIR_JOB_SECRET_FILE")]
        secret_file: Option<PathBuf>,
    },
    /// Print a shell completion script: `source <(weir completion bash)`, or save it where
    /// the shell loads completions (see docs/reference/cli.md).
    Completion {
        /// The shell.
        shell: clap_complete::Shell,
    },
}

/// `weir run`.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// The StreamJob manifest (YAML).
    pub file: PathBuf,
    /// Override a manifest field: `--set spec.parallelism=4` (dotted path, list indexes as `steps.0` or `steps[0]`; YAML value).
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub set: Vec<String>,
    /// Override `spec.parallelism` (1 to 256: `weir run` holds every subtask in one process).
    #[arg(long, value_parser = crate::cli_parallelism::at_least_one)]
    pub parallelism: Option<u32>,
    /// Restore from `latest` (newest completed checkpoint of the job) or a checkpoint /
    /// savepoint directory URL.
    #[arg(long)]
    pub restore: Option<String>,
    /// Override `spec.checkpointing.storage` (default `./weir-data/checkpoints`).
    #[arg(long, value_name = "URL", value_parser = crate::cli_preflight::non_empty_location)]
    pub checkpoint_dir: Option<String>,
    /// Address of the control API (`127.0.0.1:0` picks a free port; the address is printed).
    #[arg(long, default_value = "127.0.0.1:8081", env = "WEIR_LISTEN")]
    pub listen: String,
    /// After a stop-with-savepoint (or the job's end, with savepoint requests it left
    /// untaken), keep serving the control API until those results were read, at most this long.
    #[arg(long, default_value = "30s")]
    pub shutdown_grace: humantime::Duration,
    /// File holding the job secret (the control API's bearer token; workers authenticate with
    /// it). Default `./weir-data/job.secret`, generated (mode 0600) when missing.
    #[arg(long, value_name = "PATH", env = "WEIR_JOB_SECRET_FILE")]
    pub secret_file: Option<PathBuf>,
    /// Require the bearer token on `/metrics` too (`/healthz` stays open).
    #[arg(long, env = "WEIR_METRICS_AUTH")]
    pub metrics_auth: bool,
    /// Root of the local directories of `stateBackend: disk` (scratch, recreated on every
    /// start; default `<system temp dir>/weir-state-<uid>`, private to the user).
    #[arg(long, value_name = "DIR", env = "WEIR_STATE_DIR", value_parser = crate::cli_preflight::non_empty_dir)]
    pub state_dir: Option<PathBuf>,
}

/// `weir coordinator`.
#[derive(clap::Args, Debug)]
pub struct CoordinatorArgs {
    /// The StreamJob manifest (YAML).
    #[arg(long, env = "WEIR_JOB_FILE")]
    pub job: PathBuf,
    /// Override a manifest field (as for `weir run`).
    #[arg(long = "set", value_name = "PATH=VALUE")]
    pub set: Vec<String>,
    /// Override `spec.parallelism` (1 to the job's maxParallelism; the job waits for that many task slots).
    #[arg(long, value_parser = crate::cli_parallelism::at_least_one)]
    pub parallelism: Option<u32>,
    /// Restore point of the first deployment: `none`, `latest`, or a checkpoint / savepoint
    /// URL. A restarted coordinator of the same `--run-id` resumes from its run's newest
    /// checkpoint instead.
    #[arg(long, env = "WEIR_RESTORE", default_value = "none")]
    pub restore: String,
    /// Override `spec.checkpointing.storage`.
    #[arg(long, value_name = "URL", env = "WEIR_CHECKPOINT_DIR", value_parser = crate::cli_preflight::non_empty_location)]
    pub checkpoint_dir: Option<String>,
    /// Control API address.
    #[arg(long, default_value = "0.0.0.0:8081", env = "WEIR_LISTEN")]
    pub listen: String,
    /// Address workers connect to.
    #[arg(long, default_value = "0.0.0.0:6123", env = "WEIR_RPC_LISTEN")]
    pub rpc_listen: String,
    /// Run id, stable across restarts of this coordinator (default: random).
    #[arg(long, env = "WEIR_RUN_ID")]
    pub run_id: Option<String>,
    /// Heartbeat interval (greater than 0).
    #[arg(long, default_value = "1s", env = "WEIR_HEARTBEAT_INTERVAL", value_parser = positive_duration)]
    pub heartbeat_interval: humantime::Duration,
    /// A worker is lost after this long without a message (greater than 0).
    #[arg(long, default_value = "15s", env = "WEIR_HEARTBEAT_TIMEOUT", value_parser = positive_duration)]
    pub heartbeat_timeout: humantime::Duration,
    /// Delay before the first restart (doubles per restart in the window).
    #[arg(long, default_value = "1s", env = "WEIR_RESTART_BACKOFF")]
    pub restart_backoff: humantime::Duration,
    /// Maximum delay between restarts.
    #[arg(long, default_value = "60s", env = "WEIR_RESTART_MAX_BACKOFF")]
    pub restart_max_backoff: humantime::Duration,
    /// Maximum restarts within the window before the job is FAILED.
    #[arg(long, default_value_t = 10, env = "WEIR_RESTART_MAX_ATTEMPTS")]
    pub restart_max_attempts: usize,
    /// The restart window (greater than 0).
    #[arg(long, default_value = "10m", env = "WEIR_RESTART_WINDOW", value_parser = positive_duration)]
    pub restart_window: humantime::Duration,
    /// Exit when the job ends (FINISHED, STOPPED: 0; FAILED: 1) instead of serving its final
    /// status until terminated.
    #[arg(long, env = "WEIR_EXIT_ON_FINISH")]
    pub exit_on_finish: bool,
    /// File holding the job secret (the control API's bearer token; workers authenticate with
    /// it). Default `./weir-data/job.secret`, generated (mode 0600) when missing.
    #[arg(long, value_name = "PATH", env = "WEIR_JOB_SECRET_FILE")]
    pub secret_file: Option<PathBuf>,
    /// Require the bearer token on `/metrics` too (`/healthz` stays open).
    #[arg(long, env = "WEIR_METRICS_AUTH")]
    pub metrics_auth: bool,
}

/// `weir worker`.
#[derive(clap::Args, Debug)]
pub struct WorkerArgs {
    /// Coordinator RPC address (`host:port`).
    #[arg(long, env = "WEIR_COORDINATOR")]
    pub coordinator: String,
    /// Task slots offered (at least 1).
    #[arg(long, default_value_t = 1, env = "WEIR_SLOTS", value_parser = crate::cli_parallelism::at_least_one)]
    pub slots: u32,
    /// Data listener address.
    #[arg(long, default_value = "0.0.0.0:6124", env = "WEIR_DATA_LISTEN")]
    pub data_listen: String,
    /// Address other workers reach the data listener at (default: the bound address).
    #[arg(long, env = "WEIR_ADVERTISE")]
    pub advertise: Option<String>,
    /// Worker id (default: `$HOSTNAME`, else `worker-<pid>`).
    #[arg(long, env = "WEIR_WORKER_ID")]
    pub worker_id: Option<String>,
    /// Heartbeat interval (greater than 0).
    #[arg(long, default_value = "1s", env = "WEIR_HEARTBEAT_INTERVAL", value_parser = positive_duration)]
    pub heartbeat_interval: humantime::Duration,
    /// The coordinator is lost after this long without a message (greater than 0).
    #[arg(long, default_value = "15s", env = "WEIR_HEARTBEAT_TIMEOUT", value_parser = positive_duration)]
    pub heartbeat_timeout: humantime::Duration,
    /// Health and metrics endpoint (`/healthz`, `/metrics`); `none` disables it.
    #[arg(long, default_value = "0.0.0.0:8082", env = "WEIR_WORKER_LISTEN")]
    pub listen: String,
    /// File holding the job secret (the coordinator's): the worker proves it holds it to the
    /// coordinator and to other workers. Default `./weir-data/job.secret`.
    #[arg(long, value_name = "PATH", env = "WEIR_JOB_SECRET_FILE")]
    pub secret_file: Option<PathBuf>,
    /// Root of the local directories of `stateBackend: disk` (scratch, recreated on every
    /// start; default `<system temp dir>/weir-state-<uid>`, private to the user).
    #[arg(long, value_name = "DIR", env = "WEIR_STATE_DIR", value_parser = crate::cli_preflight::non_empty_dir)]
    pub state_dir: Option<PathBuf>,
}

/// `weir savepoint ...`.
#[derive(Subcommand, Debug)]
pub enum SavepointCmd {
    /// Trigger a savepoint on a running job through its control API and wait for it.
    Trigger {
        /// Control API base URL.
        #[arg(long, default_value = "http://127.0.0.1:8081")]
        url: String,
        /// Target directory URL (default: the job's `spec.savepoints.directory`). The job
        /// writes it: a relative path is resolved against the job's working directory, not
        /// this command's.
        #[arg(long)]
        directory: Option<String>,
        /// Stop the job after the savepoint (stop-with-savepoint).
        #[arg(long)]
        stop: bool,
        /// How long to wait (greater than 0).
        #[arg(long, default_value = "10m", value_parser = positive_duration)]
        timeout: humantime::Duration,
        /// File holding the job secret, sent as the bearer token. Default
        /// `./weir-data/job.secret` (where `weir run` writes it).
        #[arg(long, value_name = "PATH", env = "WEIR_JOB_SECRET_FILE")]
        secret_file: Option<PathBuf>,
        /// Output format: `table` (the savepoint's path), `json` or `yaml` (the trigger's
        /// final status, as `GET /v1/savepoints/{triggerId}`).
        #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
        output: OutputFormat,
    },
    /// Show what a checkpoint or savepoint holds (verifying every file).
    Inspect {
        /// Directory URL of the checkpoint or savepoint.
        path: String,
        /// Output format: `table` (by operator uid, then subtask; sizes human-readable), `json`
        /// or `yaml` (raw numbers: bytes, milliseconds).
        #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
        output: OutputFormat,
        /// Same as `-o json` (kept for scripts written before `-o`).
        #[arg(long, conflicts_with = "output")]
        json: bool,
    },
}

/// `weir checkpoints ...`.
#[derive(Subcommand, Debug)]
pub enum CheckpointsCmd {
    /// List the checkpoints of a job in a checkpoint storage.
    List {
        /// Checkpoint storage URL.
        storage: String,
        /// Job name.
        #[arg(long)]
        job: String,
        /// Output format: `table` (aligned columns with a header), `json` or `yaml` (an array
        /// of objects).
        #[arg(short = 'o', long = "output", value_enum, default_value = "table")]
        output: OutputFormat,
    },
}

/// Checks a log filter so a typo is refused at start instead of silently logging nothing.
fn parse_log_filter(s: &str) -> Result<String, String> {
    crate::logging::parse_filter(s, "--log-filter / WEIR_LOG").map(|_| s.to_string())
}

/// Initializes logging on stderr ([`crate::logging`]): `RUST_LOG`, else `--log-filter` /
/// `WEIR_LOG`, else `info`.
///
/// Errors: an invalid `RUST_LOG`, named.
pub fn init_tracing(cli: &Cli) -> Result<(), String> {
    crate::logging::init(&LogSettings {
        format: cli.log_format,
        configured_filter: cli.log_filter.clone(),
        default_filter: "info",
        stream: LogStream::Stderr,
    })
}

/// Runs the CLI; returns the process exit code.
pub async fn main(cli: Cli) -> i32 {
    let r = match cli.command {
        Command::Run(a) => run(a).await,
        Command::Coordinator(a) => coordinator(a).await,
        Command::Worker(a) => worker(a).await,
        Command::Savepoint(SavepointCmd::Trigger {
            url,
            directory,
            stop,
            timeout,
            secret_file,
            output,
        }) => match secret::for_client(secret_file.as_deref()) {
            Ok(token) => {
                let c = crate::control::client::Client::new(&url, token);
                // Ask for the job first, as `weir cancel` does, so that nothing answering reads
                // as it does for every other command (with what to do), not as a bare HTTP error.
                match c.job().await {
                    Ok(_) => c
                        .savepoint_and_wait(&SavepointRequest { directory, stop }, timeout.into())
                        .await
                        .and_then(|s| output::print_data(&s, output, || vec![s.path.clone().unwrap_or_default()])),
                    Err(e) => Err(crate::cli_control::failure_at(
                        &format!("cannot reach the job's control API at {url}"),
                        &e,
                    )),
                }
            }
            Err(e) => Err(e),
        },
        Command::Savepoint(SavepointCmd::Inspect { path, output, json }) => {
            let format = if json { OutputFormat::Json } else { output };
            crate::cli_inspect::inspect(&path, format).await
        }
        Command::List {
            url,
            storage,
            output,
            secret_file,
        } => match storage {
            Some(storage) => crate::cli_list::lineages(&storage, output).await,
            None => {
                let urls = if url.is_empty() {
                    vec!["http://127.0.0.1:8081".to_string()]
                } else {
                    url
                };
                match secret::for_client(secret_file.as_deref()) {
                    Ok(token) => crate::cli_list::running(&urls, token, output).await,
                    Err(e) => Err(e),
                }
            }
        },
        Command::Checkpoints(CheckpointsCmd::List { storage, job, output }) => {
            crate::cli_checkpoints::list(&storage, &job, output).await
        }
        Command::Completion { shell } => completion(shell),
        Command::Status {
            url,
            output,
            secret_file,
        } => match secret::for_client(secret_file.as_deref()) {
            Ok(token) => crate::cli_control::status(&url, token, output).await,
            Err(e) => Err(e),
        },
        Command::Cancel {
            url,
            timeout,
            secret_file,
        } => match secret::for_client(secret_file.as_deref()) {
            Ok(token) => crate::cli_control::cancel(&url, token, timeout.into()).await,
            Err(e) => Err(e),
        },
    };
    match r {
        Ok(()) => 0,
        Err(e) => {
            tracing::error!(target: "weir", "{e}");
            1
        }
    }
}

async fn run(a: RunArgs) -> Result<(), String> {
    let stop = crate::signals::install()?;
    let mut sets = a.set.clone();
    if let Some(p) = a.parallelism {
        sets.push(format!("spec.parallelism={p}"));
    }
    let mut job = crate::cli_parallelism::check_parallelism(
        job::load_manifest(&a.file, &sets),
        &crate::cli_parallelism::ParallelismSource::of(a.parallelism, &a.set),
        crate::cli_parallelism::Runner::Local,
    )
    .map_err(|e| format!("{}: {e}", a.file.display()))?;
    job.origins = job::origins::ValueOrigins::of(a.parallelism, &a.set);
    if a.restore.is_none()
        && let Some(path) = &job.initial_savepoint_path
    {
        tracing::warn!(
            target: "weir",
            "{}: spec.initialSavepointPath ({path}) is where the operator first starts this StreamJob from; \
             weir run does not read it and starts with empty state: pass --restore {path} to start from it",
            a.file.display()
        );
    }
    let restore = parse_restore_arg(a.restore.as_deref().unwrap_or("none"), local_path_exists)?;
    crate::cli_preflight::check_local_outputs(&job, a.checkpoint_dir.as_deref())
        .map_err(|e| format!("{}: {e}", a.file.display()))?;
    let local_bytes: u64 = local_input_bytes(&job);
    // The port first: a second `weir run` on the same port fails before it restores anything.
    let listener = crate::control::server::bind(&a.listen).await?;
    let opts = RunOptions {
        restore,
        checkpoint_storage: a.checkpoint_dir.clone(),
        state_dir: a.state_dir.clone(),
    };
    let prepared = tokio::select! {
        p = exec::prepare(job, opts) => p?,
        _ = stop.requested() => {
            tracing::info!(target: "weir", "stopped before the job started");
            return Ok(());
        }
    };
    let handle = prepared.handle.clone();
    handle.shared.lock().expect("lock").suspend = stop.token();
    let auth = ControlAuth {
        secret: secret::for_server(a.secret_file.as_deref())?,
        protect_metrics: a.metrics_auth,
    };
    let server = crate::control::server::serve_on(listener, handle.clone(), auth)?;
    let addr = server.addr;
    tracing::info!(
        target: "weir",
        "job {} ({}) control API on http://{addr}",
        handle.job,
        handle.job_id
    );
    let bar = (std::io::stderr().is_terminal() && local_bytes > 0).then(|| {
        let b = indicatif::ProgressBar::new(local_bytes);
        b.set_style(
            indicatif::ProgressStyle::with_template("{spinner} {bytes}/{total_bytes} {wide_bar} {eta} {msg}")
                .unwrap_or_else(|_| indicatif::ProgressStyle::default_bar()),
        );
        let (b2, read) = (b.clone(), handle.bytes_read.clone());
        tokio::spawn(async move {
            loop {
                b2.set_position(read.load(std::sync::atomic::Ordering::Relaxed));
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        });
        b
    });
    let outcome = prepared.run().await;
    if matches!(
        outcome,
        Ok(crate::checkpoint::coordinator::Outcome::Stopped(_) | crate::checkpoint::coordinator::Outcome::Finished)
    ) {
        tokio::select! {
            _ = crate::control::server::linger_until_stop_delivered(&handle, a.shutdown_grace.into()) => {}
            _ = stop.requested() => {}
        }
    }
    server.shutdown(Duration::from_secs(5)).await;
    if let Some(b) = bar {
        b.finish_and_clear();
    }
    let last = handle.shared.lock().expect("lock").history.completed.last().cloned();
    let log_summary = || crate::summary::log_run_summary(&handle);
    // The command that goes on from what this run committed (after a SIGTERM, a stop with a
    // savepoint or a failure).
    let resume = || {
        let restored_from = handle.shared.lock().expect("lock").restored_from.clone();
        let argv: Vec<String> = std::env::args().collect();
        resume_hint(
            &argv,
            last.as_ref()
                .map(|c| (snapshot_kind_word(c.kind), c.id, c.path.as_str())),
            restored_from.as_deref(),
        )
    };
    match outcome {
        Ok(o) => {
            match o {
                crate::checkpoint::coordinator::Outcome::Finished => {
                    tracing::info!(target: "weir", "job {} finished", handle.job)
                }
                crate::checkpoint::coordinator::Outcome::Stopped(p) => {
                    tracing::info!(target: "weir", "job {} stopped with savepoint {p}", handle.job);
                    tracing::info!(target: "weir", "{}", resume());
                }
                crate::checkpoint::coordinator::Outcome::Suspended => {
                    let hint = resume();
                    tracing::info!(
                        target: "weir",
                        "job {} suspended on {}: nothing is committed beyond the last completed checkpoint",
                        handle.job,
                        stop.signal_name().unwrap_or("request")
                    );
                    tracing::info!(target: "weir", "{hint}");
                    log_summary();
                    return Ok(());
                }
            }
            if let Some(c) = &last {
                tracing::info!(target: "weir", "last {} {} at {}", snapshot_kind_word(c.kind), c.id, c.path);
            }
            log_summary();
            Ok(())
        }
        Err(e) => {
            log_summary();
            // A damaged table file whose checkpoint copy is damaged too: the last checkpoint
            // references it, so a command resuming from it would fail on the same file.
            if e.contains(crate::checkpoint::native_upload::NO_REFERENCING_CHECKPOINT_RESTORES) {
                return Err(format!("job {} failed: {e}", handle.job));
            }
            let hint = resume();
            Err(format!(
                "job {} failed: {e}; once its cause is fixed, {hint}",
                handle.job
            ))
        }
    }
}

async fn coordinator(a: CoordinatorArgs) -> Result<(), String> {
    let mut sets = a.set.clone();
    if let Some(p) = a.parallelism {
        sets.push(format!("spec.parallelism={p}"));
    }
    crate::cluster::coordinator::run(crate::cluster::coordinator::CoordinatorOptions {
        job_file: a.job,
        parallelism_source: crate::cli_parallelism::ParallelismSource::of(a.parallelism, &a.set),
        origins: job::origins::ValueOrigins::of(a.parallelism, &a.set),
        sets,
        restore: parse_restore_arg(&a.restore, local_path_exists)?,
        checkpoint_dir: a.checkpoint_dir,
        listen: a.listen,
        rpc_listen: a.rpc_listen,
        run_id: a.run_id.unwrap_or_else(|| format!("{:016x}", rand::random::<u64>())),
        heartbeat_interval: a.heartbeat_interval.into(),
        heartbeat_timeout: a.heartbeat_timeout.into(),
        restart: crate::cluster::restart::RestartPolicy {
            initial_backoff: a.restart_backoff.into(),
            max_backoff: a.restart_max_backoff.into(),
            multiplier: 2.0,
            max_restarts: a.restart_max_attempts,
            window: a.restart_window.into(),
        },
        exit_on_finish: a.exit_on_finish,
        secret_file: a.secret_file,
        protect_metrics: a.metrics_auth,
        stop: crate::signals::install()?,
    })
    .await
}

async fn worker(a: WorkerArgs) -> Result<(), String> {
    let worker_id = a
        .worker_id
        .or_else(|| std::env::var("HOSTNAME").ok().filter(|h| !h.is_empty()))
        .unwrap_or_else(|| format!("worker-{}", std::process::id()));
    crate::cluster::worker::run(crate::cluster::worker::WorkerConfig {
        coordinator: a.coordinator,
        slots: a.slots,
        data_listen: a.data_listen,
        advertise: a.advertise,
        worker_id,
        heartbeat_interval: a.heartbeat_interval.into(),
        heartbeat_timeout: a.heartbeat_timeout.into(),
        listen: (a.listen != "none").then_some(a.listen),
        secret: secret::for_client(a.secret_file.as_deref())?,
        stop: crate::signals::install()?,
        state_dir: a.state_dir,
    })
    .await
}

/// Prints the completion script of `shell` for `weir` (written whole, so a closed stdout ends
/// quietly like any other output).
fn completion(shell: clap_complete::Shell) -> Result<(), String> {
    let mut script = Vec::new();
    clap_complete::generate(
        shell,
        &mut <Cli as clap::CommandFactory>::command(),
        "weir",
        &mut script,
    );
    output::print_line(String::from_utf8_lossy(&script).trim_end())
}

fn local_input_bytes(job: &job::Job) -> u64 {
    job.operators
        .iter()
        .filter_map(|o| match &o.kind {
            OperatorKind::FileSource(s) if !s.path.starts_with("s3://") => glob::glob(&s.path).ok(),
            _ => None,
        })
        .flatten()
        .filter_map(|p| p.ok()?.metadata().ok().map(|m| m.len()))
        .sum()
}
