//! Event time and windows in the job definition: the validated forms of a source's
//! `eventTime` ([`EventTime`]) and of a `window` step ([`WindowDef`]), and the rule that ties
//! them: a window reads event time from the field its upstream sources name.

use super::spec::{EventTimeSpec, EventTimeUnit, Step, WindowAggregate, WindowSpec, WindowType};
use super::validate::{AggregateFn, JobError, Operator, OperatorKind};
use std::time::Duration;

/// A source's validated `eventTime`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EventTime {
    /// Top-level field holding the event time.
    pub field: String,
    /// The unit of an integer event time (`eventTime.unit`); `None`: milliseconds, refusing
    /// ambiguous values ([`crate::exec::watermark::event_time_millis`]).
    pub unit: Option<EventTimeUnit>,
    /// Bounded out-of-orderness in milliseconds (≥ 0).
    pub max_out_of_orderness_ms: i64,
    /// Idle timeout of a source subtask; `None`: never idle.
    pub idle_timeout: Option<Duration>,
}

/// Window assignment of a `window` step. Sizes in milliseconds, all > 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum WindowAssigner {
    /// `[k·size, (k+1)·size)`.
    Tumbling {
        /// Window length, ms.
        size_ms: i64,
    },
    /// `[k·slide, k·slide + size)`; `slide` divides `size`.
    Sliding {
        /// Window length, ms.
        size_ms: i64,
        /// Distance between window starts, ms.
        slide_ms: i64,
    },
    /// `[t, t + gap)` per record, merged while they intersect.
    Session {
        /// Inactivity gap, ms.
        gap_ms: i64,
    },
}

/// A validated `window` step.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WindowDef {
    /// How records are assigned to windows.
    pub assigner: WindowAssigner,
    /// The aggregate computed per key and window.
    pub func: AggregateFn,
    /// Numeric CEL expression for `sum`, `min`, `max`.
    pub expression: Option<String>,
    /// Output field of the aggregate.
    pub as_field: String,
    /// Allowed lateness in milliseconds (≥ 0).
    pub allowed_lateness_ms: i64,
    /// Records beyond the allowed lateness go to the side output (`lateRecords: sideOutput`)
    /// instead of being dropped.
    pub late_side_output: bool,
    /// The event-time field, from the `eventTime` of the sources upstream (filled in by
    /// [`resolve_time_fields`]; empty before).
    pub time_field: String,
    /// The unit of an integer event time, from the same sources' `eventTime.unit`.
    pub time_unit: Option<EventTimeUnit>,
}

/// The most windows a sliding window puts one record into (`size / slide`): each record updates
/// every window it is in, so a day sliding by 1 ms (86,400,000 windows) would allocate gigabytes
/// per record. 10,000 allows a day sliding by 9 s, or an hour by 360 ms.
pub const MAX_SLIDING_WINDOWS_PER_RECORD: i64 = 10_000;

/// Output field of a window's start (epoch milliseconds, inclusive).
pub const WINDOW_START_FIELD: &str = "window_start";
/// Output field of a window's end (epoch milliseconds, exclusive).
pub const WINDOW_END_FIELD: &str = "window_end";

fn duration_ms(field: &str, text: &str) -> Result<i64, JobError> {
    let d = super::durations::parse_duration(field, text)?;
    i64::try_from(d.as_millis()).map_err(|_| JobError::new(field, format!("`{text}` is too long")))
}

fn positive_ms(field: &str, text: Option<&str>, what: &str) -> Result<i64, JobError> {
    let Some(text) = text else {
        return Err(JobError::new(field, format!("is required for {what}")));
    };
    let ms = duration_ms(field, text)?;
    if ms <= 0 {
        return Err(JobError::new(field, format!("must be at least 1ms, got `{text}`")));
    }
    Ok(ms)
}

