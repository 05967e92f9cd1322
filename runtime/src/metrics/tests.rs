use super::*;
use crate::control::api::SnapshotKind;

fn task(name: &str, subtask: u32, records_in: u64, records_out: u64) -> (String, u32, Arc<TaskMetrics>) {
    let m = TaskMetrics::default();
    m.records_in.store(records_in, Ordering::Relaxed);
    m.records_out.store(records_out, Ordering::Relaxed);
    m.backpressured_ns.store(1_500_000_000, Ordering::Relaxed);
    (name.to_string(), subtask, Arc::new(m))
}

fn stats(id: u64, completed_at_ms: u64) -> CheckpointStats {
    CheckpointStats {
        id,
        kind: SnapshotKind::Checkpoint,
        path: "/ckpt/wc/chk-7".into(),
        triggered_at_ms: completed_at_ms - 250,
        completed_at_ms,
        duration_ms: 250,
        max_sync_ms: 1,
        max_async_ms: 2,
        max_alignment_ms: 3,
        size_bytes: 4096,
        full_size_bytes: 4096,
        alignment: crate::control::api::CheckpointAlignment {
            unaligned: true,
            alignment_ms: 1500,
            channel_state_bytes: 2048,
            subtasks: vec![],
        },
    }
}

/// The lines of `text` that are samples (not `#` comments), as written.
fn samples(text: &str) -> Vec<&str> {
    text.lines().filter(|l| !l.starts_with('#')).collect()
}

#[test]
fn chain_ends_are_the_first_and_last_uid() {
    for (task, want) in [
        ("gen-0", ("gen-0", "gen-0")),
        ("count-2 -> sink-file-3", ("count-2", "sink-file-3")),
        ("a -> b.x -> c_y", ("a", "c_y")),
    ] {
        assert_eq!(chain_ends(task), want, "{task}");
    }
}

#[test]
fn every_metric_carries_the_job_and_subtask_metrics_their_operator() {
    let tasks = vec![
        task("gen-0 -> keyBy-1", 0, 10, 10),
        task("count-2 -> sink-file-3", 1, 10, 0),
    ];
    let text = render(&Scrape {
        job: "wordcount",
        tasks: &tasks,
        uptime: Duration::from_millis(12_500),
        coordinator: Some(CoordinatorNumbers {
            failed_checkpoints: 2,
            restarts: 3,
            last_checkpoint: Some(stats(7, 1_000_000)),
            now_ms: 1_004_000,
        }),
    });
    let lines = samples(&text);
    assert!(!lines.is_empty());
    for l in lines.iter().filter(|l| **l != "# EOF") {
        assert!(l.contains("job=\"wordcount\""), "no job label: {l}");
    }
    for want in [
        r#"weir_uptime_seconds{job="wordcount"} 12.5"#,
        r#"weir_restarts_total{job="wordcount"} 3"#,
        r#"weir_checkpoints_failed_total{job="wordcount"} 2"#,
        r#"weir_last_checkpoint_id{job="wordcount"} 7"#,
        r#"weir_last_checkpoint_age_seconds{job="wordcount"} 4.0"#,
        r#"weir_last_checkpoint_size_bytes{job="wordcount"} 4096"#,
        r#"weir_last_checkpoint_duration_seconds{job="wordcount"} 0.25"#,
        r#"weir_last_checkpoint_alignment_seconds{job="wordcount"} 1.5"#,
        r#"weir_last_checkpoint_channel_state_bytes{job="wordcount"} 2048"#,
        r#"weir_last_checkpoint_unaligned{job="wordcount"} 1"#,
        r#"weir_records_in_total{job="wordcount",task="gen-0 -> keyBy-1",operator="gen-0",subtask="0"} 10"#,
        r#"weir_records_out_total{job="wordcount",task="gen-0 -> keyBy-1",operator="keyBy-1",subtask="0"} 10"#,
        r#"weir_records_in_total{job="wordcount",task="count-2 -> sink-file-3",operator="count-2",subtask="1"} 10"#,
        r#"weir_backpressured_seconds_total{job="wordcount",task="count-2 -> sink-file-3",operator="sink-file-3",subtask="1"} 1.5"#,
    ] {
        assert!(lines.contains(&want), "missing {want}:\n{text}");
    }
    for unit in [
        "# UNIT weir_uptime_seconds seconds",
        "# UNIT weir_last_checkpoint_age_seconds seconds",
        "# UNIT weir_last_checkpoint_size_bytes bytes",
        "# UNIT weir_last_checkpoint_duration_seconds seconds",
        "# UNIT weir_checkpoint_duration_seconds seconds",
        "# UNIT weir_backpressured_seconds seconds",
    ] {
        assert!(text.lines().any(|l| l == unit), "missing {unit}:\n{text}");
    }
}

