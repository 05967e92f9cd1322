//! A moto S3 server for tests: started as a child process on a free loopback port with one
//! bucket created, and killed on drop.
//!
//! moto must be installed (`pip install 'moto[server]'`); when it is not, [`MotoServer::start`]
//! panics so the test fails instead of being skipped.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::Once;
use std::time::{Duration, Instant};

/// Access key moto accepts (it does not check credentials).
pub const ACCESS_KEY: &str = "testing";
/// Secret key moto accepts.
pub const SECRET_KEY: &str = "testing";
/// Region the bucket is created in.
pub const REGION: &str = "us-east-1";

const NOT_FOUND: &str = "moto_server not found: pip install 'moto[server]'";
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// A running moto server with one bucket.
pub struct MotoServer {
    child: Child,
    addr: SocketAddr,
    bucket: String,
    // Keeps the server's log file alive; its tail is shown when startup fails.
    _log_dir: tempfile::TempDir,
}

impl MotoServer {
    /// Starts moto on a free port of 127.0.0.1, waits until it answers HTTP and creates the
    /// bucket `weir-test`. Panics (failing the test) if moto is missing or does not start.
    pub fn start() -> MotoServer {
        Self::start_with_bucket("weir-test")
    }

    /// [`MotoServer::start`] with a chosen bucket name.
    pub fn start_with_bucket(bucket: &str) -> MotoServer {
        let program = find_moto().unwrap_or_else(|| panic!("{NOT_FOUND}"));
        // A port can be taken between probing it and moto binding it: retry on that.
        let mut last_err = String::new();
        for _ in 0..5 {
            let log_dir = tempfile::tempdir().expect("creating a temp dir for the moto log");
            let log_path = log_dir.path().join("moto.log");
            let log = std::fs::File::create(&log_path).expect("creating the moto log");
            let port = free_port();
            let mut cmd = program.command();
            cmd.args(["-H", "127.0.0.1", "-p", &port.to_string()])
                .stdin(Stdio::null())
                .stdout(log.try_clone().expect("cloning the moto log handle"))
                .stderr(log)
                .env("PYTHONUNBUFFERED", "1");
            let child = match cmd.spawn() {
                Ok(c) => c,
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => panic!("{NOT_FOUND}"),
                Err(e) => panic!("starting {program:?}: {e}"),
            };
            let addr = SocketAddr::from(([127, 0, 0, 1], port));
            let mut server = MotoServer {
                child,
                addr,
                bucket: bucket.to_string(),
                _log_dir: log_dir,
            };
            match server.wait_ready() {
                Ok(()) => {
                    server.create_bucket();
                    return server;
                }
                Err(e) => {
                    let log = log_tail(&log_path);
                    last_err = format!("{e}\n--- moto log ---\n{log}");
                    drop(server); // kills the child
                    if !log.contains("Address already in use") {
                        break;
                    }
                }
            }
        }
        panic!("moto_server did not start: {last_err}")
    }

    /// The server's endpoint URL, `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// The bucket created at startup.
    pub fn bucket(&self) -> &str {
        &self.bucket
    }

    /// Environment for a child process that should use this server through the default AWS
    /// credential chain and Weir's S3 settings.
    pub fn env(&self) -> Vec<(&'static str, String)> {
        vec![
            ("AWS_ACCESS_KEY_ID", ACCESS_KEY.to_string()),
            ("AWS_SECRET_ACCESS_KEY", SECRET_KEY.to_string()),
            ("AWS_REGION", REGION.to_string()),
            ("AWS_ENDPOINT_URL", self.endpoint()),
            ("WEIR_S3_PATH_STYLE", "true".to_string()),
        ]
    }

