//! The bench's tables: one row per run as it finishes, then medians and ratios per key count
//! and backend, each goal marked `ok` or `MISSED`.

use crate::job::JobRun;

/// One finished run.
pub struct Run {
    /// Round (1-based); the runs of a round are interleaved.
    pub round: usize,
    /// Distinct keys of the generator.
    pub keys: u64,
    /// `heap` or `disk`.
    pub backend: String,
    /// `none` (no periodic checkpoints), `full` or `incremental` (every 1 s), `s3 final`.
    pub variant: String,
    /// The child's report.
    pub result: JobRun,
}

const MB: f64 = 1e6;

/// Median of `xs` (the upper one of an even count); NaN when empty.
pub fn median(mut xs: Vec<f64>) -> f64 {
    if xs.is_empty() {
        return f64::NAN;
    }
    xs.sort_by(f64::total_cmp);
    xs[xs.len() / 2]
}

/// Bytes uploaded per checkpoint of a run: the median over its periodic checkpoints (all
/// but the bounded job's final one), or the final one when it took no other.
fn bytes_per_checkpoint(r: &JobRun) -> f64 {
    let periodic = &r.checkpoints[..r.checkpoints.len().saturating_sub(1)];
    if periodic.is_empty() {
        return r.checkpoints.last().map_or(f64::NAN, |c| c.bytes as f64);
    }
    median(periodic.iter().map(|c| c.bytes as f64).collect())
}

/// Mean bytes uploaded per periodic checkpoint of a run (as [`bytes_per_checkpoint`] picks
/// them): unlike the median it counts the rare large uploads, such as a native checkpoint
/// uploading a compaction's output files.
fn mean_bytes_per_checkpoint(r: &JobRun) -> f64 {
    let periodic = &r.checkpoints[..r.checkpoints.len().saturating_sub(1)];
    if periodic.is_empty() {
        return r.checkpoints.last().map_or(f64::NAN, |c| c.bytes as f64);
    }
    periodic.iter().map(|c| c.bytes as f64).sum::<f64>() / periodic.len() as f64
}

/// Prints one run's row (with the header before the first).
pub fn print_run(r: &Run, header: bool) {
    if header {
        println!(
            "\n{:>5} {:>10} {:>5} {:<18} {:>11} {:>8} {:>5} {:>9} {:>9} {:>8} {:>8} {:>9} {:>9} {:>9} {:>9} {:>9}",
            "round",
            "keys",
            "store",
            "checkpoints",
            "records/s",
            "peak MiB",
            "chks",
            "MB/chk",
            "mean MB",
            "sync ms",
            "async ms",
            "chk MB/s",
            "raw MB/s",
            "1st rec s",
            "built s",
            "raw get s"
        );
    }
    let res = &r.result;
    // The periodic checkpoints' parts; a run without any shows its final checkpoint's.
    let periodic = match &res.checkpoints[..] {
        [only] => std::slice::from_ref(only),
        all => &all[..all.len().saturating_sub(1)],
    };
    let med = |f: fn(&crate::job::CheckpointRow) -> u64| median(periodic.iter().map(|c| f(c) as f64).collect());
    let (chk, raw, first, restore, get) =
        res.store
            .as_ref()
            .map_or((f64::NAN, f64::NAN, f64::NAN, f64::NAN, f64::NAN), |s| {
                (
                    s.checkpoint_bytes_per_s / MB,
                    s.raw_upload_bytes_per_s / MB,
                    s.restore_first_record_s,
                    s.restore_s,
                    s.raw_download_s,
                )
            });
    println!(
        "{:>5} {:>10} {:>5} {:<18} {:>11.0} {:>8.0} {:>5} {:>9.1} {:>9.1} {:>8.0} {:>8.0} {:>9.1} {:>9.1} {:>9.3} {:>9.3} {:>9.3}",
        r.round,
        r.keys,
        r.backend,
        r.variant,
        res.records_per_s,
        res.peak_mib,
        res.checkpoints.len(),
        bytes_per_checkpoint(res) / MB,
        mean_bytes_per_checkpoint(res) / MB,
        med(|c| c.sync_ms),
        med(|c| c.async_ms),
        chk,
        raw,
        first,
        restore,
        get
    );
}

