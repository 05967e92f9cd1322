//! The keyed two-input join end to end over real data: the pushes of one hour of GitHub
//! events (`gharchive/2015-02-22-21.jsonl`) joined by repository with the pushes of the next
//! hour (`2015-02-22-22.jsonl`), each side its own file source and filter. The output is
//! compared record by record with the join computed here, independently of Weir:
//! - failure-free at parallelism 2;
//! - after random kill -9 and `--restore latest`, on the heap and on the disk state backend;
//! - rescaled p 2 → 3 → 1 through savepoints, on heap at p 2, disk at p 3 and heap at p 1
//!   (a savepoint of either backend restores on the other);
//! - with unaligned checkpoints and a slow sink, killed -9 and rescaled 2 → 3 → 1 through
//!   checkpoints that hold the join's in-flight input records (both sides) as channel state;
//! - on the distributed runtime (p = 4 over three workers, remote keyed channels into the
//!   join from both sides, disk state backend, incremental checkpoints) through the kill -9 of
//!   a worker and a replacement;
//! - with incremental checkpoints on heap and on disk, killed -9 when the newest checkpoint's
//!   join chains hold deltas, restored at p = 3.

mod common;
use common::cluster::Cluster;
use common::*;
use serde_json::Value;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::time::Duration;

const JOB: &str = "later-pushes";
const LEFT_FILE: &str = "gharchive/2015-02-22-21.jsonl";
const RIGHT_FILE: &str = "gharchive/2015-02-22-22.jsonl";

/// The join job. `checkpointing` goes inside the `checkpointing` mapping after the storage;
/// `source_rate` and `sink_rate` throttle per subtask.
fn manifest(dir: &Path, checkpointing: &str, source_rate: Option<u64>, sink_rate: Option<u64>) -> PathBuf {
    manifest_at(dir, 2, checkpointing, source_rate, sink_rate)
}

/// [`manifest`] at `parallelism`.
fn manifest_at(
    dir: &Path,
    parallelism: u32,
    checkpointing: &str,
    source_rate: Option<u64>,
    sink_rate: Option<u64>,
) -> PathBuf {
    let data = data_dir();
    let paths = Paths::local(dir);
    let source_rate = source_rate
        .map(|r| format!(", maxRecordsPerSecond: {r}"))
        .unwrap_or_default();
    let sink_rate = sink_rate
        .map(|r| format!(", maxRecordsPerSecond: {r}"))
        .unwrap_or_default();
    let yaml = format!(
        r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: {JOB} }}
spec:
  parallelism: {parallelism}
  checkpointing: {{ storage: "{ckpt}", retained: 3{checkpointing} }}
  savepoints: {{ directory: "{svp}" }}
  job:
    steps:
      - name: hour21
        uid: hour21
        source: {{ file: {{ path: "{data}/{LEFT_FILE}", format: jsonl{source_rate} }} }}
      - name: pushes21
        filter: {{ expression: "type == 'push'" }}
      - name: hour22
        uid: hour22
        source: {{ file: {{ path: "{data}/{RIGHT_FILE}", format: jsonl{source_rate} }} }}
      - name: pushes22
        filter: {{ expression: "type == 'push'" }}
      - uid: pushes-joined
        inputs: [pushes21, pushes22]
        join:
          leftKey: repo
          rightKey: repo
          as: repo
          fields:
            - {{ from: left.id, as: push }}
            - {{ from: left.actor, as: pusher }}
            - {{ from: right.id, as: laterPush }}
            - {{ from: right.actor, as: laterPusher }}
      - uid: output
        sink: {{ file: {{ path: "{out}"{sink_rate} }} }}
"#,
        data = data.display(),
        ckpt = paths.checkpoints,
        svp = paths.savepoints,
        out = paths.output,
    );
    let f = dir.join("join.yaml");
    std::fs::write(&f, yaml).unwrap();
    f
}

/// The pushes of a GH Archive file: (repo, id, actor).
fn pushes(file: &str) -> Vec<(String, String, String)> {
    let text = std::fs::read_to_string(data_dir().join(file)).unwrap();
    text.lines()
        .map(|l| serde_json::from_str::<Value>(l).unwrap())
        .filter(|e| e["type"] == "push")
        .map(|e| {
            let s = |f: &str| e[f].as_str().unwrap().to_string();
            (s("repo"), s("id"), s("actor"))
        })
        .collect()
}

