use super::*;
use crate::state::key_group::key_group_range;
use crate::state::snapshot::{ChainLink, OperatorMetadata, StateHandle};

fn handle(file: &str, subtask: u32, range: Option<KeyGroupRange>, chain: &[&str]) -> StateHandle {
    StateHandle {
        file: file.into(),
        subtask,
        key_group_range: range,
        size: 1,
        crc32: 0,
        entries: 1,
        operator_items: None,
        chain: chain
            .iter()
            .map(|f| ChainLink {
                file: f.to_string(),
                checkpoint_id: 1,
                base: false,
                size: 1,
                crc32: 0,
                entries: 1,
            })
            .collect(),
        native: None,
        expired_through_ms: None,
    }
}

fn with_items(handle: StateHandle, operator_items: Option<u64>) -> StateHandle {
    StateHandle {
        operator_items,
        ..handle
    }
}

/// A worker reads the files that hold its key groups, one copy of an operator's items that
/// every subtask writes the same (a join's or a window's shape, named `broadcast:*` or, before,
/// `operator:join-fields` and a window's unnamed item), and every file of an operator whose
/// subtasks wrote their own shares (sources) or whose names do not say (`unnamed`; and the
/// `counts` chains, whose handles' item count was not recorded, are keyed state); without
/// `owned` (`weir run`) every file is read, shared links once. A process owning no key group
/// (a cluster's coordinator) reads no file of a replicated operator.
#[test]
fn which_files_a_restore_reads_table() {
    let r = |i| Some(key_group_range(i, 2, 128));
    let names = |list: &[&str]| list.iter().map(|n| n.to_string()).collect::<Vec<_>>();
    let operators = vec![
        OperatorMetadata {
            uid: "counts".into(),
            kind: "count".into(),
            parallelism: 2,
            state_names: vec![],
            handles: vec![
                handle(
                    "../shared/c-0-chk5.state",
                    0,
                    r(0),
                    &["../shared/c-0-chk3.state", "../shared/c-0-chk5.state"],
                ),
                handle(
                    "../shared/c-1-chk5.state",
                    1,
                    r(1),
                    &["../shared/c-1-chk4.state", "../shared/c-1-chk5.state"],
                ),
            ],
        },
        OperatorMetadata {
            uid: "window".into(),
            kind: "window".into(),
            parallelism: 2,
            // Before 2026-12-05: the shape was an unnamed item.
            state_names: names(&["keyed:window"]),
            handles: vec![
                with_items(handle("w-0.state", 0, r(0), &[]), Some(1)),
                handle("w-1.state", 1, r(1), &[]),
            ],
        },
        OperatorMetadata {
            uid: "join".into(),
            kind: "join".into(),
            parallelism: 2,
            state_names: names(&["keyed:join", "broadcast:join-fields"]),
            handles: vec![
                StateHandle {
                    size: 5,
                    ..with_items(
                        handle(
                            "../shared/j-0-chk5.state",
                            0,
                            r(0),
                            &["../shared/j-0-chk3.state", "../shared/j-0-chk5.state"],
                        ),
                        Some(1),
                    )
                },
                with_items(
                    handle("../shared/j-1-chk5.state", 1, r(1), &["../shared/j-1-chk5.state"]),
                    Some(1),
                ),
            ],
        },
        OperatorMetadata {
            uid: "old-join".into(),
            kind: "join".into(),
            parallelism: 2,
            state_names: names(&["keyed:join", "operator:join-fields"]),
            handles: vec![
                with_items(handle("oj-0.state", 0, r(0), &[]), Some(1)),
                with_items(handle("oj-1.state", 1, r(1), &[]), Some(1)),
            ],
        },
        OperatorMetadata {
            uid: "unnamed".into(),
            kind: "join".into(),
            parallelism: 2,
            state_names: vec![],
            handles: vec![
                with_items(handle("u-0.state", 0, r(0), &[]), Some(1)),
                with_items(handle("u-1.state", 1, r(1), &[]), Some(1)),
            ],
        },
        OperatorMetadata {
            // A savepoint's aggregation: full files of keyed state only.
            uid: "full-counts".into(),
            kind: "count".into(),
            parallelism: 2,
            state_names: names(&["keyed:aggregate"]),
            handles: vec![
                with_items(handle("fc-0.state", 0, r(0), &[]), Some(0)),
                with_items(handle("fc-1.state", 1, r(1), &[]), Some(0)),
            ],
        },
        OperatorMetadata {
            uid: "src".into(),
            kind: "source-file".into(),
            parallelism: 2,
            state_names: names(&["operator:splits"]),
            handles: vec![handle("src-0.state", 0, None, &[]), handle("src-1.state", 1, None, &[])],
        },
    ];
    let metadata = CheckpointMetadata {
        format_version: 1,
        job_name: "job".into(),
        checkpoint_id: 5,
        kind: crate::control::api::SnapshotKind::Checkpoint,
        max_parallelism: 128,
        parallelism: 2,
        triggered_at_ms: 0,
        completed_at_ms: 0,
        run_id: None,
        operators,
        channel_state: vec![],
        alignment: Default::default(),
    };
    let read = |owned: Option<&[KeyGroupRange]>| -> Vec<String> {
        files_to_read(&metadata, owned).into_iter().map(|(f, _, _)| f).collect()
    };
    let everything = [
        "../shared/c-0-chk3.state",
        "../shared/c-0-chk5.state",
        "../shared/c-1-chk4.state",
        "../shared/c-1-chk5.state",
        "w-0.state",
        "w-1.state",
        "../shared/j-0-chk3.state",
        "../shared/j-0-chk5.state",
        "../shared/j-1-chk5.state",
        "oj-0.state",
        "oj-1.state",
        "u-0.state",
        "u-1.state",
        "fc-0.state",
        "fc-1.state",
        "src-0.state",
        "src-1.state",
    ];
    // (what, key groups the process owns, files read)
    type Row = (&'static str, Option<Vec<KeyGroupRange>>, Vec<&'static str>);
    let rows: [Row; 5] = [
        ("every subtask", None, everything.to_vec()),
        (
            "both ranges",
            Some(vec![r(0).unwrap(), r(1).unwrap()]),
            everything.to_vec(),
        ),
        (
            "subtask 1 of 2",
            Some(vec![r(1).unwrap()]),
            vec![
                "../shared/c-1-chk4.state",
                "../shared/c-1-chk5.state",
                "w-1.state",
                "../shared/j-1-chk5.state",
                "oj-1.state",
                "u-0.state",
                "u-1.state",
                "fc-1.state",
                "src-0.state",
                "src-1.state",
            ],
        ),
        (
            "subtask 0 of 3 after a rescale (key groups 0-42: only the first handles)",
            Some(vec![key_group_range(0, 3, 128)]),
            vec![
                "../shared/c-0-chk3.state",
                "../shared/c-0-chk5.state",
                "w-0.state",
                "../shared/j-0-chk3.state",
                "../shared/j-0-chk5.state",
                "oj-0.state",
                "u-0.state",
                "u-1.state",
                "fc-0.state",
                "src-0.state",
                "src-1.state",
            ],
        ),
        (
            "no key group (a cluster's coordinator): operator state pooled from every subtask",
            Some(vec![]),
            vec!["u-0.state", "u-1.state", "src-0.state", "src-1.state"],
        ),
    ];
    for (what, owned, want) in rows {
        assert_eq!(read(owned.as_deref()), want, "{what}");
    }
    // The full files left out are still checked for existence and size.
    let unread = |owned: Option<&[KeyGroupRange]>| -> Vec<String> {
        unread_full_files(&metadata, owned)
            .into_iter()
            .map(|(f, _)| f)
            .collect()
    };
    assert!(unread(None).is_empty());
    assert_eq!(
        unread(Some(&[r(1).unwrap()])),
        vec!["w-0.state", "oj-0.state", "fc-0.state"]
    );
    assert_eq!(
        unread(Some(&[])),
        vec![
            "w-0.state",
            "w-1.state",
            "oj-0.state",
            "oj-1.state",
            "fc-0.state",
            "fc-1.state"
        ]
    );
}

