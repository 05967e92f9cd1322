//! Keys the disk backend's unit tests write (a mix of integer and string keys, with the key
//! group, of [`TEST_MAX_PARALLELISM`] key groups, and hash each is stored under) and the
//! decoding of the blocks they read back.

use crate::record::Key;
use crate::state::key_group::{key_group_of_hash, key_hash};
use crate::state::keyed_block;
use crate::state::snapshot::KeyGroupBlock;
use std::collections::BTreeMap;

/// Key groups of the tests' states (their max parallelism).
pub(crate) const TEST_MAX_PARALLELISM: u32 = 8;

/// Key `i`: an integer key for every third `i`, else the string `key-<i>`.
pub(crate) fn key(i: u64) -> Key {
    if i.is_multiple_of(3) {
        Key::Int(i as i64)
    } else {
        Key::Str(format!("key-{i}").into())
    }
}

/// Key group, hash and key of key `i`.
pub(crate) fn at(i: u64) -> (u32, u64, Key) {
    let k = key(i);
    let h = key_hash(&k);
    (key_group_of_hash(h, TEST_MAX_PARALLELISM), h, k)
}

/// The entries of `blocks` of a count (`i64` values) by the key's debug text: value and write
/// time. Panics on a block that does not decode or a key held twice.
pub(crate) fn decode(blocks: &[KeyGroupBlock]) -> BTreeMap<String, (i64, Option<u64>)> {
    let mut out = BTreeMap::new();
    for b in blocks {
        for (k, v, t) in keyed_block::decode::<i64>(&b.data).unwrap() {
            assert!(out.insert(format!("{k:?}"), (v, t)).is_none());
        }
    }
    out
}
