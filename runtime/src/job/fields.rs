//! Strict field checking of a StreamJob manifest, as the Kubernetes API server's strict field
//! validation does it: every field in the document must be one the `StreamJob` schema declares,
//! so a typo (`paralellism`, `maxRecordsPerSecnd`) is an error naming where it is, with the
//! closest known field name as a suggestion, instead of a field silently ignored.
//!
//! The schema is the generated CRD (`crds/streamjobs.weir.dev.yaml`, from the operator's types,
//! which embed the runtime's [`JobSpec`](super::JobSpec) types), so `weir run` accepts exactly
//! the fields `kubectl apply` accepts: operator-only fields (`image`, `upgradeMode`, pod
//! templates, ...) included. Object metadata (`metadata.labels`, `annotations`, ...) is checked
//! against the field names of Kubernetes' `ObjectMeta`; the contents of free-form maps and of
//! `podTemplate` (kept as an opaque object by the CRD) are not checked.

use super::validate::JobError;
use serde_json::Value as Schema;
use serde_yaml::Value;
use std::sync::LazyLock;

/// The generated StreamJob CRD. CI checks it equals `weir-operator crdgen` output
/// (operator/tests/crds.rs), so it follows every change of the spec types.
const STREAM_JOB_CRD: &str = include_str!("../../../crds/streamjobs.weir.dev.yaml");

/// Fields a manifest has at its top level besides the schema's `spec` and `status`.
const TYPE_META_FIELDS: [&str; 3] = ["apiVersion", "kind", "metadata"];

/// Field names of Kubernetes `ObjectMeta` (`metadata` of any object).
const OBJECT_META_FIELDS: [&str; 15] = [
    "name",
    "namespace",
    "labels",
    "annotations",
    "generateName",
    "uid",
    "resourceVersion",
    "generation",
    "creationTimestamp",
    "deletionTimestamp",
    "deletionGracePeriodSeconds",
    "finalizers",
    "ownerReferences",
    "managedFields",
    "selfLink",
];

/// The `openAPIV3Schema` of the StreamJob CRD's served version.
static OPEN_API_SCHEMA: LazyLock<Schema> = LazyLock::new(|| {
    let crd: Schema = serde_yaml::from_str(STREAM_JOB_CRD).expect("the checked-in StreamJob CRD is YAML");
    crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"].clone()
});

/// The `openAPIV3Schema` of the checked-in StreamJob CRD (what the API server validates
/// against), as JSON.
pub fn stream_job_schema() -> &'static Schema {
    &OPEN_API_SCHEMA
}

/// Checks that every field of `doc` (a whole StreamJob manifest) is a known one.
///
/// Errors: the first unknown field, as a [`JobError`] whose field is the path of the object
/// holding it (`spec.job.steps[0].source.file`) and whose message names the unknown field and
/// the closest known one (`unknown field `maxRecordsPerSecnd`; did you mean
/// `maxRecordsPerSecond`?`) or lists the known ones.
pub fn check_unknown_fields(doc: &Value) -> Result<(), JobError> {
    let Value::Mapping(top) = doc else {
        return Ok(()); // not an object: the typed deserialization reports it
    };
    let schema = &*OPEN_API_SCHEMA;
    for (key, value) in top {
        let name = field_name(key, "")?;
        if name == "metadata" {
            check_metadata(value)?;
        } else if let Some(child) = schema["properties"].get(name) {
            check_value(value, child, name)?;
        } else if !TYPE_META_FIELDS.contains(&name) {
            return Err(unknown_field("", name, top_level_fields(schema)));
        }
    }
    Ok(())
}

/// Removes from `doc` (a whole StreamJob manifest) every field whose value is null where the
/// schema does not declare it `nullable`, as the API server prunes such nulls before defaulting
/// (Kubernetes "Defaulting and Nullable": a null of a non-nullable field is dropped and the
/// field's default applies). So `stateBackend: ~` means the default on `weir run` as it does
/// after `kubectl apply`, and a nullable field (`ttl: ~`, an `Option`) keeps its null, read as
/// unset. Fields the schema does not know keep their null, for [`check_unknown_fields`] to
/// name, and so do required ones (refused either way: the typed read says the value is empty);
/// free-form maps and opaque objects are left as they are. Before 2026-12-07 a null was
/// refused on some fields ("invalid type: an empty value") and accepted on others.
pub fn prune_non_nullable_nulls(doc: &mut Value) {
    if let Value::Mapping(top) = doc {
        for (key, value) in top.iter_mut() {
            if let Some(child) = key.as_str().and_then(|name| OPEN_API_SCHEMA["properties"].get(name)) {
                prune_value(value, child);
            }
        }
    }
}

