//! Unaligned checkpoints and the alignment timeout end to end, over two real text files merged
//! by a union (moby_dick.txt and tinyshakespeare.txt) with a throttled sink:
//! - under backpressure, unaligned checkpoints keep completing while aligned ones stall
//!   (compared in the same test, counts with wide margins, no timing assertion);
//! - kill -9 at random moments with unaligned checkpoints: the output equals the failure-free
//!   output record by record;
//! - rescale through unaligned checkpoints holding channel state, p 2 → 3 → 1: the in-flight
//!   records are replayed by key group by the subtasks that now own them, and the output is
//!   exactly the independent word count.
//!
//! The same on the cluster, where barriers overtake records across the network exchange:
//! `tests/cluster_unaligned.rs`.

mod common;
use common::union_wordcount::*;
use common::*;
use serde_json::Value;
use std::path::Path;
use std::time::Duration;

/// Runs `m`; once it has been RUNNING for `warmup` (the channels have filled up), counts the
/// checkpoints completed during `window`, then kill -9. Returns (that count, the last completed
/// checkpoint's statistics).
fn checkpoints_within(m: &Path, warmup: Duration, window: Duration) -> (u64, Value) {
    let completed = |job: &Value| job["summary"]["checkpointsCompleted"].as_u64().unwrap_or(0);
    let w = Weir::run(m, &[], &[]);
    let api = w.api();
    wait_running(&api);
    std::thread::sleep(warmup);
    let before = completed(&job_status(&api));
    std::thread::sleep(window);
    let job = job_status(&api);
    w.kill9();
    (completed(&job) - before, job["lastCompletedCheckpoint"].clone())
}

/// The backpressure comparison counts checkpoints over wall time: it holds this lock so the
/// other tests of this file (kill -9 and rescale, each running jobs flat out) do not share the
/// machine's cores with it; they take it too, for as long as they run.
static MACHINE: std::sync::Mutex<()> = std::sync::Mutex::new(());

fn machine() -> std::sync::MutexGuard<'static, ()> {
    MACHINE.lock().unwrap_or_else(|poisoned| poisoned.into_inner())
}

#[test]
fn unaligned_checkpoints_complete_under_backpressure_while_aligned_ones_stall() {
    let _alone = machine();
    // One subtask per stage; the sink takes 10 000 words/s while the sources read as fast as
    // they can, so every channel stays full: an aligned barrier waits behind 8 queued batches
    // of 1024 lines (about 10 000 words each) in each channel, well over 10 s of sink time;
    // an unaligned one overtakes them and waits for the batch in progress (1 s) at most.
    let (warmup, window) = (Duration::from_secs(3), Duration::from_secs(15));
    // On this 2-core machine (1 s interval) unaligned runs gave 14 checkpoints in 15 s, with
    // the 1 s timeout 5, aligned ones 0 to 1 (before the credits were held until processing,
    // `exec/channel.rs`, unaligned ones gave 1 to 3).
    backpressure::unaligned_beats_aligned_under_backpressure("weir run", window, |dir, checkpointing| {
        let sink = "{ discard: { maxRecordsPerSecond: 10000 } }";
        checkpoints_within(&manifest(dir, 1, checkpointing, sink), warmup, window)
    });
}

#[test]
fn kill_9_with_unaligned_checkpoints_is_exactly_once() {
    let _alone = machine();
    let mut rng = Rng(seed());
    let failure_free = failure_free_output();

    let dir = tempfile::tempdir().unwrap();
    let m = manifest(
        dir.path(),
        2,
        ", interval: 200ms, unaligned: true",
        &file_sink(dir.path(), 60_000),
    );
    run_with_kills(&m, 3, &[], &mut rng);
    let recovered = local_output(&dir.path().join("output"));
    assert_same_multiset(&recovered, &failure_free, "unaligned checkpoints with 3 kill -9");
    assert_same_multiset(&recovered, &expected_wordcount(), "against the independent count");
    // The retained checkpoints: periodic ones went unaligned (a periodic one whose in-band
    // barriers all arrived before its priority barrier was taken, as near the end of the input, is
    // reported aligned, as a subtask in Flink that needed no overtaking), the final one of the
    // bounded job is always aligned.
    let kinds: Vec<bool> = checkpoints(dir.path())
        .iter()
        .map(|m| m["alignment"]["unaligned"].as_bool().unwrap())
        .collect();
    assert!(
        kinds.len() >= 2 && kinds[..kinds.len() - 1].iter().any(|u| *u),
        "a retained periodic checkpoint went unaligned: {kinds:?}"
    );
    assert_eq!(kinds.last(), Some(&false), "the final checkpoint is aligned: {kinds:?}");
}

/// Every `stderr-*.log` of the runs in `dir`, concatenated.
fn all_logs(dir: &Path) -> String {
    let mut out = String::new();
    for e in std::fs::read_dir(dir).unwrap() {
        let p = e.unwrap().path();
        if p.file_name().unwrap().to_string_lossy().starts_with("stderr-") {
            out.push_str(&std::fs::read_to_string(&p).unwrap_or_default());
        }
    }
    out
}

#[test]
fn rescale_2_to_3_to_1_through_unaligned_checkpoints_is_exactly_once() {
    let _alone = machine();
    let dir = tempfile::tempdir().unwrap();
    // Sources read at full speed, the sink takes 40k words/s per subtask: channels stay full,
    // so every unaligned checkpoint holds in-flight records, keyed ones by key group.
    let m = manifest(
        dir.path(),
        2,
        ", interval: 300ms, unaligned: true",
        &file_sink(dir.path(), 40_000),
    );
    let first = run_until_channel_state(
        &m,
        "2",
        0,
        &dir.path().join("checkpoints/unaligned-wordcount"),
        Some("counts"),
    );
    let restored = newest_checkpoint(dir.path());
    assert_eq!(restored["parallelism"], 2);
    assert!(
        channel_state_records(&restored, Some("counts")) > 0,
        "keyed channel state of the count stage: {restored}"
    );
    let second = run_until_channel_state(
        &m,
        "3",
        first.max(restored["checkpointId"].as_u64().unwrap()),
        &dir.path().join("checkpoints/unaligned-wordcount"),
        Some("counts"),
    );
    let restored = newest_checkpoint(dir.path());
    assert_eq!(restored["parallelism"], 3);
    assert!(restored["checkpointId"].as_u64().unwrap() >= second);
    // Finish at parallelism 1 without a throttle bottleneck on the last run's tail.
    Weir::run(&m, &["--parallelism", "1", "--restore", "latest"], &[]).wait_ok();
    let logs = all_logs(dir.path());
    assert!(logs.contains("replaying channel state"), "{logs}");
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected_wordcount(),
        "2 → 3 → 1 through unaligned checkpoints",
    );
}