/// Which operators' items are the same in every subtask, by their state names.
#[test]
fn replicated_operator_state_table() {
    use crate::checkpoint::restore_files::operator_state_replicated;
    let rows: [(&[&str], bool); 9] = [
        (&["keyed:join", "broadcast:join-fields"], true),
        (
            &["keyed:windows", "keyed:window-watermarks", "broadcast:window-shape"],
            true,
        ),
        (&["keyed:join", "operator:join-fields"], true),
        (&["keyed:window", "broadcast:window-shape"], true),
        (&["keyed:window"], true),
        (&["keyed:aggregate"], true),
        (&["operator:splits"], false),
        (&["keyed:aggregate", "operator:pending-commits"], false),
        (&[], false),
    ];
    for (names, want) in rows {
        let names: Vec<String> = names.iter().map(|n| n.to_string()).collect();
        assert_eq!(operator_state_replicated(&names), want, "{names:?}");
    }
}

/// A process that leaves out a full keyed-only file still refuses the restore point when that
/// file is missing or of another size, naming it (a cluster's coordinator reads none of
/// them; the workers that own their key groups would otherwise fail attempt after attempt).
#[tokio::test]
async fn unread_files_are_checked_for_their_sizes() {
    let root = tempfile::tempdir().unwrap();
    let store: Store = std::sync::Arc::new(crate::storage::LocalStore::new(root.path()).unwrap());
    std::fs::create_dir_all(root.path().join("job/sp-1")).unwrap();
    std::fs::write(root.path().join("job/sp-1/fc-0.state"), [7u8; 10]).unwrap();
    std::fs::write(root.path().join("job/sp-1/fc-1.state"), [7u8; 20]).unwrap();
    // A file of the same name in a sibling directory is not it.
    std::fs::create_dir_all(root.path().join("job/sp-10")).unwrap();
    std::fs::write(root.path().join("job/sp-10/fc-2.state"), [7u8; 30]).unwrap();
    let ok = [("fc-0.state".to_string(), 10), ("fc-1.state".to_string(), 20)];
    check_unread_files(&store, "job/sp-1", &ok).await.unwrap();
    for (unread, problem) in [
        (("fc-1.state", 21), "fc-1.state: size 20 bytes, _metadata says 21"),
        (("fc-2.state", 30), "job/sp-1/fc-2.state: not found"),
    ] {
        let e = check_unread_files(&store, "job/sp-1", &[(unread.0.to_string(), unread.1)])
            .await
            .unwrap_err();
        assert!(e.is_permanent(), "{e}");
        assert!(e.to_string().ends_with(problem), "{e}");
        // A missing file reads as one: an explicit restore says it is missing, not damaged.
        let missing = matches!(e, RestoreError::Storage(StorageError::NotFound(_)));
        assert_eq!(missing, unread.0 == "fc-2.state", "{e}");
    }
    // A snapshot at the store's root.
    let at_root: Store = std::sync::Arc::new(crate::storage::LocalStore::new(root.path().join("job/sp-1")).unwrap());
    check_unread_files(&at_root, "", &ok).await.unwrap();
}

