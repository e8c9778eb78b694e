//! Agents: the registry of live agents (parents and children), the loop that runs their turns, and
//! the model providers that answer them.

mod children;
mod feed;
mod live;
pub mod model;
pub mod openai;
pub mod provider;
mod registry;
pub mod scripted;
mod services;
mod turn;

pub use feed::{PENDING_TEXT_BUDGET, TurnFeed, TurnUpdate};
pub use live::{Agent, AgentStatus};
pub use model::{InvalidModel, ModelChoice, ProviderFactory};
pub use registry::{AgentError, AgentRegistry, TurnHandle, Unsaved};
pub use services::{AgentLimits, AgentServices, BASE_SYSTEM_PROMPT, CheckpointPolicy};
pub use turn::TurnOutcome;
