//! The challenge-response every connection between Weir processes starts with (worker →
//! coordinator RPC, worker → worker data): the accepting side sends a fresh 32-byte random
//! nonce; the connecting side answers with its role, its id and
//! `HMAC-SHA256(job secret, nonce || role || 0x00 || peer id)` (RFC 2104); the accepting side
//! checks the MAC in constant time and replies `Accepted`, or closes the connection. Nothing
//! else is read from a connection before that. The secret never crosses the wire, and a fresh
//! nonce per connection makes a recorded answer useless.
//!
//! This authenticates the connecting side only; the connection is not encrypted (see
//! docs/operations/security.md).

use super::secret::JobSecret;
use crate::cluster::wire::{Conn, recv, send};
use hmac::{KeyInit, Mac};
use serde::{Deserialize, Serialize};
use std::time::Duration;

type HmacSha256 = hmac::Hmac<sha2::Sha256>;

/// Role of a worker connecting to the coordinator's RPC port.
pub const ROLE_WORKER_RPC: &str = "worker-rpc";
/// Role of a worker opening a data channel to another worker.
pub const ROLE_WORKER_DATA: &str = "worker-data";

/// Bytes of the nonce.
pub const NONCE_BYTES: usize = 32;

/// How long either side waits for the other's handshake frame.
pub const HANDSHAKE_TIMEOUT: Duration = Duration::from_secs(10);

/// Handshake frames (JSON, on the length-delimited [`Conn`]).
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
pub enum Handshake {
    /// Accepting side → connecting side: prove you hold the job secret.
    Challenge {
        /// [`NONCE_BYTES`] random bytes.
        nonce: Vec<u8>,
    },
    /// Connecting side → accepting side.
    Answer {
        /// [`ROLE_WORKER_RPC`] or [`ROLE_WORKER_DATA`].
        role: String,
        /// The worker id.
        peer_id: String,
        /// `HMAC-SHA256(secret, nonce || role || 0x00 || peer_id)`, 32 bytes.
        mac: Vec<u8>,
    },
    /// Accepting side: the answer is right; the protocol proper follows.
    Accepted,
}

fn keyed(secret: &JobSecret, nonce: &[u8], role: &str, peer_id: &str) -> HmacSha256 {
    let mut mac = <HmacSha256 as KeyInit>::new_from_slice(secret.as_bytes()).expect("HMAC takes keys of any length");
    mac.update(nonce);
    mac.update(role.as_bytes());
    mac.update(&[0]);
    mac.update(peer_id.as_bytes());
    mac
}

/// The answer to `nonce` for `role` and `peer_id`.
pub fn answer_mac(secret: &JobSecret, nonce: &[u8], role: &str, peer_id: &str) -> Vec<u8> {
    keyed(secret, nonce, role, peer_id).finalize().into_bytes().to_vec()
}

/// Whether `mac` answers `nonce` for `role` and `peer_id` under `secret` (constant time).
pub fn verify_mac(secret: &JobSecret, nonce: &[u8], role: &str, peer_id: &str, mac: &[u8]) -> bool {
    keyed(secret, nonce, role, peer_id).verify_slice(mac).is_ok()
}

/// Accepting side: challenges the peer and checks its answer for `role`. Returns the peer's
/// id; the error (for the refusal log) says what was wrong, never anything secret.
pub async fn accept(conn: &mut Conn, secret: &JobSecret, role: &str) -> Result<String, String> {
    let nonce: [u8; NONCE_BYTES] = rand::random();
    send(conn, &Handshake::Challenge { nonce: nonce.to_vec() }).await?;
    let answer = tokio::time::timeout(HANDSHAKE_TIMEOUT, recv::<Handshake>(conn))
        .await
        .map_err(|_| format!("no handshake answer within {HANDSHAKE_TIMEOUT:?}"))?;
    match answer {
        Ok(Some(Handshake::Answer {
            role: their_role,
            peer_id,
            mac,
        })) => {
            if their_role != role {
                return Err(format!(
                    "peer {peer_id:?} answered as {their_role:?}, expected {role:?}"
                ));
            }
            if !verify_mac(secret, &nonce, role, &peer_id, &mac) {
                return Err(format!("peer {peer_id:?} answered with a wrong job secret"));
            }
            send(conn, &Handshake::Accepted).await?;
            Ok(peer_id)
        }
        Ok(Some(other)) => Err(format!("unexpected handshake frame {}", frame_name(&other))),
        Ok(None) => Err("the peer closed the connection without answering".into()),
        Err(_) => Err("the peer did not start with the handshake (no authentication)".into()),
    }
}