/// Validates a source's `eventTime` at `at` (`spec.job.steps[0].source.eventTime`).
///
/// Errors: an empty field name, a duration that does not parse, a zero idle timeout.
pub fn event_time(at: &str, spec: &EventTimeSpec) -> Result<EventTime, JobError> {
    if spec.field.trim().is_empty() {
        return Err(JobError::new(format!("{at}.field"), "must name the event-time field"));
    }
    let max_out_of_orderness_ms = match &spec.max_out_of_orderness {
        Some(t) => duration_ms(&format!("{at}.maxOutOfOrderness"), t)?,
        None => 0,
    };
    let idle_timeout = match &spec.idle_timeout {
        Some(t) => {
            let ms = positive_ms(&format!("{at}.idleTimeout"), Some(t), "idleness")?;
            Some(Duration::from_millis(ms as u64))
        }
        None => None,
    };
    Ok(EventTime {
        field: spec.field.clone(),
        unit: spec.unit,
        max_out_of_orderness_ms,
        idle_timeout,
    })
}

/// Validates a `window` step at `at` (`spec.job.steps[3].window`); its time field is filled
/// in later by [`resolve_time_fields`].
///
/// Errors: `size`/`slide`/`gap` missing or set where the type does not use them, zero or
/// unparsable durations, a `slide` that does not divide `size`, no `expression` for
/// `sum`/`min`/`max`, an expression that does not compile.
pub fn window_def(at: &str, spec: &WindowSpec) -> Result<WindowDef, JobError> {
    let unused = |name: &str, set: bool, kind: &str| -> Result<(), JobError> {
        if set {
            return Err(JobError::new(
                format!("{at}.{name}"),
                format!("is not used by {kind} windows; remove it"),
            ));
        }
        Ok(())
    };
    let assigner = match spec.window_type {
        WindowType::Tumbling => {
            unused("slide", spec.slide.is_some(), "tumbling")?;
            unused("gap", spec.gap.is_some(), "tumbling")?;
            WindowAssigner::Tumbling {
                size_ms: positive_ms(&format!("{at}.size"), spec.size.as_deref(), "tumbling windows")?,
            }
        }
        WindowType::Sliding => {
            unused("gap", spec.gap.is_some(), "sliding")?;
            let size_ms = positive_ms(&format!("{at}.size"), spec.size.as_deref(), "sliding windows")?;
            let slide_ms = positive_ms(&format!("{at}.slide"), spec.slide.as_deref(), "sliding windows")?;
            if slide_ms > size_ms || size_ms % slide_ms != 0 {
                return Err(JobError::new(
                    format!("{at}.slide"),
                    format!("must divide `size` ({size_ms} ms) evenly, got {slide_ms} ms"),
                ));
            }
            if size_ms / slide_ms > MAX_SLIDING_WINDOWS_PER_RECORD {
                return Err(JobError::new(
                    format!("{at}.slide"),
                    format!(
                        "puts each record into {} windows (`size` / `slide`), more than the {MAX_SLIDING_WINDOWS_PER_RECORD} \
                         a sliding window allows (each record updates every window it is in); use a larger `slide` \
                         or a smaller `size`",
                        size_ms / slide_ms
                    ),
                ));
            }
            WindowAssigner::Sliding { size_ms, slide_ms }
        }
        WindowType::Session => {
            unused("size", spec.size.is_some(), "session")?;
            unused("slide", spec.slide.is_some(), "session")?;
            WindowAssigner::Session {
                gap_ms: positive_ms(&format!("{at}.gap"), spec.gap.as_deref(), "session windows")?,
            }
        }
    };
    let func = match spec.aggregate {
        WindowAggregate::Count => AggregateFn::Count,
        WindowAggregate::Sum => AggregateFn::Sum,
        WindowAggregate::Min => AggregateFn::Min,
        WindowAggregate::Max => AggregateFn::Max,
    };
    match (&spec.expression, func) {
        (Some(e), AggregateFn::Count) => {
            return Err(JobError::new(
                format!("{at}.expression"),
                format!("`count` counts records and uses no expression; remove `{e}` or use sum, min, max"),
            ));
        }
        (Some(e), _) => {
            crate::record::cel::compile(e).map_err(|err| {
                super::cel_errors::cel_compile_error(&format!("{at}.expression"), e, &err.to_string())
            })?;
        }
        (None, AggregateFn::Count) => {}
        (None, _) => {
            return Err(JobError::new(
                format!("{at}.expression"),
                format!("is required for `aggregate: {}`", func.name()),
            ));
        }
    }
    let allowed_lateness_ms = match &spec.allowed_lateness {
        Some(t) => duration_ms(&format!("{at}.allowedLateness"), t)?,
        None => 0,
    };
    let as_field = spec.as_field.clone().unwrap_or_else(|| func.name().into());
    if as_field == WINDOW_START_FIELD || as_field == WINDOW_END_FIELD {
        return Err(JobError::new(
            format!("{at}.as"),
            format!("`{as_field}` is a field of the window's output already; choose another name"),
        ));
    }
    Ok(WindowDef {
        assigner,
        func,
        expression: spec.expression.clone(),
        as_field,
        allowed_lateness_ms,
        late_side_output: spec.late_records == Some(super::spec::LateRecords::SideOutput),
        time_field: String::new(),
        time_unit: None,
    })
}

