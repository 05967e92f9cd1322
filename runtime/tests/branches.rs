//! A branching dataflow end to end over the Wikipedia edits: one source read by two steps,
//! each branch into its own file sink (`keyBy user → count → counts-out`, and
//! `filter isRobot → map → robots-out`). Each sink's output is checked record by record against
//! an independent computation, and under kill -9 (aligned and unaligned checkpoints), a rescale
//! 2 → 3 through a savepoint and the kill -9 of a worker in the cluster against the
//! failure-free run.

mod common;
use common::cluster::Cluster;
use common::*;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// The branching manifest at `parallelism`. `rate`: the source's records per second per
/// subtask; `extra_checkpointing`: more `checkpointing` settings (`, unaligned: true`);
/// `robots_rate`: the robots sink's records per second per subtask (backpressure).
fn manifest(
    dir: &Path,
    parallelism: u32,
    rate: Option<u64>,
    extra_checkpointing: &str,
    robots_rate: Option<u64>,
) -> PathBuf {
    let rate = rate.map(|r| format!(", maxRecordsPerSecond: {r}")).unwrap_or_default();
    let robots_rate = robots_rate
        .map(|r| format!(", maxRecordsPerSecond: {r}"))
        .unwrap_or_default();
    let yaml = format!(
        r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: wiki-branches }}
spec:
  parallelism: {parallelism}
  checkpointing: {{ interval: 200ms, storage: "{dir}/checkpoints", retained: 2{extra_checkpointing} }}
  savepoints: {{ directory: "{dir}/savepoints" }}
  job:
    steps:
      - name: edits
        uid: edits
        source: {{ file: {{ path: "{data}/wikiticker/*.jsonl.gz", format: jsonl{rate} }} }}
      - keyBy: {{ expression: user, as: user }}
      - uid: edits-per-user
        count: {{}}
      - uid: counts-out
        sink: {{ file: {{ path: "{dir}/counts" }} }}
      - name: robots
        inputs: [edits]
        filter: {{ expression: "isRobot" }}
      - map: {{ expression: "{{'page': page, 'channel': channel, 'delta': delta}}" }}
      - uid: robots-out
        sink: {{ file: {{ path: "{dir}/robots"{robots_rate} }} }}
"#,
        dir = dir.display(),
        data = data_dir().display(),
    );
    let f = dir.join("branches.yaml");
    std::fs::write(&f, yaml).unwrap();
    f
}

/// Every Wikipedia edit, in file order.
fn edits() -> Vec<serde_json::Value> {
    let f = std::fs::File::open(data_dir().join("wikiticker/wikiticker-2015-09-12.jsonl.gz")).unwrap();
    BufReader::new(flate2::read::GzDecoder::new(f))
        .lines()
        .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
        .collect()
}

/// A record as `a|b|c` of the fields `fields` (JSON text of each value), for comparison.
fn line(v: &serde_json::Value, fields: &[&str]) -> String {
    fields.iter().map(|f| v[*f].to_string()).collect::<Vec<_>>().join("|")
}

/// The committed output of the sink writing to `dir/name`, as [`line`]s of `fields`, sorted.
fn output(dir: &Path, name: &str, fields: &[&str]) -> Vec<String> {
    let mut out: Vec<String> = local_output(&dir.join(name))
        .iter()
        .map(|l| line(&serde_json::from_str(l).unwrap(), fields))
        .collect();
    out.sort();
    out
}

const COUNT_FIELDS: [&str; 2] = ["user", "count"];
const ROBOT_FIELDS: [&str; 3] = ["page", "channel", "delta"];

/// Both sinks' committed output: (counts, robots).
fn outputs(dir: &Path) -> (Vec<String>, Vec<String>) {
    (
        output(dir, "counts", &COUNT_FIELDS),
        output(dir, "robots", &ROBOT_FIELDS),
    )
}

