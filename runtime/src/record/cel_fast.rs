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

/// An expression that reads one field of a row by position, optionally applying an operator
/// with an `int` literal (`word`, `id % 100000`), resolved for one schema
/// ([`Expr::column_kernel`](super::cel::Expr::column_kernel)). A batch loop evaluates it per
/// row straight from the row's values; it gives what [`FastExpr::Column`] and
/// [`FastExpr::ColumnOpInt`] give (`None`: the interpreter decides).
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum ColumnKernel {
    /// The field at this position.
    Column(usize),
    /// `field op literal`.
    ColumnOpInt(BinaryOp, usize, i64),
}

impl ColumnKernel {
    /// The value for a row whose values (of the schema the kernel was made for) are `values`.
    #[inline]
    pub fn eval<'a>(&self, values: &'a [Datum]) -> Option<FastValue<'a>> {
        match *self {
            ColumnKernel::Column(i) => FastValue::of(values.get(i)?),
            ColumnKernel::ColumnOpInt(op, i, k) => match values.get(i)? {
                // The common case (`id % 100000`) without building the operand values.
                Datum::Int(x) => int_binary(op, *x, k),
                other => binary(op, FastValue::of(other)?, FastValue::Int(k)),
            },
        }
    }

    /// The position of the field the kernel reads.
    pub fn position(&self) -> usize {
        match *self {
            ColumnKernel::Column(i) | ColumnKernel::ColumnOpInt(_, i, _) => i,
        }
    }

    /// The value for a row whose field at [`ColumnKernel::position`] is the integer `x`: what
    /// [`ColumnKernel::eval`] gives for `Datum::Int(x)` there (an integer column's kernel).
    #[inline]
    pub fn eval_int(&self, x: i64) -> Option<FastValue<'static>> {
        match *self {
            ColumnKernel::Column(_) => Some(FastValue::Int(x)),
            ColumnKernel::ColumnOpInt(op, _, k) => int_binary(op, x, k),
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
/// [`binary`] on two `int`s: checked arithmetic (overflow, division or modulo by zero give
/// `None`), comparisons.
#[inline(always)]
fn int_binary<'a>(op: BinaryOp, x: i64, y: i64) -> Option<FastValue<'a>> {
    use std::cmp::Ordering;
    let ordering = x.cmp(&y);
    Some(match op {
        BinaryOp::Add => FastValue::Int(x.checked_add(y)?),
        BinaryOp::Subtract => FastValue::Int(x.checked_sub(y)?),
        BinaryOp::Multiply => FastValue::Int(x.checked_mul(y)?),
        BinaryOp::Divide => FastValue::Int(x.checked_div(y)?),
        BinaryOp::Modulo => FastValue::Int(x.checked_rem(y)?),
        BinaryOp::Equal => FastValue::Bool(ordering == Ordering::Equal),
        BinaryOp::NotEqual => FastValue::Bool(ordering != Ordering::Equal),
        BinaryOp::Less => FastValue::Bool(ordering == Ordering::Less),
        BinaryOp::LessEqual => FastValue::Bool(ordering != Ordering::Greater),
        BinaryOp::Greater => FastValue::Bool(ordering == Ordering::Greater),
        BinaryOp::GreaterEqual => FastValue::Bool(ordering != Ordering::Less),
    })
}

fn binary<'a>(op: BinaryOp, a: FastValue<'a>, b: FastValue<'a>) -> Option<FastValue<'a>> {
    use FastValue::{Bool, Float, Int, Str};
    use std::cmp::Ordering;
    let ordering = match (a, b) {
        (Int(x), Int(y)) => return int_binary(op, x, y),
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
#[path = "cel_fast_tests.rs"]
mod tests;
