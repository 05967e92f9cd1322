//! Sinks: the transactional file sink (two-phase commit) and the print sink.
//!
//! File sink protocol, per subtask: records are appended to the in-progress part, a multipart
//! upload to `<path>/part-<runId>-<subtask>-<seq>.jsonl` (parts of at least 5 MiB are uploaded
//! as they fill). At a barrier the part is **pre-committed**: its last bytes are uploaded and
//! the upload (id + part list) is recorded in the sink's operator state for that checkpoint.
//! When the coordinator reports the checkpoint complete, pending uploads up to that id are
//! **committed** (completed: an atomic rename locally, CompleteMultipartUpload on S3), so
//! readers only ever see committed parts. On restore, the pending uploads recorded in the
//! restore point are committed (idempotently) before the job starts ([`commit_restored`]).

use super::{EncodedState, SnapshotEncoder, StreamOperator, TaskError, TaskResult};
use crate::checkpoint::Barrier;
use crate::record::Record;
use crate::record::json::write_json_line;
use crate::storage::{self, MIN_PART_SIZE, MultipartUpload, S3Options, Store};
use async_trait::async_trait;
use bytes::Bytes;
use serde::{Deserialize, Serialize};
use std::io::Write;

/// A pre-committed part awaiting the completion of `checkpoint_id`.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PendingPart {
    /// The checkpoint whose completion commits it.
    pub checkpoint_id: u64,
    /// The multipart upload holding its bytes.
    pub upload: MultipartUpload,
    /// Number of records in it.
    pub records: u64,
}

/// A pending part as the sink's checkpointed state holds it: the part and the output directory
/// it belongs to (`output_url`, as the store names it), so that a restore commits it where it
/// was written even if the job's `path` changed since (the new path only gets new parts).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct PendingCommit {
    /// The part.
    pub part: PendingPart,
    /// URL of the output directory the upload belongs to.
    pub output_url: String,
}

impl PendingCommit {
    /// Decodes a state item: a [`PendingCommit`], or a bare [`PendingPart`] written before the
    /// output URL was recorded (committed against `default_output`, the job's current path).
    pub fn decode(item: &[u8], default_output: &str) -> Result<PendingCommit, String> {
        if let Ok(commit) = postcard::from_bytes::<PendingCommit>(item) {
            return Ok(commit);
        }
        postcard::from_bytes::<PendingPart>(item)
            .map(|part| PendingCommit {
                part,
                output_url: default_output.to_string(),
            })
            .map_err(|e| format!("pending commit does not decode: {e}"))
    }
}

/// The transactional file sink subtask.
pub struct FileSink {
    store: Store,
    prefix: String,
    run_id: String,
    subtask: u32,
    seq: u64,
    buffer: Vec<u8>,
    records_in_part: u64,
    current: Option<MultipartUpload>,
    pending: Vec<PendingPart>,
}

impl FileSink {
    /// Opens the sink for output directory `path` (local or `s3://`). `run_id` makes part
    /// names unique across runs and restores.
    pub async fn new(path: &str, subtask: u32, run_id: &str, s3: &S3Options) -> TaskResult<FileSink> {
        let store = storage::open(path, s3).await?;
        Ok(FileSink {
            store,
            prefix: String::new(),
            run_id: run_id.to_string(),
            subtask,
            seq: 0,
            buffer: Vec::with_capacity(MIN_PART_SIZE + (1 << 16)),
            records_in_part: 0,
            current: None,
            pending: Vec::new(),
        })
    }

    async fn upload_buffer(&mut self) -> TaskResult<()> {
        if self.current.is_none() {
            let name = storage::join(
                &self.prefix,
                &format!("part-{}-{:04}-{:06}.jsonl", self.run_id, self.subtask, self.seq),
            );
            self.seq += 1;
            self.current = Some(self.store.create_multipart(&name).await?);
        }
        let data = Bytes::from(std::mem::take(&mut self.buffer));
        let upload = self.current.as_mut().expect("created above");
        self.store.upload_part(upload, data).await?;
        self.buffer = Vec::with_capacity(MIN_PART_SIZE + (1 << 16));
        Ok(())
    }

    /// Pending (pre-committed, not yet committed) parts.
    pub fn pending(&self) -> &[PendingPart] {
        &self.pending
    }
}

#[async_trait]
impl StreamOperator for FileSink {
    async fn process(&mut self, input: Vec<Record>, _out: &mut Vec<Record>) -> TaskResult<()> {
        if let Some(ms) = slow_sink_delay() {
            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
        }
        for r in &input {
            write_json_line(&r.row, &mut self.buffer);
        }
        self.records_in_part += input.len() as u64;
        if self.buffer.len() >= MIN_PART_SIZE {
            self.upload_buffer().await?;
        }
        Ok(())
    }

