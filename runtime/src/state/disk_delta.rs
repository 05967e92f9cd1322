//! Native checkpoints without a memtable flush at every barrier (issue 12): a *delta
//! checkpoint* is the last flushed native checkpoint's files (its *base*) plus the writes
//! since, logged by the write-back thread in files of their own (`<sequence>.delta`, one per
//! checkpoint that had writes since the previous one).
//!
//! **Why.** A flushed checkpoint turns the memtable into a level-0 table file spanning all
//! keys at every barrier; at 5M and 50M keys compacting those small files into the level
//! below cost the background threads 2-3 times the CPU of a run without checkpoints, and
//! checkpoints every second kept only 0.70-0.88 of its throughput
//! (docs/runtime/state-backends-log.md, "Level 0 compacts at RocksDB's default again"). Logging
//! the writes instead keeps the memtable filling to its full size, as without checkpoints.
//! Flink's changelog state backend has the same shape (a state change log uploaded at every
//! checkpoint, the state backend's own snapshot "materialized" periodically); RocksDB's own
//! answer (`CreateCheckpoint` with `log_size_for_flush`, the write-ahead log's tail) is out of
//! reach of the `rocksdb` crate 0.20.1 and Debian's RocksDB 7.8.
//!
//! **When a checkpoint flushes** ([`checkpoint_form`], a pure decision): when there is no base
//! yet (a flushed checkpoint without table files, of an empty store, is none), when the writes logged since the base would pass [`DeltaLimits::max_bytes`]
//! ([`DELTA_WRITE_BUFFERS`] of the store's write buffers) or
//! [`DeltaLimits::max_files`] files (a restore applies each), and when the store's sequence
//! number says something wrote it other than the logged writes (never, while every write goes
//! through the write-back thread: the check keeps a delta from ever missing one).
//!
//! **Files.** The base is kept in a directory beside the store (`<store dir>.chkbase`: the
//! checkpoint's files hard-linked, the delta files written there); a delta checkpoint's
//! directory holds links to all of them. Delta files are immutable once written, so the upload
//! shares them between checkpoints as it shares table files (`checkpoint/native_upload.rs`).
//! Format of a delta file: the 8 bytes [`DELTA_MAGIC`], then each write in the order written:
//! a tag byte (1 put, 0 delete), the store key's length (u32, little-endian) and bytes, and for
//! a put the value's length (u32, little-endian) and bytes.
//!
//! **Restore** ([`apply_deltas`]): the base's files open as a store, then each delta file, in
//! name order (ascending sequence numbers), is written into it as one write batch and removed.

use crate::state::disk::DiskStateError;
use crate::state::disk_cache::StoreWrite;
use crate::state::disk_rocks::Store;
use std::io::Write;
use std::path::{Path, PathBuf};

/// The first bytes of every delta file (format version 1).
pub const DELTA_MAGIC: &[u8; 8] = b"WEIRDLT1";

/// The suffix of a delta file's name.
pub const DELTA_SUFFIX: &str = ".delta";

/// The environment variable that switches delta checkpoints off (`off`: every native
/// checkpoint flushes, as before 2026-12-04) or on (`on` or unset, the default); an
/// experiment's switch for the benchmark's comparisons, not a setting of the job.
pub const NATIVE_DELTAS_ENV: &str = "WEIR_NATIVE_DELTAS";

/// Most delta files a base collects before a checkpoint flushes again: a restore applies
/// each one (at a checkpoint every second, a base 32 seconds old at most when writes are few).
pub const MAX_DELTA_FILES: usize = 32;

/// Most bytes of delta files since the base, in write buffers (memtables) of the store: a
/// restore writes at most this much into the base's store before the first record. Four,
/// not one (2026-12-04): a log holds fewer bytes per write than the memtable, so at one write
/// buffer the memtable filled and RocksDB flushed it first, and the checkpoint's flush soon
/// after wrote a small level-0 file more, about one per memtable; at 50M keys those extra
/// files cost RocksDB's compactions 14 % more CPU than no checkpoints
/// (docs/runtime/state-backends-log.md, "Delta checkpoints: fewer flushes").
pub const DELTA_WRITE_BUFFERS: u64 = 4;

/// The name of the delta file whose newest write took sequence number `sequence`: 20 digits,
/// so names sort as the writes were made.
pub fn delta_file_name(sequence: u64) -> String {
    format!("{sequence:020}{DELTA_SUFFIX}")
}

