pub mod api;
pub mod client;
pub mod server;
