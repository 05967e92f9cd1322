use super::*;
use crate::record::Key;

fn shape(deltas: u32, base_entries: u64, delta_entries: u64) -> ChainShape {
    ChainShape {
        deltas,
        base_entries,
        delta_entries,
        ..ChainShape::default()
    }
}

/// `shape` with its base's and deltas' reported bytes.
fn bytes(shape: ChainShape, base_bytes: u64, delta_bytes: u64) -> ChainShape {
    ChainShape {
        base_bytes,
        delta_bytes,
        ..shape
    }
}

fn keys(list: &[(u32, i64)]) -> ChangedKeys {
    let mut out = ChangedKeys::default();
    for (key_group, k) in list {
        out.insert(*key_group, &Key::Int(*k));
    }
    out
}

#[test]
fn when_to_compact_table() {
    let policy = CompactionPolicy {
        max_deltas: 3,
        max_delta_ratio: 0.5,
        max_delta_bytes_ratio: 1.0,
    };
    // (confirmed chain, changed entries, expected form)
    type Row = (Option<(u64, ChainShape)>, u64, Form);
    let rows: [Row; 10] = [
        (None, 5, Form::Base),
        (Some((4, shape(0, 100, 0))), 10, Form::Delta { over: 4 }),
        (Some((4, shape(2, 100, 30))), 10, Form::Delta { over: 4 }),
        // the fourth delta would exceed max_deltas
        (Some((4, shape(3, 100, 30))), 1, Form::Base),
        // deltas would hold 51 entries > 0.5 * 100
        (Some((4, shape(1, 100, 41))), 10, Form::Base),
        // exactly at the ratio: still a delta
        (Some((4, shape(1, 100, 40))), 10, Form::Delta { over: 4 }),
        // an empty base: any change compacts (a new base is as small)
        (Some((4, shape(0, 0, 0))), 1, Form::Base),
        // the deltas written hold more bytes than the base: compacted, however few entries
        (Some((4, bytes(shape(1, 100, 1), 1_000, 1_001))), 1, Form::Base),
        // exactly the base's bytes: still a delta
        (
            Some((4, bytes(shape(1, 100, 1), 1_000, 1_000))),
            1,
            Form::Delta { over: 4 },
        ),
        // no bytes reported (0): entries alone decide
        (Some((4, bytes(shape(1, 100, 1), 0, 5_000))), 1, Form::Delta { over: 4 }),
    ];
    for (i, (base, changed, want)) in rows.into_iter().enumerate() {
        assert_eq!(choose_form(base, changed, policy), want, "row {i}");
    }
}

