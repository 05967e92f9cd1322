//! Event-time windows end to end on the real data, each result checked against an
//! independent computation in the test: tumbling 1-minute counts per repository on the GitHub
//! events (with and without late records), sliding 5 min / 1 min and session (gap 30 s) counts
//! per user on the Wikipedia edits, and exactly-once with windows under kill -9 and through a
//! rescale by savepoint, in `weir run` and in the cluster.

mod common;
use common::*;
use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// Epoch milliseconds of `YYYY-MM-DDThh:mm:ss[.fff]Z`, computed here (days from the civil
/// date, H. Hinnant's algorithm) independently of the runtime's parser.
fn epoch_ms(s: &str) -> i64 {
    let n = |a: usize, b: usize| s[a..b].parse::<i64>().unwrap();
    let (y, m, d) = (n(0, 4), n(5, 7), n(8, 10));
    let (hh, mm, ss) = (n(11, 13), n(14, 16), n(17, 19));
    let frac = if s.as_bytes()[19] == b'.' { n(20, 23) } else { 0 };
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    ((days * 24 + hh) * 60 + mm) * 60_000 + ss * 1000 + frac
}

/// `(key, event time)` of every GitHub event, files in sorted order (the order one source
/// subtask reads them).
fn github_events() -> Vec<(String, i64)> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(data_dir().join("gharchive"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    let mut out = Vec::new();
    for f in files {
        for line in BufReader::new(std::fs::File::open(f).unwrap()).lines() {
            let v: serde_json::Value = serde_json::from_str(&line.unwrap()).unwrap();
            out.push((
                v["repo"].as_str().unwrap().to_string(),
                epoch_ms(v["dt"].as_str().unwrap()),
            ));
        }
    }
    out
}

/// `(user, event time)` of every Wikipedia edit, in file order.
fn wiki_edits() -> Vec<(String, i64)> {
    let f = std::fs::File::open(data_dir().join("wikiticker/wikiticker-2015-09-12.jsonl.gz")).unwrap();
    BufReader::new(flate2::read::GzDecoder::new(f))
        .lines()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(&l.unwrap()).unwrap();
            (
                v["user"].as_str().unwrap().to_string(),
                epoch_ms(v["time"].as_str().unwrap()),
            )
        })
        .collect()
}

/// The committed window results as `key|start|end|value` lines, sorted.
fn window_output(dir: &Path, key: &str, value: &str) -> Vec<String> {
    let mut out: Vec<String> = local_output(&dir.join("output"))
        .iter()
        .map(|l| {
            let v: serde_json::Value = serde_json::from_str(l).unwrap();
            format!(
                "{}|{}|{}|{}",
                v[key].as_str().unwrap(),
                v["window_start"],
                v["window_end"],
                v[value]
            )
        })
        .collect();
    out.sort();
    out
}

fn to_lines(counts: &BTreeMap<(String, i64, i64), u64>) -> Vec<String> {
    counts.iter().map(|((k, s, e), n)| format!("{k}|{s}|{e}|{n}")).collect()
}

/// A job manifest: `source` (YAML of the source step's body), then keyBy `key_expr` as
/// `key_as` and the window step `window` (flow YAML), into a file sink.
#[allow(clippy::too_many_arguments)]
fn manifest(dir: &Path, name: &str, p: u32, interval: &str, source: &str, key: &str, window: &str) -> PathBuf {
    let yaml = format!(
        r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: {name} }}
spec:
  parallelism: {p}
  checkpointing: {{ interval: {interval}, storage: "{dir}/checkpoints", retained: 2 }}
  savepoints: {{ directory: "{dir}/savepoints" }}
  job:
    steps:
      - uid: events
        source:
{source}
      - keyBy: {{ expression: {key}, as: {key} }}
      - uid: windows
        window: {window}
      - uid: output
        sink: {{ file: {{ path: "{dir}/output" }} }}
"#,
        dir = dir.display()
    );
    let f = dir.join("job.yaml");
    std::fs::write(&f, yaml).unwrap();
    f
}

fn github_source(bound: &str, rate: Option<u64>) -> String {
    let rate = rate.map(|r| format!(", maxRecordsPerSecond: {r}")).unwrap_or_default();
    format!(
        "          file: {{ path: \"{}/gharchive/*.jsonl\", format: jsonl{rate} }}\n          eventTime: {{ field: dt, maxOutOfOrderness: {bound} }}",
        data_dir().display()
    )
}

