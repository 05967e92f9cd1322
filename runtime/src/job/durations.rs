//! Durations in a manifest, parsed the one way every field uses, so a bad value reads the same
//! in every field and names it.
//!
//! humantime parses them (`500ms`, `30s`, `1h 30m`, `1.5s`), after two rewrites for what
//! Flink users write:
//! - Flink's unit labels (`TimeUtils.TimeUnit` in flink-core: `milli`, `millisecond(s)`,
//!   `micro(s)`, `nano(s)`, ..., any case: `10 S`, `1 MIN`), turned into humantime's;
//! - ISO-8601 durations as Java's `Duration` prints them (`PT10S`, `PT1M30S`, `P1DT12H`, `P2W`);
//!   years and months (`P1Y`, `P1M`) have no fixed length and are refused.
//!
//! A number without a unit (`10000`, which Flink reads as milliseconds) is refused with the
//! spelling to use instead: a typo there would otherwise change the value a thousandfold.

use super::validate::JobError;
use std::time::Duration;

/// Words meaning "no TTL" that users try (Flink's `StateTtlConfig` has no such value: a state
/// without TTL has no `StateTtlConfig`).
const NO_TTL_WORDS: [&str; 8] = [
    "forever",
    "none",
    "never",
    "infinite",
    "infinity",
    "off",
    "disabled",
    "unlimited",
];

