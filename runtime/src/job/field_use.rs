//! Which fields of a step's output records the later steps read: the plan's field-use analysis,
//! from the steps' definitions alone (no record is looked at). A source that can skip
//! computing a field (the generator: [`crate::operators::source::Source::project`]) asks it
//! for its own output, so a job that reads only `id` never computes `key` or `value`
//! (projection pushdown, as Flink's and Spark's planners push projections into sources).
//!
//! The analysis errs on the side of reading: a step whose reads it cannot bound (a sink that
//! writes records, a window, a join, a CEL expression that names `record` or does not
//! compile) reads every field. A step that reads nothing of its input's fields (`count`, the
//! `discard` sink) reads none.

use super::validate::{Operator, OperatorKind};
use crate::record::cel;
use crate::record::cel_fields::free_identifiers;
use std::collections::BTreeSet;

/// The fields of a step's output records that some later step reads.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FieldsRead {
    /// Every field (a sink writes whole records, or the reads cannot be bounded).
    All,
    /// Only these fields, by name.
    Only(BTreeSet<String>),
}

impl FieldsRead {
    /// No field.
    pub fn none() -> FieldsRead {
        FieldsRead::Only(BTreeSet::new())
    }

    /// Whether field `name` is read.
    pub fn reads(&self, name: &str) -> bool {
        match self {
            FieldsRead::All => true,
            FieldsRead::Only(fields) => fields.contains(name),
        }
    }

    /// The fields either reads.
    fn union(self, other: FieldsRead) -> FieldsRead {
        match (self, other) {
            (FieldsRead::Only(mut a), FieldsRead::Only(b)) => {
                a.extend(b);
                FieldsRead::Only(a)
            }
            _ => FieldsRead::All,
        }
    }
}

/// The fields a CEL expression reads: its free identifiers; every field when it names the
/// whole `record` or does not compile (validation reports that; here it only must not narrow).
fn expression_reads(expression: &str) -> FieldsRead {
    let Ok(expr) = cel::compile(expression) else {
        return FieldsRead::All;
    };
    let names = free_identifiers(expr.syntax());
    if names.contains("record") {
        return FieldsRead::All;
    }
    FieldsRead::Only(names)
}

/// What step `op` reads of its input records, given what the steps after it read of its own
/// output (`after`).
fn input_reads(op: &Operator, after: FieldsRead) -> FieldsRead {
    match &op.kind {
        // Records pass on: what the step reads and what is read after it.
        OperatorKind::Filter(expression) => expression_reads(expression).union(after),
        OperatorKind::KeyBy { expression, .. } => expression_reads(expression).union(after),
        OperatorKind::FlatMap(spec) => after.union(FieldsRead::Only(BTreeSet::from([spec.field.clone()]))),
        OperatorKind::Union => after,
        // A new record from the expression alone.
        OperatorKind::Map(expression) => expression_reads(expression),
        // A new record `{key, value}`: the key comes from `keyBy`, the value from the expression.
        OperatorKind::Aggregate { expression, .. } => match expression {
            Some(expression) => expression_reads(expression),
            None => FieldsRead::none(),
        },
        OperatorKind::DiscardSink => FieldsRead::none(),
        // Whole records written, or reads this analysis does not bound.
        OperatorKind::FileSink(_)
        | OperatorKind::KafkaSink(_)
        | OperatorKind::PrintSink
        | OperatorKind::Window(_)
        | OperatorKind::Join(_) => FieldsRead::All,
        // A source reads no input.
        OperatorKind::FileSource(_) | OperatorKind::Generator(_) | OperatorKind::KafkaSource(_) => FieldsRead::none(),
    }
}

