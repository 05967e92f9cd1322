//! Generators of the checked-in references (docs/reference/metrics.md, cli.md, control-api.md)
//! from the code: the runtime's and the operator's metric registries rendered as the
//! processes render them, clap's command tree, the control API's route list.

use clap::CommandFactory;
use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::time::Duration;
use weir_runtime::control::api::{CheckpointStats, SnapshotKind};
use weir_runtime::exec::task::TaskMetrics;
use weir_runtime::metrics::{CoordinatorNumbers, Scrape, render};
use weir_runtime::operators::source::SourcePending;

/// One metric family of an OpenMetrics exposition.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct MetricFamily {
    /// Family name (`weir_records_in`; counters without `_total`).
    pub name: String,
    /// `counter`, `gauge`, `histogram`, ...
    pub kind: String,
    /// `# UNIT`, if any.
    pub unit: Option<String>,
    /// `# HELP` text.
    pub help: String,
    /// Label names seen on its samples (without a histogram's `le`).
    pub labels: BTreeSet<String>,
}

impl MetricFamily {
    /// The series names Prometheus stores for this family (what a query names).
    pub fn series_names(&self) -> Vec<String> {
        match self.kind.as_str() {
            "counter" => vec![format!("{}_total", self.name)],
            "histogram" => ["bucket", "sum", "count"]
                .iter()
                .map(|s| format!("{}_{s}", self.name))
                .collect(),
            _ => vec![self.name.clone()],
        }
    }
}

/// The families of an OpenMetrics `text`, by name.
pub fn parse_families(text: &str) -> BTreeMap<String, MetricFamily> {
    let mut families: BTreeMap<String, MetricFamily> = BTreeMap::new();
    for line in text.lines() {
        if let Some(rest) = line.strip_prefix("# ") {
            let mut parts = rest.splitn(3, ' ');
            let (Some(what), Some(name)) = (parts.next(), parts.next()) else {
                continue;
            };
            let value = parts.next().unwrap_or("").to_string();
            let f = families.entry(name.to_string()).or_insert_with(|| MetricFamily {
                name: name.to_string(),
                ..Default::default()
            });
            match what {
                "TYPE" => f.kind = value,
                "HELP" => f.help = value,
                "UNIT" => f.unit = Some(value),
                _ => {}
            }
            continue;
        }
        let Some((series, labels)) = line.split_once('{') else {
            continue;
        };
        let family = families
            .keys()
            .filter(|name| {
                series == name.as_str() || series.strip_prefix(name.as_str()).is_some_and(|s| s.starts_with('_'))
            })
            .max_by_key(|name| name.len())
            .cloned();
        if let Some(family) = family {
            let names = labels
                .split(',')
                .filter_map(|l| l.split_once('=').map(|(k, _)| k.to_string()));
            let f = families.get_mut(&family).expect("found above");
            f.labels.extend(names.filter(|n| n != "le"));
        }
    }
    families
}

fn task(name: &str, subtask: u32, pending: Option<SourcePending>) -> (String, u32, Arc<TaskMetrics>) {
    let metrics = TaskMetrics::default();
    metrics.set_source_pending(pending);
    (name.to_string(), subtask, Arc::new(metrics))
}

/// What a worker's `/metrics` and a coordinating process's `/metrics` serve, with every kind
/// of subtask (a generator source, a file source, a keyed step on disk with a late record,
/// a sink) and a completed checkpoint.
pub fn runtime_expositions() -> (String, String) {
    let tasks = vec![
        task("gen-0 -> keyBy-1", 0, Some(SourcePending::Records(5))),
        task("lines-2", 0, Some(SourcePending::Bytes(5))),
        task("count-3 -> sink-4", 0, None),
    ];
    // A window that dropped a late record, and an aggregation on the disk backend: their
    // metrics are served only then.
    tasks[2]
        .2
        .late_records_dropped
        .store(1, std::sync::atomic::Ordering::Relaxed);
    let disk_state = weir_runtime::state::backend::KeyedStateSize {
        entries: 1,
        disk_bytes: Some(1),
        memory_bytes: Some(1),
        cache_lookups: Some(Default::default()),
    };
    tasks[2].2.set_keyed_state(vec![("count-3".into(), disk_state)], 1);
    let worker = render(&Scrape {
        job: "wc",
        tasks: &tasks,
        uptime: Duration::ZERO,
        coordinator: None,
    });
    let coordinator = render(&Scrape {
        job: "wc",
        tasks: &tasks,
        uptime: Duration::ZERO,
        coordinator: Some(CoordinatorNumbers {
            failed_checkpoints: 0,
            restarts: 0,
            last_checkpoint: Some(CheckpointStats {
                id: 1,
                kind: SnapshotKind::Checkpoint,
                path: "/c/wc/chk-1".into(),
                triggered_at_ms: 1,
                completed_at_ms: 2,
                duration_ms: 1,
                max_sync_ms: 0,
                max_async_ms: 0,
                max_alignment_ms: 0,
                size_bytes: 1,
                full_size_bytes: 1,
                alignment: Default::default(),
            }),
            now_ms: 3,
        }),
    });
    (worker, coordinator)
}

/// What the operator's `/metrics` serves once each of its metrics has a sample.
pub fn operator_exposition() -> String {
    let mut registry = prometheus_client::registry::Registry::default();
    let m = weir_operator::metrics::Metrics::new(&mut registry);
    drop(m.reconcile("streamjob"));
    m.error("streamjob", "ApplyError");
    m.transition("Deploying", "Running");
    m.job_state("ns", "wc", Some(("Running", "RUNNING")));
    let mut out = String::new();
    prometheus_client::encoding::text::encode(&mut out, &registry).expect("encode");
    out
}

