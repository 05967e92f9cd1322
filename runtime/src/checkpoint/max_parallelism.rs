//! The max parallelism of a restored job (pure), as Flink decides it.
//!
//! A snapshot's keyed state is split into `maxParallelism` key groups, and a key's group is
//! `hash mod maxParallelism`, so the number is fixed for the life of the state. Flink stores it
//! in the savepoint and, when the job does not set one, adopts the snapshot's on restore
//! (`StateAssignmentOperation`: a max parallelism that was not configured explicitly is
//! replaced by the restored one), so a rescale just works even where the default derived from
//! the new parallelism (`default_max_parallelism`) differs. A max parallelism the job does set
//! and that differs from the snapshot's is refused, as Flink refuses it ("The maximum
//! parallelism ... with which the latest checkpoint ... has been taken and the current maximum
//! parallelism ... changed").

/// What a restore does with the job's max parallelism.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum MaxParallelismOnRestore {
    /// The job's max parallelism is already the snapshot's.
    Keep,
    /// `spec.maxParallelism` is not set: the job takes the snapshot's max parallelism
    /// `restored` instead of the default `derived` from its parallelism.
    Adopt {
        /// The default the job would have had (`default_max_parallelism(parallelism)`).
        derived: u32,
        /// The snapshot's max parallelism, which the job takes.
        restored: u32,
    },
}

/// Decides the max parallelism of a job restored from a snapshot taken with
/// `snapshot_max_parallelism` key groups. `explicit` is `spec.maxParallelism` as the user set
/// it (`None`: not set), `job_max_parallelism` the job's value after defaults, `parallelism`
/// its parallelism; `snapshot_url` names the snapshot in errors.
///
/// Errors (user-facing, naming the fields, both values and what to do):
/// - `spec.maxParallelism` is set and differs from the snapshot's;
/// - it is not set and `parallelism` is above the snapshot's max parallelism (the adopted
///   value caps the parallelism, as every subtask owns at least one key group).
pub fn max_parallelism_on_restore(
    explicit: Option<u32>,
    job_max_parallelism: u32,
    parallelism: u32,
    snapshot_max_parallelism: u32,
    snapshot_url: &str,
) -> Result<MaxParallelismOnRestore, String> {
    let restored = snapshot_max_parallelism;
    if let Some(set) = explicit {
        if set != restored {
            return Err(format!(
                "spec.maxParallelism is {set}, but the restore point {snapshot_url} was taken with maxParallelism \
                 {restored}: its keyed state is split into {restored} key groups, fixed for the life of the state. \
                 Set spec.maxParallelism: {restored}, or remove spec.maxParallelism so the restore point's is \
                 adopted, or start without this state"
            ));
        }
        return Ok(MaxParallelismOnRestore::Keep);
    }
    if parallelism > restored {
        return Err(format!(
            "spec.parallelism {parallelism} is above the restore point's maxParallelism {restored} ({snapshot_url}; \
             adopted because spec.maxParallelism is not set): its keyed state has {restored} key groups, so the \
             job runs at parallelism {restored} at most; restore at a parallelism of {restored} or less"
        ));
    }
    if job_max_parallelism == restored {
        return Ok(MaxParallelismOnRestore::Keep);
    }
    Ok(MaxParallelismOnRestore::Adopt {
        derived: job_max_parallelism,
        restored,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_snapshots_max_parallelism_is_adopted_unless_the_job_sets_another() {
        use MaxParallelismOnRestore::*;
        // (explicit, job max p, parallelism, snapshot max p, expected: Ok or a part of the error)
        type Row = (
            Option<u32>,
            u32,
            u32,
            u32,
            Result<MaxParallelismOnRestore, &'static str>,
        );
        let rows: [Row; 9] = [
            // Not set, same default: nothing to do.
            (None, 128, 2, 128, Ok(Keep)),
            // Not set, default differs (p 100 → 40: 256 → 128): the snapshot's is adopted.
            (
                None,
                128,
                40,
                256,
                Ok(Adopt {
                    derived: 128,
                    restored: 256,
                }),
            ),
            (
                None,
                256,
                100,
                128,
                Ok(Adopt {
                    derived: 256,
                    restored: 128,
                }),
            ),
            // Not set, parallelism equal to the snapshot's max parallelism: allowed.
            (
                None,
                256,
                128,
                128,
                Ok(Adopt {
                    derived: 256,
                    restored: 128,
                }),
            ),
            // Not set, parallelism above the snapshot's max parallelism: refused naming both.
            (
                None,
                256,
                129,
                128,
                Err("spec.parallelism 129 is above the restore point's maxParallelism 128 (s://x;"),
            ),
            (None, 512, 300, 256, Err("restore at a parallelism of 256 or less")),
            // Set and equal: kept.
            (Some(256), 256, 40, 256, Ok(Keep)),
            // Set and different: refused naming spec.maxParallelism and both values.
            (
                Some(128),
                128,
                40,
                256,
                Err("spec.maxParallelism is 128, but the restore point s://x was taken with maxParallelism 256"),
            ),
            (
                Some(512),
                512,
                300,
                256,
                Err("Set spec.maxParallelism: 256, or remove spec.maxParallelism"),
            ),
        ];
        for (i, (explicit, job, p, snap, want)) in rows.into_iter().enumerate() {
            let got = max_parallelism_on_restore(explicit, job, p, snap, "s://x");
            match (got, want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "row {i}"),
                (Err(got), Err(part)) => assert!(got.contains(part), "row {i}: {got}"),
                (got, want) => panic!("row {i}: got {got:?}, want {want:?}"),
            }
        }
    }
}
