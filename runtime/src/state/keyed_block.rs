//! The encoding of one key group's entries inside a [`KeyGroupBlock`](crate::state::snapshot::KeyGroupBlock)'s `data`.
//!
//! Two versions, both decoded by this build:
//! - version 1 (no TTL, every file written before TTL existed, and every file of a step
//!   without `ttl`): the postcard encoding of `Vec<(Key, V)>`, which starts with the entry
//!   count as a postcard varint.
//! - version 2 (a step with `ttl`): [`VERSIONED_PREFIX`] (ten `0xFF` bytes: a varint that never
//!   ends, which postcard rejects, so a release that knows only version 1 fails with "does not
//!   decode" instead of reading a wrong length), the version byte `2`, then the postcard
//!   encoding of `Vec<(Key, V, u64)>`, the `u64` being the entry's last write in ms since the
//!   Unix epoch.
//!
//! - version 3 (a delta block of an incremental checkpoint, see `state/incremental.rs`):
//!   the same prefix, the version byte `3`, then the postcard encoding of
//!   `Vec<(Key, Option<V>, u64)>`: every key written or removed since the chain's previous
//!   link, `None` for a removed key, the `u64` the entry's last write (ms since the Unix epoch;
//!   0 for a removal, and for every entry of a step without `ttl`). A time of 0 reads as none:
//!   the key counts as written at the restore, as in a version-1 block, so a step given a
//!   `ttl` at a restore keeps the keys of its chain's deltas as it keeps its base's (before
//!   2026-12-05 deltas carried real times without `ttl`, and such keys expired at once). A delta only means something applied in order over its chain's base
//!   block: [`decode`] refuses it, [`decode_with_removals`] returns it.
//!
//! A later version takes the next version byte after the same prefix; a build that does not
//! know it says so.

use crate::record::Key;
use serde::Serialize;
use serde::de::DeserializeOwned;

/// The version byte of blocks with write timestamps.
pub const BLOCK_VERSION_TTL: u8 = 2;

/// The version byte of delta blocks (incremental checkpoints).
pub const BLOCK_VERSION_DELTA: u8 = 3;

/// The start of every block of version 2 or later: not a valid postcard varint, so never the
/// start of a version-1 block.
pub const VERSIONED_PREFIX: [u8; 10] = [0xFF; 10];

/// One decoded entry: key, value and, from a version-2 block, its last write (ms since the
/// Unix epoch).
pub type DecodedEntry<V> = (Key, V, Option<u64>);

/// Encodes version 1: `entries` as `(key, value)`.
pub fn encode_v1<V: Serialize>(entries: &[(&Key, &V)]) -> Result<Vec<u8>, postcard::Error> {
    // The same bytes as `postcard::to_stdvec`, into a buffer sized for typical entries (a
    // short key and a small number) instead of one grown by doubling.
    postcard::to_extend(entries, Vec::with_capacity(5 + entries.len() * 16))
}

/// Encodes version 1 from `count` entries as `entries` yields them: exactly [`encode_v1`]'s
/// bytes for the same entries, written without an entry vector and without serde's calls for
/// the key: postcard's sequence length (a LEB128 varint), then per entry the key as postcard
/// writes a [`Key`] (its variant index, then a string's length and bytes, an integer
/// zigzag-encoded as a varint, or a boolean's byte) and the value through postcard. (The two
/// entry vectors the heap snapshot built per key group were fresh memory on every checkpoint:
/// most of a 5M-key checkpoint's CPU time went to the kernel zeroing such pages, and serde's
/// key calls were the largest user-space cost; docs/runtime/state-backends-log.md, 2026-12-02.)
/// An entry whose key and value fit in [`ENTRY_STACK_BYTES`] (a key of up to
/// [`STACK_KEY_MAX_BYTES`] and a number) is written on the stack and appended with one copy,
/// instead of a copy per piece: 19 instead of 32 ns per entry on one core for 5M `key-<n>`
/// keys and `count` values (docs/runtime/state-backends-log.md, 2026-12-07).
/// Errors: postcard's, or `entries` yielding other than `count` entries (a bug: the
/// length written first would be wrong).
pub fn encode_v1_each<'a, V: Serialize + 'a>(
    count: usize,
    entries: impl IntoIterator<Item = (&'a Key, &'a V)>,
) -> Result<Vec<u8>, postcard::Error> {
    let mut data = recycled_buffer(5 + count * 16);
    push_varint(&mut data, count as u64);
    let mut written = 0;
    // Each entry is first written into a small buffer on the stack and appended with one
    // copy; an entry too large for it (a long key, a large value) is written piece by piece.
    let mut entry = [0u8; ENTRY_STACK_BYTES];
    for (key, value) in entries {
        match stack_entry(&mut entry, key, value) {
            Some(len) => data.extend_from_slice(&entry[..len]),
            None => {
                push_key(&mut data, key);
                data = postcard::to_extend(value, data)?;
            }
        }
        written += 1;
    }
    if written != count {
        return Err(postcard::Error::SerializeSeqLengthUnknown);
    }
    Ok(data)
}

