//! dsh's core: everything the daemon does, with no server attached. Sessions and their logs,
//! swappable persistence, the managed `DSH_*` environment, the executor, the model's tools, agents
//! and their turns, hooks and skills.
//!
//! The crate depends on neither tonic nor the protocol crate, so a protocol type cannot reach it;
//! `dsh-daemon` translates at its `rpc/` edge. Inside the crate the modules form a layered graph
//! with no circle (checked by `layers::tests`); see `docs/ARCHITECTURE.md`.

pub mod agent;
pub mod call;
pub mod exec;
pub use dsh_paths::home;
pub mod hooks;
mod layers;
pub mod persistence;
pub mod sandbox;
pub mod session;
pub mod shell;
pub mod shell_env;
pub mod skills;
#[cfg(any(test, feature = "test-support"))]
pub mod test_support;
pub mod tools;
