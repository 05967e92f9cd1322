//! Defaults and validation: a [`StreamJobManifest`] becomes a [`Job`] or a [`JobError`] that
//! names the offending field (`spec.job.steps[2].keyBy.expression: ...`).

use super::durations::{parse_duration, parse_ttl};
pub use super::operator::{AggregateFn, Operator, OperatorKind};
use super::spec::*;
use std::time::Duration;

/// A validation error naming the field path it concerns.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
#[error("{}{message}", if field.is_empty() { String::new() } else { format!("{field}: ") })]
pub struct JobError {
    /// Dotted path of the field (`spec.parallelism`), empty for whole-document errors.
    pub field: String,
    /// What is wrong and what is expected.
    pub message: String,
}

impl JobError {
    /// Builds an error for `field`.
    pub fn new(field: impl Into<String>, message: impl Into<String>) -> Self {
        JobError {
            field: field.into(),
            message: message.into(),
        }
    }
}

/// Largest supported max parallelism (number of key groups), as in Flink.
pub const UPPER_BOUND_MAX_PARALLELISM: u32 = 32768;

/// Flink's default max parallelism for an operator of parallelism `p`:
/// `min(max(roundUpToPowerOfTwo(p + p/2), 128), 32768)`
/// (`KeyGroupRangeAssignment.computeDefaultMaxParallelism`).
pub fn default_max_parallelism(parallelism: u32) -> u32 {
    let p = u64::from(parallelism);
    let rounded = (p + p / 2).max(1).next_power_of_two();
    rounded.clamp(128, u64::from(UPPER_BOUND_MAX_PARALLELISM)) as u32
}

/// A validated job with defaults applied.
#[derive(Clone, Debug)]
pub struct Job {
    /// `metadata.name`.
    pub name: String,
    /// `metadata.namespace`, if the manifest has one (the operator's job files do).
    pub namespace: Option<String>,
    /// The spec as given (after overrides).
    pub spec: JobSpec,
    /// Parallelism of every operator.
    pub parallelism: u32,
    /// Number of key groups.
    pub max_parallelism: u32,
    /// Checkpoint interval; zero disables periodic checkpoints.
    pub checkpoint_interval: Duration,
    /// Checkpoint timeout.
    pub checkpoint_timeout: Duration,
    /// Minimum pause between checkpoints.
    pub min_pause: Duration,
    /// Steps in `spec.job.steps` order, which is a data order: inputs come first.
    pub operators: Vec<Operator>,
    /// Where the values that errors after loading concern came from (flags, `--set`, the
    /// manifest), so those errors name them as given; the manifest unless the CLI says otherwise.
    pub origins: super::origins::ValueOrigins,
    /// `spec.initialSavepointPath`, if the manifest sets it: the operator's first restore
    /// point. `weir run` does not read it (it restores what `--restore` names) and says so.
    pub initial_savepoint_path: Option<String>,
}

fn is_dns_label(s: &str) -> bool {
    !s.is_empty()
        && s.len() <= 63
        && s.bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-')
        && !s.starts_with('-')
        && !s.ends_with('-')
}

impl Job {
    /// Validates a manifest; see [`Job::from_spec`].
    pub fn from_manifest(m: StreamJobManifest) -> Result<Job, JobError> {
        if m.api_version != API_VERSION {
            return Err(JobError::new(
                "apiVersion",
                format!("must be `{API_VERSION}`, got `{}`", m.api_version),
            ));
        }
        if m.kind != KIND {
            return Err(JobError::new("kind", format!("must be `{KIND}`, got `{}`", m.kind)));
        }
        let mut job = Job::from_spec(&m.metadata.name, m.spec)?;
        job.namespace = m.metadata.namespace.filter(|ns| !ns.is_empty());
        Ok(job)
    }