fn wiki_source() -> String {
    format!(
        "          file: {{ path: \"{}/wikiticker/*.jsonl.gz\", format: jsonl }}\n          eventTime: {{ field: time, maxOutOfOrderness: 1s }}",
        data_dir().display()
    )
}

/// Counts per (key, window) of the events no window drops, and the number dropped as late:
/// one reader in order, tumbling windows, allowed lateness 0
/// ([`common::one_reader_tumbling_counts`]).
fn tumbling_counts(events: &[(String, i64)], size: i64, bound: i64) -> (BTreeMap<(String, i64, i64), u64>, u64) {
    let records = events.iter().map(|(key, t)| (*t, key.clone(), String::new()));
    let (counts, late) = common::one_reader_tumbling_counts(records, size, bound);
    (counts, late.len() as u64)
}

#[test]
fn github_events_per_repository_per_minute_equal_an_independent_count() {
    let events = github_events();
    // A bound above the data's out-of-orderness (2 s): nothing is late, at parallelism 2.
    let dir = tempfile::tempdir().unwrap();
    let m = manifest(
        dir.path(),
        "gh-windowed",
        2,
        "1s",
        &github_source("5s", None),
        "repo",
        "{ type: tumbling, size: 1m, as: events }",
    );
    let log = Weir::run(&m, &[], &[]).wait_ok();
    let (counts, late) = tumbling_counts(&events, 60_000, 5_000);
    assert_eq!(late, 0);
    assert_eq!(counts.values().sum::<u64>(), events.len() as u64);
    assert_same_multiset(
        &window_output(dir.path(), "repo", "events"),
        &to_lines(&counts),
        "bound 5s",
    );
    assert!(log.contains("0 late records dropped"), "{log}");

    // Small bounds at parallelism 1: the test finds the late events itself; the job drops
    // and counts exactly those.
    for (size, bound_ms, bound) in [(60_000, 0, "0s"), (10_000, 500, "500ms")] {
        let dir = tempfile::tempdir().unwrap();
        let window = format!("{{ type: tumbling, size: {}s, as: events }}", size / 1000);
        let m = manifest(
            dir.path(),
            "gh-late",
            1,
            "1s",
            &github_source(bound, None),
            "repo",
            &window,
        );
        let log = Weir::run(&m, &[], &[]).wait_ok();
        let (counts, late) = tumbling_counts(&events, size, bound_ms);
        assert!(late > 0, "the case must have late events (size {size}, bound {bound})");
        assert_same_multiset(
            &window_output(dir.path(), "repo", "events"),
            &to_lines(&counts),
            &format!("size {size} ms, bound {bound}"),
        );
        assert!(
            log.contains(&format!(": end of event time; {late} late records dropped")),
            "expected {late} late records: {log}"
        );
        // A warning that says what to change, not only a count at info level.
        assert!(
            log.lines().any(|l| l.contains(" WARN ")
                && l.contains("late records dropped")
                && l.contains("`eventTime.maxOutOfOrderness`, raise it or the window's `allowedLateness`")),
            "{log}"
        );
    }
}

#[test]
fn wikiticker_sliding_and_session_windows_per_user_equal_independent_computations() {
    let edits = wiki_edits();
    // Sliding 5 min every 1 min: each edit counts in the 5 windows holding it.
    let dir = tempfile::tempdir().unwrap();
    let m = manifest(
        dir.path(),
        "wiki-sliding",
        2,
        "1s",
        &wiki_source(),
        "user",
        "{ type: sliding, size: 5m, slide: 1m }",
    );
    Weir::run(&m, &[], &[]).wait_ok();
    let mut sliding = BTreeMap::new();
    for (user, t) in &edits {
        let last = t - t.rem_euclid(60_000);
        for k in 0..5 {
            let start = last - k * 60_000;
            *sliding.entry((user.clone(), start, start + 300_000)).or_insert(0u64) += 1;
        }
    }
    assert_same_multiset(
        &window_output(dir.path(), "user", "count"),
        &to_lines(&sliding),
        "sliding",
    );

    // Sessions with a 30 s gap: per user, sorted times; a new session when the next edit is
    // more than 30 s after the previous one (an edit exactly 30 s later touches the session
    // and joins it, as Flink's TimeWindow.intersects).
    let dir = tempfile::tempdir().unwrap();
    let m = manifest(
        dir.path(),
        "wiki-session",
        2,
        "1s",
        &wiki_source(),
        "user",
        "{ type: session, gap: 30s }",
    );
    Weir::run(&m, &[], &[]).wait_ok();
    let mut by_user: BTreeMap<String, Vec<i64>> = BTreeMap::new();
    for (user, t) in &edits {
        by_user.entry(user.clone()).or_default().push(*t);
    }
    let mut sessions = BTreeMap::new();
    for (user, mut times) in by_user {
        times.sort_unstable();
        let (mut start, mut end, mut n) = (times[0], times[0] + 30_000, 0u64);
        for t in times {
            if t > end {
                sessions.insert((user.clone(), start, end), n);
                (start, n) = (t, 0);
            }
            end = end.max(t + 30_000);
            n += 1;
        }
        sessions.insert((user.clone(), start, end), n);
    }
    assert_same_multiset(
        &window_output(dir.path(), "user", "count"),
        &to_lines(&sessions),
        "session",
    );
}

