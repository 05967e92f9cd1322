//! The `join` step of a StreamJob: a keyed two-input inner join (Flink SQL's regular join).

use schemars::JsonSchema;
use serde::{Deserialize, Serialize};

/// A keyed two-input inner join of the two steps in `inputs` (`[left, right]`), as Flink SQL's
/// regular join `... FROM left JOIN right ON leftKey = rightKey`: both sides are kept in keyed
/// state; each new left record is joined with every right record of its key seen so far, and
/// each new right record with every left record so far. Both inputs are partitioned by the
/// join key into the same key groups (no `keyBy` before a join), so the state checkpoints,
/// restores and rescales by key group. Emits `{<as>: key, <fields>...}` per matching pair.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct JoinSpec {
    /// CEL expression giving the join key of a left record (as `keyBy.expression`): a string,
    /// integer or boolean of the same type as `rightKey`'s.
    pub left_key: String,
    /// CEL expression giving the join key of a right record.
    pub right_key: String,
    /// Output field holding the key (default `key`).
    #[serde(default, rename = "as", skip_serializing_if = "Option::is_none")]
    pub as_field: Option<String>,
    /// Output fields after the key, in order, each taken from one side: `left.<field>` or
    /// `right.<field>`, named by `as` (default: the field's name). A field a record lacks is
    /// written as `null`.
    #[serde(default)]
    pub fields: Vec<JoinFieldSpec>,
    /// State time-to-live (processing time), a duration like `24h`: the rows of a key (both
    /// sides) are forgotten when the key has received no record on either side for this long,
    /// so a join over an unbounded key space holds bounded state (records arriving later no
    /// longer match them). Unset: rows are kept for ever.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub ttl: Option<String>,
}

/// One output field of a `join`.
#[derive(Clone, Debug, Default, Serialize, Deserialize, JsonSchema, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct JoinFieldSpec {
    /// `left.<field>` or `right.<field>`: a top-level field of that side's records.
    pub from: String,
    /// Output name (default: the field's name).
    #[serde(default, rename = "as", skip_serializing_if = "Option::is_none")]
    pub as_field: Option<String>,
}
