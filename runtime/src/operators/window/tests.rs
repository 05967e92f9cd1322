use super::*;
use crate::record::KeyedBy;
use crate::state::key_group::key_group_range;
use crate::state::snapshot::KeyGroupBlock;
use serde_json::json;
use state::GroupSnapshot;

fn def(assigner: WindowAssigner, lateness: i64) -> WindowDef {
    WindowDef {
        assigner,
        func: AggregateFn::Count,
        expression: None,
        as_field: "count".into(),
        allowed_lateness_ms: lateness,
        late_side_output: false,
        time_field: "t".into(),
        time_unit: None,
    }
}

fn rec(key: &str, t: i64) -> Record {
    Record {
        row: Row::from_json(json!({ "t": t })),
        keyed: Some(KeyedBy::new(Key::Str(key.into()), 8)),
    }
}

fn rows(out: &[Record]) -> Vec<serde_json::Value> {
    out.iter().map(|r| r.row.to_json()).collect()
}

use crate::state::incremental::Form;

fn barrier() -> Barrier {
    let target = Arc::new(crate::checkpoint::SnapshotTarget {
        store: Arc::new(crate::storage::LocalStore::new("/tmp").unwrap()),
        dir: "x".into(),
    });
    Barrier {
        id: 1,
        kind: crate::control::api::SnapshotKind::Checkpoint,
        stop: false,
        target,
        triggered_at_ms: 0,
        is_final: false,
        incremental: None,
    }
}

fn op(d: &WindowDef, range: KeyGroupRange, restore: OperatorRestore) -> (WindowOperator, Arc<AtomicU64>) {
    let late = Arc::new(AtomicU64::new(0));
    (
        WindowOperator::new("w", d, "k", range, restore, late.clone(), &BackendChoice::Heap).unwrap(),
        late,
    )
}

#[tokio::test]
async fn tumbling_fires_once_at_the_watermark_then_updates_within_lateness_and_drops_after() {
    let all = key_group_range(0, 1, 8);
    let (mut w, late) = op(
        &def(WindowAssigner::Tumbling { size_ms: 10 }, 5),
        all,
        Default::default(),
    );
    let mut out = Vec::new();
    w.process(vec![rec("a", 1), rec("a", 9), rec("b", 3), rec("a", 12)], &mut out)
        .await
        .unwrap();
    assert!(out.is_empty());
    w.on_watermark(8, &mut out).await.unwrap();
    assert!(out.is_empty(), "window [0,10) fires at 9");
    w.on_watermark(9, &mut out).await.unwrap();
    assert_eq!(
        rows(&out),
        vec![
            json!({"k": "a", "window_start": 0, "window_end": 10, "count": 2}),
            json!({"k": "b", "window_start": 0, "window_end": 10, "count": 1}),
        ]
    );
    out.clear();
    // Within lateness (9 + 5 > 12): an update at once.
    w.on_watermark(12, &mut out).await.unwrap();
    w.process(vec![rec("a", 2)], &mut out).await.unwrap();
    assert_eq!(
        rows(&out),
        vec![json!({"k": "a", "window_start": 0, "window_end": 10, "count": 3})]
    );
    out.clear();
    // At 14 the lateness of [0,10) has passed: state deleted, a record for it dropped.
    w.on_watermark(14, &mut out).await.unwrap();
    assert_eq!(w.windows().unwrap(), 1, "only [10,20) of a is left");
    w.process(vec![rec("b", 5)], &mut out).await.unwrap();
    assert!(out.is_empty());
    assert_eq!(late.load(Ordering::Relaxed), 1);
    w.on_watermark(crate::exec::watermark::END_OF_TIME, &mut out)
        .await
        .unwrap();
    assert_eq!(
        rows(&out),
        vec![json!({"k": "a", "window_start": 10, "window_end": 20, "count": 1})]
    );
    assert_eq!(w.windows().unwrap(), 0);
}

