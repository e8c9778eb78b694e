//! Following agents live: any number of watchers, each with its own bounded queue, each told of
//! every event of the agents it follows — logged or streamed — in the one vocabulary of the log.
//!
//! Agents publish to the [`hub`](hub::WatchHub) as they append to their logs and stream text; a
//! watcher ([`Watcher`]) reads logged events from the logs themselves (so nothing logged is
//! copied for it), keeps a cursor per session (so nothing is handed out twice or skipped), and
//! when it falls too far behind it is told (`watch/lagged`) and catches up from the logs: the
//! live agent's in memory, a closed one's from the store. The `Agents.Prompt` stream is a watcher
//! of the prompted agent and its descendants that ends with the turn; `Agents.Watch` and
//! `Persistence.ReadEvents` in follow mode are watchers too.

mod filter;
pub(crate) mod hub;
mod queue;
mod watcher;

use std::borrow::Cow;

use serde::Serialize;

pub use filter::EventFilter;
pub use queue::PENDING_TEXT_BUDGET;
pub use watcher::Watcher;

use crate::agent::live::Agent;
pub(crate) use crate::agent::live::Preview;
use dsh_session::{Lagged, LiveEvent, ModelRetry, SessionId, TextDelta, ToolOutput};

/// Type of the unlogged event carrying streamed model text.
pub(crate) const TEXT_DELTA: &str = LiveEvent::TEXT_DELTA;
/// Type of the unlogged event carrying streamed model reasoning.
pub(crate) const THOUGHT_DELTA: &str = LiveEvent::THOUGHT_DELTA;
/// Type of the unlogged event carrying a tool call's output as its command produces it.
pub(crate) const TOOL_OUTPUT: &str = LiveEvent::TOOL_OUTPUT;
/// Type of the unlogged event telling that a model request failed and waits to be retried.
pub(crate) const MODEL_RETRY: &str = LiveEvent::MODEL_RETRY;
/// Type of the unlogged event telling a watcher it fell behind and is catching up from the log.
#[cfg(test)]
pub(crate) const LAGGED: &str = LiveEvent::LAGGED;

/// Who a watcher is, as far as approvals care: an approval request whose agent no person watches
/// is denied at once rather than left to wait out its timeout, and only a person can answer one
/// (`Agents.Approve` is refused to anything a command of dshd's started).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchedBy {
    /// A client outside every command dshd started: it counts as watching.
    Person,
    /// A client inside a command dshd started (confined or not), or one that cannot be placed:
    /// it sees the events, but the agent counts as unwatched.
    Command,
}

/// Which agents a watcher follows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum WatchScope {
    /// One agent.
    Agent(SessionId),
    /// An agent and its descendants (the children it spawns, theirs, ...).
    Tree(SessionId),
    /// Every agent.
    All,
}

impl WatchScope {
    /// Whether `agent` is followed.
    pub(crate) fn covers(&self, agent: &Agent) -> bool {
        match self {
            Self::Agent(id) => agent.id() == id,
            Self::Tree(id) => agent.lineage().contains(id),
            Self::All => true,
        }
    }
}

/// One event as a watcher hands it out: an event of the log's vocabulary, or an unlogged one
/// (`text/delta`, `tool/output`, `watch/lagged`), naming the session (= agent) it belongs to. Its JSON form
/// ([`to_json`](Self::to_json)) is the log line plus `sessionId`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StreamEvent {
    /// The session (and agent) the event belongs to.
    pub session: SessionId,
    /// The event's type, e.g. `turn/start`, `text/delta`.
    /// (`Cow`: an event type this dshd does not know is named by the log, not by the vocabulary.)
    pub kind: Cow<'static, str>,
    /// The seq of a logged event; `None` for an unlogged one.
    pub seq: Option<u64>,
    /// Unix milliseconds: when it was logged, or streamed.
    pub time: i64,
    /// The event's data object as JSON text (for a logged event, exactly its `data` in the log).
    pub data_json: String,
}

impl StreamEvent {
    /// The JSON form: `{"type", "sessionId", "seq" (logged events only), "time", "data"}`.
    pub fn to_json(&self) -> String {
        let mut out = String::with_capacity(self.data_json.len() + 128);
        out.push_str("{\"type\":");
        out.push_str(&json_string(&self.kind));
        out.push_str(",\"sessionId\":");
        out.push_str(&json_string(self.session.as_str()));
        if let Some(seq) = self.seq {
            out.push_str(&format!(",\"seq\":{seq}"));
        }
        out.push_str(&format!(",\"time\":{},\"data\":", self.time));
        out.push_str(&self.data_json);
        out.push('}');
        out
    }

    /// A `text/delta` or `thought/delta` event (`what` is a step's text or reasoning), a `tool/output` event (a call's output)
    /// or a `model/retry` event, written with the session vocabulary's own types.
    pub(crate) fn preview(
        session: SessionId,
        time: i64,
        what: &Preview,
        offset: u64,
        text: &str,
    ) -> Self {
        let event = match what {
            Preview::Retry {
                turn,
                step,
                attempt,
                delay_ms,
                reason,
            } => LiveEvent::ModelRetry(ModelRetry {
                turn: *turn,
                step: *step,
                attempt: *attempt,
                delay_ms: *delay_ms,
                reason: Cow::Borrowed(reason),
            }),
            Preview::Text { turn, step } => LiveEvent::TextDelta(TextDelta {
                turn: *turn,
                step: *step,
                offset,
                text: Cow::Borrowed(text),
            }),
            Preview::Thought { turn, step } => LiveEvent::ThoughtDelta(TextDelta {
                turn: *turn,
                step: *step,
                offset,
                text: Cow::Borrowed(text),
            }),
            Preview::Output {
                turn,
                step,
                call_id,
                stream,
            } => LiveEvent::ToolOutput(ToolOutput {
                turn: *turn,
                step: *step,
                call_id: Cow::Borrowed(call_id),
                stream: *stream,
                offset,
                text: Cow::Borrowed(text),
            }),
        };
        Self::live(session, time, &event)
    }

    /// A `watch/lagged` event: events of `session` from `from_seq` on are re-read from the log.
    pub(crate) fn lagged(session: SessionId, from_seq: u64) -> Self {
        let event = LiveEvent::Lagged(Lagged { from_seq });
        Self::live(session, dsh_session::now_ms(), &event)
    }

    fn live(session: SessionId, time: i64, event: &LiveEvent<'_>) -> Self {
        Self {
            session,
            kind: Cow::Borrowed(event.type_name()),
            seq: None,
            time,
            data_json: event.data_json(),
        }
    }

    /// A logged event of `session`.
    pub fn logged(session: SessionId, event: &dsh_session::Event) -> Self {
        Self {
            session,
            kind: match event.data.known_type_name() {
                Some(name) => Cow::Borrowed(name),
                None => Cow::Owned(event.data.type_name().to_owned()),
            },
            seq: Some(event.seq),
            time: event.time,
            data_json: event.data_json(),
        }
    }
}

fn json_string(text: &str) -> String {
    to_json_text(&text)
}

fn to_json_text<T: Serialize + ?Sized>(value: &T) -> String {
    // Serialising plain structs and strings into a String cannot fail.
    serde_json::to_string(value).unwrap_or_else(|_| "null".to_owned())
}

#[cfg(test)]
mod tests;
