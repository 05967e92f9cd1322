//! The committed CRDs match the types; each CRD's schema is pinned; the CEL rules accept and
//! reject what they should; the examples are valid StreamJob/Savepoint objects.

use kube::CustomResourceExt;
use kube::core::cel::Validator;
use serde_json::{Value, json};
use std::path::{Path, PathBuf};
use weir_operator::crd::{Savepoint, StreamJob};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

#[test]
fn committed_crds_match_generated() {
    for (name, yaml) in weir_operator::crd::generate().unwrap() {
        let path = repo_root().join("crds").join(name);
        let committed = std::fs::read_to_string(&path).unwrap_or_else(|e| {
            panic!(
                "{}: {e}; run `cargo run -p weir-operator -- crdgen --out-dir crds`",
                path.display()
            )
        });
        let body = committed.split_once('\n').map(|(_, b)| b).unwrap_or("");
        assert!(
            body == yaml,
            "{name} is stale; run `cargo run -p weir-operator -- crdgen --out-dir crds`"
        );
    }
}

/// A compact, reviewable digest of a schema: one line per property path with its type,
/// required-ness, enum, default and CEL rules.
fn digest(schema: &Value, path: &str, required: bool, out: &mut Vec<String>) {
    let mut line = format!("{path}:");
    if let Some(t) = schema.get("type").and_then(Value::as_str) {
        line += &format!(" {t}");
    }
    if schema.get("x-kubernetes-int-or-string").is_some() {
        line += " int-or-string";
    }
    if schema.get("x-kubernetes-preserve-unknown-fields").is_some() {
        line += " preserve-unknown";
    }
    if required {
        line += " required";
    }
    if let Some(e) = schema.get("enum") {
        line += &format!(" enum={e}");
    }
    if let Some(d) = schema.get("default") {
        line += &format!(" default={d}");
    }
    if let Some(rules) = schema.get("x-kubernetes-validations").and_then(Value::as_array) {
        for r in rules {
            line += &format!(" rule[{}]", r["rule"].as_str().unwrap());
        }
    }
    out.push(line);
    let req: Vec<&str> = schema
        .get("required")
        .and_then(Value::as_array)
        .map(|a| a.iter().filter_map(Value::as_str).collect())
        .unwrap_or_default();
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (k, v) in props {
            digest(v, &format!("{path}.{k}"), req.contains(&k.as_str()), out);
        }
    }
    if let Some(items) = schema.get("items") {
        digest(items, &format!("{path}[]"), false, out);
    }
    if let Some(ap) = schema.get("additionalProperties").filter(|v| v.is_object()) {
        digest(ap, &format!("{path}{{}}"), false, out);
    }
}

fn crd_digest(crd: &Value) -> String {
    let v = &crd["spec"]["versions"][0];
    let mut out = vec![
        format!("names: {}", crd["spec"]["names"]),
        format!("subresources: {}", v["subresources"]),
        format!("printerColumns: {}", v["additionalPrinterColumns"]),
    ];
    // Descriptions of built-in types (ResourceRequirements) are pinned by k8s-openapi.
    digest(&v["schema"]["openAPIV3Schema"], "", false, &mut out);
    out.retain(|l| !l.starts_with(".spec.coordinator.resources.") && !l.starts_with(".spec.worker.resources."));
    out.join("\n") + "\n"
}

fn check_snapshot(name: &str, actual: &str) {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots").join(name);
    if std::env::var_os("WEIR_BLESS").is_some() {
        std::fs::write(&path, actual).unwrap();
    }
    let expected = std::fs::read_to_string(&path).unwrap_or_default();
    assert!(
        expected == actual,
        "schema of {name} changed; review, then re-run with WEIR_BLESS=1\n--- expected\n{expected}\n--- actual\n{actual}"
    );
}

#[test]
fn streamjob_schema_is_pinned() {
    check_snapshot(
        "streamjob.schema.txt",
        &crd_digest(&serde_json::to_value(StreamJob::crd()).unwrap()),
    );
}

#[test]
fn savepoint_schema_is_pinned() {
    check_snapshot(
        "savepoint.schema.txt",
        &crd_digest(&serde_json::to_value(Savepoint::crd()).unwrap()),
    );
}

