//! The local scratch directory of the disk state backend.
//!
//! Layout: `<root>/<job>-<run>/<operator uid>-<subtask>/`, one LSM store per subtask and
//! stateful step. `<root>` is `weir run --state-dir` / `weir worker --state-dir` (env
//! `WEIR_STATE_DIR`), by default `<system temp dir>/weir-state-<uid>`; in a pod the operator mounts an
//! emptyDir there. Everything below it is scratch: a store is recreated empty on every start
//! (the checkpoint is the source of truth) and deleted when its subtask ends. A process killed
//! with `kill -9` cannot delete its directories, so each run directory holds the pid of the
//! process that owns it and a token drawn once per process (`owner.pid`), and a starting
//! process deletes the run directories whose owner is no longer alive ([`sweep_stale`]). An
//! owner is alive while it holds the `flock` of its lock file `<root>/.owners/<token>.lock`
//! (the kernel releases it when the process ends, kill -9 included), which holds across pid
//! namespaces (containers sharing a host directory, where a pid names another process or none);
//! an owner without a lock file (written before 2026-12-06) is judged by its pid.

use std::path::{Path, PathBuf};
use std::sync::OnceLock;
use std::time::Duration;

/// The environment variable naming the root directory (also read by `--state-dir`).
pub const STATE_DIR_ENV: &str = "WEIR_STATE_DIR";

/// The file in a run directory naming the process that owns it: `<pid> <token>`.
pub const OWNER_FILE: &str = "owner.pid";

/// The owner of a run directory: pid and a random token drawn once per process, so a new
/// process that got the same pid (a container restarted in its pod is pid 1 again) is told
/// apart from the one that wrote the directory.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Owner {
    /// Process id.
    pub pid: u32,
    /// Random per process.
    pub token: u64,
}

impl Owner {
    /// This process.
    pub fn this_process() -> Owner {
        static TOKEN: OnceLock<u64> = OnceLock::new();
        Owner {
            pid: std::process::id(),
            token: *TOKEN.get_or_init(rand::random),
        }
    }

    /// Parses the owner file's text (`<pid> <token>`); `None` if it is not that.
    pub fn parse(text: &str) -> Option<Owner> {
        let mut parts = text.split_whitespace();
        let owner = Owner {
            pid: parts.next()?.parse().ok()?,
            token: parts.next()?.parse().ok()?,
        };
        parts.next().is_none().then_some(owner)
    }
}

/// The directory under the root holding one lock file per process that owns run directories
/// there: `<token>.lock`, locked (`flock`) for the process's lifetime.
pub const OWNER_LOCKS_DIR: &str = ".owners";

/// The lock files this process holds, by root: open (so locked) until the process ends.
static HELD_LOCKS: std::sync::Mutex<Vec<(PathBuf, std::fs::File)>> = std::sync::Mutex::new(Vec::new());

/// Takes this process's owner lock under `root` ([`OWNER_LOCKS_DIR`]) unless it holds it
/// already. Errors: the lock file cannot be created or locked.
fn hold_own_lock(root: &Path) -> std::io::Result<()> {
    let mut held = HELD_LOCKS.lock().unwrap_or_else(|e| e.into_inner());
    if held.iter().any(|(r, _)| r == root) {
        return Ok(());
    }
    let dir = root.join(OWNER_LOCKS_DIR);
    std::fs::create_dir_all(&dir)?;
    let file = std::fs::File::create(dir.join(format!("{}.lock", Owner::this_process().token)))?;
    file.try_lock().map_err(|e| match e {
        std::fs::TryLockError::Error(e) => e,
        std::fs::TryLockError::WouldBlock => std::io::Error::other("this process's owner lock is held by another"),
    })?;
    held.push((root.to_path_buf(), file));
    Ok(())
}

