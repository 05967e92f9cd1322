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
    api.cached_jobs(vec![job.clone()]);
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
    api.cached_jobs(vec![job.clone()]);
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
    api.cached_jobs(vec![job.clone()]);
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
    api.cached_jobs(vec![job.clone()]);
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
    api.cached_jobs(vec![job]);
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

/// The S3 settings a completed savepoint recorded (a MinIO endpoint and a credentials Secret).
fn recorded_s3() -> Value {
    json!({"endpoint": "http://minio.ns:9000", "region": "eu-1", "pathStyle": true,
           "credentialsSecret": {"name": "creds"}})
}

/// A deleted `disposeOnDelete` Savepoint whose data is at `SVP`, completed with `recorded_s3`,
/// deleted at `deleted_at` (seconds after the epoch).
fn deleted_savepoint(deleted_at: u64) -> Value {
    let mut sp = savepoint_json(Some(json!({"state": "Completed", "path": SVP, "s3": recorded_s3()})));
    sp["spec"]["disposeOnDelete"] = json!(true);
    sp["metadata"]["finalizers"] = json!(["weir.dev/finalizer"]);
    let t = humantime::format_rfc3339_seconds(UNIX_EPOCH + Duration::from_secs(deleted_at)).to_string();
    sp["metadata"]["deletionTimestamp"] = json!(t);
    sp
}

impl ApiServer {
    async fn job_gone(&mut self) {
        self.expect("GET", "/apis/weir.dev/v1alpha1/namespaces/ns/streamjobs/wc")
            .await
            .not_found();
    }
    /// The credentials Secret read: present (with keys) or gone.
    async fn secret(&mut self, present: bool) {
        let r = self.expect("GET", "/api/v1/namespaces/ns/secrets/creds").await;
        if present {
            r.ok(
                json!({"apiVersion": "v1", "kind": "Secret", "metadata": {"name": "creds", "namespace": "ns"},
                        "data": {"accessKeyId": "QUtJQQ==", "secretAccessKey": "c2ho"}}),
            );
        } else {
            r.not_found();
        }
    }
    async fn finalizer_removed(&mut self) {
        let r = self
            .expect("PATCH", "/apis/weir.dev/v1alpha1/namespaces/ns/savepoints/wc-manual")
            .await;
        assert_eq!(r.body, json!({"metadata": {"finalizers": [], "resourceVersion": "3"}}));
        r.ok(savepoint_json(None));
    }
    /// An event on the Savepoint; returns (type, reason, note).
    async fn savepoint_event(&mut self) -> (String, String, String) {
        let r = self.expect("POST", "/apis/events.k8s.io/v1/namespaces/ns/events").await;
        assert_eq!(r.body["regarding"]["name"], "wc-manual");
        let got = (
            r.body["type"].as_str().unwrap_or_default().to_string(),
            r.body["reason"].as_str().unwrap_or_default().to_string(),
            r.body["note"].as_str().unwrap_or_default().to_string(),
        );
        let b = r.body.clone();
        r.ok(b);
        got
    }
}

/// Defect 7: the StreamJob is deleted first; the Savepoint's disposal uses the S3 endpoint,
/// region, path style and credentials Secret recorded at completion, not default settings.
#[tokio::test]
async fn disposal_after_the_job_is_gone_uses_the_recorded_storage_settings() {
    let (ctx, mut api, _control, snaps) = setup();
    let task = tokio::spawn(savepoint::reconcile(svp_guard(deleted_savepoint(NOW)), ctx));
    api.job_gone().await;
    api.secret(true).await;
    let (type_, reason, note) = api.savepoint_event().await;
    assert_eq!((type_.as_str(), reason.as_str()), ("Normal", "Cleanup"), "{note}");
    api.finalizer_removed().await;
    finish(task).await.unwrap();
    let calls = snaps.disposed_with();
    assert_eq!(calls.len(), 1);
    let (path, s3) = &calls[0];
    assert_eq!(path, SVP);
    assert_eq!(
        (s3.endpoint.as_deref(), s3.region.as_deref(), s3.path_style),
        (Some("http://minio.ns:9000"), Some("eu-1"), true)
    );
    let c = s3.credentials.as_ref().expect("credentials from the recorded Secret");
    assert_eq!(
        (c.access_key_id.as_str(), c.secret_access_key.as_str()),
        ("AKIA", "shh")
    );
}