fn prune_value(value: &mut Value, schema: &Schema) {
    if is_opaque(schema) {
        return;
    }
    match value {
        Value::Mapping(map) => {
            let Some(properties) = schema.get("properties") else {
                return; // a free-form map (`additionalProperties`): its values are the user's
            };
            let required: Vec<&str> = schema
                .get("required")
                .and_then(Schema::as_array)
                .map(|names| names.iter().filter_map(Schema::as_str).collect())
                .unwrap_or_default();
            map.retain(|key, child| {
                let Some(name) = key.as_str() else { return true };
                let Some(child_schema) = properties.get(name) else {
                    return true;
                };
                let nullable = child_schema.get("nullable") == Some(&Schema::Bool(true));
                // A required field keeps its null: both refuse it, and "an empty value" says
                // more than the API server's "Required value".
                !(child.is_null() && !nullable && !required.contains(&name))
            });
            for (key, child) in map.iter_mut() {
                if let Some(child_schema) = key.as_str().and_then(|name| properties.get(name)) {
                    prune_value(child, child_schema);
                }
            }
        }
        Value::Sequence(items) => {
            if let Some(item_schema) = schema.get("items") {
                for item in items {
                    prune_value(item, item_schema);
                }
            }
        }
        Value::Tagged(tagged) => prune_value(&mut tagged.value, schema),
        _ => {}
    }
}

/// Checks the field names of a `--set` path (`spec.job.steps.0.source.file.path`) against the
/// schema, before the override is applied.
///
/// Errors: the first segment that names no field, as for [`check_unknown_fields`], with the
/// whole `--set` path in the message.
pub fn check_set_path(set_path: &str) -> Result<(), JobError> {
    let schema = &*OPEN_API_SCHEMA;
    let mut segments = set_path.split('.');
    let Some(first) = segments.next() else {
        return Ok(());
    };
    let in_set = |e: JobError| JobError::new(e.field, format!("{} (in --set {set_path})", e.message));
    if first == "metadata" {
        return match segments.next() {
            Some(meta) if !OBJECT_META_FIELDS.contains(&meta) => {
                Err(in_set(unknown_field("metadata", meta, OBJECT_META_FIELDS.to_vec())))
            }
            _ => Ok(()),
        };
    }
    let Some(mut node) = schema["properties"].get(first) else {
        if TYPE_META_FIELDS.contains(&first) {
            return Ok(());
        }
        return Err(in_set(unknown_field("", first, top_level_fields(schema))));
    };
    let mut path = first.to_string();
    for segment in segments {
        if is_opaque(node) {
            return Ok(());
        }
        if let Some(items) = node.get("items") {
            node = items;
            path = format!("{path}[{segment}]");
        } else if let Some(child) = node.get("properties").and_then(|p| p.get(segment)) {
            node = child;
            path = join(&path, segment);
        } else if let Some(values) = node.get("additionalProperties").filter(|v| v.is_object()) {
            node = values;
            path = join(&path, segment);
        } else if node.get("type").and_then(Schema::as_str) == Some("object") {
            return Err(in_set(unknown_field(&path, segment, known_fields(node))));
        } else {
            return Err(JobError::new(
                path,
                format!("is not an object or list: --set {set_path} cannot go into `{segment}`"),
            ));
        }
    }
    Ok(())
}

/// The fields of the object at `field` (`spec.job.steps[0].source.eventTime`, as errors name
/// fields), sorted; empty when the path names no object of the schema.
pub fn known_fields_at(field: &str) -> Vec<&'static str> {
    if field.is_empty() {
        // The manifest itself: `status` is the operator's to write.
        let mut names: Vec<&str> = top_level_fields(&OPEN_API_SCHEMA)
            .into_iter()
            .filter(|f| *f != "status")
            .collect();
        names.sort_unstable();
        return names;
    }
    let Some(node) = schema_at(field) else {
        return Vec::new();
    };
    let mut names = known_fields(node);
    names.sort_unstable();
    names
}

