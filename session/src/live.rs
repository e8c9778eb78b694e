//! The events a stream carries that no log holds (`text/delta`, `tool/output`, `model/retry`,
//! `watch/lagged`): previews of what the next logged event will say in full, and a watcher's own
//! news. dshd writes them with these types and clients read them with the same ones, so the two
//! cannot drift apart; they are in the same `{type, data}` form as logged events, without `seq`.

use std::borrow::Cow;

use serde::{Deserialize, Serialize};

/// Which stream of a command a piece of output comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum OutputStream {
    /// Standard output.
    Stdout,
    /// Standard error.
    Stderr,
}

impl OutputStream {
    /// `stdout` or `stderr`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Stdout => "stdout",
            Self::Stderr => "stderr",
        }
    }
}

/// Model text as it streams (`text/delta`); the step's `assistant/message` carries all of it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct TextDelta<'a> {
    /// The turn.
    pub turn: u32,
    /// The step.
    pub step: u32,
    /// Where `text` starts in the step's text, in bytes (a gap means text was skipped).
    pub offset: u64,
    /// The text.
    #[serde(borrow)]
    pub text: Cow<'a, str>,
}

/// A call's command output as it is produced (`tool/output`); the call's `tool/result` carries
/// what the model got.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ToolOutput<'a> {
    /// The turn.
    pub turn: u32,
    /// The step.
    pub step: u32,
    /// The call.
    #[serde(borrow)]
    pub call_id: Cow<'a, str>,
    /// Which stream.
    pub stream: OutputStream,
    /// Where `text` starts in that stream's output as UTF-8 text, in bytes.
    pub offset: u64,
    /// The output.
    #[serde(borrow)]
    pub text: Cow<'a, str>,
}

/// A step's model request failed and is tried again after a wait (`model/retry`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ModelRetry<'a> {
    /// The turn.
    pub turn: u32,
    /// The step.
    pub step: u32,
    /// The attempt that failed, from 1.
    pub attempt: u32,
    /// The wait before the next attempt.
    pub delay_ms: u64,
    /// Why: the HTTP status (`429`), or `unreachable`.
    #[serde(borrow)]
    pub reason: Cow<'a, str>,
}

/// A watcher fell behind (`watch/lagged`): the session's logged events from `from_seq` on are
/// re-read from the log and follow; streamed text meanwhile was skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Lagged {
    /// The first seq re-read.
    pub from_seq: u64,
}

