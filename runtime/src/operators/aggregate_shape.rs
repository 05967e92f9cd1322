//! What an aggregation's stored values mean, kept as its operator state in every snapshot
//! (`broadcast:aggregate-shape`, the same in every subtask) and checked when a job restores
//! it: the key selector of the `keyBy` before it, and the expression it aggregates.
//!
//! A restore that changed either would go on silently with values of another meaning: under
//! another key selector the stored counts sit under keys of the old meaning and meet records
//! whose key merely looks the same; a `sum` of another expression adds new values to sums of
//! the old one. So [`refusal`] refuses such a restore, naming the field and what to do, as a
//! join refuses a changed key selector (`join/stored_shape.rs`) and a window a changed
//! aggregate. Expressions are compared as parsed CEL, so spacing may change. The kind (`count`,
//! `sum`, ...) is checked by the restore already (a uid reused for another kind).
//!
//! **Encoding.** Postcard of `(key selector, Option<expression>)`. Snapshots written before
//! 2026-12-05 hold no item and restore into any aggregation.

use super::{Aggregate, TaskError, TaskResult};
use crate::operators::join::stored_shape::same_expression;

/// An aggregation's stored meaning: see the module doc.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
pub struct AggregateShape {
    /// The `keyBy` step's `expression`, as written.
    pub key: String,
    /// The aggregated `expression`, as written (`None`: a `count`).
    pub expression: Option<String>,
}

/// Why an aggregation of shape `job` must not restore values stored under `stored`, or `None`
/// when it may. `key_path` and `expression_path` name the job's fields in the manifest
/// (`spec.job.steps[3].keyBy.expression`).
pub fn refusal(stored: &AggregateShape, job: &AggregateShape, key_path: &str, expression_path: &str) -> Option<String> {
    const WHAT_TO_DO: &str =
        "or give the step a new `uid` (and set spec.allowNonRestoredState: true) to start it empty";
    if !same_expression(&stored.key, &job.key) {
        return Some(format!(
            "{key_path}: the restore point's values are keyed by `{}`, this job keys by `{}`: the stored values \
             would meet records whose key only looks the same. Keep the key selector when restoring, {WHAT_TO_DO}",
            stored.key, job.key
        ));
    }
    let same = match (&stored.expression, &job.expression) {
        (Some(before), Some(now)) => same_expression(before, now),
        (before, now) => before == now,
    };
    if !same {
        let shown = |e: &Option<String>| e.as_deref().map_or("(none)".to_string(), |e| format!("`{e}`"));
        return Some(format!(
            "{expression_path}: the restore point's values aggregate {}, this job aggregates {}: new values would \
             be added to values of another meaning. Keep the expression when restoring, {WHAT_TO_DO}",
            shown(&stored.expression),
            shown(&job.expression)
        ));
    }
    None
}

impl Aggregate {
    /// Keeps the aggregation's shape (`key`: the key selector of the `keyBy` step at
    /// `key_step` in `spec.job.steps`) in every snapshot, and checks it against the shapes the
    /// restore brought. Errors: a restored shape does not decode, or differs ([`refusal`]).
    pub fn keyed_by(mut self, key: &str, key_step: usize) -> TaskResult<Aggregate> {
        let shape = AggregateShape {
            key: key.to_string(),
            expression: self.expression_text.clone(),
        };
        let key_path = format!("spec.job.steps[{key_step}].keyBy.expression");
        let expression_path = match &self.step_path {
            Some(step) => format!("{step}.expression"),
            None => "expression".to_string(),
        };
        for item in std::mem::take(&mut self.restored_shapes) {
            let stored: AggregateShape = postcard::from_bytes(&item)
                .map_err(|e| TaskError(format!("the aggregation's stored shape does not decode: {e}")))?;
            if let Some(refused) = refusal(&stored, &shape, &key_path, &expression_path) {
                return Err(TaskError(refused));
            }
        }
        self.kept_shape = Some(postcard::to_allocvec(&shape).expect("strings encode"));
        Ok(self)
    }

    /// The operator state items every snapshot writes: the kept shape, if any.
    pub(super) fn shape_items(&self) -> Vec<Vec<u8>> {
        self.kept_shape.iter().cloned().collect()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn refusal_table() {
        let shape = |key: &str, expression: Option<&str>| AggregateShape {
            key: key.into(),
            expression: expression.map(String::from),
        };
        // (what, stored, job, refused with)
        let rows = [
            ("same", shape("word", None), shape("word", None), None),
            (
                "spacing only",
                shape("lower(word)", None),
                shape("lower( word )", None),
                None,
            ),
            (
                "another key",
                shape("word", None),
                shape("lower(word)", None),
                Some("keyBy.expression"),
            ),
            (
                "same sum",
                shape("repo", Some("commits")),
                shape("repo", Some("commits")),
                None,
            ),
            (
                "another sum",
                shape("repo", Some("commits")),
                shape("repo", Some("commits * 2")),
                Some("sum.expression"),
            ),
            (
                "sum expression added",
                shape("repo", None),
                shape("repo", Some("commits")),
                Some("sum.expression"),
            ),
        ];
        for (what, stored, job, want) in rows {
            let got = refusal(
                &stored,
                &job,
                "spec.job.steps[3].keyBy.expression",
                "spec.job.steps[4].sum.expression",
            );
            match want {
                None => assert_eq!(got, None, "{what}"),
                Some(field) => {
                    let got = got.unwrap_or_else(|| panic!("{what}: not refused"));
                    assert!(got.contains(field) && got.contains("new `uid`"), "{what}: {got}");
                }
            }
        }
    }
}
