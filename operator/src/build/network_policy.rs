//! Per-job NetworkPolicies (issue 15, docs/operations/security.md): which pods may open a
//! connection to a job's coordinator and workers.
//!
//! Two policies per StreamJob, owned by it and applied with the other children (before the
//! pods, so no pod of the job runs unprotected):
//!
//! | policy | selects | port | allowed from |
//! |---|---|---|---|
//! | `<job>-coordinator` | the coordinator pod | 8081 (control API, `/metrics`) | the operator's pods (its namespace and pod labels); the monitoring namespaces |
//! | | | 6123 (worker RPC) | this job's worker pods |
//! | `<job>-worker` | the worker pods | 6124 (data) | this job's worker pods |
//! | | | 8082 (`/healthz`, `/metrics`) | the monitoring namespaces |
//!
//! Everything else reaching these pods is denied. Egress is not restricted (workers and the
//! coordinator need DNS, S3 and sources/sinks at addresses only the user knows). Kubelet probes
//! come from the node, which Kubernetes' NetworkPolicy implementations let through.
//!
//! Operator-wide settings ([`NetworkPolicySettings`]) come from `WEIR_NETWORK_POLICIES`, which
//! the chart renders from its `networkPolicies` values and the operator pod's own namespace and
//! labels.

use super::{CONTROL_PORT, from_json, worker_name};
use super::{Component, DATA_PORT, RPC_PORT, Target, WORKER_HTTP_PORT, coordinator_name, meta, selector_labels};
use k8s_openapi::api::networking::v1::NetworkPolicy;
use kube::ResourceExt;
use serde::{Deserialize, Serialize};
use serde_json::{Value, json};
use std::collections::BTreeMap;

/// The namespace label every namespace carries (set by the API server since Kubernetes 1.22):
/// how a policy names the operator's namespace.
pub const NAMESPACE_NAME_LABEL: &str = "kubernetes.io/metadata.name";

/// Operator-wide NetworkPolicy settings: the JSON of `WEIR_NETWORK_POLICIES` /
/// `--network-policies` (camelCase keys, unknown keys refused).
///
/// Without the variable the operator renders no policies (it does not know its own pod
/// labels); the chart always sets it.
#[derive(Clone, Debug, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct NetworkPolicySettings {
    /// Render the per-job policies (the chart's `networkPolicies.enabled`). Off: none are
    /// created; policies made while it was on stay until their job is deleted.
    #[serde(default)]
    pub enabled: bool,
    /// Namespace of the operator's pods (the chart's release namespace).
    #[serde(default)]
    pub operator_namespace: String,
    /// Labels that select the operator's pods (the chart's selector labels).
    #[serde(default)]
    pub operator_pod_labels: BTreeMap<String, String>,
    /// Namespace labels (matchLabels) of the namespaces whose pods may scrape `/metrics`
    /// (coordinator 8081, workers 8082). `{}`: every namespace. Absent or null: no pod may
    /// (only the node's kubelet probes reach the pods).
    #[serde(default)]
    pub monitoring_namespace_selector: Option<BTreeMap<String, String>>,
}

impl NetworkPolicySettings {
    /// Parses and checks `WEIR_NETWORK_POLICIES` (JSON).
    ///
    /// Errors (naming the variable and the key): not JSON of this shape, an unknown key, or
    /// `enabled` without `operatorNamespace` or `operatorPodLabels` (empty labels would let
    /// every pod of the operator's namespace control jobs).
    pub fn from_json(text: &str) -> Result<NetworkPolicySettings, String> {
        let settings: NetworkPolicySettings = serde_json::from_str(text).map_err(|e| {
            format!(
                "WEIR_NETWORK_POLICIES (--network-policies) is not valid NetworkPolicy settings JSON: {e}; \
                 expected keys: enabled, operatorNamespace, operatorPodLabels, monitoringNamespaceSelector"
            )
        })?;
        if settings.enabled && settings.operator_namespace.is_empty() {
            return Err("WEIR_NETWORK_POLICIES: enabled needs operatorNamespace (the operator pod's namespace)".into());
        }
        if settings.enabled && settings.operator_pod_labels.is_empty() {
            return Err(
                "WEIR_NETWORK_POLICIES: enabled needs operatorPodLabels (labels selecting only the operator's pods)"
                    .into(),
            );
        }
        Ok(settings)
    }
}

/// A peer of every pod in namespaces matching `labels` (`{}`: all namespaces).
fn namespaces_peer(labels: &BTreeMap<String, String>) -> Value {
    json!({"namespaceSelector": {"matchLabels": labels}})
}

/// The peer of the operator's pods: its namespace AND its pod labels (one peer, both selectors).
fn operator_peer(s: &NetworkPolicySettings) -> Value {
    json!({
        "namespaceSelector": {"matchLabels": {NAMESPACE_NAME_LABEL: s.operator_namespace}},
        "podSelector": {"matchLabels": s.operator_pod_labels},
    })
}

/// The peer of this job's worker pods (the policy's own namespace).
fn workers_peer(job: &str) -> Value {
    json!({"podSelector": {"matchLabels": selector_labels(job, Component::Worker)}})
}

fn tcp(port: i32) -> Value {
    json!([{"protocol": "TCP", "port": port}])
}

fn policy(t: &Target, name: String, component: Component, ingress: Vec<Value>) -> NetworkPolicy {
    from_json(json!({
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": meta(t, name, component),
        "spec": {
            "podSelector": {"matchLabels": selector_labels(&t.job.name_any(), component)},
            "policyTypes": ["Ingress"],
            "ingress": ingress,
        },
    }))
}

/// The coordinator's policy `<job>-coordinator`: control port from the operator's pods (and
/// the monitoring namespaces, for `/metrics`), RPC port from this job's workers.
pub fn coordinator_network_policy(t: &Target, s: &NetworkPolicySettings) -> NetworkPolicy {
    let name = t.job.name_any();
    let mut control_from = vec![operator_peer(s)];
    if let Some(monitoring) = &s.monitoring_namespace_selector {
        control_from.push(namespaces_peer(monitoring));
    }
    let ingress = vec![
        json!({"ports": tcp(CONTROL_PORT), "from": control_from}),
        json!({"ports": tcp(RPC_PORT), "from": [workers_peer(&name)]}),
    ];
    policy(t, coordinator_name(&name), Component::Coordinator, ingress)
}

/// The workers' policy `<job>-worker`: data port from this job's workers, health/metrics port
/// from the monitoring namespaces (no rule when none are configured).
pub fn worker_network_policy(t: &Target, s: &NetworkPolicySettings) -> NetworkPolicy {
    let name = t.job.name_any();
    let mut ingress = vec![json!({"ports": tcp(DATA_PORT), "from": [workers_peer(&name)]})];
    if let Some(monitoring) = &s.monitoring_namespace_selector {
        ingress.push(json!({"ports": tcp(WORKER_HTTP_PORT), "from": [namespaces_peer(monitoring)]}));
    }
    policy(t, worker_name(&name), Component::Worker, ingress)
}

/// The job's policies: coordinator and workers, or none when `s.enabled` is off.
pub fn network_policies(t: &Target, s: &NetworkPolicySettings) -> Vec<NetworkPolicy> {
    if !s.enabled {
        return Vec::new();
    }
    vec![coordinator_network_policy(t, s), worker_network_policy(t, s)]
}

#[cfg(test)]
#[path = "network_policy_tests.rs"]
mod tests;
