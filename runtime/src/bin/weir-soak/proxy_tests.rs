//! The proxy against a real upstream HTTP server: each fault does what it claims, and the
//! upstream sees (or does not see) the request accordingly.

use super::*;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

/// An upstream that counts requests and answers every one with 1,000 bytes.
async fn upstream() -> (String, Arc<AtomicU64>) {
    let hits = Arc::new(AtomicU64::new(0));
    let h = hits.clone();
    let app = axum::Router::new().fallback(move || {
        let h = h.clone();
        async move {
            h.fetch_add(1, Ordering::SeqCst);
            "x".repeat(1000)
        }
    });
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (format!("http://{addr}"), hits)
}

fn always(kind: FaultKind) -> Option<FaultPlan> {
    Some(FaultPlan {
        per_mille: 1000,
        kinds: vec![kind],
        slow_delete_ms: 300,
    })
}

#[tokio::test]
async fn each_fault_reaches_the_client_as_s3_would_show_it() {
    let (up, hits) = upstream().await;
    let proxy = Proxy::start(&up).await.unwrap();
    let client = reqwest::Client::new();
    let url = format!("{}/bucket/key", proxy.endpoint());

    // No faults: a transparent proxy.
    let body = client.get(&url).send().await.unwrap().text().await.unwrap();
    assert_eq!((body.len(), hits.load(Ordering::SeqCst)), (1000, 1));

    // 500 and 503 SlowDown are answered without forwarding.
    proxy.set_faults(always(FaultKind::InternalError), 1);
    let r = client.put(&url).body("a").send().await.unwrap();
    assert_eq!(r.status(), 500);
    assert!(r.text().await.unwrap().contains("<Code>InternalError</Code>"));
    proxy.set_faults(always(FaultKind::SlowDown), 1);
    let r = client.put(&url).body("a").send().await.unwrap();
    assert_eq!(r.status(), 503);
    assert!(r.text().await.unwrap().contains("<Code>SlowDown</Code>"));
    assert_eq!(hits.load(Ordering::SeqCst), 1);

    // A lost response: the upstream executed the request, the client got no reply.
    proxy.set_faults(always(FaultKind::LostResponse), 1);
    let r = client.put(&url).body("a").send().await;
    assert!(r.is_err(), "{r:?}");
    assert_eq!(hits.load(Ordering::SeqCst), 2);

    // A truncated read: status 200 with the full length announced, then the body breaks off.
    proxy.set_faults(always(FaultKind::TruncatedRead), 1);
    let r = client.get(&url).send().await.unwrap();
    assert_eq!((r.status().as_u16(), r.content_length()), (200, Some(1000)));
    assert!(r.bytes().await.is_err());

    // Slow deletes: forwarded after the delay; other requests are not slowed.
    proxy.set_faults(always(FaultKind::SlowDelete), 1);
    let t = Instant::now();
    assert_eq!(client.delete(&url).send().await.unwrap().status(), 200);
    assert!(t.elapsed() >= Duration::from_millis(300), "{:?}", t.elapsed());
    assert_eq!(client.get(&url).send().await.unwrap().status(), 200);

    let c = proxy.take_counts();
    assert_eq!(
        (
            c.requests,
            c.internal_errors,
            c.slow_downs,
            c.lost_responses,
            c.truncated_reads,
            c.slow_deletes
        ),
        (7, 1, 1, 1, 1, 1)
    );
    assert_eq!(proxy.take_counts(), FaultCounts::default());
}
