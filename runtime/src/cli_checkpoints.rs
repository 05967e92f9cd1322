//! `weir checkpoints list` (`weir savepoint inspect` is [`crate::cli_inspect`]): a job's
//! snapshots in its checkpoint store, newest first, with id, type, status, completion time,
//! size, lineage and location, as a table or JSON. A checkpoint's status comes from reading and
//! verifying its `_metadata` (header, length, checksum): one whose `_metadata` exists but does
//! not verify is `corrupt`, with the reason, never `completed`.

use crate::checkpoint::decide::SeenSnapshot;
use crate::checkpoint::{METADATA_FILE, checkpoint_dir, lineage, restore};
use crate::cli_input::no_checkpoints_message;
use crate::control::api::SnapshotKind;
use crate::output;
use crate::storage::{self, ObjectMeta, S3Options, Store};
use serde::Serialize;
use std::time::{Duration, UNIX_EPOCH};

pub use crate::output::OutputFormat;

/// One snapshot of a job as `weir checkpoints list` prints it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SnapshotRow {
    /// Checkpoint id.
    pub id: u64,
    /// `checkpoint` or `savepoint`.
    #[serde(rename = "type")]
    pub kind: SnapshotKind,
    /// Whether it can be restored as a completed snapshot: its `_metadata` (a savepoint's
    /// pointer) exists and verifies. `false` when incomplete, corrupt or unreadable.
    pub completed: bool,
    /// `completed`, `incomplete` (no `_metadata`), `corrupt` (a `_metadata` that does not
    /// verify: truncated, bad checksum; or a file it lists missing or resized) or `unreadable` (the store did not answer, or a
    /// savepoint pointer that cannot be read).
    pub status: SnapshotStatus,
    /// Why it is not restorable, for `corrupt` and `unreadable` (the file and the fault).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub problem: Option<String>,
    /// Completion time, RFC 3339 UTC (`None` when incomplete or unknown).
    pub completed_at: Option<String>,
    /// Bytes of its files (state files, `_metadata`, and for an incremental checkpoint the
    /// files it uploaded to `shared/`: what it wrote, not what it references); `None` when
    /// they cannot be listed.
    pub size_bytes: Option<u64>,
    /// The lineage it belongs to (`runId` in its `_metadata` or savepoint pointer: the run id
    /// of the run that began the lineage, which `weir list` shows as LINEAGE); `None` when
    /// unknown.
    pub lineage_id: Option<String>,
    /// How it was aligned and its channel state (`None` when its `_metadata` was not read: a
    /// savepoint, which is always aligned, or an incomplete checkpoint).
    pub alignment: Option<crate::control::api::CheckpointAlignment>,
    /// URL of the snapshot directory (for a savepoint: where the pointer points).
    pub location: String,
}

/// What `weir checkpoints list` says of a snapshot.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub enum SnapshotStatus {
    /// Its `_metadata` (a savepoint's pointer) exists and verifies: it can be restored.
    Completed,
    /// No `_metadata`: a checkpoint declined, timed out, or cut off by a kill; never restored.
    Incomplete,
    /// Its `_metadata` exists but does not verify (truncated, bad checksum, not Weir's), or a
    /// file it lists is missing or of another size ([`missing_or_resized_file`]): not
    /// restorable. Its sink output may have been committed, so `--restore latest` refuses while
    /// it is the newest snapshot rather than go back to an older one.
    Corrupt,
    /// Its `_metadata` or pointer could not be read (a storage error, a pointer that does not
    /// decode).
    Unreadable,
}

impl SnapshotStatus {
    /// The STATUS cell: `completed`, `incomplete`, `corrupt`, `unreadable`.
    pub fn as_str(self) -> &'static str {
        match self {
            SnapshotStatus::Completed => "completed",
            SnapshotStatus::Incomplete => "incomplete",
            SnapshotStatus::Corrupt => "corrupt",
            SnapshotStatus::Unreadable => "unreadable",
        }
    }
}

