//! Creating the disk backend's store (`state/disk.rs`, `state/disk_rocks.rs`), now or ahead of
//! time.
//!
//! Creating an empty store costs a few `fsync`s (RocksDB writes its manifest, `CURRENT` and
//! options files: measured for fjall, which needed about 19, at 0.01–0.2 s of waiting on a
//! shared disk). A restore does not wait for them after the download: the run starts creating
//! the stores of its subtasks ([`create_early`]) before it reads the restore point, each on a
//! thread of its own, and [`DiskKeyedState::open`] takes the store created for its directory
//! ([`take_or_create`]), waiting only for what is left of its creation (overlap, not sum). A
//! store nobody takes is dropped by [`discard_early`]. A subtask whose store is still being
//! created when it starts does not wait at all: it claims the creation ([`claim_unfinished`])
//! and processes its first records in memory until the creation ended
//! (`state/disk_opening.rs`).
//!
//! [`DiskKeyedState::open`]: crate::state::disk::DiskKeyedState::open

use crate::state::disk::{DiskStateError, DiskStateOptions};
pub(crate) use crate::state::disk_rocks::Store;
use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Mutex, OnceLock};
use std::thread::JoinHandle;

/// A store being created on a thread of its own, with the options it was created with.
struct EarlyStore {
    options: DiskStateOptions,
    creation: JoinHandle<Result<Store, DiskStateError>>,
}

/// Stores started by [`create_early`] and not taken yet, by directory.
fn early_stores() -> &'static Mutex<HashMap<PathBuf, EarlyStore>> {
    static EARLY: OnceLock<Mutex<HashMap<PathBuf, EarlyStore>>> = OnceLock::new();
    EARLY.get_or_init(Default::default)
}

/// Creates an empty store at `dir` (anything already there is deleted first: scratch from an
/// earlier run). Errors: the directory cannot be removed or created, or the store cannot
/// open there (naming the directory).
pub(crate) fn create(dir: &Path, options: DiskStateOptions) -> Result<Store, DiskStateError> {
    let err = |problem: String| DiskStateError {
        dir: dir.to_path_buf(),
        problem,
    };
    if dir.exists() {
        std::fs::remove_dir_all(dir).map_err(|e| err(format!("cannot remove the previous run's state: {e}")))?;
    }
    std::fs::create_dir_all(dir).map_err(|e| err(format!("cannot create the directory: {e}")))?;
    crate::state::disk_rocks::open_empty(dir, &options)
}

/// Starts creating an empty store at `dir` with `options` on a thread of its own, for
/// [`take_or_create`] to take later (a run calls it for every disk store of its subtasks
/// before it reads its restore point). A creation already started for `dir` is kept. If the
/// thread cannot be started the store is created when it is taken.
pub fn create_early(dir: &Path, options: DiskStateOptions) {
    let mut early = early_stores().lock().expect("early stores lock");
    if early.contains_key(dir) {
        return;
    }
    let owned = dir.to_path_buf();
    let started = std::thread::Builder::new()
        .name("weir-store-create".into())
        .spawn(move || create(&owned, options));
    if let Ok(creation) = started {
        early.insert(dir.to_path_buf(), EarlyStore { options, creation });
    }
}

/// The empty store at `dir`: the one [`create_early`] started for it (waiting for the rest of
/// its creation) when it was started with the same `options`, else one created now. Errors:
/// as [`create`] (an early creation's error is returned as it is).
pub(crate) fn take_or_create(dir: &Path, options: DiskStateOptions) -> Result<Store, DiskStateError> {
    let started = early_stores().lock().expect("early stores lock").remove(dir);
    if let Some(early) = started {
        let created = early.creation.join().map_err(|_| DiskStateError {
            dir: dir.to_path_buf(),
            problem: "creating the store panicked".into(),
        });
        if early.options == options {
            return created?;
        }
        // Other options: drop it (its directory is recreated below).
        drop(created);
    }
    create(dir, options)
}

/// A store creation [`claim_unfinished`] took out of the early stores, still running: the
/// disk backend's state serves its first records from memory until it is finished
/// (`state/disk_opening.rs`). Dropped unfinished, it waits for the creation and drops the
/// store (its directory with it), so a later creation in the same directory never races it.
pub(crate) struct ClaimedCreation {
    dir: PathBuf,
    early: Option<EarlyStore>,
}

