//! The wire protocol of the distributed runtime: length-delimited frames (a 4-byte big-endian
//! length, then a JSON body, or for record batches the binary form of [`record_codec`]), over
//! one TCP connection per worker for control (RPC) and one per remote channel between
//! subtasks for data.
//!
//! [`record_codec`]: super::record_codec
//!
//! RPC, worker → coordinator: [`ToCoordinator`]; coordinator → worker: [`ToWorker`]. Data,
//! upstream worker → downstream worker: [`DataFrame`] (`Hello` first, then records, barriers
//! and end-of-stream in band); downstream → upstream: `Credit` frames (credit-based flow
//! control: the sender sends one frame per credit; the receiver grants a credit each time it
//! has handed a frame to the subtask's bounded input channel). With unaligned checkpoints,
//! `PriorityBarrier` frames overtake the queued frames and need no credit.

use crate::checkpoint::{Ack, Barrier, SnapshotTarget};
use crate::control::api::SnapshotKind;
use crate::exec::messages::{Control, TaskEvent};
use crate::record::Record;
use crate::storage::{self, S3Options, Store};
use futures::{SinkExt, StreamExt};
use serde::{Deserialize, Serialize};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use tokio::net::TcpStream;
use tokio_util::codec::{Framed, LengthDelimitedCodec};

/// Largest frame accepted (64 MiB).
pub const MAX_FRAME: usize = 64 * 1024 * 1024;

/// A framed connection.
pub type Conn = Framed<TcpStream, LengthDelimitedCodec>;

/// Wraps a TCP stream in the frame codec.
pub fn framed(stream: TcpStream) -> Conn {
    let _ = stream.set_nodelay(true);
    Framed::new(
        stream,
        LengthDelimitedCodec::builder().max_frame_length(MAX_FRAME).new_codec(),
    )
}

/// Sends one message.
pub async fn send<T: Serialize>(conn: &mut Conn, msg: &T) -> Result<(), String> {
    let body = serde_json::to_vec(msg).map_err(|e| e.to_string())?;
    conn.send(bytes::Bytes::from(body))
        .await
        .map_err(|e| format!("send failed: {e}"))
}

/// Sends one already encoded frame.
pub async fn send_frame(conn: &mut Conn, frame: bytes::Bytes) -> Result<(), String> {
    conn.send(frame).await.map_err(|e| format!("send failed: {e}"))
}

/// A record too large for one frame (see [`encode_records`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OversizeRecord {
    /// Bytes of the frame holding only this record.
    pub frame_bytes: usize,
    /// The frame size limit it exceeds.
    pub limit: usize,
}

/// Encodes a batch as binary record frames ([`record_codec`](super::record_codec)) of at
/// most `limit` bytes each, splitting it (order kept) where it does not fit in one. Errors: a
/// record whose frame alone exceeds `limit` (records are not streamed across frames).
pub fn encode_records(batch: &[Record], limit: usize) -> Result<Vec<bytes::Bytes>, OversizeRecord> {
    let mut frames = Vec::with_capacity(1);
    encode_records_into(batch, limit, &mut frames)?;
    Ok(frames)
}

fn encode_records_into(batch: &[Record], limit: usize, frames: &mut Vec<bytes::Bytes>) -> Result<(), OversizeRecord> {
    let body = super::record_codec::encode(batch);
    if body.len() <= limit {
        frames.push(bytes::Bytes::from(body));
        return Ok(());
    }
    if batch.len() <= 1 {
        return Err(OversizeRecord {
            frame_bytes: body.len(),
            limit,
        });
    }
    let (a, b) = batch.split_at(batch.len() / 2);
    encode_records_into(a, limit, frames)?;
    encode_records_into(b, limit, frames)
}

/// Receives one data connection frame: a binary record batch as [`DataFrame::Records`], any
/// other frame as JSON. `Ok(None)` when the peer closed the connection.
pub async fn recv_data(conn: &mut Conn) -> Result<Option<DataFrame>, String> {
    match conn.next().await {
        None => Ok(None),
        Some(Err(e)) => Err(format!("receive failed: {e}")),
        Some(Ok(bytes)) => decode_data_frame(&bytes).map(Some),
    }
}