/// The inner join computed here: every (left push, right push) pair of the same repository,
/// as normalized JSON text, sorted.
fn expected_join() -> Vec<String> {
    let mut right_by_repo: HashMap<String, Vec<(String, String)>> = HashMap::new();
    for (repo, id, actor) in pushes(RIGHT_FILE) {
        right_by_repo.entry(repo).or_default().push((id, actor));
    }
    let mut out = Vec::new();
    for (repo, id, actor) in pushes(LEFT_FILE) {
        for (later_id, later_actor) in right_by_repo.get(&repo).into_iter().flatten() {
            out.push(
                serde_json::json!({
                    "repo": repo, "push": id, "pusher": actor,
                    "laterPush": later_id, "laterPusher": later_actor,
                })
                .to_string(),
            );
        }
    }
    out.sort();
    out
}

/// The committed output of the job in `dir`, each line parsed and written again (so key order
/// is the same as [`expected_join`]'s), sorted.
fn output(dir: &Path) -> Vec<String> {
    let mut lines: Vec<String> = local_output(&dir.join("output"))
        .iter()
        .map(|l| serde_json::from_str::<Value>(l).unwrap().to_string())
        .collect();
    lines.sort();
    lines
}

#[test]
fn a_join_of_two_hours_of_github_pushes_by_repository_equals_the_independent_join() {
    let expected = expected_join();
    assert_eq!(expected.len(), 30_485, "the data set changed");
    let dir = tempfile::tempdir().unwrap();
    let m = manifest(dir.path(), ", interval: 300ms", None, None);
    Weir::run(&m, &[], &[]).wait_ok();
    assert_same_multiset(&output(dir.path()), &expected, "join, failure-free");
}

#[test]
fn kill_9_during_a_join_then_restore_latest_is_exactly_once() {
    let mut rng = Rng(seed());
    let dir = tempfile::tempdir().unwrap();
    // 8000 lines/s per source: each file takes 3 to 4 s, so the kills land mid-file.
    let m = manifest(dir.path(), ", interval: 200ms", Some(8000), None);
    run_with_kills(&m, 3, &[], &mut rng);
    assert_same_multiset(&output(dir.path()), &expected_join(), "join with 3 kill -9");
}

/// The same on the disk state backend: the join's rows live in each subtask's local store,
/// which every restart recreates from the checkpoint.
#[test]
fn kill_9_during_a_join_on_the_disk_backend_then_restore_latest_is_exactly_once() {
    let mut rng = Rng(seed());
    let dir = tempfile::tempdir().unwrap();
    let m = manifest(dir.path(), ", interval: 200ms", Some(8000), None);
    set_state_backend(&m, "disk");
    let env = state_dir_env(&dir.path().join("state"));
    run_with_kills(&m, 3, &env, &mut rng);
    assert_same_multiset(
        &output(dir.path()),
        &expected_join(),
        "join on the disk backend with 3 kill -9",
    );
}

/// The join's store directories of the run under the state root `state`: `<run>/pushes-joined-<subtask>`.
fn join_stores(state: &Path) -> Vec<PathBuf> {
    let runs = std::fs::read_dir(state).into_iter().flatten().flatten();
    runs.flat_map(|run| std::fs::read_dir(run.path()).into_iter().flatten().flatten())
        .map(|store| store.path())
        .filter(|store| {
            let name = store.file_name().unwrap().to_string_lossy().to_string();
            name.starts_with("pushes-joined-") && store.join("CURRENT").exists()
        })
        .collect()
}

#[test]
fn a_join_rescales_2_to_3_to_1_through_savepoints_exactly_once_switching_backends() {
    let dir = tempfile::tempdir().unwrap();
    let m = manifest(dir.path(), ", interval: 300ms", Some(6000), None);
    let state = dir.path().join("state");
    let env = state_dir_env(&state);
    let mut restore: Option<String> = None;
    // Heap at p = 2, disk at p = 3 (restoring the heap savepoint), heap at p = 1 (restoring
    // the disk one).
    for (parallelism, backend) in [("2", "heap"), ("3", "disk")] {
        let set_backend = format!("spec.stateBackend={backend}");
        let mut args = vec!["--parallelism", parallelism, "--set", &set_backend];
        if let Some(sp) = &restore {
            args.extend(["--restore", sp.as_str()]);
        }
        let w = Weir::run(&m, &args, &env);
        let api = w.api();
        std::thread::sleep(Duration::from_millis(1200));
        let stores = join_stores(&state).len();
        let want = if backend == "disk" { 3 } else { 0 };
        assert_eq!(stores, want, "p={parallelism} on {backend}: the join's stores");
        let savepoint = stop_with_savepoint(&api, &[]);
        let log = w.wait_ok();
        assert!(log.contains("stopped with savepoint"), "p={parallelism}: {log}");
        restore = Some(savepoint);
    }
    let sp = restore.unwrap();
    Weir::run(&m, &["--parallelism", "1", "--restore", &sp], &env).wait_ok();
    assert_same_multiset(
        &output(dir.path()),
        &expected_join(),
        "join rescaled 2 → 3 → 1, heap → disk → heap",
    );
}

