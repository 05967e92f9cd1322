//! On-storage formats of state files and `_metadata`, each versioned and checksummed so a
//! corrupt or truncated file is detected and reported with its path, never loaded silently.
//!
//! State file (`<uid>-<subtask>.state`), two versions, both read by this build:
//! - version 1: the 8-byte magic `WEIRSTAT`, the u16 version, the CRC-32 (IEEE) of the body as
//!   u32, the body length as u64 (all little-endian), then the body: a postcard-encoded
//!   [`StateFile`]. Written by [`encode_state_file`] (channel state, read-position logs) and
//!   by every release before streamed snapshots.
//! - version 2 (streamed, [`StreamedStateFile`]): the magic, the u16 version, the body, then a
//!   trailer: the body's CRC-32 as u32 and its length as u64. The body is the postcard
//!   encoding of the head `(uid, subtask, operator_state)` followed by zero or more
//!   postcard-encoded [`KeyGroupBlock`]s up to the trailer. The checksum and the length come
//!   last so an operator's state can be uploaded while later key groups are still being
//!   encoded. A release that reads only version 1 refuses it naming the version.
//!
//! `_metadata`: one header line `WEIR-METADATA v<version> crc32=<8 hex> len=<body bytes>`,
//! then the body: the JSON [`CheckpointMetadata`] (human-readable on purpose).

use crate::control::api::SnapshotKind;
use crate::state::key_group::KeyGroupRange;
use serde::{Deserialize, Serialize};

/// Version of `_metadata`, and of state files written whole ([`encode_state_file`]).
pub const FORMAT_VERSION: u16 = 1;
/// Version of state files written as a stream ([`StreamedStateFile`]).
pub const STREAMED_FORMAT_VERSION: u16 = 2;
const STATE_MAGIC: &[u8; 8] = b"WEIRSTAT";
const STATE_HEADER: usize = 8 + 2 + 4 + 8;
/// Magic and version: what a streamed state file starts with.
const STREAMED_PREAMBLE: usize = 8 + 2;
/// Checksum and length: what a streamed state file ends with.
const STREAMED_TRAILER: usize = 4 + 8;

/// A format error, always naming the file.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{path}: {problem}")]
pub struct FormatError {
    /// URL of the file.
    pub path: String,
    /// What is wrong (checksum mismatch, truncated, unknown version, ...).
    pub problem: String,
    /// Which kind of fault `problem` is: what the reader can do about it.
    pub fault: FormatFault,
}

/// The kind of a [`FormatError`]: damage is repaired by putting the file back from a copy;
/// the others are not damage and say what to do themselves.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FormatFault {
    /// The file's bytes: a checksum or size mismatch, a truncation, bytes that do not decode,
    /// a file that is not what its place says.
    Damage,
    /// A format version this build does not read (written by a newer Weir).
    UnsupportedVersion,
    /// A `_metadata` that references a file outside the store (an incremental checkpoint
    /// moved away from its checkpoint directory).
    OutsideStore,
}

/// One key group's entries, postcard-encoded by the operator that owns them.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct KeyGroupBlock {
    /// The key group.
    pub key_group: u32,
    /// Number of entries.
    pub entries: u64,
    /// Encoded entries. Shared, not copied, by clones: a restored block is a slice of the
    /// state file it was read from ([`decode_state_file_shared`]), handed to every subtask
    /// that owns its key group without copying its bytes (`Vec<u8>` converts with `.into()`,
    /// no copy either).
    #[serde(with = "shared_bytes")]
    pub data: bytes::Bytes,
    /// Restore only (never written to a file): every entry last written at or before this
    /// time (ms since the Unix epoch) had expired under the step's `ttl` when the snapshot
    /// that holds the block was taken, so a restore leaves it out whatever the step's `ttl` is
    /// now ([`StateHandle::expired_through_ms`], copied onto the handle's blocks by
    /// `checkpoint/restore.rs`). `None`: no such bound (the block leaves out its expired
    /// entries itself, or its step had no `ttl`).
    #[serde(skip)]
    pub expired_through_ms: Option<u64>,
}

