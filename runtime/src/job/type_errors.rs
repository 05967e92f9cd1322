//! Serde's type errors in the manifest's words. serde names Rust types (`expected u32`,
//! `expected struct EventTimeSpec`, `unit value`, `a sequence`); a manifest's author thinks in
//! YAML and in the StreamJob schema, so [`plain_type_error`] rewrites those words, lists the
//! fields an object takes (from the CRD schema, [`fields::known_fields_at`]), and says how to
//! write a duration where a number was given.

use super::fields;

/// Fields whose value is a duration string (`30s`, `5m`), in every object that has them.
const DURATION_FIELDS: [&str; 15] = [
    "interval",
    "timeout",
    "minPause",
    "alignedCheckpointTimeout",
    "ttl",
    "maxOutOfOrderness",
    "idleTimeout",
    "size",
    "slide",
    "gap",
    "allowedLateness",
    "periodicInterval",
    "readinessTimeout",
    "maxAge",
    "restartWindow",
];

/// Flink's `state.backend.type` values and the `spec.stateBackend` that is each one here.
const FLINK_STATE_BACKENDS: [(&str, &str); 3] = [("rocksdb", "disk"), ("hashmap", "heap"), ("filesystem", "heap")];

/// Rewrites serde's `message` about the value at `field` (`spec.job.steps[0].source.eventTime`)
/// in the manifest's words; a message with none of serde's Rust words is returned unchanged.
pub fn plain_type_error(field: &str, message: &str) -> String {
    let mut out = message.to_string();
    for (rust, plain) in [
        ("expected u8", "expected a whole number from 0 to 255"),
        ("expected u16", "expected a whole number from 0 to 65535"),
        ("expected u32", "expected a whole number from 0 to 4294967295"),
        ("expected u64", "expected a whole number of at least 0"),
        ("expected usize", "expected a whole number of at least 0"),
        ("expected i32", "expected a whole number"),
        ("expected i64", "expected a whole number"),
        ("expected f64", "expected a number"),
        ("expected f32", "expected a number"),
        ("unit value", "an empty value"),
        ("expected a sequence", "expected a list (`[a, b]`)"),
        ("invalid type: sequence", "invalid type: list"),
        ("expected a map", "expected a mapping (`name: value` fields)"),
        ("invalid type: map", "invalid type: mapping"),
    ] {
        out = replace_word(&out, rust, plain);
    }
    if let Some(at) = out.find("expected struct ") {
        let known = fields::known_fields_at(field);
        let what = if known.is_empty() {
            "expected a mapping (`name: value` fields)".to_string()
        } else {
            format!("expected a mapping with the fields {}", known.join(", "))
        };
        let rest = &out[at + "expected struct ".len()..];
        let end = rest
            .find(|c: char| !c.is_alphanumeric() && c != '_')
            .unwrap_or(rest.len());
        out = format!("{}{what}{}", &out[..at], &rest[end..]);
    }
    // An enum given a number, bool or list: serde_yaml says `expected a Value::Tagged enum`,
    // serde `expected enum WindowType`; the manifest's words are the values allowed.
    for rust in ["expected a Value::Tagged enum", "expected enum "] {
        let Some(at) = out.find(rust) else { continue };
        let allowed = fields::enum_values_at(field);
        if allowed.is_empty() {
            continue;
        }
        let rest = &out[at + rust.len()..];
        let end = rest
            .find(|c: char| !c.is_alphanumeric() && c != '_')
            .unwrap_or(rest.len());
        let rest = if rust.ends_with(' ') { &rest[end..] } else { rest };
        let list = allowed.iter().map(|v| format!("`{v}`")).collect::<Vec<_>>().join(", ");
        out = format!("{}expected one of {list}{rest}", &out[..at]);
    }
    if field == "spec.stateBackend" {
        // Flink's names for the two backends, which its users type first.
        for (flink, weir) in FLINK_STATE_BACKENDS {
            if out.to_lowercase().contains(&format!("unknown variant `{flink}`")) {
                out.push_str(&format!("; Flink's `{flink}` state backend is `{weir}` here"));
            }
        }
    }
    // The schema's bounds where it states them (`retained`: `minimum: 1`; `parallelism`: a
    // `self >= 1` rule; `splits`: `maximum: 32768`), not the Rust type's (found by trial:
    // `retained: -1` was told "from 0", and 0 was then refused as "must be at least 1").
    let (least, greatest) = fields::integer_bounds_at(field);
    for type_max in ["255", "65535", "4294967295"] {
        let range = format!("expected a whole number from 0 to {type_max}");
        if out.contains(&range) {
            let least = least.unwrap_or(0);
            let greatest = greatest.map_or(type_max.to_string(), |g| g.to_string());
            out = out.replace(&range, &format!("expected a whole number from {least} to {greatest}"));
        }
    }
    if let Some(least) = least.filter(|l| *l > 0) {
        let greatest = greatest.map_or(String::new(), |g| format!(" and at most {g}"));
        out = out.replace(
            "expected a whole number of at least 0",
            &format!("expected a whole number of at least {least}{greatest}"),
        );
    }
    let last = field.rsplit('.').next().unwrap_or(field);
    let is_number = out.starts_with("invalid type: integer") || out.starts_with("invalid type: floating point");
    if is_number && out.ends_with("expected a string") && DURATION_FIELDS.contains(&last) {
        out.push_str(": a duration is a number with a unit, e.g. `300ms`, `30s`, `5m`, `24h`");
        // The number itself, between serde's backticks: say how to write it.
        let number = out.split('`').nth(1).unwrap_or_default().to_string();
        if last == "ttl" && number.parse::<f64>().is_ok_and(|n| n <= 0.0) {
            out.push_str("; remove `ttl` to keep keys for ever");
        } else if !number.is_empty() {
            out.push_str(&format!(
                "; write `{number}ms` for milliseconds (as Flink reads a bare number) or `{number}s` for seconds"
            ));
        }
    }
    out
}

