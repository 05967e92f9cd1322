//! The one check of a job's parallelism wherever it enters (pure): `weir run` and `weir
//! coordinator`, from `--parallelism`, `--set spec.parallelism=N` or the manifest. Errors name
//! what set it; `weir run` also refuses a parallelism its one process cannot hold.
//!
//! `weir run` runs every subtask in one process, and a keyed exchange joins every upstream
//! subtask to every downstream one: p² channels per exchange. Measured (debug build, generator
//! → keyBy → count → file sink, 10,000 records): p=128 starts and ends in 2.6 s with 0.6 GB,
//! p=256 in 6.4 s with 1.0 GB, p=512 in 37 s with 2.7 GB, so p=2000 (16× the channels of 512)
//! needs tens of gigabytes and effectively hangs. Above [`MAX_LOCAL_PARALLELISM`] a job runs
//! distributed (`weir coordinator` and workers, or a StreamJob on Kubernetes).
//!
//! Distributed, a process holds O(parallelism) of a keyed exchange's channels per slot, not
//! p²: measured (debug build, the same job, 10,000 records, a coordinator and two workers of
//! p/2 slots each on one machine): p=16 ends in 2.3 s with workers of 0.1 GB, p=64 in 15 s
//! with 0.18 GB, p=128 in 21 s with 0.34 GB (64 slots each); the coordinator stays under
//! 66 MB. So `weir coordinator` takes any parallelism up to the job's maxParallelism (at most
//! 32768, Flink's bound), and waits for that many task slots.

use crate::job::{Job, JobError, dotted_set_path};

/// The largest parallelism `weir run` accepts (one process holds every subtask).
pub const MAX_LOCAL_PARALLELISM: u32 = 256;

/// Parses `--parallelism` (and `--slots`) as a count of at least 1: `0` and text are refused
/// with what the flag takes, not clap's range of `u32` (`1..=4294967295`).
/// Errors: the message clap prints after `invalid value '<arg>' for '--flag'`.
pub fn at_least_one(arg: &str) -> Result<u32, String> {
    match arg.trim().parse::<u32>() {
        Ok(0) => Err("it must be at least 1".to_string()),
        Ok(count) => Ok(count),
        Err(_) => Err("expected a whole number of at least 1, e.g. 4".to_string()),
    }
}

/// What set a job's parallelism, as errors name it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ParallelismSource {
    /// `--parallelism N`.
    Flag(u32),
    /// `--set spec.parallelism=N` (the argument as given).
    Set(String),
    /// The manifest's `spec.parallelism` (or its default).
    Manifest,
}

impl ParallelismSource {
    /// What set the parallelism: `--parallelism` when given (it is applied last), else the
    /// last `--set` of `spec.parallelism` in `sets`, else the manifest.
    pub fn of(flag: Option<u32>, sets: &[String]) -> ParallelismSource {
        if let Some(p) = flag {
            return ParallelismSource::Flag(p);
        }
        sets.iter()
            .rev()
            .find(|s| {
                s.split_once('=')
                    .is_some_and(|(path, _)| dotted_set_path(path.trim()) == "spec.parallelism")
            })
            .map_or(ParallelismSource::Manifest, |s| ParallelismSource::Set(s.clone()))
    }
}

/// Where the job runs: what holds its subtasks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Runner {
    /// `weir run`: every subtask in this one process, at most [`MAX_LOCAL_PARALLELISM`].
    Local,
    /// `weir coordinator` and workers: at most the job's maxParallelism.
    Distributed,
}

/// The one check of a job's parallelism: `loaded` is the manifest as loaded with the
/// overrides, `source` what set the parallelism, `runner` what runs it.
///
/// Errors (without the file name, which the caller adds): a validation error, naming the flag
/// or `--set` when the error concerns `spec.parallelism` and one of them set it
/// (`--parallelism 200 (spec.parallelism): must be between 1 and maxParallelism (128), got 200`);
/// for [`Runner::Local`], a parallelism above [`MAX_LOCAL_PARALLELISM`], naming what set it and
/// what to do.
pub fn check_parallelism(
    loaded: Result<Job, JobError>,
    source: &ParallelismSource,
    runner: Runner,
) -> Result<Job, String> {
    let job = loaded.map_err(|e| name_the_source(e, source))?;
    if runner == Runner::Distributed || job.parallelism <= MAX_LOCAL_PARALLELISM {
        return Ok(job);
    }
    let what = match source {
        ParallelismSource::Flag(p) => format!("--parallelism {p}"),
        ParallelismSource::Set(s) => format!("--set {s}"),
        ParallelismSource::Manifest => format!("spec.parallelism: {}", job.parallelism),
    };
    Err(format!(
        "{what} is above {MAX_LOCAL_PARALLELISM}, the most `weir run` runs: it holds every subtask in this \
         one process, with parallelism² channels per keyed exchange; run it at {MAX_LOCAL_PARALLELISM} or less, \
         or distributed (`weir coordinator` with `weir worker`s, or a StreamJob on Kubernetes)"
    ))
}

