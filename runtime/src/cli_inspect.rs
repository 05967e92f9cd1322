//! `weir savepoint inspect`: what a checkpoint or savepoint holds, after verifying every file.
//! The table groups state by operator uid, then subtask, with sizes for people (`12.3 KiB`);
//! `-o json|yaml` prints [`SnapshotInfo`] with raw numbers (bytes, milliseconds).

use crate::checkpoint::METADATA_FILE;
use crate::checkpoint::restore::{self, RestoreError, not_a_snapshot};
use crate::control::api::{SnapshotInfo, SnapshotKind};
use crate::output::{self, OutputFormat, aligned_columns};
use crate::storage::S3Options;
use crate::storage::StorageError;
use indicatif::HumanBytes;

/// `weir savepoint inspect`: verifies every file of the snapshot at `path` and prints what it
/// holds: `-o json|yaml` the [`SnapshotInfo`] document, `table` the lines of
/// [`inspect_lines`].
///
/// Errors: `path` is not a snapshot directory (no `_metadata`: [`not_a_snapshot`]), or the
/// snapshot cannot be loaded or verified (named).
pub async fn inspect(path: &str, format: OutputFormat) -> Result<(), String> {
    // A local path that is missing or a file: said so, before the store is opened (whose
    // refusal of a file speaks of writing into it).
    if let Ok(Some(local)) = crate::storage::local_path(path) {
        let local = std::path::Path::new(local);
        if !local.exists() {
            return Err(format!(
                "{path} does not exist: give the directory of a checkpoint (`chk-<n>`) or savepoint"
            ));
        }
        if !local.is_dir() {
            return Err(format!(
                "{path} is a file: give the directory of a checkpoint (`chk-<n>`) or savepoint"
            ));
        }
    }
    let info = match restore::load_url(path, &S3Options::default()).await {
        Err(RestoreError::Storage(StorageError::NotFound(missing))) if missing.ends_with(METADATA_FILE) => {
            if let Some(pointer) = restore::savepoint_pointer_message(path, &S3Options::default()).await {
                return Err(pointer);
            }
            let snapshots = snapshot_directories_in(path).await;
            return Err(not_a_snapshot_holding(path, &snapshots));
        }
        loaded => loaded
            .map_err(|e| restore::damaged_snapshot_message(path, &e, None).unwrap_or_else(|| e.to_string()))?
            .metadata
            .info(),
    };
    output::print_data(&info, format, || inspect_lines(&info))
}

/// The snapshot directories (`chk-<n>`, savepoint pointers `sp-<n>`, whose inspection names
/// their savepoint, and `savepoint-<job>-<n>-<suffix>`) directly in `url`, sorted by id
/// ([`crate::checkpoint::snapshot_dir_id`]), not as strings; empty when none or not listable.
async fn snapshot_directories_in(url: &str) -> Vec<String> {
    let Ok(store) = crate::storage::open(url, &S3Options::default()).await else {
        return Vec::new();
    };
    let mut names: Vec<String> = store
        .list_directories("")
        .await
        .unwrap_or_default()
        .into_iter()
        .filter(|name| crate::checkpoint::snapshot_dir_id(name).is_some())
        .collect();
    names.sort_by_key(|name| (crate::checkpoint::snapshot_dir_id(name), name.clone()));
    names
}

/// [`not_a_snapshot`] for `url`, which holds the snapshot directories `snapshots`: then the
/// message names the newest (a job's checkpoint directory or a savepoints directory given
/// instead of one of its snapshots).
pub fn not_a_snapshot_holding(url: &str, snapshots: &[String]) -> String {
    let Some(newest) = snapshots.last() else {
        return not_a_snapshot(url, None);
    };
    let shown: Vec<&str> = snapshots.iter().rev().take(5).rev().map(String::as_str).collect();
    let more = if snapshots.len() > shown.len() { ", ..." } else { "" };
    format!(
        "{url} has no `{METADATA_FILE}`: it holds snapshot directories ({}{more}), give one of them, e.g. \
         `weir savepoint inspect {}/{newest}`",
        shown.join(", "),
        url.trim_end_matches('/')
    )
}

