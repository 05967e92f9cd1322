//! The CRD schema's integer bounds equal what the runtime requires: for every bounded integer
//! field of `spec` in the generated schema, a manifest with the field at the bound is accepted
//! and one with the field one past it is refused, naming the field. A field whose bound is
//! looser than the runtime's rule fails the first half (the API server would accept what the
//! job then refuses); a schema bound the runtime does not enforce fails the second.

use super::*;
use crate::job::parse_manifest;
use serde_json::Value as Schema;
use serde_yaml::Value;

/// Manifests that together hold every object with an integer field: a generator to a file
/// sink, a file source to a discard sink, Kafka to Kafka.
const BASES: [&str; 3] = [
    r#"
apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: { name: bounds }
spec:
  parallelism: 1
  savepoints: { directory: /tmp/sp, history: { maxCount: 3 } }
  health: { maxRestarts: 3 }
  job:
    steps:
      - source: { generator: { keys: 3 } }
      - keyBy: { expression: key }
      - count: {}
      - sink: { file: { path: /tmp/out } }
"#,
    r#"
apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: { name: bounds }
spec:
  job:
    steps:
      - source: { file: { path: /tmp/in.txt } }
      - sink: { discard: {} }
"#,
    r#"
apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: { name: bounds }
spec:
  job:
    steps:
      - uid: lines
        source: { kafka: { bootstrapServers: "127.0.0.1:9092", topics: [lines], groupId: g } }
      - uid: output
        sink:
          kafka:
            bootstrapServers: "127.0.0.1:9092"
            topic: out
            deliveryGuarantee: exactly-once
            transactionalIdPrefix: bounds-output
"#,
];

/// Every integer field under `spec` with its path segments (`"[]"` for a list item) and
/// bounds.
fn integer_fields(schema: &Schema, path: &mut Vec<String>, out: &mut Vec<(Vec<String>, IntegerBounds)>) {
    if schema.get("type").and_then(Schema::as_str) == Some("integer") {
        out.push((path.clone(), integer_bounds(schema)));
    }
    if let Some(props) = schema.get("properties").and_then(Schema::as_object) {
        for (name, child) in props {
            path.push(name.clone());
            integer_fields(child, path, out);
            path.pop();
        }
    }
    if let Some(items) = schema.get("items") {
        path.push("[]".into());
        integer_fields(items, path, out);
        path.pop();
    }
}

/// Sets `value` at `segments` in `doc` (maps are created as needed; a `[]` picks the first list
/// item under which the rest of the path's parent exists). Returns the concrete field path
/// (`spec.job.steps[0].source.generator.keys`), or `None` when no list item fits.
fn set_at(doc: &mut Value, segments: &[String], value: i128) -> Option<String> {
    let (name, rest) = segments.split_first()?;
    if name == "[]" {
        let items = doc.as_sequence_mut()?;
        let parent = &rest[..rest.len() - 1];
        let k = items.iter().position(|item| {
            let mut node = item;
            parent.iter().all(|p| match node.get(p.as_str()) {
                Some(n) => {
                    node = n;
                    true
                }
                None => false,
            })
        })?;
        let tail = set_at(&mut items[k], rest, value)?;
        return Some(format!("[{k}].{tail}"));
    }
    let map = doc.as_mapping_mut()?;
    if rest.is_empty() {
        let v: Value = serde_yaml::from_str(&value.to_string()).unwrap();
        map.insert(Value::String(name.clone()), v);
        return Some(name.clone());
    }
    let child = map
        .entry(Value::String(name.clone()))
        .or_insert_with(|| Value::Mapping(Default::default()));
    let tail = set_at(child, rest, value)?;
    Some(if tail.starts_with('[') {
        format!("{name}{tail}")
    } else {
        format!("{name}.{tail}")
    })
}

#[test]
fn simple_cel_rules_and_minimums_make_bounds() {
    let schema = serde_json::json!({"type": "integer", "minimum": 0.0,
        "x-kubernetes-validations": [{"rule": "self >= 1 && self <= 32768"}, {"rule": "self == oldSelf"}]});
    assert_eq!(
        integer_bounds(&schema),
        IntegerBounds {
            min: Some(1),
            max: Some(32768)
        }
    );
    assert_eq!(
        integer_bounds(&serde_json::json!({"type": "integer"})),
        IntegerBounds::default()
    );
}

#[test]
fn every_bounded_integer_of_the_schema_is_accepted_at_its_bound_and_refused_past_it() {
    let schema = crate::job::fields::stream_job_schema();
    let mut fields = vec![];
    integer_fields(&schema["properties"]["spec"], &mut vec!["spec".into()], &mut fields);
    let bounded: Vec<_> = fields
        .into_iter()
        .filter(|(_, b)| b.min.is_some() || b.max.is_some())
        .collect();
    assert!(
        bounded.len() >= 15,
        "the walk finds the schema's bounded integers: {bounded:?}"
    );
    let bases: Vec<Value> = BASES.iter().map(|b| serde_yaml::from_str(b).unwrap()).collect();
    for b in &bases {
        parse_manifest(&serde_yaml::to_string(b).unwrap(), &[]).expect("a valid base manifest");
    }
    let mut failures = vec![];
    for (segments, bounds) in &bounded {
        let name = segments.join(".").replace(".[]", "[]");
        let sides = [bounds.min.map(|m| (m, m - 1)), bounds.max.map(|m| (m, m + 1))];
        for (at, past) in sides.into_iter().flatten() {
            let fits = bases.iter().find_map(|b| {
                let mut doc = b.clone();
                set_at(&mut doc, segments, at).map(|path| (doc, path))
            });
            let Some((doc, path)) = fits else {
                failures.push(format!("{name}: no base manifest holds its parent object; add one"));
                continue;
            };
            if let Err(e) = parse_manifest(&serde_yaml::to_string(&doc).unwrap(), &[]) {
                failures.push(format!("{path} = {at} (the schema's bound) is refused: {e}"));
            }
            let mut doc = doc;
            set_at(&mut doc, segments, past);
            match parse_manifest(&serde_yaml::to_string(&doc).unwrap(), &[]) {
                Ok(_) => failures.push(format!("{path} = {past} (past the schema's bound) is accepted")),
                Err(e) if e.field != path => failures.push(format!("{path} = {past}: the error names {e}")),
                Err(_) => {}
            }
        }
    }
    assert!(failures.is_empty(), "{failures:#?}");
}
