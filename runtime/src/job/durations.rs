//! Durations in a manifest (`500ms`, `30s`, `24h`: humantime's syntax), parsed the one way
//! every field uses, so a bad value reads the same in every field and names it.

use super::validate::JobError;
use std::time::Duration;

/// A state TTL at `field`: a duration of at least 1 ms (`24h`, `30m`). Errors name `field`.
pub(super) fn parse_ttl(field: &str, s: &str) -> Result<Duration, JobError> {
    let ttl = parse_duration(field, s)?;
    if ttl < Duration::from_millis(1) {
        return Err(JobError::new(
            field,
            format!(
                "`{s}` is shorter than 1ms; set a positive duration like `24h`, or remove `ttl` to keep keys for ever"
            ),
        ));
    }
    Ok(ttl)
}

/// A duration at `field` (`500ms`, `10s`, `2m`, `1h 30m`: humantime's syntax). Errors name
/// `field`: a negative duration (durations are never negative), or text that is not a duration.
pub(super) fn parse_duration(field: &str, s: &str) -> Result<Duration, JobError> {
    if s.trim().starts_with('-') {
        return Err(JobError::new(
            field,
            format!("`{s}` is negative; a duration is positive (or `0s`), like `500ms`, `10s`, `2m`"),
        ));
    }
    humantime::parse_duration(s.trim())
        .map_err(|e| JobError::new(field, format!("`{s}` is not a duration like `500ms`, `10s`, `2m`: {e}")))
}
