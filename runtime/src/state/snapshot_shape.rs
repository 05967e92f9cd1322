//! The shape every `_metadata` Weir writes has, checked when one is read: a `_metadata` whose
//! checksum verifies but whose contents no coordinator could have written (edited by hand, or
//! written by a tool that recomputed the checksum) is refused as corrupt instead of trusted.
//!
//! Found by trial (helper-112, 2026-12-07): `maxParallelism: 4000000000` made a restore
//! allocate per key group until the kernel killed it (24 GB); a removed keyed-state handle
//! restored half the key groups empty, silently losing their counts; out-of-range, inverted,
//! overlapping key-group ranges, `subtask: 99` and `parallelism: 0` restored without a word.
//!
//! The rules, each what [`super::snapshot`]'s writer (`checkpoint/commit.rs`) guarantees:
//! - `1 <= maxParallelism <= 32768` (Flink's upper bound) and `1 <= parallelism <= maxParallelism`;
//! - operator uids are unique, in `operators` and in `channelState`;
//! - each operator's `parallelism` is in `1..=maxParallelism`; its handles' subtasks are
//!   unique and below it;
//! - a keyed handle's key-group range is the one its subtask owns
//!   ([`key_group_range`], Flink's `computeKeyGroupRangeForOperatorIndex`), and an operator
//!   with keyed state has a keyed handle for every subtask, so its ranges tile
//!   `[0, maxParallelism)` (every subtask of a keyed operator acknowledges its state, empty or
//!   not);
//! - channel state (recorded only by the subtasks that had records in flight, a handle per
//!   input channel) needs no handle per subtask and may hold several of one, but its subtasks
//!   are below its parallelism and its ranges lie within `[0, maxParallelism)`.

use super::key_group::key_group_range;
use super::snapshot::{CheckpointMetadata, OperatorMetadata};
use crate::job::validate::UPPER_BOUND_MAX_PARALLELISM;
use std::collections::HashSet;

/// Checks `meta` against the rules of the module doc. Errors: the first rule broken, naming
/// the field (`maxParallelism`, `operators[uid].handles[subtask 3]`) and the values. Pure.
pub fn check_shape(meta: &CheckpointMetadata) -> Result<(), String> {
    let max_p = meta.max_parallelism;
    if !(1..=UPPER_BOUND_MAX_PARALLELISM).contains(&max_p) {
        return Err(format!(
            "maxParallelism {max_p} is outside 1..={UPPER_BOUND_MAX_PARALLELISM}"
        ));
    }
    if !(1..=max_p).contains(&meta.parallelism) {
        return Err(format!(
            "parallelism {} is outside 1..=maxParallelism ({max_p})",
            meta.parallelism
        ));
    }
    check_operators("operators", &meta.operators, max_p, true)?;
    check_operators("channelState", &meta.channel_state, max_p, false)
}

