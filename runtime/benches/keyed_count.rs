//! Keyed count and word count throughput, each against a plain single-threaded baseline
//! measured in the same run.
//!
//! 1. Keyed count: a generator source (seeded, 100k keys) → keyBy → count → file sink, with
//!    exactly-once checkpoints every second to a local directory, at parallelism 1 and 2. The
//!    baseline builds the same key strings and counts them in a plain `HashMap` on one thread
//!    (no records, channels, checkpoints or output).
//! 2. Word count: text files → `map` (`line.lower()`) → `flatMap` (`\W+`) → keyBy → count →
//!    file sink, checkpoints every second, at parallelism 1 and 2. The baseline reads the same
//!    lines, lowercases them, splits them with the same regex and counts the words in a
//!    `HashMap` on one thread.
//!
//! 3. Checkpoint overhead (issue 10's goal ≤ 2 %, issue 12's ≥ 0.95): the keyed count at p=1
//!    into a `discard` sink with checkpoints every second vs periodic checkpoints off
//!    (`interval: 0s`; the bounded job still takes its final one), interleaved, with 100k
//!    string keys, 100k integer keys (`id % 100000`, the integer-key table) and 5M distinct
//!    string keys (large heap state).
//!
//! 4. Integer keys (issue 10's goal ≥ 0.8×): generator → `keyBy: id % 100000` → `count` →
//!    `discard`, p=1, exactly-once checkpoints every second, against a `HashMap<u64, u64>`
//!    counting `i % 100000` on one thread (vs_flink's integer baseline), interleaved, 3 rounds.
//!    `WEIR_RECORDS=rows` runs Weir on row batches and the generic key table instead of
//!    columns and the integer table, for a before/after in two runs of one build.
//!
//! Prints records/s, records/s per core and the ratio to the baseline (for 3: the ratio of
//! the median records/s with checkpoints to the median without; for 4: every round and the
//! median ratio).
//!
//! Run: `cargo bench -p weir-runtime --bench keyed_count`. Environment: `WEIR_BENCH_RECORDS`
//! (keyed count input size, also of part 4; default 2,000,000), `WEIR_BENCH_OVERHEAD_RECORDS` and
//! `WEIR_BENCH_LARGE_RECORDS` (input of the 100k-key and 5M-key overhead runs; default
//! 10,000,000 and 20,000,000: runs of several seconds, so that one checkpoint more or less
//! does not decide the ratio), `WEIR_BENCH_OVERHEAD_ROUNDS` (runs of each side;
//! default 3), `WEIR_BENCH_ONLY=overhead` (only part 3), `WEIR_BENCH_ONLY=int` (only part 4), `WEIR_BENCH_TEXT` (glob of the word count's
//! text files; default the repository's `../shared/data/text/*.txt`), `WEIR_BENCH_TEXT_REPEAT`
//! (how many copies of the text files are read; default 4).

use std::collections::HashMap;
use std::time::Instant;
use weir_runtime::checkpoint::restore::RestoreFrom;
use weir_runtime::exec::{RunOptions, prepare};
use weir_runtime::job::parse_manifest;
use weir_runtime::operators::source::generator::splitmix64;

/// The same allocator as the `weir` binary.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const KEYS: u64 = 100_000;
const SEED: u64 = 42;

fn keyed_count_baseline(n: u64) -> f64 {
    let t = Instant::now();
    let mut counts: HashMap<String, u64> = HashMap::new();
    for i in 0..n {
        // The generator's key of record i (operators/source/generator.rs).
        let h = splitmix64(SEED ^ splitmix64(i));
        *counts.entry(format!("key-{}", h % KEYS)).or_default() += 1;
    }
    assert_eq!(counts.values().sum::<u64>(), n);
    n as f64 / t.elapsed().as_secs_f64()
}

/// Words of the files, counted as the word count job counts them; returns (words, records/s).
fn word_count_baseline(files: &[std::path::PathBuf]) -> (u64, f64) {
    let t = Instant::now();
    let split = regex::Regex::new(r"\W+").unwrap();
    let mut counts: HashMap<String, u64> = HashMap::new();
    let mut words = 0u64;
    for f in files {
        let text = std::fs::read_to_string(f).unwrap();
        for line in text.lines() {
            let lower = line.to_lowercase();
            for w in split.split(&lower).filter(|w| !w.is_empty()) {
                words += 1;
                match counts.get_mut(w) {
                    Some(c) => *c += 1,
                    None => {
                        counts.insert(w.to_string(), 1);
                    }
                }
            }
        }
    }
    (words, words as f64 / t.elapsed().as_secs_f64())
}

