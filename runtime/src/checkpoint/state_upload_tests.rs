//! Tests of the streamed state file upload (`state_upload.rs`).

use super::*;
use crate::checkpoint::part_schedule::LOCAL_FILE_PARTS;
use crate::operators::EncodedState;
use crate::state::snapshot::{KeyGroupBlock, decode_state_file};
use std::sync::Arc;

fn barrier(store: Store) -> Barrier {
    Barrier {
        id: 4,
        kind: crate::control::api::SnapshotKind::Checkpoint,
        stop: false,
        target: Arc::new(crate::checkpoint::SnapshotTarget {
            store,
            dir: "job/chk-4".into(),
        }),
        triggered_at_ms: 0,
        is_final: false,
        incremental: None,
    }
}

/// `n` blocks of `size` bytes each, some given whole, the rest streamed; or a stream that
/// fails after its first block.
fn encoder(n: u32, size: usize, fail: bool) -> SnapshotEncoder {
    Box::new(move || {
        let block = move |kg: u32| KeyGroupBlock {
            expired_through_ms: None,
            key_group: kg,
            entries: u64::from(kg) + 1,
            data: vec![kg as u8; size].into(),
        };
        Ok(EncodedState {
            state_names: vec!["keyed:aggregate".into()],
            key_group_range: Some(KeyGroupRange { start: 0, end: n }),
            key_groups: vec![block(0)],
            operator_state: vec![vec![1, 2]],
            incremental: None,
            key_group_stream: Some(Box::new(move |emit| {
                for kg in 1..n {
                    if fail && kg == 2 {
                        return Err(TaskError("disk store read failed".into()));
                    }
                    emit(block(kg))?;
                }
                Ok(())
            })),
            native: None,
            expired_through_ms: None,
            chain_entries: None,
        })
    })
}

/// Files below one part (a single put) and of several parts (multipart, parts cut in the
/// middle of blocks) decode to every block in order, with the size and CRC-32 the handle
/// records; an encoder that fails mid-stream reports its own error and leaves no file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn state_files_stream_to_storage_and_a_failed_encoder_leaves_none() {
    let dir = tempfile::tempdir().unwrap();
    let store: Store = Arc::new(crate::storage::LocalStore::new(dir.path()).unwrap());
    for (n, size) in [(3u32, 100usize), (7, 3 << 20), (2, MULTIPART_PART_SIZE + 5)] {
        let b = barrier(store.clone());
        let acked = upload_operator_state(
            &b,
            1,
            2,
            vec![("count".into(), "count".into(), encoder(n, size, false))],
        )
        .await
        .unwrap();
        let handle = &acked[0].handle;
        assert_eq!(handle.file, "count-1.state");
        let bytes = store.get("job/chk-4/count-1.state").await.unwrap();
        assert_eq!(
            (handle.size, handle.crc32),
            (bytes.len() as u64, crc32fast::hash(&bytes))
        );
        let file = decode_state_file("f", &bytes).unwrap();
        assert_eq!(file.operator_state, vec![vec![1, 2]]);
        let kgs: Vec<u32> = file.key_groups.iter().map(|b| b.key_group).collect();
        assert_eq!(kgs, (0..n).collect::<Vec<_>>(), "{n} blocks of {size} bytes");
        assert!(
            file.key_groups
                .iter()
                .all(|b| b.data.len() == size && b.data[0] == b.key_group as u8)
        );
        let entries: u64 = (1..=u64::from(n)).sum::<u64>() + 1;
        assert_eq!(handle.entries, entries);
        store.delete_prefix("job/").await.unwrap();
    }
    let b = barrier(store.clone());
    let e = upload_operator_state(
        &b,
        1,
        2,
        // 9 MiB blocks: the first part (8 MiB) is uploading when the encoder fails.
        vec![("count".into(), "count".into(), encoder(5, 9 << 20, true))],
    )
    .await
    .unwrap_err();
    assert!(e.0.contains("disk store read failed"), "{e:?}");
    assert!(
        !store.exists("job/chk-4/count-1.state").await.unwrap(),
        "no partial file"
    );
    // The multipart upload started for the first part was aborted: no staging file left.
    let left: Vec<String> = std::fs::read_dir(dir.path().join("job/chk-4"))
        .map(|d| {
            d.map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
                .collect()
        })
        .unwrap_or_default();
    assert!(left.is_empty(), "left behind: {left:?}");
}

