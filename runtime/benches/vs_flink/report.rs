//! Results and the printed tables: every run as it finishes, then per workload the medians and
//! the median ratios (Weir / other side) of records/s and of records per CPU-second, and peak
//! RSS of each side.

/// One finished run of one side.
#[derive(Clone, Debug)]
pub struct RunResult {
    /// Workload name.
    pub workload: String,
    /// Side label (`weir`, `flink`, `baseline`, ...).
    pub side: String,
    /// Round, from 1.
    pub round: u32,
    /// Records processed.
    pub records: u64,
    /// Process wall seconds (spawn to exit; for the baseline, the loop).
    pub wall_seconds: f64,
    /// Seconds the job ran: Weir's process wall time, Flink's net job runtime.
    pub job_seconds: f64,
    /// User + system CPU seconds of the process tree.
    pub cpu_seconds: f64,
    /// Peak RSS in bytes (largest process of the tree; 0 for the in-process baseline).
    pub peak_rss_bytes: u64,
}

impl RunResult {
    /// The result of one measured process run of `workload` on side `label`; `job_seconds` is
    /// the time records/s are computed from (Weir: wall time; Flink: its net job runtime).
    pub fn measured(
        workload: &str,
        label: &str,
        round: u32,
        records: u64,
        m: &crate::measure::Measured,
        job_seconds: f64,
    ) -> RunResult {
        RunResult {
            workload: workload.to_string(),
            side: label.to_string(),
            round,
            records,
            wall_seconds: m.wall_seconds,
            job_seconds,
            cpu_seconds: m.cpu_seconds,
            peak_rss_bytes: m.peak_rss_bytes,
        }
    }
}

impl RunResult {
    /// Records per second of job time.
    pub fn records_per_second(&self) -> f64 {
        self.records as f64 / self.job_seconds
    }
    /// Records per CPU-second of the whole process tree.
    pub fn records_per_cpu_second(&self) -> f64 {
        self.records as f64 / self.cpu_seconds
    }
}

/// Median of `values` (mean of the middle two for an even count); NaN when empty.
pub fn median(mut values: Vec<f64>) -> f64 {
    if values.is_empty() {
        return f64::NAN;
    }
    values.sort_by(f64::total_cmp);
    let n = values.len();
    if n % 2 == 1 {
        values[n / 2]
    } else {
        (values[n / 2 - 1] + values[n / 2]) / 2.0
    }
}

/// Header of the per-run table.
pub fn run_header() -> String {
    format!(
        "{:<26} {:<12} {:>3} {:>8} {:>8} {:>12} {:>8} {:>12} {:>9}",
        "workload", "side", "run", "wall s", "job s", "records/s", "cpu s", "rec/cpu-s", "rss MiB"
    )
}

/// One line of the per-run table.
pub fn run_line(r: &RunResult) -> String {
    format!(
        "{:<26} {:<12} {:>3} {:>8.2} {:>8.2} {:>12.0} {:>8.2} {:>12.0} {:>9.0}",
        r.workload,
        r.side,
        r.round,
        r.wall_seconds,
        r.job_seconds,
        r.records_per_second(),
        r.cpu_seconds,
        r.records_per_cpu_second(),
        r.peak_rss_bytes as f64 / (1 << 20) as f64
    )
}

/// Header of the summary table.
pub fn summary_header() -> String {
    format!(
        "{:<26} {:<24} {:>12} {:>12} {:>8} {:>9} {:>9} {:>9} {:>9}",
        "workload", "weir vs", "weir rec/s", "other rec/s", "ratio", "cpu ratio", "weir MiB", "other MiB", "runs"
    )
}

/// Summary lines of one workload: Weir (first side) against each other side that has runs.
pub fn summary_lines(workload: &str, first_side: &str, results: &[RunResult]) -> Vec<String> {
    let of = |side: &str| -> Vec<&RunResult> {
        results
            .iter()
            .filter(|r| r.workload == workload && r.side == side)
            .collect()
    };
    let first = of(first_side);
    let mut sides: Vec<&str> = Vec::new();
    for r in results
        .iter()
        .filter(|r| r.workload == workload && r.side != first_side)
    {
        if !sides.contains(&r.side.as_str()) {
            sides.push(&r.side);
        }
    }
    let mib = |runs: &[&RunResult]| runs.iter().map(|r| r.peak_rss_bytes).max().unwrap_or(0) as f64 / (1 << 20) as f64;
    let rate = |runs: &[&RunResult]| median(runs.iter().map(|r| r.records_per_second()).collect());
    let per_cpu = |runs: &[&RunResult]| median(runs.iter().map(|r| r.records_per_cpu_second()).collect());
    sides
        .into_iter()
        .map(|side| {
            let other = of(side);
            format!(
                "{:<26} {:<24} {:>12.0} {:>12.0} {:>8.2} {:>9.2} {:>9.0} {:>9.0} {:>4}/{:<4}",
                workload,
                format!("{first_side} / {side}"),
                rate(&first),
                rate(&other),
                rate(&first) / rate(&other),
                per_cpu(&first) / per_cpu(&other),
                mib(&first),
                mib(&other),
                first.len(),
                other.len()
            )
        })
        .collect()
}
