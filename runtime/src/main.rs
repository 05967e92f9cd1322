//! The `weir` binary.

use clap::Parser;

/// mimalloc: records are small, short-lived allocations freed on another thread than the one
/// that made them (subtasks hand batches over channels), where it is much faster than the
/// system allocator (see docs/benchmarks.md).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

#[tokio::main]
async fn main() {
    let cli = weir_runtime::cli::Cli::parse();
    if let Err(e) = weir_runtime::cli::init_tracing(&cli) {
        weir_runtime::logging::report_setup_error(cli.log_format, "weir", &e);
        std::process::exit(2);
    }
    // The version line belongs in the logs of the processes that run jobs; a one-shot
    // command (`savepoint inspect`, `checkpoints list`) prints only its answer and errors.
    use weir_runtime::cli::Command;
    if matches!(
        cli.command,
        Command::Run(_) | Command::Coordinator(_) | Command::Worker(_)
    ) {
        tracing::info!(
            version = option_env!("WEIR_VERSION").unwrap_or(env!("CARGO_PKG_VERSION")),
            revision = option_env!("WEIR_GIT_REVISION").unwrap_or("unknown"),
            "weir starting"
        );
    }
    let code = weir_runtime::cli::main(cli).await;
    // A disk store still closing on another thread when `exit` runs RocksDB's static
    // destructors aborts the process: wait for it (bounded; none is open after a clean end).
    if !weir_runtime::state::wait_for_stores_to_close(std::time::Duration::from_secs(10)) {
        tracing::warn!("exiting with a disk state store still open after 10 s");
    }
    std::process::exit(code);
}
