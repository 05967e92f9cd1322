//! The final checkpoint of a run against its store, in the child after the job ended (nothing
//! else runs then):
//!
//! - checkpoint throughput: the checkpoint's bytes over its duration (trigger to `_metadata`:
//!   synchronous part, encoding, upload), vs a raw upload of the same state files' bytes to
//!   the same store with the same call (`ObjectStore::put`, files in parallel as subtasks do;
//!   local: temp file, fsync, rename; S3: multipart above 16 MiB), the median of
//!   [`RAW_UPLOADS`].
//! - restore time, from the restore's start (`restore::load`: download, size and CRC check,
//!   decode of the state files; then the aggregation opened on the backend, its key groups
//!   pending: a lazy restore, `state/pending.rs`; a disk store is created while the files
//!   download, as a run creates it, `state/disk_store.rs`) to (a) the first record processed (one
//!   record, which builds its one key group), (b) a first batch of 1,024 records of other keys
//!   processed (its key groups built on first access), and (c) the keyed state fully built
//!   (the rest of the pending groups), each vs a raw download of the same files
//!   (`ObjectStore::get`, as many at a time as a restore reads, [`PARALLEL_READS`]). One raw
//!   download before the restore reads the files cold (printed in the restore breakdown), a
//!   second, measured, reads them warm as the restore then does; it is taken before the
//!   restore because a disk store may still compact after it (one after is printed too).
//!
//! Full (self-contained) checkpoints and, with `--store-incremental`, the first checkpoint of
//! an incremental job (on the disk backend a native checkpoint, the default: the store's table
//! files, `checkpoint/native_upload.rs`; a chain's base on heap or with
//! `WEIR_NATIVE_CHECKPOINTS=off`), whose files
//! are in the job's `shared/` directory, are measured this way.

use crate::usage::Probe;
use futures::StreamExt;
use serde::{Deserialize, Serialize};
use std::time::Instant;
use weir_runtime::checkpoint::native_restore::LocalKeyedStores;
use weir_runtime::checkpoint::restore::{
    LoadedSnapshot, PARALLEL_READS, load_for, load_metadata, operator_restore, restored_store,
};
use weir_runtime::job::validate::AggregateFn;
use weir_runtime::operators::StreamOperator;
use weir_runtime::operators::aggregate::{Aggregate, KeyedStateInit};
use weir_runtime::record::{Key, KeyedBy, Record, Row};
use weir_runtime::state::backend::BackendChoice;
use weir_runtime::state::disk::DiskStateOptions;
use weir_runtime::state::disk_store;
use weir_runtime::state::incremental::{references_outside, resolve_relative};
use weir_runtime::state::key_group::key_group_range;
use weir_runtime::state::snapshot::CheckpointMetadata;
use weir_runtime::storage::{self, S3Options};

/// Raw uploads of the checkpoint's bytes per run; their median is the baseline.
const RAW_UPLOADS: usize = 3;

/// The store measurements of one checkpoint; seconds and bytes.
#[derive(Clone, Debug, Serialize, Deserialize)]
pub struct StoreRun {
    /// State file bytes (without `_metadata`).
    pub state_bytes: u64,
    /// Keys in the checkpoint.
    pub entries: u64,
    /// The checkpoint's bytes (with `_metadata`) over its duration, bytes/s.
    pub checkpoint_bytes_per_s: f64,
    /// The same state bytes put to the same store, bytes/s.
    pub raw_upload_bytes_per_s: f64,
    /// Restore start to the first record processed, s.
    pub restore_first_record_s: f64,
    /// Restore start to a first batch of 1,024 records (of other keys) processed, s.
    pub restore_first_batch_s: f64,
    /// Restore start to the keyed state fully built, s.
    pub restore_s: f64,
    /// Raw download of the same files, s.
    pub raw_download_s: f64,
}