/// Whether `name` is a delta file's name ([`delta_file_name`]).
pub fn is_delta_file(name: &str) -> bool {
    name.strip_suffix(DELTA_SUFFIX)
        .is_some_and(|digits| !digits.is_empty() && digits.bytes().all(|b| b.is_ascii_digit()))
}

/// The local directory a store's base is kept in: a sibling of the store (`<store
/// dir>.chkbase`), in the same run directory as its checkpoints (so hard links work, and a
/// later process removes it with the run directory if this one is killed).
pub fn base_dir(store_dir: &Path) -> PathBuf {
    let mut name = store_dir.file_name().map(|n| n.to_os_string()).unwrap_or_default();
    name.push(".chkbase");
    store_dir.with_file_name(name)
}

/// Bytes on local disk that the base directory of the store in `store_dir` holds and the store
/// does not: its delta files, and table files the store has since compacted away (any file
/// that is not the same file, by inode, as the store's file of that name, which RocksDB's
/// `total-sst-files-size` counts). Files a local checkpoint directory links too still count:
/// they take the state dir's disk. 0 when there is no base. Errors reading the directory
/// count as 0 (a metric, not a decision).
pub fn base_only_bytes(store_dir: &Path) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let Ok(entries) = std::fs::read_dir(base_dir(store_dir)) else {
        return 0;
    };
    let in_store = |name: &std::ffi::OsStr, inode: u64| {
        std::fs::metadata(store_dir.join(name)).is_ok_and(|store_file| store_file.ino() == inode)
    };
    entries
        .filter_map(|entry| {
            let entry = entry.ok()?;
            let metadata = entry.metadata().ok()?;
            (metadata.is_file() && !in_store(&entry.file_name(), metadata.ino())).then_some(metadata.len())
        })
        .sum()
}

/// How far a base may be from the store before a checkpoint flushes again.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct DeltaLimits {
    /// Most bytes of delta files (logged writes) since the base; 0: every checkpoint flushes.
    pub max_bytes: u64,
    /// Most delta files since the base; 0: every checkpoint flushes.
    pub max_files: usize,
}

impl DeltaLimits {
    /// The limits for a store whose write buffer (memtable) is `write_buffer_bytes`
    /// (`disk_rocks::write_buffer_bytes`), with deltas switched as [`NATIVE_DELTAS_ENV`]'s
    /// value `switch` says (`None`: unset): [`DELTA_WRITE_BUFFERS`] write buffers of bytes and
    /// [`MAX_DELTA_FILES`] files. Errors: a value other than `on` or `off`, naming the
    /// variable.
    pub fn for_store(write_buffer_bytes: u64, switch: Option<&str>) -> Result<DeltaLimits, String> {
        let on = match switch.map(str::trim) {
            None | Some("" | "on") => true,
            Some("off") => false,
            Some(other) => return Err(format!("{NATIVE_DELTAS_ENV}=`{other}` is not one of `on`, `off`")),
        };
        Ok(if on {
            DeltaLimits {
                max_bytes: write_buffer_bytes.saturating_mul(DELTA_WRITE_BUFFERS),
                max_files: MAX_DELTA_FILES,
            }
        } else {
            DeltaLimits {
                max_bytes: 0,
                max_files: 0,
            }
        })
    }

    fn off(&self) -> bool {
        self.max_bytes == 0 || self.max_files == 0
    }
}

/// What a checkpoint would add to its base, for [`checkpoint_form`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SinceBase {
    /// Bytes of the delta files since the base, this checkpoint's included.
    pub bytes: u64,
    /// Delta files since the base, this checkpoint's included.
    pub files: usize,
    /// More writes were made since the base than [`DeltaLimits::max_bytes`] let the log hold
    /// (it stopped logging them).
    pub overflowed: bool,
    /// The store's sequence number is the base's plus one per logged write: nothing else
    /// wrote the store since the base.
    pub only_logged_writes: bool,
}

/// How a native checkpoint is written.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CheckpointForm {
    /// Flush the memtables and write a RocksDB checkpoint: a new base.
    Flush,
    /// The base's files and the delta files since it.
    Delta,
}

/// The form of the next native checkpoint of a store whose base is `since` away (`None`: no
/// base), within `limits`: see the module doc.
pub fn checkpoint_form(since: Option<SinceBase>, limits: DeltaLimits) -> CheckpointForm {
    match since {
        Some(since)
            if !limits.off()
                && since.only_logged_writes
                && !since.overflowed
                && since.bytes <= limits.max_bytes
                && since.files <= limits.max_files =>
        {
            CheckpointForm::Delta
        }
        _ => CheckpointForm::Flush,
    }
}

