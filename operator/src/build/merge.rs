//! Merge of a user's pod template override over the generated pod template.
//!
//! Rules (a small subset of strategic merge patch, enough for pod templates): objects merge
//! key by key; lists whose items all carry a `name` (containers, volumes, env, ports, volume
//! mounts) merge item by item by name, new items appended; any other value in the override
//! replaces the generated one. So a sidecar container is appended, the `weir` container's
//! `env` gains entries, and `tolerations` or `nodeSelector` are taken from the override.
//!
//! An empty list in the override merges nothing into a list of named items: a `podTemplate`
//! that sets only `nodeSelector` still serializes `containers: []` (the field is not optional
//! in the typed PodSpec), and that must not replace the generated containers.
//!
//! A volume of the override keeps only its own keys (Kubernetes' `retainKeys` patch strategy
//! of `PodSpec.volumes`, which `kubectl apply` follows): `{name: weir-state, emptyDir:
//! {sizeLimit: 20Gi}}` sizes the generated `emptyDir`, and `{name: weir-state, ephemeral:
//! {...}}` or `persistentVolumeClaim` replaces it. Merged key by key, the volume would carry
//! two sources, which the API server refuses ("may not specify more than 1 volume type").

use k8s_openapi::api::core::v1::PodTemplateSpec;
use serde_json::Value;

/// Merges `over` over `base` (see the module docs). `None` returns `base` unchanged.
pub fn merge_pod_template(base: PodTemplateSpec, over: Option<&PodTemplateSpec>) -> PodTemplateSpec {
    let Some(over) = over else { return base };
    let mut b = serde_json::to_value(&base).expect("pod template serializes");
    let o = serde_json::to_value(over).expect("pod template serializes");
    merge_value(&mut b, &o);
    serde_json::from_value(b).expect("merge of two pod templates is a pod template")
}

fn named(v: &Value) -> Option<&str> {
    v.get("name").and_then(Value::as_str)
}

fn merge_value(base: &mut Value, over: &Value) {
    match (base, over) {
        (_, Value::Null) => {}
        (Value::Object(b), Value::Object(o)) => {
            for (k, v) in o {
                match b.get_mut(k) {
                    Some(bv) if k == "volumes" => merge_named(bv, v, true),
                    Some(bv) => merge_value(bv, v),
                    None => {
                        b.insert(k.clone(), v.clone());
                    }
                }
            }
        }
        (b, o) => merge_named(b, o, false),
    }
}

/// Merges a list of named items item by item by name (new items appended), each matched item
/// keeping only the override's keys when `retain_keys` (see the module docs); any other pair
/// of values: `over` replaces `base` (a `null` override leaves it).
fn merge_named(base: &mut Value, over: &Value, retain_keys: bool) {
    match (base, over) {
        (Value::Array(b), Value::Array(o)) if b.iter().chain(o.iter()).all(|v| named(v).is_some()) => {
            for item in o {
                let name = named(item).expect("checked");
                match b.iter_mut().find(|x| named(x) == Some(name)) {
                    Some(existing) => {
                        if let (true, Value::Object(kept), Value::Object(wanted)) = (retain_keys, &mut *existing, item)
                        {
                            kept.retain(|key, _| wanted.contains_key(key));
                        }
                        merge_value(existing, item)
                    }
                    None => b.push(item.clone()),
                }
            }
        }
        (_, Value::Null) => {}
        (b, o) => *b = o.clone(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    fn tpl(v: Value) -> PodTemplateSpec {
        serde_json::from_value(v).unwrap()
    }

    #[test]
    fn merge_rules() {
        let base = tpl(json!({
            "metadata": {"labels": {"a": "1"}},
            "spec": {
                "containers": [{"name": "weir", "image": "weir:1", "env": [{"name": "X", "value": "1"}]}],
                "volumes": [{"name": "tmp", "emptyDir": {}}],
                "tolerations": [{"key": "k1", "operator": "Exists"}],
            }
        }));
        let over = tpl(json!({
            "metadata": {"labels": {"b": "2"}, "annotations": {"c": "3"}},
            "spec": {
                "containers": [
                    {"name": "weir", "env": [{"name": "X", "value": "2"}, {"name": "Y", "value": "3"}]},
                    {"name": "sidecar", "image": "busybox"},
                ],
                "volumes": [{"name": "extra", "emptyDir": {}}],
                "tolerations": [{"key": "k2", "operator": "Exists"}],
                "nodeSelector": {"pool": "stream"},
            }
        }));
        let got = serde_json::to_value(merge_pod_template(base, Some(&over))).unwrap();
        assert_eq!(
            got,
            json!({
                "metadata": {"labels": {"a": "1", "b": "2"}, "annotations": {"c": "3"}},
                "spec": {
                    "containers": [
                        {"name": "weir", "image": "weir:1",
                         "env": [{"name": "X", "value": "2"}, {"name": "Y", "value": "3"}]},
                        {"name": "sidecar", "image": "busybox"},
                    ],
                    "volumes": [{"name": "tmp", "emptyDir": {}}, {"name": "extra", "emptyDir": {}}],
                    "tolerations": [{"key": "k2", "operator": "Exists"}],
                    "nodeSelector": {"pool": "stream"},
                }
            })
        );
    }

    /// The documented use: an override with only node placement. Its typed form serializes
    /// `containers: []`, which must leave the generated containers and volumes in place.
    #[test]
    fn placement_only_override_keeps_generated_containers() {
        let base = tpl(json!({"spec": {
            "containers": [{"name": "weir", "image": "weir:1"}],
            "volumes": [{"name": "tmp", "emptyDir": {}}],
        }}));
        let over = tpl(json!({"spec": {
            "nodeSelector": {"pool": "stream"},
            "tolerations": [{"key": "dedicated", "operator": "Exists"}],
        }}));
        assert_eq!(serde_json::to_value(&over).unwrap()["spec"]["containers"], json!([]));
        let got = serde_json::to_value(merge_pod_template(base, Some(&over))).unwrap();
        assert_eq!(got["spec"]["containers"], json!([{"name": "weir", "image": "weir:1"}]));
        assert_eq!(got["spec"]["volumes"], json!([{"name": "tmp", "emptyDir": {}}]));
        assert_eq!(got["spec"]["nodeSelector"], json!({"pool": "stream"}));
        assert_eq!(
            got["spec"]["tolerations"],
            json!([{"key": "dedicated", "operator": "Exists"}])
        );
    }

    #[test]
    fn no_override_is_identity() {
        let base = tpl(json!({"spec": {"containers": [{"name": "weir"}]}}));
        assert_eq!(merge_pod_template(base.clone(), None), base);
    }
}
