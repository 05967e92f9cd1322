//! The job secret: one shared value per job that the control API takes as a bearer token and
//! workers prove knowledge of when they connect (see [`super::handshake`]). It is read from a
//! file (`--secret-file` / `WEIR_JOB_SECRET_FILE`; in Kubernetes a mounted Secret), never from a
//! command-line value, so it does not show up in `ps` or in a pod spec.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use subtle::ConstantTimeEq;

/// Where `weir run`, `weir coordinator`, `weir worker` and `weir savepoint trigger` look for the
/// job secret when neither `--secret-file` nor `WEIR_JOB_SECRET_FILE` is given (relative to the
/// working directory, next to the default `./weir-data/checkpoints`). `weir run` and
/// `weir coordinator` create it (mode 0600) when it does not exist.
pub const DEFAULT_SECRET_FILE: &str = "weir-data/job.secret";

/// Fewest bytes a secret may have (a generated one has 64: 32 random bytes in hex).
pub const MIN_SECRET_BYTES: usize = 16;

/// Most bytes a secret may have.
pub const MAX_SECRET_BYTES: usize = 4096;

/// How to make a good secret, for error messages.
pub const HOW_TO_MAKE_ONE: &str = "create one with `openssl rand -hex 32 > FILE && chmod 600 FILE`";

/// A job secret: printable ASCII without whitespace, 16 to 4096 bytes. `Debug` never shows it.
#[derive(Clone, PartialEq, Eq)]
pub struct JobSecret(Arc<str>);

impl std::fmt::Debug for JobSecret {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("JobSecret(<redacted>)")
    }
}

impl JobSecret {
    /// Parses a secret file's content: surrounding whitespace (a trailing newline) is dropped.
    /// Errors name `source` and say what is wrong (too short, too long, a byte that cannot go
    /// in an HTTP header).
    pub fn parse(text: &str, source: &str) -> Result<JobSecret, String> {
        let s = text.trim();
        if s.len() < MIN_SECRET_BYTES {
            return Err(format!(
                "{source}: the job secret has {} bytes, fewer than {MIN_SECRET_BYTES}; {HOW_TO_MAKE_ONE}",
                s.len()
            ));
        }
        if s.len() > MAX_SECRET_BYTES {
            return Err(format!(
                "{source}: the job secret has {} bytes, more than {MAX_SECRET_BYTES}",
                s.len()
            ));
        }
        if let Some(at) = s.bytes().position(|b| !b.is_ascii_graphic()) {
            return Err(format!(
                "{source}: the job secret holds a byte at offset {at} that is not printable ASCII \
                 (it is sent as an HTTP bearer token); {HOW_TO_MAKE_ONE}"
            ));
        }
        Ok(JobSecret(Arc::from(s)))
    }

    /// A new random secret: 32 bytes from the OS random generator, in hex.
    pub fn generate() -> JobSecret {
        let bytes: [u8; 32] = rand::random();
        let hex: String = bytes.iter().map(|b| format!("{b:02x}")).collect();
        JobSecret(Arc::from(hex.as_str()))
    }

    /// Reads the secret file at `path`. Errors name the file and what to do.
    pub fn load(path: &Path) -> Result<JobSecret, String> {
        let text = std::fs::read_to_string(path).map_err(|e| {
            format!(
                "job secret file {}: cannot read it: {e}; give the job's secret file with --secret-file or \
                 WEIR_JOB_SECRET_FILE ({HOW_TO_MAKE_ONE})",
                path.display()
            )
        })?;
        JobSecret::parse(&text, &format!("job secret file {}", path.display()))
    }

    /// Reads the secret at `path`, or, when the file does not exist, generates one and writes
    /// it there with mode 0600 (creating the directory). Returns the secret and whether it was
    /// created. Two processes racing to create it end up with the same secret: the file
    /// appears whole (written aside, then hard-linked in place) or not at all.
    pub fn load_or_create(path: &Path) -> Result<(JobSecret, bool), String> {
        if path.exists() {
            return JobSecret::load(path).map(|s| (s, false));
        }
        let secret = JobSecret::generate();
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let write = || -> std::io::Result<bool> {
            std::fs::create_dir_all(dir)?;
            let aside = dir.join(format!(".job-secret-{:016x}", rand::random::<u64>()));
            write_private(&aside, secret.0.as_bytes())?;
            let linked = std::fs::hard_link(&aside, path);
            let _ = std::fs::remove_file(&aside);
            match linked {
                Ok(()) => Ok(true),
                Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => Ok(false),
                Err(e) => Err(e),
            }
        };
        match write() {
            Ok(true) => Ok((secret, true)),
            Ok(false) => JobSecret::load(path).map(|s| (s, false)),
            Err(e) => Err(format!(
                "job secret file {}: cannot create it: {e}; give a writable path with --secret-file or \
                 WEIR_JOB_SECRET_FILE",
                path.display()
            )),
        }
    }

    /// The secret's bytes (the HMAC key).
    pub fn as_bytes(&self) -> &[u8] {
        self.0.as_bytes()
    }

