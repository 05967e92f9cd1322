//! Tests of the state file and `_metadata` formats (`state/snapshot.rs`).

use super::*;

fn sample() -> StateFile {
    StateFile {
        uid: "count-4".into(),
        subtask: 1,
        key_groups: vec![KeyGroupBlock {
            expired_through_ms: None,
            key_group: 7,
            entries: 2,
            data: vec![1, 2, 3].into(),
        }],
        operator_state: vec![vec![9, 9]],
    }
}

/// The one-piece block reader reads exactly what postcard's derived decoder reads, and
/// refuses a block whose data runs past the end.
#[test]
fn blocks_read_in_one_piece_as_postcard_reads_them() {
    for (key_group, entries, len) in [(0u32, 0u64, 0usize), (300, 1 << 40, 200), (u32::MAX, 5, 70_000)] {
        let block = KeyGroupBlock {
            expired_through_ms: None,
            key_group,
            entries,
            data: (0..len).map(|i| i as u8).collect(),
        };
        let bytes = bytes::Bytes::from([postcard::to_allocvec(&block).unwrap(), vec![42]].concat());
        let (got, rest) = take_block(&bytes, &bytes).unwrap();
        assert_eq!((got, rest), postcard::take_from_bytes::<KeyGroupBlock>(&bytes).unwrap());
        assert!(take_block(&bytes, &bytes[..bytes.len() - 2]).is_err() || len == 0);
    }
}

#[test]
fn state_file_round_trips_and_detects_corruption() {
    let bytes = encode_state_file(&sample());
    assert_eq!(decode_state_file("f", &bytes).unwrap(), sample());
    let mut flipped = bytes.clone();
    *flipped.last_mut().unwrap() ^= 1;
    let e = decode_state_file("s3://b/chk-3/count-4-1.state", &flipped).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("s3://b/chk-3/count-4-1.state: checksum mismatch"),
        "{e}"
    );
    let e = decode_state_file("f", &bytes[..bytes.len() - 1]).unwrap_err();
    assert!(e.problem.contains("truncated"), "{e}");
    let e = decode_state_file("f", &bytes[..5]).unwrap_err();
    assert!(e.problem.contains("truncated"), "{e}");
}

/// The single-copy encoder writes the bytes of the earlier one (header, then
/// `postcard::to_stdvec` of the body), so files stay readable by every release.
#[test]
fn state_file_bytes_equal_the_two_copy_encoding() {
    let mut big = sample();
    big.key_groups.push(KeyGroupBlock {
        expired_through_ms: None,
        key_group: 9,
        entries: 1000,
        data: (0..100_000u32).map(|i| i as u8).collect(),
    });
    for f in [sample(), big] {
        let body = postcard::to_stdvec(&f).unwrap();
        let mut want = STATE_MAGIC.to_vec();
        want.extend_from_slice(&FORMAT_VERSION.to_le_bytes());
        want.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
        want.extend_from_slice(&(body.len() as u64).to_le_bytes());
        want.extend_from_slice(&body);
        assert_eq!(encode_state_file(&f), want);
    }
}

/// A streamed file (version 2) decodes to the same [`StateFile`] as version 1, its
/// frames are postcard's encoding of each block, and corruption is detected.
#[test]
fn streamed_state_file_round_trips_and_detects_corruption() {
    let mut f = sample();
    f.key_groups.push(KeyGroupBlock {
        expired_through_ms: None,
        key_group: 300,
        entries: 1 << 20,
        data: vec![5; 200].into(),
    });
    let (mut writer, mut bytes) = StreamedStateFile::start(&f.uid, f.subtask, f.operator_state.clone());
    for block in &f.key_groups {
        let header = writer.block(block);
        let mut frame = header.clone();
        frame.extend_from_slice(&block.data);
        assert_eq!(frame, postcard::to_stdvec(block).unwrap());
        bytes.extend_from_slice(&frame);
    }
    bytes.extend_from_slice(&writer.finish());
    assert_eq!(u16::from_le_bytes([bytes[8], bytes[9]]), STREAMED_FORMAT_VERSION);
    assert_eq!(decode_state_file("f", &bytes).unwrap(), f);
    let (empty, mut no_blocks) = StreamedStateFile::start("u", 0, vec![]);
    no_blocks.extend_from_slice(&empty.finish());
    assert!(decode_state_file("f", &no_blocks).unwrap().key_groups.is_empty());
    let mut flipped = bytes.clone();
    flipped[20] ^= 1;
    let e = decode_state_file("s3://b/x.state", &flipped).unwrap_err();
    assert!(e.to_string().starts_with("s3://b/x.state: checksum mismatch"), "{e}");
    let e = decode_state_file("f", &bytes[..bytes.len() - 1]).unwrap_err();
    assert!(e.problem.contains("truncated"), "{e}");
    let mut unknown = bytes.clone();
    unknown[8] = 7;
    let e = decode_state_file("f", &unknown).unwrap_err();
    assert!(e.problem.contains("unsupported state format version 7"), "{e}");
    assert_eq!(e.fault, FormatFault::UnsupportedVersion, "{e}");
    let e = decode_state_file("f", &bytes[..bytes.len() - 1]).unwrap_err();
    assert_eq!(e.fault, FormatFault::Damage, "{e}");
}

