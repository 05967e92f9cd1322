//! CEL (the Common Expression Language, as in Kubernetes validation rules) over records,
//! through the `cel` crate. A record's top-level fields are variables; the whole record is
//! `record`. Besides the standard library and the strings extension (`lowerAscii`, `split`,
//! ...), `s.lower()` and `s.upper()` change case by Unicode rules.

use super::Value;
use cel::common::types::CelString;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// A compile or evaluation error, with the expression it concerns.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CelError {
    /// The expression does not parse.
    #[error("invalid CEL expression `{expr}`: {message}")]
    Compile { expr: String, message: String },
    /// Evaluation failed (missing field, wrong type, ...).
    #[error("CEL expression `{expr}` failed: {message}")]
    Eval { expr: String, message: String },
}

fn lower(this: &CelString<'_>) -> CelString<'static> {
    this.to_lowercase().into()
}

fn upper(this: &CelString<'_>) -> CelString<'static> {
    this.to_uppercase().into()
}

fn env() -> Arc<cel::Env> {
    static ENV: OnceLock<Arc<cel::Env>> = OnceLock::new();
    ENV.get_or_init(|| {
        let mut env = cel::Env::stdlib();
        env.add_extension(cel::extensions::strings).expect("strings extension");
        cel::add_member_overload!(env, fn lower: (CelString) -> CelString).expect("lower");
        cel::add_member_overload!(env, fn upper: (CelString) -> CelString).expect("upper");
        Arc::new(env)
    })
    .clone()
}

/// A compiled expression.
pub struct Expr {
    source: String,
    program: cel::Program,
    /// `Some(field)` when the expression is a bare identifier other than `record`: evaluated
    /// by a field lookup, without the interpreter (the common `keyBy: word` case).
    field: Option<String>,
    uses_record: bool,
}

impl std::fmt::Debug for Expr {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "Expr({:?})", self.source)
    }
}

/// Compiles a CEL expression. Errors: [`CelError::Compile`].
pub fn compile(source: &str) -> Result<Expr, CelError> {
    let program = env().compile(source).map_err(|e| CelError::Compile {
        expr: source.to_string(),
        message: e.to_string().lines().next().unwrap_or_default().to_string(),
    })?;
    let t = source.trim();
    let is_ident = !t.is_empty()
        && t.chars().next().is_some_and(|c| c.is_ascii_alphabetic() || c == '_')
        && t.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
        && !matches!(t, "record" | "true" | "false" | "null");
    let uses_record = program.references().has_variable("record");
    Ok(Expr {
        source: source.to_string(),
        program,
        field: is_ident.then(|| t.to_string()),
        uses_record,
    })
}

impl Expr {
    /// The expression text.
    pub fn source(&self) -> &str {
        &self.source
    }

    fn error(&self, message: impl Into<String>) -> CelError {
        CelError::Eval {
            expr: self.source.clone(),
            message: message.into(),
        }
    }

    /// Evaluates against a record and returns the result as JSON. Map results have their keys
    /// sorted (CEL maps are unordered).
    pub fn eval(&self, record: &Value) -> Result<Value, CelError> {
        if let Some(f) = &self.field {
            return match record.get(f) {
                Some(v) => Ok(v.clone()),
                None => Err(self.error(format!("the record has no field `{f}`"))),
            };
        }
        let mut ctx = cel::Context::with_env(env());
        if let Value::Object(m) = record {
            for (k, v) in m {
                ctx.add_variable_from_value(k.as_str(), to_cel(v));
            }
        }
        if self.uses_record {
            ctx.add_variable_from_value("record", to_cel(record));
        }
        let out = self.program.execute(&ctx).map_err(|e| self.error(e.to_string()))?;
        from_cel(&out).map_err(|m| self.error(m))
    }

    /// Evaluates to a boolean; a non-boolean result is an error.
    pub fn eval_bool(&self, record: &Value) -> Result<bool, CelError> {
        match self.eval(record)? {
            Value::Bool(b) => Ok(b),
            other => Err(self.error(format!("must be a boolean, got {other}"))),
        }
    }
}

