//! The benchmark that decides (issue 10): Weir against Apache Flink 2.3 in the same
//! invocation, on the same machine, interleaved (weir, flink, weir, flink, ...), on keyed
//! count (integer and string keys, p=1 and p=2), word count, Nexmark q0–q2 and Weir's own
//! checkpoint overhead; plus, for keyed count at p=1, a plain single-threaded `HashMap` count
//! in this process as the machine's baseline (as `keyed_count.rs`).
//!
//! Run (release build; Flink is installed into `target/flink-venv` on first use):
//!
//! ```text
//! cargo bench -p weir-runtime --bench vs_flink -- [--with-flink] [--runs N] [--only NAME]...
//!     [--keyed-records N] [--words N] [--bids N] [--timeout-seconds S]
//! ```
//!
//! Sizes also come from `WEIR_BENCH_RUNS`, `WEIR_BENCH_KEYED_RECORDS`, `WEIR_BENCH_WORDS`,
//! `WEIR_BENCH_BIDS`. Defaults (3 runs; 10M keyed records, 10M words, 5M bids) are sized for a
//! full run with Flink of about 20–25 minutes on an idle 2-core machine (an estimate from the
//! per-record times of both sides plus Flink's ~10 s start per run; under heavy load it takes
//! several times longer: docs/benchmarks.md).
//!
//! Why a `harness = false` bench and not a bin: `cargo bench` builds it with the release
//! profile together with the `weir` binary it measures (`CARGO_BIN_EXE_weir`), `cargo test`
//! never runs it, and `cargo clippy --all-targets` still checks it. Weir is run as a black box
//! (`weir run manifest.yaml`), like Flink, so the bench measures the shipped binary and keeps
//! working whatever the runtime's internals become.
//!
//! Measured per run (see `measure.rs`): wall seconds, job seconds (Weir: the process's wall
//! time, start-up included; Flink: the job's net runtime, the JVM start and SQL planning
//! excluded), records/s = records / job seconds, CPU seconds (user + system of the whole
//! process tree, from `wait4`'s `rusage`, the JVM's start and JIT included), records per
//! CPU-second, and peak RSS (largest `ru_maxrss` in the tree). Without `--with-flink` the bench
//! runs Weir and the baseline only and says how to include Flink.

mod data;
mod flink;
mod measure;
mod report;
mod workloads;

use clap::Parser;
use report::RunResult;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::{Duration, Instant};
use workloads::{KEYS, SEED, Side, Workload};

/// Command line (after `--`).
#[derive(Parser, Debug)]
#[command(name = "vs_flink", about = "Weir vs Apache Flink, same run, interleaved")]
struct Args {
    /// Also run Apache Flink (installs apache-flink from PyPI into target/flink-venv once).
    #[arg(long)]
    with_flink: bool,
    /// Runs of each side of each workload (at least 1; issue 10 asks for 3 or more).
    #[arg(long, default_value_t = 3, env = "WEIR_BENCH_RUNS", value_parser = clap::value_parser!(u32).range(1..))]
    runs: u32,
    /// Run only workloads whose name contains this (repeatable).
    #[arg(long)]
    only: Vec<String>,
    /// Records of keyed count.
    #[arg(long, default_value_t = 10_000_000, env = "WEIR_BENCH_KEYED_RECORDS")]
    keyed_records: u64,
    /// Records of the checkpoint-overhead runs: enough for several periodic checkpoints (at
    /// 7-12M records/s, 60M records run 5-9 s; each run prints how many checkpoints it took).
    #[arg(long, default_value_t = 60_000_000, env = "WEIR_BENCH_CHECKPOINT_RECORDS")]
    checkpoint_records: u64,
    /// Minimum words of the word-count input (the text is repeated to reach it).
    #[arg(long, default_value_t = 10_000_000, env = "WEIR_BENCH_WORDS")]
    words: u64,
    /// Bids of the Nexmark input file.
    #[arg(long, default_value_t = 5_000_000, env = "WEIR_BENCH_BIDS")]
    bids: u64,
    /// A run taking longer than this is killed and reported as failed.
    #[arg(long, default_value_t = 900)]
    timeout_seconds: u64,
    /// Passed by `cargo bench`; ignored.
    #[arg(long, hide = true)]
    bench: bool,
}