/// Runs a manifest to the end; returns records/s over `n` records, checking that the
/// aggregation (tasks whose name starts with `counted_task`) received exactly `n`.
fn run(manifest: &str, n: u64, counted_task: &str) -> f64 {
    let job = parse_manifest(manifest, &[]).expect("bench manifest");
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let t = Instant::now();
        let prepared = prepare(
            job,
            RunOptions {
                restore: RestoreFrom::None,
                checkpoint_storage: None,
                state_dir: None,
            },
        )
        .await
        .unwrap();
        let handle = prepared.handle.clone();
        prepared.run().await.unwrap();
        let secs = t.elapsed().as_secs_f64();
        let counted: u64 = handle
            .tasks
            .iter()
            .filter(|t| t.0.starts_with(counted_task))
            .map(|t| t.2.records_in.load(std::sync::atomic::Ordering::Relaxed))
            .sum();
        assert_eq!(counted, n, "every record counted once");
        n as f64 / secs
    })
}

fn keyed_count(n: u64, parallelism: u32, dir: &std::path::Path) -> f64 {
    let manifest = format!(
        r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: bench }}
spec:
  parallelism: {parallelism}
  checkpointing: {{ interval: 1s, storage: "{d}/checkpoints" }}
  job:
    steps:
      - source: {{ generator: {{ seed: {SEED}, count: {n}, keys: {KEYS} }} }}
      - keyBy: {{ expression: key, as: key }}
      - count: {{}}
      - sink: {{ file: {{ path: "{d}/output-p{parallelism}" }} }}
"#,
        d = dir.display()
    );
    run(&manifest, n, "count")
}

/// The keyed count at p=1 over `keys` distinct keys into a `discard` sink, checkpoint
/// interval `interval` (`0s`: periodic checkpoints off), keyed by `key_expression` (`key`:
/// the generator's strings `key-<k>`; `id % <keys>`: integers on the integer-key table);
/// returns records/s.
fn keyed_count_discard(n: u64, keys: u64, key_expression: &str, interval: &str, dir: &std::path::Path) -> f64 {
    let manifest = format!(
        r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: bench-overhead }}
spec:
  parallelism: 1
  checkpointing: {{ interval: {interval}, storage: "{d}/checkpoints-overhead" }}
  job:
    steps:
      - source: {{ generator: {{ seed: {SEED}, count: {n}, keys: {keys} }} }}
      - keyBy: {{ expression: "{key_expression}", as: key }}
      - count: {{}}
      - sink: {{ discard: {{}} }}
"#,
        d = dir.display()
    );
    run(&manifest, n, "count")
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// Part 3: checkpoint overhead at 100k and 5M keys, sides interleaved.
fn checkpoint_overhead(dir: &std::path::Path) {
    let small: u64 = env_u64("WEIR_BENCH_OVERHEAD_RECORDS", 10_000_000);
    let large: u64 = env_u64("WEIR_BENCH_LARGE_RECORDS", 20_000_000);
    let rounds = env_u64("WEIR_BENCH_OVERHEAD_ROUNDS", 3).max(1);
    println!("\ncheckpoint overhead: keyed count p=1 → discard, checkpoints every 1s vs none, {rounds} rounds");
    println!(
        "{:<40} {:>14} {:>14} {:>10}",
        "keys, records", "chk 1s rec/s", "no chk rec/s", "ratio"
    );
    let int_key = format!("id % {KEYS}");
    for (keys, key_expression, records) in [
        (KEYS, "key", small),
        (KEYS, int_key.as_str(), small),
        (5_000_000, "key", large),
    ] {
        let (mut with, mut without) = (vec![], vec![]);
        for _ in 0..rounds {
            with.push(keyed_count_discard(records, keys, key_expression, "1s", dir));
            without.push(keyed_count_discard(records, keys, key_expression, "0s", dir));
        }
        let (w, wo) = (median(with), median(without));
        println!(
            "{:<40} {w:>14.0} {wo:>14.0} {:>10.3}",
            format!("{keys} keys ({key_expression}), {records}"),
            w / wo
        );
    }
}

/// vs_flink's integer baseline: `i % KEYS` counted in a std `HashMap<u64, u64>` on one
/// thread; returns records/s.
fn int_count_baseline(n: u64) -> f64 {
    let t = Instant::now();
    let mut counts: HashMap<u64, u64> = HashMap::new();
    for i in 0..n {
        *counts.entry(i % KEYS).or_default() += 1;
    }
    assert_eq!(counts.values().sum::<u64>(), n);
    n as f64 / t.elapsed().as_secs_f64()
}