/// Measures the checkpoint at `url` (its directory) whose stats said `size_bytes` written in
/// `duration_ms`. Panics on a storage error (a bench).
pub async fn measure_store(url: &str, backend: &str, state_dir: &str, size_bytes: u64, duration_ms: u64) -> StoreRun {
    let own = storage::open(url, &S3Options::default())
        .await
        .expect("open the checkpoint's store");
    let metadata = load_metadata(&own, "").await.expect("the checkpoint's _metadata");
    // An incremental checkpoint (a chain's base, or a native checkpoint's table files)
    // references `../shared/`: everything is then read from the job's directory, the
    // checkpoint being its directory `dir` there.
    let (store, dir) = if references_outside(&metadata) {
        let (parent, name) = url
            .trim_end_matches('/')
            .rsplit_once('/')
            .expect("a checkpoint directory URL");
        let parent = storage::open(parent, &S3Options::default())
            .await
            .expect("open the job's store");
        (parent, name.to_string())
    } else {
        (own, String::new())
    };
    let files: Vec<(String, u64)> = metadata
        .operators
        .iter()
        .flat_map(|o| &o.handles)
        .flat_map(|h| h.files().into_iter().map(|(f, size, _)| (f.to_string(), size)))
        .map(|(f, size)| (resolve_relative(&dir, &f).expect("a file inside the store"), size))
        .collect();
    assert!(
        files.iter().all(|(f, _)| !f.starts_with("..")),
        "the files are in the job's store"
    );
    let state_bytes: u64 = files.iter().map(|f| f.1).sum();

    // `WEIR_BENCH_RESTORE_DETAIL=1`: after the measurements, the restore's steps one by one
    // and the same restore again (warm), to tell first-touch costs from the work itself.
    let detail = std::env::var_os("WEIR_BENCH_RESTORE_DETAIL").is_some();

    // A first raw download reads the files cold (printed, not in the ratios), so the restore
    // and the raw download measured after it both read them warm: the ratio then compares
    // the restore's work with the store's, not a cold read (the page cache, moto's files)
    // with a warm one (before 2026-12-02 the restore read cold and the baseline warm).
    let t = Instant::now();
    drop(raw_download(&store, &files).await);
    let raw_download_cold_s = t.elapsed().as_secs_f64();
    // The warm raw download the ratios use, measured before the restore: after it, a disk
    // restore's store may still compact in the background on the same cores (a native
    // checkpoint restored as the subtask's store opens writable, and RocksDB compacts its
    // level-0 files right away), which slowed the raw download measured after it 1.5–2.5×
    // (branch fastrestore) and flattered the ratio.
    let t = Instant::now();
    drop(raw_download(&store, &files).await);
    let raw_download_s = t.elapsed().as_secs_f64();

    // Restore: load the snapshot, then build the aggregation's keyed state from it.
    let t = Instant::now();
    let (snapshot, mut restored, entries, phases) =
        restore(&store, &dir, &metadata, backend, state_dir, "restore").await;
    let load_s = phases.loaded;
    let opened_s = t.elapsed().as_secs_f64();
    // Pending groups count their blocks' entries: exact for a full checkpoint.
    assert_eq!(restored.iter().map(|a| a.len() as u64).sum::<u64>(), entries);
    let record = |n: u64| Record {
        row: Row::bare(weir_runtime::record::Datum::Int(1)),
        keyed: Some(KeyedBy::new(
            Key::Str(format!("key-{n}").into()),
            metadata.max_parallelism,
        )),
    };
    let mut out = Vec::new();
    for aggregate in &mut restored {
        aggregate
            .process(vec![record(0)], &mut out)
            .await
            .expect("first record");
    }
    let restore_first_record_s = t.elapsed().as_secs_f64();
    let stride = (entries / 1024).max(1);
    for aggregate in &mut restored {
        let batch = (1..=1024).map(|i| record(i * stride)).collect();
        aggregate.process(batch, &mut out).await.expect("first batch");
    }
    let restore_first_batch_s = t.elapsed().as_secs_f64();
    for aggregate in &mut restored {
        tokio::task::block_in_place(|| aggregate.build_pending()).expect("build the pending key groups");
        assert_eq!(aggregate.pending_key_groups(), 0);
    }
    let restore_s = t.elapsed().as_secs_f64();
    eprintln!(
        "restore breakdown ({backend}): load (download, verify, decode files) {load_s:.3} s, opened {:.3} s, \
         first record processed {restore_first_record_s:.3} s, first batch of 1,024 keys {restore_first_batch_s:.3} s, \
         keyed state fully built {restore_s:.3} s (from the restore's start); a cold raw download before it \
         {raw_download_cold_s:.3} s",
        opened_s - load_s
    );
    eprintln!("    restore breakdown, detail: {}", phases.detail);
    drop((restored, snapshot, out));

    // The same files again, for the raw upload's bytes (printed: the download after the restore).
    let t = Instant::now();
    let downloaded = raw_download(&store, &files).await;
    eprintln!(
        "    raw download before the restore {raw_download_s:.3} s (the ratios'), after it {:.3} s",
        t.elapsed().as_secs_f64()
    );

    // Raw upload of the same bytes, all files at once, three times: the median is the
    // baseline. One upload's time moved 4-5x between runs of one binary on this VM (64 MB to
    // the local directory at 250-380 or 1,200-1,570 MB/s, 2026-12-04), so one upload made
    // the ratio a coin toss.
    let mut raw_upload_times = Vec::new();
    for _ in 0..RAW_UPLOADS {
        let t = Instant::now();
        futures::future::join_all(downloaded.iter().map(|(f, data)| {
            let store = store.clone();
            async move {
                store
                    .put(&format!("raw-upload/{f}"), data.clone())
                    .await
                    .expect("raw upload")
            }
        }))
        .await;
        raw_upload_times.push(t.elapsed().as_secs_f64());
        store.delete_prefix("raw-upload/").await.expect("delete the raw upload");
    }
    eprintln!(
        "    raw upload breakdown: {} s (the median is the ratios')",
        raw_upload_times
            .iter()
            .map(|s| format!("{s:.3}"))
            .collect::<Vec<_>>()
            .join(", ")
    );
    raw_upload_times.sort_by(f64::total_cmp);
    let raw_upload_s = raw_upload_times[RAW_UPLOADS / 2];
    drop(downloaded);
    if detail {
        restore_detail(&store, &dir, &files, &metadata, backend, state_dir).await;
    }

    StoreRun {
        state_bytes,
        entries,
        checkpoint_bytes_per_s: size_bytes as f64 / (duration_ms.max(1) as f64 / 1000.0),
        raw_upload_bytes_per_s: state_bytes as f64 / raw_upload_s,
        restore_first_record_s,
        restore_first_batch_s,
        restore_s,
        raw_download_s,
    }
}

