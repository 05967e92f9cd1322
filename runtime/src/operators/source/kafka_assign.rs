//! Pure decisions of the Kafka source: which subtask reads a partition, and where each of a
//! subtask's partitions starts (checkpointed offset or the starting-offsets rule).

use serde::{Deserialize, Serialize};
use std::collections::BTreeMap;

/// The position of one partition as the source's operator state holds it: the offset of the
/// next record to read (Kafka's "committed offset" convention: last read + 1), and with event
/// time the largest event time read from it (its watermark's clock).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct KafkaSplit {
    /// Topic name.
    pub topic: String,
    /// Partition number.
    pub partition: i32,
    /// Offset of the next record to read.
    pub next_offset: i64,
    /// With per-partition watermarks: the largest event time (epoch ms) read from the
    /// partition before `next_offset`; `None` without event time or before any record.
    pub max_event_time: Option<i64>,
}

/// The item as Weir wrote it before per-partition watermarks (no `max_event_time`).
#[derive(Deserialize)]
struct KafkaSplitWithoutEventTime {
    topic: String,
    partition: i32,
    next_offset: i64,
}

/// Decodes an item of the source's operator state, also as written before per-partition
/// watermarks (then without an event time). Errors: it decodes as neither.
pub fn decode_split(item: &[u8]) -> Result<KafkaSplit, String> {
    if let Ok(split) = postcard::from_bytes::<KafkaSplit>(item) {
        return Ok(split);
    }
    let old: KafkaSplitWithoutEventTime =
        postcard::from_bytes(item).map_err(|e| format!("Kafka source state does not decode: {e}"))?;
    Ok(KafkaSplit {
        topic: old.topic,
        partition: old.partition,
        next_offset: old.next_offset,
        max_event_time: None,
    })
}

/// Java's `String.hashCode` (`s[0]*31^(n-1) + … + s[n-1]` over UTF-16 code units, wrapping in
/// 32 bits), as Flink's enumerator hashes topic names.
pub fn java_string_hash(text: &str) -> i32 {
    text.encode_utf16()
        .fold(0i32, |hash, unit| hash.wrapping_mul(31).wrapping_add(i32::from(unit)))
}

/// The source subtask (of `parallelism`) that reads `partition` of `topic`: Flink's
/// `KafkaSourceEnumerator.getSplitOwner`,
/// `startIndex = ((topic.hashCode() * 31) & 0x7FFFFFFF) % parallelism`, owner
/// `(startIndex + partition) % parallelism`. Partitions of one topic go round-robin from a
/// topic-dependent start, so several topics spread over the subtasks. `parallelism` ≥ 1.
pub fn partition_owner(topic: &str, partition: i32, parallelism: u32) -> u32 {
    let parallelism = i64::from(parallelism.max(1));
    let start = i64::from(java_string_hash(topic).wrapping_mul(31) & 0x7fff_ffff) % parallelism;
    ((start + i64::from(partition.max(0))) % parallelism) as u32
}

/// The offsets in restored source state (items of all old subtasks, pooled), by
/// (topic, partition). A partition listed more than once (the read-position log of
/// at-most-once) keeps its largest offset.
///
/// Errors: an item that does not decode as a [`KafkaSplit`].
pub fn restored_offsets(items: &[Vec<u8>]) -> Result<BTreeMap<(String, i32), i64>, String> {
    let mut offsets: BTreeMap<(String, i32), i64> = BTreeMap::new();
    for item in items {
        let split = decode_split(item)?;
        let slot = offsets
            .entry((split.topic, split.partition))
            .or_insert(split.next_offset);
        *slot = (*slot).max(split.next_offset);
    }
    Ok(offsets)
}

/// The largest event time per (topic, partition) in restored source state (items of all old
/// subtasks, pooled, so each partition's clock moves with the partition on a rescale); a
/// partition listed more than once keeps the largest. Partitions without one are absent.
///
/// Errors: an item that does not decode as a [`KafkaSplit`].
pub fn restored_event_times(items: &[Vec<u8>]) -> Result<BTreeMap<(String, i32), i64>, String> {
    let mut times: BTreeMap<(String, i32), i64> = BTreeMap::new();
    for item in items {
        let split = decode_split(item)?;
        if let Some(t) = split.max_event_time {
            let slot = times.entry((split.topic, split.partition)).or_insert(t);
            *slot = (*slot).max(t);
        }
    }
    Ok(times)
}

/// Where a partition starts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StartFrom {
    /// The checkpointed offset (restore).
    Restored(i64),
    /// The source's `startingOffsets` rule (first start of the job).
    StartingOffsets,
    /// The earliest offset: a partition that appeared after the job first started (discovered
    /// now, or missing from the restored state), so nothing written to it is skipped.
    Earliest,
}

/// Decides where `(topic, partition)` starts: its restored offset if the state has one; else
/// `startingOffsets` on the job's first start (`restored` empty and not `discovered_later`);
/// else the earliest offset.
pub fn start_from(
    restored: &BTreeMap<(String, i32), i64>,
    topic: &str,
    partition: i32,
    discovered_later: bool,
) -> StartFrom {
    match restored.get(&(topic.to_string(), partition)) {
        Some(&offset) => StartFrom::Restored(offset),
        None if restored.is_empty() && !discovered_later => StartFrom::StartingOffsets,
        None => StartFrom::Earliest,
    }
}