/// A restored keyed block is a slice of the state file's buffer, handed to each subtask
/// that owns its key group without a copy: its bytes lie inside the file read, in both
/// subtasks of a rescale to 2 (each gets its own groups) and in a second restore of the
/// same range. The blocks are the written ones, byte for byte.
#[test]
fn restored_blocks_share_the_state_files_bytes_with_every_subtask() {
    use crate::state::snapshot::{KeyGroupBlock, StreamedStateFile};
    let blocks: Vec<KeyGroupBlock> = (0..128u32)
        .step_by(3)
        .map(|kg| KeyGroupBlock {
            expired_through_ms: None,
            key_group: kg,
            entries: 1,
            data: (0..1000u32).map(|i| (i + kg) as u8).collect(),
        })
        .collect();
    let (mut writer, mut file) = StreamedStateFile::start("counts", 0, vec![b"split".to_vec()]);
    for b in &blocks {
        file.extend(writer.block(b));
        file.extend_from_slice(&b.data);
    }
    file.extend(writer.finish());
    let read = bytes::Bytes::from(file);
    let decoded = decode_state_file_shared("counts-0.state", read.clone()).unwrap();
    let mut metadata = CheckpointMetadata {
        format_version: 1,
        job_name: "job".into(),
        checkpoint_id: 1,
        kind: crate::control::api::SnapshotKind::Checkpoint,
        max_parallelism: 128,
        parallelism: 1,
        triggered_at_ms: 0,
        completed_at_ms: 0,
        run_id: None,
        operators: vec![],
        channel_state: vec![],
        alignment: Default::default(),
    };
    metadata.operators.push(OperatorMetadata {
        uid: "counts".into(),
        kind: "count".into(),
        parallelism: 1,
        state_names: vec![],
        handles: vec![handle("counts-0.state", 0, Some(key_group_range(0, 1, 128)), &[])],
    });
    let snapshot = LoadedSnapshot {
        url: "file:///c/chk-1".into(),
        metadata,
        files: HashMap::from([("counts-0.state".to_string(), decoded)]),
        restored_stores: vec![],
    };
    let inside_the_file = |b: &KeyGroupBlock| {
        let (start, end) = (read.as_ptr() as usize, read.as_ptr() as usize + read.len());
        let at = b.data.as_ptr() as usize;
        start <= at && at + b.data.len() <= end
    };
    let mut handed = Vec::new();
    for subtask in 0..2 {
        let range = key_group_range(subtask, 2, 128);
        let restored = operator_restore(Some(&snapshot), "counts", Some(range));
        assert!(restored.key_groups.iter().all(|b| range.contains(b.key_group)));
        assert!(
            restored.key_groups.iter().all(inside_the_file),
            "subtask {subtask}: a block was copied"
        );
        assert_eq!(restored.operator_state, vec![b"split".to_vec()]);
        handed.extend(restored.key_groups);
    }
    assert_eq!(handed, blocks, "the blocks written, each once");
    let again = operator_restore(Some(&snapshot), "counts", Some(key_group_range(0, 1, 128)));
    assert!(again.key_groups.iter().all(inside_the_file));
    assert_eq!(again.key_groups, blocks);
    assert!(again.key_groups.iter().all(|b| b.expired_through_ms.is_none()));
    // A handle that may hold expired entries hands its bound to each of its blocks.
    let mut snapshot = snapshot;
    snapshot.metadata.operators[0].handles[0].expired_through_ms = Some(1_234);
    let bounded = operator_restore(Some(&snapshot), "counts", Some(key_group_range(1, 2, 128)));
    assert!(!bounded.key_groups.is_empty());
    assert!(bounded.key_groups.iter().all(|b| b.expired_through_ms == Some(1_234)));
}

