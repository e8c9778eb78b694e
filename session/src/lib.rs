//! The session vocabulary dshd and its clients share: ids, the immutable header, the event
//! vocabulary and its `{type, seq, time, data}` envelope, the approval and sandbox terms events
//! carry, the in-memory log, the history and metadata derived from it, and the repair of a turn
//! left open by a crash (docs/CONTRACTS.md §4), and the unlogged events streams carry besides
//! ([`LiveEvent`]). A client decodes an event's JSON into [`EventData`] or [`LiveEvent`] once and
//! matches on it, so a new event type is a compile error in every client, not a blank line.
//!
//! Only serde, serde_json, uuid and thiserror: nothing of the daemon's runtime, storage or
//! server, so the thin client links it without them.

mod approval;
pub mod compaction;
mod event;
mod event_de;
mod file;
mod header;
pub mod history;
mod id;
mod live;
mod log;
mod meta;
mod plan;
pub mod repair;
mod rules;
mod sandbox;
mod settings;
#[cfg(any(test, feature = "strategies"))]
pub mod strategies;

pub use approval::{
    ApprovalClient, ApprovalPolicy, ApprovalScope, ApprovalSource, ApprovalVerdict,
};
pub use compaction::CompactionTrigger;
pub use event::{
    AbortCause, AssistantMessage, Event, EventData, HookConfinement, MessageSource,
    ToolCallRequest, TurnEndReason, Usage, UserMessage,
};
pub use file::{FileToolKind, InstructionFile, ProposedChange};
pub use header::{
    AgentSettings, FORMAT_VERSION, HeaderError, Origin, ReasoningEffort, SessionHeader,
    validate_cwd,
};
pub use id::{SessionId, SessionIdError};
pub use live::{Lagged, LiveEvent, ModelRetry, OutputStream, TextDelta, ToolOutput};
pub use log::{LogError, SessionLog, check_contiguous, completed_prefix_len, fork_points, nearest};
pub use meta::{MAX_TITLE_CHARS, MetaBuilder, SessionMeta, TitleError, check_title};
pub use plan::{Plan, PlanStatus, PlanStep, UPDATE_PLAN};
pub use rules::{ApprovalRule, approval_rules};
pub use sandbox::{LooserPolicy, Network, SandboxMode, SandboxPolicy, UnknownName};
pub use settings::{recorded_sandbox, recorded_settings};

/// Now, in Unix milliseconds (0 if the clock is before 1970): the clock of event times and
/// headers, owned here so the core depends on nothing above it for the time.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
