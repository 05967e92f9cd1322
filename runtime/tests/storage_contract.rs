//! The `ObjectStore` contract, checked against every store: `LocalStore` on a temp dir and
//! `S3Store` on a moto server (moto must be installed: `pip install 'moto[server]'`).
//!
//! Each contract check is a plain async fn over a `Store`; `contract_tests!` instantiates it
//! once per store as `local_store::<check>` and `s3_store::<check>`.

mod support;

use bytes::Bytes;
use std::sync::Arc;
use support::moto::{self, MotoServer};
use weir_runtime::storage::{self, MIN_PART_SIZE, ObjectMeta, PutOutcome, S3Options, StorageError, Store};

/// A store plus whatever must live as long as it (temp dir, moto server).
struct Fixture {
    store: Store,
    /// Dropped after the store: removes the temp dir or stops moto.
    _guard: Box<dyn std::any::Any>,
}

async fn local_fixture() -> Fixture {
    let dir = tempfile::tempdir().expect("creating a temp dir");
    let store = storage::open(dir.path().to_str().expect("utf-8 temp dir"), &S3Options::default())
        .await
        .expect("opening the local store");
    Fixture {
        store,
        _guard: Box::new(dir),
    }
}

fn s3_options(moto: &MotoServer) -> S3Options {
    S3Options {
        endpoint: Some(moto.endpoint()),
        region: Some(moto::REGION.into()),
        path_style: true,
        credentials: None,
    }
}

/// An S3 store under a key prefix, so that every check also covers prefix handling.
async fn s3_fixture() -> Fixture {
    moto::init_test_credentials();
    let moto = MotoServer::start();
    let url = format!("s3://{}/jobs/contract", moto.bucket());
    let store = storage::open(&url, &s3_options(&moto))
        .await
        .expect("opening the S3 store");
    Fixture {
        store,
        _guard: Box::new(moto),
    }
}

macro_rules! contract_tests {
    ($($check:ident),* $(,)?) => {
        mod local_store {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $check() {
                    let f = super::local_fixture().await;
                    super::$check(&f.store).await;
                }
            )*
        }
        mod s3_store {
            $(
                #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
                async fn $check() {
                    let f = super::s3_fixture().await;
                    super::$check(&f.store).await;
                }
            )*
        }
    };
}

contract_tests!(
    get_stream_yields_the_whole_object_in_order,
    put_then_get_returns_the_same_bytes,
    put_replaces_an_existing_object,
    get_from_returns_the_suffix_and_empty_at_the_end,
    missing_object_is_not_found_and_delete_is_ok,
    put_if_absent_creates_once_and_keeps_the_first_bytes,
    concurrent_put_if_absent_has_exactly_one_winner,
    list_is_sorted_relative_and_filtered_by_prefix,
    list_directories_names_each_directory_under_the_prefix_once,
    delete_prefix_removes_only_objects_under_the_prefix,
    multipart_is_invisible_until_complete_then_has_exact_bytes,
    complete_multipart_twice_is_ok,
    multipart_part_uploaded_again_gives_the_same_object,
    complete_multipart_without_parts_creates_an_empty_object,
    abort_multipart_discards_the_upload_and_is_idempotent,
    large_put_round_trips,
    numbered_parts_uploaded_concurrently_complete_in_number_order,
    put_file_writes_the_files_bytes_and_names_a_missing_file,
);

/// A local file put as an object (one below a multipart upload's threshold, one above it)
/// reads back byte for byte and replaces an existing object; a missing local file is an error
/// naming it, and leaves the object as it was.
async fn put_file_writes_the_files_bytes_and_names_a_missing_file(store: &Store) {
    let dir = tempfile::tempdir().unwrap();
    let small = dir.path().join("000012.sst");
    let large = dir.path().join("000013.sst");
    std::fs::write(&small, data(3_000_000, 5)).unwrap();
    std::fs::write(&large, data(storage::MULTIPART_THRESHOLD + 1_000, 6)).unwrap();
    store
        .put("shared/t.sst", Bytes::from_static(b"an older object"))
        .await
        .unwrap();
    store.put_file("shared/t.sst", &small).await.unwrap();
    assert_eq!(store.get("shared/t.sst").await.unwrap(), data(3_000_000, 5));
    store.put_file("shared/large.sst", &large).await.unwrap();
    assert_eq!(
        store.get("shared/large.sst").await.unwrap(),
        data(storage::MULTIPART_THRESHOLD + 1_000, 6)
    );
    let missing = dir.path().join("000099.sst");
    let e = store.put_file("shared/t.sst", &missing).await.unwrap_err();
    assert!(e.to_string().contains("000099.sst"), "{e}");
    assert_eq!(store.get("shared/t.sst").await.unwrap(), data(3_000_000, 5));
}

