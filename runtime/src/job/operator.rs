//! A validated step of a job ([`Operator`]): what it does ([`OperatorKind`]), its uid and its
//! inputs. [`validate`](super::validate) builds them from `spec.job.steps`.

use super::spec::*;
use std::time::Duration;

/// The aggregation a keyed step computes.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AggregateFn {
    /// Number of records per key.
    Count,
    /// Sum of the expression per key.
    Sum,
    /// Minimum of the expression per key.
    Min,
    /// Maximum of the expression per key.
    Max,
}

impl AggregateFn {
    /// The step name (`count`, `sum`, ...), also the default output field.
    pub fn name(self) -> &'static str {
        match self {
            AggregateFn::Count => "count",
            AggregateFn::Sum => "sum",
            AggregateFn::Min => "min",
            AggregateFn::Max => "max",
        }
    }
}

/// A validated step.
#[derive(Clone, Debug, PartialEq)]
pub enum OperatorKind {
    /// File source.
    FileSource(FileSourceSpec),
    /// Generator source.
    Generator(GeneratorSpec),
    /// Kafka source.
    KafkaSource(KafkaSourceSpec),
    /// CEL filter.
    Filter(String),
    /// CEL map.
    Map(String),
    /// Regex split of a string field.
    FlatMap(FlatMapSpec),
    /// Key selector (CEL) and the output field name of the key.
    KeyBy { expression: String, as_field: String },
    /// Keyed running aggregation.
    Aggregate {
        func: AggregateFn,
        expression: Option<String>,
        as_field: String,
        /// State TTL (`None`: keys are kept for ever).
        ttl: Option<Duration>,
    },
    /// Keyed event-time window aggregation.
    Window(super::event_time::WindowDef),
    /// Transactional file sink.
    FileSink(FileSinkSpec),
    /// Kafka sink.
    KafkaSink(KafkaSinkSpec),
    /// Stdout sink.
    PrintSink,
    /// Discard sink: counts and drops records.
    DiscardSink,
    /// Merge of several inputs (no state, records pass unchanged).
    Union,
    /// Keyed two-input inner join, both sides in keyed state.
    Join(super::join::JoinDef),
}

impl OperatorKind {
    /// Short kind name used in default uids and metadata (`source-file`, `count`, ...).
    pub fn name(&self) -> &'static str {
        match self {
            OperatorKind::FileSource(_) => "source-file",
            OperatorKind::Generator(_) => "source-generator",
            OperatorKind::KafkaSource(_) => "source-kafka",
            OperatorKind::Filter(_) => "filter",
            OperatorKind::Map(_) => "map",
            OperatorKind::FlatMap(_) => "flatMap",
            OperatorKind::KeyBy { .. } => "keyBy",
            OperatorKind::Aggregate { func, .. } => func.name(),
            OperatorKind::Window(_) => "window",
            OperatorKind::FileSink(_) => "sink-file",
            OperatorKind::KafkaSink(_) => "sink-kafka",
            OperatorKind::PrintSink => "sink-print",
            OperatorKind::DiscardSink => "sink-discard",
            OperatorKind::Union => "union",
            OperatorKind::Join(_) => "join",
        }
    }

    /// Whether the operator keeps state in checkpoints.
    pub fn is_stateful(&self) -> bool {
        matches!(
            self,
            OperatorKind::FileSource(_)
                | OperatorKind::Generator(_)
                | OperatorKind::KafkaSource(_)
                | OperatorKind::Aggregate { .. }
                | OperatorKind::Window(_)
                | OperatorKind::Join(_)
                | OperatorKind::FileSink(_)
                | OperatorKind::KafkaSink(_)
        )
    }

    /// Whether the operator reads a `keyBy` (an aggregation or a window).
    pub fn is_keyed(&self) -> bool {
        matches!(self, OperatorKind::Aggregate { .. } | OperatorKind::Window(_))
    }

    /// Whether the operator is a source (reads no input).
    pub fn is_source(&self) -> bool {
        matches!(
            self,
            OperatorKind::FileSource(_) | OperatorKind::Generator(_) | OperatorKind::KafkaSource(_)
        )
    }

    /// Whether the operator is a sink (has no output).
    pub fn is_sink(&self) -> bool {
        matches!(
            self,
            OperatorKind::FileSink(_)
                | OperatorKind::PrintSink
                | OperatorKind::DiscardSink
                | OperatorKind::KafkaSink(_)
        )
    }
}

/// A validated step with its uid.
#[derive(Clone, Debug, PartialEq)]
pub struct Operator {
    /// Stable id under which its state is saved.
    pub uid: String,
    /// Position in `spec.job.steps` (and in [`Job::operators`]).
    pub index: usize,
    /// What it does.
    pub kind: OperatorKind,
    /// Indexes (into [`Job::operators`]) of the operators it reads, each lower than its own:
    /// none for a source, one for most steps, two or more for a union, two for a join (left,
    /// right).
    pub inputs: Vec<usize>,
    /// Which output of each input it reads (same length as `inputs`): the main output, or a
    /// window's late side output (`inputs: [hourly.late]`).
    pub input_ports: Vec<super::dataflow::Port>,
}

impl Operator {
    /// The operators whose *records* this one reads, by input: the input itself, or for a
    /// window's late side output the window's own input (late records are the window's input
    /// records as they came in, so they have its input's fields and key).
    pub fn record_sources(&self, operators: &[Operator]) -> Vec<usize> {
        self.inputs
            .iter()
            .zip(&self.input_ports)
            .map(|(&j, port)| match port {
                super::dataflow::Port::Main => j,
                super::dataflow::Port::Late => operators[j].inputs[0],
            })
            .collect()
    }
}
