//! Table tests of the disk backend's store-key layout (`state/disk.rs`, "Layout"): the key
//! group in two bytes so that the store's four-byte key prefix holds hash bits, key groups
//! as contiguous ranges in order up to Flink's bound of 32,768, the stack-built key equal to
//! the allocated one, and a snapshot at the largest key groups.

use super::*;
use crate::state::disk::{DiskKeyedState, DiskStateOptions};
use crate::state::key_group::{key_group_of_hash, key_group_range, key_hash};
use crate::state::keyed_block;

/// Keys of every shape the layout must order: ints, short and long strings.
fn sample_keys() -> Vec<Key> {
    vec![
        Key::Int(0),
        Key::Int(-7),
        Key::Int(i64::MAX),
        Key::Str("".into()),
        Key::Str("key-1".into()),
        Key::Str("x".repeat(52).into()),
        Key::Str("y".repeat(53).into()),
        Key::Str("z".repeat(300).into()),
    ]
}

/// The store compares keys by their first four bytes before reading the rest: two keys of the
/// same key group whose hashes differ in their top 16 bits differ there. (With the key group
/// in four bytes, these were equal for every key of a group.)
#[test]
fn the_first_four_bytes_hold_hash_bits() {
    let key = Key::Str("key-1".into());
    for key_group in [0, 1, 127, 255, 256, 32_767] {
        for (a, b) in [
            (0u64, 1u64 << 48),
            (0x1234 << 48, 0x1235 << 48),
            (u64::MAX, u64::MAX >> 1),
        ] {
            let (ka, kb) = (store_key(key_group, a, &key), store_key(key_group, b, &key));
            assert_ne!(ka[..4], kb[..4], "key group {key_group}, hashes {a:x} {b:x}");
            assert_eq!(ka[..4].cmp(&kb[..4]), a.cmp(&b), "key group {key_group}");
        }
    }
}

/// Every store key of a key group lies in `[key_group_prefix, key_group_end)`, decodes back
/// to its key group and hash, and orders by (key group, hash, key): across the byte
/// boundaries of the key group (255/256) and up to the last one Flink allows.
#[test]
fn key_groups_are_contiguous_ranges_in_order() {
    let groups = [0u32, 1, 127, 128, 255, 256, 4_095, 32_766, 32_767];
    let hashes = [0u64, 1, 0xffff, 1 << 48, u64::MAX - 1, u64::MAX];
    let mut all = Vec::new();
    for &key_group in &groups {
        let from = key_group_prefix(key_group);
        let end = key_group_end(key_group).expect("a key group below 65,535 has an end");
        assert!(from[..] < end[..], "key group {key_group}");
        for &hash in &hashes {
            for key in sample_keys() {
                let bytes = store_key(key_group, hash, &key);
                assert!(bytes[..] >= from[..] && bytes[..] < end[..], "key group {key_group}");
                assert_eq!(store_key_group(&bytes), Some(key_group));
                assert_eq!(store_key_group_and_hash(&bytes), Some((key_group, hash)));
                assert_eq!(bytes[..KEY_PREFIX_LEN], store_key_prefix(key_group, hash));
                all.push(((key_group, hash), bytes));
            }
        }
    }
    // Sorted by bytes, the keys are sorted by (key group, hash): what snapshots, incremental
    // cleanup and restores by key-group range rely on.
    all.sort_by(|a, b| a.1.cmp(&b.1));
    assert!(all.windows(2).all(|w| w[0].0 <= w[1].0));
    assert_eq!(key_group_end(u32::from(u16::MAX)), None);
    assert_eq!(store_key_group(&[1]), None);
    assert_eq!(store_key_group_and_hash(&[0, 1, 2]), None);
}

/// The key built on the stack is byte for byte [`store_key`]'s, inline up to
/// [`STORE_KEY_INLINE`] bytes and on the heap past it (a buffer that cut long keys, or kept a
/// wrong length, fails here).
#[test]
fn a_stack_built_store_key_equals_the_allocated_one() {
    for key in sample_keys() {
        for (key_group, hash) in [(0, 0), (300, 0xdead_beef_u64 << 20), (32_767, u64::MAX)] {
            let built = StoreKeyBuf::new(key_group, hash, &key);
            let want = store_key(key_group, hash, &key);
            assert_eq!(&built[..], want.as_slice(), "{key:?}");
            assert_eq!(
                matches!(built, StoreKeyBuf::Inline { .. }),
                want.len() <= STORE_KEY_INLINE,
                "{key:?}"
            );
        }
    }
}

/// State in the highest key groups (past one byte, up to 32,767) reads back, and a snapshot
/// writes each key group's entries into its own block.
#[test]
fn the_highest_key_groups_read_back_and_snapshot_per_group() {
    const MAX_P: u32 = 32_768;
    let dir = tempfile::tempdir().unwrap();
    let range = key_group_range(0, 1, MAX_P);
    let mut state =
        DiskKeyedState::<i64>::open(&dir.path().join("count-0"), range, None, DiskStateOptions::default()).unwrap();
    let keys: Vec<Key> = (0..3_000).map(|i| Key::Str(format!("key-{i}").into())).collect();
    for (i, k) in keys.iter().enumerate() {
        let h = key_hash(k);
        state
            .update(key_group_of_hash(h, MAX_P), h, k, 0, |_| i as i64)
            .unwrap();
    }
    // Through the store, not the write-back cache: the layout is what is read.
    state.write_back_and_clear_cache().unwrap();
    for (i, k) in keys.iter().enumerate() {
        let h = key_hash(k);
        assert_eq!(state.get(key_group_of_hash(h, MAX_P), h, k, 0).unwrap(), Some(i as i64));
    }
    let blocks = state.snapshot(0).encode().unwrap();
    let mut seen = 0;
    for block in &blocks {
        for (k, v, _) in keyed_block::decode::<i64>(&block.data).unwrap() {
            assert_eq!(key_group_of_hash(key_hash(&k), MAX_P), block.key_group, "{k:?}");
            assert_eq!(keys[v as usize], k);
            seen += 1;
        }
    }
    assert_eq!(seen, keys.len());
    assert!(blocks.iter().any(|b| b.key_group > 255));
}
