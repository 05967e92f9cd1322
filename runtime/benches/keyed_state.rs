//! The heap keyed state's checkpoint costs, each against a baseline measured in the same run:
//!
//! 1. Synchronous part of a snapshot (on the task thread): `HeapKeyedState::snapshot`
//!    (copy-on-write freeze) vs cloning every key-group table (what the aggregation did before).
//! 2. Updates while a snapshot is in flight (writes go to the delta) vs with none in flight.
//! 3. Encoding (off the task thread) vs postcard-encoding the same entries from a plain `Vec`.
//! 4. Merge of the deltas after the encoder released the groups.
//! 5. Bytes written per checkpoint, incremental (`checkpointing.incremental: true`: base and
//!    deltas, compacted by the default policy) vs full, over `WEIR_BENCH_CHECKPOINTS`
//!    checkpoints (default 20) of a skewed, slowly growing key set: between two checkpoints
//!    `WEIR_BENCH_INTERVAL_UPDATES` updates (default 200,000), 90 % to a hot 1 % of the keys,
//!    10 % spread over all keys, and 0.1 % of the key count new keys.
//!
//! Run: `cargo bench -p weir-runtime --bench keyed_state`. Environment: `WEIR_BENCH_KEYS`
//! (distinct keys; default 5,000,000), `WEIR_BENCH_UPDATES` (updates timed in part 2; default
//! 5,000,000). Keys are `key-<n>` strings as the generator makes them; 128 key groups.

use std::time::Instant;
use weir_runtime::record::Key;
use weir_runtime::state::heap::HeapKeyedState;
use weir_runtime::state::key_group::{key_group_of_hash, key_group_range, key_hash};

/// The same allocator as the `weir` binary.
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

const MAX_P: u32 = 128;

fn env_u64(name: &str, default: u64) -> u64 {
    std::env::var(name).ok().and_then(|s| s.parse().ok()).unwrap_or(default)
}

struct Keyed {
    key: Key,
    hash: u64,
    group: u32,
}

fn keyed(n: u64) -> Keyed {
    let key = Key::Str(format!("key-{n}").into());
    let hash = key_hash(&key);
    Keyed {
        group: key_group_of_hash(hash, MAX_P),
        hash,
        key,
    }
}

fn add(state: &mut HeapKeyedState<i64>, k: &Keyed) -> i64 {
    state.update(k.group, k.hash, &k.key, 0, |old| old.copied().unwrap_or(0) + 1)
}

fn secs(t: Instant) -> f64 {
    t.elapsed().as_secs_f64()
}

fn main() {
    let keys = env_u64("WEIR_BENCH_KEYS", 5_000_000);
    let updates = env_u64("WEIR_BENCH_UPDATES", 5_000_000);
    let all: Vec<Keyed> = (0..keys).map(keyed).collect();
    let mut state: HeapKeyedState<i64> = HeapKeyedState::new(key_group_range(0, 1, MAX_P), None);
    for k in &all {
        add(&mut state, k);
    }
    // The old synchronous part: a clone of every key-group table of (key, value).
    let mut tables: Vec<hashbrown::HashTable<(Key, i64)>> = (0..MAX_P).map(|_| hashbrown::HashTable::new()).collect();
    for k in &all {
        tables[k.group as usize].insert_unique(k.hash.rotate_left(32), (k.key.clone(), 1), |e| {
            key_hash(&e.0).rotate_left(32)
        });
    }
    println!("heap keyed state, {keys} keys, {MAX_P} key groups");
    println!("{:<52} {:>12} {:>12} {:>10}", "part", "baseline s", "weir s", "ratio");

    let t = Instant::now();
    let copy: Vec<_> = tables.to_vec();
    let clone_s = secs(t);
    drop(copy);
    let t = Instant::now();
    let snapshot = state.snapshot(0);
    let freeze_s = secs(t);
    println!(
        "{:<52} {clone_s:>12.6} {freeze_s:>12.6} {:>10.5}",
        "1. sync part: clone all tables vs freeze",
        freeze_s / clone_s
    );

    // 2. Updates with the snapshot in flight (delta) vs after release (owned tables).
    let stride = (keys / updates.min(keys).max(1)).max(1);
    let picks: Vec<&Keyed> = (0..updates)
        .map(|i| &all[((i * stride + i / keys) % keys) as usize])
        .collect();
    let t = Instant::now();
    for k in &picks {
        add(&mut state, k);
    }
    let in_flight_s = secs(t);

    // 3. Encode the snapshot vs a plain postcard encode of the same entries.
    let t = Instant::now();
    let blocks = snapshot.encode().unwrap();
    let encode_s = secs(t);
    let bytes: usize = blocks.iter().map(|b| b.data.len()).sum();
    let plain: Vec<(&Key, i64)> = all.iter().map(|k| (&k.key, 1)).collect();
    let t = Instant::now();
    let raw = postcard::to_stdvec(&plain).unwrap();
    let raw_s = secs(t);
    println!(
        "{:<52} {raw_s:>12.3} {encode_s:>12.3} {:>10.2}",
        format!("3. encode {} MB: plain postcard vs snapshot", bytes / 1_000_000),
        encode_s / raw_s
    );
    drop((blocks, raw));

    // 4. Merge of the deltas, then updates on owned tables.
    let t = Instant::now();
    state.maintain(0, 0);
    let merge_s = secs(t);
    let t = Instant::now();
    for k in &picks {
        add(&mut state, k);
    }
    let owned_s = secs(t);
    println!(
        "{:<52} {owned_s:>12.3} {in_flight_s:>12.3} {:>10.2}",
        format!("2. {updates} updates: none in flight vs in flight"),
        in_flight_s / owned_s
    );
    println!(
        "{:<52} {clone_s:>12.3} {merge_s:>12.3} {:>10.2}",
        "4. merge of the deltas (vs the clone of part 1)",
        merge_s / clone_s
    );
    assert_eq!(state.len() as u64, keys);
    drop(state);
    incremental_vs_full(&all);
}

