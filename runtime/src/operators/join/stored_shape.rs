//! What a join's stored rows mean, kept as the join's operator state in every snapshot and
//! checked when a job restores it: the input fields each side's rows hold, which input each
//! side read (the step's `inputs`), and each side's key selector.
//!
//! A restore that changed any of them would join wrongly without an error: with the inputs
//! swapped, the stored rows of `orders` would be matched against new `orders` rows as if they
//! were the other side's; with another key selector, stored rows sit under keys of the old
//! meaning and meet new records whose key merely looks the same. So [`refusal`] refuses such
//! a restore, naming the field and what to do. Flink's SQL planner refuses a changed join the
//! same way (a plan's state is only compatible with the same plan); its DataStream API checks
//! state serializers only.
//!
//! **Encoding.** Postcard: the fields `(left, right)` first, then `(inputs, keys)`. Snapshots
//! written before the inputs and keys were kept (2026-12-05) end after the fields; they are
//! checked on the fields alone. A build of that time reads a newer snapshot's fields and
//! ignores the rest (postcard's `from_bytes` leaves trailing bytes unread).

use crate::job::join::{JoinDef, Side};
use crate::record::cel;

/// A join's stored meaning: see the module doc.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredShape {
    /// The input fields each side's rows hold, `[left, right]`.
    pub fields: [Vec<String>; 2],
    /// The input each side read, `[left, right]` (`None`: a snapshot from before it was kept).
    pub inputs: Option<[String; 2]>,
    /// Each side's key selector as written, `[left, right]` (`None` with `inputs`).
    pub keys: Option<[String; 2]>,
}

impl StoredShape {
    /// The shape of the join `def` defines.
    pub fn of(def: &JoinDef) -> StoredShape {
        StoredShape {
            fields: [def.projection(Side::Left), def.projection(Side::Right)],
            inputs: Some(def.inputs.clone()),
            keys: Some([def.left_key.clone(), def.right_key.clone()]),
        }
    }

    /// The operator-state bytes of this shape (module doc, "Encoding").
    pub fn encode(&self) -> Vec<u8> {
        let [left, right] = &self.fields;
        let mut out = postcard::to_allocvec(&(left, right)).expect("strings encode");
        if let (Some(inputs), Some(keys)) = (&self.inputs, &self.keys) {
            out.extend(postcard::to_allocvec(&(inputs, keys)).expect("strings encode"));
        }
        out
    }

    /// Decodes [`StoredShape::encode`]'s bytes, or a snapshot's from before the inputs and
    /// keys were kept. Errors: the bytes do not decode (a corrupt or foreign snapshot).
    pub fn decode(bytes: &[u8]) -> Result<StoredShape, String> {
        let undecodable = |e: postcard::Error| format!("the join's stored input fields do not decode: {e}");
        let ((left, right), rest) =
            postcard::take_from_bytes::<(Vec<String>, Vec<String>)>(bytes).map_err(undecodable)?;
        let (inputs, keys) = if rest.is_empty() {
            (None, None)
        } else {
            let (inputs, keys) = postcard::from_bytes::<([String; 2], [String; 2])>(rest).map_err(undecodable)?;
            (Some(inputs), Some(keys))
        };
        Ok(StoredShape {
            fields: [left, right],
            inputs,
            keys,
        })
    }
}

const WHAT_TO_DO: &str = "or give the join a new `uid` (and set spec.allowNonRestoredState: true) to start it empty";

/// Why the join of shape `job` must not restore rows stored under `stored`, or `None` when it
/// may. Refused:
/// - other kept fields (the stored rows hold other values);
/// - a side now reading the input the other side read (the inputs swapped or mixed up; a
///   renamed input is accepted, since a step's name is not its meaning);
/// - a key selector that differs other than in spacing (compared as parsed CEL).
///
/// A snapshot without inputs and keys is checked on its fields only.
pub fn refusal(stored: &StoredShape, job: &StoredShape) -> Option<String> {
    if stored.fields != job.fields {
        return Some(format!(
            "the restore point's join kept the input fields left {:?}, right {:?}; this job's `fields` need \
             left {:?}, right {:?}. Keep the join's `fields` when restoring, {WHAT_TO_DO}",
            stored.fields[0], stored.fields[1], job.fields[0], job.fields[1]
        ));
    }
    if let (Some(before), Some(now)) = (&stored.inputs, &job.inputs) {
        let crossed = |side: usize| now[side] != before[side] && now[side] == before[1 - side];
        if crossed(0) || crossed(1) {
            return Some(format!(
                "the restore point's join read its left side from `{}` and its right side from `{}`; this job's \
                 `inputs` are [{}, {}], so each side's stored rows would be joined as the other side's. Keep \
                 the order of the join's `inputs` when restoring, {WHAT_TO_DO}",
                before[0], before[1], now[0], now[1]
            ));
        }
    }
    if let (Some(before), Some(now)) = (&stored.keys, &job.keys) {
        for (side, field) in [(0, "leftKey"), (1, "rightKey")] {
            if !same_expression(&before[side], &now[side]) {
                return Some(format!(
                    "the restore point's join keyed its {} side by `{}`; this job's `{field}` is `{}`, so the \
                     stored rows would meet records whose key only looks the same. Keep `{field}` when \
                     restoring, {WHAT_TO_DO}",
                    if side == 0 { "left" } else { "right" },
                    before[side],
                    now[side]
                ));
            }
        }
    }
    None
}

