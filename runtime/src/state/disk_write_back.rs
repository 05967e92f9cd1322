//! The disk backend's write-back of cached generations (`state/disk_cache.rs`) into its
//! store, off the task thread: [`WriteBack`] owns the current generation, the frozen ones
//! whose write-back is pending (oldest first), and one thread per store that writes each
//! frozen generation into the store as one write batch, in the order they were frozen.
//!
//! **Order.** Only the write-back thread writes cached entries into the store, one
//! generation after another, so the store always holds a prefix of the generations frozen so
//! far, and the state is the store overlaid with the pending generations (oldest first) and
//! the current one. The task thread writes the store directly only for a key no generation
//! holds (a removal, a TTL cleanup), which no pending write can overwrite.
//!
//! **Memory** (`writeCacheSize`, [`DiskStateOptions::write_cache_bytes`] = B): the current
//! generation is frozen when it reaches B / [`GENERATIONS`]; pending generations are counted
//! as their typed entries plus their encoded writes ([`FrozenGeneration::bytes`]), and before a
//! generation is frozen while pending ones hold more than B − B / [`GENERATIONS`], the task
//! thread waits for the oldest to be written (the write-back fell behind: a barrier or a
//! record then waits). A snapshot being encoded also holds the generations pending at its
//! barrier until it is done (those written back meanwhile are no longer counted).
//! While changes are tracked (incremental checkpoints), generations written back are kept
//! up to B more bytes, newest last ([`WriteBack::keep_written`]): a delta reads a changed key
//! from them instead of the store (`state/disk_snapshot.rs`).
//!
//! [`DiskStateOptions::write_cache_bytes`]: crate::state::disk::DiskStateOptions::write_cache_bytes

use crate::record::Key;
use crate::state::disk::DiskStateError;
use crate::state::disk_cache::{CachedEntry, EncodedWrites, FrozenGeneration, Generation};
use crate::state::disk_delta::{CheckpointForm, DeltaLimits, DeltaLog};
use crate::state::disk_rocks::Store;
use serde::Serialize;
use std::collections::VecDeque;
use std::path::{Path, PathBuf};
use std::sync::mpsc::{Receiver, Sender, TryRecvError, channel};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;

/// Generations the write-back cache's bytes are shared by: the current one is frozen at an
/// eighth of the budget, and up to seven eighths may be pending (three full generations, as
/// a pending one is counted at about 2.25 times its entries' bytes), so the write-back may run
/// up to three generations behind before the task thread waits.
pub const GENERATIONS: u64 = 8;

/// Holds the write-back thread before its next generation while set (tests only set it, to
/// keep generations pending).
#[derive(Default)]
struct WriterGate {
    paused: Mutex<bool>,
    resumed: Condvar,
    /// The first failed memtable flush of a native checkpoint ([`DeltaLog::flush_failure`]),
    /// set by the write-back thread: the task fails at its next check. A `OnceLock`, so the
    /// task's check at every batch is one atomic load, not a lock.
    flush_failure: std::sync::OnceLock<String>,
    /// Makes the next generation's write fail without writing it (tests only set it).
    #[cfg(test)]
    fail_next: std::sync::atomic::AtomicBool,
    /// Makes the next native checkpoint's flush fail (tests only set it).
    #[cfg(test)]
    fail_next_flush: std::sync::atomic::AtomicBool,
}

impl WriterGate {
    fn wait_while_paused(&self) {
        let mut paused = self.paused.lock().unwrap_or_else(|e| e.into_inner());
        while *paused {
            paused = self.resumed.wait(paused).unwrap_or_else(|e| e.into_inner());
        }
    }

    fn set_paused(&self, paused: bool) {
        *self.paused.lock().unwrap_or_else(|e| e.into_inner()) = paused;
        self.resumed.notify_all();
    }
}