#[test]
fn schemas_are_structural() {
    for crd in [
        serde_json::to_value(StreamJob::crd()).unwrap(),
        serde_json::to_value(Savepoint::crd()).unwrap(),
    ] {
        let text = crd.to_string();
        for banned in ["\"oneOf\"", "\"anyOf\"", "\"allOf\"", "\"$ref\""] {
            assert!(!text.contains(banned), "{banned} in {}", crd["metadata"]["name"]);
        }
        let mut lines = Vec::new();
        digest(
            &crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"],
            "",
            false,
            &mut lines,
        );
        let preserved: Vec<_> = lines.iter().filter(|l| l.contains("preserve-unknown")).collect();
        for l in &preserved {
            assert!(l.contains(".podTemplate:"), "unexpected preserve-unknown-fields: {l}");
        }
        // Every property has a type, except int-or-string quantities.
        for l in &lines[1..] {
            let kind = l.split(':').nth(1).unwrap().split_whitespace().next().unwrap_or("");
            assert!(
                [
                    "object",
                    "string",
                    "integer",
                    "boolean",
                    "array",
                    "number",
                    "int-or-string"
                ]
                .contains(&kind),
                "property without type: {l}"
            );
        }
    }
}

fn schema_of(
    crd: &k8s_openapi::apiextensions_apiserver::pkg::apis::apiextensions::v1::CustomResourceDefinition,
) -> Value {
    serde_json::to_value(
        crd.spec.versions[0]
            .schema
            .as_ref()
            .unwrap()
            .open_api_v3_schema
            .as_ref()
            .unwrap(),
    )
    .unwrap()
}

/// Applies schema defaults the way the API server does before validation (objects only).
fn apply_defaults(schema: &Value, value: &mut Value) {
    let (Some(props), Some(obj)) = (
        schema.get("properties").and_then(Value::as_object),
        value.as_object_mut(),
    ) else {
        return;
    };
    for (k, s) in props {
        if !obj.contains_key(k)
            && let Some(d) = s.get("default")
        {
            obj.insert(k.clone(), d.clone());
        }
        if let Some(child) = obj.get_mut(k) {
            apply_defaults(s, child);
        }
    }
}

fn streamjob_errors(obj: &Value, old: Option<&Value>) -> Vec<String> {
    let schema = schema_of(&StreamJob::crd());
    let mut obj = obj.clone();
    apply_defaults(&schema, &mut obj);
    let old = old.map(|o| {
        let mut o = o.clone();
        apply_defaults(&schema, &mut o);
        o
    });
    match Validator::new().validate(&schema, &obj, old.as_ref()) {
        Ok(()) => vec![],
        Err(e) => e.to_string().lines().map(str::to_owned).collect(),
    }
}

fn example(name: &str) -> Value {
    let text = std::fs::read_to_string(repo_root().join("examples").join(name)).unwrap();
    serde_yaml::from_str(&text).unwrap()
}

/// Every StreamJob example; the README says `kubectl apply` takes each of them.
/// (`every_streamjob_example_is_listed` keeps the list whole.)
const EXAMPLE_STREAMJOBS: [&str; 11] = [
    "streamjob-wordcount.yaml",
    "streamjob-generator-stateless.yaml",
    "wordcount.yaml",
    "github-events.yaml",
    "github-push-join.yaml",
    "github-windowed.yaml",
    "kafka-wordcount.yaml",
    "taxi-fares.yaml",
    "union-wordcount.yaml",
    "wikiticker-sessions.yaml",
    "wiki-branches.yaml",
];

#[test]
fn every_streamjob_example_is_listed() {
    let dir = repo_root().join("examples");
    let mut found: Vec<String> = std::fs::read_dir(&dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|x| x == "yaml"))
        .filter(|p| std::fs::read_to_string(p).unwrap().contains("\nkind: StreamJob"))
        .map(|p| p.file_name().unwrap().to_string_lossy().into_owned())
        .collect();
    found.sort();
    let mut listed = EXAMPLE_STREAMJOBS.map(String::from).to_vec();
    listed.sort();
    assert_eq!(found, listed, "add the new StreamJob example to EXAMPLE_STREAMJOBS");
}

fn minimal() -> Value {
    json!({
        "apiVersion": "weir.dev/v1alpha1", "kind": "StreamJob", "metadata": {"name": "j"},
        "spec": {"image": "weir:1", "checkpointing": {"storage": "s3://b/c"},
                 "job": {"steps": [{"source": {"generator": {}}}, {"sink": {"print": {}}}]}}
    })
}

#[test]
fn cel_accepts_valid_objects() {
    assert_eq!(streamjob_errors(&minimal(), None), Vec::<String>::new());
    for name in EXAMPLE_STREAMJOBS {
        assert_eq!(streamjob_errors(&example(name), None), Vec::<String>::new(), "{name}");
    }
}

