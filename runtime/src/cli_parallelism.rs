//! The parallelism `weir run` and `weir coordinator` accept (pure): errors name the flag when
//! `--parallelism` set it, and `weir run` refuses a parallelism its one process cannot hold.
//!
//! `weir run` runs every subtask in one process, and a keyed exchange joins every upstream
//! subtask to every downstream one: p² channels per exchange. Measured (debug build, generator
//! → keyBy → count → file sink, 10,000 records): p=128 starts and ends in 2.6 s with 0.6 GB,
//! p=256 in 6.4 s with 1.0 GB, p=512 in 37 s with 2.7 GB, so p=2000 (16× the channels of 512)
//! needs tens of gigabytes and effectively hangs. Above [`MAX_LOCAL_PARALLELISM`] a job runs
//! distributed (`weir coordinator` and workers, or a StreamJob on Kubernetes).

use crate::job::JobError;

/// The largest parallelism `weir run` accepts (one process holds every subtask).
pub const MAX_LOCAL_PARALLELISM: u32 = 256;

/// A manifest error, with `--parallelism` named when the flag set the field it concerns
/// (`--parallelism 2000 (spec.parallelism): must be between 1 and maxParallelism (128), ...`).
pub fn name_the_flag(error: JobError, flag: Option<u32>) -> String {
    match flag {
        Some(p) if error.field == "spec.parallelism" => {
            format!("--parallelism {p} (spec.parallelism): {}", error.message)
        }
        _ => error.to_string(),
    }
}

/// Checks that `weir run` can hold `parallelism` subtasks per stage; `flag` is `--parallelism`
/// when given (it set the parallelism).
///
/// Errors: above [`MAX_LOCAL_PARALLELISM`], naming the flag or `spec.parallelism` and what to do.
pub fn check_local(parallelism: u32, flag: Option<u32>) -> Result<(), String> {
    if parallelism <= MAX_LOCAL_PARALLELISM {
        return Ok(());
    }
    let what = match flag {
        Some(p) => format!("--parallelism {p}"),
        None => format!("spec.parallelism: {parallelism}"),
    };
    Err(format!(
        "{what} is above {MAX_LOCAL_PARALLELISM}, the most `weir run` runs: it holds every subtask in this \
         one process, with parallelism² channels per keyed exchange; run it at {MAX_LOCAL_PARALLELISM} or less, \
         or distributed (`weir coordinator` with `weir worker`s, or a StreamJob on Kubernetes)"
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parallelism_errors_name_the_flag_that_set_it() {
        let over_max = || {
            JobError::new(
                "spec.parallelism",
                "must be between 1 and maxParallelism (128), got 200",
            )
        };
        let other = || JobError::new("spec.maxParallelism", "must be between 1 and 32768, got 0");
        for (error, flag, want) in [
            (
                over_max(),
                Some(200),
                "--parallelism 200 (spec.parallelism): must be between 1 and maxParallelism (128), got 200",
            ),
            (
                over_max(),
                None,
                "spec.parallelism: must be between 1 and maxParallelism (128), got 200",
            ),
            (
                other(),
                Some(4),
                "spec.maxParallelism: must be between 1 and 32768, got 0",
            ),
        ] {
            assert_eq!(name_the_flag(error, flag), want);
        }
    }

    #[test]
    fn weir_run_refuses_more_subtasks_than_one_process_holds() {
        assert_eq!(check_local(1, None), Ok(()));
        assert_eq!(check_local(256, Some(256)), Ok(()));
        let flag = check_local(2000, Some(2000)).unwrap_err();
        assert!(
            flag.starts_with("--parallelism 2000 is above 256, the most `weir run` runs"),
            "{flag}"
        );
        let field = check_local(300, None).unwrap_err();
        assert!(field.starts_with("spec.parallelism: 300 is above 256"), "{field}");
        assert!(field.contains("distributed (`weir coordinator`"), "{field}");
    }
}
