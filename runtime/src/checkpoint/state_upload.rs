//! The asynchronous part of a subtask's snapshot: encode each operator's state and write its
//! state file, streaming. The encoder runs on tokio's blocking pool and hands the file's
//! pieces ([`StreamedStateFile`]: head, one frame per key group, trailer) through a bounded
//! channel to the upload, which sends them to storage in parts of at least
//! [`STATE_PART_SIZE`] (an S3 multipart upload, the local store's staging file) while
//! later key groups are still encoding, one part uploading while the next fills. A file
//! smaller than one part is one `put`. Memory holds two parts and the channel's pieces, not
//! the whole state file.

use crate::checkpoint::{AckedOperator, Barrier};
use crate::operators::{SnapshotEncoder, TaskError, TaskResult};
use crate::state::incremental::{Form, shared_state_file};
use crate::state::key_group::KeyGroupRange;
use crate::state::snapshot::{ChainLink, StateHandle, StreamedStateFile};
use crate::storage::{MULTIPART_PART_SIZE, MultipartUpload, StorageError, Store};
use tokio::sync::mpsc;

/// Pieces in flight between the encoder and the upload (each a frame header or a key group's
/// data): bounds the encoded bytes waiting for storage to a few key groups.
const PIECES_IN_FLIGHT: usize = 16;

/// What the encoder sends to the upload.
enum Piece {
    /// First: the keyed state's form, which decides the file's path.
    Start(Option<Form>),
    /// The next bytes of the file.
    Bytes(Vec<u8>),
    /// Last: the file is complete (a channel closed without it is an encoder that failed).
    End,
}

/// What the encoder reports when it is done.
struct Encoded {
    state_names: Vec<String>,
    key_group_range: Option<KeyGroupRange>,
    entries: u64,
    incremental: Option<Form>,
}

/// Encodes and writes the state file of every `(uid, kind, encoder)` of `parts` for
/// `subtask` at `barrier`, one operator after the other; returns what the acknowledgement
/// carries. Errors: an encoder's, or storage's (a multipart upload in progress is aborted).
pub async fn upload_operator_state(
    barrier: &Barrier,
    subtask: u32,
    parallelism: u32,
    parts: Vec<(String, String, SnapshotEncoder)>,
) -> TaskResult<Vec<AckedOperator>> {
    let mut out = Vec::with_capacity(parts.len());
    for (uid, kind, enc) in parts {
        let (tx, mut rx) = mpsc::channel::<Piece>(PIECES_IN_FLIGHT);
        let encoder_uid = uid.clone();
        let encoder = tokio::task::spawn_blocking(move || encode_into(&encoder_uid, subtask, enc, &tx));
        let written = match rx.recv().await {
            Some(Piece::Start(form)) => write_file(barrier, &uid, subtask, form, &mut rx).await,
            // The encoder failed before its first piece: its error is reported below.
            _ => Err(None),
        };
        drop(rx);
        let encoded = encoder.await.map_err(|e| {
            let what = format!(
                "the state file encoder of operator {uid} (subtask {}/{parallelism})",
                subtask + 1
            );
            TaskError(crate::exec::panics::join_failure(&what, e))
        })?;
        let (encoded, (name, size, crc, path)) = match (encoded, written) {
            (Ok(encoded), Ok(written)) => (encoded, written),
            // Storage failed first (the encoder then found the upload gone).
            (_, Err(Some(e))) => return Err(e),
            (Err(e), _) => return Err(e),
            (Ok(_), Err(None)) => return Err(TaskError("snapshot encoder ended without its last piece".into())),
        };
        let (chain, delta_of) = match encoded.incremental {
            None | Some(Form::SelfContained) => (vec![], None),
            Some(form) => {
                let link = ChainLink {
                    file: name.clone(),
                    checkpoint_id: barrier.id,
                    base: form == Form::Base,
                    size,
                    crc32: crc,
                    entries: encoded.entries,
                };
                let delta_of = match form {
                    Form::Delta { over } => Some(over),
                    _ => None,
                };
                (vec![link], delta_of)
            }
        };
        tracing::debug!(path, size, "state file written");
        out.push(AckedOperator {
            uid,
            kind,
            parallelism,
            state_names: encoded.state_names,
            handle: StateHandle {
                file: name,
                subtask,
                key_group_range: encoded.key_group_range,
                size,
                crc32: crc,
                entries: encoded.entries,
                chain,
            },
            delta_of,
        });
    }
    Ok(out)
}