/// What the task thread hands the write-back thread.
enum Job {
    /// Write this generation into the store, then report the result.
    Write(Arc<dyn EncodedWrites>),
    /// Drop this generation (written back and retired): freeing its entries and encoded
    /// writes is O(entries), work the task thread leaves to this thread (a snapshot still
    /// encoding holds its own reference and frees it on its thread).
    Free(Arc<dyn EncodedWrites>),
    /// Write a native checkpoint of the store into `into` once the generations sent before
    /// are written (a native checkpoint's synchronous part sends it right after the barrier's
    /// frozen generation): a RocksDB checkpoint, or the last one with the writes since
    /// (`state/disk_delta.rs`), and send the result to `reply`. Fails, writing nothing, if a
    /// generation sent before failed: the store then lacks its writes.
    Checkpoint {
        into: PathBuf,
        reply: Sender<Result<(), String>>,
        /// When the barrier asked for it (the wait for the generations before it is logged).
        requested: std::time::Instant,
    },
}

/// The write-back thread of one store and the channels to it.
struct Writer {
    gate: Arc<WriterGate>,
    /// Frozen generations to write, in order (`None` once dropping).
    to_write: Option<Sender<Job>>,
    /// One result per generation written, in the same order.
    written: Receiver<Result<(), String>>,
    thread: Option<JoinHandle<()>>,
}

/// The write-back cache of one store: see the module doc.
pub(crate) struct WriteBack<V> {
    /// Most bytes held (0: no cache, every write goes to the store).
    budget: u64,
    dir: PathBuf,
    current: Generation<V>,
    /// Frozen generations not yet written into the store, oldest first.
    pending: VecDeque<Arc<FrozenGeneration<V>>>,
    /// Bytes counted for `pending`.
    pending_bytes: u64,
    writer: Option<Writer>,
    /// While changes are tracked (incremental checkpoints): the generations written back most
    /// recently, oldest first, kept after their write-back up to `budget` bytes
    /// ([`FrozenGeneration::bytes`]), so a delta finds a changed key's value in memory instead
    /// of by a point read of the store (see [`WriteBack::for_delta`]). `None`: not kept.
    retained: Option<VecDeque<Arc<FrozenGeneration<V>>>>,
    /// Bytes counted for `retained`.
    retained_bytes: u64,
    /// Most bytes `retained` keeps: the budget for deltas, 0 for native checkpoints (they need
    /// the store written through generations only, not the generations kept).
    retain_limit: u64,
    /// The first failed write-back: every later call returns it. The failed generation stays
    /// pending (reads still see its entries), so no snapshot after the failure can be taken
    /// without its writes, and the task fails at its next batch or barrier.
    failed: Option<String>,
    /// How often and how long the task thread waited for a write-back (the memory bound), for
    /// the debug line at drop: the time a checkpoint's flush costs the records, if any.
    task_waits: u64,
    task_waited: std::time::Duration,
    /// The heap bytes of a value, counted with its entry ([`WriteBack::count_value_bytes`]).
    value_bytes: fn(&V) -> u64,
}

/// The heap bytes of a value without any (an aggregation's numbers).
fn no_heap_bytes<V>(_: &V) -> u64 {
    0
}