#[test]
fn a_refused_restore_names_the_uids_on_both_sides_and_how_to_keep_the_state() {
    let ops = |v: &[(&str, &str)]| {
        v.iter()
            .map(|(u, k)| (u.to_string(), k.to_string()))
            .collect::<Vec<_>>()
    };
    let snap = ops(&[
        ("source-generator-0", "source-generator"),
        ("count-2", "count"),
        ("sink-file-3", "sink-file"),
    ]);
    let job = ops(&[
        ("source-generator-0", "source-generator"),
        ("count-3", "count"),
        ("sink-file-4", "sink-file"),
    ]);
    let dropped = vec!["count-2".to_string(), "sink-file-3".to_string()];
    assert_eq!(
        non_restored_message("file:///c/chk-1", &dropped, &job, &snap),
        "file:///c/chk-1: state for operator uid(s) `count-2`, `sink-file-3` has no operator in the job (the \
         job's `count-3`, `sink-file-4` have no state there); a step without `uid` is saved as `<kind>-<index>`, \
         which changes when steps are inserted or removed: set each stateful step's `uid` to the one its state \
         has (`uid: count-2`), or set spec.allowNonRestoredState: true to drop that state"
    );
    let removed = non_restored_message("u", &["count-2".to_string()], &snap[..1], &snap);
    assert!(
        removed.starts_with("u: state for operator uid(s) `count-2` has no operator in the job; "),
        "{removed}"
    );
}

