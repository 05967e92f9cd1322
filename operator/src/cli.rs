//! The `weir-operator` command line: `run` (the controllers) and `crdgen`. Every setting of
//! `run` also comes from an environment variable, so the Helm chart configures the operator
//! through its Deployment's `args` and `env`; `run --check-args` prints what those resolve to
//! and exits, which the chart tests use to prove the binary accepts what the chart renders.

use crate::build::{NetworkPolicySettings, RuntimeDefaults};
use crate::run::{RunConfig, parse_namespaces};
use clap::{Parser, Subcommand};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

/// Weir's Kubernetes operator.
#[derive(Parser, Debug)]
#[command(name = "weir-operator", version = version(), about)]
pub struct Cli {
    /// What to do.
    #[command(subcommand)]
    pub command: Command,
}

/// Subcommands.
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Write the CustomResourceDefinitions as YAML files into a directory.
    Crdgen {
        /// Output directory (created if missing).
        #[arg(long, default_value = "crds")]
        out_dir: PathBuf,
    },
    /// Run the controllers.
    Run(Box<RunArgs>),
}

/// Log output format (shared with the runtime).
pub use weir_runtime::logging::LogFormat;

/// Arguments of `weir-operator run`.
#[derive(clap::Args, Debug)]
pub struct RunArgs {
    /// Namespaces to watch, comma separated; empty: all namespaces.
    #[arg(long, env = "WEIR_WATCH_NAMESPACES", default_value = "")]
    pub watch_namespaces: String,
    /// Address serving /metrics, /healthz and /readyz.
    #[arg(long, env = "WEIR_METRICS_ADDR", default_value = "0.0.0.0:8080")]
    pub metrics_addr: SocketAddr,
    /// Runtime image for StreamJobs that set no `spec.image` (default: the `image` of
    /// `--runtime-defaults`, else `ghcr.io/weir-dev/weir:<operator version>`).
    #[arg(long, env = "WEIR_RUNTIME_IMAGE")]
    pub runtime_image: Option<String>,
    /// Defaults of the runtime pods as JSON (the chart's `runtime` block): `image`,
    /// `imagePullPolicy`, `coordinatorResources`, `workerResources`, `podSecurityContext`,
    /// `containerSecurityContext`. A StreamJob's own settings win.
    #[arg(long, env = "WEIR_RUNTIME_DEFAULTS", value_parser = RuntimeDefaults::from_json)]
    pub runtime_defaults: Option<RuntimeDefaults>,
    /// Per-job NetworkPolicies as JSON (rendered by the chart from `networkPolicies` and the
    /// operator pod's namespace and labels): `enabled`, `operatorNamespace`,
    /// `operatorPodLabels`, `monitoringNamespaceSelector`. Unset: no policies are rendered.
    #[arg(long, env = "WEIR_NETWORK_POLICIES", value_parser = NetworkPolicySettings::from_json)]
    pub network_policies: Option<NetworkPolicySettings>,
    /// Elect a leader through a `coordination.k8s.io` Lease before reconciling (needed when
    /// more than one replica runs, or during rolling updates). Off: no Lease is read or written,
    /// and the operator needs no RBAC on Leases.
    #[arg(long, env = "WEIR_LEADER_ELECTION")]
    pub leader_election: bool,
    /// Namespace of the leader-election Lease (the operator's own).
    #[arg(long, env = "POD_NAMESPACE", default_value = "weir-system")]
    pub lease_namespace: String,
    /// Name of the leader-election Lease.
    #[arg(long, env = "WEIR_LEASE_NAME", default_value = "weir-operator-leader")]
    pub lease_name: String,
    /// This replica's identity in the Lease (default: `<HOSTNAME>-<random>`, unique per
    /// process even where every container is process 1).
    #[arg(long, env = "POD_NAME")]
    pub identity: Option<String>,
    /// Lease duration in seconds (renewed every third); at least 3.
    #[arg(long, env = "WEIR_LEASE_SECONDS", default_value_t = 15, value_parser = clap::value_parser!(u64).range(3..))]
    pub lease_seconds: u64,
    /// Log filter (tracing EnvFilter syntax, e.g. `info` or `info,weir_operator=debug`).
    /// `RUST_LOG`, when set, takes precedence.
    #[arg(long, env = "WEIR_LOG", default_value = "info,kube=warn", value_parser = parse_log_filter)]
    pub log_filter: String,
    /// Log format.
    #[arg(long, env = "WEIR_LOG_FORMAT", value_enum, default_value = "json")]
    pub log_format: LogFormat,
    /// Parse the arguments and environment, print the resulting settings as JSON on stdout,
    /// and exit without contacting the API server.
    #[arg(long)]
    pub check_args: bool,
}

/// Checks a tracing filter so a typo is refused at start instead of silently logging nothing.
fn parse_log_filter(s: &str) -> Result<String, String> {
    tracing_subscriber::EnvFilter::builder()
        .parse(s)
        .map(|_| s.to_string())
        .map_err(|e| format!("invalid log filter {s:?} (WEIR_LOG / --log-filter): {e}"))
}

/// Version with the git revision (`WEIR_GIT_REVISION` at build time).
fn version() -> &'static str {
    static V: std::sync::LazyLock<String> = std::sync::LazyLock::new(crate::run::version);
    V.as_str()
}

