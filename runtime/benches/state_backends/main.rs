//! Large keyed state, heap vs disk backend, in one invocation (issue 12's benchmark). Every
//! measurement runs in its own child process of this bench (peak RSS per run), the runs
//! interleaved round by round, and the summary prints medians and their ratios against the
//! baseline measured in the same invocation:
//!
//! - `overhead` (per key count, per backend): the keyed count (generator over `keys` distinct
//!   keys, `records-per-key` × keys records, p=1, discard sink) with checkpoints every second,
//!   full and with `checkpointing.incremental: true`, vs no periodic checkpoints
//!   (`interval: 0s`); goal ≥ 0.95. Bytes uploaded per checkpoint, incremental vs full.
//!   Throughput disk vs heap, and peak RSS (the disk backend's should be bounded by its cache
//!   and write buffer, not by the key count). Each no-checkpoint run then measures its final
//!   checkpoint against the local directory store (`store.rs`).
//! - `store`: the same final-checkpoint measurements on S3 (a moto server on loopback):
//!   checkpoint throughput vs a raw upload of the same bytes (goal ≥ 0.8), restore time vs a
//!   raw download of the same files (goal ≤ 1.3×).
//! - `memory`: the keyed state alone, peak RSS at 1× and 4× `--memory-keys` (`memory.rs`).
//! - `windows` (only when named: `--only windows`): the same generator into a 1-hour tumbling
//!   window per key in event time (`job.rs`), no periodic checkpoints and incremental ones
//!   every second, per backend: records/s disk vs heap, incremental vs none, and peak RSS
//!   (the end of the input fires every key's window at one watermark).
//! - `restore`: only the runs that measure the final checkpoint against the store, local
//!   directory and S3 (the no-checkpoint run and the S3 run of `overhead` and `store`): the
//!   short way to the restore and checkpoint-vs-raw rows. Every restore prints a `restore
//!   breakdown` (times from its start) and its steps' wall and CPU time, page faults and
//!   preemptions; `WEIR_BENCH_RESTORE_DETAIL=1` adds, after the measurements, the load's steps
//!   one by one, the same restore again (warm), a copy of every block and one `fsync`.
//!   `WEIR_BENCH_CHECKPOINT_DETAIL=1` prints each checkpoint's state files' phases (encoder
//!   busy, upload waiting for pieces or parts, completion; `state_upload.rs`'s debug lines)
//!   and a native checkpoint's steps (memtable flush, RocksDB checkpoint, each file's upload;
//!   `native_upload.rs`'s and `disk_write_back.rs`'s), and at the end of a disk run how long
//!   the task thread waited for the write-back and what the write-back thread was busy with.
//!   Every job run prints a `job breakdown`: its wall and CPU time, and CPU seconds per thread
//!   name (`threads.rs`: the runtime's threads, the write-back thread, RocksDB's background
//!   threads), so a run with checkpoints can be told apart from one without by where its CPU
//!   went.
//!
//! Incremental checkpoints are switched on by configuration only: a backend that does not
//! write deltas yet writes full checkpoints under `incremental: true`, and this bench picks up
//! its deltas without a change when it does.
//!
//! Run: `cargo bench -p weir-runtime --bench state_backends -- [--keys 5000000,50000000]
//! [--records-per-key 2] [--rounds 3] [--backends heap,disk] [--only overhead|store|memory|restore|windows]...
//! [--memory-keys 500000] [--scratch DIR] [--no-s3] [--store-incremental]
//! [--variants none,full,incremental]`. `--variants`: the `overhead` runs to make (all three
//! by default; `none,incremental` leaves out full checkpoints, which at 50M keys on disk
//! rewrite the whole store every second).
//! `--store-incremental`: the runs whose final checkpoint is measured against the store (the
//! no-checkpoint run, `s3 final`) run with `checkpointing.incremental: true`: their final
//! checkpoint is on the disk backend a native checkpoint (the store's table files; the
//! default), or a chain's base of blocks on heap and with `WEIR_NATIVE_CHECKPOINTS=off`, measured against a raw upload and download of the same files. S3 needs `moto_server` on the `PATH`
//! (`pip install 'moto[server]'`); without it the S3 rows are skipped with that hint.
//! Linux only (reads `/proc/self/status`).

