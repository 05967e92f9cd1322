//! The join operator on both state backends: pairs emitted once each whatever the arrival
//! order, state TTL, snapshot/restore by key group at another parallelism, and a snapshot of
//! either backend restored on the other.

use super::*;
use crate::job::join::{JoinDef, JoinField};
use crate::state::disk::DiskStateOptions;
use crate::state::key_group::key_group_range;
use crate::state::snapshot::KeyGroupBlock;
use crate::state::ttl::ManualClock;
use serde_json::{Value, json};
use std::path::Path;
use std::time::Duration;

/// Where a test join keeps its state.
#[derive(Clone, Copy, Debug, PartialEq)]
enum On {
    Heap,
    Disk,
}

/// Every test runs on both backends.
const BACKENDS: [On; 2] = [On::Heap, On::Disk];

/// The backend `on`; on disk, the store `name` under `scratch` (one directory per join).
fn backend(on: On, scratch: &Path, name: &str) -> BackendChoice {
    match on {
        On::Heap => BackendChoice::Heap,
        On::Disk => BackendChoice::Disk {
            dir: scratch.join(name),
            options: DiskStateOptions::default(),
        },
    }
}

fn def(ttl: Option<Duration>) -> JoinDef {
    let field = |side, from: &str, name: &str| JoinField {
        side,
        from: from.into(),
        name: name.into(),
    };
    JoinDef {
        left_key: "repo".into(),
        right_key: "name".into(),
        key_field: "repo".into(),
        fields: vec![
            field(Side::Left, "actor", "actor"),
            field(Side::Right, "owner", "owner"),
            field(Side::Left, "n", "n"),
        ],
        ttl,
        inputs: ["events".into(), "repos".into()],
    }
}

/// Runs `rows` (side, JSON) through that side's [`JoinSide`] then `join`, one batch each.
async fn feed(join: &mut Join, rows: &[(Side, Value)]) -> Vec<Value> {
    let d = def(None);
    let mut out = Vec::new();
    for (side, row) in rows {
        let mut keyed = Vec::new();
        JoinSide::new("j", &d, *side, 128)
            .unwrap()
            .process(vec![Record::new(Row::from_json(row.clone()))], &mut keyed)
            .await
            .unwrap();
        let mut joined = Vec::new();
        join.process(keyed, &mut joined).await.unwrap();
        out.extend(joined.into_iter().map(|r| r.row.to_json()));
    }
    out
}

fn new_join(
    on: &BackendChoice,
    range: KeyGroupRange,
    restore: OperatorRestore,
    clock: Arc<dyn Clock>,
    ttl: Option<Duration>,
) -> Join {
    Join::new("j", &def(ttl), range, restore, clock, on).unwrap()
}

/// A checkpoint barrier for [`Join::snapshot`] (its target is never written by the join).
fn barrier() -> Barrier {
    Barrier {
        id: 1,
        kind: crate::control::api::SnapshotKind::Checkpoint,
        stop: false,
        incremental: None,
        target: Arc::new(crate::checkpoint::SnapshotTarget {
            store: Arc::new(crate::storage::LocalStore::new("/tmp").unwrap()),
            dir: "x".into(),
        }),
        triggered_at_ms: 0,
        is_final: false,
    }
}

/// The state `join` restores from: its snapshot's blocks, all encoded, and its operator state.
async fn snapshot_of(join: &mut Join) -> OperatorRestore {
    let encoded = (join.snapshot(&barrier()).await.unwrap().unwrap())()
        .unwrap()
        .collect_stream()
        .unwrap();
    OperatorRestore {
        key_groups: encoded.key_groups,
        operator_state: encoded.operator_state,
    }
}

fn left(repo: &str, actor: &str, n: i64) -> (Side, Value) {
    (
        Side::Left,
        json!({"repo": repo, "actor": actor, "n": n, "ignored": true}),
    )
}

fn right(name: &str, owner: &str) -> (Side, Value) {
    (Side::Right, json!({"name": name, "owner": owner}))
}

fn sorted(mut v: Vec<Value>) -> Vec<String> {
    let mut s: Vec<String> = v.drain(..).map(|x| x.to_string()).collect();
    s.sort();
    s
}