/// The base of a store's delta checkpoints, as the write-back thread tracks it.
struct Base {
    /// The store's sequence number when the base was written.
    sequence: u64,
    /// Writes made since (logged or not).
    writes: u64,
    /// Bytes of the delta files written since.
    bytes: u64,
    /// Delta files written since.
    files: usize,
    /// Writes were made that the log did not keep: the next checkpoint flushes.
    overflowed: bool,
}

/// The write-back thread's log of the writes since the last flushed native checkpoint, and
/// the checkpoints it writes (see the module doc). The writes since the last checkpoint go to
/// a file in the base's directory as they are written ([`NEXT_DELTA_FILE`], buffered: memory
/// holds a buffer, not the writes), which the next checkpoint renames into its delta file.
/// Dropping it removes the base's directory.
pub(crate) struct DeltaLog {
    base_dir: PathBuf,
    limits: DeltaLimits,
    base: Option<Base>,
    /// The next delta file being written, once a write since the last checkpoint was logged.
    next: Option<std::io::BufWriter<std::fs::File>>,
    /// Bytes written to `next`, [`DELTA_MAGIC`] included (0: no file).
    next_bytes: u64,
    /// The first failed memtable flush ([`DeltaLog::flush_failure`]).
    flush_failure: Option<String>,
    /// Makes the next flush fail without flushing (tests only set it).
    #[cfg(test)]
    pub(crate) fail_next_flush: bool,
}

/// The name of the delta file being written in the base's directory until a checkpoint
/// names it ([`delta_file_name`]); never linked into a checkpoint.
pub const NEXT_DELTA_FILE: &str = "next.delta.tmp";

impl Drop for DeltaLog {
    fn drop(&mut self) {
        self.next = None;
        let _ = std::fs::remove_dir_all(&self.base_dir);
    }
}

impl DeltaLog {
    /// The log of the store in `store_dir`, within `limits`.
    pub(crate) fn new(store_dir: &Path, limits: DeltaLimits) -> DeltaLog {
        DeltaLog {
            base_dir: base_dir(store_dir),
            limits,
            base: None,
            next: None,
            next_bytes: 0,
            flush_failure: None,
            #[cfg(test)]
            fail_next_flush: false,
        }
    }

    /// The first failed memtable flush of a checkpoint, if any. RocksDB turns a failed flush
    /// into a background error that stops the store's writes until it recovers, which on a
    /// full disk it may never do (helper-101's F5: every later checkpoint of a bounded job's
    /// end failed on the same flush error, one every 10 s, for as many failures as
    /// `tolerableFailedCheckpoints` allowed): the task fails instead, and restores into a new
    /// store (`WriteBack`'s failure check).
    pub(crate) fn flush_failure(&self) -> Option<&str> {
        self.flush_failure.as_deref()
    }

    /// Logs `writes`, just written into the store as one write batch. Nothing without a base;
    /// past [`DeltaLimits::max_bytes`], or if the file cannot be written, the log stops (its
    /// file removed) until the next flushed checkpoint.
    pub(crate) fn record(&mut self, writes: &[StoreWrite]) {
        let Some(base) = &mut self.base else { return };
        base.writes += writes.len() as u64;
        if base.overflowed || writes.is_empty() {
            return;
        }
        let mut entries = Vec::new();
        for (key, value) in writes {
            push_entry(&mut entries, key, value.as_deref());
        }
        let next_path = self.base_dir.join(NEXT_DELTA_FILE);
        let appended = (|| -> std::io::Result<u64> {
            let mut added = 0;
            if self.next.is_none() {
                let mut file = std::io::BufWriter::new(std::fs::File::create(&next_path)?);
                file.write_all(DELTA_MAGIC)?;
                self.next = Some(file);
                added += DELTA_MAGIC.len() as u64;
            }
            self.next.as_mut().expect("opened above").write_all(&entries)?;
            Ok(added + entries.len() as u64)
        })();
        match appended {
            Ok(added) if base.bytes + self.next_bytes + added <= self.limits.max_bytes => self.next_bytes += added,
            failed => {
                if let Err(e) = failed {
                    tracing::warn!(
                        target: "weir_runtime::checkpoint::native",
                        file = %next_path.display(),
                        "cannot log writes for the next delta checkpoint (it flushes): {e}"
                    );
                }
                base.overflowed = true;
                self.next = None;
                self.next_bytes = 0;
                let _ = std::fs::remove_file(&next_path);
            }
        }
    }