/// Computed here, independently of Weir: the running count per user (every `(user, k)` for
/// k = 1..N(user)) and the (page, channel, delta) of every edit by a robot.
fn expected() -> (Vec<String>, Vec<String>) {
    let all = edits();
    let mut per_user: BTreeMap<String, u64> = BTreeMap::new();
    for e in &all {
        *per_user.entry(e["user"].as_str().unwrap().to_string()).or_default() += 1;
    }
    let mut counts: Vec<String> = per_user
        .iter()
        .flat_map(|(u, &n)| (1..=n).map(move |k| format!("{}|{k}", serde_json::json!(u))))
        .collect();
    counts.sort();
    let mut robots: Vec<String> = all
        .iter()
        .filter(|e| e["isRobot"] == serde_json::json!(true))
        .map(|e| line(e, &ROBOT_FIELDS))
        .collect();
    robots.sort();
    (counts, robots)
}

fn assert_outputs(dir: &Path, want: &(Vec<String>, Vec<String>), what: &str) {
    let (counts, robots) = outputs(dir);
    assert_same_multiset(&counts, &want.0, &format!("{what}: the counts sink"));
    assert_same_multiset(&robots, &want.1, &format!("{what}: the robots sink"));
}

#[test]
fn each_sink_of_a_branching_job_equals_an_independent_computation() {
    let want = expected();
    assert!(
        !want.1.is_empty() && want.1.len() < want.0.len(),
        "both branches carry records"
    );
    let dir = tempfile::tempdir().unwrap();
    let m = manifest(dir.path(), 2, None, "", None);
    let log = Weir::run(&m, &[], &[]).wait_ok();
    assert_outputs(dir.path(), &want, "failure-free at p=2");
    // The run summary names both sinks' directories.
    for sink in ["counts", "robots"] {
        assert!(
            log.contains(&dir.path().join(sink).display().to_string()),
            "{sink}: {log}"
        );
    }
    // Every completed checkpoint holds both sinks' state under their own uids.
    let chk = std::fs::read_dir(dir.path().join("checkpoints/wiki-branches"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .find(|p| p.file_name().unwrap().to_string_lossy().starts_with("chk-") && p.join("_metadata").is_file())
        .expect("a completed checkpoint");
    let metadata = std::fs::read_to_string(chk.join("_metadata")).unwrap_or_default();
    let names: Vec<String> = std::fs::read_dir(&chk)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    for uid in ["counts-out", "robots-out", "edits-per-user", "edits"] {
        assert!(
            names.iter().any(|n| n.starts_with(&format!("{uid}-"))) || metadata.contains(uid),
            "{} lacks the state of {uid}: {names:?}",
            chk.display()
        );
    }
}

/// `examples/wiki-branches.yaml` (the same job, with the repository's paths) runs with
/// `weir run` and writes both sinks' expected output.
#[test]
fn the_branching_example_runs_and_writes_both_branches() {
    let dir = tempfile::tempdir().unwrap();
    let example = Path::new(env!("CARGO_MANIFEST_DIR")).join("../examples/wiki-branches.yaml");
    let text = std::fs::read_to_string(example)
        .unwrap()
        .replace("../shared/data", &data_dir().display().to_string())
        .replace(
            "./weir-data/output/wiki-branches/edits-per-user",
            &dir.path().join("counts").display().to_string(),
        )
        .replace(
            "./weir-data/output/wiki-branches/robot-edits",
            &dir.path().join("robots").display().to_string(),
        )
        .replace(
            "./weir-data/checkpoints",
            &dir.path().join("checkpoints").display().to_string(),
        );
    assert!(!text.contains("weir-data"), "every path redirected: {text}");
    let m = dir.path().join("wiki-branches.yaml");
    std::fs::write(&m, text).unwrap();
    Weir::run(&m, &[], &[]).wait_ok();
    assert_outputs(dir.path(), &expected(), "examples/wiki-branches.yaml");
}

#[test]
fn kill_9_during_a_branching_job_then_restore_latest_is_exactly_once() {
    let want = expected();
    let mut rng = Rng(seed());
    let reference = tempfile::tempdir().unwrap();
    Weir::run(&manifest(reference.path(), 2, None, "", None), &[], &[]).wait_ok();
    let failure_free = outputs(reference.path());
    let dir = tempfile::tempdir().unwrap();
    // One gzip file is one split: 8000 edits/s take about 5 s, so the kills land mid-file.
    let m = manifest(dir.path(), 2, Some(8000), "", None);
    run_with_kills(&m, 3, &[], &mut rng);
    assert_outputs(dir.path(), &failure_free, "3 kill -9, against the failure-free run");
    assert_outputs(dir.path(), &want, "3 kill -9, against the independent computation");
}

#[test]
fn a_branching_job_rescales_2_to_3_through_a_savepoint_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let m = manifest(dir.path(), 2, Some(8000), "", None);
    let w = Weir::run(&m, &[], &[]);
    let api = w.api();
    wait_running(&api);
    std::thread::sleep(Duration::from_millis(1500));
    let savepoint = stop_with_savepoint(&api, &[]);
    let log = w.wait_ok();
    assert!(log.contains("stopped with savepoint"), "{log}");
    Weir::run(&m, &["--parallelism", "3", "--restore", &savepoint], &[]).wait_ok();
    assert_outputs(dir.path(), &expected(), "rescaled 2 → 3 through a savepoint");
}

/// Unaligned checkpoints with the robots sink slowed: the source blocks on the robots branch,
/// so checkpoints hold channel state (in-flight records of the edges out of the branching
/// source, each edge's under its downstream stage's uid). kill -9 right after such a
/// checkpoint, twice, then finish: equal to the independent computation.
#[test]
fn unaligned_checkpoints_of_a_branching_job_are_exactly_once_through_kill_9() {
    let dir = tempfile::tempdir().unwrap();
    let m = manifest(dir.path(), 2, None, ", unaligned: true", Some(1500));
    let first = run_until_channel_state(&m, "2", 0, &dir.path().join("checkpoints/wiki-branches"), None);
    run_until_channel_state(&m, "2", first, &dir.path().join("checkpoints/wiki-branches"), None);
    let chk = dir.path().join("checkpoints/wiki-branches");
    let channel_files: Vec<String> = std::fs::read_dir(&chk)
        .unwrap()
        .flat_map(|e| std::fs::read_dir(e.unwrap().path()).into_iter().flatten())
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.starts_with("channel-"))
        .collect();
    assert!(
        !channel_files.is_empty(),
        "no channel state written in {}",
        chk.display()
    );
    // (Whether a retained checkpoint also holds a blocked source's unsent output, stored per
    // edge, depends on timing; `exec/inputs_tests.rs` checks that with two blocked edges.)
    Weir::run(&m, &["--restore", "latest"], &[]).wait_ok();
    assert_outputs(
        dir.path(),
        &expected(),
        "unaligned checkpoints, 2 kill -9 after channel state",
    );
}

#[test]
fn a_branching_job_on_the_cluster_is_exactly_once_through_the_kill_9_of_a_worker() {
    let dir = tempfile::tempdir().unwrap();
    // p = 4 on three workers of two slots: the branches' forward edges stay on a worker, the
    // keyed exchange into the count crosses workers.
    let m = manifest(dir.path(), 4, Some(6000), "", None);
    let mut c = Cluster::start(dir.path(), &m, &[], &[]);
    let first = c.wait_checkpoint_after(0);
    let (victim, _) = c.busy_worker();
    c.workers[victim].kill9();
    c.add_worker("w-replacement", &[]);
    c.wait_checkpoint_after(first);
    c.coordinator.wait_ok(Duration::from_secs(180));
    let log = c.coordinator.text();
    assert!(log.contains("restarting in"), "{log}");
    assert_outputs(dir.path(), &expected(), "cluster, worker kill -9");
}
