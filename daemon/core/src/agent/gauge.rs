//! How full an agent's context is: the bytes of a request, and how many tokens they are, learnt
//! from the provider's usage. Every estimate of the compaction and the turn is in these units.

use dsh_session::history::HistoryMessage;
use dsh_session::{ToolCallRequest, Usage};

use super::provider::ModelRequest;
use crate::call::ToolSchema;

/// Bytes for the JSON around one message or call.
const FRAME: usize = 32;

/// Bytes a message adds to a request: its text, its calls' names and arguments, and a little for
/// the JSON around them.
pub(crate) fn message_bytes(message: &HistoryMessage) -> u64 {
    match message {
        HistoryMessage::User { text, .. } => (text.len() + FRAME) as u64,
        HistoryMessage::Assistant { text, tool_calls } => assistant_bytes(text, tool_calls),
        HistoryMessage::ToolResult {
            call_id, content, ..
        } => (call_id.len() + content.len() + FRAME) as u64,
    }
}

/// [`message_bytes`] of an assistant message, from its parts (the log's event has them too).
pub(crate) fn assistant_bytes(text: &str, tool_calls: &[ToolCallRequest]) -> u64 {
    let calls: usize = tool_calls
        .iter()
        .map(|c| c.id.len() + c.name.len() + json_len(&c.arguments) + FRAME)
        .sum();
    (text.len() + calls + FRAME) as u64
}

/// The length of `value` as compact JSON, counted without building the text (every step
/// measures every call of the history).
fn json_len(value: &serde_json::Value) -> usize {
    struct Count(usize);
    impl std::io::Write for Count {
        fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
            self.0 += bytes.len();
            Ok(bytes.len())
        }
        fn flush(&mut self) -> std::io::Result<()> {
            Ok(())
        }
    }
    let mut count = Count(0);
    // Writing a `Value` to a writer that never fails cannot fail.
    let _ = serde_json::to_writer(&mut count, value);
    count.0
}

/// Bytes `messages` add to a request.
pub(crate) fn history_bytes(messages: &[HistoryMessage]) -> u64 {
    messages.iter().map(message_bytes).sum()
}

/// Tokens per byte before the provider has reported any usage: about four bytes a token.
const DEFAULT_TOKENS_PER_BYTE: f64 = 0.25;

/// How many tokens a request of so many bytes is, learnt from the provider's usage (its prompt
/// tokens for a request of known size), and how full the context was at the last request.
#[derive(Debug, Default)]
pub(crate) struct Gauge {
    tokens_per_byte: Option<f64>,
    used: u64,
}

impl Gauge {
    /// The estimated tokens of `bytes` of request.
    pub(crate) fn tokens(&self, bytes: u64) -> u64 {
        (bytes as f64 * self.tokens_per_byte.unwrap_or(DEFAULT_TOKENS_PER_BYTE)).ceil() as u64
    }

    /// The bytes `tokens` tokens are, by the same estimate.
    pub(crate) fn bytes(&self, tokens: u64) -> u64 {
        (tokens as f64 / self.tokens_per_byte.unwrap_or(DEFAULT_TOKENS_PER_BYTE)) as u64
    }

    /// A request of `bytes` bytes is about to be sent.
    pub(crate) fn sending(&mut self, bytes: u64) {
        self.used = self.tokens(bytes);
    }

    /// The provider reported `usage` for a request of `bytes` bytes: the ratio is learnt (within
    /// sane bounds, so a proxy's odd figure cannot make every estimate absurd).
    pub(crate) fn observe(&mut self, bytes: u64, usage: &Usage) {
        let prompt = usage.input_tokens + usage.cache_read_tokens.unwrap_or(0);
        if bytes > 0 && prompt > 0 {
            self.tokens_per_byte = Some((prompt as f64 / bytes as f64).clamp(0.05, 1.0));
        }
        self.used = prompt + usage.output_tokens;
    }

    /// Sets the context in use to `tokens` (a compaction shrank it).
    pub(crate) fn set_used(&mut self, tokens: u64) {
        self.used = tokens;
    }

    /// Tokens of the context in use at the last request (reported, or estimated).
    pub(crate) fn used(&self) -> u64 {
        self.used
    }
}

/// Bytes of `request`: its system prompt, tool schemas and history, by [`history_bytes`]'
/// measure.
pub(crate) fn request_bytes(request: &ModelRequest) -> u64 {
    overhead_bytes(&request.system, &request.tools) + history_bytes(&request.messages)
}

pub(crate) fn overhead_bytes(system: &str, tools: &[ToolSchema]) -> u64 {
    let tools: usize = tools
        .iter()
        .map(|t| t.name.len() + t.description.len() + t.parameters.to_string().len() + 64)
        .sum();
    (system.len() + tools) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_calls_arguments_count_as_their_compact_json() {
        let value = serde_json::json!({"command": "echo \"é\"", "n": [1, 2.5, null], "ok": true});
        assert_eq!(json_len(&value), value.to_string().len());
    }
}