    /// Writes the checkpoint of `store` into `into` (which must not exist), as
    /// [`checkpoint_form`] decides, and returns the form. Errors: RocksDB cannot flush or write
    /// the checkpoint; a delta file or link cannot be written (the next checkpoint then
    /// flushes).
    pub(crate) fn checkpoint(&mut self, store: &Store, into: &Path) -> Result<CheckpointForm, String> {
        let since = self.base.as_ref().map(|base| SinceBase {
            bytes: base.bytes + self.next_bytes,
            files: base.files + usize::from(self.next_bytes > 0),
            overflowed: base.overflowed,
            only_logged_writes: store.latest_sequence_number() == base.sequence + base.writes,
        });
        let form = checkpoint_form(since, self.limits);
        let written = match form {
            CheckpointForm::Flush => self.flush_checkpoint(store, into),
            CheckpointForm::Delta => self.delta_checkpoint(store, into),
        };
        if written.is_err() {
            self.forget_base();
        }
        written.map(|()| form)
    }

    /// No base from now on (the next checkpoint flushes); the next delta file is dropped.
    fn forget_base(&mut self) {
        self.base = None;
        self.next = None;
        self.next_bytes = 0;
        let _ = std::fs::remove_file(self.base_dir.join(NEXT_DELTA_FILE));
    }

    fn flush_checkpoint(&mut self, store: &Store, into: &Path) -> Result<(), String> {
        self.forget_base();
        // The base's sequence number is read before the flush: a write by anything but the
        // write-back thread between this read and the checkpoint (none today) then leaves the
        // store past `sequence + logged writes`, and the next checkpoint flushes; read after,
        // the base would count a write its files might lack.
        let sequence = store.latest_sequence_number();
        let flushed = store.flush().map_err(|e| e.problem);
        #[cfg(test)]
        let flushed = match std::mem::take(&mut self.fail_next_flush) {
            true => Err("cannot flush the memtables: injected flush failure".to_string()),
            false => flushed,
        };
        if let Err(problem) = &flushed {
            self.flush_failure.get_or_insert_with(|| problem.clone());
        }
        flushed?;
        store.create_checkpoint(into).map_err(|e| e.problem)?;
        if self.limits.off() || !holds_a_table_file(into) {
            // No base without table files (the store was empty): deltas on it would hold every
            // write, and the first checkpoint after a restore of one would reference nothing
            // (a restore applies delta files and removes them); the next checkpoint flushes.
            return Ok(());
        }
        // The checkpoint is written; a base that cannot be kept only means the next one
        // flushes too.
        match link_all(into, &self.base_dir) {
            Ok(()) => {
                self.base = Some(Base {
                    sequence,
                    writes: 0,
                    bytes: 0,
                    files: 0,
                    overflowed: false,
                });
            }
            Err(e) => tracing::warn!(
                target: "weir_runtime::checkpoint::native",
                base = %self.base_dir.display(),
                "cannot keep a native checkpoint's files as the base of the next ones (they flush): {e}"
            ),
        }
        Ok(())
    }

    fn delta_checkpoint(&mut self, store: &Store, into: &Path) -> Result<(), String> {
        let base = self.base.as_mut().expect("a delta checkpoint has a base");
        if let Some(next) = self.next.take() {
            let name = delta_file_name(store.latest_sequence_number());
            let path = self.base_dir.join(&name);
            // Synced: a local checkpoint store may keep the file as a hard link.
            next.into_inner()
                .map_err(|e| e.into_error())
                .and_then(|file| file.sync_all())
                .and_then(|()| std::fs::rename(self.base_dir.join(NEXT_DELTA_FILE), &path))
                .map_err(|e| format!("cannot write the delta file {}: {e}", path.display()))?;
            base.bytes += self.next_bytes;
            base.files += 1;
            self.next_bytes = 0;
        }
        let mut unfinished = into.as_os_str().to_os_string();
        unfinished.push(".tmp");
        let unfinished = PathBuf::from(unfinished);
        link_all(&self.base_dir, &unfinished)
            .and_then(|()| std::fs::rename(&unfinished, into))
            .map_err(|e| format!("cannot write a delta checkpoint into {}: {e}", into.display()))
    }
}

/// Whether the checkpoint directory `dir` holds a RocksDB table file (`*.sst`); false if it
/// cannot be listed.
fn holds_a_table_file(dir: &Path) -> bool {
    std::fs::read_dir(dir).is_ok_and(|entries| {
        entries
            .flatten()
            .any(|e| e.file_name().to_string_lossy().ends_with(".sst"))
    })
}

