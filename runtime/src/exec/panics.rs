//! A subtask that panics fails like one that returns an error: its panic is caught where the
//! subtask runs ([`run_reporting_failure`]) and reported at once as the cause of the job's
//! failure (`subtask counts (1/2) panicked: MESSAGE`), instead of leaving its downstream's
//! symptom (a closed input) to be reported after the coordinator's wait for a cause
//! (`checkpoint/failure_cause.rs`), or nothing at all when no other subtask notices.
//!
//! A panic is a bug: user input is refused with an error, never by a panic. The test hook
//! [`panic_failpoint`] makes a subtask panic so the tests can show the report.
//!
//! The helpers a subtask or process spawns (the asynchronous part of a checkpoint, the state
//! file encoder, blocking storage and Kafka calls, the data channels between workers, the
//! retention worker) catch their panics the same way ([`catch_panic`], [`join_failure`]) and
//! turn them into the failure of what they served, naming the helper: a panicking
//! asynchronous part declines its checkpoint (as Flink declines a checkpoint whose async part
//! failed; `tolerableFailedCheckpoints` then decides), a data channel's fails its subtask.
//! Uncaught, such a panic ended only the helper's tokio task: a checkpoint that never
//! completed nor failed until its timeout, or a job failing later with a symptom.

use super::messages::TaskEvent;
use crate::operators::TaskError;
use futures::FutureExt;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use tokio::sync::mpsc;

/// The failure message of subtask `subtask` (its label, `counts (1/2)`, with `on worker w1`
/// in a worker) whose panic carried `payload`: `subtask <subtask> panicked: <message>`. The
/// message is the panic's when it is a string (as `panic!`, `expect` and `unwrap` give it).
pub fn panic_failure(subtask: &str, payload: &(dyn std::any::Any + Send)) -> String {
    helper_panic_failure(&format!("subtask {subtask}"), payload)
}

/// The failure message of helper `what` (`the asynchronous part of checkpoint 3 of subtask
/// counts (1/2)`) whose panic carried `payload`: `<what> panicked: <message>`, the message
/// being the panic's when it is a string.
pub fn helper_panic_failure(what: &str, payload: &(dyn std::any::Any + Send)) -> String {
    let message = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string());
    format!("{what} panicked: {message}")
}

/// Runs `helper` and returns its output, or, when it panics, [`helper_panic_failure`] of
/// `what` (also logged as an error). For helpers spawned on tokio, whose panic would
/// otherwise end only their own task.
pub async fn catch_panic<T>(what: impl FnOnce() -> String, helper: impl Future<Output = T>) -> Result<T, String> {
    AssertUnwindSafe(helper).catch_unwind().await.map_err(|payload| {
        let error = helper_panic_failure(&what(), &*payload);
        tracing::error!(target: "weir", "{error}");
        error
    })
}

/// Spawns `helper`, a part of this process it cannot go on without (a coordinator's RPC
/// listener, heartbeat watch and control forwarders; a worker's data listener and event
/// forwarder): if it panics (a bug), the process logs `<what> panicked: <message>; the process
/// cannot go on without it and exits` and exits with status 1, as on any fatal error, so
/// what supervises it (Kubernetes, the coordinator's failover for a worker) starts it again.
/// Uncaught, the process stayed up without it: workers never registered or never declared
/// lost, control messages or subtask events never forwarded, a job that hangs.
pub fn spawn_vital(
    what: impl Into<String>,
    helper: impl Future<Output = ()> + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    spawn_vital_with(what, helper, |_| std::process::exit(1))
}

/// [`spawn_vital`] with what to do once the panic is logged (`fatal`, given the message)
/// instead of exiting: for tests.
pub fn spawn_vital_with(
    what: impl Into<String>,
    helper: impl Future<Output = ()> + Send + 'static,
    fatal: impl FnOnce(String) + Send + 'static,
) -> tokio::task::JoinHandle<()> {
    let what = what.into();
    tokio::spawn(async move {
        if let Err(payload) = AssertUnwindSafe(helper).catch_unwind().await {
            let error = format!(
                "{}; the process cannot go on without it and exits",
                helper_panic_failure(&what, &*payload)
            );
            tracing::error!(target: "weir", "{error}");
            fatal(error);
        }
    })
}

/// The message for helper `what` spawned on tokio (`spawn_blocking`) that did not return:
/// `<what> panicked: <message>` ([`helper_panic_failure`]), or `<what> was cancelled` (the
/// runtime shutting down).
pub fn join_failure(what: &str, error: tokio::task::JoinError) -> String {
    match error.try_into_panic() {
        Ok(payload) => helper_panic_failure(what, &*payload),
        Err(_) => format!("{what} was cancelled"),
    }
}