/// Defect 7: the credentials Secret is gone (permanent): a Warning names the path left behind
/// and what to do, and the finalizer is removed (a namespace deletion never hangs).
#[tokio::test]
async fn disposal_gives_up_and_releases_when_the_secret_is_gone() {
    let (ctx, mut api, _control, snaps) = setup();
    let task = tokio::spawn(savepoint::reconcile(svp_guard(deleted_savepoint(NOW)), ctx));
    api.job_gone().await;
    api.secret(false).await;
    let (type_, reason, note) = api.savepoint_event().await;
    assert_eq!(
        (type_.as_str(), reason.as_str()),
        ("Warning", "DisposeFailed"),
        "{note}"
    );
    assert!(note.contains(SVP) && note.contains("delete it by hand"), "{note}");
    assert!(note.contains("Secret creds not found"), "{note}");
    api.finalizer_removed().await;
    assert_eq!(finish(task).await.unwrap(), Action::await_change());
    assert!(snaps.disposed_with().is_empty(), "no attempt without credentials");
}

/// Defect 7: a transient failure keeps the finalizer and is retried with the object's backoff;
/// a permanent one (access denied) and a transient one past the limit give up and release.
#[tokio::test]
async fn disposal_retries_transient_failures_then_gives_up() {
    use crate::lifecycle::disposal::{DISPOSE_GIVE_UP_AFTER, DisposeFailure};
    // Early transient failure: an error (Warning StorageError), the finalizer stays, backoff.
    let (ctx, mut api, _control, snaps) = setup();
    snaps.fail_disposes(Some("dispatch failure: Connection refused"));
    let obj = svp_guard(deleted_savepoint(NOW - 10));
    let task = tokio::spawn(savepoint::reconcile(obj.clone(), ctx.clone()));
    api.job_gone().await;
    api.secret(true).await;
    let (type_, reason, note) = api.savepoint_event().await;
    assert_eq!((type_.as_str(), reason.as_str()), ("Warning", "StorageError"), "{note}");
    let err = finish(task).await.unwrap_err();
    assert_eq!(
        savepoint::error_policy(obj.clone(), &err, ctx.clone()),
        Action::requeue(savepoint::backoff(1))
    );
    assert_eq!(
        savepoint::error_policy(obj, &err, ctx),
        Action::requeue(savepoint::backoff(2)),
        "per-object backoff grows"
    );

    // Past the limit, and a permanent failure at once: give up, release.
    for (failure, deleted_at) in [
        (
            DisposeFailure::Transient("Connection refused".into()),
            NOW - DISPOSE_GIVE_UP_AFTER.as_secs(),
        ),
        (DisposeFailure::Permanent("AccessDenied".into()), NOW),
    ] {
        let (ctx, mut api, _control, snaps) = setup();
        snaps.fail_disposes_with(Some(failure.clone()));
        let task = tokio::spawn(savepoint::reconcile(svp_guard(deleted_savepoint(deleted_at)), ctx));
        api.job_gone().await;
        api.secret(true).await;
        let (type_, reason, note) = api.savepoint_event().await;
        assert_eq!(
            (type_.as_str(), reason.as_str()),
            ("Warning", "DisposeFailed"),
            "{failure:?}: {note}"
        );
        assert!(note.contains(SVP), "{note}");
        api.finalizer_removed().await;
        finish(task).await.unwrap();
    }
}

/// A completed savepoint records the deployed spec's S3 settings (never the credentials).
#[tokio::test]
async fn completion_records_the_storage_settings() {
    let (ctx, mut api, control, _snaps) = setup();
    let mut job = running_job(spec_json(), 1);
    let mut deployed: Value = serde_json::from_str(job["status"]["lastReconciledSpec"].as_str().unwrap()).unwrap();
    deployed["s3"] = recorded_s3();
    job["status"]["lastReconciledSpec"] = json!(deployed.to_string());
    control.set_job(Some(job_status(JobState::Running, None)));
    control.set_trigger(SavepointStatus {
        trigger_id: "t1".into(),
        state: TriggerState::Completed,
        path: Some(SVP.into()),
        checkpoint_id: Some(7),
        error: None,
    });
    let sp = savepoint_json(Some(json!({"state": "InProgress", "triggerId": "t1"})));
    let task = tokio::spawn(savepoint::reconcile(svp_guard(sp), ctx));
    api.cached_jobs(vec![job]);
    let st = api.savepoint_status().await;
    assert_eq!(st["state"], "Completed");
    assert_eq!(st["s3"], recorded_s3());
    api.savepoint_event().await;
    finish(task).await.unwrap();
}
