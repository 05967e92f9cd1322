//! StreamJob reconcile scenarios: first deploy, savepoint upgrade, refused restore, suspend and
//! resume, deletion, and an invalid object.

use super::mock::World;
use super::*;

#[tokio::test]
async fn first_deploy() {
    let (ctx, mut api, _control, _snaps) = setup();
    let mut job = job_json(&json!({}));
    job["metadata"].as_object_mut().unwrap().remove("finalizers");
    let task = tokio::spawn(stream_job::reconcile(guard(job), ctx));

    // The finalizer first, guarded by resourceVersion.
    let r = api
        .expect("PATCH", "/apis/weir.dev/v1alpha1/namespaces/ns/streamjobs/wc")
        .await;
    assert_eq!(
        r.body,
        json!({"metadata": {"finalizers": ["weir.dev/finalizer"], "resourceVersion": "10"}})
    );
    r.ok(job_json(&json!({})));
    api.observe(World::empty()).await;
    // Intent before action: status says Deploying generation 1 before anything is applied.
    let status = api.status().await;
    assert_eq!(status["lifecycleState"], "Deploying");
    assert_eq!(status["deployGeneration"], 1);
    assert_eq!(status["observedGeneration"], 1);
    assert_eq!(status["selector"], super::worker_selector("wc"));
    let ready = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Progressing")
        .unwrap();
    assert_eq!(
        (ready["status"].as_str(), ready["reason"].as_str()),
        (Some("True"), Some("Deploying"))
    );
    api.event("Normal", "Submit", 200).await;
    // The job Secret before the pods that mount it: a new token for generation 1, owned by the job.
    let secret = api.new_job_secret().await;
    assert_eq!(secret["metadata"]["labels"]["weir.dev/deployment-generation"], "1");
    assert_eq!(secret["metadata"]["ownerReferences"][0]["uid"], "uid-1");
    assert!(
        secret["data"]["job.secret"].as_str().is_some_and(|t| !t.is_empty()),
        "{secret}"
    );
    let (deployment, sts) = api.apply_workloads().await;
    let args = &deployment["spec"]["template"]["spec"]["containers"][0]["args"];
    assert_eq!(args[3], "--restore");
    assert_eq!(args[4], "none");
    assert_eq!(deployment["metadata"]["labels"]["weir.dev/deployment-generation"], "1");
    assert_eq!(deployment["metadata"]["annotations"]["weir.dev/spec-generation"], "1");
    assert_eq!(deployment["metadata"]["ownerReferences"][0]["uid"], "uid-1");
    assert_eq!(sts["spec"]["replicas"], 2);
    let action = finish(task).await.unwrap();
    assert_eq!(action, Action::requeue(crate::lifecycle::POLL));
}

/// A StreamJob whose checkpoint directory another StreamJob of the same name (another
/// namespace) owns is never deployed: it fails with the owner's name in its status and a
/// Warning, and applies nothing.
#[tokio::test]
async fn a_first_deploy_into_another_stream_jobs_checkpoint_directory_fails_without_deploying() {
    let (ctx, mut api, _control, snaps) = setup();
    snaps.set_owner("wc", "team-a/wc");
    let task = tokio::spawn(stream_job::reconcile(guard(job_json(&json!({}))), ctx));
    api.observe(World::empty()).await;
    let status = api.status().await;
    assert_eq!(status["lifecycleState"], "Failed", "{status}");
    assert!(
        status["error"]
            .as_str()
            .is_some_and(|e| e.contains("StreamJob team-a/wc")),
        "{status}"
    );
    api.event("Warning", "ValidationError", 200).await;
    finish(task).await.unwrap();
}

