//! Pure parsing and messages of the `weir` command line (the I/O stays in [`crate::cli`]).

use crate::checkpoint::restore::RestoreFrom;

/// Parses a `--restore` value: `none`, `latest`, or the URL of a checkpoint or savepoint
/// directory (`s3://...`, `file://...`, or a local path, which must exist:
/// `local_path_exists` answers that, keeping this function free of I/O).
///
/// Errors: a value that is none of these, with a suggestion when it is close to `latest` or
/// `none` (`--restore lastest`: did you mean `latest`?).
pub fn parse_restore_arg(arg: &str, local_path_exists: impl Fn(&str) -> bool) -> Result<RestoreFrom, String> {
    match arg {
        "none" => return Ok(RestoreFrom::None),
        "latest" => return Ok(RestoreFrom::Latest),
        _ => {}
    }
    if arg.contains("://") || (!arg.is_empty() && local_path_exists(arg)) {
        return Ok(RestoreFrom::Path(arg.to_string()));
    }
    // `file:/abs` (the form Flink prints): the local `/abs`, when it exists.
    if let Ok(Some(path)) = crate::storage::local_path(arg)
        && arg.starts_with("file:")
        && local_path_exists(path)
    {
        return Ok(RestoreFrom::Path(arg.to_string()));
    }
    Err(match crate::job::fields::closest_name(arg, &["latest", "none"]) {
        Some(keyword) => format!(
            "--restore `{arg}` is not `none`, `latest` or an existing checkpoint or savepoint directory; did you mean `{keyword}`?"
        ),
        None => format!(
            "--restore `{arg}`: no such checkpoint or savepoint directory; give `none`, `latest`, or the URL of a directory holding `_metadata` (a local path, file://... or s3://...)"
        ),
    })
}

/// A duration argument (`500ms`, `5s`, `10m`) that must be greater than 0 (a zero heartbeat
/// interval or timeout means nothing sensible); a clap value parser.
///
/// Errors: not a duration, or zero.
pub fn positive_duration(arg: &str) -> Result<humantime::Duration, String> {
    let duration: humantime::Duration = arg
        .parse()
        .map_err(|e| format!("`{arg}` is not a duration like `500ms`, `5s`, `10m`: {e}"))?;
    if duration.is_zero() {
        return Err("must be greater than 0".into());
    }
    Ok(duration)
}

/// Whether a local path exists (the I/O that [`parse_restore_arg`] is given).
pub fn local_path_exists(path: &str) -> bool {
    std::path::Path::new(path).exists()
}

