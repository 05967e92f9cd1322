//! The discard sink (`sink: { discard: {} }`): a job ending in it runs to completion, the
//! subtasks holding it counted every record, checkpoints complete with nothing to commit, and
//! no output is written anywhere.

use std::sync::atomic::Ordering;
use weir_runtime::checkpoint::coordinator::Outcome;
use weir_runtime::checkpoint::restore::RestoreFrom;
use weir_runtime::exec::{RunOptions, prepare};
use weir_runtime::job::parse_manifest;

/// Runs `steps` at `parallelism` with checkpoints every 100 ms under `dir`; returns the
/// records counted by the tasks whose name starts with `task_prefix` and the number of
/// completed checkpoints.
async fn run(dir: &std::path::Path, parallelism: u32, steps: &str, task_prefix: &str) -> (u64, usize) {
    let manifest = format!(
        "apiVersion: weir.dev/v1alpha1\nkind: StreamJob\nmetadata: {{ name: discard }}\nspec:\n  parallelism: {parallelism}\n  checkpointing: {{ interval: 100ms, storage: \"{}/checkpoints\" }}\n  job:\n    steps:\n{steps}",
        dir.display()
    );
    let job = parse_manifest(&manifest, &[]).expect("test manifest is valid");
    let prepared = prepare(
        job,
        RunOptions {
            restore: RestoreFrom::None,
            checkpoint_storage: None,
            state_dir: None,
        },
    )
    .await
    .expect("job prepares");
    let handle = prepared.handle.clone();
    let outcome = prepared.run().await.expect("job runs");
    assert!(matches!(outcome, Outcome::Finished), "job finished");
    let counted = handle
        .tasks
        .iter()
        .filter(|t| t.0.starts_with(task_prefix))
        .map(|t| t.2.records_in.load(Ordering::Relaxed))
        .sum();
    let completed = handle.shared.lock().unwrap().history.completed.len();
    (counted, completed)
}

/// Files under `dir`, recursively, relative to it.
fn files(dir: &std::path::Path) -> Vec<String> {
    let mut out = Vec::new();
    let mut stack = vec![dir.to_path_buf()];
    while let Some(d) = stack.pop() {
        for e in std::fs::read_dir(&d).unwrap() {
            let p = e.unwrap().path();
            if p.is_dir() {
                stack.push(p);
            } else {
                out.push(p.strip_prefix(dir).unwrap().display().to_string());
            }
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_count_into_discard_counts_every_record_across_checkpoints() {
    let dir = tempfile::tempdir().unwrap();
    // 2 subtasks × 20,000 records/s each: 60,000 records take about 1.5 s, so several
    // checkpoints complete while records flow into the sink.
    let steps = "      - source: { generator: { seed: 7, count: 60000, keys: 500, maxRecordsPerSecond: 20000 } }\n      - keyBy: { expression: key, as: key }\n      - count: {}\n      - sink: { discard: {} }\n";
    let (counted, completed) = run(dir.path(), 2, steps, "count").await;
    assert_eq!(
        counted, 60_000,
        "every record reached the count → discard subtasks once"
    );
    assert!(
        completed >= 2,
        "checkpoints completed with a discard sink ({completed})"
    );
    let written: Vec<String> = files(dir.path())
        .into_iter()
        .filter(|f| !f.starts_with("checkpoints"))
        .collect();
    assert_eq!(written, Vec::<String>::new(), "the discard sink writes nothing");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn source_chained_to_discard_counts_every_record() {
    let dir = tempfile::tempdir().unwrap();
    let steps = "      - source: { generator: { seed: 1, count: 12345 } }\n      - filter: { expression: \"value >= 0\" }\n      - sink: { discard: {} }\n";
    let (counted, _) = run(dir.path(), 1, steps, "source").await;
    assert_eq!(counted, 12_345);
}

/// A source chained with every operator of its job (parallelism 1, no exchange) never waits on
/// a channel, so it must yield to the runtime between batches: otherwise the tasks it spawns
/// (the asynchronous part of each snapshot, which acknowledges the checkpoint) wait in its
/// worker thread's unstealable LIFO slot until the input is used up, and the first checkpoint
/// completed only when the job ended (seen on Nexmark q0: checkpoint 1 took the whole 14 s run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn checkpoints_complete_while_a_fully_chained_source_runs() {
    let dir = tempfile::tempdir().unwrap();
    // 3M records: the debug build ran 400,000 of them in 0.17 s once the `map` read its fields
    // by position (0.5 s before), too short for the check below.
    let steps = "      - source: { generator: { seed: 7, count: 3000000, keys: 1000 } }\n      - map: { expression: \"{'key': key, 'doubled': value * 2}\" }\n      - sink: { discard: {} }\n";
    let started = std::time::Instant::now();
    let (_, completed) = run(dir.path(), 1, steps, "").await;
    let elapsed = started.elapsed();
    // Checkpoints every 100 ms over a run of at least half a second: before the fix exactly two
    // completed (the first, at the end of the input, and the final one).
    assert!(
        elapsed.as_millis() >= 500,
        "the job must run long enough to checkpoint ({elapsed:?}); raise count"
    );
    assert!(
        completed >= 4,
        "{completed} checkpoints completed in {elapsed:?} with an interval of 100 ms"
    );
}
