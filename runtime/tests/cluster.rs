//! The distributed runtime with real processes on 127.0.0.1: one coordinator and three
//! workers (parallelism 4, 2 slots each). Worker and coordinator crashes, savepoints across
//! deployment shapes, backpressure, and fencing of stale workers.

mod common;
use common::cluster::*;
use common::*;
use std::process::Command;
use std::time::{Duration, Instant};

#[test]
fn kill_9_of_a_worker_then_a_replacement_is_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _) = job(dir.path(), 4, Some(3000));
    let mut c = Cluster::start(dir.path(), &m, &[], &[]);
    let first = c.wait_checkpoint_after(0);
    let (victim, victim_id) = c.busy_worker();
    c.workers[victim].kill9();
    c.add_worker("w-replacement", &[]);
    // The job restarts from a checkpoint and makes progress again.
    c.wait_checkpoint_after(first);
    c.coordinator.wait_ok(Duration::from_secs(180));
    let status_log = c.coordinator.text();
    assert!(status_log.contains("restarting in"), "{status_log}");
    // The failure leads with the cause and names the subtasks the worker ran, not a task
    // index or the broken data channels of other workers.
    let failure = status_log
        .lines()
        .find(|l| l.contains("attempt 1 failed: "))
        .unwrap_or_else(|| panic!("{status_log}"));
    assert!(
        failure.contains(&format!(
            "attempt 1 failed: worker {victim_id} lost: connection closed; it ran lines -> "
        )) && failure.contains("(1/4)"),
        "{failure}\n{status_log}"
    );
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected_wordcount(),
        "worker kill -9",
    );
}

/// The same with keyed state on the disk backend: the replacement worker builds its subtasks'
/// stores from the checkpoint, and the killed worker's directories are never read.
#[test]
fn kill_9_of_a_worker_on_the_disk_backend_is_exactly_once() {
    kill_9_of_a_worker_on_disk(false);
}

/// The same with incremental checkpoints, killed once the newest checkpoint's chains hold
/// deltas: every worker restores the chains of its key groups from `../shared/` (a worker
/// reads only those, `restore::load_url_owned`).
#[test]
fn kill_9_of_a_worker_with_incremental_disk_checkpoints_is_exactly_once() {
    kill_9_of_a_worker_on_disk(true);
}

/// The same with native checkpoints (the disk store's files; `WEIR_NATIVE_CHECKPOINTS=on`):
/// every worker downloads the stores whose key groups overlap its subtasks'.
#[test]
fn kill_9_of_a_worker_with_native_disk_checkpoints_is_exactly_once() {
    kill_9_of_a_worker_on_disk_with(true, "on");
}

fn kill_9_of_a_worker_on_disk(incremental: bool) {
    kill_9_of_a_worker_on_disk_with(incremental, "off");
}