/// The values the schema allows at `field` when it is an enum (`spec.checkpointing.mode`:
/// `exactly-once`, `at-least-once`, `at-most-once`), in the schema's order; empty otherwise.
pub fn enum_values_at(field: &str) -> Vec<&'static str> {
    schema_at(field).map(string_enum).unwrap_or_default()
}

/// The least and the greatest whole number the schema allows at `field` (as errors name
/// fields: `spec.checkpointing.retained`): its `minimum` and `maximum`, or `N` of the
/// validation rules' `self >= N` and `self <= N` (the CEL rules the API server checks:
/// `spec.parallelism`'s `self >= 1`, `spec.maxParallelism`'s `self >= 1 && self <= 32768`);
/// `None` for a bound it states in neither way.
pub fn integer_bounds_at(field: &str) -> (Option<u64>, Option<u64>) {
    schema_at(field).map_or((None, None), integer_bounds)
}

/// [`integer_bounds_at`] of the schema node `node`.
fn integer_bounds(node: &Schema) -> (Option<u64>, Option<u64>) {
    let bound = |key: &str| node.get(key).and_then(Schema::as_f64).filter(|b| *b >= 0.0);
    // Each rule's `&&`-joined parts of the form `self >= N` / `self <= N`; a rule with `||`
    // or `oldSelf` states no bound of the value alone and is skipped.
    let parts: Vec<&str> = node
        .get("x-kubernetes-validations")
        .and_then(Schema::as_array)
        .into_iter()
        .flatten()
        .filter_map(|v| v.get("rule").and_then(Schema::as_str))
        .filter(|rule| !rule.contains("||") && !rule.contains("oldSelf"))
        .flat_map(|rule| rule.split("&&").map(str::trim))
        .collect();
    let in_rules = |operator: &str| {
        parts
            .iter()
            .filter_map(|part| {
                part.strip_prefix("self")?
                    .trim_start()
                    .strip_prefix(operator)?
                    .trim()
                    .parse::<u64>()
                    .ok()
            })
            .collect::<Vec<u64>>()
    };
    let least = bound("minimum")
        .map(|m| m.ceil() as u64)
        .into_iter()
        .chain(in_rules(">="))
        .max();
    let greatest = bound("maximum")
        .map(|m| m.floor() as u64)
        .into_iter()
        .chain(in_rules("<="))
        .min();
    (least, greatest)
}

/// The schema node at `field` (as errors name fields: `spec.job.steps[0].source`), if any.
fn schema_at(field: &str) -> Option<&'static Schema> {
    let mut node: &'static Schema = &OPEN_API_SCHEMA;
    for part in field.split('.').filter(|p| !p.is_empty()) {
        let (name, indexes) = part
            .split_once('[')
            .map_or((part, 0), |(n, rest)| (n, rest.matches(']').count()));
        node = node.get("properties")?.get(name)?;
        for _ in 0..indexes {
            node = node.get("items")?;
        }
    }
    Some(node)
}

fn check_metadata(value: &Value) -> Result<(), JobError> {
    if let Value::Mapping(meta) = value {
        for key in meta.keys() {
            let name = field_name(key, "metadata")?;
            if !OBJECT_META_FIELDS.contains(&name) {
                return Err(unknown_field("metadata", name, OBJECT_META_FIELDS.to_vec()));
            }
        }
    }
    Ok(())
}

