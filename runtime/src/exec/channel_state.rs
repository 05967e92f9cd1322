//! Channel state of unaligned checkpoints: the records a subtask received on an input after it
//! snapshotted checkpoint n and before that input's barrier n (they were sent before the
//! upstream snapshot, so no other part of the checkpoint holds them), and the output an
//! upstream subtask had not sent yet when it snapshotted (the rest of a send interrupted by the
//! checkpoint, which goes out after the barrier: Flink's output buffers). Both are input of the
//! downstream stage and stored under its uid; the upstream subtask's file comes after the
//! downstream subtasks' files in `_metadata`, so a restore replays a channel's records in the
//! order they were sent.
//!
//! Stored as a state file (`channel-<uid>-<subtask>.state`, the [`StateFile`] format) named by
//! the uid of the stage's first operator: records that crossed a keyed exchange in one block
//! per key group (so a restore at another parallelism gives each key group to the subtask
//! that now owns it, with the same function that routes records and assigns keyed state);
//! other records (forward channels into a union) in one operator-state item, in order.
//!
//! On restore, a subtask replays its share before it reads any input: the key groups it owns,
//! and the forward records of old subtask `k` go to new subtask `k mod parallelism` (a union
//! has no keyed state and its output is repartitioned or written as it is, so any subtask may
//! take them; with an unchanged parallelism that is subtask `k` itself).

use crate::checkpoint::restore::LoadedSnapshot;
use crate::cluster::record_codec;
use crate::record::Record;
use crate::state::key_group::KeyGroupRange;
use crate::state::snapshot::{KeyGroupBlock, StateFile};
use std::collections::BTreeMap;

/// Kind of the `_metadata` entries that hold channel state.
pub const CHANNEL_STATE_KIND: &str = "channel-state";

/// State names of a channel-state entry.
pub const CHANNEL_STATE_NAMES: [&str; 1] = ["channel:in-flight"];

/// File name of subtask `subtask`'s channel state for the stage headed by `uid`.
pub fn file_name(uid: &str, subtask: u32) -> String {
    format!("channel-{uid}-{subtask}.state")
}

/// File name of the unsent output of upstream task `task` (global index), channel state of
/// the stage headed by `uid`.
pub fn output_file_name(uid: &str, task: usize) -> String {
    format!("channel-{uid}-output-of-task-{task}.state")
}

/// The state file of `records` (in the order received), with the number of records.
pub fn to_state_file(uid: &str, subtask: u32, records: &[Record]) -> StateFile {
    let mut keyed: BTreeMap<u32, Vec<Record>> = BTreeMap::new();
    let mut forward = Vec::new();
    for r in records {
        match &r.keyed {
            Some(k) => keyed.entry(k.key_group).or_default().push(r.clone()),
            None => forward.push(r.clone()),
        }
    }
    StateFile {
        uid: uid.to_string(),
        subtask,
        key_groups: keyed
            .into_iter()
            .map(|(key_group, rs)| KeyGroupBlock {
                expired_through_ms: None,
                key_group,
                entries: rs.len() as u64,
                data: record_codec::encode(&rs).into(),
            })
            .collect(),
        operator_state: if forward.is_empty() {
            vec![]
        } else {
            vec![record_codec::encode(&forward)]
        },
    }
}

/// The new subtask that replays the forward (non-keyed) channel state old subtask
/// `old_subtask` wrote, at `parallelism`: `old_subtask mod parallelism`.
pub fn forward_owner(old_subtask: u32, parallelism: u32) -> u32 {
    old_subtask % parallelism.max(1)
}