/// The fields of operator `of`'s output records that any later step reads (every consumer,
/// down every branch; a window's late side output counts as reading the window's input, whose
/// reads are already every field). `operators` in data order, inputs first
/// ([`super::validate::Job::operators`]).
pub fn fields_read(operators: &[Operator], of: usize) -> FieldsRead {
    // Operators come after their inputs, so one pass from the last to `of` sees every
    // consumer's own reads before its input's.
    let mut read: Vec<FieldsRead> = vec![FieldsRead::none(); operators.len()];
    for k in (of + 1..operators.len()).rev() {
        let needs = input_reads(&operators[k], read[k].clone());
        for &input in &operators[k].inputs {
            if input >= of {
                let current = std::mem::replace(&mut read[input], FieldsRead::none());
                read[input] = current.union(needs.clone());
            }
        }
    }
    read.get(of).cloned().unwrap_or(FieldsRead::All)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(steps: &str) -> Vec<Operator> {
        let yaml = format!(
            "apiVersion: weir.dev/v1alpha1\nkind: StreamJob\nmetadata: {{ name: t }}\nspec:\n  job:\n    steps:\n{steps}"
        );
        crate::job::parse_manifest(&yaml, &[]).unwrap().operators
    }

    fn only(fields: &[&str]) -> FieldsRead {
        FieldsRead::Only(fields.iter().map(|s| s.to_string()).collect())
    }

    const GENERATOR: &str = "      - name: g\n        source: { generator: { count: 10 } }\n";

    #[test]
    fn fields_read_table() {
        let rows: [(&str, FieldsRead); 14] = [
            // The keyed count of the benchmarks: only the key expression's field.
            (
                "      - keyBy: { expression: 'id % 100000', as: key }\n      - count: {}\n      - sink: { discard: {} }\n",
                only(&["id"]),
            ),
            (
                "      - keyBy: { expression: key }\n      - count: {}\n      - sink: { discard: {} }\n",
                only(&["key"]),
            ),
            // The count's output is a new record: a file sink after it reads none of the source's.
            (
                "      - keyBy: { expression: key }\n      - count: {}\n      - sink: { file: { path: /tmp/x } }\n",
                only(&["key"]),
            ),
            ("      - sink: { discard: {} }\n", FieldsRead::none()),
            // A sink that writes records reads every field.
            ("      - sink: { file: { path: /tmp/x } }\n", FieldsRead::All),
            ("      - sink: { print: {} }\n", FieldsRead::All),
            (
                "      - filter: { expression: 'value > 3' }\n      - sink: { print: {} }\n",
                FieldsRead::All,
            ),
            // A filter's fields and what is read after it.
            (
                "      - filter: { expression: 'value > 3' }\n      - keyBy: { expression: id }\n      - sum: { expression: value }\n      - sink: { discard: {} }\n",
                only(&["id", "value"]),
            ),
            // A map makes new records: only its expression's fields.
            (
                "      - map: { expression: \"{'k': key}\" }\n      - sink: { print: {} }\n",
                only(&["key"]),
            ),
            // `record` names every field.
            (
                "      - filter: { expression: 'record.id > 3' }\n      - sink: { discard: {} }\n",
                FieldsRead::All,
            ),
            // A flatMap's split field and what is read after it.
            (
                "      - flatMap: { field: key, pattern: '-', as: part }\n      - keyBy: { expression: part }\n      - count: {}\n      - sink: { discard: {} }\n",
                only(&["key", "part"]),
            ),
            // A comprehension's own variable is not a field.
            (
                "      - filter: { expression: '[1, 2].exists(x, x == id)' }\n      - sink: { discard: {} }\n",
                only(&["id"]),
            ),
            // Branches: every consumer counts.
            (
                "      - keyBy: { expression: id }\n      - count: {}\n      - sink: { discard: {} }\n      - inputs: [g]\n        filter: { expression: 'value > 1' }\n      - sink: { discard: {} }\n",
                only(&["id", "value"]),
            ),
            (
                "      - keyBy: { expression: id }\n      - count: {}\n      - sink: { discard: {} }\n      - inputs: [g]\n        sink: { print: {} }\n",
                FieldsRead::All,
            ),
        ];
        for (steps, want) in rows {
            let operators = job(&format!("{GENERATOR}{steps}"));
            assert_eq!(fields_read(&operators, 0), want, "{steps}");
        }
    }

    #[test]
    fn reads_and_union() {
        assert!(FieldsRead::All.reads("x"));
        assert!(only(&["x"]).reads("x"));
        assert!(!only(&["x"]).reads("y"));
        assert_eq!(only(&["a"]).union(only(&["b"])), only(&["a", "b"]));
        assert_eq!(only(&["a"]).union(FieldsRead::All), FieldsRead::All);
        assert_eq!(expression_reads("not valid CEL ("), FieldsRead::All);
    }
}
