//! `weir-operator`: the controller (`run`) and CRD generation (`crdgen`).

use clap::{Parser, Subcommand};
use std::path::PathBuf;

/// Weir's Kubernetes operator.
#[derive(Parser)]
#[command(name = "weir-operator", version, about)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Write the CustomResourceDefinitions as YAML files into a directory.
    Crdgen {
        /// Output directory (created if missing).
        #[arg(long, default_value = "crds")]
        out_dir: PathBuf,
    },
    /// Run the controllers.
    Run,
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        Command::Crdgen { out_dir } => {
            for path in weir_operator::crd::write_all(&out_dir)? {
                println!("wrote {}", path.display());
            }
            Ok(())
        }
        Command::Run => anyhow::bail!("the controller is not implemented yet"),
    }
}