/// Bytes of the stack buffer [`encode_v1_each`] and [`encode_delta`] write one entry into: a
/// key of up to [`STACK_KEY_MAX_BYTES`] and a small value (a number; a `count`'s `Num` takes
/// at most 11 bytes).
const ENTRY_STACK_BYTES: usize = 64;

/// The longest string key written on the stack ([`stack_key`]): its length is then one
/// varint byte, and at least 22 bytes of [`ENTRY_STACK_BYTES`] stay free for the value.
const STACK_KEY_MAX_BYTES: usize = 40;

/// Writes `key` and `value` as [`push_key`] and postcard do into `buffer`, returning the
/// length, or `None` when they do not fit (nothing to undo: the caller writes the entry
/// piece by piece instead).
fn stack_entry<V: Serialize>(buffer: &mut [u8; ENTRY_STACK_BYTES], key: &Key, value: &V) -> Option<usize> {
    let key_len = stack_key(buffer, key)?;
    let value_len = postcard::to_slice(value, &mut buffer[key_len..]).ok()?.len();
    Some(key_len + value_len)
}

/// Writes `key` as postcard does ([`push_key`]) at the start of `buffer`, returning its
/// length, or `None` for a string key longer than [`STACK_KEY_MAX_BYTES`].
fn stack_key(buffer: &mut [u8; ENTRY_STACK_BYTES], key: &Key) -> Option<usize> {
    Some(match key {
        Key::Str(s) => {
            let bytes = s.as_bytes();
            if bytes.len() > STACK_KEY_MAX_BYTES {
                return None;
            }
            buffer[0] = 0;
            // The length as a one-byte varint (under 128).
            buffer[1] = bytes.len() as u8;
            buffer[2..2 + bytes.len()].copy_from_slice(bytes);
            2 + bytes.len()
        }
        Key::Int(i) => {
            buffer[0] = 1;
            1 + write_varint(&mut buffer[1..], ((i << 1) ^ (i >> 63)) as u64)
        }
        Key::Bool(b) => {
            buffer[0] = 2;
            buffer[1] = u8::from(*b);
            2
        }
    })
}

/// Writes `x` as postcard's LEB128 varint at the start of `out` (at least 10 bytes long),
/// returning its length.
fn write_varint(out: &mut [u8], mut x: u64) -> usize {
    let mut i = 0;
    while x >= 0x80 {
        out[i] = x as u8 | 0x80;
        x >>= 7;
        i += 1;
    }
    out[i] = x as u8;
    i + 1
}

/// Buffers of blocks already written to storage, for the blocks encoded next
/// ([`encode_v1_each`]): a block's buffer freshly allocated is fresh memory whose pages the
/// kernel zeroes on first touch (the allocator returns freed pages to the system within
/// milliseconds), which cost more than encoding the block (docs/runtime/state-backends-log.md,
/// 2026-12-02). At most [`RECYCLED_MAX_BYTES`] are kept; [`drop_recycled`] empties it.
static RECYCLED: std::sync::Mutex<Vec<Vec<u8>>> = std::sync::Mutex::new(Vec::new());

/// Most bytes of capacity [`RECYCLED`] keeps.
pub const RECYCLED_MAX_BYTES: usize = 32 << 20;

/// Smallest buffer worth keeping (smaller ones are cheap to allocate).
const RECYCLED_MIN_BYTES: usize = 64 << 10;

