//! The keyed two-input `join` step at plan time: its validated definition ([`JoinDef`]) and
//! its output schema. Both are pure functions of the spec and the input schemas, each error
//! naming the field path (`spec.job.steps[4].join.fields[1].from`).

use super::spec::JoinSpec;
use super::types::{Field, FieldType};
use super::validate::JobError;
use std::time::Duration;

/// One input of a join: `inputs[0]` is the left side, `inputs[1]` the right side.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Side {
    /// The first input.
    Left,
    /// The second input.
    Right,
}

impl Side {
    /// `left` or `right`, as in `fields[].from`.
    pub fn name(self) -> &'static str {
        match self {
            Side::Left => "left",
            Side::Right => "right",
        }
    }

    /// The other side.
    pub fn other(self) -> Side {
        match self {
            Side::Left => Side::Right,
            Side::Right => Side::Left,
        }
    }

    /// The side of input `index` of the join (0 left, 1 right).
    pub fn of_input(index: usize) -> Side {
        if index == 0 { Side::Left } else { Side::Right }
    }
}

/// One output field: `from` of `side`'s records, written as `name`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinField {
    /// Which input the value comes from.
    pub side: Side,
    /// The top-level field of that input's records.
    pub from: String,
    /// The output field name.
    pub name: String,
}

/// A validated `join`.
#[derive(Clone, Debug, PartialEq)]
pub struct JoinDef {
    /// CEL key selector of left records.
    pub left_key: String,
    /// CEL key selector of right records.
    pub right_key: String,
    /// Output field of the key.
    pub key_field: String,
    /// Output fields after the key, in order.
    pub fields: Vec<JoinField>,
    /// State TTL (`None`: rows are kept for ever).
    pub ttl: Option<Duration>,
    /// The step's `inputs` as written (`[left, right]`, e.g. `[orders, hourly.late]`; empty
    /// strings when the step lists fewer, which the dataflow refuses): what each side read,
    /// kept with the join's state so a restore can tell the inputs were swapped.
    pub inputs: [String; 2],
}

impl JoinDef {
    /// The key selector of `side`.
    pub fn key_expression(&self, side: Side) -> &str {
        match side {
            Side::Left => &self.left_key,
            Side::Right => &self.right_key,
        }
    }

    /// The distinct input fields `side` contributes to the output, in order of first use: what
    /// the join keeps of that side's records.
    pub fn projection(&self, side: Side) -> Vec<String> {
        let mut out: Vec<String> = Vec::new();
        for f in self.fields.iter().filter(|f| f.side == side) {
            if !out.contains(&f.from) {
                out.push(f.from.clone());
            }
        }
        out
    }
}

/// Validates the `join` of the step at `at` (`spec.job.steps[4]`): the key expressions
/// compile, every `fields[].from` is `left.<field>` or `right.<field>`, output names are unique
/// and differ from the key's, the TTL parses. `inputs` is the step's `inputs` as written.
/// `compile` checks a CEL expression (the caller's, so errors read as every step's),
/// `parse_ttl` a TTL.
pub fn join_def(
    at: &str,
    spec: &JoinSpec,
    inputs: &[String],
    compile: impl Fn(&str, &str) -> Result<(), JobError>,
    parse_ttl: impl Fn(&str, &str) -> Result<Duration, JobError>,
) -> Result<JoinDef, JobError> {
    let at = format!("{at}.join");
    compile(&format!("{at}.leftKey"), &spec.left_key)?;
    compile(&format!("{at}.rightKey"), &spec.right_key)?;
    let key_field = spec.as_field.clone().unwrap_or_else(|| "key".into());
    if key_field.is_empty() {
        return Err(JobError::new(format!("{at}.as"), "must not be empty"));
    }
    if spec.fields.is_empty() {
        return Err(JobError::new(
            format!("{at}.fields"),
            "list the output fields, each `from: left.<field>` or `from: right.<field>` (optionally with `as`)",
        ));
    }
    let mut fields: Vec<JoinField> = Vec::with_capacity(spec.fields.len());
    for (i, f) in spec.fields.iter().enumerate() {
        let from_at = format!("{at}.fields[{i}].from");
        let (side, from) = match f.from.split_once('.') {
            Some(("left", name)) if !name.is_empty() => (Side::Left, name),
            Some(("right", name)) if !name.is_empty() => (Side::Right, name),
            _ => {
                return Err(JobError::new(
                    from_at,
                    format!(
                        "`{}` must be `left.<field>` or `right.<field>` (a field of the first or second input)",
                        f.from
                    ),
                ));
            }
        };
        let name = f.as_field.clone().unwrap_or_else(|| from.to_string());
        let name_at = match &f.as_field {
            Some(_) => format!("{at}.fields[{i}].as"),
            None => from_at.clone(),
        };
        if name.is_empty() {
            return Err(JobError::new(name_at, "must not be empty"));
        }
        if name == key_field {
            return Err(JobError::new(
                name_at,
                format!("`{name}` is the key's output field (`as`, default `key`); name this field with `as`"),
            ));
        }
        if let Some(j) = fields.iter().position(|g| g.name == name) {
            return Err(JobError::new(
                name_at,
                format!("output field `{name}` is also fields[{j}]'s; give one of them another name with `as`"),
            ));
        }
        fields.push(JoinField {
            side,
            from: from.to_string(),
            name,
        });
    }
    let ttl = match &spec.ttl {
        None => None,
        Some(t) => Some(parse_ttl(&format!("{at}.ttl"), t)?),
    };
    Ok(JoinDef {
        left_key: spec.left_key.clone(),
        right_key: spec.right_key.clone(),
        key_field,
        fields,
        ttl,
        inputs: [0, 1].map(|i| inputs.get(i).cloned().unwrap_or_default()),
    })
}