/// `text` with `word` replaced by `plain` where `word` is not followed by more of a name
/// (`expected u32` but not `expected u32x`).
fn replace_word(text: &str, word: &str, plain: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut rest = text;
    while let Some(at) = rest.find(word) {
        let after = &rest[at + word.len()..];
        let whole = !after.starts_with(|c: char| c.is_alphanumeric() || c == '_');
        out.push_str(&rest[..at]);
        out.push_str(if whole { plain } else { word });
        rest = after;
    }
    out.push_str(rest);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rust_words_become_the_manifests_words() {
        for (field, serde, want) in [
            (
                "spec.checkpointing.mode",
                "invalid type: integer `5`, expected a Value::Tagged enum",
                "invalid type: integer `5`, expected one of `exactly-once`, `at-least-once`, `at-most-once`",
            ),
            (
                "spec.job.steps[0].source.eventTime.unit",
                "invalid type: boolean `true`, expected enum EventTimeUnit",
                "invalid type: boolean `true`, expected one of `milliseconds`, `seconds`",
            ),
            (
                "spec.parallelism",
                "invalid value: integer `-2`, expected u32",
                "invalid value: integer `-2`, expected a whole number from 1 to 4294967295",
            ),
            (
                "spec.checkpointing.retained",
                "invalid value: integer `-1`, expected u32",
                "invalid value: integer `-1`, expected a whole number from 1 to 4294967295",
            ),
            (
                "spec.job.steps[0].source.generator.splits",
                "invalid value: integer `-1`, expected u32",
                "invalid value: integer `-1`, expected a whole number from 1 to 32768",
            ),
            (
                "spec.maxParallelism",
                "invalid value: integer `-1`, expected u32",
                "invalid value: integer `-1`, expected a whole number from 1 to 32768",
            ),
            (
                "spec.job.steps[0].source.generator.seed",
                "invalid value: integer `-1`, expected u64",
                "invalid value: integer `-1`, expected a whole number of at least 0",
            ),
            (
                "spec.job.steps[0].source.file.maxRecordsPerSecond",
                "invalid value: integer `-5`, expected u64",
                "invalid value: integer `-5`, expected a whole number of at least 1",
            ),
            (
                "spec.job.steps[0].source.eventTime",
                "invalid type: string \"dt\", expected struct EventTimeSpec",
                "invalid type: string \"dt\", expected a mapping with the fields field, idleTimeout, maxOutOfOrderness, unit",
            ),
            (
                "spec.job.steps[3].join.leftKey",
                "invalid type: unit value, expected a string",
                "invalid type: an empty value, expected a string",
            ),
            (
                "spec.job.steps[4].inputs",
                "invalid type: string \"a\", expected a sequence",
                "invalid type: string \"a\", expected a list (`[a, b]`)",
            ),
            (
                "spec.job.steps[2].count.ttl",
                "invalid type: integer `300`, expected a string",
                "invalid type: integer `300`, expected a string: a duration is a number with a unit, e.g. `300ms`, `30s`, `5m`, `24h`; write `300ms` for milliseconds (as Flink reads a bare number) or `300s` for seconds",
            ),
            (
                "spec.job.steps[2].count.ttl",
                "invalid type: integer `0`, expected a string",
                "invalid type: integer `0`, expected a string: a duration is a number with a unit, e.g. `300ms`, `30s`, `5m`, `24h`; remove `ttl` to keep keys for ever",
            ),
            (
                "spec.checkpointing.interval",
                "invalid type: floating point `1.5`, expected a string",
                "invalid type: floating point `1.5`, expected a string: a duration is a number with a unit, e.g. `300ms`, `30s`, `5m`, `24h`; write `1.5ms` for milliseconds (as Flink reads a bare number) or `1.5s` for seconds",
            ),
            (
                "",
                "invalid type: sequence, expected struct StreamJobManifest",
                "invalid type: list, expected a mapping with the fields apiVersion, kind, metadata, spec",
            ),
            // Not a duration: no hint; no Rust words: unchanged.
            (
                "metadata.name",
                "invalid type: integer `3`, expected a string",
                "invalid type: integer `3`, expected a string",
            ),
            (
                "spec.stateBackend",
                "unknown variant `rocksdb`, expected `heap` or `disk`",
                "unknown variant `rocksdb`, expected `heap` or `disk`; Flink's `rocksdb` state backend is `disk` here",
            ),
            (
                "spec.stateBackend",
                "unknown variant `hashmap`, expected `heap` or `disk`",
                "unknown variant `hashmap`, expected `heap` or `disk`; Flink's `hashmap` state backend is `heap` here",
            ),
            (
                "spec.stateBackend",
                "unknown variant `memory`, expected `heap` or `disk`",
                "unknown variant `memory`, expected `heap` or `disk`",
            ),
        ] {
            assert_eq!(plain_type_error(field, serde), want, "{field}");
        }
    }
}
