//! End-to-end lifecycle without Kubernetes: real `weir coordinator` and `weir worker`
//! processes on 127.0.0.1, driven by the operator's own pieces — the pure decision module
//! (`lifecycle::decide`), the child-object builders (`build::build`: the processes are started
//! with exactly the container arguments of the Deployment and StatefulSet the operator would
//! apply, the job file is the ConfigMap's), the HTTP control-API client, and the storage
//! observations (`controller::stream_job::{storage_reads, read_storage}`). Only the Kubernetes
//! API is replaced: "apply" spawns processes, "delete" kills them, "pods" are the live processes.
//!
//! Word count over the real text in `../shared/data/text` is taken through: deploy (p=2) →
//! manual savepoint → scale to p=3 (stop-with-savepoint → every old process gone → restore) →
//! suspend (stop-with-savepoint) → resume at p=4 → the coordinator container restarts
//! (`kill -9`, same `--run-id`: resumes from its run's newest checkpoint) → the job finishes.
//! The committed output must be exactly the running counts: every `(word, k)` for k = 1..N(word)
//! exactly once.
//!
//! Needs the `weir` binary: the test runs `cargo build -p weir-runtime --bin weir` (a no-op
//! when up to date) and uses `<target dir>/debug/weir`; set `WEIR_BIN` to use another binary.

use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime};
use weir_operator::build::{self, Target};
use weir_operator::control::{ControlApi, HttpControlApi};
use weir_operator::controller::stream_job::{read_claim, read_storage, storage_reads, storage_spec, to_report};
use weir_operator::crd::{DesiredState, LifecycleState, StreamJob, StreamJobStatus};
use weir_operator::lifecycle::{self, Action, CoordinatorReport, Decision, Observation, StorageClaim};
use weir_operator::snapshots::{ObjectStoreSnapshots, SnapshotStore};
use weir_runtime::control::api::{SavepointRequest, TriggerState};
use weir_runtime::storage::S3Options;

mod data;
mod pods;
use data::*;
use pods::*;

/// Records per second per source subtask: slow enough that the job is still running after the
/// savepoint, the rescale, the suspend/resume and the coordinator restart.
const RATE: u64 = 1500;

// ---------- the operator loop with processes for the Kubernetes API ----------

struct Harness {
    bin: PathBuf,
    dir: PathBuf,
    job: StreamJob,
    status: StreamJobStatus,
    deployment: Option<Deployment>,
    snapshots: ObjectStoreSnapshots,
    /// Every deploy generation ever started (never two at once).
    started: Vec<u64>,
    /// Lifecycle transitions and events, for failure messages.
    log: Vec<String>,
}

impl Harness {
    fn control(&self) -> Option<HttpControlApi> {
        self.deployment
            .as_ref()
            .map(|d| HttpControlApi::new(&d.api, Duration::from_secs(5)).with_bearer_token(JOB_SECRET.into()))
    }

    fn edit(&mut self, f: impl FnOnce(&mut weir_operator::crd::StreamJobSpec)) {
        f(&mut self.job.spec);
        let g = self.job.metadata.generation.unwrap_or(1);
        self.job.metadata.generation = Some(g + 1);
    }

    /// Observe, as `controller::stream_job::observe` does.
    async fn observe(&mut self) -> Observation {
        let name = self.job.metadata.name.clone().unwrap();
        let control = self.control();
        let mut job_pods = 0;
        if let Some(d) = self.deployment.as_mut() {
            job_pods += d.coordinator.alive() as u32;
            for w in &mut d.workers {
                job_pods += w.alive() as u32;
            }
        }
        let (report, trigger) = match &control {
            Some(c) => {
                let report = match c.job().await {
                    Ok(report) => CoordinatorReport::Reported(to_report(report)),
                    Err(e) => CoordinatorReport::Unanswered(e.to_string()),
                };
                let trigger = match self.status.pending.as_ref().and_then(|p| p.trigger_id.as_deref()) {
                    Some(id) => c.savepoint(id).await.ok(),
                    None => None,
                };
                (report, trigger)
            }
            None => (CoordinatorReport::Absent, None),
        };
        let spec = storage_spec(&self.job, &self.status);
        let reads = storage_reads(&self.status, &self.job.spec);
        let storage_claim = match &reads.claim {
            None => StorageClaim::NotChecked,
            Some(target) => read_claim(
                &self.snapshots,
                &S3Options::default(),
                target,
                &name,
                &format!("e2e/{name}"),
            )
            .await
            .expect("claim"),
        };
        let (newest_snapshot, restore_info) = read_storage(&self.snapshots, &S3Options::default(), &spec, &name, reads)
            .await
            .expect("storage");
        Observation {
            now: SystemTime::now(),
            generation: self.job.metadata.generation.unwrap_or(1),
            name,
            deleting: false,
            coordinator: report,
            trigger,
            workloads_present: self.deployment.is_some(),
            job_pods,
            crash_looping: false,
            unschedulable: None,
            newest_snapshot,
            restore_info,
            storage_claim,
            savepoint_in_flight_since: None,
        }
    }

