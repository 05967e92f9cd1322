//! The `weir` binary.

use clap::Parser;

#[tokio::main]
async fn main() {
    let cli = weir_runtime::cli::Cli::parse();
    weir_runtime::cli::init_tracing(&cli.log_format);
    tracing::info!(version = env!("CARGO_PKG_VERSION"), "weir starting");
    let code = weir_runtime::cli::main(cli).await;
    std::process::exit(code);
}
