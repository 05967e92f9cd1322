//! The per-job NetworkPolicies allow exactly the flows of docs/operations/security.md: a small
//! evaluator of Kubernetes NetworkPolicy ingress semantics runs a table of (from pod, to pod,
//! port) over the rendered objects; a snapshot pins the objects (which
//! hack/static-checks.sh validates with kubernetes-validate --strict).

use super::super::{LABEL_JOB, RuntimeDefaults, labels};
use super::*;
use crate::crd::StreamJob;

/// A pod as the evaluator sees it.
#[derive(Clone, Debug)]
struct Pod {
    name: &'static str,
    namespace: &'static str,
    labels: BTreeMap<String, String>,
}

/// Labels of a namespace: only the one the API server sets (`kubernetes.io/metadata.name`), plus
/// `team: data` on "streams" to show that a namespace selector on another label misses it.
fn namespace_labels(namespace: &str) -> BTreeMap<String, String> {
    let mut l = BTreeMap::from([(NAMESPACE_NAME_LABEL.to_string(), namespace.to_string())]);
    if namespace == "streams" {
        l.insert("team".into(), "data".into());
    }
    l
}

/// matchLabels semantics; anything else in a selector (matchExpressions) is not modelled and
/// fails the test rather than being misread.
fn selector_matches(selector: &Value, labels: &BTreeMap<String, String>) -> bool {
    let object = selector.as_object().expect("a selector is an object");
    assert!(
        object.keys().all(|k| k == "matchLabels"),
        "evaluator models only matchLabels: {selector}"
    );
    object
        .get("matchLabels")
        .and_then(Value::as_object)
        .map(|m| m.iter().all(|(k, v)| labels.get(k).map(String::as_str) == v.as_str()))
        .unwrap_or(true)
}

/// One `from` peer of a policy in `policy_namespace`: podSelector alone is the policy's
/// namespace; namespaceSelector alone is every pod there; both must match together.
fn peer_matches(peer: &Value, policy_namespace: &str, from: &Pod) -> bool {
    assert!(
        peer.get("ipBlock").is_none(),
        "evaluator does not model ipBlock: {peer}"
    );
    let namespace_ok = match peer.get("namespaceSelector") {
        Some(sel) => selector_matches(sel, &namespace_labels(from.namespace)),
        None => from.namespace == policy_namespace,
    };
    let pod_ok = peer
        .get("podSelector")
        .is_none_or(|sel| selector_matches(sel, &from.labels));
    namespace_ok && pod_ok
}

fn port_matches(ports: Option<&Value>, port: i32) -> bool {
    match ports.and_then(Value::as_array) {
        None => true,
        Some(list) if list.is_empty() => true,
        Some(list) => list.iter().any(|p| {
            p.get("protocol").and_then(Value::as_str).unwrap_or("TCP") == "TCP"
                && p.get("port").and_then(Value::as_i64) == Some(port.into())
        }),
    }
}

/// Whether a TCP connection from `from` to `to:port` is allowed by `policies` (ingress only):
/// a pod no Ingress policy selects accepts everything; a selected pod accepts what at least
/// one rule of one selecting policy allows.
fn allowed(policies: &[Value], from: &Pod, to: &Pod, port: i32) -> bool {
    let selecting: Vec<&Value> = policies
        .iter()
        .filter(|p| p["metadata"]["namespace"] == to.namespace)
        .filter(|p| selector_matches(&p["spec"]["podSelector"], &to.labels))
        .filter(|p| {
            p["spec"]["policyTypes"]
                .as_array()
                .is_some_and(|t| t.iter().any(|t| t == "Ingress"))
        })
        .collect();
    if selecting.is_empty() {
        return true;
    }
    selecting.iter().any(|p| {
        let namespace = p["metadata"]["namespace"].as_str().unwrap();
        p["spec"]["ingress"].as_array().into_iter().flatten().any(|rule| {
            port_matches(rule.get("ports"), port)
                && match rule.get("from").and_then(Value::as_array) {
                    None => true,
                    Some(peers) => peers.iter().any(|peer| peer_matches(peer, namespace, from)),
                }
        })
    })
}