impl KeyGroupBlock {
    /// Whether an entry of this block last written at `written_ms` (`None`: a block without
    /// write times) had expired when the snapshot was taken ([`KeyGroupBlock::expired_through_ms`]).
    pub fn expired_at_snapshot(&self, written_ms: Option<u64>) -> bool {
        matches!((self.expired_through_ms, written_ms), (Some(through), Some(written)) if written <= through)
    }
}

/// Serde for [`KeyGroupBlock::data`]: exactly as a `Vec<u8>` (a sequence of `u8`), so the
/// format is unchanged (postcard: the varint length, then the bytes).
mod shared_bytes {
    use serde::{Deserialize, Deserializer, Serializer};

    pub fn serialize<S: Serializer>(data: &bytes::Bytes, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(data.iter())
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<bytes::Bytes, D::Error> {
        Vec::<u8>::deserialize(deserializer).map(bytes::Bytes::from)
    }
}

/// The body of a state file: one subtask's state of one operator.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StateFile {
    /// Operator uid.
    pub uid: String,
    /// Subtask index that wrote it.
    pub subtask: u32,
    /// Keyed state, by key group (only non-empty groups).
    pub key_groups: Vec<KeyGroupBlock>,
    /// Operator (non-keyed) state items, e.g. source splits or pending sink commits; on
    /// restore the items of all subtasks are pooled and redistributed.
    pub operator_state: Vec<Vec<u8>>,
}

/// Encodes a state file with its header. The body is encoded once, straight after a
/// placeholder header that is then filled in (no second copy of the body).
pub fn encode_state_file(f: &StateFile) -> Vec<u8> {
    let size_hint = STATE_HEADER
        + 64
        + f.key_groups.iter().map(|b| b.data.len() + 24).sum::<usize>()
        + f.operator_state.iter().map(|o| o.len() + 8).sum::<usize>();
    let mut out = Vec::with_capacity(size_hint);
    out.extend_from_slice(STATE_MAGIC);
    out.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
    out.extend_from_slice(&[0; 12]);
    let mut out = postcard::to_extend(f, out).expect("state file encodes");
    let body = &out[STATE_HEADER..];
    let (crc, len) = (crc32fast::hash(body), body.len() as u64);
    out[10..14].copy_from_slice(&crc.to_le_bytes());
    out[14..22].copy_from_slice(&len.to_le_bytes());
    out
}

/// Decodes and verifies a state file. Errors name `path`.
pub fn decode_state_file(path: &str, bytes: &[u8]) -> Result<StateFile, FormatError> {
    decode_state_file_shared(path, bytes::Bytes::copy_from_slice(bytes))
}

/// As [`decode_state_file`], without copying: the keyed blocks of a streamed state file
/// (version 2, what checkpoints write) are slices of `bytes` (the file's buffer lives as long
/// as one of its blocks does); a version-1 file's blocks are decoded into their own buffers.
pub fn decode_state_file_shared(path: &str, bytes: bytes::Bytes) -> Result<StateFile, FormatError> {
    let err = |problem: String| FormatError {
        path: path.to_string(),
        problem,
        fault: FormatFault::Damage,
    };
    if bytes.len() < STATE_HEADER {
        return Err(err(format!(
            "truncated: {} bytes, shorter than the header",
            bytes.len()
        )));
    }
    if &bytes[..8] != STATE_MAGIC {
        return Err(err("not a Weir state file (bad magic)".into()));
    }
    let version = u16::from_le_bytes([bytes[8], bytes[9]]);
    if version == STREAMED_FORMAT_VERSION {
        return decode_streamed(&bytes).map_err(err);
    }
    if version != FORMAT_VERSION {
        return Err(FormatError {
            fault: FormatFault::UnsupportedVersion,
            ..err(format!(
                "unsupported state format version {version} (this build reads {FORMAT_VERSION} and \
                 {STREAMED_FORMAT_VERSION}); restore with the Weir version that wrote it or newer"
            ))
        });
    }
    let crc = u32::from_le_bytes(bytes[10..14].try_into().expect("4 bytes"));
    let len = u64::from_le_bytes(bytes[14..22].try_into().expect("8 bytes"));
    let body = &bytes[STATE_HEADER..];
    if body.len() as u64 != len {
        return Err(err(format!(
            "truncated or padded: body has {} bytes, header says {len}",
            body.len()
        )));
    }
    let actual = crc32fast::hash(body);
    if actual != crc {
        return Err(err(format!(
            "checksum mismatch: crc32 {actual:08x}, expected {crc:08x}"
        )));
    }
    postcard::from_bytes(body).map_err(|e| err(format!("undecodable body: {e}")))
}

