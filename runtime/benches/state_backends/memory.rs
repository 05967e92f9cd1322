//! Part `memory`: the keyed state alone, heap vs disk, peak memory, update throughput and
//! snapshot encoding, at two key counts, each printed as a ratio against the heap backend and
//! against the smaller key count.
//!
//! Each measurement runs in a child process of this bench (so one backend's peak RSS does not
//! hide the other's): it counts `keys` distinct `key-<n>` strings twice each (a
//! read-modify-write per record, as the keyed count does), then encodes a full snapshot, and
//! reports its peak RSS (`VmHWM`) above its RSS at start, after the updates and after the
//! encoding. The claim to check: while processing, the disk backend's peak RSS is bounded by
//! its cache and write buffer (48 MiB), so it barely grows from 1× to 4× the keys, while the
//! heap's grows with the key count. A checkpoint holds the subtask's encoded state in memory
//! while it is written, on both backends (the second peak).

use crate::rss::status_kib;
use std::time::Instant;
use weir_runtime::record::Key;
use weir_runtime::state::backend::{BackendChoice, KeyedState};
use weir_runtime::state::disk::DiskStateOptions;
use weir_runtime::state::key_group::{key_group_of_hash, key_group_range, key_hash};

const MAX_P: u32 = 128;

/// The child: counts `keys` keys twice on `backend`, encodes a snapshot, prints one line
/// `update_peak_kib peak_kib update_s encode_s bytes`.
pub fn child(backend: &str, keys: u64) {
    let start_kib = status_kib("VmRSS");
    let dir = tempfile::tempdir().expect("temp dir");
    let choice = match backend {
        "heap" => BackendChoice::Heap,
        _ => BackendChoice::Disk {
            dir: dir.path().join("count-0"),
            options: DiskStateOptions::default(),
        },
    };
    let mut state: KeyedState<i64> = KeyedState::open(&choice, key_group_range(0, 1, MAX_P), None).expect("open");
    let t = Instant::now();
    for _round in 0..2 {
        for n in 0..keys {
            let key = Key::Str(format!("key-{n}").into());
            let hash = key_hash(&key);
            state
                .update(key_group_of_hash(hash, MAX_P), hash, &key, 0, |old| {
                    old.copied().unwrap_or(0) + 1
                })
                .expect("update");
        }
        state.maintain(0, 0).expect("maintain");
    }
    let update_s = t.elapsed().as_secs_f64();
    let update_peak_kib = status_kib("VmHWM").saturating_sub(start_kib);
    let t = Instant::now();
    let blocks = state.snapshot(0).encode().expect("encode");
    let encode_s = t.elapsed().as_secs_f64();
    let bytes: usize = blocks.iter().map(|b| b.data.len()).sum();
    assert_eq!(blocks.iter().map(|b| b.entries).sum::<u64>(), keys);
    drop(blocks);
    let peak_kib = status_kib("VmHWM").saturating_sub(start_kib);
    println!("{update_peak_kib} {peak_kib} {update_s} {encode_s} {bytes}");
}

struct Measured {
    update_peak_mib: f64,
    peak_mib: f64,
    updates_per_s: f64,
    encode_s: f64,
    bytes: f64,
}

fn measure(backend: &str, keys: u64) -> Measured {
    let out = std::process::Command::new(std::env::current_exe().expect("own path"))
        .args(["--child-memory", backend, &keys.to_string()])
        .output()
        .expect("run the child");
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    let text = String::from_utf8_lossy(&out.stdout);
    let f: Vec<f64> = text.split_whitespace().map(|x| x.parse().expect("a number")).collect();
    Measured {
        update_peak_mib: f[0] / 1024.0,
        peak_mib: f[1] / 1024.0,
        updates_per_s: 2.0 * keys as f64 / f[2],
        encode_s: f[3],
        bytes: f[4],
    }
}

/// Runs part `memory` at `small` and 4× `small` keys and prints its table.
pub fn run(small: u64) {
    let large = small * 4;
    println!("\n[memory] keyed state alone, heap vs disk; each row a child process; ratios disk/heap");
    println!(
        "{:>10} {:>6} {:>14} {:>14} {:>14} {:>10} {:>12}",
        "keys", "store", "peak MiB upd", "+encode MiB", "updates/s", "encode s", "encoded MB"
    );
    let mut rows = Vec::new();
    for keys in [small, large] {
        let heap = measure("heap", keys);
        let disk = measure("disk", keys);
        for (name, m) in [("heap", &heap), ("disk", &disk)] {
            println!(
                "{keys:>10} {name:>6} {:>14.1} {:>14.1} {:>14.0} {:>10.3} {:>12.1}",
                m.update_peak_mib,
                m.peak_mib,
                m.updates_per_s,
                m.encode_s,
                m.bytes / 1e6
            );
        }
        println!(
            "{keys:>10} {:>6} {:>14.3} {:>14.3} {:>14.3} {:>10.3} {:>12.3}",
            "ratio",
            disk.update_peak_mib / heap.update_peak_mib,
            disk.peak_mib / heap.peak_mib,
            disk.updates_per_s / heap.updates_per_s,
            disk.encode_s / heap.encode_s,
            disk.bytes / heap.bytes
        );
        rows.push((heap, disk));
    }
    let (small_heap, small_disk) = &rows[0];
    let (large_heap, large_disk) = &rows[1];
    println!(
        "peak RSS while updating, growth from {small} to {large} keys: heap {:.2}x, disk {:.2}x (bounded: close to 1)",
        large_heap.update_peak_mib / small_heap.update_peak_mib,
        large_disk.update_peak_mib / small_disk.update_peak_mib
    );
}
