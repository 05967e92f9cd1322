//! The disk backend's store keys (`state/disk.rs`).
//!
//! **Layout.** The key group as a big-endian `u16` (key groups are below 32,768, Flink's
//! bound of `maxParallelism`), the key's stable hash ([`key_hash`]) as a big-endian `u64`,
//! then the postcard encoding of the [`Key`]: one key group's entries are one contiguous key
//! range, in (key group, hash, key) order.
//!
//! **Why two bytes of key group.** The store compares keys by their first four bytes before
//! it reads the rest (`byteview`'s inline prefix, held in the memtable's skiplist nodes). With
//! the key group in four bytes they were equal for every key of a group, so each comparison
//! within a group read the whole key from its own allocation: a cache miss per skiplist
//! level, most of the disk backend's time per record (a point read searches the active and
//! every sealed memtable). With two bytes of hash in them, almost every comparison ends there.
//! The store is scratch (recreated on every start) and snapshots carry the encoded keys
//! without the prefix, so the layout is local to one run.
//!
//! [`key_hash`]: crate::state::key_group::key_hash

use crate::record::Key;

/// Bytes of a store key before the encoded [`Key`]: key group ([`KEY_GROUP_LEN`]) and hash (8).
pub(crate) const KEY_PREFIX_LEN: usize = KEY_GROUP_LEN + 8;
/// Bytes of the key group at the start of a store key (a big-endian `u16`).
pub(crate) const KEY_GROUP_LEN: usize = 2;

/// The store key of `key` (whose [`key_hash`] is `hash`) in `key_group`: see the module doc.
pub fn store_key(key_group: u32, hash: u64, key: &Key) -> Vec<u8> {
    let mut out = Vec::with_capacity(KEY_PREFIX_LEN + 16);
    out.extend_from_slice(&store_key_prefix(key_group, hash));
    postcard::to_extend(key, out).expect("a key encodes")
}

/// Bytes a store key may have to be built on the stack by [`StoreKeyBuf::new`]: a prefix and
/// an encoded key of up to 54 bytes (a string key of up to 52 bytes).
pub(crate) const STORE_KEY_INLINE: usize = 64;

/// A store key ([`store_key`]) built without an allocation when it fits in
/// [`STORE_KEY_INLINE`] bytes (else in a `Vec`): for the point reads and writes of the record
/// path, which only lend it to the store.
pub(crate) enum StoreKeyBuf {
    /// The key is the first `len` bytes.
    Inline { bytes: [u8; STORE_KEY_INLINE], len: usize },
    /// A key longer than [`STORE_KEY_INLINE`] bytes.
    Heap(Vec<u8>),
}

impl StoreKeyBuf {
    /// The store key of `key` (whose [`key_hash`] is `hash`) in `key_group`, the same bytes
    /// as [`store_key`].
    pub(crate) fn new(key_group: u32, hash: u64, key: &Key) -> StoreKeyBuf {
        let mut bytes = [0u8; STORE_KEY_INLINE];
        bytes[..KEY_PREFIX_LEN].copy_from_slice(&store_key_prefix(key_group, hash));
        match postcard::to_slice(key, &mut bytes[KEY_PREFIX_LEN..]) {
            Ok(encoded) => {
                let len = KEY_PREFIX_LEN + encoded.len();
                StoreKeyBuf::Inline { bytes, len }
            }
            // Too long for the stack buffer (the only way a key fails to encode into it).
            Err(_) => StoreKeyBuf::Heap(store_key(key_group, hash, key)),
        }
    }
}

impl std::ops::Deref for StoreKeyBuf {
    type Target = [u8];

    fn deref(&self) -> &[u8] {
        match self {
            StoreKeyBuf::Inline { bytes, len } => &bytes[..*len],
            StoreKeyBuf::Heap(bytes) => bytes,
        }
    }
}

/// The first [`KEY_PREFIX_LEN`] bytes of the store keys of `key_group` whose hash is `hash`.
pub(crate) fn store_key_prefix(key_group: u32, hash: u64) -> [u8; KEY_PREFIX_LEN] {
    let mut out = [0u8; KEY_PREFIX_LEN];
    out[..KEY_GROUP_LEN].copy_from_slice(&key_group_prefix(key_group));
    out[KEY_GROUP_LEN..].copy_from_slice(&hash.to_be_bytes());
    out
}

/// The first [`KEY_GROUP_LEN`] bytes of every store key of `key_group` (below 32,768: the
/// bound of `maxParallelism` that validation enforces; a larger one is a bug, and in release
/// builds it would share the prefix of `key_group % 65,536`).
pub(crate) fn key_group_prefix(key_group: u32) -> [u8; KEY_GROUP_LEN] {
    debug_assert!(key_group <= u32::from(u16::MAX), "key group {key_group} over u16");
    (key_group as u16).to_be_bytes()
}

/// Where the store keys of `key_group` end: the prefix of the next key group, `None` when
/// none follows (the range then runs to the end of the store).
pub(crate) fn key_group_end(key_group: u32) -> Option<[u8; KEY_GROUP_LEN]> {
    let next = u16::try_from(key_group.checked_add(1)?).ok()?;
    Some(next.to_be_bytes())
}

/// The key group of a store key (its first [`KEY_GROUP_LEN`] bytes, big-endian), if it has
/// them.
pub fn store_key_group(store_key: &[u8]) -> Option<u32> {
    Some(u32::from(u16::from_be_bytes(
        store_key.get(..KEY_GROUP_LEN)?.try_into().ok()?,
    )))
}

/// The key group and hash of a store key, if it has its [`KEY_PREFIX_LEN`] bytes.
pub(crate) fn store_key_group_and_hash(store_key: &[u8]) -> Option<(u32, u64)> {
    let hash = u64::from_be_bytes(store_key.get(KEY_GROUP_LEN..KEY_PREFIX_LEN)?.try_into().ok()?);
    Some((store_key_group(store_key)?, hash))
}

#[cfg(test)]
#[path = "disk_key_layout_tests.rs"]
mod tests;