/// A scripted run of one subtask: (event, expected form of a snapshot or none).
enum Step {
    /// Snapshot `id`, barrier names `confirmed` (`None` = savepoint), changed keys.
    Snap(u64, Option<Option<u64>>, &'static [(u32, i64)], Form, usize),
    /// Notification that `id` completed.
    Confirm(u64),
}

#[test]
fn which_checkpoint_is_the_base_table() {
    use Step::*;
    let policy = CompactionPolicy {
        max_deltas: 8,
        max_delta_ratio: 10.0,
        max_delta_bytes_ratio: 1.0,
    };
    let scripts: Vec<(&str, Vec<Step>)> = vec![
        (
            "first checkpoint is a base, the next a delta over it",
            vec![
                Snap(1, Some(None), &[(0, 1), (0, 2)], Form::Base, 0),
                Confirm(1),
                Snap(2, Some(Some(1)), &[(0, 2)], Form::Delta { over: 1 }, 1),
            ],
        ),
        (
            "a failed checkpoint is never a base: its changes carry into the next delta",
            vec![
                Snap(1, Some(None), &[(0, 1)], Form::Base, 0),
                Confirm(1),
                Snap(2, Some(Some(1)), &[(0, 2)], Form::Delta { over: 1 }, 1),
                // 2 never completed (killed before _metadata): the barrier of 3 names 1
                Snap(3, Some(Some(1)), &[(1, 3)], Form::Delta { over: 1 }, 2),
            ],
        ),
        (
            "the barrier confirms before the notification arrives",
            vec![
                Snap(1, Some(None), &[(0, 1)], Form::Base, 0),
                Snap(2, Some(Some(1)), &[(0, 2), (0, 1)], Form::Delta { over: 1 }, 2),
                Confirm(1),
                Confirm(2),
                Snap(3, Some(Some(2)), &[(0, 9)], Form::Delta { over: 2 }, 1),
            ],
        ),
        (
            "a savepoint is self-contained and its changes still reach the next delta",
            vec![
                Snap(1, Some(None), &[(0, 1)], Form::Base, 0),
                Confirm(1),
                Snap(2, None, &[(0, 2)], Form::SelfContained, 0),
                Snap(3, Some(Some(1)), &[(0, 3)], Form::Delta { over: 1 }, 2),
            ],
        ),
        (
            "a self-contained snapshot confirmed to the tracker leaves no base (aggregations confirm no savepoint)",
            vec![
                Snap(1, Some(None), &[(0, 1)], Form::Base, 0),
                Confirm(1),
                Snap(2, None, &[(0, 2)], Form::SelfContained, 0),
                Confirm(2),
                Snap(3, Some(None), &[(0, 3)], Form::Base, 0),
            ],
        ),
        (
            "a base named by the coordinator that this subtask did not write (restored after it)",
            vec![Snap(7, Some(Some(6)), &[(0, 3)], Form::Base, 0)],
        ),
        (
            "a stale confirmation changes nothing",
            vec![
                Snap(1, Some(None), &[(0, 1)], Form::Base, 0),
                Snap(2, Some(Some(1)), &[(0, 2)], Form::Delta { over: 1 }, 1),
                Confirm(2),
                Confirm(1),
                Snap(3, Some(Some(2)), &[(0, 3)], Form::Delta { over: 2 }, 1),
            ],
        ),
    ];
    for (name, steps) in scripts {
        let mut tracker = IncrementalTracker::default();
        for (i, step) in steps.into_iter().enumerate() {
            match step {
                Snap(id, incremental, changed, want, want_keys) => {
                    let plan = tracker.plan(id, incremental, keys(changed), 100, policy);
                    assert_eq!(plan.form, want, "{name}: step {i}");
                    assert_eq!(plan.changes.len(), want_keys, "{name}: step {i}");
                }
                Confirm(id) => tracker.confirm(id),
            }
        }
    }
}

#[test]
fn chain_shape_follows_the_form() {
    let policy = CompactionPolicy {
        max_deltas: 2,
        max_delta_ratio: 100.0,
        max_delta_bytes_ratio: 1.0,
    };
    let mut tracker = IncrementalTracker::default();
    let forms: Vec<Form> = (1..=4u64)
        .map(|id| {
            let confirmed = (id > 1).then_some(id - 1);
            let plan = tracker.plan(id, Some(confirmed), keys(&[(0, id as i64)]), 10, policy);
            tracker.confirm(id);
            plan.form
        })
        .collect();
    // base, delta, delta, then the third delta would exceed max_deltas: compacted
    assert_eq!(
        forms,
        vec![Form::Base, Form::Delta { over: 1 }, Form::Delta { over: 2 }, Form::Base]
    );
}

/// The bytes an encoder reports reach the chain's shape when its checkpoint is confirmed: a
/// base of 1,000 bytes, then deltas of one key each (few entries) of 600 bytes: the second
/// delta takes the deltas past the base's bytes, so the checkpoint after it is a base again;
/// a snapshot whose encoder reported nothing leaves its chain to the entry rules.
#[test]
fn reported_bytes_compact_a_chain_of_few_large_entries() {
    let policy = CompactionPolicy {
        max_deltas: 8,
        max_delta_ratio: 0.5,
        max_delta_bytes_ratio: 1.0,
    };
    for report in [true, false] {
        let mut tracker = IncrementalTracker::default();
        let mut forms = Vec::new();
        for id in 1..=5u64 {
            let confirmed = (id > 1).then_some(id - 1);
            let plan = tracker.plan(id, Some(confirmed), keys(&[(0, 7)]), 100, policy);
            let written = if plan.form == Form::Base { 1_000 } else { 600 };
            if report {
                plan.written_bytes
                    .fetch_add(written, std::sync::atomic::Ordering::Relaxed);
            }
            tracker.confirm(id);
            forms.push(plan.form);
        }
        let want = if report {
            vec![
                Form::Base,
                Form::Delta { over: 1 },
                Form::Delta { over: 2 },
                Form::Base,
                Form::Delta { over: 4 },
            ]
        } else {
            vec![
                Form::Base,
                Form::Delta { over: 1 },
                Form::Delta { over: 2 },
                Form::Delta { over: 3 },
                Form::Delta { over: 4 },
            ]
        };
        assert_eq!(forms, want, "bytes reported: {report}");
    }
}

#[test]
fn a_delta_gets_its_base_chain_in_front_or_the_checkpoint_fails() {
    use crate::state::snapshot::{ChainLink, OperatorMetadata};
    let link = |id: u64, base: bool| ChainLink {
        file: format!("../shared/c-1-chk{id}.state"),
        checkpoint_id: id,
        base,
        size: 10,
        crc32: 0,
        entries: 1,
    };
    let handle = |chain: Vec<ChainLink>| StateHandle {
        file: chain
            .last()
            .map(|l| l.file.clone())
            .unwrap_or_else(|| "c-1.state".into()),
        subtask: 1,
        key_group_range: None,
        size: 10,
        crc32: 0,
        entries: 1,
        operator_items: None,
        chain,
        native: None,
        expired_through_ms: None,
    };
    let metadata = |id: u64, handles: Vec<StateHandle>| CheckpointMetadata {
        format_version: 1,
        job_name: "j".into(),
        checkpoint_id: id,
        kind: crate::control::api::SnapshotKind::Checkpoint,
        max_parallelism: 128,
        parallelism: 2,
        triggered_at_ms: 0,
        completed_at_ms: 0,
        run_id: None,
        operators: vec![OperatorMetadata {
            uid: "c".into(),
            kind: "count".into(),
            parallelism: 2,
            state_names: vec![],
            handles,
        }],
        channel_state: vec![],
        alignment: Default::default(),
    };
    let base4 = metadata(4, vec![handle(vec![link(3, true), link(4, false)])]);
    let own = handle(vec![link(5, false)]);
    // (what, base metadata, delta_of, expected chain ids or error)
    type Row<'a> = (
        &'a str,
        Option<&'a CheckpointMetadata>,
        Option<u64>,
        Result<Vec<u64>, &'a str>,
    );
    let full4 = metadata(4, vec![handle(vec![])]);
    let rows: Vec<Row> = vec![
        ("a base stays as it is", None, None, Ok(vec![5])),
        (
            "a delta over 4 gets 4's chain",
            Some(&base4),
            Some(4),
            Ok(vec![3, 4, 5]),
        ),
        (
            "the coordinator holds another checkpoint",
            Some(&base4),
            Some(2),
            Err("does not hold"),
        ),
        ("no base at all", None, Some(4), Err("delta over checkpoint 4")),
        (
            "the base was self-contained",
            Some(&full4),
            Some(4),
            Err("does not hold"),
        ),
    ];
    for (what, base, delta_of, want) in rows {
        let got = extend_chain(base, "c", own.clone(), delta_of)
            .map(|h| h.chain.iter().map(|l| l.checkpoint_id).collect::<Vec<_>>());
        match (got, want) {
            (Ok(got), Ok(want)) => assert_eq!(got, want, "{what}"),
            (Err(got), Err(want)) => assert!(got.contains(want), "{what}: {got}"),
            (got, want) => panic!("{what}: got {got:?}, want {want:?}"),
        }
    }
}