/// An encoder that panics (a bug), before its first piece or mid-stream with a part
/// uploading, fails the upload naming the encoder and its message (the subtask then
/// declines the checkpoint) and leaves no file.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_encoder_fails_the_upload_naming_it() {
    let dir = tempfile::tempdir().unwrap();
    let store: Store = Arc::new(crate::storage::LocalStore::new(dir.path()).unwrap());
    let at_once: SnapshotEncoder = Box::new(|| panic!("encoder bug"));
    let mid_stream: SnapshotEncoder = Box::new(|| {
        let mut state = encoder(5, 9 << 20, false)()?;
        let stream = state.key_group_stream.take().unwrap();
        state.key_group_stream = Some(Box::new(move |emit| {
            let mut sent = 0;
            stream(&mut |block| {
                sent += 1;
                assert!(sent < 2, "key group {} bug", block.key_group);
                emit(block)
            })
        }));
        Ok(state)
    });
    for (enc, want) in [(at_once, "encoder bug"), (mid_stream, "key group 2 bug")] {
        let b = barrier(store.clone());
        let e = upload_operator_state(&b, 1, 2, vec![("count".into(), "count".into(), enc)])
            .await
            .unwrap_err();
        assert_eq!(
            e.0,
            format!("the state file encoder of operator count (subtask 2/2) panicked: {want}")
        );
        assert!(
            !store.exists("job/chk-4/count-1.state").await.unwrap(),
            "no partial file"
        );
    }
}

/// The part buffer never grows past one part, whatever the pieces' sizes (pieces that do
/// not fit are split across parts): before, a 16 MiB part buffer reallocated to about
/// twice its size whenever a piece crossed the part boundary, and such a huge block stayed
/// in the RSS after it was freed (`STATE_PART_SIZE`). The object is the pieces, in order.
/// Both schedules: the local store's 1 MiB parts and S3's 8 MiB ones (a store that does not
/// say its parts are local writes).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn part_buffers_stay_one_part_large_whatever_the_piece_sizes() {
    let dir = tempfile::tempdir().unwrap();
    let local: Store = Arc::new(crate::storage::LocalStore::new(dir.path().join("local")).unwrap());
    let s3_shaped: Store = LateFirstParts::over(&dir.path().join("s3"));
    for (store, schedule) in [(local, LOCAL_FILE_PARTS), (s3_shaped, STATE_FILE_PARTS)] {
        let part = schedule.first_part_size;
        let sizes = [10, 3 << 20, part - 7, 700_000, 2 * part + 5, 1, part];
        let mut put = StreamingPut::new(store.clone(), "job/file".into());
        assert_eq!(put.schedule, schedule, "{}", store.url(""));
        let mut want = Vec::new();
        for (i, size) in sizes.into_iter().enumerate() {
            let piece = vec![i as u8 + 1; size];
            want.extend_from_slice(&piece);
            put.write(&piece).await.unwrap();
            assert!(
                put.largest_buffer <= part,
                "the part buffer grew to {} bytes, over one part ({part})",
                put.largest_buffer
            );
        }
        let (size, crc) = put.finish().await.unwrap();
        let got = store.get("job/file").await.unwrap();
        assert_eq!((size, crc), (want.len() as u64, crc32fast::hash(&want)));
        assert!(got[..] == want[..], "the object is the pieces in order");
    }
}

/// A local store whose numbered part uploads finish in reverse order of their numbers (part
/// `n` waits `(10 - n) × 50 ms`), and that counts the parts uploading at once.
#[derive(Debug)]
struct LateFirstParts {
    inner: Store,
    uploading: std::sync::atomic::AtomicUsize,
    most_uploading: std::sync::atomic::AtomicUsize,
    /// Every numbered part uploaded: (number, bytes).
    part_sizes: std::sync::Mutex<Vec<(i32, usize)>>,
}

