//! A `ttl` made longer (or removed) at a restore must not bring back keys that had expired
//! when the restore point was taken: a full checkpoint never holds them, and an incremental
//! one (a chain whose base still holds keys cleaned up since, or a native store that keeps
//! them until read) must leave them out the same way (`StateHandle::expired_through_ms`).
//! Found by a review: with incremental checkpoints a heap chain brought back 200 of 200
//! expired keys, a native disk store a few, and a join 220 expired pairs.
//!
//! Real data: the first events of one GH Archive hour are the keys that expire (read at once,
//! in the first checkpoint's base, expired seconds later); events of the next hour on other
//! repositories, read at 20 a second, keep the job running and taking checkpoints (deltas or
//! native ones) past their expiry. The restore then gives the step a 1 h `ttl` and reads the
//! first events again: an aggregation must count them from one, a join must pair none of them.
//! Each case checks that its restore point is the kind it is about (a chain with deltas over a
//! base holding the keys, or a native store), so a slow machine fails it rather than passing
//! it with nothing to test.

mod common;
use common::*;
use serde_json::Value;
use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;

const JOB: &str = "ttl-restore";
const EARLY_FILE: &str = "gharchive/2015-02-22-21.jsonl";
const LATER_FILE: &str = "gharchive/2015-02-22-22.jsonl";
/// Events read at once, whose repositories expire.
const EARLY_EVENTS: usize = 300;
/// Events of other repositories read at [`LATER_RATE`] a second after them.
const LATER_EVENTS: usize = 100;
const LATER_RATE: u32 = 20;

/// The step under test.
#[derive(Clone, Copy, Debug, PartialEq)]
enum Step {
    Count,
    Join,
}

/// `(early lines, later lines, early repositories)`: the later lines are events of
/// repositories that no early event has.
fn events() -> (Vec<String>, Vec<String>, BTreeSet<String>) {
    let repo = |line: &str| {
        serde_json::from_str::<Value>(line).unwrap()["repo"]
            .as_str()
            .unwrap()
            .to_string()
    };
    let early: Vec<String> = std::fs::read_to_string(data_dir().join(EARLY_FILE))
        .unwrap()
        .lines()
        .take(EARLY_EVENTS)
        .map(str::to_string)
        .collect();
    let repos: BTreeSet<String> = early.iter().map(|l| repo(l)).collect();
    let later = std::fs::read_to_string(data_dir().join(LATER_FILE))
        .unwrap()
        .lines()
        .filter(|l| !repos.contains(&repo(l)))
        .take(LATER_EVENTS)
        .map(str::to_string)
        .collect();
    (early, later, repos)
}

/// The job: `early/*.jsonl` and `later/*.jsonl` (with `throttled`, at [`LATER_RATE`]) into a
/// count by repository (their union) or a join by repository (early on the left), with `ttl`.
fn manifest(dir: &Path, step: Step, backend: &str, ttl: &str, throttled: bool) -> std::path::PathBuf {
    let rate = if throttled {
        format!(", maxRecordsPerSecond: {LATER_RATE}")
    } else {
        String::new()
    };
    let stateful = match step {
        Step::Count => format!(
            r#"      - {{ uid: u, inputs: [early, later], union: {{}} }}
      - {{ keyBy: {{ expression: repo, as: repo }} }}
      - {{ uid: counts, count: {{ ttl: "{ttl}" }} }}"#
        ),
        Step::Join => format!(
            r#"      - uid: pairs
        inputs: [early, later]
        join:
          leftKey: repo
          rightKey: repo
          as: repo
          fields:
            - {{ from: left.id, as: early }}
            - {{ from: right.id, as: later }}
          ttl: "{ttl}""#
        ),
    };
    let paths = Paths::local(dir);
    let yaml = format!(
        r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: {JOB} }}
spec:
  parallelism: 1
  stateBackend: {backend}
  checkpointing: {{ storage: "{ckpt}", interval: 1s, incremental: true }}
  job:
    steps:
      - {{ name: early, uid: early, source: {{ file: {{ path: "{early}/*.jsonl", format: jsonl }} }} }}
      - {{ name: later, uid: later, source: {{ file: {{ path: "{later}/*.jsonl", format: jsonl{rate} }} }} }}
{stateful}
      - {{ uid: out, sink: {{ file: {{ path: "{out}" }} }} }}
"#,
        ckpt = paths.checkpoints,
        early = dir.join("early").display(),
        later = dir.join("later").display(),
        out = paths.output,
    );
    let f = dir.join(format!("job-{ttl}.yaml"));
    std::fs::write(&f, yaml).unwrap();
    f
}

