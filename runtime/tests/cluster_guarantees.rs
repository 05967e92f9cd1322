//! The guarantees of `spec.checkpointing.mode` on the distributed runtime (a `weir
//! coordinator` and `weir worker`s on 127.0.0.1), compared record by record with the
//! failure-free output (as `tests/guarantees.rs` does for `weir run`):
//! - at-most-once under kill -9 of a worker and of the coordinator, and a crash of the
//!   coordinator, writes nothing twice, and loses what the sources had read past the restored checkpoint (counted; the
//!   crash before a checkpoint's `_metadata` makes that loss certain, so a restore that
//!   ignored the read-position log would show as nothing lost);
//! - at-least-once under kill -9 of a worker loses nothing (extra records counted);
//! - both through a rescale p 2 → 1 (`--restore latest`, a new run id): the one subtask of
//!   p 1 owns both files of the input and finds, in the log of the run at p 2, the positions
//!   the two subtasks of that run recorded.

mod common;
use common::cluster::*;
use common::*;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

/// Every test here runs a cluster of several processes: one at a time.
static MACHINE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn machine() -> std::sync::MutexGuard<'static, ()> {
    MACHINE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

/// Waits (at most 120 s) until `p` crashed at failpoint `point` (`WEIR_FAILPOINT`: the process
/// aborts, as kill -9 would stop it).
fn wait_crash_at(p: &mut Proc, point: &str) {
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        if let Some(st) = p.child.try_wait().unwrap() {
            let log = p.text();
            assert!(
                !st.success() && log.contains(&format!("failpoint {point} reached")),
                "{} exited with {st}, not at {point}: {log}",
                p.log.display()
            );
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{} did not reach {point}: {}",
            p.log.display(),
            p.text()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Kills the busy worker (the one running subtask 1 of the first stage) with kill -9 after the
/// first completed checkpoint, starts a replacement, and waits for a checkpoint after the
/// restart; returns its id.
fn kill_a_busy_worker(c: &mut Cluster) -> u64 {
    let first = c.wait_checkpoint_after(0);
    let (victim, victim_id) = c.busy_worker();
    eprintln!("kill -9 of worker {victim_id} after checkpoint {first}");
    c.workers[victim].kill9();
    c.add_worker("w-replacement", &[]);
    c.wait_checkpoint_after(first)
}

#[test]
fn the_cluster_runs_at_least_once_and_loses_nothing_when_a_worker_is_killed() {
    let _alone = machine();
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::local(dir.path());
    let m = wordcount_manifest(dir.path(), &paths, 4, "at-least-once", "300ms", Some(3000), None);
    let mut c = Cluster::start(dir.path(), &m, &[], &[]);
    kill_a_busy_worker(&mut c);
    c.coordinator.wait_ok(Duration::from_secs(180));
    let log = c.coordinator.text();
    assert!(log.contains("restarting in"), "{log}");
    let (lost, _extra) = wordcount_lost_and_extra(dir.path(), "cluster at-least-once after a worker kill -9");
    assert_eq!(lost, 0, "the cluster lost records in at-least-once mode");
}

#[test]
fn at_most_once_on_the_cluster_under_kill_9_of_a_worker_and_the_coordinator_writes_nothing_twice() {
    let _alone = machine();
    let mut rng = Rng(seed());
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::local(dir.path());
    let m = wordcount_manifest(dir.path(), &paths, 4, "at-most-once", "300ms", Some(3000), None);
    let mut c = Cluster::start(dir.path(), &m, &[], &[]);
    let after_restart = kill_a_busy_worker(&mut c);
    assert!(
        c.coordinator.text().contains("restarting in"),
        "the worker kill restarted no attempt: {}",
        c.coordinator.text()
    );
    // kill -9 of the coordinator at a random moment; its successor (same run id) continues the
    // run from its newest checkpoint and the run's read-position log.
    let ms = rng.range(0, 1000);
    std::thread::sleep(Duration::from_millis(ms));
    eprintln!("kill -9 of the coordinator {ms} ms after checkpoint {after_restart}");
    c.coordinator.kill9();
    // The successor crashes once every subtask acknowledged checkpoint `crash_at`, before its
    // `_metadata`: the next one restores the checkpoint before, while the sources had read past
    // that one's barrier, so a loss is certain. Ids keep increasing across restarts; the
    // killed coordinator may have triggered (not completed) a few more, and the successor
    // starts past every id its predecessors reserved (`cluster/fence.rs`).
    let reserved = highest_id_reservation(&dir.path().join("checkpoints/wordcount"));
    let crash_at = (after_restart + 8).max(reserved + 7);
    let point = format!("before-metadata:{crash_at}");
    c.restart_coordinator(&[("WEIR_FAILPOINT", point.as_str())]);
    wait_crash_at(&mut c.coordinator, &point);
    c.restart_coordinator(&[]);
    c.coordinator.wait_ok(Duration::from_secs(180));
    let (lost, extra) = wordcount_lost_and_extra(
        dir.path(),
        "cluster at-most-once after kill -9 of a worker and of the coordinator and a coordinator crash",
    );
    assert_eq!(extra, 0, "at-most-once wrote records twice (or counted a record twice)");
    assert!(
        lost > 0,
        "records read before the coordinator crashed at checkpoint {crash_at} were read again"
    );
    assert_read_position_log_written(&dir.path().join("checkpoints/wordcount/read-positions/test-run"));
}

/// Lines per input file of the rescale job.
const LINES: usize = 20_000;

/// Two input files, `a.txt` and `b.txt`, of [`LINES`] distinct lines each (`a 00017`), so every
/// output record names its file, and a manifest counting each line (a keyed exchange, running
/// counts: every line once, with count 1) at parallelism 2 and `mode`, the source throttled to
/// 2,000 lines/s per subtask. Returns the manifest and every expected output record, sorted.
fn two_file_job(dir: &Path, mode: &str) -> (PathBuf, Vec<String>) {
    let input = dir.join("in");
    std::fs::create_dir_all(&input).unwrap();
    let mut expected = vec![];
    for name in ["a", "b"] {
        let lines: Vec<String> = (0..LINES).map(|i| format!("{name} {i:05}")).collect();
        std::fs::write(input.join(format!("{name}.txt")), lines.join("\n") + "\n").unwrap();
        expected.extend(
            lines
                .iter()
                .map(|l| serde_json::json!({"line": l, "count": 1}).to_string()),
        );
    }
    expected.sort();
    let yaml = format!(
        r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: lines }}
spec:
  parallelism: 2
  checkpointing: {{ interval: 300ms, mode: {mode}, storage: "{ckpt}", retained: 2 }}
  job:
    steps:
      - uid: lines
        source: {{ file: {{ path: "{input}/*.txt", maxRecordsPerSecond: 2000 }} }}
      - keyBy: {{ expression: line, as: line }}
      - uid: counts
        count: {{}}
      - uid: output
        sink: {{ file: {{ path: "{out}" }} }}
"#,
        input = input.display(),
        ckpt = dir.join("checkpoints").display(),
        out = dir.join("output").display(),
    );
    let m = dir.join("lines.yaml");
    std::fs::write(&m, yaml).unwrap();
    (m, expected)
}

