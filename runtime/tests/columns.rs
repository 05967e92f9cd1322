//! The columnar batch path (generator → `keyBy` → `count`/`sum` → sink on typed column
//! vectors, docs/architecture.md "Records") against the row path (`WEIR_RECORDS=rows`): the
//! same job writes the same bytes either way, and it is exactly-once under `kill -9`.

mod common;
use common::*;
use std::collections::BTreeMap;
use std::path::Path;
use std::time::Duration;

/// Writes a manifest of `steps` (generator first, file sink into `dir/output` last) at
/// `parallelism`, exactly-once checkpoints every `interval` into `dir/checkpoints`.
fn manifest(dir: &Path, parallelism: u32, interval: &str, steps: &str) -> std::path::PathBuf {
    let yaml = format!(
        r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: columns }}
spec:
  parallelism: {parallelism}
  checkpointing: {{ interval: {interval}, mode: exactly-once, storage: "{d}/checkpoints", retained: 2 }}
  savepoints: {{ directory: "{d}/savepoints" }}
  job:
    steps:
{steps}      - uid: output
        sink: {{ file: {{ path: "{d}/output" }} }}
"#,
        d = dir.display()
    );
    let f = dir.join("job.yaml");
    std::fs::write(&f, yaml).unwrap();
    f
}

/// The committed part files of `dir/output`, by name (run id, subtask, sequence), their bytes
/// concatenated: one run's output in the order each subtask wrote it.
fn output_bytes(dir: &Path) -> Vec<u8> {
    let mut parts: Vec<_> = std::fs::read_dir(dir.join("output"))
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| !p.file_name().unwrap().to_string_lossy().starts_with('.'))
        .collect();
    parts.sort();
    parts.iter().flat_map(|p| std::fs::read(p).unwrap()).collect()
}

fn rows_env() -> Vec<(String, String)> {
    vec![("WEIR_RECORDS".into(), "rows".into())]
}

/// Runs `steps` to the end once on rows and once on columns; returns both outputs.
fn both_paths(parallelism: u32, steps: &str) -> (Vec<u8>, Vec<u8>) {
    let (rows, columns) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let m = manifest(rows.path(), parallelism, "0s", steps);
    Weir::run(&m, &[], &rows_env()).wait_ok();
    let m = manifest(columns.path(), parallelism, "0s", steps);
    Weir::run(&m, &[], &[]).wait_ok();
    (output_bytes(rows.path()), output_bytes(columns.path()))
}

const GENERATOR: &str = "      - source: { generator: { seed: 11, count: 30000, keys: 700 } }\n";

/// At parallelism 1 the order of records is fixed, so the output is compared byte for byte:
/// integer keys by a column kernel (`id % 250`, `value`), string keys (`key`), `sum` over an
/// integer column, a key field and value field of the same name, and a key expression the
/// kernel does not take (`id % 7 == 0`, a boolean: the row path decides).
#[test]
fn columns_and_rows_write_the_same_bytes() {
    for (what, steps) in [
        (
            "count by id % 250",
            "      - keyBy: { expression: \"id % 250\", as: k }\n      - count: {}\n",
        ),
        (
            "count by key",
            "      - keyBy: { expression: key, as: key }\n      - count: { as: n }\n",
        ),
        (
            "sum of value by id % 97",
            "      - keyBy: { expression: \"id % 97\", as: bucket }\n      - sum: { expression: value, as: total }\n",
        ),
        (
            "key field = value field",
            "      - keyBy: { expression: \"id % 5\", as: c }\n      - count: { as: c }\n",
        ),
        (
            "boolean key",
            "      - keyBy: { expression: \"id % 7 == 0\", as: seventh }\n      - count: {}\n",
        ),
        (
            "map after the generator",
            "      - map: { expression: \"{'id': id, 'k': key}\" }\n      - keyBy: { expression: k, as: k }\n      - count: {}\n",
        ),
        // The generator's records written whole: every field computed.
        ("records written whole", ""),
        // A row step reading `value`, which the generator computes, then `key`, which it
        // derives from `id` when the row is built.
        (
            "filter on value, keyBy key",
            "      - filter: { expression: \"value < 500\" }\n      - keyBy: { expression: key, as: key }\n      - count: {}\n",
        ),
    ] {
        let (rows, columns) = both_paths(1, &format!("{GENERATOR}{steps}"));
        assert!(rows.len() > 30_000 * 8, "{what}: the row run wrote its records");
        assert!(rows == columns, "{what}: columns wrote other bytes than rows");
    }
}