/// Paths the bench uses, all under the repository root.
struct Paths {
    root: PathBuf,
    data: PathBuf,
    runs: PathBuf,
}

impl Paths {
    fn new() -> std::io::Result<Paths> {
        let root = Path::new(env!("CARGO_MANIFEST_DIR"))
            .parent()
            .expect("runtime/ has a parent")
            .to_path_buf();
        let data = root.join("target/bench-data");
        let runs = data.join("runs");
        std::fs::create_dir_all(&runs)?;
        Ok(Paths { root, data, runs })
    }
}

/// Copies the `weir` binary cargo built for this bench into `target/bench-data/weir-<pid>` and
/// checks that it runs a job ending in a `discard` sink.
///
/// Why: several worktrees may share one `CARGO_TARGET_DIR`. Their `weir-runtime` units have the
/// same artifact names, and cargo can take another worktree's newer build for a fresh one of
/// this tree, or replace `release/weir` while the bench runs. The private copy cannot change
/// under the bench; the check catches a binary built from a tree without the discard sink.
fn private_weir(paths: &Paths) -> Result<PathBuf, String> {
    let built = Path::new(env!("CARGO_BIN_EXE_weir"));
    // Per process: a second bench running at the same time must not overwrite a running copy.
    let copy = paths.data.join(format!("weir-{}", std::process::id()));
    std::fs::copy(built, &copy).map_err(|e| format!("copying {} to {}: {e}", built.display(), copy.display()))?;
    let manifest = paths.runs.join(format!("preflight-{}.yaml", std::process::id()));
    let checkpoints = paths.runs.join(format!("preflight-{}-checkpoints", std::process::id()));
    let job = format!(
        "apiVersion: weir.dev/v1alpha1\nkind: StreamJob\nmetadata: {{ name: preflight }}\nspec:\n  checkpointing: {{ storage: \"{}\" }}\n  job:\n    steps:\n      - source: {{ generator: {{ count: 1000 }} }}\n      - sink: {{ discard: {{}} }}\n",
        checkpoints.display()
    );
    std::fs::write(&manifest, job).map_err(|e| format!("{}: {e}", manifest.display()))?;
    let out = Command::new(&copy)
        .arg("run")
        .arg(&manifest)
        .args(["--listen", "127.0.0.1:0"])
        .output()
        .map_err(|e| format!("running {}: {e}", copy.display()))?;
    let _ = std::fs::remove_dir_all(&checkpoints);
    if !out.status.success() {
        return Err(format!(
            "{} (built as {}) cannot run a job with a discard sink; it was probably built from another \
             worktree sharing the target directory: touch runtime/src and rebuild.\n{}",
            copy.display(),
            built.display(),
            String::from_utf8_lossy(&out.stderr)
        ));
    }
    Ok(copy)
}

/// Everything needed to run one side.
struct Runner {
    paths: Paths,
    weir: PathBuf,
    flink: Option<(PathBuf, PathBuf, PathBuf)>,
    timeout: Duration,
}

