//! A native evaluator for the subset of CEL that hot paths use (`id % 100000`,
//! `auction % 123 == 0`, `0.908 * double(price)`, `{'auction': auction, 'price': price}`),
//! beside the `cel` crate's interpreter, which stays the reference.
//!
//! The interpreter builds a context per record (every field converted, strings copied), which
//! costs more than the arithmetic it then does. This evaluator reads fields in place. It is
//! deliberately partial: an expression outside the subset is not compiled ([`FastExpr::compile`]
//! gives `None`), and at run time any case whose CEL meaning is not plainly the same as Rust's
//! (integer overflow, division or modulo by zero, operands of different types, `null`,
//! unsigned integers, NaN comparisons, a missing field) gives `None`, and the caller evaluates
//! the expression with the interpreter instead, which produces the value or the error. So a
//! result of this module is always the interpreter's result; `cel_fast_agrees_with_the_interpreter`
//! checks that on random expressions and rows.
//!
//! The subset: record fields, `int`, `double`, `string` and `bool` literals, `+ - * / %`
//! (`+` on numbers only), `== != < <= > >=`, `&& || !`, unary `-`, `c ? a : b`, `double(x)` of
//! numbers, and (for `map`) an object literal with string-literal keys whose values are in the
//! subset.

use super::row::{Datum, Row, Schema};
use cel::common::ast::{EntryExpr, Expr, LiteralValue, operators};
use compact_str::CompactString;
use std::sync::Arc;

/// A compiled expression of the subset.
#[derive(Debug, Clone, PartialEq)]
pub enum FastExpr {
    /// A record field by name.
    Field(CompactString),
    /// A record field by position, in an expression bound to one schema ([`FastExpr::bind`]):
    /// valid only for rows of that schema.
    Column(usize),
    /// `column op literal` in a bound expression (`id % 100000`, `auction % 123`): the
    /// operator applied to a field by position and an `int` literal without evaluating two
    /// operand nodes.
    ColumnOpInt(BinaryOp, usize, i64),
    /// An `int` literal.
    Int(i64),
    /// A `double` literal.
    Float(f64),
    /// A `string` literal.
    Str(String),
    /// A `bool` literal.
    Bool(bool),
    /// An arithmetic or comparison operator on two operands.
    Binary(BinaryOp, Box<FastExpr>, Box<FastExpr>),
    /// `a && b`.
    And(Box<FastExpr>, Box<FastExpr>),
    /// `a || b`.
    Or(Box<FastExpr>, Box<FastExpr>),
    /// `!a`.
    Not(Box<FastExpr>),
    /// `-a`.
    Negate(Box<FastExpr>),
    /// `c ? a : b`.
    Conditional(Box<FastExpr>, Box<FastExpr>, Box<FastExpr>),
    /// `double(a)`.
    ToDouble(Box<FastExpr>),
}

/// Binary operators of the subset.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BinaryOp {
    /// `+`
    Add,
    /// `-`
    Subtract,
    /// `*`
    Multiply,
    /// `/`
    Divide,
    /// `%`
    Modulo,
    /// `==`
    Equal,
    /// `!=`
    NotEqual,
    /// `<`
    Less,
    /// `<=`
    LessEqual,
    /// `>`
    Greater,
    /// `>=`
    GreaterEqual,
}

impl BinaryOp {
    fn from_function(name: &str) -> Option<BinaryOp> {
        Some(match name {
            operators::ADD => BinaryOp::Add,
            operators::SUBSTRACT => BinaryOp::Subtract,
            operators::MULTIPLY => BinaryOp::Multiply,
            operators::DIVIDE => BinaryOp::Divide,
            operators::MODULO => BinaryOp::Modulo,
            operators::EQUALS => BinaryOp::Equal,
            operators::NOT_EQUALS => BinaryOp::NotEqual,
            operators::LESS => BinaryOp::Less,
            operators::LESS_EQUALS => BinaryOp::LessEqual,
            operators::GREATER => BinaryOp::Greater,
            operators::GREATER_EQUALS => BinaryOp::GreaterEqual,
            _ => return None,
        })
    }
}

/// A value during evaluation; strings are borrowed from the row or the expression.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum FastValue<'a> {
    /// `null` (only passed through: every operator on it falls back).
    Null,
    /// `bool`.
    Bool(bool),
    /// `int`.
    Int(i64),
    /// `uint` (only passed through).
    UInt(u64),
    /// `double`.
    Float(f64),
    /// `string`.
    Str(&'a str),
}

