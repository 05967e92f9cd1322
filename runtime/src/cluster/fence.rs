//! Coordinator fencing through checkpoint storage (the only source of truth, no HA store).
//!
//! At start a coordinator claims the next epoch by creating `<job>/_coordinator/epoch-<n>`
//! with a conditional put; before each `_metadata` write it checks that no newer epoch exists.
//! A stale coordinator (an older process still alive after a replacement started) therefore
//! cannot commit new checkpoints. The check and the write are two requests, so a stale
//! coordinator could still commit in the instant between them; the `_metadata` conditional
//! put still prevents two commits of the same checkpoint id.
//!
//! Snapshot ids never repeat across coordinator processes either (Flink keeps its checkpoint id
//! counter in its HA store for the same reason). Before a coordinator triggers an id it has not
//! reserved, it records `<job>/_coordinator/ids-<epoch>`: ids below the number it holds may be
//! in use ([`reservation`], [`ID_RESERVATION_BLOCK`] ids at a time, so one small write per
//! block). A coordinator started later takes ids from the highest of these
//! ([`EpochFence::first_unreserved`]), past a checkpoint the dead one triggered whose uploads
//! had not shown anything in storage yet: a worker still uploading it would otherwise write
//! the same file names as the new coordinator's checkpoint of that id.

use crate::checkpoint::coordinator::Fence;
use crate::storage::{PutOutcome, Store};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

/// Ids reserved by one write of `<job>/_coordinator/ids-<epoch>`. A coordinator restart skips
/// at most this many ids; at one checkpoint a second, the reservation is written about once a
/// minute.
pub const ID_RESERVATION_BLOCK: u64 = 64;

/// This coordinator's epoch.
#[derive(Debug)]
pub struct EpochFence {
    store: Store,
    job: String,
    epoch: u64,
    /// Ids below this may have been triggered by an earlier coordinator process.
    first_unreserved: u64,
    /// Ids below this are reserved for this coordinator (recorded in storage).
    reserved_below: AtomicU64,
    /// Set once a check saw a newer epoch: this coordinator must stop (it stays fenced).
    fenced: AtomicBool,
}

/// The highest reservation a coordinator accepts from storage: ids stay far from `u64::MAX`
/// (a hand-edited or damaged `ids-*` holding a huge number would otherwise make ids wrap).
pub const MAX_RESERVATION: u64 = 1 << 62;

/// The reservation to record before triggering snapshot `id` when ids below `reserved_below`
/// are reserved: `None` when `id` is among them, else the new bound (exclusive),
/// [`ID_RESERVATION_BLOCK`] past `id` (saturating: [`MAX_RESERVATION`] keeps ids far below
/// the end of `u64`).
pub fn reservation(id: u64, reserved_below: u64) -> Option<u64> {
    (id >= reserved_below).then(|| id.saturating_add(ID_RESERVATION_BLOCK))
}

fn reservations_prefix(job: &str) -> String {
    format!("{job}/_coordinator/ids-")
}

/// The highest reservation any coordinator of `job` recorded (0 when none). An unreadable one
/// is skipped with a warning: it only narrows which ids a restart skips. Errors: one above
/// [`MAX_RESERVATION`] (not written by Weir), naming the file.
pub async fn highest_reservation(store: &Store, job: &str) -> Result<u64, String> {
    let mut highest = 0;
    for object in store.list(&reservations_prefix(job)).await.map_err(|e| e.to_string())? {
        let bytes = store.get(&object.path).await.map_err(|e| e.to_string())?;
        match std::str::from_utf8(&bytes)
            .ok()
            .and_then(|t| t.trim().parse::<u64>().ok())
        {
            Some(bound) if bound > MAX_RESERVATION => {
                return Err(format!(
                    "{} reserves snapshot ids up to {bound}, past the largest Weir writes ({MAX_RESERVATION}): \
                     it was not written by Weir; delete it (the job's ids then start past its checkpoints)",
                    store.url(&object.path)
                ));
            }
            Some(bound) => highest = highest.max(bound),
            None => tracing::warn!(
                path = %store.url(&object.path),
                "ignoring an unreadable snapshot id reservation (not a number)"
            ),
        }
    }
    Ok(highest)
}

fn epochs_prefix(job: &str) -> String {
    format!("{job}/_coordinator/epoch-")
}