#[tokio::test]
async fn every_matching_pair_is_emitted_once_when_its_later_row_arrives() {
    let scratch = tempfile::tempdir().unwrap();
    for on in BACKENDS {
        let all = key_group_range(0, 1, 128);
        let clock: Arc<dyn Clock> = ManualClock::new(1_000);
        let mut join = new_join(
            &backend(on, scratch.path(), "j"),
            all,
            OperatorRestore::default(),
            clock,
            None,
        );
        let out = feed(
            &mut join,
            &[
                left("a", "ann", 1),
                left("a", "bob", 2),
                right("a", "org-a"),
                right("b", "org-b"),
                left("a", "cy", 3),
                right("a", "org-a2"),
                left("c", "dee", 4),
            ],
        )
        .await;
        let pair = |actor: &str, owner: &str, n: i64| json!({"repo": "a", "actor": actor, "owner": owner, "n": n});
        // In arrival order: the right row meets both earlier left rows (oldest first), the
        // third left row both right rows so far, the second right row all three left rows.
        assert_eq!(
            out,
            vec![
                pair("ann", "org-a", 1),
                pair("bob", "org-a", 2),
                pair("cy", "org-a", 3),
                pair("ann", "org-a2", 1),
                pair("bob", "org-a2", 2),
                pair("cy", "org-a2", 3),
            ],
            "{on:?}"
        );
        assert_eq!(join.len(), 3, "{on:?}");
    }
}

#[tokio::test]
async fn the_output_is_the_full_inner_join_in_any_arrival_order() {
    let rows = vec![
        left("a", "ann", 1),
        left("a", "bob", 2),
        right("a", "x"),
        right("a", "y"),
        left("b", "cy", 3),
        right("b", "z"),
        right("c", "w"),
    ];
    let all = key_group_range(0, 1, 128);
    let scratch = tempfile::tempdir().unwrap();
    let mut reference = None;
    // Forward, reversed, and rights first.
    let mut orders = vec![rows.clone(), rows.iter().rev().cloned().collect::<Vec<_>>()];
    let (l, r): (Vec<_>, Vec<_>) = rows.iter().cloned().partition(|(s, _)| *s == Side::Left);
    orders.push(r.into_iter().chain(l).collect());
    for on in BACKENDS {
        for order in &orders {
            let mut join = new_join(
                &backend(on, scratch.path(), "j"),
                all,
                OperatorRestore::default(),
                ManualClock::new(0),
                None,
            );
            let out = sorted(feed(&mut join, order).await);
            assert_eq!(out.len(), 2 * 2 + 1, "{on:?}");
            match &reference {
                None => reference = Some(out),
                Some(want) => assert_eq!(&out, want, "{on:?}"),
            }
        }
    }
}

#[tokio::test]
async fn with_a_ttl_a_key_idle_longer_than_it_forgets_its_rows() {
    let scratch = tempfile::tempdir().unwrap();
    for on in BACKENDS {
        let all = key_group_range(0, 1, 128);
        let clock = ManualClock::new(1_000);
        let ttl = Some(Duration::from_secs(10));
        let on_backend = backend(on, scratch.path(), "j");
        let mut join = new_join(&on_backend, all, OperatorRestore::default(), clock.clone(), ttl);
        assert!(
            feed(&mut join, &[left("a", "ann", 1), left("b", "bob", 2)])
                .await
                .is_empty()
        );
        clock.advance(Duration::from_secs(6));
        // `b` is written again (its TTL restarts); `a` is not.
        assert!(feed(&mut join, &[left("b", "bo2", 3)]).await.is_empty());
        clock.advance(Duration::from_secs(6));
        let out = feed(&mut join, &[right("a", "late"), right("b", "in-time")]).await;
        assert_eq!(
            sorted(out),
            sorted(vec![
                json!({"repo": "b", "actor": "bob", "owner": "in-time", "n": 2}),
                json!({"repo": "b", "actor": "bo2", "owner": "in-time", "n": 3}),
            ]),
            "{on:?}"
        );
    }
}

#[tokio::test]
async fn state_restored_at_another_parallelism_keeps_every_key_on_its_owner() {
    let scratch = tempfile::tempdir().unwrap();
    for on in BACKENDS {
        let clock: Arc<dyn Clock> = ManualClock::new(0);
        let all = key_group_range(0, 1, 128);
        let mut before = new_join(
            &backend(on, scratch.path(), "before"),
            all,
            OperatorRestore::default(),
            clock.clone(),
            None,
        );
        let keys: Vec<String> = (0..40).map(|i| format!("repo-{i}")).collect();
        let lefts: Vec<(Side, Value)> = keys.iter().map(|k| left(k, "ann", 1)).collect();
        feed(&mut before, &lefts).await;
        let restore = snapshot_of(&mut before).await;
        let mut joined = Vec::new();
        for sub in 0..3 {
            let range = key_group_range(sub, 3, 128);
            let on_sub = backend(on, scratch.path(), &format!("after-{sub}"));
            let mut after = new_join(&on_sub, range, restore.clone(), clock.clone(), None);
            let mine: Vec<(Side, Value)> = keys
                .iter()
                .filter(|k| range.contains(KeyedBy::new(Key::Str(k.as_str().into()), 128).key_group))
                .map(|k| right(k, "org"))
                .collect();
            let held = after.len();
            assert_eq!(held, mine.len(), "{on:?}: subtask {sub} holds exactly the keys it owns");
            joined.extend(feed(&mut after, &mine).await);
        }
        assert_eq!(
            joined.len(),
            keys.len(),
            "{on:?}: every key met its left row once: {joined:?}"
        );
        // A join that keeps other input fields refuses this state (its rows would be misread).
        let mut other = def(None);
        other.fields.pop();
        let e = Join::new(
            "j",
            &other,
            all,
            restore,
            clock.clone(),
            &backend(on, scratch.path(), "other"),
        )
        .err()
        .expect("refused");
        assert!(
            e.0.starts_with("the restore point's join kept the input fields"),
            "{on:?}: {e}"
        );
    }
}