#[test]
fn metadata_round_trips_and_detects_corruption() {
    let m = CheckpointMetadata {
        format_version: FORMAT_VERSION,
        job_name: "wc".into(),
        checkpoint_id: 3,
        kind: SnapshotKind::Checkpoint,
        max_parallelism: 128,
        parallelism: 2,
        triggered_at_ms: 1,
        completed_at_ms: 2,
        run_id: None,
        operators: vec![],
        channel_state: vec![],
        alignment: Default::default(),
    };
    let bytes = encode_metadata(&m);
    assert_eq!(decode_metadata("m", &bytes).unwrap(), m);
    let mut bad = bytes.clone();
    let n = bad.len() - 3;
    bad[n] = b'x';
    assert!(decode_metadata("m", &bad).unwrap_err().problem.contains("checksum"));
    assert_eq!(decode_metadata("m", &bad).unwrap_err().fault, FormatFault::Damage);
    let newer = String::from_utf8_lossy(&bytes).replacen("WEIR-METADATA v", "WEIR-METADATA v9", 1);
    let e = decode_metadata("m", newer.as_bytes()).unwrap_err();
    assert_eq!(e.fault, FormatFault::UnsupportedVersion, "{e}");
    assert!(
        decode_metadata("m", &bytes[..bytes.len() - 2])
            .unwrap_err()
            .problem
            .contains("truncated")
    );
}

/// A native handle's files count everywhere a handle's files do: `files()` lists them after
/// the state file (restore reads only `state_files()` as state files), the checkpoint wrote
/// its own state file and the table files it uploaded (not those of earlier checkpoints), a
/// restore reads all, `inspect` counts the store's size, and retention references the shared
/// ones.
#[test]
fn a_native_handles_files_are_counted_and_referenced() {
    let native = |file: &str, name: &str, by: u64, size: u64| NativeFile {
        file: file.into(),
        name: name.into(),
        checkpoint_id: by,
        size,
        crc32: 1,
    };
    let handle = StateHandle {
        file: "counts-0.state".into(),
        subtask: 0,
        key_group_range: Some(KeyGroupRange { start: 0, end: 63 }),
        size: 10,
        crc32: 0,
        entries: 5,
        operator_items: None,
        chain: vec![],
        native: Some(NativeFiles {
            key_group_range: KeyGroupRange { start: 0, end: 63 },
            files: vec![
                native("../shared/counts-0-chk4-000007.sst", "000007.sst", 4, 1_000),
                native("../shared/counts-0-chk5-000009.sst", "000009.sst", 5, 200),
                native("counts-0-CURRENT", "CURRENT", 5, 16),
            ],
            write_times: false,
        }),
        expired_through_ms: None,
    };
    assert_eq!(handle.state_files(), vec![("counts-0.state", 10, 0)]);
    assert_eq!(handle.files().len(), 4);
    assert_eq!(handle.written_bytes(5), 10 + 200 + 16);
    assert_eq!(handle.own_and_native_bytes(), 10 + 1_000 + 200 + 16);
    let metadata = CheckpointMetadata {
        format_version: FORMAT_VERSION,
        job_name: "wc".into(),
        checkpoint_id: 5,
        kind: SnapshotKind::Checkpoint,
        max_parallelism: 64,
        parallelism: 1,
        triggered_at_ms: 1,
        completed_at_ms: 2,
        run_id: None,
        operators: vec![OperatorMetadata {
            uid: "counts".into(),
            kind: "count".into(),
            parallelism: 1,
            state_names: vec![],
            handles: vec![handle],
        }],
        channel_state: vec![],
        alignment: Default::default(),
    };
    assert_eq!(metadata.written_and_full_size(100), (100 + 226, 100 + 1_226));
    assert_eq!(metadata.info().operators[0].bytes, 1_226);
    let referenced = crate::checkpoint::shared_files::referenced_files("wc/chk-5", &metadata);
    let want: std::collections::BTreeSet<String> = [
        "wc/shared/counts-0-chk4-000007.sst",
        "wc/shared/counts-0-chk5-000009.sst",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    assert_eq!(referenced, want);
    assert!(crate::state::incremental::references_outside(&metadata));
    // `_metadata` round-trips the native files.
    assert_eq!(decode_metadata("m", &encode_metadata(&metadata)).unwrap(), metadata);
}

/// `weir savepoint inspect` lists the keys of keyed state, not the operator state items in
/// the same file (an aggregation's shape, a window's watermarks), and a source's items.
#[test]
fn inspect_counts_keys_of_keyed_state_and_items_of_operator_state() {
    let handle = |range: Option<KeyGroupRange>, entries: u64, operator_items: Option<u64>| StateHandle {
        file: "x-0.state".into(),
        subtask: 0,
        key_group_range: range,
        size: 1,
        crc32: 0,
        entries,
        operator_items,
        chain: vec![],
        native: None,
        expired_through_ms: None,
    };
    let keyed = Some(KeyGroupRange { start: 0, end: 63 });
    let cases = [
        (handle(keyed, 481, Some(1)), 480, "a keyed handle with its shape item"),
        (
            handle(keyed, 480, Some(0)),
            480,
            "a keyed handle without operator items",
        ),
        (
            handle(keyed, 481, None),
            481,
            "_metadata before operator_items: unknown, all counted",
        ),
        (handle(None, 16, Some(16)), 16, "a source's splits are its entries"),
        (handle(keyed, 0, Some(3)), 0, "never below zero"),
    ];
    for (handle, want, case) in cases {
        assert_eq!(handle.listed_entries(), want, "{case}");
    }
}
