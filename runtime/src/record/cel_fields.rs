//! What a CEL expression reads and builds, found from its syntax tree without running it: the
//! record fields it names ([`free_identifiers`]) and the keys of the row a `map` with an object
//! literal produces ([`map_literal_keys`]). The job's plan checks use them against the schema
//! a source declares.

use cel::common::ast::{EntryExpr, Expr, LiteralValue};
use cel::parser::Expression;
use std::collections::BTreeSet;

/// Identifiers CEL resolves to types, not to variables (`type(x) == int`).
const TYPE_IDENTIFIERS: [&str; 11] = [
    "int",
    "uint",
    "double",
    "bool",
    "string",
    "bytes",
    "list",
    "map",
    "null_type",
    "type",
    "dyn",
];

/// The identifiers an expression reads that no comprehension (`exists`, `map`, `all`, ...)
/// binds and that are not type names: the record fields it needs (and `record`), sorted.
pub fn free_identifiers(expr: &Expression) -> BTreeSet<String> {
    let mut out = BTreeSet::new();
    walk(&expr.expr, &mut Vec::new(), &mut out);
    out
}

fn walk<'e>(expr: &'e Expr, bound: &mut Vec<&'e str>, out: &mut BTreeSet<String>) {
    match expr {
        Expr::Unspecified | Expr::Literal(_) => {}
        Expr::Ident(name) => {
            if !name.starts_with('@') && !bound.contains(&name.as_str()) && !TYPE_IDENTIFIERS.contains(&name.as_str()) {
                out.insert(name.clone());
            }
        }
        Expr::Call(call) => {
            if let Some(target) = &call.target {
                walk(&target.expr, bound, out);
            }
            for arg in &call.args {
                walk(&arg.expr, bound, out);
            }
        }
        Expr::Comprehension(c) => {
            walk(&c.iter_range.expr, bound, out);
            walk(&c.accu_init.expr, bound, out);
            let before = bound.len();
            bound.push(&c.iter_var);
            if let Some(v) = &c.iter_var2 {
                bound.push(v);
            }
            bound.push(&c.accu_var);
            walk(&c.loop_cond.expr, bound, out);
            walk(&c.loop_step.expr, bound, out);
            walk(&c.result.expr, bound, out);
            bound.truncate(before);
        }
        Expr::List(list) => {
            for e in &list.elements {
                walk(&e.expr, bound, out);
            }
        }
        Expr::Map(map) => {
            for entry in &map.entries {
                walk_entry(&entry.expr, bound, out);
            }
        }
        Expr::Struct(s) => {
            for entry in &s.entries {
                walk_entry(&entry.expr, bound, out);
            }
        }
        Expr::Select(select) => walk(&select.operand.expr, bound, out),
    }
}

fn walk_entry<'e>(entry: &'e EntryExpr, bound: &mut Vec<&'e str>, out: &mut BTreeSet<String>) {
    match entry {
        EntryExpr::StructField(f) => walk(&f.value.expr, bound, out),
        EntryExpr::MapEntry(e) => {
            walk(&e.key.expr, bound, out);
            walk(&e.value.expr, bound, out);
        }
    }
}

/// The keys of the row an expression builds, sorted, when it is an object literal whose keys
/// are all string literals (`{'word': word.lower(), 'n': 1}` → `["n", "word"]`); `None`
/// otherwise (the keys are known only at run time, or the result is not an object).
pub fn map_literal_keys(expr: &Expression) -> Option<Vec<String>> {
    map_literal_entries(expr).map(|entries| entries.into_iter().map(|(k, _)| k).collect())
}

/// The `(key, value expression)` entries of an object literal whose keys are all string
/// literals, sorted by key (a repeated key keeps its last value); `None` as for
/// [`map_literal_keys`].
pub fn map_literal_entries(expr: &Expression) -> Option<Vec<(String, &Expr)>> {
    let Expr::Map(map) = &expr.expr else {
        return None;
    };
    let mut entries = std::collections::BTreeMap::new();
    for entry in &map.entries {
        match &entry.expr {
            EntryExpr::MapEntry(e) if !e.optional => match &e.key.expr {
                Expr::Literal(LiteralValue::String(s)) => {
                    entries.insert(s.to_string(), &e.value.expr);
                }
                _ => return None,
            },
            _ => return None,
        }
    }
    Some(entries.into_iter().collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn parse(source: &str) -> Expression {
        crate::record::cel::compile(source).unwrap().syntax().clone()
    }

    #[test]
    fn free_identifiers_table() {
        let rows: [(&str, &[&str]); 8] = [
            ("word", &["word"]),
            ("line.lower()", &["line"]),
            ("{'w': word, 'n': size(line) + n}", &["line", "n", "word"]),
            ("record.n + 1", &["record"]),
            ("tags.exists(t, t == kind)", &["kind", "tags"]),
            ("xs.map(x, x * k)", &["k", "xs"]),
            ("type(n) == int && dyn(s) != null", &["n", "s"]),
            ("'literal' + 'only'", &[]),
        ];
        for (source, want) in rows {
            let got: Vec<_> = free_identifiers(&parse(source)).into_iter().collect();
            assert_eq!(got, want.iter().map(|s| s.to_string()).collect::<Vec<_>>(), "{source}");
        }
    }

    #[test]
    fn map_literal_keys_table() {
        let rows: [(&str, Option<&[&str]>); 5] = [
            ("{'word': word.lower(), 'n': 1}", Some(&["n", "word"])),
            ("{'line': line}", Some(&["line"])),
            ("{k: 1}", None),
            ("word", None),
            ("{1: 'a'}", None),
        ];
        for (source, want) in rows {
            let got = map_literal_keys(&parse(source));
            let want = want.map(|w| w.iter().map(|s| s.to_string()).collect::<Vec<_>>());
            assert_eq!(got, want, "{source}");
        }
    }
}
