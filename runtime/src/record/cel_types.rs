//! A small, conservative type inference over a CEL expression's syntax tree, for plan-time
//! checks: given the types of the record's fields, the type of the expression's value and the
//! type errors it certainly has.
//!
//! The `cel` crate type-checks nothing before it runs (every value is dynamic), so this walks
//! the tree itself. It reports only what fails (or is always false) for every record whose
//! fields have the given types: arithmetic (`+ - * / %`, unary `-`) on a string or a bool,
//! `+` of a string and a non-string, an ordering (`< <= > >=`) or equality (`== !=`) between
//! a string and a number or a bool. `int` and `float` operands are never reported (a JSON field
//! may hold either from record to record). Anything the walk cannot follow — macros, map and
//! list values, function results it does not know, `record`, fields of unknown type — is
//! [`FieldType::Any`], which never causes an error.

use crate::job::types::FieldType;
use cel::common::ast::{EntryExpr, Expr, LiteralValue};
use cel::parser::Expression;

/// The type of `expr`'s value, given `field_type(name)` for each record field (`Any` when
/// unknown). Errors: a message naming the operator and the operands' types, and what to do.
pub fn infer(expr: &Expression, field_type: &dyn Fn(&str) -> FieldType) -> Result<FieldType, String> {
    infer_expr(&expr.expr, field_type)
}

/// [`infer`] for a part of an expression's tree (an entry of an object literal).
pub fn infer_expr(expr: &Expr, field_type: &dyn Fn(&str) -> FieldType) -> Result<FieldType, String> {
    Walker {
        field_type,
        bound: Vec::new(),
    }
    .walk(expr)
}

struct Walker<'f> {
    field_type: &'f dyn Fn(&str) -> FieldType,
    /// Variables a comprehension binds (their types are not followed).
    bound: Vec<String>,
}

/// How an operand is named in a message: a field by name, anything else by its type.
fn describe(expr: &Expr, t: FieldType) -> String {
    match expr {
        Expr::Ident(name) => format!("field `{name}` ({})", t.name()),
        Expr::Literal(_) => format!("{} {} literal", article(t), t.name()),
        _ => format!("{} {} value", article(t), t.name()),
    }
}

fn article(t: FieldType) -> &'static str {
    if matches!(t, FieldType::Int | FieldType::Any) {
        "an"
    } else {
        "a"
    }
}

const CONVERT: &str = "CEL does not convert between types: convert with `int(x)`, `double(x)` or `string(x)`, \
                       or declare the field's type in the source's `schema`";

impl Walker<'_> {
    fn walk(&mut self, expr: &Expr) -> Result<FieldType, String> {
        Ok(match expr {
            Expr::Unspecified => FieldType::Any,
            Expr::Literal(l) => match l {
                LiteralValue::Boolean(_) => FieldType::Bool,
                LiteralValue::Int(_) | LiteralValue::UInt(_) => FieldType::Int,
                LiteralValue::Double(_) => FieldType::Float,
                LiteralValue::String(_) => FieldType::String,
                LiteralValue::Null | LiteralValue::Bytes(_) => FieldType::Any,
            },
            Expr::Ident(name) => {
                if self.bound.iter().any(|b| b == name) || name == "record" {
                    FieldType::Any
                } else {
                    (self.field_type)(name)
                }
            }
            Expr::Select(s) => {
                self.walk(&s.operand.expr)?;
                if s.test { FieldType::Bool } else { FieldType::Any }
            }
            Expr::List(list) => {
                for e in &list.elements {
                    self.walk(&e.expr)?;
                }
                FieldType::Json
            }
            Expr::Map(map) => {
                for entry in &map.entries {
                    self.walk_entry(&entry.expr)?;
                }
                FieldType::Json
            }
            Expr::Struct(s) => {
                for entry in &s.entries {
                    self.walk_entry(&entry.expr)?;
                }
                FieldType::Any
            }
            Expr::Comprehension(c) => {
                self.walk(&c.iter_range.expr)?;
                self.walk(&c.accu_init.expr)?;
                let before = self.bound.len();
                self.bound.push(c.iter_var.clone());
                if let Some(v) = &c.iter_var2 {
                    self.bound.push(v.clone());
                }
                self.bound.push(c.accu_var.clone());
                let result = (|| {
                    self.walk(&c.loop_cond.expr)?;
                    self.walk(&c.loop_step.expr)?;
                    self.walk(&c.result.expr)
                })();
                self.bound.truncate(before);
                result?;
                FieldType::Any
            }
            Expr::Call(call) => {
                let target = match &call.target {
                    Some(t) => Some(self.walk(&t.expr)?),
                    None => None,
                };
                let mut args = Vec::with_capacity(call.args.len());
                for a in &call.args {
                    args.push(self.walk(&a.expr)?);
                }
                let arg_exprs: Vec<&Expr> = call.args.iter().map(|a| &a.expr).collect();
                call_type(&call.func_name, target, &args, &arg_exprs)?
            }
        })
    }

    fn walk_entry(&mut self, entry: &EntryExpr) -> Result<(), String> {
        match entry {
            EntryExpr::StructField(f) => self.walk(&f.value.expr).map(|_| ()),
            EntryExpr::MapEntry(e) => {
                self.walk(&e.key.expr)?;
                self.walk(&e.value.expr).map(|_| ())
            }
        }
    }
}

