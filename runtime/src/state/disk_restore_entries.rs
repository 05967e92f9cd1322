//! One key group's entries as a disk restore writes them into the store: store keys and store
//! values (`state/disk.rs`'s layout) in ascending store-key order, built from the group's
//! checkpoint blocks on a decode thread while the store takes the groups decoded before.
//!
//! The entries of a group live in one buffer ([`SortedEntries`]): each store key followed by
//! its store value, with an index of where each entry starts, sorted by store key. Before
//! (until 2026-12-02) each entry was a pair of vectors: two allocations on the decode thread
//! and two frees on the store's (mimalloc's cross-thread free), and the value decoded and
//! encoded again; a profile of a restore at 1M keys had about a quarter of its samples there.
//! A full block's value bytes are copied as the block holds them
//! ([`keyed_block::decode_each_value_bytes`]): the store value is the write time and the
//! value's postcard bytes, the same bytes a block holds after the key.

use crate::record::Key;
use crate::state::disk::{VALUE_PREFIX_LEN, encode_value, store_key_prefix};
use crate::state::key_group::key_hash;
use crate::state::keyed_block;
use crate::state::snapshot::KeyGroupBlock;
use crate::state::ttl::{StateTtl, expired};
use serde::Serialize;
use serde::de::DeserializeOwned;

/// Where one entry of a [`SortedEntries`] lies in its buffer: the store key at
/// `start..start + key_len`, the store value right after it, `value_len` bytes.
#[derive(Clone, Copy, Debug)]
struct EntrySpan {
    start: usize,
    key_len: u32,
    value_len: u32,
}

/// One key group's live entries, `(store key, store value)`, in ascending store-key order,
/// each store key once (see the module doc).
#[derive(Debug, Default)]
pub(crate) struct SortedEntries {
    bytes: Vec<u8>,
    spans: Vec<EntrySpan>,
}

impl SortedEntries {
    /// Room for `entries` entries of about `bytes` bytes in all.
    fn with_capacity(entries: usize, bytes: usize) -> SortedEntries {
        SortedEntries {
            bytes: Vec::with_capacity(bytes),
            spans: Vec::with_capacity(entries),
        }
    }

    /// Appends an entry: the store key of `key` in `key_group` and the store value of the
    /// value's postcard bytes `value` written at `written_ms`.
    fn push_spliced(&mut self, key_group: u32, key: &Key, value: &[u8], written_ms: u64) {
        let start = self.bytes.len();
        self.bytes
            .extend_from_slice(&store_key_prefix(key_group, key_hash(key)));
        keyed_block::push_key(&mut self.bytes, key);
        let key_len = self.bytes.len() - start;
        self.bytes.extend_from_slice(&written_ms.to_le_bytes());
        self.bytes.extend_from_slice(value);
        self.spans.push(EntrySpan {
            start,
            key_len: key_len as u32,
            value_len: (VALUE_PREFIX_LEN + value.len()) as u32,
        });
    }

    /// Appends an entry from a store key and store value.
    fn push_store_entry(&mut self, key: &[u8], value: &[u8]) {
        let start = self.bytes.len();
        self.bytes.extend_from_slice(key);
        self.bytes.extend_from_slice(value);
        self.spans.push(EntrySpan {
            start,
            key_len: key.len() as u32,
            value_len: value.len() as u32,
        });
    }

    fn key(&self, span: &EntrySpan) -> &[u8] {
        &self.bytes[span.start..span.start + span.key_len as usize]
    }

    /// Sorts the entries by store key; of entries with the same store key the one appended
    /// last stays (a full block holds each key once; should one not, the later entry wins, as
    /// the write-batch path would do, and ingestion still sees strictly ascending keys).
    fn sort_by_store_key(&mut self) {
        let mut spans = std::mem::take(&mut self.spans);
        // Entries with the same key in the order appended (a later entry starts later), so
        // the last of them is the later write.
        spans.sort_unstable_by(|a, b| self.key(a).cmp(self.key(b)).then(a.start.cmp(&b.start)));
        let mut kept: Vec<EntrySpan> = Vec::with_capacity(spans.len());
        for span in spans {
            match kept.last_mut() {
                Some(last) if self.key(last) == self.key(&span) => *last = span,
                _ => kept.push(span),
            }
        }
        self.spans = kept;
    }

    /// The entries, `(store key, store value)`, in ascending store-key order.
    pub(crate) fn iter(&self) -> impl Iterator<Item = (&[u8], &[u8])> {
        self.spans.iter().map(|span| {
            let key_end = span.start + span.key_len as usize;
            (
                &self.bytes[span.start..key_end],
                &self.bytes[key_end..key_end + span.value_len as usize],
            )
        })
    }