/// Decodes one data connection frame (see [`recv_data`]).
pub fn decode_data_frame(bytes: &[u8]) -> Result<DataFrame, String> {
    if bytes.first() == Some(&super::record_codec::MAGIC) {
        return super::record_codec::decode(bytes)
            .map(DataFrame::Records)
            .map_err(|e| format!("undecodable record batch: {e}"));
    }
    serde_json::from_slice(bytes).map_err(|e| format!("undecodable frame: {e}"))
}

/// Receives one message; `Ok(None)` when the peer closed the connection.
pub async fn recv<T: for<'de> Deserialize<'de>>(conn: &mut Conn) -> Result<Option<T>, String> {
    match conn.next().await {
        None => Ok(None),
        Some(Err(e)) => Err(format!("receive failed: {e}")),
        Some(Ok(bytes)) => serde_json::from_slice(&bytes)
            .map(Some)
            .map_err(|e| format!("undecodable frame: {e}")),
    }
}

/// A barrier on the wire: the snapshot target travels as a store URL plus a directory.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct WireBarrier {
    /// Checkpoint id.
    pub id: u64,
    /// Checkpoint or savepoint.
    pub kind: SnapshotKind,
    /// Stop-with-savepoint.
    pub stop: bool,
    /// Root URL of the target store.
    pub store_url: String,
    /// Directory inside it.
    pub dir: String,
    /// Trigger time, ms since the Unix epoch.
    pub triggered_at_ms: u64,
    /// [`Barrier::incremental`]: absent for `None` (not incremental), `null` for `Some(None)`
    /// (incremental, no base: the checkpoint starts a new one), the id for `Some(Some(id))`.
    /// Serde's default read both `null` and an absent field as `None`, so a worker took every
    /// checkpoint without a base (the first of an attempt) as a full,
    /// self-contained one.
    #[serde(
        default,
        skip_serializing_if = "Option::is_none",
        deserialize_with = "present_option"
    )]
    pub incremental: Option<Option<u64>>,
    /// [`Barrier::is_final`]: the final checkpoint of a bounded job, always taken aligned
    /// (absent in frames of releases without unaligned checkpoints on workers: `false`).
    #[serde(default)]
    pub is_final: bool,
}

/// A field that is present (`null` included) is `Some`: with `#[serde(default)]` an absent one
/// is `None`, so an `Option<Option<T>>` keeps its three states on the wire.
fn present_option<'de, D, T>(deserializer: D) -> Result<Option<Option<T>>, D::Error>
where
    D: serde::Deserializer<'de>,
    T: Deserialize<'de>,
{
    Option::<T>::deserialize(deserializer).map(Some)
}

impl WireBarrier {
    /// The wire form of a barrier.
    pub fn from_barrier(b: &Barrier) -> WireBarrier {
        WireBarrier {
            id: b.id,
            kind: b.kind,
            stop: b.stop,
            store_url: b.target.store.url(""),
            dir: b.target.dir.clone(),
            triggered_at_ms: b.triggered_at_ms,
            incremental: b.incremental,
            is_final: b.is_final,
        }
    }
}

/// Opens target stores by URL, once per URL.
#[derive(Clone, Default)]
pub struct StoreCache {
    s3: S3Options,
    stores: Arc<Mutex<HashMap<String, Store>>>,
}

impl StoreCache {
    /// A cache using `s3` settings.
    pub fn new(s3: S3Options) -> StoreCache {
        StoreCache {
            s3,
            stores: Arc::default(),
        }
    }

    /// Rebuilds a barrier, opening its store if needed.
    pub async fn barrier(&self, w: &WireBarrier) -> Result<Barrier, String> {
        let cached = self.stores.lock().expect("lock").get(&w.store_url).cloned();
        let store = match cached {
            Some(s) => s,
            None => {
                let s = storage::open(&w.store_url, &self.s3).await.map_err(|e| e.to_string())?;
                self.stores.lock().expect("lock").insert(w.store_url.clone(), s.clone());
                s
            }
        };
        Ok(Barrier {
            id: w.id,
            kind: w.kind,
            stop: w.stop,
            target: Arc::new(SnapshotTarget {
                store,
                dir: w.dir.clone(),
            }),
            triggered_at_ms: w.triggered_at_ms,
            is_final: w.is_final,
            incremental: w.incremental,
        })
    }
}

/// Coordinator → subtask control, on the wire.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub enum WireControl {
    /// Inject a barrier (sources).
    Trigger(WireBarrier),
    /// Checkpoint complete: commit.
    Complete(u64),
    /// Resume after a failed stop-with-savepoint.
    Resume,
    /// Stop reading (sources; the job is suspending).
    Pause,
    /// End the input (sources).
    Finish,
    /// Exit.
    Shutdown,
}