/// The head of a streamed state file's body: everything of a [`StateFile`] but its keyed
/// blocks, which follow it one by one.
#[derive(Serialize, Deserialize)]
struct StreamedHead {
    uid: String,
    subtask: u32,
    operator_state: Vec<Vec<u8>>,
}

/// Decodes a streamed state file (version 2; the magic and version are checked); its blocks'
/// data are slices of `bytes`. Errors: the problem (the caller names the file).
fn decode_streamed(bytes: &bytes::Bytes) -> Result<StateFile, String> {
    if bytes.len() < STREAMED_PREAMBLE + STREAMED_TRAILER {
        return Err(format!(
            "truncated: {} bytes, shorter than the header and trailer",
            bytes.len()
        ));
    }
    let (rest, trailer) = bytes.split_at(bytes.len() - STREAMED_TRAILER);
    let body = &rest[STREAMED_PREAMBLE..];
    let crc = u32::from_le_bytes(trailer[..4].try_into().expect("4 bytes"));
    let len = u64::from_le_bytes(trailer[4..].try_into().expect("8 bytes"));
    if body.len() as u64 != len {
        return Err(format!(
            "truncated or padded: body has {} bytes, trailer says {len}",
            body.len()
        ));
    }
    let actual = crc32fast::hash(body);
    if actual != crc {
        return Err(format!("checksum mismatch: crc32 {actual:08x}, expected {crc:08x}"));
    }
    let undecodable = |e: postcard::Error| format!("undecodable body: {e}");
    let (head, mut rest): (StreamedHead, &[u8]) = postcard::take_from_bytes(body).map_err(undecodable)?;
    let mut key_groups = Vec::new();
    while !rest.is_empty() {
        let (block, after) = take_block(bytes, rest).map_err(undecodable)?;
        key_groups.push(block);
        rest = after;
    }
    Ok(StateFile {
        uid: head.uid,
        subtask: head.subtask,
        key_groups,
        operator_state: head.operator_state,
    })
}

/// One postcard-encoded [`KeyGroupBlock`] from the front of `bytes` (a part of `file`), and
/// the bytes after it: the same bytes `postcard::take_from_bytes::<KeyGroupBlock>` reads (key
/// group and entry count as varints, then `data` as its varint length and its bytes), but
/// `data` is not decoded at all: it is the slice of `file` that holds it (serde's `Vec<u8>`
/// decodes byte by byte, which was most of a restore's file decoding time; a copy in one
/// piece was still a copy of all state).
fn take_block<'a>(file: &bytes::Bytes, bytes: &'a [u8]) -> Result<(KeyGroupBlock, &'a [u8]), postcard::Error> {
    let (key_group, rest): (u32, &[u8]) = postcard::take_from_bytes(bytes)?;
    let (entries, rest): (u64, &[u8]) = postcard::take_from_bytes(rest)?;
    let (len, rest): (u64, &[u8]) = postcard::take_from_bytes(rest)?;
    let len = usize::try_from(len).map_err(|_| postcard::Error::DeserializeBadVarint)?;
    if rest.len() < len {
        return Err(postcard::Error::DeserializeUnexpectedEnd);
    }
    let (data, rest) = rest.split_at(len);
    let block = KeyGroupBlock {
        expired_through_ms: None,
        key_group,
        entries,
        data: file.slice_ref(data),
    };
    Ok((block, rest))
}

/// Writes a state file of version 2 as a stream of byte pieces: [`StreamedStateFile::start`],
/// then [`StreamedStateFile::block`] per key group in any number, then
/// [`StreamedStateFile::finish`]; the pieces concatenated are the file. Keeps the body's
/// running checksum and length (no piece is held).
#[derive(Default)]
pub struct StreamedStateFile {
    body_crc: crc32fast::Hasher,
    body_len: u64,
}

