//! `weir-operator run`: leader election, the two controllers per watched namespace, the
//! metrics/health HTTP server, and graceful shutdown.

mod controllers;

use crate::metrics::Metrics;
use k8s_openapi::api::coordination::v1::{Lease, LeaseSpec};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::MicroTime;
use k8s_openapi::jiff::Timestamp;
use kube::api::PostParams;
use kube::{Api, Client};
use prometheus_client::registry::Registry;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;
use tokio::sync::watch;

/// Settings of `weir-operator run`.
#[derive(Clone, Debug)]
pub struct RunConfig {
    /// Namespaces to watch; empty: all.
    pub watch_namespaces: Vec<String>,
    /// Address of `/metrics`, `/healthz` and `/readyz`.
    pub metrics_addr: SocketAddr,
    /// Defaults of the runtime pods (image of StreamJobs without `spec.image`, pull policy,
    /// resources, security contexts).
    pub runtime_defaults: crate::build::RuntimeDefaults,
    /// Per-job NetworkPolicies: on or off, the operator's own namespace and pod labels, the
    /// monitoring namespaces (`WEIR_NETWORK_POLICIES`).
    pub network_policies: crate::build::NetworkPolicySettings,
    /// Take the Lease before reconciling. Off: the Lease is never touched and the operator
    /// reconciles as soon as it starts (one replica, `Recreate` rollouts).
    pub leader_election: bool,
    /// Namespace of the leader-election Lease.
    pub lease_namespace: String,
    /// Name of the Lease.
    pub lease_name: String,
    /// This replica's identity (pod name).
    pub identity: String,
    /// Lease duration; renewed every third of it.
    pub lease_duration: Duration,
}

/// Version and git revision (`WEIR_GIT_REVISION` at build time, else "unknown").
pub fn version() -> String {
    format!(
        "{} (git {})",
        env!("CARGO_PKG_VERSION"),
        option_env!("WEIR_GIT_REVISION").unwrap_or("unknown")
    )
}

/// A Lease identity for a replica started without `POD_NAME`: the host name (the pod name in
/// Kubernetes) and 64 random bits, so two replicas never share one (the process id would: it is
/// 1 in every container).
pub fn default_identity() -> String {
    use std::hash::{BuildHasher, Hasher};
    let host = std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .unwrap_or_else(|| "weir-operator".into());
    let mut h = std::collections::hash_map::RandomState::new().build_hasher();
    h.write_u32(std::process::id());
    h.write_u128(
        std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default()
            .as_nanos(),
    );
    format!("{host}-{:016x}", h.finish())
}

/// How long the leader keeps trying to renew before it steps down: two thirds of the lease
/// duration (client-go's 10 s of 15 s), so it stops reconciling before any standby can see the
/// lease expire and take over.
pub fn renew_deadline(lease_duration: Duration) -> Duration {
    lease_duration * 2 / 3
}

/// Whether a standby may take over a lease whose record (holder, renew time, transitions) it
/// last saw change `unchanged_for` ago (its own monotonic clock): the holder's clock is never
/// compared with the local one, so clock skew cannot make a live leader look expired.
pub fn lease_expired(unchanged_for: Duration, lease_duration: Duration) -> bool {
    unchanged_for >= lease_duration
}

/// Parses `--watch-namespaces` (comma separated; empty: all namespaces).
pub fn parse_namespaces(s: &str) -> Vec<String> {
    s.split(',')
        .map(str::trim)
        .filter(|s| !s.is_empty())
        .map(str::to_owned)
        .collect()
}

/// Completes when `rx` turns true (or its sender is gone).
async fn shutdown_signal(mut rx: watch::Receiver<bool>) {
    let _ = rx.wait_for(|stop| *stop).await;
}

/// Where the operator is in its start-up, as `/readyz` reports it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Phase {
    /// Started; leader election (if enabled) has not answered yet.
    Starting,
    /// The controllers run: this replica leads, or leader election is off.
    Leading,
    /// Leader election works and another replica holds the Lease; this one waits for it.
    Standby,
    /// Leader election cannot read or write the Lease (e.g. 403: no RBAC on Leases).
    ElectionFailing {
        /// The API error, as text.
        error: String,
    },
}

