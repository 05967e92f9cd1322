//! The workloads of issue 10's "benchmark that decides", each as a Weir manifest and the same
//! query in Flink SQL (PyFlink), plus the in-process baseline for keyed count.
//!
//! Keyed count: 100,000 uniform keys, keyBy → count → discard (Flink: `GROUP BY` → `COUNT(*)`
//! → blackhole). Integer keys are `id % 100000` over the record sequence on both sides (Weir's
//! generator `id`, Flink's datagen `sequence`); string keys are `key-<k>` with k uniform random
//! below 100,000 (Weir's generator `key`; Flink: datagen random `k`, `CONCAT('key-', k)`).
//! Word count splits the cleaned text on `' '` on both sides. Nexmark q0–q2 read the same bid
//! file with the standard Nexmark queries.

use std::path::Path;

/// Number of distinct keys of keyed count.
pub const KEYS: u64 = 100_000;
/// Seed of Weir's generator.
pub const SEED: u64 = 42;

/// One side of a comparison.
#[derive(Clone, Debug)]
pub enum Side {
    /// `weir run` of this StreamJob manifest (YAML text; `{checkpoints}` is replaced by the
    /// run's checkpoint directory).
    Weir { manifest: String },
    /// The PyFlink driver with this job description (JSON; `{checkpoints}` as for Weir).
    Flink { job: serde_json::Value },
    /// The plain single-threaded `HashMap` count, in the bench's process.
    Baseline { integer_keys: bool },
}

/// A workload: what it is called, how many records it processes, and its sides. The first
/// side is Weir; the ratio printed is first / second for every other side.
#[derive(Clone, Debug)]
pub struct Workload {
    /// Name used by `--only` and in tables.
    pub name: String,
    /// Records each side processes (input records; words for word count).
    pub records: u64,
    /// Sides with their labels, run interleaved in this order each round.
    pub sides: Vec<(String, Side)>,
}

fn weir_manifest(name: &str, parallelism: u32, checkpoint_interval: &str, steps: &str) -> String {
    format!(
        "apiVersion: weir.dev/v1alpha1\nkind: StreamJob\nmetadata: {{ name: {name} }}\nspec:\n  parallelism: {parallelism}\n  checkpointing: {{ interval: {checkpoint_interval}, mode: exactly-once, storage: \"{{checkpoints}}\" }}\n  job:\n    steps:\n{steps}"
    )
}

fn flink_job(parallelism: u32, checkpoints: bool, ddl: &[String], insert: String) -> serde_json::Value {
    serde_json::json!({
        "parallelism": parallelism,
        "checkpointInterval": if checkpoints { "1s" } else { "" },
        "ddl": ddl,
        "insert": insert,
    })
}

fn keyed_count(records: u64, parallelism: u32, integer_keys: bool) -> Workload {
    let kind = if integer_keys { "int" } else { "string" };
    let name = format!("keyed-count-{kind}-p{parallelism}");
    let weir_steps = format!(
        "      - source: {{ generator: {{ seed: {SEED}, count: {records}, keys: {KEYS} }} }}\n      - keyBy: {{ expression: \"{}\", as: key }}\n      - count: {{}}\n      - sink: {{ discard: {{}} }}\n",
        if integer_keys {
            format!("id % {KEYS}")
        } else {
            "key".to_string()
        }
    );
    let source = if integer_keys {
        format!(
            "CREATE TABLE source (id BIGINT) WITH ('connector' = 'datagen', 'number-of-rows' = '{records}', 'rows-per-second' = '1000000000', 'fields.id.kind' = 'sequence', 'fields.id.start' = '0', 'fields.id.end' = '{}')",
            records - 1
        )
    } else {
        format!(
            "CREATE TABLE source (k INT) WITH ('connector' = 'datagen', 'number-of-rows' = '{records}', 'rows-per-second' = '1000000000', 'fields.k.kind' = 'random', 'fields.k.min' = '0', 'fields.k.max' = '{}')",
            KEYS - 1
        )
    };
    let (key_type, key_expression) = if integer_keys {
        ("BIGINT", format!("id % {KEYS}"))
    } else {
        ("STRING", "CONCAT('key-', CAST(k AS STRING))".to_string())
    };
    let ddl = vec![
        source,
        format!("CREATE TABLE sink (key {key_type}, `count` BIGINT) WITH ('connector' = 'blackhole')"),
    ];
    let insert =
        format!("INSERT INTO sink SELECT key, COUNT(*) FROM (SELECT {key_expression} AS key FROM source) GROUP BY key");
    let mut sides = vec![
        (
            "weir".to_string(),
            Side::Weir {
                manifest: weir_manifest("bench", parallelism, "1s", &weir_steps),
            },
        ),
        (
            "flink".to_string(),
            Side::Flink {
                job: flink_job(parallelism, true, &ddl, insert),
            },
        ),
    ];
    if parallelism == 1 {
        sides.push(("baseline".to_string(), Side::Baseline { integer_keys }));
    }
    Workload { name, records, sides }
}

/// Name of the checkpoint-overhead workload.
pub const CHECKPOINT_OVERHEAD: &str = "checkpoint-overhead";