fn check_value(value: &Value, schema: &Schema, path: &str) -> Result<(), JobError> {
    if is_opaque(schema) {
        return Ok(());
    }
    match value {
        Value::Mapping(_) if schema.get("type").and_then(Schema::as_str) == Some("string") => {
            return Err(mapping_for_a_string(path, schema));
        }
        Value::Mapping(_) if schema.get("x-kubernetes-int-or-string") == Some(&Schema::Bool(true)) => {
            return Err(JobError::new(
                path,
                "invalid type: a mapping, expected an integer or a string (a quantity: `64Mi`, `1048576`)",
            ));
        }
        Value::Mapping(map) => {
            let properties = schema.get("properties");
            let values = schema.get("additionalProperties").filter(|v| v.is_object());
            for (key, child_value) in map {
                let name = field_name(key, path)?;
                let child_path = join(path, name);
                match (properties.and_then(|p| p.get(name)), values) {
                    (Some(child), _) | (None, Some(child)) => check_value(child_value, child, &child_path)?,
                    (None, None) => return Err(unknown_field(path, name, known_fields(schema))),
                }
            }
        }
        Value::Sequence(items) => {
            if let Some(item_schema) = schema.get("items") {
                for (i, item) in items.iter().enumerate() {
                    check_value(item, item_schema, &format!("{path}[{i}]"))?;
                }
            }
        }
        Value::Tagged(tagged) => check_value(&tagged.value, schema, path)?,
        // A value outside an enum, as the API server refuses it: the operator-only fields
        // (`state`, `upgradeMode`, ...) are not read by `weir run`, so nothing else would.
        // Not `status`: the API server ignores it in what is applied (the status subresource).
        Value::String(text) if !path.starts_with("status") => {
            let allowed = string_enum(schema);
            if !allowed.is_empty() && !allowed.contains(&text.as_str()) {
                // serde's own wording for an unknown variant, so a field reads the same
                // whichever check refuses it.
                let quoted: Vec<String> = allowed.iter().map(|v| format!("`{v}`")).collect();
                let expected = match quoted.as_slice() {
                    [one] => one.clone(),
                    [a, b] => format!("{a} or {b}"),
                    many => format!("one of {}", many.join(", ")),
                };
                let mut message = format!("unknown variant `{text}`, expected {expected}");
                // `HEAP`, `Disk`, `Exactly-Once`: the values are case-sensitive, as the API
                // server's enum check is.
                if let Some(meant) = allowed.iter().find(|v| v.eq_ignore_ascii_case(text)) {
                    message.push_str(&format!(" (values are case-sensitive: write `{meant}`)"));
                }
                return Err(JobError::new(
                    path,
                    super::type_errors::plain_type_error(path, &message),
                ));
            }
        }
        _ => {}
    }
    Ok(())
}

/// The string values of the schema's `enum`, if it has one.
fn string_enum(schema: &Schema) -> Vec<&str> {
    schema
        .get("enum")
        .and_then(Schema::as_array)
        .map(|values| values.iter().filter_map(Schema::as_str).collect())
        .unwrap_or_default()
}

/// The error of a YAML mapping where the schema (`schema`, at `path`) has a string: in an
/// `expression`, almost always a CEL map literal (`expression: {'line': line.lower()}`) that
/// YAML read as a flow mapping because it is not quoted; elsewhere the values allowed.
fn mapping_for_a_string(path: &str, schema: &Schema) -> JobError {
    if path.ends_with(".expression") || path == "expression" {
        return JobError::new(
            path,
            "invalid type: a mapping, expected a string; a CEL map literal must be quoted, since YAML reads \
             `{...}` as a mapping: `expression: \"{'line': line.lower()}\"`",
        );
    }
    let allowed: Vec<String> = string_enum(schema).iter().map(|v| format!("`{v}`")).collect();
    // `spec.state` is the job's desired state; Flink's `state.backend` is `spec.stateBackend`.
    let backend_hint = match path {
        "spec.state" => "; the state backend is `spec.stateBackend` (`heap` or `disk`)",
        _ => "",
    };
    match allowed.is_empty() {
        true => JobError::new(path, "invalid type: a mapping, expected a string"),
        false => JobError::new(
            path,
            format!(
                "invalid type: a mapping, expected one of {}{backend_hint}",
                allowed.join(", ")
            ),
        ),
    }
}

/// Whether the schema keeps whatever is below it (`x-kubernetes-preserve-unknown-fields`).
fn is_opaque(schema: &Schema) -> bool {
    schema.get("x-kubernetes-preserve-unknown-fields") == Some(&Schema::Bool(true))
}

fn field_name<'a>(key: &'a Value, path: &str) -> Result<&'a str, JobError> {
    key.as_str()
        .ok_or_else(|| JobError::new(path, format!("field names must be strings, got {key:?}")))
}

fn join(path: &str, name: &str) -> String {
    if path.is_empty() {
        name.to_string()
    } else {
        format!("{path}.{name}")
    }
}

fn known_fields(schema: &Schema) -> Vec<&str> {
    schema
        .get("properties")
        .and_then(Schema::as_object)
        .map(|p| p.keys().map(String::as_str).collect())
        .unwrap_or_default()
}