#[test]
fn a_worker_and_a_job_without_a_checkpoint_leave_the_metrics_they_cannot_know_out() {
    let tasks = vec![task("gen-0", 0, 1, 1)];
    let before_checkpoint = render(&Scrape {
        job: "wc",
        tasks: &tasks,
        uptime: Duration::ZERO,
        coordinator: Some(CoordinatorNumbers {
            failed_checkpoints: 0,
            restarts: 0,
            last_checkpoint: None,
            now_ms: 5,
        }),
    });
    assert!(
        before_checkpoint.contains("weir_restarts_total{job=\"wc\"} 0"),
        "{before_checkpoint}"
    );
    assert!(
        !before_checkpoint.contains("weir_last_checkpoint"),
        "{before_checkpoint}"
    );
    let worker = render(&Scrape {
        job: "wc",
        tasks: &tasks,
        uptime: Duration::ZERO,
        coordinator: None,
    });
    assert!(worker.contains("weir_records_in_total{job=\"wc\""), "{worker}");
    assert!(
        !worker.contains("weir_restarts") && !worker.contains("weir_checkpoint"),
        "{worker}"
    );
}

#[test]
fn sources_report_what_they_have_not_read_on_their_own_operator() {
    let generator = task("gen-0 -> keyBy-1", 1, 5, 5);
    generator.2.set_source_pending(Some(SourcePending::Records(95)));
    let files = task("lines-0", 0, 5, 5);
    files.2.set_source_pending(Some(SourcePending::Bytes(4096)));
    let unbounded = task("gen-7", 0, 5, 5);
    unbounded.2.set_source_pending(None);
    let text = render(&Scrape {
        job: "wc",
        tasks: &[generator, files, unbounded, task("count-2", 0, 5, 0)],
        uptime: Duration::ZERO,
        coordinator: None,
    });
    let lines = samples(&text);
    for want in [
        r#"weir_source_pending_records{job="wc",task="gen-0 -> keyBy-1",operator="gen-0",subtask="1"} 95"#,
        r#"weir_source_pending_bytes{job="wc",task="lines-0",operator="lines-0",subtask="0"} 4096"#,
    ] {
        assert!(lines.contains(&want), "missing {want}:\n{text}");
    }
    // One series each: the unbounded generator and the non-source task have none.
    let series = |name: &str| lines.iter().filter(|l| l.starts_with(name)).count();
    assert_eq!(series("weir_source_pending_records{"), 1, "{text}");
    assert_eq!(series("weir_source_pending_bytes{"), 1, "{text}");
    assert!(
        text.lines().any(|l| l == "# UNIT weir_source_pending_bytes bytes"),
        "{text}"
    );
}

/// Keyed state sizes: entries for every stateful operator, labelled with its uid; the disk
/// gauges only for a disk-backend subtask; nothing for a chain without keyed state.
#[test]
fn keyed_state_gauges_name_the_stateful_operator_and_only_disk_stores_have_bytes() {
    use crate::state::backend::KeyedStateSize;
    let tasks = vec![
        task("gen-0 -> keyBy-1", 0, 10, 10),
        task("count-2 -> sink-file-3", 0, 10, 0),
        task("joined -> sink-file-5", 1, 10, 0),
    ];
    let heap = KeyedStateSize {
        entries: 1_234,
        ..Default::default()
    };
    let disk = KeyedStateSize {
        entries: 5_000_000,
        disk_bytes: Some(64 << 20),
        memory_bytes: Some(80 << 20),
        cache_lookups: Some(crate::state::disk::CacheLookups { hits: 900, misses: 100 }),
    };
    tasks[1].2.set_keyed_state(vec![("count-2".into(), heap)], 1);
    tasks[2].2.set_keyed_state(vec![("joined".into(), disk)], 1);
    let text = render(&Scrape {
        job: "wordcount",
        tasks: &tasks,
        uptime: Duration::from_secs(1),
        coordinator: None,
    });
    let lines = samples(&text);
    for want in [
        r#"weir_keyed_state_entries{job="wordcount",task="count-2 -> sink-file-3",operator="count-2",subtask="0"} 1234"#,
        r#"weir_keyed_state_entries{job="wordcount",task="joined -> sink-file-5",operator="joined",subtask="1"} 5000000"#,
        r#"weir_keyed_state_disk_bytes{job="wordcount",task="joined -> sink-file-5",operator="joined",subtask="1"} 67108864"#,
        r#"weir_keyed_state_memory_bytes{job="wordcount",task="joined -> sink-file-5",operator="joined",subtask="1"} 83886080"#,
        r#"weir_keyed_state_cache_hits_total{job="wordcount",task="joined -> sink-file-5",operator="joined",subtask="1"} 900"#,
        r#"weir_keyed_state_cache_misses_total{job="wordcount",task="joined -> sink-file-5",operator="joined",subtask="1"} 100"#,
    ] {
        assert!(lines.contains(&want), "{want} not in:\n{text}");
    }
    let keyed: Vec<&&str> = lines.iter().filter(|l| l.starts_with("weir_keyed_state_")).collect();
    assert_eq!(keyed.len(), 6, "{keyed:#?}");
    assert!(text.contains("# UNIT weir_keyed_state_disk_bytes bytes"), "{text}");
}