fn kill_9_of_a_worker_on_disk_with(incremental: bool, native: &str) {
    let dir = tempfile::tempdir().unwrap();
    let state = tempfile::tempdir().unwrap();
    let (m, _) = job(dir.path(), 4, Some(3000));
    set_state_backend(&m, "disk");
    if incremental {
        common::incremental::set_incremental(&m);
    }
    let state_dir = state.path().display().to_string();
    let env = [
        ("WEIR_STATE_DIR", state_dir.as_str()),
        ("WEIR_NATIVE_CHECKPOINTS", native),
    ];
    let mut c = Cluster::start(dir.path(), &m, &[], &env);
    let mut first = c.wait_checkpoint_after(0);
    assert!(
        state.path().read_dir().unwrap().next().is_some(),
        "workers keep state on disk"
    );
    while incremental && !has_delta(&dir.path().join(format!("checkpoints/wordcount/chk-{first}/_metadata"))) {
        first = c.wait_checkpoint_after(first);
    }
    if incremental {
        let path = dir.path().join(format!("checkpoints/wordcount/chk-{first}/_metadata"));
        let m = weir_runtime::state::snapshot::decode_metadata("_metadata", &std::fs::read(path).unwrap()).unwrap();
        let counts = m
            .operators
            .iter()
            .filter(|o| o.uid == "counts")
            .flat_map(|o| &o.handles);
        assert!(
            counts.clone().count() > 0 && counts.clone().all(|h| h.native.is_some() == (native == "on")),
            "native checkpoints {native}: {:?}",
            m.operators
        );
    }
    let (victim, _) = c.busy_worker();
    c.workers[victim].kill9();
    c.add_worker("w-replacement", &env);
    if native == "on" {
        common::incremental::first_checkpoint_after_the_redeployment_references_the_restored_files(&c, dir.path());
    } else {
        c.wait_checkpoint_after(first);
    }
    c.coordinator.wait_ok(Duration::from_secs(180));
    // The redeployment restores at the same parallelism: with native checkpoints each of the
    // 4 aggregation subtasks' stores is its checkpoint's files (the fast path,
    // `checkpoint/native_restore.rs`), on whichever worker runs it.
    let fast: usize = c
        .workers
        .iter()
        .map(|w| {
            w.text()
                .matches("native checkpoint restored into the subtask's store")
                .count()
        })
        .sum();
    assert!(
        if native == "on" { fast >= 4 } else { fast == 0 },
        "native {native}: {fast} stores restored by the fast path"
    );
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected_wordcount(),
        "worker kill -9 on the disk backend",
    );
    // The run summary's counts are the last attempt's, and it says so.
    let log = c.coordinator.text();
    let summary = log.lines().find(|l| l.contains("run summary:")).expect("a run summary");
    assert!(summary.contains("records in/out since the"), "{summary}");
    // The surviving workers removed their cancelled attempt's run directory (its stores
    // deleted, only the owner file left), waiting for stores still closing on an encoder
    // thread; the killed worker's was swept by the replacement; and once the job finished
    // every worker removed the last attempt's too (before 2026-12-06 each left its owner
    // file there for as long as it lived).
    let attempts = || -> std::collections::BTreeSet<String> {
        state
            .path()
            .read_dir()
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .filter(|name| name.starts_with("wordcount-"))
            .map(|name| {
                let (run, _pid) = name.rsplit_once("-p").expect("<job>-<run>-a<attempt>-p<pid>");
                run.rsplit_once("-a").expect("<job>-<run>-a<attempt>").1.to_string()
            })
            .collect()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(20);
    while !attempts().is_empty() && std::time::Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(100));
    }
    let left = attempts();
    let contents: Vec<String> = walkdir_names(state.path());
    assert!(
        left.is_empty(),
        "run directories of no attempt: {left:?}; {contents:#?}"
    );
}

/// Whether the `_metadata` at `path` is incremental over an earlier checkpoint for the
/// `counts` step ([`common::incremental::has_delta`]); `false` while it is not there.
fn has_delta(path: &std::path::Path) -> bool {
    let Ok(bytes) = std::fs::read(path) else { return false };
    let m = weir_runtime::state::snapshot::decode_metadata("_metadata", &bytes).unwrap();
    common::incremental::has_delta(&m)
}

#[test]
fn kill_9_of_the_coordinator_then_a_restart_is_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _) = job(dir.path(), 4, Some(3000));
    let mut c = Cluster::start(dir.path(), &m, &[], &[]);
    let first = c.wait_checkpoint_after(0);
    c.coordinator.kill9();
    c.restart_coordinator(&[]);
    c.wait_checkpoint_after(first);
    c.coordinator.wait_ok(Duration::from_secs(180));
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected_wordcount(),
        "coordinator kill -9",
    );
}

#[test]
fn savepoints_move_between_the_cluster_and_weir_run() {
    // Cluster (p=4) → stop with savepoint → weir run at p=2 → stop → cluster (p=4) finishes.
    let dir = tempfile::tempdir().unwrap();
    let (m, _) = job(dir.path(), 4, Some(3000));
    let mut c = Cluster::start(dir.path(), &m, &[], &[]);
    c.wait_checkpoint_after(0);
    let sp1 = stop_with_savepoint(&c.api, &[]);
    c.coordinator.wait_ok(Duration::from_secs(60));
    assert!(sp1.contains("savepoint-wordcount-"), "{sp1}");
    // Stop-with-savepoint ends with every process exiting 0.
    for w in &mut c.workers {
        w.wait_ok(Duration::from_secs(30));
    }

    let w = Weir::run(&m, &["--parallelism", "2", "--restore", &sp1], &[]);
    let api = w.api();
    std::thread::sleep(Duration::from_millis(1500));
    let sp2 = stop_with_savepoint(&api, &[]);
    w.wait_ok();

    // A new run (its own run id, as every deployment of the operator has): a coordinator with
    // the first run's id is that run restarted, which stopped with sp1 and stays stopped.
    let mut c2 = Cluster::start(dir.path(), &m, &["--restore", &sp2, "--run-id", "test-run-2"], &[]);
    c2.coordinator.wait_ok(Duration::from_secs(180));
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected_wordcount(),
        "cluster → weir run → cluster",
    );
}