mod job;
mod memory;
#[path = "../../tests/support/moto.rs"]
#[allow(dead_code)]
mod moto;
mod report;
mod rss;
mod store;
mod threads;
mod usage;

use job::{JobArgs, JobRun};

/// The same allocator as the `weir` binary.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

/// Command-line options of the bench (see the module doc).
#[derive(Debug)]
struct Options {
    keys: Vec<u64>,
    records_per_key: f64,
    rounds: usize,
    backends: Vec<String>,
    only: Vec<String>,
    memory_keys: u64,
    scratch: Option<std::path::PathBuf>,
    s3: bool,
    /// `--store-incremental`: the runs measured against the store run with
    /// `checkpointing.incremental: true`.
    store_incremental: bool,
    /// `--variants none,incremental`: the `overhead` runs to make (default all three: `none`,
    /// `full`, `incremental`), e.g. to leave out full checkpoints of a store of 50M keys.
    variants: Vec<String>,
}

const USAGE: &str = "usage: state_backends [--keys N,N..] [--records-per-key F] [--rounds N] \
[--backends heap,disk] [--only overhead|store|memory|restore|windows].. [--memory-keys N] [--scratch DIR] [--no-s3] [--store-incremental] [--variants none,full,incremental]";

fn parse_options(args: &[String]) -> Result<Options, String> {
    let mut o = Options {
        keys: vec![5_000_000, 50_000_000],
        records_per_key: 2.0,
        rounds: 3,
        backends: vec!["heap".into(), "disk".into()],
        only: vec![],
        memory_keys: 500_000,
        scratch: None,
        s3: true,
        store_incremental: false,
        variants: vec!["none".into(), "full".into(), "incremental".into()],
    };
    let mut it = args.iter();
    while let Some(flag) = it.next() {
        let mut value = |what: &str| {
            it.next()
                .cloned()
                .ok_or_else(|| format!("{flag} needs {what}; {USAGE}"))
        };
        let number = |flag: &str, v: &str| -> Result<u64, String> {
            v.replace('_', "")
                .parse()
                .map_err(|_| format!("{flag}: `{v}` is not a whole number"))
        };
        match flag.as_str() {
            // `cargo bench` passes `--bench` to every bench binary.
            "--bench" => {}
            "--keys" => {
                let v = value("a comma-separated list of key counts")?;
                o.keys = v.split(',').map(|k| number("--keys", k)).collect::<Result<_, _>>()?;
            }
            "--records-per-key" => {
                let v = value("a number")?;
                o.records_per_key = v
                    .parse()
                    .ok()
                    .filter(|f: &f64| *f > 0.0)
                    .ok_or(format!("--records-per-key: `{v}` is not a positive number"))?;
            }
            "--rounds" => o.rounds = number("--rounds", &value("a number")?)?.max(1) as usize,
            "--backends" => {
                let v = value("heap, disk or heap,disk")?;
                o.backends = v.split(',').map(str::to_string).collect();
                if let Some(b) = o.backends.iter().find(|b| *b != "heap" && *b != "disk") {
                    return Err(format!(
                        "--backends: unknown backend `{b}`; use heap, disk or heap,disk"
                    ));
                }
            }
            "--only" => {
                let v = value("a part name")?;
                if !["overhead", "store", "memory", "restore", "windows"].contains(&v.as_str()) {
                    return Err(format!(
                        "--only: unknown part `{v}`; use overhead, store, memory, restore or windows"
                    ));
                }
                o.only.push(v);
            }
            "--memory-keys" => o.memory_keys = number("--memory-keys", &value("a number")?)?,
            "--scratch" => o.scratch = Some(value("a directory")?.into()),
            "--no-s3" => o.s3 = false,
            "--store-incremental" => o.store_incremental = true,
            "--variants" => {
                let v = value("a list")?;
                o.variants = v.split(',').map(str::to_string).collect();
                if let Some(unknown) = o
                    .variants
                    .iter()
                    .find(|v| !["none", "full", "incremental"].contains(&v.as_str()))
                {
                    return Err(format!(
                        "--variants: unknown run `{unknown}`; use none, full and incremental, comma-separated"
                    ));
                }
            }
            other => return Err(format!("unknown option `{other}`; {USAGE}")),
        }
    }
    Ok(o)
}

