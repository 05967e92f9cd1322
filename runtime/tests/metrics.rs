//! `/metrics` of a running `weir run`: every sample carries the job label, per-subtask samples
//! their task, operator uid and subtask, and the job-level gauges (uptime, restarts, the last
//! completed checkpoint's id, age, size and duration) agree with `/v1/job`; sources report
//! what they have not read (`weir_source_pending_records`), stateful steps the keys they hold
//! (`weir_keyed_state_entries`; on the disk backend, the store's disk and memory bytes).

mod common;
use common::*;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

/// A generator job (2 subtasks, 20,000 records/s each for about 5 s) with checkpoints every
/// 100 ms and a discard sink.
fn manifest(dir: &Path) -> std::path::PathBuf {
    let yaml = format!(
        r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: scraped }}
spec:
  parallelism: 2
  checkpointing: {{ interval: 100ms, storage: "{}/checkpoints" }}
  job:
    steps:
      - source: {{ generator: {{ seed: 3, count: 200000, keys: 50, maxRecordsPerSecond: 20000 }} }}
      - keyBy: {{ expression: key }}
      - count: {{}}
      - sink: {{ discard: {{}} }}
"#,
        dir.display()
    );
    let path = dir.join("job.yaml");
    std::fs::write(&path, yaml).unwrap();
    path
}

/// The value of the one sample of `name` whose labels contain every `label="value"` of
/// `labels`; panics naming it when there is none or several.
fn sample(text: &str, name: &str, labels: &[&str]) -> f64 {
    let found: Vec<f64> = text
        .lines()
        .filter(|l| l.starts_with(&format!("{name}{{")))
        .filter(|l| labels.iter().all(|want| l.contains(want)))
        .map(|l| l.rsplit(' ').next().unwrap().parse().unwrap())
        .collect();
    assert_eq!(found.len(), 1, "one sample {name} {labels:?} in:\n{text}");
    found[0]
}

