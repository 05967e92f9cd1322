//! The job definition: manifest types ([`spec`]), loading with `--set` overrides, strict field
//! checking ([`fields`]), defaults and validation into a [`Job`] whose steps are typed
//! ([`Operator`]), and the plan-time check of the fields each step reads ([`schema`]).

pub mod bounds;
mod cel_errors;
pub mod dataflow;
pub mod disk_state;
mod durations;
pub mod event_time;
pub mod field_use;
pub mod fields;
pub mod join;
pub mod operator;
pub mod operator_durations;
pub mod origins;
pub mod quantity;
pub mod schema;
pub mod spec;
pub mod spec_checkpointing;
pub mod spec_join;
pub mod spec_kafka;
pub mod type_errors;
pub mod types;
pub mod validate;
mod validate_kafka;

pub use spec::*;
pub use validate::{Job, JobError, Operator, OperatorKind, default_max_parallelism};

use std::path::Path;

/// Parses a duration the way every duration field of a manifest is parsed (`500ms`, `10s`,
/// `1h 30m`, `7d`, Flink's `10 seconds` / `500 milliseconds`, ISO-8601 `PT10S`; a number
/// without a unit is refused), for fields outside the runtime's spec (the operator's
/// `periodicInterval`, `restartWindow`, ...), so every duration field accepts the same forms.
///
/// Errors: what is wrong with `text` and the forms to use (without a field path: the caller
/// names its field).
pub fn parse_duration(text: &str) -> Result<std::time::Duration, String> {
    durations::parse_duration("", text).map_err(|e| e.message)
}

/// Reads a StreamJob manifest from `path`, applies `--set PATH=VALUE` overrides (helm-style
/// dotted paths into the manifest, e.g. `spec.parallelism=4` or
/// `spec.job.steps.0.source.file.path=x`; VALUE is parsed as YAML), validates it, and checks
/// the steps against the schema of the source's files ([`check_source_files`]).
///
/// Errors: unreadable file, YAML syntax, an unknown field in the manifest or in a `--set` path
/// (with the closest known field name), a value of the wrong type, or a failed validation rule:
/// each a [`JobError`] naming the offending field's path (`spec.parallelism`).
pub fn load_manifest(path: &Path, overrides: &[String]) -> Result<Job, JobError> {
    let text =
        std::fs::read_to_string(path).map_err(|e| JobError::new("", format!("cannot read {}: {e}", path.display())))?;
    let job = parse_manifest(&text, overrides)?;
    check_source_files(&job)?;
    Ok(job)
}

/// The plan check with the sources' files: reads the CSV header or the first JSON lines of
/// the first local file each file source names ([`sample`](crate::operators::source::file::sample))
/// and checks every step against those schemas ([`schema::check_dataflow`]). Nothing to read (a
/// generator or text source, `s3://`, no file yet) checks nothing more than [`Job::from_spec`]
/// did. Errors: as [`schema::check_steps`], and a sampled record without a valid event time
/// ([`event_time::check_sampled_event_times`]).
pub fn check_source_files(job: &Job) -> Result<(), JobError> {
    let samples: Vec<Option<schema::SourceSample>> = job
        .operators
        .iter()
        .map(|op| match &op.kind {
            OperatorKind::FileSource(spec) => crate::operators::source::file::sample(spec),
            _ => None,
        })
        .collect();
    if samples.iter().all(Option::is_none) {
        return Ok(());
    }
    let samples: Vec<Option<&schema::SourceSample>> = samples.iter().map(Option::as_ref).collect();
    let schemas = schema::check_dataflow(&job.operators, &samples)?;
    event_time::check_source_fields(&job.operators, &job.spec.job.steps, &schemas)?;
    event_time::check_sampled_event_times(&job.operators, &job.spec.job.steps, &samples)
}