/// A manifest error, with the flag or `--set` named when it set the field the error concerns.
fn name_the_source(error: JobError, source: &ParallelismSource) -> String {
    match source {
        ParallelismSource::Flag(p) if error.field == "spec.parallelism" => {
            format!("--parallelism {p} (spec.parallelism): {}", error.message)
        }
        ParallelismSource::Set(s) if error.field == "spec.parallelism" => {
            format!("--set {s} (spec.parallelism): {}", error.message)
        }
        _ => error.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(parallelism: u32) -> Result<Job, JobError> {
        let yaml = format!(
            "apiVersion: weir.dev/v1alpha1\nkind: StreamJob\nmetadata: {{name: j}}\nspec:\n  parallelism: {parallelism}\n  job:\n    steps:\n      - source: {{generator: {{}}}}\n      - sink: {{discard: {{}}}}\n"
        );
        crate::job::parse_manifest(&yaml, &[])
    }

    #[test]
    fn a_parallelism_flag_takes_a_whole_number_of_at_least_one() {
        assert_eq!(at_least_one("4"), Ok(4));
        assert_eq!(at_least_one("1"), Ok(1));
        let zero = at_least_one("0").unwrap_err();
        assert!(zero.contains("at least 1") && !zero.contains("4294967295"), "{zero}");
        for text in ["-1", "two", "", "1.5"] {
            assert!(at_least_one(text).unwrap_err().contains("whole number"), "{text}");
        }
    }

    #[test]
    fn the_source_of_the_parallelism_is_the_flag_else_the_last_set() {
        let sets = |v: &[&str]| v.iter().map(|s| s.to_string()).collect::<Vec<_>>();
        use ParallelismSource::*;
        for (flag, given, want) in [
            (Some(4), sets(&["spec.parallelism=3"]), Flag(4)),
            (
                None,
                sets(&["spec.parallelism=3", "spec.parallelism=5"]),
                Set("spec.parallelism=5".into()),
            ),
            (
                None,
                sets(&[" spec.parallelism =7"]),
                Set(" spec.parallelism =7".into()),
            ),
            (None, sets(&["spec.maxParallelism=300"]), Manifest),
            (None, sets(&[]), Manifest),
        ] {
            assert_eq!(ParallelismSource::of(flag, &given), want, "{flag:?} {given:?}");
        }
    }

    #[test]
    fn errors_name_what_set_the_parallelism() {
        let over_max = || {
            Err(JobError::new(
                "spec.parallelism",
                "must be between 1 and maxParallelism (128), got 200",
            ))
        };
        let other = || {
            Err(JobError::new(
                "spec.maxParallelism",
                "must be between 1 and 32768, got 0",
            ))
        };
        let set = || ParallelismSource::Set("spec.parallelism=200".into());
        use ParallelismSource::*;
        use Runner::*;
        for (loaded, source, runner, want) in [
            (
                over_max(),
                Flag(200),
                Distributed,
                "--parallelism 200 (spec.parallelism): must be between 1 and maxParallelism (128), got 200",
            ),
            (
                over_max(),
                set(),
                Local,
                "--set spec.parallelism=200 (spec.parallelism): must be between 1 and maxParallelism (128), got 200",
            ),
            (
                over_max(),
                Manifest,
                Distributed,
                "spec.parallelism: must be between 1 and maxParallelism (128), got 200",
            ),
            (
                other(),
                Flag(4),
                Local,
                "spec.maxParallelism: must be between 1 and 32768, got 0",
            ),
            (
                job(2000),
                Flag(2000),
                Local,
                "--parallelism 2000 is above 256, the most `weir run` runs",
            ),
            (job(300), set(), Local, "--set spec.parallelism=200 is above 256"),
            (job(300), Manifest, Local, "spec.parallelism: 300 is above 256"),
        ] {
            let got = check_parallelism(loaded, &source, runner).unwrap_err();
            assert!(got.starts_with(want), "want `{want}`, got `{got}`");
        }
        let field = check_parallelism(job(300), &Manifest, Local).unwrap_err();
        assert!(field.contains("distributed (`weir coordinator`"), "{field}");
    }

    #[test]
    fn weir_run_holds_256_subtasks_and_a_coordinator_up_to_the_max_parallelism() {
        for (parallelism, runner, ok) in [
            (1, Runner::Local, true),
            (256, Runner::Local, true),
            (257, Runner::Local, false),
            (257, Runner::Distributed, true),
            (2000, Runner::Distributed, true),
        ] {
            let got = check_parallelism(job(parallelism), &ParallelismSource::Manifest, runner);
            assert_eq!(got.is_ok(), ok, "{parallelism} {runner:?}: {:?}", got.err());
        }
    }
}
