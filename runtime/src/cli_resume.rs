//! What `weir run` prints after a SIGTERM / SIGINT suspended the job, or a stop with a
//! savepoint ended it: the command that resumes it.

/// What `weir run` prints after a SIGTERM/SIGINT or a stop with a savepoint: the command that resumes the job, from the
/// process's own arguments `argv` (any `--restore` replaced), and the snapshot it resumes from.
/// `last` is the newest snapshot this run completed (its kind, `checkpoint` or `savepoint`,
/// its id and URL); `restored_from` the restore
/// point this run started from. The command names the snapshot itself, never `latest`: the
/// newest snapshot of the job name when the command is pasted may be another run's (as
/// Flink's `-s <path>` names one).
pub fn resume_hint(argv: &[String], last: Option<(&str, u64, &str)>, restored_from: Option<&str>) -> String {
    let (restore, from) = match (last, restored_from) {
        (Some((kind, id, url)), _) => (url.to_string(), format!("{kind} {id}")),
        (None, Some(url)) => (url.to_string(), url.to_string()),
        (None, None) => {
            return format!(
                "no checkpoint completed, so no output was committed: start over with `{}`",
                command_with_restore(argv, None)
            );
        }
    };
    format!(
        "resume with `{}` (resumes from {from})",
        command_with_restore(argv, Some(&restore))
    )
}

/// `checkpoint` or `savepoint`: the word for a snapshot of `kind` in what `weir run` prints.
pub fn snapshot_kind_word(kind: crate::control::api::SnapshotKind) -> &'static str {
    match kind {
        crate::control::api::SnapshotKind::Checkpoint => "checkpoint",
        crate::control::api::SnapshotKind::Savepoint => "savepoint",
    }
}

/// `argv` as a shell command, with any `--restore VALUE` / `--restore=VALUE` removed and
/// `--restore <restore>` appended when given.
fn command_with_restore(argv: &[String], restore: Option<&str>) -> String {
    let mut out: Vec<String> = Vec::with_capacity(argv.len() + 2);
    let mut skip_next = false;
    for a in argv {
        if std::mem::take(&mut skip_next) {
            continue;
        }
        if a == "--restore" {
            skip_next = true;
            continue;
        }
        if a.starts_with("--restore=") {
            continue;
        }
        out.push(a.clone());
    }
    if let Some(r) = restore {
        out.extend(["--restore".to_string(), r.to_string()]);
    }
    out.iter().map(|a| shell_quote(a)).collect::<Vec<_>>().join(" ")
}

/// Quotes `s` for a POSIX shell when it holds anything but plain word characters.
fn shell_quote(s: &str) -> String {
    let plain = !s.is_empty() && s.chars().all(|c| c.is_ascii_alphanumeric() || "-_./:=,@%+".contains(c));
    if plain {
        s.to_string()
    } else {
        format!("'{}'", s.replace('\'', "'\\''"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn argv(s: &[&str]) -> Vec<String> {
        s.iter().map(|a| a.to_string()).collect()
    }

    #[test]
    fn the_resume_command_replaces_any_restore_with_the_newest_checkpoint_of_this_run() {
        let last = Some(("checkpoint", 5, "/data/ckpt/wordcount/chk-5"));
        for (args, want) in [
            (
                argv(&["weir", "run", "job.yaml"]),
                "resume with `weir run job.yaml --restore /data/ckpt/wordcount/chk-5` (resumes from checkpoint 5)",
            ),
            (
                argv(&[
                    "weir",
                    "run",
                    "job.yaml",
                    "--restore",
                    "/sp/savepoint-1",
                    "--parallelism",
                    "3",
                ]),
                "resume with `weir run job.yaml --parallelism 3 --restore /data/ckpt/wordcount/chk-5` (resumes from checkpoint 5)",
            ),
            (
                argv(&[
                    "weir",
                    "run",
                    "--restore=latest",
                    "my job.yaml",
                    "--set",
                    "spec.x='a b'",
                ]),
                r#"resume with `weir run 'my job.yaml' --set 'spec.x='\''a b'\''' --restore /data/ckpt/wordcount/chk-5` (resumes from checkpoint 5)"#,
            ),
        ] {
            assert_eq!(resume_hint(&args, last, None), want, "{args:?}");
        }
    }

    #[test]
    fn after_a_stop_with_a_savepoint_the_command_resumes_from_the_savepoint() {
        let args = argv(&["weir", "run", "job.yaml", "--restore", "latest"]);
        assert_eq!(
            resume_hint(
                &args,
                Some(("savepoint", 7, "/sp/savepoint-wordcount-7-abcdefgh")),
                None
            ),
            "resume with `weir run job.yaml --restore /sp/savepoint-wordcount-7-abcdefgh` (resumes from savepoint 7)"
        );
    }

    #[test]
    fn without_a_completed_checkpoint_the_hint_names_the_restore_point_or_a_fresh_start() {
        let args = argv(&[
            "weir",
            "run",
            "job.yaml",
            "--restore",
            "s3://b/sp/savepoint-wordcount-4",
        ]);
        assert_eq!(
            resume_hint(&args, None, Some("s3://b/sp/savepoint-wordcount-4")),
            "resume with `weir run job.yaml --restore s3://b/sp/savepoint-wordcount-4` (resumes from s3://b/sp/savepoint-wordcount-4)"
        );
        assert_eq!(
            resume_hint(&argv(&["weir", "run", "job.yaml"]), None, None),
            "no checkpoint completed, so no output was committed: start over with `weir run job.yaml`"
        );
    }
}
