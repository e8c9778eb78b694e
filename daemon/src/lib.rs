//! dsh daemon library: all of the daemon's behaviour. The `dshd` binary only parses flags, sets up
//! logging and calls [`server::run`].
//!
//! Dependency rule: the core modules never import `rpc`, `server` or `dsh_proto`; protocol types stop
//! at `rpc/`. See `docs/ARCHITECTURE.md`.

pub mod access_log;
pub mod agent;
pub mod config;
pub mod connection;
pub mod daemon;
pub mod exec;
pub use dsh_paths::home;
pub mod hooks;
mod layering;
pub mod persistence;
pub mod rpc;
pub mod server;
pub mod session;
pub mod shell_env;
pub mod skills;
pub mod socket;
#[cfg(any(test, feature = "test-support"))]
pub mod test_support;
pub mod tools;