/// A state TTL at `field`: a duration of at least 1 ms (`24h`, `30m`). Errors name `field`.
pub(super) fn parse_ttl(field: &str, s: &str) -> Result<Duration, JobError> {
    let keep_for_ever = "remove `ttl` to keep keys for ever";
    let text = s.trim();
    if text.starts_with('-') {
        return Err(JobError::new(
            field,
            format!("`{s}` is negative; set a positive duration like `24h`, or {keep_for_ever}"),
        ));
    }
    if NO_TTL_WORDS.contains(&text.to_lowercase().as_str()) {
        return Err(JobError::new(
            field,
            format!("`{s}` is not a duration; {keep_for_ever}, or set one like `24h`"),
        ));
    }
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

/// A duration at `field` (`500ms`, `10s`, `2m`, `1h 30m`, `10 seconds`, `PT10S`; see the
/// module doc). Errors name `field`: a negative duration (durations are never negative), a
/// number without a unit, or text that is not a duration.
pub(super) fn parse_duration(field: &str, s: &str) -> Result<Duration, JobError> {
    let text = s.trim();
    if text.starts_with('-') {
        return Err(JobError::new(
            field,
            format!("`{s}` is negative; a duration is positive (or `0s`), like `500ms`, `10s`, `2m`"),
        ));
    }
    if !text.is_empty() && text.chars().all(|c| c.is_ascii_digit()) {
        return Err(JobError::new(
            field,
            format!(
                "`{s}` has no unit; write `{text}ms` for milliseconds (as Flink reads it) or `{text}s` for seconds"
            ),
        ));
    }
    let humantime_text = match iso8601_to_humantime(text) {
        Some(Ok(t)) => t,
        Some(Err(why)) => return Err(JobError::new(field, format!("`{s}`: {why}"))),
        None => flink_units_to_humantime(text),
    };
    // humantime reads months (30.44 days) and years (365.25 days); Flink's durations have no
    // such units, and neither has a fixed length: refused as their ISO-8601 forms are (found
    // by trial: `ttl: 2 months` ran while `P2M` was refused).
    if let Some(unit) = unit_words(&humantime_text).find(|w| CALENDAR_UNITS.contains(w)) {
        return Err(JobError::new(
            field,
            format!("`{s}`: `{unit}` has no fixed length; use days (`30d`) or weeks (`4w`)"),
        ));
    }
    let parsed = humantime::parse_duration(&humantime_text).map_err(|e| {
        // humantime's position-0 error ("expected number at 0") names its parser, not the value;
        // its list of units names months and years, which are refused above.
        let why = match e {
            humantime::DurationError::NumberExpected(0) => "it does not start with a number".to_string(),
            e => e.to_string().replace("weeks, months, years", "weeks"),
        };
        JobError::new(
            field,
            format!("`{s}` is not a duration like `500ms`, `10s`, `2m`, `1h 30m` or `PT10S`: {why}"),
        )
    })?;
    if parsed > MAX_DURATION {
        return Err(JobError::new(
            field,
            format!("`{s}` is too long: a duration is at most 36500d (100 years)"),
        ));
    }
    Ok(parsed)
}

/// The longest duration any field takes: 100 years (36,500 days). Deadlines are `Instant`s,
/// and `Instant + Duration` panics past the clock's range (found by trial: an
/// `alignedCheckpointTimeout` of `106751991167300d` panicked at the first barrier), so every
/// duration is bounded where it is parsed rather than at each addition.
pub(crate) const MAX_DURATION: Duration = Duration::from_secs(36_500 * 24 * 3600);

/// humantime's calendar units (lower case, as [`flink_units_to_humantime`] leaves them): no
/// fixed length, and no unit of Flink's.
const CALENDAR_UNITS: [&str; 8] = ["month", "months", "year", "years", "yr", "yrs", "y", "monthly"];

/// The alphabetic runs of `text` (its unit words).
fn unit_words(text: &str) -> impl Iterator<Item = &str> {
    text.split(|c: char| !c.is_alphabetic()).filter(|w| !w.is_empty())
}

/// Flink's unit labels (case-insensitive, plural `s` allowed) that humantime does not know,
/// with humantime's spelling.
const FLINK_UNITS: [(&str, &str); 6] = [
    ("milli", "ms"),
    ("millisecond", "ms"),
    ("micro", "us"),
    ("microsecond", "us"),
    ("nano", "ns"),
    ("nanosecond", "ns"),
];

/// `text` with every unit word lower-cased (Flink's labels are case-insensitive; humantime's
/// are lower case) and Flink's labels that humantime lacks replaced by humantime's.
fn flink_units_to_humantime(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut word = String::new();
    let flush = |word: &mut String, out: &mut String| {
        let lower = word.to_lowercase();
        let singular = lower.strip_suffix('s').unwrap_or(&lower);
        match FLINK_UNITS
            .iter()
            .find(|(flink, _)| *flink == lower || *flink == singular)
        {
            Some((_, unit)) => out.push_str(unit),
            None => out.push_str(&lower),
        }
        word.clear();
    };
    for c in text.chars() {
        if c.is_alphabetic() {
            word.push(c);
        } else {
            flush(&mut word, &mut out);
            out.push(c);
        }
    }
    flush(&mut word, &mut out);
    out
}

/// An ISO-8601 duration (`PT10S`, `PT1M30.5S`, `P1DT2H`, `P2W`; case-insensitive) in
/// humantime's syntax (`10s`, `1m 30.5s`, `1d 2h`, `2w`): `None` when `text` does not start
/// like one (`P` and a digit or `T`); `Some(Err)` naming what is wrong when it does.
fn iso8601_to_humantime(text: &str) -> Option<Result<String, String>> {
    let upper = text.to_ascii_uppercase();
    let rest = upper.strip_prefix('P')?;
    if !rest.starts_with(|c: char| c.is_ascii_digit() || c == 'T') {
        return None;
    }
    let (date, time) = match rest.split_once('T') {
        Some((d, t)) => (d, Some(t)),
        None => (rest, None),
    };
    let mut parts: Vec<String> = Vec::new();
    let mut push = |section: &str, units: &[(char, &str)]| -> Result<(), String> {
        let mut number = String::new();
        for c in section.chars() {
            if c.is_ascii_digit() || c == '.' || c == ',' {
                number.push(if c == ',' { '.' } else { c });
                continue;
            }
            let Some((_, unit)) = units.iter().find(|(u, _)| *u == c) else {
                return Err(match c {
                    'Y' | 'M' => {
                        "an ISO-8601 duration in years or months has no fixed length; use days (`P30D`) or weeks".into()
                    }
                    _ => format!("`{c}` is not a unit of an ISO-8601 duration here (`PnDTnHnMnS`, `PnW`)"),
                });
            };
            if number.is_empty() {
                return Err(format!("`{c}` has no number before it"));
            }
            parts.push(format!("{number}{unit}"));
            number.clear();
        }
        if number.is_empty() {
            Ok(())
        } else {
            Err(format!("`{number}` has no unit (D, W before `T`; H, M, S after it)"))
        }
    };
    let checked = push(date, &[('D', "d"), ('W', "w")])
        .and_then(|()| time.map_or(Ok(()), |t| push(t, &[('H', "h"), ('M', "m"), ('S', "s")])));
    Some(checked.and_then(|()| {
        if parts.is_empty() {
            Err("an ISO-8601 duration needs at least one number and unit, like `PT10S`".into())
        } else {
            Ok(parts.join(" "))
        }
    }))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ms(s: &str) -> Result<u128, String> {
        parse_duration("f", s).map(|d| d.as_millis()).map_err(|e| e.to_string())
    }

    #[test]
    fn durations_in_every_form_flink_users_write() {
        let cases: [(&str, u128); 24] = [
            ("500ms", 500),
            ("500 ms", 500),
            ("500 milli", 500),
            ("500 millis", 500),
            ("500 millisecond", 500),
            ("500 milliseconds", 500),
            ("2000000 micros", 2000),
            ("3000000 nanoseconds", 3),
            ("10s", 10_000),
            ("10 S", 10_000),
            ("10 SECONDS", 10_000),
            ("10 sec", 10_000),
            ("1 min", 60_000),
            ("1 MIN", 60_000),
            ("1 minutes", 60_000),
            ("1H", 3_600_000),
            ("1 hour", 3_600_000),
            ("1 day", 86_400_000),
            ("1h 30m", 5_400_000),
            ("1.5s", 1_500),
            ("PT10S", 10_000),
            ("pt1m30.5s", 90_500),
            ("P1DT2H", 93_600_000),
            ("P2W", 1_209_600_000),
        ];
        assert_eq!(
            ms("36500d"),
            Ok(MAX_DURATION.as_millis()),
            "the longest duration is taken"
        );
        for (text, want) in cases {
            assert_eq!(ms(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn bad_durations_say_what_to_write() {
        let cases = [
            ("10000", "f: `10000` has no unit; write `10000ms` for milliseconds"),
            ("-5s", "f: `-5s` is negative"),
            (
                "P1M",
                "f: `P1M`: an ISO-8601 duration in years or months has no fixed length",
            ),
            ("P1Y", "f: `P1Y`: an ISO-8601 duration in years or months"),
            (
                "2 months",
                "f: `2 months`: `months` has no fixed length; use days (`30d`) or weeks",
            ),
            ("1y", "f: `1y`: `y` has no fixed length"),
            ("1yr", "f: `1yr`: `yr` has no fixed length"),
            ("2 yrs", "f: `2 yrs`: `yrs` has no fixed length"),
            ("1 Year 2d", "f: `1 Year 2d`: `year` has no fixed length"),
            ("1e3s", "f: `1e3s` is not a duration like `500ms`"),
            ("PT", "f: `PT`: an ISO-8601 duration needs at least one number and unit"),
            ("PT5", "f: `PT5`: `5` has no unit"),
            ("PT1X", "f: `PT1X`: `X` is not a unit of an ISO-8601 duration"),
            ("5 parsecs", "f: `5 parsecs` is not a duration like `500ms`"),
            (
                "106751991167300d",
                "f: `106751991167300d` is too long: a duration is at most 36500d",
            ),
            ("9999999999999999999s", "f: `9999999999999999999s` is too long"),
            ("36501d", "f: `36501d` is too long"),
            (
                "soon",
                "f: `soon` is not a duration like `500ms`, `10s`, `2m`, `1h 30m` or `PT10S`: it does not start with a number",
            ),
        ];
        for (text, want) in cases {
            let got = ms(text).unwrap_err();
            assert!(got.starts_with(want), "{text}: {got}");
            assert!(
                !got.contains("weeks, months"),
                "{text}: months offered as a unit: {got}"
            );
        }
    }

    /// A TTL's errors say how to keep keys for ever (leave `ttl` out), never to write `0s`,
    /// which a TTL refuses.
    #[test]
    fn bad_ttls_say_how_to_keep_keys_for_ever() {
        let cases = [
            (
                "-1s",
                "t: `-1s` is negative; set a positive duration like `24h`, or remove `ttl` to keep keys for ever",
            ),
            (
                "forever",
                "t: `forever` is not a duration; remove `ttl` to keep keys for ever",
            ),
            (
                "None",
                "t: `None` is not a duration; remove `ttl` to keep keys for ever",
            ),
            (
                "0s",
                "t: `0s` is shorter than 1ms; set a positive duration like `24h`, or remove `ttl`",
            ),
            ("1 fortnight", "t: `1 fortnight` is not a duration like `500ms`"),
        ];
        for (text, want) in cases {
            let got = parse_ttl("t", text).unwrap_err().to_string();
            assert!(got.starts_with(want), "{text}: {got}");
        }
        assert_eq!(parse_ttl("t", "24h").unwrap(), Duration::from_secs(86_400));
    }
}
