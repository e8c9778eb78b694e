//! The chat-completions wire format: the request body we send and the stream chunks we read.
//!
//! Request types borrow from the [`ModelRequest`] so building a body copies nothing but the JSON
//! output. Chunk types borrow string fragments from the event's bytes when they contain no escapes,
//! so the common text delta is parsed without allocating a `String`.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::agent::provider::ModelRequest;
use crate::call::ToolSchema;
use dsh_session::history::HistoryMessage;
use dsh_session::{ReasoningEffort, ToolCallRequest};

/// Serialises the request body for `model`.
pub(super) fn request_body(
    model: &str,
    reasoning_effort: Option<ReasoningEffort>,
    request: &ModelRequest,
) -> serde_json::Result<Vec<u8>> {
    let mut messages = Vec::with_capacity(request.messages.len() + 1);
    messages.push(Message::System {
        content: &request.system,
    });
    for message in request.messages.iter() {
        messages.push(match message {
            HistoryMessage::User { text, .. } => Message::User { content: text },
            HistoryMessage::Assistant { text, tool_calls } => Message::Assistant {
                content: text,
                tool_calls: tool_calls.iter().map(OutCall::from).collect(),
            },
            HistoryMessage::ToolResult {
                call_id, content, ..
            } => Message::Tool {
                tool_call_id: call_id,
                content,
            },
        });
    }
    serde_json::to_vec(&Body {
        model,
        reasoning_effort: reasoning_effort.map(ReasoningEffort::as_str),
        messages,
        tools: request.tools.iter().map(OutTool::from).collect(),
        stream: true,
        stream_options: StreamOptions {
            include_usage: true,
        },
    })
}

#[derive(Serialize)]
struct Body<'a> {
    model: &'a str,
    /// Only when the agent chose one: the provider's default otherwise, and providers that do
    /// not know the member never see it.
    #[serde(skip_serializing_if = "Option::is_none")]
    reasoning_effort: Option<&'static str>,
    messages: Vec<Message<'a>>,
    #[serde(skip_serializing_if = "Vec::is_empty")]
    tools: Vec<OutTool<'a>>,
    stream: bool,
    stream_options: StreamOptions,
}

#[derive(Serialize)]
struct StreamOptions {
    include_usage: bool,
}

#[derive(Serialize)]
#[serde(tag = "role", rename_all = "lowercase")]
enum Message<'a> {
    System {
        content: &'a str,
    },
    User {
        content: &'a str,
    },
    /// `content` is always a string, `""` when empty: some compatible servers reject `null`.
    Assistant {
        content: &'a str,
        #[serde(skip_serializing_if = "Vec::is_empty")]
        tool_calls: Vec<OutCall<'a>>,
    },
    /// OpenAI has no error flag on tool results; the content says what went wrong.
    Tool {
        tool_call_id: &'a str,
        content: &'a str,
    },
}

#[derive(Serialize)]
struct OutCall<'a> {
    id: &'a str,
    #[serde(rename = "type")]
    kind: &'static str,
    function: OutFunction<'a>,
}

#[derive(Serialize)]
struct OutFunction<'a> {
    name: &'a str,
    arguments: Cow<'a, str>,
}

impl<'a> From<&'a ToolCallRequest> for OutCall<'a> {
    fn from(call: &'a ToolCallRequest) -> Self {
        // A string is what the model sent when it was not valid JSON: replay its exact text, so
        // the history shows the model its own mistake rather than a re-quoted version of it.
        let arguments = match &call.arguments {
            Value::String(raw) => Cow::Borrowed(raw.as_str()),
            other => Cow::Owned(other.to_string()),
        };
        Self {
            id: &call.id,
            kind: "function",
            function: OutFunction {
                name: &call.name,
                arguments,
            },
        }
    }
}

#[derive(Serialize)]
struct OutTool<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    function: OutToolFunction<'a>,
}

#[derive(Serialize)]
struct OutToolFunction<'a> {
    name: &'a str,
    description: &'a str,
    parameters: &'a Value,
}

impl<'a> From<&'a ToolSchema> for OutTool<'a> {
    fn from(tool: &'a ToolSchema) -> Self {
        Self {
            kind: "function",
            function: OutToolFunction {
                name: &tool.name,
                description: &tool.description,
                parameters: &tool.parameters,
            },
        }
    }
}