/// The keys of a delta are the union of the snapshots' sets since the base, computed off the
/// task thread; the form decision counts them by an upper bound (exact for one set).
#[test]
fn since_base_unions_the_sets_and_bounds_their_count() {
    let sets = |lists: &[&[(u32, i64)]]| SinceBase {
        sets: lists.iter().map(|l| Arc::new(keys(l))).collect(),
    };
    // (sets, distinct keys, upper bound)
    let rows: [(SinceBase, usize, u64); 4] = [
        (sets(&[]), 0, 0),
        (sets(&[&[(0, 1), (1, 2)]]), 2, 2),
        (sets(&[&[(0, 1), (1, 2)], &[(0, 1), (0, 3)]]), 3, 4),
        // the same key in two key groups is two keys
        (sets(&[&[(0, 1)], &[(1, 1)]]), 2, 2),
    ];
    for (i, (since, distinct, bound)) in rows.into_iter().enumerate() {
        assert_eq!(since.len(), distinct, "row {i}");
        assert_eq!(since.len_upper_bound(), bound, "row {i}");
        assert_eq!(since.is_empty(), distinct == 0, "row {i}");
        assert!(
            matches!(since.union(), Cow::Borrowed(_)) == (since.sets.len() == 1),
            "row {i}"
        );
    }
}

