//! Key groups: the one function from a key to its key group and from a key group to the
//! subtask that owns it. The keyed exchange and the keyed state both call [`subtask_for_key`]
//! / [`key_group`], so they can never disagree.
//!
//! Follows Flink's `KeyGroupRangeAssignment`: key group = hash(key) mod maxParallelism and
//! subtask = keyGroup × parallelism / maxParallelism, so subtask i owns the contiguous range
//! `[⌈i·maxP/p⌉, ⌈(i+1)·maxP/p⌉ − 1]`. The hash is XXH3-64 of the key's canonical bytes
//! ([`Key::canonical_bytes`]) — stable across processes and versions, never randomly seeded.

use crate::record::Key;
use serde::{Deserialize, Serialize};

/// An inclusive range of key groups `[start, end]`; empty when `start > end`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
pub struct KeyGroupRange {
    /// First key group.
    pub start: u32,
    /// Last key group (inclusive).
    pub end: u32,
}

impl KeyGroupRange {
    /// Whether `kg` is in the range.
    pub fn contains(&self, kg: u32) -> bool {
        self.start <= kg && kg <= self.end
    }

    /// Number of key groups in the range.
    pub fn len(&self) -> u32 {
        if self.start > self.end {
            0
        } else {
            self.end - self.start + 1
        }
    }

    /// Whether the range is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Whether two ranges share a key group.
    pub fn intersects(&self, other: &KeyGroupRange) -> bool {
        !self.is_empty() && !other.is_empty() && self.start <= other.end && other.start <= self.end
    }
}

/// The stable 64-bit hash of a key: XXH3-64 over its canonical bytes. Keys of up to 63
/// canonical bytes are hashed from a stack buffer (no allocation).
#[inline]
pub fn key_hash(key: &Key) -> u64 {
    match key {
        Key::Int(i) => int_key_hash(*i),
        _ => non_int_key_hash(key),
    }
}

/// [`key_hash`] of `Key::Int(i)`: XXH3-64 of `b'i'` and the 8 bytes little-endian. Inlined
/// with its length known, XXH3 reduces to its 9-16 byte path (a few multiplies), without the
/// length dispatch.
#[inline]
pub fn int_key_hash(i: i64) -> u64 {
    let mut buf = [b'i'; 9];
    buf[1..].copy_from_slice(&i.to_le_bytes());
    xxhash_rust::xxh3::xxh3_64(&buf)
}

fn non_int_key_hash(key: &Key) -> u64 {
    match key {
        Key::Str(s) if s.len() < 64 => {
            let mut buf = [0u8; 64];
            buf[0] = b's';
            buf[1..=s.len()].copy_from_slice(s.as_bytes());
            xxhash_rust::xxh3::xxh3_64(&buf[..=s.len()])
        }
        _ => {
            let mut buf = Vec::with_capacity(72);
            key.canonical_bytes(&mut buf);
            xxhash_rust::xxh3::xxh3_64(&buf)
        }
    }
}

/// Key group of a key whose [`key_hash`] is `hash`: `hash mod maxParallelism`.
#[inline]
pub fn key_group_of_hash(hash: u64, max_parallelism: u32) -> u32 {
    (hash % u64::from(max_parallelism)) as u32
}

/// Key group of `key` for `max_parallelism` key groups: `hash(key) mod maxParallelism`.
pub fn key_group(key: &Key, max_parallelism: u32) -> u32 {
    key_group_of_hash(key_hash(key), max_parallelism)
}

/// Subtask index that owns key group `kg`: `kg × parallelism / maxParallelism`
/// (Flink's `computeOperatorIndexForKeyGroup`).
pub fn subtask_for_key_group(kg: u32, parallelism: u32, max_parallelism: u32) -> u32 {
    (u64::from(kg) * u64::from(parallelism) / u64::from(max_parallelism)) as u32
}

/// Subtask index that owns `key`.
pub fn subtask_for_key(key: &Key, parallelism: u32, max_parallelism: u32) -> u32 {
    subtask_for_key_group(key_group(key, max_parallelism), parallelism, max_parallelism)
}

/// The key groups owned by subtask `index` of `parallelism`
/// (Flink's `computeKeyGroupRangeForOperatorIndex`):
/// `[(i·maxP + p − 1) / p, ((i+1)·maxP − 1) / p]`.
pub fn key_group_range(index: u32, parallelism: u32, max_parallelism: u32) -> KeyGroupRange {
    let (i, p, m) = (u64::from(index), u64::from(parallelism), u64::from(max_parallelism));
    KeyGroupRange {
        start: (i * m).div_ceil(p) as u32,
        end: (((i + 1) * m - 1) / p) as u32,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Every key group maps to exactly one subtask, that subtask's range contains it, and the
    /// ranges tile [0, maxP) — for every parallelism 1..=maxP.
    #[test]
    fn every_key_group_has_exactly_one_owner() {
        for max_p in [1u32, 2, 3, 7, 128, 300] {
            for p in 1..=max_p {
                let ranges: Vec<_> = (0..p).map(|i| key_group_range(i, p, max_p)).collect();
                for kg in 0..max_p {
                    let owner = subtask_for_key_group(kg, p, max_p);
                    assert!(owner < p);
                    let holders: Vec<_> = (0..p).filter(|&i| ranges[i as usize].contains(kg)).collect();
                    assert_eq!(holders, vec![owner], "maxP={max_p} p={p} kg={kg}");
                }
                assert_eq!(ranges.iter().map(|r| r.len()).sum::<u32>(), max_p);
            }
        }
    }

    /// Property: for generated keys, the exchange's routing (subtask_for_key) always lands on
    /// the subtask whose state range holds the key's group.
    #[test]
    fn exchange_and_state_agree() {
        let mut seed = 0x9e3779b97f4a7c15u64;
        for n in 0..20_000u64 {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            let key = match n % 3 {
                0 => Key::Str(format!("k{seed:x}").into()),
                1 => Key::Int(seed as i64),
                _ => Key::Bool(seed & 1 == 1),
            };
            let max_p = [128u32, 256, 1000][(n % 3) as usize];
            let p = (seed % u64::from(max_p)) as u32 + 1;
            let s = subtask_for_key(&key, p, max_p);
            assert!(key_group_range(s, p, max_p).contains(key_group(&key, max_p)));
        }
    }

    #[test]
    fn hash_is_stable_across_versions() {
        // Pinned values: changing the hash would silently break restores of existing state.
        assert_eq!(
            key_group(&Key::Str("the".into()), 128),
            key_group(&Key::Str("the".into()), 128)
        );
        let pinned = [
            key_hash(&Key::Str("the".into())),
            key_hash(&Key::Int(42)),
            key_hash(&Key::Bool(true)),
        ];
        assert_eq!(pinned, PINNED);
    }

    #[test]
    fn hash_without_allocation_equals_hash_of_canonical_bytes() {
        let long = "é".repeat(60);
        let keys = (0..100).map(|n| Key::Str(long[..2 * (n % 60)].into())).chain([
            Key::Int(i64::MIN),
            Key::Int(0),
            Key::Bool(false),
            Key::Str(long.as_str().into()),
            Key::Int(i64::MAX),
        ]);
        let keys = keys.chain((-300..300).map(|i| Key::Int(i * 7_919_000_111)));
        for key in keys {
            let mut bytes = vec![];
            key.canonical_bytes(&mut bytes);
            assert_eq!(key_hash(&key), xxhash_rust::xxh3::xxh3_64(&bytes), "{key}");
        }
    }

    const PINNED: [u64; 3] = [3205958110201239529, 15422504050622559589, 14349648175561970045];
}