/// Parts uploaded with `upload_part_at` all at once, the last one first, and recorded in
/// number order: the object is the parts in number order (their order of arrival does not
/// matter), invisible until completion.
async fn numbered_parts_uploaded_concurrently_complete_in_number_order(store: &Store) {
    let parts = [data(MIN_PART_SIZE, 1), data(MIN_PART_SIZE, 2), data(777, 3)];
    let mut upload = store.create_multipart("out/numbered").await.unwrap();
    let offsets = [0, MIN_PART_SIZE as u64, 2 * MIN_PART_SIZE as u64];
    let uploads = parts.iter().enumerate().rev().map(|(i, part)| {
        let (store, upload) = (store.clone(), upload.clone());
        let (part, offset) = (part.clone(), offsets[i]);
        tokio::spawn(async move { store.upload_part_at(&upload, i as i32 + 1, offset, part).await })
    });
    let mut tokens: Vec<String> = futures::future::join_all(uploads)
        .await
        .into_iter()
        .map(|r| r.unwrap().unwrap())
        .collect();
    tokens.reverse();
    upload.parts = tokens.into_iter().enumerate().map(|(i, t)| (i as i32 + 1, t)).collect();
    assert!(!store.exists("out/numbered").await.unwrap());
    store.complete_multipart(&upload).await.unwrap();
    let got = store.get("out/numbered").await.unwrap();
    assert!(got == parts.concat(), "the object is the parts in number order");
}

/// A put above the S3 multipart threshold (written as a multipart upload on S3).
async fn large_put_round_trips(store: &Store) {
    let body = data(weir_runtime::storage::MULTIPART_THRESHOLD + 3 * 1024 * 1024 + 7, 9);
    store.put("big/state.bin", body.clone()).await.unwrap();
    assert_eq!(store.get("big/state.bin").await.unwrap(), body);
    assert_eq!(store.list("big/").await.unwrap().len(), 1);
}

/// Deterministic, non-repeating-looking test data.
fn data(len: usize, seed: u8) -> Bytes {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).rotate_left(seed as u32 % 32) as u8 ^ seed)
        .collect()
}

fn assert_not_found<T: std::fmt::Debug>(res: storage::Result<T>, what: &str) {
    match res {
        Err(StorageError::NotFound(_)) => {}
        other => panic!("{what}: expected NotFound, got {other:?}"),
    }
}

fn paths(list: &[ObjectMeta]) -> Vec<&str> {
    list.iter().map(|o| o.path.as_str()).collect()
}

async fn put_then_get_returns_the_same_bytes(store: &Store) {
    let body = data(100_000, 1);
    store.put("a/b/c.bin", body.clone()).await.unwrap();
    assert_eq!(store.get("a/b/c.bin").await.unwrap(), body);
    assert!(store.exists("a/b/c.bin").await.unwrap());

    store.put("empty", Bytes::new()).await.unwrap();
    assert_eq!(store.get("empty").await.unwrap(), Bytes::new());
    assert!(store.exists("empty").await.unwrap());
}

async fn put_replaces_an_existing_object(store: &Store) {
    store.put("x", Bytes::from_static(b"first version")).await.unwrap();
    store.put("x", Bytes::from_static(b"second")).await.unwrap();
    assert_eq!(store.get("x").await.unwrap(), Bytes::from_static(b"second"));
}

async fn get_from_returns_the_suffix_and_empty_at_the_end(store: &Store) {
    let body = data(10_000, 2);
    store.put("log/segment", body.clone()).await.unwrap();
    for offset in [0, 1, 4_096, 9_999, 10_000] {
        let got = store.get_from("log/segment", offset as u64).await.unwrap();
        assert_eq!(got, body.slice(offset..), "get_from at offset {offset}");
    }
    store.put("log/empty", Bytes::new()).await.unwrap();
    assert_eq!(store.get_from("log/empty", 0).await.unwrap(), Bytes::new());
}