/// A savepoint is backend-independent: a join's snapshot on either backend restores on the
/// other, and the restored join pairs new rows with exactly the rows stored before.
#[tokio::test]
async fn a_snapshot_of_either_backend_restores_on_the_other() {
    let scratch = tempfile::tempdir().unwrap();
    let all = key_group_range(0, 1, 128);
    let clock: Arc<dyn Clock> = ManualClock::new(5_000);
    let stored: Vec<(Side, Value)> = (0..300)
        .map(|i| left(&format!("repo-{}", i % 70), &format!("actor-{i}"), i))
        .chain((0..50).map(|i| right(&format!("repo-{}", i % 90), &format!("org-{i}"))))
        .collect();
    let later: Vec<(Side, Value)> = (0..90)
        .map(|i| right(&format!("repo-{i}"), "later"))
        .chain((0..90).map(|i| left(&format!("repo-{i}"), "later", -1)))
        .collect();
    let mut outputs = Vec::new();
    for (from, to) in [
        (On::Heap, On::Disk),
        (On::Disk, On::Heap),
        (On::Heap, On::Heap),
        (On::Disk, On::Disk),
    ] {
        let name = format!("{from:?}-to-{to:?}");
        let from_backend = backend(from, scratch.path(), &format!("{name}-before"));
        let mut before = new_join(&from_backend, all, OperatorRestore::default(), clock.clone(), None);
        feed(&mut before, &stored).await;
        let restore = snapshot_of(&mut before).await;
        assert!(!restore.key_groups.is_empty(), "{name}: no block");
        let to_backend = backend(to, scratch.path(), &format!("{name}-after"));
        let mut after = new_join(&to_backend, all, restore, clock.clone(), None);
        assert_eq!(after.len(), before.len(), "{name}");
        outputs.push((name, sorted(feed(&mut after, &later).await)));
    }
    // Every right row of the later batch pairs with its key's stored left rows (repo-0..69
    // hold 4 or 5 each: 300 in all), every later left row with its key's stored right rows
    // (50) and the later right row (90).
    let want_pairs = 300 + 50 + 90;
    for (name, out) in &outputs {
        assert_eq!(out.len(), want_pairs, "{name}");
        assert_eq!(out, &outputs[0].1, "{name} differs from {}", outputs[0].0);
    }
}

/// On disk the rows live in the store's directory, not in memory, and the directory is
/// removed with the join.
#[tokio::test]
async fn on_disk_the_rows_are_in_the_store_directory() {
    let scratch = tempfile::tempdir().unwrap();
    let dir = scratch.path().join("store");
    let on_disk = BackendChoice::Disk {
        dir: dir.clone(),
        options: DiskStateOptions::default(),
    };
    let all = key_group_range(0, 1, 128);
    let mut join = new_join(&on_disk, all, OperatorRestore::default(), ManualClock::new(0), None);
    let rows: Vec<(Side, Value)> = (0..2_000).map(|i| left(&format!("repo-{i}"), "ann", i)).collect();
    feed(&mut join, &rows).await;
    assert!(
        matches!(join.state, JoinState::Disk(_)),
        "the join's state is not the disk store"
    );
    assert!(dir.join("CURRENT").exists(), "no store in {}", dir.display());
    assert_eq!(join.len(), 2_000);
    drop(join);
    assert!(!dir.exists(), "{} outlived the join", dir.display());
}

