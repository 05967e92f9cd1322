//! Helpers shared by the integration tests.

// Each test binary compiles this module and uses a different subset of it.
#![allow(dead_code)]

pub mod moto;
