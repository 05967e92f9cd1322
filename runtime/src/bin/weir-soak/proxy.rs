//! A small HTTP proxy in front of moto that injects S3 faults: 500 InternalError, 503
//! SlowDown (throttling), lost responses (the request is forwarded and executed, then the
//! connection is dropped before any reply), slow deletes, and truncated reads (headers with the
//! full Content-Length, half the body, then the connection drops).
//!
//! Which request gets a fault is drawn from a seeded generator in arrival order; the order of
//! concurrent requests depends on timing, so faults are reproducible in kind and rate, not
//! request by request.

use axum::body::Body;
use bytes::Bytes;
use hyper::body::Incoming;
use hyper::{Request, Response};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// A kind of injected S3 fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FaultKind {
    /// `500 InternalError` without forwarding.
    InternalError,
    /// `503 SlowDown` without forwarding (S3's throttling answer).
    SlowDown,
    /// Forward the request, then drop the connection without replying.
    LostResponse,
    /// Forward a GET, reply with the full Content-Length but only half the body, then drop.
    TruncatedRead,
    /// Delay every DELETE (and multi-object delete) by `slow_delete_ms` before forwarding.
    SlowDelete,
}

/// The faults of one trial.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FaultPlan {
    /// Chance, per thousand requests, that a request gets one of the per-request kinds.
    pub per_mille: u32,
    /// The enabled kinds.
    pub kinds: Vec<FaultKind>,
    /// Delay of each delete when [`FaultKind::SlowDelete`] is enabled, in milliseconds.
    pub slow_delete_ms: u64,
}

/// What the proxy needs to know about a request to pick a fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestShape {
    /// `GET` (a read that can be truncated).
    pub is_get: bool,
    /// `DELETE`, or `POST ?delete` (DeleteObjects).
    pub is_delete: bool,
}

/// Picks the fault for one request. `roll` is uniform in 0..1000 and `pick` an arbitrary draw
/// choosing among the kinds that apply. Deletes are all slow when slow deletes are enabled;
/// otherwise a request gets a fault when `roll < per_mille`.
pub fn decide(plan: &FaultPlan, req: RequestShape, roll: u32, pick: usize) -> Option<FaultKind> {
    if req.is_delete && plan.kinds.contains(&FaultKind::SlowDelete) && roll >= plan.per_mille {
        return Some(FaultKind::SlowDelete);
    }
    if roll >= plan.per_mille {
        return None;
    }
    let applicable: Vec<FaultKind> = plan
        .kinds
        .iter()
        .copied()
        .filter(|k| match k {
            FaultKind::TruncatedRead => req.is_get,
            FaultKind::SlowDelete => req.is_delete,
            _ => true,
        })
        .collect();
    (!applicable.is_empty()).then(|| applicable[pick % applicable.len()])
}

/// Requests seen and faults injected since the last [`Proxy::take_counts`].
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct FaultCounts {
    /// Requests received.
    pub requests: u64,
    /// 500 InternalError answers.
    pub internal_errors: u64,
    /// 503 SlowDown answers.
    pub slow_downs: u64,
    /// Responses dropped after forwarding.
    pub lost_responses: u64,
    /// Bodies cut in half.
    pub truncated_reads: u64,
    /// Deletes delayed.
    pub slow_deletes: u64,
}

impl FaultCounts {
    /// Faults of every kind.
    pub fn total(&self) -> u64 {
        self.internal_errors + self.slow_downs + self.lost_responses + self.truncated_reads + self.slow_deletes
    }

    fn count(&mut self, kind: FaultKind) {
        match kind {
            FaultKind::InternalError => self.internal_errors += 1,
            FaultKind::SlowDown => self.slow_downs += 1,
            FaultKind::LostResponse => self.lost_responses += 1,
            FaultKind::TruncatedRead => self.truncated_reads += 1,
            FaultKind::SlowDelete => self.slow_deletes += 1,
        }
    }
}

struct State {
    upstream: String,
    client: reqwest::Client,
    faults: Mutex<Option<(FaultPlan, StdRng)>>,
    counts: Mutex<FaultCounts>,
}

