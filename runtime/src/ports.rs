//! Choosing a loopback port for a process about to be started (tests, the chaos soak).

use std::hash::{BuildHasher, Hasher};

/// Lowest port of the range [`unused_loopback_port`] picks from.
const FIRST: u16 = 20_000;
/// Number of ports in that range: 20000–31999, below Linux's default ephemeral range
/// (32768–60999, `/proc/sys/net/ipv4/ip_local_port_range`).
const COUNT: u64 = 12_000;

/// A TCP port on 127.0.0.1 that no process is bound to, for a child process to bind.
///
/// Not from the kernel's ephemeral range: a port found by binding port 0 can be handed to
/// another process's outgoing connection before the child binds it ("Address already in
/// use", seen in CI). Below that range only another explicit bind can take it, and this
/// function binds it once to check that none has. Picks at random (std's `RandomState`
/// keys) so that concurrent callers rarely try the same port.
///
/// Errors: no bindable port after 1,000 tries.
pub fn unused_loopback_port() -> std::io::Result<u16> {
    for _ in 0..1000 {
        let mut hasher = std::collections::hash_map::RandomState::new().build_hasher();
        hasher.write_u32(std::process::id());
        let port = FIRST + (hasher.finish() % COUNT) as u16;
        if std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Err(std::io::Error::other("no unused loopback port in 20000-31999"))
}

#[cfg(test)]
mod tests {
    #[test]
    fn ports_are_bindable_below_the_ephemeral_range_and_spread() {
        let ports: std::collections::BTreeSet<u16> = (0..50).map(|_| super::unused_loopback_port().unwrap()).collect();
        assert!(ports.iter().all(|p| (20_000..32_000).contains(p)), "{ports:?}");
        assert!(ports.len() > 40, "{} distinct of 50", ports.len());
        let port = *ports.first().unwrap();
        std::net::TcpListener::bind(("127.0.0.1", port)).unwrap();
    }
}