impl WireControl {
    /// The wire form of a control message.
    pub fn from_control(c: &Control) -> WireControl {
        match c {
            Control::Trigger(b) => WireControl::Trigger(WireBarrier::from_barrier(b)),
            Control::Complete(id) => WireControl::Complete(*id),
            Control::Resume => WireControl::Resume,
            Control::Pause => WireControl::Pause,
            Control::Finish => WireControl::Finish,
            Control::Shutdown => WireControl::Shutdown,
        }
    }

    /// Back to a control message.
    pub async fn into_control(self, stores: &StoreCache) -> Result<Control, String> {
        Ok(match self {
            WireControl::Trigger(w) => Control::Trigger(stores.barrier(&w).await?),
            WireControl::Complete(id) => Control::Complete(id),
            WireControl::Resume => Control::Resume,
            WireControl::Pause => Control::Pause,
            WireControl::Finish => Control::Finish,
            WireControl::Shutdown => Control::Shutdown,
        })
    }
}

/// Subtask → coordinator events, on the wire.
#[derive(Debug, Clone, Serialize, Deserialize)]
// An acknowledgement (a few per checkpoint) is the large variant; boxing it would buy nothing.
#[allow(clippy::large_enum_variant)]
pub enum WireEvent {
    /// Snapshot acknowledged.
    Ack(Ack),
    /// Snapshot declined.
    Declined {
        /// Checkpoint id.
        checkpoint_id: u64,
        /// Task index.
        task: usize,
        /// Why.
        reason: String,
    },
    /// Source read everything.
    SourceExhausted(usize),
    /// Subtask forwarded end-of-stream.
    Ended(usize),
    /// Subtask failed.
    Failed(usize, String),
    /// The worker could not deploy its subtasks of the attempt: a failure of the attempt (of
    /// task `usize::MAX`), which a `permanent` one FAILS at once (`Registry::relay`).
    DeployFailed {
        /// What failed, leading with the worker (`worker w1 could not deploy attempt 1.1: ...`).
        error: String,
        /// Deploying again cannot help ([`super::failure::DeploymentError::permanent`]).
        permanent: bool,
    },
}

impl From<TaskEvent> for WireEvent {
    fn from(e: TaskEvent) -> Self {
        match e {
            TaskEvent::Ack(a) => WireEvent::Ack(a),
            TaskEvent::Declined {
                checkpoint_id,
                task,
                reason,
            } => WireEvent::Declined {
                checkpoint_id,
                task,
                reason,
            },
            TaskEvent::SourceExhausted { task } => WireEvent::SourceExhausted(task),
            TaskEvent::Ended { task } => WireEvent::Ended(task),
            TaskEvent::Failed { task, error } => WireEvent::Failed(task, error),
        }
    }
}

impl From<WireEvent> for TaskEvent {
    fn from(e: WireEvent) -> Self {
        match e {
            WireEvent::Ack(a) => TaskEvent::Ack(a),
            WireEvent::Declined {
                checkpoint_id,
                task,
                reason,
            } => TaskEvent::Declined {
                checkpoint_id,
                task,
                reason,
            },
            WireEvent::SourceExhausted(task) => TaskEvent::SourceExhausted { task },
            WireEvent::Ended(task) => TaskEvent::Ended { task },
            WireEvent::Failed(task, error) => TaskEvent::Failed { task, error },
            WireEvent::DeployFailed { error, .. } => TaskEvent::Failed {
                task: usize::MAX,
                error,
            },
        }
    }
}

/// Per-task counters reported in heartbeats: (task, records in, records out, backpressured ns).
pub type TaskCounters = Vec<(usize, u64, u64, u64)>;

/// Worker → coordinator.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ToCoordinator {
    /// First message: who the worker is. `running_attempt` is the attempt whose subtasks it
    /// still runs (after a reconnect); a stale one is refused.
    Register {
        /// Stable worker id (pod name).
        worker_id: String,
        /// Task slots offered.
        slots: u32,
        /// Address other workers reach its data listener at.
        data_addr: String,
        /// Attempt of the subtasks it still runs, if any.
        running_attempt: Option<u64>,
    },
    /// Liveness plus counters.
    Heartbeat {
        /// Counters of running subtasks.
        counters: TaskCounters,
    },
    /// The worker leaves (SIGTERM): the coordinator treats it as lost at once, with `reason`.
    Leaving {
        /// Why, for the failure message (`it left on SIGTERM`).
        reason: String,
    },
    /// A subtask event of `attempt`.
    Event {
        /// The deployment attempt the subtask belongs to.
        attempt: u64,
        /// The event.
        event: WireEvent,
    },
}

