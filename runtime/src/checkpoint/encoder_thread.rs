//! The thread that runs a snapshot's encoder (the asynchronous part of a checkpoint: a heap
//! snapshot's key-group encode, a disk snapshot's range scans or a delta's point reads) at a
//! lower OS priority than the task threads, so a checkpoint uses the CPU the tasks leave idle
//! instead of taking a share of their cores. Flink users expect the asynchronous part to be
//! background work; on a pod with as many busy task threads as cores it otherwise took half
//! of a task thread's core while it ran (docs/runtime/state-backends.md, branch ckprio).
//!
//! Linux applies a nice value per thread, and a thread starts with the nice value of the
//! thread that creates it: the scan and encode workers a snapshot starts from this thread
//! (`state/parallel.rs`) run at its priority without being told. The encoder runs on a thread
//! of its own, not on tokio's blocking pool: an unprivileged thread cannot raise its priority
//! back (that needs `CAP_SYS_NICE`), so a pool thread lowered once would run every later
//! blocking job (Kafka calls, restores) at the lower priority too.
//!
//! The decision ([`encoder_nice`]) is a pure function; [`start_encoder`] is the edge.

use crate::exec::panics::helper_panic_failure;

/// How much the encoder thread's nice value is raised above the thread that starts it (the
/// task's runtime thread, normally nice 0): 10. Linux's CFS gives a runnable thread a weight
/// of `1024 / 1.25^nice` (the kernel's `sched_prio_to_weight` table: 1024 at nice 0, 110 at
/// nice 10, 15 at nice 19), so on a core shared with one busy nice-0 task thread the encoder
/// gets `110 / (1024 + 110)`, about 10 % of it, and the task thread 90 % instead of 50 %; on
/// an idle core it runs at full speed. 10 rather than 19 keeps the checkpoint's completion
/// bounded when no core is idle: it slows by at most about 10× there, where at nice 19
/// (about 1.5 % of a shared core) it would slow by about 70× and run into the checkpoint
/// timeout.
pub const ENCODER_NICE_INCREMENT: i32 = 10;

/// The highest (least favoured) nice value Linux accepts.
pub const MAX_NICE: i32 = 19;

/// The nice value to give a snapshot encoder thread that starts at nice `current` (the nice
/// value of the thread that starts it, which it inherits), raised by `increment`:
/// `current + increment`, at most [`MAX_NICE`]. `None` when that is not above `current`
/// (nothing to change: already at the bottom, or an increment of 0 or less, which would ask
/// for a higher priority than the task threads').
pub fn encoder_nice(current: i32, increment: i32) -> Option<i32> {
    let target = current.saturating_add(increment.max(0)).min(MAX_NICE);
    (target > current).then_some(target)
}

/// Starts `encode` on a new thread named `name` whose nice value is raised by
/// [`ENCODER_NICE_INCREMENT`] ([`encoder_nice`]) before it runs; [`Encoder::result`] waits for
/// what it returns. A thread whose priority cannot be lowered (an OS that refuses, or not
/// Linux) runs at the priority it started with. `what` names the encoder in errors.
pub fn start_encoder<R: Send + 'static>(
    name: &str,
    what: String,
    encode: impl FnOnce() -> R + Send + 'static,
) -> Encoder<R> {
    let (done, result) = tokio::sync::oneshot::channel();
    let started = std::thread::Builder::new().name(name.to_string()).spawn(move || {
        lower_this_threads_priority(ENCODER_NICE_INCREMENT);
        let out = std::panic::catch_unwind(std::panic::AssertUnwindSafe(encode));
        // The receiver is gone only when the checkpoint was abandoned: nothing to tell.
        let _ = done.send(out);
    });
    let start_error = started.err().map(|e| format!("{what} could not be started: {e}"));
    Encoder {
        what,
        start_error,
        result,
    }
}

/// An encoder started by [`start_encoder`].
pub struct Encoder<R> {
    what: String,
    start_error: Option<String>,
    result: tokio::sync::oneshot::Receiver<std::thread::Result<R>>,
}

