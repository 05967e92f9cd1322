//! Which StreamJob a job's checkpoint directory belongs to.
//!
//! Checkpoints go to `<storage>/<job name>/`, and the name is a StreamJob's `metadata.name`,
//! unique only within a namespace. Two StreamJobs of one name in two namespaces with one
//! `spec.checkpointing.storage` would share the directory: each run's snapshot ids, its restore
//! rule's "newest completed snapshot" and its retention's deletes of incomplete directories
//! and unreferenced shared files would take in the other job's (Flink avoids this with a random
//! job id in the path). The local run lock ([`super::run_lock`]) covers one machine only.
//!
//! So the directory records its owner: the operator claims `<storage>/<job>/_owner` for
//! `<namespace>/<name>` before it deploys a StreamJob ([`claim`], a conditional create: of two
//! claimants exactly one wins), and refuses to deploy another StreamJob there. `weir run` claims
//! nothing (a laptop's runs of a job share its directory, restarting each other's lineage as
//! before) but refuses a directory a StreamJob owns ([`check_unowned`]): it would take snapshot
//! ids from that job's sequence, its retention would delete that job's checkpoints in flight,
//! and `--restore latest` would restore that job's newest snapshot. Which of these happens is
//! [`owner_step`], a pure function.

use super::lineage::{CommitError, put_once, with_retries};
use crate::storage::{StorageError, Store, join};
use bytes::Bytes;

/// Name of the owner record inside `<storage>/<job>/`.
pub const OWNER_FILE: &str = "_owner";

/// The setting the operator's claims are about.
const STORAGE_FIELD: &str = "spec.checkpointing.storage";

/// What `<storage>/<job>/_owner` holds (JSON).
#[derive(Debug, Clone, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct OwnerRecord {
    /// The owning StreamJob as `<namespace>/<name>`.
    pub stream_job: String,
}

/// Who asks to use a job's checkpoint directory.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Claimant<'a> {
    /// The operator, before deploying the StreamJob `<namespace>/<name>`.
    StreamJob(&'a str),
    /// A `weir run` on a machine (it claims nothing).
    WeirRun,
    /// A `weir coordinator`, of the StreamJob `<namespace>/<name>` when its job file has a
    /// `metadata.namespace` (the operator writes one since 2026-12-07), else `None`: started by
    /// hand, or by an operator from before then, which cannot be told apart, so it is let in
    /// with a warning (refusing it would stop every job whose runtime image is upgraded before
    /// its operator). It claims nothing: the operator claimed the directory before it deployed
    /// the coordinator.
    Coordinator(Option<&'a str>),
}

/// What a claimant does with a directory whose recorded owner is known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OwnerStep {
    /// No owner yet: create the record.
    Claim,
    /// The claimant may use the directory.
    Use,
    /// Another StreamJob owns it (`<namespace>/<name>`).
    Refuse(String),
}

/// The decision for `claimant` given the directory's `recorded` owner (`None`: no record).
/// Pure; the table test is below.
pub fn owner_step(recorded: Option<&OwnerRecord>, claimant: Claimant<'_>) -> OwnerStep {
    match (recorded, claimant) {
        (None, Claimant::StreamJob(_)) => OwnerStep::Claim,
        (None, Claimant::WeirRun | Claimant::Coordinator(_)) => OwnerStep::Use,
        (Some(_), Claimant::Coordinator(None)) => OwnerStep::Use,
        (Some(r), Claimant::StreamJob(me) | Claimant::Coordinator(Some(me))) if r.stream_job == me => OwnerStep::Use,
        (Some(r), _) => OwnerStep::Refuse(r.stream_job.clone()),
    }
}