#[tokio::test]
async fn sessions_merge_and_fire_after_the_gap() {
    let all = key_group_range(0, 1, 8);
    let (mut w, _) = op(&def(WindowAssigner::Session { gap_ms: 10 }, 0), all, Default::default());
    let mut out = Vec::new();
    w.process(vec![rec("a", 0), rec("a", 25), rec("a", 12), rec("a", 40)], &mut out)
        .await
        .unwrap();
    // 0 → [0,10); 25 → [25,35); 12 → [12,22) touches neither; 40 → [40,50).
    w.process(vec![rec("a", 20)], &mut out).await.unwrap(); // [20,30) bridges [12,22) and [25,35)
    w.on_watermark(100, &mut out).await.unwrap();
    assert_eq!(
        rows(&out),
        vec![
            json!({"k": "a", "window_start": 0, "window_end": 10, "count": 1}),
            json!({"k": "a", "window_start": 12, "window_end": 35, "count": 3}),
            json!({"k": "a", "window_start": 40, "window_end": 50, "count": 1}),
        ]
    );
}

/// A snapshot at parallelism 1, restored at 2: each subtask gets its key groups and the
/// watermark; nothing fired before fires again, and a record for a window fired and deleted
/// before the snapshot is late after the restore too.
#[tokio::test]
async fn restore_at_another_parallelism_neither_refires_nor_reopens() {
    let d = def(WindowAssigner::Tumbling { size_ms: 10 }, 0);
    let (mut w, _) = op(&d, key_group_range(0, 1, 8), Default::default());
    let keys: Vec<String> = (0..20).map(|i| format!("k{i}")).collect();
    let mut out = Vec::new();
    w.process(keys.iter().map(|k| rec(k, 5)).collect(), &mut out)
        .await
        .unwrap();
    w.process(keys.iter().map(|k| rec(k, 15)).collect(), &mut out)
        .await
        .unwrap();
    w.on_watermark(9, &mut out).await.unwrap();
    assert_eq!(out.len(), 20);
    let enc = w.snapshot(&barrier()).await.unwrap().unwrap()()
        .unwrap()
        .collect_stream()
        .unwrap();
    let mut fired_after = 0;
    let mut dropped = 0;
    for i in 0..2 {
        let restore = OperatorRestore {
            key_groups: enc.key_groups.clone(),
            operator_state: enc.operator_state.clone(),
        };
        let (mut r, late) = op(&d, key_group_range(i, 2, 8), restore);
        let mine: Vec<Record> = keys
            .iter()
            .map(|k| rec(k, 3))
            .filter(|x| r.range.contains(x.keyed.as_ref().unwrap().key_group))
            .collect();
        let n = mine.len();
        let mut out = Vec::new();
        r.process(mine, &mut out).await.unwrap();
        assert!(out.is_empty());
        dropped += late.load(Ordering::Relaxed);
        assert_eq!(late.load(Ordering::Relaxed), n as u64);
        r.on_watermark(9, &mut out).await.unwrap();
        assert!(out.is_empty(), "[0,10) fired before the snapshot");
        r.on_watermark(19, &mut out).await.unwrap();
        fired_after += out.len();
        assert!(rows(&out).iter().all(|v| v["window_start"] == 10 && v["count"] == 1));
    }
    assert_eq!((fired_after, dropped), (20, 20));
}

/// `blocks` (today's keyed blocks of a snapshot) as the per-group blocks snapshots held before
/// 2026-12-05, each with `watermark`.
fn blocks_before_2026_12_05(blocks: &[KeyGroupBlock], watermark: i64) -> Vec<KeyGroupBlock> {
    blocks
        .iter()
        .map(|block| {
            let windows: state::GroupWindows = crate::state::keyed_block::decode::<KeyWindows>(&block.data)
                .unwrap()
                .into_iter()
                .map(|(key, windows, _)| (key, windows))
                .collect();
            let snap = GroupSnapshot::of(watermark, &windows);
            KeyGroupBlock {
                key_group: block.key_group,
                entries: snap.windows(),
                data: postcard::to_stdvec(&snap).unwrap().into(),
                expired_through_ms: None,
            }
        })
        .collect()
}

