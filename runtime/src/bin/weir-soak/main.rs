//! `weir-soak`: a chaos soak for Weir's exactly-once promise (docs/reliability.md).
//!
//! Each trial runs the word count over a small slice of the shared texts with the real `weir`
//! binary (found next to this executable), through a random sequence drawn from the trial's
//! seed: kill -9 of `weir run`, of a worker or of the coordinator; restore `latest`;
//! stop-with-savepoint and restore at another parallelism; non-stopping savepoints followed by
//! kills; S3 faults injected by a proxy in front of moto. It then compares every committed
//! output record with the expected multiset computed from the input, prints per mode the
//! trials, kills, faults and records lost, duplicated and foreign, and the seed of every failing
//! trial, and exits 1 if any trial lost, duplicated or invented a record.
//!
//! `weir-soak --mode M --seed S --trials 1` replays trial S of mode M (trial i of a run uses
//! seed S + i).

mod cluster;
mod expected;
mod moto;
mod plan;
mod procs;
mod proxy;
mod report;
mod shapes;
mod trial;

use clap::Parser;
use plan::Mode;
use report::{ModeTotals, TrialLine};
use std::path::PathBuf;
use std::time::Instant;

/// Chaos soak: random kill -9 / savepoint / rescale / S3-fault sequences against the real
/// `weir` binary, with every committed record checked against an independent word count.
#[derive(Parser, Debug)]
#[command(name = "weir-soak", version)]
struct Args {
    /// Trials per mode.
    #[arg(long, default_value_t = 10)]
    trials: u64,
    /// Seed of the first trial (trial i uses seed + i); default: from the clock (printed).
    #[arg(long)]
    seed: Option<u64>,
    /// What to run: local, s3, cluster, rescale, storage-faults, unaligned, windows,
    /// timeouts, unaligned-faults, at-least-once, at-most-once, cluster-unaligned,
    /// cluster-at-most-once, or all of them in turn.
    #[arg(long, default_value = "all")]
    mode: ModeArg,
    /// Directory for trial directories (input, job, process logs, local storage); failing
    /// trials' directories are kept, and incomplete ones', passing ones removed unless --keep.
    #[arg(long, default_value_os_t = std::env::temp_dir().join("weir-soak"))]
    work_dir: PathBuf,
    /// Keep the directories of passing trials too.
    #[arg(long)]
    keep: bool,
    /// Print every trial's event log, not only failing ones'.
    #[arg(long)]
    verbose: bool,
    /// Directory holding `text/*.txt` (default: ../shared/data from the repository root).
    #[arg(long, env = "WEIR_DATA_DIR")]
    data_dir: Option<PathBuf>,
    /// The `weir` binary (default: next to this executable).
    #[arg(long)]
    weir: Option<PathBuf>,
    /// A trial still running after this long is abandoned and counted as incomplete.
    #[arg(long, default_value = "300s")]
    trial_timeout: humantime::Duration,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, clap::ValueEnum)]
enum ModeArg {
    Local,
    S3,
    Cluster,
    Rescale,
    StorageFaults,
    Unaligned,
    Windows,
    Timeouts,
    UnalignedFaults,
    AtLeastOnce,
    AtMostOnce,
    ClusterUnaligned,
    ClusterAtMostOnce,
    All,
}

impl ModeArg {
    fn modes(self) -> Vec<Mode> {
        match self {
            ModeArg::Local => vec![Mode::Local],
            ModeArg::S3 => vec![Mode::S3],
            ModeArg::Cluster => vec![Mode::Cluster],
            ModeArg::Rescale => vec![Mode::Rescale],
            ModeArg::StorageFaults => vec![Mode::StorageFaults],
            ModeArg::Unaligned => vec![Mode::Unaligned],
            ModeArg::Windows => vec![Mode::Windows],
            ModeArg::Timeouts => vec![Mode::Timeouts],
            ModeArg::UnalignedFaults => vec![Mode::UnalignedFaults],
            ModeArg::AtLeastOnce => vec![Mode::AtLeastOnce],
            ModeArg::AtMostOnce => vec![Mode::AtMostOnce],
            ModeArg::ClusterUnaligned => vec![Mode::ClusterUnaligned],
            ModeArg::ClusterAtMostOnce => vec![Mode::ClusterAtMostOnce],
            ModeArg::All => Mode::ALL.to_vec(),
        }
    }
}

fn read_texts(data_dir: &std::path::Path) -> Result<Vec<(String, String)>, String> {
    let text_dir = data_dir.join("text");
    let rd = std::fs::read_dir(&text_dir).map_err(|e| {
        format!(
            "reading {}: {e} (set --data-dir or WEIR_DATA_DIR to the directory holding text/)",
            text_dir.display()
        )
    })?;
    let mut texts = vec![];
    for e in rd.flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "txt") {
            let t = std::fs::read_to_string(&p).map_err(|e| format!("reading {}: {e}", p.display()))?;
            texts.push((e.file_name().to_string_lossy().into_owned(), t));
        }
    }
    texts.sort();
    if texts.is_empty() {
        return Err(format!("no *.txt in {}", text_dir.display()));
    }
    Ok(texts)
}