/// The channel-state records new subtask `subtask` of `parallelism` (owning `range`) replays
/// for the stage headed by `uid`: the keyed blocks of its key groups from every old subtask's
/// file, then the forward records of the old subtasks it takes over ([`forward_owner`]).
/// Errors name the file whose records do not decode.
pub fn records_for_subtask(
    snapshot: Option<&LoadedSnapshot>,
    uid: &str,
    subtask: u32,
    parallelism: u32,
    range: KeyGroupRange,
) -> Result<Vec<Record>, String> {
    let mut out = Vec::new();
    let Some(s) = snapshot else { return Ok(out) };
    let Some(entry) = s.metadata.channel_state.iter().find(|o| o.uid == uid) else {
        return Ok(out);
    };
    for h in &entry.handles {
        let Some(file) = s.files.get(&h.file) else {
            return Err(format!("{}: channel-state file {} was not loaded", s.url, h.file));
        };
        let bad = |e: String| format!("{}/{}: channel state does not decode: {e}", s.url, h.file);
        for b in file.key_groups.iter().filter(|b| range.contains(b.key_group)) {
            out.extend(record_codec::decode(&b.data).map_err(bad)?);
        }
        if forward_owner(h.subtask, parallelism) == subtask {
            for item in &file.operator_state {
                out.extend(record_codec::decode(item).map_err(bad)?);
            }
        }
    }
    Ok(out)
}