fn rss_kb(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))?
                .split_whitespace()
                .nth(1)?
                .parse()
                .ok()
        })
        .unwrap_or(0)
}

#[test]
fn a_slow_sink_backpressures_sources_with_bounded_memory_and_checkpoints_complete() {
    let dir = tempfile::tempdir().unwrap();
    // An unbounded generator: without backpressure it would run far ahead of the sink.
    let manifest = format!(
        r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: slow }}
spec:
  parallelism: 4
  checkpointing: {{ interval: 500ms, storage: "{d}/checkpoints" }}
  job:
    steps:
      - source: {{ generator: {{ seed: 1, keys: 1000 }} }}
      - keyBy: {{ expression: key, as: key }}
      - count: {{}}
      - sink: {{ file: {{ path: "{d}/output" }} }}
"#,
        d = dir.path().display()
    );
    let m = dir.path().join("slow.yaml");
    std::fs::write(&m, manifest).unwrap();
    let c = Cluster::start(dir.path(), &m, &[], &[("WEIR_FAILPOINT", "slow-sink:20")]);
    let mut peak = 0;
    let mut max_in_flight = 0u64;
    let mut last = 0;
    let mut status = serde_json::Value::Null;
    for _ in 0..4 {
        last = c.wait_checkpoint_after(last);
        for w in &c.workers {
            peak = peak.max(rss_kb(w.pid()));
        }
        status = c.job_status().unwrap();
        let tasks = status["subtasks"].as_array().unwrap();
        let sum = |prefix: bool, field: &str| -> u64 {
            tasks
                .iter()
                .filter(|t| t["task"].as_str().unwrap().starts_with("source") == prefix)
                .map(|t| t[field].as_u64().unwrap())
                .sum()
        };
        // Records emitted by the source chains and not yet received by the sink chains.
        max_in_flight = max_in_flight.max(sum(true, "recordsOut").saturating_sub(sum(false, "recordsIn")));
    }
    let bp: u64 = status["subtasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["backpressuredMs"].as_u64().unwrap())
        .sum();
    let out = curl().arg(format!("{}/v1/checkpoints", c.api)).output().unwrap();
    let history: serde_json::Value = serde_json::from_slice(&out.stdout).unwrap();
    let alignment: Vec<u64> = history["completed"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["maxAlignmentMs"].as_u64().unwrap())
        .collect();
    eprintln!(
        "peak worker RSS {peak} kB, max in flight {max_in_flight} records, backpressured {bp} ms, alignment ms {alignment:?}"
    );
    // 16 channels × (8 local + 4 credits + 8 remote) batches of ~256 records bound what can be in flight.
    assert!(max_in_flight < 16 * 20 * 1024, "{max_in_flight} records in flight");
    assert!(bp > 1000, "no backpressure recorded: {bp} ms");
    assert!(peak < 300 * 1024, "worker memory grew to {peak} kB");
    assert!(
        alignment.len() >= 4,
        "checkpoints complete under backpressure: {alignment:?}"
    );
}

#[test]
fn a_worker_reconnecting_with_a_stale_attempt_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _) = job(dir.path(), 4, Some(3000));
    let c = Cluster::start(dir.path(), &m, &[], &[]);
    c.wait_checkpoint_after(0);
    let mut s = std::net::TcpStream::connect(&c.rpc).unwrap();
    let verdict = answer_handshake(&mut s, TEST_SECRET, "worker-rpc", "ghost");
    assert_eq!(verdict, Some(serde_json::json!("Accepted")));
    let body = serde_json::json!({"Register": {"worker_id": "ghost", "slots": 2, "data_addr": "127.0.0.1:1", "running_attempt": 0}});
    write_frame(&mut s, &body);
    let reply = read_frame(&mut s).unwrap();
    let reason = reply["Refused"]["reason"].as_str().unwrap_or_default().to_string();
    assert!(reason.contains("stale attempt 0"), "{reply}");
    // The refused worker is not in the worker list.
    let workers = c.job_status().unwrap()["workers"].clone();
    assert!(!workers.to_string().contains("ghost"), "{workers}");
}