fn job(name: &str) -> StreamJob {
    serde_yaml::from_str(&format!(
        r#"
apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{name: {name}, namespace: streams, uid: 1234-abcd, generation: 7}}
spec:
  parallelism: 2
  checkpointing: {{storage: "s3://bucket/chk", interval: 10s}}
  job:
    steps:
      - source: {{generator: {{seed: 1}}}}
      - sink: {{print: {{}}}}
"#
    ))
    .unwrap()
}

static DEFAULTS: std::sync::LazyLock<RuntimeDefaults> = std::sync::LazyLock::new(RuntimeDefaults::default);

fn target(job: &StreamJob) -> Target<'_> {
    Target {
        job,
        spec: &job.spec,
        restore_from: None,
        deploy_generation: 3,
        spec_generation: 7,
        defaults: &DEFAULTS,
    }
}

fn operator_labels() -> BTreeMap<String, String> {
    BTreeMap::from([
        ("app.kubernetes.io/name".to_string(), "weir-operator".to_string()),
        ("app.kubernetes.io/instance".to_string(), "weir-operator".to_string()),
        ("app.kubernetes.io/component".to_string(), "operator".to_string()),
    ])
}

fn settings(monitoring: Option<&str>) -> NetworkPolicySettings {
    NetworkPolicySettings {
        enabled: true,
        operator_namespace: "weir-system".into(),
        operator_pod_labels: operator_labels(),
        monitoring_namespace_selector: monitoring
            .map(|ns| BTreeMap::from([(NAMESPACE_NAME_LABEL.to_string(), ns.to_string())])),
    }
}

fn pod(name: &'static str, namespace: &'static str, labels: BTreeMap<String, String>) -> Pod {
    Pod {
        name,
        namespace,
        labels,
    }
}

/// The pods of the table: job `wc`'s coordinator and workers, another job's worker, the
/// operator, look-alikes, Prometheus.
fn pods() -> BTreeMap<&'static str, Pod> {
    let mut other_pod_in_operator_namespace = operator_labels();
    other_pod_in_operator_namespace.insert("app.kubernetes.io/component".into(), "webhook".into());
    [
        pod("operator", "weir-system", operator_labels()),
        pod("other-in-operator-ns", "weir-system", other_pod_in_operator_namespace),
        // Operator labels in the job's namespace: anyone who can create pods there could do this.
        pod("fake-operator-in-job-ns", "streams", operator_labels()),
        pod("coordinator", "streams", labels("wc", Component::Coordinator, 3)),
        pod("worker", "streams", labels("wc", Component::Worker, 3)),
        // A worker of an older deployment generation is still the job's worker.
        pod("worker-old-generation", "streams", labels("wc", Component::Worker, 2)),
        pod("other-job-worker", "streams", labels("other", Component::Worker, 1)),
        pod(
            "other-job-coordinator",
            "streams",
            labels("other", Component::Coordinator, 1),
        ),
        pod(
            "prometheus",
            "monitoring",
            BTreeMap::from([("app".to_string(), "prometheus".to_string())]),
        ),
        pod("random", "default", BTreeMap::new()),
        pod(
            "unrelated-in-job-ns",
            "streams",
            BTreeMap::from([("app".to_string(), "web".to_string())]),
        ),
    ]
    .into_iter()
    .map(|p| (p.name, p))
    .collect()
}

fn rendered(jobs: &[&StreamJob], s: &NetworkPolicySettings) -> Vec<Value> {
    jobs.iter()
        .flat_map(|j| network_policies(&target(j), s))
        .map(|p| serde_json::to_value(p).unwrap())
        .collect()
}

