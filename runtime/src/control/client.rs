//! A small client of the control API (used by `weir savepoint trigger`; the operator has its
//! own behind a trait). Every request carries the job secret as a bearer token.

use super::api::*;
use crate::security::secret::JobSecret;
use std::time::Duration;

/// Why a request to the control API failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RequestError {
    /// No HTTP answer: nothing listens at the URL, the host is unreachable, or the connection
    /// broke (the message names the cause, e.g. `nothing answers (Connection refused ...)`).
    #[error("{0}")]
    Unreachable(String),
    /// The API answered with an error status, or with something that is not its JSON (the
    /// message gives the status and the API's error).
    #[error("{0}")]
    Refused(String),
}

impl RequestError {
    /// The error of a request that got no HTTP answer, naming the root cause.
    fn transport(e: &reqwest::Error) -> RequestError {
        let mut root: &dyn std::error::Error = e;
        while let Some(source) = root.source() {
            root = source;
        }
        let what = if e.is_connect() {
            "nothing answers"
        } else if e.is_timeout() {
            "no answer in time"
        } else {
            "the request failed"
        };
        RequestError::Unreachable(format!("{what} ({root})"))
    }
}

/// Client for one job's control API at `base` (`http://host:port`).
#[derive(Clone, Debug)]
pub struct Client {
    base: String,
    http: reqwest::Client,
    token: JobSecret,
}

impl Client {
    /// Creates a client sending `token` (the job secret) as `Authorization: Bearer`.
    pub fn new(base: &str, token: JobSecret) -> Client {
        Client {
            base: base.trim_end_matches('/').to_string(),
            http: reqwest::Client::new(),
            token,
        }
    }

    async fn check(r: reqwest::Response) -> Result<reqwest::Response, String> {
        if r.status().is_success() {
            return Ok(r);
        }
        let code = r.status();
        let body = r.text().await.unwrap_or_default();
        let msg = serde_json::from_str::<ApiError>(&body).map(|e| e.error).unwrap_or(body);
        Err(format!("{code}: {msg}"))
    }

    /// `GET /v1/job`.
    ///
    /// Errors: [`RequestError::Unreachable`] without an HTTP answer, else
    /// [`RequestError::Refused`].
    pub async fn job(&self) -> Result<JobStatus, RequestError> {
        let r = self
            .http
            .get(format!("{}/v1/job", self.base))
            .bearer_auth(self.token.expose())
            .send()
            .await
            .map_err(|e| RequestError::transport(&e))?;
        Self::check(r)
            .await
            .map_err(RequestError::Refused)?
            .json()
            .await
            .map_err(|e| RequestError::Refused(format!("the answer is not a Weir job status: {e}")))
    }

    /// `POST /v1/job/cancel`: stop the job without a savepoint.
    ///
    /// Errors: as [`Client::job`].
    pub async fn cancel(&self) -> Result<(), RequestError> {
        let r = self
            .http
            .post(format!("{}/v1/job/cancel", self.base))
            .bearer_auth(self.token.expose())
            .send()
            .await
            .map_err(|e| RequestError::transport(&e))?;
        Self::check(r).await.map(|_| ()).map_err(RequestError::Refused)
    }

    /// `POST /v1/savepoints`.
    pub async fn trigger_savepoint(&self, req: &SavepointRequest) -> Result<String, String> {
        let r = self
            .http
            .post(format!("{}/v1/savepoints", self.base))
            .bearer_auth(self.token.expose())
            .json(req)
            .send()
            .await
            .map_err(|e| e.to_string())?;
        Ok(Self::check(r)
            .await?
            .json::<TriggerResponse>()
            .await
            .map_err(|e| e.to_string())?
            .trigger_id)
    }