async fn epochs(store: &Store, job: &str) -> Result<Vec<u64>, String> {
    let prefix = epochs_prefix(job);
    Ok(store
        .list(&prefix)
        .await
        .map_err(|e| e.to_string())?
        .iter()
        .filter_map(|o| o.path[prefix.len()..].parse().ok())
        .collect())
}

impl EpochFence {
    /// Claims the next epoch (retrying if another coordinator claims the same one).
    pub async fn claim(store: Store, job: &str) -> Result<EpochFence, String> {
        loop {
            let next = epochs(&store, job).await?.into_iter().max().unwrap_or(0) + 1;
            let path = format!("{}{next}", epochs_prefix(job));
            match store
                .put_if_absent(&path, bytes::Bytes::from_static(b""))
                .await
                .map_err(|e| e.to_string())?
            {
                PutOutcome::Created => {
                    let first_unreserved = highest_reservation(&store, job).await?;
                    return Ok(EpochFence {
                        store,
                        job: job.to_string(),
                        epoch: next,
                        first_unreserved,
                        reserved_below: AtomicU64::new(0),
                        fenced: AtomicBool::new(false),
                    });
                }
                PutOutcome::AlreadyExists => continue,
            }
        }
    }

    /// The claimed epoch.
    pub fn epoch(&self) -> u64 {
        self.epoch
    }

    /// The first snapshot id no earlier coordinator of the job reserved (1 when none did):
    /// this coordinator's ids start at or past it.
    pub fn first_unreserved(&self) -> u64 {
        self.first_unreserved.max(1)
    }
}

#[async_trait::async_trait]
impl Fence for EpochFence {
    async fn check(&self) -> Result<(), String> {
        let newest = epochs(&self.store, &self.job).await?.into_iter().max().unwrap_or(0);
        if newest > self.epoch {
            self.fenced.store(true, Ordering::Relaxed);
            return Err(format!(
                "fenced: coordinator epoch {} is stale (epoch {newest} started: another coordinator of job {} \
                 runs on this checkpoint storage); this one stops",
                self.epoch, self.job
            ));
        }
        Ok(())
    }

    fn is_fenced(&self) -> bool {
        self.fenced.load(Ordering::Relaxed)
    }

    async fn reserve_ids(&self, id: u64) -> Result<(), String> {
        let Some(bound) = reservation(id, self.reserved_below.load(Ordering::Relaxed)) else {
            return Ok(());
        };
        // Test hook: `WEIR_FAILPOINT=fail-reserve:<id>` fails the reservation before snapshot `id`.
        if crate::failpoint::is_set(&format!("fail-reserve:{id}")) {
            return Err(format!(
                "failpoint fail-reserve:{id}: the checkpoint storage refused the write"
            ));
        }
        let path = format!("{}{}", reservations_prefix(&self.job), self.epoch);
        self.store
            .put(&path, bytes::Bytes::from(bound.to_string()))
            .await
            .map_err(|e| e.to_string())?;
        // Then whether a newer coordinator started. It records its epoch before it reads the
        // reservations, and this one its reservation before it reads the epochs, so one of
        // the two sees the other: either the newer one starts past these ids, or this one
        // stops here, before triggering an id the newer one may use.
        self.check().await?;
        let first = self.reserved_below.swap(bound, Ordering::Relaxed) == 0;
        if first {
            self.forget_earlier_epochs().await;
        }
        Ok(())
    }
}