fn goal(ok: bool) -> &'static str {
    if ok { "ok" } else { "MISSED" }
}

/// Prints the medians and ratios over all rounds.
pub fn print_summary(runs: &[Run], keys: &[u64], backends: &[String]) {
    let pick = |k: u64, b: &str, v: &str| -> Vec<&Run> {
        runs.iter()
            .filter(|r| r.keys == k && r.backend == b && r.variant == v)
            .collect()
    };
    let med = |rows: &[&Run], f: &dyn Fn(&JobRun) -> f64| median(rows.iter().map(|r| f(&r.result)).collect());
    let rate = |r: &JobRun| r.records_per_s;
    let counts = runs.iter().any(|r| !r.variant.starts_with("window"));
    if !counts {
        // `--only windows`.
        print_windows(runs, keys, backends);
        return;
    }
    println!("\nmedians over rounds; ratios of medians");
    println!(
        "{:>10} {:>5} {:>12} {:>12} {:>12} {:>9} {:>9} {:>10} {:>10} {:>8} {:>13}",
        "keys",
        "store",
        "none rec/s",
        "full rec/s",
        "incr rec/s",
        "full/none",
        "incr/none",
        "full MB/chk",
        "incr MB/chk",
        "incr/full",
        "peak MiB n/f/i"
    );
    for &k in keys {
        for b in backends {
            let (none, full, incr) = (pick(k, b, "none"), pick(k, b, "full"), pick(k, b, "incremental"));
            if none.is_empty() {
                continue;
            }
            let (n, f, i) = (med(&none, &rate), med(&full, &rate), med(&incr, &rate));
            let (fb, ib) = (med(&full, &bytes_per_checkpoint), med(&incr, &bytes_per_checkpoint));
            let peak = |rows: &[&Run]| rows.iter().map(|r| r.result.peak_mib).fold(f64::NAN, f64::max);
            println!(
                "{k:>10} {b:>5} {n:>12.0} {f:>12.0} {i:>12.0} {:>9.3} {:>9.3} {:>10.1} {:>10.1} {:>8.3} {:>13}",
                f / n,
                i / n,
                fb / MB,
                ib / MB,
                ib / fb,
                format!("{:.0}/{:.0}/{:.0}", peak(&none), peak(&full), peak(&incr)),
            );
            if full.is_empty() && incr.is_empty() {
                // `--only restore`: no periodic-checkpoint runs to compare.
                continue;
            }
            // A run left out (`--variants`) is said so, not counted as missed.
            let verdict = |rows: &[&Run], ratio: f64| {
                if rows.is_empty() {
                    "not run".to_string()
                } else {
                    format!("{} ({ratio:.3})", goal(ratio >= 0.95))
                }
            };
            println!(
                "{:>16} goal chk 1s / none >= 0.95: full {}, incremental {}",
                "",
                verdict(&full, f / n),
                verdict(&incr, i / n)
            );
        }
    }
    println!(
        "\n{:>10} {:>5} {:<6} {:>9} {:>9} {:>9} {:>8} {:>9} {:>9} {:>9} {:>9} {:>8} {:>8} {:>8} {:>8}",
        "keys",
        "state",
        "store",
        "state MB",
        "chk MB/s",
        "raw MB/s",
        "chk/raw",
        "1st rec s",
        "batch s",
        "built s",
        "raw get s",
        "1st/raw",
        "bat/raw",
        "blt/raw",
        "goals"
    );
    for &k in keys {
        for b in backends {
            for (store, variant) in [("local", "none"), ("s3", "s3 final")] {
                let rows = pick(k, b, variant);
                if rows.is_empty() {
                    continue;
                }
                let s =
                    |f: &dyn Fn(&crate::store::StoreRun) -> f64| med(&rows, &|r| r.store.as_ref().map_or(f64::NAN, f));
                let (chk, raw) = (s(&|s| s.checkpoint_bytes_per_s), s(&|s| s.raw_upload_bytes_per_s));
                let (first, batch) = (s(&|s| s.restore_first_record_s), s(&|s| s.restore_first_batch_s));
                let (restore, get) = (s(&|s| s.restore_s), s(&|s| s.raw_download_s));
                println!(
                    "{k:>10} {b:>5} {store:<6} {:>9.1} {:>9.1} {:>9.1} {:>8.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>8.2} {:>8.2} {:>8.2} {:>8}",
                    s(&|s| s.state_bytes as f64) / MB,
                    chk / MB,
                    raw / MB,
                    chk / raw,
                    first,
                    batch,
                    restore,
                    get,
                    first / get,
                    batch / get,
                    restore / get,
                    format!("{}/{}", goal(chk / raw >= 0.8), goal(first / get <= 1.3)),
                );
            }
        }
    }
    println!(
        "  goals: checkpoint / raw upload >= 0.8, restore to the first record / raw download <= 1.3 \
         (restore times from the restore's start: first record processed, a first batch of 1,024 keys processed, \
         keyed state fully built)"
    );
    print_windows(runs, keys, backends);
    if backends.len() == 2 {
        println!("\ndisk / heap, medians");
        for &k in keys {
            let r = |v: &str| med(&pick(k, "disk", v), &rate) / med(&pick(k, "heap", v), &rate);
            println!(
                "{k:>10} keys: records/s no checkpoints {:.3}, chk 1s full {:.3}, incremental {:.3}",
                r("none"),
                r("full"),
                r("incremental")
            );
        }
    }
    if keys.len() >= 2 {
        let (small, large) = (keys[0], keys[keys.len() - 1]);
        println!("\npeak RSS growth from {small} to {large} keys (max over runs; bounded: close to 1)");
        for b in backends {
            for v in ["none", "full", "incremental"] {
                let peak = |k| pick(k, b, v).iter().map(|r| r.result.peak_mib).fold(f64::NAN, f64::max);
                println!(
                    "{b:>5} {v:<12} {:>8.0} MiB -> {:>8.0} MiB: {:.2}x",
                    peak(small),
                    peak(large),
                    peak(large) / peak(small)
                );
            }
        }
    }
}