    /// Applies defaults and checks every rule, returning the first violation with its field
    /// path. Rules: name is a DNS-1123 label; 1 ≤ parallelism ≤ maxParallelism ≤ 32768;
    /// durations parse; each step sets exactly one kind; the first step is the only source and
    /// the last the only sink; an aggregation directly follows a `keyBy`; uids are unique;
    /// CEL expressions and regexes compile; a step reads only fields its input can have, where
    /// the source declares them ([`schema`](super::schema)).
    pub fn from_spec(name: &str, spec: JobSpec) -> Result<Job, JobError> {
        if !is_dns_label(name) {
            return Err(JobError::new(
                "metadata.name",
                format!("`{name}` must be a DNS-1123 label (lowercase letters, digits, '-', at most 63)"),
            ));
        }
        let p = spec.parallelism;
        let max_p = spec.max_parallelism.unwrap_or_else(|| default_max_parallelism(p));
        if !(1..=UPPER_BOUND_MAX_PARALLELISM).contains(&max_p) {
            return Err(JobError::new(
                "spec.maxParallelism",
                format!("must be between 1 and {UPPER_BOUND_MAX_PARALLELISM}, got {max_p}"),
            ));
        }
        if p < 1 || p > max_p {
            return Err(JobError::new(
                "spec.parallelism",
                format!("must be between 1 and maxParallelism ({max_p}), got {p}"),
            ));
        }
        let c = &spec.checkpointing;
        let checkpoint_interval = parse_duration("spec.checkpointing.interval", &c.interval)?;
        let checkpoint_timeout = parse_duration("spec.checkpointing.timeout", &c.timeout)?;
        let min_pause = parse_duration("spec.checkpointing.minPause", &c.min_pause)?;
        if checkpoint_timeout.is_zero() {
            return Err(JobError::new("spec.checkpointing.timeout", "must be greater than 0"));
        }
        if c.retained == 0 {
            return Err(JobError::new("spec.checkpointing.retained", "must be at least 1"));
        }
        check_unaligned(c)?;
        check_local_locations(&spec)?;
        spec.disk_state_options()?;
        if spec.disk_state.is_some() && spec.state_backend != crate::job::StateBackend::Disk {
            return Err(JobError::new(
                "spec.diskState",
                "sets the disk state backend's memory, but spec.stateBackend is heap; set `stateBackend: disk` or remove diskState",
            ));
        }
        let operators = validate_steps(&spec.job.steps)?;
        if c.unaligned
            && let Some(i) = spec
                .job
                .steps
                .iter()
                .position(|st| st.source.as_ref().is_some_and(|so| so.event_time.is_some()))
        {
            return Err(JobError::new(
                "spec.checkpointing.unaligned",
                format!(
                    "unaligned checkpoints do not support event time yet (spec.job.steps[{i}].source.eventTime): \
                     channel state would be replayed without its watermarks; remove `unaligned: true` \
                     (aligned checkpoints) or the event time"
                ),
            ));
        }
        Ok(Job {
            name: name.to_string(),
            namespace: None,
            parallelism: p,
            max_parallelism: max_p,
            checkpoint_interval,
            checkpoint_timeout,
            min_pause,
            operators,
            spec,
            origins: Default::default(),
            initial_savepoint_path: None,
        })
    }

    /// Whether the job is a dataflow with more than one input somewhere (several sources, a
    /// union), rather than one straight line.
    pub fn is_multi_input(&self) -> bool {
        self.operators.iter().any(|o| o.inputs.len() > 1)
    }

    /// When a subtask switches a checkpoint (never a savepoint) from aligned to unaligned:
    /// `None` never (aligned checkpoints), `Some(0)` at once (`unaligned: true`), `Some(t)`
    /// when its last barrier has not arrived `t` after its first (`alignedCheckpointTimeout`).
    pub fn unaligned_after(&self) -> Option<Duration> {
        let c = &self.spec.checkpointing;
        if !c.unaligned {
            return None;
        }
        // Validated in `from_spec`, so the parse cannot fail here.
        Some(
            c.aligned_checkpoint_timeout
                .as_deref()
                .and_then(|t| super::durations::parse_duration("spec.checkpointing.alignedCheckpointTimeout", t).ok())
                .unwrap_or(Duration::ZERO),
        )
    }

    /// The operator with `uid`, if any.
    pub fn operator(&self, uid: &str) -> Option<&Operator> {
        self.operators.iter().find(|o| o.uid == uid)
    }
}