/// The same restore at another parallelism from a snapshot of before 2026-12-05 (per-group
/// blocks holding the watermark, an item with the shape alone): nothing fired before fires
/// again, a record for a window fired and deleted before is late, and the open windows fire.
#[tokio::test]
async fn a_snapshot_of_before_2026_12_05_restores_its_windows_and_watermarks() {
    let d = def(WindowAssigner::Tumbling { size_ms: 10 }, 0);
    let (mut w, _) = op(&d, key_group_range(0, 1, 8), Default::default());
    let keys: Vec<String> = (0..20).map(|i| format!("k{i}")).collect();
    let mut out = Vec::new();
    w.process(keys.iter().map(|k| rec(k, 15)).collect(), &mut out)
        .await
        .unwrap();
    let enc = w.snapshot(&barrier()).await.unwrap().unwrap()()
        .unwrap()
        .collect_stream()
        .unwrap();
    let blocks = blocks_before_2026_12_05(&enc.key_groups, 9);
    let shape_alone = postcard::to_stdvec(&window_shape(&d)).unwrap();
    let (mut fired, mut dropped) = (0, 0);
    for i in 0..2 {
        let restore = OperatorRestore {
            key_groups: blocks.clone(),
            operator_state: vec![shape_alone.clone()],
        };
        let (mut r, late) = op(&d, key_group_range(i, 2, 8), restore);
        assert_eq!(r.watermark, 9, "the smallest restored key-group watermark");
        let mine: Vec<Record> = keys
            .iter()
            .map(|k| rec(k, 3))
            .filter(|x| r.range.contains(x.keyed.as_ref().unwrap().key_group))
            .collect();
        let mut out = Vec::new();
        r.process(mine, &mut out).await.unwrap();
        dropped += late.load(Ordering::Relaxed);
        r.on_watermark(19, &mut out).await.unwrap();
        fired += out.len();
        assert!(rows(&out).iter().all(|v| v["window_start"] == 10 && v["count"] == 1));
    }
    assert_eq!((fired, dropped), (20, 20));
}

