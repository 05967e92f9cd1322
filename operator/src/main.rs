//! `weir-operator`: the controller (`run`) and CRD generation (`crdgen`). The command line is
//! [`weir_operator::cli`].

use clap::Parser;
use std::io::Write;
use weir_operator::cli::{Cli, Command, LogFormat};

fn init_tracing(filter: &str, format: LogFormat) {
    // A closed stderr must not panic the operator (the subscriber would `eprintln!` the error).
    let builder = tracing_subscriber::fmt()
        .with_env_filter(tracing_subscriber::EnvFilter::new(filter))
        .log_internal_errors(false);
    match format {
        LogFormat::Json => builder.json().flatten_event(true).init(),
        LogFormat::Text => builder.init(),
    }
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
            init_tracing(&args.log_filter, args.log_format);
            // A closed stdout must not stop (or panic) the operator: the line is informational.
            let _ = writeln!(std::io::stdout(), "weir-operator {}", weir_operator::run::version());
            tokio::runtime::Runtime::new()?.block_on(weir_operator::run::run(cfg))
        }
    }
}
