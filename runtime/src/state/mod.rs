pub mod heap;
pub mod incremental;
pub mod key_group;
pub mod keyed_block;
pub mod snapshot;
pub mod ttl;