/// Whether the owner `token` of a run directory under `root` is alive, from its lock file:
/// `Some(true)` while a process holds it, `Some(false)` once none does (the owner ended),
/// `None` without a lock file (an owner of an older release: [`is_stale`] decides by pid).
pub fn owner_lock_alive(root: &Path, token: u64) -> Option<bool> {
    let file = std::fs::File::open(root.join(OWNER_LOCKS_DIR).join(format!("{token}.lock"))).ok()?;
    match file.try_lock_shared() {
        Ok(()) => Some(false),
        Err(std::fs::TryLockError::WouldBlock) => Some(true),
        // Cannot tell: count it alive (a kept directory only costs disk).
        Err(std::fs::TryLockError::Error(_)) => Some(true),
    }
}

/// The root directory: `explicit` if given, else [`default_root`].
pub fn root(explicit: Option<&Path>) -> PathBuf {
    explicit.map(Path::to_path_buf).unwrap_or_else(default_root)
}

/// The default root: `<system temp dir>/weir-state-<effective uid>` on Unix, one per user of a
/// shared machine (before 2026-12-06 all users shared `<temp>/weir-state`: the first user's
/// directory refused the others' runs and let them read its state). Created private (mode
/// 0700) and refused when another user owns it or it is not a directory
/// ([`check_default_root`]). `<system temp dir>/weir-state` elsewhere.
pub fn default_root() -> PathBuf {
    #[cfg(unix)]
    {
        // SAFETY: geteuid has no preconditions and cannot fail.
        let uid = unsafe { libc::geteuid() };
        std::env::temp_dir().join(format!("weir-state-{uid}"))
    }
    #[cfg(not(unix))]
    {
        std::env::temp_dir().join("weir-state")
    }
}

/// Checks the root `root` before a directory is made in it: the default root
/// ([`default_root`]) is created private to this user and refused when it is not a directory
/// of this user; a root given by `--state-dir` or [`STATE_DIR_ENV`] is the user's choice (a
/// pod's volume is owned by root and shared through its group) and is taken as it is. Errors
/// name the directory and the way out.
pub fn prepare_root(root: &Path) -> Result<(), String> {
    if root == default_root() {
        check_default_root(root)?;
    }
    Ok(())
}

/// Creates the default root `root` private to this user (mode 0700) if it is missing, and
/// refuses one that is not a directory of this user (a symbolic link, or another user's: it
/// could read or replace this user's state). Errors name the directory and the way out.
#[cfg(unix)]
fn check_default_root(root: &Path) -> Result<(), String> {
    // SAFETY: as in `default_root`.
    check_private_root(root, unsafe { libc::geteuid() })
}

/// [`check_default_root`] for the user `uid`.
#[cfg(unix)]
fn check_private_root(root: &Path, uid: u32) -> Result<(), String> {
    use std::os::unix::fs::{DirBuilderExt, MetadataExt};
    match std::fs::DirBuilder::new().mode(0o700).create(root) {
        Ok(()) => {}
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {}
        Err(e) => {
            return Err(format!(
                "disk state backend: cannot create {}: {e}; point --state-dir (or {STATE_DIR_ENV}) at a writable \
                 directory",
                root.display()
            ));
        }
    }
    let metadata = std::fs::symlink_metadata(root).map_err(|e| format!("{}: {e}", root.display()))?;
    if !metadata.is_dir() || metadata.uid() != uid {
        return Err(format!(
            "disk state backend: the default state directory {} is not a directory of this user (uid {uid}; it is \
             {} owned by uid {}): remove it, or point --state-dir (or {STATE_DIR_ENV}) at a directory of your own",
            root.display(),
            if metadata.file_type().is_symlink() {
                "a symbolic link"
            } else if metadata.is_dir() {
                "a directory"
            } else {
                "a file"
            },
            metadata.uid()
        ));
    }
    // This user's directory open to others (made by hand, or by a release before 2026-12-06
    // that did not make it private): closed.
    if metadata.mode() & 0o077 != 0 {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(root, std::fs::Permissions::from_mode(0o700)).map_err(|e| {
            format!(
                "disk state backend: cannot make the default state directory {} private: {e}; point --state-dir \
                 (or {STATE_DIR_ENV}) at a directory of your own",
                root.display()
            )
        })?;
        tracing::info!(dir = %root.display(), "made the default state directory private to this user (mode 0700)");
    }
    Ok(())
}

#[cfg(not(unix))]
fn check_default_root(_root: &Path) -> Result<(), String> {
    Ok(())
}

