//! Sessions: ids, the immutable header, the event vocabulary, the in-memory log, the history
//! derived from it, and the repair of a turn left open by a crash (CONTRACTS §4).

mod event;
mod event_de;
mod header;
pub mod history;
mod id;
mod log;
mod meta;
pub mod repair;
mod settings;
#[cfg(test)]
pub(crate) mod strategies;

pub use event::{
    AbortCause, AssistantMessage, Event, EventData, MessageSource, ToolCallRequest, TurnEndReason,
    Usage, UserMessage,
};
pub use header::{FORMAT_VERSION, HeaderError, Origin, SessionHeader, validate_cwd};
pub use id::{MAX_ID_BYTES, SessionId, SessionIdError};
pub use log::{LogError, SessionLog, check_contiguous, completed_prefix_len, fork_points, nearest};
pub use meta::{
    MAX_TITLE_CHARS, MetaBuilder, SessionMeta, TitleError, check_title, title_of_prompt,
};
pub use settings::{
    AgentSettings, ApprovalClient, ApprovalPolicy, ApprovalScope, ApprovalSource, ApprovalVerdict,
    recorded_settings,
};

/// Now, in Unix milliseconds (0 if the clock is before 1970): the clock of event times and
/// headers, owned here so the core depends on nothing above it for the time.
pub fn now_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}