/// Part 5: bytes per checkpoint, incremental vs full, on the same state and the same updates.
fn incremental_vs_full(all: &[Keyed]) {
    use weir_runtime::state::incremental::{DEFAULT_POLICY, Form, IncrementalTracker};
    let checkpoints = env_u64("WEIR_BENCH_CHECKPOINTS", 20);
    let per_interval = env_u64("WEIR_BENCH_INTERVAL_UPDATES", 200_000);
    let keys = all.len() as u64;
    let mut state: HeapKeyedState<i64> = HeapKeyedState::new(key_group_range(0, 1, MAX_P), None);
    state.track_changes();
    for k in all {
        add(&mut state, k);
    }
    let mut tracker = IncrementalTracker::default();
    // xorshift64*: deterministic, no dependency.
    let mut seed = 0x9E37_79B9_7F4A_7C15u64;
    let mut next = move || {
        seed ^= seed >> 12;
        seed ^= seed << 25;
        seed ^= seed >> 27;
        seed.wrapping_mul(0x2545_F491_4F6C_DD1D)
    };
    let (mut full_bytes, mut incremental_bytes, mut deltas, mut full_s, mut incremental_s) = (0u64, 0u64, 0, 0.0, 0.0);
    let mut grown = keys;
    for id in 1..=checkpoints {
        if id > 1 {
            let hot = (keys / 100).max(1);
            for _ in 0..per_interval {
                let r = next();
                let n = if r % 10 < 9 { r / 10 % hot } else { r / 10 % keys };
                add(&mut state, &all[n as usize]);
            }
            for _ in 0..(keys / 1000) {
                add(&mut state, &keyed(grown));
                grown += 1;
            }
        }
        let changes = state.take_changes();
        let confirmed = (id > 1).then_some(id - 1);
        let plan = tracker.plan(id, Some(confirmed), changes, state.len() as u64, DEFAULT_POLICY);
        let t = Instant::now();
        let blocks = match plan.form {
            Form::Delta { .. } => {
                deltas += 1;
                state.snapshot(0).encode_delta(&plan.changes.union()).unwrap()
            }
            _ => state.snapshot(0).encode().unwrap(),
        };
        incremental_s += secs(t);
        incremental_bytes += blocks.iter().map(|b| b.data.len() as u64).sum::<u64>();
        drop(blocks);
        tracker.confirm(id);
        state.maintain(0, 0);
        let t = Instant::now();
        let full = state.snapshot(0).encode().unwrap();
        full_s += secs(t);
        full_bytes += full.iter().map(|b| b.data.len() as u64).sum::<u64>();
        drop(full);
        state.maintain(0, 0);
    }
    let mb = |b: u64| b as f64 / checkpoints as f64 / 1e6;
    println!(
        "{:<52} {:>12.2} {:>12.2} {:>10.3}",
        format!("5. MB per checkpoint: full vs incremental ({deltas}/{checkpoints} deltas)"),
        mb(full_bytes),
        mb(incremental_bytes),
        incremental_bytes as f64 / full_bytes as f64
    );
    println!(
        "{:<52} {full_s:>12.3} {incremental_s:>12.3} {:>10.3}",
        "5. encode s, all checkpoints: full vs incremental",
        incremental_s / full_s
    );
}