impl StreamedStateFile {
    /// The writer and the file's first piece: magic, version and the body's head.
    pub fn start(uid: &str, subtask: u32, operator_state: Vec<Vec<u8>>) -> (StreamedStateFile, Vec<u8>) {
        let mut file = StreamedStateFile::default();
        let head = StreamedHead {
            uid: uid.to_string(),
            subtask,
            operator_state,
        };
        let mut out = STATE_MAGIC.to_vec();
        out.extend_from_slice(&STREAMED_FORMAT_VERSION.to_le_bytes());
        let out = postcard::to_extend(&head, out).expect("a state file head encodes");
        file.body(&out[STREAMED_PREAMBLE..]);
        (file, out)
    }

    /// The pieces of one keyed block: its frame header (key group, entries, data length, as
    /// postcard encodes a [`KeyGroupBlock`]) and its data, which is not copied.
    pub fn block(&mut self, block: &KeyGroupBlock) -> Vec<u8> {
        let mut header = Vec::with_capacity(30);
        for n in [u64::from(block.key_group), block.entries, block.data.len() as u64] {
            push_varint(&mut header, n);
        }
        self.body(&header);
        self.body(&block.data);
        header
    }

    /// The last piece: the body's checksum and length.
    pub fn finish(self) -> Vec<u8> {
        let mut out = Vec::with_capacity(STREAMED_TRAILER);
        out.extend_from_slice(&self.body_crc.finalize().to_le_bytes());
        out.extend_from_slice(&self.body_len.to_le_bytes());
        out
    }

    fn body(&mut self, bytes: &[u8]) {
        self.body_crc.update(bytes);
        self.body_len += bytes.len() as u64;
    }
}

/// Appends `n` as a postcard varint (a sequence's length prefix, every `u32` and `u64`).
pub(crate) fn push_varint(out: &mut Vec<u8>, mut n: u64) {
    while n >= 0x80 {
        out.push((n as u8) | 0x80);
        n >>= 7;
    }
    out.push(n as u8);
}

/// Reference from `_metadata` to one state file.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct StateHandle {
    /// Path relative to the snapshot directory (so savepoints can be moved).
    pub file: String,
    /// Subtask that wrote it.
    pub subtask: u32,
    /// Key groups it covers, for keyed state (restore reads only overlapping files).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub key_group_range: Option<KeyGroupRange>,
    /// File size in bytes.
    pub size: u64,
    /// CRC-32 of the whole file.
    pub crc32: u32,
    /// Entries: keys for keyed state, items for operator state.
    pub entries: u64,
    /// Operator state items in `file` (what every subtask's restore pools, whatever key
    /// groups it owns). `Some(0)`: the file holds keyed state only, so a process none of
    /// whose subtasks owns a key group of `key_group_range` does not read it
    /// (`checkpoint/restore.rs`, `files_to_read`). `None` (`_metadata` written before
    /// 2026-12-05): unknown, the file is read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub operator_items: Option<u64>,
    /// Incremental checkpoints only: the state files this subtask's keyed state is made of,
    /// oldest first: a full base, then deltas to apply in order (the last one is `file`,
    /// which also holds the operator state). Paths are relative to the snapshot directory
    /// and point into the job's shared directory (`../shared/<file>`), so several
    /// checkpoints share them. Empty for a self-contained handle (every savepoint).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub chain: Vec<ChainLink>,
    /// Native incremental checkpoints of the disk backend only (`state/disk_native.rs`): the
    /// files of the subtask's RocksDB store as of the barrier, which hold its keyed state
    /// (then `file`, the handle's own state file, holds no keyed block, only operator state).
    /// `None` for every other handle (every savepoint).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub native: Option<NativeFiles>,
    /// For a step with a `ttl`, in a handle whose keyed state may hold entries that had
    /// expired when it was written (a chain with deltas, whose base keeps the keys cleaned up
    /// since, and native files, which keep every key until it is read or cleaned up): the
    /// snapshot's time minus the `ttl` (ms since the Unix epoch). Every entry last written at
    /// or before it was expired then (`lastWrite + ttl <= snapshot time`, Flink's
    /// `TtlUtils.expired`), so a restore leaves it out even when the `ttl` is longer now, or
    /// gone, as a full checkpoint, which never holds it, would (docs/concepts.md, "State
    /// TTL"). `None` for every other handle: its files hold no expired entry (full snapshots
    /// leave them out), or its step has no `ttl`. Absent in `_metadata` written before
    /// 2026-12-05; a release before it ignores it (and may bring such keys back).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub expired_through_ms: Option<u64>,
}

