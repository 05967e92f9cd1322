//! Before `weir run` starts a job: the local directories it will write (the checkpoint
//! storage, each file sink's output) must be directories this process can write, and the
//! savepoint directory must not be a file, so a
//! read-only or misplaced location is an error naming its field before anything runs, instead
//! of a job that reads its input and then fails at its first checkpoint (or at its first
//! output record) with a bare `Permission denied`.
//!
//! `s3://` locations are not probed (credentials and buckets surface on the first request,
//! with the S3 error), nor URLs the storage refuses (`s3:/bucket`, `hdfs://…`).

use crate::job::{Job, OperatorKind};
use std::path::Path;

/// Checks every local location `job` writes: the checkpoint storage (`checkpoint_override`
/// is `--checkpoint-dir`, which replaces `spec.checkpointing.storage`) and the `path` of each
/// file sink, and that the savepoint directory is not a file. Each is written once (a file `.weir-write-probe-<pid>`, removed at once), or its
/// nearest existing ancestor when it does not exist yet: nothing is created.
///
/// Errors: the first location that cannot be created or written, naming its field
/// (`spec.checkpointing.storage`, `--checkpoint-dir`, `spec.job.steps[5].sink.file.path`),
/// the path and the operating system's reason.
pub fn check_local_outputs(job: &Job, checkpoint_override: Option<&str>) -> Result<(), String> {
    let checkpoint_field = if checkpoint_override.is_some() {
        "--checkpoint-dir".to_string()
    } else {
        "spec.checkpointing.storage".to_string()
    };
    // A savepoint directory that is a file was found only by the first savepoint (trial). It
    // is not probed for writing: a run that takes no savepoint needs none.
    let savepoints = crate::exec::savepoint_dir(job);
    if let Ok(Some(path)) = crate::storage::local_path(&savepoints)
        && Path::new(path).exists()
        && !Path::new(path).is_dir()
    {
        let set = job
            .spec
            .savepoints
            .as_ref()
            .and_then(|s| s.directory.as_ref())
            .is_some();
        let field = if set {
            "spec.savepoints.directory"
        } else {
            "spec.savepoints.directory (default)"
        };
        return Err(format!(
            "{field}: {path} is a file; savepoints are written into a directory: give a directory"
        ));
    }
    let mut locations = vec![(checkpoint_field, crate::exec::storage_url(job, checkpoint_override))];
    for op in &job.operators {
        if let OperatorKind::FileSink(spec) = &op.kind {
            locations.push((
                format!("spec.job.steps[{}].sink.file.path", op.index),
                spec.path.clone(),
            ));
        }
    }
    for (field, url) in locations {
        // S3, and what is not a local path (another scheme, `s3:/typo`): `storage::open`
        // serves or refuses them with its own message. A `file:` URL is a local path (it has
        // a scheme too, and was skipped until a user's trial found it, 2026-12-04); one naming
        // a host (`file://tmp/x`) is refused here, naming the field.
        let path = match crate::storage::local_path(&url) {
            Ok(Some(path)) => path,
            Ok(None) => continue,
            Err(e) => return Err(format!("{field}: {e}")),
        };
        probe_writable(Path::new(path)).map_err(|why| {
            format!("{field}: cannot write to {path}: {why}; give a directory this user can write (it is created when missing)")
        })?;
    }
    Ok(())
}

/// Parses a storage location flag (`--checkpoint-dir`, `--storage`): any text but an empty
/// one, which would be the current directory (found by trial: `--checkpoint-dir ''` wrote
/// `./<job>/chk-<n>`). Errors: the message clap prints after `invalid value '' for '--flag'`.
pub fn non_empty_location(arg: &str) -> Result<String, String> {
    if arg.trim().is_empty() {
        return Err(
            "it is empty (from the flag or its environment variable, e.g. an empty WEIR_CHECKPOINT_DIR); \
             give a directory or URL, or leave both unset for the default"
                .to_string(),
        );
    }
    Ok(arg.to_string())
}

/// [`non_empty_location`] for a local directory flag (`--state-dir`).
pub fn non_empty_dir(arg: &str) -> Result<std::path::PathBuf, String> {
    non_empty_location(arg).map(std::path::PathBuf::from)
}

/// Writes and removes a probe file in `dir`, or, when `dir` does not exist yet, in its nearest
/// existing ancestor (where the run will create it), so a check leaves nothing behind.
/// Errors: the reason, as the operating system gives it, or the ancestor that is a file.
fn probe_writable(dir: &Path) -> Result<(), String> {
    let absolute = std::env::current_dir().map_err(|e| e.to_string())?.join(dir);
    let Some(existing) = absolute.ancestors().find(|a| a.exists()) else {
        return Ok(());
    };
    if !existing.is_dir() {
        return Err(if existing == absolute {
            "it is a file, and checkpoints and output are written into a directory".into()
        } else {
            format!(
                "{} is a file, so no directory can be created under it",
                existing.display()
            )
        });
    }
    let probe = existing.join(format!(".weir-write-probe-{}", std::process::id()));
    std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .open(&probe)
        .map_err(|e| e.to_string())?;
    std::fs::remove_file(&probe).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn job(storage: &str, sink: &str) -> Job {
        let yaml = format!(
            "apiVersion: weir.dev/v1alpha1\nkind: StreamJob\nmetadata: {{name: p}}\nspec:\n  checkpointing: {{storage: \"{storage}\"}}\n  job:\n    steps:\n      - source: {{generator: {{}}}}\n      - sink: {{file: {{path: \"{sink}\"}}}}\n"
        );
        crate::job::parse_manifest(&yaml, &[]).unwrap()
    }

    #[test]
    fn locations_that_cannot_be_written_are_named_by_their_field() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("a-file");
        std::fs::write(&file, "x").unwrap();
        let ok = dir.path().join("ok").display().to_string();
        let under_file = file.join("chk").display().to_string();
        let under_file_url = format!("file://{under_file}");
        let cases = [
            (job(&ok, &ok), None, None),
            (
                job(&under_file, &ok),
                None,
                Some("spec.checkpointing.storage: cannot write to "),
            ),
            (
                job(&ok, &ok),
                Some(under_file.as_str()),
                Some("--checkpoint-dir: cannot write to "),
            ),
            (
                job(&ok, &file.display().to_string()),
                None,
                Some("spec.job.steps[1].sink.file.path: cannot write to "),
            ),
            (job("s3://bucket/chk", "s3://bucket/out"), None, None),
            (job(&ok, &ok), Some("s3:/typo"), None),
            (
                job(&under_file_url, &ok),
                None,
                Some("spec.checkpointing.storage: cannot write to "),
            ),
            (
                job(&ok, &ok),
                Some(under_file_url.as_str()),
                Some("--checkpoint-dir: cannot write to "),
            ),
            (
                job(&ok, &format!("file://{}", file.display())),
                None,
                Some("spec.job.steps[1].sink.file.path: cannot write to "),
            ),
            (job(&format!("file://{ok}"), &format!("file://{ok}")), None, None),
        ];
        for (job, over, want) in cases {
            let got = check_local_outputs(&job, over);
            match want {
                None => assert_eq!(got, Ok(())),
                Some(w) => {
                    let e = got.unwrap_err();
                    assert!(e.starts_with(w), "{e}");
                }
            }
        }
        let left: Vec<_> = std::fs::read_dir(dir.path())
            .unwrap()
            .map(|e| e.unwrap().file_name())
            .collect();
        assert_eq!(left, vec![std::ffi::OsString::from("a-file")], "created or left behind");
    }
}
