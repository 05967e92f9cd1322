//! A two-source dataflow end to end: two text files, each its own file source, merged by a
//! `union` into one word count. Checked against the independent word count of both files, and
//! under kill -9 + `--restore latest` against a failure-free run, record by record. The
//! distributed runtime runs it too (tests/join.rs).

mod common;
use common::*;
use std::path::{Path, PathBuf};

/// The union word-count manifest: `moby_dick.txt` and `tinyshakespeare.txt` as two sources
/// (both optionally rate-limited per subtask), each lower-cased on its own branch (one branch
/// wired by `inputs`, the other by order), merged by a union, then counted by word.
fn union_manifest(dir: &Path, paths: &Paths, parallelism: u32, interval: &str, rate: Option<u64>) -> PathBuf {
    let data = data_dir();
    let rate = rate.map(|r| format!(", maxRecordsPerSecond: {r}")).unwrap_or_default();
    let yaml = format!(
        r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: union-wordcount }}
spec:
  parallelism: {parallelism}
  checkpointing: {{ interval: {interval}, storage: "{ckpt}", retained: 2 }}
  savepoints: {{ directory: "{svp}" }}
  job:
    steps:
      - name: moby
        uid: moby-lines
        source: {{ file: {{ path: "{data}/text/moby_dick.txt"{rate} }} }}
      - name: shakespeare-raw
        uid: shakespeare-lines
        source: {{ file: {{ path: "{data}/text/tinyshakespeare.txt"{rate} }} }}
      - name: shakespeare
        map: {{ expression: "{{'line': line.lower()}}" }}
      - name: moby-lower
        inputs: [moby]
        map: {{ expression: "{{'line': line.lower()}}" }}
      - name: lines
        uid: lines
        union: {{}}
        inputs: [moby-lower, shakespeare]
      - flatMap: {{ field: line, pattern: '\W+', as: word }}
      - keyBy: {{ expression: word, as: word }}
      - uid: counts
        count: {{}}
      - uid: output
        sink: {{ file: {{ path: "{out}" }} }}
"#,
        data = data.display(),
        ckpt = paths.checkpoints,
        svp = paths.savepoints,
        out = paths.output,
    );
    let f = dir.join("union.yaml");
    std::fs::write(&f, yaml).unwrap();
    f
}

#[test]
fn a_union_of_two_file_sources_counts_the_words_of_both() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::local(dir.path());
    let m = union_manifest(dir.path(), &paths, 2, "300ms", None);
    Weir::run(&m, &[], &[]).wait_ok();
    // The independent count reads every text/*.txt: exactly these two files.
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected_wordcount(),
        "union of two sources, failure-free",
    );
    // State compatibility is still checked per operator uid: the same job without the
    // shakespeare branch cannot restore the union's last checkpoint, whose
    // `shakespeare-lines` source offsets would be dropped silently.
    let one_source = std::fs::read_to_string(&m)
        .unwrap()
        .replace("inputs: [moby-lower, shakespeare]", "inputs: [moby-lower]")
        .replace("        union: {}\n", "        filter: { expression: 'true' }\n");
    let (kept, dropped) = one_source.split_once("      - name: shakespeare-raw").unwrap();
    let (_, rest) = dropped.split_once("      - name: moby-lower").unwrap();
    let one_source = format!("{kept}      - name: moby-lower{rest}");
    let m2 = dir.path().join("one-source.yaml");
    std::fs::write(&m2, &one_source).unwrap();
    let (ok, stderr) = Weir::run(&m2, &["--restore", "latest"], &[]).wait();
    assert!(!ok, "restored without the shakespeare source: {one_source}\n{stderr}");
    assert!(
        stderr.contains("shakespeare-lines") && stderr.contains("allowNonRestoredState"),
        "{stderr}"
    );
}

#[test]
fn kill_9_during_a_union_job_then_restore_latest_is_exactly_once() {
    let mut rng = Rng(seed());
    let reference_dir = tempfile::tempdir().unwrap();
    let reference_paths = Paths::local(reference_dir.path());
    let reference = union_manifest(reference_dir.path(), &reference_paths, 2, "200ms", None);
    Weir::run(&reference, &[], &[]).wait_ok();
    let failure_free = local_output(&reference_dir.path().join("output"));

    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::local(dir.path());
    // Both sources at 6000 records/s per subtask: moby (21 692 lines) ends about 3 s before
    // shakespeare (40 000), so checkpoints are taken with one union input idle at its end.
    let m = union_manifest(dir.path(), &paths, 2, "200ms", Some(6000));
    run_with_kills(&m, 3, &[], &mut rng);
    let recovered = local_output(&dir.path().join("output"));
    assert_same_multiset(
        &recovered,
        &failure_free,
        "union job with 3 kill -9, against the failure-free run",
    );
    assert_same_multiset(
        &recovered,
        &expected_wordcount(),
        "union job with 3 kill -9, against the independent count",
    );
    // Every retained checkpoint holds each source's offsets under its own uid.
    let job_dir = dir.path().join("checkpoints/union-wordcount");
    let checkpoints: Vec<PathBuf> = std::fs::read_dir(&job_dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("chk-") && p.join("_metadata").is_file())
        .collect();
    assert!(
        !checkpoints.is_empty(),
        "no completed checkpoint in {}",
        job_dir.display()
    );
    for chk in checkpoints {
        for file in [
            "moby-lines-0.state",
            "shakespeare-lines-0.state",
            "counts-0.state",
            "counts-1.state",
        ] {
            assert!(chk.join(file).is_file(), "{} lacks {file}", chk.display());
        }
    }
}

#[test]
fn a_union_job_rescales_2_to_3_to_1_through_savepoints_exactly_once() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::local(dir.path());
    // 5000 records/s per subtask: both sources are mid-file at each stop.
    let m = union_manifest(dir.path(), &paths, 2, "300ms", Some(5000));
    let mut restore: Option<String> = None;
    for parallelism in ["2", "3"] {
        let mut args = vec!["--parallelism", parallelism];
        if let Some(sp) = &restore {
            args.extend(["--restore", sp.as_str()]);
        }
        let w = Weir::run(&m, &args, &[]);
        let api = w.api();
        std::thread::sleep(std::time::Duration::from_millis(1200));
        let savepoint = stop_with_savepoint(&api, &[]);
        let log = w.wait_ok();
        assert!(log.contains("stopped with savepoint"), "p={parallelism}: {log}");
        restore = Some(savepoint);
    }
    let sp = restore.unwrap();
    Weir::run(&m, &["--parallelism", "1", "--restore", &sp], &[]).wait_ok();
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected_wordcount(),
        "union job rescaled 2 → 3 → 1",
    );
}
