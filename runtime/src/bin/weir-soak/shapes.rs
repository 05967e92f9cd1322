//! The jobs of the `unaligned` and `windows` modes: their manifests, and for the windows the
//! expected results computed here, independently of the runtime, from the trial's input.

use crate::expected::InputFile;
use crate::plan::{Plan, Shape, WindowKind};
use std::collections::BTreeMap;

/// Storage paths of a local trial: (checkpoints, savepoints, output).
pub type LocalPaths = (String, String, String);

/// The union word count with unaligned checkpoints: `a-*` and `b-*` of the input directory are
/// two file sources, merged by a `union`, lower-cased, split into words and counted by word
/// into a file sink taking at most `sink_rate` records per second per subtask.
/// With the shape's checkpoint timeout and `tolerableFailedCheckpoints` when set.
pub fn union_unaligned_manifest(plan: &Plan, input: &str, (ckpt, svp, out): &LocalPaths) -> String {
    let Shape::UnionUnaligned {
        timeout_ms,
        sink_rate,
        unaligned,
        checkpoint_timeout_ms,
        tolerable_failed,
        ttl,
    } = plan.shape
    else {
        return String::new();
    };
    let mut extra = String::new();
    if unaligned {
        extra.push_str(", unaligned: true");
    }
    if let Some(t) = timeout_ms {
        extra.push_str(&format!(", alignedCheckpointTimeout: {t}ms"));
    }
    if let Some(t) = checkpoint_timeout_ms {
        extra.push_str(&format!(", timeout: {t}ms"));
    }
    if tolerable_failed > 0 {
        extra.push_str(&format!(", tolerableFailedCheckpoints: {tolerable_failed}"));
    }
    let count = if ttl { r#"{ ttl: "1h" }"# } else { "{}" };
    format!(
        r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: union-unaligned }}
spec:
  parallelism: {p}
  checkpointing: {{ interval: {i}ms, mode: exactly-once, storage: "{ckpt}", retained: 2{extra} }}
  savepoints: {{ directory: "{svp}" }}
  job:
    steps:
      - name: first
        uid: first-lines
        source: {{ file: {{ path: "{input}/a-*", maxRecordsPerSecond: {rate} }} }}
      - name: second
        uid: second-lines
        source: {{ file: {{ path: "{input}/b-*", maxRecordsPerSecond: {rate} }} }}
      - name: lines
        uid: lines
        union: {{}}
        inputs: [first, second]
      - map: {{ expression: "{{'line': line.lower()}}" }}
      - flatMap: {{ field: line, pattern: '\W+', as: word }}
      - keyBy: {{ expression: word, as: word }}
      - uid: counts
        count: {count}
      - uid: output
        sink: {{ file: {{ path: "{out}", maxRecordsPerSecond: {sink_rate} }} }}
"#,
        p = plan.parallelism,
        i = plan.interval_ms,
        rate = plan.rate,
    )
}

/// The window step's flow YAML for `window` (sizes in milliseconds), results named `events`.
fn window_yaml(window: WindowKind) -> String {
    match window {
        WindowKind::Tumbling { size } => format!("{{ type: tumbling, size: {size}ms, as: events }}"),
        WindowKind::Sliding { size, slide } => {
            format!("{{ type: sliding, size: {size}ms, slide: {slide}ms, as: events }}")
        }
        WindowKind::Session { gap } => format!("{{ type: session, gap: {gap}ms, as: events }}"),
    }
}

/// Event-time window counts per repository over the GitHub event slices in the input
/// directory (`dt` the event time, 5 s out-of-orderness: the data's own disorder is at most
/// 2 s, so no record is late). With `union`, `a-*` and `b-*` are two sources merged by a
/// `union` (the window's watermark is the minimum of theirs).
pub fn windowed_manifest(
    plan: &Plan,
    input: &str,
    (ckpt, svp, out): &LocalPaths,
    window: WindowKind,
    union: bool,
) -> String {
    let source = |name: &str, glob: &str| {
        format!(
            r#"      - name: {name}
        uid: {name}
        source:
          file: {{ path: "{input}/{glob}", format: jsonl, maxRecordsPerSecond: {rate} }}
          eventTime: {{ field: dt, maxOutOfOrderness: 5s }}
"#,
            rate = plan.rate
        )
    };
    // The two files' fields are inferred in the order they first appear, which may differ;
    // a union needs the same fields in the same order, so each branch keeps repo and dt.
    let project = |name: &str, input: &str| {
        format!(
            "      - name: {name}\n        inputs: [{input}]\n        map: {{ expression: \"{{'repo': repo, 'dt': dt}}\" }}\n"
        )
    };
    let sources = if union {
        format!(
            "{}{}{}{}      - name: merged\n        uid: merged\n        union: {{}}\n        inputs: [first-projected, second-projected]\n",
            source("first", "a-*"),
            project("first-projected", "first"),
            source("second", "b-*"),
            project("second-projected", "second")
        )
    } else {
        source("events", "*.jsonl")
    };
    format!(
        r#"apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{ name: windowed }}
spec:
  parallelism: {p}
  checkpointing: {{ interval: {i}ms, mode: exactly-once, storage: "{ckpt}", retained: 2 }}
  savepoints: {{ directory: "{svp}" }}
  job:
    steps:
{sources}      - keyBy: {{ expression: repo, as: repo }}
      - uid: windows
        window: {w}
      - uid: output
        sink: {{ file: {{ path: "{out}" }} }}
"#,
        p = plan.parallelism,
        i = plan.interval_ms,
        w = window_yaml(window),
    )
}

