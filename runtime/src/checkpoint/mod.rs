//! The checkpoint protocol: barriers, acknowledgements, and the coordinator's decisions.
//!
//! The decisions (when to trigger, when a checkpoint is complete or timed out, which restore
//! point to use, what retention may delete) are pure functions in [`decide`] with table-driven
//! tests; [`coordinator`] and [`restore`] do the I/O around them.

pub mod alignment_stats;
mod commit;
pub mod completed_mark;
pub mod coordinator;
pub mod decide;
pub mod failed_savepoints;
pub mod failure_cause;
pub mod guarantee;
pub mod lineage;
pub mod mapped_files;
pub mod max_parallelism;
pub mod native_restore;
pub mod native_upload;
pub mod owner;
pub mod part_schedule;
pub mod read_positions;
pub mod restore;
pub mod restore_files;
pub mod restore_mode;
pub mod retention;
pub mod run_lock;
pub mod shape_compat;
pub mod shared_files;
pub mod state_upload;
pub mod suspend;

use crate::control::api::SnapshotKind;
use crate::state::snapshot::StateHandle;
use crate::storage::Store;
use std::sync::Arc;

/// Where a snapshot's files go: a directory in a store.
#[derive(Clone, Debug)]
pub struct SnapshotTarget {
    /// The store.
    pub store: Store,
    /// Directory inside the store (`<job>/chk-<n>` or `savepoint-<job>-<n>-<suffix>`).
    pub dir: String,
}

impl SnapshotTarget {
    /// URL of the directory.
    pub fn url(&self) -> String {
        self.store.url(&self.dir)
    }
}

/// A checkpoint barrier, injected at every source subtask and forwarded in band by every
/// operator after it snapshots.
#[derive(Clone, Debug)]
pub struct Barrier {
    /// Checkpoint id.
    pub id: u64,
    /// Checkpoint or savepoint.
    pub kind: SnapshotKind,
    /// Stop-with-savepoint: sources pause after emitting this barrier.
    pub stop: bool,
    /// Where subtasks write their state files.
    pub target: Arc<SnapshotTarget>,
    /// Trigger time, ms since the Unix epoch.
    pub triggered_at_ms: u64,
    /// The final checkpoint of a bounded job (all sources read to the end). Always taken
    /// aligned, like a savepoint: no later checkpoint would commit the sink output of the
    /// records an unaligned snapshot leaves in its channel state.
    pub is_final: bool,
    /// A checkpoint of a job with `checkpointing.incremental: true`: `Some(confirmed)`, where
    /// `confirmed` is the newest completed checkpoint, the only base a delta may extend
    /// (a savepoint completing leaves it, `commit::next_base`; `None` before the first
    /// checkpoint of the run unless the run claimed the checkpoint it restored: then that
    /// one, `restore_mode.rs`).
    /// `None` for savepoints and jobs without incremental checkpoints. See
    /// [`crate::state::incremental`].
    pub incremental: Option<Option<u64>>,
}

/// A subtask's acknowledgement of a barrier: its state handles and timings.
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct Ack {
    /// Checkpoint id.
    pub checkpoint_id: u64,
    /// Global task index (position of the subtask in the job's task list).
    pub task: usize,
    /// State handles, per operator uid and kind, with their state names.
    pub operators: Vec<AckedOperator>,
    /// Synchronous part, ms.
    pub sync_ms: u64,
    /// Asynchronous part (serialize + upload), ms.
    pub async_ms: u64,
    /// Barrier alignment time, ms (first barrier to the snapshot).
    pub alignment_ms: u64,
    /// Whether the subtask snapshotted unaligned.
    #[serde(default)]
    pub unaligned: bool,
    /// Its channel-state file (unaligned only): `uid` is the stage's first operator, `kind`
    /// is `channel-state`, `handle.entries` the number of records.
    #[serde(default)]
    pub channel_state: Option<Box<AckedOperator>>,
    /// Its unsent output at an unaligned snapshot, channel state of the downstream stages: one
    /// file per edge with unsent records (`uid` is that edge's downstream stage's first
    /// operator; see [`crate::exec::channel_state`]). The input channel-state handle is boxed
    /// (and this a vector): an acknowledgement travels inside messages whose other variants
    /// are small.
    #[serde(default)]
    pub output_channel_state: Vec<AckedOperator>,
}

/// One operator's part of an [`Ack`].
#[derive(Clone, Debug, serde::Serialize, serde::Deserialize)]
pub struct AckedOperator {
    /// Operator uid.
    pub uid: String,
    /// Operator kind.
    pub kind: String,
    /// Parallelism of the operator.
    pub parallelism: u32,
    /// State names held.
    pub state_names: Vec<String>,
    /// The file written.
    pub handle: StateHandle,
    /// Incremental checkpoints: the handle is a delta over the chain of this checkpoint; the
    /// coordinator prepends that chain when it writes `_metadata`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub delta_of: Option<u64>,
}

/// Milliseconds since the Unix epoch.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.as_millis() as u64)
        .unwrap_or_default()
}