/// A string that borrows from the input unless it contains escapes (serde only borrows a `Cow`
/// that is a field itself, not one inside an `Option`).
#[derive(Debug, Deserialize)]
pub(super) struct Text<'a>(#[serde(borrow)] pub(super) Cow<'a, str>);

/// One streamed chunk (`chat.completion.chunk`), or a whole non-streamed completion.
#[derive(Debug, Deserialize)]
pub(super) struct Chunk<'a> {
    #[serde(default, borrow)]
    pub(super) choices: Vec<Choice<'a>>,
    #[serde(default)]
    pub(super) usage: Option<WireUsage>,
    /// Some servers report a failure inside a 200 stream.
    #[serde(default, borrow)]
    pub(super) error: Option<ApiError<'a>>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Choice<'a> {
    #[serde(default)]
    pub(super) index: u64,
    /// Streamed replies carry `delta`; non-streamed ones carry `message` of the same shape.
    #[serde(default, borrow, alias = "message")]
    pub(super) delta: Option<Delta<'a>>,
    #[serde(default, borrow)]
    pub(super) finish_reason: Option<Text<'a>>,
}

#[derive(Debug, Deserialize)]
pub(super) struct Delta<'a> {
    #[serde(default, borrow)]
    pub(super) content: Option<Text<'a>>,
    /// The model's reasoning, for reasoning models that return it (DeepSeek's reasoner).
    #[serde(default, borrow)]
    pub(super) reasoning_content: Option<Text<'a>>,
    #[serde(default, borrow)]
    pub(super) tool_calls: Option<Vec<CallDelta<'a>>>,
}

#[derive(Debug, Deserialize)]
pub(super) struct CallDelta<'a> {
    /// Absent from non-streamed replies and from a few compatible servers.
    #[serde(default)]
    pub(super) index: Option<u64>,
    #[serde(default, borrow)]
    pub(super) id: Option<Text<'a>>,
    #[serde(default, borrow)]
    pub(super) function: Option<FunctionDelta<'a>>,
}

#[derive(Debug, Deserialize)]
pub(super) struct FunctionDelta<'a> {
    #[serde(default, borrow)]
    pub(super) name: Option<Text<'a>>,
    #[serde(default, borrow)]
    pub(super) arguments: Option<Text<'a>>,
}

/// `usage` as OpenAI and DeepSeek report it (each field optional; either cache field may appear).
#[derive(Debug, Deserialize)]
pub(super) struct WireUsage {
    #[serde(default)]
    pub(super) prompt_tokens: Option<u64>,
    #[serde(default)]
    pub(super) completion_tokens: Option<u64>,
    /// DeepSeek.
    #[serde(default)]
    pub(super) prompt_cache_hit_tokens: Option<u64>,
    /// OpenAI.
    #[serde(default)]
    pub(super) prompt_tokens_details: Option<PromptDetails>,
    #[serde(default)]
    pub(super) completion_tokens_details: Option<CompletionDetails>,
}

#[derive(Debug, Deserialize)]
pub(super) struct PromptDetails {
    #[serde(default)]
    pub(super) cached_tokens: Option<u64>,
}

#[derive(Debug, Deserialize)]
pub(super) struct CompletionDetails {
    #[serde(default)]
    pub(super) reasoning_tokens: Option<u64>,
}

/// `{"error": {"message": ...}}`, the shape of OpenAI-compatible error bodies.
#[derive(Debug, Deserialize)]
pub(super) struct ApiError<'a> {
    #[serde(default, borrow)]
    pub(super) message: Option<Text<'a>>,
    /// OpenAI's machine-readable code, e.g. `context_length_exceeded` (a string; some servers
    /// send a number, which says nothing here).
    #[serde(default, borrow, deserialize_with = "text_or_none")]
    pub(super) code: Option<Text<'a>>,
}

fn text_or_none<'de: 'a, 'a, D: serde::Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Text<'a>>, D::Error> {
    #[derive(Deserialize)]
    #[serde(untagged)]
    enum Code<'a> {
        Text(#[serde(borrow)] Text<'a>),
        Other(serde::de::IgnoredAny),
    }
    Ok(match Option::<Code<'a>>::deserialize(deserializer)? {
        Some(Code::Text(text)) => Some(text),
        _ => None,
    })
}

