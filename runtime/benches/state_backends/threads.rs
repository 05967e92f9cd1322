//! CPU time per thread name of the child job, sampled from `/proc/self/task/*/stat` every
//! 200 ms (a thread that ends keeps its last sample; up to 200 ms of its CPU time may be
//! missed), so a run with checkpoints can be told apart from one without by where its CPU went
//! (task threads, the write-back thread, RocksDB's flushes and compactions). Linux only.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;
use std::time::Duration;

/// A sampler running on its own thread until [`ThreadCpu::finish`].
pub struct ThreadCpu {
    stop: Arc<AtomicBool>,
    thread: JoinHandle<HashMap<u64, (String, u64)>>,
}

impl ThreadCpu {
    /// Starts sampling.
    pub fn start() -> ThreadCpu {
        let stop = Arc::new(AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut seen = HashMap::new();
            loop {
                sample(&mut seen);
                if stopped.load(Ordering::Relaxed) {
                    return seen;
                }
                std::thread::sleep(Duration::from_millis(200));
            }
        });
        ThreadCpu { stop, thread }
    }

    /// Stops sampling and returns `name: seconds` of CPU time (user and system) per thread
    /// name, most first, summed over the threads of that name.
    pub fn finish(self) -> String {
        self.stop.store(true, Ordering::Relaxed);
        let seen = self.thread.join().unwrap_or_default();
        let mut by_name: HashMap<String, u64> = HashMap::new();
        for (name, ticks) in seen.into_values() {
            *by_name.entry(name).or_default() += ticks;
        }
        let mut rows: Vec<_> = by_name.into_iter().collect();
        rows.sort_by(|a, b| b.1.cmp(&a.1).then(a.0.cmp(&b.0)));
        // SAFETY: `sysconf` reads a constant of the system.
        let per_second = unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64;
        rows.iter()
            .map(|(name, ticks)| format!("{name} {:.2}", *ticks as f64 / per_second))
            .collect::<Vec<_>>()
            .join(", ")
    }
}

/// Reads every thread's name and CPU ticks (fields 14 and 15 of its `stat`) into `seen`.
fn sample(seen: &mut HashMap<u64, (String, u64)>) {
    let Ok(tasks) = std::fs::read_dir("/proc/self/task") else {
        return;
    };
    for task in tasks.flatten() {
        let Some(tid) = task.file_name().to_str().and_then(|t| t.parse::<u64>().ok()) else {
            continue;
        };
        let Ok(stat) = std::fs::read_to_string(task.path().join("stat")) else {
            continue;
        };
        // `pid (comm) state ...`: the name may hold spaces and parentheses, so split at the last `)`.
        let (Some(open), Some(close)) = (stat.find('('), stat.rfind(')')) else {
            continue;
        };
        let name = stat[open + 1..close].to_string();
        let fields: Vec<&str> = stat[close + 1..].split_whitespace().collect();
        // After `)`: field 3 (state) is index 0, so utime (14) and stime (15) are 11 and 12.
        let ticks = |i: usize| fields.get(i).and_then(|f| f.parse::<u64>().ok()).unwrap_or(0);
        seen.insert(tid, (name, ticks(11) + ticks(12)));
    }
}