/// Projection pushdown (docs/architecture.md, "Records"): a job whose steps read only `id`
/// has the generator compute only `id`; the same job with a branch that writes the generated
/// records whole (so every field is computed) commits the same counts, byte for byte, at
/// parallelism 1 and, through the keyed exchange, at parallelism 2 (as multisets).
#[test]
fn a_job_reading_one_field_counts_as_one_reading_every_field() {
    let counts = "      - keyBy: { expression: \"id % 250\", as: k }\n      - count: {}\n";
    let source = "      - name: generated\n        source: { generator: { seed: 11, count: 30000, keys: 700 } }\n";
    for parallelism in [1, 2] {
        let (one_field, every_field) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let m = manifest(one_field.path(), parallelism, "0s", &format!("{source}{counts}"));
        Weir::run(&m, &[], &[]).wait_ok();
        // The branch writes the generated records whole into `all`; the counts go last, into
        // `output` as in the other job.
        let whole = format!(
            "{source}      - sink: {{ file: {{ path: \"{}/all\" }} }}\n      - inputs: [generated]\n        keyBy: {{ expression: \"id % 250\", as: k }}\n      - count: {{}}\n",
            every_field.path().display()
        );
        let m = manifest(every_field.path(), parallelism, "0s", &whole);
        Weir::run(&m, &[], &[]).wait_ok();
        let all = local_output(&every_field.path().join("all"));
        assert_eq!(all.len(), 30_000, "the branch wrote every generated record");
        let (a, b) = (output_bytes(one_field.path()), output_bytes(every_field.path()));
        assert!(a.len() > 30_000 * 8, "p={parallelism}: the counts were written");
        if parallelism == 1 {
            assert!(a == b, "p=1: the job reading one field wrote other counts");
        } else {
            let lines = |b: &[u8]| {
                let mut l: Vec<String> = String::from_utf8(b.to_vec())
                    .unwrap()
                    .lines()
                    .map(String::from)
                    .collect();
                l.sort();
                l
            };
            assert_same_multiset(&lines(&a), &lines(&b), "p=2, one field read vs every field");
        }
    }
}

/// At parallelism 2 the keyed exchange splits each columnar batch by key group; two inputs
/// interleave at random, so the running counts are compared as multisets.
#[test]
fn columns_through_a_keyed_exchange_at_parallelism_2_give_the_rows_records() {
    let steps = format!("{GENERATOR}      - keyBy: {{ expression: \"id % 1000\", as: k }}\n      - count: {{}}\n");
    let (rows, columns) = both_paths(2, &steps);
    let lines = |b: &[u8]| {
        let mut l: Vec<String> = String::from_utf8(b.to_vec())
            .unwrap()
            .lines()
            .map(String::from)
            .collect();
        l.sort();
        l
    };
    assert_same_multiset(&lines(&columns), &lines(&rows), "parallelism 2");
    assert_eq!(lines(&rows).len(), 30_000);
}

/// 60,000 generated records (4,000 per second per subtask) counted by `id % 1000`.
const STEPS_60K: &str = "      - source: { generator: { seed: 3, count: 60000, keys: 10, maxRecordsPerSecond: 4000 } }\n      - keyBy: { expression: \"id % 1000\", as: k }\n      - uid: counts\n        count: {}\n";

/// Exactly-once on the columnar path: crashes in both windows of two-phase commit and three
/// `kill -9` at random points, each run restored from the latest checkpoint, commit every
/// running count exactly once: `{"k":k,"count":c}` for c = 1..(records with id % 1000 == k).
#[test]
fn kill_9_three_times_on_the_columnar_path_is_exactly_once() {
    let mut rng = Rng(seed());
    let dir = tempfile::tempdir().unwrap();
    let m = manifest(dir.path(), 2, "200ms", STEPS_60K);
    crash_in_both_commit_windows(&m, &[]);
    run_with_kills(&m, 3, &[], &mut rng);
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected_counts(),
        "run with 5 crashes",
    );
}

/// Every running count of [`STEPS_60K`]: `{"k":k,"count":c}` for c = 1..(ids with
/// id % 1000 == k), sorted.
fn expected_counts() -> Vec<String> {
    let mut per_key: BTreeMap<u64, u64> = BTreeMap::new();
    for id in 0..60_000u64 {
        *per_key.entry(id % 1000).or_default() += 1;
    }
    let mut expected: Vec<String> = per_key
        .iter()
        .flat_map(|(k, n)| (1..=*n).map(move |c| format!(r#"{{"k":{k},"count":{c}}}"#)))
        .collect();
    expected.sort();
    expected
}

/// A savepoint of the columnar path at parallelism 2 restores at 3 on the row path, whose
/// savepoint restores at 1 on columns again: the keyed state is the same either way, split
/// by key group, and the output is every running count once.
#[test]
fn rescale_2_to_3_to_1_across_the_columnar_and_row_paths() {
    let dir = tempfile::tempdir().unwrap();
    let m = manifest(dir.path(), 2, "300ms", STEPS_60K);
    let mut restore_from: Option<String> = None;
    for (parallelism, env) in [("2", vec![]), ("3", rows_env())] {
        let mut args = vec!["--parallelism", parallelism];
        if let Some(sp) = &restore_from {
            args.extend(["--restore", sp.as_str()]);
        }
        let w = Weir::run(&m, &args, &env);
        let api = w.api();
        std::thread::sleep(Duration::from_millis(1200));
        restore_from = Some(stop_with_savepoint(&api, &env));
        let log = w.wait_ok();
        assert!(log.contains("stopped with savepoint"), "{log}");
    }
    let sp = restore_from.unwrap();
    Weir::run(&m, &["--parallelism", "1", "--restore", &sp], &[]).wait_ok();
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected_counts(),
        "2 → 3 → 1 rescale",
    );
}