#[test]
fn windows_are_exactly_once_under_kill_9_and_through_a_rescale() {
    let events = github_events();
    let (counts, late) = tumbling_counts(&events, 60_000, 5_000);
    assert_eq!(late, 0);
    let expected = to_lines(&counts);

    let mut rng = Rng(seed());
    let dir = tempfile::tempdir().unwrap();
    let source = github_source("5s", Some(12_000));
    let window = "{ type: tumbling, size: 1m, as: events }";
    let m = manifest(dir.path(), "gh-kills", 2, "200ms", &source, "repo", window);
    run_with_kills(&m, 3, &[], &mut rng);
    assert_same_multiset(&window_output(dir.path(), "repo", "events"), &expected, "3 kills");

    let dir = tempfile::tempdir().unwrap();
    let m = manifest(dir.path(), "gh-rescale", 2, "300ms", &source, "repo", window);
    let w = Weir::run(&m, &[], &[]);
    let api = w.api();
    std::thread::sleep(Duration::from_millis(1500));
    let sp1 = stop_with_savepoint(&api, &[]);
    assert!(w.wait_ok().contains("stopped with savepoint"), "stopped mid-input");
    let w = Weir::run(&m, &["--parallelism", "3", "--restore", &sp1], &[]);
    let api = w.api();
    std::thread::sleep(Duration::from_millis(1500));
    let sp2 = stop_with_savepoint(&api, &[]);
    assert!(w.wait_ok().contains("stopped with savepoint"), "stopped mid-input");
    Weir::run(&m, &["--parallelism", "1", "--restore", &sp2], &[]).wait_ok();
    assert_same_multiset(
        &window_output(dir.path(), "repo", "events"),
        &expected,
        "2 → 3 → 1 rescale",
    );
}

/// Deltas in the window's (`windows`) chains of the completed checkpoints of job `name` whose
/// checkpoints are under `dir`.
fn window_deltas(dir: &Path, name: &str) -> usize {
    let mut deltas = 0;
    for entry in std::fs::read_dir(dir.join("checkpoints").join(name)).unwrap().flatten() {
        let path = entry.path().join("_metadata");
        let Ok(bytes) = std::fs::read(&path) else { continue };
        let metadata = weir_runtime::state::snapshot::decode_metadata(&path.display().to_string(), &bytes).unwrap();
        deltas += metadata
            .operators
            .iter()
            .filter(|o| o.uid == "windows")
            .flat_map(|o| &o.handles)
            .flat_map(|h| &h.chain)
            .filter(|link| !link.base)
            .count();
    }
    deltas
}

/// `m` with keyed state on `backend` and incremental checkpoints, 100 of them retained (so a
/// test sees the chains written before the last restore), written beside it as
/// `job-<backend>.yaml`.
fn on_backend_incremental(m: &Path, backend: &str) -> PathBuf {
    let yaml = std::fs::read_to_string(m).unwrap();
    let changed = yaml.replace("retained: 2 }", "retained: 100, incremental: true }");
    assert_ne!(
        yaml, changed,
        "the manifest's checkpointing line changed; update this test"
    );
    let out = m.with_file_name(format!("job-{backend}.yaml"));
    std::fs::write(&out, changed).unwrap();
    set_state_backend(&out, backend);
    out
}