/// A disk-backend job whose worker pods' stores are configured for more than three quarters
/// of the worker container's memory limit gets a `DiskStateOverMemory` Warning when it is
/// deployed, after its workloads are applied, naming the field and both sizes.
#[tokio::test]
async fn a_deploy_warns_when_disk_stores_outgrow_the_worker_memory() {
    let (ctx, mut api, _control, _snaps) = setup();
    let mut job = job_json(&json!({}));
    job["spec"]["stateBackend"] = json!("disk");
    job["spec"]["slotsPerWorker"] = json!(2);
    job["spec"]["worker"] = json!({"resources": {"limits": {"memory": "200Mi"}}});
    let task = tokio::spawn(stream_job::reconcile(guard(job), ctx));
    api.observe(World::empty()).await;
    assert_eq!(api.status().await["lifecycleState"], "Deploying");
    api.event("Normal", "Submit", 200).await;
    api.new_job_secret().await;
    let (_, sts) = api.apply_workloads().await;
    assert_eq!(
        sts["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["memory"],
        "200Mi"
    );
    let event = api.event("Warning", "DiskStateOverMemory", 200).await;
    let note = event["note"].as_str().unwrap_or_default();
    for part in [
        "spec.diskState",
        "2 disk stores of each worker pod",
        "192.0 MiB",
        "200.0 MiB",
    ] {
        assert!(note.contains(part), "{part}: {event}");
    }
    finish(task).await.unwrap();
}

#[tokio::test]
async fn savepoint_upgrade() {
    let (ctx, mut api, control, snaps) = setup();
    let mut spec = spec_json();
    spec["image"] = json!("weir:2");
    let job = running_job(spec.clone(), 2);
    control.set_job(Some(job_status(
        JobState::Running,
        Some((5, SnapshotKind::Checkpoint, "s3://bucket/chk/wc/chk-5")),
    )));

    // Pass 1: record the upgrade, then stop with a savepoint and record the trigger id.
    let task = tokio::spawn(stream_job::reconcile(guard(job.clone()), ctx.clone()));
    api.observe(World::deployed(1)).await;
    let status = api.status().await;
    assert_eq!(status["lifecycleState"], "Upgrading");
    assert_eq!(status["pending"]["kind"], "Upgrade");
    assert_eq!(status["pending"]["phase"], "AwaitingStop");
    assert!(
        status["pending"]["triggerId"].is_null(),
        "the trigger id is written after the request"
    );
    api.event("Normal", "SpecChanged", 200).await;
    let status = api.status().await;
    assert_eq!(status["pending"]["triggerId"], "t1");
    finish(task).await.unwrap();
    assert_eq!(control.requests().len(), 1);
    assert!(control.requests()[0].stop);
    assert_eq!(control.requests()[0].directory.as_deref(), Some("s3://bucket/svp"));

    // Pass 2: the savepoint completed and the job stopped: restore point recorded, the
    // savepoint recorded as a Savepoint object, workloads deleted.
    control.set_trigger(SavepointStatus {
        trigger_id: "t1".into(),
        state: TriggerState::Completed,
        path: Some(SVP.into()),
        checkpoint_id: Some(7),
        error: None,
    });
    control.set_job(Some(job_status(
        JobState::Stopped,
        Some((7, SnapshotKind::Savepoint, SVP)),
    )));
    let job = with_status(job, &status);
    let task = tokio::spawn(stream_job::reconcile(guard(job.clone()), ctx.clone()));
    api.observe(World::deployed(1)).await;
    let status = api.status().await;
    assert_eq!(status["restorePoint"]["path"], SVP);
    assert_eq!(status["restorePoint"]["origin"], "UpgradeSavepoint");
    assert_eq!(status["pending"]["phase"], "AwaitingTermination");
    let ev = api.event("Normal", "JobStatusChanged", 200).await;
    assert_eq!(ev["note"], "job state RUNNING → STOPPED");
    let r = api
        .expect("PATCH", "/apis/weir.dev/v1alpha1/namespaces/ns/savepoints/wc-upgrade-7")
        .await;
    r.assert_ssa();
    assert_eq!(
        r.body["spec"],
        json!({"jobRef": {"name": "wc"}, "origin": "Upgrade", "disposeOnDelete": false})
    );
    assert_eq!(r.body["metadata"]["ownerReferences"][0]["kind"], "StreamJob");
    r.echo();
    let r = api
        .expect(
            "PATCH",
            "/apis/weir.dev/v1alpha1/namespaces/ns/savepoints/wc-upgrade-7/status",
        )
        .await;
    r.assert_ssa();
    assert_eq!(r.body["status"]["state"], "Completed");
    assert_eq!(r.body["status"]["path"], SVP);
    let mut sp = r.body.clone();
    sp["metadata"] = json!({"name": "wc-upgrade-7", "namespace": "ns"});
    sp["spec"] = json!({"jobRef": {"name": "wc"}, "origin": "Upgrade"});
    r.ok(sp.clone());
    api.delete_workloads().await;
    finish(task).await.unwrap();

    // Pass 3: pods still terminating: delete again and wait (never two generations at once).
    let job = with_status(job, &status);
    control.set_job(None);
    let task = tokio::spawn(stream_job::reconcile(guard(job.clone()), ctx.clone()));
    api.observe(World {
        pods: 1,
        ..World::empty()
    })
    .await;
    let status = api.status().await;
    assert_eq!(status["jobStatus"]["state"], "UNKNOWN", "the coordinator is gone");
    assert_eq!(status["pending"]["phase"], "AwaitingTermination");
    api.delete_workloads().await;
    finish(task).await.unwrap();

    // Pass 4: every pod gone: move to Deploying (the restore point is inspected next pass).
    let job = with_status(job, &status);
    let task = tokio::spawn(stream_job::reconcile(guard(job.clone()), ctx.clone()));
    api.observe(World {
        savepoints: vec![sp.clone()],
        ..World::empty()
    })
    .await;
    let status = api.status().await;
    assert_eq!(status["pending"]["phase"], "Deploying");
    assert_eq!(status["savepointHistory"][0]["savepointName"], "wc-upgrade-7");
    finish(task).await.unwrap();

    // Pass 5: the restore point holds state only for uids the new job has: deploy from it.
    snaps.set_info(SVP, info(&["counts"]));
    let job = with_status(job, &status);
    let task = tokio::spawn(stream_job::reconcile(guard(job), ctx.clone()));
    api.observe(World {
        savepoints: vec![sp],
        ..World::empty()
    })
    .await;
    let status = api.status().await;
    assert_eq!(status["lifecycleState"], "Deploying");
    assert_eq!(status["deployGeneration"], 2);
    assert_eq!(status["deployedFrom"], SVP);
    assert!(status["pending"].is_null());
    api.event("Normal", "Submit", 200).await;
    let (deployment, _) = api.apply_children().await;
    let args = &deployment["spec"]["template"]["spec"]["containers"][0];
    assert_eq!(args["args"][4], SVP);
    assert_eq!(args["image"], "weir:2");
    assert_eq!(deployment["metadata"]["labels"]["weir.dev/deployment-generation"], "2");
    assert_eq!(deployment["metadata"]["annotations"]["weir.dev/spec-generation"], "2");
    finish(task).await.unwrap();
}

/// A coordinator whose control API does not answer (a timeout on a loaded machine) is not a
/// stopped job: the savepoint upgrade waits for it instead of deleting the pods and restoring
/// the checkpoint (CI's stand-in saw a rescale deployed from chk-81 instead of its savepoint).
#[tokio::test]
async fn a_savepoint_upgrade_waits_for_a_coordinator_that_does_not_answer() {
    let (ctx, mut api, control, _snaps) = setup();
    let mut spec = spec_json();
    spec["image"] = json!("weir:2");
    let job = running_job(spec.clone(), 2);
    control.set_job(None);

    let task = tokio::spawn(stream_job::reconcile(guard(job.clone()), ctx.clone()));
    api.observe(World::deployed(1)).await;
    let status = api.status().await;
    assert_eq!(status["lifecycleState"], "Upgrading");
    assert_eq!(status["pending"]["phase"], "Stopping");
    api.event("Normal", "SpecChanged", 200).await;
    finish(task).await.unwrap();
    assert!(
        control.requests().is_empty(),
        "no stop was sent to a coordinator that did not answer"
    );

    // It answers RUNNING: the stop-with-savepoint goes out.
    control.set_job(Some(job_status(
        JobState::Running,
        Some((5, SnapshotKind::Checkpoint, "s3://bucket/chk/wc/chk-5")),
    )));
    let job = with_status(job, &status);
    let task = tokio::spawn(stream_job::reconcile(guard(job), ctx.clone()));
    api.observe(World::deployed(1)).await;
    let status = api.status().await;
    assert_eq!(status["pending"]["phase"], "AwaitingStop");
    api.event("Normal", "JobStatusChanged", 200).await;
    assert_eq!(api.status().await["pending"]["triggerId"], "t1");
    finish(task).await.unwrap();
    assert_eq!(control.requests().len(), 1);
    assert!(control.requests()[0].stop);
}

#[tokio::test]
async fn upgrade_refused_when_state_would_be_dropped() {
    let (ctx, mut api, _control, snaps) = setup();
    let job = running_job(spec_json(), 2);
    let deployed = job["status"]["lastReconciledSpec"].clone();
    let mut j = job.clone();
    j["status"] = json!({
        "lifecycleState": "Upgrading",
        "deployGeneration": 1,
        "lastReconciledSpec": deployed,
        "restorePoint": {"path": SVP, "origin": "UpgradeSavepoint", "checkpointId": 7},
        "pending": {"kind": "Upgrade", "mode": "savepoint", "targetSpec": deployed, "targetGeneration": 2,
                    "phase": "Deploying", "startedAt": "2023-11-14T22:13:00Z", "savepointPath": SVP},
    });
    snaps.set_info(SVP, info(&["counts", "dedup"]));
    let task = tokio::spawn(stream_job::reconcile(guard(j), ctx));
    api.observe(World::empty()).await;
    let status = api.status().await;
    assert_eq!(status["lifecycleState"], "Failed");
    assert!(
        status["error"].as_str().unwrap().contains("dedup"),
        "{}",
        status["error"]
    );
    assert_eq!(status["restorePoint"]["path"], SVP, "the restore point is kept");
    let degraded = status["conditions"]
        .as_array()
        .unwrap()
        .iter()
        .find(|c| c["type"] == "Degraded")
        .unwrap();
    assert_eq!(degraded["status"], "True");
    api.event("Warning", "ValidationError", 200).await;
    finish(task).await.unwrap();
}

#[tokio::test]
async fn suspend_then_resume() {
    let (ctx, mut api, control, snaps) = setup();
    let mut spec = spec_json();
    spec["state"] = json!("suspended");
    let job = running_job(spec.clone(), 2);
    control.set_job(Some(job_status(JobState::Running, None)));
    control.complete_triggers_as(SVP, 7);

    // Pass 1: suspend = stop with a savepoint.
    let task = tokio::spawn(stream_job::reconcile(guard(job.clone()), ctx.clone()));
    api.observe(World::deployed(1)).await;
    let status = api.status().await;
    assert_eq!(status["pending"]["kind"], "Suspend");
    api.event("Normal", "SpecChanged", 200).await;
    let status = api.status().await;
    finish(task).await.unwrap();

    // Pass 2: savepoint done; delete workloads.
    control.set_job(Some(job_status(
        JobState::Stopped,
        Some((7, SnapshotKind::Savepoint, SVP)),
    )));
    let job = with_status(job, &status);
    let task = tokio::spawn(stream_job::reconcile(guard(job.clone()), ctx.clone()));
    api.observe(World::deployed(1)).await;
    let status = api.status().await;
    api.event("Normal", "JobStatusChanged", 200).await;
    api.expect("PATCH", "/apis/weir.dev/v1alpha1/namespaces/ns/savepoints/wc-upgrade-7")
        .await
        .echo();
    let r = api
        .expect(
            "PATCH",
            "/apis/weir.dev/v1alpha1/namespaces/ns/savepoints/wc-upgrade-7/status",
        )
        .await;
    let mut sp = r.body.clone();
    sp["metadata"] = json!({"name": "wc-upgrade-7", "namespace": "ns"});
    sp["spec"] = json!({"jobRef": {"name": "wc"}, "origin": "Upgrade"});
    r.ok(sp);
    api.delete_workloads().await;
    finish(task).await.unwrap();

    // Pass 3: pods gone: Suspended, restore point kept.
    let job = with_status(job, &status);
    control.set_job(None);
    let task = tokio::spawn(stream_job::reconcile(guard(job.clone()), ctx.clone()));
    api.observe(World::empty()).await;
    let status = api.status().await;
    assert_eq!(status["lifecycleState"], "Suspended");
    assert_eq!(status["restorePoint"]["path"], SVP);
    assert!(status["pending"].is_null());
    assert_eq!(status["parallelism"], 0);
    api.event("Normal", "Suspended", 200).await;
    finish(task).await.unwrap();

    // Resume, pass 1: the intent (deploy from the restore point) is recorded; the restore
    // point is inspected before anything is deployed.
    let mut job = with_status(job, &status);
    job["spec"]["state"] = json!("running");
    job["metadata"]["generation"] = json!(3);
    let task = tokio::spawn(stream_job::reconcile(guard(job.clone()), ctx.clone()));
    api.observe(World::empty()).await;
    let status = api.status().await;
    assert_eq!(status["lifecycleState"], "Upgrading");
    assert_eq!(status["pending"]["phase"], "Deploying");
    api.event("Normal", "SpecChanged", 200).await;
    finish(task).await.unwrap();

    // Resume, pass 2: deploy from the savepoint.
    snaps.set_info(SVP, info(&["counts"]));
    let job = with_status(job, &status);
    let task = tokio::spawn(stream_job::reconcile(guard(job), ctx.clone()));
    api.observe(World::empty()).await;
    let status = api.status().await;
    assert_eq!(status["deployGeneration"], 2);
    api.event("Normal", "Submit", 200).await;
    let (deployment, _) = api.apply_children().await;
    assert_eq!(deployment["spec"]["template"]["spec"]["containers"][0]["args"][4], SVP);
    assert_eq!(deployment["metadata"]["annotations"]["weir.dev/spec-generation"], "3");
    finish(task).await.unwrap();
}

/// A StreamJob deleted during its first deploy, whose storage cannot be claimed (a missing
/// bucket, unreachable S3), is still deleted: a deleting object claims nothing.
#[tokio::test]
async fn a_job_deleted_while_its_storage_cannot_be_claimed_is_deleted() {
    let (ctx, mut api, _control, snaps) = setup();
    snaps.fail_claims(Some("s3://weir/checkpoints/wc/_owner: S3 GetObject failed: timed out"));
    let mut job = job_json(&json!({}));
    job["status"] = json!({
        "lifecycleState": "Deploying",
        "pending": {"kind": "Upgrade", "mode": "savepoint", "targetSpec": serde_json::to_string(&job["spec"]).unwrap(),
                    "targetGeneration": 1, "phase": "Deploying", "startedAt": "2023-11-14T22:13:20Z"},
    });
    job["metadata"]["deletionTimestamp"] = json!("2023-11-14T22:13:20Z");
    let task = tokio::spawn(stream_job::reconcile(guard(job), ctx.clone()));
    api.observe(World::empty()).await;
    let status = api.status().await;
    assert_eq!(status["lifecycleState"], "Deleting", "{status}");
    // Nothing was deployed: the finalizer goes in the same pass.
    let r = api
        .expect("PATCH", "/apis/weir.dev/v1alpha1/namespaces/ns/streamjobs/wc")
        .await;
    assert_eq!(r.body["metadata"]["finalizers"], json!([]), "{}", r.body);
    r.ok(job_json(&json!({"finalizers": []})));
    finish(task).await.unwrap();
}

/// Storage refuses the job's newest snapshot (deleted by hand after it completed, or
/// unreadable): a stateful upgrade whose pods are gone ends Failed with RestoreRequired and the
/// refusal in `status.error`, instead of an observation error retried for ever (helper-118);
/// nothing is deployed.
#[tokio::test]
async fn a_refused_newest_snapshot_fails_a_last_state_upgrade_saying_why() {
    let (ctx, mut api, _control, snaps) = setup();
    let why = "checkpoint chk-9 of job wc completed (s3://bucket/chk/wc/chk-9, recorded in \
               s3://bucket/chk/wc/newest-completed), but the checkpoint storage no longer holds it";
    snaps.refuse_newest(9, why);
    let mut spec = spec_json();
    spec["upgradeMode"] = json!("last-state");
    let mut job = running_job(spec.clone(), 2);
    let mut target = spec.clone();
    target["parallelism"] = json!(3);
    job["spec"] = target.clone();
    job["status"]["lifecycleState"] = json!("Upgrading");
    job["status"]["pending"] = json!({"kind": "Upgrade", "mode": "last-state",
        "targetSpec": serde_json::to_string(&target).unwrap(), "targetGeneration": 2,
        "phase": "AwaitingTermination", "startedAt": "2023-11-14T22:13:20Z"});
    let task = tokio::spawn(stream_job::reconcile(guard(job), ctx.clone()));
    api.observe(World::empty()).await;
    let status = api.status().await;
    assert_eq!(status["lifecycleState"], "Failed", "{status}");
    assert_eq!(
        status["error"].as_str().unwrap_or_default(),
        format!("manual restore required: {why}"),
        "{status}"
    );
    let event = api.event("Warning", "RestoreRequired", 200).await;
    assert!(event["note"].as_str().unwrap_or_default().contains("chk-9"), "{event}");
    finish(task).await.unwrap();
}

#[tokio::test]
async fn deletion_completes_when_event_writes_fail() {
    let (ctx, mut api, control, snaps) = setup();
    let job = running_job(spec_json(), 1);
    let mut job = job;
    job["metadata"]["deletionTimestamp"] = json!("2023-11-14T22:13:20Z");
    control.set_job(Some(job_status(JobState::Running, None)));

    // Pass 1: record Deleting, delete workloads.
    let task = tokio::spawn(stream_job::reconcile(guard(job.clone()), ctx.clone()));
    api.observe(World::deployed(1)).await;
    let status = api.status().await;
    assert_eq!(status["lifecycleState"], "Deleting");
    assert_eq!(status["pending"]["kind"], "Delete");
    api.delete_workloads().await;
    finish(task).await.unwrap();

    // Pass 2: everything gone: the Cleanup event is refused (terminating namespace), the
    // finalizer is removed anyway, even though the storage does not answer (a delete never
    // waits on a restore point: helper-119 found the read's error kept the finalizer).
    snaps.fail_newest(Some(
        "s3://bucket/chk/wc/: S3 ListObjectsV2 failed: dispatch failure: timed out",
    ));
    let job = with_status(job, &status);
    control.set_job(None);
    let task = tokio::spawn(stream_job::reconcile(guard(job), ctx.clone()));
    api.observe(World::empty()).await;
    api.status().await;
    api.event("Normal", "Cleanup", 403).await;
    let r = api
        .expect("PATCH", "/apis/weir.dev/v1alpha1/namespaces/ns/streamjobs/wc")
        .await;
    // Conditioned on the resourceVersion of this pass's own status write (10 → 11), not the
    // one it read: that would be a 409 and a 15 s delay on every delete.
    assert_eq!(r.body, json!({"metadata": {"finalizers": [], "resourceVersion": "11"}}));
    r.ok(job_json(&json!({"finalizers": []})));
    let action = finish(task).await.unwrap();
    assert_eq!(action, Action::requeue(Duration::from_secs(60)));
}

#[tokio::test]
async fn invalid_object_gets_a_validation_event() {
    let (ctx, mut api, _control, _snaps) = setup();
    let mut job = job_json(&json!({}));
    job["spec"]["parallelism"] = json!("many");
    let task = tokio::spawn(stream_job::reconcile(guard(job), ctx));
    api.event("Warning", "ValidationError", 200).await;
    assert_eq!(finish(task).await.unwrap(), Action::await_change());
}

/// A pass that decided on a stale cached object (here: an older status without the upgrade's
/// recorded trigger) must neither overwrite the newer status nor act: its status write is
/// conditioned on the resourceVersion it read, the 409 ends the pass before the
/// stop-with-savepoint, and no Warning event is published (the retry decides on the new object).
#[tokio::test]
async fn a_pass_on_a_stale_object_neither_overwrites_status_nor_acts() {
    let (ctx, mut api, control, _snaps) = setup();
    let mut spec = spec_json();
    spec["image"] = json!("weir:2");
    let job = running_job(spec, 2);
    control.set_job(Some(job_status(JobState::Running, None)));
    let task = tokio::spawn(stream_job::reconcile(guard(job), ctx.clone()));
    api.observe(World::deployed(1)).await;
    api.status_conflict().await;
    let err = finish(task).await.unwrap_err();
    assert!(matches!(err, Error::Conflict(_)), "{err}");
    assert!(
        control.requests().is_empty(),
        "no stop-with-savepoint on a stale object"
    );
    let obj = guard(running_job(spec_json(), 1));
    assert_eq!(
        stream_job::error_policy(obj, &err, ctx),
        Action::requeue(Duration::from_secs(1))
    );
}

/// A pass whose decision leaves status unchanged but acts (deleting workloads while Deleting)
/// first checks that the object is still the one it read; a newer one ends the pass.
#[tokio::test]
async fn acting_without_a_status_write_checks_the_object_is_current() {
    let (ctx, mut api, control, _snaps) = setup();
    let mut job = running_job(spec_json(), 1);
    job["metadata"]["deletionTimestamp"] = json!("2023-11-14T22:13:20Z");
    control.set_job(Some(job_status(JobState::Running, None)));
    let task = tokio::spawn(stream_job::reconcile(guard(job.clone()), ctx.clone()));
    api.observe(World::deployed(1)).await;
    let status = api.status().await;
    api.delete_workloads().await;
    finish(task).await.unwrap();

    // The same pass again on the object with that status: nothing to write, workloads to delete.
    let job = with_status(job, &status);
    let task = tokio::spawn(stream_job::reconcile(guard(job), ctx.clone()));
    api.observe(World::deployed(1)).await;
    let r = api
        .expect("GET", "/apis/weir.dev/v1alpha1/namespaces/ns/streamjobs/wc")
        .await;
    r.ok(job_json(&json!({"resourceVersion": "12"})));
    let err = finish(task).await.unwrap_err();
    assert!(matches!(err, Error::Conflict(_)), "{err}");
}

/// Retention (defect 13): a savepoint leaves `status.savepointHistory` only after its data was
/// disposed; a failed dispose keeps the entry, and the next pass retries it.
#[tokio::test]
async fn retention_forgets_a_savepoint_only_after_its_dispose_succeeded() {
    let (ctx, mut api, control, snaps) = setup();
    let mut spec = spec_json();
    spec["savepoints"]["history"] = json!({"maxCount": 1});
    let mut job = running_job(spec.clone(), 1);
    job["status"]["lastReconciledSpec"] = json!(serde_json::to_string(&spec).unwrap());
    job["status"]["lastStableSpec"] = job["status"]["lastReconciledSpec"].clone();
    job["status"]["savepointHistory"] = json!([
        {"path": "s3://bucket/svp/old", "completedAt": "2023-11-14T22:00:00Z", "origin": "Periodic"},
        {"path": "s3://bucket/svp/new", "completedAt": "2023-11-14T22:05:00Z", "origin": "Periodic"},
    ]);
    control.set_job(Some(job_status(JobState::Running, None)));
    snaps.fail_disposes(Some("S3 unreachable"));

    // Pass 1: the dispose fails: a StorageError, the entry is kept.
    let task = tokio::spawn(stream_job::reconcile(guard(job.clone()), ctx.clone()));
    api.observe(World::deployed(1)).await;
    let status = api.status().await;
    assert_eq!(status["savepointHistory"].as_array().unwrap().len(), 2);
    api.apply_children().await;
    api.event("Warning", "StorageError", 200).await;
    assert!(finish(task).await.is_err());
    assert!(snaps.disposed().is_empty());

    // Pass 2: the dispose succeeds, then (and only then) the entry is removed from status.
    snaps.fail_disposes(None);
    let job = with_status(job, &status);
    let task = tokio::spawn(stream_job::reconcile(guard(job), ctx.clone()));
    api.observe(World::deployed(1)).await;
    api.expect("GET", "/apis/weir.dev/v1alpha1/namespaces/ns/streamjobs/wc")
        .await
        .ok(job_json(&json!({})));
    api.apply_children().await;
    let status = api.status().await;
    let paths: Vec<_> = status["savepointHistory"]
        .as_array()
        .unwrap()
        .iter()
        .map(|r| r["path"].clone())
        .collect();
    assert_eq!(paths, vec![json!("s3://bucket/svp/new")]);
    assert_eq!(snaps.disposed(), vec!["s3://bucket/svp/old".to_string()]);
    finish(task).await.unwrap();
}

/// Defect 15: failures back off per object (5 s, 10 s, 20 s ...), independently for two jobs, and
/// a successful pass starts the object over; a conflict is retried after 1 s without counting.
#[tokio::test]
async fn error_backoff_grows_per_object_and_resets_after_success() {
    let (ctx, mut api, _control, _snaps) = setup();
    let err = || Error::StorageError("S3 unreachable".into());
    let wc = guard(job_json(&json!({})));
    let other = guard(job_json(&json!({"name": "other"})));
    let got: Vec<Action> = (0..3)
        .map(|_| stream_job::error_policy(wc.clone(), &err(), ctx.clone()))
        .collect();
    assert_eq!(
        got,
        [5, 10, 20].map(|s| Action::requeue(Duration::from_secs(s))).to_vec()
    );
    assert_eq!(
        stream_job::error_policy(other, &err(), ctx.clone()),
        Action::requeue(Duration::from_secs(5)),
        "another job has its own count"
    );
    assert_eq!(
        stream_job::error_policy(wc.clone(), &Error::Conflict("moved on".into()), ctx.clone()),
        Action::requeue(Duration::from_secs(1))
    );

    // A successful pass (an unchanged running job) resets wc's count. It re-applies the
    // children of generation 1 but keeps the job Secret of generation 1 (the running pods'
    // token): read, not applied.
    let mut job = running_job(spec_json(), 1);
    job["status"]["conditions"] = json!([]);
    let task = tokio::spawn(stream_job::reconcile(guard(job), ctx.clone()));
    api.observe(World::deployed(1)).await;
    api.status().await;
    api.existing_job_secret(1).await;
    api.apply_workloads().await;
    finish(task).await.unwrap();
    assert_eq!(
        stream_job::error_policy(wc, &err(), ctx),
        Action::requeue(Duration::from_secs(5))
    );
}