/// The id of attempt `number` (1, 2, ...) of the coordinator holding `epoch`: the epoch in
/// the high 32 bits, the number in the low 32, so ids grow across coordinators too. A
/// restarted coordinator numbers its attempts from 1 again; with bare numbers its attempt 1
/// looked stale to a worker that had run attempt 3 of the previous coordinator (its data
/// channels were refused for good), or equal to the old attempt 1 (a connection for the new
/// attempt was handed to the cancelled old subtask): either way the job hung (soak trials
/// cluster 1100039 and 1100046).
pub fn attempt_id(epoch: u64, number: u64) -> u64 {
    (epoch << 32) | (number & 0xffff_ffff)
}

/// How an attempt id reads in messages: `<epoch>.<number>` (`2.1`), or the bare number for
/// ids without an epoch.
pub fn attempt_label(id: u64) -> String {
    match id >> 32 {
        0 => id.to_string(),
        epoch => format!("{epoch}.{}", id & 0xffff_ffff),
    }
}

/// The subtasks a worker runs for one attempt.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Deployment {
    /// Attempt id ([`attempt_id`]): fences everything from older attempts, of this coordinator
    /// and of earlier ones.
    pub attempt: u64,
    /// The StreamJob manifest (YAML).
    pub manifest: String,
    /// URL of the restore point directory, already resolved and verified by the coordinator.
    pub restore: Option<String>,
    /// Run id (names sink parts; unique per attempt).
    pub run_id: String,
    /// Task indexes this worker runs.
    pub tasks: Vec<usize>,
    /// Data address of the worker running each task, by task index.
    pub locations: Vec<String>,
    /// At-most-once: where source subtasks record how far they have read, and the positions
    /// already recorded ([`crate::checkpoint::read_positions`]); `None` in the other modes.
    #[serde(default)]
    pub read_positions: Option<DeployedReadPositions>,
}

/// The read-position log of an at-most-once attempt, as the coordinator resolved it
/// ([`crate::checkpoint::read_positions::for_cluster_attempt`]).
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct DeployedReadPositions {
    /// URL of the checkpoint store the log lives in (the root, as in [`WireBarrier`]).
    pub store_url: String,
    /// The log directory source subtasks of this attempt write, relative to the store.
    pub dir: String,
    /// Positions recorded by earlier attempts (and, after `--restore latest`, by the restored
    /// snapshot's run), by source uid: each a split position as the source's snapshot encodes
    /// it, several per split possible; the source resumes each split at the furthest one.
    pub furthest: HashMap<String, Vec<Vec<u8>>>,
}

/// Coordinator → worker.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum ToWorker {
    /// Registration accepted.
    Registered,
    /// Registration refused (stale attempt, ...): the worker must cancel its subtasks.
    Refused {
        /// Why.
        reason: String,
    },
    /// Run these subtasks.
    Deploy(Box<Deployment>),
    /// Control message for one subtask of `attempt`.
    Control {
        /// Attempt.
        attempt: u64,
        /// Task index.
        task: usize,
        /// The message.
        control: WireControl,
    },
    /// Cancel every subtask of `attempt`.
    Cancel {
        /// Attempt.
        attempt: u64,
    },
    /// Liveness.
    Heartbeat,
    /// The job reached a terminal state and the coordinator exits (`--exit-on-finish`):
    /// workers exit too, with 0 unless the job failed.
    JobEnded {
        /// Whether the job failed.
        failed: bool,
    },
}

