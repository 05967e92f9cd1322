//! Exactly-once with S3 checkpoint storage, S3 input and the S3 two-phase-commit sink,
//! against moto's S3 server on loopback: crashes in both commit windows plus random kill -9,
//! then the committed objects equal a failure-free run's records, as a multiset.

mod common;
mod support;

use common::*;
use support::moto::{MotoServer, s3_store};
use weir_runtime::storage;

fn upload_input(rt: &tokio::runtime::Runtime, store: &storage::Store) {
    for name in ["moby_dick.txt", "tinyshakespeare.txt"] {
        let bytes = std::fs::read(data_dir().join("text").join(name)).unwrap();
        rt.block_on(store.put(&format!("input/{name}"), bytes.into())).unwrap();
    }
}

#[test]
fn kill_9_with_s3_storage_and_sink_is_exactly_once() {
    let moto = MotoServer::start_with_bucket("weir-test");
    let (rt, store) = s3_store(&moto);
    upload_input(&rt, &store);
    let b = moto.bucket().to_string();
    let env: Vec<(String, String)> = moto.env().into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    let dir = tempfile::tempdir().unwrap();
    let paths = s3_paths(&b);
    let source = format!("s3://{b}/input/*.txt");
    let m = wordcount_manifest(
        dir.path(),
        &paths,
        2,
        "exactly-once",
        "300ms",
        Some(6000),
        Some(&source),
    );
    let mut rng = Rng(seed());
    crash_in_both_commit_windows(&m, &env);
    run_with_kills(&m, 2, &env, &mut rng);
    assert_same_multiset(&s3_output(&rt, &store), &expected_wordcount(), "S3 run with 4 crashes");
    // Checkpoints were written to S3 with `_metadata` as the commit point.
    let objects = rt.block_on(store.list("checkpoints/wordcount/")).unwrap();
    assert!(objects.iter().any(|o| o.path.ends_with("/_metadata")), "{objects:?}");
}