/// A streamed read (a native checkpoint's download) yields the object's bytes in order, in
/// chunks (the local store's are 1 MiB), an empty object as no bytes, a missing one as
/// `NotFound`.
async fn get_stream_yields_the_whole_object_in_order(store: &Store) {
    use futures::StreamExt;
    let collect = |path: &'static str| async move {
        let mut chunks = store.get_stream(path).await?;
        let (mut whole, mut count) = (Vec::new(), 0);
        while let Some(chunk) = chunks.next().await {
            whole.extend_from_slice(&chunk?);
            count += 1;
        }
        Ok::<_, StorageError>((whole, count))
    };
    let body = data(3 * storage::STREAM_CHUNK_BYTES + 17, 5);
    store.put("native/000009.sst", body.clone()).await.unwrap();
    let (whole, chunks) = collect("native/000009.sst").await.unwrap();
    assert_eq!(whole, body);
    assert!(chunks >= 1);
    store.put("native/empty", Bytes::new()).await.unwrap();
    assert!(collect("native/empty").await.unwrap().0.is_empty());
    assert_not_found(collect("native/missing").await, "get_stream");
}

async fn missing_object_is_not_found_and_delete_is_ok(store: &Store) {
    assert_not_found(store.get("nope/missing").await, "get");
    assert_not_found(store.get_from("nope/missing", 0).await, "get_from at 0");
    assert_not_found(store.get_from("nope/missing", 5).await, "get_from at 5");
    assert!(!store.exists("nope/missing").await.unwrap());
    store.delete("nope/missing").await.unwrap();
    assert!(store.list("nope/").await.unwrap().is_empty());
}

async fn put_if_absent_creates_once_and_keeps_the_first_bytes(store: &Store) {
    let first = Bytes::from_static(b"first");
    assert_eq!(
        store.put_if_absent("chk/_metadata", first.clone()).await.unwrap(),
        PutOutcome::Created
    );
    assert_eq!(
        store
            .put_if_absent("chk/_metadata", Bytes::from_static(b"second"))
            .await
            .unwrap(),
        PutOutcome::AlreadyExists
    );
    assert_eq!(store.get("chk/_metadata").await.unwrap(), first);

    // An object written by a plain put counts as existing too.
    store.put("chk/other", Bytes::from_static(b"plain")).await.unwrap();
    assert_eq!(
        store
            .put_if_absent("chk/other", Bytes::from_static(b"x"))
            .await
            .unwrap(),
        PutOutcome::AlreadyExists
    );
    assert_eq!(store.get("chk/other").await.unwrap(), Bytes::from_static(b"plain"));
}

async fn concurrent_put_if_absent_has_exactly_one_winner(store: &Store) {
    for round in 0..10 {
        let path = format!("race/{round}");
        let barrier = Arc::new(tokio::sync::Barrier::new(2));
        let racers: Vec<_> = (0..2u8)
            .map(|i| {
                let (store, path, barrier) = (store.clone(), path.clone(), barrier.clone());
                tokio::spawn(async move {
                    let body = data(64 * 1024, i + 10);
                    barrier.wait().await;
                    (store.put_if_absent(&path, body.clone()).await.unwrap(), body)
                })
            })
            .collect();
        let mut results = Vec::new();
        for r in racers {
            results.push(r.await.expect("racer task panicked"));
        }
        let winners: Vec<_> = results.iter().filter(|(o, _)| *o == PutOutcome::Created).collect();
        assert_eq!(
            winners.len(),
            1,
            "round {round}: outcomes {:?}",
            results.iter().map(|r| r.0).collect::<Vec<_>>()
        );
        assert_eq!(
            store.get(&path).await.unwrap(),
            winners[0].1,
            "round {round}: the winner's bytes are stored"
        );
    }
}

