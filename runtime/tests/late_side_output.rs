//! A window's late side output end to end (`lateRecords: sideOutput`, read as
//! `inputs: [windows.late]`): GitHub events per repository per 10-second tumbling window with
//! no out-of-orderness allowed, so the events that arrive out of time order are late. The
//! window results and the late records each reach their own sink; both are checked record by
//! record against an independent computation of which events are late (given the watermark
//! strategy), failure-free and through kill -9.

mod common;
use common::*;
use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};

/// Epoch milliseconds of `YYYY-MM-DDThh:mm:ssZ`, computed here (days from the civil date,
/// H. Hinnant's algorithm) independently of the runtime's parser.
fn epoch_ms(s: &str) -> i64 {
    let n = |a: usize, b: usize| s[a..b].parse::<i64>().unwrap();
    let (y, m, d) = (n(0, 4), n(5, 7), n(8, 10));
    let (hh, mm, ss) = (n(11, 13), n(14, 16), n(17, 19));
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    ((days * 24 + hh) * 60 + mm) * 60_000 + ss * 1000
}

/// Every GitHub event, files in sorted order (the order the one source subtask reads them).
fn github_events() -> Vec<serde_json::Value> {
    let mut files: Vec<PathBuf> = std::fs::read_dir(data_dir().join("gharchive"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "jsonl"))
        .collect();
    files.sort();
    files
        .into_iter()
        .flat_map(|f| BufReader::new(std::fs::File::open(f).unwrap()).lines())
        .map(|l| serde_json::from_str(&l.unwrap()).unwrap())
        .collect()
}

const SIZE_MS: i64 = 10_000;
const LATE_FIELDS: [&str; 3] = ["id", "repo", "dt"];

/// A record as `a|b|c` of `fields` (JSON text of each value).
fn line(v: &serde_json::Value, fields: &[&str]) -> String {
    fields.iter().map(|f| v[*f].to_string()).collect::<Vec<_>>().join("|")
}

/// Computed here: the watermark before each event is the largest event time so far minus
/// the bound (0) minus 1 ms (one reader, in order); an event whose 10 s window's last
/// millisecond is at or behind it is late (allowed lateness 0). Returns the window results
/// `repo|start|end|count` of the events that are not late, and the late events `id|repo|dt`,
/// both sorted.
fn expected() -> (Vec<String>, Vec<String>) {
    let records = github_events().into_iter().map(|e| {
        let t = epoch_ms(e["dt"].as_str().unwrap());
        (t, e["repo"].to_string(), line(&e, &LATE_FIELDS))
    });
    one_reader_tumbling(records, SIZE_MS, 0)
}

fn manifest(dir: &Path, rate: Option<u64>) -> PathBuf {
    let rate = rate.map(|r| format!(", maxRecordsPerSecond: {r}")).unwrap_or_default();
    let yaml = format!(
        r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: gh-late-side-output }}
spec:
  parallelism: 1
  checkpointing: {{ interval: 200ms, storage: "{dir}/checkpoints", retained: 2 }}
  job:
    steps:
      - name: events
        uid: events
        source:
          file: {{ path: "{data}/gharchive/*.jsonl", format: jsonl{rate} }}
          eventTime: {{ field: dt, maxOutOfOrderness: 0s }}
      - keyBy: {{ expression: repo, as: repo }}
      - name: windows
        uid: windows
        window: {{ type: tumbling, size: 10s, as: events, lateRecords: sideOutput }}
      - uid: windows-out
        sink: {{ file: {{ path: "{dir}/windows" }} }}
      - inputs: [windows.late]
        map: {{ expression: "{{'id': id, 'repo': repo, 'dt': dt}}" }}
      - uid: late-out
        sink: {{ file: {{ path: "{dir}/late" }} }}
"#,
        dir = dir.display(),
        data = data_dir().display(),
    );
    let f = dir.join("job.yaml");
    std::fs::write(&f, yaml).unwrap();
    f
}

/// Both sinks' committed output: (window results, late records), as [`expected`] writes them.
fn outputs(dir: &Path) -> (Vec<String>, Vec<String>) {
    let read = |name: &str, fields: &[&str]| {
        let mut out: Vec<String> = local_output(&dir.join(name))
            .iter()
            .map(|l| line(&serde_json::from_str(l).unwrap(), fields))
            .collect();
        out.sort();
        out
    };
    (
        read("windows", &["repo", "window_start", "window_end", "events"]),
        read("late", &LATE_FIELDS),
    )
}

fn assert_outputs(dir: &Path, want: &(Vec<String>, Vec<String>), what: &str) {
    let (windows, late) = outputs(dir);
    assert_same_multiset(&windows, &want.0, &format!("{what}: window results"));
    assert_same_multiset(&late, &want.1, &format!("{what}: late records"));
}

#[test]
fn late_records_reach_the_side_output_equal_to_an_independent_computation() {
    let want = expected();
    assert!(!want.1.is_empty(), "the data must have late events at bound 0");
    let dir = tempfile::tempdir().unwrap();
    let log = Weir::run(&manifest(dir.path(), None), &[], &[]).wait_ok();
    assert_outputs(dir.path(), &want, "failure-free");
    assert!(
        log.contains(&format!("{} late records sent to the side output", want.1.len())),
        "{log}"
    );
}

#[test]
fn the_late_side_output_is_exactly_once_through_kill_9() {
    let want = expected();
    let reference = tempfile::tempdir().unwrap();
    Weir::run(&manifest(reference.path(), None), &[], &[]).wait_ok();
    let failure_free = outputs(reference.path());
    let mut rng = Rng(seed());
    let dir = tempfile::tempdir().unwrap();
    // 25 000 events/s: about 5 s for the five files, so the kills land mid-input.
    run_with_kills(&manifest(dir.path(), Some(25_000)), 3, &[], &mut rng);
    assert_outputs(dir.path(), &failure_free, "3 kill -9, against the failure-free run");
    assert_outputs(dir.path(), &want, "3 kill -9, against the independent computation");
}

/// The same job on the cluster (coordinator and workers, each stage's subtask possibly on
/// another worker, so the late edge crosses the network): the same late records and results.
#[test]
fn the_late_side_output_on_the_cluster_equals_the_independent_computation() {
    let dir = tempfile::tempdir().unwrap();
    let m = manifest(dir.path(), None);
    let mut c = common::cluster::Cluster::start(dir.path(), &m, &[], &[]);
    c.coordinator.wait_ok(std::time::Duration::from_secs(180));
    assert_outputs(dir.path(), &expected(), "cluster");
}