/// Checkpoint overhead: Weir's string-key keyed count at p=1 with checkpoints every second
/// vs periodic checkpoints off (`interval: 0s`; the bounded job still takes its final one).
fn checkpoint_overhead(records: u64) -> Workload {
    let steps = format!(
        "      - source: {{ generator: {{ seed: {SEED}, count: {records}, keys: {KEYS} }} }}\n      - keyBy: {{ expression: key, as: key }}\n      - count: {{}}\n      - sink: {{ discard: {{}} }}\n"
    );
    Workload {
        name: CHECKPOINT_OVERHEAD.into(),
        records,
        sides: vec![
            (
                "weir chk 1s".into(),
                Side::Weir {
                    manifest: weir_manifest("bench", 1, "1s", &steps),
                },
            ),
            (
                "weir no chk".into(),
                Side::Weir {
                    manifest: weir_manifest("bench", 1, "0s", &steps),
                },
            ),
        ],
    }
}

fn word_count(words_path: &Path, words: u64) -> Workload {
    let path = words_path.display();
    let steps = format!(
        "      - source: {{ file: {{ path: \"{path}\", format: text }} }}\n      - flatMap: {{ field: line, pattern: \" \", as: word }}\n      - keyBy: {{ expression: word, as: word }}\n      - count: {{}}\n      - sink: {{ discard: {{}} }}\n"
    );
    let ddl = vec![
        format!(
            "CREATE TABLE lines (line STRING) WITH ('connector' = 'filesystem', 'path' = 'file://{path}', 'format' = 'csv')"
        ),
        "CREATE TABLE sink (word STRING, `count` BIGINT) WITH ('connector' = 'blackhole')".to_string(),
    ];
    let insert = "INSERT INTO sink SELECT word, COUNT(*) FROM lines CROSS JOIN UNNEST(SPLIT(line, ' ')) AS T(word) WHERE word <> '' GROUP BY word".to_string();
    Workload {
        name: "word-count-p1".into(),
        records: words,
        sides: vec![
            (
                "weir".into(),
                Side::Weir {
                    manifest: weir_manifest("bench", 1, "1s", &steps),
                },
            ),
            (
                "flink".into(),
                Side::Flink {
                    job: flink_job(1, true, &ddl, insert),
                },
            ),
        ],
    }
}

/// Nexmark q0 (pass-through), q1 (currency conversion) and q2 (selection), as in the Nexmark
/// suite's SQL, over the bid file.
fn nexmark(bids_path: &Path, bids: u64) -> Vec<Workload> {
    let path = bids_path.display();
    let bid_table = format!(
        "CREATE TABLE bid (auction BIGINT, bidder BIGINT, price BIGINT, channel STRING, url STRING, `dateTime` TIMESTAMP(3), extra STRING) WITH ('connector' = 'filesystem', 'path' = 'file://{path}', 'format' = 'json')"
    );
    let source = format!("      - source: {{ file: {{ path: \"{path}\", format: jsonl }} }}\n");
    let queries = [
        (
            "nexmark-q0",
            "      - map: { expression: '{\"auction\": auction, \"bidder\": bidder, \"price\": price, \"dateTime\": dateTime, \"extra\": extra}' }\n",
            "CREATE TABLE sink (auction BIGINT, bidder BIGINT, price BIGINT, `dateTime` TIMESTAMP(3), extra STRING) WITH ('connector' = 'blackhole')",
            "INSERT INTO sink SELECT auction, bidder, price, `dateTime`, extra FROM bid",
        ),
        (
            "nexmark-q1",
            "      - map: { expression: '{\"auction\": auction, \"bidder\": bidder, \"price\": 0.908 * double(price), \"dateTime\": dateTime, \"extra\": extra}' }\n",
            "CREATE TABLE sink (auction BIGINT, bidder BIGINT, price DECIMAL(23, 3), `dateTime` TIMESTAMP(3), extra STRING) WITH ('connector' = 'blackhole')",
            "INSERT INTO sink SELECT auction, bidder, 0.908 * price AS price, `dateTime`, extra FROM bid",
        ),
        (
            "nexmark-q2",
            "      - filter: { expression: \"auction % 123 == 0\" }\n      - map: { expression: '{\"auction\": auction, \"price\": price}' }\n",
            "CREATE TABLE sink (auction BIGINT, price BIGINT) WITH ('connector' = 'blackhole')",
            "INSERT INTO sink SELECT auction, price FROM bid WHERE MOD(auction, 123) = 0",
        ),
    ];
    queries
        .into_iter()
        .map(|(name, weir_steps, sink, insert)| Workload {
            name: format!("{name}-p1"),
            records: bids,
            sides: vec![
                (
                    "weir".into(),
                    Side::Weir {
                        manifest: weir_manifest(
                            "bench",
                            1,
                            "1s",
                            &format!("{source}{weir_steps}      - sink: {{ discard: {{}} }}\n"),
                        ),
                    },
                ),
                (
                    "flink".into(),
                    Side::Flink {
                        job: flink_job(1, true, &[bid_table.clone(), sink.to_string()], insert.to_string()),
                    },
                ),
            ],
        })
        .collect()
}

/// Sizes of the workloads.
#[derive(Clone, Copy, Debug)]
pub struct Sizes {
    /// Records of keyed count.
    pub keyed_records: u64,
    /// Records of the checkpoint-overhead runs.
    pub checkpoint_records: u64,
    /// Bids of the Nexmark queries.
    pub bids: u64,
}

/// Every workload, in the order they run.
pub fn all(sizes: Sizes, words_path: &Path, words: u64, bids_path: &Path) -> Vec<Workload> {
    let mut all = Vec::new();
    for integer_keys in [true, false] {
        for parallelism in [1, 2] {
            all.push(keyed_count(sizes.keyed_records, parallelism, integer_keys));
        }
    }
    all.push(word_count(words_path, words));
    all.extend(nexmark(bids_path, sizes.bids));
    all.push(checkpoint_overhead(sizes.checkpoint_records));
    all
}