    /// Adds [`MotoServer::env`] to a command.
    pub fn apply_env<'a>(&self, cmd: &'a mut Command) -> &'a mut Command {
        cmd.envs(self.env())
    }

    fn wait_ready(&mut self) -> Result<(), String> {
        let deadline = Instant::now() + START_TIMEOUT;
        loop {
            if let Ok(Some(status)) = self.child.try_wait() {
                return Err(format!("moto_server exited during startup ({status})"));
            }
            if http(self.addr, "GET", "/moto-api/").is_ok() {
                return Ok(());
            }
            if Instant::now() > deadline {
                return Err(format!(
                    "moto_server did not answer on {} within {START_TIMEOUT:?}",
                    self.addr
                ));
            }
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    fn create_bucket(&self) {
        // moto does not check signatures, so a plain PUT creates the bucket.
        match http(self.addr, "PUT", &format!("/{}", self.bucket)) {
            Ok((200, _)) => {}
            Ok((code, body)) => panic!("creating bucket {} on moto: HTTP {code}: {body}", self.bucket),
            Err(e) => panic!("creating bucket {} on moto: {e}", self.bucket),
        }
    }
}

impl Drop for MotoServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Sets the static test credentials in this process's environment, once, so that
/// `S3Store::connect` (default credential chain) finds them without touching real AWS
/// configuration. All tests set the same values and do so before any AWS client is built.
pub fn init_test_credentials() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: the values are constants, set once under `Once` before any test builds a
        // client; std's env functions are serialized by an internal lock.
        unsafe {
            std::env::set_var("AWS_ACCESS_KEY_ID", ACCESS_KEY);
            std::env::set_var("AWS_SECRET_ACCESS_KEY", SECRET_KEY);
            // Keep shared config/credentials files of the machine out of the chain.
            std::env::set_var("AWS_CONFIG_FILE", "/dev/null");
            std::env::set_var("AWS_SHARED_CREDENTIALS_FILE", "/dev/null");
            std::env::remove_var("AWS_PROFILE");
            std::env::remove_var("AWS_SESSION_TOKEN");
        }
    });
}

/// A tokio runtime and the checkpoint store on `moto`'s bucket (path-style, the test
/// credentials), for tests that read what a `weir` child wrote there.
pub fn s3_store(moto: &MotoServer) -> (tokio::runtime::Runtime, weir_runtime::storage::Store) {
    init_test_credentials();
    let runtime = tokio::runtime::Runtime::new().unwrap();
    let options = weir_runtime::storage::S3Options {
        endpoint: Some(moto.endpoint()),
        region: Some(REGION.into()),
        path_style: true,
        credentials: None,
    };
    let store = runtime
        .block_on(weir_runtime::storage::open(
            &format!("s3://{}", moto.bucket()),
            &options,
        ))
        .unwrap();
    (runtime, store)
}

/// How to run moto.
#[derive(Debug)]
enum Moto {
    /// The `moto_server` script at this path.
    Script(PathBuf),
    /// `python3 -m moto.server`.
    Module(PathBuf),
}

impl Moto {
    fn command(&self) -> Command {
        match self {
            Moto::Script(p) => Command::new(p),
            Moto::Module(python) => {
                let mut c = Command::new(python);
                c.args(["-m", "moto.server"]);
                c
            }
        }
    }
}

/// Whether a moto server can be started (`moto_server` or moto's module is installed).
pub fn available() -> bool {
    find_moto().is_some()
}

fn find_moto() -> Option<Moto> {
    if let Some(p) = on_path("moto_server")
        && runs(Command::new(&p).arg("--help"))
    {
        return Some(Moto::Script(p));
    }
    for python in ["python3", "python"] {
        if let Some(p) = on_path(python)
            && runs(Command::new(&p).args(["-c", "import moto.server, flask, werkzeug"]))
        {
            return Some(Moto::Module(p));
        }
    }
    None
}

fn on_path(name: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|d| d.join(name))
        .find(|p| is_executable(p))
}

fn is_executable(p: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    p.metadata()
        .is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

/// Whether a command runs and exits successfully (pyenv shims exist for every installed
/// version's scripts, so presence on PATH is not enough).
fn runs(cmd: &mut Command) -> bool {
    cmd.stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
}

fn free_port() -> u16 {
    weir_runtime::ports::unused_loopback_port().expect("an unused loopback port")
}

/// A minimal HTTP/1.1 request; returns the status code and body.
fn http(addr: SocketAddr, method: &str, path: &str) -> std::io::Result<(u16, String)> {
    let mut s = TcpStream::connect_timeout(&addr, Duration::from_secs(1))?;
    s.set_read_timeout(Some(Duration::from_secs(10)))?;
    s.set_write_timeout(Some(Duration::from_secs(10)))?;
    write!(
        s,
        "{method} {path} HTTP/1.1\r\nHost: {addr}\r\nContent-Length: 0\r\nConnection: close\r\n\r\n"
    )?;
    let mut resp = String::new();
    s.read_to_string(&mut resp)?;
    let code = resp
        .strip_prefix("HTTP/1.")
        .and_then(|r| r.get(2..5))
        .and_then(|c| c.parse().ok())
        .ok_or_else(|| std::io::Error::other(format!("not an HTTP response: {resp:?}")))?;
    let body = resp
        .split_once("\r\n\r\n")
        .map(|(_, b)| b.to_string())
        .unwrap_or_default();
    Ok((code, body))
}

fn log_tail(path: &Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(30)..].join("\n")
}