fn sigterm(pid: u32) {
    let st = Command::new("kill").args(["-TERM", &pid.to_string()]).status().unwrap();
    assert!(st.success(), "kill -TERM {pid}");
}

/// Waits at most `limit` for the process to exit and returns its exit code.
fn exit_code_within(p: &mut Proc, limit: Duration) -> Option<i32> {
    let t = Instant::now();
    loop {
        if let Some(st) = p.child.try_wait().unwrap() {
            return st.code();
        }
        assert!(
            t.elapsed() < limit,
            "{} still running {limit:?} after the signal: {}",
            p.log.display(),
            p.text()
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

#[test]
fn sigterm_to_the_coordinator_suspends_the_job_and_a_restart_is_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _) = job(dir.path(), 4, Some(3000));
    let mut c = Cluster::start(dir.path(), &m, &[], &[]);
    let first = c.wait_checkpoint_after(0);
    sigterm(c.coordinator.pid());
    let code = exit_code_within(&mut c.coordinator, Duration::from_secs(5));
    assert_eq!(code, Some(0), "{}", c.coordinator.text());
    assert!(c.coordinator.text().contains("suspended"), "{}", c.coordinator.text());
    // The workers stay up and register with the next coordinator of the same run.
    for w in &mut c.workers {
        assert!(w.child.try_wait().unwrap().is_none(), "{}", w.text());
    }
    c.restart_coordinator(&[]);
    c.wait_checkpoint_after(first);
    c.coordinator.wait_ok(Duration::from_secs(180));
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected_wordcount(),
        "coordinator SIGTERM then restart",
    );
}

#[test]
fn sigterm_to_a_worker_leaves_the_job_which_restarts_elsewhere_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _) = job(dir.path(), 4, Some(3000));
    let mut c = Cluster::start(dir.path(), &m, &[], &[]);
    let first = c.wait_checkpoint_after(0);
    // Two of the three workers run the job: stop the one that runs subtask 1/4 of the source.
    let status = c.job_status().unwrap();
    let (i, victim) = c.busy_worker();
    // The spare worker leaves first: that fails nothing (no restart).
    let busy: Vec<&str> = status["subtasks"]
        .as_array()
        .unwrap()
        .iter()
        .map(|t| t["location"].as_str().unwrap())
        .collect();
    let spare = (0..3).find(|k| !busy.contains(&format!("w{k}").as_str())).unwrap();
    sigterm(c.workers[spare].pid());
    assert_eq!(exit_code_within(&mut c.workers[spare], Duration::from_secs(5)), Some(0));
    let after_spare = c.wait_checkpoint_after(first);
    assert_eq!(
        c.job_status().unwrap()["restarts"],
        status["restarts"],
        "the spare worker's leave restarted the job: {}",
        c.coordinator.text()
    );
    // Then a busy one; a replacement joins so that the job has its 4 slots again.
    c.add_worker("w3", &[]);
    sigterm(c.workers[i].pid());
    let code = exit_code_within(&mut c.workers[i], Duration::from_secs(5));
    assert_eq!(code, Some(0), "{}", c.workers[i].text());
    c.wait_checkpoint_after(after_spare);
    c.coordinator.wait_ok(Duration::from_secs(180));
    let log = c.coordinator.text();
    let failure = log
        .lines()
        .find(|l| l.contains("attempt 1 failed: "))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(
        failure.contains(&format!(
            "attempt 1 failed: worker {victim} lost: it left on SIGTERM; it ran lines -> "
        )) && failure.contains("(1/4)"),
        "{failure}"
    );
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected_wordcount(),
        "worker SIGTERM",
    );
}