/// Whether an error body says the request was longer than the model's context: OpenAI's code
/// `context_length_exceeded`, or the message OpenAI-compatible servers (DeepSeek, vLLM) share,
/// "…maximum context length…".
pub(super) fn context_overflow(body: &[u8]) -> bool {
    let Ok(parsed) = serde_json::from_slice::<ErrorBody<'_>>(body) else {
        return false;
    };
    let ErrorField::Object(error) = parsed.error else {
        return false;
    };
    error
        .code
        .is_some_and(|code| code.0 == "context_length_exceeded")
        || error
            .message
            .is_some_and(|m| m.0.to_ascii_lowercase().contains("maximum context length"))
}

#[derive(Deserialize)]
struct ErrorBody<'a> {
    #[serde(borrow)]
    error: ErrorField<'a>,
}

/// Most servers send an object; a few send a bare string.
#[derive(Deserialize)]
#[serde(untagged)]
enum ErrorField<'a> {
    Object(#[serde(borrow)] ApiError<'a>),
    Text(#[serde(borrow)] Text<'a>),
}

/// Longest error text kept from a body that is not the JSON error shape (e.g. an HTML page from a
/// proxy).
const MAX_MESSAGE_CHARS: usize = 300;

/// The message a person should read for an error response: the API's own message when the body
/// has one, else the start of the body, else the status's reason phrase.
pub(super) fn error_message(body: &[u8], reason: Option<&str>) -> String {
    if let Ok(parsed) = serde_json::from_slice::<ErrorBody<'_>>(body) {
        let message = match parsed.error {
            ErrorField::Object(ApiError { message, .. }) => message.map(|m| m.0),
            ErrorField::Text(text) => Some(text.0),
        };
        if let Some(message) = message.filter(|m| !m.trim().is_empty()) {
            return shorten(message.trim());
        }
    }
    let text = String::from_utf8_lossy(body);
    let text = text.trim();
    if text.is_empty() {
        reason.unwrap_or("no message").to_owned()
    } else {
        shorten(text)
    }
}

/// Keeps messages to a readable length, cutting on a character boundary.
pub(super) fn shorten(text: &str) -> String {
    match text.char_indices().nth(MAX_MESSAGE_CHARS) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.to_owned(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_message_prefers_the_api_message() {
        let body = br#"{"error":{"message":"Authentication Fails (no such user)","type":"authentication_error"}}"#;
        assert_eq!(
            error_message(body, Some("Unauthorized")),
            "Authentication Fails (no such user)"
        );
        assert_eq!(
            error_message(br#"{"error":"model overloaded"}"#, None),
            "model overloaded"
        );
        assert_eq!(
            error_message(b"<html>bad gateway</html>\n", Some("Bad Gateway")),
            "<html>bad gateway</html>"
        );
        assert_eq!(error_message(b"", Some("Bad Gateway")), "Bad Gateway");
        assert_eq!(
            error_message(br#"{"error":{"message":""}}"#, None),
            r#"{"error":{"message":""}}"#
        );
        assert_eq!(error_message(b"\xff\xfe", None), "\u{fffd}\u{fffd}");
        let long = "é".repeat(1000);
        assert_eq!(
            error_message(long.as_bytes(), None).chars().count(),
            MAX_MESSAGE_CHARS + 1
        );
    }

    #[test]
    fn chunk_text_borrows_unless_escaped() {
        let data = br#"{"choices":[{"index":0,"delta":{"content":"plain"},"finish_reason":null}]}"#;
        let chunk: Chunk<'_> = serde_json::from_slice(data).unwrap();
        let content = chunk.choices[0].delta.as_ref().unwrap().content.as_ref();
        assert!(matches!(content.unwrap().0, Cow::Borrowed("plain")));

        let data = br#"{"choices":[{"delta":{"content":"a\nb"}}],"usage":null}"#;
        let chunk: Chunk<'_> = serde_json::from_slice(data).unwrap();
        let content = chunk.choices[0].delta.as_ref().unwrap().content.as_ref();
        assert_eq!(content.unwrap().0, "a\nb");
    }
}