/// The directory of one run (`<root>/<job>-<run>`), where `run` is the run id (and, in the
/// distributed runtime, the deployment attempt). Both are generated names without `/`.
pub fn run_dir(root: &Path, job: &str, run: &str) -> PathBuf {
    root.join(format!("{job}-{run}"))
}

/// The store directory of subtask `subtask` of step `uid` in `run_dir`.
pub fn store_dir(run_dir: &Path, uid: &str, subtask: u32) -> PathBuf {
    run_dir.join(format!("{uid}-{subtask}"))
}

/// Whether a run directory whose owner file says `owner` (`None`: missing or unreadable) is
/// stale for the process `own`, given whether a pid is alive: its owner is dead, or its pid is
/// ours but its token is not (an earlier process with our pid). A directory without an owner
/// file is left alone (not ours, or being created right now), and so are our own.
pub fn is_stale(owner: Option<Owner>, own: Owner, alive: impl Fn(u32) -> bool) -> bool {
    match owner {
        None => false,
        Some(o) if o.pid == own.pid => o.token != own.token,
        Some(o) => !alive(o.pid),
    }
}

/// Whether process `pid` exists (Linux: `/proc/<pid>`; elsewhere every process counts as
/// alive, so nothing is swept).
pub fn process_alive(pid: u32) -> bool {
    if cfg!(target_os = "linux") {
        Path::new("/proc").join(pid.to_string()).exists()
    } else {
        true
    }
}

/// Deletes the run directories under `root` left by dead processes ([`is_stale`]); returns
/// the ones deleted. A missing `root` is not an error; a directory that cannot be deleted is
/// skipped with a warning (it only costs disk).
pub fn sweep_stale(root: &Path) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(root) else {
        return Vec::new();
    };
    let own = Owner::this_process();
    let mut removed = Vec::new();
    let mut ended_tokens = std::collections::BTreeSet::new();
    for entry in entries.flatten() {
        let dir = entry.path();
        let owner = std::fs::read_to_string(dir.join(OWNER_FILE))
            .ok()
            .and_then(|s| Owner::parse(&s));
        let by_lock = owner
            .filter(|o| o.token != own.token)
            .and_then(|o| owner_lock_alive(root, o.token).map(|alive| (o.token, alive)));
        let stale = match by_lock {
            Some((token, alive)) => {
                if !alive {
                    ended_tokens.insert(token);
                }
                !alive
            }
            None => is_stale(owner, own, process_alive),
        };
        if stale {
            match std::fs::remove_dir_all(&dir) {
                Ok(()) => removed.push(dir),
                Err(e) => tracing::warn!(dir = %dir.display(), "cannot delete stale disk state: {e}"),
            }
        }
    }
    for token in ended_tokens {
        let _ = std::fs::remove_file(root.join(OWNER_LOCKS_DIR).join(format!("{token}.lock")));
    }
    removed
}

/// Prepares the run directory `dir` for this process: sweeps stale siblings, then creates
/// `dir` with its owner file. Errors: the directory or the file cannot be written, naming it
/// and the flag that chooses it.
pub fn prepare_run_dir(dir: &Path) -> Result<(), String> {
    if let Some(root) = dir.parent() {
        prepare_root(root)?;
        for removed in sweep_stale(root) {
            tracing::info!(dir = %removed.display(), "deleted disk state of a run that is gone");
        }
    }
    let err = |e: std::io::Error| {
        // A file where a directory of the path should be: name it (found by trial: the OS's
        // "Not a directory" named the run directory, not the file in its way).
        let why = match dir.ancestors().skip(1).find(|a| a.is_file()) {
            Some(file) => format!("{} is a file, so no directory can be created under it", file.display()),
            None => e.to_string(),
        };
        format!(
            "disk state backend: cannot write {}: {why}; point --state-dir (or {STATE_DIR_ENV}) at a writable directory",
            dir.display()
        )
    };
    std::fs::create_dir_all(dir).map_err(err)?;
    write_owner_file(dir).map_err(err)
}

