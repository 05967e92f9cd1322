//! What one phase of the bench cost the process: wall time, CPU time of all its threads, page
//! faults and involuntary context switches (`getrusage(RUSAGE_SELF)`), so a slow phase can be
//! told apart as CPU work, page faults (memory first touched) or waiting for a core or the disk.

use std::time::Instant;

/// The process's counters at one moment.
#[derive(Clone, Copy)]
pub struct Probe {
    at: Instant,
    cpu_s: f64,
    minor_faults: i64,
    major_faults: i64,
    involuntary_switches: i64,
}

impl Probe {
    /// The counters now.
    pub fn now() -> Probe {
        // SAFETY: `getrusage` writes the struct it is given and nothing else.
        let mut u: libc::rusage = unsafe { std::mem::zeroed() };
        unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut u) };
        let secs = |t: libc::timeval| t.tv_sec as f64 + t.tv_usec as f64 / 1e6;
        Probe {
            at: Instant::now(),
            cpu_s: secs(u.ru_utime) + secs(u.ru_stime),
            minor_faults: u.ru_minflt,
            major_faults: u.ru_majflt,
            involuntary_switches: u.ru_nivcsw,
        }
    }

    /// The phase from `self` to `later`, as `<wall> s (cpu <s> s, <n>k faults, <n> preempted)`.
    pub fn until(&self, later: &Probe) -> String {
        format!(
            "{:.3} s (cpu {:.3} s, {:.1}k faults{}, {} preempted)",
            (later.at - self.at).as_secs_f64(),
            later.cpu_s - self.cpu_s,
            (later.minor_faults - self.minor_faults) as f64 / 1000.0,
            match later.major_faults - self.major_faults {
                0 => String::new(),
                n => format!(" {n} major"),
            },
            later.involuntary_switches - self.involuntary_switches
        )
    }
}