/// Prints (as `restore breakdown, detail` lines) the load's steps one by one, the same restore
/// again (warm: memory and files touched once already), what copying every restored block costs
/// (what each subtask's share cost before blocks were shared) and one `fsync` of a new 4 KiB
/// file next to the disk stores (the disk backend's store syncs its files on open and on each
/// ingestion).
async fn restore_detail(
    store: &storage::Store,
    dir: &str,
    files: &[(String, u64)],
    metadata: &CheckpointMetadata,
    backend: &str,
    state_dir: &str,
) {
    let steps = load_steps(store, files).await;
    eprintln!("    restore breakdown, detail, the load's steps one by one: {steps}");
    let (snapshot, restored, _, phases) = restore(store, dir, metadata, backend, state_dir, "again").await;
    eprintln!(
        "    restore breakdown, detail, the same restore again: {}",
        phases.detail
    );
    drop(restored);
    let p = Probe::now();
    let copies: Vec<Vec<u8>> = snapshot
        .files
        .values()
        .flat_map(|f| &f.key_groups)
        .map(|b| b.data.to_vec())
        .collect();
    eprintln!(
        "    restore breakdown, detail: a copy of every restored block {}",
        p.until(&Probe::now())
    );
    drop((copies, snapshot));
    let path = std::path::Path::new(state_dir).join("fsync-probe");
    std::fs::create_dir_all(state_dir).expect("the state directory");
    let p = Probe::now();
    let file = std::fs::File::create(&path).expect("create the fsync probe");
    std::io::Write::write_all(&mut &file, &[7; 4096]).expect("write the fsync probe");
    file.sync_all().expect("fsync the probe");
    eprintln!(
        "    restore breakdown, detail: one fsync of a new 4 KiB file in the state directory {}",
        p.until(&Probe::now())
    );
    let _ = std::fs::remove_file(path);
}

/// The times of one restore's steps before the first record.
struct RestorePhases {
    /// Restore start to the snapshot loaded, s.
    loaded: f64,
    /// Each step's wall and CPU time, page faults and preemptions.
    detail: String,
}