/// The validated `eventTime` of source operator `op`, if its step sets one.
///
/// Errors: as [`event_time`].
pub fn source_event_time(op: &Operator, steps: &[Step]) -> Result<Option<EventTime>, JobError> {
    let at = format!("spec.job.steps[{}].source.eventTime", op.index);
    match steps
        .get(op.index)
        .and_then(|s| s.source.as_ref())
        .and_then(|s| s.event_time.as_ref())
    {
        Some(spec) => event_time(&at, spec).map(Some),
        None => Ok(None),
    }
}

/// Whether any source of the job reads event time (`eventTime`): then every subtask starts
/// by announcing its watermark to its outputs and by waiting for each input's announcement
/// before reading on (`exec/inputs.rs`, "start alignment"). An `eventTime` that does not
/// validate counts as none (validation refused it before a job runs).
pub fn job_has_event_time(ops: &[Operator], steps: &[Step]) -> bool {
    ops.iter()
        .filter(|op| op.kind.is_source())
        .any(|op| matches!(source_event_time(op, steps), Ok(Some(_))))
}

/// Sets the time field of every `window` operator from the `eventTime` of the sources it
/// reads (through any steps and unions).
///
/// Errors: a window with a source upstream that has no `eventTime`, or sources naming
/// different event-time fields; a window's key field named `window_start` or `window_end`.
pub fn resolve_time_fields(ops: &mut [Operator], steps: &[Step]) -> Result<(), JobError> {
    for w in 0..ops.len() {
        if !matches!(ops[w].kind, OperatorKind::Window(_)) {
            continue;
        }
        let at = format!("spec.job.steps[{}].window", ops[w].index);
        let mut stack = ops[w].inputs.clone();
        let mut field: Option<(String, Option<EventTimeUnit>, usize)> = None;
        while let Some(j) = stack.pop() {
            let op = &ops[j];
            if let OperatorKind::KeyBy { as_field, .. } = &op.kind
                && (as_field == WINDOW_START_FIELD || as_field == WINDOW_END_FIELD)
            {
                return Err(JobError::new(
                    format!("spec.job.steps[{}].keyBy.as", op.index),
                    format!("`{as_field}` is a field of the window's output already; choose another name"),
                ));
            }
            if !op.kind.is_source() {
                stack.extend(op.inputs.iter().copied());
                continue;
            }
            let Some(et) = source_event_time(op, steps)? else {
                return Err(JobError::new(
                    at,
                    format!(
                        "a window needs event time: set `eventTime` on the source spec.job.steps[{}].source \
                         (e.g. `eventTime: {{field: dt, maxOutOfOrderness: 5s}}`)",
                        op.index
                    ),
                ));
            };
            match &field {
                Some((f, _, other)) if *f != et.field => {
                    return Err(JobError::new(
                        at,
                        format!(
                            "its sources name different event-time fields (`{f}` at spec.job.steps[{other}], `{}` at \
                             spec.job.steps[{}]); name the same field in every source's `eventTime`",
                            et.field, op.index
                        ),
                    ));
                }
                Some((_, unit, other)) if *unit != et.unit => {
                    return Err(JobError::new(
                        at,
                        format!(
                            "its sources give event time in different units (`unit` {} at spec.job.steps[{other}], {} \
                             at spec.job.steps[{}]); set the same `eventTime.unit` in every source",
                            unit_name(*unit),
                            unit_name(et.unit),
                            op.index
                        ),
                    ));
                }
                Some(_) => {}
                None => field = Some((et.field, et.unit, op.index)),
            }
        }
        if let (OperatorKind::Window(def), Some((f, unit, _))) = (&mut ops[w].kind, field) {
            def.time_field = f;
            def.time_unit = unit;
        }
    }
    Ok(())
}

