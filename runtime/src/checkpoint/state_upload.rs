//! The asynchronous part of a subtask's snapshot: encode each operator's state and write its
//! state file, streaming. The encoder runs on tokio's blocking pool and hands the file's
//! pieces ([`StreamedStateFile`]: head, one frame per key group, trailer) through a bounded
//! channel to the upload, which sends them to storage in parts of [`STATE_PART_SIZE`] (an S3
//! multipart upload, the local store's staging file; parts grow past the 5,000th, see
//! [`part_schedule`](crate::checkpoint::part_schedule)) while later key groups are still
//! encoding, up to [`PARTS_IN_FLIGHT`] parts uploading at once while the next fills. A file
//! smaller than one part is one `put`. Memory holds those parts and the channel's pieces, not
//! the whole state file. Each file's phases (encoder busy,
//! upload waiting for pieces or for parts, completion) are logged at debug level
//! (`state file written`).

use crate::checkpoint::part_schedule::{self, PartSchedule, STATE_FILE_PARTS};
use crate::checkpoint::{AckedOperator, Barrier};
use crate::operators::{SnapshotEncoder, TaskError, TaskResult};
use crate::state::incremental::{Form, shared_state_file};
use crate::state::key_group::KeyGroupRange;
use crate::state::keyed_block;
use crate::state::snapshot::{ChainLink, StateHandle, StreamedStateFile};
use crate::storage::{MULTIPART_PART_SIZE, MultipartUpload, StorageError, Store};
use std::time::{Duration, Instant};
use tokio::sync::mpsc;

/// Pieces in flight between the encoder and the upload (each a frame header or a key group's
/// data): bounds the encoded bytes waiting for storage to a few key groups.
const PIECES_IN_FLIGHT: usize = 16;

/// What the encoder sends to the upload.
enum Piece {
    /// First: the keyed state's form, which decides the file's path.
    Start(Option<Form>),
    /// The next bytes of the file.
    Bytes(bytes::Bytes),
    /// Last: the file is complete (a channel closed without it is an encoder that failed).
    End,
}

/// What the encoder reports when it is done.
struct Encoded {
    state_names: Vec<String>,
    key_group_range: Option<KeyGroupRange>,
    entries: u64,
    /// Operator state items among `entries`.
    operator_items: u64,
    incremental: Option<Form>,
    /// A native checkpoint's local files, uploaded after the state file.
    native: Option<crate::checkpoint::native_upload::NativeUpload>,
    /// [`EncodedState::expired_through_ms`](crate::operators::EncodedState::expired_through_ms).
    expired_through_ms: Option<u64>,
    /// [`EncodedState::chain_entries`](crate::operators::EncodedState::chain_entries).
    chain_entries: Option<u64>,
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
    // Block buffers kept for reuse are let go of when the last file is written.
    struct DropRecycled;
    impl Drop for DropRecycled {
        fn drop(&mut self) {
            keyed_block::drop_recycled();
        }
    }
    let _drop_recycled = DropRecycled;
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
        // A delta's handle records the whole chain's entries at the barrier, not the delta's.
        let mut entries = match encoded.chain_entries {
            Some(chain) => chain + encoded.operator_items,
            None => encoded.entries,
        };
        let native = match encoded.native {
            None => None,
            Some(native) => {
                entries += native.entries;
                Some(crate::checkpoint::native_upload::upload_native(barrier, &uid, subtask, native).await?)
            }
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
                    // Keys only: the operator state items are not the chain's.
                    entries: encoded.entries - encoded.operator_items,
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
                entries,
                operator_items: Some(encoded.operator_items),
                chain,
                native,
                expired_through_ms: encoded.expired_through_ms,
            },
            delta_of,
        });
    }
    Ok(out)
}

