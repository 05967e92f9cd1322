//! Watermarks (pure arithmetic): the bounded-out-of-orderness generator of a source subtask,
//! the minimum over a subtask's inputs with idle inputs left out, and event-time values.
//!
//! As in Flink: a source's watermark is the largest event time it has read minus the bound
//! minus 1 ms (`BoundedOutOfOrdernessWatermarks`); a subtask's watermark is the minimum over
//! its inputs' latest watermarks, inputs marked idle excluded (`StatusWatermarkValve`), and it
//! only moves forward; a bounded source ends with [`END_OF_TIME`] (`Long.MAX_VALUE`), which
//! fires every window.

use crate::job::spec::EventTimeUnit;
use crate::record::Datum;
use std::ops::Range;

/// The watermark before any: nothing is known about event time (Flink's `Long.MIN_VALUE`).
pub const NO_WATERMARK: i64 = i64::MIN;
/// The watermark a bounded source sends when it has read everything (Flink's
/// `Watermark.MAX_WATERMARK`, `Long.MAX_VALUE`): every window fires.
pub const END_OF_TIME: i64 = i64::MAX;

/// A watermark or an idleness mark, in band with the records of a channel (and a frame of
/// the cluster's data connections).
#[derive(Clone, Copy, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub enum Watermark {
    /// No record with an event time at or before this (epoch ms) will follow on time.
    Time(i64),
    /// The sender reads nothing for now: leave this channel out of the minimum until it sends
    /// a [`Watermark::Time`] again.
    Idle,
}

/// Bounded-out-of-orderness watermark generation for one source subtask.
#[derive(Clone, Debug)]
pub struct BoundedOutOfOrderness {
    bound_ms: i64,
    max_seen: i64,
    emitted: i64,
}

/// A piece of a source batch after [`BoundedOutOfOrderness::split_batch`]: emit these records,
/// or this watermark, in this order.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Segment {
    /// Records of the batch by position.
    Records(Range<usize>),
    /// A watermark (epoch ms) to emit after the records before it.
    Watermark(i64),
}

impl BoundedOutOfOrderness {
    /// A generator allowing records `bound_ms` behind the largest event time seen.
    pub fn new(bound_ms: i64) -> BoundedOutOfOrderness {
        BoundedOutOfOrderness {
            bound_ms,
            max_seen: NO_WATERMARK,
            emitted: NO_WATERMARK,
        }
    }

    /// The current watermark: largest event time seen − bound − 1 ms, or [`NO_WATERMARK`].
    pub fn current(&self) -> i64 {
        if self.max_seen == NO_WATERMARK {
            NO_WATERMARK
        } else {
            self.max_seen.saturating_sub(self.bound_ms).saturating_sub(1)
        }
    }

    /// Cuts a batch whose records have event times `times` into records and watermarks. The
    /// watermark goes out after the batch, and also just before any record at or behind the
    /// watermark (a record that may be late): so a downstream subtask judges each such record
    /// against the watermark of the records before it, as if watermarks followed every record,
    /// while an in-order batch stays one batch.
    pub fn split_batch(&mut self, times: &[i64]) -> Vec<Segment> {
        let mut out = Vec::with_capacity(2);
        let mut start = 0;
        for (i, &t) in times.iter().enumerate() {
            let current = self.current();
            if t <= current && current > self.emitted {
                if start < i {
                    out.push(Segment::Records(start..i));
                }
                out.push(Segment::Watermark(current));
                self.emitted = current;
                start = i;
            }
            self.max_seen = self.max_seen.max(t);
        }
        if start < times.len() {
            out.push(Segment::Records(start..times.len()));
        }
        let current = self.current();
        if current > self.emitted {
            out.push(Segment::Watermark(current));
            self.emitted = current;
        }
        out
    }
}

/// The watermark of a subtask with several inputs: the minimum over the inputs' latest
/// watermarks, idle inputs left out, never moving back.
#[derive(Clone, Debug)]
pub struct InputWatermarks {
    /// Latest watermark per input, and whether it is idle.
    inputs: Vec<(i64, bool)>,
    current: i64,
    /// Whether this subtask told its outputs it is idle (every input idle).
    idle_sent: bool,
}

impl InputWatermarks {
    /// `n` inputs, none with a watermark yet.
    pub fn new(n: usize) -> InputWatermarks {
        InputWatermarks {
            inputs: vec![(NO_WATERMARK, false); n],
            current: NO_WATERMARK,
            idle_sent: false,
        }
    }

    /// The subtask's watermark so far.
    pub fn current(&self) -> i64 {
        self.current
    }