/// `/readyz` for `phase`: `(ready, body)`. Ready once the operator reconciles, or as a
/// standby that reached the API and saw a live leader (so a rolling update with
/// `maxUnavailable: 0` can replace the leader); not ready while starting or while the
/// election fails, so a missing Lease Role shows as an unready pod instead of a silent one.
pub fn readiness(phase: &Phase) -> (bool, String) {
    match phase {
        Phase::Starting => (false, "starting: leader election has not answered yet".into()),
        Phase::Leading => (true, "ready: leading, controllers running".into()),
        Phase::Standby => (true, "ready: standby, another replica holds the lease".into()),
        Phase::ElectionFailing { error } => (false, format!("not ready: leader election failing: {error}")),
    }
}

/// Shared state of the HTTP endpoints.
struct Http {
    registry: Registry,
    phase: std::sync::Mutex<Phase>,
}

impl Http {
    fn set_phase(&self, phase: Phase) {
        *self.phase.lock().unwrap_or_else(|p| p.into_inner()) = phase;
    }
}

async fn serve_http(addr: SocketAddr, http: Arc<Http>, stop: watch::Receiver<bool>) -> anyhow::Result<()> {
    use axum::http::{StatusCode, header};
    use axum::routing::get;
    let metrics = {
        let http = http.clone();
        move || {
            let http = http.clone();
            async move {
                let mut out = String::new();
                match prometheus_client::encoding::text::encode(&mut out, &http.registry) {
                    Ok(()) => (
                        StatusCode::OK,
                        [(
                            header::CONTENT_TYPE,
                            "application/openmetrics-text; version=1.0.0; charset=utf-8",
                        )],
                        out,
                    ),
                    Err(e) => (
                        StatusCode::INTERNAL_SERVER_ERROR,
                        [(header::CONTENT_TYPE, "text/plain")],
                        e.to_string(),
                    ),
                }
            }
        }
    };
    let readyz = {
        let http = http.clone();
        move || {
            let (ready, body) = readiness(&http.phase.lock().unwrap_or_else(|p| p.into_inner()));
            async move {
                if ready {
                    (StatusCode::OK, body)
                } else {
                    (StatusCode::SERVICE_UNAVAILABLE, body)
                }
            }
        }
    };
    let app = axum::Router::new()
        .route("/metrics", get(metrics))
        .route("/healthz", get(|| async { "ok" }))
        .route("/readyz", get(readyz));
    let listener = tokio::net::TcpListener::bind(addr).await?;
    tracing::info!(%addr, "serving /metrics, /healthz, /readyz");
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown_signal(stop))
        .await?;
    Ok(())
}

/// Leader election on a `coordination.k8s.io/v1` Lease.
pub struct LeaseLock {
    api: Api<Lease>,
    name: String,
    identity: String,
    duration: Duration,
    /// The foreign lease record last seen and when (local monotonic clock) it was first seen.
    observed: std::sync::Mutex<Option<(String, tokio::time::Instant)>>,
}

impl LeaseLock {
    /// A lock on Lease `name` in `namespace`.
    pub fn new(client: Client, namespace: &str, name: &str, identity: &str, duration: Duration) -> LeaseLock {
        LeaseLock {
            api: Api::namespaced(client, namespace),
            name: name.into(),
            identity: identity.into(),
            duration,
            observed: std::sync::Mutex::new(None),
        }
    }

    /// How long the foreign lease record `record` has been seen unchanged (zero when it just
    /// changed or was never seen).
    fn unchanged_for(&self, record: String) -> Duration {
        let now = tokio::time::Instant::now();
        let mut observed = self.observed.lock().unwrap_or_else(|p| p.into_inner());
        match observed.as_ref() {
            Some((seen, since)) if *seen == record => now.duration_since(*since),
            _ => {
                *observed = Some((record, now));
                Duration::ZERO
            }
        }
    }