/// Hands a written block's buffer back for the next blocks (kept if it is at least 64 KiB
/// and fewer than [`RECYCLED_MAX_BYTES`] are kept; dropped otherwise).
pub fn recycle(mut buffer: Vec<u8>) {
    if buffer.capacity() < RECYCLED_MIN_BYTES {
        return;
    }
    buffer.clear();
    let mut kept = RECYCLED.lock().unwrap_or_else(|e| e.into_inner());
    let held: usize = kept.iter().map(Vec::capacity).sum();
    if held + buffer.capacity() <= RECYCLED_MAX_BYTES {
        kept.push(buffer);
    }
}

/// Drops the kept buffers (the end of a snapshot's upload: no memory held between
/// checkpoints).
pub fn drop_recycled() {
    let dropped = std::mem::take(&mut *RECYCLED.lock().unwrap_or_else(|e| e.into_inner()));
    drop(dropped);
}

/// An empty buffer of at least `capacity` bytes: the largest kept one if any (grown if
/// needed), else a new one with an eighth more than asked for (also for a `capacity` under
/// 32 KiB, without the eighth: small buffers are cheap to allocate). The heap encoder
/// ([`encode_v1_each`]) and the disk snapshot's block builder (`state/disk_snapshot.rs`) take
/// their block buffers here. The eighth is headroom for the blocks after: key groups differ
/// in size by a few percent, and a kept buffer just too small for the next group was grown
/// (fresh memory again) for about half of them (a `perf record` of a 5M-key heap checkpoint,
/// 2026-12-04: growing kept buffers was 9 % of the checkpoint's page zeroing).
pub(crate) fn recycled_buffer(capacity: usize) -> Vec<u8> {
    if capacity < RECYCLED_MIN_BYTES / 2 {
        return Vec::with_capacity(capacity);
    }
    let kept = {
        let mut kept = RECYCLED.lock().unwrap_or_else(|e| e.into_inner());
        let largest = (0..kept.len()).max_by_key(|&i| kept[i].capacity());
        largest.map(|i| kept.swap_remove(i))
    };
    // Kept buffers are empty ([`recycle`] clears them).
    match kept {
        Some(buffer) if buffer.capacity() >= capacity => buffer,
        Some(mut buffer) => {
            buffer.reserve_exact(with_headroom(capacity));
            buffer
        }
        None => Vec::with_capacity(with_headroom(capacity)),
    }
}

/// `capacity` and an eighth more ([`recycled_buffer`]'s headroom).
fn with_headroom(capacity: usize) -> usize {
    capacity.saturating_add(capacity / 8)
}

/// Appends `x` as postcard's LEB128 varint.
fn push_varint(out: &mut Vec<u8>, x: u64) {
    let mut bytes = [0u8; 10];
    let len = write_varint(&mut bytes, x);
    out.extend_from_slice(&bytes[..len]);
}

/// Appends `key` as postcard serializes a [`Key`]: the variant index (in declaration order:
/// `Str` 0, `Int` 1, `Bool` 2), then its content (a string's length as a varint and its
/// bytes, an integer zigzag-encoded as a varint, a boolean's byte).
pub(crate) fn push_key(out: &mut Vec<u8>, key: &Key) {
    if let Key::Str(s) = key
        && s.len() > STACK_KEY_MAX_BYTES
    {
        out.push(0);
        push_varint(out, s.len() as u64);
        out.extend_from_slice(s.as_bytes());
        return;
    }
    let mut buffer = [0u8; ENTRY_STACK_BYTES];
    // Every other key fits ([`stack_key`]).
    let len = stack_key(&mut buffer, key).unwrap_or_default();
    out.extend_from_slice(&buffer[..len]);
}

/// Encodes version 2: `entries` as `(key, value, written_ms)` after the 2-byte prefix.
pub fn encode_v2<V: Serialize>(entries: &[(&Key, &V, u64)]) -> Result<Vec<u8>, postcard::Error> {
    let mut data = Vec::with_capacity(VERSIONED_PREFIX.len() + 1 + entries.len() * 16);
    data.extend_from_slice(&VERSIONED_PREFIX);
    data.push(BLOCK_VERSION_TTL);
    postcard::to_extend(entries, data)
}

