//! Builder tables and a snapshot of every child of one job.

use super::*;
use crate::crd::UpgradeMode;
use serde_json::json;

fn job(extra: &str) -> StreamJob {
    let yaml = format!(
        r#"
apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{name: wc, namespace: streams, uid: 1234-abcd, generation: 7}}
spec:
  image: ghcr.io/weir-dev/weir:0.1.0
  parallelism: 3
  slotsPerWorker: 2
  checkpointing: {{storage: "s3://bucket/chk", interval: 10s}}
  savepoints: {{directory: "s3://bucket/svp"}}
  s3: {{endpoint: "http://minio:9000", pathStyle: true, credentialsSecret: {{name: s3-creds}}}}
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

static TEST_DEFAULTS: std::sync::LazyLock<RuntimeDefaults> = std::sync::LazyLock::new(|| RuntimeDefaults {
    image: "weir:default".into(),
    ..Default::default()
});

fn target<'a>(job: &'a StreamJob, restore: Option<&'a str>) -> Target<'a> {
    Target {
        job,
        spec: &job.spec,
        restore_from: restore,
        deploy_generation: 4,
        spec_generation: 7,
        defaults: &TEST_DEFAULTS,
    }
}

fn v<T: serde::Serialize>(t: &T) -> Value {
    serde_json::to_value(t).unwrap()
}

#[test]
fn worker_replicas_table() {
    for (p, slots, want) in [(1, 1, 1), (3, 2, 2), (4, 2, 2), (5, 4, 2), (8, 1, 8), (1, 8, 1)] {
        let mut j = job("");
        j.spec.parallelism = p;
        j.spec.slots_per_worker = slots;
        assert_eq!(worker_replicas(&j.spec), want, "p={p} slots={slots}");
        let sts = worker_statefulset(&target(&j, None));
        assert_eq!(sts.spec.unwrap().replicas, Some(want));
    }
}

#[test]
fn every_child_is_labelled_and_owned() {
    let j = job("");
    let c = build(&target(&j, None));
    let metas = [
        v(&c.config_map)["metadata"].clone(),
        v(&c.coordinator)["metadata"].clone(),
        v(&c.coordinator_service)["metadata"].clone(),
        v(&c.workers)["metadata"].clone(),
        v(&c.worker_service)["metadata"].clone(),
    ];
    for m in metas {
        assert_eq!(m["namespace"], "streams", "{m}");
        assert_eq!(m["labels"][LABEL_JOB], "wc");
        assert_eq!(m["labels"][LABEL_DEPLOY_GENERATION], "4");
        assert_eq!(m["labels"]["app.kubernetes.io/managed-by"], "weir-operator");
        assert_eq!(
            m["ownerReferences"],
            json!([{"apiVersion": "weir.dev/v1alpha1", "kind": "StreamJob", "name": "wc",
                    "uid": "1234-abcd", "controller": true, "blockOwnerDeletion": true}])
        );
    }
    for (tpl, comp) in [
        (v(&c.coordinator)["spec"]["template"].clone(), "coordinator"),
        (v(&c.workers)["spec"]["template"].clone(), "worker"),
    ] {
        assert_eq!(tpl["metadata"]["labels"][LABEL_DEPLOY_GENERATION], "4");
        assert_eq!(tpl["metadata"]["labels"]["app.kubernetes.io/component"], comp);
    }
    // Selectors never carry the generation (they are immutable).
    let sel = v(&c.coordinator)["spec"]["selector"]["matchLabels"].clone();
    assert!(sel.get(LABEL_DEPLOY_GENERATION).is_none());
    assert_eq!(v(&c.coordinator_service)["spec"]["selector"], sel);
}

#[test]
fn coordinator_args_restore_and_generation_annotation() {
    let j = job("");
    for (restore, want) in [
        (None, "none"),
        (Some("s3://bucket/svp/savepoint-wc-9"), "s3://bucket/svp/savepoint-wc-9"),
    ] {
        let d = v(&coordinator_deployment(&target(&j, restore)));
        let args = d["spec"]["template"]["spec"]["containers"][0]["args"].clone();
        assert_eq!(
            args,
            json!([
                "coordinator",
                "--job",
                "/etc/weir/job.yaml",
                "--restore",
                want,
                "--listen",
                "0.0.0.0:8081",
                "--rpc-listen",
                "0.0.0.0:6123",
                "--run-id",
                "1234-abcd-4"
            ])
        );
        assert_eq!(d["metadata"]["annotations"][ANNOTATION_SPEC_GENERATION], "7");
        assert_eq!(d["spec"]["strategy"]["type"], "Recreate");
        assert_eq!(d["spec"]["replicas"], 1);
    }
    let w = v(&worker_statefulset(&target(&j, None)));
    assert_eq!(
        w["spec"]["template"]["spec"]["containers"][0]["args"],
        json!([
            "worker",
            "--coordinator",
            "wc-coordinator:6123",
            "--slots",
            "2",
            "--data-listen",
            "0.0.0.0:6124",
            "--advertise",
            "$(POD_IP):6124",
            "--listen",
            "0.0.0.0:8082"
        ])
    );
    // The run id is stable per deployment and new for every deploy generation.
    let mut t = target(&j, None);
    assert_eq!(run_id(&j, 4), "1234-abcd-4");
    t.deploy_generation = 5;
    let args = v(&coordinator_deployment(&t))["spec"]["template"]["spec"]["containers"][0]["args"].clone();
    assert_eq!(args[10], "1234-abcd-5");
    assert_eq!(w["spec"]["serviceName"], "wc-worker");
    assert_eq!(v(&worker_service(&target(&j, None)))["spec"]["clusterIP"], "None");
}

#[test]
fn security_context_probes_and_credentials() {
    let j = job("");
    let c = build(&target(&j, None));
    for tpl in [
        v(&c.coordinator)["spec"]["template"].clone(),
        v(&c.workers)["spec"]["template"].clone(),
    ] {
        let pod = &tpl["spec"];
        assert_eq!(pod["securityContext"]["runAsNonRoot"], true);
        assert_eq!(pod["securityContext"]["seccompProfile"]["type"], "RuntimeDefault");
        assert_eq!(pod["automountServiceAccountToken"], false);
        let ctr = &pod["containers"][0];
        assert_eq!(ctr["name"], "weir");
        assert_eq!(ctr["securityContext"]["readOnlyRootFilesystem"], true);
        assert_eq!(ctr["securityContext"]["allowPrivilegeEscalation"], false);
        assert_eq!(ctr["securityContext"]["capabilities"]["drop"], json!(["ALL"]));
        assert!(ctr["readinessProbe"].is_object() && ctr["livenessProbe"].is_object());
        let env = ctr["env"].as_array().unwrap();
        let key = env.iter().find(|e| e["name"] == "AWS_ACCESS_KEY_ID").unwrap();
        assert_eq!(
            key["valueFrom"]["secretKeyRef"],
            json!({"name": "s3-creds", "key": "accessKeyId"})
        );
        assert!(env.iter().any(|e| e["name"] == "AWS_SECRET_ACCESS_KEY"));
    }
    // Both roles serve /healthz on their port named `http` (workers: the worker listener).
    for (obj, port) in [(v(&c.coordinator), 8081), (v(&c.workers), 8082)] {
        let ctr = &obj["spec"]["template"]["spec"]["containers"][0];
        for probe in ["readinessProbe", "livenessProbe"] {
            assert_eq!(
                ctr[probe]["httpGet"],
                json!({"path": "/healthz", "port": "http"}),
                "{probe}"
            );
        }
        let http = ctr["ports"]
            .as_array()
            .unwrap()
            .iter()
            .find(|p| p["name"] == "http")
            .unwrap();
        assert_eq!(http["containerPort"], port);
        let env = ctr["env"].as_array().unwrap();
        let token = env.iter().find(|e| e["name"] == "AWS_SESSION_TOKEN").unwrap();
        assert_eq!(token["valueFrom"]["secretKeyRef"]["optional"], true);
    }
    // No secret reference: no credential env (the AWS default chain applies).
    let mut j2 = job("");
    j2.spec.s3 = None;
    let coord = v(&coordinator_deployment(&target(&j2, None)));
    let env = coord["spec"]["template"]["spec"]["containers"][0]["env"]
        .as_array()
        .unwrap()
        .clone();
    assert!(!env.iter().any(|e| e["name"] == "AWS_ACCESS_KEY_ID"));
}

/// A named spec edit.
type Edit = (&'static str, fn(&mut StreamJobSpec));

#[test]
fn config_checksum_covers_runtime_fields_only() {
    let base = job("");
    let sum = |j: &StreamJob| config_checksum("wc", &j.spec);
    let s0 = sum(&base);
    // Operator-only fields: same checksum (pods are not rolled).
    // (image and slotsPerWorker are not in the job file either: they change the pod spec itself.)
    let operator_only: Vec<Edit> = vec![
        ("upgradeMode", |s| s.upgrade_mode = UpgradeMode::LastState),
        ("rollback", |s| s.rollback.readiness_timeout = "9m".into()),
        ("health", |s| s.health.max_restarts = 9),
        ("initialSavepointPath", |s| {
            s.initial_savepoint_path = Some("s3://x".into())
        }),
        ("periodicInterval", |s| {
            s.savepoints.as_mut().unwrap().periodic_interval = Some("1h".into())
        }),
        ("credentialsSecret", |s| {
            s.s3.as_mut().unwrap().credentials_secret = None
        }),
        ("image", |s| s.image = "weir:2".into()),
        ("slotsPerWorker", |s| s.slots_per_worker = 3),
    ];
    for (name, f) in operator_only {
        let mut j = base.clone();
        f(&mut j.spec);
        assert_eq!(sum(&j), s0, "{name} must not change the config checksum");
    }
    // Runtime fields: a different checksum.
    let runtime: Vec<Edit> = vec![
        ("parallelism", |s| s.parallelism = 4),
        ("checkpointing.interval", |s| s.checkpointing.interval = "30s".into()),
        ("allowNonRestoredState", |s| s.allow_non_restored_state = true),
        ("s3.endpoint", |s| {
            s.s3.as_mut().unwrap().runtime.endpoint = Some("http://other".into())
        }),
        ("job", |s| s.job.steps.pop().map(|_| ()).unwrap()),
    ];
    for (name, f) in runtime {
        let mut j = base.clone();
        f(&mut j.spec);
        assert_ne!(sum(&j), s0, "{name} must change the config checksum");
    }
    assert_ne!(
        config_checksum("other", &base.spec),
        s0,
        "the job name is runtime-relevant"
    );
}

#[test]
fn job_file_is_a_manifest_the_runtime_reads() {
    let j = job("");
    let cm = config_map(&target(&j, None));
    let text = cm.data.unwrap()[JOB_FILE_KEY].clone();
    let m: weir_runtime::job::StreamJobManifest = serde_yaml::from_str(&text).unwrap();
    // Every field the operator writes is one the runtime's strict field check knows.
    weir_runtime::job::parse_manifest(&text, &[]).expect("the runtime loads the job file");
    let every_section = job(r#"
  imagePullPolicy: IfNotPresent
  serviceAccountName: weir-job
  upgradeMode: last-state
  state: running
  initialSavepointPath: s3://bucket/svp/savepoint-1
  restartNonce: 2
  savepointRedeployNonce: 1
  savepointOnDelete: true
  rollback: {enabled: false, readinessTimeout: 2m}
  health: {maxRestarts: 5, restartWindow: 30m}
  worker:
    resources: {requests: {cpu: 500m}}
    podTemplate: {metadata: {labels: {team: data}}, spec: {nodeSelector: {pool: stream}}}"#);
    let text = config_map(&target(&every_section, None)).data.unwrap()[JOB_FILE_KEY].clone();
    weir_runtime::job::parse_manifest(&text, &[]).expect("the runtime loads a job file with every section");
    assert_eq!(m.metadata.name, "wc");
    assert_eq!(m.kind, "StreamJob");
    assert_eq!(m.spec.parallelism, 3);
    assert_eq!(m.spec.checkpointing.storage.as_deref(), Some("s3://bucket/chk"));
}

#[test]
fn override_merges_but_keeps_operator_labels() {
    let j = job(r#"
  serviceAccountName: weir-job
  imagePullPolicy: IfNotPresent
  coordinator:
    resources: {requests: {cpu: 500m, memory: 1Gi}}
    podTemplate:
      metadata:
        labels: {team: data, "weir.dev/job": hijack}
      spec:
        nodeSelector: {pool: stream}
        containers:
          - name: weir
            env: [{name: RUST_LOG, value: debug}]
          - name: sidecar
            image: busybox
"#);
    let d = v(&coordinator_deployment(&target(&j, None)));
    let tpl = &d["spec"]["template"];
    assert_eq!(tpl["metadata"]["labels"]["team"], "data");
    assert_eq!(tpl["metadata"]["labels"][LABEL_JOB], "wc");
    assert_eq!(tpl["spec"]["nodeSelector"]["pool"], "stream");
    assert_eq!(tpl["spec"]["serviceAccountName"], "weir-job");
    let ctrs = tpl["spec"]["containers"].as_array().unwrap();
    assert_eq!(ctrs.len(), 2);
    assert_eq!(ctrs[0]["imagePullPolicy"], "IfNotPresent");
    assert_eq!(ctrs[0]["resources"]["requests"]["cpu"], "500m");
    assert!(
        ctrs[0]["env"]
            .as_array()
            .unwrap()
            .iter()
            .any(|e| e["name"] == "RUST_LOG")
    );
    assert!(ctrs[0]["env"].as_array().unwrap().iter().any(|e| e["name"] == "HOME"));
    assert_eq!(ctrs[1]["name"], "sidecar");
    // The worker has no override: untouched.
    let w = v(&worker_statefulset(&target(&j, None)));
    assert_eq!(w["spec"]["template"]["spec"]["containers"].as_array().unwrap().len(), 1);
}

#[test]
fn empty_image_uses_the_default() {
    let mut j = job("");
    j.spec.image = String::new();
    let d = v(&coordinator_deployment(&target(&j, None)));
    assert_eq!(d["spec"]["template"]["spec"]["containers"][0]["image"], "weir:default");
}

/// Snapshot of every child; `UPDATE_SNAPSHOTS=1 cargo test` rewrites it after a reviewed change.
#[test]
fn children_snapshot() {
    let j = job("");
    let c = build(&target(&j, Some("s3://bucket/svp/savepoint-wc-9")));
    let docs: Vec<String> = [
        v(&c.config_map),
        v(&c.coordinator),
        v(&c.coordinator_service),
        v(&c.workers),
        v(&c.worker_service),
    ]
    .iter()
    .map(|d| serde_yaml::to_string(d).unwrap())
    .collect();
    let got = docs.join("---\n");
    let path = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/snapshots/children.yaml");
    if std::env::var_os("UPDATE_SNAPSHOTS").is_some() {
        std::fs::write(&path, &got).unwrap();
    }
    let want = std::fs::read_to_string(&path).expect("snapshot exists (UPDATE_SNAPSHOTS=1 writes it)");
    assert_eq!(got, want, "children changed; review and rerun with UPDATE_SNAPSHOTS=1");
}

#[test]
fn job_key_table() {
    let forty = "a".repeat(40);
    let long_one = format!("{}-one", "x".repeat(60));
    let long_two = format!("{}-two", "x".repeat(60));
    assert_eq!(job_key("wc"), "wc");
    assert_eq!(job_key(&forty), forty, "40 characters are kept as is");
    let (k1, k2) = (job_key(&long_one), job_key(&long_two));
    assert_eq!(k1, job_key(&long_one), "deterministic");
    assert_ne!(k1, k2, "names sharing a long prefix get different keys");
    assert!(k1.len() <= MAX_JOB_KEY_LEN && k1.starts_with(&"x".repeat(31)), "{k1}");
    let dotted = job_key("team.wordcount");
    assert!(
        dotted.starts_with("team-wordcount-") && !dotted.contains('.'),
        "{dotted}"
    );
    // A cut right after a dash leaves no trailing dash before the hash.
    let dash_at_cut = format!("{}-{}", "b".repeat(30), "c".repeat(20));
    assert!(!job_key(&dash_at_cut).contains("--"), "{}", job_key(&dash_at_cut));
}

/// A StreamJob name of 253 characters (the API maximum) still gives valid child names (Service
/// names are DNS-1035 labels; StatefulSet names leave room for the revision-hash label) and
/// label values of at most 63 characters; the pods carry the full name in an annotation.
#[test]
fn long_job_names_give_valid_child_names_and_labels() {
    let long = format!("wordcount-{}", "very-long-name-".repeat(17))[..253]
        .trim_end_matches('-')
        .to_string();
    let mut j = job("");
    j.metadata.name = Some(long.clone());
    let c = build(&target(&j, None));
    let dns_1035 = regex::Regex::new("^[a-z]([-a-z0-9]*[a-z0-9])?$").unwrap();
    let label_value = regex::Regex::new("^(([A-Za-z0-9][-A-Za-z0-9_.]*)?[A-Za-z0-9])?$").unwrap();
    let objects = [
        v(&c.config_map),
        v(&c.coordinator),
        v(&c.coordinator_service),
        v(&c.workers),
        v(&c.worker_service),
    ];
    for o in &objects {
        let name = o["metadata"]["name"].as_str().unwrap();
        assert!(name.len() <= 52 && dns_1035.is_match(name), "child name {name}");
        let mut label_sets = vec![&o["metadata"]["labels"]];
        if let Some(t) = o["spec"].get("template") {
            label_sets.push(&t["metadata"]["labels"]);
            assert_eq!(t["metadata"]["annotations"][ANNOTATION_JOB_NAME], long.as_str());
        }
        if let Some(sel) = o["spec"].get("selector") {
            label_sets.push(sel.get("matchLabels").unwrap_or(sel));
        }
        for labels in label_sets {
            for (k, val) in labels.as_object().unwrap() {
                let val = val.as_str().unwrap();
                assert!(val.len() <= 63 && label_value.is_match(val), "{name}: label {k}={val}");
            }
        }
    }
    assert_eq!(job_selector(&long), format!("{LABEL_JOB}={}", job_key(&long)));
    // Short names: no annotation, names as before.
    let c = build(&target(&job(""), None));
    assert_eq!(c.workers.metadata.name.as_deref(), Some("wc-worker"));
    let annotations = c.workers.spec.unwrap().template.metadata.unwrap().annotations.unwrap();
    assert!(!annotations.contains_key(ANNOTATION_JOB_NAME));
}

/// A StreamJob whose pod templates set only placement (nodeSelector, tolerations) gets the
/// generated `weir` container, volumes and its placement in both roles.
#[test]
fn placement_only_pod_templates_keep_the_runtime_container() {
    let j = job(r#"  coordinator: {podTemplate: {spec: {nodeSelector: {pool: control}}}}
  worker: {podTemplate: {spec: {tolerations: [{key: dedicated, operator: Exists}]}}}"#);
    let c = build(&target(&j, None));
    let pods = [
        (v(&c.coordinator)["spec"]["template"]["spec"].clone(), "nodeSelector"),
        (v(&c.workers)["spec"]["template"]["spec"].clone(), "tolerations"),
    ];
    for (pod, placement) in pods {
        let names: Vec<_> = pod["containers"]
            .as_array()
            .unwrap()
            .iter()
            .map(|c| c["name"].clone())
            .collect();
        assert_eq!(names, vec![json!(CONTAINER)], "{pod}");
        assert!(pod["containers"][0]["image"].is_string());
        assert_eq!(pod["volumes"].as_array().unwrap().len(), 3, "{pod}");
        assert!(pod.get(placement).is_some(), "{placement} missing: {pod}");
    }
}

/// The job Secret: named after the job key, in the job's namespace, owned by the StreamJob
/// (garbage collected with it), labelled with its deployment generation, the token under
/// `job.secret`.
#[test]
fn the_job_secret_is_owned_by_the_job_and_carries_its_generation_and_token() {
    let j = job("");
    let token = weir_runtime::security::secret::JobSecret::generate();
    let s = v(&job_secret(&target(&j, None), &token));
    assert_eq!(s["metadata"]["name"], "wc-job-secret");
    assert_eq!(s["metadata"]["namespace"], "streams");
    assert_eq!(s["metadata"]["labels"][LABEL_DEPLOY_GENERATION], "4");
    assert_eq!(s["metadata"]["labels"]["app.kubernetes.io/component"], "job-secret");
    assert_eq!(s["metadata"]["labels"][LABEL_JOB], "wc");
    let owner = &s["metadata"]["ownerReferences"][0];
    assert_eq!(
        (&owner["kind"], &owner["uid"], &owner["controller"]),
        (&json!("StreamJob"), &json!("1234-abcd"), &json!(true))
    );
    assert_eq!(s["type"], "Opaque");
    let data = s["data"].as_object().unwrap();
    assert_eq!(data.keys().collect::<Vec<_>>(), vec![JOB_SECRET_KEY]);
    let back: k8s_openapi::api::core::v1::Secret = serde_json::from_value(s.clone()).unwrap();
    assert_eq!(
        token_of(&back).unwrap(),
        token,
        "the token round-trips through the object"
    );
    assert_eq!(
        job_secret_name(&"x".repeat(60)),
        format!("{}-job-secret", job_key(&"x".repeat(60)))
    );
}

/// Re-applying within one deployment generation keeps the token (running pods hold it); a new
/// generation, a missing or unusable value gets a new one.
#[test]
fn the_token_is_kept_within_a_generation_and_rotated_otherwise() {
    use k8s_openapi::ByteString;
    use weir_runtime::security::secret::JobSecret;
    let j = job("");
    let token = JobSecret::generate();
    let of_generation_4 = job_secret(&target(&j, None), &token);
    let with_value = |value: &[u8]| {
        let mut s = of_generation_4.clone();
        s.data = Some([(JOB_SECRET_KEY.to_string(), ByteString(value.to_vec()))].into());
        s
    };
    let mut unlabelled = of_generation_4.clone();
    unlabelled
        .metadata
        .labels
        .as_mut()
        .unwrap()
        .remove(LABEL_DEPLOY_GENERATION);
    let mut no_key = of_generation_4.clone();
    no_key.data = Some(Default::default());
    for (what, existing, generation, keeps) in [
        ("no Secret yet", None, 4, false),
        ("the same generation", Some(of_generation_4.clone()), 4, true),
        ("a new generation", Some(of_generation_4.clone()), 5, false),
        ("an older generation's request", Some(of_generation_4.clone()), 3, false),
        ("no generation label", Some(unlabelled), 4, false),
        ("no job.secret key", Some(no_key), 4, false),
        ("a token too short", Some(with_value(b"short")), 4, false),
        (
            "a token with a space",
            Some(with_value(b"0123456789 abcdef0123")),
            4,
            false,
        ),
    ] {
        let kept = token_to_keep(existing.as_ref(), generation);
        assert_eq!(kept.is_some(), keeps, "{what}");
        if keeps {
            assert_eq!(kept.unwrap(), token, "{what}");
        }
    }
    let err = token_of(&no_key_secret(&of_generation_4)).unwrap_err();
    assert!(err.contains("wc-job-secret") && err.contains(JOB_SECRET_KEY), "{err}");
}

fn no_key_secret(s: &k8s_openapi::api::core::v1::Secret) -> k8s_openapi::api::core::v1::Secret {
    let mut s = s.clone();
    s.data = None;
    s
}

/// Both roles mount the job Secret read-only (mode 0440: the pods' fsGroup reads it) and name
/// the mounted file in `WEIR_JOB_SECRET_FILE`.
#[test]
fn coordinator_and_workers_mount_the_job_secret_and_name_its_file() {
    let j = job("");
    let c = build(&target(&j, None));
    assert_eq!(job_secret_path(), format!("{JOB_SECRET_DIR}/{JOB_SECRET_KEY}"));
    for (role, object) in [("coordinator", v(&c.coordinator)), ("workers", v(&c.workers))] {
        let pod = &object["spec"]["template"]["spec"];
        let volume = pod["volumes"]
            .as_array()
            .unwrap()
            .iter()
            .find(|vol| vol["name"] == JOB_SECRET_VOLUME)
            .unwrap_or_else(|| panic!("{role}: no job secret volume: {pod}"));
        assert_eq!(
            volume["secret"],
            json!({"secretName": "wc-job-secret", "defaultMode": 0o440}),
            "{role}"
        );
        let container = &pod["containers"][0];
        let mount = container["volumeMounts"]
            .as_array()
            .unwrap()
            .iter()
            .find(|m| m["name"] == JOB_SECRET_VOLUME)
            .unwrap_or_else(|| panic!("{role}: no job secret mount: {container}"));
        assert_eq!(
            mount,
            &json!({"name": JOB_SECRET_VOLUME, "mountPath": JOB_SECRET_DIR, "readOnly": true})
        );
        let env: Vec<&Value> = container["env"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|e| e["name"] == JOB_SECRET_ENV)
            .collect();
        assert_eq!(
            env,
            vec![&json!({"name": JOB_SECRET_ENV, "value": "/etc/weir-secret/job.secret"})],
            "{role}"
        );
    }
}