impl Runner {
    fn run(&self, workload: &Workload, label: &str, side: &Side, round: u32) -> Result<Option<RunResult>, String> {
        let tag = format!("{}-{}-{round}", workload.name, label.replace(' ', "-"));
        let checkpoints = self.paths.runs.join(format!("{tag}-checkpoints"));
        let log = self.paths.runs.join(format!("{tag}.log"));
        let _ = std::fs::remove_dir_all(&checkpoints);
        let result = match side {
            Side::Baseline { integer_keys } => baseline(workload, label, *integer_keys, round),
            Side::Weir { manifest } => {
                let path = self.paths.runs.join(format!("{tag}.yaml"));
                std::fs::write(
                    &path,
                    manifest.replace("{checkpoints}", &checkpoints.display().to_string()),
                )
                .map_err(|e| format!("{}: {e}", path.display()))?;
                let mut command = Command::new(&self.weir);
                command
                    .arg("run")
                    .arg(&path)
                    .args(["--listen", "127.0.0.1:0"])
                    .current_dir(&self.paths.root);
                let m = measure::run(&mut command, &log, self.timeout).map_err(|e| format!("weir: {e}"))?;
                if !m.success {
                    return Err(format!(
                        "weir failed on {}: see {}",
                        workload.name,
                        log.with_extension("err").display()
                    ));
                }
                if workload.name == workloads::CHECKPOINT_OVERHEAD {
                    report_checkpoints(&log.with_extension("err"), label, round);
                }
                RunResult::measured(&workload.name, label, round, workload.records, &m, m.wall_seconds)
            }
            Side::Flink { job } => {
                let Some((python, driver, java_home)) = &self.flink else {
                    return Ok(None);
                };
                let mut job = job.clone();
                job["checkpoints"] = serde_json::Value::String(checkpoints.display().to_string());
                let path = self.paths.runs.join(format!("{tag}.json"));
                std::fs::write(&path, job.to_string()).map_err(|e| format!("{}: {e}", path.display()))?;
                let mut command = Command::new(python);
                command
                    .arg(driver)
                    .arg(&path)
                    .env("JAVA_HOME", java_home)
                    .current_dir(&self.paths.runs);
                let m = measure::run(&mut command, &log, self.timeout).map_err(|e| format!("flink: {e}"))?;
                let net = flink::net_runtime_seconds(&m.stdout);
                let (true, Some(job_seconds)) = (m.success, net) else {
                    return Err(format!(
                        "flink failed on {}: see {}",
                        workload.name,
                        log.with_extension("err").display()
                    ));
                };
                RunResult::measured(&workload.name, label, round, workload.records, &m, job_seconds)
            }
        };
        let _ = std::fs::remove_dir_all(&checkpoints);
        Ok(Some(result))
    }
}

/// Prints how many checkpoints a checkpoint-overhead run completed (from `weir run`'s summary
/// line, `checkpoints_completed=N`), warning when the periodic run took fewer than 3: its
/// ratio then says little about the cost of checkpointing (raise `--checkpoint-records`).
fn report_checkpoints(stderr_log: &Path, label: &str, round: u32) {
    let text = std::fs::read_to_string(stderr_log).unwrap_or_default();
    let completed = text
        .rsplit("checkpoints_completed=")
        .next()
        .filter(|_| text.contains("checkpoints_completed="))
        .and_then(|tail| tail.split(|c: char| !c.is_ascii_digit()).next())
        .and_then(|digits| digits.parse::<u64>().ok());
    match completed {
        Some(n) if label.contains("chk 1s") && n < 3 => eprintln!(
            "vs_flink: checkpoint-overhead {label} run {round}: only {n} checkpoint(s) completed; \
             raise --checkpoint-records for a meaningful ratio"
        ),
        Some(n) => eprintln!("vs_flink: checkpoint-overhead {label} run {round}: {n} checkpoint(s) completed"),
        None => eprintln!(
            "vs_flink: checkpoint-overhead {label} run {round}: no checkpoint count in {}",
            stderr_log.display()
        ),
    }
}

/// The machine's baseline: the same keys counted in a std `HashMap` on one thread, no
/// framework (keys computed as Weir's generator does: SplitMix64 of seed and index; the
/// string keys formatted as `key-<k>`). Stricter than `keyed_count.rs`'s baseline, which also
/// builds a JSON object per record.
fn baseline(workload: &Workload, label: &str, integer_keys: bool, round: u32) -> RunResult {
    let n = workload.records;
    let cpu = measure::thread_cpu_seconds();
    let t = Instant::now();
    let total: u64 = if integer_keys {
        let mut counts: HashMap<u64, u64> = HashMap::new();
        for i in 0..n {
            *counts.entry(i % KEYS).or_default() += 1;
        }
        counts.values().sum()
    } else {
        let mut counts: HashMap<String, u64> = HashMap::new();
        for i in 0..n {
            let h = data::splitmix64(SEED ^ data::splitmix64(i));
            *counts.entry(format!("key-{}", h % KEYS)).or_default() += 1;
        }
        counts.values().sum()
    };
    assert_eq!(total, n, "the baseline counted every record");
    let secs = t.elapsed().as_secs_f64();
    RunResult {
        workload: workload.name.clone(),
        side: label.to_string(),
        round,
        records: n,
        wall_seconds: secs,
        job_seconds: secs,
        cpu_seconds: measure::thread_cpu_seconds() - cpu,
        peak_rss_bytes: 0,
    }
}

