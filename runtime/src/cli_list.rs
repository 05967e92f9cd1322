//! `weir list`: the jobs a user can reach, as `flink list` lists a cluster's running jobs.
//!
//! - Running jobs (default): each `--url` is a job's control API (`weir run` serves one on
//!   `http://127.0.0.1:8081` by default; a `weir coordinator` on its `--listen`). A Weir
//!   cluster runs one job per coordinator, so the jobs of "a cluster" are the control APIs
//!   given. On Kubernetes the list of jobs is `kubectl get streamjobs -A` (the operator's
//!   status shows state and last checkpoint); `weir list --url` then reaches one through a
//!   port-forward.
//! - Lineages (`--storage URL`): the jobs that have snapshots in a checkpoint storage, each
//!   with its newest completed checkpoint or savepoint (what `--restore latest` restores).

use crate::checkpoint::lineage;
use crate::cli_checkpoints::{SnapshotRow, rfc3339};
use crate::cli_control::failure_at;
use crate::control::api::JobStatus;
use crate::control::client::{Client, RequestError};
use crate::output::{self, OutputFormat};
use crate::security::secret::JobSecret;
use crate::storage::{self, ObjectMeta, S3Options};
use serde::Serialize;

/// A running job as `weir list` prints it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RunningJobRow {
    /// `metadata.name`.
    pub job: String,
    /// Id of the run: it names the run's sink files (`part-<runId>-*.jsonl`); the control
    /// API's `jobId`.
    pub run_id: String,
    /// The lineage its checkpoints belong to, as `weir checkpoints list` names it (`None`
    /// from an older runtime).
    pub lineage_id: Option<String>,
    /// Job state (`RUNNING`, `RESTARTING`, ...).
    pub state: String,
    /// Parallelism.
    pub parallelism: u32,
    /// Restarts by the restart strategy.
    pub restarts: u32,
    /// Id of the newest completed checkpoint or savepoint.
    pub last_checkpoint_id: Option<u64>,
    /// When it completed, RFC 3339 UTC.
    pub last_checkpoint_at: Option<String>,
    /// The control API's base URL.
    pub url: String,
}

impl RunningJobRow {
    /// The row of the job whose control API at `url` answered `job`.
    pub fn new(url: &str, job: &JobStatus) -> RunningJobRow {
        let state = serde_json::to_value(job.state)
            .ok()
            .and_then(|v| v.as_str().map(str::to_string))
            .unwrap_or_default();
        RunningJobRow {
            job: job.job_name.clone(),
            run_id: job.job_id.clone(),
            lineage_id: job.lineage_id.clone(),
            state,
            parallelism: job.parallelism,
            restarts: job.restarts,
            last_checkpoint_id: job.last_completed_checkpoint.as_ref().map(|c| c.id),
            last_checkpoint_at: job
                .last_completed_checkpoint
                .as_ref()
                .and_then(|c| rfc3339(c.completed_at_ms)),
            url: url.to_string(),
        }
    }
}

/// The table of running jobs: a header and one line per job.
pub fn running_table(rows: &[RunningJobRow]) -> Vec<String> {
    let header = [
        "JOB",
        "STATE",
        "PARALLELISM",
        "RESTARTS",
        "CHECKPOINT",
        "COMPLETED",
        "RUN",
        "LINEAGE",
        "URL",
    ];
    let mut cells = vec![header.map(str::to_string).to_vec()];
    let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    cells.extend(rows.iter().map(|r| {
        vec![
            r.job.clone(),
            r.state.clone(),
            r.parallelism.to_string(),
            r.restarts.to_string(),
            or_dash(r.last_checkpoint_id.map(|id| id.to_string())),
            or_dash(r.last_checkpoint_at.clone()),
            r.run_id.clone(),
            or_dash(r.lineage_id.clone()),
            r.url.clone(),
        ]
    }));
    output::aligned_columns(&cells)
}

/// A job's lineage in a checkpoint storage as `weir list --storage` prints it.
#[derive(Clone, Debug, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct LineageRow {
    /// The job name (its directory in the storage).
    pub job: String,
    /// Checkpoints and savepoints found, completed or not.
    pub snapshots: usize,
    /// The newest one with a `_metadata` or pointer (what `--restore latest` chooses: restored
    /// when `completed`, refused when `corrupt`), if any.
    pub latest: Option<SnapshotRow>,
}

/// The table of lineages: a header and one line per job.
pub fn lineage_table(rows: &[LineageRow]) -> Vec<String> {
    let header = ["JOB", "SNAPSHOTS", "LATEST", "TYPE", "COMPLETED", "LINEAGE", "LOCATION"];
    let mut cells = vec![header.map(str::to_string).to_vec()];
    let or_dash = |v: Option<String>| v.unwrap_or_else(|| "-".into());
    cells.extend(rows.iter().map(|r| {
        let latest = r.latest.as_ref();
        vec![
            r.job.clone(),
            r.snapshots.to_string(),
            or_dash(latest.map(|l| l.id.to_string())),
            or_dash(latest.map(|l| format!("{:?}", l.kind).to_lowercase())),
            // A newest snapshot that cannot be restored says so where its time would be.
            or_dash(latest.and_then(|l| match l.status {
                crate::cli_checkpoints::SnapshotStatus::Completed => l.completed_at.clone(),
                other => Some(other.as_str().to_string()),
            })),
            or_dash(latest.and_then(|l| l.lineage_id.clone())),
            or_dash(latest.map(|l| l.location.clone())),
        ]
    }));
    output::aligned_columns(&cells)
}

