use super::*;
use crate::state::backend::{BackendChoice, KeyedState};
use crate::state::heap::HeapKeyedState;
use crate::state::key_group::{key_group_of_hash, key_group_range};

const MAX_P: u32 = 16;

fn keyed(k: i64) -> (u32, u64) {
    let hash = int_key_hash(k);
    (key_group_of_hash(hash, MAX_P), hash)
}

/// Counts keys 0..n (key k counted k % 5 + 1 times) into both tables.
fn fill(n: i64) -> (IntKeyedState<i64>, HeapKeyedState<i64>) {
    let range = key_group_range(0, 1, MAX_P);
    let (mut ints, mut heap) = (IntKeyedState::new(range), HeapKeyedState::new(range, None));
    for k in 0..n {
        for _ in 0..=(k % 5) {
            let (kg, hash) = keyed(k);
            ints.update(kg, hash, k, |v| v.map_or(1, |v| v + 1));
            heap.update(kg, hash, &Key::Int(k), 0, |v| v.map_or(1, |v| v + 1));
        }
    }
    (ints, heap)
}

/// Decoded entries of `blocks`, sorted by key group and key.
fn entries(blocks: &[KeyGroupBlock]) -> Vec<(u32, Key, i64)> {
    let mut out: Vec<(u32, Key, i64)> = blocks
        .iter()
        .flat_map(|b| {
            keyed_block::decode::<i64>(&b.data)
                .unwrap()
                .into_iter()
                .map(move |(k, v, _)| (b.key_group, k, v))
        })
        .collect();
    out.sort_by(|a, b| (a.0, &a.1).cmp(&(b.0, &b.1)));
    out
}

/// The integer table holds what the generic table holds, and its blocks are the generic
/// table's (the same entries in version-1 blocks, with the same entry counts per group).
#[test]
fn snapshots_hold_the_generic_tables_entries_in_the_same_block_format() {
    let (mut ints, mut heap) = fill(5000);
    assert_eq!(ints.len(), 5000);
    let (a, b) = (ints.snapshot().encode().unwrap(), heap.snapshot(0).encode().unwrap());
    assert_eq!(entries(&a), entries(&b));
    let counts = |blocks: &[KeyGroupBlock]| blocks.iter().map(|b| (b.key_group, b.entries)).collect::<Vec<_>>();
    assert_eq!(counts(&a), counts(&b));
    assert!(
        a.iter().all(|b| !keyed_block::is_delta(&b.data) && b.data[0] != 0xFF),
        "version 1"
    );
}

/// A snapshot is the state at its barrier: writes after it (to groups the snapshot holds,
/// which are copied first) are not in it, and the state goes on from where it was.
#[test]
fn writes_after_a_snapshot_are_not_in_it() {
    let (mut ints, _) = fill(300);
    let snapshot = ints.snapshot();
    for k in 0..600 {
        let (kg, hash) = keyed(k);
        ints.update(kg, hash, k, |v| v.map_or(100, |v| v + 100));
    }
    let (_, mut heap) = fill(300);
    assert_eq!(
        entries(&snapshot.encode().unwrap()),
        entries(&heap.snapshot(0).encode().unwrap())
    );
    let (kg, hash) = keyed(7);
    assert_eq!(ints.get(kg, hash, 7), Some(&(7 % 5 + 1 + 100)));
    assert_eq!(ints.len(), 600);
    assert!(ints.remove(kg, hash, 7));
    assert!(!ints.remove(kg, hash, 7));
    assert_eq!(ints.get(kg, hash, 7), None);
    assert_eq!(ints.len(), 599);
}

/// A batch's [`IntKeyedState::update_each`] is `update` row by row: the same values handed
/// out in order, the same state, and a snapshot taken before it holds the state at its
/// barrier, whether the encoder still holds its groups (they are copied back) or released
/// them (taken back without a copy).
#[test]
fn update_each_is_update_row_by_row_around_snapshots() {
    let batch: Vec<i64> = (0..3000).map(|i| (i * 7919) % 900).collect();
    let rows = |keys: &[i64]| {
        let (kg, hashes): (Vec<u32>, Vec<u64>) = keys.iter().map(|&k| keyed(k)).unzip();
        (kg, hashes, keys.to_vec())
    };
    let (key_groups, hashes, keys) = rows(&batch);
    for encoder_holds in [true, false] {
        let (mut one_by_one, _) = fill(500);
        let (mut each, _) = fill(500);
        let before = one_by_one.snapshot().encode().unwrap();
        let mut held = Some(each.snapshot());
        if !encoder_holds {
            let released = held.take().unwrap().encode().unwrap();
            assert_eq!(entries(&released), entries(&before));
        }
        let mut want = vec![];
        for i in 0..keys.len() {
            want.push(one_by_one.update(key_groups[i], hashes[i], keys[i], |v| v.map_or(i as i64, |v| v * 3 + 1)));
        }
        let mut got = vec![];
        each.update_each(
            (&key_groups, &hashes, &keys),
            |i, v| v.map_or(i as i64, |v| v * 3 + 1),
            |i, v| got.push((i, *v)),
        );
        assert_eq!(got, want.iter().copied().enumerate().collect::<Vec<_>>());
        assert_eq!(each.len(), one_by_one.len());
        assert_eq!(
            entries(&each.snapshot().encode().unwrap()),
            entries(&one_by_one.snapshot().encode().unwrap())
        );
        if let Some(held) = held {
            assert_eq!(
                entries(&held.encode().unwrap()),
                entries(&before),
                "the barrier's state"
            );
        }
    }
}