    /// Takes or renews the lease; `Ok(false)` when another live holder has it (or won a race).
    pub async fn try_acquire_or_renew(&self) -> Result<bool, kube::Error> {
        let now = Timestamp::now();
        let secs = self.duration.as_secs().max(1) as i32;
        match self.api.get_opt(&self.name).await? {
            None => {
                let lease = Lease {
                    metadata: kube::api::ObjectMeta {
                        name: Some(self.name.clone()),
                        ..Default::default()
                    },
                    spec: Some(LeaseSpec {
                        holder_identity: Some(self.identity.clone()),
                        lease_duration_seconds: Some(secs),
                        acquire_time: Some(MicroTime(now)),
                        renew_time: Some(MicroTime(now)),
                        lease_transitions: Some(0),
                        ..Default::default()
                    }),
                };
                match self.api.create(&PostParams::default(), &lease).await {
                    Ok(_) => Ok(true),
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                    Err(e) => Err(e),
                }
            }
            Some(mut lease) => {
                let spec = lease.spec.clone().unwrap_or_default();
                let mine = spec.holder_identity.as_deref() == Some(self.identity.as_str());
                let held = spec.holder_identity.as_deref().is_some_and(|h| !h.is_empty());
                // Expiry by the local clock: how long this record has been seen unchanged.
                let record = format!(
                    "{:?}/{:?}/{:?}",
                    spec.holder_identity, spec.renew_time, spec.lease_transitions
                );
                let duration = Duration::from_secs(spec.lease_duration_seconds.unwrap_or(secs).max(1) as u64);
                let expired = spec.renew_time.is_none() || lease_expired(self.unchanged_for(record), duration);
                if held && !mine && !expired {
                    return Ok(false);
                }
                let transitions = spec.lease_transitions.unwrap_or(0) + if mine { 0 } else { 1 };
                lease.spec = Some(LeaseSpec {
                    holder_identity: Some(self.identity.clone()),
                    lease_duration_seconds: Some(secs),
                    acquire_time: if mine { spec.acquire_time } else { Some(MicroTime(now)) },
                    renew_time: Some(MicroTime(now)),
                    lease_transitions: Some(transitions),
                    ..Default::default()
                });
                // `replace` carries the resourceVersion we read: a concurrent writer makes it 409.
                match self.api.replace(&self.name, &PostParams::default(), &lease).await {
                    Ok(_) => Ok(true),
                    Err(kube::Error::Api(s)) if s.code == 409 => Ok(false),
                    Err(e) => Err(e),
                }
            }
        }
    }

    /// Gives the lease up (best effort) so a standby takes over without waiting for expiry.
    pub async fn release(&self) {
        if let Ok(Some(mut lease)) = self.api.get_opt(&self.name).await
            && let Some(spec) = lease.spec.as_mut()
            && spec.holder_identity.as_deref() == Some(self.identity.as_str())
        {
            spec.holder_identity = None;
            spec.renew_time = None;
            if let Err(e) = self.api.replace(&self.name, &PostParams::default(), &lease).await {
                tracing::warn!(error = %e, "releasing the lease failed");
            }
        }
    }
}

async fn wait_for_signal() {
    let ctrl_c = tokio::signal::ctrl_c();
    #[cfg(unix)]
    {
        let mut term =
            tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate()).expect("SIGTERM handler");
        tokio::select! {
            _ = ctrl_c => {},
            _ = term.recv() => {},
        }
    }
    #[cfg(not(unix))]
    {
        let _ = ctrl_c.await;
    }
}

/// How waiting for the Lease ended.
enum Leadership {
    /// This replica holds the Lease.
    Leading,
    /// Shutdown was requested first.
    Stopped,
}

/// Retries the Lease every third of its duration until this replica holds it or shutdown is
/// requested, publishing each outcome as the readiness phase.
async fn wait_for_leadership(
    lock: &LeaseLock,
    http: &Http,
    cfg: &RunConfig,
    stop_rx: &watch::Receiver<bool>,
) -> Leadership {
    let renew_every = cfg.lease_duration / 3;
    loop {
        if *stop_rx.borrow() {
            return Leadership::Stopped;
        }
        match lock.try_acquire_or_renew().await {
            Ok(true) => return Leadership::Leading,
            Ok(false) => http.set_phase(Phase::Standby),
            Err(e) => {
                tracing::warn!(error = %e, lease = %cfg.lease_name, namespace = %cfg.lease_namespace, "leader election");
                http.set_phase(Phase::ElectionFailing { error: e.to_string() });
            }
        }
        let mut rx = stop_rx.clone();
        tokio::select! {
            _ = tokio::time::sleep(renew_every) => {},
            _ = rx.changed() => {},
        }
    }
}