/// The status of a checkpoint from the listing (`has_metadata`: its `_metadata` exists) and,
/// when it exists, the result of reading and verifying it; with the problem for a status other
/// than `completed` or `incomplete`.
pub fn checkpoint_status<T>(
    has_metadata: bool,
    metadata: Option<&Result<T, restore::RestoreError>>,
) -> (SnapshotStatus, Option<String>) {
    match (has_metadata, metadata) {
        (false, _) | (true, None) => (SnapshotStatus::Incomplete, None),
        (true, Some(Ok(_))) => (SnapshotStatus::Completed, None),
        (true, Some(Err(restore::RestoreError::Corrupt(fault)))) => (SnapshotStatus::Corrupt, Some(fault.to_string())),
        // Deleted between the listing and the read (retention of a running job): gone.
        (true, Some(Err(restore::RestoreError::Storage(storage::StorageError::NotFound(_))))) => {
            (SnapshotStatus::Incomplete, None)
        }
        (true, Some(Err(e))) => (SnapshotStatus::Unreadable, Some(e.to_string())),
    }
}

/// The first file that the `_metadata` of the checkpoint directory `dir` lists (its own state
/// files and the `shared/` files an incremental checkpoint references) and that `objects` (the
/// store's objects under `job/`) lacks or holds at another size: said as a restore would find
/// it. `None` when every one is there (a file outside `job/` is not looked for: the restore
/// refuses it as outside the store). Its checksum is verified only by a restore: this is a
/// listing, one request for the whole job.
pub fn missing_or_resized_file(
    dir: &str,
    metadata: &crate::state::snapshot::CheckpointMetadata,
    objects: &[ObjectMeta],
    job: &str,
) -> Option<String> {
    let job_prefix = format!("{job}/");
    let sizes: std::collections::HashMap<&str, u64> = objects.iter().map(|o| (o.path.as_str(), o.size)).collect();
    metadata
        .operators
        .iter()
        .flat_map(|o| &o.handles)
        .flat_map(|h| h.files())
        .filter_map(|(file, size, _)| {
            let path = crate::state::incremental::resolve_relative(dir, file)?;
            path.starts_with(&job_prefix).then_some((path, size))
        })
        .find_map(|(path, size)| match sizes.get(path.as_str()) {
            None => Some(format!(
                "{path}, a file its `{METADATA_FILE}` lists, is missing (deleted, or not copied with the checkpoint)"
            )),
            Some(&listed) if listed != size => Some(format!(
                "{path} holds {listed} bytes, its `{METADATA_FILE}` says {size} (truncated or replaced)"
            )),
            Some(_) => None,
        })
}

/// Sum of the sizes of the objects under `dir/`.
pub fn size_under(objects: &[ObjectMeta], dir: &str) -> u64 {
    let prefix = format!("{dir}/");
    objects
        .iter()
        .filter(|o| o.path.starts_with(&prefix))
        .map(|o| o.size)
        .sum()
}

/// Bytes checkpoint `id` of `job` uploaded to the shared directory of incremental
/// checkpoints (`<job>/shared/...-chk<id>.state`).
pub fn shared_size_of(objects: &[ObjectMeta], job: &str, id: u64) -> u64 {
    let prefix = format!("{job}/{}/", crate::state::incremental::SHARED_DIR);
    objects
        .iter()
        .filter_map(|o| o.path.strip_prefix(&prefix).map(|name| (name, o.size)))
        .filter(|(name, _)| crate::state::incremental::shared_file_checkpoint(name) == Some(id))
        .map(|(_, size)| size)
        .sum()
}

/// A completion time in milliseconds since the Unix epoch as RFC 3339 UTC, to the second;
/// `None` for 0 (unknown, written by an older version).
pub fn rfc3339(completed_at_ms: u64) -> Option<String> {
    (completed_at_ms > 0)
        .then(|| humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_millis(completed_at_ms)).to_string())
}

/// The ALIGNMENT cell: `aligned 12ms`, `unaligned 3ms +4.00 KiB` (alignment time, channel
/// state), or `-` when unknown.
pub fn alignment_cell(a: Option<&crate::control::api::CheckpointAlignment>) -> String {
    match a {
        None => "-".into(),
        Some(a) if a.unaligned => format!(
            "unaligned {}ms +{}",
            a.alignment_ms,
            indicatif::HumanBytes(a.channel_state_bytes)
        ),
        Some(a) => format!("aligned {}ms", a.alignment_ms),
    }
}

