//! Sessions: ids, the immutable header, the event vocabulary, the in-memory log, the history
//! derived from it, and the repair of a turn left open by a crash (CONTRACTS §4).

mod approval;
mod event;
mod event_de;
mod header;
pub(crate) mod history;
mod id;
mod log;
mod meta;
pub(crate) mod repair;
mod settings;
#[cfg(test)]
pub(crate) mod strategies;

pub(crate) use approval::ApprovalSource;
pub use approval::{ApprovalClient, ApprovalPolicy, ApprovalScope, ApprovalVerdict};
pub(crate) use event::{AbortCause, HookConfinement, Usage};
pub use event::{
    AssistantMessage, Event, EventData, MessageSource, ToolCallRequest, TurnEndReason, UserMessage,
};
pub(crate) use header::AgentSettings;
pub(crate) use header::{FORMAT_VERSION, HeaderError, validate_cwd};
pub use header::{Origin, SessionHeader};
pub use id::SessionId;
pub use log::SessionLog;
#[cfg(test)]
pub(crate) use log::check_contiguous;
pub(crate) use log::{completed_prefix_len, fork_points, nearest};
pub use meta::SessionMeta;
pub(crate) use meta::{MetaBuilder, TitleError, check_title};
pub(crate) use settings::recorded_settings;

/// Now, in Unix milliseconds (0 if the clock is before 1970): the clock of event times and
/// headers, owned here so the core depends on nothing above it for the time.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
