//! Per-trial lines and per-mode totals, and the final table.

use crate::plan::Mode;
use crate::trial::Outcome;
use std::fmt::Write;
use std::time::Duration;

/// The numbers of one trial.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TrialLine {
    /// The mode.
    pub mode: Mode,
    /// The trial's seed (replay: `--mode M --seed S --trials 1`).
    pub seed: u64,
    /// kill -9 sent.
    pub kills: u32,
    /// Savepoints completed.
    pub savepoints: u32,
    /// Injected S3 faults.
    pub faults: u64,
    /// Processes that exited non-zero on their own.
    pub job_failures: u32,
    /// Whether the job finished.
    pub completed: bool,
    /// Records lost.
    pub lost: u64,
    /// Extra copies of expected records.
    pub duplicated: u64,
    /// Records that should not exist at all.
    pub foreign: u64,
    /// Wall time in milliseconds.
    pub millis: u64,
}

impl TrialLine {
    /// The line of `outcome`.
    pub fn new(mode: Mode, seed: u64, outcome: &Outcome, took: Duration) -> TrialLine {
        TrialLine {
            mode,
            seed,
            kills: outcome.kills,
            savepoints: outcome.savepoints,
            faults: outcome.faults.total(),
            job_failures: outcome.job_failures,
            completed: outcome.completed,
            lost: outcome.diff.lost,
            duplicated: outcome.diff.duplicated,
            foreign: outcome.diff.foreign,
            millis: took.as_millis() as u64,
        }
    }

    /// A trial passes when every expected record was committed exactly once and nothing else;
    /// at-least-once when nothing was lost; at-most-once when nothing was written twice (an
    /// over-count is a record counted twice, so foreign records fail it too).
    pub fn passed(&self) -> bool {
        match self.mode {
            Mode::AtLeastOnce => self.lost == 0,
            m if m.is_at_most_once() => self.duplicated == 0 && self.foreign == 0,
            _ => self.lost == 0 && self.duplicated == 0 && self.foreign == 0,
        }
    }

    /// One line for the progress output.
    pub fn render(&self) -> String {
        format!(
            "{} {:<20} seed {:<20} {:>5.1}s kills {} savepoints {} faults {} job-failures {} {} lost {} duplicated {} foreign {}{}",
            if self.passed() { "ok  " } else { "FAIL" },
            self.mode.name(),
            self.seed,
            self.millis as f64 / 1000.0,
            self.kills,
            self.savepoints,
            self.faults,
            self.job_failures,
            if self.completed { "finished" } else { "INCOMPLETE" },
            self.lost,
            self.duplicated,
            self.foreign,
            if self.passed() {
                String::new()
            } else {
                format!(
                    "  (replay: weir-soak --mode {} --seed {} --trials 1)",
                    self.mode.name(),
                    self.seed
                )
            }
        )
    }
}

/// Sums over the trials of one mode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ModeTotals {
    /// The mode.
    pub mode: Mode,
    /// Trials run.
    pub trials: u64,
    /// kill -9 sent.
    pub kills: u64,
    /// Savepoints completed.
    pub savepoints: u64,
    /// Injected faults.
    pub faults: u64,
    /// Processes that exited non-zero on their own.
    pub job_failures: u64,
    /// Trials whose job did not finish.
    pub incomplete: u64,
    /// Records lost.
    pub lost: u64,
    /// Records duplicated.
    pub duplicated: u64,
    /// Foreign records.
    pub foreign: u64,
    /// Seeds of failing trials.
    pub failing: Vec<u64>,
}

impl ModeTotals {
    /// Zero totals.
    pub fn new(mode: Mode) -> ModeTotals {
        ModeTotals {
            mode,
            trials: 0,
            kills: 0,
            savepoints: 0,
            faults: 0,
            job_failures: 0,
            incomplete: 0,
            lost: 0,
            duplicated: 0,
            foreign: 0,
            failing: vec![],
        }
    }