/// Runs the case: the job with a 3 s `ttl` until its sources end, then restored from its
/// newest checkpoint with a 1 h `ttl` and the early events read again (a count: by the same
/// source; a join: on the right side), and checks the second run's output.
fn run_case(step: Step, backend: &str, native: bool) {
    let what = format!("{step:?} on {backend}, native checkpoints {native}");
    let dir = tempfile::tempdir().unwrap();
    let (early, later, repos) = events();
    for (sub, lines) in [("early", &early), ("later", &later)] {
        std::fs::create_dir_all(dir.path().join(sub)).unwrap();
        std::fs::write(dir.path().join(sub).join("a.jsonl"), lines.join("\n") + "\n").unwrap();
    }
    let mut env = state_dir_env(&dir.path().join("state"));
    env.push((
        "WEIR_NATIVE_CHECKPOINTS".into(),
        if native { "on" } else { "off" }.into(),
    ));
    Weir::run(&manifest(dir.path(), step, backend, "3s", true), &[], &env).wait_ok();
    let output = dir.path().join("output");
    let first_run = local_output(&output);

    // The restore point is the kind this case is about.
    let (id, metadata) = newest_checkpoint_in(&dir.path().join("checkpoints").join(JOB)).expect("a checkpoint");
    let uid = if step == Step::Count { "counts" } else { "pairs" };
    let handle = metadata["operators"]
        .as_array()
        .unwrap()
        .iter()
        .find(|o| o["uid"] == uid)
        .map(|o| o["handles"][0].clone())
        .unwrap_or_else(|| panic!("{what}: chk-{id} has no state for {uid}: {metadata}"));
    if native {
        assert!(handle["native"].is_object(), "{what}: chk-{id} is not native: {handle}");
    } else {
        let chain = handle["chain"].as_array().cloned().unwrap_or_default();
        let base_entries = chain.first().and_then(|l| l["entries"].as_u64()).unwrap_or(0);
        assert!(
            chain.len() >= 2 && base_entries >= repos.len() as u64,
            "{what}: chk-{id} is not a chain of deltas over a base holding the {} early keys: {handle}",
            repos.len()
        );
    }
    assert!(
        handle["expiredThroughMs"].is_u64(),
        "{what}: chk-{id} records no bound: {handle}"
    );

    // A count reads the early events again; a join reads them on the right side, where they
    // pair only with left rows that came back.
    let again = if step == Step::Count { "early" } else { "later" };
    std::fs::write(dir.path().join(again).join("b.jsonl"), early.join("\n") + "\n").unwrap();
    Weir::run(
        &manifest(dir.path(), step, backend, "1h", false),
        &["--restore", "latest"],
        &env,
    )
    .wait_ok();
    let second_run: Vec<String> = {
        let mut all = local_output(&output);
        for line in &first_run {
            let at = all
                .iter()
                .position(|l| l == line)
                .expect("the first run's output stays");
            all.remove(at);
        }
        all
    };
    match step {
        Step::Count => {
            // Every early repository counted from one again: its k-th event counts k.
            let mut seen: BTreeMap<String, u64> = BTreeMap::new();
            let mut want: Vec<String> = early
                .iter()
                .map(|l| {
                    let repo = serde_json::from_str::<Value>(l).unwrap()["repo"]
                        .as_str()
                        .unwrap()
                        .to_string();
                    let n = seen.entry(repo.clone()).or_default();
                    *n += 1;
                    format!("{repo} {n}")
                })
                .collect();
            let mut got: Vec<String> = second_run
                .iter()
                .map(|l| serde_json::from_str::<Value>(l).unwrap())
                .map(|v| format!("{} {}", v["repo"].as_str().unwrap(), v["count"]))
                .collect();
            want.sort();
            got.sort();
            let brought_back = got.iter().filter(|g| !want.contains(g)).count();
            assert_eq!(got, want, "{what}: {brought_back} counts went on from expired state");
        }
        Step::Join => {
            assert!(
                second_run.is_empty(),
                "{what}: {} pairs with expired rows, e.g. {:?}",
                second_run.len(),
                second_run.first()
            );
        }
    }
}

#[test]
fn a_longer_ttl_at_a_restore_leaves_out_expired_keys_of_a_heap_chain() {
    run_case(Step::Count, "heap", false);
}

#[test]
fn a_longer_ttl_at_a_restore_leaves_out_expired_keys_of_a_disk_chain() {
    run_case(Step::Count, "disk", false);
}

#[test]
fn a_longer_ttl_at_a_restore_leaves_out_expired_keys_of_a_native_store() {
    run_case(Step::Count, "disk", true);
}

#[test]
fn a_longer_ttl_at_a_restore_leaves_out_expired_rows_of_a_heap_join_chain() {
    run_case(Step::Join, "heap", false);
}

#[test]
fn a_longer_ttl_at_a_restore_leaves_out_expired_rows_of_a_disk_join_chain() {
    run_case(Step::Join, "disk", false);
}