async fn list_is_sorted_relative_and_filtered_by_prefix(store: &Store) {
    // Written out of order, with a sibling directory sharing a name prefix.
    for (path, len) in [
        ("ckpt/2/b", 2),
        ("ckpt/10/a", 3),
        ("ckpt/1/z", 1),
        ("ckpt/1/a", 4),
        ("ckpt2/x", 5),
        ("top", 6),
    ] {
        store.put(path, data(len, 3)).await.unwrap();
    }
    let all = store.list("").await.unwrap();
    assert_eq!(
        paths(&all),
        ["ckpt/1/a", "ckpt/1/z", "ckpt/10/a", "ckpt/2/b", "ckpt2/x", "top"]
    );
    assert_eq!(all.iter().map(|o| o.size).collect::<Vec<_>>(), [4, 1, 3, 2, 5, 6]);

    assert_eq!(
        paths(&store.list("ckpt/").await.unwrap()),
        ["ckpt/1/a", "ckpt/1/z", "ckpt/10/a", "ckpt/2/b"]
    );
    assert_eq!(
        paths(&store.list("ckpt").await.unwrap()),
        ["ckpt/1/a", "ckpt/1/z", "ckpt/10/a", "ckpt/2/b", "ckpt2/x"]
    );
    assert_eq!(
        paths(&store.list("ckpt/1").await.unwrap()),
        ["ckpt/1/a", "ckpt/1/z", "ckpt/10/a"]
    );
    assert_eq!(paths(&store.list("ckpt/1/").await.unwrap()), ["ckpt/1/a", "ckpt/1/z"]);
    assert!(store.list("missing/").await.unwrap().is_empty());
}

/// `list_directories` names each directory directly under the prefix once, sorted, however
/// deep or many its objects (an S3 store asks with the `/` delimiter, `ObjectStore::list`'s
/// default reads every object); an object directly under the prefix is not a directory. A
/// partial last component lists only the objects whose names continue it (`job/chk-` and not
/// `job/shared/`; the local store walks only those directories).
async fn list_directories_names_each_directory_under_the_prefix_once(store: &Store) {
    for path in [
        "job/chk-2/_metadata",
        "job/chk-10/a/b",
        "job/chk-10/c",
        "job/shared/x-chk1",
        "job/shared/x-chk2",
        "job/runs/r1",
        "job/top",
        "other/chk-3/_metadata",
    ] {
        store.put(path, Bytes::from_static(b"v")).await.unwrap();
    }
    assert_eq!(
        store.list_directories("job/").await.unwrap(),
        ["chk-10", "chk-2", "runs", "shared"]
    );
    assert!(store.list_directories("missing/").await.unwrap().is_empty());
    assert_eq!(
        paths(&store.list("job/chk-").await.unwrap()),
        ["job/chk-10/a/b", "job/chk-10/c", "job/chk-2/_metadata"]
    );
    assert_eq!(paths(&store.list("job/t").await.unwrap()), ["job/top"]);
}

async fn delete_prefix_removes_only_objects_under_the_prefix(store: &Store) {
    for path in ["sp/1/a", "sp/1/b/c", "sp/10/a", "sp/2/a", "other"] {
        store.put(path, Bytes::from_static(b"v")).await.unwrap();
    }
    store.delete_prefix("sp/1/").await.unwrap();
    assert_eq!(paths(&store.list("").await.unwrap()), ["other", "sp/10/a", "sp/2/a"]);
    assert!(!store.exists("sp/1/b/c").await.unwrap());

    store.delete_prefix("sp/").await.unwrap();
    assert_eq!(paths(&store.list("").await.unwrap()), ["other"]);
    // Nothing left under the prefix: still Ok.
    store.delete_prefix("sp/").await.unwrap();
}

async fn multipart_is_invisible_until_complete_then_has_exact_bytes(store: &Store) {
    let (first, last) = (data(MIN_PART_SIZE, 4), data(1234, 5));
    let mut upload = store.create_multipart("out/part-0.csv").await.unwrap();
    assert_eq!(upload.path, "out/part-0.csv");
    assert!(upload.parts.is_empty());

    store.upload_part(&mut upload, first.clone()).await.unwrap();
    store.upload_part(&mut upload, last.clone()).await.unwrap();
    assert_eq!(upload.parts.iter().map(|p| p.0).collect::<Vec<_>>(), [1, 2]);
    assert!(!store.exists("out/part-0.csv").await.unwrap());
    assert_not_found(store.get("out/part-0.csv").await, "get before complete");
    assert!(
        store.list("out/").await.unwrap().is_empty(),
        "no object is listed before complete"
    );

    store.complete_multipart(&upload).await.unwrap();
    let got = store.get("out/part-0.csv").await.unwrap();
    assert_eq!(got.len(), first.len() + last.len());
    assert!(
        got == [first, last].concat(),
        "completed object has the parts' bytes in order"
    );
    assert_eq!(paths(&store.list("out/").await.unwrap()), ["out/part-0.csv"]);
}