/// (from, to, port, allowed) for jobs `wc` and `other` with monitoring namespace "monitoring".
const FLOWS: &[(&str, &str, i32, bool)] = &[
    ("operator", "coordinator", CONTROL_PORT, true),
    ("operator", "coordinator", RPC_PORT, false),
    ("operator", "worker", DATA_PORT, false),
    ("operator", "worker", WORKER_HTTP_PORT, false),
    ("worker", "coordinator", RPC_PORT, true),
    ("worker-old-generation", "coordinator", RPC_PORT, true),
    ("worker", "coordinator", CONTROL_PORT, false),
    ("worker", "worker", DATA_PORT, true),
    ("worker-old-generation", "worker", DATA_PORT, true),
    ("coordinator", "worker", DATA_PORT, false),
    ("coordinator", "worker", WORKER_HTTP_PORT, false),
    ("other-job-worker", "coordinator", RPC_PORT, false),
    ("other-job-worker", "worker", DATA_PORT, false),
    ("other-job-coordinator", "coordinator", CONTROL_PORT, false),
    ("worker", "other-job-worker", DATA_PORT, false),
    ("other-in-operator-ns", "coordinator", CONTROL_PORT, false),
    ("fake-operator-in-job-ns", "coordinator", CONTROL_PORT, false),
    ("unrelated-in-job-ns", "coordinator", CONTROL_PORT, false),
    ("unrelated-in-job-ns", "worker", DATA_PORT, false),
    ("random", "coordinator", CONTROL_PORT, false),
    ("random", "coordinator", RPC_PORT, false),
    ("random", "worker", DATA_PORT, false),
    ("random", "worker", WORKER_HTTP_PORT, false),
    ("prometheus", "coordinator", CONTROL_PORT, true),
    ("prometheus", "worker", WORKER_HTTP_PORT, true),
    ("prometheus", "coordinator", RPC_PORT, false),
    ("prometheus", "worker", DATA_PORT, false),
    // Pods no policy selects are untouched.
    ("random", "unrelated-in-job-ns", 80, true),
    ("random", "operator", 8080, true),
];

#[test]
fn the_policies_allow_exactly_the_documented_flows() {
    let (wc, other) = (job("wc"), job("other"));
    let policies = rendered(&[&wc, &other], &settings(Some("monitoring")));
    assert_eq!(policies.len(), 4);
    let pods = pods();
    for (from, to, port, want) in FLOWS {
        let got = allowed(&policies, &pods[from], &pods[to], *port);
        assert_eq!(got, *want, "{from} -> {to}:{port}");
    }
}

#[test]
fn without_a_monitoring_selector_metrics_ports_are_closed_to_pods() {
    let wc = job("wc");
    let policies = rendered(&[&wc], &settings(None));
    let pods = pods();
    for (from, to, port, want) in [
        ("prometheus", "coordinator", CONTROL_PORT, false),
        ("prometheus", "worker", WORKER_HTTP_PORT, false),
        ("operator", "coordinator", CONTROL_PORT, true),
        ("worker", "worker", DATA_PORT, true),
    ] {
        assert_eq!(
            allowed(&policies, &pods[from], &pods[to], port),
            want,
            "{from} -> {to}:{port}"
        );
    }
}

#[test]
fn an_empty_monitoring_selector_opens_metrics_to_every_namespace_and_nothing_else() {
    let wc = job("wc");
    let mut s = settings(None);
    s.monitoring_namespace_selector = Some(BTreeMap::new());
    let policies = rendered(&[&wc], &s);
    let pods = pods();
    for (from, to, port, want) in [
        ("random", "coordinator", CONTROL_PORT, true),
        ("random", "worker", WORKER_HTTP_PORT, true),
        ("random", "coordinator", RPC_PORT, false),
        ("random", "worker", DATA_PORT, false),
    ] {
        assert_eq!(
            allowed(&policies, &pods[from], &pods[to], port),
            want,
            "{from} -> {to}:{port}"
        );
    }
}

#[test]
fn disabled_renders_nothing_and_allows_everything() {
    let wc = job("wc");
    let mut s = settings(Some("monitoring"));
    s.enabled = false;
    let policies = rendered(&[&wc], &s);
    assert!(policies.is_empty());
    let pods = pods();
    assert!(allowed(&policies, &pods["random"], &pods["coordinator"], CONTROL_PORT));
}