/// Every series name a query can name: the runtime's (coordinator and worker) and the
/// operator's.
pub fn exported_series() -> BTreeSet<String> {
    let (worker, coordinator) = runtime_expositions();
    [worker, coordinator, operator_exposition()]
        .iter()
        .flat_map(|t| parse_families(t).into_values())
        .flat_map(|f| f.series_names())
        .collect()
}

fn family_rows(families: &[&MetricFamily]) -> String {
    let mut out = String::from("| metric | type | unit | labels | meaning |\n|---|---|---|---|---|\n");
    for f in families {
        let names: Vec<String> = f.series_names().iter().map(|s| format!("`{s}`")).collect();
        let labels: Vec<&str> = f.labels.iter().map(String::as_str).collect();
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} |\n",
            names.join(" "),
            f.kind,
            f.unit.as_deref().unwrap_or(""),
            labels.join(", "),
            f.help.replace('|', "\\|")
        ));
    }
    out
}

/// The tables of docs/reference/metrics.md: every family each process serves.
pub fn metrics_tables() -> String {
    let (worker, coordinator) = runtime_expositions();
    let worker = parse_families(&worker);
    let coordinator = parse_families(&coordinator);
    let operator = parse_families(&operator_exposition());
    let every: Vec<&MetricFamily> = worker.values().collect();
    let coordinating: Vec<&MetricFamily> = coordinator.values().filter(|f| !worker.contains_key(&f.name)).collect();
    let operator: Vec<&MetricFamily> = operator.values().collect();
    format!(
        "### Every runtime process (`weir run`, coordinator and worker pods)\n\n{}\n\
         ### The process coordinating the job (`weir run`, `weir coordinator`)\n\n{}\n\
         ### The operator (`weir-operator`)\n\n{}",
        family_rows(&every),
        family_rows(&coordinating),
        family_rows(&operator)
    )
}

/// The control API's route table.
pub fn control_api_routes() -> String {
    weir_runtime::control::routes::route_table()
}

fn cell(text: &str) -> String {
    text.split_whitespace()
        .collect::<Vec<_>>()
        .join(" ")
        .replace('|', "\\|")
}

fn argument_row(arg: &clap::Arg) -> Option<String> {
    let id = arg.get_id().as_str();
    if id == "help" || id == "version" {
        return None;
    }
    let name = match (arg.get_short(), arg.get_long()) {
        (_, None) => format!("`<{}>`", id.to_uppercase()),
        (Some(s), Some(l)) => format!("`-{s}`, `--{l}`"),
        (None, Some(l)) => format!("`--{l}`"),
    };
    let env = arg
        .get_env()
        .map(|e| format!("`{}`", e.to_string_lossy()))
        .unwrap_or_default();
    let default: Vec<String> = arg
        .get_default_values()
        .iter()
        .map(|d| format!("`{}`", d.to_string_lossy()))
        .collect();
    let values: Vec<String> = arg
        .get_possible_values()
        .iter()
        .filter(|v| !v.is_hide_set())
        .map(|v| format!("`{}`", v.get_name()))
        .collect();
    let mut help = arg
        .get_long_help()
        .or(arg.get_help())
        .map(|h| h.to_string())
        .unwrap_or_default();
    if !values.is_empty() && !matches!(arg.get_action(), clap::ArgAction::SetTrue) {
        help = format!("{}. One of {}.", help.trim_end_matches('.'), values.join(", "));
    }
    Some(format!(
        "| {name} | {env} | {} | {} |\n",
        default.join(", "),
        cell(&help)
    ))
}

fn command_section(cmd: &clap::Command, path: &str, out: &mut String) {
    let subcommands: Vec<&clap::Command> = cmd.get_subcommands().filter(|c| c.get_name() != "help").collect();
    if !path.is_empty() {
        let about = cmd
            .get_long_about()
            .or(cmd.get_about())
            .map(|a| a.to_string())
            .unwrap_or_default();
        out.push_str(&format!("### `weir {path}`\n\n{}\n\n", cell(&about)));
        if subcommands.is_empty() {
            let usage = cmd.clone().render_usage().to_string();
            out.push_str(&format!("```\n{}\n```\n\n", usage.trim()));
            let rows: Vec<String> = cmd
                .get_arguments()
                .filter(|a| !a.is_global_set())
                .filter_map(argument_row)
                .collect();
            if !rows.is_empty() {
                out.push_str("| argument | env | default | description |\n|---|---|---|---|\n");
                out.push_str(&rows.concat());
                out.push('\n');
            }
        }
    }
    for sub in subcommands {
        let sub_path = if path.is_empty() {
            sub.get_name().to_string()
        } else {
            format!("{path} {}", sub.get_name())
        };
        command_section(sub, &sub_path, out);
    }
}

/// The command reference of docs/reference/cli.md: the global options, then per command its
/// description, usage and arguments (name, environment variable, default, help).
pub fn cli_reference() -> String {
    let mut cmd = weir_runtime::cli::Cli::command();
    cmd.build();
    let mut out = String::from(
        "Global options (every command):\n\n| argument | env | default | description |\n|---|---|---|---|\n",
    );
    for arg in cmd.get_arguments().filter(|a| a.is_global_set()) {
        out.push_str(&argument_row(arg).unwrap_or_default());
    }
    out.push('\n');
    command_section(&cmd, "", &mut out);
    out.trim_end().to_string() + "\n"
}