/// A heap snapshot copies no window: records processed after the barrier, into the same keys
/// and windows and firing some, are not in the snapshot encoded afterwards; a restore on
/// either backend holds the windows as of the barrier. Incremental checkpoints write a base,
/// then deltas of the keys written since, and the chain restores the same windows as a full
/// snapshot, on either backend.
#[tokio::test]
async fn snapshots_hold_the_windows_as_of_the_barrier_full_or_as_chains_on_either_backend() {
    let d = def(WindowAssigner::Tumbling { size_ms: 10 }, 100);
    let all = key_group_range(0, 1, 8);
    let dir = tempfile::tempdir().unwrap();
    let disk = |name: &str| BackendChoice::Disk {
        dir: dir.path().join(name),
        options: Default::default(),
    };
    let incremental_barrier = |id: u64, over: Option<u64>| Barrier {
        id,
        incremental: Some(over),
        ..barrier()
    };
    for (name, backend) in [("heap", BackendChoice::Heap), ("disk", disk("source"))] {
        let late = Arc::new(AtomicU64::new(0));
        let mut w = WindowOperator::new("w", &d, "k", all, Default::default(), late, &backend).unwrap();
        let mut out = Vec::new();
        let keys: Vec<String> = (0..50).map(|i| format!("k{i}")).collect();
        w.process(keys.iter().map(|k| rec(k, 5)).collect(), &mut out)
            .await
            .unwrap();
        // A base (incremental, nothing confirmed), confirmed; then a delta of ten keys.
        let base = w.snapshot(&incremental_barrier(1, None)).await.unwrap().unwrap();
        let base = base().unwrap().collect_stream().unwrap();
        assert_eq!(base.incremental, Some(Form::Base), "{name}");
        w.notify_complete(1).await.unwrap();
        w.process(keys[..10].iter().map(|k| rec(k, 15)).collect(), &mut out)
            .await
            .unwrap();
        let delta = w.snapshot(&incremental_barrier(2, Some(1))).await.unwrap().unwrap();
        // After the barrier, before the delta is encoded: more records, and a firing.
        w.process(keys.iter().map(|k| rec(k, 25)).collect(), &mut out)
            .await
            .unwrap();
        w.on_watermark(9, &mut out).await.unwrap();
        let delta = delta().unwrap().collect_stream().unwrap();
        assert_eq!(delta.incremental, Some(Form::Delta { over: 1 }), "{name}");
        assert_eq!(
            delta.key_groups.iter().map(|b| b.entries).sum::<u64>(),
            10,
            "{name}: the keys written"
        );
        // A full snapshot at the same point as the delta, for comparison: its restore.
        let chain: Vec<KeyGroupBlock> = base.key_groups.iter().chain(&delta.key_groups).cloned().collect();
        for (target, restore_backend) in [
            ("heap", BackendChoice::Heap),
            ("disk", disk(&format!("{name}-to-disk"))),
        ] {
            let restore = OperatorRestore {
                key_groups: chain.clone(),
                operator_state: delta.operator_state.clone(),
            };
            let late = Arc::new(AtomicU64::new(0));
            let mut r = WindowOperator::new("w", &d, "k", all, restore, late, &restore_backend).unwrap();
            assert_eq!(
                r.windows().unwrap(),
                60,
                "{name} → {target}: 50 windows [0,10), 10 of [10,20)"
            );
            let mut fired = Vec::new();
            r.on_watermark(1_000, &mut fired).await.unwrap();
            let mut got: Vec<(String, i64, i64)> = rows(&fired)
                .iter()
                .map(|v| {
                    (
                        v["k"].as_str().unwrap().to_string(),
                        v["window_start"].as_i64().unwrap(),
                        v["count"].as_i64().unwrap(),
                    )
                })
                .collect();
            got.sort();
            let mut want: Vec<(String, i64, i64)> = keys.iter().map(|k| (k.clone(), 0, 1)).collect();
            want.extend(keys[..10].iter().map(|k| (k.clone(), 10, 1)));
            want.sort();
            assert_eq!(got, want, "{name} → {target}");
        }
    }
}

/// The late counter a window increments is the subtask's `weir_late_records_dropped_total`.
#[test]
fn late_records_dropped_is_a_metric_of_the_window_subtask() {
    let m = crate::exec::task::TaskMetrics::default();
    let no_late = crate::metrics::render(&crate::metrics::Scrape {
        job: "wc",
        tasks: &[(
            "windows -> output".to_string(),
            1,
            Arc::new(crate::exec::task::TaskMetrics::default()),
        )],
        uptime: std::time::Duration::ZERO,
        coordinator: None,
    });
    assert!(!no_late.contains("weir_late_records_dropped_total{"), "{no_late}");
    m.late_records_dropped.fetch_add(3, Ordering::Relaxed);
    let text = crate::metrics::render(&crate::metrics::Scrape {
        job: "wc",
        tasks: &[("windows -> output".to_string(), 1, Arc::new(m))],
        uptime: std::time::Duration::ZERO,
        coordinator: None,
    });
    let line = text
        .lines()
        .find(|l| l.starts_with("weir_late_records_dropped_total{"))
        .unwrap_or_else(|| panic!("{text}"));
    assert!(line.contains("subtask=\"1\"") && line.ends_with(" 3"), "{line}");
}