/// Epoch milliseconds of `YYYY-MM-DDThh:mm:ssZ` (days from the civil date, H. Hinnant's
/// algorithm), or `None` when the text has another shape.
pub fn epoch_ms(s: &str) -> Option<i64> {
    let n = |a: usize, b: usize| s.get(a..b)?.parse::<i64>().ok();
    let (y, m, d) = (n(0, 4)?, n(5, 7)?, n(8, 10)?);
    let (hh, mm, ss) = (n(11, 13)?, n(14, 16)?, n(17, 19)?);
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let doy = (153 * (if m > 2 { m - 3 } else { m + 9 }) + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 24 + hh) * 60 + mm) * 60_000 + ss * 1000)
}

/// `(repo, event time ms)` of every event of `inputs`.
fn events(inputs: &[InputFile]) -> Vec<(String, i64)> {
    let mut out = vec![];
    for f in inputs {
        for line in f.text.lines() {
            let Ok(v) = serde_json::from_str::<serde_json::Value>(line) else {
                continue;
            };
            if let (Some(repo), Some(t)) = (v["repo"].as_str(), v["dt"].as_str().and_then(epoch_ms)) {
                out.push((repo.to_string(), t));
            }
        }
    }
    out
}

/// One window result as the soak compares it: `repo|start|end|count`.
fn result_line(repo: &str, start: i64, end: i64, count: u64) -> String {
    format!("{repo}|{start}|{end}|{count}")
}

/// A committed window result line in the form of [`result_line`] (the line itself when it is
/// not a window result, so it counts as foreign).
pub fn normalize_result(line: String) -> String {
    let Ok(v) = serde_json::from_str::<serde_json::Value>(&line) else {
        return line;
    };
    match (
        v["repo"].as_str(),
        v["window_start"].as_i64(),
        v["window_end"].as_i64(),
        v["events"].as_u64(),
    ) {
        (Some(r), Some(s), Some(e), Some(n)) => result_line(r, s, e, n),
        _ => line,
    }
}

/// The expected window results of `inputs`, one per (repo, window): no record is late (see
/// [`windowed_manifest`]), so every window holds all its events. Session windows: a key's
/// events sorted by time, a new session when an event comes after the session's end (last
/// event + gap).
pub fn expected_windows(inputs: &[InputFile], window: WindowKind) -> BTreeMap<String, u64> {
    let mut counts: BTreeMap<(String, i64, i64), u64> = BTreeMap::new();
    let evs = events(inputs);
    match window {
        WindowKind::Tumbling { size } => {
            for (repo, t) in evs {
                let start = t - t.rem_euclid(size);
                *counts.entry((repo, start, start + size)).or_default() += 1;
            }
        }
        WindowKind::Sliding { size, slide } => {
            for (repo, t) in evs {
                let mut start = t - t.rem_euclid(slide);
                while start > t - size {
                    *counts.entry((repo.clone(), start, start + size)).or_default() += 1;
                    start -= slide;
                }
            }
        }
        WindowKind::Session { gap } => {
            let mut by_repo: BTreeMap<String, Vec<i64>> = BTreeMap::new();
            for (repo, t) in evs {
                by_repo.entry(repo).or_default().push(t);
            }
            for (repo, mut times) in by_repo {
                times.sort_unstable();
                let (mut start, mut end, mut n) = (times[0], times[0] + gap, 0u64);
                for t in times {
                    if t > end {
                        counts.insert((repo.clone(), start, end), n);
                        (start, n) = (t, 0);
                    }
                    end = end.max(t + gap);
                    n += 1;
                }
                counts.insert((repo, start, end), n);
            }
        }
    }
    counts
        .into_iter()
        .map(|((r, s, e), n)| (result_line(&r, s, e, n), 1))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn input(events: &[(&str, &str)]) -> Vec<InputFile> {
        let text: String = events
            .iter()
            .map(|(r, dt)| format!("{}\n", serde_json::json!({"repo": r, "dt": dt})))
            .collect();
        vec![InputFile { name: "a".into(), text }]
    }

    #[test]
    fn epoch_ms_of_known_instants() {
        assert_eq!(epoch_ms("1970-01-01T00:00:00Z"), Some(0));
        assert_eq!(epoch_ms("2015-02-22T21:00:01Z"), Some(1_424_638_801_000));
        assert_eq!(epoch_ms("not a date"), None);
    }

    #[test]
    fn expected_windows_per_kind() {
        let evs = input(&[
            ("r", "1970-01-01T00:00:01Z"),
            ("r", "1970-01-01T00:00:12Z"),
            ("s", "1970-01-01T00:00:05Z"),
            ("r", "1970-01-01T00:00:03Z"),
        ]);
        let lines = |w| expected_windows(&evs, w).into_keys().collect::<Vec<_>>();
        assert_eq!(
            lines(WindowKind::Tumbling { size: 10_000 }),
            ["r|0|10000|2", "r|10000|20000|1", "s|0|10000|1"]
        );
        assert_eq!(
            lines(WindowKind::Sliding {
                size: 10_000,
                slide: 5_000
            }),
            [
                "r|-5000|5000|2",
                "r|0|10000|2",
                "r|10000|20000|1",
                "r|5000|15000|1",
                "s|0|10000|1",
                "s|5000|15000|1"
            ]
        );
        assert_eq!(
            lines(WindowKind::Session { gap: 5_000 }),
            ["r|1000|8000|2", "r|12000|17000|1", "s|5000|10000|1"]
        );
    }

    #[test]
    fn committed_results_normalize_to_result_lines() {
        let l = r#"{"repo":"a/b","window_start":0,"window_end":60000,"events":3}"#;
        assert_eq!(normalize_result(l.into()), "a/b|0|60000|3");
        assert_eq!(normalize_result("garbage".into()), "garbage");
    }
}