/// The block writer gives `keyed_block::encode_v1`'s bytes exactly, for keys of every varint
/// length and sign and for `count`'s `Num` values (integers and floats).
#[test]
fn blocks_are_encode_v1_bytes() {
    use crate::operators::aggregate::Num;
    let keys = [
        0,
        1,
        -1,
        63,
        -64,
        64,
        127,
        128,
        -129,
        300,
        1 << 20,
        -(1 << 40),
        i64::MAX,
        i64::MIN,
    ];
    let mut table: HashTable<(i64, Num)> = HashTable::new();
    for (i, &k) in keys.iter().enumerate() {
        let v = if i % 3 == 0 {
            Num::Float(i as f64 + 0.5)
        } else {
            Num::Int(k.wrapping_mul(7))
        };
        table.insert_unique(table_hash(int_key_hash(k)), (k, v), entry_hash);
    }
    let owned: Vec<(Key, &Num)> = table.iter().map(|(k, v)| (Key::Int(*k), v)).collect();
    let refs: Vec<(&Key, &Num)> = owned.iter().map(|(k, v)| (k, *v)).collect();
    assert_eq!(encode_v1_block(&table).unwrap(), keyed_block::encode_v1(&refs).unwrap());
    let empty: HashTable<(i64, Num)> = HashTable::new();
    assert_eq!(
        encode_v1_block(&empty).unwrap(),
        keyed_block::encode_v1::<Num>(&[]).unwrap()
    );
}

/// Restores split the blocks by key group (a rescale to 3 subtasks), and blocks of the
/// generic table restore into the integer table; a block with another key, or a delta, is
/// handed back for the generic table.
#[test]
fn restores_by_key_group_and_hands_back_what_it_cannot_hold() {
    let (_, mut heap) = fill(2000);
    let blocks = heap.snapshot(0).encode().unwrap();
    let mut total = 0;
    let mut restored = vec![];
    for subtask in 0..3 {
        let mut part = IntKeyedState::<i64>::new(key_group_range(subtask, 3, MAX_P));
        part.restore(blocks.clone()).unwrap().unwrap();
        total += part.len();
        restored.extend(part.snapshot().encode().unwrap());
    }
    assert_eq!(total, 2000);
    assert_eq!(entries(&restored), entries(&blocks));

    let mut strings = HeapKeyedState::<i64>::new(key_group_range(0, 1, MAX_P), None);
    let key = Key::Str("s".into());
    let hash = crate::state::key_group::key_hash(&key);
    strings.update(key_group_of_hash(hash, MAX_P), hash, &key, 0, |_| 1);
    let mixed: Vec<KeyGroupBlock> = blocks
        .iter()
        .cloned()
        .chain(strings.snapshot(0).encode().unwrap())
        .collect();
    let mut ints = IntKeyedState::<i64>::new(key_group_range(0, 1, MAX_P));
    let back = ints.restore(mixed.clone()).unwrap().unwrap_err();
    assert_eq!(back.len(), mixed.len());
    assert!(ints.is_empty(), "nothing loaded");
    let broken = vec![KeyGroupBlock {
        expired_through_ms: None,
        key_group: 3,
        entries: 1,
        data: vec![1, 2].into(),
    }];
    assert!(ints.restore(broken).unwrap_err().contains("key group 3"));
}

/// `KeyedState` keeps integer keys in the typed table and moves everything to the generic
/// table at the first key of another type, or when changes are tracked; restored mixed
/// blocks land in the generic table.
#[test]
fn keyed_state_moves_to_the_generic_table_when_it_must() {
    let range = key_group_range(0, 1, MAX_P);
    let open = || KeyedState::<i64>::open(&BackendChoice::Heap, range, None).unwrap();
    let add = |s: &mut KeyedState<i64>, key: Key| {
        let hash = crate::state::key_group::key_hash(&key);
        s.update(key_group_of_hash(hash, MAX_P), hash, &key, 0, |v| {
            v.map_or(1, |v| v + 1)
        })
        .unwrap()
    };
    let mut s = open();
    for k in 0..100 {
        add(&mut s, Key::Int(k));
    }
    assert!(matches!(s, KeyedState::HeapInt(_)));
    assert_eq!(add(&mut s, Key::Str("w".into())), 1);
    assert!(matches!(s, KeyedState::Heap(_)));
    assert_eq!(add(&mut s, Key::Int(5)), 2, "the integer entries moved over");
    assert_eq!(s.len(), 101);

    let mut tracked = open();
    add(&mut tracked, Key::Int(1));
    tracked.track_changes();
    assert!(matches!(tracked, KeyedState::Heap(_)));
    assert_eq!(add(&mut tracked, Key::Int(1)), 2);

    let blocks = s.snapshot(0).encode().unwrap();
    let mut restored = open();
    restored.restore(blocks, 0).unwrap();
    assert!(matches!(restored, KeyedState::Heap(_)));
    assert_eq!(restored.len(), 101);
}