/// A snapshot stores the window's shape; a restore into a window of another type, size or
/// aggregate is refused naming both, one with the same shape (other output name, lateness) is
/// not, and a snapshot without a stored shape (written before it was stored) restores.
#[tokio::test]
async fn restore_into_a_window_of_another_shape_is_refused() {
    let sliding = def(
        WindowAssigner::Sliding {
            size_ms: 600_000,
            slide_ms: 300_000,
        },
        0,
    );
    let (mut w, _) = op(&sliding, key_group_range(0, 1, 8), Default::default());
    let mut out = Vec::new();
    w.process(vec![rec("a", 5)], &mut out).await.unwrap();
    let enc = w.snapshot(&barrier()).await.unwrap().unwrap()()
        .unwrap()
        .collect_stream()
        .unwrap();
    // Without a stored shape: a snapshot of before the shape was stored, in the blocks of then.
    let restore = |with_shape: bool| match with_shape {
        true => OperatorRestore {
            key_groups: enc.key_groups.clone(),
            operator_state: enc.operator_state.clone(),
        },
        false => OperatorRestore {
            key_groups: blocks_before_2026_12_05(&enc.key_groups, NO_WATERMARK),
            operator_state: vec![],
        },
    };
    let late = || Arc::new(AtomicU64::new(0));
    let all = key_group_range(0, 1, 8);
    let mut sum = sliding.clone();
    sum.func = AggregateFn::Sum;
    sum.expression = Some("t".into());
    for (changed, now) in [
        (
            def(WindowAssigner::Session { gap_ms: 60_000 }, 0),
            "session gap 1m, count",
        ),
        (
            def(
                WindowAssigner::Sliding {
                    size_ms: 1_200_000,
                    slide_ms: 300_000,
                },
                0,
            ),
            "sliding 20m every 5m, count",
        ),
        (
            def(WindowAssigner::Tumbling { size_ms: 600_000 }, 0),
            "tumbling 10m, count",
        ),
        (sum, "sliding 10m every 5m, sum of t"),
    ] {
        let e = WindowOperator::new("w", &changed, "k", all, restore(true), late(), &BackendChoice::Heap)
            .err()
            .expect("refused")
            .0;
        assert!(
            e.starts_with(&format!(
                "the restore point holds windows `sliding 10m every 5m, count`, this job's window is `{now}`"
            )),
            "{e}"
        );
        assert!(e.contains("give it a new `uid`"), "{e}");
        WindowOperator::new("w", &changed, "k", all, restore(false), late(), &BackendChoice::Heap)
            .expect("no stored shape: restores");
    }
    let mut renamed = def(
        WindowAssigner::Sliding {
            size_ms: 600_000,
            slide_ms: 300_000,
        },
        60_000,
    );
    renamed.as_field = "events".into();
    let restored =
        WindowOperator::new("w", &renamed, "k", all, restore(true), late(), &BackendChoice::Heap).expect("same shape");
    assert_eq!(restored.windows().unwrap(), 2);
}

/// `lateRecords: sideOutput`: a record beyond the allowed lateness leaves as it came, through
/// `take_late_output` (taken once), and is not counted as dropped; a sliding-window record
/// with one window still open is not late.
#[tokio::test]
async fn late_records_go_to_the_side_output_instead_of_being_dropped() {
    let all = key_group_range(0, 1, 8);
    for (assigner, records, want_late) in [
        (
            WindowAssigner::Tumbling { size_ms: 10 },
            vec![rec("a", 3), rec("b", 25)],
            vec![3],
        ),
        // Windows [0,10) and [5,15) hold t = 7; at watermark 9 only [0,10) is late.
        (
            WindowAssigner::Sliding {
                size_ms: 10,
                slide_ms: 5,
            },
            vec![rec("a", 7), rec("a", 2)],
            vec![2],
        ),
        (
            WindowAssigner::Session { gap_ms: 3 },
            vec![rec("a", 1), rec("a", 20)],
            vec![1],
        ),
    ] {
        let d = WindowDef {
            late_side_output: true,
            ..def(assigner, 0)
        };
        let (mut w, dropped) = op(&d, all, Default::default());
        let mut out = Vec::new();
        w.on_watermark(9, &mut out).await.unwrap();
        w.process(records, &mut out).await.unwrap();
        let late: Vec<i64> = w
            .take_late_output()
            .iter()
            .map(|r| match r.row.get("t") {
                Some(Datum::Int(t)) => *t,
                other => panic!("{other:?}"),
            })
            .collect();
        assert_eq!(late, want_late, "{assigner:?}");
        assert!(w.take_late_output().is_empty(), "taken once");
        assert_eq!(dropped.load(Ordering::Relaxed), 0, "{assigner:?}: none dropped");
    }
}