/// Checks the shapes a restore brought (`items`, the join's operator state) against the join
/// `def`. Errors: an item does not decode, or a shape differs ([`refusal`]).
pub fn check_restored(def: &JoinDef, items: &[Vec<u8>]) -> Result<(), String> {
    let shape = StoredShape::of(def);
    for item in items {
        if let Some(refused) = refusal(&StoredShape::decode(item)?, &shape) {
            return Err(refused);
        }
    }
    Ok(())
}

/// Whether two CEL expressions are the same text or parse to the same syntax tree (they
/// differ in spacing only).
pub(crate) fn same_expression(a: &str, b: &str) -> bool {
    a == b
        || match (cel::compile(a), cel::compile(b)) {
            (Ok(a), Ok(b)) => a.syntax() == b.syntax(),
            _ => false,
        }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(fields: [&[&str]; 2], inputs: [&str; 2], keys: [&str; 2]) -> StoredShape {
        StoredShape {
            fields: fields.map(|f| f.iter().map(|s| s.to_string()).collect()),
            inputs: Some(inputs.map(String::from)),
            keys: Some(keys.map(String::from)),
        }
    }

    #[test]
    fn refusal_table() {
        let stored = shape([&["actor"], &["owner"]], ["clicks", "users"], ["user", "id"]);
        let old_snapshot = StoredShape {
            inputs: None,
            keys: None,
            ..stored.clone()
        };
        // (case, stored, job, refusal starts with)
        let cases: Vec<(&str, &StoredShape, StoredShape, Option<&str>)> = vec![
            ("same", &stored, stored.clone(), None),
            (
                "keys differ in spacing only",
                &stored,
                shape([&["actor"], &["owner"]], ["clicks", "users"], [" user ", "id"]),
                None,
            ),
            (
                "an input renamed",
                &stored,
                shape([&["actor"], &["owner"]], ["clicks-v2", "users"], ["user", "id"]),
                None,
            ),
            (
                "inputs swapped",
                &stored,
                shape([&["actor"], &["owner"]], ["users", "clicks"], ["user", "id"]),
                Some("the restore point's join read its left side from `clicks`"),
            ),
            (
                "the right input now the left's",
                &stored,
                shape([&["actor"], &["owner"]], ["clicks", "clicks"], ["user", "id"]),
                Some("the restore point's join read its left side"),
            ),
            (
                "the left key changed",
                &stored,
                shape([&["actor"], &["owner"]], ["clicks", "users"], ["session", "id"]),
                Some("the restore point's join keyed its left side by `user`; this job's `leftKey`"),
            ),
            (
                "the right key changed",
                &stored,
                shape([&["actor"], &["owner"]], ["clicks", "users"], ["user", "string(id)"]),
                Some("the restore point's join keyed its right side by `id`; this job's `rightKey`"),
            ),
            (
                "other fields",
                &stored,
                shape([&["actor", "n"], &["owner"]], ["clicks", "users"], ["user", "id"]),
                Some("the restore point's join kept the input fields"),
            ),
            (
                "a snapshot without inputs and keys: fields only",
                &old_snapshot,
                shape([&["actor"], &["owner"]], ["users", "clicks"], ["a", "b"]),
                None,
            ),
            (
                "a snapshot without inputs and keys, other fields",
                &old_snapshot,
                shape([&["n"], &["owner"]], ["clicks", "users"], ["user", "id"]),
                Some("the restore point's join kept the input fields"),
            ),
        ];
        for (case, stored, job, want) in cases {
            let got = refusal(stored, &job);
            match want {
                None => assert_eq!(got, None, "{case}"),
                Some(prefix) => {
                    let message = got.unwrap_or_else(|| panic!("{case}: accepted"));
                    assert!(message.starts_with(prefix), "{case}: {message}");
                    assert!(message.contains("new `uid`"), "{case}: says what to do: {message}");
                }
            }
        }
    }

    #[test]
    fn the_shape_round_trips_and_older_snapshots_and_builds_read_their_part() {
        let now = shape([&["actor", "n"], &[]], ["a", "b.late"], ["x % 10", "y"]);
        assert_eq!(StoredShape::decode(&now.encode()).unwrap(), now);
        // A snapshot from before the inputs and keys were kept: the fields tuple alone.
        let old_bytes = postcard::to_allocvec(&(vec!["actor".to_string()], vec!["owner".to_string()])).unwrap();
        let old = StoredShape::decode(&old_bytes).unwrap();
        assert_eq!((old.inputs, old.keys), (None, None));
        assert_eq!(old.fields, [vec!["actor".to_string()], vec!["owner".to_string()]]);
        // What a build of that time decodes from a new snapshot: the fields.
        let read_by_older: (Vec<String>, Vec<String>) = postcard::from_bytes(&now.encode()).unwrap();
        assert_eq!([read_by_older.0, read_by_older.1], now.fields);
        // Truncated inputs and keys are an error, not an old snapshot.
        let bytes = now.encode();
        let e = StoredShape::decode(&bytes[..bytes.len() - 2]).unwrap_err();
        assert!(e.starts_with("the join's stored input fields do not decode"), "{e}");
    }
}
