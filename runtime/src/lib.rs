//! Weir's stream runtime: a keyed dataflow with Flink-style asynchronous barrier snapshotting,
//! savepoints and rescale-on-restore by key group.

pub mod control;
pub mod job;
pub mod record;
pub mod state;
pub mod storage;