/// The files of a subtask's disk store in a native checkpoint ([`StateHandle::native`]): a
/// RocksDB checkpoint directory, uploaded file by file. A restore downloads them all into one
/// local directory under their `name`s and opens it as a store.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NativeFiles {
    /// The key groups of the store (the subtask's range when it was written).
    pub key_group_range: KeyGroupRange,
    /// Every file of the store: table files (`*.sst`, and a delta checkpoint's delta files
    /// `*.delta`, `state/disk_delta.rs`; in the job's `shared/` directory, shared with other
    /// checkpoints) and the private ones (`MANIFEST-*`, `CURRENT`, `OPTIONS-*`, in the
    /// snapshot's own directory).
    pub files: Vec<NativeFile>,
    /// Whether the step had a `ttl` when the store was written. The store's entries carry
    /// their last write time either way, but only then are those the times its `ttl` expires
    /// keys by: a restore point written without `ttl` restores into a step with one with
    /// every key counted as written at the restore (as a block without write times does), so
    /// adding `ttl` in an upgrade keeps the state (docs/concepts.md, "State TTL"). Absent in
    /// `_metadata` (every native checkpoint before 2026-12-04, evening): `false`, so such a
    /// restore point written with `ttl` restores with its keys' time to live started again,
    /// never with keys dropped.
    #[serde(default, skip_serializing_if = "std::ops::Not::not")]
    pub write_times: bool,
}

/// One file of [`NativeFiles`].
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NativeFile {
    /// Path relative to the snapshot directory: `../shared/<uid>-<subtask>-chk<id>-<name>` for
    /// a table file, `<uid>-<subtask>-<name>` for a private one.
    pub file: String,
    /// The file's name in the store's directory (`000012.sst`, `CURRENT`, ...).
    pub name: String,
    /// The checkpoint that uploaded it (earlier than the handle's for a table file shared
    /// with an earlier checkpoint).
    pub checkpoint_id: u64,
    /// File size in bytes.
    pub size: u64,
    /// CRC-32 of the whole file.
    pub crc32: u32,
}

impl CheckpointMetadata {
    /// The bytes this snapshot wrote and the bytes a restore from it reads, given its
    /// `_metadata`'s encoded size: `(metadata + each handle's own file, metadata + every file
    /// of every handle's chain)`. A handle's own file is the last link of its chain, the one
    /// this snapshot uploaded; the earlier links were uploaded by the checkpoints that wrote
    /// them. A native handle's table files count as written by the checkpoint that uploaded
    /// them ([`StateHandle::written_bytes`]). Both are equal for a snapshot without chains or
    /// native files.
    pub fn written_and_full_size(&self, metadata_bytes: u64) -> (u64, u64) {
        let handles = || {
            self.operators
                .iter()
                .chain(&self.channel_state)
                .flat_map(|o| &o.handles)
        };
        let written = handles().map(|h| h.written_bytes(self.checkpoint_id)).sum::<u64>();
        let full = handles().flat_map(|h| h.files()).map(|(_, size, _)| size).sum::<u64>();
        (metadata_bytes + written, metadata_bytes + full)
    }
}

/// One state file of an incremental chain ([`StateHandle::chain`]).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct ChainLink {
    /// Path relative to the snapshot directory (`../shared/<uid>-<subtask>-chk<id>.state`).
    pub file: String,
    /// The checkpoint that wrote it.
    pub checkpoint_id: u64,
    /// Whether it is the chain's full base (else a delta).
    pub base: bool,
    /// File size in bytes.
    pub size: u64,
    /// CRC-32 of the whole file.
    pub crc32: u32,
    /// Entries in the file (for a delta: keys written or removed).
    pub entries: u64,
}

impl StateHandle {
    /// Every file this handle references, `(path relative to the snapshot directory, size,
    /// crc32)`: its state files ([`StateHandle::state_files`]), then its native files if any.
    pub fn files(&self) -> Vec<(&str, u64, u32)> {
        let mut files = self.state_files();
        files.extend(
            self.native
                .iter()
                .flat_map(|n| &n.files)
                .map(|f| (f.file.as_str(), f.size, f.crc32)),
        );
        files
    }

