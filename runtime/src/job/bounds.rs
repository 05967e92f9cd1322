//! The integer bounds of the StreamJob schema, enforced on a manifest as the API server
//! enforces them: `minimum` / `maximum`, and the CEL rules of the simple forms `self >= N`,
//! `self <= N` and `self >= N && self <= N` in `x-kubernetes-validations`. The runtime's own
//! rules ([`super::validate`]) check the fields it uses with their own messages first; this
//! check then refuses what the API server would refuse in the fields it does not use
//! (operator-only ones such as `slotsPerWorker`), so `weir run` accepts exactly what
//! `kubectl apply` accepts. `runtime/src/job/bounds_tests.rs` walks every bounded integer
//! field of the schema and checks the runtime accepts the bound and refuses one past it.

use super::validate::JobError;
use serde_json::Value as Schema;
use serde_yaml::Value;

/// Inclusive integer bounds of one schema node (`None`: unbounded on that side).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct IntegerBounds {
    /// Smallest value accepted.
    pub min: Option<i128>,
    /// Largest value accepted.
    pub max: Option<i128>,
}

/// The bounds a schema node puts on an integer: `minimum`, `maximum` and the simple CEL
/// rules (the tightest of them). Other rules are not understood and ignored.
pub fn integer_bounds(schema: &Schema) -> IntegerBounds {
    let mut b = IntegerBounds {
        min: schema.get("minimum").and_then(Schema::as_f64).map(|v| v as i128),
        max: schema.get("maximum").and_then(Schema::as_f64).map(|v| v as i128),
    };
    let rules = schema
        .get("x-kubernetes-validations")
        .and_then(Schema::as_array)
        .into_iter()
        .flatten()
        .filter_map(|r| r.get("rule").and_then(Schema::as_str));
    for rule in rules {
        for clause in rule.split("&&").map(str::trim) {
            if let Some(n) = clause
                .strip_prefix("self >= ")
                .and_then(|n| n.trim().parse::<i128>().ok())
            {
                b.min = Some(b.min.map_or(n, |m| m.max(n)));
            } else if let Some(n) = clause
                .strip_prefix("self <= ")
                .and_then(|n| n.trim().parse::<i128>().ok())
            {
                b.max = Some(b.max.map_or(n, |m| m.min(n)));
            }
        }
    }
    b
}

/// Checks every integer of `doc` (a whole StreamJob manifest) against the bounds of its schema
/// node ([`integer_bounds`]).
///
/// Errors: the first integer out of bounds, naming its path (`spec.slotsPerWorker: must be at
/// least 1, got 0`).
pub fn check_integer_bounds(doc: &Value) -> Result<(), JobError> {
    let schema = super::fields::stream_job_schema();
    match (doc.get("spec"), schema.get("properties").and_then(|p| p.get("spec"))) {
        (Some(spec), Some(spec_schema)) => check(spec, spec_schema, "spec"),
        _ => Ok(()),
    }
}

fn check(value: &Value, schema: &Schema, path: &str) -> Result<(), JobError> {
    match value {
        Value::Mapping(map) => {
            let properties = schema.get("properties");
            for (key, child) in map {
                if let (Some(name), Some(child_schema)) = (key.as_str(), properties)
                    && let Some(s) = child_schema.get(name)
                {
                    check(child, s, &format!("{path}.{name}"))?;
                }
            }
        }
        Value::Sequence(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    check(item, item_schema, &format!("{path}[{i}]"))?;
                }
            }
        }
        Value::Number(n) if schema.get("type").and_then(Schema::as_str) == Some("integer") => {
            let v = n.as_i64().map(i128::from).or_else(|| n.as_u64().map(i128::from));
            if let Some(v) = v {
                let b = integer_bounds(schema);
                if let Some(min) = b.min.filter(|min| v < *min) {
                    return Err(JobError::new(path, format!("must be at least {min}, got {v}")));
                }
                if let Some(max) = b.max.filter(|max| v > *max) {
                    return Err(JobError::new(path, format!("must be at most {max}, got {v}")));
                }
            }
        }
        Value::Tagged(t) => check(&t.value, schema, path)?,
        _ => {}
    }
    Ok(())
}

#[cfg(test)]
#[path = "bounds_tests.rs"]
mod tests;
