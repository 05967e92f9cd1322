pub mod api;
pub mod auth;
pub mod client;
pub mod routes;
pub mod server;