/// The rows as a table: a header, then one aligned line per row (location last, so it may
/// hold anything; followed by the problem of a corrupt or unreadable snapshot).
pub fn table(rows: &[SnapshotRow]) -> Vec<String> {
    let cells = |r: &SnapshotRow| {
        [
            r.id.to_string(),
            format!("{:?}", r.kind).to_lowercase(),
            r.status.as_str().to_string(),
            r.completed_at.clone().unwrap_or_else(|| "-".into()),
            r.size_bytes
                .map(|b| indicatif::HumanBytes(b).to_string())
                .unwrap_or_else(|| "-".into()),
            r.lineage_id.clone().unwrap_or_else(|| "-".into()),
            alignment_cell(r.alignment.as_ref()),
            match &r.problem {
                Some(problem) => format!("{}  ({problem})", r.location),
                None => r.location.clone(),
            },
        ]
    };
    let header = [
        "ID",
        "TYPE",
        "STATUS",
        "COMPLETED",
        "SIZE",
        "LINEAGE",
        "ALIGNMENT",
        "LOCATION",
    ]
    .map(str::to_string);
    let lines: Vec<[String; 8]> = std::iter::once(header).chain(rows.iter().map(cells)).collect();
    let widths: Vec<usize> = (0..7)
        .map(|c| lines.iter().map(|l| l[c].chars().count()).max().unwrap_or(0))
        .collect();
    lines
        .iter()
        .map(|l| {
            let mut out = String::new();
            for (c, w) in widths.iter().enumerate() {
                out.push_str(&format!("{:<w$}  ", l[c]));
            }
            out.push_str(&l[7]);
            out
        })
        .collect()
}

/// The row of snapshot `seen` of `job` (`objects`: the store's objects under `job/`, for
/// sizes): a savepoint's from its pointer, a checkpoint's from its `_metadata`.
pub async fn snapshot_row(store: &Store, job: &str, objects: &[ObjectMeta], seen: &SeenSnapshot) -> SnapshotRow {
    if seen.savepoint {
        return match lineage::read_pointer(store, job, seen.id).await {
            Ok(p) => {
                let listed = match storage::open(&p.url, &S3Options::default()).await {
                    Ok(target) => target.list("").await.ok(),
                    Err(_) => None,
                };
                let size = listed.as_ref().map(|o| o.iter().map(|o| o.size).sum());
                // The pointer outlives a savepoint moved or deleted by hand: no `_metadata`
                // where it points is not restorable (`--restore latest` refuses it).
                let moved = listed.is_some_and(|o| !o.iter().any(|o| o.path == METADATA_FILE));
                let (status, problem) = match moved {
                    false => (SnapshotStatus::Completed, None),
                    true => (
                        SnapshotStatus::Unreadable,
                        Some(format!(
                            "{} holds no `{METADATA_FILE}`: the savepoint was moved or deleted since it completed",
                            p.url
                        )),
                    ),
                };
                SnapshotRow {
                    id: seen.id,
                    kind: SnapshotKind::Savepoint,
                    completed: status == SnapshotStatus::Completed,
                    status,
                    problem,
                    completed_at: rfc3339(p.completed_at_ms),
                    size_bytes: size,
                    lineage_id: Some(p.run_id),
                    alignment: None,
                    location: p.url,
                }
            }
            Err(e) => SnapshotRow {
                id: seen.id,
                kind: SnapshotKind::Savepoint,
                completed: false,
                status: SnapshotStatus::Unreadable,
                problem: Some(format!("unreadable pointer: {e}")),
                completed_at: None,
                size_bytes: None,
                lineage_id: None,
                alignment: None,
                location: store.url(&lineage::pointer_dir(job, seen.id)),
            },
        };
    }
    let dir = checkpoint_dir(job, seen.id);
    let read = match seen.completed {
        true => Some(restore::load_metadata(store, &dir).await),
        false => None,
    };
    let (mut status, mut problem) = checkpoint_status(seen.completed, read.as_ref());
    if let Some(Ok(metadata)) = &read
        && let Some(fault) = missing_or_resized_file(&dir, metadata, objects, job)
    {
        (status, problem) = (SnapshotStatus::Corrupt, Some(fault));
    }
    if let Some(problem) = &problem {
        tracing::warn!(target: "weir", "checkpoint {} is {}: {problem}", seen.id, status.as_str());
    }
    let metadata = read.and_then(Result::ok);
    SnapshotRow {
        id: seen.id,
        kind: SnapshotKind::Checkpoint,
        completed: status == SnapshotStatus::Completed,
        status,
        problem,
        completed_at: metadata.as_ref().and_then(|m| rfc3339(m.completed_at_ms)),
        size_bytes: Some(size_under(objects, &dir) + shared_size_of(objects, job, seen.id)),
        alignment: metadata.as_ref().map(|m| m.alignment.clone()),
        lineage_id: metadata.and_then(|m| m.run_id),
        location: store.url(&dir),
    }
}