/// What an explicit restore or inspection calls damage (put the file back) and what it says as
/// it is: a missing state file and bytes that do not verify are damage; a format version this
/// build does not read, a reference outside the store, a missing `_metadata` (not a snapshot)
/// and a storage failure are not.
#[test]
fn damage_is_told_apart_from_versions_places_and_storage_failures() {
    let corrupt = |problem: &str, fault: FormatFault| {
        RestoreError::Corrupt(FormatError {
            path: "file:///s/chk-3/counts-0.state".into(),
            problem: problem.into(),
            fault,
        })
    };
    // (error, called damaged)
    let rows = [
        (
            RestoreError::Storage(StorageError::NotFound("/s/chk-3/counts-0.state".into())),
            true,
        ),
        (
            corrupt(
                "checksum mismatch: crc32 00000001, expected 00000002",
                FormatFault::Damage,
            ),
            true,
        ),
        (
            corrupt("size 8000 bytes, _metadata says 16614", FormatFault::Damage),
            true,
        ),
        (
            corrupt(
                "truncated or padded: body has 3 bytes, header says 9",
                FormatFault::Damage,
            ),
            true,
        ),
        (
            corrupt(
                "unsupported state format version 9 (this build reads 1 and 2); restore with the Weir version that wrote it or newer",
                FormatFault::UnsupportedVersion,
            ),
            false,
        ),
        (
            corrupt(
                "_metadata references `../x`, outside the store; ...",
                FormatFault::OutsideStore,
            ),
            false,
        ),
        (
            RestoreError::Storage(StorageError::NotFound("/s/chk-3/_metadata".into())),
            false,
        ),
        (RestoreError::Incompatible("maxParallelism differs".into()), false),
    ];
    for (error, damaged) in rows {
        let message = damaged_snapshot_message("file:///s/chk-3", &error, Some("wc"));
        assert_eq!(message.is_some(), damaged, "{error}");
        if let Some(message) = message {
            assert!(message.starts_with("file:///s/chk-3 is damaged: "), "{message}");
            assert!(
                message.contains("Put the file back") && message.contains("--job wc"),
                "{message}"
            );
        }
    }
}

/// A state file a `_metadata` names outside the store is refused as such
/// ([`FormatFault::OutsideStore`]: not damage to put back), before anything is read.
#[tokio::test]
async fn a_state_file_outside_the_store_is_not_damage() {
    let root = tempfile::tempdir().unwrap();
    let store: Store = std::sync::Arc::new(crate::storage::LocalStore::new(root.path()).unwrap());
    let e = read_state_file(&store, "job/chk-5", "../../../x.state".into(), 10, 0, None)
        .await
        .unwrap_err();
    match e {
        RestoreError::Corrupt(fault) => {
            assert_eq!(fault.fault, FormatFault::OutsideStore, "{fault}");
            assert!(!is_damage(&fault));
        }
        other => panic!("{other}"),
    }
}