    /// The state files to read for this handle, in the order to apply them: its chain, or
    /// `file` (not its native files).
    pub fn state_files(&self) -> Vec<(&str, u64, u32)> {
        if self.chain.is_empty() {
            vec![(self.file.as_str(), self.size, self.crc32)]
        } else {
            self.chain.iter().map(|l| (l.file.as_str(), l.size, l.crc32)).collect()
        }
    }

    /// Bytes of the handle's own state file and of every native file it references (the
    /// size of its disk store, for `weir savepoint inspect`); a chain's earlier links are not
    /// counted.
    pub fn own_and_native_bytes(&self) -> u64 {
        self.size + self.native.iter().flat_map(|n| &n.files).map(|f| f.size).sum::<u64>()
    }

    /// What `weir savepoint inspect` counts as the handle's entries: its keys when it holds
    /// keyed state (the operator state items in the same file, such as an aggregation's
    /// shape or a window's watermarks, are not keys, so they are left out when `_metadata`
    /// records how many there are), its items otherwise (a source's splits, a sink's pending
    /// commits).
    pub fn listed_entries(&self) -> u64 {
        match (self.key_group_range, self.operator_items) {
            (Some(_), Some(items)) => self.entries.saturating_sub(items),
            _ => self.entries,
        }
    }

    /// Bytes of this handle's files uploaded by checkpoint `checkpoint_id`: its own state
    /// file and the native files that checkpoint uploaded (not those it shares with earlier
    /// checkpoints).
    pub fn written_bytes(&self, checkpoint_id: u64) -> u64 {
        let native = self.native.iter().flat_map(|n| &n.files);
        self.size
            + native
                .filter(|f| f.checkpoint_id == checkpoint_id)
                .map(|f| f.size)
                .sum::<u64>()
    }
}

/// One operator's state in a snapshot.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OperatorMetadata {
    /// Operator uid.
    pub uid: String,
    /// Operator kind (`count`, `source-file`, ...); a restore refuses a kind change.
    pub kind: String,
    /// Parallelism when written.
    pub parallelism: u32,
    /// State names held by this operator.
    pub state_names: Vec<String>,
    /// One handle per subtask that had state.
    pub handles: Vec<StateHandle>,
}

/// The body of `_metadata`: the commit record of a checkpoint or savepoint.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CheckpointMetadata {
    /// Format version of this body.
    pub format_version: u16,
    /// Job name.
    pub job_name: String,
    /// Checkpoint id.
    pub checkpoint_id: u64,
    /// Checkpoint or savepoint.
    pub kind: SnapshotKind,
    /// Number of key groups; must match on restore.
    pub max_parallelism: u32,
    /// Parallelism when taken.
    pub parallelism: u32,
    /// Trigger time, ms since the Unix epoch.
    pub triggered_at_ms: u64,
    /// Commit time (when `_metadata` was encoded), ms since the Unix epoch; 0 if unknown.
    #[serde(default)]
    pub completed_at_ms: u64,
    /// The run that wrote it (`weir coordinator --run-id`); a restarted coordinator of the same
    /// run resumes from its newest checkpoint.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub run_id: Option<String>,
    /// Stateful operators.
    pub operators: Vec<OperatorMetadata>,
    /// Channel state of an unaligned checkpoint, one entry per stage that recorded any, named
    /// by the uid of the stage's first operator (kind `channel-state`): the records that were
    /// in flight into its subtasks, keyed blocks by key group when they crossed a keyed
    /// exchange. Absent in aligned checkpoints and in older `_metadata`.
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub channel_state: Vec<OperatorMetadata>,
    /// Aligned or unaligned, alignment time, channel-state bytes, per-subtask sizes.
    #[serde(default)]
    pub alignment: crate::control::api::CheckpointAlignment,
}

