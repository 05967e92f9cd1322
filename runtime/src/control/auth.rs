//! Bearer-token authentication of the control API: a route layer over every route that reads
//! job details or changes the job. A request without `Authorization: Bearer <job secret>`, or
//! with another token, gets 401 with an [`ApiError`] and a `WWW-Authenticate: Bearer` header,
//! before any handler runs; the refusal is counted and logged once per peer address
//! ([`crate::security::refusals`]).

use super::api::ApiError;
use crate::security::refusals::{self, Surface};
use crate::security::secret::JobSecret;
use axum::Json;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use std::net::SocketAddr;

/// How the control API authenticates.
#[derive(Clone, Debug)]
pub struct ControlAuth {
    /// The job secret: the bearer token clients must send.
    pub secret: JobSecret,
    /// Whether `/metrics` requires the token too (`--metrics-auth`); `/healthz` never does.
    pub protect_metrics: bool,
}

/// The token of an `Authorization` header value of the `Bearer` scheme (case-insensitive,
/// RFC 6750 §2.1), if it is one.
pub fn bearer_token(header_value: &str) -> Option<&str> {
    let (scheme, token) = header_value.trim().split_once(' ')?;
    let token = token.trim();
    (scheme.eq_ignore_ascii_case("bearer") && !token.is_empty()).then_some(token)
}

/// Why a request is refused, or `None` when its `Authorization` header carries the secret.
pub fn refusal(authorization: Option<&str>, secret: &JobSecret) -> Option<&'static str> {
    match authorization {
        None => Some("no Authorization header"),
        Some(v) => match bearer_token(v) {
            None => Some("the Authorization header is not `Bearer <token>`"),
            Some(t) if secret.matches_token(t) => None,
            Some(_) => Some("wrong bearer token"),
        },
    }
}

/// The middleware (`axum::middleware::from_fn_with_state`).
pub async fn require_token(State(auth): State<ControlAuth>, req: Request, next: Next) -> Response {
    let authorization = req
        .headers()
        .get(header::AUTHORIZATION)
        .map(|v| v.to_str().unwrap_or(""));
    let Some(why) = refusal(authorization, &auth.secret) else {
        return next.run(req).await;
    };
    let peer = req
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map(|c| c.0)
        .unwrap_or_else(|| SocketAddr::from(([0, 0, 0, 0], 0)));
    refusals::refuse(
        Surface::Control,
        peer,
        &format!("{why} on {} {}", req.method(), req.uri().path()),
    );
    (
        StatusCode::UNAUTHORIZED,
        [(header::WWW_AUTHENTICATE, "Bearer")],
        Json(ApiError {
            error: format!(
                "{why}: send `Authorization: Bearer <job secret>` (the content of the job's secret file; \
                 `weir savepoint trigger` reads it from --secret-file / WEIR_JOB_SECRET_FILE)"
            ),
        }),
    )
        .into_response()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_bearer_header_with_the_secret_passes() {
        let s = JobSecret::parse("0123456789abcdef", "t").unwrap();
        for (header, want) in [
            (None, Some("no Authorization header")),
            (Some("Bearer 0123456789abcdef"), None),
            (Some("bearer   0123456789abcdef "), None),
            (Some("Bearer 0123456789abcdeX"), Some("wrong bearer token")),
            (
                Some("Basic 0123456789abcdef"),
                Some("the Authorization header is not `Bearer <token>`"),
            ),
            (Some("Bearer"), Some("the Authorization header is not `Bearer <token>`")),
            (
                Some("Bearer "),
                Some("the Authorization header is not `Bearer <token>`"),
            ),
            (Some(""), Some("the Authorization header is not `Bearer <token>`")),
        ] {
            assert_eq!(refusal(header, &s), want, "{header:?}");
        }
    }
}
