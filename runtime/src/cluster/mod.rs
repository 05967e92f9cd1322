//! The distributed runtime: one coordinator process (Flink's JobManager role) and N worker
//! processes (TaskManager role), speaking the [`wire`] protocol. `weir run` stays the
//! single-process form of the same dataflow, checkpoint protocol and savepoint format.

pub mod coordinator;
pub mod data_channel;
pub mod failure;
pub mod fence;
pub mod liveness;
pub mod record_codec;
pub mod registry;
pub mod restart;
pub mod wire;
pub mod worker;
pub mod worker_health;