/// The message for a `checkpoints list` that found no checkpoint of `job` in `storage_url`.
/// `storage_exists` is whether a local storage directory exists (always true for S3), and
/// `holds_checkpoint_dirs` whether `chk-<n>` directories sit right at `storage_url` (it is a
/// job's directory, not the storage).
pub fn no_checkpoints_message(
    storage_url: &str,
    job: &str,
    storage_exists: bool,
    holds_checkpoint_dirs: bool,
) -> String {
    if !storage_exists {
        return format!("checkpoint storage {storage_url} does not exist");
    }
    if holds_checkpoint_dirs {
        let parent = storage_url
            .trim_end_matches('/')
            .rsplit_once('/')
            .map_or(".", |(parent, _)| if parent.is_empty() { "/" } else { parent });
        return format!(
            "{storage_url} holds chk-<n> directories itself: it is one job's directory, not the checkpoint storage; try `weir checkpoints list {parent} --job <that job's name>`"
        );
    }
    format!(
        "{storage_url} holds no checkpoints of job `{job}` (looked for {storage_url}/{job}/chk-<n>/); check the storage URL and the job's metadata.name"
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn restore_arg_is_a_keyword_a_url_or_an_existing_path() {
        let exists = |p: &str| p == "./sp/savepoint-1" || p == "nonee" || p == "/sp/savepoint-3";
        for (arg, want) in [
            ("none", Ok(RestoreFrom::None)),
            ("latest", Ok(RestoreFrom::Latest)),
            ("s3://b/cp/wc/chk-3", Ok(RestoreFrom::Path("s3://b/cp/wc/chk-3".into()))),
            ("file:///x/chk-3", Ok(RestoreFrom::Path("file:///x/chk-3".into()))),
            ("./sp/savepoint-1", Ok(RestoreFrom::Path("./sp/savepoint-1".into()))),
            ("nonee", Ok(RestoreFrom::Path("nonee".into()))), // an existing directory wins
            ("lastest", Err("did you mean `latest`?")),
            ("Latest", Err("did you mean `latest`?")),
            ("LATEST", Err("did you mean `latest`?")),
            ("nnoe", Err("did you mean `none`?")),
            (
                "file:/sp/savepoint-3",
                Ok(RestoreFrom::Path("file:/sp/savepoint-3".into())),
            ),
            ("file:/sp/savepoint-4", Err("no such checkpoint or savepoint directory")),
            ("./sp/savepoint-2", Err("no such checkpoint or savepoint directory")),
            ("", Err("no such checkpoint or savepoint directory")),
        ] {
            let got = parse_restore_arg(arg, exists);
            match want {
                Ok(from) => assert_eq!(got, Ok(from), "{arg}"),
                Err(text) => {
                    let e = got.unwrap_err();
                    assert!(
                        e.starts_with(&format!("--restore `{arg}`")) && e.contains(text),
                        "{arg}: {e}"
                    );
                }
            }
        }
    }

    #[test]
    fn numeric_arguments_of_zero_are_refused_naming_the_flag() {
        use crate::cli::Cli;
        use clap::Parser;
        let worker = ["weir", "worker", "--coordinator", "c:6123"];
        let coordinator = ["weir", "coordinator", "--job", "j.yaml"];
        for (base, extra, flag) in [
            (&worker[..], ["--slots", "0"], "--slots"),
            (&worker[..], ["--heartbeat-interval", "0s"], "--heartbeat-interval"),
            (&worker[..], ["--heartbeat-timeout", "0ms"], "--heartbeat-timeout"),
            (&coordinator[..], ["--heartbeat-interval", "0s"], "--heartbeat-interval"),
            (&coordinator[..], ["--restart-window", "0s"], "--restart-window"),
            (&coordinator[..], ["--parallelism", "0"], "--parallelism"),
            (&["weir", "run", "j.yaml"][..], ["--parallelism", "0"], "--parallelism"),
            (&["weir", "savepoint", "trigger"][..], ["--timeout", "0s"], "--timeout"),
        ] {
            let args: Vec<&str> = base.iter().chain(extra.iter()).copied().collect();
            let e = Cli::try_parse_from(&args).unwrap_err().to_string();
            assert!(e.contains(flag), "{args:?}: {e}");
        }
        let ok: Vec<&str> = worker
            .iter()
            .chain(&["--slots", "2", "--heartbeat-interval", "500ms"])
            .copied()
            .collect();
        assert!(Cli::try_parse_from(&ok).is_ok());
        assert_eq!(positive_duration("0s"), Err("must be greater than 0".into()));
        assert!(
            positive_duration("soon")
                .unwrap_err()
                .contains("`soon` is not a duration")
        );
    }

    #[test]
    fn no_checkpoints_message_says_what_is_wrong() {
        for (url, exists, holds_chk, want) in [
            ("/tmp/nope", false, false, "checkpoint storage /tmp/nope does not exist"),
            (
                "weir-data/checkpoints/wordcount",
                true,
                true,
                "try `weir checkpoints list weir-data/checkpoints --job <that job's name>`",
            ),
            ("wordcount", true, true, "try `weir checkpoints list . --job"),
            ("/cp", true, true, "try `weir checkpoints list / --job"),
            (
                "s3://b/cp",
                true,
                false,
                "s3://b/cp holds no checkpoints of job `wc` (looked for s3://b/cp/wc/chk-<n>/)",
            ),
        ] {
            let m = no_checkpoints_message(url, "wc", exists, holds_chk);
            assert!(m.contains(want), "{url}: {m}");
        }
    }
}
