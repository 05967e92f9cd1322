use super::*;
use crate::control::api::{CheckpointStats, JobState, SnapshotKind};

fn object(path: &str) -> ObjectMeta {
    ObjectMeta {
        path: path.into(),
        size: 1,
    }
}

#[test]
fn job_directories_are_the_first_path_components() {
    for (paths, want) in [
        (
            vec![
                "wc/chk-1/_metadata",
                "wc/sp-2/_pointer",
                "clicks/chk-3/_metadata",
                "stray-file",
            ],
            vec!["clicks", "wc"],
        ),
        (vec!["/abs/x"], vec![]),
        (vec![], vec![]),
    ] {
        let objects: Vec<ObjectMeta> = paths.iter().map(|p| object(p)).collect();
        assert_eq!(job_directories(&objects), want, "{paths:?}");
    }
}

fn status(checkpoint: Option<u64>) -> JobStatus {
    JobStatus {
        job_name: "wordcount".into(),
        job_id: "9d1c0e5a2b7f4c11".into(),
        lineage_id: Some("7ac27c53d3fa5f4b".into()),
        state: JobState::Restarting,
        parallelism: 2,
        max_parallelism: 128,
        restored_from: None,
        last_completed_checkpoint: checkpoint.map(|id| CheckpointStats {
            id,
            kind: SnapshotKind::Checkpoint,
            path: "/c/wordcount/chk-4".into(),
            triggered_at_ms: 1_795_455_909_000,
            completed_at_ms: 1_795_455_909_533,
            duration_ms: 533,
            alignment: Default::default(),
            max_sync_ms: 0,
            max_async_ms: 0,
            max_alignment_ms: 0,
            size_bytes: 300,
            full_size_bytes: 300,
        }),
        subtasks: vec![],
        failure: None,
        restarts: 3,
        workers: vec![],
        summary: None,
    }
}

#[test]
fn running_jobs_print_state_checkpoint_and_url() {
    let rows = [
        RunningJobRow::new("http://127.0.0.1:8081", &status(Some(4))),
        RunningJobRow::new("http://h:9", &status(None)),
    ];
    assert_eq!(
        running_table(&rows),
        vec![
            "JOB        STATE       PARALLELISM  RESTARTS  CHECKPOINT  COMPLETED             RUN               LINEAGE           URL",
            "wordcount  RESTARTING  2            3         4           2026-11-23T17:45:09Z  9d1c0e5a2b7f4c11  7ac27c53d3fa5f4b  http://127.0.0.1:8081",
            "wordcount  RESTARTING  2            3         -           -                     9d1c0e5a2b7f4c11  7ac27c53d3fa5f4b  http://h:9",
        ]
    );
    let json = serde_json::to_value(&rows[0]).unwrap();
    assert_eq!(json["state"], "RESTARTING");
    assert_eq!(json["lastCheckpointId"], 4);
    assert_eq!(json["runId"], "9d1c0e5a2b7f4c11");
    assert_eq!(json["lineageId"], "7ac27c53d3fa5f4b");
}

#[test]
fn lineages_print_the_newest_completed_snapshot_or_dashes() {
    let rows = [
        LineageRow {
            job: "wc".into(),
            snapshots: 3,
            latest: Some(SnapshotRow {
                id: 12,
                kind: SnapshotKind::Savepoint,
                completed: true,
                status: crate::cli_checkpoints::SnapshotStatus::Completed,
                problem: None,
                completed_at: Some("2026-11-30T19:45:09Z".into()),
                size_bytes: Some(2048),
                lineage_id: Some("7ac27c53d3fa5f4b".into()),
                location: "s3://b/sp/savepoint-wc-12".into(),
                alignment: Default::default(),
            }),
        },
        LineageRow {
            job: "clicks".into(),
            snapshots: 1,
            latest: None,
        },
        // The newest snapshot's `_metadata` is truncated: `--restore latest` refuses it.
        LineageRow {
            job: "orders".into(),
            snapshots: 2,
            latest: Some(SnapshotRow {
                id: 7,
                kind: SnapshotKind::Checkpoint,
                completed: false,
                status: crate::cli_checkpoints::SnapshotStatus::Corrupt,
                problem: Some("file:///c/orders/chk-7/_metadata: truncated".into()),
                completed_at: None,
                size_bytes: Some(10),
                lineage_id: None,
                location: "file:///c/orders/chk-7".into(),
                alignment: None,
            }),
        },
    ];
    assert_eq!(
        lineage_table(&rows),
        vec![
            "JOB     SNAPSHOTS  LATEST  TYPE        COMPLETED             LINEAGE           LOCATION",
            "wc      3          12      savepoint   2026-11-30T19:45:09Z  7ac27c53d3fa5f4b  s3://b/sp/savepoint-wc-12",
            "clicks  1          -       -           -                     -                 -",
            "orders  2          7       checkpoint  corrupt               -                 file:///c/orders/chk-7",
        ]
    );
}