/// Appends one write to a delta file's entries (the module doc's format).
fn push_entry(out: &mut Vec<u8>, key: &[u8], value: Option<&[u8]>) {
    out.push(u8::from(value.is_some()));
    out.extend_from_slice(&(key.len() as u32).to_le_bytes());
    out.extend_from_slice(key);
    if let Some(value) = value {
        out.extend_from_slice(&(value.len() as u32).to_le_bytes());
        out.extend_from_slice(value);
    }
}

/// Makes `to` (removed first if it exists) a directory of hard links to every file in `from`
/// but [`NEXT_DELTA_FILE`].
fn link_all(from: &Path, to: &Path) -> std::io::Result<()> {
    if to.exists() {
        std::fs::remove_dir_all(to)?;
    }
    std::fs::create_dir_all(to)?;
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        if entry.file_name() != NEXT_DELTA_FILE {
            std::fs::hard_link(entry.path(), to.join(entry.file_name()))?;
        }
    }
    Ok(())
}

/// The writes of the delta file `bytes` (named `name` in errors), in order, as one write
/// batch. Errors: the file does not start with [`DELTA_MAGIC`] or ends inside an entry, or an
/// entry's tag is neither 0 nor 1.
pub fn decode_delta_file<'a>(name: &str, bytes: &'a [u8]) -> Result<rocksdb::WriteBatch, String> {
    let corrupt = |what: &str| format!("delta file {name} is corrupt: {what}");
    let mut rest = bytes
        .strip_prefix(DELTA_MAGIC.as_slice())
        .ok_or_else(|| corrupt("it does not start with the delta file's magic bytes"))?;
    let mut batch = rocksdb::WriteBatch::default();
    // Keys and values are borrowed from `bytes`: the write batch holds the only copy.
    let take = |rest: &mut &'a [u8], n: usize| -> Result<&'a [u8], String> {
        if rest.len() < n {
            return Err(corrupt("it ends inside an entry"));
        }
        let (head, tail) = rest.split_at(n);
        *rest = tail;
        Ok(head)
    };
    let length = |rest: &mut &'a [u8]| -> Result<usize, String> {
        let bytes = take(rest, 4)?;
        Ok(u32::from_le_bytes([bytes[0], bytes[1], bytes[2], bytes[3]]) as usize)
    };
    while let Some((&tag, tail)) = rest.split_first() {
        rest = tail;
        let key_len = length(&mut rest)?;
        let key = take(&mut rest, key_len)?;
        match tag {
            0 => batch.delete(key),
            1 => {
                let value_len = length(&mut rest)?;
                batch.put(key, take(&mut rest, value_len)?);
            }
            other => return Err(corrupt(&format!("an entry's tag is {other}, neither 0 nor 1"))),
        }
    }
    Ok(batch)
}

/// Applies the delta files in `dir` (the files of a delta checkpoint, opened as `store`) in
/// name order, each as one write batch, and removes them. Returns how many were applied.
/// Errors: a delta file cannot be read or is corrupt ([`decode_delta_file`]), the store cannot
/// write; each naming `dir`.
pub(crate) fn apply_deltas(store: &Store, dir: &Path) -> Result<usize, DiskStateError> {
    let err = |problem: String| DiskStateError {
        dir: dir.to_path_buf(),
        problem,
    };
    let mut names = delta_files_in(dir).map_err(|e| err(format!("cannot list the delta files: {e}")))?;
    names.sort();
    for name in &names {
        let path = dir.join(name);
        let bytes = std::fs::read(&path).map_err(|e| err(format!("cannot read the delta file {name}: {e}")))?;
        store.write(decode_delta_file(name, &bytes).map_err(err)?)?;
        std::fs::remove_file(&path).map_err(|e| err(format!("cannot remove the applied delta file {name}: {e}")))?;
    }
    if !names.is_empty() {
        tracing::debug!(
            target: "weir_runtime::checkpoint::native",
            dir = %dir.display(),
            delta_files = names.len(),
            "delta files applied to a restored store"
        );
    }
    Ok(names.len())
}

/// The names of the delta files in `dir`, unsorted. Errors: `dir` cannot be listed.
pub fn delta_files_in(dir: &Path) -> std::io::Result<Vec<String>> {
    let mut names = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let name = entry?.file_name().to_string_lossy().into_owned();
        if is_delta_file(&name) {
            names.push(name);
        }
    }
    Ok(names)
}

#[cfg(test)]
#[path = "disk_delta_tests.rs"]
mod tests;