impl EpochFence {
    /// Deletes the epoch and reservation files of earlier coordinators, once this one's
    /// reservation (at least theirs) is written and no newer epoch exists: only the newest of
    /// each is ever read, and each start reads every reservation (before, both kinds stayed,
    /// two files per coordinator process; helper-104). A newer coordinator's files are never
    /// touched. Best effort: a failed delete is logged and the files are deleted by a later
    /// coordinator.
    async fn forget_earlier_epochs(&self) {
        let prefix = format!("{}/_coordinator/", self.job);
        let listed = match self.store.list(&prefix).await {
            Ok(listed) => listed,
            Err(e) => return tracing::warn!(error = %e, "cannot list earlier coordinators' epoch files"),
        };
        for object in listed {
            let name = &object.path[prefix.len()..];
            let epoch = name
                .strip_prefix("epoch-")
                .or_else(|| name.strip_prefix("ids-"))
                .and_then(|n| n.parse::<u64>().ok());
            if epoch.is_some_and(|e| e < self.epoch)
                && let Err(e) = self.store.delete(&object.path).await
            {
                tracing::warn!(path = %self.store.url(&object.path), error = %e, "cannot delete an earlier coordinator's file");
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_reservation_is_written_only_past_the_reserved_ids() {
        // (id to trigger, ids reserved below, reservation to record)
        let table = [
            (1, 0, Some(1 + ID_RESERVATION_BLOCK)),
            (2, 1 + ID_RESERVATION_BLOCK, None),
            (ID_RESERVATION_BLOCK, 1 + ID_RESERVATION_BLOCK, None),
            (
                1 + ID_RESERVATION_BLOCK,
                1 + ID_RESERVATION_BLOCK,
                Some(1 + 2 * ID_RESERVATION_BLOCK),
            ),
            // An attempt that starts far past the reservation (ids seen in storage).
            (500, 65, Some(500 + ID_RESERVATION_BLOCK)),
            // Never wraps.
            (u64::MAX - 1, 0, Some(u64::MAX)),
        ];
        for (id, reserved_below, expected) in table {
            assert_eq!(
                reservation(id, reserved_below),
                expected,
                "id {id}, reserved below {reserved_below}"
            );
        }
    }

    /// The names in `job/_coordinator/`, sorted.
    async fn coordinator_files(store: &Store) -> Vec<String> {
        let listed = store.list("job/_coordinator/").await.unwrap();
        listed
            .into_iter()
            .map(|o| o.path["job/_coordinator/".len()..].to_string())
            .collect()
    }

    #[tokio::test]
    async fn a_later_coordinator_starts_past_every_id_an_earlier_one_reserved() {
        let dir = tempfile::tempdir().unwrap();
        let url = dir.path().to_str().unwrap().to_string();
        let store = crate::storage::open(&url, &crate::storage::S3Options::default())
            .await
            .unwrap();
        let first = EpochFence::claim(store.clone(), "job").await.unwrap();
        assert_eq!(first.first_unreserved(), 1);
        first.reserve_ids(1).await.unwrap();
        first.reserve_ids(2).await.unwrap();
        let second = EpochFence::claim(store.clone(), "job").await.unwrap();
        assert_eq!(second.epoch(), 2);
        assert_eq!(second.first_unreserved(), 1 + ID_RESERVATION_BLOCK);
        // The second reserves from its own first id, which deletes the first's files (its
        // reservation is at least theirs); an unreadable file is skipped, and a third takes
        // the second's.
        second.reserve_ids(1 + ID_RESERVATION_BLOCK).await.unwrap();
        assert_eq!(coordinator_files(&store).await, ["epoch-2", "ids-2"]);
        let garbage = bytes::Bytes::from_static(b"garbage");
        store.put("job/_coordinator/ids-0", garbage).await.unwrap();
        let third = EpochFence::claim(store.clone(), "job").await.unwrap();
        assert_eq!(third.first_unreserved(), 1 + 2 * ID_RESERVATION_BLOCK);
        // A number Weir never writes (ids would wrap) is refused, naming the file
        // (helper-104: the job stalled at `chk-0` without an error).
        let huge = bytes::Bytes::from_static(b"18446744073709551600");
        store.put("job/_coordinator/ids-1", huge).await.unwrap();
        let refused = EpochFence::claim(store.clone(), "job")
            .await
            .expect_err("a huge reservation");
        assert!(refused.contains("ids-1 ") && refused.contains("delete it"), "{refused}");
        store.delete("job/_coordinator/ids-1").await.unwrap();
        // The next coordinator's first reservation deletes every earlier coordinator's files.
        let fifth = EpochFence::claim(store.clone(), "job").await.unwrap();
        assert_eq!(fifth.epoch(), 5);
        fifth.reserve_ids(fifth.first_unreserved()).await.unwrap();
        assert_eq!(coordinator_files(&store).await, ["epoch-5", "ids-5"]);
        let sixth = EpochFence::claim(store, "job").await.unwrap();
        assert_eq!(
            (sixth.epoch(), sixth.first_unreserved()),
            (6, 1 + 3 * ID_RESERVATION_BLOCK)
        );
    }
}