#[test]
fn a_record_larger_than_a_frame_fails_the_job_naming_the_operator_and_the_limit() {
    use weir_runtime::job::default_max_parallelism;
    use weir_runtime::record::Key;
    use weir_runtime::state::key_group::subtask_for_key;
    let dir = tempfile::tempdir().unwrap();
    // One line of 65 MiB, keyed by itself, sent from source subtask 1/4 (slot 0, on the first
    // deployed worker) to subtask 3/4 or 4/4 (slots 2-3, on the second): it must cross workers.
    let mut line = "b".repeat(65 * 1024 * 1024);
    let base = line.len();
    for i in 0.. {
        line.truncate(base);
        line.push_str(&i.to_string());
        let key = Key::from_value(&serde_json::json!(line)).unwrap();
        if subtask_for_key(&key, 4, default_max_parallelism(4)) >= 2 {
            break;
        }
    }
    std::fs::write(dir.path().join("big.txt"), format!("small\n{line}\nsmall\n")).unwrap();
    drop(line);
    let manifest = format!(
        r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: big }}
spec:
  parallelism: 4
  checkpointing: {{ interval: 1s, storage: "{d}/checkpoints" }}
  job:
    steps:
      - uid: lines
        source: {{ file: {{ path: "{d}/big.txt" }} }}
      - keyBy: {{ expression: line, as: line }}
      - count: {{}}
      - sink: {{ file: {{ path: "{d}/output" }} }}
"#,
        d = dir.path().display()
    );
    let m = dir.path().join("big.yaml");
    std::fs::write(&m, manifest).unwrap();
    let mut c = Cluster::start(dir.path(), &m, &["--restart-max-attempts", "0"], &[]);
    let code = exit_code_within(&mut c.coordinator, Duration::from_secs(120));
    let log = c.coordinator.text();
    assert_eq!(code, Some(1), "{log}");
    let failed = log
        .lines()
        .find(|l| l.contains("FAILED: "))
        .unwrap_or_else(|| panic!("{log}"));
    assert!(
        failed.contains("FAILED: lines -> ")
            && failed.contains(" (1/4) on worker w")
            && failed.contains(" failed: it emitted a record of ")
            && failed.contains("larger than the 64 MiB limit of a frame between workers"),
        "{failed}"
    );
    assert!(!failed.contains("upstream lost"), "{failed}");
}

fn signal(pid: u32, name: &str) {
    let st = Command::new("kill").args([name, &pid.to_string()]).status().unwrap();
    assert!(st.success(), "kill {name} {pid}");
}

/// A stall of the coordinator process itself (an overloaded node, CPU throttling, a paused VM)
/// must not lose every worker at once when it resumes: their heartbeats waited in the socket
/// buffers. Before `cluster::liveness`, the first check after a 5 s stop declared all three
/// workers lost (timeout 3 s) and restarted the job.
#[test]
fn a_stalled_coordinator_does_not_lose_its_workers_when_it_resumes() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _) = job(dir.path(), 4, Some(3000));
    let mut c = Cluster::start(dir.path(), &m, &[], &[]);
    let first = c.wait_checkpoint_after(0);
    signal(c.coordinator.pid(), "-STOP");
    std::thread::sleep(Duration::from_secs(5));
    signal(c.coordinator.pid(), "-CONT");
    c.wait_checkpoint_after(first);
    c.coordinator.wait_ok(Duration::from_secs(180));
    let log = c.coordinator.text();
    assert!(log.contains("this process stalled"), "{log}");
    assert!(
        !log.contains("\"heartbeat timeout\"") && !log.contains("attempt 1 failed"),
        "{log}"
    );
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected_wordcount(),
        "coordinator stalled 5 s",
    );
}

/// A bounded job's final checkpoint is committed before the workers exit: the coordinator ends
/// the job once every subtask saw end-of-stream, and each worker then waits for its subtasks to
/// finish the commit of the final checkpoint instead of cancelling it. With commits slowed to
/// 1.5 s each, the final parts were lost before (soak trial cluster 500137: 927 records).
#[test]
fn the_final_checkpoint_is_committed_before_the_workers_exit() {
    let dir = tempfile::tempdir().unwrap();
    // Checkpoints every 30 s: the unthrottled input is used up before the first periodic one,
    // so the final checkpoint's commit is the one that matters.
    let paths = Paths::local(dir.path());
    let m = wordcount_manifest(dir.path(), &paths, 4, "exactly-once", "30s", None, None);
    let env = [("WEIR_FAILPOINT", "slow-commit:1500")];
    // Two workers, both running subtasks: a spare that registers after the job ended is never
    // told (it keeps looking for a coordinator, as a pod should).
    let mut c = Cluster::start_with_workers(dir.path(), &m, &[], &env, 2);
    c.coordinator.wait_ok(Duration::from_secs(180));
    // The workers finish the commit and exit (at most 10 s after the job ended).
    for w in &mut c.workers {
        w.wait_ok(Duration::from_secs(30));
    }
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected_wordcount(),
        "final checkpoint committed with slow commits",
    );
}