/// The output schema of a join at `at` over inputs of schemas `left` and `right` (each `None`
/// when unknown), given the types of its key expressions (`key_types`: left, right; `Any` when
/// unknown). Errors: a key of a type that is not a string, integer or boolean; keys of two
/// different known types (they would never be equal); an output field missing from a known
/// input schema.
pub fn join_output(
    at: &str,
    def: &JoinDef,
    inputs: [Option<&[Field]>; 2],
    key_types: [FieldType; 2],
) -> Result<Vec<Field>, JobError> {
    let at = format!("{at}.join");
    for (side, t) in [Side::Left, Side::Right].into_iter().zip(key_types) {
        if matches!(t, FieldType::Float | FieldType::Json) {
            let field = format!("{at}.{}Key", side.name());
            return Err(JobError::new(
                field,
                format!(
                    "`{}` gives a {}, and keys are strings, integers or booleans (convert with `int(...)` or `string(...)`)",
                    def.key_expression(side),
                    t.name()
                ),
            ));
        }
    }
    let [left_type, right_type] = key_types;
    if left_type.is_known() && right_type.is_known() && left_type != right_type {
        return Err(JobError::new(
            format!("{at}.rightKey"),
            format!(
                "`{}` gives {} {}, and leftKey `{}` gives {} {}: keys of different types never match; convert one with `string(...)` or `int(...)`",
                def.right_key,
                article(right_type),
                right_type.name(),
                def.left_key,
                article(left_type),
                left_type.name()
            ),
        ));
    }
    let key_type = if left_type.is_known() { left_type } else { right_type };
    let mut out = vec![Field::new(def.key_field.clone(), key_type)];
    for (i, f) in def.fields.iter().enumerate() {
        let input = match f.side {
            Side::Left => inputs[0],
            Side::Right => inputs[1],
        };
        let field_type = match input {
            None => FieldType::Any,
            Some(fields) => match fields.iter().find(|g| g.name == f.from) {
                Some(g) => g.field_type,
                None => {
                    let known = fields
                        .iter()
                        .map(|g| format!("`{}`", g.name))
                        .collect::<Vec<_>>()
                        .join(", ");
                    return Err(JobError::new(
                        format!("{at}.fields[{i}].from"),
                        format!(
                            "field `{}` does not exist in the {} input's records; their fields are {known}",
                            f.from,
                            f.side.name()
                        ),
                    ));
                }
            },
        };
        out.push(Field::new(f.name.clone(), field_type));
    }
    Ok(out)
}

fn article(t: FieldType) -> &'static str {
    if matches!(t, FieldType::Int | FieldType::Any) {
        "an"
    } else {
        "a"
    }
}

#[cfg(test)]
#[path = "join_tests.rs"]
mod tests;
