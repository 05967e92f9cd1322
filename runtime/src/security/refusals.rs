//! Refused credentials: counted per surface (`weir_auth_failures_total{surface=...}`) and
//! logged once per surface and peer address, so a misconfigured client retrying every second
//! (or a scan) cannot flood the log.

use std::collections::HashSet;
use std::net::{IpAddr, SocketAddr};
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

/// Where a credential was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Surface {
    /// The control API (bearer token).
    Control,
    /// The coordinator's worker RPC port (HMAC handshake).
    Rpc,
    /// A worker's data port (HMAC handshake).
    Data,
}

impl Surface {
    /// Every surface, in metric order.
    pub const ALL: [Surface; 3] = [Surface::Control, Surface::Rpc, Surface::Data];

    /// The `surface` label value.
    pub fn label(self) -> &'static str {
        match self {
            Surface::Control => "control",
            Surface::Rpc => "rpc",
            Surface::Data => "data",
        }
    }

    fn index(self) -> usize {
        self as usize
    }
}

/// Distinct peers remembered per process; beyond this, refusals are counted but not logged.
pub const MAX_LOGGED_PEERS: usize = 4096;

static FAILURES: [AtomicU64; 3] = [AtomicU64::new(0), AtomicU64::new(0), AtomicU64::new(0)];

/// Remembers which (surface, peer) pairs were logged; pure apart from its set.
#[derive(Debug, Default)]
pub struct OncePerPeer {
    seen: HashSet<(Surface, IpAddr)>,
    full_noted: bool,
}

/// What to log for one refusal.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LogDecision {
    /// First refusal of this peer on this surface: log it.
    Log,
    /// The peer was logged before: stay quiet.
    Quiet,
    /// The set is full: log once that further peers are not logged.
    NoteFull,
}

impl OncePerPeer {
    /// Decides whether a refusal of `peer` on `surface` is logged, remembering it.
    pub fn decide(&mut self, surface: Surface, peer: IpAddr) -> LogDecision {
        if self.seen.contains(&(surface, peer)) {
            return LogDecision::Quiet;
        }
        if self.seen.len() >= MAX_LOGGED_PEERS {
            if std::mem::replace(&mut self.full_noted, true) {
                return LogDecision::Quiet;
            }
            return LogDecision::NoteFull;
        }
        self.seen.insert((surface, peer));
        LogDecision::Log
    }
}

fn logged() -> &'static Mutex<OncePerPeer> {
    static L: std::sync::OnceLock<Mutex<OncePerPeer>> = std::sync::OnceLock::new();
    L.get_or_init(Mutex::default)
}

/// Records a refused credential from `peer` on `surface`: counts it, and logs a warning with
/// the peer address and `reason` the first time this peer is refused on this surface.
/// `reason` must not contain any credential.
pub fn refuse(surface: Surface, peer: SocketAddr, reason: &str) {
    FAILURES[surface.index()].fetch_add(1, Ordering::Relaxed);
    let decision = logged().lock().expect("lock").decide(surface, peer.ip());
    match decision {
        LogDecision::Log => tracing::warn!(
            target: "weir",
            surface = surface.label(),
            %peer,
            "refused an unauthenticated connection from {peer} on the {} port: {reason} \
             (further refusals of this address are counted in weir_auth_failures_total, not logged)",
            surface.label()
        ),
        LogDecision::NoteFull => tracing::warn!(
            target: "weir",
            surface = surface.label(),
            "refused credentials from more than {MAX_LOGGED_PEERS} addresses; new addresses are no longer logged"
        ),
        LogDecision::Quiet => {}
    }
}

/// Refusals on `surface` since the process started.
pub fn failures(surface: Surface) -> u64 {
    FAILURES[surface.index()].load(Ordering::Relaxed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_peer_is_logged_once_per_surface() {
        let mut once = OncePerPeer::default();
        let a: IpAddr = "10.0.0.1".parse().unwrap();
        let b: IpAddr = "10.0.0.2".parse().unwrap();
        assert_eq!(once.decide(Surface::Control, a), LogDecision::Log);
        assert_eq!(once.decide(Surface::Control, a), LogDecision::Quiet);
        assert_eq!(once.decide(Surface::Rpc, a), LogDecision::Log);
        assert_eq!(once.decide(Surface::Control, b), LogDecision::Log);
        assert_eq!(once.decide(Surface::Control, b), LogDecision::Quiet);
    }

    #[test]
    fn beyond_the_limit_one_note_is_logged_then_nothing() {
        let mut once = OncePerPeer::default();
        for i in 0..MAX_LOGGED_PEERS as u32 {
            assert_eq!(
                once.decide(Surface::Data, IpAddr::from(i.to_be_bytes())),
                LogDecision::Log
            );
        }
        let extra: IpAddr = "255.255.255.255".parse().unwrap();
        assert_eq!(once.decide(Surface::Data, extra), LogDecision::NoteFull);
        assert_eq!(once.decide(Surface::Data, extra), LogDecision::Quiet);
        assert_eq!(
            once.decide(Surface::Data, IpAddr::from([0, 0, 0, 1])),
            LogDecision::Quiet
        );
    }

    #[test]
    fn refusals_are_counted_per_surface() {
        let before = failures(Surface::Rpc);
        refuse(Surface::Rpc, "127.0.0.9:1".parse().unwrap(), "test");
        refuse(Surface::Rpc, "127.0.0.9:2".parse().unwrap(), "test");
        assert!(failures(Surface::Rpc) >= before + 2);
    }
}