/// An unlogged event, one variant per type. Its text borrows from the JSON it was read from
/// where it can ([`LiveEvent::from_data`]), or from what the writer holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LiveEvent<'a> {
    /// `text/delta`.
    TextDelta(TextDelta<'a>),
    /// `thought/delta`: the model's reasoning as it streams (the step's `assistant/thought`
    /// carries all of it), in the shape of a `text/delta`.
    ThoughtDelta(TextDelta<'a>),
    /// `tool/output`.
    ToolOutput(ToolOutput<'a>),
    /// `model/retry`.
    ModelRetry(ModelRetry<'a>),
    /// `watch/lagged`.
    Lagged(Lagged),
}

impl<'a> LiveEvent<'a> {
    /// Type of the `text/delta` event.
    pub const TEXT_DELTA: &'static str = "text/delta";
    /// Type of the `thought/delta` event.
    pub const THOUGHT_DELTA: &'static str = "thought/delta";
    /// Type of the `tool/output` event.
    pub const TOOL_OUTPUT: &'static str = "tool/output";
    /// Type of the `model/retry` event.
    pub const MODEL_RETRY: &'static str = "model/retry";
    /// Type of the `watch/lagged` event.
    pub const LAGGED: &'static str = "watch/lagged";

    /// The event's type string.
    pub fn type_name(&self) -> &'static str {
        match self {
            Self::TextDelta(_) => Self::TEXT_DELTA,
            Self::ThoughtDelta(_) => Self::THOUGHT_DELTA,
            Self::ToolOutput(_) => Self::TOOL_OUTPUT,
            Self::ModelRetry(_) => Self::MODEL_RETRY,
            Self::Lagged(_) => Self::LAGGED,
        }
    }

    /// Whether `type_name` is the type of an unlogged event.
    pub fn is_live_type(type_name: &str) -> bool {
        matches!(
            type_name,
            Self::TEXT_DELTA
                | Self::THOUGHT_DELTA
                | Self::TOOL_OUTPUT
                | Self::MODEL_RETRY
                | Self::LAGGED
        )
    }

    /// The event of type `type_name` whose data object is `data` (JSON text); `None` when the
    /// type is not an unlogged one. Members this build does not know are ignored: a preview
    /// carries nothing that must not be lost.
    pub fn from_data(type_name: &str, data: &'a str) -> Option<Result<Self, serde_json::Error>> {
        let read = match type_name {
            Self::TEXT_DELTA => serde_json::from_str(data).map(Self::TextDelta),
            Self::THOUGHT_DELTA => serde_json::from_str(data).map(Self::ThoughtDelta),
            Self::TOOL_OUTPUT => serde_json::from_str(data).map(Self::ToolOutput),
            Self::MODEL_RETRY => serde_json::from_str(data).map(Self::ModelRetry),
            Self::LAGGED => serde_json::from_str(data).map(Self::Lagged),
            _ => return None,
        };
        Some(read)
    }

    /// The data object as JSON text, as a stream carries it (`data_json`).
    pub fn data_json(&self) -> String {
        // Serialising plain structs into a String cannot fail.
        match self {
            Self::TextDelta(data) | Self::ThoughtDelta(data) => serde_json::to_string(data),
            Self::ToolOutput(data) => serde_json::to_string(data),
            Self::ModelRetry(data) => serde_json::to_string(data),
            Self::Lagged(data) => serde_json::to_string(data),
        }
        .unwrap_or_else(|_| "null".to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The JSON each type is written as (PROTOCOL.md's table), and read back, borrowing its text
    /// where it has no escapes.
    #[test]
    fn each_type_is_written_as_documented_and_read_back() {
        let cases = [
            (
                LiveEvent::TextDelta(TextDelta {
                    turn: 1,
                    step: 2,
                    offset: 3,
                    text: "hé".into(),
                }),
                r#"{"turn":1,"step":2,"offset":3,"text":"hé"}"#,
            ),
            (
                LiveEvent::ThoughtDelta(TextDelta {
                    turn: 1,
                    step: 2,
                    offset: 0,
                    text: "hm".into(),
                }),
                r#"{"turn":1,"step":2,"offset":0,"text":"hm"}"#,
            ),
            (
                LiveEvent::ToolOutput(ToolOutput {
                    turn: 1,
                    step: 2,
                    call_id: "c1".into(),
                    stream: OutputStream::Stderr,
                    offset: 0,
                    text: "a\nb".into(),
                }),
                r#"{"turn":1,"step":2,"callId":"c1","stream":"stderr","offset":0,"text":"a\nb"}"#,
            ),
            (
                LiveEvent::ModelRetry(ModelRetry {
                    turn: 1,
                    step: 1,
                    attempt: 2,
                    delay_ms: 500,
                    reason: "429".into(),
                }),
                r#"{"turn":1,"step":1,"attempt":2,"delayMs":500,"reason":"429"}"#,
            ),
            (
                LiveEvent::Lagged(Lagged { from_seq: 7 }),
                r#"{"fromSeq":7}"#,
            ),
        ];
        for (event, json) in cases {
            assert_eq!(event.data_json(), json);
            let read = LiveEvent::from_data(event.type_name(), json)
                .unwrap()
                .unwrap();
            assert_eq!(read, event);
        }
        let LiveEvent::TextDelta(delta) = LiveEvent::from_data(
            "text/delta",
            r#"{"turn":1,"step":1,"offset":0,"text":"x","new":1}"#,
        )
        .unwrap()
        .unwrap() else {
            panic!("not a delta");
        };
        assert!(matches!(delta.text, Cow::Borrowed("x")), "{delta:?}");
        assert!(LiveEvent::from_data("turn/start", "{}").is_none());
        let err = LiveEvent::from_data("tool/output", r#"{"turn":1}"#)
            .unwrap()
            .unwrap_err();
        assert!(err.to_string().contains("missing field `step`"), "{err}");
    }
}