/// Runs the two-file job in `mode` at parallelism 2 until its coordinator crashes before the
/// `_metadata` of checkpoint 4 (the workers are killed with it), then restores the newest
/// checkpoint at parallelism 1 under a new run id, unthrottled, to the end. Returns the lost
/// and extra records of each file, `[(lost, extra) of a, of b]`.
fn rescale_2_to_1_after_a_crash(mode: &str) -> [(usize, usize); 2] {
    let dir = tempfile::tempdir().unwrap();
    let (m, expected) = two_file_job(dir.path(), mode);
    let point = "before-metadata:4";
    {
        let mut c = Cluster::start_with_workers(dir.path(), &m, &[], &[("WEIR_FAILPOINT", point)], 0);
        for i in 0..2 {
            c.add_worker_with_slots(&format!("w{i}"), 1, &[]);
        }
        wait_crash_at(&mut c.coordinator, point);
    } // kill -9 of both workers
    let extra = [
        "--parallelism",
        "1",
        "--restore",
        "latest",
        "--run-id",
        "p1",
        "--set",
        "spec.job.steps.0.source.file.maxRecordsPerSecond=1000000",
    ];
    let mut c = Cluster::start_with_workers(dir.path(), &m, &extra, &[], 0);
    c.add_worker_with_slots("w-p1", 1, &[]);
    c.coordinator.wait_ok(Duration::from_secs(180));
    let status = c.coordinator.text();
    let output = local_output(&dir.path().join("output"));
    let per_file = |prefix: &str| {
        let of = |v: &[String]| -> Vec<String> {
            v.iter()
                .filter(|r| r.contains(&format!("\"line\":\"{prefix} ")))
                .cloned()
                .collect()
        };
        let want = of(&expected);
        assert_eq!(want.len(), LINES, "{status}");
        lost_and_extra(&of(&output), &want)
    };
    let counts = [per_file("a"), per_file("b")];
    eprintln!(
        "{mode}, p 2 → 1 after a coordinator crash before checkpoint 4's _metadata: (lost, extra) of a.txt {:?}, of b.txt {:?}, of {LINES} lines each",
        counts[0], counts[1]
    );
    counts
}

#[test]
fn at_most_once_through_a_rescale_2_to_1_writes_nothing_twice_and_each_split_resumes_where_it_was_read_up_to() {
    let _alone = machine();
    for (file, (lost, extra)) in ["a.txt", "b.txt"]
        .iter()
        .zip(rescale_2_to_1_after_a_crash("at-most-once"))
    {
        assert_eq!(extra, 0, "{file}: at-most-once wrote lines twice");
        // Lines read between checkpoint 3's barrier and the crash are in no committed output:
        // resuming at the furthest recorded position loses them. b.txt was read by subtask 2/2
        // at p 2; at p 1 subtask 1/1 resumes it from the position that subtask recorded.
        assert!(
            lost > 0,
            "{file}: nothing lost, so the split was read again from checkpoint 3"
        );
    }
}

#[test]
fn at_least_once_through_a_rescale_2_to_1_loses_nothing() {
    let _alone = machine();
    for (file, (lost, _extra)) in ["a.txt", "b.txt"]
        .iter()
        .zip(rescale_2_to_1_after_a_crash("at-least-once"))
    {
        assert_eq!(lost, 0, "{file}: at-least-once lost lines");
    }
}