/// The table of `weir savepoint inspect`: a line naming the snapshot, then per stateful
/// operator (in `_metadata` order) a line with its uid, kind, state names and totals, and an
/// aligned table of its subtasks (key groups, entries, size); then the alignment, with a
/// line per subtask that aligned for a while or snapshotted unaligned (by stage and subtask:
/// `_metadata` numbers tasks `stage × parallelism + subtask`).
pub fn inspect_lines(info: &SnapshotInfo) -> Vec<String> {
    let kind = match info.kind {
        SnapshotKind::Checkpoint => "checkpoint",
        SnapshotKind::Savepoint => "savepoint",
    };
    let mut lines = vec![format!(
        "{kind} {} of job {}: parallelism {}, maxParallelism {}, {} stateful operators",
        info.checkpoint_id,
        info.job_name,
        info.parallelism,
        info.max_parallelism,
        info.operators.len()
    )];
    for o in &info.operators {
        lines.push(String::new());
        lines.push(format!(
            "operator {} ({}): {} entries, {}, state {}",
            o.uid,
            o.kind,
            o.entries,
            HumanBytes(o.bytes),
            if o.state_names.is_empty() {
                "-".to_string()
            } else {
                o.state_names.join(", ")
            }
        ));
        let mut rows = vec![
            ["SUBTASK", "KEY GROUPS", "ENTRIES", "SIZE"]
                .map(str::to_string)
                .to_vec(),
        ];
        rows.extend(o.subtasks.iter().map(|s| {
            vec![
                s.subtask.to_string(),
                s.key_group_range
                    .map_or_else(|| "-".to_string(), |[a, b]| format!("{a}-{b}")),
                s.entries.to_string(),
                HumanBytes(s.bytes).to_string(),
            ]
        }));
        if o.subtasks.is_empty() {
            rows.push(vec!["(no per-subtask detail in this _metadata)".to_string()]);
        }
        lines.extend(aligned_columns(&rows).into_iter().map(|l| format!("  {l}")));
    }
    let a = &info.alignment;
    lines.push(String::new());
    lines.push(format!(
        "alignment: {}, longest {} ms, channel state {}",
        if a.unaligned { "unaligned" } else { "aligned" },
        a.alignment_ms,
        HumanBytes(a.channel_state_bytes)
    ));
    let notable: Vec<_> = a
        .subtasks
        .iter()
        .filter(|s| s.unaligned || s.alignment_ms > 0)
        .collect();
    if !notable.is_empty() {
        let p = info.parallelism.max(1) as usize;
        let mut rows = vec![
            ["STAGE", "SUBTASK", "MODE", "ALIGNMENT", "STATE", "CHANNEL STATE"]
                .map(str::to_string)
                .to_vec(),
        ];
        rows.extend(notable.iter().map(|s| {
            vec![
                (s.task / p).to_string(),
                (s.task % p).to_string(),
                if s.unaligned { "unaligned" } else { "aligned" }.to_string(),
                format!("{} ms", s.alignment_ms),
                HumanBytes(s.state_bytes).to_string(),
                format!(
                    "{} in {} records",
                    HumanBytes(s.channel_state_bytes),
                    s.channel_state_records
                ),
            ]
        }));
        lines.extend(aligned_columns(&rows).into_iter().map(|l| format!("  {l}")));
    }
    lines
}

#[cfg(test)]
mod tests {
    use super::*;

