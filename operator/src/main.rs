//! `weir-operator`: the controller (`run`) and CRD generation (`crdgen`). The command line is
//! [`weir_operator::cli`].

use clap::Parser;
use weir_operator::cli::{Cli, Command, LogFormat};
use weir_runtime::logging::{LogSettings, LogStream};

/// Installs the operator's logging on stdout: `RUST_LOG`, else `--log-filter` / `WEIR_LOG`.
fn init_tracing(filter: &str, format: LogFormat) -> Result<(), String> {
    weir_runtime::logging::init(&LogSettings {
        format,
        configured_filter: Some(filter.to_string()),
        default_filter: "info,kube=warn",
        stream: LogStream::Stdout,
    })
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Crdgen { out_dir } => {
            for path in weir_operator::crd::write_all(&out_dir)? {
                weir_runtime::output::print_line(format_args!("wrote {}", path.display()))
                    .map_err(anyhow::Error::msg)?;
            }
            Ok(())
        }
        Command::Run(args) => {
            let cfg = args.run_config().map_err(anyhow::Error::msg)?;
            if args.check_args {
                let described = serde_json::to_string_pretty(&args.describe().map_err(anyhow::Error::msg)?)?;
                weir_runtime::output::print_line(format_args!("{described}")).map_err(anyhow::Error::msg)?;
                return Ok(());
            }
            if let Err(e) = init_tracing(&args.log_filter, args.log_format) {
                weir_runtime::logging::report_setup_error(args.log_format, "weir-operator", &e);
                std::process::exit(2);
            }
            // The version is in the first log line (`starting weir-operator`). A failure is a
            // log event too, so that every line of the log is in the chosen format.
            let result = tokio::runtime::Runtime::new()
                .map_err(anyhow::Error::from)
                .and_then(|runtime| runtime.block_on(weir_operator::run::run(cfg)));
            if let Err(e) = result {
                tracing::error!(error = format!("{e:#}"), "weir-operator stopped");
                std::process::exit(1);
            }
            Ok(())
        }
    }
}
