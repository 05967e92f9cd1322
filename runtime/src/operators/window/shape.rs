//! What a window's stored state means, kept in its operator state in every snapshot
//! (`broadcast:window-shape`: the same in every subtask) and checked when a job restores it:
//! the windows' type, sizes and aggregate ([`window_shape`]), and the key selector of the
//! `keyBy` before the window.
//!
//! A restore that changed either would go on silently with windows of another meaning: a
//! sliding window's partial counts are not a session's, and under another key selector the
//! open windows sit under keys of the old meaning and meet records whose key merely looks the
//! same. So such a restore is refused before the job starts, naming the field and the way out,
//! as an aggregation's (`operators/aggregate_shape.rs`) and a join's (`join/stored_shape.rs`).
//!
//! **Encoding.** Each subtask writes one item: [`ITEM_PREFIX`], then postcard of `(shape, key
//! selector, watermarks)` ([`StoredItem`]), the watermarks being those of the key groups the
//! subtask owned (`keyed:window-watermarks`, `window/keyed.rs`: an item differs per subtask,
//! but only the owners of a handle's key groups need it, and they read that handle); the shape
//! and key selector are the same in every subtask. Until 2026-12-05 the item was postcard of the
//! shape string alone: such an item restores into a window of the same shape under any key
//! selector (its blocks are the older per-group snapshots, which hold the watermarks). The
//! prefix makes a release of before then refuse today's snapshots ("the window's stored shape
//! does not decode") instead of reading today's keyed blocks as its per-group snapshots, which
//! postcard would misread without an error (found by a review: open session windows lost).
//! Snapshots written before the shape was stored at all hold no item and restore into any
//! window.

use crate::job::event_time::{WindowAssigner, WindowDef};
use crate::job::validate::AggregateFn;
use crate::operators::join::stored_shape::same_expression;

/// The `keyBy` before a window, as a restore's check names it.
#[derive(Clone, Debug, PartialEq)]
pub struct WindowKey {
    /// The `keyBy` step's `expression`, as written.
    pub expression: String,
    /// Its manifest path (`spec.job.steps[1].keyBy.expression`).
    pub expression_path: String,
    /// The window step's `uid` path (`spec.job.steps[2].uid`), the way out a refusal names.
    pub uid_path: String,
}

/// The first bytes of today's items: a postcard string length of 2^32 − 1 (a varint), which no
/// shape string has, so an older release's decode of the shape string fails at the end of the
/// item.
pub const ITEM_PREFIX: [u8; 5] = [0xFF, 0xFF, 0xFF, 0xFF, 0x0F];

/// The watermarks of a subtask's key groups: the first key group, then one watermark (epoch
/// ms) per key group from it, in order.
pub type GroupWatermarks = (u32, Vec<i64>);

/// What one item of a window's operator state holds. See the module doc for the encoding.
#[derive(Clone, Debug, PartialEq)]
pub struct StoredItem {
    /// [`window_shape`] of the window that wrote it.
    pub shape: String,
    /// The key selector of the `keyBy` before the window (`None`: unknown, or an item of
    /// before 2026-12-05).
    pub key: Option<String>,
    /// The watermarks of the writing subtask's key groups (`None`: an item of before
    /// 2026-12-05, whose key-group blocks hold their watermarks).
    pub watermarks: Option<GroupWatermarks>,
}

/// The operator state item a window's snapshot writes: its shape, the key selector of the
/// `keyBy` before it when known (`key`), and `watermarks`.
pub fn shape_item(def: &WindowDef, key: Option<&str>, watermarks: &GroupWatermarks) -> Vec<u8> {
    postcard::to_extend(&(window_shape(def), key, watermarks), ITEM_PREFIX.to_vec())
        .expect("strings and numbers encode")
}

/// Decodes an item of either form (see the module doc). Errors: it decodes as neither.
pub fn decode_item(item: &[u8]) -> Result<StoredItem, String> {
    match item.strip_prefix(ITEM_PREFIX.as_slice()) {
        Some(today) => {
            postcard::from_bytes::<(String, Option<String>, GroupWatermarks)>(today).map(|(shape, key, watermarks)| {
                StoredItem {
                    shape,
                    key,
                    watermarks: Some(watermarks),
                }
            })
        }
        None => postcard::from_bytes::<String>(item).map(|shape| StoredItem {
            shape,
            key: None,
            watermarks: None,
        }),
    }
    .map_err(|e| format!("the window's stored shape does not decode: {e}"))
}

/// Checks the items a restore brought (`items`, the window's operator state) against the
/// window `def` and, when known, the `keyBy` before it (`key`). Errors: an item does not
/// decode; it holds another shape ([`window_shape`]); it holds another key selector (compared
/// as parsed CEL, so spacing may change). Each error says what to do.
pub fn check_restored_shape(def: &WindowDef, key: Option<&WindowKey>, items: &[Vec<u8>]) -> Result<(), String> {
    let shape = window_shape(def);
    let uid = key.map_or("`uid`".to_string(), |key| format!("uid ({})", key.uid_path));
    for item in items {
        let StoredItem {
            shape: stored,
            key: stored_key,
            ..
        } = decode_item(item)?;
        if stored != shape {
            return Err(format!(
                "the restore point holds windows `{stored}`, this job's window is `{shape}`: \
                 open windows of one shape (type, size, slide, gap, aggregate) cannot be carried into another. \
                 Keep the window's settings when restoring, or give it a new {uid} (and set \
                 spec.allowNonRestoredState: true) to start it empty"
            ));
        }
        if let (Some(stored_key), Some(key)) = (stored_key, key)
            && !same_expression(&stored_key, &key.expression)
        {
            return Err(format!(
                "{}: the restore point's windows are keyed by `{stored_key}`, this job keys by `{}`: the open \
                 windows would meet records whose key only looks the same. Keep the key selector when restoring, \
                 or give the window a new {uid} and set spec.allowNonRestoredState: true to start it empty",
                key.expression_path, key.expression
            ));
        }
    }
    Ok(())
}

