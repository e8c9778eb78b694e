//! The model's conversation history, derived from the session log (never stored separately).

use super::{Event, EventData, MessageSource, ToolCallRequest};

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