impl<R> Encoder<R> {
    /// What the encoder returned. Errors: its thread could not be started (`<what> could not
    /// be started: <error>`), or it panicked (`<what> panicked: <message>`).
    pub async fn result(self) -> Result<R, String> {
        if let Some(e) = self.start_error {
            return Err(e);
        }
        match self.result.await {
            Ok(Ok(out)) => Ok(out),
            Ok(Err(payload)) => Err(helper_panic_failure(&self.what, &*payload)),
            // The thread ended without sending: only possible if sending itself unwound.
            Err(_) => Err(format!("{} ended without a result", self.what)),
        }
    }
}

/// Raises the calling thread's nice value as [`encoder_nice`] says (Linux: `setpriority` on
/// the thread's id, which applies to this thread only). Failures are logged at debug level
/// and ignored: the encoder then runs at the priority it started with, as before.
#[cfg(target_os = "linux")]
fn lower_this_threads_priority(increment: i32) {
    // SAFETY: gettid has no preconditions.
    let thread = unsafe { libc::gettid() } as libc::id_t;
    // getpriority returns the nice value, which may be -1: clear errno to tell it from an error.
    // SAFETY: __errno_location returns this thread's errno; getpriority reads no memory of ours.
    let current = unsafe {
        *libc::__errno_location() = 0;
        libc::getpriority(libc::PRIO_PROCESS, thread)
    };
    if current == -1 && std::io::Error::last_os_error().raw_os_error().unwrap_or(0) != 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), "cannot read the encoder thread's priority");
        return;
    }
    let Some(nice) = encoder_nice(current, increment) else {
        return;
    };
    // SAFETY: setpriority reads no memory of ours.
    if unsafe { libc::setpriority(libc::PRIO_PROCESS, thread, nice) } != 0 {
        tracing::debug!(error = %std::io::Error::last_os_error(), nice, "cannot lower the encoder thread's priority");
    }
}

#[cfg(not(target_os = "linux"))]
fn lower_this_threads_priority(_increment: i32) {}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_encoder_runs_ten_nice_levels_below_its_starter_and_never_above_it() {
        // (nice of the starting thread, increment, nice the encoder gets)
        let table = [
            (0, 10, Some(10)),
            (5, 10, Some(15)),
            (-5, 10, Some(5)),
            (-20, 10, Some(-10)),
            (9, 10, Some(19)),
            (12, 10, Some(19)),
            (18, 10, Some(19)),
            (19, 10, None),
            (0, 0, None),
            (0, -5, None),
            (0, 19, Some(19)),
            (0, 40, Some(19)),
            (0, i32::MAX, Some(19)),
        ];
        for (current, increment, want) in table {
            assert_eq!(
                encoder_nice(current, increment),
                want,
                "at nice {current} raised by {increment}"
            );
        }
        assert_eq!(ENCODER_NICE_INCREMENT, 10);
    }

    /// The encoder's thread (and the threads it starts) run at the lowered priority; the
    /// thread that started it keeps its own.
    #[cfg(target_os = "linux")]
    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn the_encoder_and_the_threads_it_starts_run_at_the_lower_priority() {
        fn nice_of_this_thread() -> i32 {
            // SAFETY: as in lower_this_threads_priority.
            unsafe { libc::getpriority(libc::PRIO_PROCESS, libc::gettid() as libc::id_t) }
        }
        let before = nice_of_this_thread();
        let (encoder, worker) = start_encoder("test-encoder", "the test encoder".into(), || {
            let worker = std::thread::spawn(nice_of_this_thread).join().unwrap();
            (nice_of_this_thread(), worker)
        })
        .result()
        .await
        .unwrap();
        let want = encoder_nice(before, ENCODER_NICE_INCREMENT).unwrap_or(before);
        assert_eq!((encoder, worker), (want, want));
        assert!(
            encoder > before || before == MAX_NICE,
            "encoder at {encoder}, starter at {before}"
        );
        assert_eq!(nice_of_this_thread(), before, "the starting thread's priority changed");
    }

    #[tokio::test]
    async fn a_panicking_encoder_is_an_error_naming_it() {
        let e = start_encoder(
            "test-encoder",
            "the state file encoder of operator a".into(),
            || -> u32 { panic!("bad block") },
        )
        .result()
        .await
        .unwrap_err();
        assert_eq!(e, "the state file encoder of operator a panicked: bad block");
    }
}
