//! Test hooks. `WEIR_FAILPOINT` holds comma-separated failpoints (`fail-upload:3,slow-sink:50`)
//! that make the runtime fail, hang or slow down at one place, so the tests can drive the
//! failure sequences users meet (a crash between two commit points, a storage that refuses a
//! write, a slow restore). Unset in production, where every check is one failed environment
//! lookup. Each failpoint is documented where it fires.

/// The environment variable holding the failpoints.
pub const ENV: &str = "WEIR_FAILPOINT";

/// Whether `WEIR_FAILPOINT` holds exactly `point` (a name, or `name:argument`).
pub fn is_set(point: &str) -> bool {
    std::env::var(ENV).is_ok_and(|failpoints| holds(&failpoints, point))
}

/// The argument of the first failpoint `<name>:<argument>` in `WEIR_FAILPOINT` that parses as
/// `T` (`slow-sink:50` gives 50 for `slow-sink`); `None` when none does.
pub fn argument<T: std::str::FromStr>(name: &str) -> Option<T> {
    argument_in(&std::env::var(ENV).ok()?, name)
}

fn holds(failpoints: &str, point: &str) -> bool {
    failpoints.split(',').any(|f| f == point)
}

fn argument_in<T: std::str::FromStr>(failpoints: &str, name: &str) -> Option<T> {
    failpoints
        .split(',')
        .find_map(|f| f.strip_prefix(name)?.strip_prefix(':')?.parse().ok())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn failpoints_are_whole_comma_separated_entries() {
        let set = "slow-sink:50,fail-upload:3,slow-restore";
        assert!(holds(set, "slow-restore"));
        assert!(holds(set, "fail-upload:3"));
        assert!(!holds(set, "fail-upload:30"));
        assert!(!holds(set, "fail-upload"));
        assert_eq!(argument_in::<u64>(set, "slow-sink"), Some(50));
        assert_eq!(argument_in::<u64>(set, "slow"), None, "a name is matched whole");
        assert_eq!(argument_in::<u64>(set, "slow-commit"), None);
        assert_eq!(argument_in::<u64>("slow-sink:x", "slow-sink"), None);
    }
}