#[tokio::test]
async fn a_record_without_a_side_tag_or_key_is_an_error_naming_the_operator() {
    let scratch = tempfile::tempdir().unwrap();
    for on in BACKENDS {
        let all = key_group_range(0, 1, 128);
        let on_backend = backend(on, scratch.path(), "j");
        let mut join = new_join(&on_backend, all, OperatorRestore::default(), ManualClock::new(0), None);
        let mut out = Vec::new();
        let unkeyed = Record::new(Row::from_json(json!({"repo": "a"})));
        let e = join.process(vec![unkeyed], &mut out).await.unwrap_err();
        assert!(e.0.contains("operator j: record without a join key"), "{on:?}: {e}");
        let untagged = Record {
            row: Row::from_json(json!({"repo": "a"})),
            keyed: Some(KeyedBy::new(Key::Str("a".into()), 128)),
        };
        let e = join.process(vec![untagged], &mut out).await.unwrap_err();
        assert!(e.0.contains("without its join side"), "{on:?}: {e}");
    }
    let mut side = JoinSide::new("j", &def(None), Side::Left, 128).unwrap();
    let mut out = Vec::new();
    let e = side
        .process(vec![Record::new(Row::from_json(json!({"repo": 1.5})))], &mut out)
        .await
        .unwrap_err();
    assert!(
        e.0.contains(r#"join j leftKey `repo` on the record {"repo":1.5}"#),
        "{e}"
    );
}

/// A record whose join key is null, missing, or null through a field it reads never matches
/// and is dropped (SQL's inner join); it does not fail the job. A key of a type no key has
/// (a float, an integer above `i64::MAX`) still fails it, saying why.
#[tokio::test]
async fn records_without_a_key_never_match_and_are_dropped() {
    let scratch = tempfile::tempdir().unwrap();
    let mut join = new_join(
        &backend(On::Heap, scratch.path(), "j"),
        key_group_range(0, 1, 128),
        OperatorRestore::default(),
        ManualClock::new(0),
        None,
    );
    let out = feed(
        &mut join,
        &[
            (Side::Left, json!({"repo": null, "actor": "ann", "n": 1})),
            (Side::Left, json!({"actor": "bob", "n": 2})),
            (Side::Right, json!({"name": null, "owner": "org"})),
            (Side::Right, json!({"owner": "org"})),
            left("weir", "cid", 3),
            right("weir", "org"),
        ],
    )
    .await;
    assert_eq!(
        out,
        vec![json!({"repo": "weir", "actor": "cid", "owner": "org", "n": 3})]
    );
    assert_eq!(join.len(), 1, "no null key was stored");

    let mut through_a_function = def(None);
    through_a_function.left_key = "string(repo)".into();
    let side = |d: &JoinDef| JoinSide::new("j", d, Side::Left, 128).unwrap();
    let mut keyed = Vec::new();
    side(&through_a_function)
        .process(
            vec![Record::new(Row::from_json(json!({"repo": null, "actor": "a"})))],
            &mut keyed,
        )
        .await
        .unwrap();
    assert!(keyed.is_empty(), "string(null) is no key: {keyed:?}");

    for (value, says) in [
        (json!(1.5), "key 1.5 is not an integer"),
        (json!(u64::MAX), "is above the largest integer key, 9223372036854775807"),
    ] {
        let e = side(&def(None))
            .process(
                vec![Record::new(Row::from_json(json!({"repo": value})))],
                &mut Vec::new(),
            )
            .await
            .unwrap_err();
        assert!(e.0.contains("join j leftKey `repo`") && e.0.contains(says), "{e}");
    }

    // An evaluation error on a record whose fields are not null fails, showing the record.
    let mut failing = def(None);
    failing.left_key = "repo + 1".into();
    let e = side(&failing)
        .process(vec![Record::new(Row::from_json(json!({"repo": "r"})))], &mut Vec::new())
        .await
        .unwrap_err();
    assert!(
        e.0.contains(r#"CEL expression `repo + 1` failed on the record {"repo":"r"}: "#),
        "{e}"
    );
}

/// A restore whose join reads its inputs in the other order, or keys a side by another
/// selector, is refused naming the field: its stored rows would be joined wrongly, silently.
#[tokio::test]
async fn a_restore_with_swapped_inputs_or_another_key_is_refused() {
    let scratch = tempfile::tempdir().unwrap();
    for on in BACKENDS {
        let all = key_group_range(0, 1, 128);
        let clock: Arc<dyn Clock> = ManualClock::new(0);
        let mut before = new_join(
            &backend(on, scratch.path(), &format!("{on:?}")),
            all,
            OperatorRestore::default(),
            clock.clone(),
            None,
        );
        feed(&mut before, &[left("weir", "ann", 1)]).await;
        let restore = snapshot_of(&mut before).await;
        let mut swapped = def(None);
        swapped.inputs.reverse();
        let mut rekeyed = def(None);
        rekeyed.left_key = "actor".into();
        let mut respaced = def(None);
        respaced.left_key = " repo ".into();
        let attempt = |d: &JoinDef, name: &str| {
            Join::new(
                "j",
                d,
                all,
                restore.clone(),
                clock.clone(),
                &backend(on, scratch.path(), name),
            )
        };
        let e = attempt(&swapped, &format!("{on:?}-swapped")).err().expect("refused");
        assert!(e.0.contains("this job's `inputs` are [repos, events]"), "{on:?}: {e}");
        let e = attempt(&rekeyed, &format!("{on:?}-rekeyed")).err().expect("refused");
        assert!(e.0.contains("this job's `leftKey` is `actor`"), "{on:?}: {e}");
        let mut respaced_join = attempt(&respaced, &format!("{on:?}-respaced")).expect("spacing is no change");
        let out = feed(&mut respaced_join, &[right("weir", "org")]).await;
        assert_eq!(out.len(), 1, "{on:?}: the restored row still matches: {out:?}");
    }
}

/// A hot key on disk costs a record the rows it matches, not the rows its own side holds:
/// 3,000 left rows of one key write about 3,000 rows' bytes into the store (under 200 KB;
/// rewriting the key's rows at each record wrote 4.5M rows' bytes, about 90 MB), and a right
/// row then matches all 3,000, oldest first.
#[tokio::test]
async fn a_hot_key_on_disk_writes_each_row_once() {
    let scratch = tempfile::tempdir().unwrap();
    let on_disk = backend(On::Disk, scratch.path(), "hot");
    let all = key_group_range(0, 1, 128);
    let mut join = new_join(&on_disk, all, OperatorRestore::default(), ManualClock::new(0), None);
    let rows: Vec<(Side, Value)> = (0..3_000).map(|n| left("hot", "ann", n)).collect();
    assert!(feed(&mut join, &rows).await.is_empty());
    let JoinState::Disk(state) = &join.state else {
        panic!("not on disk")
    };
    let written = state.store_bytes_written();
    assert!(
        written < 3_000 * 100,
        "{written} bytes written into the store for 3,000 rows"
    );
    let out = feed(&mut join, &[right("hot", "org")]).await;
    let ns: Vec<i64> = out.iter().map(|o| o["n"].as_i64().unwrap()).collect();
    assert_eq!(ns, (0..3_000).collect::<Vec<_>>(), "every left row once, oldest first");
    assert_eq!(join.len(), 1);
}

/// Keys idle longer than the `ttl` leave a snapshot at once, and the state between batches
/// (incremental cleanup, about five entries per record), without a record of their own.
#[tokio::test]
async fn expired_keys_leave_snapshots_and_are_cleaned_up_between_batches() {
    let scratch = tempfile::tempdir().unwrap();
    for on in BACKENDS {
        let all = key_group_range(0, 1, 128);
        let clock = ManualClock::new(1_000);
        let ttl = Some(Duration::from_secs(10));
        let mut join = new_join(
            &backend(on, scratch.path(), &format!("{on:?}")),
            all,
            OperatorRestore::default(),
            clock.clone(),
            ttl,
        );
        let mut idle: Vec<(Side, Value)> = (0..50)
            .flat_map(|i| [left(&format!("idle-{i}"), "ann", 1), right(&format!("idle-{i}"), "org")])
            .collect();
        // One idle key with more rows than its entry holds on disk (rows of their own).
        idle.extend((0..30).map(|n| left("idle-many", "bob", n)));
        assert_eq!(feed(&mut join, &idle).await.len(), 50);
        clock.advance(Duration::from_secs(11));
        feed(&mut join, &[left("fresh", "cid", 0)]).await;
        let snapshot = snapshot_of(&mut join).await;
        let snapshotted: u64 = snapshot.key_groups.iter().map(|b| b.entries).sum();
        assert_eq!(snapshotted, 1, "{on:?}: only the live key was snapshotted");
        let restored = new_join(
            &backend(on, scratch.path(), &format!("{on:?}-restored")),
            all,
            snapshot,
            clock.clone(),
            ttl,
        );
        assert_eq!(restored.len(), 1, "{on:?}: only the live key was restored");
        let fresh: Vec<(Side, Value)> = (1..60).map(|n| left("fresh", "cid", n)).collect();
        // 59 records, each letting cleanup examine 5 entries: more than the store holds (142).
        feed(&mut join, &fresh).await;
        assert_eq!(join.len(), 1, "{on:?}: the idle keys were cleaned up");
        if let JoinState::Disk(state) = &join.state {
            // The fresh key's 60 rows, each an entry of its own, and its entry: nothing of
            // the idle keys is left in the store.
            assert_eq!(state.store_entries(), 61);
        }
        let out = feed(&mut join, &[right("fresh", "org"), right("idle-many", "org")]).await;
        assert_eq!(out.len(), 60, "{on:?}: the live key kept every row, the idle ones none");
    }
}

/// On disk a key keeps up to `INLINE_ROWS_UP_TO` rows in its own entry and more as entries of
/// their own; keys of both kinds (the spill happening with rows on both sides) snapshot,
/// restore on either backend, and then match exactly as a join that never stopped.
#[tokio::test]
async fn keys_with_few_and_many_rows_restore_on_either_backend() {
    let scratch = tempfile::tempdir().unwrap();
    let all = key_group_range(0, 1, 128);
    let clock: Arc<dyn Clock> = ManualClock::new(0);
    let mut before: Vec<(Side, Value)> = vec![left("few", "ann", 0), left("few", "ann", 1)];
    before.extend((0..40).map(|n| left("many", "bob", n)));
    before.insert(20, right("many", "early"));
    let after = [right("few", "org"), right("many", "late"), left("many", "cid", 40)];
    let mut never_stopped = new_join(
        &BackendChoice::Heap,
        all,
        OperatorRestore::default(),
        clock.clone(),
        None,
    );
    let mut want = feed(&mut never_stopped, &before).await;
    let want_before = want.len();
    want.extend(feed(&mut never_stopped, &after).await);
    assert_eq!(want.len(), want_before + 2 + 40 + 2, "the reference joined every pair");
    for (i, (from, to)) in [(On::Disk, On::Disk), (On::Disk, On::Heap), (On::Heap, On::Disk)]
        .into_iter()
        .enumerate()
    {
        let mut first = new_join(
            &backend(from, scratch.path(), &format!("first-{i}")),
            all,
            OperatorRestore::default(),
            clock.clone(),
            None,
        );
        let mut got = feed(&mut first, &before).await;
        let restore = snapshot_of(&mut first).await;
        let mut second = new_join(
            &backend(to, scratch.path(), &format!("second-{i}")),
            all,
            restore,
            clock.clone(),
            None,
        );
        assert_eq!(second.len(), 2, "{from:?} -> {to:?}");
        got.extend(feed(&mut second, &after).await);
        assert_eq!(got, want, "{from:?} -> {to:?}: same pairs in the same order");
    }
}

/// A disk snapshot is assembled from the stored bytes without decoding a row
/// (`disk_snapshot.rs`); its blocks are the heap's for the same records: in every key group the
/// same keys with the same rows and write times, in as many bytes (keys with rows inline, with
/// rows of their own on both sides, with one side only; with and without a `ttl`, an expired
/// key left out by both).
#[tokio::test]
async fn disk_snapshots_hold_the_heaps_entries_in_as_many_bytes() {
    let scratch = tempfile::tempdir().unwrap();
    let all = key_group_range(0, 1, 128);
    let early = [left("gone", "ann", 0), right("gone", "org")];
    let mut later = vec![left("few", "ann", 1), left("few", "bea", 2), right("few", "org")];
    later.extend((0..20).map(|n| left("many", "bob", n)));
    later.extend((0..18).map(|n| right("many", &format!("owner-{n}"))));
    later.extend((0..17).map(|n| left("left-only", "cid", n)));
    later.push(right("lonely", "nobody"));
    for ttl in [None, Some(Duration::from_secs(10))] {
        let mut blocks = Vec::new();
        for on in BACKENDS {
            let clock = ManualClock::new(1_000);
            let dyn_clock: Arc<dyn Clock> = clock.clone();
            let name = format!("{on:?}-{}", ttl.is_some());
            let mut join = new_join(
                &backend(on, scratch.path(), &name),
                all,
                OperatorRestore::default(),
                dyn_clock,
                ttl,
            );
            feed(&mut join, &early).await;
            clock.advance(Duration::from_secs(8));
            feed(&mut join, &later).await;
            clock.advance(Duration::from_secs(4));
            blocks.push(snapshot_of(&mut join).await.key_groups);
        }
        let decoded = |blocks: &[KeyGroupBlock]| -> Vec<(u32, u64, usize, Vec<String>)> {
            blocks
                .iter()
                .map(|block| {
                    let mut entries: Vec<String> =
                        crate::state::keyed_block::decode::<rows::StoredJoinRows>(&block.data)
                            .unwrap()
                            .into_iter()
                            .map(|entry| format!("{entry:?}"))
                            .collect();
                    entries.sort();
                    (block.key_group, block.entries, block.data.len(), entries)
                })
                .collect()
        };
        let (heap, disk) = (decoded(&blocks[0]), decoded(&blocks[1]));
        let keys: usize = heap.iter().map(|(_, _, _, entries)| entries.len()).sum();
        assert_eq!(
            keys,
            if ttl.is_some() { 4 } else { 5 },
            "ttl {ttl:?}: the expired key is left out"
        );
        assert_eq!(disk, heap, "ttl {ttl:?}");
    }
}

/// A checkpoint barrier `id` of a job with incremental checkpoints whose newest completed
/// checkpoint is `confirmed` (`incremental: None`: a job without them).
fn incremental_barrier(id: u64, incremental: Option<Option<u64>>) -> Barrier {
    Barrier {
        id,
        incremental,
        ..barrier()
    }
}

/// The encoded state of `join`'s snapshot at `barrier`, every block in memory.
async fn encoded_at(join: &mut Join, barrier: &Barrier) -> EncodedState {
    (join.snapshot(barrier).await.unwrap().unwrap())()
        .unwrap()
        .collect_stream()
        .unwrap()
}

/// Every entry of `blocks` (any version), decoded and printed, sorted: `(key group, entry)`.
fn entries(blocks: &[KeyGroupBlock]) -> Vec<String> {
    let mut out: Vec<String> = blocks
        .iter()
        .flat_map(|block| {
            crate::state::keyed_block::decode_with_removals::<rows::StoredJoinRows>(&block.data)
                .unwrap()
                .into_iter()
                .map(move |entry| format!("{} {entry:?}", block.key_group))
        })
        .collect();
    out.sort();
    out
}

/// With incremental checkpoints a join writes a base, then deltas of the keys written since
/// (`state/incremental.rs`), on either backend: the two backends' deltas hold the same keys
/// with the same rows (a key growing past 16 rows, a new key, a key of one side, a key
/// expired and written again), and the chain (base, then each delta in order) restores on
/// either backend exactly the state a full snapshot holds: the same blocks' entries, and the
/// same pairs for the records after it as a join never stopped.
#[tokio::test]
async fn incremental_checkpoints_write_deltas_that_restore_on_either_backend() {
    let scratch = tempfile::tempdir().unwrap();
    let all = key_group_range(0, 1, 128);
    let ttl = Some(Duration::from_secs(10));
    // 40 keys that never change after the base, so the deltas stay small beside it.
    let mut early: Vec<(Side, Value)> = (0..40).map(|n| left(&format!("still-{n}"), "ann", n)).collect();
    early.extend((0..10).map(|n| left("grows", "bob", n)));
    let mut middle: Vec<(Side, Value)> = (10..14).map(|n| left("grows", "bob", n)).collect();
    middle.push(right("new", "org"));
    let mut late: Vec<(Side, Value)> = (0..6).map(|n| right("grows", &format!("owner-{n}"))).collect();
    late.push(left("expires", "dan", 1));
    late.push(left("new", "eve", 2));
    let after = [right("grows", "last"), right("still-3", "x"), right("expires", "y")];
    let mut deltas = Vec::new();
    let mut chains = Vec::new();
    let mut outputs = Vec::new();
    for on in BACKENDS {
        let clock = ManualClock::new(1_000);
        let dyn_clock: Arc<dyn Clock> = clock.clone();
        let mut join = new_join(
            &backend(on, scratch.path(), &format!("{on:?}")),
            all,
            OperatorRestore::default(),
            dyn_clock.clone(),
            ttl,
        );
        let mut out = feed(&mut join, &[left("expires", "cid", 0)]).await;
        clock.advance(Duration::from_secs(3));
        out.extend(feed(&mut join, &early).await);
        clock.advance(Duration::from_secs(3));
        let base = encoded_at(&mut join, &incremental_barrier(1, Some(None))).await;
        assert_eq!(base.incremental, Some(Form::Base), "{on:?}");
        join.notify_complete(1).await.unwrap();
        out.extend(feed(&mut join, &middle).await);
        // `expires` is 11 s old at the third checkpoint (the others 8 s), and written again
        // before it.
        clock.advance(Duration::from_secs(5));
        let second = encoded_at(&mut join, &incremental_barrier(2, Some(Some(1)))).await;
        assert_eq!(second.incremental, Some(Form::Delta { over: 1 }), "{on:?}");
        join.notify_complete(2).await.unwrap();
        out.extend(feed(&mut join, &late).await);
        let third = encoded_at(&mut join, &incremental_barrier(3, Some(Some(2)))).await;
        assert_eq!(third.incremental, Some(Form::Delta { over: 2 }), "{on:?}");
        let full = encoded_at(&mut join, &incremental_barrier(4, None)).await;
        assert_eq!(full.incremental, None, "{on:?}");
        deltas.push((entries(&second.key_groups), entries(&third.key_groups)));
        let mut chain = base.key_groups;
        chain.extend(second.key_groups);
        chain.extend(third.key_groups);
        chains.push((chain, third.operator_state, entries(&full.key_groups)));
        out.extend(feed(&mut join, &after).await);
        outputs.push(sorted(out));
    }
    assert_eq!(outputs[0], outputs[1], "both backends join the same pairs");
    assert_eq!(deltas[0], deltas[1], "both backends' deltas hold the same entries");
    let (second, third) = &deltas[0];
    assert_eq!(second.len(), 2, "grows and new: {second:?}");
    assert_eq!(third.len(), 3, "grows, expires and new: {third:?}");
    assert!(
        third.iter().any(|e| e.contains("\"owner-5\"") && e.contains("\"bob\"")),
        "the third delta holds every row of `grows`: {third:?}"
    );
    for (from, (chain, operator_state, full)) in BACKENDS.into_iter().zip(&chains) {
        for to in BACKENDS {
            let clock: Arc<dyn Clock> = ManualClock::new(12_000);
            let restore = OperatorRestore {
                key_groups: chain.clone(),
                operator_state: operator_state.clone(),
            };
            let mut restored = new_join(
                &backend(to, scratch.path(), &format!("restored-{from:?}-{to:?}")),
                all,
                restore,
                clock,
                ttl,
            );
            assert_eq!(restored.len(), full.len(), "{from:?} chain -> {to:?}: keys held");
            let again = encoded_at(&mut restored, &incremental_barrier(5, None)).await;
            assert_eq!(&entries(&again.key_groups), full, "{from:?} chain -> {to:?}");
            let pairs = sorted(feed(&mut restored, &after).await);
            // `grows`' 14 left rows, `still-3`'s one, and `expires`' one written after it expired.
            assert_eq!(pairs.len(), 14 + 1 + 1, "{from:?} chain -> {to:?}: {pairs:?}");
        }
    }
}

/// A join's delta holds every row of each key written, so a hot key holding most rows puts
/// nearly the whole state in every delta while its entries stay few: the chain is bounded by
/// the bytes its encoders report (`CompactionPolicy::max_delta_bytes_ratio`), a base again
/// once the deltas hold more bytes than the base, on both backends. (By entries alone, one
/// changed key of 41 would allow eight deltas.)
#[tokio::test]
async fn a_hot_key_written_every_checkpoint_brings_back_a_base_after_two_deltas() {
    let scratch = tempfile::tempdir().unwrap();
    let all = key_group_range(0, 1, 128);
    for on in BACKENDS {
        let clock: Arc<dyn Clock> = ManualClock::new(1_000);
        let mut join = new_join(
            &backend(on, scratch.path(), &format!("hot-{on:?}")),
            all,
            OperatorRestore::default(),
            clock,
            None,
        );
        let mut rows: Vec<(Side, Value)> = (0..40).map(|n| left(&format!("small-{n}"), "ann", n)).collect();
        rows.extend((0..200).map(|n| left("hot", "bob", n)));
        feed(&mut join, &rows).await;
        let mut forms = Vec::new();
        for id in 1..=7u64 {
            let confirmed = (id > 1).then_some(id - 1);
            let encoded = encoded_at(&mut join, &incremental_barrier(id, Some(confirmed))).await;
            forms.push(encoded.incremental);
            join.notify_complete(id).await.unwrap();
            feed(&mut join, &[left("hot", "cid", 1_000 + id as i64)]).await;
        }
        let delta = |over| Some(Form::Delta { over });
        assert_eq!(
            forms,
            vec![
                Some(Form::Base),
                delta(1),
                delta(2),
                Some(Form::Base),
                delta(4),
                delta(5),
                Some(Form::Base)
            ],
            "{on:?}"
        );
    }
}

/// A join's chain written without `ttl`, restored an hour later into a join with one: the
/// keys of its deltas count as written at the restore, as its base's do (found by a review:
/// they expired at once), from either backend onto either.
#[tokio::test]
async fn a_ttl_added_at_a_restore_keeps_the_keys_of_the_chains_deltas() {
    let scratch = tempfile::tempdir().unwrap();
    let all = key_group_range(0, 1, 128);
    let early: Vec<(Side, Value)> = (0..40).map(|n| left(&format!("base-{n}"), "ann", n)).collect();
    let later = [
        left("delta-a", "bob", 1),
        left("delta-b", "cid", 2),
        left("base-1", "dan", 3),
    ];
    for from in BACKENDS {
        let clock = ManualClock::new(1_000);
        let dyn_clock: Arc<dyn Clock> = clock.clone();
        let mut join = new_join(
            &backend(from, scratch.path(), &format!("no-ttl-{from:?}")),
            all,
            OperatorRestore::default(),
            dyn_clock,
            None,
        );
        feed(&mut join, &early).await;
        let base = encoded_at(&mut join, &incremental_barrier(1, Some(None))).await;
        join.notify_complete(1).await.unwrap();
        clock.advance(Duration::from_secs(1));
        feed(&mut join, &later).await;
        let delta = encoded_at(&mut join, &incremental_barrier(2, Some(Some(1)))).await;
        assert_eq!(delta.incremental, Some(Form::Delta { over: 1 }), "{from:?}");
        let mut chain = base.key_groups;
        chain.extend(delta.key_groups);
        for to in BACKENDS {
            let restore = OperatorRestore {
                key_groups: chain.clone(),
                operator_state: delta.operator_state.clone(),
            };
            let mut restored = new_join(
                &backend(to, scratch.path(), &format!("ttl-{from:?}-{to:?}")),
                all,
                restore,
                ManualClock::new(3_600_000),
                Some(Duration::from_secs(10)),
            );
            assert_eq!(restored.len(), 42, "{from:?} -> {to:?}");
            let pairs = feed(&mut restored, &[right("delta-a", "x"), right("base-1", "y")]).await;
            assert_eq!(pairs.len(), 1 + 2, "{from:?} -> {to:?}: {pairs:?}");
        }
    }
}