/// Windows keep their state on the job's backend (issue 12), with incremental checkpoints:
/// 1-hour windows on disk (state that lives long enough for deltas: most keys of an hour are
/// not written in every 200 ms), killed with -9 three times, give the independent count, and
/// the window wrote deltas; 1-minute windows on heap stopped with a savepoint, restored on
/// disk at another parallelism, and that one's savepoint back on heap (a savepoint is
/// backend-independent), too.
#[test]
fn windows_on_either_backend_are_exactly_once_under_kill_9_and_across_backends() {
    let events = github_events();
    let mut rng = Rng(seed());
    let source = github_source("5s", Some(12_000));

    let (counts, late) = tumbling_counts(&events, 3_600_000, 5_000);
    assert_eq!(late, 0);
    let dir = tempfile::tempdir().unwrap();
    let env = state_dir_env(&dir.path().join("state"));
    let window = "{ type: tumbling, size: 1h, as: events }";
    let m = manifest(dir.path(), "gh-disk", 2, "200ms", &source, "repo", window);
    let disk = on_backend_incremental(&m, "disk");
    run_with_kills(&disk, 3, &env, &mut rng);
    assert_same_multiset(
        &window_output(dir.path(), "repo", "events"),
        &to_lines(&counts),
        "disk, 3 kills",
    );
    assert!(window_deltas(dir.path(), "gh-disk") > 0, "the window wrote deltas");

    let (counts, late) = tumbling_counts(&events, 60_000, 5_000);
    assert_eq!(late, 0);
    let expected = to_lines(&counts);
    let window = "{ type: tumbling, size: 1m, as: events }";

    let dir = tempfile::tempdir().unwrap();
    let env = state_dir_env(&dir.path().join("state"));
    let m = manifest(dir.path(), "gh-switch", 2, "300ms", &source, "repo", window);
    let (heap, disk) = (on_backend_incremental(&m, "heap"), on_backend_incremental(&m, "disk"));
    let w = Weir::run(&heap, &[], &[]);
    std::thread::sleep(Duration::from_millis(1500));
    let sp1 = stop_with_savepoint(&w.api(), &[]);
    assert!(w.wait_ok().contains("stopped with savepoint"), "stopped mid-input");
    let w = Weir::run(&disk, &["--parallelism", "3", "--restore", &sp1], &env);
    std::thread::sleep(Duration::from_millis(1500));
    let sp2 = stop_with_savepoint(&w.api(), &[]);
    assert!(w.wait_ok().contains("stopped with savepoint"), "stopped mid-input");
    Weir::run(&heap, &["--parallelism", "1", "--restore", &sp2], &[]).wait_ok();
    assert_same_multiset(
        &window_output(dir.path(), "repo", "events"),
        &expected,
        "heap p2 → disk p3 → heap p1",
    );
}

/// The window keeps the `keyBy` before it with its shape: a restore under another key
/// selector is refused naming the field and the way out, spacing alone restores, and the way
/// out (a new uid, `allowNonRestoredState`) starts the window empty.
#[test]
fn a_restore_under_another_key_selector_is_refused_by_the_window() {
    let dir = tempfile::tempdir().unwrap();
    let window = "{ type: tumbling, size: 1m, as: events }";
    let m = manifest(
        dir.path(),
        "gh-key",
        1,
        "200ms",
        &github_source("5s", None),
        "repo",
        window,
    );
    Weir::run(&m, &[], &[]).wait_ok();
    let restore = |extra: &[&str]| {
        let mut args = vec!["--restore", "latest"];
        args.extend(extra);
        Weir::run(&m, &args, &[]).wait()
    };
    let (ok, output) = restore(&["--set", "spec.job.steps.1.keyBy.expression=repo + '!'"]);
    assert!(!ok, "refused: {output}");
    assert!(
        output.contains(
            "spec.job.steps[1].keyBy.expression: the restore point's windows are keyed by `repo`, this job keys by \
             `repo + '!'`"
        ) && output.contains("give the window a new uid (spec.job.steps[2].uid)"),
        "{output}"
    );
    let (ok, output) = restore(&["--set", "spec.job.steps.1.keyBy.expression= repo "]);
    assert!(ok, "spacing only: {output}");
    let (ok, output) = restore(&[
        "--set",
        "spec.job.steps.1.keyBy.expression=repo + '!'",
        "--set",
        "spec.job.steps.2.uid=windows-by-marked-repo",
        "--set",
        "spec.allowNonRestoredState=true",
    ]);
    assert!(ok, "the way out starts the window empty: {output}");
}

