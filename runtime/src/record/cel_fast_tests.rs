//! Tests of the native CEL evaluator against the `cel` interpreter.

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
