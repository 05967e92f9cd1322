//! `weir-operator`: the controller (`run`) and CRD generation (`crdgen`).

use clap::{Parser, Subcommand};
use std::io::Write;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Weir's Kubernetes operator.
#[derive(Parser)]
#[command(name = "weir-operator", version = version(), about)]
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
    Run {
        /// Namespaces to watch, comma separated; empty: all namespaces.
        #[arg(long, env = "WEIR_WATCH_NAMESPACES", default_value = "")]
        watch_namespaces: String,
        /// Address serving /metrics, /healthz and /readyz.
        #[arg(long, env = "WEIR_METRICS_ADDR", default_value = "0.0.0.0:8080")]
        metrics_addr: SocketAddr,
        /// Runtime image for StreamJobs that set no `spec.image`.
        #[arg(long, env = "WEIR_RUNTIME_IMAGE", default_value = concat!("ghcr.io/weir-dev/weir:", env!("CARGO_PKG_VERSION")))]
        runtime_image: String,
        /// Namespace of the leader-election Lease (the operator's own).
        #[arg(long, env = "POD_NAMESPACE", default_value = "weir-system")]
        lease_namespace: String,
        /// Name of the leader-election Lease.
        #[arg(long, env = "WEIR_LEASE_NAME", default_value = "weir-operator-leader")]
        lease_name: String,
        /// This replica's identity in the Lease.
        #[arg(long, env = "POD_NAME")]
        identity: Option<String>,
        /// Lease duration in seconds (renewed every third).
        #[arg(long, default_value_t = 15)]
        lease_seconds: u64,
        /// Log format: `json` or `text`.
        #[arg(long, env = "WEIR_LOG_FORMAT", default_value = "json")]
        log_format: String,
    },
}

/// Version with the git revision (`WEIR_GIT_REVISION` at build time).
fn version() -> &'static str {
    static V: std::sync::LazyLock<String> = std::sync::LazyLock::new(weir_operator::run::version);
    V.as_str()
}

fn init_tracing(format: &str) {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info,kube=warn"));
    // A closed stderr must not panic the operator (the subscriber would `eprintln!` the error).
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .log_internal_errors(false);
    if format == "json" {
        builder.json().flatten_event(true).init();
    } else {
        builder.init();
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
        Command::Run {
            watch_namespaces,
            metrics_addr,
            runtime_image,
            lease_namespace,
            lease_name,
            identity,
            lease_seconds,
            log_format,
        } => {
            init_tracing(&log_format);
            // A closed stdout must not stop (or panic) the operator: the line is informational.
            let _ = writeln!(std::io::stdout(), "weir-operator {}", weir_operator::run::version());
            let identity = identity.unwrap_or_else(|| format!("weir-operator-{}", std::process::id()));
            let cfg = weir_operator::run::RunConfig {
                watch_namespaces: weir_operator::run::parse_namespaces(&watch_namespaces),
                metrics_addr,
                default_image: runtime_image,
                lease_namespace,
                lease_name,
                identity,
                lease_duration: Duration::from_secs(lease_seconds.max(3)),
            };
            tokio::runtime::Runtime::new()?.block_on(weir_operator::run::run(cfg))
        }
    }
}