/// Lists the snapshots of `job` in the checkpoint storage `storage_url`, newest first. The
/// first row that is `completed` or `corrupt` is what `--restore latest` chooses: a completed
/// one is restored, a corrupt one is refused (naming it and the options), never skipped.
///
/// Errors: the storage does not exist, holds no snapshot of `job`, or is a job's own directory
/// ([`no_checkpoints_message`]); the storage cannot be read.
pub async fn list(storage_url: &str, job: &str, format: OutputFormat) -> Result<(), String> {
    let store = storage::open(storage_url, &S3Options::default())
        .await
        .map_err(|e| e.to_string())?;
    let seen = lineage::list_snapshots(&store, job).await.map_err(|e| e.to_string())?;
    if seen.is_empty() {
        let local_dir = crate::storage::local_path(storage_url)
            .map_err(|e| e.to_string())?
            .map(std::path::PathBuf::from);
        let storage_exists = local_dir.is_none_or(|d| d.is_dir());
        let holds_checkpoint_dirs = !store.list("chk-").await.map_err(|e| e.to_string())?.is_empty();
        return Err(no_checkpoints_message(
            storage_url.trim_end_matches('/'),
            job,
            storage_exists,
            holds_checkpoint_dirs,
        ));
    }
    let objects = store.list(&format!("{job}/")).await.map_err(|e| e.to_string())?;
    let mut rows = Vec::with_capacity(seen.len());
    for s in seen.iter().rev() {
        rows.push(snapshot_row(&store, job, &objects, s).await);
    }
    output::print_data(&rows, format, || table(&rows))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn object(path: &str, size: u64) -> ObjectMeta {
        ObjectMeta {
            path: path.into(),
            size,
        }
    }

    /// A file the `_metadata` lists (its own, or a `shared/` link of a chain) missing or of
    /// another size makes the checkpoint `corrupt`, named; files outside the job are not looked
    /// for.
    #[test]
    fn a_missing_or_resized_listed_file_is_found() {
        use crate::state::snapshot::{ChainLink, CheckpointMetadata, OperatorMetadata, StateHandle};
        let link = |file: &str, size: u64| ChainLink {
            file: file.into(),
            checkpoint_id: 5,
            base: false,
            size,
            crc32: 0,
            entries: 1,
        };
        let handle = StateHandle {
            file: "../shared/c-0-chk5.state".into(),
            subtask: 0,
            key_group_range: None,
            size: 30,
            crc32: 0,
            entries: 1,
            operator_items: None,
            chain: vec![
                link("../shared/c-0-chk3.state", 20),
                link("../shared/c-0-chk5.state", 30),
            ],
            native: None,
            expired_through_ms: None,
        };
        let own = StateHandle {
            file: "w-0.state".into(),
            chain: vec![],
            size: 10,
            ..handle.clone()
        };
        let metadata = CheckpointMetadata {
            format_version: 1,
            job_name: "wc".into(),
            checkpoint_id: 5,
            kind: SnapshotKind::Checkpoint,
            max_parallelism: 128,
            parallelism: 1,
            triggered_at_ms: 0,
            completed_at_ms: 0,
            run_id: None,
            operators: vec![OperatorMetadata {
                uid: "c".into(),
                kind: "count".into(),
                parallelism: 1,
                state_names: vec![],
                handles: vec![handle, own],
            }],
            channel_state: vec![],
            alignment: Default::default(),
        };
        let all = vec![
            object("wc/chk-5/_metadata", 100),
            object("wc/chk-5/w-0.state", 10),
            object("wc/shared/c-0-chk3.state", 20),
            object("wc/shared/c-0-chk5.state", 30),
        ];
        assert_eq!(missing_or_resized_file("wc/chk-5", &metadata, &all, "wc"), None);
        let without = |path: &str| all.iter().filter(|o| o.path != path).cloned().collect::<Vec<_>>();
        for (objects, says) in [
            (
                without("wc/shared/c-0-chk3.state"),
                "wc/shared/c-0-chk3.state, a file its `_metadata` lists, is missing",
            ),
            (
                without("wc/chk-5/w-0.state"),
                "wc/chk-5/w-0.state, a file its `_metadata` lists, is missing",
            ),
            (
                [
                    without("wc/shared/c-0-chk5.state"),
                    vec![object("wc/shared/c-0-chk5.state", 29)],
                ]
                .concat(),
                "wc/shared/c-0-chk5.state holds 29 bytes, its `_metadata` says 30",
            ),
        ] {
            let found = missing_or_resized_file("wc/chk-5", &metadata, &objects, "wc").unwrap_or_default();
            assert!(found.starts_with(says), "{found}");
        }
        // Listed under another job's name (a reference outside the job): not looked for here.
        let missing = without("wc/shared/c-0-chk3.state");
        assert_eq!(missing_or_resized_file("wc/chk-5", &metadata, &missing, "other"), None);
    }

    #[test]
    fn sizes_count_only_the_snapshots_own_files() {
        let objects = [
            object("wc/chk-1/_metadata", 100),
            object("wc/chk-1/op-0", 900),
            object("wc/chk-10/_metadata", 7),
            object("wc/sp-2/_pointer", 50),
        ];
        assert_eq!(size_under(&objects, "wc/chk-1"), 1000);
        assert_eq!(size_under(&objects, "wc/chk-10"), 7);
        assert_eq!(size_under(&objects, "wc/chk-3"), 0);
    }

    #[test]
    fn incremental_sizes_count_the_shared_files_the_checkpoint_wrote() {
        let objects = [
            object("wc/chk-4/_metadata", 100),
            object("wc/shared/counts-0-chk4.state", 40),
            object("wc/shared/counts-1-chk4.state", 2),
            object("wc/shared/counts-0-chk14.state", 900),
            object("wc/shared/counts-0-chk3.state", 900),
        ];
        assert_eq!(
            size_under(&objects, "wc/chk-4") + shared_size_of(&objects, "wc", 4),
            142
        );
        assert_eq!(shared_size_of(&objects, "wc", 14), 900);
        assert_eq!(shared_size_of(&objects, "other", 4), 0);
    }

    #[test]
    fn completion_times_are_rfc3339_utc_and_unknown_is_none() {
        assert_eq!(rfc3339(0), None);
        assert_eq!(rfc3339(1_795_455_909_533).as_deref(), Some("2026-11-23T17:45:09Z"));
    }

    #[test]
    fn the_table_aligns_columns_with_the_location_last() {
        let rows = [
            SnapshotRow {
                id: 12,
                kind: SnapshotKind::Savepoint,
                completed: true,
                status: SnapshotStatus::Completed,
                problem: None,
                completed_at: Some("2026-11-30T19:45:09Z".into()),
                size_bytes: Some(2048),
                lineage_id: Some("7ac27c53d3fa5f4b".into()),
                alignment: None,
                location: "s3://b/sp/savepoint-wc-12".into(),
            },
            SnapshotRow {
                id: 9,
                kind: SnapshotKind::Checkpoint,
                completed: false,
                status: SnapshotStatus::Incomplete,
                problem: None,
                completed_at: None,
                size_bytes: Some(0),
                lineage_id: None,
                alignment: Some(crate::control::api::CheckpointAlignment {
                    unaligned: true,
                    alignment_ms: 3,
                    channel_state_bytes: 4096,
                    subtasks: vec![],
                }),
                location: "file:///c/wc/chk-9".into(),
            },
        ];
        assert_eq!(
            table(&rows),
            vec![
                "ID  TYPE        STATUS      COMPLETED             SIZE      LINEAGE           ALIGNMENT                LOCATION",
                "12  savepoint   completed   2026-11-30T19:45:09Z  2.00 KiB  7ac27c53d3fa5f4b  -                        s3://b/sp/savepoint-wc-12",
                "9   checkpoint  incomplete  -                     0 B       -                 unaligned 3ms +4.00 KiB  file:///c/wc/chk-9",
            ]
        );
    }

    /// The status of a checkpoint from the listing and its `_metadata`'s verification.
    #[test]
    fn checkpoint_status_table() {
        use crate::state::snapshot::FormatError;
        let corrupt = || -> Result<(), restore::RestoreError> {
            Err(FormatError {
                path: "file:///c/wc/chk-2/_metadata".into(),
                problem: "truncated or padded: body has 10 bytes, header says 300".into(),
                fault: crate::state::snapshot::FormatFault::Damage,
            }
            .into())
        };
        let storage = |e: storage::StorageError| -> Result<(), restore::RestoreError> { Err(e.into()) };
        // (what, `_metadata` listed, its read, status, problem contains)
        type Row = (
            &'static str,
            bool,
            Option<Result<(), restore::RestoreError>>,
            SnapshotStatus,
            Option<&'static str>,
        );
        let rows: Vec<Row> = vec![
            ("no _metadata", false, None, SnapshotStatus::Incomplete, None),
            (
                "a _metadata that verifies",
                true,
                Some(Ok(())),
                SnapshotStatus::Completed,
                None,
            ),
            (
                "a truncated _metadata",
                true,
                Some(corrupt()),
                SnapshotStatus::Corrupt,
                Some("chk-2/_metadata: truncated or padded"),
            ),
            (
                "deleted since the listing (retention of a running job)",
                true,
                Some(storage(storage::StorageError::NotFound("wc/chk-2/_metadata".into()))),
                SnapshotStatus::Incomplete,
                None,
            ),
            (
                "the store did not answer",
                true,
                Some(storage(storage::StorageError::S3 {
                    path: "s3://b/wc/chk-2/_metadata".into(),
                    op: "GetObject",
                    message: "503 SlowDown".into(),
                })),
                SnapshotStatus::Unreadable,
                Some("503 SlowDown"),
            ),
        ];
        for (what, listed, read, want_status, want_problem) in rows {
            let (status, problem) = checkpoint_status(listed, read.as_ref());
            assert_eq!(status, want_status, "{what}");
            match (problem, want_problem) {
                (None, None) => {}
                (Some(p), Some(want)) => assert!(p.contains(want), "{what}: {p}"),
                (p, want) => panic!("{what}: problem {p:?}, want {want:?}"),
            }
        }
    }

    /// A savepoint whose pointer names a directory without `_metadata` (the savepoint moved or
    /// deleted by hand) is listed `unreadable` with the reason, not `completed` (helper-116's
    /// trial: it was listed completed, then `--restore latest` refused it).
    #[tokio::test]
    async fn a_savepoint_moved_away_from_its_pointer_is_listed_unreadable() {
        use bytes::Bytes;
        let dir = tempfile::tempdir().unwrap();
        let store: Store = std::sync::Arc::new(storage::LocalStore::new(dir.path().to_str().unwrap()).unwrap());
        let savepoint = store.url("savepoints/savepoint-wc-4-x");
        lineage::write_pointer(&store, "wc", &lineage::pointer_for(4, savepoint.clone(), "lineage"))
            .await
            .unwrap();
        store
            .put("savepoints/savepoint-wc-4-x/counts-0.state", Bytes::from_static(b"s"))
            .await
            .unwrap();
        let seen = lineage::list_snapshots(&store, "wc").await.unwrap();
        let objects = store.list("wc/").await.unwrap();
        let row = snapshot_row(&store, "wc", &objects, &seen[0]).await;
        assert_eq!(
            (row.id, row.status, row.completed),
            (4, SnapshotStatus::Unreadable, false)
        );
        let problem = row.problem.unwrap();
        assert!(
            problem.contains(&savepoint) && problem.contains("moved or deleted"),
            "{problem}"
        );

        store
            .put("savepoints/savepoint-wc-4-x/_metadata", Bytes::from_static(b"m"))
            .await
            .unwrap();
        let row = snapshot_row(&store, "wc", &objects, &seen[0]).await;
        assert_eq!(
            (row.status, row.completed, row.problem),
            (SnapshotStatus::Completed, true, None)
        );
    }

    /// A checkpoint whose `_metadata` was truncated is listed as `corrupt` with the reason, not
    /// `completed`; `--restore latest` does not restore it, and does not go back past it to the
    /// older completed checkpoint (its sink output may have been committed): it refuses, naming
    /// the checkpoint, the fault and the options.
    #[tokio::test]
    async fn a_truncated_metadata_is_listed_corrupt_and_never_restored() {
        use crate::checkpoint::native_restore::LocalKeyedStores;
        use crate::state::snapshot::{CheckpointMetadata, encode_metadata};
        use bytes::Bytes;
        let dir = tempfile::tempdir().unwrap();
        let store: Store = std::sync::Arc::new(storage::LocalStore::new(dir.path().to_str().unwrap()).unwrap());
        let metadata = |id: u64| CheckpointMetadata {
            format_version: 1,
            job_name: "wc".into(),
            checkpoint_id: id,
            kind: SnapshotKind::Checkpoint,
            max_parallelism: 128,
            parallelism: 1,
            triggered_at_ms: 0,
            completed_at_ms: 1_795_455_909_533,
            run_id: Some("lineage".into()),
            operators: vec![],
            channel_state: vec![],
            alignment: Default::default(),
        };
        store
            .put("wc/chk-1/_metadata", Bytes::from(encode_metadata(&metadata(1))))
            .await
            .unwrap();
        let whole = encode_metadata(&metadata(2));
        store
            .put("wc/chk-2/_metadata", Bytes::from(whole[..whole.len() / 2].to_vec()))
            .await
            .unwrap();
        store
            .put("wc/chk-3/src-0.state", Bytes::from_static(b"s"))
            .await
            .unwrap();

        let seen = lineage::list_snapshots(&store, "wc").await.unwrap();
        let objects = store.list("wc/").await.unwrap();
        let mut rows = Vec::new();
        for s in seen.iter().rev() {
            rows.push(snapshot_row(&store, "wc", &objects, s).await);
        }
        let statuses: Vec<(u64, SnapshotStatus, bool)> = rows.iter().map(|r| (r.id, r.status, r.completed)).collect();
        assert_eq!(
            statuses,
            [
                (3, SnapshotStatus::Incomplete, false),
                (2, SnapshotStatus::Corrupt, false),
                (1, SnapshotStatus::Completed, true),
            ]
        );
        let problem = rows[1].problem.as_deref().unwrap();
        assert!(
            problem.contains("chk-2/_metadata") && problem.contains("truncated"),
            "{problem}"
        );
        let lines = table(&rows);
        assert!(lines[2].starts_with("2   checkpoint  corrupt"), "{lines:#?}");
        assert!(lines[2].contains("truncated"), "{lines:#?}");
        let json = serde_json::to_value(&rows[1]).unwrap();
        assert_eq!(
            (&json["status"], &json["completed"]),
            (&serde_json::json!("corrupt"), &serde_json::json!(false))
        );

        let restored = restore::resolve(
            &store,
            "wc",
            &restore::RestoreFrom::Latest,
            &S3Options::default(),
            None,
            &LocalKeyedStores::none(),
        )
        .await;
        let refusal = match restored {
            Err(restore::RestoreError::Refused(message)) => message,
            Ok(snapshot) => panic!("restored {:?}", snapshot.map(|s| s.url)),
            Err(e) => panic!("not a refusal: {e}"),
        };
        for needle in [
            "checkpoint chk-2",
            "_metadata",
            "truncated",
            "--restore <url>",
            "--restore none",
        ] {
            assert!(refusal.contains(needle), "the refusal names `{needle}`: {refusal}");
        }
    }
}
