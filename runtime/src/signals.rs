//! SIGTERM and SIGINT for the long-running commands (`weir run`, `weir coordinator`,
//! `weir worker`).
//!
//! The first signal asks for a graceful stop: it cancels the [`StopSignal`]'s token, which each
//! command turns into its own stop (suspend the job, leave the job, ...). A second signal
//! during the stop exits at once (status 128 + signal number, as a shell reports it). A
//! graceful stop that has not ended the process after [`GRACEFUL_STOP_LIMIT`] exits with
//! status 1, so a pod never waits out its whole termination grace period.
//!
//! Without a handler a container's main process (PID 1) ignores SIGTERM, and every pod stop
//! waits out the termination grace period before SIGKILL.

use std::sync::{Arc, Mutex};
use std::time::Duration;
use tokio_util::sync::CancellationToken;

/// Longest a graceful stop may take before the process exits anyway (status 1).
pub const GRACEFUL_STOP_LIMIT: Duration = Duration::from_secs(15);

/// What to do on the n-th signal (1-based).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SignalAction {
    /// Start a graceful stop.
    GracefulStop,
    /// A stop is already under way: exit now.
    ExitNow,
}

/// The action for the `n`-th signal received (1-based).
pub fn action_for(n: u32) -> SignalAction {
    if n <= 1 {
        SignalAction::GracefulStop
    } else {
        SignalAction::ExitNow
    }
}

/// The exit status of a process ended by a second signal: 128 + the signal number.
pub fn exit_status_for(signal: &str) -> i32 {
    match signal {
        "SIGINT" => 128 + 2,
        "SIGTERM" => 128 + 15,
        _ => 1,
    }
}

/// The process's stop request, set by the first SIGTERM or SIGINT.
#[derive(Clone, Debug, Default)]
pub struct StopSignal {
    token: CancellationToken,
    received: Arc<Mutex<Option<&'static str>>>,
}

impl StopSignal {
    /// A stop request that only [`StopSignal::request`] triggers (tests, embedding).
    pub fn manual() -> StopSignal {
        StopSignal::default()
    }

    /// Cancelled when a graceful stop was requested.
    pub fn token(&self) -> CancellationToken {
        self.token.clone()
    }

    /// Waits until a graceful stop is requested.
    pub async fn requested(&self) {
        self.token.cancelled().await
    }

    /// Whether a graceful stop was requested.
    pub fn is_requested(&self) -> bool {
        self.token.is_cancelled()
    }

    /// The signal that requested the stop (`SIGTERM`, `SIGINT`), if any.
    pub fn signal_name(&self) -> Option<&'static str> {
        *self.received.lock().expect("lock")
    }

    /// Requests a graceful stop as if `signal` had been received.
    pub fn request(&self, signal: &'static str) {
        self.received.lock().expect("lock").get_or_insert(signal);
        self.token.cancel();
    }
}

/// Installs the SIGTERM and SIGINT handlers. Errors: the handlers cannot be registered.
///
/// Signals are received on a thread of their own (with a one-thread tokio runtime): a busy
/// job runtime delays signal delivery by seconds, and a second signal must work even when the
/// graceful stop is stuck.
pub fn install() -> Result<StopSignal, String> {
    let stop = StopSignal::default();
    let s = stop.clone();
    let (ready_tx, ready_rx) = std::sync::mpsc::channel::<Result<(), String>>();
    std::thread::Builder::new()
        .name("weir-signals".into())
        .spawn(move || {
            let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(rt) => rt,
                Err(e) => return drop(ready_tx.send(Err(e.to_string()))),
            };
            rt.block_on(async move {
                let mut signals = match listen() {
                    Ok(signals) => signals,
                    Err(e) => return drop(ready_tx.send(Err(e.to_string()))),
                };
                let _ = ready_tx.send(Ok(()));
                let mut n = 0u32;
                while let Some(name) = signals.next().await {
                    n += 1;
                    match action_for(n) {
                        SignalAction::GracefulStop => {
                            tracing::info!(
                                target: "weir",
                                signal = name,
                                "received {name}: stopping gracefully (send it again to exit at once)"
                            );
                            s.request(name);
                            tokio::spawn(async move {
                                tokio::time::sleep(GRACEFUL_STOP_LIMIT).await;
                                tracing::warn!(
                                    target: "weir",
                                    "the graceful stop did not end within {GRACEFUL_STOP_LIMIT:?}; exiting"
                                );
                                std::process::exit(1);
                            });
                        }
                        SignalAction::ExitNow => {
                            tracing::warn!(target: "weir", signal = name, "received {name} again: exiting now");
                            std::process::exit(exit_status_for(name));
                        }
                    }
                }
            });
        })
        .map_err(|e| format!("cannot start the signal thread: {e}"))?;
    match ready_rx.recv() {
        Ok(Ok(())) => Ok(stop),
        Ok(Err(e)) => Err(format!("cannot install the SIGTERM/SIGINT handlers: {e}")),
        Err(_) => Err("cannot install the SIGTERM/SIGINT handlers: the signal thread ended".into()),
    }
}

#[cfg(unix)]
struct Signals {
    term: tokio::signal::unix::Signal,
    int: tokio::signal::unix::Signal,
}

#[cfg(unix)]
fn listen() -> std::io::Result<Signals> {
    use tokio::signal::unix::{SignalKind, signal};
    Ok(Signals {
        term: signal(SignalKind::terminate())?,
        int: signal(SignalKind::interrupt())?,
    })
}

#[cfg(unix)]
impl Signals {
    async fn next(&mut self) -> Option<&'static str> {
        tokio::select! {
            s = self.term.recv() => s.map(|_| "SIGTERM"),
            s = self.int.recv() => s.map(|_| "SIGINT"),
        }
    }
}

#[cfg(not(unix))]
struct Signals;

#[cfg(not(unix))]
fn listen() -> std::io::Result<Signals> {
    Ok(Signals)
}

#[cfg(not(unix))]
impl Signals {
    async fn next(&mut self) -> Option<&'static str> {
        tokio::signal::ctrl_c().await.ok().map(|_| "SIGINT")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_signal_stops_gracefully_and_later_ones_exit_at_once() {
        for (n, want) in [
            (1, SignalAction::GracefulStop),
            (2, SignalAction::ExitNow),
            (3, SignalAction::ExitNow),
        ] {
            assert_eq!(action_for(n), want, "signal #{n}");
        }
    }

    #[test]
    fn a_second_signal_exits_with_128_plus_its_number() {
        for (name, want) in [("SIGINT", 130), ("SIGTERM", 143), ("SIGHUP", 1)] {
            assert_eq!(exit_status_for(name), want, "{name}");
        }
    }

    #[test]
    fn a_manual_request_records_the_first_signal_and_cancels_the_token() {
        let s = StopSignal::manual();
        assert!(!s.is_requested());
        s.request("SIGTERM");
        s.request("SIGINT");
        assert!(s.is_requested() && s.token().is_cancelled());
        assert_eq!(s.signal_name(), Some("SIGTERM"));
    }
}
