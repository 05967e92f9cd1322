//! State time-to-live (Flink's `StateTtlConfig`): an entry not written for longer than the
//! step's `ttl` is expired. Expired entries are never returned (Flink's `NeverReturnExpired`),
//! are removed a few at a time while records are processed (Flink's incremental cleanup), and
//! are left out of every restore and of savepoints and full checkpoints (an incremental
//! checkpoint's files may hold those not removed yet; its bound,
//! `KeyGroupBlock::expired_through_ms`, keeps them out of the restore).
//!
//! Time is processing time (milliseconds since the Unix epoch, from a [`Clock`]), as in Flink
//! where TTL is processing time only. The timestamp of an entry is updated on every write
//! (Flink's default `OnCreateAndWrite`); a keyed aggregation writes its key on every record, so
//! for it "on read and write" would be the same thing.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

/// A source of processing time, injectable so a test can expire state without sleeping.
pub trait Clock: Send + Sync {
    /// Milliseconds since the Unix epoch.
    fn now_ms(&self) -> u64;
}

/// The machine's wall clock, never going backwards within the process: a step back of the
/// wall clock (an NTP step, a VM migration) reads as the latest time returned before, until the
/// wall clock passes it ([`not_before`]).
///
/// Why: incremental TTL cleanup removes expired entries without recording a change, and a
/// snapshot says every entry written at or before `its now - ttl` had expired
/// (`KeyGroupBlock::expired_through_ms`), which a restore then leaves out. That covers every
/// entry cleanup removed only if the snapshot's `now` is no earlier than the cleanup's: with a
/// clock stepping back between the two, a key cleaned from the state came back at the restore
/// from its chain's base (found by review, 2026-12-07).
#[derive(Clone, Copy, Debug, Default)]
pub struct SystemClock;

/// The latest time [`SystemClock`] returned in this process, ms since the Unix epoch.
static SYSTEM_CLOCK_LATEST_MS: AtomicU64 = AtomicU64::new(0);

impl Clock for SystemClock {
    fn now_ms(&self) -> u64 {
        let wall_ms = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64);
        not_before(&SYSTEM_CLOCK_LATEST_MS, wall_ms)
    }
}

/// `wall_ms`, or the latest time returned before through `latest` if that is later; records
/// the result in `latest`. Times returned through one `latest` never decrease.
pub(crate) fn not_before(latest: &AtomicU64, wall_ms: u64) -> u64 {
    let previous = latest.fetch_max(wall_ms, Ordering::Relaxed);
    if previous > wall_ms.saturating_add(HELD_BACK_WARNING_MS) {
        warn_held_back(previous - wall_ms);
    }
    previous.max(wall_ms)
}

/// How far behind the latest time returned the wall clock may be before [`not_before`] warns.
const HELD_BACK_WARNING_MS: u64 = 1_000;

/// Warns, once per process, that the wall clock is `behind_ms` behind the time TTL goes by:
/// while it is, no key expires (a clock stepped forward, then back).
fn warn_held_back(behind_ms: u64) {
    static WARNED: std::sync::Once = std::sync::Once::new();
    WARNED.call_once(|| {
        tracing::warn!(
            behind_ms,
            "the wall clock stepped back: state TTL holds time at the latest time it read until the clock \
             catches up (no key expires meanwhile), so a restore never brings back a key it removed"
        )
    });
}

/// A clock that moves only when told to (tests).
#[derive(Debug, Default)]
pub struct ManualClock(AtomicU64);

impl ManualClock {
    /// A clock reading `now_ms`, shared so the test keeps a handle while an operator reads it.
    pub fn new(now_ms: u64) -> Arc<ManualClock> {
        Arc::new(ManualClock(AtomicU64::new(now_ms)))
    }

    /// Moves the clock forward by `by`.
    pub fn advance(&self, by: Duration) {
        self.0.fetch_add(by.as_millis() as u64, Ordering::Relaxed);
    }
}

impl Clock for ManualClock {
    fn now_ms(&self) -> u64 {
        self.0.load(Ordering::Relaxed)
    }
}

/// The TTL of one stateful step.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StateTtl {
    /// Time to live in milliseconds (at least 1).
    pub ttl_ms: u64,
}

impl StateTtl {
    /// The TTL `ttl`, rounded down to milliseconds (at least 1 ms).
    pub fn new(ttl: Duration) -> StateTtl {
        StateTtl {
            ttl_ms: (ttl.as_millis() as u64).max(1),
        }
    }

    /// Whether an entry last written at `written_ms` is expired at `now_ms`: Flink's rule
    /// `lastAccessTimestamp + ttl <= currentTimestamp` (`TtlUtils.expired`), written without
    /// overflow; a write time after `now_ms` (the clock stepped back) is not expired.
    pub fn is_expired(self, written_ms: u64, now_ms: u64) -> bool {
        now_ms.saturating_sub(written_ms) >= self.ttl_ms
    }
}

/// Whether an entry written at `written_ms` is expired at `now_ms` under an optional TTL
/// (without a TTL nothing expires).
pub fn expired(ttl: Option<StateTtl>, written_ms: u64, now_ms: u64) -> bool {
    ttl.is_some_and(|t| t.is_expired(written_ms, now_ms))
}

/// The newest write time an entry can have and be expired at `now_ms` under `ttl`
/// (`now_ms - ttl`, ms since the Unix epoch): what a snapshot taken at `now_ms` records so a
/// restore leaves out the entries that had expired then whatever its own `ttl`
/// ([`StateHandle::expired_through_ms`]). `None` without a `ttl`, or when nothing can have
/// expired yet (`now_ms < ttl`).
///
/// [`StateHandle::expired_through_ms`]: crate::state::snapshot::StateHandle::expired_through_ms
pub fn expired_through(ttl: Option<StateTtl>, now_ms: u64) -> Option<u64> {
    ttl.and_then(|t| now_ms.checked_sub(t.ttl_ms))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expiry_table() {
        let day = Some(StateTtl::new(Duration::from_secs(86_400)));
        let rows = [
            (None, 0, u64::MAX, false),
            (day, 1_000, 1_000, false),
            (day, 1_000, 1_000 + 86_399_999, false),
            (day, 1_000, 1_000 + 86_400_000, true),
            (day, u64::MAX - 5, u64::MAX, false),
            (day, 5_000, 1_000, false),
            (Some(StateTtl::new(Duration::ZERO)), 7, 8, true),
        ];
        for (ttl, written, now, want) in rows {
            assert_eq!(expired(ttl, written, now), want, "{ttl:?} {written} {now}");
        }
    }

    /// `expired_through` is the last write time `expired` calls expired, at every edge.
    #[test]
    fn expired_through_is_the_newest_expired_write() {
        let second = StateTtl::new(Duration::from_secs(1));
        for now in [1_000u64, 1_001, 5_000, u64::MAX] {
            let through = expired_through(Some(second), now).unwrap();
            assert!(second.is_expired(through, now), "{now}");
            assert!(!second.is_expired(through + 1, now), "{now}");
        }
        assert_eq!(expired_through(Some(second), 999), None);
        assert_eq!(expired_through(None, 5_000), None);
    }

    #[test]
    fn manual_clock_moves_only_when_told() {
        let c = ManualClock::new(5);
        assert_eq!(c.now_ms(), 5);
        c.advance(Duration::from_secs(2));
        assert_eq!(c.now_ms(), 2_005);
    }
}
