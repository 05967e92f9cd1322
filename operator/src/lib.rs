//! Weir's Kubernetes operator: reconciles `StreamJob` and `Savepoint` resources and drives the
//! Weir runtime through its control API.
//!
//! Layout follows a reconcile: [`crd`] (the resource types) → [`lifecycle`] (pure decisions).

#![deny(missing_docs)]

pub mod build;
pub mod control;
pub mod controller;
pub mod crd;
pub mod lifecycle;
pub mod metrics;
pub mod snapshots;
