//! Stateless transforms: `filter`, `map` (CEL), `flatMap` (regex split) and `keyBy`.

use super::{StreamOperator, TaskResult};
use crate::job::FlatMapSpec;
use crate::record::cel::{self, Expr};
use crate::record::cel_fast::{ColumnKernel, FastValue};
use crate::record::{Datum, Key, KeyedBy, Record, Row, Schema, SchemaCache};
use crate::state::key_group::{int_key_hash, key_group_of_hash};
use async_trait::async_trait;
use std::sync::Arc;

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
            if self.expr.eval_bool(&r.row)? {
                out.push(r);
            }
        }
        Ok(())
    }
}

/// Replaces each record by the value of a CEL expression (a map literal gives a row of its
/// keys, sorted; records with the same keys share one schema).
pub struct Map {
    expr: Expr,
    schemas: SchemaCache,
}

impl Map {
    /// Compiles the expression.
    pub fn new(expression: &str) -> TaskResult<Map> {
        Ok(Map {
            expr: cel::compile(expression)?,
            schemas: SchemaCache::default(),
        })
    }
}

#[async_trait]
impl StreamOperator for Map {
    async fn process(&mut self, input: Vec<Record>, out: &mut Vec<Record>) -> TaskResult<()> {
        for r in input {
            out.push(Record::new(self.expr.eval_row(&r.row, &mut self.schemas)?));
        }
        Ok(())
    }
}

/// Splits a string field by a regex into one record per token.
pub struct FlatMap {
    field: String,
    as_field: String,
    regex: regex::Regex,
    /// The pattern when it is a plain string (no regex syntax, as `' '`): split with
    /// `str::split`, which gives the regex's tokens without its search machinery per token.
    literal: Option<String>,
    keep_empty: bool,
    layouts: Vec<FlatMapLayout>,
}

impl FlatMap {
    /// Compiles the pattern.
    pub fn new(spec: &FlatMapSpec) -> TaskResult<FlatMap> {
        Ok(FlatMap {
            field: spec.field.clone(),
            as_field: spec.as_field.clone().unwrap_or_else(|| spec.field.clone()),
            regex: regex::Regex::new(&spec.pattern).map_err(|e| super::TaskError(e.to_string()))?,
            literal: (!spec.pattern.is_empty() && regex::escape(&spec.pattern) == spec.pattern)
                .then(|| spec.pattern.clone()),
            keep_empty: spec.keep_empty,
            layouts: Vec::new(),
        })
    }
}

/// The output layout of [`FlatMap`] for one input schema: the input's fields without the
/// split field, with the token field appended (or replacing a field of the same name in its
/// position, as an object insert does).
struct FlatMapLayout {
    input: Arc<Schema>,
    /// Position of the split field in the input.
    split_at: usize,
    /// Output schema.
    output: Arc<Schema>,
    /// Position of the token in the output.
    token_at: usize,
}

impl FlatMapLayout {
    fn new(input: &Arc<Schema>, split_at: usize, as_field: &str) -> FlatMapLayout {
        let mut names: Vec<_> = input.names().to_vec();
        names.remove(split_at);
        let token_at = match names.iter().position(|n| n == as_field) {
            Some(i) => i,
            None => {
                names.push(as_field.into());
                names.len() - 1
            }
        };
        FlatMapLayout {
            input: input.clone(),
            split_at,
            output: Schema::new(names),
            token_at,
        }
    }
}

impl FlatMap {
    fn layout(&mut self, row: &Row) -> TaskResult<usize> {
        if let Some(i) = self.layouts.iter().position(|l| Arc::ptr_eq(&l.input, row.schema())) {
            return Ok(i);
        }
        if row.as_bare().is_some() {
            return Err(super::TaskError(format!(
                "flatMap: the record {} is not an object",
                cel::record_shown(row)
            )));
        }
        let split_at = row.schema().index_of(&self.field).ok_or_else(|| {
            super::TaskError(format!(
                "flatMap: the record {} has no field `{}`",
                cel::record_shown(row),
                self.field
            ))
        })?;
        // Keep layouts of the few most recent schemas (one, in practice).
        if self.layouts.len() >= 4 {
            self.layouts.remove(0);
        }
        self.layouts
            .push(FlatMapLayout::new(row.schema(), split_at, &self.as_field));
        Ok(self.layouts.len() - 1)
    }
}