/// `spec.image` is optional: the operator's runtime image applies (the README's
/// `kubectl apply -f examples/wordcount.yaml` sets none).
#[test]
fn image_is_optional() {
    let schema = schema_of(&StreamJob::crd());
    let required = schema["properties"]["spec"]["required"]
        .as_array()
        .cloned()
        .unwrap_or_default();
    assert!(
        !required.contains(&json!("image")),
        "spec.image is required: {required:?}"
    );
    let mut o = minimal();
    o["spec"].as_object_mut().unwrap().remove("image");
    assert_eq!(streamjob_errors(&o, None), Vec::<String>::new());
    let sj: StreamJob = serde_json::from_value(o).unwrap();
    assert_eq!(sj.spec.image, "");
    assert!(serde_json::to_value(&sj.spec).unwrap().get("image").is_none());
}

/// `status.conditions` is a list map keyed by `type`, so server-side apply merges conditions
/// by type (the API conventions' shape for conditions).
#[test]
fn status_conditions_is_a_list_map_keyed_by_type() {
    let schema = schema_of(&StreamJob::crd());
    let conditions = &schema["properties"]["status"]["properties"]["conditions"];
    assert_eq!(conditions["x-kubernetes-list-type"], "map", "{conditions}");
    assert_eq!(conditions["x-kubernetes-list-map-keys"], json!(["type"]));
    let item_required = conditions["items"]["required"].as_array().cloned().unwrap_or_default();
    assert!(
        item_required.contains(&json!("type")),
        "a map key must be required: {item_required:?}"
    );
}

#[test]
fn cel_rejects_parallelism_out_of_range_naming_the_field() {
    let mut o = minimal();
    o["spec"]["parallelism"] = json!(0);
    let errs = streamjob_errors(&o, None);
    assert!(
        errs.iter().any(|e| e.contains("spec.parallelism must be at least 1")),
        "{errs:?}"
    );

    let mut o = minimal();
    o["spec"]["parallelism"] = json!(200);
    let errs = streamjob_errors(&o, None);
    assert!(
        errs.iter()
            .any(|e| e.contains("spec.parallelism must not exceed spec.maxParallelism")),
        "{errs:?}"
    );

    o["spec"]["maxParallelism"] = json!(256);
    assert_eq!(streamjob_errors(&o, None), Vec::<String>::new());
}

/// The paths of the int-or-string properties under `schema` with their schemas.
fn int_or_string_fields<'a>(schema: &'a Value, path: &str, out: &mut Vec<(String, &'a Value)>) {
    if schema.get("x-kubernetes-int-or-string").is_some() {
        out.push((path.to_string(), schema));
    }
    if let Some(props) = schema.get("properties").and_then(Value::as_object) {
        for (k, v) in props {
            int_or_string_fields(v, &format!("{path}.{k}"), out);
        }
    }
    if let Some(items) = schema.get("items") {
        int_or_string_fields(items, &format!("{path}[]"), out);
    }
    if let Some(ap) = schema.get("additionalProperties").filter(|v| v.is_object()) {
        int_or_string_fields(ap, &format!("{path}{{}}"), out);
    }
}

/// Every size field of a StreamJob (an int-or-string outside the pods' `resources`, which are
/// Kubernetes' own quantities) has the runtime's quantity grammar as `pattern` and as a CEL rule,
/// so the API server refuses what `weir` refuses: `64MB` (and `-1`) with a message saying to
/// write `64Mi` or `64M`; `1.5Gi`, `1e3` and integers are taken (`kubectl apply` took `64MB`
/// before).
#[test]
fn size_fields_refuse_what_weir_refuses_saying_what_to_write() {
    use weir_runtime::job::quantity::{BYTE_QUANTITY_MESSAGE, BYTE_QUANTITY_PATTERN, BYTE_QUANTITY_RULE};
    let schema = schema_of(&StreamJob::crd());
    let mut fields = Vec::new();
    int_or_string_fields(&schema, "", &mut fields);
    fields.retain(|(path, _)| !path.contains(".resources."));
    let paths: Vec<&str> = fields.iter().map(|(p, _)| p.as_str()).collect();
    assert_eq!(
        paths,
        [
            ".spec.diskState.cacheSize",
            ".spec.diskState.writeBufferSize",
            ".spec.diskState.writeCacheSize"
        ]
    );
    let pattern = regex::Regex::new(BYTE_QUANTITY_PATTERN).unwrap();
    for (path, field) in &fields {
        assert_eq!(field["pattern"], BYTE_QUANTITY_PATTERN, "{path}");
        assert_eq!(
            field["x-kubernetes-validations"],
            json!([{"rule": BYTE_QUANTITY_RULE, "message": BYTE_QUANTITY_MESSAGE}]),
            "{path}"
        );
    }
    for (value, taken) in [
        (json!("64MB"), false),
        (json!("1GiB"), false),
        (json!("64Mi"), true),
        (json!("1.5Gi"), true),
        (json!("1e3"), true),
        (json!(1048576), true),
        (json!(-1), false),
    ] {
        for field in ["cacheSize", "writeBufferSize", "writeCacheSize"] {
            let mut o = minimal();
            o["spec"]["stateBackend"] = json!("disk");
            o["spec"]["diskState"] = json!({ field: value });
            let errs = streamjob_errors(&o, None);
            if taken {
                assert_eq!(errs, Vec::<String>::new(), "{field}: {value}");
            } else {
                assert!(
                    errs.iter().any(|e| e.contains("write 64Mi or 64M, not 64MB")),
                    "{field}: {value}: {errs:?}"
                );
            }
            if let Some(text) = value.as_str() {
                assert_eq!(pattern.is_match(text), taken, "pattern, {field}: {value}");
            }
        }
    }
}

