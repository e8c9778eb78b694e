//! Agents: the registry of live agents (parents and children), the loop that runs their turns, and
//! the model providers that answer them.

pub mod approval;
mod children;
mod error;
mod guard;
mod live;
mod meta;
pub mod model;
pub mod openai;
pub mod provider;
mod registry;
pub mod scripted;
mod services;
mod streams;
mod turn;
pub mod watch;

pub use approval::{ApprovalAnswer, ApprovalRule};
pub use live::{Agent, AgentStatus};
pub use model::{InvalidModel, ModelChoice, ProviderFactory, UnusableModel};
pub use registry::{AgentError, AgentRegistry, TurnHandle, Unsaved};
pub use services::{
    AgentLimits, AgentServices, ApprovalSettings, BASE_SYSTEM_PROMPT, CheckpointPolicy,
    DEFAULT_APPROVAL_TIMEOUT, DEFAULT_WATCH_MAX_PENDING,
};
pub use turn::TurnOutcome;
pub use watch::{EventFilter, FilterError, PENDING_TEXT_BUDGET, StreamEvent, WatchScope, Watcher};