/// Converts JSON to a CEL value.
pub fn to_cel(v: &Value) -> cel::Value {
    match v {
        Value::Null => cel::Value::Null,
        Value::Bool(b) => cel::Value::Bool(*b),
        Value::Number(n) => match (n.as_i64(), n.as_u64()) {
            (Some(i), _) => cel::Value::Int(i),
            (None, Some(u)) => cel::Value::UInt(u),
            _ => cel::Value::Float(n.as_f64().unwrap_or(f64::NAN)),
        },
        Value::String(s) => cel::Value::String(Arc::new(s.clone())),
        Value::Array(a) => cel::Value::List(Arc::new(a.iter().map(to_cel).collect())),
        Value::Object(m) => {
            let map: HashMap<cel::objects::Key, cel::Value> = m
                .iter()
                .map(|(k, v)| (cel::objects::Key::String(Arc::new(k.clone())), to_cel(v)))
                .collect();
            cel::Value::Map(cel::objects::Map { map: Arc::new(map) })
        }
    }
}

/// Converts a CEL value to JSON; map keys are sorted for a deterministic field order.
pub fn from_cel(v: &cel::Value) -> Result<Value, String> {
    Ok(match v {
        cel::Value::Map(m) => {
            let mut entries: Vec<(String, Value)> = m
                .map
                .iter()
                .map(|(k, v)| Ok((key_string(k), from_cel(v)?)))
                .collect::<Result<_, String>>()?;
            entries.sort_by(|a, b| a.0.cmp(&b.0));
            Value::Object(entries.into_iter().collect())
        }
        cel::Value::List(l) => Value::Array(l.iter().map(from_cel).collect::<Result<_, _>>()?),
        cel::Value::Int(i) => Value::from(*i),
        cel::Value::UInt(u) => Value::from(*u),
        cel::Value::Float(f) => serde_json::Number::from_f64(*f)
            .map(Value::Number)
            .unwrap_or(Value::Null),
        cel::Value::String(s) => Value::String(s.to_string()),
        cel::Value::Bool(b) => Value::Bool(*b),
        cel::Value::Null => Value::Null,
        other => {
            return Err(format!("the result {other:?} cannot be represented in a record"));
        }
    })
}

fn key_string(k: &cel::objects::Key) -> String {
    match k {
        cel::objects::Key::String(s) => s.to_string(),
        cel::objects::Key::Int(i) => i.to_string(),
        cel::objects::Key::Uint(u) => u.to_string(),
        cel::objects::Key::Bool(b) => b.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    #[test]
    fn evaluates_fields_record_and_unicode_lower() {
        let r = json!({"line": "Ÿes SIR", "n": 3});
        assert_eq!(compile("line.lower()").unwrap().eval(&r).unwrap(), json!("ÿes sir"));
        assert_eq!(
            compile("{'line': line.lowerAscii(), 'm': n * 2}")
                .unwrap()
                .eval(&r)
                .unwrap(),
            json!({"line": "Ÿes sir", "m": 6})
        );
        assert_eq!(compile("record.n + 1").unwrap().eval(&r).unwrap(), json!(4));
        assert!(compile("size(line) > 3").unwrap().eval_bool(&r).unwrap());
        assert_eq!(compile("n").unwrap().eval(&r).unwrap(), json!(3));
    }

    #[test]
    fn errors_are_reported_not_panics() {
        assert!(matches!(compile("line +").unwrap_err(), CelError::Compile { .. }));
        let e = compile("missing").unwrap().eval(&json!({})).unwrap_err();
        assert!(e.to_string().contains("no field `missing`"), "{e}");
        let e = compile("missing + 1").unwrap().eval(&json!({})).unwrap_err();
        assert!(matches!(e, CelError::Eval { .. }));
        let e = compile("1").unwrap().eval_bool(&json!({})).unwrap_err();
        assert!(e.to_string().contains("boolean"), "{e}");
    }
}