impl<'a> FastValue<'a> {
    /// A row value, borrowed; `None` for nested JSON, which the subset does not handle.
    pub fn of(datum: &'a Datum) -> Option<FastValue<'a>> {
        Some(match datum {
            Datum::Null => FastValue::Null,
            Datum::Bool(b) => FastValue::Bool(*b),
            Datum::Int(i) => FastValue::Int(*i),
            Datum::UInt(u) => FastValue::UInt(*u),
            Datum::Float(f) => FastValue::Float(*f),
            Datum::Str(s) => FastValue::Str(s.as_str()),
            Datum::Json(_) => return None,
        })
    }

    /// The value as a row value (a non-finite double becomes `null`, as the interpreter's
    /// results do).
    pub fn to_datum(self) -> Datum {
        match self {
            FastValue::Null => Datum::Null,
            FastValue::Bool(b) => Datum::Bool(b),
            FastValue::Int(i) => Datum::Int(i),
            FastValue::UInt(u) => Datum::from_u64(u),
            FastValue::Float(f) => Datum::from_f64(f),
            FastValue::Str(s) => Datum::Str(CompactString::from(s)),
        }
    }
}

impl FastExpr {
    /// Compiles a parsed expression, or `None` when it is outside the subset.
    pub fn compile(expr: &Expr) -> Option<FastExpr> {
        Some(match expr {
            Expr::Ident(name) if name != "record" && !name.starts_with('@') => FastExpr::Field(name.into()),
            Expr::Literal(LiteralValue::Int(i)) => FastExpr::Int(*i.inner()),
            Expr::Literal(LiteralValue::Double(f)) => FastExpr::Float(*f.inner()),
            Expr::Literal(LiteralValue::String(s)) => FastExpr::Str(s.inner().to_string()),
            Expr::Literal(LiteralValue::Boolean(b)) => FastExpr::Bool(*b.inner()),
            Expr::Call(call) if call.target.is_none() => {
                let args = call
                    .args
                    .iter()
                    .map(|a| FastExpr::compile(&a.expr).map(Box::new))
                    .collect::<Option<Vec<_>>>()?;
                let mut args = args.into_iter();
                let (first, second, third) = (args.next(), args.next(), args.next());
                match (call.func_name.as_str(), first, second, third) {
                    (operators::LOGICAL_AND, Some(a), Some(b), None) => FastExpr::And(a, b),
                    (operators::LOGICAL_OR, Some(a), Some(b), None) => FastExpr::Or(a, b),
                    (operators::LOGICAL_NOT, Some(a), None, None) => FastExpr::Not(a),
                    (operators::NEGATE, Some(a), None, None) => FastExpr::Negate(a),
                    (operators::CONDITIONAL, Some(c), Some(a), Some(b)) => FastExpr::Conditional(c, a, b),
                    ("double", Some(a), None, None) => FastExpr::ToDouble(a),
                    (name, Some(a), Some(b), None) => FastExpr::Binary(BinaryOp::from_function(name)?, a, b),
                    _ => return None,
                }
            }
            _ => return None,
        })
    }