    /// Adds one trial.
    pub fn add(&mut self, t: &TrialLine) {
        self.trials += 1;
        self.kills += u64::from(t.kills);
        self.savepoints += u64::from(t.savepoints);
        self.faults += t.faults;
        self.job_failures += u64::from(t.job_failures);
        self.incomplete += u64::from(!t.completed);
        self.lost += t.lost;
        self.duplicated += t.duplicated;
        self.foreign += t.foreign;
        if !t.passed() {
            self.failing.push(t.seed);
        }
    }
}

/// The final table: one row per mode, then the failing seeds with their replay commands.
pub fn summary(totals: &[ModeTotals], took: Duration) -> String {
    let mut s = String::new();
    let _ = writeln!(
        s,
        "{:<20} {:>6} {:>6} {:>6} {:>10} {:>7} {:>12} {:>10} {:>6} {:>10} {:>7}",
        "mode",
        "trials",
        "failed",
        "kills",
        "savepoints",
        "faults",
        "job-failures",
        "incomplete",
        "lost",
        "duplicated",
        "foreign"
    );
    for t in totals {
        let _ = writeln!(
            s,
            "{:<20} {:>6} {:>6} {:>6} {:>10} {:>7} {:>12} {:>10} {:>6} {:>10} {:>7}",
            t.mode.name(),
            t.trials,
            t.failing.len(),
            t.kills,
            t.savepoints,
            t.faults,
            t.job_failures,
            t.incomplete,
            t.lost,
            t.duplicated,
            t.foreign
        );
    }
    for t in totals {
        for seed in &t.failing {
            let _ = writeln!(
                s,
                "failing: mode {} seed {seed}  (replay: weir-soak --mode {} --seed {seed} --trials 1)",
                t.mode.name(),
                t.mode.name()
            );
        }
    }
    let failed: usize = totals.iter().map(|t| t.failing.len()).sum();
    let trials: u64 = totals.iter().map(|t| t.trials).sum();
    let _ = writeln!(
        s,
        "{}: {trials} trials, {failed} failing, {:.0} s",
        if failed == 0 { "PASS" } else { "FAIL" },
        took.as_secs_f64()
    );
    s
}

#[cfg(test)]
mod tests {
    use super::*;

    fn line(seed: u64, lost: u64, duplicated: u64, completed: bool) -> TrialLine {
        TrialLine {
            mode: Mode::Local,
            seed,
            kills: 2,
            savepoints: 1,
            faults: 0,
            job_failures: 0,
            completed,
            lost,
            duplicated,
            foreign: 0,
            millis: 1500,
        }
    }

    #[test]
    fn totals_and_summary_name_every_failing_seed() {
        let mut t = ModeTotals::new(Mode::Local);
        for l in [line(1, 0, 0, true), line(2, 0, 7, true), line(3, 4, 0, false)] {
            t.add(&l);
        }
        assert_eq!((t.trials, t.kills, t.duplicated, t.lost, t.incomplete), (3, 6, 7, 4, 1));
        assert_eq!(t.failing, vec![2, 3]);
        let s = summary(&[t], Duration::from_secs(9));
        assert!(
            s.contains("failing: mode local seed 2  (replay: weir-soak --mode local --seed 2 --trials 1)"),
            "{s}"
        );
        assert!(s.contains("failing: mode local seed 3"), "{s}");
        assert!(s.ends_with("FAIL: 3 trials, 2 failing, 9 s\n"), "{s}");
    }

    #[test]
    fn a_trial_passes_only_when_exact() {
        assert!(line(1, 0, 0, true).passed());
        assert!(!line(1, 1, 0, true).passed());
        assert!(!line(1, 0, 1, true).passed());
        let mut foreign = line(1, 0, 0, true);
        foreign.foreign = 1;
        assert!(!foreign.passed());
        assert!(
            line(5, 0, 3, true)
                .render()
                .contains("(replay: weir-soak --mode local --seed 5 --trials 1)")
        );
        let summary_ok = summary(&[ModeTotals::new(Mode::S3)], Duration::from_secs(1));
        assert!(summary_ok.ends_with("PASS: 0 trials, 0 failing, 1 s\n"), "{summary_ok}");
    }
}