/// Connecting side: answers the challenge as `role` / `peer_id`. Errors say whether the
/// accepting side refused the answer (a wrong secret) or the connection failed.
pub async fn connect(conn: &mut Conn, secret: &JobSecret, role: &str, peer_id: &str) -> Result<(), String> {
    let challenge = tokio::time::timeout(HANDSHAKE_TIMEOUT, recv::<Handshake>(conn))
        .await
        .map_err(|_| format!("no handshake challenge within {HANDSHAKE_TIMEOUT:?}"))?;
    let nonce = match challenge {
        Ok(Some(Handshake::Challenge { nonce })) if nonce.len() == NONCE_BYTES => nonce,
        Ok(Some(other)) => return Err(format!("unexpected handshake frame {}", frame_name(&other))),
        Ok(None) => return Err("the peer closed the connection before the handshake".into()),
        Err(e) => return Err(format!("the peer does not speak the handshake: {e}")),
    };
    let mac = answer_mac(secret, &nonce, role, peer_id);
    send(
        conn,
        &Handshake::Answer {
            role: role.to_string(),
            peer_id: peer_id.to_string(),
            mac,
        },
    )
    .await?;
    match tokio::time::timeout(HANDSHAKE_TIMEOUT, recv::<Handshake>(conn)).await {
        Ok(Ok(Some(Handshake::Accepted))) => Ok(()),
        Ok(Ok(None)) | Ok(Err(_)) => Err(
            "the peer refused this process's credentials and closed the connection: check that \
             --secret-file / WEIR_JOB_SECRET_FILE holds the job's secret"
                .into(),
        ),
        Ok(Ok(Some(other))) => Err(format!("unexpected handshake frame {}", frame_name(&other))),
        Err(_) => Err(format!("no handshake verdict within {HANDSHAKE_TIMEOUT:?}")),
    }
}

fn frame_name(h: &Handshake) -> &'static str {
    match h {
        Handshake::Challenge { .. } => "Challenge",
        Handshake::Answer { .. } => "Answer",
        Handshake::Accepted => "Accepted",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cluster::wire::framed;

    fn secret(s: &str) -> JobSecret {
        JobSecret::parse(s, "test").unwrap()
    }

    #[test]
    fn the_mac_matches_rfc_2104_hmac_sha256_and_binds_every_input() {
        // RFC 4231 test case 2 has a 4-byte key, shorter than a job secret; instead this pins
        // the value `openssl dgst -sha256 -hmac 0123456789abcdef` gives for
        // "nonce" || "worker-rpc" || 0x00 || "w1".
        let s = secret("0123456789abcdef");
        let mac = answer_mac(&s, b"nonce", "worker-rpc", "w1");
        let hex: String = mac.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, "7ce1587bbca108e43b78ddec8fc0e9dea15e11c96d460df3d3cce18053a00c71");
        assert!(verify_mac(&s, b"nonce", "worker-rpc", "w1", &mac));
        for (sec, nonce, role, id) in [
            ("0123456789abcdeX", "nonce", "worker-rpc", "w1"),
            ("0123456789abcdef", "nonce2", "worker-rpc", "w1"),
            ("0123456789abcdef", "nonce", "worker-data", "w1"),
            ("0123456789abcdef", "nonce", "worker-rpc", "w2"),
            ("0123456789abcdef", "nonce", "worker-rp", "cw1"),
        ] {
            assert!(
                !verify_mac(&secret(sec), nonce.as_bytes(), role, id, &mac),
                "{sec} {nonce} {role} {id}"
            );
        }
        assert!(!verify_mac(&s, b"nonce", "worker-rpc", "w1", &mac[..31]));
    }

    async fn pair() -> (Conn, Conn) {
        let l = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = l.local_addr().unwrap();
        let (client, server) = tokio::join!(tokio::net::TcpStream::connect(addr), l.accept());
        (framed(client.unwrap()), framed(server.unwrap().0))
    }

    #[tokio::test]
    async fn the_right_secret_is_accepted_and_a_wrong_one_refused() {
        let right = secret("0123456789abcdef");
        let (mut c, mut s) = pair().await;
        let (client, server) = tokio::join!(
            connect(&mut c, &right, ROLE_WORKER_RPC, "w1"),
            accept(&mut s, &right, ROLE_WORKER_RPC)
        );
        assert_eq!(client, Ok(()));
        assert_eq!(server, Ok("w1".to_string()));

        let (mut c, mut s) = pair().await;
        let wrong = secret("fedcba9876543210");
        let (client, server) = tokio::join!(connect(&mut c, &wrong, ROLE_WORKER_RPC, "w1"), async {
            let r = accept(&mut s, &right, ROLE_WORKER_RPC).await;
            drop(s);
            r
        });
        assert!(server.unwrap_err().contains("wrong job secret"));
        assert!(client.unwrap_err().contains("refused"));

        let (mut c, mut s) = pair().await;
        let (client, server) = tokio::join!(connect(&mut c, &right, ROLE_WORKER_DATA, "w1"), async {
            let r = accept(&mut s, &right, ROLE_WORKER_RPC).await;
            drop(s);
            r
        });
        assert!(server.unwrap_err().contains("expected \"worker-rpc\""));
        assert!(client.is_err());
    }
}