impl CheckpointMetadata {
    /// The summary `weir savepoint inspect` prints and the operator checks a new job against.
    pub fn info(&self) -> crate::control::api::SnapshotInfo {
        use crate::control::api::{OperatorStateInfo, SnapshotInfo, SubtaskStateInfo};
        SnapshotInfo {
            job_name: self.job_name.clone(),
            checkpoint_id: self.checkpoint_id,
            kind: self.kind,
            max_parallelism: self.max_parallelism,
            parallelism: self.parallelism,
            operators: self
                .operators
                .iter()
                .map(|o| OperatorStateInfo {
                    uid: o.uid.clone(),
                    kind: o.kind.clone(),
                    state_names: o.state_names.clone(),
                    key_group_ranges: o
                        .handles
                        .iter()
                        .filter_map(|h| h.key_group_range)
                        .map(|r| [r.start, r.end])
                        .collect(),
                    bytes: o.handles.iter().map(StateHandle::own_and_native_bytes).sum(),
                    entries: o.handles.iter().map(StateHandle::listed_entries).sum(),
                    subtasks: {
                        let mut subtasks: Vec<SubtaskStateInfo> = o
                            .handles
                            .iter()
                            .map(|h| SubtaskStateInfo {
                                subtask: h.subtask,
                                key_group_range: h.key_group_range.map(|r| [r.start, r.end]),
                                bytes: h.own_and_native_bytes(),
                                entries: h.listed_entries(),
                            })
                            .collect();
                        subtasks.sort_by_key(|s| s.subtask);
                        subtasks
                    },
                })
                .collect(),
            alignment: self.alignment.clone(),
        }
    }
}

/// Encodes `_metadata`.
pub fn encode_metadata(m: &CheckpointMetadata) -> Vec<u8> {
    let body = serde_json::to_vec_pretty(m).expect("metadata encodes");
    let mut out = format!(
        "WEIR-METADATA v{FORMAT_VERSION} crc32={:08x} len={}\n",
        crc32fast::hash(&body),
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(&body);
    out
}

/// Decodes and verifies `_metadata`. Errors name `path`.
pub fn decode_metadata(path: &str, bytes: &[u8]) -> Result<CheckpointMetadata, FormatError> {
    let err = |problem: String| FormatError {
        path: path.to_string(),
        problem,
        fault: FormatFault::Damage,
    };
    let nl = bytes
        .iter()
        .position(|&b| b == b'\n')
        .ok_or_else(|| err("truncated: no header line".into()))?;
    let header = std::str::from_utf8(&bytes[..nl]).map_err(|_| err("header is not UTF-8".into()))?;
    let mut parts = header.split(' ');
    if parts.next() != Some("WEIR-METADATA") {
        return Err(err("not a Weir _metadata file".into()));
    }
    fn field<'a>(p: Option<&'a str>, name: &str) -> Option<&'a str> {
        p.and_then(|s| s.strip_prefix(name))
    }
    let malformed = || err(format!("malformed header `{header}`"));
    let version: u16 = field(parts.next(), "v")
        .and_then(|v| v.parse().ok())
        .ok_or_else(malformed)?;
    if version != FORMAT_VERSION {
        return Err(FormatError {
            fault: FormatFault::UnsupportedVersion,
            ..err(format!(
                "unsupported metadata version {version} (this build reads {FORMAT_VERSION})"
            ))
        });
    }
    let crc = field(parts.next(), "crc32=")
        .and_then(|c| u32::from_str_radix(c, 16).ok())
        .ok_or_else(malformed)?;
    let len: usize = field(parts.next(), "len=")
        .and_then(|l| l.parse().ok())
        .ok_or_else(malformed)?;
    let body = &bytes[nl + 1..];
    if body.len() != len {
        return Err(err(format!(
            "truncated or padded: body has {} bytes, header says {len}",
            body.len()
        )));
    }
    let actual = crc32fast::hash(body);
    if actual != crc {
        return Err(err(format!(
            "checksum mismatch: crc32 {actual:08x}, expected {crc:08x}"
        )));
    }
    let meta: CheckpointMetadata = serde_json::from_slice(body).map_err(|e| err(format!("undecodable body: {e}")))?;
    // A body whose checksum verifies but that no coordinator writes (edited by hand).
    super::snapshot_shape::check_shape(&meta).map_err(|why| err(format!("inconsistent body: {why}")))?;
    Ok(meta)
}

#[cfg(test)]
#[path = "snapshot_tests.rs"]
mod tests;
