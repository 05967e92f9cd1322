//! CEL (the Common Expression Language, as in Kubernetes validation rules) over records,
//! through the `cel` crate. A record's top-level fields are variables; the whole record is
//! `record`. Rows are converted field by field; results come back as typed values, or as a row
//! for `map` (a CEL map becomes a row whose fields are its keys, sorted). Besides the standard library and the strings extension (`lowerAscii`, `split`,
//! ...), `s.lower()` and `s.upper()` change case by Unicode rules.

use super::cel_fast::{ColumnKernel, FastExpr, FastObject, FastValue};
use super::row::{Datum, Row, RowBuilder, Schema, SchemaCache};
use cel::common::types::CelString;
use compact_str::CompactString;
use serde_json::Value;
use std::cell::RefCell;
use std::collections::HashMap;
use std::sync::{Arc, OnceLock};

/// A compile or evaluation error, with the expression it concerns.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum CelError {
    /// The expression does not parse.
    #[error("invalid CEL expression `{expr}`: {message}")]
    Compile { expr: String, message: String },
    /// Evaluation failed (missing field, wrong type, ...) on `record`: the record's JSON text,
    /// cut to [`RECORD_SHOWN_CHARS`] characters, so the error says which input to look at
    /// (empty from [`Expr::eval_unshown`], until [`CelError::on_record`] fills it).
    #[error("CEL expression `{expr}` failed{}: {message}", on_the_record(record))]
    Eval {
        expr: String,
        record: String,
        message: String,
    },
}

impl CelError {
    /// The error with `row` shown as the record it failed on ([`record_shown`]), when it is an
    /// evaluation error that shows none yet.
    pub fn on_record(self, row: &Row) -> CelError {
        match self {
            CelError::Eval { expr, record, message } if record.is_empty() => CelError::Eval {
                expr,
                record: record_shown(row),
                message,
            },
            other => other,
        }
    }
}

/// ` on the record <record>`, or nothing when `record` is empty.
fn on_the_record(record: &str) -> String {
    match record {
        "" => String::new(),
        shown => format!(" on the record {shown}"),
    }
}

/// Most characters of a record an evaluation error shows (then `…`).
pub const RECORD_SHOWN_CHARS: usize = 300;

/// `row`'s JSON text for an error message, cut to [`RECORD_SHOWN_CHARS`] characters (then
/// `…`): what an error about one record shows of it, so the user can find it in the input.
pub fn record_shown(row: &Row) -> String {
    let text = row.to_string();
    match text.char_indices().nth(RECORD_SHOWN_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text,
    }
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
    /// The expression in [`cel_fast`](super::cel_fast)'s subset, evaluated natively first.
    fast: Option<FastExpr>,
    /// The expression as an object literal in that subset (for [`Expr::eval_row`]).
    fast_object: Option<FastObject>,
    uses_record: bool,
    /// The fast paths bound to the schema of the rows seen last (fields by position), rebound
    /// when a row of another schema comes.
    bound: RefCell<Option<Bound>>,
}

/// [`Expr`]'s fast paths for rows of one schema: fields by position instead of by name (a
/// name lookup compares strings field by field; Nexmark's `map` reads five of seven fields).
struct Bound {
    schema: Arc<Schema>,
    /// Position of the bare-identifier expression's field (`None`: the schema lacks it).
    field: Option<usize>,
    fast: Option<FastExpr>,
    fast_object: Option<FastObject>,
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
    let syntax = &program.expression().expr;
    let fast = FastExpr::compile(syntax);
    let fast_object = FastObject::compile(syntax);
    Ok(Expr {
        source: source.to_string(),
        field: is_ident.then(|| t.to_string()),
        fast,
        fast_object,
        program,
        uses_record,
        bound: RefCell::new(None),
    })
}

impl Expr {
    /// The expression text.
    pub fn source(&self) -> &str {
        &self.source
    }

    /// The syntax tree, macros expanded (for [`cel_fields`](super::cel_fields)).
    pub fn syntax(&self) -> &cel::parser::Expression {
        self.program.expression()
    }

    /// An evaluation error without the record: the public evaluations add it
    /// ([`CelError::on_record`]) when they return the error, so an error a caller discards (a
    /// join key that reads a null) costs no rendering of the record.
    fn error(&self, message: impl Into<String>) -> CelError {
        CelError::Eval {
            expr: self.source.clone(),
            record: String::new(),
            message: message.into(),
        }
    }