/// The GitHub event files `gharchive/*.jsonl` of the data directory, sorted by name (by time).
fn read_events(data_dir: &std::path::Path) -> Result<Vec<(String, String)>, String> {
    let dir = data_dir.join("gharchive");
    let rd = std::fs::read_dir(&dir).map_err(|e| {
        format!(
            "reading {}: {e} (the windows mode needs gharchive/*.jsonl under --data-dir)",
            dir.display()
        )
    })?;
    let mut files = vec![];
    for e in rd.flatten() {
        let p = e.path();
        if p.extension().is_some_and(|x| x == "jsonl") {
            let t = std::fs::read_to_string(&p).map_err(|e| format!("reading {}: {e}", p.display()))?;
            files.push((e.file_name().to_string_lossy().into_owned(), t));
        }
    }
    files.sort();
    Ok(files)
}

fn default_paths(args: &Args) -> Result<(PathBuf, PathBuf), String> {
    let exe = std::env::current_exe().map_err(|e| format!("locating weir-soak: {e}"))?;
    let weir = match &args.weir {
        Some(w) => w.clone(),
        None => exe.with_file_name("weir"),
    };
    if !weir.is_file() {
        return Err(format!(
            "{} not found: build it (cargo build -p weir-runtime --bin weir) or pass --weir",
            weir.display()
        ));
    }
    let data = match &args.data_dir {
        Some(d) => d.clone(),
        None => PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../../shared/data"),
    };
    Ok((weir, data))
}

async fn soak(args: Args) -> Result<bool, String> {
    let (weir, data_dir) = default_paths(&args)?;
    let texts = read_texts(&data_dir)?;
    let modes = args.mode.modes();
    let events = if modes.contains(&Mode::Windows) {
        read_events(&data_dir)?
    } else {
        vec![]
    };
    let seed = args.seed.unwrap_or_else(|| {
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(1, |d| d.as_secs())
    });
    let run_dir = args.work_dir.join(format!("run-{seed}-{}", std::process::id()));
    std::fs::create_dir_all(&run_dir).map_err(|e| format!("creating {}: {e}", run_dir.display()))?;
    println!(
        "weir-soak: modes {:?}, {} trials each, seed {seed}, weir {}, trial directories under {}",
        modes.iter().map(|m| m.name()).collect::<Vec<_>>(),
        args.trials,
        weir.display(),
        run_dir.display()
    );
    let s3 = if modes.iter().any(|m| m.uses_s3()) {
        Some(moto::S3Env::start(&run_dir).await?)
    } else {
        None
    };
    // One job secret for the soak's jobs: the coordinator, workers and `weir run` require it
    // and `weir savepoint trigger` sends it (all through WEIR_JOB_SECRET_FILE); the soak's own
    // control API client sends it as a bearer token.
    let secret_file = run_dir.join("job.secret");
    let (secret, _) = weir_runtime::security::secret::JobSecret::load_or_create(&secret_file)?;
    let mut auth = reqwest::header::HeaderMap::new();
    auth.insert(
        reqwest::header::AUTHORIZATION,
        format!("Bearer {}", secret.expose())
            .parse()
            .map_err(|e| format!("job secret as a header: {e}"))?,
    );
    let http = reqwest::Client::builder()
        .default_headers(auth)
        .build()
        .map_err(|e| format!("control API client: {e}"))?;
    let env = trial::Env {
        weir,
        texts: &texts,
        events: &events,
        s3: s3.as_ref(),
        http,
        secret_file,
        trial_timeout: args.trial_timeout.into(),
    };
    let started = Instant::now();
    let mut totals: Vec<ModeTotals> = vec![];
    for mode in modes {
        let mut t = ModeTotals::new(mode);
        for i in 0..args.trials {
            let trial_seed = seed.wrapping_add(i);
            let dir = run_dir.join(format!("{}-{trial_seed}", mode.name()));
            let t0 = Instant::now();
            let outcome = trial::run(&env, mode, trial_seed, &dir).await?;
            let line = TrialLine::new(mode, trial_seed, &outcome, t0.elapsed());
            println!("{}", line.render());
            // An incomplete trial lost nothing but did not finish: its event log and process
            // logs are kept like a failing trial's, to find out why.
            let keep_for_diagnosis = !line.passed() || !outcome.completed;
            if keep_for_diagnosis || args.verbose {
                for l in &outcome.log {
                    println!("    {l}");
                }
                for e in &outcome.diff.examples {
                    println!("    {e}");
                }
            }
            if keep_for_diagnosis {
                println!("    kept: {}", dir.display());
            } else if !args.keep {
                let _ = std::fs::remove_dir_all(&dir);
            }
            t.add(&line);
        }
        totals.push(t);
    }
    println!();
    print!("{}", report::summary(&totals, started.elapsed()));
    Ok(totals.iter().all(|t| t.failing.is_empty()))
}

/// Resolves on SIGINT or SIGTERM.
async fn interrupted() {
    let term = async {
        match tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()) {
            Ok(mut s) => {
                s.recv().await;
            }
            Err(_) => std::future::pending().await,
        }
    };
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term => {}
    }
}

#[tokio::main]
async fn main() {
    let args = Args::parse();
    // On SIGINT/SIGTERM the soak future is dropped first: its `weir` children and moto are
    // killed on drop, so nothing is left running.
    let result = tokio::select! {
        r = soak(args) => Some(r),
        _ = interrupted() => None,
    };
    let Some(result) = result else {
        eprintln!("weir-soak: interrupted; child processes killed");
        std::process::exit(130);
    };
    match result {
        Ok(true) => {}
        Ok(false) => std::process::exit(1),
        Err(e) => {
            eprintln!("weir-soak: error: {e}");
            std::process::exit(2);
        }
    }
}