/// The encoder's side (blocking pool): runs `enc` and sends the state file's pieces.
fn encode_into(uid: &str, subtask: u32, enc: SnapshotEncoder, tx: &mpsc::Sender<Piece>) -> TaskResult<Encoded> {
    let gone = || TaskError("the state file upload stopped".into());
    let st = enc()?;
    tx.blocking_send(Piece::Start(st.incremental)).map_err(|_| gone())?;
    let mut entries = st.operator_state.len() as u64;
    let (mut file, head) = StreamedStateFile::start(uid, subtask, st.operator_state);
    tx.blocking_send(Piece::Bytes(head)).map_err(|_| gone())?;
    let mut send_block = |block: crate::state::snapshot::KeyGroupBlock| -> TaskResult<()> {
        entries += block.entries;
        tx.blocking_send(Piece::Bytes(file.block(&block))).map_err(|_| gone())?;
        tx.blocking_send(Piece::Bytes(Vec::from(block.data)))
            .map_err(|_| gone())
    };
    for block in st.key_groups {
        send_block(block)?;
    }
    if let Some(stream) = st.key_group_stream {
        stream(&mut send_block)?;
    }
    tx.blocking_send(Piece::Bytes(file.finish())).map_err(|_| gone())?;
    tx.blocking_send(Piece::End).map_err(|_| gone())?;
    Ok(Encoded {
        state_names: st.state_names,
        key_group_range: st.key_group_range,
        entries,
        incremental: st.incremental,
    })
}

/// The upload's side: the file's path from its form, then its bytes as they come, until
/// [`Piece::End`]. Returns `(name relative to the snapshot directory, size, crc32, store
/// path)`. Errors: `Some(storage error)`, or `None` when the encoder stopped before the end
/// (its own error says why); nothing is then visible at the path.
async fn write_file(
    barrier: &Barrier,
    uid: &str,
    subtask: u32,
    form: Option<Form>,
    rx: &mut mpsc::Receiver<Piece>,
) -> Result<(String, u64, u32, String), Option<TaskError>> {
    let (name, path) = match form {
        None | Some(Form::SelfContained) => {
            let name = format!("{uid}-{subtask}.state");
            let path = crate::storage::join(&barrier.target.dir, &name);
            (name, path)
        }
        Some(_) => shared_state_file(&barrier.target.dir, uid, subtask, barrier.id),
    };
    let mut put = StreamingPut::new(barrier.target.store.clone(), path.clone());
    loop {
        match rx.recv().await {
            Some(Piece::Bytes(bytes)) => {
                if let Err(e) = put.write(bytes).await {
                    put.abort().await;
                    return Err(Some(e.into()));
                }
            }
            Some(Piece::End) => break,
            Some(Piece::Start(_)) | None => {
                put.abort().await;
                return Err(None);
            }
        }
    }
    let (size, crc) = put.finish().await.map_err(Some)?;
    Ok((name, size, crc, path))
}

/// Bytes of each part of a streamed state file but the last: one S3 multipart part (8 MiB),
/// exactly. A part's buffer is allocated at this size and never grows (a piece that does not
/// fit is split across two parts), so the upload holds at most two parts: 16 MiB. It stays
/// below mimalloc's huge-object size (16 MiB): a huge block freed on another thread than the
/// one that allocated it (the upload frees what the encoder's thread filled) is only reset
/// (`MADV_FREE`), staying in the process's RSS until the kernel needs the memory, and each
/// new part took fresh memory (measured: 16 MiB parts that grew to 36 MiB left 100–230 MiB of
/// such pages during full disk checkpoints at 5M keys; docs/runtime/state-backends.md).
pub const STATE_PART_SIZE: usize = MULTIPART_PART_SIZE;

/// A part being uploaded in the background, with the upload it extends (handed back when it
/// is done, so the next part follows it).
type PartInFlight = tokio::task::JoinHandle<(MultipartUpload, Result<(), StorageError>)>;

/// One object written from pieces: buffered until a part's worth ([`STATE_PART_SIZE`], parts
/// cut at exactly that size), then a multipart upload; a single `put` if it ends before the first part is full. A full part
/// is uploaded in the background while the next one fills (at most one part in flight: parts
/// stay in order, as the local store's multipart upload needs, and memory holds two parts),
/// so encoding and upload overlap instead of taking turns. Keeps the object's size and CRC-32.
struct StreamingPut {
    store: Store,
    path: String,
    buffer: Vec<u8>,
    /// The multipart upload, when no part is in flight.
    upload: Option<MultipartUpload>,
    in_flight: Option<PartInFlight>,
    crc: crc32fast::Hasher,
    size: u64,
    /// The largest capacity the part buffer had, bytes (at most [`STATE_PART_SIZE`]; tests).
    largest_buffer: usize,
}