#[test]
fn the_evaluator_itself_denies_and_allows() {
    // A policy selecting a pod with no ingress rules denies everything to it; one with an
    // empty `from` allows every source on its port.
    let to = pod("x", "streams", BTreeMap::from([("a".to_string(), "b".to_string())]));
    let from = pod("y", "default", BTreeMap::new());
    let deny_all = json!({"metadata": {"namespace": "streams"},
        "spec": {"podSelector": {"matchLabels": {"a": "b"}}, "policyTypes": ["Ingress"]}});
    assert!(!allowed(std::slice::from_ref(&deny_all), &from, &to, 80));
    let open_80 = json!({"metadata": {"namespace": "streams"},
        "spec": {"podSelector": {}, "policyTypes": ["Ingress"], "ingress": [{"ports": [{"port": 80}]}]}});
    assert!(allowed(&[deny_all.clone(), open_80.clone()], &from, &to, 80));
    assert!(!allowed(&[deny_all, open_80], &from, &to, 81));
    let team = json!({"metadata": {"namespace": "streams"}, "spec": {"podSelector": {},
        "policyTypes": ["Ingress"], "ingress": [{"from": [{"namespaceSelector": {"matchLabels": {"team": "data"}}}]}]}});
    assert!(!allowed(std::slice::from_ref(&team), &from, &to, 80));
    assert!(allowed(&[team], &pod("z", "streams", BTreeMap::new()), &to, 80));
}

#[test]
fn the_policies_are_owned_by_the_job_and_select_its_pods() {
    let wc = job("wc");
    let policies = rendered(&[&wc], &settings(Some("monitoring")));
    let names: Vec<&str> = policies
        .iter()
        .map(|p| p["metadata"]["name"].as_str().unwrap())
        .collect();
    assert_eq!(names, ["wc-coordinator", "wc-worker"]);
    for p in &policies {
        assert_eq!(p["metadata"]["namespace"], "streams");
        assert_eq!(p["metadata"]["ownerReferences"][0]["kind"], "StreamJob");
        assert_eq!(p["metadata"]["ownerReferences"][0]["name"], "wc");
        assert_eq!(p["spec"]["podSelector"]["matchLabels"][LABEL_JOB], "wc");
        assert_eq!(p["spec"]["policyTypes"], json!(["Ingress"]), "egress is not restricted");
    }
}

#[test]
fn settings_parse_and_refuse_bad_input_naming_the_key() {
    let s = NetworkPolicySettings::from_json(
        r#"{"enabled":true,"operatorNamespace":"weir-system",
            "operatorPodLabels":{"app.kubernetes.io/name":"weir-operator"},
            "monitoringNamespaceSelector":{"kubernetes.io/metadata.name":"monitoring"}}"#,
    )
    .unwrap();
    assert!(s.enabled);
    assert_eq!(s.operator_namespace, "weir-system");
    let off = NetworkPolicySettings::from_json(r#"{"enabled":false}"#).unwrap();
    assert!(!off.enabled);
    let null_monitoring = NetworkPolicySettings::from_json(
        r#"{"enabled":true,"operatorNamespace":"o","operatorPodLabels":{"a":"b"},"monitoringNamespaceSelector":null}"#,
    )
    .unwrap();
    assert_eq!(null_monitoring.monitoring_namespace_selector, None);
    for (text, want) in [
        (r#"{"enabled":true,"operatorPodLabels":{"a":"b"}}"#, "operatorNamespace"),
        (r#"{"enabled":true,"operatorNamespace":"o"}"#, "operatorPodLabels"),
        (
            r#"{"enabled":true,"operatorNamespace":"o","operatorPodLabels":{}}"#,
            "operatorPodLabels",
        ),
        (r#"{"enable":true}"#, "enable"),
        (r#"{"enabled":"yes"}"#, "WEIR_NETWORK_POLICIES"),
        ("not json", "WEIR_NETWORK_POLICIES"),
    ] {
        let err = NetworkPolicySettings::from_json(text).unwrap_err();
        assert!(
            err.contains(want) && err.contains("WEIR_NETWORK_POLICIES"),
            "{text}: {err}"
        );
    }
}

/// Snapshot of one job's policies; `UPDATE_SNAPSHOTS=1 cargo test` rewrites it after a
/// reviewed change. hack/static-checks.sh validates the file with kubernetes-validate.
#[test]
fn network_policies_snapshot() {
    let wc = job("wc");
    let got = rendered(&[&wc], &settings(Some("monitoring")))
        .iter()
        .map(|d| serde_yaml::to_string(d).unwrap())
        .collect::<Vec<_>>()
        .join("---\n");
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/network-policies.yaml");
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, &got).unwrap();
    }
    let want = std::fs::read_to_string(&path).expect("snapshot exists (UPDATE_SNAPSHOTS=1 writes it)");
    assert_eq!(
        got, want,
        "network policies changed; review and rerun with UPDATE_SNAPSHOTS=1"
    );
}