#[test]
fn cel_makes_max_parallelism_immutable() {
    let old = minimal();
    let mut new = minimal();
    new["spec"]["maxParallelism"] = json!(256);
    let errs = streamjob_errors(&new, Some(&old));
    assert!(
        errs.iter().any(|e| e.contains("spec.maxParallelism is immutable")),
        "{errs:?}"
    );
    // Other changes are fine as updates.
    let mut new = minimal();
    new["spec"]["parallelism"] = json!(4);
    assert_eq!(streamjob_errors(&new, Some(&old)), Vec::<String>::new());
}

#[test]
fn cel_requires_storage_unless_stateless() {
    let mut o = minimal();
    o["spec"].as_object_mut().unwrap().remove("checkpointing");
    for mode in [None, Some("savepoint"), Some("last-state")] {
        if let Some(m) = mode {
            o["spec"]["upgradeMode"] = json!(m);
        }
        let errs = streamjob_errors(&o, None);
        assert!(
            errs.iter()
                .any(|e| e.contains("spec.checkpointing.storage is required unless spec.upgradeMode is stateless")),
            "{mode:?}: {errs:?}"
        );
    }
    o["spec"]["upgradeMode"] = json!("stateless");
    assert_eq!(streamjob_errors(&o, None), Vec::<String>::new());
}

#[test]
fn savepoint_job_ref_is_immutable() {
    let schema = schema_of(&Savepoint::crd());
    let old = example("wordcount-svp.yaml");
    assert!(Validator::new().validate(&schema, &old, None).is_ok());
    let mut new = old.clone();
    new["spec"]["jobRef"]["name"] = json!("other");
    let err = Validator::new()
        .validate(&schema, &new, Some(&old))
        .unwrap_err()
        .to_string();
    assert!(err.contains("spec.jobRef is immutable"), "{err}");
}

/// Every key of `input` survives a typed round trip, so the example has no misspelt field
/// (the API server would silently prune it).
fn assert_no_unknown_fields(input: &Value, typed: &Value, path: &str) {
    match (input, typed) {
        (Value::Object(a), Value::Object(b)) => {
            for (k, v) in a {
                let t = b.get(k).unwrap_or_else(|| panic!("unknown field {path}.{k}"));
                assert_no_unknown_fields(v, t, &format!("{path}.{k}"));
            }
        }
        (Value::Array(a), Value::Array(b)) => {
            for (i, (x, y)) in a.iter().zip(b).enumerate() {
                assert_no_unknown_fields(x, y, &format!("{path}[{i}]"));
            }
        }
        _ => {}
    }
}

#[test]
fn examples_deserialize_without_unknown_fields_and_the_runtime_reads_them() {
    for name in EXAMPLE_STREAMJOBS {
        let raw = example(name);
        let sj: StreamJob = serde_json::from_value(raw.clone()).unwrap();
        assert_no_unknown_fields(&raw, &serde_json::to_value(&sj).unwrap(), "");
        // The operator hands the whole object to the runtime as its job file.
        let text = serde_yaml::to_string(&sj).unwrap();
        let job = weir_runtime::job::parse_manifest(&text, &[]).unwrap_or_else(|e| panic!("{name}: {e}"));
        assert_eq!(job.parallelism as i32, sj.spec.parallelism, "{name}");
    }
    let raw = example("wordcount-svp.yaml");
    let svp: Savepoint = serde_json::from_value(raw.clone()).unwrap();
    assert_no_unknown_fields(&raw, &serde_json::to_value(&svp).unwrap(), "");
}
