//! State TTL end to end: a word count whose `count` step has a `ttl` is exactly-once under
//! kill -9 (its checkpoints carry write times: keyed-state block version 2), and a too-short
//! or malformed `ttl` is refused with the field named.
//!
//! Expiry itself (keys count from zero again, state shrinks) is tested with an injected clock
//! in `state/heap_tests.rs` and `operators/aggregate.rs`: a real-time expiry in a process
//! depends on timing. Here the TTL (1h) outlives the run, so the output must equal the plain
//! word count computed independently.

mod common;
use common::*;
use weir_runtime::state::keyed_block::VERSIONED_PREFIX;
use weir_runtime::state::snapshot::decode_state_file;

/// The word-count manifest with `ttl` on its count step.
fn ttl_manifest(dir: &std::path::Path, paths: &Paths, ttl: &str) -> std::path::PathBuf {
    let m = wordcount_manifest(dir, paths, 2, "exactly-once", "200ms", Some(6000), None);
    let yaml = std::fs::read_to_string(&m).unwrap();
    let with_ttl = yaml.replace("count: {}", &format!("count: {{ ttl: \"{ttl}\" }}"));
    assert_ne!(yaml, with_ttl, "the manifest has a count step");
    std::fs::write(&m, with_ttl).unwrap();
    m
}

/// Every `counts-*.state` file under `dir` (recursively).
fn count_state_files(dir: &std::path::Path) -> Vec<std::path::PathBuf> {
    files_under(dir)
        .into_iter()
        .filter(|p| p.file_name().unwrap().to_string_lossy().starts_with("counts-"))
        .collect()
}

#[test]
fn kill_9_with_ttl_is_exactly_once_and_checkpoints_carry_write_times() {
    let mut rng = Rng(seed());
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::local(dir.path());
    let m = ttl_manifest(dir.path(), &paths, "1h");
    run_with_kills(&m, 3, &[], &mut rng);
    assert_same_multiset(
        &local_output(&dir.path().join("output")),
        &expected_wordcount(),
        "ttl: 1h, run with 3 kills",
    );
    let files = count_state_files(&dir.path().join("checkpoints"));
    assert!(!files.is_empty(), "a retained checkpoint holds the count's state");
    for f in files {
        let state = decode_state_file(&f.display().to_string(), &std::fs::read(&f).unwrap()).unwrap();
        assert!(!state.key_groups.is_empty(), "{}", f.display());
        for block in state.key_groups {
            let version = block.data.strip_prefix(&VERSIONED_PREFIX[..]).map(|rest| rest[0]);
            assert_eq!(version, Some(2), "{}: block version 2 (with write times)", f.display());
        }
    }
}

#[test]
fn a_bad_ttl_is_refused_naming_the_field() {
    let dir = tempfile::tempdir().unwrap();
    let paths = Paths::local(dir.path());
    for (ttl, want) in [
        ("a day", "spec.job.steps[4].count.ttl: `a day` is not a duration"),
        ("0s", "spec.job.steps[4].count.ttl: `0s` is shorter than 1ms"),
    ] {
        let m = ttl_manifest(dir.path(), &paths, ttl);
        let (ok, stderr) = Weir::run(&m, &[], &[]).wait();
        assert!(!ok && stderr.contains(want), "ttl {ttl}: {stderr}");
    }
}