pub(super) fn step_kind(i: usize, step: &Step) -> Result<OperatorKind, JobError> {
    let at = format!("spec.job.steps[{i}]");
    let mut kinds = Vec::new();
    if let Some(s) = &step.source {
        if let Some(et) = &s.event_time {
            super::event_time::event_time(&format!("{at}.source.eventTime"), et)?;
        }
        kinds.push(match (&s.file, &s.generator, &s.kafka) {
            (None, None, Some(k)) => {
                super::validate_kafka::check_source(&format!("{at}.source.kafka"), k)?;
                OperatorKind::KafkaSource(k.clone())
            }
            (Some(f), None, None) => {
                if f.path.trim().is_empty() {
                    return Err(JobError::new(format!("{at}.source.file.path"), "must not be empty"));
                }
                check_rate_limit(&format!("{at}.source.file"), f.max_records_per_second)?;
                OperatorKind::FileSource(f.clone())
            }
            (None, Some(g), None) => {
                let at = format!("{at}.source.generator");
                check_at_least_one(&format!("{at}.splits"), g.splits.map(u64::from))?;
                check_at_least_one(&format!("{at}.keys"), g.keys)?;
                check_rate_limit(&at, g.max_records_per_second)?;
                OperatorKind::Generator(g.clone())
            }
            _ => {
                return Err(JobError::new(
                    format!("{at}.source"),
                    "set exactly one of `file`, `generator`, `kafka`",
                ));
            }
        });
    }
    if let Some(e) = &step.filter {
        check_cel(&format!("{at}.filter.expression"), &e.expression)?;
        kinds.push(OperatorKind::Filter(e.expression.clone()));
    }
    if let Some(e) = &step.map {
        check_cel(&format!("{at}.map.expression"), &e.expression)?;
        kinds.push(OperatorKind::Map(e.expression.clone()));
    }
    if let Some(f) = &step.flat_map {
        match regex::Regex::new(&f.pattern) {
            Err(e) => {
                return Err(JobError::new(
                    format!("{at}.flatMap.pattern"),
                    format!("invalid regex: {e}"),
                ));
            }
            // `''` or `\s*` splits between every character (found by trial: a line became
            // its letters); nobody means that by a separator.
            Ok(separator) if separator.is_match("") => {
                return Err(JobError::new(
                    format!("{at}.flatMap.pattern"),
                    format!(
                        "`{}` matches the empty string, so it would split between every character; give a \
                         separator that matches at least one character (`\\W+`, `\\s+`, `,`)",
                        f.pattern
                    ),
                ));
            }
            Ok(_) => {}
        }
        if f.field.is_empty() {
            return Err(JobError::new(format!("{at}.flatMap.field"), "must not be empty"));
        }
        kinds.push(OperatorKind::FlatMap(f.clone()));
    }
    if let Some(k) = &step.key_by {
        check_cel(&format!("{at}.keyBy.expression"), &k.expression)?;
        kinds.push(OperatorKind::KeyBy {
            expression: k.expression.clone(),
            as_field: k.as_field.clone().unwrap_or_else(|| "key".into()),
        });
    }
    for (func, spec) in [
        (AggregateFn::Count, &step.count),
        (AggregateFn::Sum, &step.sum),
        (AggregateFn::Min, &step.min),
        (AggregateFn::Max, &step.max),
    ] {
        if let Some(a) = spec {
            let field = format!("{at}.{}.expression", func.name());
            match (&a.expression, func) {
                (Some(e), _) => check_cel(&field, e)?,
                (None, AggregateFn::Count) => {}
                (None, _) => return Err(JobError::new(field, "is required for sum, min and max")),
            }
            let ttl = match &a.ttl {
                None => None,
                Some(t) => Some(parse_ttl(&format!("{at}.{}.ttl", func.name()), t)?),
            };
            kinds.push(OperatorKind::Aggregate {
                func,
                expression: a.expression.clone(),
                as_field: a.as_field.clone().unwrap_or_else(|| func.name().into()),
                ttl,
            });
        }
    }
    if let Some(w) = &step.window {
        kinds.push(OperatorKind::Window(super::event_time::window_def(
            &format!("{at}.window"),
            w,
        )?));
    }
    if step.union.is_some() {
        kinds.push(OperatorKind::Union);
    }
    if let Some(j) = &step.join {
        kinds.push(OperatorKind::Join(super::join::join_def(
            &at,
            j,
            step.inputs.as_deref().unwrap_or_default(),
            check_cel,
            parse_ttl,
        )?));
    }
    if let Some(s) = &step.sink {
        kinds.push(match (&s.file, &s.print, &s.discard, &s.kafka) {
            (None, None, None, Some(k)) => {
                super::validate_kafka::check_sink(&format!("{at}.sink.kafka"), k)?;
                OperatorKind::KafkaSink(k.clone())
            }
            (Some(f), None, None, None) => {
                if f.path.trim().is_empty() {
                    return Err(JobError::new(format!("{at}.sink.file.path"), "must not be empty"));
                }
                check_rate_limit(&format!("{at}.sink.file"), f.max_records_per_second)?;
                OperatorKind::FileSink(f.clone())
            }
            (None, Some(_), None, None) => OperatorKind::PrintSink,
            (None, None, Some(d), None) => {
                check_rate_limit(&format!("{at}.sink.discard"), d.max_records_per_second)?;
                OperatorKind::DiscardSink
            }
            _ => {
                return Err(JobError::new(
                    format!("{at}.sink"),
                    "set exactly one of `file`, `print`, `discard`, `kafka`",
                ));
            }
        });
    }
    match kinds.len() {
        1 => Ok(kinds.pop().unwrap()),
        0 => Err(JobError::new(
            at,
            "set exactly one of source, filter, map, flatMap, keyBy, count, sum, min, max, window, union, join, sink",
        )),
        _ => Err(JobError::new(
            at,
            "sets more than one step kind; split it into several steps",
        )),
    }
}