/// Encodes version 3 (a delta): every changed key with its value and last write, or `None`
/// for a removed key. The bytes are postcard's for `Vec<(Key, Option<V>, u64)>` after the
/// prefix, written without serde's calls for the key, the option's tag and the write time
/// ([`push_key`], postcard's `0`/`1` option tag, the time as a varint), as
/// [`encode_v1_each`] does: serde's `Key::serialize` was 5 % of a heap job's CPU with
/// incremental checkpoints every second at 50M keys (a `perf record`, 2026-12-04).
/// Errors: postcard's, from encoding a value.
pub fn encode_delta<V: Serialize>(entries: &[(&Key, Option<&V>, u64)]) -> Result<Vec<u8>, postcard::Error> {
    let mut data = Vec::with_capacity(VERSIONED_PREFIX.len() + 6 + entries.len() * 24);
    data.extend_from_slice(&VERSIONED_PREFIX);
    data.push(BLOCK_VERSION_DELTA);
    push_varint(&mut data, entries.len() as u64);
    // As in `encode_v1_each`: an entry that fits is written on the stack and appended at once.
    let mut entry = [0u8; ENTRY_STACK_BYTES];
    for (key, value, written_ms) in entries {
        if let Some(len) = stack_delta_entry(&mut entry, key, *value, *written_ms) {
            data.extend_from_slice(&entry[..len]);
            continue;
        }
        push_key(&mut data, key);
        match value {
            None => data.push(0),
            Some(value) => {
                data.push(1);
                data = postcard::to_extend(value, data)?;
            }
        }
        push_varint(&mut data, *written_ms);
    }
    Ok(data)
}

/// One entry of [`encode_delta`] written into `buffer` (the key, postcard's option tag, the
/// value, the write time as a varint), returning its length, or `None` when it does not fit.
fn stack_delta_entry<V: Serialize>(
    buffer: &mut [u8; ENTRY_STACK_BYTES],
    key: &Key,
    value: Option<&V>,
    written_ms: u64,
) -> Option<usize> {
    let mut len = stack_key(buffer, key)?;
    match value {
        None => {
            buffer[len] = 0;
            len += 1;
        }
        Some(value) => {
            buffer[len] = 1;
            len += 1;
            // Room is left for the time's varint (at most 10 bytes).
            let room = ENTRY_STACK_BYTES - 10;
            len += postcard::to_slice(value, &mut buffer[len..room]).ok()?.len();
        }
    }
    Some(len + write_varint(&mut buffer[len..], written_ms))
}

/// Whether `data` is a block of version 2 or later (write times, or a delta), not version 1.
pub fn is_versioned(data: &[u8]) -> bool {
    data.starts_with(&VERSIONED_PREFIX[..])
}

/// Whether `data` is a delta block (version 3).
pub fn is_delta(data: &[u8]) -> bool {
    data.strip_prefix(&VERSIONED_PREFIX[..])
        .is_some_and(|rest| rest.first() == Some(&BLOCK_VERSION_DELTA))
}

/// One entry of any block version: key, value (`None`: the key was removed, delta blocks
/// only) and last write (ms since the Unix epoch) if the block records it.
pub type EntryOrRemoval<V> = (Key, Option<V>, Option<u64>);

/// Decodes a block of any version, delta blocks included: apply the result over the state
/// restored so far (a `None` value removes the key). Errors as [`decode`].
pub fn decode_with_removals<V: DeserializeOwned>(data: &[u8]) -> Result<Vec<EntryOrRemoval<V>>, String> {
    let mut out = Vec::with_capacity(entry_count(data)?);
    decode_each::<V>(data, |key, value, written_ms| out.push((key, value, written_ms)))?;
    Ok(out)
}

/// The layout of a block's entries after its version prefix.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Layout {
    /// `(Key, V)`.
    Plain,
    /// `(Key, V, u64)`.
    Stamped,
    /// `(Key, Option<V>, u64)`.
    Delta,
}

/// The layout of `data` and its bytes from the entry count on. Errors: an unknown version or
/// a block that ends after its prefix, as [`decode`] words them.
fn layout(data: &[u8]) -> Result<(Layout, &[u8]), String> {
    match data.strip_prefix(&VERSIONED_PREFIX[..]) {
        None => Ok((Layout::Plain, data)),
        Some([BLOCK_VERSION_TTL, body @ ..]) => Ok((Layout::Stamped, body)),
        Some([BLOCK_VERSION_DELTA, body @ ..]) => Ok((Layout::Delta, body)),
        Some([version, ..]) => Err(format!(
            "keyed state block version {version} is unknown to this build (it reads 1, {BLOCK_VERSION_TTL} and {BLOCK_VERSION_DELTA}); \
             restore with the Weir version that wrote it or newer"
        )),
        Some([]) => Err("keyed state block ends after its version prefix".into()),
    }
}