/// A coordinator restarted after the job finished (killed between "finished" and its exit, as
/// in soak trial cluster 1100021, or a pod restarted by Kubernetes) restores the final
/// checkpoint, whose sources are at their end: with workers back, the job finishes again and
/// the output stays exactly the failure-free output (the final commits are not repeated).
#[test]
fn a_coordinator_restarted_after_the_job_finished_adds_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let (m, _) = job(dir.path(), 4, None);
    let mut c = Cluster::start_with_workers(dir.path(), &m, &[], &[], 2);
    c.coordinator.wait_ok(Duration::from_secs(180));
    for w in &mut c.workers {
        w.wait_ok(Duration::from_secs(30));
    }
    let expected = expected_wordcount();
    assert_same_multiset(&local_output(&dir.path().join("output")), &expected, "first run");
    c.restart_coordinator(&[]);
    c.add_worker("w-again-0", &[]);
    c.add_worker("w-again-1", &[]);
    c.coordinator.wait_ok(Duration::from_secs(120));
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected,
        "coordinator restarted after the job finished",
    );
}

/// The sink task's `in` count in a `run summary: …` line: the last entry of `records in/out:`
/// (`<task> <in>/<out>`, tasks in plan order, so the sink's chain comes last).
fn sink_records_in(summary: &str) -> u64 {
    // `records in/out: ` or, after restarts, `records in/out since the restart (...): `.
    let records = summary
        .split("records in/out")
        .nth(1)
        .and_then(|r| r.split_once(": "))
        .and_then(|(_, r)| r.split("; checkpoints").next())
        .unwrap_or_else(|| panic!("no records in {summary}"));
    let last = records.rsplit(", ").next().unwrap();
    let (_, counts) = last.rsplit_once(' ').unwrap();
    counts.split('/').next().unwrap().parse().unwrap()
}

/// A cluster job that finishes cleanly ends like `weir run`: the coordinator logs one run
/// summary whose counts are final (the sink task received every record it committed), naming
/// the output directory and this run's part files, and no process logs a warning (a worker
/// exiting after the job ended is not "lost").
#[test]
fn a_clean_finish_logs_the_run_summary_and_no_warning() {
    let dir = tempfile::tempdir().unwrap();
    let (m, paths) = job(dir.path(), 4, None);
    let mut c = Cluster::start_with_workers(dir.path(), &m, &[], &[], 2);
    c.coordinator.wait_ok(Duration::from_secs(180));
    for w in &mut c.workers {
        w.wait_ok(Duration::from_secs(30));
    }
    let output = local_output(&dir.path().join("output"));
    assert_same_multiset(&output, &expected_wordcount(), "clean finish");
    let log = c.coordinator.text();
    let summaries: Vec<&str> = log.lines().filter(|l| l.contains("run summary: ")).collect();
    assert_eq!(summaries.len(), 1, "one summary: {log}");
    let summary = summaries[0];
    assert_eq!(sink_records_in(summary), output.len() as u64, "final counts: {summary}");
    assert!(
        summary.contains(&format!(
            "committed output in {} (files part-test-run-*.jsonl)",
            paths.output
        )),
        "{summary}"
    );
    assert!(!summary.contains("checkpoints: 0 completed"), "{summary}");
    for p in std::iter::once(&c.coordinator).chain(&c.workers) {
        let text = p.text();
        let warnings: Vec<&str> = text.lines().filter(|l| l.contains(" WARN ")).collect();
        assert!(warnings.is_empty(), "{}: {warnings:#?}", p.log.display());
    }
}

/// Every path under `dir` (for failure messages).
fn walkdir_names(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for e in std::fs::read_dir(&d).into_iter().flatten().flatten() {
            let p = e.path();
            out.push(p.strip_prefix(dir).unwrap_or(&p).display().to_string());
            if p.is_dir() {
                todo.push(p);
            }
        }
    }
    out.sort();
    out
}