async fn complete_multipart_twice_is_ok(store: &Store) {
    let (first, last) = (data(MIN_PART_SIZE, 6), data(10, 7));
    let mut upload = store.create_multipart("out/twice").await.unwrap();
    store.upload_part(&mut upload, first.clone()).await.unwrap();
    store.upload_part(&mut upload, last.clone()).await.unwrap();
    store.complete_multipart(&upload).await.unwrap();
    // As after a restore from a checkpoint taken before the completion was recorded.
    let restored: storage::MultipartUpload = serde_json::from_str(&serde_json::to_string(&upload).unwrap()).unwrap();
    store.complete_multipart(&restored).await.unwrap();
    assert!(store.get("out/twice").await.unwrap() == [first, last].concat());
}

/// A part uploaded again from the state recorded before it (a retried request, or a run
/// restored from a checkpoint taken before the part was recorded) replaces the earlier attempt:
/// the same bytes give the same object, whichever parts were sent twice.
async fn multipart_part_uploaded_again_gives_the_same_object(store: &Store) {
    let (first, second) = (data(MIN_PART_SIZE, 11), data(4321, 12));
    let empty = store.create_multipart("out/again").await.unwrap();
    let mut upload = empty.clone();
    store.upload_part(&mut upload, first.clone()).await.unwrap();
    let after_first = upload.clone();
    store.upload_part(&mut upload, second.clone()).await.unwrap();

    let mut retried = after_first;
    store.upload_part(&mut retried, second.clone()).await.unwrap();
    store.upload_part(&mut empty.clone(), first.clone()).await.unwrap();
    assert_eq!(retried.parts.iter().map(|p| p.0).collect::<Vec<_>>(), [1, 2]);
    assert!(!store.exists("out/again").await.unwrap());

    store.complete_multipart(&retried).await.unwrap();
    assert!(store.get("out/again").await.unwrap() == [first, second].concat());
    assert_eq!(paths(&store.list("out/").await.unwrap()), ["out/again"]);
}

async fn complete_multipart_without_parts_creates_an_empty_object(store: &Store) {
    let upload = store.create_multipart("out/empty").await.unwrap();
    store.complete_multipart(&upload).await.unwrap();
    assert_eq!(store.get("out/empty").await.unwrap(), Bytes::new());
}

async fn abort_multipart_discards_the_upload_and_is_idempotent(store: &Store) {
    let mut upload = store.create_multipart("out/aborted").await.unwrap();
    store.upload_part(&mut upload, data(1000, 8)).await.unwrap();
    store.abort_multipart(&upload).await.unwrap();
    assert!(!store.exists("out/aborted").await.unwrap());
    assert!(store.list("").await.unwrap().is_empty());
    // Aborting an upload that is gone is Ok. (Completing it is not checked here: AWS answers
    // NoSuchUpload, which the S3 store maps to NotFound, but moto fails with a 500.)
    store.abort_multipart(&upload).await.unwrap();
    assert!(!store.exists("out/aborted").await.unwrap());
    // So is aborting an upload id the store never issued.
    let unknown = storage::MultipartUpload {
        upload_id: "no-such-upload".into(),
        ..upload
    };
    store.abort_multipart(&unknown).await.unwrap();
}

