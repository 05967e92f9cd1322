//! Coordinator fencing through checkpoint storage (the only source of truth, no HA store).
//!
//! At start a coordinator claims the next epoch by creating `<job>/_coordinator/epoch-<n>`
//! with a conditional put; before each `_metadata` write it checks that no newer epoch exists.
//! A stale coordinator (an older process still alive after a replacement started) therefore
//! cannot commit new checkpoints. The check and the write are two requests, so a stale
//! coordinator could still commit in the instant between them; the `_metadata` conditional
//! put still prevents two commits of the same checkpoint id, and the new coordinator's ids are
//! higher than any id in storage when it started.

use crate::checkpoint::coordinator::Fence;
use crate::storage::{PutOutcome, Store};

/// This coordinator's epoch.
#[derive(Debug)]
pub struct EpochFence {
    store: Store,
    job: String,
    epoch: u64,
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
                    return Ok(EpochFence {
                        store,
                        job: job.to_string(),
                        epoch: next,
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
}

#[async_trait::async_trait]
impl Fence for EpochFence {
    async fn check(&self) -> Result<(), String> {
        let newest = epochs(&self.store, &self.job).await?.into_iter().max().unwrap_or(0);
        if newest > self.epoch {
            return Err(format!(
                "fenced: coordinator epoch {} is stale (epoch {newest} started); not committing",
                self.epoch
            ));
        }
        Ok(())
    }
}