impl LateFirstParts {
    fn over(dir: &std::path::Path) -> Arc<LateFirstParts> {
        Arc::new(LateFirstParts {
            inner: Arc::new(crate::storage::LocalStore::new(dir).unwrap()),
            uploading: Default::default(),
            most_uploading: Default::default(),
            part_sizes: Default::default(),
        })
    }

    /// A [`StreamingPut`] to `job/file` in such a store over `dir`: the store as itself (for
    /// its counters) and as a [`Store`] (to read the object back), and the put.
    fn streaming_put(dir: &std::path::Path) -> (Arc<LateFirstParts>, Store, StreamingPut) {
        let late = LateFirstParts::over(dir);
        let store: Store = late.clone();
        let put = StreamingPut::new(store.clone(), "job/file".into());
        (late, store, put)
    }
}

#[async_trait::async_trait]
impl crate::storage::ObjectStore for LateFirstParts {
    fn url(&self, path: &str) -> String {
        self.inner.url(path)
    }
    async fn put(&self, path: &str, data: bytes::Bytes) -> crate::storage::Result<()> {
        self.inner.put(path, data).await
    }
    async fn put_if_absent(
        &self,
        path: &str,
        data: bytes::Bytes,
    ) -> crate::storage::Result<crate::storage::PutOutcome> {
        self.inner.put_if_absent(path, data).await
    }
    async fn get(&self, path: &str) -> crate::storage::Result<bytes::Bytes> {
        self.inner.get(path).await
    }
    async fn get_from(&self, path: &str, offset: u64) -> crate::storage::Result<bytes::Bytes> {
        self.inner.get_from(path, offset).await
    }
    async fn exists(&self, path: &str) -> crate::storage::Result<bool> {
        self.inner.exists(path).await
    }
    async fn list(&self, prefix: &str) -> crate::storage::Result<Vec<crate::storage::ObjectMeta>> {
        self.inner.list(prefix).await
    }
    async fn delete(&self, path: &str) -> crate::storage::Result<()> {
        self.inner.delete(path).await
    }
    async fn create_multipart(&self, path: &str) -> crate::storage::Result<MultipartUpload> {
        self.inner.create_multipart(path).await
    }
    async fn upload_part(&self, upload: &mut MultipartUpload, data: bytes::Bytes) -> crate::storage::Result<()> {
        self.inner.upload_part(upload, data).await
    }
    async fn upload_part_at(
        &self,
        upload: &MultipartUpload,
        number: i32,
        offset: u64,
        data: bytes::Bytes,
    ) -> crate::storage::Result<String> {
        use std::sync::atomic::Ordering::SeqCst;
        self.part_sizes.lock().unwrap().push((number, data.len()));
        let now = self.uploading.fetch_add(1, SeqCst) + 1;
        self.most_uploading.fetch_max(now, SeqCst);
        let wait = 50 * u64::try_from(10 - number).unwrap_or(0);
        tokio::time::sleep(std::time::Duration::from_millis(wait)).await;
        let token = self.inner.upload_part_at(upload, number, offset, data).await;
        self.uploading.fetch_sub(1, SeqCst);
        token
    }
    /// As S3 does, refuses a completion whose parts are not numbered 1, 2, ... in order.
    async fn complete_multipart(&self, upload: &MultipartUpload) -> crate::storage::Result<()> {
        let numbers: Vec<i32> = upload.parts.iter().map(|p| p.0).collect();
        if numbers != (1..=numbers.len() as i32).collect::<Vec<_>>() {
            return Err(crate::storage::StorageError::S3 {
                path: self.url(&upload.path),
                op: "CompleteMultipartUpload",
                message: format!("parts recorded out of order: {numbers:?}"),
            });
        }
        self.inner.complete_multipart(upload).await
    }
    async fn abort_multipart(&self, upload: &MultipartUpload) -> crate::storage::Result<()> {
        self.inner.abort_multipart(upload).await
    }
}