/// The `_metadata` body of the newest completed checkpoint of the job in `dir`.
fn newest_checkpoint(dir: &Path) -> Value {
    let job_dir = dir.join("checkpoints").join(JOB);
    let newest = std::fs::read_dir(&job_dir)
        .unwrap()
        .filter_map(|e| {
            let p = e.unwrap().path();
            let id: u64 = p.file_name()?.to_str()?.strip_prefix("chk-")?.parse().ok()?;
            p.join("_metadata").exists().then_some((id, p))
        })
        .max()
        .expect("a completed checkpoint");
    let text = std::fs::read_to_string(newest.1.join("_metadata")).unwrap();
    serde_json::from_str(text.split_once('\n').unwrap().1).unwrap()
}

#[test]
fn kill_9_and_rescale_2_to_3_to_1_through_unaligned_checkpoints_of_a_join_is_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    // Sources at full speed, the sink takes 4000 joined records/s per subtask: the join's
    // input channels (from both sides) stay full, so unaligned checkpoints hold their records.
    let m = manifest(dir.path(), ", interval: 300ms, unaligned: true", None, Some(4000));
    let first = run_until_channel_state(
        &m,
        "2",
        0,
        &dir.path().join("checkpoints").join(JOB),
        Some("pushes-joined"),
    );
    let restored = newest_checkpoint(dir.path());
    assert_eq!(restored["parallelism"], 2);
    assert!(
        channel_state_records(&restored, Some("pushes-joined")) > 0,
        "keyed channel state of the join stage: {restored}"
    );
    let second = run_until_channel_state(
        &m,
        "3",
        first.max(restored["checkpointId"].as_u64().unwrap()),
        &dir.path().join("checkpoints").join(JOB),
        Some("pushes-joined"),
    );
    let restored = newest_checkpoint(dir.path());
    assert_eq!(restored["parallelism"], 3);
    assert!(restored["checkpointId"].as_u64().unwrap() >= second);
    Weir::run(&m, &["--parallelism", "1", "--restore", "latest"], &[]).wait_ok();
    assert_same_multiset(
        &output(dir.path()),
        &expected_join(),
        "join with unaligned checkpoints, kill -9 at p=2 and p=3, finished at p=1",
    );
}

#[test]
fn a_join_on_the_cluster_is_exactly_once_through_the_kill_9_of_a_worker() {
    let dir = tempfile::tempdir().unwrap();
    // p = 4 on three workers of two slots: subtasks 0-1 on one worker, 2-3 on another, so
    // both sides reach the join over remote keyed channels. 3000 lines/s per source subtask
    // (each file is one split): the kill lands mid-file.
    // Incremental checkpoints: the restore reads the join's chains (each worker those of
    // its own key groups).
    let m = manifest_at(dir.path(), 4, ", interval: 300ms, incremental: true", Some(3000), None);
    // On the disk backend: each worker's join subtasks keep their rows in local stores.
    set_state_backend(&m, "disk");
    let state = dir.path().join("state").display().to_string();
    let mut c = Cluster::start(dir.path(), &m, &[], &[("WEIR_STATE_DIR", state.as_str())]);
    let first = c.wait_checkpoint_after(0);
    // The kill comes once the newest checkpoint's join chains hold deltas: the restore
    // applies them.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while !newest_has_join_delta(dir.path()) {
        assert!(std::time::Instant::now() < deadline, "no checkpoint with join deltas");
        std::thread::sleep(Duration::from_millis(10));
    }
    let (victim, _) = c.busy_worker();
    c.workers[victim].kill9();
    c.add_worker("w-replacement", &[("WEIR_STATE_DIR", state.as_str())]);
    c.wait_checkpoint_after(first);
    c.coordinator.wait_ok(Duration::from_secs(180));
    let log = c.coordinator.text();
    assert!(log.contains("restarting in"), "{log}");
    assert_same_multiset(
        &output(dir.path()),
        &expected_join(),
        "join on the cluster, worker kill -9",
    );
}