    /// What `inspect` says of a path that is no snapshot: missing, a file, a directory holding
    /// snapshots (a job's checkpoint directory: its newest is named), or one holding none.
    #[tokio::test]
    async fn a_path_that_is_no_snapshot_is_told_apart() {
        let root = tempfile::tempdir().unwrap();
        let job = root.path().join("gen");
        for id in [3, 12, 4] {
            std::fs::create_dir_all(job.join(format!("chk-{id}"))).unwrap();
        }
        std::fs::create_dir_all(job.join("shared")).unwrap();
        for id in [9, 10] {
            let savepoint = root.path().join("savepoints").join(format!("savepoint-gen-{id}"));
            std::fs::create_dir_all(savepoint).unwrap();
        }
        std::fs::write(root.path().join("afile"), b"x").unwrap();
        let at = |name: &str| root.path().join(name).display().to_string();
        let table = OutputFormat::Table;
        let missing = inspect(&at("nothing"), table).await.unwrap_err();
        assert!(
            missing.ends_with("does not exist: give the directory of a checkpoint (`chk-<n>`) or savepoint"),
            "{missing}"
        );
        let file = inspect(&at("afile"), table).await.unwrap_err();
        assert!(file.contains("afile is a file: give the directory"), "{file}");
        let job_dir = inspect(&at("gen"), table).await.unwrap_err();
        let want = format!(
            "holds snapshot directories (chk-3, chk-4, chk-12), give one of them, e.g. `weir savepoint inspect {}/chk-12`",
            at("gen")
        );
        assert!(job_dir.contains(&want), "{job_dir}");
        let savepoints = inspect(&at("savepoints"), table).await.unwrap_err();
        assert!(
            savepoints.contains("(savepoint-gen-9, savepoint-gen-10), give one of them"),
            "{savepoints}"
        );
        // A savepoint newer than every checkpoint: its pointer is the newest, and inspecting
        // that names the savepoint.
        std::fs::create_dir_all(job.join("sp-13")).unwrap();
        let savepoint = format!("file://{}/savepoints/savepoint-gen-13-kqzbtwma", root.path().display());
        std::fs::write(
            job.join("sp-13/_pointer"),
            format!(r#"{{"id": 13, "url": "{savepoint}", "runId": "r", "completedAtMs": 1}}"#),
        )
        .unwrap();
        let job_dir = inspect(&at("gen"), table).await.unwrap_err();
        let want = format!(
            "(chk-3, chk-4, chk-12, sp-13), give one of them, e.g. `weir savepoint inspect {}/sp-13`",
            at("gen")
        );
        assert!(job_dir.contains(&want), "{job_dir}");
        let pointer = inspect(&at("gen/sp-13"), table).await.unwrap_err();
        assert!(
            pointer.contains("record of savepoint 13") && pointer.contains(&savepoint),
            "{pointer}"
        );
        let empty = inspect(&at("gen/shared"), table).await.unwrap_err();
        assert!(
            empty.contains("it is not a checkpoint or savepoint directory"),
            "{empty}"
        );
    }
    use crate::control::api::{CheckpointAlignment, OperatorStateInfo, SubtaskCheckpointStats, SubtaskStateInfo};

    fn subtask(subtask: u32, range: Option<[u32; 2]>, bytes: u64, entries: u64) -> SubtaskStateInfo {
        SubtaskStateInfo {
            subtask,
            key_group_range: range,
            bytes,
            entries,
        }
    }

    fn info(alignment: CheckpointAlignment) -> SnapshotInfo {
        SnapshotInfo {
            job_name: "wordcount".into(),
            checkpoint_id: 12,
            kind: SnapshotKind::Savepoint,
            max_parallelism: 128,
            parallelism: 2,
            operators: vec![
                OperatorStateInfo {
                    uid: "counts".into(),
                    kind: "count".into(),
                    state_names: vec!["keyed:aggregate".into()],
                    key_group_ranges: vec![[0, 63], [64, 127]],
                    bytes: 13_000,
                    entries: 1234,
                    subtasks: vec![
                        subtask(0, Some([0, 63]), 6_000, 600),
                        subtask(1, Some([64, 127]), 7_000, 634),
                    ],
                },
                OperatorStateInfo {
                    uid: "lines".into(),
                    kind: "source-file".into(),
                    state_names: vec!["operator:splits".into()],
                    key_group_ranges: vec![],
                    bytes: 160,
                    entries: 2,
                    subtasks: vec![subtask(0, None, 80, 1), subtask(1, None, 80, 1)],
                },
            ],
            alignment,
        }
    }

    #[test]
    fn the_table_groups_by_operator_then_subtask_with_readable_sizes() {
        let want = [
            "savepoint 12 of job wordcount: parallelism 2, maxParallelism 128, 2 stateful operators",
            "",
            "operator counts (count): 1234 entries, 12.70 KiB, state keyed:aggregate",
            "  SUBTASK  KEY GROUPS  ENTRIES  SIZE",
            "  0        0-63        600      5.86 KiB",
            "  1        64-127      634      6.84 KiB",
            "",
            "operator lines (source-file): 2 entries, 160 B, state operator:splits",
            "  SUBTASK  KEY GROUPS  ENTRIES  SIZE",
            "  0        -           1        80 B",
            "  1        -           1        80 B",
            "",
            "alignment: aligned, longest 0 ms, channel state 0 B",
        ];
        assert_eq!(inspect_lines(&info(CheckpointAlignment::default())), want);
    }

    #[test]
    fn subtasks_that_aligned_or_went_unaligned_are_listed_by_stage_and_subtask() {
        let stats = |task: usize, unaligned: bool, alignment_ms: u64| SubtaskCheckpointStats {
            task,
            unaligned,
            alignment_ms,
            state_bytes: 6_000,
            channel_state_bytes: if unaligned { 4096 } else { 0 },
            channel_state_records: if unaligned { 40 } else { 0 },
        };
        let lines = inspect_lines(&info(CheckpointAlignment {
            unaligned: true,
            alignment_ms: 12,
            channel_state_bytes: 4096,
            subtasks: vec![stats(0, false, 0), stats(2, false, 7), stats(3, true, 12)],
        }));
        assert_eq!(
            lines[12..],
            [
                "alignment: unaligned, longest 12 ms, channel state 4.00 KiB",
                "  STAGE  SUBTASK  MODE       ALIGNMENT  STATE     CHANNEL STATE",
                "  1      0        aligned    7 ms       5.86 KiB  0 B in 0 records",
                "  1      1        unaligned  12 ms      5.86 KiB  4.00 KiB in 40 records",
            ]
        );
    }

    #[test]
    fn json_keeps_raw_numbers() {
        let json = serde_json::to_value(info(CheckpointAlignment::default())).unwrap();
        assert_eq!(json["operators"][0]["bytes"], 13_000);
        assert_eq!(json["operators"][0]["subtasks"][1]["bytes"], 7_000);
        assert_eq!(
            json["operators"][0]["subtasks"][1]["keyGroupRange"],
            serde_json::json!([64, 127])
        );
        assert!(json["operators"][1]["subtasks"][0].get("keyGroupRange").is_none());
    }
}