/// The number of entries a block of any version says it holds (its leading varint), capped
/// at its byte length (every entry takes at least one byte, so a corrupt count cannot make a
/// caller reserve more than the block's size). Errors as [`decode`].
pub fn entry_count(data: &[u8]) -> Result<usize, String> {
    let (_, body) = layout(data)?;
    let (count, rest): (u64, &[u8]) = postcard::take_from_bytes(body).map_err(|e| e.to_string())?;
    Ok((count as usize).min(rest.len()))
}

/// Decodes a block of any version entry by entry, straight into `f(key, value, last write)`
/// (`None` value: removed, delta blocks only; `None` write time: a version-1 block), in the
/// block's order, with no intermediate list: a restore builds its tables from the block's
/// bytes directly. Returns the number of entries. The bytes read are those of
/// [`decode_with_removals`]: postcard writes a sequence as its varint length followed by the
/// elements, and a tuple as its fields in order, so the elements decode one at a time.
/// Errors as [`decode`]; entries before an undecodable one have been passed to `f`.
pub fn decode_each<V: DeserializeOwned>(
    data: &[u8],
    mut f: impl FnMut(Key, Option<V>, Option<u64>),
) -> Result<u64, String> {
    let (layout, body) = layout(data)?;
    let (count, mut rest): (u64, &[u8]) = postcard::take_from_bytes(body).map_err(|e| e.to_string())?;
    for _ in 0..count {
        rest = match layout {
            Layout::Plain => {
                let ((key, value), after): ((Key, V), &[u8]) =
                    postcard::take_from_bytes(rest).map_err(|e| e.to_string())?;
                f(key, Some(value), None);
                after
            }
            Layout::Stamped => {
                let ((key, value, written), after): ((Key, V, u64), &[u8]) =
                    postcard::take_from_bytes(rest).map_err(|e| e.to_string())?;
                f(key, Some(value), Some(written));
                after
            }
            Layout::Delta => {
                let ((key, value, written), after): ((Key, Option<V>, u64), &[u8]) =
                    postcard::take_from_bytes(rest).map_err(|e| e.to_string())?;
                f(key, value, (written != 0).then_some(written));
                after
            }
        };
    }
    Ok(count)
}

/// Decodes a full block (version 1 or 2) entry by entry into `f(key, value bytes, last
/// write)`, the value left as the postcard bytes the block holds (decoded only to find where
/// they end, then dropped): a disk restore stores those bytes as they are instead of encoding
/// the decoded value again (`state/disk_restore_entries.rs`). Returns the number of entries.
/// Errors: a delta block (it applies over a base: [`decode_each`]), otherwise as [`decode`];
/// entries before an undecodable one have been passed to `f`.
pub fn decode_each_value_bytes<V: DeserializeOwned>(
    data: &[u8],
    mut f: impl FnMut(Key, &[u8], Option<u64>),
) -> Result<u64, String> {
    let (layout, body) = layout(data)?;
    if layout == Layout::Delta {
        return Err("a delta block (version 3) holds removals: decode it with decode_each".into());
    }
    let (count, mut rest): (u64, &[u8]) = postcard::take_from_bytes(body).map_err(|e| e.to_string())?;
    for _ in 0..count {
        let (key, after_key): (Key, &[u8]) = postcard::take_from_bytes(rest).map_err(|e| e.to_string())?;
        let (_, after_value): (V, &[u8]) = postcard::take_from_bytes(after_key).map_err(|e| e.to_string())?;
        let value = &after_key[..after_key.len() - after_value.len()];
        rest = match layout {
            Layout::Stamped => {
                let (written, after): (u64, &[u8]) =
                    postcard::take_from_bytes(after_value).map_err(|e| e.to_string())?;
                f(key, value, Some(written));
                after
            }
            _ => {
                f(key, value, None);
                after_value
            }
        };
    }
    Ok(count)
}