/// Runs subtask `task` (`subtask`: its label) and reports how it failed on `events`: an error
/// as `<failed_prefix>: <error>` (after `before_error_report`), a panic as
/// [`panic_failure`]. A subtask that ends normally reports its end itself.
pub async fn run_reporting_failure<R: Future<Output = ()>>(
    run: impl Future<Output = Result<(), TaskError>>,
    task: usize,
    subtask: &str,
    failed_prefix: &str,
    events: &mpsc::UnboundedSender<TaskEvent>,
    before_error_report: impl FnOnce() -> R,
) {
    let error = match AssertUnwindSafe(run).catch_unwind().await {
        Ok(Ok(())) => return,
        Ok(Err(e)) => {
            before_error_report().await;
            format!("{failed_prefix}: {}", e.0)
        }
        Err(payload) => {
            let error = panic_failure(subtask, &*payload);
            tracing::error!(target: "weir", "{error}");
            error
        }
    };
    let _ = events.send(TaskEvent::Failed { task, error });
}

/// Test hook: `WEIR_FAILPOINT=panic-subtask:<uid>` makes the first subtask (1/p) of the stage
/// that starts with step `uid` panic when it starts, with the message
/// `failpoint panic-subtask:<uid>`. Unset in production.
pub fn panic_failpoint(first_uid: &str, subtask: u32) {
    let point = format!("panic-subtask:{first_uid}");
    if subtask == 0 && crate::failpoint::is_set(&point) {
        panic!("failpoint {point}");
    }
}

/// Test hook: `WEIR_FAILPOINT=panic-upload:<id>` makes the asynchronous part of snapshot `id`
/// (after the synchronous part, before any state file is written) panic in every subtask, with
/// the message `failpoint panic-upload:<id>`. Unset in production.
pub fn async_snapshot_panic_failpoint(checkpoint_id: u64) {
    let point = format!("panic-upload:{checkpoint_id}");
    if crate::failpoint::is_set(&point) {
        panic!("failpoint {point}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_panic_names_the_subtask_and_its_message() {
        let literal: Box<dyn std::any::Any + Send> = Box::new("index out of bounds");
        let formatted: Box<dyn std::any::Any + Send> = Box::new(format!("key {} missing", 7));
        let other: Box<dyn std::any::Any + Send> = Box::new(42u32);
        for (payload, want) in [
            (literal, "subtask counts (1/2) panicked: index out of bounds"),
            (formatted, "subtask counts (1/2) panicked: key 7 missing"),
            (other, "subtask counts (1/2) panicked: a panic without a message"),
        ] {
            assert_eq!(panic_failure("counts (1/2)", &*payload), want);
        }
    }

    /// A helper's panic becomes an error naming the helper, whether caught in place or seen
    /// through its `JoinHandle`; a helper that returns gives its output.
    #[tokio::test]
    async fn a_panicking_helper_is_named_in_its_error() {
        let what = || "the asynchronous part of checkpoint 3 of subtask counts (1/2)".to_string();
        let got = catch_panic(what, async { panic!("boom {}", 7) }).await;
        assert_eq!(
            got,
            Err::<(), _>("the asynchronous part of checkpoint 3 of subtask counts (1/2) panicked: boom 7".into())
        );
        assert_eq!(catch_panic(what, async { 5 }).await, Ok(5));
        let joined = tokio::task::spawn_blocking(|| panic!("encoder bug")).await;
        let e = joined.unwrap_err();
        assert_eq!(
            join_failure("the state file encoder of operator counts", e),
            "the state file encoder of operator counts panicked: encoder bug"
        );
    }

    /// A vital helper that panics ends the process (here: reports what it would exit with);
    /// one that returns does nothing.
    #[tokio::test]
    async fn a_panicking_vital_helper_is_fatal_and_named() {
        let (tx, mut rx) = mpsc::unbounded_channel();
        let fatal = move |m: String| {
            let _ = tx.send(m);
        };
        let t = fatal.clone();
        spawn_vital_with("the heartbeat watch", async { panic!("lock poisoned") }, fatal)
            .await
            .unwrap();
        spawn_vital_with("the RPC listener", async {}, t).await.unwrap();
        assert_eq!(
            rx.recv().await.as_deref(),
            Some("the heartbeat watch panicked: lock poisoned; the process cannot go on without it and exits")
        );
        assert_eq!(rx.recv().await, None, "a helper that returns is not fatal");
    }

    #[tokio::test]
    async fn a_panicking_subtask_reports_its_failure_and_an_ending_one_nothing() {
        async fn panics() -> Result<(), TaskError> {
            panic!("boom")
        }
        let (tx, mut rx) = mpsc::unbounded_channel();
        run_reporting_failure(panics(), 3, "counts (1/2)", "counts (1/2) failed", &tx, || async {}).await;
        let fails = async { Err(TaskError("overflow".into())) };
        run_reporting_failure(fails, 4, "counts (2/2)", "counts (2/2) failed", &tx, || async {}).await;
        run_reporting_failure(async { Ok(()) }, 5, "out (1/2)", "out (1/2) failed", &tx, || async {}).await;
        drop(tx);
        let mut got = vec![];
        while let Some(TaskEvent::Failed { task, error }) = rx.recv().await {
            got.push((task, error));
        }
        assert_eq!(
            got,
            [
                (3, "subtask counts (1/2) panicked: boom".to_string()),
                (4, "counts (2/2) failed: overflow".to_string()),
            ]
        );
    }
}
