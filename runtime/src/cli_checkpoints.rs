//! `weir checkpoints list` (`weir savepoint inspect` is [`crate::cli_inspect`]): a job's
//! snapshots in its checkpoint store, newest first, with id, type, status, completion time,
//! size, lineage and location, as a table or JSON.

use crate::checkpoint::decide::SeenSnapshot;
use crate::checkpoint::{checkpoint_dir, lineage, restore};
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
    /// Whether it is complete (a checkpoint's `_metadata`, a savepoint's pointer exists).
    pub completed: bool,
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
/// hold anything).
pub fn table(rows: &[SnapshotRow]) -> Vec<String> {
    let cells = |r: &SnapshotRow| {
        [
            r.id.to_string(),
            format!("{:?}", r.kind).to_lowercase(),
            if r.completed { "completed" } else { "incomplete" }.to_string(),
            r.completed_at.clone().unwrap_or_else(|| "-".into()),
            r.size_bytes
                .map(|b| indicatif::HumanBytes(b).to_string())
                .unwrap_or_else(|| "-".into()),
            r.lineage_id.clone().unwrap_or_else(|| "-".into()),
            alignment_cell(r.alignment.as_ref()),
            r.location.clone(),
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
                let size = match storage::open(&p.url, &S3Options::default()).await {
                    Ok(target) => target.list("").await.ok().map(|o| o.iter().map(|o| o.size).sum()),
                    Err(_) => None,
                };
                SnapshotRow {
                    id: seen.id,
                    kind: SnapshotKind::Savepoint,
                    completed: true,
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
                completed_at: None,
                size_bytes: None,
                lineage_id: None,
                alignment: None,
                location: format!("(unreadable pointer: {e})"),
            },
        };
    }
    let dir = checkpoint_dir(job, seen.id);
    let metadata = if seen.completed {
        match restore::load_metadata(store, &dir).await {
            Ok(m) => Some(m),
            Err(e) => {
                tracing::warn!(target: "weir", "checkpoint {}: {e}", seen.id);
                None
            }
        }
    } else {
        None
    };
    SnapshotRow {
        id: seen.id,
        kind: SnapshotKind::Checkpoint,
        completed: seen.completed,
        completed_at: metadata.as_ref().and_then(|m| rfc3339(m.completed_at_ms)),
        size_bytes: Some(size_under(objects, &dir) + shared_size_of(objects, job, seen.id)),
        alignment: metadata.as_ref().map(|m| m.alignment.clone()),
        lineage_id: metadata.and_then(|m| m.run_id),
        location: store.url(&dir),
    }
}

/// Lists the snapshots of `job` in the checkpoint storage `storage_url`, newest first (the
/// first completed row is what `--restore latest` restores).
///
/// Errors: the storage does not exist, holds no snapshot of `job`, or is a job's own directory
/// ([`no_checkpoints_message`]); the storage cannot be read.
pub async fn list(storage_url: &str, job: &str, format: OutputFormat) -> Result<(), String> {
    let store = storage::open(storage_url, &S3Options::default())
        .await
        .map_err(|e| e.to_string())?;
    let seen = lineage::list_snapshots(&store, job).await.map_err(|e| e.to_string())?;
    if seen.is_empty() {
        let local_dir = (!storage_url.starts_with("s3://"))
            .then(|| std::path::PathBuf::from(storage_url.strip_prefix("file://").unwrap_or(storage_url)));
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
}