fn load() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_else(|_| "unknown".into())
}

fn main() {
    let args = Args::parse();
    if let Err(e) = run(args) {
        eprintln!("vs_flink: error: {e}");
        std::process::exit(1);
    }
}

fn run(args: Args) -> Result<(), String> {
    measure::become_subreaper().map_err(|e| format!("prctl(PR_SET_CHILD_SUBREAPER): {e}"))?;
    let paths = Paths::new().map_err(|e| format!("creating target/bench-data: {e}"))?;
    let text_dir = paths.root.join("../shared/data/text");
    let (words_path, words) =
        data::words_file(&text_dir, &paths.data, args.words).map_err(|e| format!("word-count input: {e}"))?;
    let bids_path = data::bids_path(&paths.data, args.bids);
    let sizes = workloads::Sizes {
        keyed_records: args.keyed_records,
        checkpoint_records: args.checkpoint_records,
        bids: args.bids,
    };
    let selected: Vec<Workload> = workloads::all(sizes, &words_path, words, &bids_path)
        .into_iter()
        .filter(|w| args.only.is_empty() || args.only.iter().any(|o| w.name.contains(o.as_str())))
        .collect();
    if selected.is_empty() {
        return Err(format!("no workload matches --only {:?}", args.only));
    }
    if selected.iter().any(|w| w.name.starts_with("nexmark")) {
        eprintln!(
            "vs_flink: writing {} bids to {} (once per size)",
            args.bids,
            bids_path.display()
        );
        data::ensure_bids_file(&bids_path, args.bids).map_err(|e| format!("{}: {e}", bids_path.display()))?;
    }
    let flink = if args.with_flink {
        let java_home = flink::java_home().ok_or("--with-flink needs Java 17 under /usr/lib/jvm")?;
        let python = flink::ensure_installed(&paths.data.join("../flink-venv"))?;
        let driver = flink::write_driver(&paths.data).map_err(|e| format!("writing the Flink driver: {e}"))?;
        Some((python, driver, java_home))
    } else {
        None
    };
    let cores = std::thread::available_parallelism().map(|c| c.get()).unwrap_or(1);
    println!(
        "vs_flink: {} ({} cores, load {} at start), {} runs per side",
        std::env::var("HOSTNAME").unwrap_or_else(|_| "this machine".into()),
        cores,
        load(),
        args.runs
    );
    if flink.is_none() {
        println!(
            "vs_flink: Apache Flink SKIPPED: Weir and the baseline only. Include Flink with:\n    cargo bench -p weir-runtime --bench vs_flink -- --with-flink"
        );
    } else {
        println!(
            "vs_flink: Apache Flink {} (PyFlink, hashmap state, exactly-once checkpoints every 1 s)",
            flink::FLINK_VERSION
        );
    }
    println!(
        "vs_flink: keyed count {} records, word count {words} words, Nexmark {} bids, checkpoint overhead {} records",
        args.keyed_records, args.bids, args.checkpoint_records
    );
    let weir = private_weir(&paths)?;
    let runner = Runner {
        weir,
        paths,
        flink,
        timeout: Duration::from_secs(args.timeout_seconds),
    };
    println!("{}", report::run_header());
    let mut results = Vec::new();
    for workload in &selected {
        for round in 1..=args.runs {
            for (label, side) in &workload.sides {
                if let Some(r) = runner.run(workload, label, side, round)? {
                    println!("{}", report::run_line(&r));
                    results.push(r);
                }
            }
        }
    }
    let _ = std::fs::remove_file(&runner.weir);
    println!(
        "\nmedians; ratio = weir / other of records/s, cpu ratio = of records per CPU-second; load now {}",
        load()
    );
    println!("{}", report::summary_header());
    for workload in &selected {
        for line in report::summary_lines(&workload.name, &workload.sides[0].0, &results) {
            println!("{line}");
        }
    }
    Ok(())
}
