//! Weir's stream runtime: a keyed dataflow with Flink-style asynchronous barrier snapshotting,
//! savepoints and rescale-on-restore by key group.
//!
//! Data path: [`job`] (definition) → [`exec`] (stages of chained [`operators`], keyed exchange
//! by [`state::key_group`]) → [`checkpoint`] (barriers, coordinator, restore) → [`storage`].

pub mod checkpoint;
pub mod cli;
pub mod cli_checkpoints;
pub mod cli_control;
pub mod cli_input;
pub mod cli_inspect;
pub mod cli_list;
pub mod cli_parallelism;
pub mod cli_preflight;
pub mod cli_resume;
pub mod cluster;
pub mod control;
pub mod exec;
pub mod failpoint;
pub mod job;
pub mod logging;
pub mod metrics;
pub mod operators;
pub mod output;
pub mod ports;
pub mod record;
pub mod security;
pub mod signals;
pub mod state;
pub mod storage;
pub mod summary;