/// Writes channel state `records` for the stage headed by `uid` as file `name` next to the
/// operator state of `barrier`'s snapshot; `subtask` is the downstream subtask whose forward
/// channel they belong to (the writer's own subtask index: a forward channel joins subtasks of
/// the same index). Returns its handle for the acknowledgement.
pub async fn upload(
    barrier: &crate::checkpoint::Barrier,
    subtask: u32,
    parallelism: u32,
    uid: String,
    name: String,
    records: Vec<Record>,
) -> crate::operators::TaskResult<crate::checkpoint::AckedOperator> {
    let uid2 = uid.clone();
    let entries = records.len() as u64;
    let bytes = tokio::task::spawn_blocking(move || {
        crate::state::snapshot::encode_state_file(&to_state_file(&uid2, subtask, &records))
    })
    .await
    .map_err(|e| crate::operators::TaskError(crate::exec::panics::join_failure("the channel state encoder", e)))?;
    let (size, crc32) = (bytes.len() as u64, crc32fast::hash(&bytes));
    let path = crate::storage::join(&barrier.target.dir, &name);
    barrier.target.store.put(&path, bytes::Bytes::from(bytes)).await?;
    Ok(crate::checkpoint::AckedOperator {
        uid,
        kind: CHANNEL_STATE_KIND.to_string(),
        parallelism,
        state_names: CHANNEL_STATE_NAMES.iter().map(|s| s.to_string()).collect(),
        handle: crate::state::snapshot::StateHandle {
            file: name,
            subtask,
            key_group_range: None,
            size,
            crc32,
            entries,
            operator_items: None,
            chain: vec![],
            native: None,
            expired_through_ms: None,
        },
        delta_of: None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::{Key, KeyedBy, Row};
    use crate::state::key_group::key_group_range;

    #[test]
    fn forward_channel_state_goes_to_one_subtask_at_any_parallelism() {
        // (old subtask, new parallelism) -> new subtask
        for (old, p, want) in [(0, 2, 0), (1, 2, 1), (2, 3, 2), (2, 1, 0), (1, 3, 1), (2, 2, 0)] {
            assert_eq!(forward_owner(old, p), want, "old {old} at p {p}");
        }
    }

    #[test]
    fn keyed_records_are_stored_by_key_group_and_forward_records_in_order() {
        let keyed = |w: &str| Record {
            row: Row::from_json(serde_json::json!({ "w": w })),
            keyed: Some(KeyedBy::new(Key::Str(w.into()), 128)),
        };
        let plain = |w: &str| Record::new(Row::from_json(serde_json::json!({ "w": w })));
        let records = vec![keyed("a"), plain("x"), keyed("b"), keyed("a"), plain("y")];
        let file = to_state_file("counts", 1, &records);
        let total: u64 = file.key_groups.iter().map(|b| b.entries).sum();
        assert_eq!(total, 3);
        let forward = record_codec::decode(&file.operator_state[0]).unwrap();
        assert_eq!(forward, vec![plain("x"), plain("y")]);
        // Each key group's block lands in exactly one subtask's range at p = 3.
        for b in &file.key_groups {
            let owners = (0..3)
                .filter(|&s| key_group_range(s, 3, 128).contains(b.key_group))
                .count();
            assert_eq!(owners, 1);
        }
    }

    /// Two old subtasks' channel state restored at parallelism 3 and 1: every keyed record
    /// goes to exactly the subtask owning its key group, every forward record to one subtask.
    #[test]
    fn a_rescale_gives_every_in_flight_record_to_exactly_one_new_subtask() {
        use crate::checkpoint::restore::LoadedSnapshot;
        use crate::control::api::SnapshotKind;
        use crate::state::snapshot::{CheckpointMetadata, OperatorMetadata, StateHandle};
        let keyed = |w: &str| Record {
            row: Row::from_json(serde_json::json!({ "w": w })),
            keyed: Some(KeyedBy::new(Key::Str(w.into()), 128)),
        };
        let plain = |w: &str| Record::new(Row::from_json(serde_json::json!({ "w": w })));
        let words: Vec<String> = (0..60).map(|i| format!("w{i}")).collect();
        let old: Vec<Vec<Record>> = (0..2)
            .map(|s| {
                let mut rs: Vec<Record> = words.iter().skip(s).step_by(2).map(|w| keyed(w)).collect();
                rs.push(plain(&format!("forward-{s}")));
                rs
            })
            .collect();
        let mut files = std::collections::HashMap::new();
        let mut handles = vec![];
        for (s, rs) in old.iter().enumerate() {
            let name = file_name("counts", s as u32);
            files.insert(name.clone(), to_state_file("counts", s as u32, rs));
            handles.push(StateHandle {
                file: name,
                subtask: s as u32,
                key_group_range: None,
                size: 0,
                crc32: 0,
                entries: rs.len() as u64,
                operator_items: None,
                chain: vec![],
                native: None,
                expired_through_ms: None,
            });
        }
        let snapshot = LoadedSnapshot {
            url: "mem://chk-1".into(),
            metadata: CheckpointMetadata {
                format_version: 1,
                job_name: "j".into(),
                checkpoint_id: 1,
                kind: SnapshotKind::Checkpoint,
                max_parallelism: 128,
                parallelism: 2,
                triggered_at_ms: 0,
                completed_at_ms: 0,
                run_id: None,
                operators: vec![],
                channel_state: vec![OperatorMetadata {
                    uid: "counts".into(),
                    kind: CHANNEL_STATE_KIND.into(),
                    parallelism: 2,
                    state_names: vec![],
                    handles,
                }],
                alignment: Default::default(),
            },
            files,
            restored_stores: vec![],
        };
        for p in [3u32, 1] {
            let mut seen: Vec<String> = vec![];
            for sub in 0..p {
                let range = key_group_range(sub, p, 128);
                for r in records_for_subtask(Some(&snapshot), "counts", sub, p, range).unwrap() {
                    if let Some(k) = &r.keyed {
                        assert!(
                            range.contains(k.key_group),
                            "p {p}: subtask {sub} got a key group it does not own"
                        );
                    }
                    seen.push(r.row.get("w").unwrap().to_string());
                }
            }
            seen.sort();
            let mut want: Vec<String> = old
                .iter()
                .flatten()
                .map(|r| r.row.get("w").unwrap().to_string())
                .collect();
            want.sort();
            assert_eq!(seen, want, "p {p}: every in-flight record exactly once");
        }
        assert!(
            records_for_subtask(Some(&snapshot), "other", 0, 1, key_group_range(0, 1, 128))
                .unwrap()
                .is_empty()
        );
    }
}