/// Whether a value of type `t` is certainly not a number (a known non-numeric type).
fn not_numeric(t: FieldType) -> bool {
    t.is_known() && !t.is_numeric()
}

/// Whether `a` and `b` are certainly of incomparable kinds: one a string and the other a number
/// or a bool, or one a bool and the other a number.
fn incomparable(a: FieldType, b: FieldType) -> bool {
    let kind = |t: FieldType| match t {
        FieldType::String => Some(0),
        FieldType::Int | FieldType::Float => Some(1),
        FieldType::Bool => Some(2),
        FieldType::Json | FieldType::Any => None,
    };
    matches!((kind(a), kind(b)), (Some(x), Some(y)) if x != y)
}

/// The numeric result of an arithmetic operator: `int` for two ints, `float` for two floats,
/// else `any`.
fn arithmetic_result(a: FieldType, b: FieldType) -> FieldType {
    if a == b && a.is_numeric() { a } else { FieldType::Any }
}

/// The type of a call's value (operators are calls: `_+_`, `_<_`, ...), or the error it
/// certainly is.
fn call_type(
    func: &str,
    target: Option<FieldType>,
    args: &[FieldType],
    arg_exprs: &[&Expr],
) -> Result<FieldType, String> {
    let binary = || -> (FieldType, FieldType, String, String) {
        let (a, b) = (args[0], args[1]);
        (a, b, describe(arg_exprs[0], a), describe(arg_exprs[1], b))
    };
    Ok(match (func, args.len()) {
        ("_+_", 2) => {
            let (a, b, da, db) = binary();
            if a == FieldType::String && b == FieldType::String {
                FieldType::String
            } else if (a == FieldType::String && b.is_known() && b != FieldType::String)
                || (b == FieldType::String && a.is_known() && a != FieldType::String)
            {
                return Err(format!("`+` of {da} and {db}: {CONVERT}"));
            } else if a == FieldType::Bool || b == FieldType::Bool {
                return Err(format!("`+` of {da} and {db}: arithmetic on a bool"));
            } else {
                arithmetic_result(a, b)
            }
        }
        ("_-_" | "_*_" | "_/_" | "_%_", 2) => {
            let (a, b, da, db) = binary();
            let op = &func[1..func.len() - 1];
            if (not_numeric(a) && a != FieldType::Json) || (not_numeric(b) && b != FieldType::Json) {
                return Err(format!("`{op}` of {da} and {db}: arithmetic needs numbers; {CONVERT}"));
            }
            arithmetic_result(a, b)
        }
        ("-_", 1) => {
            if matches!(args[0], FieldType::String | FieldType::Bool) {
                let d = describe(arg_exprs[0], args[0]);
                return Err(format!("unary `-` of {d}: arithmetic needs numbers; {CONVERT}"));
            }
            if args[0].is_numeric() { args[0] } else { FieldType::Any }
        }
        ("_<_" | "_<=_" | "_>_" | "_>=_" | "_==_" | "_!=_", 2) => {
            let (a, b, da, db) = binary();
            let op = &func[1..func.len() - 1];
            if incomparable(a, b) {
                let why = if matches!(op, "==" | "!=") {
                    "they are never equal"
                } else {
                    "they have no order"
                };
                return Err(format!("`{op}` compares {da} with {db}: {why}; {CONVERT}"));
            }
            FieldType::Bool
        }
        ("_&&_" | "_||_", 2) | ("!_", 1) | ("@in", 2) => FieldType::Bool,
        ("_?_:_", 3) => {
            if args[1] == args[2] {
                args[1]
            } else {
                FieldType::Any
            }
        }
        ("size", _) => FieldType::Int,
        ("int" | "uint", 1) => FieldType::Int,
        ("double", 1) => FieldType::Float,
        ("string", 1) => FieldType::String,
        ("bool", 1) => FieldType::Bool,
        ("contains" | "startsWith" | "endsWith" | "matches", _) if target == Some(FieldType::String) => FieldType::Bool,
        ("lower" | "upper" | "lowerAscii" | "upperAscii" | "trim" | "replace" | "substring", _)
            if target == Some(FieldType::String) =>
        {
            FieldType::String
        }
        _ => FieldType::Any,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fields(name: &str) -> FieldType {
        match name {
            "s" | "name" => FieldType::String,
            "i" | "n" => FieldType::Int,
            "f" => FieldType::Float,
            "b" => FieldType::Bool,
            "tags" => FieldType::Json,
            _ => FieldType::Any,
        }
    }

    fn infer_source(source: &str) -> Result<FieldType, String> {
        let expr = crate::record::cel::compile(source).unwrap();
        infer(expr.syntax(), &fields)
    }

    #[test]
    fn types_of_valid_expressions() {
        use FieldType::*;
        let rows = [
            ("s", String),
            ("i + 1", Int),
            ("f * 2.0", Float),
            ("i + f", Any), // an error at run time only if the values really differ
            ("s + 'x'", String),
            ("size(s) > 3", Bool),
            ("s.lower()", String),
            ("s.startsWith('a') && b", Bool),
            ("double(s) + 1.0", Float),
            ("int(s) * 2", Int),
            ("string(i) + s", String),
            ("b ? 1 : 2", Int),
            ("b ? 1 : 's'", Any),
            ("{'a': s}", Json),
            ("[i, s]", Json),
            ("tags.exists(t, t + 1 > 0)", Any),
            ("record.s + 1", Any),
            ("unknown + 1", Any),
            ("i == f", Bool),
            ("s == null", Bool),
            ("-f", Float),
            ("tags[0] + 1", Any),
        ];
        for (source, want) in rows {
            assert_eq!(infer_source(source), Ok(want), "{source}");
        }
    }

    #[test]
    fn certain_type_errors_are_reported_naming_the_field() {
        let rows = [
            ("s + 1", "`+` of field `s` (string) and an int literal"),
            ("1 + s", "`+` of an int literal and field `s` (string)"),
            (
                "name * 2",
                "`*` of field `name` (string) and an int literal: arithmetic needs numbers",
            ),
            ("f - b", "`-` of field `f` (float) and field `b` (bool)"),
            ("-s", "unary `-` of field `s` (string)"),
            (
                "s > 3",
                "`>` compares field `s` (string) with an int literal: they have no order",
            ),
            (
                "n == 'x'",
                "`==` compares field `n` (int) with a string literal: they are never equal",
            ),
            ("{'total': s + i}", "`+` of field `s` (string) and field `i` (int)"),
            ("size(s) > 0 && s < 5", "`<` compares field `s` (string)"),
            ("b + 1", "arithmetic on a bool"),
        ];
        for (source, want) in rows {
            let e = infer_source(source).unwrap_err();
            assert!(e.contains(want), "{source}: want `{want}` in `{e}`");
        }
    }
}
