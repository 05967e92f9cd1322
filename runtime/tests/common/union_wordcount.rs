//! The union word count of the unaligned-checkpoint tests (`tests/unaligned.rs` with `weir
//! run`, `tests/cluster_unaligned.rs` on the cluster): two real text files (moby_dick.txt and
//! tinyshakespeare.txt) read by two file sources, merged by a `union`, counted by word into a
//! throttled sink; and the `_metadata` of its completed checkpoints.

use super::*;
use serde_json::Value;

/// The union word count: two file sources, lower-cased, merged, split into words, counted by
/// word, into `sink` (see [`file_sink`]). `checkpointing` is the inside of the
/// `checkpointing` mapping after storage and retention (`, interval: 200ms, unaligned: true`).
pub fn manifest(dir: &Path, parallelism: u32, checkpointing: &str, sink: &str) -> PathBuf {
    let data = data_dir();
    let paths = Paths::local(dir);
    let yaml = format!(
        r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: unaligned-wordcount }}
spec:
  parallelism: {parallelism}
  checkpointing: {{ storage: "{ckpt}", retained: 3{checkpointing} }}
  job:
    steps:
      - name: moby
        uid: moby-lines
        source: {{ file: {{ path: "{data}/text/moby_dick.txt" }} }}
      - name: shakespeare
        uid: shakespeare-lines
        source: {{ file: {{ path: "{data}/text/tinyshakespeare.txt" }} }}
      - name: lines
        uid: lines
        union: {{}}
        inputs: [moby, shakespeare]
      - map: {{ expression: "{{'line': line.lower()}}" }}
      - flatMap: {{ field: line, pattern: '\W+', as: word }}
      - keyBy: {{ expression: word, as: word }}
      - uid: counts
        count: {{}}
      - uid: output
        sink: {sink}
"#,
        data = data.display(),
        ckpt = paths.checkpoints,
    );
    let f = dir.join("job.yaml");
    std::fs::write(&f, yaml).unwrap();
    f
}

/// A file sink into `<dir>/output` taking at most `rate` records per second per subtask.
pub fn file_sink(dir: &Path, rate: u64) -> String {
    format!(
        r#"{{ file: {{ path: "{}", maxRecordsPerSecond: {rate} }} }}"#,
        dir.join("output").display()
    )
}

/// The `_metadata` bodies of the completed checkpoints of [`manifest`]'s job in `dir`'s
/// checkpoint storage, oldest first.
pub fn checkpoints(dir: &Path) -> Vec<Value> {
    let job_dir = dir.join("checkpoints/unaligned-wordcount");
    let mut found: Vec<(u64, PathBuf)> = std::fs::read_dir(&job_dir)
        .unwrap()
        .filter_map(|e| {
            let p = e.unwrap().path();
            let id: u64 = p.file_name()?.to_str()?.strip_prefix("chk-")?.parse().ok()?;
            p.join("_metadata").exists().then_some((id, p))
        })
        .collect();
    found.sort();
    found
        .iter()
        .map(|(_, p)| {
            let text = std::fs::read_to_string(p.join("_metadata")).unwrap();
            serde_json::from_str(text.split_once('\n').unwrap().1).unwrap()
        })
        .collect()
}

/// The `_metadata` body of the newest completed checkpoint in `dir`'s checkpoint storage.
pub fn newest_checkpoint(dir: &Path) -> Value {
    checkpoints(dir).pop().expect("a completed checkpoint")
}

/// The failure-free output of [`manifest`]'s job at parallelism 2 with aligned checkpoints
/// and no throttle, run by `weir run` in a directory of its own.
pub fn failure_free_output() -> Vec<String> {
    let reference = tempfile::tempdir().unwrap();
    let m = manifest(
        reference.path(),
        2,
        ", interval: 200ms",
        &file_sink(reference.path(), 1_000_000),
    );
    Weir::run(&m, &[], &[]).wait_ok();
    local_output(&reference.path().join("output"))
}