    async fn process_columns(&mut self, input: crate::record::ColumnBatch) -> TaskResult<crate::record::Batch> {
        // JSON lines straight from the columns: the bytes `write_json_line` writes for the
        // same rows.
        if let Some(ms) = slow_sink_delay() {
            tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
        }
        input.write_json_lines(&mut self.buffer);
        self.records_in_part += input.len() as u64;
        if self.buffer.len() >= MIN_PART_SIZE {
            self.upload_buffer().await?;
        }
        Ok(crate::record::Batch::Rows(vec![]))
    }

    async fn snapshot(&mut self, barrier: &Barrier) -> TaskResult<Option<SnapshotEncoder>> {
        // Pre-commit: flush the in-progress part into its upload and record it as pending.
        if !self.buffer.is_empty() {
            self.upload_buffer().await?;
        }
        if let Some(upload) = self.current.take() {
            self.pending.push(PendingPart {
                checkpoint_id: barrier.id,
                upload,
                records: self.records_in_part,
            });
            self.records_in_part = 0;
        }
        let output_url = self.store.url("");
        let items: Vec<Vec<u8>> = self
            .pending
            .iter()
            .map(|part| {
                postcard::to_stdvec(&PendingCommit {
                    part: part.clone(),
                    output_url: output_url.clone(),
                })
            })
            .collect::<Result<_, _>>()?;
        Ok(Some(Box::new(move || {
            Ok(EncodedState::operator_only("operator:pending-commits", items))
        })))
    }

    async fn notify_complete(&mut self, id: u64) -> TaskResult<()> {
        // Commit every pending part covered by checkpoint `id` (earlier declined checkpoints'
        // parts are covered too: they were carried in this checkpoint's state).
        let (ready, rest): (Vec<_>, Vec<_>) = self.pending.drain(..).partition(|p| p.checkpoint_id <= id);
        self.pending = rest;
        for p in ready {
            if let Some(ms) = slow_commit_delay() {
                tokio::time::sleep(std::time::Duration::from_millis(ms)).await;
            }
            self.store.complete_multipart(&p.upload).await?;
        }
        Ok(())
    }
}

/// Test hook: `WEIR_FAILPOINT=slow-commit:<ms>` delays each commit of a pending part by that
/// many milliseconds (a slow storage answer in phase two). Unset in production.
fn slow_commit_delay() -> Option<u64> {
    static DELAY: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *DELAY.get_or_init(|| crate::failpoint::argument("slow-commit"))
}

/// Test hook: `WEIR_FAILPOINT=slow-sink:<ms>` delays every batch the file sink writes by that
/// many milliseconds (to test backpressure). Unset in production.
fn slow_sink_delay() -> Option<u64> {
    static DELAY: std::sync::OnceLock<Option<u64>> = std::sync::OnceLock::new();
    *DELAY.get_or_init(|| crate::failpoint::argument("slow-sink"))
}

/// Commits the pending parts recorded in a restore point for a file sink (idempotent: parts
/// already committed are left as they are). Each part is committed in the output directory it
/// was written to (recorded with it); `path`, the job's current output path, serves only for
/// state written before that was recorded. Returns the number committed.
pub async fn commit_restored(path: &str, items: &[Vec<u8>], s3: &S3Options) -> TaskResult<usize> {
    let mut stores: std::collections::HashMap<String, Store> = std::collections::HashMap::new();
    for item in items {
        let commit = PendingCommit::decode(item, path).map_err(TaskError)?;
        let store = match stores.get(&commit.output_url) {
            Some(store) => store.clone(),
            None => {
                let store = storage::open(&commit.output_url, s3).await?;
                stores.insert(commit.output_url.clone(), store.clone());
                store
            }
        };
        store.complete_multipart(&commit.part.upload).await.map_err(|e| {
            TaskError(format!(
                "committing pending part {} of checkpoint {} in {}: {e}",
                commit.part.upload.path, commit.part.checkpoint_id, commit.output_url
            ))
        })?;
    }
    Ok(items.len())
}

/// Prints records to stdout as JSON lines (not transactional: at-least-once on restore). When
/// the reader of stdout is gone (`weir run job.yaml | head`), the process exits quietly with
/// status 0, as Unix tools do ([`crate::output`]).
pub struct PrintSink;

#[async_trait]
impl StreamOperator for PrintSink {
    async fn process(&mut self, input: Vec<Record>, _out: &mut Vec<Record>) -> TaskResult<()> {
        let mut text = Vec::with_capacity(input.len() * 64);
        for r in &input {
            write_json_line(&r.row, &mut text);
        }
        std::io::stdout().lock().write_all(&text).map_err(|e| {
            crate::output::exit_quietly_on_broken_pipe(e.kind());
            TaskError(format!("print sink: cannot write to stdout: {e}"))
        })?;
        Ok(())
    }
}
