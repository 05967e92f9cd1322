//! The worker pods of a job with `stateBackend: disk` get a writable state volume at the
//! runtime's state directory; other jobs and the coordinator do not.

use super::*;

/// A StreamJob `wc` at parallelism 2 counting per key, with `extra` (spec fields, two-space
/// indented) appended to its spec; also the fixture of `disk_memory`'s tests.
pub(super) fn job(extra: &str) -> StreamJob {
    let yaml = format!(
        r#"
apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{name: wc, namespace: streams, uid: 1234-abcd, generation: 7}}
spec:
  parallelism: 2
  checkpointing: {{storage: "s3://bucket/chk"}}
  job:
    steps:
      - source: {{generator: {{seed: 1}}}}
      - keyBy: {{expression: key}}
      - uid: counts
        count: {{}}
      - sink: {{print: {{}}}}
{extra}
"#
    );
    serde_yaml::from_str(&yaml).unwrap()
}

fn target(job: &StreamJob) -> Target<'_> {
    static DEFAULTS: std::sync::LazyLock<RuntimeDefaults> = std::sync::LazyLock::new(RuntimeDefaults::default);
    Target {
        job,
        spec: &job.spec,
        restore_from: None,
        deploy_generation: 1,
        spec_generation: 1,
        defaults: &DEFAULTS,
    }
}

/// (volume, mount path, WEIR_STATE_DIR) of a pod spec, each `Null` when absent.
fn state_setup(pod_spec: &Value) -> (Value, Value, Value) {
    let named = |list: &Value, name: &str| {
        list.as_array()
            .and_then(|l| l.iter().find(|i| i["name"] == name).cloned())
            .unwrap_or(Value::Null)
    };
    let container = named(&pod_spec["containers"], CONTAINER);
    (
        named(&pod_spec["volumes"], STATE_VOLUME),
        named(&container["volumeMounts"], STATE_VOLUME)["mountPath"].clone(),
        named(&container["env"], weir_runtime::state::local_dir::STATE_DIR_ENV)["value"].clone(),
    )
}

#[test]
fn state_volume_table() {
    let empty_dir = json!({"name": STATE_VOLUME, "emptyDir": {}});
    let sized = json!({"name": STATE_VOLUME, "emptyDir": {"sizeLimit": "20Gi"}});
    // One volume source only: the API server refuses a volume with two.
    let ephemeral = json!({"name": STATE_VOLUME, "ephemeral": {"volumeClaimTemplate": {"spec": {
        "accessModes": ["ReadWriteOnce"],
        "storageClassName": "local-ssd",
        "resources": {"requests": {"storage": "100Gi"}},
    }}}});
    let rows = [
        ("heap (default)", "", Value::Null, Value::Null),
        ("heap", "  stateBackend: heap", Value::Null, Value::Null),
        ("disk", "  stateBackend: disk", empty_dir, json!(STATE_DIR)),
        (
            "disk, sized by the worker pod template",
            "  stateBackend: disk\n  worker: {podTemplate: {spec: {volumes: [{name: weir-state, emptyDir: {sizeLimit: 20Gi}}]}}}",
            sized,
            json!(STATE_DIR),
        ),
        (
            "disk, a generic ephemeral volume instead of the emptyDir",
            "  stateBackend: disk\n  worker: {podTemplate: {spec: {volumes: [{name: weir-state, ephemeral: {volumeClaimTemplate: {spec: {accessModes: [ReadWriteOnce], storageClassName: local-ssd, resources: {requests: {storage: 100Gi}}}}}}]}}}",
            ephemeral,
            json!(STATE_DIR),
        ),
        (
            "disk, a persistent volume claim instead of the emptyDir",
            "  stateBackend: disk\n  worker: {podTemplate: {spec: {volumes: [{name: weir-state, persistentVolumeClaim: {claimName: state}}]}}}",
            json!({"name": STATE_VOLUME, "persistentVolumeClaim": {"claimName": "state"}}),
            json!(STATE_DIR),
        ),
    ];
    for (name, extra, volume, dir) in rows {
        let j = job(extra);
        let t = target(&j);
        let workers = serde_json::to_value(worker_statefulset(&t)).unwrap();
        let (got_volume, mount, env) = state_setup(&workers["spec"]["template"]["spec"]);
        assert_eq!(got_volume, volume, "{name}");
        assert_eq!(mount, dir, "{name}: mount");
        assert_eq!(env, dir, "{name}: env");
        let coordinator = serde_json::to_value(coordinator_deployment(&t)).unwrap();
        let none = (Value::Null, Value::Null, Value::Null);
        assert_eq!(
            state_setup(&coordinator["spec"]["template"]["spec"]),
            none,
            "{name}: coordinator"
        );
        // The job file the pods read carries the backend, and the runtime accepts it.
        let file = job_file("wc", None, &j.spec);
        assert_eq!(
            file.contains("stateBackend: disk"),
            dir != Value::Null,
            "{name}: {file}"
        );
        let runtime_job = j.spec.runtime_job("wc").unwrap();
        assert_eq!(
            runtime_job.spec.state_backend == StateBackend::Disk,
            dir != Value::Null,
            "{name}"
        );
    }
}

#[test]
fn an_unknown_backend_is_refused_naming_the_field() {
    let err = serde_yaml::from_str::<StreamJob>(
        "apiVersion: weir.dev/v1alpha1\nkind: StreamJob\nmetadata: {name: wc}\nspec:\n  stateBackend: rocksdb\n  job: {steps: []}\n",
    )
    .unwrap_err()
    .to_string();
    assert!(
        err.contains("rocksdb") && err.contains("heap") && err.contains("disk"),
        "{err}"
    );
}