/// The job directories among the objects of a checkpoint storage: the first path component
/// of every object in a folder, sorted, each once.
pub fn job_directories(objects: &[ObjectMeta]) -> Vec<String> {
    let mut jobs: Vec<String> = objects
        .iter()
        .filter_map(|o| o.path.split_once('/').map(|(job, _)| job.to_string()))
        .filter(|job| !job.is_empty())
        .collect();
    jobs.sort();
    jobs.dedup();
    jobs
}

/// `weir list --url …`: asks each control API for its job and prints one row per job that
/// answered. Each URL is one job, so the list is never empty: a URL that does not answer is a
/// failure, as for `weir status` ([`crate::cli_control::failure_at`]).
///
/// Errors: a URL did not answer or refused (each named, with what to start when nothing
/// answered), after printing the jobs of the URLs that did.
pub async fn running(urls: &[String], token: JobSecret, format: OutputFormat) -> Result<(), String> {
    let mut rows = Vec::new();
    let mut failures = Vec::new();
    for url in urls {
        match Client::new(url, token.clone()).job().await {
            Ok(job) => rows.push(RunningJobRow::new(url, &job)),
            Err(e) => failures.push((url.as_str(), e)),
        }
    }
    if !rows.is_empty() {
        output::print_data(&rows, format, || running_table(&rows))?;
    }
    match failures.as_slice() {
        [] => Ok(()),
        [(url, e)] => Err(failure_at(&format!("no running job answered at {url}"), e)),
        several => {
            let each: Vec<String> = several.iter().map(|(url, e)| format!("{url}: {e}")).collect();
            let any_unreachable = several.iter().any(|(_, e)| matches!(e, RequestError::Unreachable(_)));
            Err(format!(
                "no running job answered at {}{}",
                each.join("; "),
                if any_unreachable {
                    format!("; {}", crate::cli_control::START_A_JOB)
                } else {
                    String::new()
                }
            ))
        }
    }
}

/// `weir list --storage URL`: prints the jobs with snapshots in the checkpoint storage, each
/// with its snapshot count and newest completed snapshot, sorted by job name.
///
/// A storage that holds no job's snapshots is an empty list, as `kubectl get` treats one:
/// `No jobs found in URL` on stderr (`[]` on stdout with `-o json|yaml`), exit 0.
///
/// Errors: a local storage directory does not exist; the storage cannot be opened or read; it
/// is a job's own directory (holds `chk-<n>` directories itself: pass its parent).
pub async fn lineages(storage_url: &str, format: OutputFormat) -> Result<(), String> {
    let local = storage::local_path(storage_url)
        .map_err(|e| e.to_string())?
        .map(std::path::Path::new);
    if local.is_some_and(|dir| !dir.is_dir()) {
        let what = if local.is_some_and(|dir| dir.exists()) {
            "is a file, not a directory"
        } else {
            "does not exist"
        };
        return Err(format!(
            "--storage {storage_url} {what}: pass the checkpoint storage (`spec.checkpointing.storage`, \
             default ./weir-data/checkpoints)"
        ));
    }
    let store = storage::open(storage_url, &S3Options::default())
        .await
        .map_err(|e| e.to_string())?;
    let objects = store.list("").await.map_err(|e| e.to_string())?;
    let mut rows = Vec::new();
    for job in job_directories(&objects) {
        let seen = lineage::list_snapshots(&store, &job).await.map_err(|e| e.to_string())?;
        if seen.is_empty() {
            continue;
        }
        let job_objects: Vec<ObjectMeta> = objects
            .iter()
            .filter(|o| o.path.starts_with(&format!("{job}/")))
            .cloned()
            .collect();
        let latest = match seen.iter().rev().find(|s| s.completed) {
            Some(s) => Some(crate::cli_checkpoints::snapshot_row(&store, &job, &job_objects, s).await),
            None => None,
        };
        rows.push(LineageRow {
            job,
            snapshots: seen.len(),
            latest,
        });
    }
    if rows.is_empty() {
        if objects.iter().any(|o| o.path.starts_with("chk-")) {
            return Err(format!(
                "{storage_url} is a job's directory (it holds chk-<n> directories): pass the checkpoint \
                 storage that holds it (`spec.checkpointing.storage`, default ./weir-data/checkpoints)"
            ));
        }
        tracing::info!(target: "weir", "No jobs found in {storage_url}");
        if format == OutputFormat::Table {
            return Ok(());
        }
    }
    output::print_data(&rows, format, || lineage_table(&rows))
}

#[cfg(test)]
#[path = "cli_list_tests.rs"]
mod tests;
