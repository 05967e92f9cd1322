//! What the command line prints. A closed stdout (the reader of a pipe went away, as in
//! `weir savepoint inspect DIR --json | head -1`) ends the process quietly with exit status 0,
//! as Unix tools do, instead of panicking like `println!` (Rust ignores SIGPIPE, so the write
//! fails with EPIPE). Diagnostics are not printed here: they are `tracing` events
//! ([`crate::logging`]), one line each, in the chosen log format.

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