    /// Input `i` sent `w`. Returns what to forward downstream, if anything: a higher
    /// watermark, `Idle` when every input became idle, or the current watermark when an idle
    /// subtask becomes active again.
    pub fn on_watermark(&mut self, i: usize, w: Watermark) -> Option<Watermark> {
        match w {
            Watermark::Time(t) => {
                let input = &mut self.inputs[i];
                input.0 = input.0.max(t);
                input.1 = false;
            }
            Watermark::Idle => self.inputs[i].1 = true,
        }
        let active_min = self.inputs.iter().filter(|(_, idle)| !idle).map(|(t, _)| *t).min();
        match active_min {
            None => {
                if self.idle_sent {
                    None
                } else {
                    self.idle_sent = true;
                    Some(Watermark::Idle)
                }
            }
            Some(min) => {
                let was_idle = std::mem::replace(&mut self.idle_sent, false);
                if min > self.current {
                    self.current = min;
                    Some(Watermark::Time(min))
                } else if was_idle {
                    Some(Watermark::Time(self.current))
                } else {
                    None
                }
            }
        }
    }
}

/// Integers in `[start, end)` read as epoch seconds of the years 2000 to 2099, and as epoch
/// milliseconds in January and February 1970: an integer event time there, with no declared
/// `eventTime.unit`, is refused as ambiguous rather than read as 1970.
pub const AMBIGUOUS_EPOCH_SECONDS: Range<i64> = 946_684_800..4_102_444_800;

/// The event time (epoch ms) of a field value: an RFC 3339 / ISO-8601 string in UTC
/// (`2015-02-22T21:00:00Z`, `2015-09-12T00:46:58.771Z`) or an integer in `unit` (the source's
/// `eventTime.unit`; `None`: milliseconds, refusing [`AMBIGUOUS_EPOCH_SECONDS`]).
///
/// Errors: null, another type, a string that is not such a timestamp, an integer of seconds
/// beyond the range of epoch milliseconds, an ambiguous integer with no unit; the message says
/// what was found and what is expected.
pub fn event_time_millis(value: &Datum, unit: Option<EventTimeUnit>) -> Result<i64, String> {
    match value {
        Datum::Int(n) => match unit {
            Some(EventTimeUnit::Milliseconds) => Ok(*n),
            Some(EventTimeUnit::Seconds) => n
                .checked_mul(1000)
                .ok_or_else(|| format!("{n} seconds is beyond the range of epoch milliseconds")),
            None if AMBIGUOUS_EPOCH_SECONDS.contains(n) => Err(format!(
                "{n} looks like epoch seconds ({}), but an integer event time is epoch milliseconds \
                 (as in Flink), where it would be {}: set `unit: seconds` in the source's `eventTime` \
                 (or `unit: milliseconds` if the times really are in early 1970)",
                utc_millis(n.saturating_mul(1000)),
                utc_millis(*n)
            )),
            None => Ok(*n),
        },
        Datum::UInt(u) => Err(format!("{u} is too large for epoch milliseconds")),
        Datum::Str(s) => {
            let t = humantime::parse_rfc3339_weak(s.trim())
                .map_err(|e| format!("`{s}` is not an ISO-8601 timestamp in UTC like `2015-02-22T21:00:00Z` ({e})"))?;
            Ok(match t.duration_since(std::time::UNIX_EPOCH) {
                Ok(d) => d.as_millis() as i64,
                Err(before) => -(before.duration().as_millis() as i64),
            })
        }
        Datum::Null => Err("the value is null; every record needs an event time".into()),
        other => Err(format!(
            "{other} is not an event time: use an ISO-8601 string or an integer of epoch milliseconds"
        )),
    }
}

/// `ms` (epoch milliseconds, ≥ 0) as an RFC 3339 time in UTC, for messages.
fn utc_millis(ms: i64) -> String {
    let t = std::time::UNIX_EPOCH + std::time::Duration::from_millis(ms.max(0) as u64);
    humantime::format_rfc3339_millis(t).to_string()
}

#[cfg(test)]
mod tests {
    use super::*;
    use Segment::{Records, Watermark as Wm};

    /// (bound, batches of event times, segments per batch).
    type SplitCase = (i64, Vec<Vec<i64>>, Vec<Vec<Segment>>);