    /// The secret as a string (the bearer token a client sends).
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// Whether `token` is this secret, compared in constant time for equal lengths.
    pub fn matches_token(&self, token: &str) -> bool {
        self.0.as_bytes().ct_eq(token.as_bytes()).into()
    }
}

/// The secret file to use: the one given (`--secret-file` / `WEIR_JOB_SECRET_FILE`), else
/// [`DEFAULT_SECRET_FILE`]; and whether it was given.
pub fn secret_path(given: Option<&Path>) -> (PathBuf, bool) {
    match given {
        Some(p) => (p.to_path_buf(), true),
        None => (PathBuf::from(DEFAULT_SECRET_FILE), false),
    }
}

/// How the serving commands (`weir run`, `weir coordinator`) get their secret: a given file
/// must exist; the default file is created when missing. Logs which file holds it (never the
/// secret itself).
pub fn for_server(given: Option<&Path>) -> Result<JobSecret, String> {
    let (path, explicit) = secret_path(given);
    if explicit {
        let s = JobSecret::load(&path)?;
        tracing::info!(target: "weir", "job secret from {}", path.display());
        return Ok(s);
    }
    let (s, created) = JobSecret::load_or_create(&path)?;
    tracing::info!(
        target: "weir",
        "job secret in {} ({}); `weir savepoint trigger` run from this directory reads it, other control API \
         clients send it as `Authorization: Bearer <content of the file>`",
        path.display(),
        if created { "generated, mode 0600" } else { "existing file" }
    );
    Ok(s)
}

/// How the client commands (`weir worker`, `weir savepoint trigger`) get their secret: the
/// given or default file must exist. The error says what to pass.
pub fn for_client(given: Option<&Path>) -> Result<JobSecret, String> {
    let (path, explicit) = secret_path(given);
    if !explicit && !path.exists() {
        return Err(format!(
            "no job secret: {} does not exist; pass the job's secret file with --secret-file or \
             WEIR_JOB_SECRET_FILE (the file `weir run` / `weir coordinator` named in its log)",
            path.display()
        ));
    }
    JobSecret::load(&path)
}

#[cfg(unix)]
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    use std::io::Write;
    use std::os::unix::fs::OpenOptionsExt;
    let mut f = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(path)?;
    f.write_all(bytes)?;
    f.write_all(b"\n")?;
    f.sync_all()
}

#[cfg(not(unix))]
fn write_private(path: &Path, bytes: &[u8]) -> std::io::Result<()> {
    std::fs::write(path, [bytes, b"\n"].concat())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_secret_file_is_trimmed_and_checked() {
        for (text, ok) in [
            ("0123456789abcdef\n", true),
            ("  0123456789abcdef  ", true),
            ("short\n", false),
            ("0123456789 abcdef", false),
            ("0123456789abcdé", false),
            (&"x".repeat(MAX_SECRET_BYTES + 1), false),
        ] {
            let r = JobSecret::parse(text, "f");
            assert_eq!(r.is_ok(), ok, "{text:?}: {r:?}");
            if let Err(e) = r {
                assert!(e.starts_with("f: "), "{e}");
            }
        }
        assert_eq!(
            JobSecret::parse("0123456789abcdef\n", "f").unwrap().expose(),
            "0123456789abcdef"
        );
    }

    #[test]
    fn only_the_same_token_matches_and_debug_hides_the_secret() {
        let s = JobSecret::parse("0123456789abcdef", "f").unwrap();
        assert!(s.matches_token("0123456789abcdef"));
        assert!(!s.matches_token("0123456789abcdeF"));
        assert!(!s.matches_token("0123456789abcde"));
        assert!(!s.matches_token(""));
        assert_eq!(format!("{s:?}"), "JobSecret(<redacted>)");
    }

    #[test]
    fn generated_secrets_differ_and_parse() {
        let (a, b) = (JobSecret::generate(), JobSecret::generate());
        assert_ne!(a, b);
        assert_eq!(a.expose().len(), 64);
        assert_eq!(JobSecret::parse(a.expose(), "g").unwrap(), a);
    }

    #[test]
    fn the_default_file_is_created_private_once_and_then_reused() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("weir-data/job.secret");
        let (first, created) = JobSecret::load_or_create(&path).unwrap();
        assert!(created);
        let (again, created_again) = JobSecret::load_or_create(&path).unwrap();
        assert!(!created_again);
        assert_eq!(first, again);
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
            assert_eq!(mode, 0o600);
        }
        let leftovers = std::fs::read_dir(path.parent().unwrap()).unwrap().count();
        assert_eq!(leftovers, 1, "only the secret file remains");
    }

    #[test]
    fn a_missing_given_file_is_an_error_naming_it() {
        let e = for_client(Some(Path::new("/nonexistent/weir.secret"))).unwrap_err();
        assert!(
            e.contains("/nonexistent/weir.secret") && e.contains("--secret-file"),
            "{e}"
        );
        let e = for_server(Some(Path::new("/nonexistent/weir.secret"))).unwrap_err();
        assert!(e.contains("/nonexistent/weir.secret"), "{e}");
    }
}