    /// Evaluates against a row; the interpreter's result.
    fn eval_cel(&self, row: &Row) -> Result<cel::Value, CelError> {
        let mut ctx = cel::Context::with_env(env());
        for (name, value) in row.fields() {
            ctx.add_variable_from_value(name, datum_to_cel(value));
        }
        if self.uses_record {
            ctx.add_variable_from_value("record", row_to_cel(row));
        }
        self.program.execute(&ctx).map_err(|e| self.error(e.to_string()))
    }

    /// The interpreter's result alone, without the fast paths (to test them against).
    #[cfg(test)]
    pub(crate) fn eval_interpreted(&self, row: &Row) -> Result<Value, CelError> {
        let out = self.eval_cel(row).map_err(|e| e.on_record(row))?;
        from_cel(&out).map_err(|m| self.error(m).on_record(row))
    }

    /// The value of the bare-identifier expression's field (found by its bound position).
    fn field_value<'r>(&self, field: &str, row: &'r Row) -> Result<&'r Datum, CelError> {
        self.with_bound(row.schema(), |b| b.field)
            .and_then(|i| row.values().get(i))
            .ok_or_else(|| self.error(format!("the record has no field `{field}`")))
    }

    /// `f` of the value for `row` when a plain field read or the native evaluator decides it,
    /// the value borrowing strings from the row or the expression (no `Datum` built); `None`
    /// when [`Expr::eval`] must decide (the interpreter, a missing field, nested JSON). When
    /// `Some`, `f` saw the value `eval` returns.
    pub fn eval_borrowed<R>(&self, row: &Row, f: impl FnOnce(FastValue<'_>) -> R) -> Option<R> {
        if self.field.is_some() {
            let value = FastValue::of(row.values().get(self.with_bound(row.schema(), |b| b.field)?)?)?;
            return Some(f(value));
        }
        self.fast.as_ref()?;
        self.with_bound(row.schema(), |b| b.fast.as_ref()?.eval(row).map(f))
    }

    /// The expression as a [`ColumnKernel`] for rows of `schema`, when it is one field read
    /// or `field op int literal` (`word`, `id % 100000`): what a batch loop evaluates per row
    /// with no evaluator dispatch, borrow or closure. `None` for any other expression (or a
    /// field `schema` lacks); then evaluate row by row. A kernel's value, when it gives one,
    /// is the value [`Expr::eval`] returns for that row; when it gives `None`, `eval` decides.
    pub fn column_kernel(&self, schema: &Arc<Schema>) -> Option<ColumnKernel> {
        self.with_bound(schema, |b| {
            if self.field.is_some() {
                return b.field.map(ColumnKernel::Column);
            }
            match b.fast.as_ref()? {
                FastExpr::Column(i) => Some(ColumnKernel::Column(*i)),
                FastExpr::ColumnOpInt(op, i, k) => Some(ColumnKernel::ColumnOpInt(*op, *i, *k)),
                _ => None,
            }
        })
    }

    /// Runs `f` on the fast paths bound to `schema`, binding them first when the last
    /// rows had another schema (a schema with the same names is adopted without rebinding).
    fn with_bound<R>(&self, schema: &Arc<Schema>, f: impl FnOnce(&Bound) -> R) -> R {
        let mut slot = self.bound.borrow_mut();
        match &mut *slot {
            Some(b) if Arc::ptr_eq(&b.schema, schema) => {}
            Some(b) if *b.schema == **schema => b.schema = schema.clone(),
            _ => {
                *slot = Some(Bound {
                    schema: schema.clone(),
                    field: self.field.as_deref().and_then(|f| schema.index_of(f)),
                    fast: self.fast.as_ref().map(|e| e.bind(schema)),
                    fast_object: self.fast_object.as_ref().map(|o| o.bind(schema)),
                });
            }
        }
        f(slot.as_ref().expect("bound above"))
    }

    /// Evaluates against a row and returns the result as a value. Map results become
    /// [`Datum::Json`] objects with their keys sorted (CEL maps are unordered). An error shows
    /// the record.
    pub fn eval(&self, row: &Row) -> Result<Datum, CelError> {
        self.eval_unshown(row).map_err(|e| e.on_record(row))
    }

    /// [`Expr::eval`] whose error does not show the record yet: for a caller that may discard
    /// it (it adds the record with [`CelError::on_record`] when it does not).
    pub fn eval_unshown(&self, row: &Row) -> Result<Datum, CelError> {
        if let Some(f) = &self.field {
            return self.field_value(f, row).cloned();
        }
        if let Some(value) = self.eval_borrowed(row, |v| v.to_datum()) {
            return Ok(value);
        }
        let out = self.eval_cel(row)?;
        datum_from_cel(&out).map_err(|m| self.error(m))
    }

    /// The result for `row` when it is a double that is not finite (±infinity, NaN), which
    /// [`Expr::eval`] gives as null (JSON has no such numbers); `None` for any other result or
    /// an error. For error messages: it evaluates again.
    pub fn non_finite_result(&self, row: &Row) -> Option<f64> {
        let non_finite = |f: f64| (!f.is_finite()).then_some(f);
        if let Some(found) = self.eval_borrowed(row, |v| match v {
            FastValue::Float(f) => non_finite(f),
            _ => None,
        }) {
            return found;
        }
        match self.eval_cel(row).ok()? {
            cel::Value::Float(f) => non_finite(f),
            _ => None,
        }
    }

    /// Evaluates against a row and returns the result as a record: a CEL map becomes a row of
    /// its keys, sorted (the schema comes from `cache` when the keys are the same as last
    /// time); any other result is a bare row. An error shows the record.
    pub fn eval_row(&self, row: &Row, cache: &mut SchemaCache) -> Result<Row, CelError> {
        self.eval_row_unshown(row, cache).map_err(|e| e.on_record(row))
    }

    fn eval_row_unshown(&self, row: &Row, cache: &mut SchemaCache) -> Result<Row, CelError> {
        if let Some(f) = &self.field {
            return Ok(Row::bare(self.field_value(f, row)?.clone()));
        }
        if self.fast_object.is_some()
            && let Some(built) = self.with_bound(row.schema(), |b| b.fast_object.as_ref()?.eval(row))
        {
            return Ok(built);
        }
        if let Some(value) = self.eval_borrowed(row, |v| v.to_datum()) {
            return Ok(Row::bare(value));
        }
        let out = self.eval_cel(row)?;
        let cel::Value::Map(map) = &out else {
            return datum_from_cel(&out).map(Row::bare).map_err(|m| self.error(m));
        };
        let mut entries: Vec<(String, &cel::Value)> = map.map.iter().map(|(k, v)| (key_string(k), v)).collect();
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        let mut builder = RowBuilder::with_capacity(entries.len());
        for (k, v) in entries {
            builder.push(CompactString::from(k), datum_from_cel(v).map_err(|m| self.error(m))?);
        }
        Ok(builder.finish(cache))
    }

    /// Evaluates to a boolean; a non-boolean result is an error. An error shows the record.
    pub fn eval_bool(&self, row: &Row) -> Result<bool, CelError> {
        self.eval_bool_unshown(row).map_err(|e| e.on_record(row))
    }

    fn eval_bool_unshown(&self, row: &Row) -> Result<bool, CelError> {
        if let Some(f) = &self.field {
            return match self.field_value(f, row)? {
                Datum::Bool(b) => Ok(*b),
                other => Err(self.error(format!("must be a boolean, got {other}"))),
            };
        }
        if let Some(Some(b)) = self.eval_borrowed(row, |v| match v {
            FastValue::Bool(b) => Some(b),
            _ => None,
        }) {
            return Ok(b);
        }
        match self.eval_cel(row)? {
            cel::Value::Bool(b) => Ok(b),
            other => {
                let shown = datum_from_cel(&other).map_or_else(|_| format!("{other:?}"), |d| d.to_string());
                Err(self.error(format!("must be a boolean, got {shown}")))
            }
        }
    }
}