/// Parts upload [`PARTS_IN_FLIGHT`] at a time and finish in reverse order (the first last),
/// yet the object is the pieces in order and its parts are recorded 1, 2, ... as S3's
/// completion requires: parts are numbered and recorded in the order they were cut, not the
/// order they finished (checked against a variant that recorded each part as it finished:
/// its completion is refused).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parts_finishing_out_of_order_make_the_object_in_order() {
    let dir = tempfile::tempdir().unwrap();
    let (late, store, mut put) = LateFirstParts::streaming_put(dir.path());
    let mut want = Vec::new();
    // Six full parts and a short last one, in pieces that straddle the part boundaries.
    let piece_size = STATE_PART_SIZE / 3 + 11;
    let mut i = 1u8;
    while want.len() < 6 * STATE_PART_SIZE + 100 {
        let piece = vec![i; piece_size];
        want.extend_from_slice(&piece);
        put.write(&piece).await.unwrap();
        i = i.wrapping_add(1);
    }
    assert_eq!(put.most_in_flight, PARTS_IN_FLIGHT);
    let most_uploading = late.most_uploading.load(std::sync::atomic::Ordering::SeqCst);
    assert!(most_uploading > 1, "parts uploaded one at a time: {most_uploading}");
    let (size, crc) = put.finish().await.unwrap();
    let got = store.get("job/file").await.unwrap();
    assert_eq!((size, crc), (want.len() as u64, crc32fast::hash(&want)));
    assert!(got[..] == want[..], "the object is the pieces in order");
}

/// A schedule of tiny parts (10 bytes for the first 3, doubling every 2, at most 9 parts:
/// 10, 10, 10, 20, 20, 40, 40, 80, 80 = 310 bytes), as [`STATE_FILE_PARTS`] grows its parts
/// past the 5,000th.
fn tiny_parts() -> PartSchedule {
    PartSchedule {
        first_part_size: 10,
        parts_at_first_size: 3,
        parts_per_doubling: 2,
        most_parts: 9,
        bytes_in_flight: 20,
    }
}

/// Parts are cut at the schedule's sizes (and fewer fly at once as they grow), the object is
/// the pieces in order; a file of exactly the most the parts hold is written whole.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn parts_grow_as_the_schedule_says_up_to_the_most_a_file_holds() {
    let dir = tempfile::tempdir().unwrap();
    let (late, store, mut put) = LateFirstParts::streaming_put(dir.path());
    put.schedule = tiny_parts();
    assert_eq!(put.schedule.largest_file(), 310);
    let want: Vec<u8> = (0..310u32).map(|i| (i % 251) as u8).collect();
    for piece in want.chunks(7) {
        put.write(piece).await.unwrap();
    }
    assert!(put.largest_buffer <= 80, "{}", put.largest_buffer);
    let (size, crc) = put.finish().await.unwrap();
    let mut sizes = late.part_sizes.lock().unwrap().clone();
    sizes.sort();
    assert_eq!(
        sizes,
        vec![
            (1, 10),
            (2, 10),
            (3, 10),
            (4, 20),
            (5, 20),
            (6, 40),
            (7, 40),
            (8, 80),
            (9, 80)
        ]
    );
    let got = store.get("job/file").await.unwrap();
    assert_eq!((size, crc), (310, crc32fast::hash(&want)));
    assert!(got[..] == want[..], "the object is the pieces in order");
}

/// One byte past the most a file's parts hold (S3 takes 10,000 parts, so fixed 8 MiB parts
/// failed every checkpoint of a subtask with more than 78 GiB of state at part 10,001): the
/// write is refused with an error naming the file, the limit and what to do, and no object
/// appears.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_past_the_most_its_parts_hold_is_refused_and_leaves_no_object() {
    let dir = tempfile::tempdir().unwrap();
    let (_, store, mut put) = LateFirstParts::streaming_put(dir.path());
    put.schedule = tiny_parts();
    put.write(&[1u8; 310]).await.unwrap();
    let error = put.write(&[2u8]).await.unwrap_err().to_string();
    assert!(error.contains("job/file"), "{error}");
    assert!(error.contains("9 multipart parts"), "{error}");
    assert!(error.contains("raise the job's parallelism"), "{error}");
    put.abort().await;
    assert!(!store.exists("job/file").await.unwrap(), "no object");
}