    /// One reconcile: observe → decide → persist status → act → record the trigger.
    async fn reconcile(&mut self) -> Decision {
        let obs = self.observe().await;
        let d = lifecycle::decide(&self.job.spec, &self.status, &obs);
        if d.status.lifecycle_state != self.status.lifecycle_state {
            self.log.push(format!(
                "{:?} → {:?}",
                self.status.lifecycle_state, d.status.lifecycle_state
            ));
        }
        for e in &d.events {
            self.log.push(format!("event {:?}: {}", e.reason, e.message));
        }
        self.status = d.status.clone();
        for a in d.actions.clone() {
            match a {
                Action::StopWithSavepoint { directory } => {
                    let c = self.control().expect("a stop needs a coordinator");
                    match c.trigger_savepoint(&SavepointRequest { directory, stop: true }).await {
                        Ok(id) => lifecycle::record_trigger(&mut self.status, id),
                        Err(e) => self.log.push(format!("stop request failed: {e}")),
                    }
                }
                Action::DeleteWorkloads => {
                    if let Some(mut d) = self.deployment.take() {
                        d.coordinator.kill9();
                        d.workers.iter_mut().for_each(Proc::kill9);
                    }
                }
                Action::Deploy {
                    spec,
                    restore_from,
                    deploy_generation,
                } => {
                    match &self.deployment {
                        // Server-side apply of the same generation: nothing changes.
                        Some(d) if d.generation == deploy_generation => {}
                        Some(d) => panic!(
                            "generation {deploy_generation} deployed while generation {} still runs",
                            d.generation
                        ),
                        None => self.start(&spec, restore_from.as_deref(), deploy_generation),
                    }
                }
                Action::RecordSavepoint { origin, path } => {
                    self.log.push(format!("record savepoint {origin:?} {path:?}"))
                }
                Action::DisposeSavepoint { path } => self
                    .snapshots
                    .dispose(&S3Options::default(), &path)
                    .await
                    .expect("dispose"),
                Action::RemoveFinalizer => {}
            }
        }
        d
    }

    /// "Applies" the children of a deployment: processes with the built containers' args.
    fn start(&mut self, spec: &weir_operator::crd::StreamJobSpec, restore_from: Option<&str>, generation: u64) {
        let defaults = build::RuntimeDefaults {
            image: "weir:e2e".into(),
            ..Default::default()
        };
        let target = Target {
            job: &self.job,
            spec,
            restore_from,
            deploy_generation: generation,
            spec_generation: self.job.metadata.generation.unwrap_or(1),
            defaults: &defaults,
        };
        let children = build::build(&target);
        let gdir = self.dir.join(format!("generation-{generation}"));
        std::fs::create_dir_all(&gdir).unwrap();
        let job_file = gdir.join(build::JOB_FILE_KEY);
        let data = children.config_map.data.as_ref().unwrap();
        std::fs::write(&job_file, &data[build::JOB_FILE_KEY]).unwrap();

        let api_addr = format!("127.0.0.1:{}", free_port());
        let rpc_addr = format!("127.0.0.1:{}", free_port());
        let c = container(&children.coordinator.spec.as_ref().unwrap().template.spec);
        let (sub, pairs) = arg_pairs(&c);
        assert_eq!(sub, "coordinator");
        let mut args = vec![sub];
        for (flag, value) in pairs {
            let value = match flag.as_str() {
                "--job" => {
                    assert_eq!(value, format!("{}/{}", build::CONFIG_DIR, build::JOB_FILE_KEY));
                    job_file.display().to_string()
                }
                "--listen" => api_addr.clone(),
                "--rpc-listen" => rpc_addr.clone(),
                "--restore" | "--run-id" => value,
                other => panic!("unexpected coordinator flag {other}"),
            };
            args.extend([flag, value]);
        }
        // The coordinator logs which restore point each attempt deployed from.
        let env = vec![(
            "WEIR_LOG".into(),
            "warn,weir_runtime::cluster::coordinator=info,weir_runtime::exec=info".into(),
        )];
        let coordinator = Proc::spawn(&self.bin, gdir.join("coordinator.log"), args, env);

        let sts = &children.workers.spec.as_ref().unwrap();
        let replicas = sts.replicas.unwrap();
        let w = container(&sts.template.spec);
        let (sub, pairs) = arg_pairs(&w);
        assert_eq!(sub, "worker");
        let mut workers = vec![];
        let mut worker_health = vec![];
        for i in 0..replicas {
            let health = format!("127.0.0.1:{}", free_port());
            let mut args = vec![sub.clone()];
            for (flag, value) in &pairs {
                let value = match flag.as_str() {
                    "--coordinator" => rpc_addr.clone(),
                    "--data-listen" => "127.0.0.1:0".into(),
                    // The pod IP; on one host the bound address is what peers reach.
                    "--advertise" => continue,
                    "--listen" => health.clone(),
                    "--slots" => value.clone(),
                    other => panic!("unexpected worker flag {other}"),
                };
                args.extend([flag.clone(), value]);
            }
            // A StatefulSet pod's hostname is its worker id.
            let env = vec![("HOSTNAME".to_string(), format!("wordcount-worker-{i}"))];
            workers.push(Proc::spawn(&self.bin, gdir.join(format!("worker-{i}.log")), args, env));
            worker_health.push(health);
        }
        self.started.push(generation);
        self.deployment = Some(Deployment {
            generation,
            coordinator,
            workers,
            worker_health,
            api: format!("http://{api_addr}"),
        });
    }

