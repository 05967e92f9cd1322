//! Runs one process tree and measures it: wall time, CPU time (user + system) of every process
//! in the tree, and the peak resident set size of its largest process.
//!
//! Method: the bench makes itself a *child subreaper* (`prctl(PR_SET_CHILD_SUBREAPER)`), so a
//! grandchild orphaned by its parent (PyFlink's Python driver exits without waiting for the
//! JVM it launched) is re-parented to the bench instead of to init. The bench then reaps the
//! child and every adopted orphan with `wait4`, whose `rusage` covers the reaped process and all
//! descendants it reaped itself. CPU seconds are the sum of `ru_utime + ru_stime` over those
//! reaps; peak RSS is the largest `ru_maxrss` among them (Linux reports it in KiB): the
//! biggest single process, not a sum of simultaneous processes (for Flink that is the JVM; the
//! Python driver's own ~100 MiB is not added).

use std::fs::File;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

/// What one measured process tree did.
#[derive(Clone, Debug)]
pub struct Measured {
    /// Seconds from spawn to the exit of the direct child.
    pub wall_seconds: f64,
    /// User + system CPU seconds of the whole tree.
    pub cpu_seconds: f64,
    /// Largest `ru_maxrss` of a process in the tree, in bytes.
    pub peak_rss_bytes: u64,
    /// Whether the direct child exited with status 0 (and was not killed by the timeout).
    pub success: bool,
    /// The child's standard output.
    pub stdout: String,
}

/// Makes this process the reaper of its orphaned descendants (Linux only; see module doc).
pub fn become_subreaper() -> std::io::Result<()> {
    // SAFETY: prctl with PR_SET_CHILD_SUBREAPER takes one integer argument and touches no memory.
    let rc = unsafe { libc::prctl(libc::PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) };
    if rc == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}

fn seconds(t: libc::timeval) -> f64 {
    t.tv_sec as f64 + t.tv_usec as f64 / 1e6
}

/// `wait4(pid)`, retrying on EINTR. Returns the wait status and the reaped tree's usage, or
/// `None` when there is no such child (ECHILD).
fn wait4(pid: libc::pid_t) -> Option<(i32, libc::rusage)> {
    loop {
        let mut status: libc::c_int = 0;
        // SAFETY: an all-zero rusage is a valid value; wait4 writes into both out-pointers.
        let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
        // SAFETY: valid out-pointers to locals.
        let rc = unsafe { libc::wait4(pid, &mut status, 0, &mut usage) };
        if rc > 0 {
            return Some((status, usage));
        }
        if std::io::Error::last_os_error().raw_os_error() != Some(libc::EINTR) {
            return None;
        }
    }
}

/// Runs `command` in its own process group with stdout and stderr sent to `<log>.out` and
/// `<log>.err`, kills the group after `timeout`, and measures it (see module doc). The caller
/// must have called [`become_subreaper`] and must have no other children running.
pub fn run(command: &mut Command, log: &Path, timeout: Duration) -> std::io::Result<Measured> {
    let out_path = log.with_extension("out");
    let err_path = log.with_extension("err");
    let child = command
        .stdout(File::create(&out_path)?)
        .stderr(File::create(&err_path)?)
        .stdin(std::process::Stdio::piped())
        .process_group(0)
        .spawn()?;
    let pid = child.id() as libc::pid_t;
    let started = Instant::now();
    let (done_tx, done_rx) = std::sync::mpsc::channel::<()>();
    let watchdog = std::thread::spawn(move || {
        if done_rx.recv_timeout(timeout).is_err() {
            // SAFETY: signals the process group the bench created; no memory is touched.
            unsafe { libc::kill(-pid, libc::SIGKILL) };
            return true;
        }
        false
    });
    let (status, usage) = wait4(pid).ok_or_else(|| std::io::Error::other("the child vanished"))?;
    let wall_seconds = started.elapsed().as_secs_f64();
    drop(child); // already reaped; dropping closes its stdin (PyFlink's JVM exits on that EOF)
    let mut cpu_seconds = seconds(usage.ru_utime) + seconds(usage.ru_stime);
    let mut peak_rss_kib = usage.ru_maxrss as u64;
    // Orphans adopted by the subreaper (the JVM behind PyFlink): reap them all.
    while let Some((_, orphan)) = wait4(-1) {
        cpu_seconds += seconds(orphan.ru_utime) + seconds(orphan.ru_stime);
        peak_rss_kib = peak_rss_kib.max(orphan.ru_maxrss as u64);
    }
    let _ = done_tx.send(());
    let timed_out = watchdog.join().unwrap_or(true);
    let exited_ok = libc::WIFEXITED(status) && libc::WEXITSTATUS(status) == 0;
    Ok(Measured {
        wall_seconds,
        cpu_seconds,
        peak_rss_bytes: peak_rss_kib * 1024,
        success: exited_ok && !timed_out,
        stdout: std::fs::read_to_string(&out_path).unwrap_or_default(),
    })
}

/// User + system CPU seconds this thread used so far (`RUSAGE_THREAD`), for the in-process
/// baseline.
pub fn thread_cpu_seconds() -> f64 {
    // SAFETY: an all-zero rusage is valid; getrusage writes into it.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    // SAFETY: valid out-pointer.
    unsafe { libc::getrusage(libc::RUSAGE_THREAD, &mut usage) };
    seconds(usage.ru_utime) + seconds(usage.ru_stime)
}
