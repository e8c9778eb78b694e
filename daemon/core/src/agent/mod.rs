//! Agents: the registry of live agents (parents and children), the loop that runs their turns, and
//! the model providers that answer them.

mod answers;
mod approval;
mod background;
mod children;
pub(crate) mod compaction;
mod configure;
mod error;
mod fork;
pub(crate) mod gauge;
mod guard;
mod hook_run;
pub(crate) mod instructions;
mod live;
mod meta;
pub(crate) mod model;
pub(crate) mod openai;
pub(crate) mod provider;
mod publish;
mod reconfigure;
mod registry;
pub(crate) mod scripted;
mod services;
mod streams;
mod turn;
pub(crate) mod watch;

pub use answers::ApprovalAnswer;
pub use configure::SettingsChange;
pub use live::{Agent, AgentStatus};
pub use model::{ModelChoice, ModelList, ModelSource, ProviderFactory};
pub use registry::{AgentError, AgentRegistry, Unsaved};
pub use services::{
    AgentLimits, AgentServices, ApprovalSettings, CheckpointPolicy, DEFAULT_APPROVAL_TIMEOUT,
    DEFAULT_WATCH_MAX_PENDING,
};
pub use services::{CompactionSettings, InstructionSettings};
pub use watch::{EventFilter, PENDING_TEXT_BUDGET, StreamEvent, WatchScope, WatchedBy, Watcher};
