//! A subtask that panics fails like one that returns an error: its panic is caught where the
//! subtask runs ([`run_reporting_failure`]) and reported at once as the cause of the job's
//! failure (`subtask counts (1/2) panicked: MESSAGE`), instead of leaving its downstream's
//! symptom (a closed input) to be reported after the coordinator's wait for a cause
//! (`checkpoint/failure_cause.rs`), or nothing at all when no other subtask notices.
//!
//! A panic is a bug: user input is refused with an error, never by a panic. The test hook
//! [`panic_failpoint`] makes a subtask panic so the tests can show the report.

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
    let message = payload
        .downcast_ref::<&str>()
        .map(|s| s.to_string())
        .or_else(|| payload.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "a panic without a message".to_string());
    format!("subtask {subtask} panicked: {message}")
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
    if subtask == 0 && std::env::var("WEIR_FAILPOINT").is_ok_and(|v| v.split(',').any(|f| f == point)) {
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