#[async_trait]
impl StreamOperator for FlatMap {
    async fn process(&mut self, input: Vec<Record>, out: &mut Vec<Record>) -> TaskResult<()> {
        for r in input {
            let at = self.layout(&r.row)?;
            let layout = &self.layouts[at];
            if let Some(other) = r
                .row
                .values()
                .get(layout.split_at)
                .filter(|v| !matches!(v, Datum::Str(_)))
            {
                return Err(super::TaskError(format!(
                    "flatMap: field `{}` is {other}, not a string, in the record {}",
                    self.field,
                    cel::record_shown(&r.row)
                )));
            }
            let (_, mut values) = r.row.into_parts();
            let Datum::Str(text) = values.remove(layout.split_at) else {
                unreachable!("checked to be a string above")
            };
            if layout.token_at == values.len() {
                values.push(Datum::Null);
            }
            let mut emit = |token: &str| {
                if token.is_empty() && !self.keep_empty {
                    return;
                }
                let mut v = values.clone();
                v[layout.token_at] = Datum::Str(token.into());
                out.push(Record::new(Row::new_unchecked(layout.output.clone(), v)));
            };
            match self.literal.as_deref() {
                // One character (word count's ' '): a `char` pattern searches with memchr, a
                // one-character string with the two-way searcher.
                Some(literal) if literal.chars().count() == 1 => {
                    let c = literal.chars().next().expect("one character");
                    text.split(c).for_each(&mut emit)
                }
                Some(literal) => text.split(literal).for_each(&mut emit),
                None => self.regex.split(&text).for_each(&mut emit),
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

impl KeyBy {
    /// The key of `row`: straight from the borrowed value when a field read or the native
    /// evaluator decides it (no intermediate `Datum`), else [`Key::from_owned`] of the
    /// evaluated value, which also gives the errors (null, float, object keys).
    fn key(&self, row: &Row) -> TaskResult<Key> {
        let borrowed = self.expr.eval_borrowed(row, key_of);
        Ok(match borrowed {
            Some(Some(key)) => key,
            _ => Key::from_owned(self.expr.eval(row)?).map_err(|e| {
                super::TaskError(format!(
                    "keyBy `{}` on the record {}: {e}",
                    self.expr.source(),
                    cel::record_shown(row)
                ))
            })?,
        })
    }
}

/// The key of a value a [`ColumnKernel`] or the fast evaluator gave, when it is one.
#[inline]
fn key_of(value: FastValue<'_>) -> Option<Key> {
    match value {
        FastValue::Int(i) => Some(Key::Int(i)),
        FastValue::Str(s) => Some(Key::Str(s.into())),
        FastValue::Bool(b) => Some(Key::Bool(b)),
        _ => None,
    }
}

#[path = "keyby_columns.rs"]
mod keyby_columns;

#[async_trait]
impl StreamOperator for KeyBy {
    async fn process_columns(&mut self, mut input: crate::record::ColumnBatch) -> TaskResult<crate::record::Batch> {
        // The key column by the column kernel when it decides every row; else the row path,
        // which decides (and names what is wrong) row by row.
        match self.key_columns(&input) {
            Some(keyed) => {
                input.set_keyed(keyed).map_err(super::TaskError)?;
                Ok(crate::record::Batch::Columns(input))
            }
            None => {
                let mut out = Vec::with_capacity(input.len());
                self.process(input.into_records(), &mut out).await?;
                Ok(crate::record::Batch::Rows(out))
            }
        }
    }

    async fn process(&mut self, mut input: Vec<Record>, out: &mut Vec<Record>) -> TaskResult<()> {
        // Batch at a time: the key expression is resolved to a column kernel once per schema
        // (once per batch in practice), then each row's key is read and computed straight from
        // its values, hashed once, and its key group derived from that hash. Rows the kernel
        // does not decide (another expression, a null, an overflow) take the general path.
        // Keys are set in place and the batch handed on whole: no record is moved.
        let mut kernel: Option<(Arc<Schema>, Option<ColumnKernel>)> = None;
        for r in &mut input {
            let schema = r.row.schema();
            let current = match &kernel {
                Some((s, k)) if Arc::ptr_eq(s, schema) => *k,
                _ => {
                    let k = self.expr.column_kernel(schema);
                    kernel = Some((schema.clone(), k));
                    k
                }
            };
            let max_parallelism = self.max_parallelism;
            let keyed = match current.and_then(|k| k.eval(r.row.values())) {
                // Integer keys (`id % 100000`): hashed from the value, the key group from
                // that hash (the same numbers as `KeyedBy::new`, without matching the key).
                Some(FastValue::Int(i)) => {
                    let hash = int_key_hash(i);
                    KeyedBy {
                        key: Key::Int(i),
                        key_group: key_group_of_hash(hash, max_parallelism),
                        hash,
                    }
                }
                value => match value.and_then(key_of) {
                    Some(key) => KeyedBy::new(key, max_parallelism),
                    None => KeyedBy::new(self.key(&r.row)?, max_parallelism),
                },
            };
            r.keyed = Some(keyed);
        }
        if out.is_empty() {
            *out = input;
        } else {
            out.append(&mut input);
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::state::key_group::key_group;
    use serde_json::{Value, json};

    /// The key from the borrowed fast path is the key of the evaluated value, for field reads,
    /// native-evaluator expressions and interpreter-only ones; values that are no key are
    /// errors naming the expression either way.
    #[test]
    fn keys_equal_the_keys_of_the_evaluated_values() {
        let row = Row::from_json(json!({
            "id": 123_456, "key": "key-7", "flag": true, "x": 1.5, "n": null, "big": u64::MAX,
            "long": "a string longer than twenty-four bytes", "o": {"a": 1}
        }));
        let keys = [
            "id",
            "key",
            "flag",
            "long",
            "id % 100000",
            "-id",
            "id > 3",
            "key == 'key-7'",
            "key + '!'",
            "size(key)",
            "x > 1.0 ? id : 0",
        ];
        for source in keys {
            let by = KeyBy::new(source, 128).unwrap();
            let want = Key::from_owned(by.expr.eval(&row).unwrap()).unwrap();
            assert_eq!(by.key(&row).unwrap(), want, "{source}");
        }
        for (source, message) in [
            ("x", "not an integer"),
            ("n", "not a string, integer or boolean"),
            ("big", "above the largest integer key"),
            ("o", "not a string, integer or boolean"),
            ("x * 2.0", "not an integer"),
            ("missing", "no field `missing`"),
        ] {
            let error = KeyBy::new(source, 128).unwrap().key(&row).unwrap_err().0;
            assert!(error.contains(message), "{source}: {error}");
        }
    }

    /// The batch path (a column kernel per schema) gives every row the key, key group and hash
    /// of its evaluated value: rows sharing a schema, a schema with other positions between
    /// them, values the kernel leaves to the evaluator; and what the evaluator rejects
    /// (overflow, `% 0`, a float key) is still an error naming the expression.
    #[tokio::test]
    async fn batch_keys_equal_the_keys_of_the_evaluated_values() {
        let a = Schema::new(["id", "s", "b", "x"]);
        let b = Schema::new(["x", "b", "s", "id"]);
        let row_a = |id: i64, s: &str, flag: bool| {
            Row::new(
                a.clone(),
                vec![
                    Datum::Int(id),
                    Datum::Str(s.into()),
                    Datum::Bool(flag),
                    Datum::Float(0.5),
                ],
            )
            .unwrap()
        };
        let row_b = |id: i64, s: &str, flag: bool| {
            Row::new(
                b.clone(),
                vec![
                    Datum::Float(1.5),
                    Datum::Bool(flag),
                    Datum::Str(s.into()),
                    Datum::Int(id),
                ],
            )
            .unwrap()
        };
        let rows = || {
            vec![
                row_a(7, "a", true),
                row_a(-123_456_789, "a string longer than twenty-four bytes", false),
                row_b(99_999, "c", true),
                row_a(100_000, "d", false),
                Row::from_json(json!({"id": 5, "s": "e", "b": true, "x": 2.5})),
            ]
        };
        let exprs = [
            "id",
            "s",
            "b",
            "id % 100000",
            "id * 3",
            "id - 1",
            "id / 7",
            "id > 5",
            "id == 7",
            "s == 'a'",
            "-id",
        ];
        for source in exprs {
            let mut by = KeyBy::new(source, 128).unwrap();
            let reference = cel::compile(source).unwrap();
            let want: Vec<KeyedBy> = rows()
                .iter()
                .map(|r| KeyedBy::new(Key::from_owned(reference.eval(r).unwrap()).unwrap(), 128))
                .collect();
            let mut out = Vec::new();
            by.process(rows().into_iter().map(Record::new).collect(), &mut out)
                .await
                .unwrap();
            let got: Vec<KeyedBy> = out.into_iter().map(|r| r.keyed.unwrap()).collect();
            assert_eq!(got, want, "{source}");
        }
        for (source, row) in [
            ("id % 0", row_a(1, "a", true)),
            ("id + 1", row_a(i64::MAX, "a", true)),
            ("id * 2", row_b(i64::MIN, "a", true)),
            ("x", row_a(1, "a", true)),
        ] {
            let mut by = KeyBy::new(source, 128).unwrap();
            let batch = vec![Record::new(row_a(1, "ok", true)), Record::new(row)];
            let error = by.process(batch, &mut Vec::new()).await.unwrap_err().0;
            assert!(error.contains(source), "{source}: {error}");
        }
    }

    async fn run(op: &mut dyn StreamOperator, input: Vec<Value>) -> Vec<Value> {
        let mut out = Vec::new();
        op.process(
            input.into_iter().map(|v| Record::new(Row::from_json(v))).collect(),
            &mut out,
        )
        .await
        .unwrap();
        out.into_iter().map(|r| r.row.to_json()).collect()
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

    /// A plain-string pattern splits as the regex does (`str::split` instead of the regex),
    /// empty tokens included or not; patterns with regex syntax keep the regex.
    #[tokio::test]
    async fn flat_map_with_a_plain_pattern_splits_as_the_regex() {
        let lines = ["a b  c ", " ", "", "x", "one, two,three", "naïve café  über"];
        for pattern in [" ", ", ", "ab", "é", " +", r"\W+", "."] {
            for keep_empty in [false, true] {
                let spec = FlatMapSpec {
                    field: "line".into(),
                    pattern: pattern.into(),
                    as_field: Some("word".into()),
                    keep_empty,
                };
                let mut op = FlatMap::new(&spec).unwrap();
                assert_eq!(
                    op.literal.is_some(),
                    matches!(pattern, " " | ", " | "ab" | "é"),
                    "{pattern:?}"
                );
                let regex = regex::Regex::new(pattern).unwrap();
                for line in lines {
                    let want: Vec<Value> = regex
                        .split(line)
                        .filter(|t| keep_empty || !t.is_empty())
                        .map(|t| json!({ "word": t }))
                        .collect();
                    let got = run(&mut op, vec![json!({ "line": line })]).await;
                    assert_eq!(got, want, "{pattern:?} keep_empty {keep_empty} on {line:?}");
                }
            }
        }
    }

    #[tokio::test]
    async fn flat_map_keeps_other_fields_and_replaces_a_field_of_the_token_name_in_place() {
        let spec = |as_field: Option<&str>| FlatMapSpec {
            field: "line".into(),
            pattern: " ".into(),
            as_field: as_field.map(Into::into),
            keep_empty: false,
        };
        let input = || vec![json!({"line": "a b", "n": 1, "m": 2})];
        let out = run(&mut FlatMap::new(&spec(None)).unwrap(), input()).await;
        let text: Vec<_> = out.iter().map(|v| serde_json::to_string(v).unwrap()).collect();
        assert_eq!(text, [r#"{"n":1,"m":2,"line":"a"}"#, r#"{"n":1,"m":2,"line":"b"}"#]);
        let out = run(&mut FlatMap::new(&spec(Some("n"))).unwrap(), input()).await;
        let text: Vec<_> = out.iter().map(|v| serde_json::to_string(v).unwrap()).collect();
        assert_eq!(text, [r#"{"n":"a","m":2}"#, r#"{"n":"b","m":2}"#]);
        let mut op = FlatMap::new(&spec(None)).unwrap();
        let mut sink = vec![];
        let e = op
            .process(vec![Record::new(Row::from_json(json!({"line": 3})))], &mut sink)
            .await
            .unwrap_err();
        assert!(
            e.0.contains(r#"field `line` is 3, not a string, in the record {"line":3}"#),
            "{e}"
        );
        let e = op
            .process(vec![Record::new(Row::from_json(json!("x")))], &mut sink)
            .await
            .unwrap_err();
        assert!(e.0.contains(r#"the record "x" is not an object"#), "{e}");
        let e = op
            .process(vec![Record::new(Row::from_json(json!({"text": "a b"})))], &mut sink)
            .await
            .unwrap_err();
        assert!(e.0.contains(r#"the record {"text":"a b"} has no field `line`"#), "{e}");
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
        k.process(vec![Record::new(Row::from_json(json!({"word": "the"})))], &mut out)
            .await
            .unwrap();
        let keyed = out[0].keyed.clone().unwrap();
        assert_eq!(keyed.key, Key::Str("the".into()));
        assert_eq!(keyed.key_group, key_group(&Key::Str("the".into()), 128));
        let e = KeyBy::new("1.5", 128)
            .unwrap()
            .process(vec![Record::new(Row::from_json(json!({})))], &mut out)
            .await
            .unwrap_err();
        assert!(
            e.0.contains("keyBy `1.5` on the record {}: ") && e.0.contains("not an integer"),
            "{e}"
        );
    }
}