/// Parses and validates a manifest given as YAML text; see [`load_manifest`].
pub fn parse_manifest(text: &str, overrides: &[String]) -> Result<Job, JobError> {
    let mut doc = single_document(text)?;
    for o in overrides {
        apply_override(&mut doc, o)?;
    }
    fields::prune_non_nullable_nulls(&mut doc);
    fields::check_unknown_fields(&doc)?;
    let bounds_doc = doc.clone();
    let manifest: StreamJobManifest = serde_path_to_error::deserialize(doc).map_err(|e| {
        let path = e.path().to_string();
        let field = if path == "." { String::new() } else { path };
        let message = type_errors::plain_type_error(&field, &e.into_inner().to_string());
        JobError::new(field, message)
    })?;
    let mut job = Job::from_manifest(manifest)?;
    // After the runtime's rules, so the fields it uses keep their own messages.
    bounds::check_integer_bounds(&bounds_doc)?;
    operator_durations::check_in_manifest(&bounds_doc)?;
    job.initial_savepoint_path = bounds_doc
        .get("spec")
        .and_then(|spec| spec.get("initialSavepointPath"))
        .and_then(serde_yaml::Value::as_str)
        .filter(|path| !path.is_empty())
        .map(str::to_string);
    Ok(job)
}

/// The one YAML document of a manifest. Empty documents (a trailing `---`, as kubectl and helm
/// print) are skipped. Errors: invalid YAML, or more than one StreamJob in the file.
fn single_document(text: &str) -> Result<serde_yaml::Value, JobError> {
    let mut documents = Vec::new();
    for document in serde_yaml::Deserializer::from_str(text) {
        let value = <serde_yaml::Value as serde::Deserialize>::deserialize(document)
            .map_err(|e| JobError::new("", format!("invalid YAML: {e}")))?;
        if !value.is_null() {
            documents.push(value);
        }
    }
    match documents.len() {
        0 => Err(JobError::new(
            "",
            "the file holds no YAML document: give a StreamJob manifest",
        )),
        1 => Ok(documents.remove(0)),
        n => Err(JobError::new(
            "",
            format!("the file holds {n} YAML documents; a job file holds one StreamJob: put each in a file of its own"),
        )),
    }
}

/// Applies one `a.b.0.c=value` override to a YAML document, creating maps as needed.
///
/// Errors: not `PATH=VALUE`, a VALUE that is not YAML, a PATH segment that names no field of
/// the StreamJob schema ([`fields::check_set_path`]), or a list index out of range. They name
/// the field as every other error does ([`field_path`]: `spec.job.steps[9].uid`), and the
/// `--set` argument.
pub fn apply_override(doc: &mut serde_yaml::Value, set: &str) -> Result<(), JobError> {
    let (path, raw) = set
        .split_once('=')
        .ok_or_else(|| JobError::new("--set", format!("`{set}` is not PATH=VALUE")))?;
    let path = &dotted_set_path(path);
    fields::check_set_path(path)?;
    let at = |message: String| JobError::new(field_path(path), format!("{message} (in --set {set})"));
    if raw.trim().is_empty() {
        // YAML reads nothing as null, which drops the field: `--set spec.parallelism=$P` with
        // `P` unset silently ran the manifest's default (found by trial).
        return Err(JobError::new(
            field_path(path),
            format!(
                "the value of `--set {set}` is empty; give one (--set '{path}=...'), `\"\"` for an empty \
                 string, or leave the --set out"
            ),
        ));
    }
    let value: serde_yaml::Value =
        serde_yaml::from_str(raw).map_err(|e| at(format!("value `{raw}` is not valid YAML: {e}")))?;
    if value.is_mapping() && !raw.trim_start().starts_with('{') {
        // `a ? b : c` or `x: y` on one line: YAML reads `key: value`, never what was meant.
        return Err(at(format!(
            "value `{raw}` reads as a YAML mapping because of its `: `; quote it to set a string \
             (--set '{path}=\"{raw}\"') or write a mapping as `{{key: value}}`"
        )));
    }
    let mut cur = doc;
    for part in path.split('.') {
        if part.is_empty() {
            return Err(at("empty path component".into()));
        }
        cur = match cur {
            serde_yaml::Value::Sequence(seq) => {
                let i: usize = part
                    .parse()
                    .map_err(|_| at(format!("`{part}` must be a list index here")))?;
                let len = seq.len();
                seq.get_mut(i)
                    .ok_or_else(|| at(format!("index {i} is out of range (the list has {len} items)")))?
            }
            serde_yaml::Value::Mapping(_) | serde_yaml::Value::Null => {
                if cur.is_null() {
                    *cur = serde_yaml::Value::Mapping(Default::default());
                }
                let serde_yaml::Value::Mapping(m) = cur else {
                    unreachable!()
                };
                m.entry(serde_yaml::Value::String(part.to_string()))
                    .or_insert(serde_yaml::Value::Null)
            }
            _ => return Err(at(format!("cannot descend into `{part}`"))),
        };
    }
    *cur = value;
    Ok(())
}