fn top_level_fields(schema: &Schema) -> Vec<&str> {
    let mut names = TYPE_META_FIELDS.to_vec();
    names.extend(known_fields(schema));
    names
}

fn unknown_field(path: &str, name: &str, known: Vec<&str>) -> JobError {
    if let Some(hint) = flink_name_hint(path, name) {
        return JobError::new(path, format!("unknown field `{name}`; {hint}"));
    }
    let message = match closest_name(name, &known) {
        Some(close) => format!("unknown field `{name}`; did you mean `{close}`?"),
        None if known.is_empty() => format!("unknown field `{name}`; this object has no fields"),
        None => format!("unknown field `{name}`; known fields: {}", known.join(", ")),
    };
    JobError::new(path, message)
}

/// Flink configuration keys users write into a StreamJob, and the field that does that here.
const FLINK_KEYS: [(&str, &str); 14] = [
    ("state.backend", "spec.stateBackend (`heap` or `disk`)"),
    ("state.backend.type", "spec.stateBackend (`heap` or `disk`)"),
    ("state.backend.incremental", "spec.checkpointing.incremental"),
    ("execution.checkpointing.incremental", "spec.checkpointing.incremental"),
    ("state.checkpoints.dir", "spec.checkpointing.storage"),
    ("execution.checkpointing.dir", "spec.checkpointing.storage"),
    ("state.savepoints.dir", "spec.savepoints.directory"),
    ("execution.checkpointing.savepoint-dir", "spec.savepoints.directory"),
    ("execution.checkpointing.interval", "spec.checkpointing.interval"),
    ("execution.checkpointing.mode", "spec.checkpointing.mode"),
    ("state.checkpoints.num-retained", "spec.checkpointing.retained"),
    ("execution.checkpointing.num-retained", "spec.checkpointing.retained"),
    ("parallelism.default", "spec.parallelism"),
    ("pipeline.max-parallelism", "spec.maxParallelism"),
];

/// What a Flink user most likely meant by the unknown field `name` at `path`, when it is a
/// Flink configuration key ([`FLINK_KEYS`]) or a Flink habit: `checkpointing.dir` (Flink's
/// `state.checkpoints.dir`), a step-level `ttl` (Flink's `StateTtlConfig` is set on a state's
/// descriptor; here on the stateful step's settings).
fn flink_name_hint(path: &str, name: &str) -> Option<String> {
    if let Some((_, field)) = FLINK_KEYS.iter().find(|(key, _)| *key == name) {
        return Some(format!("`{name}` is a Flink configuration key; here it is {field}"));
    }
    let step = path.starts_with("spec.job.steps[") && path.ends_with(']');
    match (path, name) {
        ("spec.checkpointing", "dir" | "directory" | "path") => Some(format!(
            "the checkpoint location (Flink's `state.checkpoints.dir`) is `storage`: `{path}.storage: <dir or s3://bucket/prefix>`"
        )),
        (_, "ttl") if step => Some(format!(
            "state TTL is set on the stateful step's own settings, e.g. `{path}.count: {{ ttl: 24h }}` (also on \
             sum, min, max and join)"
        )),
        _ => None,
    }
}

/// The known name closest to `name`, if one is close: equal ignoring case, `_` and `-`
/// (`max_records_per_second` for `maxRecordsPerSecond`), or at most two edits (insertions,
/// deletions, substitutions, transpositions) away and short of a third of its length.
pub fn closest_name<'a>(name: &str, known: &[&'a str]) -> Option<&'a str> {
    let normalize = |s: &str| {
        s.chars()
            .filter(|c| *c != '_' && *c != '-')
            .collect::<String>()
            .to_lowercase()
    };
    let wanted = normalize(name);
    if let Some(same) = known.iter().find(|k| normalize(k) == wanted) {
        return Some(same);
    }
    known
        .iter()
        .map(|k| (strsim::osa_distance(&wanted, &normalize(k)), *k))
        .filter(|(distance, k)| *distance <= 2 && distance * 3 <= k.len())
        .min_by_key(|(distance, _)| *distance)
        .map(|(_, k)| k)
}

#[cfg(test)]
#[path = "fields_tests.rs"]
mod tests;
