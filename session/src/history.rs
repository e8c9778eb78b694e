//! The model's conversation history, derived from the session log (never stored separately).

use std::sync::Arc;

use super::{Event, EventData, MessageSource, ToolCallRequest};

/// The plugin name project instructions are sent under, as a user message of their own.
pub const INSTRUCTIONS_PLUGIN: &str = "instructions";

/// One message of the history sent to a model.
#[derive(Debug, Clone, PartialEq)]
pub enum HistoryMessage {
    /// A user-role message: a prompt or plugin context.
    User {
        /// The text.
        text: String,
        /// Who wrote it.
        source: MessageSource,
    },
    /// What the model said and which tools it called.
    Assistant {
        /// The text.
        text: String,
        /// Tool calls, in the model's order.
        tool_calls: Vec<ToolCallRequest>,
    },
    /// A tool call's result.
    ToolResult {
        /// The call answered.
        call_id: String,
        /// The result text.
        content: String,
        /// True when the call failed.
        is_error: bool,
    },
}

/// A live session's history, kept up to date incrementally. Deriving the whole history for every
/// model request made each step cost in proportion to the turn so far; instead only the events
/// appended since the last request are projected, and each request shares the result (an `Arc`
/// that is extended in place once the previous request has been dropped).
#[derive(Debug, Default)]
pub struct HistoryCache {
    /// Events already projected (a prefix of the append-only log).
    derived: usize,
    messages: Arc<Vec<HistoryMessage>>,
}

impl HistoryCache {
    /// The history of `events`, which must extend the events seen before (a session's log only
    /// grows); a shorter log starts the cache afresh.
    pub fn update(&mut self, events: &[Event]) -> Arc<Vec<HistoryMessage>> {
        if events.len() < self.derived {
            *self = Self::default();
        }
        let new = derive(&events[self.derived..]);
        if !new.is_empty() {
            Arc::make_mut(&mut self.messages).extend(new);
        }
        self.derived = events.len();
        self.messages.clone()
    }
}

/// Projects the log's user, assistant and tool-result events to messages, in order.
pub fn derive(events: &[Event]) -> Vec<HistoryMessage> {
    events
        .iter()
        .filter_map(|event| match &event.data {
            EventData::UserMessage { message } => Some(HistoryMessage::User {
                text: message.text.clone(),
                source: message.source.clone(),
            }),
            EventData::AssistantMessage { message, .. } => Some(HistoryMessage::Assistant {
                text: message.text.clone(),
                tool_calls: message.tool_calls.clone(),
            }),
            EventData::Instructions { text, .. } if !text.is_empty() => {
                Some(HistoryMessage::User {
                    text: text.clone(),
                    source: MessageSource::Plugin {
                        plugin: INSTRUCTIONS_PLUGIN.to_owned(),
                    },
                })
            }
            EventData::ToolResult {
                call_id,
                content,
                is_error,
                ..
            } => Some(HistoryMessage::ToolResult {
                call_id: call_id.clone(),
                content: content.clone(),
                is_error: *is_error,
            }),
            _ => None,
        })
        .collect()
}
