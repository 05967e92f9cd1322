//! The operator's own durations in a StreamJob (`savepoints.periodicInterval`,
//! `savepoints.history.maxAge`, `rollback.readinessTimeout`, `health.restartWindow`): `weir run`
//! does not use them, but checks them as the operator does, so a manifest that runs on a laptop
//! is not refused once applied to a cluster (found by trial, helper-112: `periodicInterval:
//! -1h` and `maxAge: "1 fortnight"` ran locally). The operator's validation calls
//! [`check_positive_duration`] with the hints of [`OPERATOR_DURATIONS`] too.

use super::validate::JobError;
use serde_yaml::Value;
use std::time::Duration;

/// Each operator-only duration: its field path and what to write instead of a zero one.
pub const OPERATOR_DURATIONS: [(&str, &str); 4] = [
    ("spec.savepoints.periodicInterval", "omit it for no periodic savepoints"),
    ("spec.savepoints.history.maxAge", "omit it for no age limit"),
    (
        "spec.rollback.readinessTimeout",
        "set `rollback.enabled: false` for no rollback",
    ),
    ("spec.health.restartWindow", "e.g. `1h`"),
];

/// `text` at `field` as a duration greater than 0 ([`super::parse_duration`]'s forms).
/// Errors: negative, zero, or not a duration, naming `field` and, for zero, `hint`.
pub fn check_positive_duration(field: &str, text: &str, hint: &str) -> Result<Duration, String> {
    if text.trim().starts_with('-') {
        return Err(format!(
            "{field}: `{text}` is negative: give a positive duration like `30s`, `5m`; {hint}"
        ));
    }
    match super::parse_duration(text) {
        Ok(duration) if !duration.is_zero() => Ok(duration),
        Ok(_) => Err(format!("{field}: must be greater than 0; {hint}")),
        Err(e) => Err(format!("{field}: {e}")),
    }
}

/// Checks the operator-only durations present in the manifest `doc` (after `--set`). A number
/// where a duration belongs is read as its text (`10` has no unit). Errors: the first bad one.
pub(super) fn check_in_manifest(doc: &Value) -> Result<(), JobError> {
    for (field, hint) in OPERATOR_DURATIONS {
        let value = field.split('.').try_fold(doc, |node, key| node.get(key));
        let text = match value {
            Some(Value::String(text)) => text.clone(),
            Some(Value::Number(number)) => number.to_string(),
            _ => continue,
        };
        check_positive_duration(field, &text, hint).map_err(|message| {
            let message = message
                .strip_prefix(&format!("{field}: "))
                .unwrap_or(&message)
                .to_string();
            JobError::new(field, message)
        })?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn check(spec: &str) -> Result<(), String> {
        let doc: Value = serde_yaml::from_str(&format!("spec: {spec}")).unwrap();
        check_in_manifest(&doc).map_err(|e| e.to_string())
    }

    #[test]
    fn operator_durations_are_checked_as_the_operator_checks_them() {
        assert_eq!(check("{}"), Ok(()));
        assert_eq!(
            check(
                "{savepoints: {periodicInterval: 6h, history: {maxAge: 7d}}, rollback: {readinessTimeout: 5m}, health: {restartWindow: 1h}}"
            ),
            Ok(())
        );
        for (spec, want) in [
            (
                "{savepoints: {periodicInterval: -1h}}",
                "spec.savepoints.periodicInterval: `-1h` is negative",
            ),
            (
                "{savepoints: {history: {maxAge: 1 fortnight}}}",
                "spec.savepoints.history.maxAge: `1 fortnight` is not a duration",
            ),
            (
                "{rollback: {readinessTimeout: '10'}}",
                "spec.rollback.readinessTimeout: `10` has no unit",
            ),
            (
                "{rollback: {readinessTimeout: 10}}",
                "spec.rollback.readinessTimeout: `10` has no unit",
            ),
            (
                "{health: {restartWindow: 0s}}",
                "spec.health.restartWindow: must be greater than 0; e.g. `1h`",
            ),
        ] {
            let got = check(spec).unwrap_err();
            assert!(got.starts_with(want), "{spec}: {got}");
        }
    }
}
