//! Log setup shared by `weir` and `weir-operator`: one `tracing` subscriber per process, so
//! every diagnostic is one event and one line (text or JSON), while data a command prints
//! (records of the print sink, `checkpoints list`, `savepoint inspect --json`) stays plain on
//! stdout ([`crate::output`]).
//!
//! The filter is `RUST_LOG` when it is set, else the configured one (`--log-filter` /
//! `WEIR_LOG`), else the binary's default; colours only on a terminal and without `NO_COLOR`.

use std::io::IsTerminal;
use tracing_subscriber::EnvFilter;

/// Log line format (`--log-format`, `WEIR_LOG_FORMAT`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum LogFormat {
    /// One JSON object per line: `timestamp`, `level`, `message`, the event's fields, `target`.
    Json,
    /// Human-readable lines: time, level, target, message, fields.
    Text,
}

/// The stream log lines are written to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LogStream {
    /// Standard output (the operator's).
    Stdout,
    /// Standard error (the runtime's: its stdout may carry data).
    Stderr,
}

/// How a process logs.
#[derive(Clone, Debug)]
pub struct LogSettings {
    /// Line format.
    pub format: LogFormat,
    /// The filter given by flag or `WEIR_LOG`, if any.
    pub configured_filter: Option<String>,
    /// The filter when neither `RUST_LOG` nor a configured one is set.
    pub default_filter: &'static str,
    /// Where lines go.
    pub stream: LogStream,
}

/// The filter directives a process uses and the setting they came from (named in errors).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct FilterChoice {
    /// tracing `EnvFilter` directives, e.g. `info,kube=warn`.
    pub directives: String,
    /// `RUST_LOG`, `--log-filter / WEIR_LOG` or `the default filter`.
    pub source: &'static str,
}

/// Chooses the filter: `RUST_LOG` when set and not blank, else `configured` when set and not
/// blank, else `default`.
pub fn choose_filter(rust_log: Option<&str>, configured: Option<&str>, default: &str) -> FilterChoice {
    let given = |v: Option<&str>| v.map(str::trim).filter(|v| !v.is_empty()).map(str::to_string);
    if let Some(directives) = given(rust_log) {
        FilterChoice {
            directives,
            source: "RUST_LOG",
        }
    } else if let Some(directives) = given(configured) {
        FilterChoice {
            directives,
            source: "--log-filter / WEIR_LOG",
        }
    } else {
        FilterChoice {
            directives: default.to_string(),
            source: "the default filter",
        }
    }
}

/// Whether text lines carry ANSI colour codes: only when the stream is a terminal and
/// `NO_COLOR` is unset or empty (<https://no-color.org>).
pub fn use_ansi(stream_is_terminal: bool, no_color: Option<&str>) -> bool {
    stream_is_terminal && no_color.is_none_or(str::is_empty)
}

/// Parses filter directives, naming `source` in the error.
///
/// Errors: directives `EnvFilter` refuses (`invalid log filter "…" (RUST_LOG): …`).
pub fn parse_filter(directives: &str, source: &str) -> Result<EnvFilter, String> {
    EnvFilter::builder()
        .parse(directives)
        .map_err(|e| format!("invalid log filter {directives:?} ({source}): {e}"))
}

/// Installs the process's subscriber (call once, first thing in `main`).
///
/// Errors: an invalid filter, naming where it came from.
pub fn init(settings: &LogSettings) -> Result<(), String> {
    let rust_log = std::env::var("RUST_LOG").ok();
    let choice = choose_filter(
        rust_log.as_deref(),
        settings.configured_filter.as_deref(),
        settings.default_filter,
    );
    let filter = parse_filter(&choice.directives, choice.source)?;
    let no_color = std::env::var("NO_COLOR").ok();
    match settings.stream {
        LogStream::Stdout => install(
            filter,
            settings.format,
            use_ansi(std::io::stdout().is_terminal(), no_color.as_deref()),
            std::io::stdout,
        ),
        LogStream::Stderr => install(
            filter,
            settings.format,
            use_ansi(std::io::stderr().is_terminal(), no_color.as_deref()),
            std::io::stderr,
        ),
    }
    Ok(())
}

/// Reports an error that happened before logging was set up (an invalid `RUST_LOG`) as the
/// one line on stderr that logging would have written: `<program>: error: <message>`, or a JSON
/// object with `level`, `target` and `message` in [`LogFormat::Json`]. Never fails.
pub fn report_setup_error(format: LogFormat, program: &str, message: &str) {
    use std::io::Write;
    let line = match format {
        LogFormat::Json => serde_json::json!({"level": "ERROR", "target": program, "message": message}).to_string(),
        LogFormat::Text => format!("{program}: error: {message}"),
    };
    let _ = writeln!(std::io::stderr().lock(), "{line}");
}

fn install<W>(filter: EnvFilter, format: LogFormat, ansi: bool, writer: W)
where
    W: for<'w> tracing_subscriber::fmt::MakeWriter<'w> + Send + Sync + 'static,
{
    // A closed stream loses log lines; without `log_internal_errors(false)` the subscriber
    // reports the failed write with `eprintln!`, which panics on a closed stderr.
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer)
        .log_internal_errors(false);
    match format {
        LogFormat::Json => builder.json().flatten_event(true).with_ansi(false).init(),
        LogFormat::Text => builder.with_ansi(ansi).init(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn filter_precedence() {
        let cases: &[(Option<&str>, Option<&str>, &str, &str)] = &[
            // (RUST_LOG, configured, expected directives, expected source)
            (None, None, "info", "the default filter"),
            (None, Some("warn"), "warn", "--log-filter / WEIR_LOG"),
            (Some("debug"), Some("warn"), "debug", "RUST_LOG"),
            (Some("debug"), None, "debug", "RUST_LOG"),
            (Some("  "), Some("warn"), "warn", "--log-filter / WEIR_LOG"),
            (Some(""), None, "info", "the default filter"),
            (None, Some(""), "info", "the default filter"),
        ];
        for (rust_log, configured, directives, source) in cases {
            let got = choose_filter(*rust_log, *configured, "info");
            assert_eq!(
                got,
                FilterChoice {
                    directives: directives.to_string(),
                    source
                },
                "RUST_LOG={rust_log:?} configured={configured:?}"
            );
        }
    }

    #[test]
    fn ansi_only_on_a_terminal_without_no_color() {
        let cases = [
            (true, None, true),
            (true, Some(""), true),
            (true, Some("1"), false),
            (false, None, false),
            (false, Some("1"), false),
        ];
        for (terminal, no_color, expected) in cases {
            assert_eq!(
                use_ansi(terminal, no_color),
                expected,
                "terminal={terminal} NO_COLOR={no_color:?}"
            );
        }
    }

    #[test]
    fn invalid_filter_names_its_source() {
        let err = parse_filter("info,weir=loud", "RUST_LOG").unwrap_err();
        assert!(err.contains("\"info,weir=loud\" (RUST_LOG)"), "{err}");
        assert!(parse_filter("info,kube=warn", "RUST_LOG").is_ok());
    }
}
