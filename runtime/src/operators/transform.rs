//! Stateless transforms: `filter`, `map` (CEL), `flatMap` (regex split) and `keyBy`.

use super::{StreamOperator, TaskResult};
use crate::job::FlatMapSpec;
use crate::record::cel::{self, Expr};
use crate::record::{Key, KeyedBy, Record, Value};
use crate::state::key_group::key_group;
use async_trait::async_trait;

/// Keeps records for which a CEL expression is true.
pub struct Filter {
    expr: Expr,
}

impl Filter {
    /// Compiles the expression.
    pub fn new(expression: &str) -> TaskResult<Filter> {
        Ok(Filter {
            expr: cel::compile(expression)?,
        })
    }
}

#[async_trait]
impl StreamOperator for Filter {
    async fn process(&mut self, input: Vec<Record>, out: &mut Vec<Record>) -> TaskResult<()> {
        for r in input {
            if self.expr.eval_bool(&r.value)? {
                out.push(r);
            }
        }
        Ok(())
    }
}

/// Replaces each record by the value of a CEL expression.
pub struct Map {
    expr: Expr,
}

impl Map {
    /// Compiles the expression.
    pub fn new(expression: &str) -> TaskResult<Map> {
        Ok(Map {
            expr: cel::compile(expression)?,
        })
    }
}

#[async_trait]
impl StreamOperator for Map {
    async fn process(&mut self, input: Vec<Record>, out: &mut Vec<Record>) -> TaskResult<()> {
        for r in input {
            out.push(Record::new(self.expr.eval(&r.value)?));
        }
        Ok(())
    }
}

/// Splits a string field by a regex into one record per token.
pub struct FlatMap {
    field: String,
    as_field: String,
    regex: regex::Regex,
    keep_empty: bool,
}

impl FlatMap {
    /// Compiles the pattern.
    pub fn new(spec: &FlatMapSpec) -> TaskResult<FlatMap> {
        Ok(FlatMap {
            field: spec.field.clone(),
            as_field: spec.as_field.clone().unwrap_or_else(|| spec.field.clone()),
            regex: regex::Regex::new(&spec.pattern).map_err(|e| super::TaskError(e.to_string()))?,
            keep_empty: spec.keep_empty,
        })
    }
}

#[async_trait]
impl StreamOperator for FlatMap {
    async fn process(&mut self, input: Vec<Record>, out: &mut Vec<Record>) -> TaskResult<()> {
        for r in input {
            let Value::Object(mut obj) = r.value else {
                return Err(super::TaskError(format!(
                    "flatMap: record {} is not an object",
                    r.value
                )));
            };
            let text = match obj.shift_remove(&self.field) {
                Some(Value::String(s)) => s,
                Some(other) => {
                    return Err(super::TaskError(format!(
                        "flatMap: field `{}` is {other}, not a string",
                        self.field
                    )));
                }
                None => {
                    return Err(super::TaskError(format!(
                        "flatMap: the record has no field `{}`",
                        self.field
                    )));
                }
            };
            for token in self.regex.split(&text) {
                if token.is_empty() && !self.keep_empty {
                    continue;
                }
                let mut o = obj.clone();
                o.insert(self.as_field.clone(), Value::String(token.to_string()));
                out.push(Record::new(Value::Object(o)));
            }
        }
        Ok(())
    }
}

/// Computes each record's key and key group (the input of the keyed exchange).
pub struct KeyBy {
    expr: Expr,
    max_parallelism: u32,
}

impl KeyBy {
    /// Compiles the key selector.
    pub fn new(expression: &str, max_parallelism: u32) -> TaskResult<KeyBy> {
        Ok(KeyBy {
            expr: cel::compile(expression)?,
            max_parallelism,
        })
    }
}

#[async_trait]
impl StreamOperator for KeyBy {
    async fn process(&mut self, input: Vec<Record>, out: &mut Vec<Record>) -> TaskResult<()> {
        for mut r in input {
            let key = Key::from_owned(self.expr.eval(&r.value)?)
                .map_err(|e| super::TaskError(format!("keyBy `{}`: {e}", self.expr.source())))?;
            let kg = key_group(&key, self.max_parallelism);
            r.keyed = Some(KeyedBy { key, key_group: kg });
            out.push(r);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    async fn run(op: &mut dyn StreamOperator, input: Vec<Value>) -> Vec<Value> {
        let mut out = Vec::new();
        op.process(input.into_iter().map(Record::new).collect(), &mut out)
            .await
            .unwrap();
        out.into_iter().map(|r| r.value).collect()
    }

    #[tokio::test]
    async fn flat_map_splits_on_unicode_non_words_and_drops_empty() {
        let spec = FlatMapSpec {
            field: "line".into(),
            pattern: r"\W+".into(),
            as_field: Some("word".into()),
            keep_empty: false,
        };
        let mut op = FlatMap::new(&spec).unwrap();
        let out = run(&mut op, vec![json!({"line": "  Über-cool, naïve  café! "})]).await;
        assert_eq!(
            out,
            vec![
                json!({"word": "Über"}),
                json!({"word": "cool"}),
                json!({"word": "naïve"}),
                json!({"word": "café"})
            ]
        );
    }

    #[tokio::test]
    async fn filter_map_and_key_by() {
        let mut f = Filter::new("size(word) > 2").unwrap();
        assert_eq!(
            run(&mut f, vec![json!({"word": "ab"}), json!({"word": "abc"})]).await,
            vec![json!({"word": "abc"})]
        );
        let mut m = Map::new("{'w': word.upper()}").unwrap();
        assert_eq!(run(&mut m, vec![json!({"word": "ab"})]).await, vec![json!({"w": "AB"})]);
        let mut k = KeyBy::new("word", 128).unwrap();
        let mut out = Vec::new();
        k.process(vec![Record::new(json!({"word": "the"}))], &mut out)
            .await
            .unwrap();
        let keyed = out[0].keyed.clone().unwrap();
        assert_eq!(keyed.key, Key::Str("the".into()));
        assert_eq!(keyed.key_group, key_group(&Key::Str("the".into()), 128));
        let e = KeyBy::new("1.5", 128)
            .unwrap()
            .process(vec![Record::new(json!({}))], &mut out)
            .await
            .unwrap_err();
        assert!(e.0.contains("not an integer"), "{e}");
    }
}
