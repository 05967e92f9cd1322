//! Sizes of a streamed state file's multipart parts, a pure function of the part's number.
//!
//! S3 takes at most 10,000 parts per multipart upload, each 5 MiB to 5 GiB except the last
//! (Amazon S3 user guide, "Amazon S3 multipart upload limits"). Parts of a fixed 8 MiB would
//! cap one subtask's state file at 78 GiB, which a disk-backed job with state larger than
//! memory can pass; the checkpoint would then fail at part 10,001, every time. So parts
//! stay at 8 MiB for the first 5,000 (39 GiB: memory holds a few 8 MiB parts, below
//! mimalloc's huge-object size, see [`STATE_PART_SIZE`]) and then double every 1,000 parts
//! up to 256 MiB: 5,000 × 8 MiB + 1,000 × (16 + 32 + 64 + 128 + 256) MiB = 536,000 MiB
//! (523 GiB) per file. Fewer parts upload at once as they grow
//! ([`PartSchedule::parts_in_flight`]), so the bytes in flight stay at 32 MiB until one part
//! alone is larger.
//!
//! A local checkpoint directory has no such limits: a part is a write into the upload's
//! staging file, not a request, so its parts are 1 MiB ([`LOCAL_FILE_PARTS`]) and memory
//! holds 5 MiB of them instead of 40 (measured: the 8 MiB parts were 40 MiB of fresh pages
//! per file, and a 5M-key heap checkpoint took 275–380 ms instead of 106–167 in 7 of 23 runs,
//! as fast as the kernel handed the pages over; with 1 MiB parts 105–165 ms in all 23, peak
//! RSS 40 MiB lower; docs/runtime/state-backends-log.md). It keeps S3's shape and part
//! count, so a state file a local directory takes, S3 takes too.
//!
//! [`STATE_PART_SIZE`]: crate::checkpoint::state_upload::STATE_PART_SIZE

/// How a streamed file is cut into parts: `parts_at_first_size` parts of `first_part_size`
/// bytes, then the size doubles every `parts_per_doubling` parts, up to `most_parts` parts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartSchedule {
    /// Bytes of the first parts (every part but the last must be at least
    /// [`MIN_PART_SIZE`](crate::storage::MIN_PART_SIZE) on S3).
    pub first_part_size: usize,
    /// Parts of `first_part_size` bytes before the size starts doubling.
    pub parts_at_first_size: u32,
    /// Parts of each size after that (each size twice the one before).
    pub parts_per_doubling: u32,
    /// The most parts of one file (S3: 10,000).
    pub most_parts: u32,
    /// The most bytes in flight that [`PartSchedule::parts_in_flight`] allows (at least one
    /// part is always in flight).
    pub bytes_in_flight: usize,
}

/// The schedule of every checkpoint's and savepoint's state files: 8 MiB parts for the first
/// 5,000, doubling every 1,000 up to 256 MiB for parts 9,001–10,000; 523 GiB per file; 32 MiB
/// in flight (four 8 MiB parts).
pub const STATE_FILE_PARTS: PartSchedule = PartSchedule {
    first_part_size: 8 * 1024 * 1024,
    parts_at_first_size: 5_000,
    parts_per_doubling: 1_000,
    most_parts: 10_000,
    bytes_in_flight: 32 * 1024 * 1024,
};
// S3 refuses parts below 5 MiB but the last.
const _: () = assert!(STATE_FILE_PARTS.first_part_size >= crate::storage::MIN_PART_SIZE);

/// The parts of a state file written to a local directory (a store whose parts are writes
/// into one staging file, [`ObjectStore::parts_are_local_writes`]): 2,000 parts of 1 MiB, then
/// the size doubles every 1,000 parts up to 256 MiB, 10,000 parts at most, 4 MiB in flight.
/// Holds 2,000 × 1 MiB + 1,000 × (2 + 4 + … + 256) MiB = 512,000 MiB (500 GiB) per file, under
/// [`STATE_FILE_PARTS`]' 523 GiB.
///
/// [`ObjectStore::parts_are_local_writes`]: crate::storage::ObjectStore::parts_are_local_writes
pub const LOCAL_FILE_PARTS: PartSchedule = PartSchedule {
    first_part_size: 1024 * 1024,
    parts_at_first_size: 2_000,
    parts_per_doubling: 1_000,
    most_parts: 10_000,
    bytes_in_flight: 4 * 1024 * 1024,
};