/// Which shared files retention can date: chains' state files and native table files carry
/// the uploading checkpoint's id; anything else is not Weir's.
#[test]
fn which_checkpoint_wrote_a_shared_file_table() {
    // (name, checkpoint that wrote it)
    let rows: [(&str, Option<u64>); 17] = [
        ("c-0-chk5.state", Some(5)),
        ("c-0-chk8-00000000000000001234.delta", Some(8)),
        ("c-0-chk8-.delta", None),
        ("00000000000000001234.delta", None),
        ("c-0-chk8-00000000000000001234.delta.tmp", None),
        ("count-words-3-chk12.state", Some(12)),
        ("c-0-chk5-000012.sst", Some(5)),
        ("count-0-chk123-000001.sst", Some(123)),
        ("a-chk-2-chk7-000009.sst", Some(7)),
        ("c-0-chk5-.sst", None),
        ("c-0-chkX-000012.sst", None),
        ("c-0-000012.sst", None),
        ("000012.sst", None),
        ("c-0-chk5.sst", None),
        ("c-0-chk5-000012.sst.tmp", None),
        ("notes.txt", None),
        ("c-0-chkX.state", None),
    ];
    for (name, want) in rows {
        assert_eq!(shared_file_checkpoint(name), want, "{name}");
    }
    let (name, path) = shared_table_file("job/chk-9", "count", 2, 9, "000031.sst");
    assert_eq!(name, "../shared/count-2-chk9-000031.sst");
    assert_eq!(path, "job/shared/count-2-chk9-000031.sst");
    assert_eq!(shared_file_checkpoint(path.rsplit('/').next().unwrap()), Some(9));
    assert_eq!(resolve_relative("job/chk-9", &name).as_deref(), Some(path.as_str()));
}

/// A checkpoint is native only on the disk backend, for an incremental checkpoint (never a
/// savepoint), with the write-back cache, no restored key group pending, and the switch on.
#[test]
fn when_a_checkpoint_is_native_table() {
    let all = NativeConditions {
        disk_backend: true,
        incremental_checkpoint: true,
        write_back_cache: true,
        restored_groups_pending: false,
        switched_on: true,
    };
    // (what, conditions, native)
    let rows = [
        ("everything holds", all, true),
        (
            "heap backend",
            NativeConditions {
                disk_backend: false,
                ..all
            },
            false,
        ),
        (
            "savepoint or full checkpoint",
            NativeConditions {
                incremental_checkpoint: false,
                ..all
            },
            false,
        ),
        (
            "no write-back cache",
            NativeConditions {
                write_back_cache: false,
                ..all
            },
            false,
        ),
        (
            "restored key groups pending",
            NativeConditions {
                restored_groups_pending: true,
                ..all
            },
            false,
        ),
        (
            "switched off",
            NativeConditions {
                switched_on: false,
                ..all
            },
            false,
        ),
    ];
    for (what, conditions, want) in rows {
        assert_eq!(uses_native_form(conditions), want, "{what}");
    }
    assert_eq!(native_switch(None), Ok(NATIVE_CHECKPOINTS_DEFAULT));
    assert_eq!(native_switch(Some("on")), Ok(true));
    assert_eq!(native_switch(Some(" off ")), Ok(false));
    let e = native_switch(Some("yes")).unwrap_err();
    assert!(e.contains(NATIVE_CHECKPOINTS_ENV) && e.contains("`yes`"), "{e}");
}
