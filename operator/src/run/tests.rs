//! Tests of `weir-operator run`: leader election, readiness, the HTTP server, shutdown.

use super::*;

/// The first API requests of `run` with and without leader election: without it no Lease is
/// ever requested and the controllers start at once; with it the Lease comes first.
#[tokio::test]
async fn the_lease_is_taken_only_with_leader_election() {
    use http::{Request, Response};
    use kube::client::Body;
    for leader_election in [false, true] {
        let (svc, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
        let cfg = RunConfig {
            watch_namespaces: vec!["ns".into()],
            metrics_addr: "127.0.0.1:0".parse().unwrap(),
            runtime_defaults: Default::default(),
            network_policies: Default::default(),
            leader_election,
            lease_namespace: "ops".into(),
            lease_name: "weir-operator-leader".into(),
            identity: "me".into(),
            lease_duration: Duration::from_secs(15),
        };
        let task = tokio::spawn(run_with_client(cfg, Client::new(svc, "ns")));
        let mut paths = Vec::new();
        // Unanswered requests fail on the client side; watchers retry with backoff.
        while paths.len() < 4 {
            match tokio::time::timeout(Duration::from_secs(2), handle.next_request()).await {
                Ok(Some((req, _send))) => paths.push(req.uri().path().to_string()),
                _ => break,
            }
        }
        task.abort();
        let leases: Vec<_> = paths.iter().filter(|p| p.contains("/leases/")).collect();
        if leader_election {
            assert_eq!(
                paths.first().map(String::as_str),
                Some("/apis/coordination.k8s.io/v1/namespaces/ops/leases/weir-operator-leader"),
                "{paths:?}"
            );
        } else {
            assert!(leases.is_empty(), "no Lease without leader election: {paths:?}");
            assert!(
                paths
                    .iter()
                    .any(|p| p.contains("/streamjobs") || p.contains("/savepoints")),
                "controllers start at once: {paths:?}"
            );
        }
    }
}

#[test]
fn leadership_timing_and_identity() {
    let lease = Duration::from_secs(15);
    assert_eq!(renew_deadline(lease), Duration::from_secs(10));
    assert!(
        renew_deadline(lease) < lease,
        "the leader steps down before a standby takes over"
    );
    assert!(!lease_expired(Duration::from_secs(14), lease));
    assert!(lease_expired(Duration::from_secs(15), lease));
    assert_ne!(
        default_identity(),
        default_identity(),
        "two replicas never share an identity"
    );
}

#[test]
fn readiness_table() {
    let cases = [
        (Phase::Starting, false),
        (Phase::Leading, true),
        (Phase::Standby, true),
        (
            Phase::ElectionFailing {
                error: "leases is forbidden".into(),
            },
            false,
        ),
    ];
    for (phase, ready) in cases {
        let (got, body) = readiness(&phase);
        assert_eq!(got, ready, "{phase:?}: {body}");
    }
    assert!(
        readiness(&Phase::ElectionFailing {
            error: "403 leases is forbidden".into()
        })
        .1
        .contains("403 leases is forbidden")
    );
}

#[test]
fn namespaces_and_version() {
    assert_eq!(parse_namespaces(""), Vec::<String>::new());
    assert_eq!(parse_namespaces(" a, b ,,c"), vec!["a", "b", "c"]);
    assert!(version().starts_with(env!("CARGO_PKG_VERSION")));
}

/// Leader election against a mocked API server: free lease taken, a live foreign holder
/// respected, an expired one taken over.
#[tokio::test]
async fn lease_election() {
    use http::{Request, Response};
    use kube::client::Body;
    let (svc, mut handle) = tower_test::mock::pair::<Request<Body>, Response<Body>>();
    let lock = LeaseLock::new(
        Client::new(svc, "ops"),
        "ops",
        "weir-operator",
        "me",
        Duration::from_secs(15),
    );
    let path = "/apis/coordination.k8s.io/v1/namespaces/ops/leases/weir-operator";
    let reply = |send: tower_test::mock::SendResponse<Response<Body>>, code: u16, v: serde_json::Value| {
        send.send_response(
            Response::builder()
                .status(code)
                .body(Body::from(serde_json::to_vec(&v).unwrap()))
                .unwrap(),
        )
    };
    let lease = |holder: &str, renew: Timestamp| {
        serde_json::json!({"apiVersion": "coordination.k8s.io/v1", "kind": "Lease",
            "metadata": {"name": "weir-operator", "namespace": "ops", "resourceVersion": "5"},
            "spec": {"holderIdentity": holder, "leaseDurationSeconds": 15,
                     "renewTime": MicroTime(renew), "leaseTransitions": 2}})
    };
    let step = Duration::from_secs(1);

    // No lease: created with us as holder.
    let t = tokio::spawn(async move { (lock.try_acquire_or_renew().await.unwrap(), lock) });
    let (req, send) = tokio::time::timeout(step, handle.next_request())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((req.method().as_str(), req.uri().path()), ("GET", path));
    reply(
        send,
        404,
        serde_json::json!({"kind": "Status", "apiVersion": "v1", "code": 404, "reason": "NotFound", "metadata": {}, "status": "Failure"}),
    );
    let (req, send) = tokio::time::timeout(step, handle.next_request())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(req.method().as_str(), "POST");
    let body: serde_json::Value = serde_json::from_slice(&req.into_body().collect_bytes().await.unwrap()).unwrap();
    assert_eq!(body["spec"]["holderIdentity"], "me");
    reply(send, 201, body);
    let (won, lock) = t.await.unwrap();
    assert!(won);

    // A live foreign holder: not taken, nothing written.
    let t = tokio::spawn(async move { (lock.try_acquire_or_renew().await.unwrap(), lock) });
    let (_, send) = tokio::time::timeout(step, handle.next_request())
        .await
        .unwrap()
        .unwrap();
    reply(send, 200, lease("other", Timestamp::now()));
    let (won, lock) = t.await.unwrap();
    assert!(!won);

    // A foreign holder whose renewTime is long past by our clock (clock skew, or a holder
    // that just stopped) is not taken at first sight: expiry is measured locally...
    let stale = {
        let mut l = lease(
            "other",
            Timestamp::now() - k8s_openapi::jiff::SignedDuration::from_secs(60),
        );
        l["spec"]["leaseDurationSeconds"] = serde_json::json!(1);
        l
    };
    let t = tokio::spawn(async move { (lock.try_acquire_or_renew().await.unwrap(), lock) });
    let (_, send) = tokio::time::timeout(step, handle.next_request())
        .await
        .unwrap()
        .unwrap();
    reply(send, 200, stale.clone());
    let (won, lock) = t.await.unwrap();
    assert!(!won, "a lease seen for the first time is never expired");

    // ...and taken over (with resourceVersion and a transition) once the same record has
    // stayed unchanged for its whole duration on the local clock.
    tokio::time::sleep(Duration::from_millis(1100)).await;
    let t = tokio::spawn(async move { lock.try_acquire_or_renew().await.unwrap() });
    let (_, send) = tokio::time::timeout(step, handle.next_request())
        .await
        .unwrap()
        .unwrap();
    reply(send, 200, stale);
    let (req, send) = tokio::time::timeout(step, handle.next_request())
        .await
        .unwrap()
        .unwrap();
    assert_eq!((req.method().as_str(), req.uri().path()), ("PUT", path));
    let body: serde_json::Value = serde_json::from_slice(&req.into_body().collect_bytes().await.unwrap()).unwrap();
    assert_eq!(body["metadata"]["resourceVersion"], "5");
    assert_eq!(body["spec"]["holderIdentity"], "me");
    assert_eq!(body["spec"]["leaseTransitions"], 3);
    reply(send, 200, body);
    assert!(t.await.unwrap());
}