/// The partitions of `listed` (the cluster's, in listing order) that subtask `subtask` of
/// `parallelism` owns ([`partition_owner`]) and does not read yet (`known`), each with where
/// it starts ([`start_from`]; `discovered_later` for every discovery after the first).
pub fn newly_owned(
    listed: Vec<(String, i32)>,
    known: &[(String, i32)],
    restored: &BTreeMap<(String, i32), i64>,
    subtask: u32,
    parallelism: u32,
    discovered_later: bool,
) -> Vec<((String, i32), StartFrom)> {
    listed
        .into_iter()
        .filter(|(t, p)| partition_owner(t, *p, parallelism) == subtask && !known.contains(&(t.clone(), *p)))
        .map(|(t, p)| {
            let from = start_from(restored, &t, p, discovered_later);
            ((t, p), from)
        })
        .collect()
}

/// The offset a partition starts at when it starts at its earliest offset (`startingOffsets:
/// earliest`, `committed` without a committed offset, a partition that appeared later), given
/// the broker's ListOffsets answers `listed_earliest` and `listed_latest`.
///
/// Offset 0, not `listed_earliest`: the source's consumer has `auto.offset.reset=earliest`, so
/// on Apache Kafka an offset below the log start (records deleted by retention, or by
/// `DeleteRecords`) is out of range and librdkafka moves to the log start, which is what
/// earliest means; on a log that starts at 0 it is the log start itself; on a compacted topic
/// offset 0 fetches from the first record kept. tansu (the CI broker) answers ListOffsets
/// (earliest) with the base offset of the batch it stored first, which skips batches when
/// producers raced for the first offsets (docs/runtime/kafka-test-broker.md).
///
/// A bounded source's partition that ListOffsets reports empty (`listed_earliest >=
/// listed_latest`) starts at `listed_latest`, its end, so it is done at once: from 0 it would
/// wait for a record that never comes below a log start that is also the end.
pub fn earliest_start(listed_earliest: i64, listed_latest: i64, bounded: bool) -> i64 {
    if bounded && listed_earliest >= listed_latest {
        listed_latest
    } else {
        0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn java_hash_matches_java() {
        // Java's `"hello world".hashCode()` is 1794106052; the others follow the same formula.
        for (text, want) in [
            ("", 0),
            ("a", 97),
            ("topic", 110_546_223),
            ("wordcount-in", -1_073_761_363),
            ("hello world", 1_794_106_052),
        ] {
            assert_eq!(java_string_hash(text), want, "{text}");
        }
    }

    #[test]
    fn partitions_go_round_robin_from_a_topic_start() {
        // topic "a": hash 97, 97*31 = 3007; start = 3007 % p.
        for (topic, partition, parallelism, want) in [
            ("a", 0, 1, 0),
            ("a", 5, 1, 0),
            ("a", 0, 2, 1), // 3007 % 2 = 1
            ("a", 1, 2, 0),
            ("a", 0, 4, 3), // 3007 % 4 = 3
            ("a", 1, 4, 0),
            ("a", 2, 4, 1),
            ("a", 0, 3, 1), // 3007 % 3 = 1
            ("a", 2, 3, 0),
            ("", 0, 3, 0),
            ("", 4, 3, 1),
        ] {
            assert_eq!(
                partition_owner(topic, partition, parallelism),
                want,
                "{topic}/{partition} of {parallelism}"
            );
        }
    }

    #[test]
    fn every_partition_has_one_owner_and_the_load_is_even() {
        for parallelism in 1..=5u32 {
            let mut load = vec![0u32; parallelism as usize];
            for partition in 0..12 {
                load[partition_owner("events", partition, parallelism) as usize] += 1;
            }
            let (min, max) = (load.iter().min().unwrap(), load.iter().max().unwrap());
            assert!(max - min <= 1, "p={parallelism}: {load:?}");
        }
    }

    fn item(topic: &str, partition: i32, next_offset: i64) -> Vec<u8> {
        timed(topic, partition, next_offset, None)
    }

    fn timed(topic: &str, partition: i32, next_offset: i64, max_event_time: Option<i64>) -> Vec<u8> {
        postcard::to_stdvec(&KafkaSplit {
            topic: topic.into(),
            partition,
            next_offset,
            max_event_time,
        })
        .unwrap()
    }

    /// State written before per-partition watermarks still restores; the event times of all
    /// old subtasks are pooled, so each partition's clock goes where the partition goes.
    #[test]
    fn event_times_restore_with_their_partitions_and_old_state_decodes() {
        #[derive(Serialize)]
        struct Old<'a> {
            topic: &'a str,
            partition: i32,
            next_offset: i64,
        }
        let old = postcard::to_stdvec(&Old {
            topic: "t",
            partition: 2,
            next_offset: 9,
        })
        .unwrap();
        assert_eq!(
            decode_split(&old).unwrap(),
            KafkaSplit {
                topic: "t".into(),
                partition: 2,
                next_offset: 9,
                max_event_time: None
            }
        );
        // Old subtasks 0 and 1 (parallelism 2) and an old-format item, pooled.
        let items = vec![
            timed("t", 0, 10, Some(1_000)),
            timed("t", 1, 4, Some(5_000)),
            old,
            timed("t", 0, 12, Some(1_200)),
            timed("u", 0, 3, None),
        ];
        let times = restored_event_times(&items).unwrap();
        let want: BTreeMap<(String, i32), i64> = [(("t".into(), 0), 1_200), (("t".into(), 1), 5_000)].into();
        assert_eq!(times, want);
        assert_eq!(restored_offsets(&items).unwrap()[&("t".to_string(), 2)], 9);
        assert!(decode_split(&[0xff]).is_err());
    }

    #[test]
    fn restored_offsets_pool_old_subtasks_and_keep_the_furthest() {
        let got = restored_offsets(&[item("t", 0, 10), item("t", 1, 4), item("u", 0, 7), item("t", 0, 12)]).unwrap();
        let want: BTreeMap<(String, i32), i64> =
            [(("t".into(), 0), 12), (("t".into(), 1), 4), (("u".into(), 0), 7)].into();
        assert_eq!(got, want);
        assert!(restored_offsets(&[vec![0xff]]).is_err());
    }

    #[test]
    fn earliest_starts_at_zero_except_an_empty_bounded_partition() {
        // (ListOffsets earliest, latest, bounded) -> start
        for (earliest, latest, bounded, want) in [
            // A fresh log, or tansu's earliest after a race (3): from 0.
            (0, 10, false, 0),
            (3, 10, false, 0),
            (3, 10, true, 0),
            // Retention deleted 0..500: 0 is out of range, the consumer resets to 500.
            (500, 900, false, 0),
            (500, 900, true, 0),
            // Empty: unbounded waits at 0 (reset to the log start when it is not 0).
            (0, 0, false, 0),
            (700, 700, false, 0),
            // Empty and bounded: done at once.
            (0, 0, true, 0),
            (700, 700, true, 700),
        ] {
            assert_eq!(
                earliest_start(earliest, latest, bounded),
                want,
                "{earliest} {latest} {bounded}"
            );
        }
    }

    #[test]
    fn start_positions() {
        let restored: BTreeMap<(String, i32), i64> = [(("t".into(), 0), 42)].into();
        let none = BTreeMap::new();
        for (state, partition, later, want) in [
            (&restored, 0, false, StartFrom::Restored(42)),
            (&restored, 0, true, StartFrom::Restored(42)),
            // A partition the checkpoint does not know appeared after it: from the start.
            (&restored, 1, false, StartFrom::Earliest),
            (&none, 0, false, StartFrom::StartingOffsets),
            (&none, 3, true, StartFrom::Earliest),
        ] {
            assert_eq!(start_from(state, "t", partition, later), want, "{partition} {later}");
        }
    }

    /// Partition discovery: a partition added to a topic goes to its owner by the formula and
    /// starts at the earliest offset; the ones a subtask reads already are not assigned again.
    #[test]
    fn discovery_assigns_new_partitions_to_their_owner_from_the_start() {
        let listed = |n: i32| (0..n).map(|p| ("t".to_string(), p)).collect::<Vec<_>>();
        let none = BTreeMap::new();
        // First start, 2 partitions, parallelism 2: each subtask takes its owned one by
        // `startingOffsets`.
        let start = partition_owner("t", 0, 2);
        let first = newly_owned(listed(2), &[], &none, start, 2, false);
        assert_eq!(first, vec![(("t".to_string(), 0), StartFrom::StartingOffsets)]);
        // Later discovery: the topic grew to 5; subtask `start` already reads partition 0.
        let known = vec![("t".to_string(), 0)];
        let later = newly_owned(listed(5), &known, &none, start, 2, true);
        let want: Vec<_> = (1..5)
            .filter(|p| partition_owner("t", *p, 2) == start)
            .map(|p| (("t".to_string(), p), StartFrom::Earliest))
            .collect();
        assert_eq!(later, want);
        assert_eq!(want.len(), 2, "partitions 2 and 4 go to the subtask of partition 0");
        // Every new partition has exactly one owner among the subtasks.
        let mut all: Vec<_> = (0..2)
            .flat_map(|s| newly_owned(listed(5), &known, &none, s, 2, true))
            .map(|((_, p), _)| p)
            .collect();
        all.sort();
        assert_eq!(all, vec![1, 2, 3, 4]);
        // After a restore, a partition in the checkpoint resumes at its offset.
        let restored: BTreeMap<(String, i32), i64> = [(("t".into(), 2), 17)].into();
        let resumed = newly_owned(listed(3), &[], &restored, partition_owner("t", 2, 2), 2, false);
        assert!(
            resumed.contains(&(("t".to_string(), 2), StartFrom::Restored(17))),
            "{resumed:?}"
        );
    }
}