/// A worker reads only the join files of its own key groups: the join's operator state (its
/// stored shape) is the same in every subtask, so one copy suffices (`broadcast:join-fields`,
/// `checkpoint/restore_files.rs`), and the coordinator, owning no key group, reads none. A bit
/// flip in a savepoint's join file therefore fails the deployment of the one worker owning its
/// key groups, naming the file, and no other process reads it. Before 2026-12-05 every worker and the coordinator read every join file.
#[test]
fn a_corrupt_join_file_is_read_by_the_worker_owning_its_key_groups_only() {
    let dir = tempfile::tempdir().unwrap();
    let m = manifest_at(dir.path(), 2, "", Some(3000), None);
    let mut gen1 = Cluster::one_slot_each(dir.path(), &m, &[], &[]);
    gen1.wait_checkpoint_after(0);
    let savepoint = common::cluster::stop_with_savepoint_and_exit(&mut gen1);
    let savepoint_dir = Path::new(savepoint.trim_start_matches("file://")).to_path_buf();
    let victim = 1;
    let file = format!("pushes-joined-{victim}.state");
    let mut bytes = std::fs::read(savepoint_dir.join(&file)).unwrap();
    let middle = bytes.len() / 2;
    bytes[middle] ^= 0x01;
    std::fs::write(savepoint_dir.join(&file), bytes).unwrap();

    let restore = common::cluster::restore_once(&savepoint);
    let mut gen2 = Cluster::one_slot_each(dir.path(), &m, &restore, &[]);
    let (message, _) = common::cluster::wait_failed(&mut gen2, JOB, Duration::from_secs(60));
    assert!(
        message.starts_with(&format!("worker w{victim} could not deploy attempt "))
            && message.contains(&file)
            && message.contains("checksum mismatch"),
        "the worker owning {file}'s key groups fails, naming it: {message}"
    );
    for (w, worker) in gen2.workers.iter().enumerate() {
        let failures = worker.text().matches("deployment failed").count();
        assert_eq!(failures, usize::from(w == victim), "w{w}: {}", worker.text());
    }
}

/// Whether the newest completed checkpoint of the job in `dir` holds a join delta: a chain of
/// `pushes-joined` with a link after its base.
fn newest_has_join_delta(dir: &Path) -> bool {
    let job_dir = dir.join("checkpoints").join(JOB);
    if !job_dir.exists() {
        return false;
    }
    let newest = newest_checkpoint(dir);
    newest["operators"]
        .as_array()
        .into_iter()
        .flatten()
        .filter(|o| o["uid"] == "pushes-joined")
        .flat_map(|o| o["handles"].as_array().into_iter().flatten())
        .flat_map(|h| h["chain"].as_array().into_iter().flatten())
        .any(|link| link["base"] == false)
}

/// With incremental checkpoints the join writes chains of delta blocks (`state/incremental.rs`)
/// on `backend`: random kill -9 at p = 2, a kill when the newest checkpoint's join chains hold
/// deltas (so the restore applies them), then restored at p = 3 from that chain: the output
/// is the independent join, record by record.
fn kill_9_and_rescale_through_incremental_join_checkpoints(backend: &str) {
    let mut rng = Rng(seed());
    let dir = tempfile::tempdir().unwrap();
    let m = manifest(dir.path(), ", interval: 200ms, incremental: true", Some(8000), None);
    set_state_backend(&m, backend);
    let env = state_dir_env(&dir.path().join("state"));
    kill_at_random(&m, 2, &env, &mut rng);
    let mut killed_with_deltas = false;
    for attempt in 0..6 {
        let w = Weir::run(&m, &["--restore", "latest"], &env);
        let _ = w.api();
        let deadline = std::time::Instant::now() + Duration::from_secs(15);
        while std::time::Instant::now() < deadline && !newest_has_join_delta(dir.path()) {
            std::thread::sleep(Duration::from_millis(10));
        }
        w.kill9();
        if newest_has_join_delta(dir.path()) {
            killed_with_deltas = true;
            break;
        }
        eprintln!("attempt {attempt}: no join delta in the newest checkpoint; again");
    }
    assert!(
        killed_with_deltas,
        "{backend}: no checkpoint with join deltas became the newest"
    );
    Weir::run(&m, &["--restore", "latest", "--parallelism", "3"], &env).wait_ok();
    assert_same_multiset(
        &output(dir.path()),
        &expected_join(),
        &format!("incremental join checkpoints on {backend}, kill -9, restored at p=3"),
    );
}

#[test]
fn kill_9_and_rescale_through_incremental_join_checkpoints_on_heap() {
    kill_9_and_rescale_through_incremental_join_checkpoints("heap");
}

#[test]
fn kill_9_and_rescale_through_incremental_join_checkpoints_on_disk() {
    kill_9_and_rescale_through_incremental_join_checkpoints("disk");
}