/// Writes this process's owner file into `dir` (which must exist): a directory directly under
/// the root holding it is swept by a later process once this one is gone ([`sweep_stale`]), as
/// a run directory is (a native checkpoint's download directory, `checkpoint/native_upload.rs`).
/// Errors: the file cannot be written.
pub fn write_owner_file(dir: &Path) -> std::io::Result<()> {
    if let Some(root) = dir.parent() {
        hold_own_lock(root)?;
    }
    let owner = Owner::this_process();
    std::fs::write(dir.join(OWNER_FILE), format!("{} {}", owner.pid, owner.token))
}

/// Removes the run directory `dir` if it holds nothing but its owner file ([`OWNER_FILE`]):
/// an attempt's directory once its stores are deleted. A directory still holding a store (one
/// closing on another thread) stays, as does a missing one. Returns whether it removed `dir`.
pub fn remove_if_only_owner(dir: &Path) -> bool {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    let mut names = entries.flatten().map(|e| e.file_name());
    let only_owner = matches!((names.next(), names.next()), (Some(name), None) if name == OWNER_FILE);
    only_owner && std::fs::remove_dir_all(dir).is_ok()
}

/// How long [`remove_once_only_owner`] waits for a cancelled attempt's stores to close: an
/// encoder thread still uploading the attempt's last checkpoint holds its store until it is
/// done (seconds, under load), and the store's directory is deleted when the last holder drops
/// it.
pub const CLOSING_STORES_WAIT: Duration = Duration::from_secs(120);

/// How often [`remove_once_only_owner`] looks again.
const CLOSING_STORES_POLL: Duration = Duration::from_millis(100);

/// [`remove_if_only_owner`] for up to `wait`, looking again every 100 ms while `dir` still
/// holds anything but its owner file (a store closing on another thread). Returns whether it
/// removed `dir`; a missing `dir` (an attempt that kept no state on disk) is `false` at once,
/// and so is one still holding more after `wait` (the next process's sweep removes it).
pub async fn remove_once_only_owner(dir: &Path, wait: Duration) -> bool {
    let deadline = tokio::time::Instant::now() + wait;
    loop {
        if !dir.exists() {
            return false;
        }
        if remove_if_only_owner(dir) {
            return true;
        }
        if tokio::time::Instant::now() >= deadline {
            return false;
        }
        tokio::time::sleep(CLOSING_STORES_POLL).await;
    }
}

/// Removes a run directory when dropped, unless [`RemoveOnFailure::keep`] was called: a
/// deployment that fails after its restore put stores there (a native checkpoint's fast
/// restore, `checkpoint/native_restore.rs`) removes them at once. The next start's sweep
/// would not: the directory's owner file names this process, which lives on (a worker).
pub struct RemoveOnFailure(Option<PathBuf>);

impl RemoveOnFailure {
    /// Guards `dir`.
    pub fn new(dir: &Path) -> RemoveOnFailure {
        RemoveOnFailure(Some(dir.to_path_buf()))
    }

    /// The start succeeded: the directory stays.
    pub fn keep(mut self) {
        self.0 = None;
    }
}