/// Decodes a full block of either version 1 or 2. Errors: the reason (unknown version, undecodable
/// body); the caller names the operator and key group.
pub fn decode<V: DeserializeOwned>(data: &[u8]) -> Result<Vec<DecodedEntry<V>>, String> {
    let versioned = data.strip_prefix(&VERSIONED_PREFIX[..]);
    match versioned {
        Some([BLOCK_VERSION_TTL, body @ ..]) => {
            let entries: Vec<(Key, V, u64)> = postcard::from_bytes(body).map_err(|e| e.to_string())?;
            Ok(entries.into_iter().map(|(k, v, t)| (k, v, Some(t))).collect())
        }
        Some([BLOCK_VERSION_DELTA, ..]) => Err(
            "keyed state block is a delta of an incremental checkpoint (version 3); it must be applied over its \
             base with keyed_block::decode_with_removals"
                .into(),
        ),
        Some([version, ..]) => Err(format!(
            "keyed state block version {version} is unknown to this build (it reads 1, {BLOCK_VERSION_TTL} and {BLOCK_VERSION_DELTA}); \
             restore with the Weir version that wrote it or newer"
        )),
        Some([]) => Err("keyed state block ends after its version prefix".into()),
        None => {
            let entries: Vec<(Key, V)> = postcard::from_bytes(data).map_err(|e| e.to_string())?;
            Ok(entries.into_iter().map(|(k, v)| (k, v, None)).collect())
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_versions_round_trip_and_unknown_versions_are_named() {
        let a = Key::Str("a".into());
        let b = Key::Int(300);
        let v1 = encode_v1(&[(&a, &1i64), (&b, &2i64)]).unwrap();
        let v2 = encode_v2(&[(&a, &1i64, 10), (&b, &2i64, 20)]).unwrap();
        // What a release that knows only version 1 does with a version-2 block: an error.
        assert!(postcard::from_bytes::<Vec<(Key, i64)>>(&v2).is_err());
        let unknown = [&VERSIONED_PREFIX[..], &[9, 1]].concat();
        type Row<'a> = (&'a [u8], Result<Vec<DecodedEntry<i64>>, &'a str>);
        let rows: [Row; 6] = [
            (&v1, Ok(vec![(a.clone(), 1, None), (b.clone(), 2, None)])),
            (&v2, Ok(vec![(a.clone(), 1, Some(10)), (b.clone(), 2, Some(20))])),
            // An empty version-1 list (never written, but decodable).
            (&[0], Ok(vec![])),
            (&unknown, Err("keyed state block version 9 is unknown")),
            (&VERSIONED_PREFIX, Err("ends after its version prefix")),
            (&[5], Err("")),
        ];
        for (data, want) in rows {
            match (decode::<i64>(data), want) {
                (Ok(got), Ok(want)) => assert_eq!(got, want, "{data:?}"),
                (Err(got), Err(want)) => assert!(got.contains(want), "{data:?}: {got}"),
                (got, want) => panic!("{data:?}: got {got:?}, want {want:?}"),
            }
        }
    }

    /// Keys of every variant across postcard's length and varint boundaries: strings of 0,
    /// 126, 128 and 20,000 bytes, integers around the varint and sign boundaries, both
    /// booleans, and a typical short key.
    fn boundary_keys() -> Vec<Key> {
        let mut keys: Vec<Key> = [0usize, 1, 127, 128, 20_000]
            .iter()
            .map(|n| Key::Str("é".repeat(*n / 2).into()))
            .collect();
        keys.extend([0i64, -1, 1, 63, -64, 64, -65, 1 << 40, i64::MIN, i64::MAX].map(Key::Int));
        keys.extend([Key::Bool(false), Key::Bool(true), Key::Str("key-4711".into())]);
        // Around the longest key the encoders write on the stack (40 bytes).
        keys.extend([39usize, 40, 41].map(|n| Key::Str("k".repeat(n).into())));
        keys
    }

    /// The entry-by-entry writer gives `encode_v1`'s bytes exactly, for keys of every variant
    /// and varint length (strings of 0, 126, 128 and 20,000 bytes, integers around the
    /// varint and sign boundaries, both booleans); a count that does not match the entries
    /// is an error.
    #[test]
    fn the_entry_by_entry_writer_gives_encode_v1_bytes() {
        let keys = boundary_keys();
        let values: Vec<i64> = (0..keys.len() as i64).map(|i| i * 1000 - 7).collect();
        let entries: Vec<(&Key, &i64)> = keys.iter().zip(&values).collect();
        let want = encode_v1(&entries).unwrap();
        assert_eq!(encode_v1_each(entries.len(), entries.iter().copied()).unwrap(), want);
        assert_eq!(encode_v1_each::<i64>(0, []).unwrap(), encode_v1::<i64>(&[]).unwrap());
        assert!(encode_v1_each(entries.len() + 1, entries.iter().copied()).is_err());
        // Values that fit beside the key on the stack and values that do not, interleaved.
        let values: Vec<String> = (0..keys.len()).map(|i| "v".repeat(i * 7 % 45)).collect();
        let entries: Vec<(&Key, &String)> = keys.iter().zip(&values).collect();
        let want = encode_v1(&entries).unwrap();
        assert_eq!(encode_v1_each(entries.len(), entries.iter().copied()).unwrap(), want);
    }

    /// The hand-written delta encoder gives postcard's bytes for `Vec<(Key, Option<V>, u64)>`
    /// after the prefix (the format version 3 is defined as): every key variant, string and
    /// varint lengths across their byte boundaries, removals, write times up to `u64::MAX`,
    /// and a value type with more than one field.
    #[test]
    fn the_hand_written_delta_encoder_gives_postcards_bytes() {
        let keys = boundary_keys();
        let times = [0u64, 1, 127, 128, 16_383, 16_384, 1_764_806_400_000, u64::MAX];
        // A value type with two fields.
        type Value = (i64, String);
        // Short values, and values too long for the stack beside the key and the time.
        let values: Vec<Value> = (0..keys.len() as i64)
            .map(|i| (i * 1000 - 7, format!("v{i}{}", "w".repeat((i * 5 % 30) as usize))))
            .collect();
        let entries: Vec<(&Key, Option<&Value>, u64)> = keys
            .iter()
            .zip(&values)
            .enumerate()
            .map(|(i, (key, value))| (key, (i % 4 != 1).then_some(value), times[i % times.len()]))
            .collect();
        let mut want = VERSIONED_PREFIX.to_vec();
        want.push(BLOCK_VERSION_DELTA);
        let want = postcard::to_extend(&entries, want).unwrap();
        assert_eq!(encode_delta(&entries).unwrap(), want);
        let none: [(&Key, Option<&i64>, u64); 0] = [];
        let mut empty = VERSIONED_PREFIX.to_vec();
        empty.extend([BLOCK_VERSION_DELTA, 0]);
        assert_eq!(encode_delta(&none).unwrap(), empty);
    }

    /// A block encoded into a recycled buffer (one that held another block) has exactly the
    /// bytes of one encoded into a new buffer: nothing of the earlier block is left.
    #[test]
    fn a_recycled_buffer_gives_the_same_bytes() {
        let keys: Vec<Key> = (0..5000).map(|i| Key::Str(format!("key-{i}").into())).collect();
        let values: Vec<i64> = (0..5000).collect();
        let entries: Vec<(&Key, &i64)> = keys.iter().zip(&values).collect();
        let want = encode_v1(&entries).unwrap();
        for _ in 0..3 {
            recycle(vec![0xAB; 200_000]);
            let got = encode_v1_each(entries.len(), entries.iter().copied()).unwrap();
            assert!(got == want, "a recycled buffer changed the block");
            recycle(got);
        }
        drop_recycled();
    }

    /// A block's buffer, recycled, takes the next key group's block even when that group has
    /// a few percent more entries (the new buffer's headroom): the same allocation, never
    /// grown into fresh memory. Without the headroom the second block needs more than the
    /// first one's capacity and is moved to a new allocation.
    #[test]
    fn a_recycled_buffer_takes_a_slightly_larger_next_block_without_growing() {
        let entries_of = |count: usize, offset: usize| -> (Vec<Key>, Vec<i64>) {
            let keys = (0..count)
                .map(|i| Key::Str(format!("user-{:07}", offset + i).into()))
                .collect();
            (keys, (0..count as i64).collect())
        };
        drop_recycled();
        let (keys, values) = entries_of(5_000, 0);
        let first = encode_v1_each(keys.len(), keys.iter().zip(&values)).unwrap();
        let (allocation, capacity) = (first.as_ptr(), first.capacity());
        recycle(first);
        let (keys, values) = entries_of(5_250, 10_000);
        let second = encode_v1_each(keys.len(), keys.iter().zip(&values)).unwrap();
        let entries: Vec<(&Key, &i64)> = keys.iter().zip(&values).collect();
        assert!(second == encode_v1(&entries).unwrap(), "the recycled buffer's bytes");
        assert_eq!(
            (second.as_ptr(), second.capacity()),
            (allocation, capacity),
            "the second block (5 % more entries) in the first one's buffer, not grown"
        );
        drop_recycled();
    }

    /// Entry by entry gives what the whole-sequence decode gives, for every version, and the
    /// count is capped by the block's size.
    #[test]
    fn decoding_entry_by_entry_matches_the_sequence_decode() {
        let keys: Vec<Key> = (0..300).map(|i| Key::Str(format!("key-{i}").into())).collect();
        let values: Vec<i64> = (0..300).collect();
        let v1 = encode_v1(&keys.iter().zip(&values).collect::<Vec<_>>()).unwrap();
        let v2 = encode_v2(
            &keys
                .iter()
                .zip(&values)
                .map(|(k, v)| (k, v, *v as u64 * 7))
                .collect::<Vec<_>>(),
        )
        .unwrap();
        let delta_entries: Vec<(&Key, Option<&i64>, u64)> = keys
            .iter()
            .zip(&values)
            .map(|(k, v)| (k, (v % 3 != 0).then_some(v), *v as u64))
            .collect();
        let delta = encode_delta(&delta_entries).unwrap();
        for data in [&v1, &v2, &delta] {
            let mut each = Vec::new();
            let n = decode_each::<i64>(data, |k, v, t| each.push((k, v, t))).unwrap();
            assert_eq!(n, 300);
            assert_eq!(entry_count(data).unwrap(), 300);
            let whole: Vec<EntryOrRemoval<i64>> = if is_delta(data) {
                let d: Vec<(Key, Option<i64>, u64)> = postcard::from_bytes(&data[11..]).unwrap();
                // A time of 0 reads as none (a step without `ttl`, or a removal).
                d.into_iter().map(|(k, v, t)| (k, v, (t != 0).then_some(t))).collect()
            } else {
                decode::<i64>(data)
                    .unwrap()
                    .into_iter()
                    .map(|(k, v, t)| (k, Some(v), t))
                    .collect()
            };
            assert_eq!(each, whole);
        }
        // A count far above what the bytes can hold: capped, and the decode fails cleanly.
        let lying = [0xFF, 0xFF, 0x03, 1];
        assert_eq!(entry_count(&lying).unwrap(), 1);
        assert!(decode_each::<i64>(&lying, |_, _, _| {}).is_err());
        let truncated = &v2[..v2.len() - 3];
        assert!(decode_each::<i64>(truncated, |_, _, _| {}).is_err());
    }

    #[test]
    fn delta_blocks_carry_removals_and_full_decode_refuses_them() {
        let a = Key::Str("a".into());
        let b = Key::Int(7);
        let delta = encode_delta(&[(&a, Some(&5i64), 30), (&b, None, 0)]).unwrap();
        assert!(is_delta(&delta));
        let v2 = encode_v2(&[(&a, &1i64, 10)]).unwrap();
        let v1 = encode_v1(&[(&a, &1i64)]).unwrap();
        assert!(!is_delta(&v2) && !is_delta(&v1));
        assert_eq!(
            decode_with_removals::<i64>(&delta).unwrap(),
            vec![(a.clone(), Some(5), Some(30)), (b.clone(), None, None)]
        );
        // A delta of a step without `ttl` records no write times (0): read as none, as in a
        // version-1 block.
        let untimed = encode_delta(&[(&a, Some(&5i64), 0)]).unwrap();
        assert_eq!(
            decode_with_removals::<i64>(&untimed).unwrap(),
            vec![(a.clone(), Some(5), None)]
        );
        assert_eq!(
            decode_with_removals::<i64>(&v2).unwrap(),
            vec![(a.clone(), Some(1), Some(10))]
        );
        assert_eq!(
            decode_with_removals::<i64>(&v1).unwrap(),
            vec![(a.clone(), Some(1), None)]
        );
        let refused = decode::<i64>(&delta).unwrap_err();
        assert!(refused.contains("delta of an incremental checkpoint"), "{refused}");
    }
}