fn unit_name(unit: Option<EventTimeUnit>) -> &'static str {
    match unit {
        None => "unset",
        Some(EventTimeUnit::Milliseconds) => "`milliseconds`",
        Some(EventTimeUnit::Seconds) => "`seconds`",
    }
}

/// Checks the `eventTime.field` of every source against the source's plan schema (where
/// known: `schemas[i]` is operator `i`'s output): the field exists and is a string or an
/// integer.
///
/// Errors: naming `spec.job.steps[i].source.eventTime.field`, the field and the source's fields
/// or the type found.
pub fn check_source_fields(
    ops: &[Operator],
    steps: &[Step],
    schemas: &[super::schema::PlanSchema],
) -> Result<(), JobError> {
    use super::types::FieldType;
    for (op, schema) in ops.iter().zip(schemas) {
        let (Some(et), Some(fields)) = (source_event_time(op, steps)?, schema) else {
            continue;
        };
        let at = format!("spec.job.steps[{}].source.eventTime.field", op.index);
        let Some(field) = fields.iter().find(|f| f.name == et.field) else {
            let known = fields
                .iter()
                .map(|f| format!("`{}`", f.name))
                .collect::<Vec<_>>()
                .join(", ");
            return Err(JobError::new(
                at,
                format!(
                    "the source's records have no field `{}`; their fields are {known}",
                    et.field
                ),
            ));
        };
        if !matches!(field.field_type, FieldType::String | FieldType::Int | FieldType::Any) {
            return Err(JobError::new(
                at,
                format!(
                    "`{}` is a {} field; event time is an ISO-8601 string or an integer of epoch milliseconds",
                    et.field,
                    field.field_type.name()
                ),
            ));
        }
    }
    Ok(())
}

/// Checks the event time of every record the plan read from a JSON lines source with
/// `eventTime` (`samples[i]` for operator `i`: the first lines of its first file), as the
/// source will read it: before the job starts, and naming the field, the file and the record,
/// where the job would fail on that record naming only the operator.
///
/// Errors: a sampled record without the field, or whose value is not an event time (not an
/// ISO-8601 string or an integer of epoch milliseconds), naming
/// `spec.job.steps[i].source.eventTime.field`.
pub fn check_sampled_event_times(
    ops: &[Operator],
    steps: &[Step],
    samples: &[Option<&super::schema::SourceSample>],
) -> Result<(), JobError> {
    use super::schema::SourceSample;
    for (op, sample) in ops.iter().zip(samples) {
        let (Some(et), Some(SourceSample::JsonRows { file, rows })) = (source_event_time(op, steps)?, sample) else {
            continue;
        };
        let at = format!("spec.job.steps[{}].source.eventTime.field", op.index);
        // As the source reads them: without a declared unit the first value decides
        // (`exec::watermarks::settle_event_time_unit`).
        let mut unit = et.unit;
        for (n, row) in rows.iter().enumerate() {
            let record = n + 1;
            let Some(value) = row.get(&et.field) else {
                return Err(JobError::new(
                    at,
                    format!(
                        "record {record} of {file} has no field `{}`; every record needs an event time, \
                         so name a field every record has",
                        et.field
                    ),
                ));
            };
            if let Err(why) = crate::exec::watermark::event_time_millis(value, unit) {
                return Err(JobError::new(
                    at,
                    sampled_event_time_error(&et.field, record, file, value, &why),
                ));
            }
            unit.get_or_insert(super::spec::EventTimeUnit::Milliseconds);
        }
    }
    Ok(())
}