/// The encoder's side (blocking pool): runs `enc` and sends the state file's pieces.
fn encode_into(uid: &str, subtask: u32, enc: SnapshotEncoder, tx: &mpsc::Sender<Piece>) -> TaskResult<Encoded> {
    let gone = || TaskError("the state file upload stopped".into());
    let started = Instant::now();
    let st = enc()?;
    tx.blocking_send(Piece::Start(st.incremental)).map_err(|_| gone())?;
    let operator_items = st.operator_state.len() as u64;
    let mut entries = operator_items;
    let (mut file, head) = StreamedStateFile::start(uid, subtask, st.operator_state);
    tx.blocking_send(Piece::Bytes(head.into())).map_err(|_| gone())?;
    let mut send_block = |block: crate::state::snapshot::KeyGroupBlock| -> TaskResult<()> {
        entries += block.entries;
        tx.blocking_send(Piece::Bytes(file.block(&block).into()))
            .map_err(|_| gone())?;
        tx.blocking_send(Piece::Bytes(block.data)).map_err(|_| gone())
    };
    for block in st.key_groups {
        send_block(block)?;
    }
    if let Some(stream) = st.key_group_stream {
        stream(&mut send_block)?;
    }
    tx.blocking_send(Piece::Bytes(file.finish().into()))
        .map_err(|_| gone())?;
    tx.blocking_send(Piece::End).map_err(|_| gone())?;
    tracing::debug!(
        uid,
        subtask,
        entries,
        encoded_ms = ms(started.elapsed()),
        "state file encoded"
    );
    Ok(Encoded {
        state_names: st.state_names,
        key_group_range: st.key_group_range,
        entries,
        operator_items,
        incremental: st.incremental,
        native: st.native,
        expired_through_ms: st.expired_through_ms,
        chain_entries: st.chain_entries,
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
    let started = Instant::now();
    let (mut waited_for_pieces, mut waited_for_parts) = (Duration::ZERO, Duration::ZERO);
    loop {
        let t = Instant::now();
        let piece = rx.recv().await;
        waited_for_pieces += t.elapsed();
        match piece {
            Some(Piece::Bytes(bytes)) => {
                let t = Instant::now();
                if let Err(e) = put.write(&bytes).await {
                    put.abort().await;
                    return Err(Some(e.into()));
                }
                // A block's buffer goes back to the encoder for a later block.
                if let Ok(buffer) = bytes.try_into_mut() {
                    keyed_block::recycle(Vec::from(buffer));
                }
                waited_for_parts += t.elapsed();
            }
            Some(Piece::End) => break,
            Some(Piece::Start(_)) | None => {
                put.abort().await;
                return Err(None);
            }
        }
    }
    let ended = Instant::now();
    let parts = put.upload.as_ref().map_or(0, |u| u.parts.len()) + put.in_flight.len();
    let most_in_flight = put.most_in_flight;
    let (size, crc) = put.finish().await.map_err(Some)?;
    tracing::debug!(
        path,
        size,
        parts,
        most_in_flight,
        streamed_ms = ms(ended - started),
        waited_for_pieces_ms = ms(waited_for_pieces),
        copied_or_waited_for_parts_ms = ms(waited_for_parts),
        finish_ms = ms(ended.elapsed()),
        "state file written"
    );
    Ok((name, size, crc, path))
}

/// `d` in milliseconds, to the microsecond (for logs).
fn ms(d: Duration) -> f64 {
    d.as_secs_f64() * 1000.0
}

/// Bytes of each of the first 5,000 parts of a state file streamed to S3 (all of a file up to
/// 39 GiB) but the last: one S3 multipart part (8 MiB), exactly; later parts are larger
/// ([`STATE_FILE_PARTS`]; a local directory's parts are 1 MiB,
/// [`part_schedule::LOCAL_FILE_PARTS`]). A part's buffer is allocated at this size and never
/// grows (a piece that does not fit is split across two parts). It stays below mimalloc's huge-object size (16 MiB): a
/// huge block freed on another thread than the one that allocated it (the upload frees what
/// the encoder's thread filled) is only reset (`MADV_FREE`), staying in the process's RSS
/// until the kernel needs the memory, and each new part took fresh memory (measured: 16 MiB
/// parts that grew to 36 MiB left 100–230 MiB of such pages during full disk checkpoints at
/// 5M keys; docs/runtime/state-backends-log.md).
pub const STATE_PART_SIZE: usize = MULTIPART_PART_SIZE;
const _: () = assert!(STATE_FILE_PARTS.first_part_size == STATE_PART_SIZE);

/// Parts of one state file uploading to S3 at once while the next one fills: S3 takes parts
/// concurrently (one connection each). Memory holds this many parts plus the one filling:
/// 40 MiB. Fewer once parts grow past 8 MiB ([`PartSchedule::parts_in_flight`]). The local
/// store writes each part at its offset without an `fsync`, four 1 MiB parts at once
/// ([`part_schedule::LOCAL_FILE_PARTS`]).
pub const PARTS_IN_FLIGHT: usize = STATE_FILE_PARTS.bytes_in_flight / STATE_PART_SIZE;

/// A part being uploaded in the background: its number, its bytes (the buffer is reused for a
/// later part once the upload let go of it) and the task returning its token.
type PartInFlight = (i32, bytes::Bytes, tokio::task::JoinHandle<Result<String, StorageError>>);

/// One object written from pieces: buffered until a part's worth (its size from the
/// [`PartSchedule`], parts cut at exactly that size), then a multipart upload; a single `put`
/// if it ends before the first part is full. Full parts upload in the background ([`ObjectStore::upload_part_at`],
/// up to [`PARTS_IN_FLIGHT`] at once) while the next one fills, so encoding and upload overlap
/// instead of taking turns; parts are recorded in number order as each finishes (the oldest
/// is awaited first), whatever order they finish in. Keeps the object's size and CRC-32.
///
/// [`ObjectStore::upload_part_at`]: crate::storage::ObjectStore::upload_part_at
struct StreamingPut {
    store: Store,
    path: String,
    buffer: Vec<u8>,
    /// The multipart upload once the first part is full; its `parts` are the finished ones.
    upload: Option<MultipartUpload>,
    /// Parts uploading, oldest first.
    in_flight: std::collections::VecDeque<PartInFlight>,
    /// A finished part's buffer, for the next part: fresh memory costs the kernel's zeroing
    /// of its pages, more than the copy into it.
    spare: Option<Vec<u8>>,
    /// Bytes handed to parts so far (the next part's offset).
    parted: u64,
    crc: crc32fast::Hasher,
    size: u64,
    /// The largest capacity the part buffer had, bytes (at most the part's size; tests).
    largest_buffer: usize,
    /// The most parts that were uploading at once (tests).
    most_in_flight: usize,
    /// Each part's size and the parts uploading at once (tests make parts small).
    schedule: PartSchedule,
}

impl StreamingPut {
    /// A put of `path` to `store`, cut into the parts of the store's schedule
    /// ([`part_schedule::for_store`]).
    fn new(store: Store, path: String) -> StreamingPut {
        let schedule = part_schedule::for_store(store.parts_are_local_writes());
        StreamingPut {
            store,
            path,
            buffer: Vec::new(),
            upload: None,
            in_flight: Default::default(),
            spare: None,
            parted: 0,
            crc: crc32fast::Hasher::new(),
            size: 0,
            largest_buffer: 0,
            most_in_flight: 0,
            schedule,
        }
    }

    /// The number of the next part to cut (from 1): the parts finished and in flight, plus one.
    fn next_part_number(&self) -> u32 {
        let recorded = self.upload.as_ref().map_or(0, |upload| upload.parts.len());
        (recorded + self.in_flight.len() + 1) as u32
    }

    /// Bytes of the part being filled. Errors: the file needs more parts than the schedule
    /// allows (the multipart upload would be refused there).
    fn filling_part_size(&self) -> Result<usize, StorageError> {
        let number = self.next_part_number();
        self.schedule.part_size(number).ok_or_else(|| StorageError::Io {
            path: self.store.url(&self.path),
            source: std::io::Error::other(format!(
                "a state file holds at most {} ({} multipart parts); this one \
                 passed it: raise the job's parallelism so each subtask holds less keyed state",
                crate::checkpoint::part_schedule::bytes_for_people(self.schedule.largest_file()),
                self.schedule.most_parts
            )),
        })
    }

    /// Appends `bytes`; each time the buffer holds exactly a part's size, starts uploading it
    /// as the next part (after the oldest part in flight finished, when as many as the
    /// schedule allows for that size are). Errors: a part's upload failed, or the file passed
    /// the most bytes the schedule's parts hold.
    async fn write(&mut self, bytes: &[u8]) -> Result<(), StorageError> {
        self.crc.update(bytes);
        self.size += bytes.len() as u64;
        let mut rest = bytes;
        while !rest.is_empty() {
            let part_size = self.filling_part_size()?;
            if self.buffer.capacity() == 0 {
                self.buffer = match self.spare.take() {
                    Some(spare) if spare.capacity() == part_size => spare,
                    _ => Vec::with_capacity(part_size),
                };
            }
            let take = rest.len().min(part_size - self.buffer.len());
            self.buffer.extend_from_slice(&rest[..take]);
            rest = &rest[take..];
            self.largest_buffer = self.largest_buffer.max(self.buffer.capacity());
            if self.buffer.len() == part_size {
                let part = bytes::Bytes::from(std::mem::take(&mut self.buffer));
                self.start_part(part).await?;
            }
        }
        Ok(())
    }

    /// Starts uploading `part` as the next part, once fewer are in flight than the schedule
    /// allows for its size.
    async fn start_part(&mut self, part: bytes::Bytes) -> Result<(), StorageError> {
        let parts_in_flight = self.schedule.parts_in_flight(part.len());
        while self.in_flight.len() >= parts_in_flight {
            self.settle_oldest().await?;
        }
        if self.upload.is_none() {
            self.upload = Some(self.store.create_multipart(&self.path).await?);
        }
        let number = self.next_part_number() as i32;
        let upload = self.upload.as_ref().expect("created above");
        let (store, offset, len) = (self.store.clone(), self.parted, part.len() as u64);
        // The part needs the upload's path and id, not its parts so far.
        let target = MultipartUpload {
            parts: vec![],
            ..upload.clone()
        };
        let kept = part.clone();
        let task = tokio::spawn(async move { store.upload_part_at(&target, number, offset, part).await });
        self.in_flight.push_back((number, kept, task));
        self.parted += len;
        self.most_in_flight = self.most_in_flight.max(self.in_flight.len());
        Ok(())
    }

    /// Waits for the oldest part in flight and records it. Errors: its upload failed.
    async fn settle_oldest(&mut self) -> Result<(), StorageError> {
        let Some((number, part, task)) = self.in_flight.pop_front() else {
            return Ok(());
        };
        let token = task.await.map_err(|e| StorageError::Io {
            path: self.store.url(&self.path),
            source: std::io::Error::other(crate::exec::panics::join_failure("the part upload", e)),
        })??;
        // The upload is done with the part: its buffer is ours alone again (unless the store
        // kept a reference); reused when the next part has its size (checked where it is).
        if let Ok(buffer) = part.try_into_mut().map(Vec::from)
            && buffer.capacity() == buffer.len()
        {
            let mut buffer = buffer;
            buffer.clear();
            self.spare = Some(buffer);
        }
        let upload = self.upload.as_mut().expect("a part in flight has its upload");
        upload.parts.push((number, token));
        Ok(())
    }

    /// Writes what is left and makes the object visible; returns its size and CRC-32.
    async fn finish(mut self) -> Result<(u64, u32), TaskError> {
        let rest = bytes::Bytes::from(std::mem::take(&mut self.buffer));
        let result = if self.upload.is_none() {
            self.store.put(&self.path, rest).await
        } else {
            self.finish_multipart(rest).await
        };
        if let Err(e) = result {
            self.abort().await;
            return Err(e.into());
        }
        Ok((self.size, self.crc.finalize()))
    }

    /// The last part (`rest`, if any), every part in flight recorded, then the completion.
    async fn finish_multipart(&mut self, rest: bytes::Bytes) -> Result<(), StorageError> {
        if !rest.is_empty() {
            self.start_part(rest).await?;
        }
        while !self.in_flight.is_empty() {
            self.settle_oldest().await?;
        }
        let upload = self.upload.as_ref().expect("a multipart upload");
        self.store.complete_multipart(upload).await
    }

    /// Abandons a multipart upload in progress, after its parts in flight (best effort: an
    /// orphaned part is invisible and S3 lifecycle rules or the local store's next run remove
    /// it).
    async fn abort(&mut self) {
        for (_, _, task) in std::mem::take(&mut self.in_flight) {
            let _ = task.await;
        }
        if let Some(upload) = self.upload.take() {
            let _ = self.store.abort_multipart(&upload).await;
        }
    }
}

/// Bytes read from a local file at a time by [`upload_file`]: 1 MiB.
pub const FILE_READ_BYTES: usize = 1 << 20;

/// Uploads the local file `local` to `path` in `store` while reading it, [`FILE_READ_BYTES`]
/// at a time, through [`StreamingPut`] (one `put` for a file smaller than a part, else parts
/// of the store's [`PartSchedule`], [`part_schedule::for_store`]): memory holds the part being
/// filled and the parts in flight, at most the schedule's bytes in flight plus a part (S3:
/// 40 MiB; a local directory: 5 MiB), never the whole file. Returns the object's size in
/// bytes and its CRC-32. Errors: the file cannot be read (naming it), or storage fails (a
/// multipart upload begun is aborted).
pub(crate) async fn upload_file(store: &Store, path: &str, local: &std::path::Path) -> Result<(u64, u32), TaskError> {
    use tokio::io::AsyncReadExt;
    let cannot_read = |e: std::io::Error| TaskError(format!("cannot read {} to upload it: {e}", local.display()));
    let mut file = tokio::fs::File::open(local).await.map_err(cannot_read)?;
    let mut put = StreamingPut::new(store.clone(), path.to_string());
    let mut buffer = vec![0u8; FILE_READ_BYTES];
    loop {
        let read = match file.read(&mut buffer).await {
            Ok(0) => break,
            Ok(read) => read,
            Err(e) => {
                put.abort().await;
                return Err(cannot_read(e));
            }
        };
        if let Err(e) = put.write(&buffer[..read]).await {
            put.abort().await;
            return Err(e.into());
        }
    }
    put.finish().await
}

#[cfg(test)]
#[path = "state_upload_tests.rs"]
mod tests;
