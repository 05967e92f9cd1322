//! Who may control a job and join it (issue 15): one secret per job
//! ([`secret::JobSecret`]) that the control API requires as a bearer token
//! ([`crate::control::auth`]) and that workers prove they hold with an HMAC challenge-response
//! when they connect to the coordinator or to each other ([`handshake`]). Refusals are counted
//! and logged once per peer ([`refusals`]). See docs/operations/security.md.

pub mod handshake;
pub mod refusals;
pub mod secret;