/// Every location the job reads or writes that names a local path through a `file:` URL must
/// name one this machine has ([`crate::storage::local_path`]): `file://tmp/x` names the host
/// `tmp`, and was once taken as the relative `tmp/x`. Errors: the first such location, naming
/// its field (`spec.checkpointing.storage`, `spec.savepoints.directory`,
/// `spec.job.steps[N].source.file.path`, `spec.job.steps[N].sink.file.path`).
fn check_local_locations(spec: &JobSpec) -> Result<(), JobError> {
    let mut locations = vec![
        (
            "spec.checkpointing.storage".to_string(),
            spec.checkpointing.storage.as_deref(),
        ),
        (
            "spec.savepoints.directory".to_string(),
            spec.savepoints.as_ref().and_then(|s| s.directory.as_deref()),
        ),
    ];
    for (i, step) in spec.job.steps.iter().enumerate() {
        if let Some(file) = step.source.as_ref().and_then(|s| s.file.as_ref()) {
            locations.push((
                format!("spec.job.steps[{i}].source.file.path"),
                Some(file.path.as_str()),
            ));
        }
        if let Some(file) = step.sink.as_ref().and_then(|s| s.file.as_ref()) {
            locations.push((format!("spec.job.steps[{i}].sink.file.path"), Some(file.path.as_str())));
        }
    }
    for (field, location) in locations {
        let Some(location) = location else { continue };
        // An empty location would be the current directory (found by trial: checkpoints went
        // to `./<job>/chk-<n>`).
        if location.trim().is_empty() {
            return Err(JobError::new(
                field,
                "must not be empty; give a directory or URL, or remove it for the default",
            ));
        }
        if let Err(e) = crate::storage::local_path(location) {
            return Err(JobError::new(field, e.to_string()));
        }
    }
    Ok(())
}

/// `unaligned` and `alignedCheckpointTimeout`: only with `exactly-once` (the other modes do not
/// align barriers, so there is nothing to unalign); the timeout only with `unaligned: true`
/// (as in Flink) and a valid duration.
fn check_unaligned(c: &crate::job::spec::CheckpointingSpec) -> Result<(), JobError> {
    if c.unaligned && c.mode != crate::job::CheckpointMode::ExactlyOnce {
        return Err(JobError::new(
            "spec.checkpointing.unaligned",
            "unaligned checkpoints apply to `mode: exactly-once` only (other modes never hold an input for alignment); remove `unaligned: true` or set `mode: exactly-once`",
        ));
    }
    if let Some(t) = &c.aligned_checkpoint_timeout {
        let field = "spec.checkpointing.alignedCheckpointTimeout";
        parse_duration(field, t)?;
        if !c.unaligned {
            return Err(JobError::new(
                field,
                "applies only with `unaligned: true` (as Flink's aligned-checkpoint-timeout): set `unaligned: true` or remove it",
            ));
        }
    }
    Ok(())
}

/// `maxRecordsPerSecond` of the source or sink at `source_path`: unset (no limit) or at least 1.
fn check_rate_limit(source_path: &str, max_records_per_second: Option<u64>) -> Result<(), JobError> {
    if max_records_per_second == Some(0) {
        return Err(JobError::new(
            format!("{source_path}.maxRecordsPerSecond"),
            "must be at least 1; omit it for no limit",
        ));
    }
    Ok(())
}

/// An optional count that, when set, must be at least 1.
fn check_at_least_one(field: &str, value: Option<u64>) -> Result<(), JobError> {
    if value == Some(0) {
        return Err(JobError::new(field, "must be at least 1"));
    }
    Ok(())
}