#[test]
fn a_running_job_serves_labelled_metrics_with_the_last_checkpoint() {
    let dir = tempfile::tempdir().unwrap();
    let weir = Weir::run(&manifest(dir.path()), &[], &[]);
    let api = weir.api();
    let checkpoint_id = poll_json(
        &format!("{api}/v1/job"),
        "a checkpoint completes",
        Duration::from_secs(60),
        |job| job["lastCompletedCheckpoint"]["id"].as_u64(),
    );
    let scrape = || {
        let out = Command::new("curl")
            .args(["-sf", &format!("{api}/metrics")])
            .output()
            .unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    // The count's keyed state gauge is refreshed at each barrier and about once a second (the
    // first barrier may reach the count before any record): scraped until it shows the
    // generator's 50 keys, or 10 s passed.
    let count_keys = |text: &str| -> f64 {
        ["0", "1"]
            .iter()
            .map(|subtask| {
                let subtask = format!(r#"subtask="{subtask}""#);
                sample(text, "weir_keyed_state_entries", &[r#"operator="count-2""#, &subtask])
            })
            .sum()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let text = loop {
        let text = scrape();
        if count_keys(&text) == 50.0 || std::time::Instant::now() > deadline {
            break text;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    let job: serde_json::Value =
        serde_json::from_slice(&curl().arg(format!("{api}/v1/job")).output().unwrap().stdout).unwrap();
    weir.kill9();

    for line in text.lines().filter(|l| !l.starts_with('#')) {
        assert!(line.contains(r#"job="scraped""#), "no job label: {line}");
    }
    let last_id = sample(&text, "weir_last_checkpoint_id", &[]);
    assert!(last_id >= checkpoint_id as f64 && last_id >= 1.0, "{last_id}");
    let age = sample(&text, "weir_last_checkpoint_age_seconds", &[]);
    assert!((0.0..30.0).contains(&age), "age {age}");
    assert!(sample(&text, "weir_last_checkpoint_size_bytes", &[]) > 0.0);
    assert!(sample(&text, "weir_last_checkpoint_duration_seconds", &[]) >= 0.0);
    let uptime = sample(&text, "weir_uptime_seconds", &[]);
    assert!(uptime > 0.0 && uptime < 60.0, "uptime {uptime}");
    assert_eq!(sample(&text, "weir_restarts_total", &[]), 0.0);
    assert!(sample(&text, "weir_checkpoints_completed_total", &[]) >= 1.0);
    for unit in [
        "# UNIT weir_uptime_seconds seconds",
        "# UNIT weir_last_checkpoint_age_seconds seconds",
        "# UNIT weir_last_checkpoint_size_bytes bytes",
    ] {
        assert!(text.lines().any(|l| l == unit), "{unit}:\n{text}");
    }
    // Per subtask: the source's records in, labelled with its task, operator uid and subtask.
    let task = r#"task="source-generator-0 -> keyBy-1""#;
    for subtask in ["0", "1"] {
        let subtask = format!(r#"subtask="{subtask}""#);
        let records = sample(
            &text,
            "weir_records_in_total",
            &[task, r#"operator="source-generator-0""#, &subtask],
        );
        assert!(records > 0.0, "{records}");
        sample(
            &text,
            "weir_records_out_total",
            &[task, r#"operator="keyBy-1""#, &subtask],
        );
        // Source lag (Flink's pendingRecords): each subtask holds 16 of the 32 splits, 100,000
        // of the 200,000 records; what it has not read plus what it read is that, less the
        // batches read between the two samples (at most 1,000 records each at this rate).
        let pending = sample(
            &text,
            "weir_source_pending_records",
            &[task, r#"operator="source-generator-0""#, &subtask],
        );
        assert!(pending > 0.0 && pending < 100_000.0, "pending {pending}");
        let accounted = pending + records;
        assert!(
            (97_000.0..=100_000.0).contains(&accounted),
            "pending {pending} + read {records} = {accounted}, want about 100000"
        );
    }
    assert!(!text.contains("weir_source_pending_bytes{"), "a generator has no bytes");
    // Keyed state: the count's subtasks hold the generator's 50 keys between them; on the
    // heap, no disk gauges.
    assert_eq!(count_keys(&text), 50.0, "{text}");
    assert!(
        !text.contains("weir_keyed_state_disk_bytes{"),
        "a heap job has no store: {text}"
    );
    // /v1/job carries the run summary with the same kind of numbers.
    let summary = &job["summary"];
    assert!(summary["checkpointsCompleted"].as_u64().unwrap() >= 1, "{job}");
    assert_eq!(summary["tasks"][0]["task"], "source-generator-0 -> keyBy-1", "{job}");
    assert!(summary["tasks"][0]["recordsIn"].as_u64().unwrap() > 0, "{job}");
    assert_eq!(
        summary["output"],
        serde_json::json!([]),
        "a discard sink writes nothing"
    );
}

/// The distributed runtime: the coordinator's `/metrics` has the job-level gauges, a worker's
/// (`weir worker --listen`) the per-subtask metrics of its subtasks, both labelled with the job.
/// On the disk backend: the worker reports its stores' keys, disk and memory.
#[test]
fn coordinator_and_worker_metrics_carry_the_job() {
    use common::cluster::Cluster;
    let dir = tempfile::tempdir().unwrap();
    let m = manifest(dir.path());
    set_state_backend(&m, "disk");
    let state = dir.path().join("state").display().to_string();
    let env = [("WEIR_STATE_DIR", state.as_str())];
    let mut cluster = Cluster::start_with_workers(dir.path(), &m, &[], &env, 1);
    cluster.wait_checkpoint_after(0);
    let scrape = |url: &str| {
        let out = Command::new("curl").args(["-sf", url]).output().unwrap();
        String::from_utf8(out.stdout).unwrap()
    };
    let coordinator = scrape(&format!("{}/metrics", cluster.api));
    let worker_log = cluster.workers[0].text();
    let worker_url = worker_log
        .lines()
        .find_map(|l| l.split("health and metrics on ").nth(1))
        .unwrap_or_else(|| panic!("the worker names its metrics address: {worker_log}"))
        .trim()
        .to_string();
    // The keyed state gauges are refreshed at each barrier and about once a second: the
    // first checkpoint's barrier may reach the count before any record did, so the worker is
    // scraped until the count's subtasks report the generator's 50 keys (or 10 s passed).
    let count_keys = |text: &str| -> f64 {
        ["0", "1"]
            .iter()
            .map(|subtask| {
                let labels = [r#"operator="count-2""#, &format!(r#"subtask="{subtask}""#)];
                sample(text, "weir_keyed_state_entries", &labels)
            })
            .sum()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let worker = loop {
        let worker = scrape(&format!("{worker_url}/metrics"));
        if count_keys(&worker) == 50.0 || std::time::Instant::now() > deadline {
            break worker;
        }
        std::thread::sleep(Duration::from_millis(100));
    };
    cluster.coordinator.kill9();
    cluster.workers[0].kill9();

    assert!(sample(&coordinator, "weir_last_checkpoint_id", &[r#"job="scraped""#]) >= 1.0);
    assert_eq!(sample(&coordinator, "weir_restarts_total", &[]), 0.0);
    for line in worker.lines().filter(|l| !l.starts_with('#')) {
        assert!(line.contains(r#"job="scraped""#), "no job label: {line}");
    }
    assert!(sample(&worker, "weir_uptime_seconds", &[]) > 0.0, "{worker}");
    let records = sample(
        &worker,
        "weir_records_in_total",
        &[r#"operator="source-generator-0""#, r#"subtask="0""#],
    );
    assert!(records > 0.0, "{worker}");
    let pending = sample(
        &worker,
        "weir_source_pending_records",
        &[r#"operator="source-generator-0""#, r#"subtask="0""#],
    );
    assert!(pending < 100_000.0, "the worker's source reports its lag: {pending}");
    assert!(
        !worker.contains("weir_last_checkpoint"),
        "job-level gauges are the coordinator's"
    );
    assert_eq!(count_keys(&worker), 50.0, "{worker}");
    for subtask in ["0", "1"] {
        let labels = [r#"operator="count-2""#, &format!(r#"subtask="{subtask}""#)];
        // The store's table files: none until a memtable is flushed (0 is a value).
        assert!(sample(&worker, "weir_keyed_state_disk_bytes", &labels) >= 0.0);
        let memory = sample(&worker, "weir_keyed_state_memory_bytes", &labels);
        assert!(
            memory > 0.0 && memory < 200.0 * 1024.0 * 1024.0,
            "memory {memory}: {worker}"
        );
    }
    assert!(
        !coordinator.contains("weir_keyed_state_entries{"),
        "the coordinator runs no subtask"
    );
}