/// Restores the aggregations of the snapshot in `store` (its `metadata`) on `backend` (a disk
/// store under the run directory `<state_dir>/<name>`, `<uid>-0`, as a run names it), every
/// key group pending: the snapshot, the aggregations, their entries and the steps' times. As
/// a run, a native checkpoint of subtask 0's key groups on disk becomes its store (the fast
/// path, `checkpoint/native_restore.rs`).
async fn restore(
    store: &storage::Store,
    dir: &str,
    metadata: &CheckpointMetadata,
    backend: &str,
    state_dir: &str,
    name: &str,
) -> (LoadedSnapshot, Vec<Aggregate>, u64, RestorePhases) {
    let start = Probe::now();
    let t = Instant::now();
    let keyed_ops = || {
        metadata
            .operators
            .iter()
            .filter(|o| o.handles.iter().any(|h| h.key_group_range.is_some()))
    };
    let run_dir = std::path::Path::new(state_dir).join(name);
    let store_dir = |uid: &str| weir_runtime::state::local_dir::store_dir(&run_dir, uid, 0);
    let stores = LocalKeyedStores {
        parallelism: 1,
        max_parallelism_set: None,
        stores: keyed_ops().map(|o| (o.uid.clone(), 0)).collect(),
        run_dir: run_dir.clone(),
        disk: (backend == "disk").then(DiskStateOptions::default),
        without_keyed_state: false,
        // The bench's job has no `ttl`.
        ttl_steps: vec![],
    };
    if backend == "disk" {
        // As a run does (`exec::prepare`): the stores are created while the files download.
        for op in keyed_ops() {
            disk_store::create_early(&store_dir(&op.uid), DiskStateOptions::default());
        }
    }
    let snapshot = load_for(store, dir, &stores).await.expect("load the checkpoint");
    let loaded = t.elapsed().as_secs_f64();
    let after_load = Probe::now();
    let range = key_group_range(0, 1, metadata.max_parallelism);
    let mut entries = 0;
    let mut restored = Vec::new();
    let (mut handed, mut opened) = (after_load, after_load);
    for op in keyed_ops() {
        // Keys only, not the aggregation's shape item beside them.
        entries += op.handles.iter().map(|h| h.listed_entries()).sum::<u64>();
        let mut init = KeyedStateInit::new(range, operator_restore(Some(&snapshot), &op.uid, Some(range)));
        init.restored_store = restored_store(Some(&snapshot), &op.uid, range);
        handed = Probe::now();
        if backend == "disk" {
            init.backend = BackendChoice::Disk {
                dir: store_dir(&op.uid),
                options: DiskStateOptions::default(),
            };
        }
        let aggregate = tokio::task::block_in_place(|| {
            Aggregate::with_state(&op.uid, AggregateFn::Count, None, "key", "count", init).expect("restore")
        });
        opened = Probe::now();
        restored.push(aggregate);
    }
    let detail = format!(
        "load {}; blocks handed to the subtask {}; state opened {}",
        start.until(&after_load),
        after_load.until(&handed),
        handed.until(&opened)
    );
    (snapshot, restored, entries, RestorePhases { loaded, detail })
}

/// What `restore::load` does to the state files, one step at a time over all of them: read
/// (one after the other), CRC-32, decode.
async fn load_steps(store: &storage::Store, files: &[(String, u64)]) -> String {
    let start = Probe::now();
    let mut got = Vec::new();
    for (f, _) in files {
        got.push((f.clone(), store.get(f).await.expect("read")));
    }
    let read = Probe::now();
    let crc: u32 = got.iter().map(|(_, b)| crc32fast::hash(b)).fold(0, |a, c| a ^ c);
    let checked = Probe::now();
    // A native checkpoint's store files are not state files (decoded by opening the store).
    for (f, b) in got.iter().filter(|(f, _)| f.ends_with(".state")) {
        std::hint::black_box(weir_runtime::state::snapshot::decode_state_file(f, b).expect("decode"));
    }
    let decoded = Probe::now();
    std::hint::black_box(crc);
    format!(
        "read {}; crc32 {}; decode {}",
        start.until(&read),
        read.until(&checked),
        checked.until(&decoded)
    )
}

/// The `files` of `store` downloaded, [`PARALLEL_READS`] at a time, as a restore reads them.
async fn raw_download(store: &storage::Store, files: &[(String, u64)]) -> Vec<(String, bytes::Bytes)> {
    futures::stream::iter(files.iter().cloned())
        .map(|(f, _)| {
            let store = store.clone();
            async move {
                let data = store.get(&f).await.expect("raw download");
                (f, data)
            }
        })
        .buffer_unordered(PARALLEL_READS)
        .collect()
        .await
}

/// Warms a store up before anything is measured on it: a small and a multipart put (above
/// [`storage::MULTIPART_THRESHOLD`]), a get of each, a delete. A fresh moto server answers the
/// first request of each kind seconds late (it loads its service model lazily), which an
/// unwarmed first run charged to the checkpoint and restore it measured, not to the raw
/// upload and download measured after them. Panics on a storage error (a bench).
pub async fn warm_up(url: &str) {
    let store = storage::open(url, &S3Options::default())
        .await
        .expect("open the store to warm up");
    let small = bytes::Bytes::from(vec![7u8; 1024]);
    let large = bytes::Bytes::from(vec![7u8; storage::MULTIPART_THRESHOLD + (1 << 20)]);
    for (path, data) in [("warm-up/small", small), ("warm-up/large", large)] {
        store.put(path, data.clone()).await.expect("warm-up put");
        assert_eq!(store.get(path).await.expect("warm-up get"), data);
    }
    store.delete_prefix("warm-up/").await.expect("warm-up delete");
}
