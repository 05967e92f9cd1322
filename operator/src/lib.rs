//! Weir's Kubernetes operator: reconciles `StreamJob` and `Savepoint` resources and drives the
//! Weir runtime through its control API.
//!
//! Layout follows a reconcile: [`crd`] (the resource types) → [`controller`] observes (through
//! [`control`] and [`snapshots`]) → [`lifecycle`] decides (pure) → [`build`] builds every child
//! (pure) → [`controller`] applies and writes status. [`run`] wires leader election, watches,
//! [`metrics`] and health endpoints.

#![deny(missing_docs)]

pub mod build;
pub mod cli;
pub mod control;
pub mod controller;
pub mod crd;
pub mod lifecycle;
pub mod metrics;
pub mod run;
pub mod snapshots;
