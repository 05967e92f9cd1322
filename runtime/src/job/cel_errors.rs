//! Messages for CEL expressions in a manifest that do not compile, with what to write instead
//! where the mistake is a usual one.

use super::validate::JobError;

/// The error of a CEL expression at `field` that does not compile, with what to write instead
/// where the mistake is a usual one: `has(x)` on a record field (CEL's `has()` takes a field
/// selection; a record's fields are variables, and the record as a whole is `record`).
pub(super) fn cel_compile_error(field: &str, expr: &str, message: &str) -> JobError {
    if message.contains("has() macro") {
        let example: String = expr
            .split_once("has(")
            .map(|(_, rest)| {
                rest.trim_start()
                    .chars()
                    .take_while(|c| c.is_alphanumeric() || *c == '_')
                    .collect()
            })
            .filter(|name: &String| !name.is_empty())
            .unwrap_or_else(|| "field".into());
        return JobError::new(
            field,
            format!(
                "{message}; test whether a record has a field with `has(record.{example})` (a record's fields \
                 are variables; `record` is the whole record)"
            ),
        );
    }
    JobError::new(field, message)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn has_on_a_record_field_says_to_select_it_from_record() {
        let e = cel_compile_error("f", "has(commits) && x", "invalid argument to has() macro");
        assert_eq!(
            e.to_string(),
            "f: invalid argument to has() macro; test whether a record has a field with `has(record.commits)` \
             (a record's fields are variables; `record` is the whole record)"
        );
        let e = cel_compile_error("f", "a +", "Syntax error");
        assert_eq!(e.to_string(), "f: Syntax error");
    }
}