    /// `GET /v1/savepoints/{id}`. A transport error (e.g. a pooled connection the server
    /// closed) is retried twice after 200 ms: the request is idempotent.
    pub async fn savepoint(&self, id: &str) -> Result<SavepointStatus, String> {
        let url = format!("{}/v1/savepoints/{id}", self.base);
        let mut attempt = 0;
        let r = loop {
            match self.http.get(&url).bearer_auth(self.token.expose()).send().await {
                Ok(r) => break r,
                Err(e) if attempt < 2 => {
                    tracing::debug!(error = %e, "retrying {url}");
                    attempt += 1;
                    tokio::time::sleep(Duration::from_millis(200)).await;
                }
                Err(e) => return Err(e.to_string()),
            }
        };
        Self::check(r).await?.json().await.map_err(|e| e.to_string())
    }

    /// Triggers a savepoint and polls every 100 ms until it completes or fails. Errors: the
    /// savepoint's failure, a timeout, or the job lost while waiting ([`lost_savepoint_request`]).
    pub async fn savepoint_and_wait(
        &self,
        req: &SavepointRequest,
        timeout: Duration,
    ) -> Result<SavepointStatus, String> {
        let id = self.trigger_savepoint(req).await?;
        let deadline = tokio::time::Instant::now() + timeout;
        loop {
            let s = self
                .savepoint(&id)
                .await
                .map_err(|e| lost_savepoint_request(&self.base, &id, &e))?;
            match s.state {
                TriggerState::Completed => return Ok(s),
                TriggerState::Failed => {
                    return Err(s.error.unwrap_or_else(|| "savepoint failed".into()));
                }
                TriggerState::InProgress if tokio::time::Instant::now() > deadline => {
                    return Err(format!("savepoint {id} still in progress after {timeout:?}"));
                }
                TriggerState::InProgress => tokio::time::sleep(Duration::from_millis(100)).await,
            }
        }
    }
}

/// The error of a savepoint request accepted by the job at `base` as `trigger_id` whose status
/// could no longer be read (`error`): the job's process ended or restarted while it was in
/// progress (its requests live in the process), so the outcome is told by the storage, not by
/// the job (found by trial: a restart showed `404 Not Found: no savepoint trigger ...`, a dead
/// process a bare transport error).
pub fn lost_savepoint_request(base: &str, trigger_id: &str, error: &str) -> String {
    // `check` formats an HTTP answer as `<status code> <reason>: <message>`; anything else
    // is a transport error (no answer).
    let answered = error
        .split_whitespace()
        .next()
        .is_some_and(|code| code.len() == 3 && code.bytes().all(|b| b.is_ascii_digit()));
    let what = if error.starts_with("404") {
        "no longer knows it: its process restarted (or another run took the address) while the savepoint was in progress"
    } else if answered {
        "refused the status request"
    } else {
        "stopped answering while the savepoint was in progress: the job ended or its process died"
    };
    format!(
        "savepoint request {trigger_id}: the job at {base} {what} ({error}). Whether the savepoint completed \
         is in the storage: `weir savepoint inspect <savepoints directory>/savepoint-<job>-<id>-<suffix>` or `weir \
         checkpoints list <checkpoint storage> --job <job>`"
    )
}

#[cfg(test)]
mod lost_request_tests {
    use super::*;

    #[test]
    fn a_lost_savepoint_request_says_why_and_where_to_look() {
        let restarted = lost_savepoint_request(
            "http://127.0.0.1:8081",
            "ab12",
            "404 Not Found: no savepoint trigger `ab12`",
        );
        assert!(
            restarted.contains("no longer knows it: its process restarted"),
            "{restarted}"
        );
        let dead = lost_savepoint_request("http://127.0.0.1:8081", "ab12", "error sending request for url");
        assert!(
            dead.contains("stopped answering") && dead.contains("error sending request"),
            "{dead}"
        );
        let refused = lost_savepoint_request("http://127.0.0.1:8081", "ab12", "401 Unauthorized: bad token");
        assert!(
            refused.contains("refused the status request (401 Unauthorized: bad token)")
                && !refused.contains("stopped answering"),
            "{refused}"
        );
        for message in [restarted, dead, refused] {
            assert!(
                message.contains("savepoint request ab12") && message.contains("weir savepoint inspect"),
                "{message}"
            );
        }
    }
}