#[tokio::test]
async fn the_first_event_time_decides_the_unit_so_later_values_in_epoch_seconds_range_are_milliseconds() {
    let all = key_group_range(0, 1, 8);
    // A first value in epoch seconds' range, no unit declared: refused as ambiguous.
    let (mut w, _) = op(
        &def(WindowAssigner::Tumbling { size_ms: 10 }, 0),
        all,
        Default::default(),
    );
    let err = w
        .process(vec![rec("a", 1_500_000_000)], &mut Vec::new())
        .await
        .unwrap_err();
    assert!(err.0.contains("looks like epoch seconds"), "{}", err.0);
    assert!(
        err.0
            .contains(r#"event-time field `t` of the record {"t":1500000000}: "#),
        "{}",
        err.0
    );
    // A stream that starts at small milliseconds (a generator's id) reaches that range later:
    // the first value decided milliseconds, so it goes on.
    let (mut w, _) = op(
        &def(WindowAssigner::Tumbling { size_ms: 10 }, 0),
        all,
        Default::default(),
    );
    let mut out = Vec::new();
    w.process(vec![rec("a", 5)], &mut out).await.unwrap();
    w.process(vec![rec("a", 1_500_000_000)], &mut out).await.unwrap();
}

/// A firing of many windows at one watermark comes in parts of about
/// [`FIRING_PART_RESULTS`] results, each ending after a whole key group, until
/// [`Firing::Complete`]: together every window once, and the same watermark again fires
/// nothing. On either backend.
#[tokio::test]
async fn a_large_firing_comes_in_parts_of_whole_key_groups_on_either_backend() {
    const MAX_PARALLELISM: u32 = 128;
    const KEYS: usize = 20_000;
    let d = def(WindowAssigner::Tumbling { size_ms: 10 }, 0);
    let all = key_group_range(0, 1, MAX_PARALLELISM);
    let dir = tempfile::tempdir().unwrap();
    let disk = BackendChoice::Disk {
        dir: dir.path().join("disk"),
        options: Default::default(),
    };
    let keyed = |key: &str, t: i64| Record {
        row: Row::from_json(json!({ "t": t })),
        keyed: Some(KeyedBy::new(Key::Str(key.into()), MAX_PARALLELISM)),
    };
    let group_of = |key: &str| KeyedBy::new(Key::Str(key.into()), MAX_PARALLELISM).key_group;
    let keys: Vec<String> = (0..KEYS).map(|i| format!("key-{i}")).collect();
    let largest_group = {
        let mut sizes = vec![0usize; MAX_PARALLELISM as usize];
        keys.iter().for_each(|k| sizes[group_of(k) as usize] += 1);
        sizes.into_iter().max().unwrap()
    };
    for (name, backend) in [("heap", BackendChoice::Heap), ("disk", disk)] {
        let late = Arc::new(AtomicU64::new(0));
        let mut w = WindowOperator::new("w", &d, "k", all, Default::default(), late, &backend).unwrap();
        let mut out = Vec::new();
        w.process(keys.iter().map(|k| keyed(k, 3)).collect(), &mut out)
            .await
            .unwrap();
        w.process(keys.iter().step_by(2).map(|k| keyed(k, 4)).collect(), &mut out)
            .await
            .unwrap();
        assert!(out.is_empty());
        let mut parts: Vec<Vec<Record>> = Vec::new();
        loop {
            let mut part = Vec::new();
            let firing = w.on_watermark(9, &mut part).await.unwrap();
            parts.push(part);
            if firing == Firing::Complete {
                break;
            }
            assert!(parts.len() < KEYS, "{name}: the firing never completes");
        }
        assert!(
            parts.len() >= KEYS / FIRING_PART_RESULTS,
            "{name}: {} parts",
            parts.len()
        );
        let mut groups_seen = std::collections::BTreeSet::new();
        let mut counts = std::collections::BTreeMap::new();
        for (n, part) in parts.iter().enumerate() {
            if n + 1 < parts.len() {
                assert!(
                    (FIRING_PART_RESULTS..FIRING_PART_RESULTS + largest_group).contains(&part.len()),
                    "{name}: part {n} holds {} results",
                    part.len()
                );
            }
            let groups: std::collections::BTreeSet<u32> = part
                .iter()
                .map(|r| group_of(r.row.to_json()["k"].as_str().unwrap()))
                .collect();
            assert!(
                groups.iter().all(|g| groups_seen.insert(*g)),
                "{name}: a key group split across parts"
            );
            for r in part {
                let row = r.row.to_json();
                let key = row["k"].as_str().unwrap().to_string();
                assert_eq!(
                    (row["window_start"].clone(), row["window_end"].clone()),
                    (json!(0), json!(10))
                );
                assert!(
                    counts.insert(key, row["count"].as_i64().unwrap()).is_none(),
                    "{name}: fired twice"
                );
            }
        }
        assert_eq!(counts.len(), KEYS, "{name}: every window fired");
        for (i, key) in keys.iter().enumerate() {
            assert_eq!(counts[key], if i % 2 == 0 { 2 } else { 1 }, "{name}: {key}");
        }
        let mut again = Vec::new();
        assert_eq!(w.on_watermark(9, &mut again).await.unwrap(), Firing::Complete);
        assert_eq!(w.on_watermark(9_999, &mut again).await.unwrap(), Firing::Complete);
        assert!(again.is_empty(), "{name}: fired again");
        assert_eq!(
            w.windows().unwrap(),
            0,
            "{name}: fired windows are deleted (no lateness)"
        );
    }
}

/// A failed write-back of the disk store fails the task at the windows' next barrier, for a
/// full checkpoint, an incremental one and a savepoint, as the aggregate's does
/// (`aggregate_savepoint_tests`): every later snapshot of the store would lack the writes.
#[tokio::test]
async fn a_failed_write_back_fails_the_task_at_the_next_barrier() {
    let d = def(WindowAssigner::Tumbling { size_ms: 10 }, 100);
    let all = key_group_range(0, 1, 8);
    let dir = tempfile::tempdir().unwrap();
    let next = [
        ("full checkpoint", None, crate::control::api::SnapshotKind::Checkpoint),
        (
            "incremental checkpoint",
            Some(None),
            crate::control::api::SnapshotKind::Checkpoint,
        ),
        ("savepoint", None, crate::control::api::SnapshotKind::Savepoint),
    ];
    for (what, incremental, kind) in next {
        let backend = BackendChoice::Disk {
            dir: dir.path().join(what.replace(' ', "-")),
            options: Default::default(),
        };
        let late = Arc::new(AtomicU64::new(0));
        let mut w = WindowOperator::new("w", &d, "k", all, Default::default(), late, &backend).unwrap();
        w.process(vec![rec("a", 5), rec("b", 5)], &mut Vec::new())
            .await
            .unwrap();
        let KeyedState::Disk(disk) = &w.state else {
            panic!("{what}: not on disk")
        };
        disk.fail_next_write_back();
        // Checkpoint 1 freezes the writes of `a` and `b`; their write-back fails on the
        // write-back thread, after the barrier (a full snapshot reads the frozen writes and
        // does not wait for it): wait until it has.
        let first = w
            .snapshot(&barrier())
            .await
            .expect("the barrier before the failure")
            .unwrap();
        let _ = first();
        let KeyedState::Disk(disk) = &mut w.state else {
            panic!("{what}: not on disk")
        };
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        while disk.check_write_back().is_ok() {
            assert!(
                std::time::Instant::now() < deadline,
                "{what}: the write-back never failed"
            );
            std::thread::sleep(std::time::Duration::from_millis(5));
        }
        w.process(vec![rec("c", 6)], &mut Vec::new()).await.ok();
        let second = w
            .snapshot(&Barrier {
                id: 2,
                kind,
                incremental,
                ..barrier()
            })
            .await;
        let Err(error) = second else {
            panic!("{what}: the barrier after a failed write-back did not fail the task")
        };
        assert!(error.0.contains("injected write-back failure"), "{what}: {}", error.0);
    }
}