fn check_cel(field: &str, expr: &str) -> Result<(), JobError> {
    crate::record::cel::compile(expr)
        .map(|_| ())
        .map_err(|e| super::cel_errors::cel_compile_error(field, expr, &e.to_string()))
}

fn validate_steps(steps: &[Step]) -> Result<Vec<Operator>, JobError> {
    if super::dataflow::is_dataflow(steps) {
        let mut ops = super::dataflow::validate(steps)?;
        super::event_time::resolve_time_fields(&mut ops, steps)?;
        let schemas = super::schema::check_steps(&ops, None)?;
        super::event_time::check_source_fields(&ops, steps, &schemas)?;
        return Ok(ops);
    }
    if steps.len() < 2 {
        return Err(JobError::new("spec.job.steps", "needs at least a source and a sink"));
    }
    let mut ops: Vec<Operator> = Vec::with_capacity(steps.len());
    let last = steps.len() - 1;
    for (i, step) in steps.iter().enumerate() {
        let kind = step_kind(i, step)?;
        let at = format!("spec.job.steps[{i}]");
        let is_source = kind.is_source();
        let is_sink = kind.is_sink();
        if (i == 0) != is_source {
            return Err(JobError::new(at, "the first step, and only it, must be a `source`"));
        }
        if (i == last) != is_sink {
            return Err(JobError::new(at, "the last step, and only it, must be a `sink`"));
        }
        if kind.is_keyed() && !matches!(ops.last().map(|o| &o.kind), Some(OperatorKind::KeyBy { .. })) {
            return Err(JobError::new(
                at,
                format!(
                    "`{}` must directly follow a `keyBy` step: it keeps state per key, so add a `keyBy` \
                     (e.g. `keyBy: {{expression: user, as: user}}`) right before it",
                    kind.name()
                ),
            ));
        }
        if matches!(kind, OperatorKind::KeyBy { .. })
            && !steps.get(i + 1).is_some_and(|s| {
                s.count.is_some() || s.sum.is_some() || s.min.is_some() || s.max.is_some() || s.window.is_some()
            })
        {
            return Err(JobError::new(
                at,
                "`keyBy` must be followed by an aggregation (count, sum, min, max) or a `window`",
            ));
        }
        if matches!(&kind, OperatorKind::Window(def) if def.late_side_output) {
            return Err(JobError::new(
                format!("{at}.window.lateRecords"),
                "`sideOutput` sends the late records to the window's side output, which a later step reads as \
                 `inputs: [<window name>.late]`: name the window (`name`) and read it in a step's `inputs`, \
                 or remove `lateRecords` to drop and count them",
            ));
        }
        let uid = step_uid(i, step, &kind, &ops)?;
        let inputs = if i == 0 { vec![] } else { vec![i - 1] };
        ops.push(Operator {
            uid,
            index: i,
            kind,
            input_ports: vec![super::dataflow::Port::Main; inputs.len()],
            inputs,
        });
    }
    super::event_time::resolve_time_fields(&mut ops, steps)?;
    let schemas = super::schema::check_steps(&ops, None)?;
    super::event_time::check_source_fields(&ops, steps, &schemas)?;
    Ok(ops)
}

/// The uid of step `i`: its `uid` (checked: 1-128 of letters, digits, '-', '_', '.') or
/// `<kind>-<i>`; errors if an operator in `ops` already has it.
pub(super) fn step_uid(i: usize, step: &Step, kind: &OperatorKind, ops: &[Operator]) -> Result<String, JobError> {
    let at = format!("spec.job.steps[{i}]");
    let uid = match &step.uid {
        Some(u) => {
            if !is_step_identifier(u) {
                return Err(JobError::new(
                    format!("{at}.uid"),
                    format!("`{u}` must be 1-128 characters of letters, digits, '-', '_', '.'"),
                ));
            }
            u.clone()
        }
        None => format!("{}-{i}", kind.name()),
    };
    if ops.iter().any(|o| o.uid == uid) {
        return Err(JobError::new(
            format!("{at}.uid"),
            format!("`{uid}` is used by another step"),
        ));
    }
    Ok(uid)
}

/// 1-128 characters of letters, digits, '-', '_', '.': the shape of a uid and of a step name.
pub(super) fn is_step_identifier(s: &str) -> bool {
    !s.is_empty() && s.len() <= 128 && s.bytes().all(|b| b.is_ascii_alphanumeric() || b"-_.".contains(&b))
}

#[cfg(test)]
#[path = "validate_tests.rs"]
mod tests;