/// Data connection frames.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub enum DataFrame {
    /// First frame from the upstream side: which channel this is.
    Hello {
        /// Attempt.
        attempt: u64,
        /// Upstream task index.
        up: usize,
        /// Downstream task index.
        down: usize,
    },
    /// A batch of records.
    Records(Vec<Record>),
    /// A barrier, in band: it follows every record the upstream subtask sent before it.
    Barrier(WireBarrier),
    /// Unaligned checkpoints: a barrier on the downstream subtask's *priority lane*
    /// ([`crate::exec::lanes`]). The upstream side sends it at once, ahead of the records
    /// waiting in its channel or for credits, and without a credit; the downstream side reads
    /// it while it waits to hand earlier frames to the subtask, and passes it to the lane. The
    /// same barrier follows in band (`Barrier`).
    PriorityBarrier(WireBarrier),
    /// End of stream.
    End,
    /// Downstream grants this many more frames.
    Credit(u32),
    /// Downstream refuses the channel (stale attempt, or not deployed yet: retry).
    Refused {
        /// Why.
        reason: String,
        /// Whether retrying may succeed.
        retry: bool,
    },
    /// An event-time watermark or idleness mark, in band with the records.
    Watermark(crate::exec::watermark::Watermark),
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn records(sizes: &[usize]) -> Vec<Record> {
        sizes
            .iter()
            .enumerate()
            .map(|(i, n)| Record {
                row: crate::record::Row::from_json(json!({ "i": i, "s": "x".repeat(*n) })),
                keyed: None,
            })
            .collect()
    }

    fn decode(frames: &[bytes::Bytes]) -> Vec<Record> {
        frames
            .iter()
            .flat_map(|f| match decode_data_frame(f).unwrap() {
                DataFrame::Records(r) => r,
                other => panic!("not a records frame: {other:?}"),
            })
            .collect()
    }

    /// Every state of `incremental` arrives as sent: not incremental, incremental without a
    /// base (a new base), a delta over a confirmed checkpoint.
    #[test]
    fn a_barriers_incremental_base_survives_the_wire() {
        for incremental in [None, Some(None), Some(Some(7))] {
            let barrier = WireBarrier {
                id: 8,
                kind: SnapshotKind::Checkpoint,
                stop: false,
                store_url: "file:///checkpoints".into(),
                dir: "job/chk-8".into(),
                triggered_at_ms: 1,
                incremental,
                is_final: false,
            };
            let json = serde_json::to_string(&barrier).unwrap();
            let back: WireBarrier = serde_json::from_str(&json).unwrap();
            assert_eq!(back.incremental, incremental, "{json}");
        }
    }

    #[test]
    fn control_frames_stay_json_on_the_data_connection() {
        let frame = serde_json::to_vec(&DataFrame::Credit(3)).unwrap();
        assert!(matches!(decode_data_frame(&frame), Ok(DataFrame::Credit(3))));
        assert!(decode_data_frame(b"garbage").is_err());
    }

    #[test]
    fn a_batch_that_fits_is_one_frame_that_decodes_as_records() {
        let batch = records(&[10, 20, 30]);
        let frames = encode_records(&batch, 1000).unwrap();
        assert_eq!(frames.len(), 1);
        assert_eq!(decode(&frames), batch);
    }

    #[test]
    fn a_batch_too_large_for_one_frame_is_split_in_order_within_the_limit() {
        let batch = records(&[300, 300, 300, 300, 300, 10]);
        let frames = encode_records(&batch, 700).unwrap();
        assert!(frames.len() >= 3, "{} frames", frames.len());
        assert!(frames.iter().all(|f| f.len() <= 700));
        assert_eq!(decode(&frames), batch);
    }

    #[test]
    fn a_record_larger_than_the_limit_is_rejected_with_its_size() {
        let batch = records(&[10, 2000, 10]);
        let err = encode_records(&batch, 700).unwrap_err();
        assert_eq!(err.limit, 700);
        assert!(err.frame_bytes > 2000 && err.frame_bytes < 2100, "{err:?}");
    }

    /// Attempt ids order by coordinator epoch first: attempt 1 of a restarted coordinator is
    /// newer than any attempt of the one before (bare numbers hung the job, see
    /// [`attempt_id`]), and within a coordinator by number.
    #[test]
    fn attempt_ids_grow_across_coordinators() {
        let ordered = [
            attempt_id(1, 1),
            attempt_id(1, 3),
            attempt_id(1, 0xffff_ffff),
            attempt_id(2, 1),
            attempt_id(2, 2),
            attempt_id(7, 1),
        ];
        assert!(ordered.windows(2).all(|w| w[0] < w[1]), "{ordered:?}");
        let labels: Vec<String> = [attempt_id(2, 1), attempt_id(1, 3), 0, 5]
            .into_iter()
            .map(attempt_label)
            .collect();
        assert_eq!(labels, ["2.1", "1.3", "0", "5"]);
    }
}