impl StreamingPut {
    fn new(store: Store, path: String) -> StreamingPut {
        StreamingPut {
            store,
            path,
            buffer: Vec::new(),
            upload: None,
            in_flight: None,
            crc: crc32fast::Hasher::new(),
            size: 0,
            largest_buffer: 0,
        }
    }

    /// Appends `bytes`; each time the buffer holds exactly [`STATE_PART_SIZE`] bytes, waits
    /// for the part in flight (if any) and starts uploading the buffer as the next part.
    async fn write(&mut self, bytes: Vec<u8>) -> Result<(), StorageError> {
        self.crc.update(&bytes);
        self.size += bytes.len() as u64;
        let mut rest = bytes.as_slice();
        while !rest.is_empty() {
            if self.buffer.capacity() == 0 {
                self.buffer = Vec::with_capacity(STATE_PART_SIZE);
            }
            let take = rest.len().min(STATE_PART_SIZE - self.buffer.len());
            self.buffer.extend_from_slice(&rest[..take]);
            rest = &rest[take..];
            self.largest_buffer = self.largest_buffer.max(self.buffer.capacity());
            if self.buffer.len() == STATE_PART_SIZE {
                let part = bytes::Bytes::from(std::mem::take(&mut self.buffer));
                let mut upload = match self.settle().await? {
                    Some(upload) => upload,
                    None => self.store.create_multipart(&self.path).await?,
                };
                let store = self.store.clone();
                self.in_flight = Some(tokio::spawn(async move {
                    let result = store.upload_part(&mut upload, part).await;
                    (upload, result)
                }));
            }
        }
        Ok(())
    }

    /// Waits for the part in flight, if any; the multipart upload (if one was started) is
    /// then `self.upload`'s, which this also returns (taken). Errors: the part's upload failed.
    async fn settle(&mut self) -> Result<Option<MultipartUpload>, StorageError> {
        if let Some(part) = self.in_flight.take() {
            let (upload, result) = part.await.map_err(|e| StorageError::Io {
                path: self.store.url(&self.path),
                source: std::io::Error::other(crate::exec::panics::join_failure("the part upload", e)),
            })?;
            self.upload = Some(upload);
            result?;
        }
        Ok(self.upload.take())
    }

    /// Writes what is left and makes the object visible; returns its size and CRC-32.
    async fn finish(mut self) -> Result<(u64, u32), TaskError> {
        let rest = bytes::Bytes::from(std::mem::take(&mut self.buffer));
        let result = match self.settle().await {
            Err(e) => Err(e),
            Ok(None) => self.store.put(&self.path, rest).await,
            Ok(Some(mut upload)) => {
                let last = if rest.is_empty() {
                    Ok(())
                } else {
                    self.store.upload_part(&mut upload, rest).await
                };
                let done = match last {
                    Ok(()) => self.store.complete_multipart(&upload).await,
                    Err(e) => Err(e),
                };
                self.upload = Some(upload);
                done
            }
        };
        if let Err(e) = result {
            self.abort().await;
            return Err(e.into());
        }
        Ok((self.size, self.crc.finalize()))
    }

    /// Abandons a multipart upload in progress, after its part in flight (best effort: an
    /// orphaned part is invisible and S3 lifecycle rules or the local store's next run remove
    /// it).
    async fn abort(&mut self) {
        // A failed part leaves the upload in `self.upload`; a finished one hands it back.
        let upload = match self.settle().await {
            Ok(upload) => upload,
            Err(_) => self.upload.take(),
        };
        if let Some(upload) = upload {
            let _ = self.store.abort_multipart(&upload).await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
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
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn part_buffers_stay_one_part_large_whatever_the_piece_sizes() {
        let dir = tempfile::tempdir().unwrap();
        let store: Store = Arc::new(crate::storage::LocalStore::new(dir.path()).unwrap());
        let sizes = [
            10,
            3 << 20,
            STATE_PART_SIZE - 7,
            700_000,
            2 * STATE_PART_SIZE + 5,
            1,
            STATE_PART_SIZE,
        ];
        let mut put = StreamingPut::new(store.clone(), "job/file".into());
        let mut want = Vec::new();
        for (i, size) in sizes.into_iter().enumerate() {
            let piece = vec![i as u8 + 1; size];
            want.extend_from_slice(&piece);
            put.write(piece).await.unwrap();
            assert!(
                put.largest_buffer <= STATE_PART_SIZE,
                "the part buffer grew to {} bytes, over one part ({STATE_PART_SIZE})",
                put.largest_buffer
            );
        }
        let (size, crc) = put.finish().await.unwrap();
        let got = store.get("job/file").await.unwrap();
        assert_eq!((size, crc), (want.len() as u64, crc32fast::hash(&want)));
        assert!(got[..] == want[..], "the object is the pieces in order");
    }
}