impl Drop for RemoveOnFailure {
    fn drop(&mut self) {
        if let Some(dir) = self.0.take() {
            let _ = std::fs::remove_dir_all(dir);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A state dir under a file names the file in the way.
    #[test]
    fn a_run_directory_under_a_file_names_the_file() {
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("afile");
        std::fs::write(&file, b"x").unwrap();
        let e = prepare_run_dir(&file.join("sub").join("job-run")).unwrap_err();
        assert!(
            e.contains(&format!(
                "{} is a file, so no directory can be created under it",
                file.display()
            )) && e.contains("--state-dir"),
            "{e}"
        );
    }

    /// The default root is made private to its user (created so, or closed when open to
    /// others), and refused naming itself and the way out when it is a symbolic link, a file,
    /// or another user's directory (any of which another user of the machine could have put
    /// there first).
    #[cfg(unix)]
    #[test]
    fn the_default_root_is_private_to_its_user() {
        use std::os::unix::fs::{MetadataExt, PermissionsExt};
        let scratch = tempfile::tempdir().unwrap();
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        let fresh = scratch.path().join("weir-state-fresh");
        check_private_root(&fresh, uid).unwrap();
        let metadata = std::fs::metadata(&fresh).unwrap();
        assert_eq!(metadata.permissions().mode() & 0o777, 0o700, "created private");
        assert_eq!(metadata.uid(), uid);
        check_private_root(&fresh, uid).expect("an existing directory of this user is taken");
        std::fs::set_permissions(&fresh, std::fs::Permissions::from_mode(0o755)).unwrap();
        check_private_root(&fresh, uid).expect("one open to others is taken");
        let mode = std::fs::metadata(&fresh).unwrap().permissions().mode();
        assert_eq!(mode & 0o777, 0o700, "and made private");

        let link = scratch.path().join("weir-state-link");
        std::os::unix::fs::symlink(&fresh, &link).unwrap();
        let file = scratch.path().join("weir-state-file");
        std::fs::write(&file, b"").unwrap();
        for (root, as_uid, what) in [
            (&link, uid, "a symbolic link"),
            (&file, uid, "a file"),
            (&fresh, uid.wrapping_add(1), "a directory"),
        ] {
            let error = check_private_root(root, as_uid).expect_err(what);
            assert!(
                error.contains(&root.display().to_string())
                    && error.contains(&format!("it is {what} owned by uid"))
                    && error.contains("--state-dir"),
                "{what}: {error}"
            );
        }
    }

    /// A failed start removes its directory; a kept one stays.
    #[test]
    fn a_failed_start_removes_its_directory() {
        let root = tempfile::tempdir().unwrap();
        let (failed, started) = (root.path().join("failed"), root.path().join("started"));
        for dir in [&failed, &started] {
            std::fs::create_dir_all(dir.join("counts-0")).unwrap();
        }
        drop(RemoveOnFailure::new(&failed));
        RemoveOnFailure::new(&started).keep();
        assert!(!failed.exists());
        assert!(started.join("counts-0").exists());
    }

    /// An attempt's directory is removed once only its owner file is left, never before.
    #[test]
    fn a_run_directory_holding_only_its_owner_file_is_removed() {
        let root = tempfile::tempdir().unwrap();
        let (done, busy) = (run_dir(root.path(), "job", "a1"), run_dir(root.path(), "job", "a2"));
        prepare_run_dir(&done).unwrap();
        prepare_run_dir(&busy).unwrap();
        std::fs::create_dir_all(store_dir(&busy, "counts", 0)).unwrap();
        assert!(remove_if_only_owner(&done) && !done.exists());
        assert!(!remove_if_only_owner(&busy) && busy.join(OWNER_FILE).exists());
        assert!(!remove_if_only_owner(&root.path().join("missing")));
        std::fs::remove_file(busy.join(OWNER_FILE)).unwrap();
        assert!(!remove_if_only_owner(&busy), "a store without the owner file stays");
        assert!(busy.exists());
    }

    /// A run directory whose store closes later (on another thread) is removed once it has,
    /// within the wait; one whose store stays is left after the wait; a missing one is not
    /// waited for.
    #[tokio::test]
    async fn a_run_directory_is_removed_once_its_closing_store_is_gone() {
        let root = tempfile::tempdir().unwrap();
        let (closing, kept) = (run_dir(root.path(), "job", "a1"), run_dir(root.path(), "job", "a2"));
        for dir in [&closing, &kept] {
            prepare_run_dir(dir).unwrap();
            std::fs::create_dir_all(store_dir(dir, "counts", 0)).unwrap();
        }
        let store = store_dir(&closing, "counts", 0);
        let closer = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            std::fs::remove_dir_all(store).unwrap();
        });
        assert!(remove_once_only_owner(&closing, Duration::from_secs(30)).await);
        assert!(!closing.exists());
        closer.join().unwrap();
        let started = std::time::Instant::now();
        assert!(!remove_once_only_owner(&kept, Duration::from_millis(250)).await);
        assert!(
            started.elapsed() >= Duration::from_millis(250),
            "waited before giving up"
        );
        assert!(store_dir(&kept, "counts", 0).exists());
        let started = std::time::Instant::now();
        assert!(!remove_once_only_owner(&root.path().join("missing"), Duration::from_secs(30)).await);
        assert!(
            started.elapsed() < Duration::from_secs(1),
            "a missing directory is not waited for"
        );
    }

