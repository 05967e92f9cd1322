//! Window assignment (pure): which windows a record's event time falls in, session merging and
//! the lateness rule. Windows are half-open `[start, end)` in epoch milliseconds, as Flink's
//! `TimeWindow`; epoch-aligned (offset 0).

use crate::job::event_time::WindowAssigner;

/// A window `[start, end)`, epoch milliseconds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct TimeWindow {
    /// First millisecond in the window.
    pub start: i64,
    /// First millisecond after it.
    pub end: i64,
}

impl TimeWindow {
    /// The last millisecond in the window (`end − 1`): the window fires when the watermark
    /// reaches it.
    pub fn max_timestamp(&self) -> i64 {
        self.end.saturating_sub(1)
    }

    /// Whether two session windows merge: they overlap or touch (Flink's `TimeWindow.intersects`).
    pub fn intersects(&self, other: &TimeWindow) -> bool {
        self.start <= other.end && self.end >= other.start
    }

    /// The smallest window covering both.
    pub fn cover(&self, other: &TimeWindow) -> TimeWindow {
        TimeWindow {
            start: self.start.min(other.start),
            end: self.end.max(other.end),
        }
    }
}

/// The windows holding event time `ts`, by ascending start: one tumbling window; `size /
/// slide` sliding windows; the session window `[ts, ts + gap)` (before merging).
pub fn assign(assigner: WindowAssigner, ts: i64) -> Vec<TimeWindow> {
    match assigner {
        WindowAssigner::Tumbling { size_ms } => {
            let start = ts - ts.rem_euclid(size_ms);
            vec![TimeWindow {
                start,
                end: start.saturating_add(size_ms),
            }]
        }
        WindowAssigner::Sliding { size_ms, slide_ms } => {
            let last = ts - ts.rem_euclid(slide_ms);
            let mut out = Vec::with_capacity((size_ms / slide_ms) as usize);
            let mut start = last;
            while start > ts.saturating_sub(size_ms) {
                out.push(TimeWindow {
                    start,
                    end: start.saturating_add(size_ms),
                });
                match start.checked_sub(slide_ms) {
                    Some(s) => start = s,
                    None => break,
                }
            }
            out.reverse();
            out
        }
        WindowAssigner::Session { gap_ms } => vec![TimeWindow {
            start: ts,
            end: ts.saturating_add(gap_ms),
        }],
    }
}

/// Whether a window is past its allowed lateness at `watermark`: its last millisecond plus the
/// lateness is at or behind the watermark (Flink's `WindowOperator.isWindowLate`). A record
/// for such a window is dropped, and the window's state is deleted.
pub fn is_late(window: TimeWindow, allowed_lateness_ms: i64, watermark: i64) -> bool {
    window.max_timestamp().saturating_add(allowed_lateness_ms) <= watermark
}

/// Merges a new session window into a key's `existing` sessions (which do not intersect each
/// other): returns the merged window and the positions in `existing` it absorbs.
pub fn merge_session(existing: &[TimeWindow], new: TimeWindow) -> (TimeWindow, Vec<usize>) {
    let mut merged = new;
    let mut absorbed: Vec<usize> = Vec::new();
    loop {
        let before = absorbed.len();
        for (i, w) in existing.iter().enumerate() {
            if !absorbed.contains(&i) && merged.intersects(w) {
                merged = merged.cover(w);
                absorbed.push(i);
            }
        }
        if absorbed.len() == before {
            break;
        }
    }
    absorbed.sort_unstable();
    (merged, absorbed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn w(start: i64, end: i64) -> TimeWindow {
        TimeWindow { start, end }
    }

    #[test]
    fn assignment_table() {
        let tumbling = WindowAssigner::Tumbling { size_ms: 60_000 };
        let sliding = WindowAssigner::Sliding {
            size_ms: 300_000,
            slide_ms: 60_000,
        };
        let cases = [
            (tumbling, 0, vec![w(0, 60_000)]),
            (tumbling, 59_999, vec![w(0, 60_000)]),
            (tumbling, 60_000, vec![w(60_000, 120_000)]),
            (tumbling, -1, vec![w(-60_000, 0)]),
            // 130 s is in the five windows starting at −120 s, −60 s, 0, 60 s, 120 s.
            (
                sliding,
                130_000,
                vec![
                    w(-120_000, 180_000),
                    w(-60_000, 240_000),
                    w(0, 300_000),
                    w(60_000, 360_000),
                    w(120_000, 420_000),
                ],
            ),
            // A window start itself: the window starting there is the last.
            (
                sliding,
                300_000,
                vec![
                    w(60_000, 360_000),
                    w(120_000, 420_000),
                    w(180_000, 480_000),
                    w(240_000, 540_000),
                    w(300_000, 600_000),
                ],
            ),
            (WindowAssigner::Session { gap_ms: 30_000 }, 7, vec![w(7, 30_007)]),
        ];
        for (assigner, ts, want) in cases {
            assert_eq!(assign(assigner, ts), want, "{assigner:?} at {ts}");
        }
    }

    #[test]
    fn lateness_table() {
        // (window, allowed lateness, watermark, late)
        let cases = [
            (w(0, 60_000), 0, 59_998, false),
            (w(0, 60_000), 0, 59_999, true), // fired and cleaned at 59 999
            (w(0, 60_000), 10_000, 59_999, false),
            (w(0, 60_000), 10_000, 69_999, true),
            (w(0, 60_000), 0, i64::MIN, false),
        ];
        for (win, lateness, wm, want) in cases {
            assert_eq!(is_late(win, lateness, wm), want, "{win:?} +{lateness} at {wm}");
        }
    }

    #[test]
    fn session_merging_table() {
        // (existing sessions, new window, merged, absorbed)
        let cases = [
            (vec![], w(0, 30), w(0, 30), vec![]),
            (vec![w(0, 30)], w(40, 70), w(40, 70), vec![]),
            (vec![w(0, 30)], w(30, 60), w(0, 60), vec![0]), // touching windows merge
            (vec![w(0, 30), w(50, 80)], w(25, 55), w(0, 80), vec![0, 1]), // bridges two
            (vec![w(100, 130), w(0, 30)], w(10, 40), w(0, 40), vec![1]),
        ];
        for (existing, new, merged, absorbed) in cases {
            assert_eq!(
                merge_session(&existing, new),
                (merged, absorbed),
                "{existing:?} + {new:?}"
            );
        }
    }
}
