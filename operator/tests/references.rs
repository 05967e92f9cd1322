//! The generated references (docs/reference/metrics.md, the command reference in cli.md, the
//! route table in control-api.md) equal what the code generates — `hack/gen-references.sh`
//! rewrites them (`WEIR_BLESS=1`); every query of the Grafana dashboard names a metric the
//! runtime or the operator exports; the chart's PodMonitor selects the pods the operator
//! creates, on their metrics port.

mod references_gen;

use references_gen::*;
use std::path::{Path, PathBuf};

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// `doc` with the text between `<!-- BEGIN GENERATED section … -->` and
/// `<!-- END GENERATED section -->` replaced by `generated`.
fn replace_section(doc: &str, section: &str, generated: &str) -> Result<String, String> {
    let begin_tag = format!("<!-- BEGIN GENERATED {section}");
    let end_tag = format!("<!-- END GENERATED {section} -->");
    let begin = doc
        .find(&begin_tag)
        .ok_or_else(|| format!("no `{begin_tag} ... -->` marker"))?;
    let content_start = begin + doc[begin..].find("-->\n").ok_or("unterminated BEGIN marker")? + 4;
    let end = doc.find(&end_tag).ok_or_else(|| format!("no `{end_tag}` marker"))?;
    if end < content_start {
        return Err(format!("`{end_tag}` before its BEGIN marker"));
    }
    Ok(format!("{}{generated}{}", &doc[..content_start], &doc[end..]))
}

#[test]
fn sections_are_replaced_between_their_markers_only() {
    let doc = "a\n<!-- BEGIN GENERATED x: run it -->\nold\n<!-- END GENERATED x -->\nb\n";
    assert_eq!(
        replace_section(doc, "x", "new\n").unwrap(),
        "a\n<!-- BEGIN GENERATED x: run it -->\nnew\n<!-- END GENERATED x -->\nb\n"
    );
    assert!(
        replace_section(doc, "y", "new\n")
            .unwrap_err()
            .contains("BEGIN GENERATED y")
    );
    let reversed = "<!-- END GENERATED x -->\n<!-- BEGIN GENERATED x -->\n";
    assert!(replace_section(reversed, "x", "").is_err());
}

#[test]
fn generated_references_match_the_code() {
    let bless = std::env::var_os("WEIR_BLESS").is_some();
    let mut stale = Vec::new();
    for (file, section, generated) in [
        ("docs/reference/metrics.md", "metrics", metrics_tables()),
        ("docs/reference/cli.md", "commands", cli_reference()),
        ("docs/reference/control-api.md", "routes", control_api_routes()),
    ] {
        let path = repo_root().join(file);
        let doc = std::fs::read_to_string(&path).unwrap_or_else(|e| panic!("{file}: {e}"));
        let want = replace_section(&doc, section, &generated).unwrap_or_else(|e| panic!("{file}: {e}"));
        if want != doc {
            if bless {
                std::fs::write(&path, &want).unwrap_or_else(|e| panic!("{file}: {e}"));
            } else {
                stale.push(file);
            }
        }
    }
    assert!(
        stale.is_empty(),
        "{stale:?} differ from what the code generates: run hack/gen-references.sh and commit the result"
    );
}

/// Every `expr` in a Grafana dashboard (panels, rows' panels, templating queries).
fn dashboard_queries(dashboard: &serde_json::Value) -> Vec<String> {
    let mut out = Vec::new();
    fn walk(v: &serde_json::Value, out: &mut Vec<String>) {
        match v {
            serde_json::Value::Object(m) => {
                for (k, v) in m {
                    match (k.as_str(), v) {
                        ("expr" | "definition", serde_json::Value::String(s)) => out.push(s.clone()),
                        _ => walk(v, out),
                    }
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|v| walk(v, out)),
            _ => {}
        }
    }
    walk(dashboard, &mut out);
    out
}

/// The metric names a PromQL query names: identifiers starting with `weir_` (every metric of
/// Weir carries the prefix; labels and functions never do).
fn metric_names(query: &str) -> Vec<String> {
    let re = regex::Regex::new(r"\bweir_[a-zA-Z0-9_]+").unwrap();
    re.find_iter(query).map(|m| m.as_str().to_string()).collect()
}

#[test]
fn metric_names_are_found_in_queries() {
    assert_eq!(
        metric_names(r#"histogram_quantile(0.95, sum by (le) (rate(weir_a_bucket{job=~"$job"}[5m]))) / weir_b"#),
        ["weir_a_bucket", "weir_b"]
    );
    assert!(metric_names("sum(rate(up[5m]))").is_empty());
}

#[test]
fn every_dashboard_query_names_an_exported_metric() {
    let path = repo_root().join("charts/weir-operator/dashboards/weir.json");
    let text = std::fs::read_to_string(&path).unwrap();
    let dashboard: serde_json::Value = serde_json::from_str(&text).expect("the dashboard is JSON");
    let exported = exported_series();
    let queries = dashboard_queries(&dashboard);
    assert!(queries.len() >= 15, "{queries:?}");
    let mut used = std::collections::BTreeSet::new();
    for q in &queries {
        let names = metric_names(q);
        assert!(!names.is_empty(), "a query without a Weir metric: {q}");
        for n in names {
            assert!(
                exported.contains(&n),
                "{n} (in `{q}`) is not exported; exported: {exported:?}"
            );
            used.insert(n);
        }
    }
    // The panels the dashboard promises: throughput, backpressure, checkpoints, restarts,
    // source lag, operator reconciles and lifecycle states.
    for needed in [
        "weir_records_in_total",
        "weir_records_out_total",
        "weir_backpressured_seconds_total",
        "weir_checkpoint_duration_seconds_bucket",
        "weir_checkpoint_alignment_seconds_bucket",
        "weir_last_checkpoint_size_bytes",
        "weir_restarts_total",
        "weir_source_pending_records",
        "weir_source_pending_bytes",
        "weir_operator_reconciles_total",
        "weir_operator_job_state",
    ] {
        assert!(used.contains(needed), "no panel shows {needed}");
    }
}

#[test]
fn the_pod_monitor_selects_the_job_pods_on_their_metrics_port() {
    use weir_operator::build::{Component, labels};
    let template = std::fs::read_to_string(repo_root().join("charts/weir-operator/templates/podmonitor.yaml")).unwrap();
    // matchLabels: the `key: value` lines after `matchLabels:` up to `matchExpressions:`.
    let block = template
        .split_once("matchLabels:\n")
        .and_then(|(_, rest)| rest.split_once("matchExpressions:"))
        .map(|(b, _)| b)
        .expect("a matchLabels block followed by matchExpressions");
    let wanted: Vec<(String, String)> = block
        .lines()
        .filter_map(|l| l.trim().split_once(": "))
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    assert!(wanted.len() >= 2, "{block}");
    for component in [Component::Coordinator, Component::Worker] {
        let pod_labels = labels("wordcount", component, 3);
        for (k, v) in &wanted {
            assert_eq!(
                pod_labels.get(k),
                Some(v),
                "{component:?} pods lack {k}={v}: {pod_labels:?}"
            );
        }
    }
    // Config maps and secrets carry the same labels: the component expression keeps them out.
    let components = format!(
        "values: [{}, {}]",
        Component::Coordinator.as_str(),
        Component::Worker.as_str()
    );
    assert!(template.contains(&components), "{components}");
    assert!(template.contains("- port: http\n") && template.contains("path: /metrics"));
}