impl<V: Clone + Serialize + Send + Sync + 'static> WriteBack<V> {
    /// A write-back cache of `budget` bytes in front of `store` (at `dir`); with a budget, it
    /// starts the store's write-back thread. Errors: the thread cannot be started.
    /// Native checkpoints (`Job::Checkpoint`) flush or log writes as `deltas` allow
    /// (`state/disk_delta.rs`).
    pub(crate) fn new(budget: u64, store: &Store, dir: &Path, deltas: DeltaLimits) -> Result<Self, DiskStateError> {
        let writer = if budget == 0 {
            None
        } else {
            let (to_write, from_task) = channel::<Job>();
            let (done, written) = channel();
            let store = store.clone();
            let gate = Arc::new(WriterGate::default());
            let thread_gate = gate.clone();
            let log = DeltaLog::new(dir, deltas);
            let thread = std::thread::Builder::new()
                .name("weir-write-back".into())
                .spawn(move || write_generations(&store, log, &from_task, &done, &thread_gate))
                .map_err(|e| DiskStateError {
                    dir: dir.to_path_buf(),
                    problem: format!("cannot start the write-back thread: {e}"),
                })?;
            Some(Writer {
                gate,
                to_write: Some(to_write),
                written,
                thread: Some(thread),
            })
        };
        Ok(WriteBack {
            budget,
            dir: dir.to_path_buf(),
            current: Generation::default(),
            pending: VecDeque::new(),
            pending_bytes: 0,
            writer,
            retained: None,
            retained_bytes: 0,
            retain_limit: 0,
            failed: None,
            task_waits: 0,
            task_waited: std::time::Duration::ZERO,
            value_bytes: no_heap_bytes::<V>,
        })
    }

    /// Counts each cached value's heap bytes as `value_bytes` says, besides its entry (values
    /// that own memory, such as a window's list of windows, whose size the budget would
    /// otherwise not see). By default values count none.
    pub fn count_value_bytes(&mut self, value_bytes: fn(&V) -> u64) {
        self.value_bytes = value_bytes;
    }

    /// The function that gives a value's heap bytes ([`WriteBack::count_value_bytes`]).
    pub fn value_bytes(&self) -> fn(&V) -> u64 {
        self.value_bytes
    }

    /// After an entry of the current generation was changed in place, from a value counted as
    /// `before` heap bytes to one counted as `after`: counts it so, freezing the generation
    /// when it reached its share of the budget. Errors: a write-back failed.
    pub fn resized_current(&mut self, before: u64, after: u64) -> Result<(), DiskStateError> {
        if before == after {
            return Ok(());
        }
        self.current.resize(before, after);
        if self.current.bytes() >= self.budget / GENERATIONS {
            self.freeze_current()?;
        }
        Ok(())
    }

    /// Whether the current generation holds `key` (whose hash is `hash`), as a value or a
    /// tombstone.
    pub fn current_holds(&self, hash: u64, key: &Key) -> bool {
        self.current.find(hash, key).is_some()
    }

    /// The entries of the current generation, in no particular order.
    pub fn current_entries(&self) -> &[CachedEntry<V>] {
        self.current.entries()
    }

    /// The pending generations' writes, oldest first: what the store may not hold yet.
    pub fn pending_writes(&self) -> Vec<Arc<dyn EncodedWrites>> {
        self.pending
            .iter()
            .map(|g| g.clone() as Arc<dyn EncodedWrites>)
            .collect()
    }

    /// Whether there is no cache (a budget of 0): writes go to the store.
    pub fn is_off(&self) -> bool {
        self.writer.is_none()
    }

    /// Whether any generation holds an entry (else the store alone holds the state).
    pub fn holds_entries(&self) -> bool {
        !self.current.is_empty() || !self.pending.is_empty()
    }

    /// The newest entry of `key` (whose hash is `hash`) in the current generation, to change
    /// in place.
    pub fn current_mut(&mut self, hash: u64, key: &Key) -> Option<&mut CachedEntry<V>> {
        self.current.find_mut(hash, key)
    }

    /// The newest entry of `key` (whose hash is `hash`) in the pending generations, newest
    /// first (not in the current one).
    pub fn find_pending(&self, hash: u64, key: &Key) -> Option<&CachedEntry<V>> {
        self.pending.iter().rev().find_map(|g| g.find(hash, key))
    }

    /// The newest entry of `key` (whose hash is `hash`): the current generation's, else the
    /// newest pending one's. `None`: the store holds the newest version.
    pub fn find(&self, hash: u64, key: &Key) -> Option<&CachedEntry<V>> {
        self.current.find(hash, key).or_else(|| self.find_pending(hash, key))
    }

    /// Adds `entry`, whose key the current generation does not hold, freezing the generation
    /// when it reaches its share of the budget. Errors: a write-back failed.
    pub fn insert(&mut self, entry: CachedEntry<V>) -> Result<(), DiskStateError> {
        let value_bytes = entry.value.as_ref().map_or(0, self.value_bytes);
        self.current.insert(entry, value_bytes);
        if self.current.bytes() >= self.budget / GENERATIONS {
            self.freeze_current()?;
        }
        Ok(())
    }

    /// Freezes the current generation (if it holds entries) and hands it to the write-back
    /// thread, first waiting for the oldest pending ones while they hold too much. Errors: a
    /// write-back failed.
    fn freeze_current(&mut self) -> Result<(), DiskStateError> {
        if self.current.is_empty() {
            return Ok(());
        }
        self.retire_written()?;
        let frozen = Arc::new(FrozenGeneration::new(std::mem::take(&mut self.current)));
        let bytes = frozen.bytes();
        let limit = self.budget - self.budget / GENERATIONS;
        if !self.pending.is_empty() && self.pending_bytes + bytes > limit {
            let start = std::time::Instant::now();
            while !self.pending.is_empty() && self.pending_bytes + bytes > limit {
                self.wait_for_oldest()?;
            }
            self.task_waits += 1;
            self.task_waited += start.elapsed();
        }
        let writer = self.writer.as_ref().expect("a cache with a budget has a writer");
        let sent = writer
            .to_write
            .as_ref()
            .map(|to_write| to_write.send(Job::Write(frozen.clone())));
        if !matches!(sent, Some(Ok(()))) {
            return Err(self.err("the write-back thread ended".into()));
        }
        self.pending.push_back(frozen);
        self.pending_bytes += bytes;
        Ok(())
    }

    /// The synchronous part of a snapshot: freezes the current generation (O(1): a move; no
    /// store write) and returns the generations pending now, oldest first, for the snapshot
    /// to merge over the store's read view (taken after this call). Errors: a write-back
    /// failed.
    pub fn freeze_for_snapshot(&mut self) -> Result<Vec<Arc<dyn EncodedWrites>>, DiskStateError> {
        self.freeze_current()?;
        self.retire_written()?;
        Ok(self.pending_writes())
    }

    /// Asks the write-back thread for a RocksDB checkpoint of the store in `into` (a
    /// directory that must not exist yet) holding exactly the generations frozen so far and
    /// none frozen later ([`Job::Checkpoint`]): call [`WriteBack::freeze_for_snapshot`] first,
    /// at the barrier. Returns the receiver of the thread's result, to wait on off the task
    /// thread. Exact only while the store is written through generations alone
    /// ([`WriteBack::keeps_written`]); errors otherwise, and when there is no cache (no
    /// write-back thread), a write-back failed or the thread ended.
    pub fn request_checkpoint(&mut self, into: PathBuf) -> Result<Receiver<Result<(), String>>, DiskStateError> {
        self.check_not_failed()?;
        if !self.keeps_written() {
            return Err(self.err(
                "a native checkpoint needs the write-back cache with every write going through it \
                 (incremental checkpoints on, writeCacheSize above 0)"
                    .into(),
            ));
        }
        let (reply, result) = channel();
        let sent = self.writer.as_ref().and_then(|w| w.to_write.as_ref()).map(|to_write| {
            to_write.send(Job::Checkpoint {
                into,
                reply,
                requested: std::time::Instant::now(),
            })
        });
        if !matches!(sent, Some(Ok(()))) {
            return Err(self.err("the write-back thread ended".into()));
        }
        Ok(result)
    }

    /// Keeps generations after their write-back, up to the budget, for deltas
    /// ([`WriteBack::for_delta`]); from now on the store must be written only through
    /// generations (a removal or a TTL cleanup of a key no generation holds goes in as a
    /// tombstone: see [`WriteBack::keeps_written`]). Nothing with a budget of 0.
    pub fn keep_written(&mut self) {
        self.write_through_generations(self.budget);
    }

    /// What a native checkpoint needs (`state/disk_native.rs`): from now on the store is
    /// written only through generations, as with [`WriteBack::keep_written`], but no
    /// generation is kept after its write-back (those kept are freed): a native checkpoint
    /// reads the store's files, never a changed key. Nothing with a budget of 0.
    pub fn write_through_generations_only(&mut self) {
        self.write_through_generations(0);
    }

    /// The store written only through generations from now on, those written back kept up to
    /// `retain_limit` bytes (the oldest beyond it freed now).
    fn write_through_generations(&mut self, retain_limit: u64) {
        if self.is_off() {
            return;
        }
        self.retain_limit = retain_limit;
        let retained = self.retained.get_or_insert_with(VecDeque::new);
        let mut dropped = Vec::new();
        while self.retained_bytes > retain_limit
            && let Some(oldest) = retained.pop_front()
        {
            self.retained_bytes -= oldest.bytes();
            dropped.push(oldest);
        }
        for generation in dropped {
            self.free_on_writer(generation);
        }
    }

    /// Whether generations are kept after their write-back ([`WriteBack::keep_written`]): then
    /// a kept generation may hold a key's newest write only while nothing writes the key into
    /// the store directly, so removals go through the current generation as tombstones.
    pub fn keeps_written(&self) -> bool {
        self.retained.is_some()
    }

    /// The generations a delta reads changed keys from, oldest first: the kept ones written
    /// back most recently, then the pending ones (as [`WriteBack::freeze_for_snapshot`]
    /// returns them, so call it first). They are the newest generations frozen, with none
    /// missing in between, and since they were frozen the store was written only by their
    /// write-backs ([`WriteBack::keeps_written`]): a key's newest write among them is its
    /// state, and a key none of them holds is as the store's read view holds it.
    pub fn for_delta(&self) -> Vec<Arc<dyn EncodedWrites>> {
        self.retained
            .iter()
            .flatten()
            .chain(self.pending.iter())
            .map(|g| g.clone() as Arc<dyn EncodedWrites>)
            .collect()
    }

    /// Drops the kept generations (freed on the write-back thread).
    fn drop_kept(&mut self) {
        if let Some(retained) = &mut self.retained {
            let dropped: Vec<_> = retained.drain(..).collect();
            self.retained_bytes = 0;
            for generation in dropped {
                self.free_on_writer(generation);
            }
        }
    }

    /// Hands `generation` to the write-back thread to free (an O(entries) drop the task thread
    /// leaves to it); should the thread be gone, drops it here.
    fn free_on_writer(&self, generation: Arc<FrozenGeneration<V>>) {
        if let Some(to_write) = self.writer.as_ref().and_then(|w| w.to_write.as_ref()) {
            let _ = to_write.send(Job::Free(generation));
        }
    }

    /// Writes every cached entry into the store and waits until it is there, so the store
    /// alone holds the state (before a restore writes the store directly: the kept
    /// generations are dropped, as the store may then hold newer values). Errors: a
    /// write-back failed.
    pub fn drain(&mut self) -> Result<(), DiskStateError> {
        self.freeze_current()?;
        while !self.pending.is_empty() {
            self.wait_for_oldest()?;
        }
        self.drop_kept();
        Ok(())
    }

    /// Drops the pending generations whose write-back is done (their entries are in the
    /// store). Errors: a write-back failed.
    pub fn retire_written(&mut self) -> Result<(), DiskStateError> {
        self.check_not_failed()?;
        loop {
            let Some(writer) = &self.writer else { return Ok(()) };
            match writer.written.try_recv() {
                Ok(result) => self.retire_oldest(result)?,
                Err(TryRecvError::Empty) => return Ok(()),
                Err(TryRecvError::Disconnected) if self.pending.is_empty() => return Ok(()),
                Err(TryRecvError::Disconnected) => return Err(self.err("the write-back thread ended".into())),
            }
        }
    }

    /// Waits for the oldest pending generation's write-back and drops it. Errors: it failed.
    fn wait_for_oldest(&mut self) -> Result<(), DiskStateError> {
        self.check_not_failed()?;
        let Some(writer) = &self.writer else { return Ok(()) };
        let result = writer
            .written
            .recv()
            .map_err(|_| self.err("the write-back thread ended".into()))?;
        self.retire_oldest(result)
    }

    /// Drops the oldest pending generation after its write-back succeeded; after a failure,
    /// keeps it and remembers the failure (see `failed`).
    fn retire_oldest(&mut self, result: Result<(), String>) -> Result<(), DiskStateError> {
        if let Err(problem) = result {
            self.failed = Some(problem);
            return self.check_not_failed();
        }
        if let Some(done) = self.pending.pop_front() {
            let bytes = done.bytes();
            self.pending_bytes -= bytes;
            match &mut self.retained {
                // Kept for deltas: the oldest kept ones go while they hold more than the
                // limit (the budget; 0 for native checkpoints).
                Some(retained) => {
                    retained.push_back(done);
                    self.retained_bytes += bytes;
                    let mut dropped = Vec::new();
                    while self.retained_bytes > self.retain_limit
                        && let Some(oldest) = retained.pop_front()
                    {
                        self.retained_bytes -= oldest.bytes();
                        dropped.push(oldest);
                    }
                    for generation in dropped {
                        self.free_on_writer(generation);
                    }
                }
                None => self.free_on_writer(done),
            }
        }
        Ok(())
    }

    /// The first failed write-back, as an error (see `failed`).
    fn check_not_failed(&self) -> Result<(), DiskStateError> {
        if let Some(problem) = &self.failed {
            return Err(self.err(format!("writing cached entries into the store: {problem}")));
        }
        let flush_failure = self.writer.as_ref().and_then(|writer| writer.gate.flush_failure.get());
        match flush_failure {
            None => Ok(()),
            Some(problem) => Err(self.err(format!(
                "a checkpoint's flush of the store failed ({problem}): RocksDB writes nothing more to the store \
                 until it recovers, which it may never do (a disk that stays full), so the task restarts from the \
                 latest checkpoint into a new store"
            ))),
        }
    }

    fn err(&self, problem: String) -> DiskStateError {
        DiskStateError {
            dir: self.dir.clone(),
            problem,
        }
    }

    /// Bytes the cache holds now: the current generation, the pending ones and those kept
    /// after their write-back ([`DiskStateOptions::write_cache_bytes`](crate::state::disk::DiskStateOptions::write_cache_bytes)
    /// counts them all).
    pub fn bytes(&self) -> u64 {
        self.current.bytes() + self.pending_bytes + self.retained_bytes
    }

    /// Entries in the current generation, pending generations and bytes held, for tests.
    #[cfg(test)]
    pub fn held(&self) -> (usize, usize, u64) {
        (
            self.current.len(),
            self.pending.len(),
            self.current.bytes() + self.pending_bytes,
        )
    }

    /// Generations kept after their write-back and their bytes, for tests.
    #[cfg(test)]
    pub fn kept(&self) -> (usize, u64) {
        (self.retained.as_ref().map_or(0, |r| r.len()), self.retained_bytes)
    }

    /// Holds the write-back thread before its next generation (`true`) or lets it go on, for
    /// tests (a paused thread and the memory bound: the task thread waits for ever).
    #[cfg(test)]
    pub fn pause_writer(&self, paused: bool) {
        if let Some(writer) = &self.writer {
            writer.gate.set_paused(paused);
        }
    }

    /// Makes the write-back of the next generation fail without writing it, for tests.
    #[cfg(test)]
    pub fn fail_next_write_back(&self) {
        if let Some(writer) = &self.writer {
            writer.gate.fail_next.store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// Makes the next native checkpoint's memtable flush fail, for tests.
    #[cfg(test)]
    pub fn fail_next_flush(&self) {
        if let Some(writer) = &self.writer {
            writer
                .gate
                .fail_next_flush
                .store(true, std::sync::atomic::Ordering::SeqCst);
        }
    }

    /// Waits until every pending generation is written, for tests.
    #[cfg(test)]
    pub fn wait_for_pending(&mut self) -> Result<(), DiskStateError> {
        while !self.pending.is_empty() {
            self.wait_for_oldest()?;
        }
        Ok(())
    }
}

impl<V> Drop for WriteBack<V> {
    /// Ends the write-back thread after the generations sent to it (the store is scratch:
    /// what they write no longer matters, but the thread holds the store open).
    fn drop(&mut self) {
        if let Some(writer) = &mut self.writer {
            tracing::debug!(
                target: "weir_runtime::state::write_back",
                dir = %self.dir.display(),
                task_waits = self.task_waits,
                task_waited_ms = self.task_waited.as_secs_f64() * 1e3,
                "the task thread waited for the write-back (the memory bound)"
            );
            writer.gate.set_paused(false);
            writer.to_write = None;
            if let Some(thread) = writer.thread.take() {
                let _ = thread.join();
            }
        }
    }
}

/// The write-back thread: writes each generation it receives into the store as one write
/// batch (logged in `log` for delta checkpoints) and reports the result, in order, writes
/// native checkpoints as `log` decides, and frees retired generations, until the task side
/// hangs up.
fn write_generations(
    store: &Store,
    mut log: DeltaLog,
    from_task: &Receiver<Job>,
    done: &Sender<Result<(), String>>,
    gate: &WriterGate,
) {
    // The first failed write-back: a checkpoint after it would lack the failed writes.
    let mut failed: Option<String> = None;
    let mut busy = WriterBusy::default();
    for job in from_task {
        let generation = match job {
            Job::Write(generation) => generation,
            Job::Free(generation) => {
                drop(generation);
                continue;
            }
            Job::Checkpoint { into, reply, requested } => {
                gate.wait_while_paused();
                let result = match &failed {
                    Some(problem) => Err(format!("a write-back before the barrier failed: {problem}")),
                    None => {
                        // A directory left by an earlier attempt of the same checkpoint
                        // (RocksDB writes it as `<dir>.tmp`, then renames it).
                        let _ = std::fs::remove_dir_all(&into);
                        let mut unfinished = into.clone().into_os_string();
                        unfinished.push(".tmp");
                        let _ = std::fs::remove_dir_all(unfinished);
                        let start = std::time::Instant::now();
                        #[cfg(test)]
                        if gate.fail_next_flush.swap(false, std::sync::atomic::Ordering::SeqCst) {
                            log.fail_next_flush = true;
                        }
                        let written = log.checkpoint(store, &into);
                        if let Some(problem) = log.flush_failure() {
                            // Only the first failure is kept: a later one finds it set.
                            let _ = gate.flush_failure.set(problem.to_string());
                        }
                        busy.checkpoints += 1;
                        busy.delta_checkpoints += u64::from(matches!(written, Ok(CheckpointForm::Delta)));
                        busy.checkpointing += start.elapsed();
                        tracing::debug!(
                            target: "weir_runtime::checkpoint::native",
                            into = %into.display(),
                            waited_for_generations_ms = (start - requested).as_secs_f64() * 1e3,
                            form = ?written.as_ref().ok(),
                            checkpoint_ms = start.elapsed().as_secs_f64() * 1e3,
                            "native checkpoint written locally"
                        );
                        written.map(|_| ())
                    }
                };
                // The encoder may have given up waiting (its snapshot was dropped).
                if reply.send(result).is_err() {
                    let _ = std::fs::remove_dir_all(&into);
                }
                continue;
            }
        };
        gate.wait_while_paused();
        let mut batch = rocksdb::WriteBatch::default();
        for (key, value) in generation.writes() {
            match value {
                Some(value) => batch.put(key.as_slice(), value.as_slice()),
                None => batch.delete(key.as_slice()),
            }
        }
        #[cfg(test)]
        if gate.fail_next.swap(false, std::sync::atomic::Ordering::SeqCst) {
            drop(generation);
            failed.get_or_insert_with(|| "injected write-back failure".into());
            if done.send(Err("injected write-back failure".into())).is_err() {
                break;
            }
            continue;
        }
        let start = std::time::Instant::now();
        let result = store.write(batch).map_err(|e| e.problem);
        busy.writes += 1;
        busy.writing += start.elapsed();
        match &result {
            Ok(()) => log.record(generation.writes()),
            Err(problem) => {
                failed.get_or_insert_with(|| problem.clone());
            }
        }
        drop(generation);
        if done.send(result).is_err() {
            break;
        }
    }
    tracing::debug!(
        target: "weir_runtime::state::write_back",
        writes = busy.writes,
        writing_ms = busy.writing.as_secs_f64() * 1e3,
        checkpoints = busy.checkpoints,
        delta_checkpoints = busy.delta_checkpoints,
        checkpointing_ms = busy.checkpointing.as_secs_f64() * 1e3,
        "the write-back thread ends"
    );
}

/// What the write-back thread spent its time on, for its debug line at the end: generations
/// written (RocksDB write batches) and native checkpoints (flushed or delta,
/// `state/disk_delta.rs`), each a count and the wall time in all, and how many checkpoints
/// were deltas.
#[derive(Default)]
struct WriterBusy {
    writes: u64,
    writing: std::time::Duration,
    checkpoints: u64,
    delta_checkpoints: u64,
    checkpointing: std::time::Duration,
}
