//! What the command line prints. A closed stdout (the reader of a pipe went away, as in
//! `weir savepoint inspect DIR --json | head -1`) ends the process quietly with exit status 0,
//! as Unix tools do, instead of panicking like `println!` (Rust ignores SIGPIPE, so the write
//! fails with EPIPE). Diagnostics are not printed here: they are `tracing` events
//! ([`crate::logging`]), one line each, in the chosen log format.

use serde::Serialize;
use std::fmt::Display;
use std::io::{ErrorKind, Write};

/// Writes `line` and a newline to stdout.
///
/// A broken pipe exits the process at once with status 0 (nothing more can reach the reader).
/// Errors: any other write error (a full disk behind a redirect, ...), as a message.
pub fn print_line(line: impl Display) -> Result<(), String> {
    let mut stdout = std::io::stdout().lock();
    writeln!(stdout, "{line}").and_then(|()| stdout.flush()).map_err(|e| {
        exit_quietly_on_broken_pipe(e.kind());
        format!("cannot write to stdout: {e}")
    })
}

/// Exits the process quietly with status 0 if `kind` is a broken pipe (the reader of stdout is
/// gone); returns for any other error kind, which the caller reports.
pub fn exit_quietly_on_broken_pipe(kind: ErrorKind) {
    if kind == ErrorKind::BrokenPipe {
        std::process::exit(0);
    }
}

/// How a command prints its data (`-o` / `--output`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum OutputFormat {
    /// Aligned columns with a header line (for people).
    Table,
    /// One JSON document (pretty-printed).
    Json,
    /// One YAML document (the same fields as JSON).
    Yaml,
}

/// `value` as `format` prints it: pretty JSON or YAML (without a trailing newline), or the
/// lines of `table` joined by newlines.
///
/// Errors: the value does not serialize (a bug; named).
pub fn render_data<T: Serialize>(
    value: &T,
    format: OutputFormat,
    table: impl FnOnce() -> Vec<String>,
) -> Result<String, String> {
    match format {
        OutputFormat::Json => serde_json::to_string_pretty(value).map_err(|e| format!("cannot print JSON: {e}")),
        OutputFormat::Yaml => serde_yaml::to_string(value)
            .map(|s| s.trim_end().to_string())
            .map_err(|e| format!("cannot print YAML: {e}")),
        OutputFormat::Table => Ok(table().join("\n")),
    }
}

/// Prints `value` as `format` ([`render_data`]) on stdout.
///
/// Errors: as [`render_data`] and [`print_line`].
pub fn print_data<T: Serialize>(
    value: &T,
    format: OutputFormat,
    table: impl FnOnce() -> Vec<String>,
) -> Result<(), String> {
    let text = render_data(value, format, table)?;
    if text.is_empty() {
        return Ok(());
    }
    print_line(text)
}

/// Lines of aligned columns: every column but the last padded to its widest cell plus two
/// spaces; the last column (a URL or path that may hold anything) is written as is.
pub fn aligned_columns(rows: &[Vec<String>]) -> Vec<String> {
    let columns = rows.iter().map(Vec::len).max().unwrap_or(0);
    let widths: Vec<usize> = (0..columns.saturating_sub(1))
        .map(|c| {
            rows.iter()
                .map(|r| r.get(c).map_or(0, |cell| cell.chars().count()))
                .max()
                .unwrap_or(0)
        })
        .collect();
    rows.iter()
        .map(|r| {
            let mut line = String::new();
            for (c, cell) in r.iter().enumerate() {
                match widths.get(c) {
                    Some(w) => line.push_str(&format!("{cell:<w$}  ")),
                    None => line.push_str(cell),
                }
            }
            line.trim_end().to_string()
        })
        .collect()
}

#[cfg(test)]
mod format_tests {
    use super::*;

    #[test]
    fn data_prints_as_json_yaml_or_the_table() {
        let value = serde_json::json!({"job": "wc", "ids": [1, 2]});
        let table = || vec!["JOB".to_string(), "wc".to_string()];
        for (format, want) in [
            (
                OutputFormat::Json,
                "{\n  \"job\": \"wc\",\n  \"ids\": [\n    1,\n    2\n  ]\n}",
            ),
            (OutputFormat::Yaml, "job: wc\nids:\n- 1\n- 2"),
            (OutputFormat::Table, "JOB\nwc"),
        ] {
            assert_eq!(render_data(&value, format, table).unwrap(), want, "{format:?}");
        }
    }

    #[test]
    fn columns_align_and_the_last_is_left_as_is() {
        let rows = |cells: &[&[&str]]| -> Vec<Vec<String>> {
            cells
                .iter()
                .map(|r| r.iter().map(|c| c.to_string()).collect())
                .collect()
        };
        for (input, want) in [
            (
                rows(&[&["JOB", "STATE", "URL"], &["wordcount", "RUNNING", "http://a b"]]),
                vec!["JOB        STATE    URL", "wordcount  RUNNING  http://a b"],
            ),
            (rows(&[&["ONLY"], &["x"]]), vec!["ONLY", "x"]),
            (rows(&[]), vec![]),
        ] {
            assert_eq!(aligned_columns(&input), want, "{input:?}");
        }
    }
}