/// A `--set` path with list indexes in brackets, as Helm's `--set` and this tool's error
/// messages write them (`spec.job.steps[0].source.file.path`), in the dotted form
/// (`spec.job.steps.0.source.file.path`); a path without brackets is returned as it is.
pub fn dotted_set_path(path: &str) -> String {
    let mut out = String::with_capacity(path.len());
    let mut rest = path;
    while let Some(open) = rest.find('[') {
        let Some(close) = rest[open..].find(']').map(|c| open + c) else {
            break;
        };
        let index = &rest[open + 1..close];
        if index.is_empty() || !index.bytes().all(|b| b.is_ascii_digit()) {
            break;
        }
        out.push_str(&rest[..open]);
        out.push('.');
        out.push_str(index);
        rest = &rest[close + 1..];
    }
    out.push_str(rest);
    out
}

/// A `--set` path (`spec.job.steps.0.source.file.path`) as error messages name fields, the
/// way serde_path_to_error and the API server do: list indexes in brackets, 0-based
/// (`spec.job.steps[0].source.file.path`).
pub fn field_path(set_path: &str) -> String {
    let mut out = String::new();
    for part in set_path.split('.') {
        if !part.is_empty() && part.bytes().all(|b| b.is_ascii_digit()) {
            out.push_str(&format!("[{part}]"));
        } else {
            if !out.is_empty() {
                out.push('.');
            }
            out.push_str(part);
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    const MINIMAL: &str = r#"
apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: { name: wc }
spec:
  parallelism: 2
  image: ignored-by-weir-run
  job:
    steps:
      - source: { file: { path: "x/*.txt" } }
      - flatMap: { field: line, pattern: '\W+', as: word }
      - keyBy: { expression: word, as: word }
      - count: {}
      - sink: { print: {} }
"#;

    /// Found by trial (helper-112): a trailing `---` (as kubectl and helm print) was refused
    /// with the YAML library's wording; two manifests in one file are refused saying what to
    /// do; an empty `--set` value (`--set spec.parallelism=$P`, `P` unset) silently dropped the
    /// manifest's value; the operator's own durations ran unchecked.
    #[test]
    fn documents_empty_set_values_and_operator_durations() {
        let job = parse_manifest(&format!("{MINIMAL}---\n"), &[]).expect("a trailing document separator");
        assert_eq!(job.parallelism, 2);
        let two = parse_manifest(&format!("{MINIMAL}---\n{MINIMAL}"), &[])
            .unwrap_err()
            .to_string();
        assert!(
            two.contains("holds 2 YAML documents; a job file holds one StreamJob"),
            "{two}"
        );
        let none = parse_manifest("---\n", &[]).unwrap_err().to_string();
        assert!(none.contains("holds no YAML document"), "{none}");
        let empty = parse_manifest(MINIMAL, &["spec.parallelism=".into()])
            .unwrap_err()
            .to_string();
        assert!(
            empty.starts_with("spec.parallelism: the value of `--set spec.parallelism=` is empty")
                && !empty.contains("(in --set"),
            "{empty}"
        );
        let blank_string = parse_manifest(MINIMAL, &[r#"spec.image="""#.into()]).expect("an explicit empty string");
        assert_eq!(blank_string.parallelism, 2);
        let window = parse_manifest(MINIMAL, &["spec.health.restartWindow=0s".into()])
            .unwrap_err()
            .to_string();
        assert!(
            window.starts_with("spec.health.restartWindow: must be greater than 0"),
            "{window}"
        );
    }

    #[test]
    fn overrides_set_nested_fields_and_list_items() {
        let job = parse_manifest(
            MINIMAL,
            &[
                "spec.parallelism=3".into(),
                "spec.job.steps.0.source.file.path=y.txt".into(),
            ],
        )
        .unwrap();
        assert_eq!(job.parallelism, 3);
        assert_eq!(
            job.spec.job.steps[0]
                .source
                .as_ref()
                .unwrap()
                .file
                .as_ref()
                .unwrap()
                .path,
            "y.txt"
        );
    }

    #[test]
    fn schema_errors_name_the_field_path() {
        let two = MINIMAL.replace("parallelism: 2", "parallelism: two");
        let e = parse_manifest(&two, &[]).unwrap_err().to_string();
        assert_eq!(
            e,
            r#"spec.parallelism: invalid type: string "two", expected a whole number from 1 to 4294967295"#
        );
        let no_path = MINIMAL.replace(r#"{ path: "x/*.txt" }"#, "{ format: text }");
        let e = parse_manifest(&no_path, &[]).unwrap_err().to_string();
        assert_eq!(e, "spec.job.steps[0].source.file: missing field `path`");
        let e = parse_manifest(&MINIMAL.replace("parallelism: 2", "paralellism: 4"), &[]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "spec: unknown field `paralellism`; did you mean `parallelism`?"
        );
    }

    #[test]
    fn override_paths_must_name_fields() {
        let e = parse_manifest(MINIMAL, &["spec.paralelism=3".into()])
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("unknown field `paralelism`; did you mean `parallelism`?"),
            "{e}"
        );
        assert!(e.contains("--set spec.paralelism"), "{e}");
    }

    #[test]
    fn override_errors_name_the_path() {
        let e = parse_manifest(MINIMAL, &["spec.job.steps.9.uid=a".into()]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "spec.job.steps[9].uid: index 9 is out of range (the list has 5 items) (in --set spec.job.steps.9.uid=a)"
        );
        let e = parse_manifest(MINIMAL, &["spec.parallelism".into()]).unwrap_err();
        assert!(e.to_string().contains("PATH=VALUE"), "{e}");
    }

    #[test]
    fn set_paths_take_list_indexes_in_brackets_as_errors_print_them() {
        for (given, want) in [
            (
                "spec.job.steps[0].source.file.path",
                "spec.job.steps.0.source.file.path",
            ),
            (
                "spec.job.steps[12].join.fields[1].as",
                "spec.job.steps.12.join.fields.1.as",
            ),
            ("spec.job.steps.0.uid", "spec.job.steps.0.uid"),
            ("spec.parallelism", "spec.parallelism"),
            ("spec.job.steps[x].uid", "spec.job.steps[x].uid"),
        ] {
            assert_eq!(dotted_set_path(given), want, "{given}");
        }
        let job = parse_manifest(MINIMAL, &["spec.job.steps[0].source.file.path=y.txt".into()]).unwrap();
        let source = job.spec.job.steps[0].source.as_ref().unwrap();
        assert_eq!(source.file.as_ref().unwrap().path, "y.txt");
        let e = parse_manifest(MINIMAL, &["spec.job.steps[9].uid=a".into()]).unwrap_err();
        assert_eq!(
            e.to_string(),
            "spec.job.steps[9].uid: index 9 is out of range (the list has 5 items) (in --set spec.job.steps[9].uid=a)"
        );
    }

    #[test]
    fn a_set_value_that_reads_as_a_mapping_by_accident_says_to_quote_it() {
        let set = "spec.job.steps.2.keyBy.expression=has(record.word) ? word : 'none'";
        let e = parse_manifest(MINIMAL, &[set.into()]).unwrap_err().to_string();
        assert!(
            e.starts_with(
                "spec.job.steps[2].keyBy.expression: value `has(record.word) ? word : 'none'` reads as a YAML mapping"
            ),
            "{e}"
        );
        assert!(
            e.contains(
                r#"quote it to set a string (--set 'spec.job.steps.2.keyBy.expression="has(record.word) ? word : 'none'"')"#
            ),
            "{e}"
        );
        let quoted = r#"spec.job.steps.2.keyBy.expression="has(record.word) ? word : 'none'""#;
        let job = parse_manifest(MINIMAL, &[quoted.into()]).unwrap();
        assert_eq!(
            job.spec.job.steps[2].key_by.as_ref().unwrap().expression,
            "has(record.word) ? word : 'none'"
        );
    }

    #[test]
    fn set_paths_name_fields_as_errors_do() {
        for (set_path, want) in [
            (
                "spec.job.steps.0.source.file.path",
                "spec.job.steps[0].source.file.path",
            ),
            (
                "spec.job.steps.12.join.fields.1.as",
                "spec.job.steps[12].join.fields[1].as",
            ),
            ("spec.parallelism", "spec.parallelism"),
            ("metadata.labels.a1", "metadata.labels.a1"),
        ] {
            assert_eq!(field_path(set_path), want, "{set_path}");
        }
    }
}

#[cfg(test)]
#[path = "error_paths_tests.rs"]
mod error_paths_tests;