impl Options {
    /// Whether part `name` runs: every part but `windows` when `--only` is not given; else the
    /// parts it names.
    fn part(&self, name: &str) -> bool {
        (self.only.is_empty() && name != "windows") || self.only.iter().any(|p| p == name)
    }

    fn records(&self, keys: u64) -> u64 {
        (keys as f64 * self.records_per_key).round() as u64
    }
}

/// Runs one job in a child process with `env`; returns its report.
fn run_child(args: &JobArgs, env: &[(&'static str, String)]) -> JobRun {
    let out = std::process::Command::new(std::env::current_exe().expect("own path"))
        .args(["--child-job", &serde_json::to_string(args).expect("encode child args")])
        .envs(env.iter().map(|(k, v)| (*k, v.as_str())))
        .output()
        .expect("run the child");
    assert!(
        out.status.success(),
        "child {args:?} failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The child's own breakdowns (`… breakdown …` lines on stderr) are passed on, and with
    // `WEIR_BENCH_CHECKPOINT_DETAIL=1` the checkpoints' debug lines (state files' phases).
    let checkpoint_line = |l: &str| {
        [
            "state file written",
            "state file encoded",
            "checkpoint completed",
            "native checkpoint",
            "native file",
            "write-back",
        ]
        .iter()
        .any(|m| l.contains(m))
    };
    for line in String::from_utf8_lossy(&out.stderr)
        .lines()
        .filter(|l| l.contains("breakdown") || checkpoint_line(l))
    {
        println!("    {line}");
    }
    let text = String::from_utf8_lossy(&out.stdout);
    let line = text.lines().last().expect("the child's report");
    serde_json::from_str(line).expect("decode the child's report")
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    if args.first().is_some_and(|a| a == "--child-job") {
        job::child(&serde_json::from_str(&args[1]).expect("child args"));
        return;
    }
    if args.first().is_some_and(|a| a == "--child-warm-up") {
        let rt = tokio::runtime::Runtime::new().expect("tokio runtime");
        rt.block_on(store::warm_up(&args[1]));
        return;
    }
    if args.first().is_some_and(|a| a == "--child-memory") {
        memory::child(&args[1], args[2].parse().expect("key count"));
        return;
    }
    let o = match parse_options(&args) {
        Ok(o) => o,
        Err(e) => {
            eprintln!("state_backends: {e}");
            std::process::exit(2);
        }
    };
    let scratch = match &o.scratch {
        Some(d) => {
            std::fs::create_dir_all(d).expect("create the scratch directory");
            tempfile::tempdir_in(d)
        }
        None => tempfile::tempdir(),
    }
    .expect("scratch dir");
    let cores = std::thread::available_parallelism().map_or(1, |c| c.get());
    println!(
        "state backends bench: keys {:?}, {} records per key, {} rounds, backends {:?}, {cores} cores; load {}",
        o.keys,
        o.records_per_key,
        o.rounds,
        o.backends,
        load_average()
    );
    let moto = if (o.part("store") || o.part("restore")) && o.s3 {
        if moto::available() {
            let m = moto::MotoServer::start_with_bucket("weir-bench");
            let warmed = std::process::Command::new(std::env::current_exe().expect("own path"))
                .args(["--child-warm-up", &format!("s3://{}/warm-up-run", m.bucket())])
                .envs(m.env())
                .status()
                .expect("run the S3 warm-up");
            assert!(warmed.success(), "the S3 warm-up failed");
            Some(m)
        } else {
            println!("S3 rows skipped: moto_server is not on the PATH (pip install 'moto[server]')");
            None
        }
    } else {
        None
    };
    let mut runs: Vec<report::Run> = Vec::new();
    let mut n = 0;
    for round in 1..=o.rounds {
        for &keys in &o.keys {
            for backend in &o.backends {
                if let Some(reason) = heap_skip_reason(backend, keys) {
                    if round == 1 {
                        println!("skipped: {backend} at {keys} keys: {reason}");
                    }
                    continue;
                }
                let mut variants: Vec<(&str, &str, bool, Option<&moto::MotoServer>)> = vec![];
                if o.part("windows") {
                    variants.extend([
                        ("window none", "0s", false, None),
                        ("window incremental", "1s", true, None),
                    ]);
                }
                if o.part("overhead") {
                    variants.extend(
                        [
                            ("none", "0s", o.store_incremental, None),
                            ("full", "1s", false, None),
                            ("incremental", "1s", true, None),
                        ]
                        .into_iter()
                        .filter(|(variant, ..)| o.variants.iter().any(|v| v == variant)),
                    );
                } else if o.part("restore") {
                    variants.push(("none", "0s", o.store_incremental, None));
                }
                if let Some(m) = &moto {
                    variants.push(("s3 final", "0s", o.store_incremental, Some(m)));
                }
                for (variant, interval, incremental, s3) in variants {
                    n += 1;
                    let dir = scratch.path().join(format!("run-{n}"));
                    let storage = match s3 {
                        Some(m) => format!("s3://{}/run-{n}", m.bucket()),
                        None => dir.join("checkpoints").display().to_string(),
                    };
                    let args = JobArgs {
                        backend: backend.clone(),
                        keys,
                        records: o.records(keys),
                        interval: interval.into(),
                        incremental,
                        storage,
                        state_dir: dir.join("state").display().to_string(),
                        store: variant == "none" || s3.is_some(),
                        window: variant.starts_with("window"),
                    };
                    let env = s3.map(|m| m.env()).unwrap_or_default();
                    let result = run_child(&args, &env);
                    let _ = std::fs::remove_dir_all(&dir);
                    let row = report::Run {
                        round,
                        keys,
                        backend: backend.clone(),
                        variant: variant.into(),
                        result,
                    };
                    report::print_run(&row, runs.is_empty());
                    runs.push(row);
                }
            }
        }
    }
    if !runs.is_empty() {
        report::print_summary(&runs, &o.keys, &o.backends);
    }
    if o.part("memory") {
        memory::run(o.memory_keys);
    }
    println!("\nload at the end: {}", load_average());
}

/// Peak RSS of a heap run per key (measured: 8,919 MiB at 50M keys with full checkpoints, about
/// 187 bytes per key, docs/runtime/state-backends-log.md), rounded up.
const HEAP_PEAK_BYTES_PER_KEY: u64 = 200;

/// Why a heap run at `keys` keys is skipped: the memory it would peak at is more than half of
/// what the (shared) machine has available now (`MemAvailable`). `None` for disk runs, which
/// are bounded by the store's cache, and when the memory is there.
fn heap_skip_reason(backend: &str, keys: u64) -> Option<String> {
    if backend != "heap" {
        return None;
    }
    let meminfo = std::fs::read_to_string("/proc/meminfo").ok()?;
    let available_kib: u64 = meminfo
        .lines()
        .find_map(|l| l.strip_prefix("MemAvailable:"))?
        .split_whitespace()
        .next()?
        .parse()
        .ok()?;
    let needed = keys * HEAP_PEAK_BYTES_PER_KEY;
    let available = available_kib * 1024;
    (needed > available / 2).then(|| {
        format!(
            "needs about {} MiB at its peak ({HEAP_PEAK_BYTES_PER_KEY} bytes per key), more than half of the {} MiB \
             available on this shared machine now",
            needed >> 20,
            available >> 20
        )
    })
}

/// `/proc/loadavg`'s first three fields (the machine may be shared: say so with the numbers).
fn load_average() -> String {
    std::fs::read_to_string("/proc/loadavg")
        .map(|l| l.split_whitespace().take(3).collect::<Vec<_>>().join(" "))
        .unwrap_or_default()
}
