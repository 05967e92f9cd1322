//! Whether a changed spec can take over the state of the running job, decided from the two specs
//! alone, before the running job is stopped (the restore-point check after the stop stays as
//! the second line, for state the running spec does not show).

use crate::crd::{StreamJobSpec, UpgradeMode};
use weir_runtime::checkpoint::decide::{Compatibility, check_compatibility};
use weir_runtime::checkpoint::shape_compat::shape_refusals;
use weir_runtime::job::Job;

/// Stateful operators of `job` as `(uid, kind)`.
fn stateful_operators(job: &Job) -> Vec<(String, String)> {
    job.operators
        .iter()
        .filter(|o| o.kind.is_stateful())
        .map(|o| (o.uid.clone(), o.kind.name().to_string()))
        .collect()
}

/// Why the job `name` cannot carry the state of `deployed` (the running spec) into `target`:
/// a stateful operator uid that `target` no longer has (unless `allowNonRestoredState`), a uid
/// now used by another kind of operator, another maxParallelism, or a step that keeps its uid
/// but would give its stored state another meaning (another key selector, aggregated
/// expression, window or join shape: [`shape_refusals`], the checks a restore runs). `None`:
/// compatible, or `target` carries no state (`upgradeMode: stateless`), or a spec does not
/// validate (the runtime's own checks report that).
pub fn state_incompatibility(name: &str, deployed: &StreamJobSpec, target: &StreamJobSpec) -> Option<String> {
    if target.upgrade_mode == UpgradeMode::Stateless {
        return None;
    }
    let deployed = deployed.runtime_job(name).ok()?;
    let target_job = target.runtime_job(name).ok()?;
    let (old_ops, new_ops) = (stateful_operators(&deployed), stateful_operators(&target_job));
    let (old_max_p, new_max_p) = (deployed.max_parallelism, target_job.max_parallelism);
    let refused = match check_compatibility(old_max_p, &old_ops, new_max_p, &new_ops) {
        Compatibility::Compatible => None,
        Compatibility::NonRestoredState(_) if target.allow_non_restored_state => None,
        Compatibility::NonRestoredState(uids) => Some(format!(
            "spec.job no longer has the stateful operators [{}] whose state the running job holds; \
             refused before stopping the job (it keeps running the previous spec): restore those \
             uids, or set spec.allowNonRestoredState: true to drop their state",
            uids.join(", ")
        )),
        Compatibility::KindChanged(list) => Some(format!(
            "spec.job reuses operator uids for another kind of operator ({}); the state could not \
             be restored; refused before stopping the job (it keeps running the previous spec): \
             give the new operators new uids",
            list.iter()
                .map(|(u, a, b)| format!("`{u}` was {a}, is {b}"))
                .collect::<Vec<_>>()
                .join(", ")
        )),
        Compatibility::MaxParallelismChanged(old, new) => Some(format!(
            "spec.maxParallelism changed from {old} to {new}: keyed state is partitioned by it; \
             refused before stopping the job (it keeps running the previous spec)"
        )),
    };
    refused.or_else(|| {
        let refusals = shape_refusals(&deployed, &target_job);
        (!refusals.is_empty()).then(|| {
            format!(
                "{}; refused before stopping the job (it keeps running the previous spec)",
                refusals.join("; ")
            )
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(steps: &str, extra: &str) -> StreamJobSpec {
        serde_yaml::from_str(&format!(
            "checkpointing: {{storage: s3://b/c}}\njob:\n  steps:\n{steps}\n{extra}"
        ))
        .unwrap()
    }

    const COUNT: &str = "    - uid: src\n      source: {generator: {}}\n    - keyBy: {expression: key}\n    - uid: counts\n      count: {}\n    - sink: {print: {}}";
    const NO_COUNT: &str = "    - uid: src\n      source: {generator: {}}\n    - sink: {print: {}}";
    const COUNTS_IS_SUM: &str = "    - uid: src\n      source: {generator: {}}\n    - keyBy: {expression: key}\n    - uid: counts\n      sum: {expression: \"1\"}\n    - sink: {print: {}}";

    #[test]
    fn table() {
        let running = spec(COUNT, "");
        let other_key = COUNT.replace("expression: key", "expression: \"key + '-'\"");
        let cases: [(&str, StreamJobSpec, Option<&str>); 9] = [
            ("same job", spec(COUNT, "parallelism: 3"), None),
            ("uid removed", spec(NO_COUNT, ""), Some("[counts]")),
            (
                "uid removed, allowed",
                spec(NO_COUNT, "allowNonRestoredState: true"),
                None,
            ),
            ("uid removed, stateless", spec(NO_COUNT, "upgradeMode: stateless"), None),
            (
                "uid reused for another kind",
                spec(COUNTS_IS_SUM, "allowNonRestoredState: true"),
                Some("`counts` was count, is"),
            ),
            (
                "maxParallelism changed",
                spec(COUNT, "maxParallelism: 256"),
                Some("from 128 to 256"),
            ),
            (
                "another key selector under the same uid",
                spec(&other_key, ""),
                Some(
                    "operator counts: spec.job.steps[1].keyBy.expression: the restore point's values are keyed by `key`",
                ),
            ),
            (
                "another key selector, allowNonRestoredState does not drop kept uids",
                spec(&other_key, "allowNonRestoredState: true"),
                Some("keyBy.expression"),
            ),
            (
                "another key selector, stateless",
                spec(&other_key, "upgradeMode: stateless"),
                None,
            ),
        ];
        for (case, target, want) in cases {
            let got = state_incompatibility("wc", &running, &target);
            match want {
                None => assert_eq!(got, None, "{case}"),
                Some(part) => {
                    let msg = got.unwrap_or_else(|| panic!("{case}: accepted"));
                    assert!(
                        msg.contains(part) && msg.contains("refused before stopping"),
                        "{case}: {msg}"
                    );
                }
            }
        }
    }
}
