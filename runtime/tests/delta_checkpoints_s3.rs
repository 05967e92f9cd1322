//! Delta checkpoints of the disk backend with S3 checkpoint storage (moto's S3 server on
//! loopback): delta files are uploaded once and referenced after, a restore streams them
//! (no hard links on S3), applies them to the base's store and removes them; kill -9 when the
//! newest checkpoint lists delta files, twice, then the committed output equals the
//! failure-free word count record by record.

mod common;
mod support;

use common::incremental::{backend_env, delta_files, restore_both_stores_and_finish_exactly_once, set_incremental};
use common::*;
use std::time::{Duration, Instant};
use support::moto::{MotoServer, s3_store};
use weir_runtime::state::snapshot::{CheckpointMetadata, decode_metadata};
use weir_runtime::storage;

/// The newest completed checkpoint of the word count in the bucket, if any.
fn newest_completed(rt: &tokio::runtime::Runtime, store: &storage::Store) -> Option<CheckpointMetadata> {
    let objects = rt.block_on(store.list("checkpoints/wordcount/")).ok()?;
    let newest = objects
        .iter()
        .filter(|o| o.path.ends_with("/_metadata"))
        .filter_map(|o| {
            let id = o.path.rsplit('/').nth(1)?.strip_prefix("chk-")?.parse::<u64>().ok()?;
            Some((id, o.path.clone()))
        })
        .max()?;
    let bytes = rt.block_on(store.get(&newest.1)).ok()?;
    decode_metadata(&newest.1, &bytes).ok()
}

#[test]
fn kill_9_after_delta_checkpoints_on_s3_storage_is_exactly_once() {
    let moto = MotoServer::start_with_bucket("weir-test");
    let (rt, store) = s3_store(&moto);
    let dir = tempfile::tempdir().unwrap();
    // Checkpoints on S3, the input and the output local.
    let paths = Paths {
        checkpoints: format!("s3://{}/checkpoints", moto.bucket()),
        ..Paths::local(dir.path())
    };
    let m = wordcount_manifest(dir.path(), &paths, 2, "exactly-once", "200ms", Some(5000), None);
    set_incremental(&m);
    set_state_backend(&m, "disk");
    let mut env: Vec<(String, String)> = moto.env().into_iter().map(|(k, v)| (k.to_string(), v)).collect();
    env.extend(backend_env(&dir.path().join("state"), "disk-native"));
    let mut restored_from_deltas = 0;
    for kill in 0..2 {
        let before = newest_completed(&rt, &store).map_or(0, |c| c.checkpoint_id);
        let w = Weir::run(&m, &["--restore", "latest"], &env);
        let _ = w.api();
        let deadline = Instant::now() + Duration::from_secs(60);
        while Instant::now() < deadline
            && !newest_completed(&rt, &store).is_some_and(|c| c.checkpoint_id > before && delta_files(&c) > 0)
        {
            std::thread::sleep(Duration::from_millis(20));
        }
        w.kill9();
        let newest = newest_completed(&rt, &store).unwrap();
        eprintln!(
            "kill -9 #{}: newest checkpoint {} lists {} delta files",
            kill + 1,
            newest.checkpoint_id,
            delta_files(&newest)
        );
        restored_from_deltas += usize::from(delta_files(&newest) > 0);
    }
    assert!(
        restored_from_deltas > 0,
        "a kill came after a checkpoint with delta files"
    );
    restore_both_stores_and_finish_exactly_once(dir.path(), &m, &env, "delta checkpoints on S3, two kills");
}