/// The message of a sampled record whose event time does not read: what it holds, and what to
/// do (the reason says it already when the value is an integer in an ambiguous unit).
fn sampled_event_time_error(field: &str, record: usize, file: &str, value: &crate::record::Datum, why: &str) -> String {
    if matches!(value, crate::record::Datum::Int(_)) {
        return format!("`{field}` of record {record} of {file}: {why}");
    }
    format!(
        "`{field}` of record {record} of {file} is not an event time: {why}; name a field holding \
         an ISO-8601 time in UTC (`2015-02-22T21:00:00Z`, `2019-01-15 03:36:12`) or \
         epoch milliseconds"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn window(v: serde_json::Value) -> Result<WindowDef, String> {
        let spec: WindowSpec = serde_json::from_value(v).unwrap();
        window_def("w", &spec).map_err(|e| e.to_string())
    }

    #[test]
    fn window_specs_validate_with_errors_naming_the_field() {
        use serde_json::json;
        let ok = window(json!({"type": "sliding", "size": "5m", "slide": "1m"})).unwrap();
        assert_eq!(
            ok.assigner,
            WindowAssigner::Sliding {
                size_ms: 300_000,
                slide_ms: 60_000
            }
        );
        assert_eq!(ok.as_field, "count");
        let cases = [
            (json!({"type": "tumbling"}), "w.size: is required for tumbling windows"),
            (
                json!({"type": "tumbling", "size": "0s"}),
                "w.size: must be at least 1ms, got `0s`",
            ),
            (
                json!({"type": "tumbling", "size": "1m", "gap": "1s"}),
                "w.gap: is not used by tumbling windows; remove it",
            ),
            (
                json!({"type": "sliding", "size": "5m", "slide": "2m"}),
                "w.slide: must divide `size` (300000 ms) evenly, got 120000 ms",
            ),
            (
                json!({"type": "sliding", "size": "36500d", "slide": "1s"}),
                "w.slide: puts each record into 3153600000 windows (`size` / `slide`), more than the 10000",
            ),
            (
                json!({"type": "sliding", "size": "100000000000 d", "slide": "1s"}),
                "w.size: `100000000000 d` is too long: a duration is at most 36500d",
            ),
            (json!({"type": "session"}), "w.gap: is required for session windows"),
            (
                json!({"type": "session", "gap": "soon"}),
                "w.gap: `soon` is not a duration",
            ),
            (
                json!({"type": "tumbling", "size": "1m", "aggregate": "sum"}),
                "w.expression: is required for `aggregate: sum`",
            ),
            (
                json!({"type": "tumbling", "size": "1m", "expression": "x"}),
                "w.expression: `count` counts records",
            ),
            (
                json!({"type": "tumbling", "size": "1m", "as": "window_end"}),
                "w.as: `window_end` is a field",
            ),
            (
                json!({"type": "tumbling", "size": "1m", "allowedLateness": "x"}),
                "w.allowedLateness: `x` is not a duration",
            ),
        ];
        for (spec, want) in cases {
            let got = window(spec.clone()).unwrap_err();
            assert!(got.starts_with(want), "{spec}: {got}");
        }
    }

    #[test]
    fn event_time_specs_validate() {
        let spec = |o: Option<&str>, i: Option<&str>| EventTimeSpec {
            field: "dt".into(),
            max_out_of_orderness: o.map(Into::into),
            idle_timeout: i.map(Into::into),
            unit: None,
        };
        let et = event_time("e", &spec(Some("5s"), Some("1m"))).unwrap();
        assert_eq!(
            (et.max_out_of_orderness_ms, et.idle_timeout),
            (5000, Some(Duration::from_secs(60)))
        );
        assert_eq!(event_time("e", &spec(None, None)).unwrap().max_out_of_orderness_ms, 0);
        assert!(
            event_time("e", &spec(Some("5 parsecs"), None))
                .unwrap_err()
                .to_string()
                .starts_with("e.maxOutOfOrderness: ")
        );
        assert!(
            event_time("e", &spec(None, Some("0s")))
                .unwrap_err()
                .to_string()
                .starts_with("e.idleTimeout: must be at least 1ms")
        );
        let mut blank = spec(None, None);
        blank.field = " ".into();
        assert_eq!(
            event_time("e", &blank).unwrap_err().to_string(),
            "e.field: must name the event-time field"
        );
    }
}
