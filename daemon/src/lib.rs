//! The dsh daemon: the gRPC server around [`dsh_core`]. The `dshd` binary only parses flags, sets
//! up logging and calls [`server::run`].
//!
//! This crate owns the edge: configuration, the socket, connections, the access log and `rpc/`,
//! which translates between protocol types and the core's. The core cannot name any of it (it
//! does not depend on this crate, tonic or `dsh-proto`). See `docs/ARCHITECTURE.md`.

pub mod access_log;
pub mod backends;
pub mod config;
pub mod confined_clients;
pub mod connection;
pub mod daemon;
pub mod model_key;
pub mod open_files;
pub mod peer;
pub mod rpc;
pub mod server;
pub mod socket;