    /// Number of entries.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.spans.len()
    }
}

/// One key group's live entries after applying its `blocks` in order (entries expired at
/// `now_ms` left out; a version-1 entry counts as written at `now_ms`). A single full block
/// is copied into one buffer and sorted by an index; a chain (a base and deltas) is applied in
/// a sorted map. Errors: the key group and why a block does not decode.
pub(crate) fn sorted_group_entries<V: Serialize + DeserializeOwned>(
    key_group: u32,
    blocks: Vec<KeyGroupBlock>,
    ttl: Option<StateTtl>,
    now_ms: u64,
) -> Result<SortedEntries, String> {
    let undecodable = |e: String| format!("key group {key_group} does not decode: {e}");
    if let [block] = blocks.as_slice()
        && !keyed_block::is_delta(&block.data)
    {
        let count = keyed_block::entry_count(&block.data).map_err(undecodable)?;
        // Per entry the block holds the key and value (and a write time); the store adds the
        // key group and hash before the key and 8 bytes of write time.
        let mut out = SortedEntries::with_capacity(count, block.data.len() + count * 24);
        keyed_block::decode_each_value_bytes::<V>(&block.data, |key, value, written_ms| {
            let expired_then = block.expired_at_snapshot(written_ms);
            let written_ms = written_ms.unwrap_or(now_ms);
            if !expired_then && !expired(ttl, written_ms, now_ms) {
                out.push_spliced(key_group, &key, value, written_ms);
            }
        })
        .map_err(undecodable)?;
        out.sort_by_store_key();
        return Ok(out);
    }
    let mut applied = std::collections::BTreeMap::new();
    for block in &blocks {
        keyed_block::decode_each::<V>(&block.data, |key, value, written_ms| {
            let expired_then = block.expired_at_snapshot(written_ms);
            let written_ms = written_ms.unwrap_or(now_ms);
            let store_key = crate::state::disk::store_key(key_group, key_hash(&key), &key);
            match value.filter(|_| !expired_then && !expired(ttl, written_ms, now_ms)) {
                Some(v) => applied.insert(store_key, encode_value(&v, written_ms)),
                None => applied.remove(&store_key),
            };
        })
        .map_err(undecodable)?;
    }
    let bytes = applied.iter().map(|(k, v)| k.len() + v.len()).sum();
    let mut out = SortedEntries::with_capacity(applied.len(), bytes);
    for (key, value) in &applied {
        out.push_store_entry(key, value);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::disk::store_key;
    use std::collections::BTreeMap;
    use std::time::Duration;

    /// A key, its value and its last write (ms; `None`: a version-1 entry).
    type Entry = (Key, i64, Option<u64>);

    /// What the entries must be: each key's store key and `encode_value` of its value, the
    /// later of two entries of one key winning, sorted (the vector-per-entry code this
    /// replaced, written plainly).
    fn reference(key_group: u32, entries: &[Entry], ttl: Option<StateTtl>, now: u64) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut map = BTreeMap::new();
        for (key, value, written) in entries {
            let written = written.unwrap_or(now);
            if !expired(ttl, written, now) {
                map.insert(store_key(key_group, key_hash(key), key), encode_value(value, written));
            }
        }
        map.into_iter().collect()
    }

    fn got(entries: &SortedEntries) -> Vec<(Vec<u8>, Vec<u8>)> {
        entries.iter().map(|(k, v)| (k.to_vec(), v.to_vec())).collect()
    }

    fn keys() -> Vec<Key> {
        let mut keys: Vec<Key> = [0usize, 1, 20, 63, 64, 200]
            .iter()
            .map(|n| Key::Str("k".repeat(*n).into()))
            .collect();
        keys.extend([0i64, -1, 300, i64::MIN, i64::MAX].map(Key::Int));
        keys.extend([Key::Bool(false), Key::Bool(true)]);
        keys.extend((0..500).map(|i| Key::Str(format!("key-{i}").into())));
        keys
    }

    /// A full block of either version gives the store entries the reference gives: keys of
    /// every variant and varint length, values of several varint lengths, TTL expiry, and a
    /// key held twice (the later entry wins). Checked against broken variants: sorting the
    /// entries by key and value bytes together, or keeping the first of two entries of one key,
    /// fails the duplicate row; a value span one byte short fails every row.
    #[test]
    fn a_full_block_gives_the_reference_store_entries() {
        let keys = keys();
        let values: Vec<i64> = (0..keys.len() as i64).map(|i| (i - 250) * 1_000_003).collect();
        let ttl = Some(StateTtl::new(Duration::from_millis(100)));
        let now = 10_000u64;
        let written: Vec<u64> = (0..keys.len() as u64).map(|i| now - 150 + i % 100).collect();
        let v1_entries: Vec<(&Key, &i64)> = keys.iter().zip(&values).collect();
        let v1 = keyed_block::encode_v1(&v1_entries).unwrap();
        let v2_entries: Vec<(&Key, &i64, u64)> = keys
            .iter()
            .zip(&values)
            .zip(&written)
            .map(|((k, v), w)| (k, v, *w))
            .collect();
        let v2 = keyed_block::encode_v2(&v2_entries).unwrap();
        // A key twice: the second entry (value 2) is the one that stays.
        let twice = keyed_block::encode_v1(&[(&keys[3], &1i64), (&keys[7], &5i64), (&keys[3], &2i64)]).unwrap();
        let rows: Vec<(&[u8], Option<StateTtl>, Vec<Entry>)> = vec![
            (
                &v1,
                None,
                keys.iter()
                    .cloned()
                    .zip(values.iter().copied())
                    .map(|(k, v)| (k, v, None))
                    .collect(),
            ),
            (
                &v2,
                None,
                v2_entries
                    .iter()
                    .map(|(k, v, w)| ((*k).clone(), **v, Some(*w)))
                    .collect(),
            ),
            (
                &v2,
                ttl,
                v2_entries
                    .iter()
                    .map(|(k, v, w)| ((*k).clone(), **v, Some(*w)))
                    .collect(),
            ),
            (
                &twice,
                None,
                vec![
                    (keys[3].clone(), 1, None),
                    (keys[7].clone(), 5, None),
                    (keys[3].clone(), 2, None),
                ],
            ),
        ];
        for (i, (data, ttl, entries)) in rows.into_iter().enumerate() {
            let block = KeyGroupBlock {
                expired_through_ms: None,
                key_group: 5,
                entries: entries.len() as u64,
                data: data.to_vec().into(),
            };
            let sorted = sorted_group_entries::<i64>(5, vec![block], ttl, now).unwrap();
            let want = reference(5, &entries, ttl, now);
            assert!(
                ttl.is_none() || want.len() < entries.len(),
                "row {i}: some entries expire"
            );
            assert_eq!(sorted.len(), want.len(), "row {i}");
            assert_eq!(got(&sorted), want, "row {i}");
        }
    }

    /// A chain (a base and a delta) applies in order: removals remove, later writes win.
    #[test]
    fn a_chain_applies_its_deltas_in_order() {
        let keys = keys();
        let base: Vec<(&Key, &i64, u64)> = keys.iter().map(|k| (k, &7i64, 50)).collect();
        let removed_or_changed: Vec<(&Key, Option<&i64>, u64)> = keys
            .iter()
            .step_by(3)
            .enumerate()
            .map(|(i, k)| (k, (i % 2 == 0).then_some(&9i64), 60))
            .collect();
        let blocks = vec![
            KeyGroupBlock {
                expired_through_ms: None,
                key_group: 2,
                entries: base.len() as u64,
                data: keyed_block::encode_v2(&base).unwrap().into(),
            },
            KeyGroupBlock {
                expired_through_ms: None,
                key_group: 2,
                entries: removed_or_changed.len() as u64,
                data: keyed_block::encode_delta(&removed_or_changed).unwrap().into(),
            },
        ];
        let mut want: BTreeMap<Vec<u8>, Vec<u8>> = reference(
            2,
            &keys.iter().map(|k| (k.clone(), 7, Some(50))).collect::<Vec<_>>(),
            None,
            100,
        )
        .into_iter()
        .collect();
        for (key, value, written) in &removed_or_changed {
            let store = store_key(2, key_hash(key), key);
            match value {
                Some(v) => want.insert(store, encode_value(*v, *written)),
                None => want.remove(&store),
            };
        }
        let sorted = sorted_group_entries::<i64>(2, blocks, None, 100).unwrap();
        assert_eq!(got(&sorted), want.into_iter().collect::<Vec<_>>());
    }

    #[test]
    fn an_undecodable_block_names_its_key_group() {
        let block = KeyGroupBlock {
            expired_through_ms: None,
            key_group: 9,
            entries: 1,
            data: vec![3, 0, 1].into(),
        };
        let e = sorted_group_entries::<i64>(9, vec![block], None, 0).unwrap_err();
        assert!(e.starts_with("key group 9 does not decode"), "{e}");
    }
}
