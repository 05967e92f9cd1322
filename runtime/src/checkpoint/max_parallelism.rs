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

use crate::job::origins::{Origin, ValueOrigins};

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
/// its parallelism, `origins` where those values came from; `snapshot_url` names the snapshot
/// in errors.
///
/// Errors (user-facing, naming each value as it was given (`--parallelism 300
/// (spec.parallelism)`, `--set spec.maxParallelism=256 (spec.maxParallelism)` or the manifest
/// field), both values and what to do there):
/// - `spec.maxParallelism` is set and differs from the snapshot's;
/// - it is not set and `parallelism` is above the snapshot's max parallelism (the adopted
///   value caps the parallelism, as every subtask owns at least one key group).
pub fn max_parallelism_on_restore(
    explicit: Option<u32>,
    job_max_parallelism: u32,
    parallelism: u32,
    snapshot_max_parallelism: u32,
    snapshot_url: &str,
    origins: &ValueOrigins,
) -> Result<MaxParallelismOnRestore, String> {
    let restored = snapshot_max_parallelism;
    if let Some(set) = explicit {
        if set != restored {
            return Err(max_parallelism_differs(
                &origins.max_parallelism,
                set,
                restored,
                snapshot_url,
            ));
        }
        return Ok(MaxParallelismOnRestore::Keep);
    }
    if parallelism > restored {
        return Err(parallelism_above_restored(
            &origins.parallelism,
            parallelism,
            restored,
            &format!("{snapshot_url}; adopted because spec.maxParallelism is not set"),
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

/// The refusal of a `spec.maxParallelism` of `set` (given where `origin` says) against a
/// restore point taken with `restored` key groups.
pub fn max_parallelism_differs(origin: &Origin, set: u32, restored: u32, snapshot_url: &str) -> String {
    let field = "spec.maxParallelism";
    format!(
        "{} differs from the maxParallelism {restored} the restore point {snapshot_url} was taken with: its keyed \
         state is split into {restored} key groups, fixed for the life of the state. Give {}, or {} so the restore \
         point's is adopted, or start without this state",
        origin.name(field, set),
        origin.setting(field, restored),
        origin.unsetting(field),
    )
}

/// The refusal of a parallelism `parallelism` (given where `origin` says) above a restore
/// point's max parallelism `restored`; `about` says which restore point (and why its max
/// parallelism applies).
pub fn parallelism_above_restored(origin: &Origin, parallelism: u32, restored: u32, about: &str) -> String {
    let field = "spec.parallelism";
    format!(
        "{} is above the restore point's maxParallelism {restored} ({about}): its keyed state has {restored} key \
         groups, so the job runs at parallelism {restored} at most; restore at a parallelism of {restored} or less \
         ({})",
        origin.name(field, parallelism),
        origin.setting(field, restored),
    )
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
                Err("spec.parallelism: 129 is above the restore point's maxParallelism 128 (s://x;"),
            ),
            (
                None,
                512,
                300,
                256,
                Err("restore at a parallelism of 256 or less (spec.parallelism: 256 in the manifest)"),
            ),
            // Set and equal: kept.
            (Some(256), 256, 40, 256, Ok(Keep)),
            // Set and different: refused naming spec.maxParallelism and both values.
            (
                Some(128),
                128,
                40,
                256,
                Err(
                    "spec.maxParallelism: 128 differs from the maxParallelism 256 the restore point s://x was taken with",
                ),
            ),
            (
                Some(512),
                512,
                300,
                256,
                Err("Give spec.maxParallelism: 256 in the manifest, or remove spec.maxParallelism from the manifest"),
            ),
        ];
        for (i, (explicit, job, p, snap, want)) in rows.into_iter().enumerate() {
            let got = max_parallelism_on_restore(explicit, job, p, snap, "s://x", &ValueOrigins::default());
            match (got, want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "row {i}"),
                (Err(got), Err(part)) => assert!(got.contains(part), "row {i}: {got}"),
                (got, want) => panic!("row {i}: got {got:?}, want {want:?}"),
            }
        }
    }

    /// A value given by `--parallelism` or `--set` is named so, with what to give there
    /// instead (before, every refusal named the manifest's fields, which the manifest may not
    /// even set).
    #[test]
    fn refusals_name_the_flag_or_set_that_gave_the_value() {
        let flag = ValueOrigins {
            parallelism: Origin::Flag { flag: "--parallelism" },
            max_parallelism: Origin::Manifest,
        };
        let set = ValueOrigins {
            parallelism: Origin::Set("spec.parallelism=300".into()),
            max_parallelism: Origin::Set("spec.maxParallelism=512".into()),
        };
        // (explicit, parallelism, origins, parts of the error)
        let rows: [(Option<u32>, u32, &ValueOrigins, &[&str]); 3] = [
            (
                None,
                300,
                &flag,
                &[
                    "--parallelism 300 (spec.parallelism) is above the restore point's maxParallelism 256 (s://x;",
                    "restore at a parallelism of 256 or less (--parallelism 256)",
                ],
            ),
            (
                None,
                300,
                &set,
                &[
                    "--set spec.parallelism=300 (spec.parallelism) is above",
                    "(--set spec.parallelism=256)",
                ],
            ),
            (
                Some(512),
                300,
                &set,
                &[
                    "--set spec.maxParallelism=512 (spec.maxParallelism) differs from the maxParallelism 256",
                    "Give --set spec.maxParallelism=256, or drop --set spec.maxParallelism=512 (and remove \
                     spec.maxParallelism from the manifest if it sets it) so the restore point's is adopted",
                ],
            ),
        ];
        for (explicit, p, origins, parts) in rows {
            let job_max = explicit.unwrap_or(512);
            let got = max_parallelism_on_restore(explicit, job_max, p, 256, "s://x", origins).unwrap_err();
            for part in parts {
                assert!(got.contains(part), "want `{part}` in `{got}`");
            }
        }
    }
}
