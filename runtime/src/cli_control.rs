//! `weir status` and `weir cancel`: a running job through its control API (`--url`).
//!
//! These and `weir list` fail alike (exit 1) when nothing answers at the URL, with
//! [`failure_at`]'s message: what went wrong and what to start.

use crate::cli_checkpoints::OutputFormat;
use crate::control::api::JobStatus;
use crate::control::client::{Client, RequestError};
use crate::output;
use crate::security::secret::JobSecret;
use std::time::Duration;

/// The lines `weir status -o table` prints for `job`: its state and checkpoints, then one line
/// per task (records summed over subtasks).
pub fn status_lines(job: &JobStatus) -> Vec<String> {
    // The names the API uses (`RUNNING`, `checkpoint`).
    let name = |v: serde_json::Value| v.as_str().map(str::to_string).unwrap_or_default();
    let mut lines = vec![
        match &job.lineage_id {
            Some(lineage) => format!("job          {} (run {}, lineage {lineage})", job.job_name, job.job_id),
            None => format!("job          {} (run {})", job.job_name, job.job_id),
        },
        format!("state        {}", name(serde_json::json!(job.state))),
        format!(
            "parallelism  {} (maxParallelism {})",
            job.parallelism, job.max_parallelism
        ),
        format!("restarts     {}", job.restarts),
    ];
    if let Some(from) = &job.restored_from {
        lines.push(format!("restored     {from}"));
    }
    match &job.last_completed_checkpoint {
        Some(c) => lines.push(format!(
            "checkpoint   {} ({}, {}, {} ms) at {}",
            c.id,
            name(serde_json::json!(c.kind)),
            indicatif::HumanBytes(c.size_bytes),
            c.duration_ms,
            c.path
        )),
        None => lines.push("checkpoint   none completed yet".to_string()),
    }
    if let Some(f) = &job.failure {
        lines.push(format!("failure      {f}"));
    }
    if let Some(s) = &job.summary {
        lines.push(format!(
            "elapsed      {:.1}s; checkpoints {} completed, {} failed",
            Duration::from_millis(s.elapsed_ms).as_secs_f64(),
            s.checkpoints_completed,
            s.checkpoints_failed
        ));
        for t in &s.tasks {
            lines.push(format!(
                "task         {} in {} out {}",
                t.task, t.records_in, t.records_out
            ));
        }
    }
    lines
}

/// What to do when nothing answers at a control API URL.
pub const START_A_JOB: &str = "start a job with `weir run FILE` (its control API listens on \
     http://127.0.0.1:8081) or `weir coordinator`, or pass a running job's control API with --url \
     (on Kubernetes through `kubectl port-forward`)";

/// The message of a failed request to the control API at `url`: `what` (e.g. `cannot get the
/// job's status from http://…`), the error, and when nothing answered, [`START_A_JOB`].
pub fn failure_at(what: &str, error: &RequestError) -> String {
    match error {
        RequestError::Unreachable(e) => format!("{what}: {e}; {START_A_JOB}"),
        RequestError::Refused(e) => format!("{what}: {e}"),
    }
}

/// `weir status`: prints the job's status document (`-o json|yaml`: `GET /v1/job` as is), asking
/// with `token` (the job secret) as the bearer token.
///
/// Errors: nothing answers at `url`, or the API answers with an error ([`failure_at`]).
pub async fn status(url: &str, token: JobSecret, format: OutputFormat) -> Result<(), String> {
    let job = Client::new(url, token)
        .job()
        .await
        .map_err(|e| failure_at(&format!("cannot get the job's status from {url}"), &e))?;
    output::print_data(&job, format, || status_lines(&job))
}

/// `weir cancel`: stops the job without a savepoint and waits (at most `timeout`) until it has
/// stopped: its control API reports a terminal state or no longer answers (the process exited).
///
/// Errors: nothing answers at `url` ([`failure_at`]), the API refuses (the job is already ending), or the job is still
/// running after `timeout`.
pub async fn cancel(url: &str, token: JobSecret, timeout: Duration) -> Result<(), String> {
    let client = Client::new(url, token);
    let job = client
        .job()
        .await
        .map_err(|e| failure_at(&format!("cannot reach the job's control API at {url}"), &e))?;
    client
        .cancel()
        .await
        .map_err(|e| format!("job {} refused the cancel: {e}", job.job_name))?;
    let deadline = tokio::time::Instant::now() + timeout;
    loop {
        match client.job().await {
            Ok(j) if j.state.is_terminal() => break,
            Err(_) => break,
            Ok(j) if tokio::time::Instant::now() > deadline => {
                return Err(format!(
                    "job {} is still {:?} {timeout:?} after the cancel",
                    j.job_name, j.state
                ));
            }
            Ok(_) => tokio::time::sleep(Duration::from_millis(100)).await,
        }
    }
    tracing::info!(
        target: "weir",
        "job {} cancelled without a savepoint: nothing is committed beyond its last completed checkpoint; `--restore latest` resumes it",
        job.job_name
    );
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::control::api::{CheckpointStats, JobState, RunSummary, SnapshotKind, TaskTotals};

    #[test]
    fn an_unreachable_url_says_what_to_start_and_a_refusal_does_not() {
        let unreachable = RequestError::Unreachable("nothing answers (Connection refused)".into());
        let refused = RequestError::Refused("401 Unauthorized: wrong token".into());
        assert_eq!(
            failure_at("cannot get the job's status from http://h:1", &unreachable),
            format!("cannot get the job's status from http://h:1: nothing answers (Connection refused); {START_A_JOB}")
        );
        assert_eq!(
            failure_at("cannot get the job's status from http://h:1", &refused),
            "cannot get the job's status from http://h:1: 401 Unauthorized: wrong token"
        );
    }

    #[test]
    fn the_status_table_names_state_checkpoint_and_tasks() {
        let job = JobStatus {
            job_name: "wc".into(),
            job_id: "abc".into(),
            lineage_id: Some("7ac".into()),
            state: JobState::Running,
            parallelism: 2,
            max_parallelism: 128,
            restored_from: None,
            last_completed_checkpoint: Some(CheckpointStats {
                id: 4,
                kind: SnapshotKind::Checkpoint,
                path: "/c/wc/chk-4".into(),
                triggered_at_ms: 1,
                completed_at_ms: 2,
                duration_ms: 1,
                max_sync_ms: 0,
                max_async_ms: 0,
                max_alignment_ms: 0,
                size_bytes: 300,
                full_size_bytes: 300,
                alignment: Default::default(),
            }),
            subtasks: vec![],
            failure: None,
            restarts: 1,
            workers: vec![],
            summary: Some(RunSummary {
                elapsed_ms: 1500,
                tasks: vec![TaskTotals {
                    task: "gen-0".into(),
                    records_in: 5,
                    records_out: 5,
                }],
                checkpoints_completed: 4,
                checkpoints_failed: 0,
                continues_lineage: None,
                restarts: 1,
                output: vec![],
            }),
        };
        assert_eq!(
            status_lines(&job),
            vec![
                "job          wc (run abc, lineage 7ac)",
                "state        RUNNING",
                "parallelism  2 (maxParallelism 128)",
                "restarts     1",
                "checkpoint   4 (checkpoint, 300 B, 1 ms) at /c/wc/chk-4",
                "elapsed      1.5s; checkpoints 4 completed, 0 failed",
                "task         gen-0 in 5 out 5",
            ]
        );
    }
}