/// The running proxy; it serves until the process exits.
#[derive(Clone)]
pub struct Proxy {
    addr: SocketAddr,
    state: Arc<State>,
}

/// The service's error: tells hyper to drop the connection without a response.
#[derive(Debug, thiserror::Error)]
#[error("response dropped on purpose (injected lost response)")]
struct DropConnection;

impl Proxy {
    /// Listens on a free port of 127.0.0.1 and forwards to `upstream` (`http://host:port`).
    pub async fn start(upstream: &str) -> std::io::Result<Proxy> {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await?;
        let addr = listener.local_addr()?;
        let client = reqwest::Client::builder()
            .redirect(reqwest::redirect::Policy::none())
            .build()
            .map_err(std::io::Error::other)?;
        let state = Arc::new(State {
            upstream: upstream.trim_end_matches('/').to_string(),
            client,
            faults: Mutex::new(None),
            counts: Mutex::new(FaultCounts::default()),
        });
        let st = state.clone();
        tokio::spawn(async move {
            while let Ok((stream, _)) = listener.accept().await {
                let st = st.clone();
                tokio::spawn(async move {
                    let svc = hyper::service::service_fn(move |req| handle(st.clone(), req));
                    let io = hyper_util::rt::TokioIo::new(stream);
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(io, svc)
                        .await;
                });
            }
        });
        Ok(Proxy { addr, state })
    }

    /// The proxy's endpoint URL, `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// Sets (or, with `None`, clears) the faults; per-request draws come from `seed`.
    pub fn set_faults(&self, plan: Option<FaultPlan>, seed: u64) {
        *self.state.faults.lock().expect("fault lock") = plan.map(|p| (p, StdRng::seed_from_u64(seed)));
    }

    /// Returns the counts so far and resets them.
    pub fn take_counts(&self) -> FaultCounts {
        std::mem::take(&mut *self.state.counts.lock().expect("count lock"))
    }
}

fn s3_error(status: u16, code: &str) -> Response<Body> {
    let body = format!(
        "<?xml version=\"1.0\" encoding=\"UTF-8\"?>\n<Error><Code>{code}</Code><Message>injected by weir-soak</Message><RequestId>soak</RequestId></Error>"
    );
    let mut r = Response::new(Body::from(body));
    *r.status_mut() = hyper::StatusCode::from_u16(status).unwrap_or(hyper::StatusCode::INTERNAL_SERVER_ERROR);
    r.headers_mut().insert(
        hyper::header::CONTENT_TYPE,
        hyper::header::HeaderValue::from_static("application/xml"),
    );
    r
}

const HOP_BY_HOP: [&str; 8] = [
    "connection",
    "keep-alive",
    "transfer-encoding",
    "te",
    "trailer",
    "upgrade",
    "host",
    "content-length",
];