/// Why a job's checkpoint directory cannot be used.
#[derive(Debug, thiserror::Error)]
pub enum OwnerError {
    /// Another StreamJob owns the directory, or `_owner` is not a record Weir writes (a
    /// directory, unparsable, no `<namespace>/<name>`): not retried; the message names the
    /// setting and says what to do.
    #[error("{0}")]
    Taken(String),
    /// The record could not be read or written (retry).
    #[error("{0}")]
    Storage(#[from] StorageError),
}

fn owner_path(job: &str) -> String {
    join(job, OWNER_FILE)
}

/// The owner record of `job`'s directory, if any. `field` names the storage's setting in
/// errors. Errors: a record that is not one Weir writes (unparsable, no `<namespace>/<name>`, a
/// directory) is [`OwnerError::Taken`] with what to do; a storage failure after retries.
async fn read_owner(store: &Store, job: &str, field: &str) -> Result<Option<OwnerRecord>, OwnerError> {
    let path = owner_path(job);
    let url = store.url(&path);
    let not_a_record = |why: String| {
        OwnerError::Taken(format!(
            "{field}: {url} is not an owner record Weir wrote ({why}): it names the StreamJob \
             (`{{\"streamJob\": \"<namespace>/<name>\"}}`) that may use the checkpoint directory \
             {}; delete it if nothing else writes there",
            store.url(job)
        ))
    };
    let read = with_retries(&url, || async {
        match store.get(&path).await {
            // Not transient: retrying a directory in its place cannot help.
            Err(StorageError::Io { source, .. }) if source.kind() == std::io::ErrorKind::IsADirectory => Ok(None),
            other => other.map(Some),
        }
    })
    .await;
    match read {
        Ok(Some(bytes)) => {
            let record: OwnerRecord = serde_json::from_slice(&bytes).map_err(|e| not_a_record(e.to_string()))?;
            match record.stream_job.split_once('/') {
                Some((namespace, name)) if !namespace.is_empty() && !name.is_empty() && !name.contains('/') => {
                    Ok(Some(record))
                }
                _ => Err(not_a_record(format!(
                    "streamJob `{}` is not `<namespace>/<name>`",
                    record.stream_job
                ))),
            }
        }
        Ok(None) => Err(not_a_record("a directory".into())),
        Err(StorageError::NotFound(_)) => Ok(None),
        Err(e) => Err(e.into()),
    }
}

/// Claims `<store>/<job>/` for the StreamJob `stream_job` (`<namespace>/<name>`), or confirms its
/// earlier claim. Errors: [`OwnerError::Taken`] when another StreamJob owns it (the message names
/// `spec.checkpointing.storage`, the owner and the way out), or a storage failure.
pub async fn claim(store: &Store, job: &str, stream_job: &str) -> Result<(), OwnerError> {
    let recorded = read_owner(store, job, STORAGE_FIELD).await?;
    match owner_step(recorded.as_ref(), Claimant::StreamJob(stream_job)) {
        OwnerStep::Use => Ok(()),
        OwnerStep::Refuse(owner) => Err(OwnerError::Taken(taken_by_stream_job(store, job, stream_job, &owner))),
        OwnerStep::Claim => {
            let record = OwnerRecord {
                stream_job: stream_job.to_string(),
            };
            let bytes = Bytes::from(serde_json::to_vec(&record).expect("owner record serializes"));
            match put_once(store, &owner_path(job), bytes).await {
                Ok(()) => Ok(()),
                // Another claimant created it between the read and the write with other bytes
                // (the same bytes are `Ok`): read its owner again, checked as any record is.
                Err(CommitError::Conflict { .. }) => {
                    let owner = read_owner(store, job, STORAGE_FIELD)
                        .await?
                        .map(|r| r.stream_job)
                        .unwrap_or_default();
                    if owner == stream_job {
                        Ok(())
                    } else {
                        Err(OwnerError::Taken(taken_by_stream_job(store, job, stream_job, &owner)))
                    }
                }
                Err(CommitError::Storage(e)) => Err(e.into()),
            }
        }
    }
}

/// Refuses a `weir run` in a checkpoint directory a StreamJob owns. `field` names the setting
/// that chose the storage (`spec.checkpointing.storage`, `--checkpoint-dir`).
pub async fn check_unowned(store: &Store, job: &str, field: &str) -> Result<(), OwnerError> {
    let recorded = read_owner(store, job, field).await?;
    match owner_step(recorded.as_ref(), Claimant::WeirRun) {
        OwnerStep::Use | OwnerStep::Claim => Ok(()),
        OwnerStep::Refuse(owner) => Err(OwnerError::Taken(format!(
            "{field}: {} holds the checkpoints of StreamJob {owner} (recorded in {}); a `weir run` there \
             would take snapshot ids from that job's sequence, its retention would delete that job's \
             checkpoints in flight, and `--restore latest` would restore that job's newest snapshot. \
             Give the run a directory of its own (--checkpoint-dir), and --restore <snapshot> to \
             start from one of that job's snapshots (`weir checkpoints list {} --job {job}` lists them)",
            store.url(job),
            store.url(&owner_path(job)),
            store.url(""),
        ))),
    }
}

/// Refuses a `weir coordinator` of StreamJob `stream_job` in a checkpoint directory another
/// StreamJob owns; one whose job file names no StreamJob (`None`) is let in with a warning
/// naming the owner ([`Claimant::Coordinator`]). `field` names the setting that chose the
/// storage. Errors: [`OwnerError::Taken`] naming the owner and the way out, or a storage
/// failure.
pub async fn check_coordinator(
    store: &Store,
    job: &str,
    field: &str,
    stream_job: Option<&str>,
) -> Result<(), OwnerError> {
    let recorded = read_owner(store, job, field).await?;
    if let (Some(owner), None) = (&recorded, stream_job) {
        tracing::warn!(
            target: "weir",
            "{field}: {} holds the checkpoints of StreamJob {} (recorded in {}), and this coordinator's \
             job file names no StreamJob (no metadata.namespace): if it is not that StreamJob's own \
             coordinator, stop it; two coordinators in one directory fence each other out and restore \
             and delete each other's checkpoints",
            store.url(job),
            owner.stream_job,
            store.url(&owner_path(job)),
        );
    }
    match owner_step(recorded.as_ref(), Claimant::Coordinator(stream_job)) {
        OwnerStep::Use | OwnerStep::Claim => Ok(()),
        OwnerStep::Refuse(owner) => {
            let me = format!("this coordinator runs StreamJob {}", stream_job.unwrap_or_default());
            Err(OwnerError::Taken(format!(
                "{field}: {} holds the checkpoints of StreamJob {owner} (recorded in {}), and {me}: \
                 two coordinators in one checkpoint directory fence each other out and restore and \
                 delete each other's checkpoints. Give this one a directory of its own \
                 (a storage prefix per namespace, or --checkpoint-dir), and --restore <snapshot> to start from one of that job's \
                 snapshots (`weir checkpoints list {} --job {job}` lists them)",
                store.url(job),
                store.url(&owner_path(job)),
                store.url(""),
            )))
        }
    }
}

fn taken_by_stream_job(store: &Store, job: &str, me: &str, owner: &str) -> String {
    let owner_file = store.url(&owner_path(job));
    format!(
        "spec.checkpointing.storage: {} holds the checkpoints of StreamJob {owner} (recorded in \
         {owner_file}), not of {me}: two jobs in one checkpoint directory restore and delete each \
         other's checkpoints. Give this StreamJob a storage of its own (a prefix per namespace, \
         e.g. {}). Or, if StreamJob {owner} is gone and this one should use its directory, delete \
         {owner_file} and change spec.restartNonce (a StreamJob that never ran then starts \
         empty: to start it from one of {owner}'s snapshots, re-create it with \
         spec.initialSavepointPath; `weir checkpoints list {} --job {job}` lists them)",
        store.url(job),
        join(&store.url(""), me.split('/').next().unwrap_or_default()),
        store.url(""),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    fn record(owner: &str) -> OwnerRecord {
        OwnerRecord {
            stream_job: owner.into(),
        }
    }

    #[test]
    fn owner_steps() {
        let a = record("team-a/wordcount");
        let table: &[(Option<&OwnerRecord>, Claimant, OwnerStep)] = &[
            (None, Claimant::StreamJob("team-a/wordcount"), OwnerStep::Claim),
            (None, Claimant::WeirRun, OwnerStep::Use),
            (Some(&a), Claimant::StreamJob("team-a/wordcount"), OwnerStep::Use),
            (
                Some(&a),
                Claimant::StreamJob("team-b/wordcount"),
                OwnerStep::Refuse("team-a/wordcount".into()),
            ),
            (
                Some(&a),
                Claimant::WeirRun,
                OwnerStep::Refuse("team-a/wordcount".into()),
            ),
            (None, Claimant::Coordinator(Some("team-a/wordcount")), OwnerStep::Use),
            (None, Claimant::Coordinator(None), OwnerStep::Use),
            (
                Some(&a),
                Claimant::Coordinator(Some("team-a/wordcount")),
                OwnerStep::Use,
            ),
            (
                Some(&a),
                Claimant::Coordinator(Some("team-b/wordcount")),
                OwnerStep::Refuse("team-a/wordcount".into()),
            ),
            (Some(&a), Claimant::Coordinator(None), OwnerStep::Use),
        ];
        for (recorded, claimant, want) in table {
            assert_eq!(&owner_step(*recorded, *claimant), want, "{recorded:?} {claimant:?}");
        }
    }

    #[tokio::test]
    async fn the_first_stream_job_owns_the_directory_and_others_are_refused() {
        let root = tempfile::tempdir().unwrap();
        let store = crate::storage::open(root.path().to_str().unwrap(), &Default::default())
            .await
            .unwrap();
        check_unowned(&store, "wordcount", "--checkpoint-dir")
            .await
            .expect("no owner yet");
        claim(&store, "wordcount", "team-a/wordcount")
            .await
            .expect("first claim");
        claim(&store, "wordcount", "team-a/wordcount")
            .await
            .expect("its own claim again");
        claim(&store, "sessions", "team-b/sessions")
            .await
            .expect("another job name");

        let refused = claim(&store, "wordcount", "team-b/wordcount")
            .await
            .unwrap_err()
            .to_string();
        for part in [
            "spec.checkpointing.storage",
            "StreamJob team-a/wordcount",
            "not of team-b/wordcount",
            "wordcount/_owner",
            "spec.restartNonce",
            "spec.initialSavepointPath",
        ] {
            assert!(refused.contains(part), "{part}: {refused}");
        }
        let run = check_unowned(&store, "wordcount", "--checkpoint-dir")
            .await
            .unwrap_err()
            .to_string();
        for part in ["--checkpoint-dir:", "StreamJob team-a/wordcount", "--restore"] {
            assert!(run.contains(part), "{part}: {run}");
        }

        // Records Weir never writes: refused at once, naming the setting and what to do.
        for (record, why) in [
            (Some("garbage"), "expected value"),
            (Some(""), "EOF"),
            (Some(r#"{"streamJob":""}"#), "is not `<namespace>/<name>`"),
            (Some(r#"{"streamJob":"noslash"}"#), "is not `<namespace>/<name>`"),
            (Some(r#"{"streamJob":"a/b/c"}"#), "is not `<namespace>/<name>`"),
            (None, "a directory"),
        ] {
            let owner = root.path().join("sessions/_owner");
            let _ = std::fs::remove_file(&owner);
            let _ = std::fs::remove_dir(&owner);
            match record {
                Some(text) => std::fs::write(&owner, text).unwrap(),
                None => std::fs::create_dir(&owner).unwrap(),
            }
            let started = std::time::Instant::now();
            for (field, refused) in [
                (
                    "spec.checkpointing.storage: ",
                    claim(&store, "sessions", "team-b/sessions").await,
                ),
                (
                    "--checkpoint-dir: ",
                    check_unowned(&store, "sessions", "--checkpoint-dir").await,
                ),
            ] {
                let refused = refused.unwrap_err().to_string();
                assert!(
                    refused.starts_with(field)
                        && refused.contains("not an owner record")
                        && refused.contains(why)
                        && refused.contains("delete it"),
                    "{record:?}: {refused}"
                );
            }
            assert!(
                started.elapsed() < std::time::Duration::from_millis(200),
                "{record:?} was retried"
            );
        }
    }
}