/// Directory of checkpoint `id` of `job` inside the checkpoint store: `<job>/chk-<id>`.
pub fn checkpoint_dir(job: &str, id: u64) -> String {
    format!("{job}/chk-{id}")
}

/// Directory name of savepoint `id` of `job`: `savepoint-<job>-<id>-<8 random letters a-z>`
/// (as Flink's `savepoint-<job id>-<random>`). Jobs of one name (StreamJobs in two namespaces)
/// share a savepoints directory without writing into, or deleting, each other's savepoints;
/// ids are per checkpoint storage, so theirs meet. Letters, not hex digits: an all-digit
/// suffix would read as the id of a job whose name ends in `-<id>` (`savepoint-orders-2-1234`).
pub fn savepoint_dir_name(job: &str, id: u64) -> String {
    let suffix: String = (0..SAVEPOINT_SUFFIX_LEN)
        .map(|_| char::from(b'a' + rand::random_range(0..26u8)))
        .collect();
    format!("savepoint-{job}-{id}-{suffix}")
}

const SAVEPOINT_SUFFIX_LEN: usize = 8;

/// The id of `job`'s savepoint directory `name` (`savepoint-<job>-<id>-<8 letters>`, or
/// `savepoint-<job>-<id>` as written before 2026-12-07); `None` for any other name.
pub fn savepoint_id_of(job: &str, name: &str) -> Option<u64> {
    let rest = name.strip_prefix("savepoint-")?.strip_prefix(job)?.strip_prefix('-')?;
    let id = match rest.split_once('-') {
        Some((id, suffix)) if is_savepoint_suffix(suffix) => id,
        Some(_) => return None,
        None => rest,
    };
    id.parse().ok()
}

/// The id of a snapshot directory name, whatever its job: `chk-<id>`, a savepoint pointer
/// `sp-<id>`, `savepoint-<job>-<id>-<8 letters>` or `savepoint-<job>-<id>`; `None` for other
/// names.
pub fn snapshot_dir_id(name: &str) -> Option<u64> {
    if let Some(id) = name.strip_prefix("chk-").or_else(|| name.strip_prefix("sp-")) {
        return id.parse().ok();
    }
    let rest = name.strip_prefix("savepoint-")?;
    let mut parts = rest.rsplit('-');
    let last = parts.next()?;
    match (is_savepoint_suffix(last), parts.next()) {
        (true, Some(id)) if id.parse::<u64>().is_ok() => id.parse().ok(),
        _ => last.parse().ok(),
    }
}

fn is_savepoint_suffix(part: &str) -> bool {
    part.len() == SAVEPOINT_SUFFIX_LEN && part.bytes().all(|b| b.is_ascii_lowercase())
}

/// Name of the commit-point file.
pub const METADATA_FILE: &str = "_metadata";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn savepoint_directory_names_are_unique_and_give_their_id_back() {
        let (a, b) = (savepoint_dir_name("wc", 12), savepoint_dir_name("wc", 12));
        assert_ne!(a, b, "two jobs named wc at id 12 would share a directory");
        for name in [&a, &b] {
            assert!(name.starts_with("savepoint-wc-12-"), "{name}");
            assert_eq!(savepoint_id_of("wc", name), Some(12), "{name}");
            assert_eq!(snapshot_dir_id(name), Some(12), "{name}");
        }
        let table: &[(&str, &str, Option<u64>)] = &[
            ("wc", "savepoint-wc-7", Some(7)),
            ("wc", "savepoint-wc-7-kqzbtwma", Some(7)),
            ("wc", "savepoint-wc-x-7", None),
            ("wc", "savepoint-wc-7-notours", None),
            ("wc", "savepoint-wcx-7", None),
            ("wc", "savepoint-wc", None),
            ("wc-2", "savepoint-wc-2-7-kqzbtwma", Some(7)),
            ("wc", "savepoint-wc-2-7-kqzbtwma", None),
            // Job `wc-2`'s savepoint 7 in the old form, or its id 12345678: never `wc`'s.
            ("wc", "savepoint-wc-2-7", None),
            ("wc", "savepoint-wc-2-12345678", None),
            ("wc-2", "savepoint-wc-2-12345678", Some(12345678)),
            ("wc", "chk-7", None),
        ];
        for (job, name, want) in table {
            assert_eq!(savepoint_id_of(job, name), *want, "{job} {name}");
        }
        let any: &[(&str, Option<u64>)] = &[
            ("chk-9", Some(9)),
            ("sp-11", Some(11)),
            ("savepoint-gen-10", Some(10)),
            ("savepoint-gen-10-kqzbtwma", Some(10)),
            ("savepoint-my-job-3-abcdefgh", Some(3)),
            ("savepoint-orders-2-12345678", Some(12345678)),
            ("savepoints", None),
            ("chk-x", None),
        ];
        for (name, want) in any {
            assert_eq!(snapshot_dir_id(name), *want, "{name}");
        }
    }
}