/// Converts a row value to a CEL value.
pub fn datum_to_cel(v: &Datum) -> cel::Value {
    match v {
        Datum::Null => cel::Value::Null,
        Datum::Bool(b) => cel::Value::Bool(*b),
        Datum::Int(i) => cel::Value::Int(*i),
        Datum::UInt(u) => cel::Value::UInt(*u),
        Datum::Float(f) => cel::Value::Float(*f),
        Datum::Str(s) => cel::Value::String(Arc::new(s.to_string())),
        Datum::Json(j) => to_cel(j),
    }
}

/// Converts a row to a CEL value: a map of its fields, or its bare value.
pub fn row_to_cel(row: &Row) -> cel::Value {
    if let Some(v) = row.as_bare() {
        return datum_to_cel(v);
    }
    let map: HashMap<cel::objects::Key, cel::Value> = row
        .fields()
        .map(|(k, v)| (cel::objects::Key::String(Arc::new(k.to_string())), datum_to_cel(v)))
        .collect();
    cel::Value::Map(cel::objects::Map { map: Arc::new(map) })
}

/// Converts a CEL value to a row value (lists and maps as JSON, map keys sorted).
pub fn datum_from_cel(v: &cel::Value) -> Result<Datum, String> {
    Ok(match v {
        cel::Value::Int(i) => Datum::Int(*i),
        cel::Value::UInt(u) => Datum::from_u64(*u),
        cel::Value::Float(f) => Datum::from_f64(*f),
        cel::Value::String(s) => Datum::Str(CompactString::from(s.as_str())),
        cel::Value::Bool(b) => Datum::Bool(*b),
        cel::Value::Null => Datum::Null,
        other => Datum::from_json(from_cel(other)?),
    })
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

    fn row(v: Value) -> Row {
        Row::from_json(v)
    }

    fn eval(expr: &str, r: &Row) -> Value {
        compile(expr).unwrap().eval(r).unwrap().to_json()
    }

    #[test]
    fn evaluates_fields_record_and_unicode_lower() {
        let r = row(json!({"line": "Ÿes SIR", "n": 3}));
        assert_eq!(eval("line.lower()", &r), json!("ÿes sir"));
        assert_eq!(
            eval("{'line': line.lowerAscii(), 'm': n * 2}", &r),
            json!({"line": "Ÿes sir", "m": 6})
        );
        assert_eq!(eval("record.n + 1", &r), json!(4));
        assert!(compile("size(line) > 3").unwrap().eval_bool(&r).unwrap());
        assert_eq!(eval("n", &r), json!(3));
    }

    #[test]
    fn map_results_become_rows_with_sorted_keys_sharing_a_schema() {
        let expr = compile("{'z': n, 'a': line, 'nested': {'y': 1, 'b': [n]}}").unwrap();
        let mut cache = SchemaCache::default();
        let first = expr.eval_row(&row(json!({"line": "x", "n": 1})), &mut cache).unwrap();
        let input = row(json!({"line": "y", "n": 2}));
        let second = expr.eval_row(&input, &mut cache).unwrap();
        assert_eq!(
            serde_json::to_string(&first).unwrap(),
            r#"{"a":"x","nested":{"b":[1],"y":1},"z":1}"#
        );
        assert!(Arc::ptr_eq(first.schema(), second.schema()));
        let bare = compile("n * 2").unwrap().eval_row(&input, &mut cache).unwrap();
        assert_eq!(serde_json::to_string(&bare).unwrap(), "4");
        let field = compile("line").unwrap().eval_row(&input, &mut cache).unwrap();
        assert_eq!(serde_json::to_string(&field).unwrap(), r#""y""#);
        // A bare row is `record`, without field variables.
        assert_eq!(eval("record + 1", &bare), json!(5));
    }

    /// The fast paths bind fields to positions of the schema seen last: rows whose schemas
    /// change (other order, a missing field, a bare row, an equal schema built anew) still
    /// read their own fields, and a missing field is still the interpreter's error.
    #[test]
    fn fields_are_read_by_the_position_of_each_rows_own_schema() {
        let exprs = ["a % 10", "b", "{'x': a, 'y': b}", "a > 3 && b == 'q'"];
        let rows = [
            json!({"a": 13, "b": "q"}),
            json!({"b": "r", "a": 24}),
            json!({"a": 13, "b": "q"}),
            json!({"c": 1, "b": "s", "a": 5}),
            json!({"a": 1}),
            json!(7),
        ];
        for source in exprs {
            let expr = compile(source).unwrap();
            // Twice through, so each schema is met after another one.
            for (i, r) in rows.iter().chain(rows.iter()).enumerate() {
                let r = row(r.clone());
                let fresh = compile(source).unwrap();
                let got = expr.eval(&r).map(|d| d.to_json());
                let want = fresh.eval_interpreted(&r);
                match (got, want) {
                    (Ok(got), Ok(want)) => assert_eq!(got, want, "`{source}` on row {i} {r}"),
                    (Err(_), Err(_)) => {}
                    (got, want) => panic!("`{source}` on row {i} {r}: {got:?} vs the interpreter's {want:?}"),
                }
                let mut cache = SchemaCache::default();
                assert_eq!(
                    expr.eval_row(&r, &mut cache).ok(),
                    fresh.eval_row(&r, &mut cache).ok(),
                    "`{source}` as a row on {r}"
                );
            }
        }
    }

    #[test]
    fn errors_are_reported_not_panics() {
        let empty = row(json!({}));
        assert!(matches!(compile("line +").unwrap_err(), CelError::Compile { .. }));
        let e = compile("missing").unwrap().eval(&empty).unwrap_err();
        assert!(e.to_string().contains("no field `missing`"), "{e}");
        let e = compile("missing + 1").unwrap().eval(&empty).unwrap_err();
        assert!(matches!(e, CelError::Eval { .. }));
        let e = compile("1").unwrap().eval_bool(&empty).unwrap_err();
        assert!(e.to_string().contains("boolean, got 1"), "{e}");
        let e = compile("s").unwrap().eval_bool(&row(json!({"s": "x"}))).unwrap_err();
        assert!(e.to_string().contains("boolean, got \"x\""), "{e}");
    }

    /// [`Expr::eval_unshown`]'s error shows no record; [`CelError::on_record`] adds it once (a
    /// second call keeps the first record) and leaves a compile error as it is.
    #[test]
    fn an_unshown_error_gets_its_record_once() {
        let first = row(json!({"a": 1}));
        let e = compile("a / 0").unwrap().eval_unshown(&first).unwrap_err();
        assert!(e.to_string().starts_with("CEL expression `a / 0` failed: "), "{e}");
        let shown = e.on_record(&first);
        assert!(
            shown
                .to_string()
                .starts_with(r#"CEL expression `a / 0` failed on the record {"a":1}: "#),
            "{shown}"
        );
        assert_eq!(shown.clone().on_record(&row(json!({"b": 2}))), shown);
        let compile_error = compile("a +").unwrap_err();
        assert_eq!(compile_error.clone().on_record(&first), compile_error);
    }

    /// An evaluation error names the record it failed on (its JSON text), on every path: the
    /// interpreter, a bare field read, a non-boolean filter result, a row result; a long
    /// record is cut to [`RECORD_SHOWN_CHARS`] characters at a character boundary.
    #[test]
    fn evaluation_errors_name_the_record() {
        let one = row(json!({"zone": 7, "riders": 1}));
        // (expression, how it is evaluated, part of the message after the record)
        type Eval = fn(&Expr, &Row) -> Result<(), CelError>;
        let rows: [(&str, Eval, &str); 4] = [
            (
                "100 / (riders - 1) > 0",
                |e, r| e.eval_bool(r).map(drop),
                "division by zero",
            ),
            ("fare", |e, r| e.eval(r).map(drop), "no field `fare`"),
            ("riders", |e, r| e.eval_bool(r).map(drop), "must be a boolean, got 1"),
            (
                "{'x': fare + 1}",
                |e, r| e.eval_row(r, &mut SchemaCache::default()).map(drop),
                "",
            ),
        ];
        for (source, eval, message_end) in rows {
            let e = eval(&compile(source).unwrap(), &one).unwrap_err().to_string();
            let start = format!("CEL expression `{source}` failed on the record {{\"zone\":7,\"riders\":1}}: ");
            assert!(e.starts_with(&start), "`{source}`: {e}");
            assert!(e[start.len()..].to_lowercase().contains(message_end), "`{source}`: {e}");
        }
        let long = row(json!({"text": "é".repeat(400)}));
        let e = compile("text + 1").unwrap().eval(&long).unwrap_err();
        let CelError::Eval { record, .. } = &e else {
            panic!("{e:?}")
        };
        assert_eq!(record.chars().count(), RECORD_SHOWN_CHARS + 1, "{record}");
        assert!(
            record.starts_with("{\"text\":\"éé") && record.ends_with("é…"),
            "{record}"
        );
    }
}