fn check_operators(field: &str, operators: &[OperatorMetadata], max_p: u32, tiled: bool) -> Result<(), String> {
    let mut uids = HashSet::new();
    for op in operators {
        let at = format!("{field}[{}]", op.uid);
        if !uids.insert(op.uid.as_str()) {
            return Err(format!("{at} appears twice"));
        }
        if !(1..=max_p).contains(&op.parallelism) {
            return Err(format!(
                "{at}.parallelism {} is outside 1..=maxParallelism ({max_p})",
                op.parallelism
            ));
        }
        let mut subtasks = HashSet::new();
        for handle in &op.handles {
            let subtask = handle.subtask;
            if subtask >= op.parallelism {
                return Err(format!(
                    "{at}: a handle of subtask {subtask}, but the operator ran {} subtasks",
                    op.parallelism
                ));
            }
            // Channel state holds a handle per input channel of a subtask that had records in
            // flight, so several of one subtask (found by the unaligned tests).
            if tiled && !subtasks.insert(subtask) {
                return Err(format!("{at}: two handles of subtask {subtask}"));
            }
            let Some(range) = handle.key_group_range else { continue };
            let owned = key_group_range(subtask, op.parallelism, max_p);
            let fits = range.start <= range.end && range.end < max_p;
            if (tiled && range != owned) || !fits {
                return Err(format!(
                    "{at}.handles[subtask {subtask}]: key groups {}..={} are not {} (subtask {subtask} of {} \
                     with maxParallelism {max_p})",
                    range.start,
                    range.end,
                    if tiled {
                        "the ones it owns"
                    } else {
                        "within the key groups"
                    },
                    op.parallelism,
                ));
            }
        }
        let keyed = op.handles.iter().filter(|h| h.key_group_range.is_some()).count();
        if tiled && keyed > 0 && keyed != op.parallelism as usize {
            let missing: Vec<u32> = (0..op.parallelism)
                .filter(|s| {
                    !op.handles
                        .iter()
                        .any(|h| h.subtask == *s && h.key_group_range.is_some())
                })
                .collect();
            return Err(format!(
                "{at}: no keyed state of subtask(s) {missing:?} of {}: their key groups would restore empty",
                op.parallelism
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::key_group::KeyGroupRange;
    use crate::state::snapshot::StateHandle;

    fn handle(subtask: u32, range: Option<(u32, u32)>) -> StateHandle {
        let mut handle: StateHandle = serde_json::from_value(serde_json::json!({
            "file": format!("counts-{subtask}.state"), "subtask": subtask, "size": 1, "crc32": 0, "entries": 0
        }))
        .expect("a minimal handle");
        handle.key_group_range = range.map(|(start, end)| KeyGroupRange { start, end });
        handle
    }

    fn operator(uid: &str, parallelism: u32, handles: Vec<StateHandle>) -> OperatorMetadata {
        OperatorMetadata {
            uid: uid.into(),
            kind: "count".into(),
            parallelism,
            state_names: vec!["count".into()],
            handles,
        }
    }

    /// A wordcount at parallelism 2 with maxParallelism 128: a source with operator state and
    /// a count whose subtasks own key groups 0..=63 and 64..=127.
    fn good() -> CheckpointMetadata {
        serde_json::from_value(serde_json::json!({
            "formatVersion": 1, "jobName": "wordcount", "checkpointId": 3, "kind": "checkpoint",
            "maxParallelism": 128, "parallelism": 2, "triggeredAtMs": 1, "operators": []
        }))
        .map(|mut m: CheckpointMetadata| {
            m.operators = vec![
                operator("lines", 2, vec![handle(0, None), handle(1, None)]),
                operator("counts", 2, vec![handle(0, Some((0, 63))), handle(1, Some((64, 127)))]),
            ];
            m
        })
        .expect("metadata")
    }

    #[test]
    fn metadata_no_coordinator_writes_is_refused_naming_the_field() {
        assert_eq!(check_shape(&good()), Ok(()));
        let mut rescaled = good();
        rescaled.operators[1] = operator(
            "counts",
            3,
            vec![
                handle(0, Some((0, 42))),
                handle(1, Some((43, 85))),
                handle(2, Some((86, 127))),
            ],
        );
        rescaled.parallelism = 3;
        assert_eq!(check_shape(&rescaled), Ok(()), "parallelism 3 tiles 128 key groups");
        let mut in_flight = good();
        in_flight.channel_state = vec![operator(
            "keyBy-3",
            2,
            vec![handle(1, Some((64, 127))), handle(1, Some((64, 127)))],
        )];
        assert_eq!(
            check_shape(&in_flight),
            Ok(()),
            "channel state of one subtask only, a handle per input channel"
        );

        type Edit = fn(&mut CheckpointMetadata);
        let cases: Vec<(&str, Edit, &str)> = vec![
            (
                "huge maxParallelism",
                |m| m.max_parallelism = 4_000_000_000,
                "maxParallelism 4000000000 is outside 1..=32768",
            ),
            (
                "zero maxParallelism",
                |m| m.max_parallelism = 0,
                "maxParallelism 0 is outside",
            ),
            (
                "zero parallelism",
                |m| m.parallelism = 0,
                "parallelism 0 is outside 1..=maxParallelism (128)",
            ),
            (
                "operator parallelism 0",
                |m| m.operators[1].parallelism = 0,
                "operators[counts].parallelism 0 is outside",
            ),
            (
                "a handle removed",
                |m| {
                    m.operators[1].handles.pop();
                },
                "operators[counts]: no keyed state of subtask(s) [1] of 2",
            ),
            (
                "subtask 99",
                |m| m.operators[0].handles[1].subtask = 99,
                "operators[lines]: a handle of subtask 99, but the operator ran 2 subtasks",
            ),
            (
                "two handles of one subtask",
                |m| m.operators[0].handles[1].subtask = 0,
                "operators[lines]: two handles of subtask 0",
            ),
            (
                "duplicated operator",
                |m| {
                    let again = m.operators[1].clone();
                    m.operators.push(again);
                },
                "operators[counts] appears twice",
            ),
            (
                "range past the end",
                |m| m.operators[1].handles[1].key_group_range = Some(KeyGroupRange { start: 64, end: 200 }),
                "operators[counts].handles[subtask 1]: key groups 64..=200 are not the ones it owns",
            ),
            (
                "inverted range",
                |m| m.operators[1].handles[0].key_group_range = Some(KeyGroupRange { start: 63, end: 0 }),
                "key groups 63..=0",
            ),
            (
                "overlapping ranges",
                |m| m.operators[1].handles[1].key_group_range = Some(KeyGroupRange { start: 60, end: 127 }),
                "key groups 60..=127",
            ),
            (
                "a gap",
                |m| m.operators[1].handles[1].key_group_range = Some(KeyGroupRange { start: 70, end: 127 }),
                "key groups 70..=127",
            ),
            (
                "channel state past the end",
                |m| m.channel_state = vec![operator("keyBy-3", 2, vec![handle(0, Some((0, 128)))])],
                "channelState[keyBy-3].handles[subtask 0]: key groups 0..=128 are not within the key groups",
            ),
        ];
        for (name, edit, want) in cases {
            let mut meta = good();
            edit(&mut meta);
            let got = check_shape(&meta).expect_err(name);
            assert!(got.contains(want), "{name}: {got}");
        }
    }
}
