//! Choosing a loopback port for a process about to be started (tests, the chaos soak).

use std::collections::VecDeque;
use std::fs::{File, TryLockError};
use std::hash::{BuildHasher, Hasher};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

/// Lowest port of the range [`unused_loopback_port`] picks from.
const FIRST: u16 = 20_000;
/// Number of ports in that range: 20000–31999, below Linux's default ephemeral range
/// (32768–60999, `/proc/sys/net/ipv4/ip_local_port_range`).
const COUNT: u64 = 12_000;

/// The reservations this process holds: one locked file per port it handed out, kept open
/// (so locked), the newest [`MOST_HELD`] of them.
static HELD: Mutex<VecDeque<File>> = Mutex::new(VecDeque::new());

/// Most reservations a process holds; the oldest is released past it. A reservation only
/// has to last until the child binds its port (milliseconds to seconds), and a long chaos soak
/// picks thousands of ports: without a bound each would keep a file descriptor open.
const MOST_HELD: usize = 64;

/// A TCP port on 127.0.0.1 that no process is bound to, for a child process to bind.
///
/// Not from the kernel's ephemeral range: a port found by binding port 0 can be handed to
/// another process's outgoing connection before the child binds it ("Address already in
/// use", seen in CI). Below that range only another explicit bind can take it, and this
/// function binds it once to check that none has. Picks at random (std's `RandomState`
/// keys), and reserves each port it returns while the calling process lives (the newest
/// [`MOST_HELD`] of them): an exclusive lock on `<temp dir>/weir-port-reservations/<port>`
/// (`flock`), so no other caller, in this process or another (tests run side by side), gets
/// the same port while a child may still be starting to bind it (seen in CI before: a
/// cluster test's coordinator found its port taken). Where the lock file cannot be written the port is
/// returned unreserved, as before.
///
/// Errors: no bindable, unreserved port after 1,000 tries.
pub fn unused_loopback_port() -> std::io::Result<u16> {
    let candidates = std::iter::repeat_with(|| {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        FIRST + (hasher.finish() % COUNT) as u16
    });
    unused_port_of(candidates.take(1000), &reservation_dir())
        .ok_or_else(|| std::io::Error::other("no unused loopback port in 20000-31999"))
}

/// Where the reservations' lock files are: `weir-port-reservations` in the temp directory.
fn reservation_dir() -> PathBuf {
    std::env::temp_dir().join("weir-port-reservations")
}

/// The first of `candidates` that nobody has reserved under `dir` and that binds on
/// 127.0.0.1, reserved for the life of this process; `None` if none is.
fn unused_port_of(candidates: impl IntoIterator<Item = u16>, dir: &Path) -> Option<u16> {
    for port in candidates {
        let reservation = match reserve(dir, port) {
            Reservation::Held(file) => Some(file),
            Reservation::Taken => continue,
            Reservation::Unavailable => None,
        };
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            if let Some(file) = reservation {
                let mut held = HELD.lock().unwrap_or_else(|e| e.into_inner());
                if held.len() == MOST_HELD {
                    held.pop_front();
                }
                held.push_back(file);
            }
            return Some(port);
        }
    }
    None
}

/// The outcome of trying to reserve a port.
enum Reservation {
    /// Reserved: the locked file, to keep open while the port is in use.
    Held(File),
    /// Another holder (a live process, or another pick of this one) has it.
    Taken,
    /// The lock file cannot be created or locked here (read-only temp directory, a file
    /// system without locks): go on without a reservation.
    Unavailable,
}

/// Tries to lock `dir/<port>` exclusively without waiting.
fn reserve(dir: &Path, port: u16) -> Reservation {
    if std::fs::create_dir_all(dir).is_err() {
        return Reservation::Unavailable;
    }
    let Ok(file) = File::options()
        .create(true)
        .truncate(false)
        .write(true)
        .open(dir.join(port.to_string()))
    else {
        return Reservation::Unavailable;
    };
    match file.try_lock() {
        Ok(()) => Reservation::Held(file),
        Err(TryLockError::WouldBlock) => Reservation::Taken,
        Err(TryLockError::Error(_)) => Reservation::Unavailable,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_bindable_below_the_ephemeral_range_and_spread() {
        let ports: std::collections::BTreeSet<u16> = (0..50).map(|_| unused_loopback_port().unwrap()).collect();
        assert!(ports.iter().all(|p| (20_000..32_000).contains(p)), "{ports:?}");
        assert!(ports.len() > 40, "{} distinct of 50", ports.len());
        let port = *ports.first().unwrap();
        std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    }

    /// A port reserved by another holder (a lock on its file through another open file
    /// description, as another process's would be) is skipped, and a port handed out once
    /// is not handed out again while this process lives; a port another process is bound to
    /// is skipped too (ports 32101 and 32102: outside both the picked range and the
    /// kernel's ephemeral one, so nothing else binds them).
    #[test]
    fn a_reserved_or_bound_port_is_never_handed_out() {
        let dir = tempfile::tempdir().unwrap();
        let reserved = 32_101;
        let Reservation::Held(other_holder) = reserve(dir.path(), reserved) else {
            panic!("the test's reservation");
        };
        let bound = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let bound_port = bound.local_addr().unwrap().port();
        let free = 32_102;
        let first = unused_port_of([reserved, bound_port, free], dir.path());
        assert_eq!(first, Some(free));
        assert_eq!(unused_port_of([free, reserved], dir.path()), None, "both held");
        drop(other_holder);
        assert_eq!(unused_port_of([free, reserved], dir.path()), Some(reserved));
    }

    /// A process holds at most [`MOST_HELD`] reservations: past it the oldest is released
    /// (its port can be handed out again), so a long soak does not keep a file open per port.
    #[test]
    fn the_oldest_reservation_is_released_past_the_bound() {
        let dir = tempfile::tempdir().unwrap();
        let ports: Vec<u16> = (32_200..32_200 + MOST_HELD as u16 + 1).collect();
        for &port in &ports {
            assert_eq!(unused_port_of([port], dir.path()), Some(port));
        }
        assert_eq!(HELD.lock().unwrap().len(), MOST_HELD);
        assert!(
            matches!(reserve(dir.path(), ports[0]), Reservation::Held(_)),
            "released"
        );
        // The newest: other tests of this process (under `cargo test`) push 52 at most.
        let newest = *ports.last().unwrap();
        assert!(matches!(reserve(dir.path(), newest), Reservation::Taken), "still held");
    }
}