/// In the distributed runtime watermarks cross workers over the data connections: a windowed
/// job on a coordinator and three workers, one of them killed with -9 mid-run and replaced,
/// commits exactly the failure-free results.
#[test]
fn windows_in_the_cluster_are_exactly_once_across_a_worker_kill() {
    let events = github_events();
    let (counts, late) = tumbling_counts(&events, 60_000, 5_000);
    assert_eq!(late, 0);
    let dir = tempfile::tempdir().unwrap();
    let m = manifest(
        dir.path(),
        "gh-cluster",
        4,
        "300ms",
        &github_source("5s", Some(6_000)),
        "repo",
        "{ type: tumbling, size: 1m, as: events }",
    );
    let mut c = common::cluster::Cluster::start(dir.path(), &m, &[], &[]);
    let first = c.wait_checkpoint_after(0);
    let (victim, _) = c.busy_worker();
    c.workers[victim].kill9();
    c.add_worker("w-replacement", &[]);
    c.wait_checkpoint_after(first);
    c.coordinator.wait_ok(Duration::from_secs(240));
    assert!(
        c.coordinator.text().contains("restarting in"),
        "{}",
        c.coordinator.text()
    );
    assert_same_multiset(
        &window_output(dir.path(), "repo", "events"),
        &to_lines(&counts),
        "cluster with a worker kill",
    );
}

/// With late records in play: at parallelism 1 which records are late is deterministic, and a
/// restore continues from the window operator's checkpointed watermark, so after kills the
/// committed results still equal the independent computation that drops the late records —
/// no window lost, none fired twice, no dropped record counted in.
#[test]
fn late_records_are_dropped_the_same_way_across_kill_9_restores() {
    let events = github_events();
    let (counts, late) = tumbling_counts(&events, 10_000, 0);
    assert!(late > 0);
    let mut rng = Rng(seed());
    let dir = tempfile::tempdir().unwrap();
    let m = manifest(
        dir.path(),
        "gh-late-kills",
        1,
        "200ms",
        &github_source("0s", Some(25_000)),
        "repo",
        "{ type: tumbling, size: 10s, as: events }",
    );
    run_with_kills(&m, 3, &[], &mut rng);
    assert_same_multiset(
        &window_output(dir.path(), "repo", "events"),
        &to_lines(&counts),
        "late records with 3 kills",
    );
}

/// A generator job restored in the middle of a round of its splits gives the failure-free
/// output: 10-second windows (10,000 ids of event time, so a restore's window always ends
/// within the records one misread round would put out of order) with `maxOutOfOrderness: 40s`
/// (one round of 32 splits of 1,024 records spans 32,768 ids), killed -9 three times, equal
/// to an independent count. Before 2026-12-06 the generator's round-robin cursor restarted at
/// its first split after a restore, records came up to 65,536 ids out of order, and windows
/// fired without them (3,816 records dropped as late in the review's run).
#[test]
fn a_generator_restored_in_the_middle_of_a_round_fires_its_windows_as_without_failures() {
    const RECORDS: u64 = 600_000;
    const KEYS: u64 = 1_000;
    let mut counts: BTreeMap<(String, i64, i64), u64> = BTreeMap::new();
    for n in 0..RECORDS {
        let row = weir_runtime::operators::source::generator::record(42, n, KEYS).to_json();
        let start = n as i64 - n as i64 % 10_000;
        *counts
            .entry((row["key"].as_str().unwrap().to_string(), start, start + 10_000))
            .or_default() += 1;
    }
    let mut rng = Rng(seed());
    let dir = tempfile::tempdir().unwrap();
    let source = format!(
        "          generator: {{ seed: 42, count: {RECORDS}, keys: {KEYS}, maxRecordsPerSecond: 120000 }}\n          eventTime: {{ field: id, maxOutOfOrderness: 40s }}"
    );
    let window = "{ type: tumbling, size: 10s, as: events }";
    let m = manifest(dir.path(), "gen-kills", 2, "200ms", &source, "key", window);
    run_with_kills(&m, 3, &[], &mut rng);
    let mut expected = to_lines(&counts);
    expected.sort();
    assert_same_multiset(
        &window_output(dir.path(), "key", "events"),
        &expected,
        "generator, 3 kills",
    );
}