    /// Reconciles until `done` holds (every 250 ms; the operator's requeue intervals only
    /// space the passes out, the decisions are the same).
    async fn until(&mut self, what: &str, timeout: Duration, done: impl Fn(&Harness) -> bool) {
        let deadline = Instant::now() + timeout;
        loop {
            self.reconcile().await;
            if done(self) {
                return;
            }
            if Instant::now() > deadline {
                let logs = self
                    .deployment
                    .as_ref()
                    .map(|d| d.coordinator.text())
                    .unwrap_or_default();
                panic!(
                    "{what}: not reached within {timeout:?}\nstatus: {}\nlog:\n{}\ncoordinator:\n{logs}",
                    serde_json::to_string_pretty(&self.status).unwrap(),
                    self.log.join("\n")
                );
            }
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
    }

    fn job_state(&self) -> Option<String> {
        self.status.job_status.as_ref().map(|j| j.state.clone())
    }

    fn running(&self, generation: u64) -> bool {
        self.status.lifecycle_state == LifecycleState::Running
            && self.status.deploy_generation == generation
            && self.job_state().as_deref() == Some("RUNNING")
    }
}

fn wordcount(dir: &Path) -> StreamJob {
    let yaml = format!(
        r#"
apiVersion: weir.dev/v1alpha1
kind: StreamJob
metadata: {{name: wordcount, namespace: e2e, uid: e2e-uid, generation: 1}}
spec:
  image: weir:e2e
  parallelism: 2
  slotsPerWorker: 2
  upgradeMode: savepoint
  checkpointing: {{interval: 300ms, mode: exactly-once, storage: "{d}/checkpoints", retained: 2}}
  savepoints: {{directory: "{d}/savepoints"}}
  job:
    steps:
      - uid: lines
        source:
          file:
            path: "{text}/*.txt"
            maxRecordsPerSecond: {RATE}
      - map: {{expression: "{{'line': line.lower()}}"}}
      - flatMap: {{field: line, pattern: '\W+', as: word}}
      - keyBy: {{expression: word, as: word}}
      - uid: counts
        count: {{}}
      - uid: output
        sink: {{file: {{path: "{d}/output"}}}}
"#,
        d = dir.display(),
        text = text_dir().display(),
    );
    serde_yaml::from_str(&yaml).unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn savepoint_rescale_suspend_resume_and_restart_stay_exactly_once() {
    let bin = tokio::task::spawn_blocking(weir_bin).await.unwrap();
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().to_path_buf();
    let mut h = Harness {
        bin,
        dir: dir.clone(),
        job: wordcount(&dir),
        status: StreamJobStatus::default(),
        deployment: None,
        snapshots: ObjectStoreSnapshots,
        started: vec![],
        log: vec![],
    };
    let minute = Duration::from_secs(60);

    // 1. First deploy at parallelism 2: Created → Deploying → Running, with a checkpoint.
    h.until("first deploy running", minute, |h| {
        h.running(1)
            && h.status
                .job_status
                .as_ref()
                .is_some_and(|j| j.last_checkpoint.is_some())
    })
    .await;
    assert_eq!(h.status.deployed_from, None);
    let d = h.deployment.as_ref().unwrap();
    assert_eq!(d.workers.len(), 1, "ceil(2 / 2 slots)");
    // The workers' probe endpoint answers.
    for addr in &d.worker_health {
        let r = reqwest::get(format!("http://{addr}/healthz"))
            .await
            .expect("worker /healthz");
        assert!(r.status().is_success(), "worker /healthz: {}", r.status());
    }

    // 2. A manual savepoint, as the Savepoint controller takes it: trigger, poll, record.
    let control = h.control().unwrap();
    let id = control
        .trigger_savepoint(&SavepointRequest {
            directory: None,
            stop: false,
        })
        .await
        .expect("trigger savepoint");
    let deadline = Instant::now() + minute;
    let manual = loop {
        let s = control.savepoint(&id).await.expect("poll savepoint");
        match s.state {
            TriggerState::Completed => break s.path.unwrap(),
            TriggerState::Failed => panic!("savepoint failed: {:?}", s.error),
            TriggerState::InProgress => {}
        }
        assert!(Instant::now() < deadline, "savepoint did not complete");
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    assert!(manual.contains("savepoint-wordcount-"), "{manual}");
    let info = h
        .snapshots
        .inspect(&S3Options::default(), &manual)
        .await
        .expect("inspect the manual savepoint");
    assert!(info.operators.iter().any(|o| o.uid == "counts"), "{info:?}");

    // 3. Scale to 3: stop-with-savepoint → every old process gone → restore at p=3.
    h.edit(|s| s.parallelism = 3);
    h.until("rescaled to 3", minute, |h| h.running(2)).await;
    let upgrade_sp = h
        .status
        .deployed_from
        .clone()
        .expect("restored from the upgrade savepoint");
    assert!(upgrade_sp.contains("savepoint-wordcount-"), "{upgrade_sp}");
    assert_ne!(upgrade_sp, manual);
    assert_eq!(h.status.restore_point.as_ref().map(|r| &r.path), Some(&upgrade_sp));
    let status = h.control().unwrap().job().await.unwrap();
    assert_eq!(status.parallelism, 3);
    // (The distributed coordinator does not report `restoredFrom` yet: read its log.)
    let log = h.deployment.as_ref().unwrap().coordinator.text();
    assert!(
        log.contains(&format!("{upgrade_sp:?}")),
        "deployed from {upgrade_sp}: {log}"
    );
    assert_eq!(h.deployment.as_ref().unwrap().workers.len(), 2, "ceil(3 / 2 slots)");

    // 4. Suspend: stop-with-savepoint, no process left, the restore point kept.
    h.edit(|s| s.state = DesiredState::Suspended);
    h.until("suspended", minute, |h| {
        h.status.lifecycle_state == LifecycleState::Suspended
    })
    .await;
    assert!(h.deployment.is_none());
    let suspend_sp = h
        .status
        .restore_point
        .clone()
        .expect("suspend keeps a restore point")
        .path;
    assert!(
        suspend_sp.contains("savepoint-wordcount-") && suspend_sp != upgrade_sp,
        "{suspend_sp}"
    );

    // 5. Resume at parallelism 4 from the suspend savepoint.
    h.edit(|s| {
        s.state = DesiredState::Running;
        s.parallelism = 4;
    });
    h.until("resumed at 4", minute, |h| h.running(3)).await;
    assert_eq!(h.status.deployed_from.as_deref(), Some(suspend_sp.as_str()));
    let status = h.control().unwrap().job().await.unwrap();
    assert_eq!((status.parallelism, status.workers.len()), (4, 2));

    // 6. The coordinator container restarts (kill -9, same args and `--run-id`): it resumes from
    //    its run's newest checkpoint, not from `--restore`.
    let before = h.status.job_status.as_ref().and_then(|j| j.last_checkpoint.clone());
    h.until("a checkpoint of generation 3", minute, |h| {
        h.status
            .job_status
            .as_ref()
            .and_then(|j| j.last_checkpoint.as_ref())
            .map(|c| c.id)
            > before.as_ref().map(|c| c.id)
            && h.job_state().as_deref() == Some("RUNNING")
    })
    .await;
    {
        let d = h.deployment.as_mut().unwrap();
        assert!(d.coordinator.alive(), "coordinator exited: {}", d.coordinator.text());
        d.coordinator.kill9();
        let (args, env) = (d.coordinator.args.clone(), d.coordinator.env.clone());
        let log = d.coordinator.log.with_file_name("coordinator-restarted.log");
        d.coordinator = Proc::spawn(&h.bin, log, args, env);
    }
    let restarted = h.deployment.as_ref().unwrap().coordinator.log.clone();
    let deadline = Instant::now() + minute;
    while !std::fs::read_to_string(&restarted)
        .unwrap_or_default()
        .contains("resuming this run from its newest snapshot")
    {
        assert!(
            Instant::now() < deadline,
            "the restarted coordinator did not resume its run: {}",
            std::fs::read_to_string(&restarted).unwrap_or_default()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // 7. Let it finish; the operator keeps generation 3 deployed throughout.
    h.until("finished", Duration::from_secs(240), |h| {
        h.job_state().as_deref() == Some("FINISHED")
    })
    .await;
    assert_eq!(h.status.deploy_generation, 3);
    assert_eq!(h.started, vec![1, 2, 3], "one process set per deploy generation");
    drop(h);

    assert_same_multiset(
        &committed_output(&dir.join("output")),
        &expected_wordcount(),
        "word count through savepoint → rescale → suspend → resume → coordinator restart",
    );
}