impl ClaimedCreation {
    /// Whether the creation has ended (the store, or its error, is ready to take at once).
    pub(crate) fn is_finished(&self) -> bool {
        self.early.as_ref().is_none_or(|e| e.creation.is_finished())
    }

    /// The store, waiting for the rest of its creation if it is not finished. Taken here
    /// rather than put back among the early stores, so that [`discard_early`] at the end of a
    /// start can never drop it between a give-back and a take. Errors: the creation failed or
    /// panicked.
    pub(crate) fn join(mut self) -> Result<Store, DiskStateError> {
        match self.early.take() {
            Some(early) => early.creation.join().map_err(|_| DiskStateError {
                dir: self.dir.clone(),
                problem: "creating the store panicked".into(),
            })?,
            None => Err(DiskStateError {
                dir: self.dir.clone(),
                problem: "internal error: the store's creation was taken twice".into(),
            }),
        }
    }
}

impl Drop for ClaimedCreation {
    fn drop(&mut self) {
        if let Some(early) = self.early.take() {
            drop(early.creation.join());
        }
    }
}

/// Takes the creation [`create_early`] started for `dir` out of the early stores when it was
/// started with `options` and has not finished yet (so [`discard_early`] at the end of a
/// start leaves it alone); `None` when there is none, it was started with other options, or
/// it is finished already (then `DiskKeyedState::open` takes it without waiting).
pub(crate) fn claim_unfinished(dir: &Path, options: DiskStateOptions) -> Option<ClaimedCreation> {
    let mut early = early_stores().lock().expect("early stores lock");
    let claimable = early
        .get(dir)
        .is_some_and(|e| e.options == options && !e.creation.is_finished());
    if !claimable {
        return None;
    }
    Some(ClaimedCreation {
        dir: dir.to_path_buf(),
        early: early.remove(dir),
    })
}

/// Drops the stores [`create_early`] started under `root` and nobody took (a start that
/// failed after starting them), waiting for their creation to end; dropping a store removes
/// its directory.
pub fn discard_early(root: &Path) {
    let left: Vec<EarlyStore> = {
        let mut early = early_stores().lock().expect("early stores lock");
        let dirs: Vec<PathBuf> = early.keys().filter(|d| d.starts_with(root)).cloned().collect();
        dirs.iter().filter_map(|d| early.remove(d)).collect()
    };
    for store in left {
        drop(store.creation.join());
    }
}

/// Drops the store [`create_early`] started for exactly `dir`, if nobody took it, waiting for
/// its creation to end (dropping it removes `dir`): a native checkpoint restored into `dir`
/// takes its place (`checkpoint/native_restore.rs`).
pub fn discard_early_at(dir: &Path) {
    let left = early_stores().lock().expect("early stores lock").remove(dir);
    if let Some(store) = left {
        drop(store.creation.join());
    }
}

/// Calls [`discard_early`] for its directory when dropped: what a start that failed before
/// its subtasks took their stores leaves behind is dropped on every way out.
pub struct DiscardEarlyOnDrop {
    root: PathBuf,
}

impl DiscardEarlyOnDrop {
    /// A guard for the stores started early under `root`.
    pub fn new(root: &Path) -> DiscardEarlyOnDrop {
        DiscardEarlyOnDrop {
            root: root.to_path_buf(),
        }
    }
}

impl Drop for DiscardEarlyOnDrop {
    fn drop(&mut self) {
        discard_early(&self.root);
    }
}

/// [`create_early`] for tests: the creation starts only when `gate` receives (or is
/// dropped), so a test controls whether it has ended.
#[cfg(test)]
pub(crate) fn create_early_gated(dir: &Path, options: DiskStateOptions, gate: std::sync::mpsc::Receiver<()>) {
    let owned = dir.to_path_buf();
    let creation = std::thread::spawn(move || {
        let _ = gate.recv();
        create(&owned, options)
    });
    early_stores()
        .lock()
        .expect("early stores lock")
        .insert(dir.to_path_buf(), EarlyStore { options, creation });
}

/// Whether a creation started by [`create_early`] for `dir` is waiting to be taken.
pub fn is_created_early(dir: &Path) -> bool {
    early_stores().lock().expect("early stores lock").contains_key(dir)
}

#[cfg(test)]
#[path = "disk_store_tests.rs"]
mod tests;