    /// Evaluates against `row`; `None` when the interpreter must decide (see the module docs).
    pub fn eval<'a>(&'a self, row: &'a Row) -> Option<FastValue<'a>> {
        Some(match self {
            FastExpr::Field(name) => FastValue::of(row.get(name)?)?,
            FastExpr::Column(i) => FastValue::of(row.values().get(*i)?)?,
            FastExpr::ColumnOpInt(op, i, k) => binary(*op, FastValue::of(row.values().get(*i)?)?, FastValue::Int(*k))?,
            FastExpr::Int(i) => FastValue::Int(*i),
            FastExpr::Float(f) => FastValue::Float(*f),
            FastExpr::Str(s) => FastValue::Str(s),
            FastExpr::Bool(b) => FastValue::Bool(*b),
            FastExpr::Binary(op, a, b) => binary(*op, a.eval(row)?, b.eval(row)?)?,
            // CEL's `&&` and `||` are commutative over errors: `false && error` is `false`.
            // Only a decided left side short-cuts here; anything else goes to the interpreter.
            FastExpr::And(a, b) => match a.eval(row)? {
                FastValue::Bool(false) => FastValue::Bool(false),
                FastValue::Bool(true) => FastValue::Bool(as_bool(b.eval(row)?)?),
                _ => return None,
            },
            FastExpr::Or(a, b) => match a.eval(row)? {
                FastValue::Bool(true) => FastValue::Bool(true),
                FastValue::Bool(false) => FastValue::Bool(as_bool(b.eval(row)?)?),
                _ => return None,
            },
            FastExpr::Not(a) => FastValue::Bool(!as_bool(a.eval(row)?)?),
            FastExpr::Negate(a) => match a.eval(row)? {
                FastValue::Int(i) => FastValue::Int(i.checked_neg()?),
                FastValue::Float(f) => FastValue::Float(-f),
                _ => return None,
            },
            FastExpr::Conditional(c, a, b) => {
                if as_bool(c.eval(row)?)? {
                    a.eval(row)?
                } else {
                    b.eval(row)?
                }
            }
            FastExpr::ToDouble(a) => match a.eval(row)? {
                FastValue::Int(i) => FastValue::Float(i as f64),
                FastValue::Float(f) => FastValue::Float(f),
                _ => return None,
            },
        })
    }
}

impl FastExpr {
    /// The expression for rows of `schema`: every field it has becomes a [`FastExpr::Column`]
    /// (read by position, no name comparison); a field it lacks stays a
    /// [`FastExpr::Field`], whose evaluation then falls back to the interpreter (which
    /// reports the missing field). Evaluate the result only against rows of `schema`.
    pub fn bind(&self, schema: &Schema) -> FastExpr {
        let bind = |e: &FastExpr| Box::new(e.bind(schema));
        match self {
            FastExpr::Field(name) => match schema.index_of(name) {
                Some(i) => FastExpr::Column(i),
                None => FastExpr::Field(name.clone()),
            },
            FastExpr::Column(_)
            | FastExpr::ColumnOpInt(..)
            | FastExpr::Int(_)
            | FastExpr::Float(_)
            | FastExpr::Str(_)
            | FastExpr::Bool(_) => self.clone(),
            FastExpr::Binary(op, a, b) => match (a.bind(schema), &**b) {
                (FastExpr::Column(i), FastExpr::Int(k)) => FastExpr::ColumnOpInt(*op, i, *k),
                (a, b) => FastExpr::Binary(*op, Box::new(a), Box::new(b.bind(schema))),
            },
            FastExpr::And(a, b) => FastExpr::And(bind(a), bind(b)),
            FastExpr::Or(a, b) => FastExpr::Or(bind(a), bind(b)),
            FastExpr::Not(a) => FastExpr::Not(bind(a)),
            FastExpr::Negate(a) => FastExpr::Negate(bind(a)),
            FastExpr::Conditional(c, a, b) => FastExpr::Conditional(bind(c), bind(a), bind(b)),
            FastExpr::ToDouble(a) => FastExpr::ToDouble(bind(a)),
        }
    }
}

fn as_bool(value: FastValue<'_>) -> Option<bool> {
    match value {
        FastValue::Bool(b) => Some(b),
        _ => None,
    }
}

/// Applies `op` where operands of the same type give the same result as CEL's; `None` for
/// everything else (mixed types, overflow, division by zero, NaN in comparisons, `+` on
/// strings, which would allocate and is left to the interpreter).
fn binary<'a>(op: BinaryOp, a: FastValue<'a>, b: FastValue<'a>) -> Option<FastValue<'a>> {
    use FastValue::{Bool, Float, Int, Str};
    use std::cmp::Ordering;
    let ordering = match (a, b) {
        (Int(x), Int(y)) => {
            let arithmetic = match op {
                BinaryOp::Add => Some(x.checked_add(y)),
                BinaryOp::Subtract => Some(x.checked_sub(y)),
                BinaryOp::Multiply => Some(x.checked_mul(y)),
                BinaryOp::Divide => Some(x.checked_div(y)),
                BinaryOp::Modulo => Some(x.checked_rem(y)),
                _ => None,
            };
            if let Some(result) = arithmetic {
                return result.map(Int);
            }
            x.cmp(&y)
        }
        (Float(x), Float(y)) => {
            let arithmetic = match op {
                BinaryOp::Add => Some(x + y),
                BinaryOp::Subtract => Some(x - y),
                BinaryOp::Multiply => Some(x * y),
                BinaryOp::Divide => Some(x / y),
                BinaryOp::Modulo => return None,
                _ => None,
            };
            if let Some(result) = arithmetic {
                return Some(Float(result));
            }
            x.partial_cmp(&y)?
        }
        (Str(x), Str(y)) => x.cmp(y),
        (Bool(x), Bool(y)) => x.cmp(&y),
        _ => return None,
    };
    let result = match op {
        BinaryOp::Equal => ordering == Ordering::Equal,
        BinaryOp::NotEqual => ordering != Ordering::Equal,
        BinaryOp::Less => ordering == Ordering::Less,
        BinaryOp::LessEqual => ordering != Ordering::Greater,
        BinaryOp::Greater => ordering == Ordering::Greater,
        BinaryOp::GreaterEqual => ordering != Ordering::Less,
        // Arithmetic on strings or booleans.
        _ => return None,
    };
    Some(Bool(result))
}

/// An object literal with string-literal keys whose values are [`FastExpr`]s, compiled to
/// build its row directly: fields sorted by key, as the interpreter's map results are.
#[derive(Debug, Clone)]
pub struct FastObject {
    schema: Arc<Schema>,
    values: Vec<FastExpr>,
}

impl FastObject {
    /// Compiles `{'k': v, ...}`; `None` for any other expression, a key that is not a string
    /// literal, a repeated key (an error for the interpreter), an optional entry, or a value
    /// outside the subset.
    pub fn compile(expr: &Expr) -> Option<FastObject> {
        let Expr::Map(map) = expr else {
            return None;
        };
        let mut entries = Vec::with_capacity(map.entries.len());
        for entry in &map.entries {
            let EntryExpr::MapEntry(e) = &entry.expr else {
                return None;
            };
            let Expr::Literal(LiteralValue::String(key)) = &e.key.expr else {
                return None;
            };
            if e.optional {
                return None;
            }
            entries.push((CompactString::from(key.inner()), FastExpr::compile(&e.value.expr)?));
        }
        entries.sort_by(|a, b| a.0.cmp(&b.0));
        if entries.windows(2).any(|w| w[0].0 == w[1].0) {
            return None;
        }
        let (names, values): (Vec<_>, Vec<_>) = entries.into_iter().unzip();
        Some(FastObject {
            schema: Schema::new(names),
            values,
        })
    }

