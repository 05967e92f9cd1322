pub mod key_group;