/// The `windows` part's summary: per key count and backend, the medians of records/s without
/// periodic checkpoints and with incremental ones every second, their ratio, and the peak RSS
/// (max over runs); then disk / heap.
fn print_windows(runs: &[Run], keys: &[u64], backends: &[String]) {
    let pick = |k: u64, b: &str, v: &str| -> Vec<&JobRun> {
        runs.iter()
            .filter(|r| r.keys == k && r.backend == b && r.variant == v)
            .map(|r| &r.result)
            .collect()
    };
    if !runs.iter().any(|r| r.variant.starts_with("window")) {
        return;
    }
    let rate = |rows: &[&JobRun]| median(rows.iter().map(|r| r.records_per_s).collect());
    let peak = |rows: &[&JobRun]| rows.iter().map(|r| r.peak_mib).fold(f64::NAN, f64::max);
    println!("\n1-hour tumbling windows per key (event time): medians over rounds");
    println!(
        "{:>10} {:>5} {:>12} {:>12} {:>9} {:>10} {:>12}",
        "keys", "store", "none rec/s", "incr rec/s", "incr/none", "incr MB/chk", "peak MiB n/i"
    );
    for &k in keys {
        for b in backends {
            let (none, incr) = (pick(k, b, "window none"), pick(k, b, "window incremental"));
            if none.is_empty() && incr.is_empty() {
                continue;
            }
            let bytes = median(incr.iter().map(|r| bytes_per_checkpoint(r)).collect());
            println!(
                "{k:>10} {b:>5} {:>12.0} {:>12.0} {:>9.3} {:>10.1} {:>12}",
                rate(&none),
                rate(&incr),
                rate(&incr) / rate(&none),
                bytes / MB,
                format!("{:.0}/{:.0}", peak(&none), peak(&incr)),
            );
        }
        if backends.len() == 2 {
            let ratio = |v: &str| rate(&pick(k, "disk", v)) / rate(&pick(k, "heap", v));
            println!(
                "{k:>10} keys, windows disk / heap records/s: no checkpoints {:.3}, incremental {:.3}",
                ratio("window none"),
                ratio("window incremental")
            );
        }
    }
}