    /// The literal for rows of `schema` (each value [`FastExpr::bind`]-ed to it).
    pub fn bind(&self, schema: &Schema) -> FastObject {
        FastObject {
            schema: self.schema.clone(),
            values: self.values.iter().map(|v| v.bind(schema)).collect(),
        }
    }

    /// The row the literal builds from `row`, or `None` when the interpreter must decide.
    pub fn eval(&self, row: &Row) -> Option<Row> {
        // Sized up front: collecting into `Option<Vec<_>>` knows no lower bound and grows the
        // vector (a reallocation per row of five fields).
        let mut values = Vec::with_capacity(self.values.len());
        for v in &self.values {
            values.push(v.eval(row)?.to_datum());
        }
        Some(Row::new_unchecked(self.schema.clone(), values))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::cel::compile;
    use rand::rngs::StdRng;
    use rand::{Rng, SeedableRng};
    use serde_json::{Value, json};

    fn fast(source: &str) -> Option<FastExpr> {
        FastExpr::compile(&compile(source).unwrap().syntax().expr)
    }

    #[test]
    fn compiles_the_subset_and_nothing_else() {
        let inside = [
            "id % 100000",
            "auction % 123 == 0",
            "0.908 * double(price)",
            "a > 1 && !(s == 'x') || p",
            "-a + (p ? 1 : 2)",
        ];
        for source in inside {
            assert!(fast(source).is_some(), "{source}");
        }
        let outside = [
            "record.n + 1",
            "line.lower()",
            "size(line) > 3",
            "tags.exists(t, t == kind)",
            "[a, b]",
            "1u + u",
            "null == n",
            "int(x)",
            "s in ['a']",
        ];
        for source in outside {
            assert!(fast(source).is_none(), "{source}");
        }
        let object = |source: &str| FastObject::compile(&compile(source).unwrap().syntax().expr);
        assert!(object("{'price': 0.908 * double(price), 'auction': auction}").is_some());
        assert!(object("{'w': word.lower()}").is_none());
        assert!(object("{k: 1}").is_none());
        assert!(object("a + 1").is_none());
    }

    #[test]
    fn falls_back_where_cel_differs_from_rust() {
        let row = Row::from_json(json!({"a": i64::MAX, "z": 0, "x": 1.5, "s": "s", "u": u64::MAX, "j": {"k": 1}}));
        for source in [
            "a + 1",
            "a * 2",
            "a / z",
            "a % z",
            "-(a + 0) - 2",
            "a + x",
            "s + s",
            "x % x",
            "u + 1",
            "j == j",
            "missing + 1",
        ] {
            assert_eq!(fast(source).unwrap().eval(&row), None, "{source}");
        }
        assert_eq!(fast("a - 1").unwrap().eval(&row), Some(FastValue::Int(i64::MAX - 1)));
        assert_eq!(
            fast("x / 0.0").unwrap().eval(&row).map(FastValue::to_datum),
            Some(Datum::Null)
        );
    }

    const INTS: [i64; 9] = [0, 1, -1, 2, 7, 123, 100_000, i64::MAX, i64::MIN];
    const FLOATS: [f64; 7] = [0.0, -0.0, 1.5, 0.908, 1e308, -2.5, 3.0];
    const STRINGS: [&str; 5] = ["", "a", "b", "ab", "é"];

    fn random_row(rng: &mut StdRng) -> Row {
        let mut int = || {
            if rng.random_bool(0.3) {
                rng.random_range(-1000..1000)
            } else {
                INTS[rng.random_range(0..INTS.len())]
            }
        };
        let (a, b) = (int(), int());
        let mut float = || FLOATS[rng.random_range(0..FLOATS.len())];
        let (x, y) = (float(), float());
        let mut string = || STRINGS[rng.random_range(0..STRINGS.len())];
        let (s, t) = (string(), string());
        Row::from_json(json!({
            "a": a, "b": b, "x": x, "y": y, "s": s, "t": t,
            "p": rng.random_bool(0.5), "q": rng.random_bool(0.5),
            "n": null, "u": u64::MAX, "j": {"k": [1]},
        }))
    }

    /// A random expression, mostly of type `kind` (0 int, 1 double, 2 string, 3 bool) so that
    /// most of them are in the subset and reach edge values; one operand in ten is of any type
    /// or a null, uint, JSON or missing field, to exercise the fall-backs.
    fn random_expression(rng: &mut StdRng, depth: u32, kind: u32) -> String {
        let kind = if rng.random_bool(0.1) {
            rng.random_range(0..5)
        } else {
            kind
        };
        if depth == 0 || rng.random_bool(0.2) {
            let pick = |rng: &mut StdRng, names: &[&str]| names[rng.random_range(0..names.len())].to_string();
            return match (kind, rng.random_bool(0.5)) {
                (0, true) => pick(rng, &["a", "b"]),
                (0, false) => {
                    let i = INTS[rng.random_range(0..INTS.len() - 1)];
                    if i < 0 { format!("({i})") } else { i.to_string() }
                }
                (1, true) => pick(rng, &["x", "y"]),
                (1, false) => format!("{:?}", FLOATS[rng.random_range(0..FLOATS.len())]),
                (2, true) => pick(rng, &["s", "t"]),
                (2, false) => format!("'{}'", STRINGS[rng.random_range(0..STRINGS.len())]),
                (3, true) => pick(rng, &["p", "q"]),
                (3, false) => pick(rng, &["true", "false"]),
                _ => pick(rng, &["n", "u", "j", "m"]),
            };
        }
        macro_rules! sub {
            ($kind:expr) => {{
                let kind = $kind;
                random_expression(rng, depth - 1, kind)
            }};
        }
        match kind {
            0 | 1 => {
                let op = ["+", "-", "*", "/", "%"][rng.random_range(0..5)];
                match rng.random_range(0..10) {
                    0 => format!("-({})", sub!(kind)),
                    1 => format!("({}) ? ({}) : ({})", sub!(3), sub!(kind), sub!(kind)),
                    2 if kind == 1 => format!("double({})", sub!(rng.random_range(0..2))),
                    _ => format!("({}) {op} ({})", sub!(kind), sub!(kind)),
                }
            }
            3 => match rng.random_range(0..8) {
                0 => format!("!({})", sub!(3)),
                1 => format!("({}) && ({})", sub!(3), sub!(3)),
                2 => format!("({}) || ({})", sub!(3), sub!(3)),
                _ => {
                    let op = ["==", "!=", "<", "<=", ">", ">="][rng.random_range(0..6)];
                    let operands = rng.random_range(0..4);
                    format!("({}) {op} ({})", sub!(operands), sub!(operands))
                }
            },
            _ => format!("({}) ? ({}) : ({})", sub!(3), sub!(kind), sub!(kind)),
        }
    }

    /// Differential test: wherever the fast evaluator gives a value, the interpreter gives the
    /// same value; wherever the interpreter fails, the fast evaluator falls back. Rows and
    /// expressions are random over edge values (overflow, zero, NaN-producing doubles, mixed
    /// types, null, uint, JSON, missing fields), seeded so a failure replays.
    #[test]
    fn cel_fast_agrees_with_the_interpreter() {
        let mut rng = StdRng::seed_from_u64(20261130);
        let (mut decided, mut total) = (0, 0);
        for _ in 0..4000 {
            let kind = rng.random_range(0..4);
            let source = random_expression(&mut rng, 3, kind);
            let expr = compile(&source).unwrap();
            let Some(fast) = FastExpr::compile(&expr.syntax().expr) else {
                continue;
            };
            for _ in 0..5 {
                let row = random_row(&mut rng);
                total += 1;
                let interpreted = expr.eval_interpreted(&row);
                // Bound to the row's schema (fields by position), it decides the same.
                let bound = fast.bind(row.schema());
                assert_eq!(
                    format!("{:?}", bound.eval(&row)),
                    format!("{:?}", fast.eval(&row)),
                    "`{source}` bound on {row}"
                );
                if let Some(value) = fast.eval(&row) {
                    decided += 1;
                    let interpreted = interpreted.unwrap_or_else(|e| {
                        panic!("`{source}` on {row}: fast gave {value:?}, the interpreter failed: {e}")
                    });
                    assert_eq!(value.to_datum().to_json(), interpreted, "`{source}` on {row}");
                }
            }
        }
        assert!(total > 10_000, "only {total} evaluations were in the subset");
        assert!(decided * 4 > total, "the fast path decided only {decided} of {total}");
    }

    /// Binding turns fields into positions and `field op int` into one node; a field the
    /// schema lacks stays a name (the interpreter reports it).
    #[test]
    fn binding_resolves_fields_to_positions() {
        let row = Row::from_json(json!({"key": "k", "id": 123_456}));
        for (source, bound) in [
            ("id % 100000", FastExpr::ColumnOpInt(BinaryOp::Modulo, 1, 100_000)),
            ("key", FastExpr::Column(0)),
            ("missing % 2", fast("missing % 2").unwrap()),
            (
                "2 * id",
                FastExpr::Binary(
                    BinaryOp::Multiply,
                    Box::new(FastExpr::Int(2)),
                    Box::new(FastExpr::Column(1)),
                ),
            ),
        ] {
            let unbound = fast(source).unwrap();
            assert_eq!(unbound.bind(row.schema()), bound, "{source}");
            assert_eq!(bound.eval(&row), unbound.eval(&row), "{source}");
        }
        assert_eq!(
            fast("id % 100000").unwrap().bind(row.schema()).eval(&row),
            Some(FastValue::Int(23_456))
        );
    }

    #[test]
    fn fast_objects_build_the_interpreters_rows() {
        let mut rng = StdRng::seed_from_u64(7);
        for source in [
            "{'auction': a, 'price': 0.908 * double(b), 'bidder': s}",
            "{'z': x * y, 'a': p && q, 'm': t}",
            "{'k': a % 123 == 0, 'n': n, 'u': u}",
        ] {
            let expr = compile(source).unwrap();
            let object = FastObject::compile(&expr.syntax().expr).unwrap();
            for _ in 0..200 {
                let row = random_row(&mut rng);
                let interpreted = expr.eval_interpreted(&row);
                assert_eq!(
                    object.bind(row.schema()).eval(&row),
                    object.eval(&row),
                    "`{source}` on {row}"
                );
                if let Some(built) = object.eval(&row) {
                    let interpreted: Value = interpreted.unwrap();
                    assert_eq!(
                        serde_json::to_string(&built).unwrap(),
                        interpreted.to_string(),
                        "`{source}` on {row}"
                    );
                }
            }
        }
    }
}