    #[test]
    fn bounded_out_of_orderness_splits_before_records_behind_the_watermark() {
        let cases: Vec<SplitCase> = vec![
            // In order: one segment of records, then max − bound − 1.
            (5, vec![vec![10, 20, 30]], vec![vec![Records(0..3), Wm(24)]]),
            // No advance, no watermark (30 − 5 − 1 was already sent).
            (
                5,
                vec![vec![30], vec![28]],
                vec![vec![Records(0..1), Wm(24)], vec![Records(0..1)]],
            ),
            // 12 is behind the watermark of the records before it (30 − 0 − 1 = 29): the
            // watermark goes out first, then 12 and the rest; nothing new after.
            (
                0,
                vec![vec![10, 30, 12, 31]],
                vec![vec![Records(0..2), Wm(29), Records(2..4), Wm(30)]],
            ),
            // Behind a watermark already sent: no extra cut.
            (
                0,
                vec![vec![30], vec![12]],
                vec![vec![Records(0..1), Wm(29)], vec![Records(0..1)]],
            ),
            // Empty batch: nothing.
            (0, vec![vec![]], vec![vec![]]),
        ];
        for (bound, batches, want) in cases {
            let mut g = BoundedOutOfOrderness::new(bound);
            let got: Vec<Vec<Segment>> = batches.iter().map(|b| g.split_batch(b)).collect();
            assert_eq!(got, want, "bound {bound}, batches {batches:?}");
        }
        let g = BoundedOutOfOrderness::new(5);
        assert_eq!(g.current(), NO_WATERMARK);
    }

    #[test]
    fn subtask_watermark_is_the_minimum_over_active_inputs() {
        use Watermark::{Idle, Time};
        // (input, mark, forwarded) in sequence, two inputs.
        let steps = [
            (0, Time(10), None), // input 1 has none yet: min is NO_WATERMARK
            (1, Time(5), Some(Time(5))),
            (1, Time(20), Some(Time(10))),
            (0, Time(8), None),        // an input never moves back
            (0, Idle, Some(Time(20))), // input 0 left out: input 1's 20
            (1, Idle, Some(Idle)),     // all idle: tell downstream
            (1, Idle, None),
            (1, Time(15), Some(Time(20))), // active again below current: current again
            (0, Time(30), None),           // input 0 back at 30, input 1 at 20
            (1, Time(END_OF_TIME), Some(Time(30))),
            (0, Time(END_OF_TIME), Some(Time(END_OF_TIME))),
        ];
        let mut w = InputWatermarks::new(2);
        for (k, (i, mark, want)) in steps.into_iter().enumerate() {
            assert_eq!(w.on_watermark(i, mark), want, "step {k}: input {i} {mark:?}");
        }
        assert_eq!(w.current(), END_OF_TIME);
    }

    #[test]
    fn event_times_parse_from_iso_strings_and_epoch_millis() {
        let ok = [
            (Datum::Str("2015-02-22T21:00:00Z".into()), 1_424_638_800_000),
            (Datum::Str("2015-09-12T00:46:58.771Z".into()), 1_442_018_818_771),
            (Datum::Str("1970-01-01T00:00:00Z".into()), 0),
            (Datum::Int(1_424_638_800_123), 1_424_638_800_123),
            (Datum::Int(946_684_799), 946_684_799),
            (Datum::Int(4_102_444_800), 4_102_444_800),
        ];
        for (v, want) in ok {
            assert_eq!(event_time_millis(&v, None), Ok(want), "{v:?}");
        }
        for v in [
            Datum::Null,
            Datum::Str("yesterday".into()),
            Datum::Bool(true),
            Datum::Float(1.5),
        ] {
            assert!(event_time_millis(&v, None).is_err(), "{v:?}");
        }
    }

    #[test]
    fn integer_event_times_are_read_in_the_declared_unit_and_ambiguous_ones_refused() {
        use EventTimeUnit::{Milliseconds, Seconds};
        let s = |v: i64| Datum::Int(v);
        for (v, unit, want) in [
            (s(1_424_638_800), Some(Seconds), Ok(1_424_638_800_000)),
            (s(1_424_638_800), Some(Milliseconds), Ok(1_424_638_800)),
            (s(1_424_638_800_000), Some(Milliseconds), Ok(1_424_638_800_000)),
            (s(5), Some(Seconds), Ok(5_000)),
            (s(5), None, Ok(5)),
            (s(1_424_638_800_000), None, Ok(1_424_638_800_000)),
            (
                s(1_424_638_800),
                None,
                Err(
                    "1424638800 looks like epoch seconds (2015-02-22T21:00:00.000Z), but an integer event time \
                     is epoch milliseconds (as in Flink), where it would be 1970-01-17T11:43:58.800Z: set \
                     `unit: seconds` in the source's `eventTime` (or `unit: milliseconds` if the times really \
                     are in early 1970)"
                        .to_string(),
                ),
            ),
            (
                s(i64::MAX),
                Some(Seconds),
                Err("9223372036854775807 seconds is beyond the range of epoch milliseconds".to_string()),
            ),
            // Strings are ISO-8601 whatever the unit.
            (
                Datum::Str("2015-02-22T21:00:00Z".into()),
                Some(Seconds),
                Ok(1_424_638_800_000),
            ),
        ] {
            assert_eq!(event_time_millis(&v, unit), want, "{v:?} {unit:?}");
        }
    }
}