/// The schedule for a file written in parts to a store: [`LOCAL_FILE_PARTS`] where its parts
/// are local writes, else [`STATE_FILE_PARTS`] (S3's).
pub fn for_store(parts_are_local_writes: bool) -> PartSchedule {
    if parts_are_local_writes {
        LOCAL_FILE_PARTS
    } else {
        STATE_FILE_PARTS
    }
}

impl PartSchedule {
    /// Bytes of part `number` (from 1), or `None` past [`PartSchedule::most_parts`] (or for
    /// part 0, which does not exist).
    pub fn part_size(&self, number: u32) -> Option<usize> {
        if number == 0 || number > self.most_parts {
            return None;
        }
        if number <= self.parts_at_first_size {
            return Some(self.first_part_size);
        }
        let doublings = (number - self.parts_at_first_size - 1) / self.parts_per_doubling.max(1) + 1;
        Some(self.first_part_size << doublings)
    }

    /// The most bytes one file can hold: every part at its size, bytes.
    pub fn largest_file(&self) -> u64 {
        (1..=self.most_parts)
            .map(|number| self.part_size(number).unwrap_or(0) as u64)
            .sum()
    }

    /// Parts of `part_size` bytes that may upload at once: as many as fit in
    /// [`PartSchedule::bytes_in_flight`], at least one.
    pub fn parts_in_flight(&self, part_size: usize) -> usize {
        (self.bytes_in_flight / part_size.max(1)).max(1)
    }
}

/// `bytes` as people read a size: whole GiB from 1 GiB on, bytes below.
pub fn bytes_for_people(bytes: u64) -> String {
    if bytes >= 1 << 30 {
        format!("{} GiB", bytes >> 30)
    } else {
        format!("{bytes} bytes")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const MIB: usize = 1024 * 1024;

    #[test]
    fn part_sizes_double_every_thousand_parts_after_the_first_five_thousand() {
        let table = [
            (0, None),
            (1, Some(8 * MIB)),
            (5_000, Some(8 * MIB)),
            (5_001, Some(16 * MIB)),
            (6_000, Some(16 * MIB)),
            (6_001, Some(32 * MIB)),
            (7_001, Some(64 * MIB)),
            (8_001, Some(128 * MIB)),
            (9_001, Some(256 * MIB)),
            (10_000, Some(256 * MIB)),
            (10_001, None),
        ];
        for (number, want) in table {
            assert_eq!(STATE_FILE_PARTS.part_size(number), want, "part {number}");
        }
    }

    #[test]
    fn a_state_file_can_hold_523_gib_within_s3s_limits() {
        assert_eq!(STATE_FILE_PARTS.largest_file(), 536_000 * MIB as u64);
        let largest_part = STATE_FILE_PARTS.part_size(STATE_FILE_PARTS.most_parts).unwrap();
        assert!(largest_part <= 5 * 1024 * MIB, "S3's largest part is 5 GiB");
        // Fixed 8 MiB parts held 78 GiB: the file the schedule exists for.
        assert!(STATE_FILE_PARTS.largest_file() > 10_000 * 8 * MIB as u64);
        assert_eq!(bytes_for_people(STATE_FILE_PARTS.largest_file()), "523 GiB");
        assert_eq!(bytes_for_people(310), "310 bytes");
    }

    #[test]
    fn local_parts_start_at_one_mib_and_hold_no_more_than_s3s() {
        let table = [
            (1, Some(MIB)),
            (2_000, Some(MIB)),
            (2_001, Some(2 * MIB)),
            (3_001, Some(4 * MIB)),
            (9_001, Some(256 * MIB)),
            (10_000, Some(256 * MIB)),
            (10_001, None),
        ];
        for (number, want) in table {
            assert_eq!(LOCAL_FILE_PARTS.part_size(number), want, "part {number}");
        }
        assert_eq!(LOCAL_FILE_PARTS.largest_file(), 512_000 * MIB as u64);
        assert!(LOCAL_FILE_PARTS.largest_file() <= STATE_FILE_PARTS.largest_file());
        assert_eq!(LOCAL_FILE_PARTS.parts_in_flight(MIB), 4);
        assert_eq!(LOCAL_FILE_PARTS.parts_in_flight(2 * MIB), 2);
        assert_eq!(for_store(true), LOCAL_FILE_PARTS);
        assert_eq!(for_store(false), STATE_FILE_PARTS);
    }

    #[test]
    fn fewer_parts_are_in_flight_as_they_grow() {
        let table = [(8 * MIB, 4), (16 * MIB, 2), (32 * MIB, 1), (256 * MIB, 1)];
        for (part_size, want) in table {
            assert_eq!(STATE_FILE_PARTS.parts_in_flight(part_size), want, "{part_size} bytes");
        }
    }
}