/// Part 4: integer keys at p=1 into `discard` against [`int_count_baseline`], interleaved,
/// 3 rounds; prints every round and the median ratio.
fn int_keys(n: u64, dir: &std::path::Path) {
    let records = if columns_off() { "rows" } else { "columns" };
    println!("\ninteger keys (`id % {KEYS}`), {n} records, p=1, discard sink, exactly-once, chk 1s, {records}");
    println!(
        "{:<8} {:>16} {:>16} {:>10}",
        "round", "baseline rec/s", "weir rec/s", "ratio"
    );
    let mut ratios = vec![];
    for round in 1..=3 {
        let base = int_count_baseline(n);
        let manifest = format!(
            r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: bench-int }}
spec:
  parallelism: 1
  checkpointing: {{ interval: 1s, storage: "{d}/checkpoints-int" }}
  job:
    steps:
      - source: {{ generator: {{ seed: {SEED}, count: {n}, keys: {KEYS} }} }}
      - keyBy: {{ expression: "id % {KEYS}", as: key }}
      - count: {{}}
      - sink: {{ discard: {{}} }}
"#,
            d = dir.display()
        );
        let weir = run(&manifest, n, "count");
        ratios.push(weir / base);
        println!("{round:<8} {base:>16.0} {weir:>16.0} {:>10.3}", weir / base);
    }
    println!("median ratio weir / baseline: {:.3}", median(ratios));
}

/// Whether `WEIR_RECORDS=rows` turned the columnar path off.
fn columns_off() -> bool {
    std::env::var("WEIR_RECORDS").is_ok_and(|v| v == "rows")
}

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

fn word_count(words: u64, parallelism: u32, text_dir: &std::path::Path, dir: &std::path::Path) -> f64 {
    let manifest = format!(
        r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: bench-words }}
spec:
  parallelism: {parallelism}
  checkpointing: {{ interval: 1s, storage: "{d}/checkpoints-words" }}
  job:
    steps:
      - source: {{ file: {{ path: "{t}/*.txt", format: text }} }}
      - map: {{ expression: "{{'line': line.lower()}}" }}
      - flatMap: {{ field: line, pattern: '\W+', as: word }}
      - keyBy: {{ expression: word, as: word }}
      - count: {{}}
      - sink: {{ file: {{ path: "{d}/words-p{parallelism}" }} }}
"#,
        t = text_dir.display(),
        d = dir.display()
    );
    run(&manifest, words, "count")
}

fn print_row(name: &str, rate: f64, per_core: f64, base: f64) {
    println!("{name:<40} {rate:>14.0} {per_core:>16.0} {:>10.2}", rate / base);
}

fn main() {
    let n: u64 = std::env::var("WEIR_BENCH_RECORDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(2_000_000);
    let cores = std::thread::available_parallelism().map(|c| c.get()).unwrap_or(1) as f64;
    let dir = tempfile::tempdir().unwrap();
    if std::env::var("WEIR_BENCH_ONLY").is_ok_and(|v| v == "overhead") {
        checkpoint_overhead(dir.path());
        return;
    }
    if std::env::var("WEIR_BENCH_ONLY").is_ok_and(|v| v == "int") {
        int_keys(n, dir.path());
        return;
    }
    let base = keyed_count_baseline(n);
    println!("keyed count, {n} records, {KEYS} keys, {cores} cores");
    println!(
        "{:<40} {:>14} {:>16} {:>10}",
        "run", "records/s", "records/s/core", "vs base"
    );
    print_row("baseline: HashMap, 1 thread", base, base, base);
    for p in [1u32, 2] {
        let r = keyed_count(n, p, dir.path());
        print_row(
            &format!("weir p={p}, exactly-once, chk 1s"),
            r,
            r / (p as f64).min(cores),
            base,
        );
    }

    checkpoint_overhead(dir.path());
    int_keys(n, dir.path());

    // Word count over copies of the bundled texts.
    let pattern = std::env::var("WEIR_BENCH_TEXT")
        .unwrap_or_else(|_| format!("{}/../../shared/data/text/*.txt", env!("CARGO_MANIFEST_DIR")));
    let repeat: usize = std::env::var("WEIR_BENCH_TEXT_REPEAT")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(4);
    let sources: Vec<_> = glob::glob(&pattern).unwrap().map(Result::unwrap).collect();
    if sources.is_empty() {
        println!("\nword count: skipped, no file matches `{pattern}` (set WEIR_BENCH_TEXT)");
        return;
    }
    let text_dir = dir.path().join("text");
    std::fs::create_dir_all(&text_dir).unwrap();
    let mut files = vec![];
    for copy in 0..repeat {
        for (i, s) in sources.iter().enumerate() {
            let to = text_dir.join(format!("{copy:03}-{i:03}.txt"));
            std::fs::copy(s, &to).unwrap();
            files.push(to);
        }
    }
    let (words, base) = word_count_baseline(&files);
    println!("\nword count, {words} words ({repeat} copies of {pattern}), {cores} cores");
    println!(
        "{:<40} {:>14} {:>16} {:>10}",
        "run", "words/s", "words/s/core", "vs base"
    );
    print_row("baseline: lower, split, HashMap", base, base, base);
    for p in [1u32, 2] {
        let r = word_count(words, p, &text_dir, dir.path());
        print_row(
            &format!("weir p={p}, exactly-once, chk 1s"),
            r,
            r / (p as f64).min(cores),
            base,
        );
    }
}