async fn handle(st: Arc<State>, req: Request<Incoming>) -> Result<Response<Body>, DropConnection> {
    let shape = RequestShape {
        is_get: req.method() == hyper::Method::GET,
        is_delete: req.method() == hyper::Method::DELETE
            || (req.method() == hyper::Method::POST
                && req
                    .uri()
                    .query()
                    .is_some_and(|q| q.split('&').any(|p| p == "delete" || p == "delete="))),
    };
    let fault = {
        let mut guard = st.faults.lock().expect("fault lock");
        guard.as_mut().and_then(|(plan, rng)| {
            let roll = rng.random_range(0..1000);
            let pick = rng.random_range(0..usize::MAX);
            decide(plan, shape, roll, pick).map(|k| (k, plan.slow_delete_ms))
        })
    };
    {
        let mut c = st.counts.lock().expect("count lock");
        c.requests += 1;
        if let Some((k, _)) = fault {
            c.count(k);
        }
    }
    match fault {
        Some((FaultKind::InternalError, _)) => return Ok(s3_error(500, "InternalError")),
        Some((FaultKind::SlowDown, _)) => return Ok(s3_error(503, "SlowDown")),
        Some((FaultKind::SlowDelete, ms)) => tokio::time::sleep(Duration::from_millis(ms)).await,
        _ => {}
    }
    let (parts, body) = req.into_parts();
    let body = axum::body::to_bytes(Body::new(body), usize::MAX)
        .await
        .map_err(|_| DropConnection)?;
    let url = format!(
        "{}{}",
        st.upstream,
        parts.uri.path_and_query().map_or("/", |p| p.as_str())
    );
    let mut headers = parts.headers.clone();
    for h in HOP_BY_HOP {
        headers.remove(h);
    }
    let upstream = st
        .client
        .request(parts.method.clone(), url)
        .headers(headers)
        .body(body)
        .send()
        .await;
    let upstream = match upstream {
        Ok(r) => r,
        Err(_) => return Ok(s3_error(502, "BadGateway")),
    };
    let status = upstream.status();
    let mut headers = upstream.headers().clone();
    let bytes = upstream.bytes().await.map_err(|_| DropConnection)?;
    for h in HOP_BY_HOP.iter().filter(|h| **h != "content-length") {
        headers.remove(*h);
    }
    let body = match fault {
        Some((FaultKind::LostResponse, _)) => return Err(DropConnection),
        Some((FaultKind::TruncatedRead, _)) if bytes.len() > 1 => {
            use futures::StreamExt;
            let half: Result<Bytes, std::io::Error> = Ok(bytes.slice(..bytes.len() / 2));
            // The pause lets hyper flush the headers and the first half before the error
            // aborts the connection (otherwise the client would see no response at all).
            let cut = futures::stream::once(async {
                tokio::time::sleep(Duration::from_millis(50)).await;
                Err(std::io::Error::other("truncated by weir-soak"))
            });
            Body::from_stream(futures::stream::iter([half]).chain(cut))
        }
        _ => Body::from(bytes),
    };
    let mut r = Response::new(body);
    *r.status_mut() = status;
    *r.headers_mut() = headers;
    Ok(r)
}

#[cfg(test)]
mod tests {
    use super::*;

    const GET: RequestShape = RequestShape {
        is_get: true,
        is_delete: false,
    };
    const PUT: RequestShape = RequestShape {
        is_get: false,
        is_delete: false,
    };
    const DELETE: RequestShape = RequestShape {
        is_get: false,
        is_delete: true,
    };

    fn plan(kinds: &[FaultKind]) -> FaultPlan {
        FaultPlan {
            per_mille: 50,
            kinds: kinds.to_vec(),
            slow_delete_ms: 1000,
        }
    }

    /// (enabled kinds, request, roll, pick, expected fault)
    type Case = (&'static [FaultKind], RequestShape, u32, usize, Option<FaultKind>);

    #[test]
    fn faults_apply_only_where_they_make_sense() {
        use FaultKind::*;
        let table: Vec<Case> = vec![
            (&[InternalError], PUT, 49, 0, Some(InternalError)),
            (&[InternalError], PUT, 50, 0, None),
            (&[SlowDown, LostResponse], PUT, 0, 1, Some(LostResponse)),
            (&[TruncatedRead], PUT, 0, 0, None),
            (&[TruncatedRead], GET, 10, 0, Some(TruncatedRead)),
            (&[TruncatedRead, SlowDown], PUT, 10, 0, Some(SlowDown)),
            (&[SlowDelete], DELETE, 999, 0, Some(SlowDelete)),
            (&[SlowDelete], GET, 0, 0, None),
            (&[SlowDelete, InternalError], DELETE, 0, 1, Some(InternalError)),
            (&[InternalError], DELETE, 999, 0, None),
        ];
        for (kinds, shape, roll, pick, want) in table {
            assert_eq!(
                decide(&plan(kinds), shape, roll, pick),
                want,
                "{kinds:?} {shape:?} roll {roll}"
            );
        }
    }

    #[test]
    fn counts_add_up() {
        let mut c = FaultCounts::default();
        for k in [FaultKind::LostResponse, FaultKind::SlowDelete, FaultKind::LostResponse] {
            c.count(k);
        }
        assert_eq!((c.lost_responses, c.slow_deletes, c.total()), (2, 1, 3));
    }
}

#[cfg(test)]
#[path = "proxy_tests.rs"]
mod proxy_tests;
