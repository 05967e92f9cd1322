//! Savepoint reconcile scenarios: trigger retries and completion, abandonment, and dispose on
//! delete.

use super::*;

fn savepoint_json(status: Option<Value>) -> Value {
    let mut s = json!({
        "apiVersion": "weir.dev/v1alpha1",
        "kind": "Savepoint",
        "metadata": {"name": "wc-manual", "namespace": "ns", "uid": "svp-uid", "resourceVersion": "3"},
        "spec": {"jobRef": {"name": "wc"}},
    });
    if let Some(st) = status {
        s["status"] = st;
    }
    s
}

fn svp_guard(v: Value) -> Arc<DeserializeGuard<Savepoint>> {
    Arc::new(serde_json::from_value(v).unwrap())
}

impl ApiServer {
    async fn get_job(&mut self, job: Value) {
        self.expect("GET", "/apis/weir.dev/v1alpha1/namespaces/ns/streamjobs/wc")
            .await
            .ok(job);
    }
    async fn savepoint_status(&mut self) -> Value {
        let r = self
            .expect(
                "PATCH",
                "/apis/weir.dev/v1alpha1/namespaces/ns/savepoints/wc-manual/status",
            )
            .await;
        r.assert_ssa();
        assert_eq!(r.body["kind"], "Savepoint");
        let st = r.body["status"].clone();
        r.ok(savepoint_json(Some(st.clone())));
        st
    }
}

#[tokio::test]
async fn savepoint_trigger_retry_and_completion() {
    let (ctx, mut api, control, _snaps) = setup();
    let job = running_job(spec_json(), 1);
    control.set_job(Some(job_status(JobState::Running, None)));
    control.refuse_next_triggers(vec![ControlError::Conflict("not all tasks running".into())]);

    // Attempt 1 is refused: Pending with one failure, retried after the backoff.
    let task = tokio::spawn(savepoint::reconcile(svp_guard(savepoint_json(None)), ctx.clone()));
    api.get_job(job.clone()).await;
    let st = api.savepoint_status().await;
    assert_eq!(
        (st["state"].as_str(), st["failures"].as_u64()),
        (Some("Pending"), Some(1))
    );
    assert!(st["error"].as_str().unwrap().contains("not all tasks running"));
    let r = api.expect("POST", "/apis/events.k8s.io/v1/namespaces/ns/events").await;
    assert_eq!(r.body["reason"], "SavepointError");
    assert_eq!(r.body["regarding"]["name"], "wc-manual");
    let b = r.body.clone();
    r.ok(b);
    assert_eq!(finish(task).await.unwrap(), Action::requeue(savepoint::backoff(1)));

    // Attempt 2 triggers (not a stop).
    let task = tokio::spawn(savepoint::reconcile(svp_guard(savepoint_json(Some(st))), ctx.clone()));
    api.get_job(job.clone()).await;
    let st = api.savepoint_status().await;
    assert_eq!(
        (st["state"].as_str(), st["triggerId"].as_str()),
        (Some("InProgress"), Some("t1"))
    );
    finish(task).await.unwrap();
    let reqs = control.requests();
    assert_eq!(reqs.len(), 2);
    assert!(!reqs[1].stop);
    assert_eq!(reqs[1].directory.as_deref(), Some("s3://bucket/svp"));

    // Still in progress: nothing written.
    let task = tokio::spawn(savepoint::reconcile(
        svp_guard(savepoint_json(Some(st.clone()))),
        ctx.clone(),
    ));
    api.get_job(job.clone()).await;
    finish(task).await.unwrap();

    // Completed.
    control.set_trigger(SavepointStatus {
        trigger_id: "t1".into(),
        state: TriggerState::Completed,
        path: Some("s3://bucket/svp/savepoint-wc-8".into()),
        checkpoint_id: Some(8),
        error: None,
    });
    let task = tokio::spawn(savepoint::reconcile(svp_guard(savepoint_json(Some(st))), ctx.clone()));
    api.get_job(job.clone()).await;
    let st = api.savepoint_status().await;
    assert_eq!(st["state"], "Completed");
    assert_eq!(st["path"], "s3://bucket/svp/savepoint-wc-8");
    assert_eq!(st["completedAt"], "2023-11-14T22:13:20Z");
    let r = api.expect("POST", "/apis/events.k8s.io/v1/namespaces/ns/events").await;
    assert_eq!(
        (r.body["type"].as_str(), r.body["reason"].as_str()),
        (Some("Normal"), Some("SavepointCompleted"))
    );
    let b = r.body.clone();
    r.ok(b);
    assert_eq!(finish(task).await.unwrap(), Action::await_change());
}

#[tokio::test]
async fn savepoint_abandoned_when_job_suspended() {
    let (ctx, mut api, _control, _snaps) = setup();
    let mut job = running_job(spec_json(), 1);
    job["status"]["lifecycleState"] = json!("Suspended");
    let task = tokio::spawn(savepoint::reconcile(svp_guard(savepoint_json(None)), ctx));
    api.get_job(job).await;
    let st = api.savepoint_status().await;
    assert_eq!(st["state"], "Abandoned");
    let r = api.expect("POST", "/apis/events.k8s.io/v1/namespaces/ns/events").await;
    let b = r.body.clone();
    r.ok(b);
    finish(task).await.unwrap();
}

#[tokio::test]
async fn savepoint_dispose_on_delete_spares_the_restore_point() {
    for (restore, disposed) in [(SVP, false), ("s3://bucket/svp/savepoint-wc-9", true)] {
        let (ctx, mut api, _control, snaps) = setup();
        let mut sp = savepoint_json(Some(json!({"state": "Completed", "path": SVP})));
        sp["spec"]["disposeOnDelete"] = json!(true);
        sp["metadata"]["finalizers"] = json!(["weir.dev/finalizer"]);
        sp["metadata"]["deletionTimestamp"] = json!("2023-11-14T22:13:20Z");
        let mut job = running_job(spec_json(), 1);
        job["status"]["restorePoint"] = json!({"path": restore, "origin": "UpgradeSavepoint"});
        let task = tokio::spawn(savepoint::reconcile(svp_guard(sp), ctx));
        api.get_job(job).await;
        let r = api.expect("POST", "/apis/events.k8s.io/v1/namespaces/ns/events").await;
        assert_eq!(r.body["reason"], "Cleanup");
        assert_eq!(r.body["type"], if disposed { "Normal" } else { "Warning" });
        let b = r.body.clone();
        r.ok(b);
        let r = api
            .expect("PATCH", "/apis/weir.dev/v1alpha1/namespaces/ns/savepoints/wc-manual")
            .await;
        assert_eq!(r.body, json!({"metadata": {"finalizers": [], "resourceVersion": "3"}}));
        r.ok(savepoint_json(None));
        finish(task).await.unwrap();
        assert_eq!(snaps.disposed(), if disposed { vec![SVP.to_string()] } else { vec![] });
    }
}
