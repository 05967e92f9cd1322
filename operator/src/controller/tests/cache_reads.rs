//! Defect 15: a StreamJob pass reads its children, pods and Savepoints from the watch caches,
//! not the API server; writes still go to the API server with resourceVersion preconditions.

use super::mock::World;
use super::*;

/// Answers every request of the pass `task` until it ends (status writes with the job at the
/// next resourceVersion, the StreamJob precondition read with the job, anything else with its
/// body); returns the requests (`METHOD path`) and the bodies by path.
async fn serve_until_done(
    api: &mut mock::ApiServer,
    mut task: tokio::task::JoinHandle<Result<Action, Error>>,
) -> (Vec<String>, Vec<(String, Value)>) {
    let mut requests = vec![];
    let mut bodies = vec![];
    loop {
        tokio::select! {
            biased;
            done = &mut task => {
                done.unwrap().unwrap();
                return (requests, bodies);
            }
            r = api.next() => {
                requests.push(format!("{} {}", r.method, r.path));
                bodies.push((r.path.clone(), r.body.clone()));
                if r.path.ends_with("/streamjobs/wc/status") {
                    let mut obj = job_json(&json!({"resourceVersion": "11"}));
                    obj["status"] = r.body["status"].clone();
                    r.ok(obj);
                } else if r.method == "GET" && r.path.ends_with("/secrets/wc-job-secret") {
                    r.not_found();
                } else if r.method == "GET" {
                    r.ok(job_json(&json!({})));
                } else if r.method == "DELETE" {
                    r.ok(json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Success"}));
                } else {
                    r.echo();
                }
            }
        }
    }
}

/// A steady pass of a running job with a periodic Savepoint: every request it makes is a
/// write (or the resourceVersion precondition read of the StreamJob itself); none reads a
/// child, a pod or a Savepoint.
#[tokio::test]
async fn a_pass_reads_children_pods_and_savepoints_from_the_caches() {
    let (ctx, mut api, control, _snaps) = setup();
    control.set_job(Some(job_status(
        JobState::Running,
        Some((5, SnapshotKind::Checkpoint, "s3://bucket/chk/wc/chk-5")),
    )));
    let job = running_job(spec_json(), 1);
    let task = tokio::spawn(stream_job::reconcile(guard(job), ctx));
    let mut world = World::deployed(1);
    world.savepoints = vec![json!({
        "apiVersion": "weir.dev/v1alpha1", "kind": "Savepoint",
        "metadata": {"name": "wc-periodic-7", "namespace": "ns", "creationTimestamp": "2023-11-14T22:00:00Z"},
        "spec": {"jobRef": {"name": "wc"}, "origin": "Periodic"},
        "status": {"state": "Completed", "path": SVP, "completedAt": "2023-11-14T22:00:05Z"},
    })];
    api.observe(world).await;
    let (requests, bodies) = serve_until_done(&mut api, task).await;
    let history = bodies.iter().rev().find_map(|(path, body)| {
        path.ends_with("/streamjobs/wc/status")
            .then(|| body["status"]["savepointHistory"].clone())
    });
    let reads: Vec<&String> = requests
        .iter()
        // The job Secret is no cached object: it is read (get, never list/watch) when deploying.
        .filter(|r| r.starts_with("GET") && !r.ends_with("/streamjobs/wc") && !r.ends_with("/secrets/wc-job-secret"))
        .collect();
    assert!(
        reads.is_empty(),
        "reads that the caches answer: {reads:?} (all requests: {requests:?})"
    );
    // The cached Savepoint was seen: it is folded into the history.
    let history = history.expect("the new history is written");

    assert_eq!(history[0]["path"], SVP, "{history}");
    assert_eq!(history[0]["savepointName"], "wc-periodic-7");
}

/// When the cached coordinator still shows an older deploy generation (the watch event of the
/// apply has not arrived), the pass re-applies and then deletes the job's children under other
/// names from the cache, never the children it just applied.
#[tokio::test]
async fn orphans_come_from_the_cache_and_never_the_children_just_applied() {
    let (ctx, mut api, control, _snaps) = setup();
    control.set_job(Some(job_status(
        JobState::Running,
        Some((5, SnapshotKind::Checkpoint, "s3://bucket/chk/wc/chk-5")),
    )));
    let task = tokio::spawn(stream_job::reconcile(guard(running_job(spec_json(), 1)), ctx));
    let meta = |name: &str| {
        json!({"name": name, "namespace": "ns",
               "labels": {"weir.dev/job": "wc", "weir.dev/deployment-generation": "0"}})
    };
    api.observe(World {
        deployment: Some(json!({"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta("wc-coordinator")})),
        statefulset: Some(json!({"apiVersion": "apps/v1", "kind": "StatefulSet", "metadata": meta("wc-old-workers")})),
        pods: 2,
        savepoints: vec![],
    })
    .await;
    let (requests, _) = serve_until_done(&mut api, task).await;
    assert!(
        requests.contains(&"PATCH /apis/apps/v1/namespaces/ns/deployments/wc-coordinator".to_string()),
        "{requests:?}"
    );
    let deletes: Vec<&String> = requests.iter().filter(|r| r.starts_with("DELETE")).collect();
    assert_eq!(
        deletes,
        ["DELETE /apis/apps/v1/namespaces/ns/statefulsets/wc-old-workers"],
        "{requests:?}"
    );
}