impl RunArgs {
    /// The controller settings these arguments describe.
    ///
    /// Errors: `--runtime-image` and the image in `--runtime-defaults` disagree.
    pub fn run_config(&self) -> Result<RunConfig, String> {
        let runtime_defaults = self
            .runtime_defaults
            .clone()
            .unwrap_or_default()
            .with_image(self.runtime_image.as_deref())?;
        Ok(RunConfig {
            watch_namespaces: parse_namespaces(&self.watch_namespaces),
            metrics_addr: self.metrics_addr,
            runtime_defaults,
            network_policies: self.network_policies.clone().unwrap_or_default(),
            leader_election: self.leader_election,
            lease_namespace: self.lease_namespace.clone(),
            lease_name: self.lease_name.clone(),
            identity: self
                .identity
                .clone()
                .filter(|s| !s.is_empty())
                .unwrap_or_else(crate::run::default_identity),
            lease_duration: Duration::from_secs(self.lease_seconds),
        })
    }

    /// The resolved settings as JSON (the output of `--check-args`).
    ///
    /// Errors: as [`RunArgs::run_config`].
    pub fn describe(&self) -> Result<serde_json::Value, String> {
        let cfg = self.run_config()?;
        Ok(serde_json::json!({
            "watchNamespaces": cfg.watch_namespaces,
            "metricsAddr": cfg.metrics_addr.to_string(),
            "runtimeImage": cfg.runtime_defaults.image(),
            "runtimeDefaults": cfg.runtime_defaults,
            "networkPolicies": cfg.network_policies,
            "leaderElection": cfg.leader_election,
            "leaseNamespace": cfg.lease_namespace,
            "leaseName": cfg.lease_name,
            "identity": cfg.identity,
            "leaseSeconds": cfg.lease_duration.as_secs(),
            "logFilter": self.log_filter,
            "logFormat": format!("{:?}", self.log_format).to_lowercase(),
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn run_args(args: &[&str]) -> Result<RunArgs, clap::Error> {
        let cli = Cli::try_parse_from(["weir-operator", "run"].iter().chain(args))?;
        match cli.command {
            Command::Run(r) => Ok(*r),
            Command::Crdgen { .. } => unreachable!("parsed run"),
        }
    }

    #[test]
    fn leader_election_is_off_unless_asked_for() {
        assert!(!run_args(&[]).unwrap().run_config().unwrap().leader_election);
        let on = run_args(&["--leader-election", "--identity", "pod-a"])
            .unwrap()
            .run_config()
            .unwrap();
        assert!(on.leader_election);
        assert_eq!(on.identity, "pod-a");
    }

    #[test]
    fn bad_values_are_refused_naming_the_flag() {
        let err = run_args(&["--log-format", "xml"]).unwrap_err().to_string();
        assert!(err.contains("--log-format"), "{err}");
        let err = run_args(&["--log-filter", "info,=[bad"]).unwrap_err().to_string();
        assert!(err.contains("invalid log filter"), "{err}");
        let err = run_args(&["--lease-seconds", "1"]).unwrap_err().to_string();
        assert!(err.contains("--lease-seconds"), "{err}");
        assert!(run_args(&["--no-such-flag"]).is_err());
    }

    /// WEIR_RUNTIME_DEFAULTS is read (it used to be ignored) and checked.
    #[test]
    fn runtime_defaults_are_read_and_checked() {
        let cfg = run_args(&[
            "--runtime-defaults",
            r#"{"image":"r:1","imagePullPolicy":"Never","workerResources":{"requests":{"cpu":"1"}}}"#,
        ])
        .unwrap()
        .run_config()
        .unwrap();
        assert_eq!(cfg.runtime_defaults.image(), "r:1");
        assert!(cfg.runtime_defaults.worker_resources.is_some());
        let err = run_args(&["--runtime-defaults", r#"{"resources":{}}"#])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("WEIR_RUNTIME_DEFAULTS") && err.contains("resources"),
            "{err}"
        );
        let err = run_args(&["--runtime-image=a:1", r#"--runtime-defaults={"image":"b:2"}"#])
            .unwrap()
            .run_config()
            .unwrap_err();
        assert!(err.contains("disagree"), "{err}");
    }

    /// WEIR_NETWORK_POLICIES is read and checked; without it no policies are rendered.
    #[test]
    fn network_policy_settings_are_read_and_checked() {
        let off = run_args(&[]).unwrap().run_config().unwrap();
        assert!(!off.network_policies.enabled);
        let on = run_args(&[
            "--network-policies",
            r#"{"enabled":true,"operatorNamespace":"ops","operatorPodLabels":{"app":"op"}}"#,
        ])
        .unwrap()
        .run_config()
        .unwrap();
        assert!(on.network_policies.enabled);
        assert_eq!(on.network_policies.operator_namespace, "ops");
        let err = run_args(&["--network-policies", r#"{"enabled":true,"operatorNamespace":"ops"}"#])
            .unwrap_err()
            .to_string();
        assert!(
            err.contains("WEIR_NETWORK_POLICIES") && err.contains("operatorPodLabels"),
            "{err}"
        );
    }

    #[test]
    fn describe_reports_the_resolved_settings() {
        let d = run_args(&["--watch-namespaces=a, b", "--log-filter=debug", "--log-format=text"])
            .unwrap()
            .describe()
            .unwrap();
        assert_eq!(d["watchNamespaces"], serde_json::json!(["a", "b"]));
        assert_eq!(d["logFilter"], "debug");
        assert_eq!(d["logFormat"], "text");
        assert_eq!(d["leaderElection"], false);
    }
}