    #[test]
    fn stale_table() {
        let alive = |pid: u32| pid == 10 || pid == 7;
        let own = Owner { pid: 7, token: 1 };
        let rows = [
            (None, false),
            (Some(Owner { pid: 7, token: 1 }), false),
            (Some(Owner { pid: 7, token: 2 }), true),
            (Some(Owner { pid: 10, token: 1 }), false),
            (Some(Owner { pid: 11, token: 1 }), true),
        ];
        for (owner, want) in rows {
            assert_eq!(is_stale(owner, own, alive), want, "{owner:?}");
        }
        assert_eq!(Owner::parse("12 34\n"), Some(Owner { pid: 12, token: 34 }));
        assert_eq!(Owner::parse("12"), None);
        assert_eq!(Owner::parse("12 34 56"), None);
    }

    #[test]
    fn sweep_deletes_dead_owners_only() {
        let root = tempfile::tempdir().unwrap();
        let mine = run_dir(root.path(), "job", "mine");
        prepare_run_dir(&mine).unwrap();
        // A pid above Linux's pid_max (2^22) is never alive.
        let dead = run_dir(root.path(), "job", "dead");
        std::fs::create_dir_all(dead.join("count-0")).unwrap();
        std::fs::write(dead.join(OWNER_FILE), "99999999 5").unwrap();
        let foreign = root.path().join("not-a-run");
        std::fs::create_dir_all(&foreign).unwrap();
        let removed = sweep_stale(root.path());
        assert_eq!(removed, vec![dead.clone()]);
        assert!(!dead.exists() && foreign.exists() && mine.exists());
        assert_eq!(sweep_stale(&root.path().join("missing")), Vec::<PathBuf>::new());
    }

    /// The owner lock decides over the pid when there is one: a run directory of a live owner
    /// in another pid namespace (its pid dead or another process here) is kept while its lock
    /// is held, and one whose lock nobody holds is deleted even when its pid names a live
    /// process here (pid 1). helper-101 (2026-12-06): a second `weir` sharing the state dir
    /// from another pid namespace deleted a running job's stores.
    #[test]
    fn the_owner_lock_tells_live_owners_across_pid_namespaces() {
        let root = tempfile::tempdir().unwrap();
        let locks = root.path().join(OWNER_LOCKS_DIR);
        std::fs::create_dir_all(&locks).unwrap();
        // Another namespace's live process: pid not alive here, lock held.
        let held = std::fs::File::create(locks.join("5.lock")).unwrap();
        held.lock().unwrap();
        let live = run_dir(root.path(), "job", "live-elsewhere");
        std::fs::create_dir_all(live.join("count-0")).unwrap();
        std::fs::write(live.join(OWNER_FILE), "99999999 5").unwrap();
        // An ended process whose pid (1) is alive here: its lock file is there, unheld.
        std::fs::File::create(locks.join("6.lock")).unwrap();
        let ended = run_dir(root.path(), "job", "ended");
        std::fs::create_dir_all(ended.join("count-0")).unwrap();
        std::fs::write(ended.join(OWNER_FILE), "1 6").unwrap();
        assert_eq!(owner_lock_alive(root.path(), 5), Some(true));
        assert_eq!(owner_lock_alive(root.path(), 6), Some(false));
        assert_eq!(owner_lock_alive(root.path(), 7), None);
        let removed = sweep_stale(root.path());
        assert_eq!(removed, vec![ended.clone()]);
        assert!(live.exists() && !ended.exists());
        assert!(
            !locks.join("6.lock").exists(),
            "the ended owner's lock file goes with it"
        );
        // This process's own directories take its lock, which another process's sweep sees held.
        let mine = run_dir(root.path(), "job", "mine");
        prepare_run_dir(&mine).unwrap();
        assert_eq!(owner_lock_alive(root.path(), Owner::this_process().token), Some(true));
        drop(held);
        assert_eq!(sweep_stale(root.path()), vec![live.clone()]);
        assert!(mine.exists());
    }
}
