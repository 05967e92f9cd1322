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

/// The manifest paths a refusal names: the `keyBy` step's expression
/// (`spec.job.steps[3].keyBy.expression`), the aggregation's expression
/// (`spec.job.steps[4].sum.expression`) and its uid (`spec.job.steps[4].uid`).
pub struct ShapePaths {
    /// The `keyBy` step's `expression`.
    pub key: String,
    /// The aggregation's `expression`.
    pub expression: String,
    /// The aggregation's `uid`.
    pub uid: String,
}

/// Why an aggregation of shape `job` must not restore values stored under `stored`, or `None`
/// when it may; `paths` name the job's fields.
pub fn refusal(stored: &AggregateShape, job: &AggregateShape, paths: &ShapePaths) -> Option<String> {
    let what_to_do = format!(
        "or give the aggregation a new uid ({}) and set spec.allowNonRestoredState: true to start it empty",
        paths.uid
    );
    let (key_path, expression_path) = (&paths.key, &paths.expression);
    if !same_expression(&stored.key, &job.key) {
        return Some(format!(
            "{key_path}: the restore point's values are keyed by `{}`, this job keys by `{}`: the stored values \
             would meet records whose key only looks the same. Keep the key selector when restoring, {what_to_do}",
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
             be combined with values of another meaning. Keep the expression when restoring, {what_to_do}",
            shown(&stored.expression),
            shown(&job.expression)
        ));
    }
    None
}

/// Checks the shapes a restore brought (`items`, the aggregation's operator state) against
/// `job` ([`refusal`], naming `paths`). Errors: an item does not
/// decode, or a shape differs.
pub fn check_restored(job: &AggregateShape, items: &[Vec<u8>], paths: &ShapePaths) -> Result<(), String> {
    for item in items {
        let stored: AggregateShape =
            postcard::from_bytes(item).map_err(|e| format!("the aggregation's stored shape does not decode: {e}"))?;
        if let Some(refused) = refusal(&stored, job, paths) {
            return Err(refused);
        }
    }
    Ok(())
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
        // `step_path` is `spec.job.steps[4].sum` once known.
        let step = self.step_path.as_deref().unwrap_or("the step");
        let paths = ShapePaths {
            key: format!("spec.job.steps[{key_step}].keyBy.expression"),
            expression: format!("{step}.expression"),
            uid: format!("{}.uid", step.rsplit_once('.').map_or(step, |(at, _)| at)),
        };
        let restored = std::mem::take(&mut self.restored_shapes);
        check_restored(&shape, &restored, &paths).map_err(TaskError)?;
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
            let paths = ShapePaths {
                key: "spec.job.steps[3].keyBy.expression".into(),
                expression: "spec.job.steps[4].sum.expression".into(),
                uid: "spec.job.steps[4].uid".into(),
            };
            let got = refusal(&stored, &job, &paths);
            match want {
                None => assert_eq!(got, None, "{what}"),
                Some(field) => {
                    let got = got.unwrap_or_else(|| panic!("{what}: not refused"));
                    assert!(
                        got.contains(field) && got.contains("new uid (spec.job.steps[4].uid)"),
                        "{what}: {got}"
                    );
                }
            }
        }
    }
}
