//! moto (`pip install 'moto[server]'`) as the soak's S3: one server per soak run, one bucket
//! per trial, with the fault proxy in front of it for the `weir` processes. Committed output
//! is read from moto directly, never through the proxy.

use crate::procs::free_port;
use crate::proxy::Proxy;
use std::path::Path;
use std::process::Stdio;
use std::time::{Duration, Instant};
use tokio::process::{Child, Command};
use weir_runtime::storage::{self, S3Options, StaticCredentials};

/// A running moto server and the fault proxy in front of it.
pub struct S3Env {
    _moto: Child,
    endpoint: String,
    /// The fault proxy the `weir` processes talk to.
    pub proxy: Proxy,
    http: reqwest::Client,
}

impl S3Env {
    /// Starts moto on a free port (`moto_server`, else `python3 -m moto.server`), logging to
    /// `dir/moto.log`, and the proxy in front of it.
    pub async fn start(dir: &Path) -> Result<S3Env, String> {
        let port = free_port().map_err(|e| format!("finding a free port for moto: {e}"))?;
        let log = std::fs::File::create(dir.join("moto.log")).map_err(|e| format!("creating moto.log: {e}"))?;
        let args = ["-H", "127.0.0.1", "-p", &port.to_string()];
        let spawn = |program: &str, pre: &[&str]| {
            Command::new(program)
                .args(pre)
                .args(args)
                .stdin(Stdio::null())
                .stdout(log.try_clone().map(Stdio::from).unwrap_or(Stdio::null()))
                .stderr(log.try_clone().map(Stdio::from).unwrap_or(Stdio::null()))
                .kill_on_drop(true)
                .spawn()
        };
        let mut moto = spawn("moto_server", &[])
            .or_else(|_| spawn("python3", &["-m", "moto.server"]))
            .map_err(|e| format!("starting moto ({e}): pip install 'moto[server]>=5.2.5'"))?;
        let endpoint = format!("http://127.0.0.1:{port}");
        let http = reqwest::Client::new();
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if http.get(format!("{endpoint}/moto-api/")).send().await.is_ok() {
                break;
            }
            if let Ok(Some(st)) = moto.try_wait() {
                return Err(format!(
                    "moto exited during startup ({st}); see {}/moto.log",
                    dir.display()
                ));
            }
            if Instant::now() > deadline {
                return Err(format!("moto did not answer on {endpoint} within 60 s"));
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        let proxy = Proxy::start(&endpoint)
            .await
            .map_err(|e| format!("starting the fault proxy: {e}"))?;
        Ok(S3Env {
            _moto: moto,
            endpoint,
            proxy,
            http,
        })
    }

    /// Creates `bucket` on moto (moto does not check signatures: a plain PUT does it).
    pub async fn create_bucket(&self, bucket: &str) -> Result<(), String> {
        let r = self
            .http
            .put(format!("{}/{bucket}", self.endpoint))
            .send()
            .await
            .map_err(|e| format!("creating bucket {bucket}: {e}"))?;
        if r.status().is_success() {
            Ok(())
        } else {
            Err(format!("creating bucket {bucket}: HTTP {}", r.status()))
        }
    }

    /// Environment for `weir` processes: static test credentials, the proxy as endpoint,
    /// path-style addressing, no shared AWS config files.
    pub fn child_env(&self) -> Vec<(String, String)> {
        [
            ("AWS_ACCESS_KEY_ID", "testing".to_string()),
            ("AWS_SECRET_ACCESS_KEY", "testing".to_string()),
            ("AWS_REGION", "us-east-1".to_string()),
            ("AWS_ENDPOINT_URL", self.proxy.endpoint()),
            ("AWS_CONFIG_FILE", "/dev/null".to_string()),
            ("AWS_SHARED_CREDENTIALS_FILE", "/dev/null".to_string()),
            ("WEIR_S3_PATH_STYLE", "true".to_string()),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v))
        .collect()
    }

    /// Every line of every object under `s3://bucket/output/`, read from moto directly.
    pub async fn committed_lines(&self, bucket: &str) -> Result<Vec<String>, String> {
        let opts = S3Options {
            endpoint: Some(self.endpoint.clone()),
            region: Some("us-east-1".into()),
            path_style: true,
            credentials: Some(StaticCredentials {
                access_key_id: "testing".into(),
                secret_access_key: "testing".into(),
                session_token: None,
            }),
        };
        let store = storage::open(&format!("s3://{bucket}"), &opts)
            .await
            .map_err(|e| format!("opening s3://{bucket}: {e}"))?;
        let mut lines = vec![];
        for o in store
            .list("output/")
            .await
            .map_err(|e| format!("listing output: {e}"))?
        {
            let bytes = store
                .get(&o.path)
                .await
                .map_err(|e| format!("reading {}: {e}", o.path))?;
            lines.extend(String::from_utf8_lossy(&bytes).lines().map(str::to_string));
        }
        Ok(lines)
    }
}
