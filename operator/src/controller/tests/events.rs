//! Events through kube-runtime's real recorder: it folds events with the same type, reason,
//! action and object into one series (a PATCH) for minutes, so each deployment cycle and each
//! distinct message must produce an Event of its own.

use super::*;

const EVENTS: &str = "/apis/events.k8s.io/v1/namespaces/ns/events";

#[tokio::test]
async fn each_cycle_and_each_message_gets_its_own_event() {
    let (ctx, mut api, _, _) = setup();
    let job: StreamJob = serde_json::from_value(job_json(&json!({}))).unwrap();
    let oref = job.object_ref(&());
    let publish_in = |cycle: u64, note: &str| {
        let (ctx, oref, note) = (ctx.clone(), oref.clone(), note.to_string());
        tokio::spawn(async move { publish(&ctx, &oref, cycle, false, "JobStatusChanged", note).await })
    };
    let stopped = "job state RUNNING → STOPPED";

    // The first rescale (deploy generation 1) stops the job: a new Event.
    let t = publish_in(1, stopped);
    let first = api.expect("POST", EVENTS).await;
    let (first_name, first_action) = (
        first.body["metadata"]["name"].as_str().unwrap().to_string(),
        first.body["action"].clone(),
    );
    assert_eq!(first.body["note"], stopped);
    first.echo();
    t.await.unwrap();

    // The same message again in the same cycle: counted on the same Event (a series PATCH).
    let t = publish_in(1, stopped);
    api.expect("PATCH", &format!("{EVENTS}/{first_name}")).await.echo();
    t.await.unwrap();

    // The second rescale (deploy generation 2), same message: a new Event, not "(x3)".
    let t = publish_in(2, stopped);
    let second = api.expect("POST", EVENTS).await;
    assert_ne!(second.body["action"], first_action);
    assert_eq!(second.body["note"], stopped);
    second.echo();
    t.await.unwrap();

    // A different message in the same cycle: a new Event showing that message.
    let t = publish_in(2, "job state STOPPED → RUNNING");
    let third = api.expect("POST", EVENTS).await;
    assert_eq!(third.body["note"], "job state STOPPED → RUNNING");
    third.echo();
    t.await.unwrap();
}

#[test]
fn event_action_table() {
    let a = event_action(1, "x");
    assert_eq!(a, event_action(1, "x"), "deterministic");
    assert_ne!(a, event_action(2, "x"), "cycle");
    assert_ne!(a, event_action(1, "y"), "note");
    assert!(event_action(u64::MAX, "x").len() <= 128, "the API's limit on action");
}
