//! The restart strategy (pure): exponential backoff with a maximum number of restarts in a
//! sliding window, like Flink's exponential-delay strategy bounded by a failure-rate window.

use std::time::Duration;

/// Restart policy.
#[derive(Debug, Clone, PartialEq)]
pub struct RestartPolicy {
    /// Delay before the first restart.
    pub initial_backoff: Duration,
    /// Upper bound of the delay.
    pub max_backoff: Duration,
    /// Factor applied per consecutive failure.
    pub multiplier: f64,
    /// Most restarts allowed within `window`.
    pub max_restarts: usize,
    /// The sliding window.
    pub window: Duration,
}

impl Default for RestartPolicy {
    fn default() -> Self {
        RestartPolicy {
            initial_backoff: Duration::from_secs(1),
            max_backoff: Duration::from_secs(60),
            multiplier: 2.0,
            max_restarts: 10,
            window: Duration::from_secs(600),
        }
    }
}

/// What to do after a failure.
#[derive(Debug, Clone, PartialEq)]
pub enum RestartDecision {
    /// Restart after this delay.
    Restart(Duration),
    /// Too many restarts: the job is FAILED with this reason.
    GiveUp(String),
}

/// Decides after a failure at `now`, given the times of earlier restarts (same clock, any
/// unit convertible to Duration since start). The delay grows with the number of restarts
/// in the window: `initial × multiplier^(n)`, capped at `max_backoff`.
pub fn decide(policy: &RestartPolicy, earlier_restarts: &[Duration], now: Duration) -> RestartDecision {
    let recent = earlier_restarts
        .iter()
        .filter(|&&t| now.saturating_sub(t) < policy.window)
        .count();
    if recent >= policy.max_restarts {
        return RestartDecision::GiveUp(format!(
            "{recent} restarts within {:?} (maximum {}): giving up",
            policy.window, policy.max_restarts
        ));
    }
    let delay = policy.initial_backoff.as_secs_f64() * policy.multiplier.powi(recent as i32);
    RestartDecision::Restart(Duration::from_secs_f64(delay.min(policy.max_backoff.as_secs_f64())))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restart_table() {
        let s = Duration::from_secs;
        let p = RestartPolicy {
            max_restarts: 3,
            window: s(100),
            ..Default::default()
        };
        let rows: Vec<(Vec<Duration>, Duration, RestartDecision)> = vec![
            (vec![], s(0), RestartDecision::Restart(s(1))),
            (vec![s(0)], s(5), RestartDecision::Restart(s(2))),
            (vec![s(0), s(5)], s(10), RestartDecision::Restart(s(4))),
            (
                vec![s(0), s(5), s(10)],
                s(20),
                RestartDecision::GiveUp("3 restarts within 100s (maximum 3): giving up".into()),
            ),
            // old restarts slide out of the window
            (vec![s(0), s(5), s(10)], s(107), RestartDecision::Restart(s(2))),
        ];
        for (i, (earlier, now, want)) in rows.into_iter().enumerate() {
            assert_eq!(decide(&p, &earlier, now), want, "row {i}");
        }
        let capped = RestartPolicy {
            max_backoff: s(3),
            max_restarts: 10,
            ..Default::default()
        };
        assert_eq!(
            decide(&capped, &[s(1), s(2), s(3)], s(4)),
            RestartDecision::Restart(s(3))
        );
    }
}
