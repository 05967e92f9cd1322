//! Generator-shaped batches (id i64, key "key-<k>" string, value i64), 1024 rows each, built
//! with Arrow builders or plain vectors, then a `id % 100000` column kernel and a drop.
use arrow_array::builder::{Int64Builder, StringBuilder};
use arrow_array::{Array, Int64Array};
use std::hint::black_box;

fn splitmix64(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9e37_79b9_7f4a_7c15);
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

fn arrow_batch(first: u64) -> u64 {
    let n = 1024;
    let mut id = Int64Builder::with_capacity(n);
    let mut key = StringBuilder::with_capacity(n, n * 10);
    let mut value = Int64Builder::with_capacity(n);
    let mut digits = itoa::Buffer::new();
    for j in 0..n as u64 {
        let i = first + j;
        let h = splitmix64(42 ^ splitmix64(i));
        id.append_value(i as i64);
        use std::fmt::Write;
        let _ = key.write_str("key-");
        let _ = key.write_str(digits.format(h % 100000));
        key.append_value("");
        value.append_value(((h >> 40) % 1000) as i64);
    }
    let (id, key, value) = (id.finish(), key.finish(), value.finish());
    // kernel: id % 100000 over the column
    let keys: Int64Array = id.values().iter().map(|x| x % 100000).collect::<Vec<_>>().into();
    let sum: i64 = keys.values().iter().sum();
    black_box((&key, &value));
    (sum + key.len() as i64 + value.null_count() as i64) as u64
}

fn own_batch(first: u64) -> u64 {
    let n = 1024;
    let mut id: Vec<i64> = Vec::with_capacity(n);
    let mut offsets: Vec<u32> = Vec::with_capacity(n + 1);
    let mut bytes: Vec<u8> = Vec::with_capacity(n * 10);
    let mut value: Vec<i64> = Vec::with_capacity(n);
    let mut digits = itoa::Buffer::new();
    offsets.push(0);
    for j in 0..n as u64 {
        let i = first + j;
        let h = splitmix64(42 ^ splitmix64(i));
        id.push(i as i64);
        bytes.extend_from_slice(b"key-");
        bytes.extend_from_slice(digits.format(h % 100000).as_bytes());
        offsets.push(bytes.len() as u32);
        value.push(((h >> 40) % 1000) as i64);
    }
    let keys: Vec<i64> = id.iter().map(|x| x % 100000).collect();
    let sum: i64 = keys.iter().sum();
    black_box((&offsets, &bytes, &value));
    (sum + offsets.len() as i64 + value.len() as i64) as u64
}

fn main() {
    let which = std::env::args().nth(1).unwrap_or_default();
    let batches: u64 = std::env::args().nth(2).and_then(|s| s.parse().ok()).unwrap_or(1000);
    let f = if which == "arrow" { arrow_batch } else { own_batch };
    let t = std::time::Instant::now();
    let mut acc = 0u64;
    for b in 0..batches {
        acc = acc.wrapping_add(f(b * 1024));
    }
    eprintln!("{which}: {:?} per record ({acc})", t.elapsed() / (batches * 1024) as u32);
}
