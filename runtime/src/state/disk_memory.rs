//! The disk backend's configured memory against the memory the process may use: a process
//! whose stores are configured for more memory than its container's limit runs until state
//! fills the caches, then is killed for memory (Flink users meet the same with RocksDB outside
//! managed memory). Started jobs log a warning naming `spec.diskState` ([`over_limit_warning`]);
//! the limit is read at the edge ([`memory_limit`]).

use crate::job::{Job, OperatorKind, StateBackend};
use crate::state::disk::DiskStateOptions;
use crate::state::disk_rocks::MAX_WRITE_BUFFERS;

/// The memory the process may use, bytes, and where that figure comes from.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemoryLimit {
    /// Bytes.
    pub bytes: u64,
    /// Where it was read: `the container's memory limit (cgroup memory.max)` or
    /// `the machine's memory (MemTotal)`.
    pub source: &'static str,
}

/// The disk stores this process opens for `job`'s stateful steps with `subtasks` subtasks
/// each, and their configured memory, bytes: per aggregation or window subtask
/// `cacheSize + 3 × writeBufferSize + writeCacheSize`, per join subtask the same without the
/// write-back cache (a join has none). The three memtables are RocksDB's active one and the
/// two sealed ones it keeps while flushing ([`MAX_WRITE_BUFFERS`]). `None` on the heap
/// backend or without stateful steps. Saturating: a sum past `u64::MAX` is `u64::MAX`.
pub fn configured_stores(job: &Job, options: &DiskStateOptions, subtasks: u64) -> Option<ConfiguredStores> {
    if job.spec.state_backend != StateBackend::Disk {
        return None;
    }
    let store = options
        .cache_bytes
        .saturating_add(options.write_buffer_bytes.saturating_mul(MAX_WRITE_BUFFERS));
    let per_subtask: Vec<u64> = job
        .operators
        .iter()
        .filter_map(|op| match op.kind {
            OperatorKind::Aggregate { .. } | OperatorKind::Window(_) => {
                Some(store.saturating_add(options.write_cache_bytes))
            }
            OperatorKind::Join(_) => Some(store),
            _ => None,
        })
        .collect();
    (!per_subtask.is_empty()).then(|| ConfiguredStores {
        stores: per_subtask.len() as u64 * subtasks,
        bytes: per_subtask
            .into_iter()
            .fold(0u64, u64::saturating_add)
            .saturating_mul(subtasks),
    })
}

/// What [`configured_stores`] counts.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConfiguredStores {
    /// Disk stores (one per subtask of each stateful step).
    pub stores: u64,
    /// Their configured memory, bytes.
    pub bytes: u64,
}

/// Whose disk stores a warning of [`over_limit_warning`] is about, and what it advises.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StoresHolder {
    /// The subject of the sentence: `this process`, `each worker pod`.
    pub holder: &'static str,
    /// What to do besides lowering `spec.diskState`'s sizes.
    pub advice: &'static str,
}

/// A `weir run`, `weir worker` or `weir coordinator` process, warning at its start.
pub const THIS_PROCESS: StoresHolder = StoresHolder {
    holder: "this process",
    advice: "run fewer subtasks per process (`slotsPerWorker` on a cluster, `parallelism` under \
             `weir run`), or give it more memory",
};

/// A worker pod of a StreamJob, warned about by the operator when it deploys the job
/// (`weir-operator`'s `build::disk_memory_warning`).
pub const WORKER_POD: StoresHolder = StoresHolder {
    holder: "each worker pod",
    advice: "lower spec.slotsPerWorker (each slot runs one subtask of every step), or raise \
             spec.worker.resources.limits.memory",
};

/// The warning for the disk stores of `holder` limited to `limit`, or `None` when they fit.
/// They fit when they take at most three quarters of the limit: measured peaks of a store are
/// above its configured memory (allocator pages, compaction buffers;
/// docs/runtime/state-backends.md, "Memory of the disk backend"), and the rest of the process
/// (records in flight, the checkpoint's upload parts) needs room too.
pub fn over_limit_warning(configured: ConfiguredStores, limit: &MemoryLimit, holder: StoresHolder) -> Option<String> {
    let room = limit.bytes / 4 * 3;
    (configured.bytes > room).then(|| {
        format!(
            "spec.diskState: the {} disk stores of {} are configured for {} of memory \
             (cacheSize + 3 × writeBufferSize + writeCacheSize each), more than three quarters of \
             the {} of {}: the process may be killed for memory once state fills the caches. Lower \
             spec.diskState's sizes, {}",
            configured.stores,
            holder.holder,
            human(configured.bytes),
            human(limit.bytes),
            limit.source,
            holder.advice,
        )
    })
}

/// `bytes` in binary units with one decimal (`1.5 GiB`), for messages.
fn human(bytes: u64) -> String {
    const UNITS: [&str; 6] = ["KiB", "MiB", "GiB", "TiB", "PiB", "EiB"];
    if bytes < 1024 {
        return format!("{bytes} B");
    }
    let mut value = bytes as f64 / 1024.0;
    let mut unit = 0;
    while value >= 1024.0 && unit + 1 < UNITS.len() {
        value /= 1024.0;
        unit += 1;
    }
    format!("{value:.1} {}", UNITS[unit])
}

/// The memory this process may use: its cgroup's limit (v2 `memory.max`, v1
/// `memory.limit_in_bytes`) when there is one, else the machine's `MemTotal`. `None` when
/// neither can be read (not Linux).
pub fn memory_limit() -> Option<MemoryLimit> {
    let read = |path: &str| std::fs::read_to_string(path).ok();
    let machine = read("/proc/meminfo").and_then(|text| mem_total(&text));
    let cgroup = read("/sys/fs/cgroup/memory.max")
        .or_else(|| read("/sys/fs/cgroup/memory/memory.limit_in_bytes"))
        .and_then(|text| text.trim().parse::<u64>().ok());
    choose_limit(cgroup, machine)
}

/// The smaller of a cgroup's limit and the machine's memory (a cgroup v1 "no limit" is a
/// huge number, v2's is `max`, which does not parse).
fn choose_limit(cgroup: Option<u64>, machine: Option<u64>) -> Option<MemoryLimit> {
    match (cgroup, machine) {
        (Some(c), Some(m)) if c < m => Some(MemoryLimit {
            bytes: c,
            source: "the container's memory limit (cgroup memory.max)",
        }),
        (Some(c), None) => Some(MemoryLimit {
            bytes: c,
            source: "the container's memory limit (cgroup memory.max)",
        }),
        (_, Some(m)) => Some(MemoryLimit {
            bytes: m,
            source: "the machine's memory (MemTotal)",
        }),
        (None, None) => None,
    }
}

/// `MemTotal` of `/proc/meminfo`'s text, bytes.
fn mem_total(meminfo: &str) -> Option<u64> {
    let line = meminfo.lines().find(|l| l.starts_with("MemTotal:"))?;
    let kib: u64 = line.split_whitespace().nth(1)?.parse().ok()?;
    Some(kib * 1024)
}

/// Logs [`over_limit_warning`] for `job` with `subtasks` subtasks per stateful step in this
/// process, when it applies.
pub fn warn_if_over_limit(job: &Job, subtasks: u64) {
    let Ok(options) = job.spec.disk_state_options() else {
        return;
    };
    if let Some(configured) = configured_stores(job, &options, subtasks)
        && let Some(limit) = memory_limit()
        && let Some(warning) = over_limit_warning(configured, &limit, THIS_PROCESS)
    {
        tracing::warn!("{warning}");
    }
}

#[cfg(test)]
#[path = "disk_memory_tests.rs"]
mod tests;