/// Renews the Lease every third of its duration; on loss (or no renewal within the duration)
/// sets `lost` and requests shutdown.
fn spawn_renewer(
    lock: Arc<LeaseLock>,
    duration: Duration,
    stop_tx: Arc<watch::Sender<bool>>,
    lost: Arc<AtomicBool>,
    mut rx: watch::Receiver<bool>,
) -> tokio::task::JoinHandle<()> {
    let renew_every = duration / 3;
    tokio::spawn(async move {
        let mut last_ok = tokio::time::Instant::now();
        loop {
            tokio::select! {
                _ = tokio::time::sleep(renew_every) => {},
                _ = rx.wait_for(|s| *s) => return,
            }
            match lock.try_acquire_or_renew().await {
                Ok(true) => last_ok = tokio::time::Instant::now(),
                Ok(false) => {
                    tracing::error!("leadership lost to another replica");
                    lost.store(true, Ordering::Relaxed);
                    let _ = stop_tx.send(true);
                    return;
                }
                Err(e) if last_ok.elapsed() >= renew_deadline(duration) => {
                    tracing::error!(error = %e, "lease not renewed within the renew deadline; stepping down");
                    lost.store(true, Ordering::Relaxed);
                    let _ = stop_tx.send(true);
                    return;
                }
                Err(e) => tracing::warn!(error = %e, "lease renewal failed; retrying"),
            }
        }
    })
}

/// Runs the operator until SIGTERM/SIGINT or lost leadership.
///
/// Errors: no Kubernetes client configuration, the HTTP address in use, or leadership lost
/// (the process exits non-zero so it restarts as a standby).
pub async fn run(cfg: RunConfig) -> anyhow::Result<()> {
    tracing::info!(version = %version(), namespaces = ?cfg.watch_namespaces, "starting weir-operator");
    let client = Client::try_default().await?;
    run_with_client(cfg, client).await
}

/// [`run`] with a given Kubernetes client.
pub async fn run_with_client(cfg: RunConfig, client: Client) -> anyhow::Result<()> {
    let mut registry = Registry::default();
    let metrics = Arc::new(Metrics::new(&mut registry));
    let http = Arc::new(Http {
        registry,
        phase: std::sync::Mutex::new(Phase::Starting),
    });
    let (stop_tx, stop_rx) = watch::channel(false);
    let stop_tx = Arc::new(stop_tx);

    let server = tokio::spawn(serve_http(cfg.metrics_addr, http.clone(), stop_rx.clone()));
    {
        let stop_tx = stop_tx.clone();
        tokio::spawn(async move {
            wait_for_signal().await;
            tracing::info!("shutdown requested");
            let _ = stop_tx.send(true);
        });
    }

    let lock = Arc::new(LeaseLock::new(
        client.clone(),
        &cfg.lease_namespace,
        &cfg.lease_name,
        &cfg.identity,
        cfg.lease_duration,
    ));
    let lost = Arc::new(AtomicBool::new(false));
    let renewer = if cfg.leader_election {
        match wait_for_leadership(&lock, &http, &cfg, &stop_rx).await {
            Leadership::Leading => {}
            Leadership::Stopped => {
                let _ = server.await;
                return Ok(());
            }
        }
        tracing::info!(identity = %cfg.identity, lease = %cfg.lease_name, "leading");
        Some(spawn_renewer(
            lock.clone(),
            cfg.lease_duration,
            stop_tx.clone(),
            lost.clone(),
            stop_rx.clone(),
        ))
    } else {
        tracing::info!("leader election off: reconciling without a Lease");
        None
    };

    let namespaces: Vec<Option<String>> = if cfg.watch_namespaces.is_empty() {
        vec![None]
    } else {
        cfg.watch_namespaces.iter().cloned().map(Some).collect()
    };
    let mut controllers = Vec::new();
    for ns in namespaces {
        controllers.extend(controllers::spawn(
            &client,
            ns,
            &metrics,
            &cfg.runtime_defaults,
            &cfg.network_policies,
            &stop_rx,
        ));
    }
    http.set_phase(Phase::Leading);
    for c in controllers {
        let _ = c.await;
    }
    let _ = stop_tx.send(true);
    if let Some(renewer) = renewer {
        let _ = renewer.await;
        if lost.load(Ordering::Relaxed) {
            anyhow::bail!("leadership lost");
        }
        lock.release().await;
    }
    let _ = server.await;
    tracing::info!("stopped");
    Ok(())
}

#[cfg(test)]
mod tests;