/// What a window's state means, in the manifest's words: its type with sizes, and its
/// aggregate (`sliding 10m every 5m, count`; `session gap 30s, sum of commits`). The output
/// field name, allowed lateness and event-time field may change at a restore.
pub fn window_shape(def: &WindowDef) -> String {
    let ms = |ms: i64| humantime::format_duration(std::time::Duration::from_millis(ms.max(0) as u64)).to_string();
    let windows = match def.assigner {
        WindowAssigner::Tumbling { size_ms } => format!("tumbling {}", ms(size_ms)),
        WindowAssigner::Sliding { size_ms, slide_ms } => format!("sliding {} every {}", ms(size_ms), ms(slide_ms)),
        WindowAssigner::Session { gap_ms } => format!("session gap {}", ms(gap_ms)),
    };
    match (def.func, &def.expression) {
        (AggregateFn::Count, _) | (_, None) => format!("{windows}, {}", def.func.name()),
        (func, Some(e)) => format!("{windows}, {} of {e}", func.name()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tumbling() -> WindowDef {
        WindowDef {
            assigner: WindowAssigner::Tumbling { size_ms: 60_000 },
            func: AggregateFn::Count,
            expression: None,
            as_field: "count".into(),
            allowed_lateness_ms: 0,
            late_side_output: false,
            time_field: "t".into(),
            time_unit: None,
        }
    }

    fn key(expression: &str) -> WindowKey {
        WindowKey {
            expression: expression.into(),
            expression_path: "spec.job.steps[1].keyBy.expression".into(),
            uid_path: "spec.job.steps[2].uid".into(),
        }
    }

    /// (what, stored item, the job's key, refused with).
    type Row<'a> = (&'a str, Vec<u8>, Option<WindowKey>, Option<&'a str>);

    #[test]
    fn key_selector_table() {
        let def = tumbling();
        let old_item = postcard::to_allocvec(&window_shape(&def)).unwrap();
        let watermarks: GroupWatermarks = (0, vec![5, 7]);
        let shape_item = |def: &WindowDef, key: Option<&str>| shape_item(def, key, &watermarks);
        let rows: [Row; 7] = [
            ("same key", shape_item(&def, Some("user")), Some(key("user")), None),
            (
                "spacing only",
                shape_item(&def, Some("lower(user)")),
                Some(key("lower( user )")),
                None,
            ),
            (
                "another key",
                shape_item(&def, Some("user")),
                Some(key("lower(user)")),
                Some(
                    "spec.job.steps[1].keyBy.expression: the restore point's windows are keyed by `user`, this job \
                     keys by `lower(user)`",
                ),
            ),
            (
                "item without a key (before 2026-12-05)",
                old_item.clone(),
                Some(key("x")),
                None,
            ),
            (
                "a job without a keyBy step before the window",
                shape_item(&def, Some("user")),
                None,
                None,
            ),
            ("stored without a key, none known", shape_item(&def, None), None, None),
            (
                "another shape named before the key",
                shape_item(
                    &WindowDef {
                        assigner: WindowAssigner::Tumbling { size_ms: 1_000 },
                        ..tumbling()
                    },
                    Some("other"),
                ),
                Some(key("user")),
                Some("the restore point holds windows `tumbling 1s, count`, this job's window is `tumbling 1m, count`"),
            ),
        ];
        for (what, item, job_key, refused) in rows {
            let result = check_restored_shape(&def, job_key.as_ref(), &[item]);
            match (refused, result) {
                (None, Ok(())) => {}
                (Some(want), Err(e)) => {
                    assert!(e.starts_with(want), "{what}: {e}");
                    if job_key.is_some() {
                        assert!(e.contains("new uid (spec.job.steps[2].uid)"), "{what}: {e}");
                    }
                }
                (want, got) => panic!("{what}: want refused {want:?}, got {got:?}"),
            }
        }
    }

    /// Both forms decode: today's with its key and watermarks, the string alone (before
    /// 2026-12-05) with neither; a release that reads the string alone (as releases before
    /// 2026-12-05 do) fails on today's item instead of reading a shape and then misreading the
    /// blocks; an item of neither form is an error naming it.
    #[test]
    fn items_of_both_forms_decode_and_garbage_is_named() {
        let def = tumbling();
        let item = shape_item(&def, Some("user"), &(3, vec![10, i64::MIN]));
        assert_eq!(
            decode_item(&item).unwrap(),
            StoredItem {
                shape: "tumbling 1m, count".into(),
                key: Some("user".into()),
                watermarks: Some((3, vec![10, i64::MIN])),
            }
        );
        assert!(
            postcard::from_bytes::<String>(&item).is_err(),
            "an older release refuses it"
        );
        let old = postcard::to_allocvec(&window_shape(&def)).unwrap();
        assert_eq!(
            decode_item(&old).unwrap(),
            StoredItem {
                shape: "tumbling 1m, count".into(),
                key: None,
                watermarks: None,
            }
        );
        let e = check_restored_shape(&def, None, &[vec![0xff, 0xff, 0xff]]).unwrap_err();
        assert!(e.starts_with("the window's stored shape does not decode"), "{e}");
    }
}