/// S3 only: a store on prefix `p` never sees or deletes keys of a sibling prefix `p2/...` or
/// of the bucket root.
#[tokio::test]
async fn s3_store_prefix_isolates_sibling_prefixes() {
    moto::init_test_credentials();
    let moto = MotoServer::start();
    let opts = s3_options(&moto);
    let root = storage::open(&format!("s3://{}", moto.bucket()), &opts).await.unwrap();
    let job = storage::open(&format!("s3://{}/job/", moto.bucket()), &opts)
        .await
        .unwrap();
    root.put("job/a", Bytes::from_static(b"1")).await.unwrap();
    root.put("job2/a", Bytes::from_static(b"2")).await.unwrap();
    root.put("joba", Bytes::from_static(b"3")).await.unwrap();

    assert_eq!(job.url("a"), format!("s3://{}/job/a", moto.bucket()));
    assert_eq!(paths(&job.list("").await.unwrap()), ["a"]);
    assert_eq!(job.get("a").await.unwrap(), Bytes::from_static(b"1"));
    job.delete_prefix("").await.unwrap();
    assert_eq!(paths(&root.list("").await.unwrap()), ["job2/a", "joba"]);
}

/// S3 only: deleting more objects than one DeleteObjects request can name.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn s3_store_delete_prefix_spans_several_batches() {
    let f = s3_fixture().await;
    let store = f.store.clone();
    let puts: Vec<_> = (0..1100)
        .map(|i| {
            let store = store.clone();
            tokio::spawn(async move { store.put(&format!("many/{i:04}"), Bytes::from_static(b"x")).await })
        })
        .collect();
    for p in puts {
        p.await.unwrap().unwrap();
    }
    store.put("keep", Bytes::from_static(b"k")).await.unwrap();
    assert_eq!(
        store.list("many/").await.unwrap().len(),
        1100,
        "listing follows continuation tokens"
    );
    store.delete_prefix("many/").await.unwrap();
    assert_eq!(paths(&store.list("").await.unwrap()), ["keep"]);
}

/// S3 only: a failure that is not NotFound carries the operation and a useful message.
#[tokio::test]
async fn s3_store_errors_name_the_operation_and_cause() {
    moto::init_test_credentials();
    let moto = MotoServer::start();
    let store = storage::open("s3://no-such-bucket/p", &s3_options(&moto))
        .await
        .unwrap();
    match store.put("k", Bytes::from_static(b"v")).await {
        Err(StorageError::S3 { path, op, message }) => {
            assert_eq!(path, "s3://no-such-bucket/p/k");
            assert_eq!(op, "PutObject");
            assert!(message.contains("NoSuchBucket"), "message: {message}");
        }
        other => panic!("expected an S3 error, got {other:?}"),
    }
}

/// S3 only: with nothing but the environment `MotoServer::env` gives child processes
/// (credentials, region, `AWS_ENDPOINT_URL`, `WEIR_S3_PATH_STYLE`), `storage::open` reaches
/// moto. Runs `env_child_round_trips_through_env_configured_store` in a child process.
#[test]
fn s3_store_is_configured_from_the_environment_alone() {
    let moto = MotoServer::start();
    let exe = std::env::current_exe().expect("test binary path");
    let mut cmd = std::process::Command::new(exe);
    moto.apply_env(&mut cmd)
        .env("WEIR_TEST_ENV_CHILD_BUCKET", moto.bucket())
        .env("AWS_CONFIG_FILE", "/dev/null")
        .env("AWS_SHARED_CREDENTIALS_FILE", "/dev/null")
        .env_remove("AWS_PROFILE")
        .env_remove("AWS_SESSION_TOKEN")
        .env_remove("AWS_ENDPOINT_URL_S3")
        .args([
            "--exact",
            "env_child_round_trips_through_env_configured_store",
            "--ignored",
            "--nocapture",
        ]);
    let out = cmd.output().expect("running the child test");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success() && stdout.contains("1 passed"),
        "child test failed ({}):\n{stdout}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

#[tokio::test]
#[ignore = "run in a child process by s3_store_is_configured_from_the_environment_alone"]
async fn env_child_round_trips_through_env_configured_store() {
    let Ok(bucket) = std::env::var("WEIR_TEST_ENV_CHILD_BUCKET") else {
        eprintln!("not run as the child of s3_store_is_configured_from_the_environment_alone: nothing to do");
        return;
    };
    let store = storage::open(&format!("s3://{bucket}/from-env"), &S3Options::default())
        .await
        .expect("opening the S3 store");
    store.put("k", Bytes::from_static(b"v")).await.unwrap();
    assert_eq!(store.get("k").await.unwrap(), Bytes::from_static(b"v"));
}
