pub mod key_group;
pub mod snapshot;
