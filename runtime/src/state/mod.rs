pub mod backend;
pub mod disk;
pub mod heap;
pub mod key_group;
pub mod keyed_block;
pub mod local_dir;
pub mod snapshot;
pub mod ttl;
