//! Every error names its field the one way serde_path_to_error and the API server do
//! (`spec.job.steps[2].join.fields[1].from`: dotted names, list indexes in brackets, 0-based),
//! whatever finds it: the strict field check, serde, the validation rules, the plan check, or a
//! `--set` override. Each bad manifest below breaks one element; the error's path must lead to
//! exactly that element of the document, and the same break made with `--set` must give the
//! same path.

use super::*;
use serde_yaml::Value;

const BASE: &str = r#"
apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: { name: paths }
spec:
  parallelism: 2
  checkpointing: { interval: 1s, retained: 2 }
  job:
    steps:
      - { name: orders, source: { generator: { keys: 10, splits: 2 } } }
      - { name: users, source: { generator: { keys: 5 } } }
      - inputs: [orders, users]
        join:
          leftKey: key
          rightKey: key
          fields:
            - { from: left.value, as: amount }
            - { from: right.id, as: user }
      - { filter: { expression: "amount > 1" } }
      - { sink: { file: { path: /tmp/weir-paths, maxRecordsPerSecond: 10 } } }
"#;

/// Sets `value` (YAML) at the dotted `path` (numbers index lists), creating nothing: the
/// parent must exist. No schema check, so it can also add an unknown field.
fn set(doc: &mut Value, path: &str, value: &str) {
    let (parent, last) = path.rsplit_once('.').unwrap();
    let mut node = doc;
    for part in parent.split('.') {
        node = match part.parse::<usize>() {
            Ok(i) => &mut node[i],
            Err(_) => &mut node[part],
        };
    }
    let value: Value = serde_yaml::from_str(value).unwrap();
    match last.parse::<usize>() {
        Ok(i) => node[i] = value,
        Err(_) => {
            node.as_mapping_mut()
                .unwrap_or_else(|| panic!("{parent} is not a map"))
                .insert(Value::String(last.into()), value);
        }
    }
}

/// The node at an error's field path (`a.b[3].c`), if there is one.
fn resolve<'a>(doc: &'a Value, field: &str) -> Option<&'a Value> {
    let mut node = doc;
    for part in field.split('.') {
        let (name, indexes) = match part.find('[') {
            Some(i) => (&part[..i], &part[i..]),
            None => (part, ""),
        };
        if !name.is_empty() {
            node = node.get(name)?;
        }
        for index in indexes.split('[').filter(|s| !s.is_empty()) {
            let i: usize = index.strip_suffix(']')?.parse().ok()?;
            node = node.get(i)?;
        }
    }
    Some(node)
}

#[test]
fn the_base_manifest_is_valid() {
    parse_manifest(BASE, &[]).unwrap();
}

#[test]
fn every_error_path_names_the_broken_element_and_set_gives_the_same_path() {
    // (where to break it, the bad value, the field the error must name)
    let cases = [
        // serde: a value of the wrong type
        (
            "spec.job.steps.4.sink.file.maxRecordsPerSecond",
            "fast",
            "spec.job.steps[4].sink.file.maxRecordsPerSecond",
        ),
        ("spec.parallelism", "two", "spec.parallelism"),
        // validation rules
        (
            "spec.job.steps.4.sink.file.maxRecordsPerSecond",
            "0",
            "spec.job.steps[4].sink.file.maxRecordsPerSecond",
        ),
        (
            "spec.job.steps.0.source.generator.keys",
            "0",
            "spec.job.steps[0].source.generator.keys",
        ),
        (
            "spec.job.steps.0.source.generator.splits",
            "0",
            "spec.job.steps[0].source.generator.splits",
        ),
        ("spec.checkpointing.retained", "0", "spec.checkpointing.retained"),
        ("spec.checkpointing.interval", "soon", "spec.checkpointing.interval"),
        (
            "spec.job.steps.3.filter.expression",
            "amount +",
            "spec.job.steps[3].filter.expression",
        ),
        // the dataflow and plan checks
        ("spec.job.steps.2.inputs.1", "userz", "spec.job.steps[2].inputs[1]"),
        (
            "spec.job.steps.2.join.fields.1.from",
            "middle.id",
            "spec.job.steps[2].join.fields[1].from",
        ),
        (
            "spec.job.steps.2.join.rightKey",
            "id",
            "spec.job.steps[2].join.rightKey",
        ),
        (
            "spec.job.steps.3.filter.expression",
            "missing > 1",
            "spec.job.steps[3].filter.expression",
        ),
    ];
    let base: Value = serde_yaml::from_str(BASE).unwrap();
    for (at, value, want) in cases {
        let mut doc = base.clone();
        set(&mut doc, at, value);
        let e = parse_manifest(&serde_yaml::to_string(&doc).unwrap(), &[]).unwrap_err();
        assert_eq!(e.field, want, "{at}={value}: {e}");
        let named = resolve(&doc, &e.field).unwrap_or_else(|| panic!("{e}: the path leads nowhere"));
        assert_eq!(
            named,
            &serde_yaml::from_str::<Value>(value).unwrap(),
            "{at}={value}: {e}"
        );
        let by_set = parse_manifest(BASE, &[format!("{at}={value}")]).unwrap_err();
        assert_eq!(by_set.field, want, "--set {at}={value}: {by_set}");
    }
}

#[test]
fn an_unknown_field_is_named_in_the_object_that_holds_it() {
    let base: Value = serde_yaml::from_str(BASE).unwrap();
    for (at, parent, name) in [
        (
            "spec.job.steps.1.source.generator.kyes",
            "spec.job.steps[1].source.generator",
            "kyes",
        ),
        (
            "spec.job.steps.2.join.fields.0.form",
            "spec.job.steps[2].join.fields[0]",
            "form",
        ),
        ("spec.job.steps.3.filtr", "spec.job.steps[3]", "filtr"),
    ] {
        let mut doc = base.clone();
        set(&mut doc, at, "3");
        let e = parse_manifest(&serde_yaml::to_string(&doc).unwrap(), &[]).unwrap_err();
        assert_eq!(e.field, parent, "{at}: {e}");
        assert!(e.message.starts_with(&format!("unknown field `{name}`")), "{at}: {e}");
        assert!(resolve(&doc, &e.field).and_then(|o| o.get(name)).is_some(), "{at}: {e}");
        let by_set = parse_manifest(BASE, &[format!("{at}=3")]).unwrap_err();
        assert_eq!(by_set.field, parent, "--set {at}=3: {by_set}");
    }
    // A list index past the end, with --set: the element it names, as any other path.
    let e = parse_manifest(BASE, &["spec.job.steps.7.uid=x".into()]).unwrap_err();
    assert_eq!(e.field, "spec.job.steps[7].uid", "{e}");
}
