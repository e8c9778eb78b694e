//! Assembling one reply from stream events: text fragments, tool-call fragments keyed by index,
//! the finish reason and the usage report.

use serde_json::{Map, Value};

use super::ModelError;
use super::wire::{CallDelta, Chunk, Text, WireUsage, shorten};
use crate::agent::provider::{FinishReason, ModelProgress, ModelReply};
use dsh_session::{ToolCallRequest, Usage};

/// Whether to keep reading the stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Flow {
    /// Keep reading.
    More,
    /// `[DONE]` was seen.
    Done,
}

/// The reply so far.
#[derive(Debug, Default)]
pub(super) struct Accumulator {
    text: String,
    /// The model's reasoning (`reasoning_content`), for the log, never sent back.
    reasoning: String,
    /// In arrival order; a stream interleaves at most a few, so a linear search is the fastest map.
    calls: Vec<CallParts>,
    finish: Option<String>,
    usage: Option<Usage>,
}

#[derive(Debug, Default)]
struct CallParts {
    index: u64,
    id: String,
    name: String,
    arguments: String,
}

impl Accumulator {
    /// Whether the model has said why it stopped (the reply is complete even if `[DONE]` is lost).
    pub(super) fn has_finish_reason(&self) -> bool {
        self.finish.is_some()
    }

    /// Applies one event's data; text and reasoning go to `progress` as they arrive.
    pub(super) fn apply_event(
        &mut self,
        data: &[u8],
        progress: &dyn ModelProgress,
    ) -> Result<Flow, ModelError> {
        let data = data.trim_ascii();
        if data == b"[DONE]" {
            return Ok(Flow::Done);
        }
        if data.is_empty() {
            return Ok(Flow::More);
        }
        let chunk: Chunk<'_> = serde_json::from_slice(data).map_err(|e| {
            ModelError::Malformed(format!(
                "cannot read a stream event ({e}): {}",
                shorten(&String::from_utf8_lossy(data))
            ))
        })?;
        if let Some(error) = chunk.error {
            let message = error.message.map_or_else(
                || "no message".to_owned(),
                |Text(message)| shorten(&message),
            );
            return Err(ModelError::Malformed(format!(
                "the stream carried an error instead of a reply: {message}"
            )));
        }
        if let Some(usage) = chunk.usage {
            self.usage = Some(convert_usage(&usage));
        }
        // `n` is never set, so only the first choice exists; others are ignored.
        for choice in chunk.choices.into_iter().filter(|c| c.index == 0) {
            if let Some(delta) = choice.delta {
                if let Some(Text(content)) = delta.content
                    && !content.is_empty()
                {
                    progress.text(&content);
                    self.text.push_str(&content);
                }
                if let Some(Text(thought)) = delta.reasoning_content
                    && !thought.is_empty()
                {
                    progress.thought(&thought);
                    self.reasoning.push_str(&thought);
                }
                for call in delta.tool_calls.into_iter().flatten() {
                    self.apply_call(call);
                }
            }
            if let Some(Text(reason)) = choice.finish_reason
                && !reason.is_empty()
            {
                self.finish = Some(reason.into_owned());
            }
        }
        Ok(Flow::More)
    }

    fn apply_call(&mut self, delta: CallDelta<'_>) {
        let id = delta.id.map(|Text(id)| id).filter(|id| !id.is_empty());
        // Without an index (non-streamed replies, a few servers), a new id starts a new call and
        // anything else continues the last one.
        let index = delta
            .index
            .unwrap_or_else(|| match (self.calls.last(), &id) {
                (Some(last), Some(id)) if last.id != **id => last.index.saturating_add(1),
                (Some(last), _) => last.index,
                (None, _) => 0,
            });
        let position = match self.calls.iter().rposition(|c| c.index == index) {
            Some(position) => position,
            None => {
                self.calls.push(CallParts {
                    index,
                    ..CallParts::default()
                });
                self.calls.len() - 1
            }
        };
        let parts = &mut self.calls[position];
        if let Some(id) = id
            && parts.id.is_empty()
        {
            parts.id = id.into_owned();
        }
        if let Some(function) = delta.function {
            if let Some(Text(name)) = function.name {
                // Some servers repeat the name with every fragment; others could split it.
                if parts.name.is_empty() {
                    parts.name = name.into_owned();
                } else if parts.name != *name {
                    parts.name.push_str(&name);
                }
            }
            if let Some(Text(arguments)) = function.arguments {
                parts.arguments.push_str(&arguments);
            }
        }
    }

    /// The finished reply. `done` says whether the stream ended with `[DONE]`.
    pub(super) fn finish(self, done: bool) -> Result<ModelReply, ModelError> {
        let mut calls = self.calls;
        calls.sort_by_key(|c| c.index);
        let finish = match self.finish.as_deref() {
            Some("stop") => FinishReason::Stop,
            Some("tool_calls" | "function_call") => FinishReason::ToolCalls,
            Some("length") => FinishReason::Length,
            Some(other) => {
                return Err(ModelError::Malformed(format!(
                    "the model stopped early with finish reason `{}`, which dsh cannot continue from; the partial reply was dropped",
                    shorten(other)
                )));
            }
            // `[DONE]` without a finish reason: a complete stream from a terse server.
            None if done => FinishReason::Stop,
            None => {
                return Err(ModelError::Transport(
                    "the response stream was cut off before the reply was complete (no finish reason, no [DONE])"
                        .to_owned(),
                ));
            }
        };
        // The loop keys on the calls; keep the reason consistent with them so a server that says
        // `stop` next to tool calls (or `tool_calls` with none) does not confuse it.
        let finish = match (finish, calls.is_empty()) {
            (FinishReason::Stop, false) => FinishReason::ToolCalls,
            (FinishReason::ToolCalls, true) => FinishReason::Stop,
            (other, _) => other,
        };
        // A streamed text grew by doubling, so up to half of what it reserved is unused; the log
        // keeps the reply for the agent's life (1.6x a 10 MB reply's length, before this).
        let mut text = self.text;
        text.shrink_to_fit();
        Ok(ModelReply {
            text,
            reasoning: self.reasoning,
            calls: calls.into_iter().map(planned).collect(),
            usage: self.usage,
            finish,
        })
    }
}

fn planned(parts: CallParts) -> ToolCallRequest {
    let id = if parts.id.is_empty() {
        format!("call_{}", uuid::Uuid::now_v7().simple())
    } else {
        parts.id
    };
    ToolCallRequest {
        id,
        name: parts.name,
        arguments: parse_arguments(parts.arguments),
    }
}

/// The arguments as JSON; invalid JSON stays as the raw string so the loop can show the model
/// what it sent. An empty string (no-argument tools, from some servers) is `{}`.
fn parse_arguments(raw: String) -> Value {
    if raw.trim().is_empty() {
        return Value::Object(Map::new());
    }
    match serde_json::from_str(&raw) {
        Ok(value) => value,
        Err(_) => Value::String(raw),
    }
}

/// Disjoint counts: cached prompt tokens are taken out of the input count.
fn convert_usage(usage: &WireUsage) -> Usage {
    let cached = usage.prompt_cache_hit_tokens.or_else(|| {
        usage
            .prompt_tokens_details
            .as_ref()
            .and_then(|d| d.cached_tokens)
    });
    Usage {
        input_tokens: usage
            .prompt_tokens
            .unwrap_or(0)
            .saturating_sub(cached.unwrap_or(0)),
        output_tokens: usage.completion_tokens.unwrap_or(0),
        cache_read_tokens: cached,
        reasoning_tokens: usage
            .completion_tokens_details
            .as_ref()
            .and_then(|d| d.reasoning_tokens),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn reply(events: &[&str], done: bool) -> Result<ModelReply, ModelError> {
        let mut acc = Accumulator::default();
        for event in events {
            acc.apply_event(event.as_bytes(), &|_: &str| {})?;
        }
        acc.finish(done)
    }

    #[test]
    fn usage_from_deepseek_and_openai() {
        let deepseek = r#"{"choices":[{"delta":{},"finish_reason":"stop"}],"usage":{"prompt_tokens":100,"completion_tokens":20,"total_tokens":120,"prompt_cache_hit_tokens":60,"prompt_cache_miss_tokens":40,"completion_tokens_details":{"reasoning_tokens":5}}}"#;
        assert_eq!(
            reply(&[deepseek], true).unwrap().usage,
            Some(Usage {
                input_tokens: 40,
                output_tokens: 20,
                cache_read_tokens: Some(60),
                reasoning_tokens: Some(5),
            })
        );
        let openai = r#"{"choices":[],"usage":{"prompt_tokens":10,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":4},"completion_tokens_details":null}}"#;
        let stop = r#"{"choices":[{"delta":{},"finish_reason":"stop"}]}"#;
        assert_eq!(
            reply(&[stop, openai], true).unwrap().usage,
            Some(Usage {
                input_tokens: 6,
                output_tokens: 3,
                cache_read_tokens: Some(4),
                reasoning_tokens: None,
            })
        );
        let plain = r#"{"choices":[{"delta":{},"finish_reason":"length"}],"usage":{"prompt_tokens":7,"completion_tokens":1}}"#;
        let reply = reply(&[plain], false).unwrap();
        assert_eq!(reply.finish, FinishReason::Length);
        assert_eq!(
            reply.usage,
            Some(Usage {
                input_tokens: 7,
                output_tokens: 1,
                cache_read_tokens: None,
                reasoning_tokens: None,
            })
        );
    }

    #[test]
    fn reasoning_content_is_kept_apart_from_the_text() {
        let got = reply(
            &[
                r#"{"choices":[{"delta":{"reasoning_content":"Let me "}}]}"#,
                r#"{"choices":[{"delta":{"reasoning_content":"think.","content":null}}]}"#,
                r#"{"choices":[{"delta":{"content":"Answer."},"finish_reason":"stop"}]}"#,
            ],
            true,
        )
        .unwrap();
        assert_eq!(got.reasoning, "Let me think.");
        assert_eq!(got.text, "Answer.");
    }

    /// Reasoning streams to `progress` as it arrives, apart from the text.
    #[test]
    fn reasoning_streams_as_thought() {
        #[derive(Default)]
        struct Seen(std::sync::Mutex<Vec<String>>);
        impl ModelProgress for Seen {
            fn text(&self, text: &str) {
                self.0.lock().unwrap().push(format!("text:{text}"));
            }
            fn thought(&self, text: &str) {
                self.0.lock().unwrap().push(format!("thought:{text}"));
            }
        }
        let seen = Seen::default();
        let mut acc = Accumulator::default();
        for event in [
            r#"{"choices":[{"delta":{"reasoning_content":"Let me "}}]}"#,
            r#"{"choices":[{"delta":{"reasoning_content":"","content":null}}]}"#,
            r#"{"choices":[{"delta":{"reasoning_content":"think."}}]}"#,
            r#"{"choices":[{"delta":{"content":"Answer."},"finish_reason":"stop"}]}"#,
        ] {
            acc.apply_event(event.as_bytes(), &seen).unwrap();
        }
        assert_eq!(
            *seen.0.lock().unwrap(),
            ["thought:Let me ", "thought:think.", "text:Answer."]
        );
    }

    #[test]
    fn finish_reasons_map_or_fail() {
        let with = |reason: &str| {
            format!(r#"{{"choices":[{{"delta":{{}},"finish_reason":"{reason}"}}]}}"#)
        };
        assert_eq!(
            reply(&[&with("stop")], true).unwrap().finish,
            FinishReason::Stop
        );
        assert_eq!(
            reply(&[&with("length")], true).unwrap().finish,
            FinishReason::Length
        );
        // `tool_calls` without any call is normalised so the loop ends the turn.
        assert_eq!(
            reply(&[&with("tool_calls")], true).unwrap().finish,
            FinishReason::Stop
        );
        let err = reply(&[&with("insufficient_system_resource")], true).unwrap_err();
        assert!(
            matches!(&err, ModelError::Malformed(m) if m.contains("insufficient_system_resource"))
        );
        assert_eq!(
            reply(&[r#"{"choices":[{"delta":{"content":"hi"}}]}"#], true)
                .unwrap()
                .finish,
            FinishReason::Stop,
            "[DONE] without a finish reason is a complete reply"
        );
        let cut = reply(&[r#"{"choices":[{"delta":{"content":"hi"}}]}"#], false).unwrap_err();
        assert!(cut.to_string().contains("cut off"), "{cut}");
    }

    #[test]
    fn tool_calls_assemble_by_index_and_keep_invalid_arguments() {
        let events = [
            r#"{"choices":[{"delta":{"role":"assistant","content":null,"tool_calls":[{"index":1,"id":"b","type":"function","function":{"name":"read","arguments":""}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"id":"a","type":"function","function":{"name":"bash","arguments":"{\"comm"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":1,"function":{"arguments":"{not json"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":0,"function":{"arguments":"and\":\"ls\"}"}}]}}]}"#,
            r#"{"choices":[{"delta":{"tool_calls":[{"index":2,"function":{"name":"noargs"}}]},"finish_reason":"stop"}]}"#,
        ];
        let reply = reply(&events, true).unwrap();
        assert_eq!(reply.finish, FinishReason::ToolCalls, "stop with calls");
        let calls = &reply.calls;
        assert_eq!(calls.len(), 3);
        assert_eq!(
            (calls[0].id.as_str(), calls[0].name.as_str()),
            ("a", "bash")
        );
        assert_eq!(calls[0].arguments, json!({"command": "ls"}));
        assert_eq!(calls[1].arguments, json!("{not json"));
        assert_eq!(calls[2].arguments, json!({}));
        assert!(calls[2].id.starts_with("call_"), "generated id");
    }

    #[test]
    fn non_streamed_message_without_indices() {
        let body = r#"{"choices":[{"index":0,"message":{"role":"assistant","content":"ok","tool_calls":[{"id":"x","type":"function","function":{"name":"bash","arguments":"{}"}},{"id":"y","type":"function","function":{"name":"bash","arguments":"{\"a\":1}"}}]},"finish_reason":"tool_calls"}]}"#;
        let reply = reply(&[body], true).unwrap();
        assert_eq!(reply.text, "ok");
        let ids: Vec<_> = reply.calls.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["x", "y"]);
        assert_eq!(reply.calls[1].arguments, json!({"a": 1}));
    }

    #[test]
    fn bad_events_are_malformed_not_panics() {
        for bad in [
            "{",
            "[1,2]",
            r#"{"choices":"no"}"#,
            r#"{"choices":[{"index":-1}]}"#,
            r#"{"error":{"message":"overloaded"}}"#,
        ] {
            let err = reply(&[bad], true).unwrap_err();
            assert!(matches!(err, ModelError::Malformed(_)), "{bad}: {err:?}");
        }
    }

    mod properties {
        use std::sync::Mutex;

        use proptest::collection::vec;
        use proptest::prelude::*;
        use serde_json::{Value, json};

        use super::*;

        /// JSON shaped like chat-completion chunks, with every field possibly of the wrong type.
        fn chunk() -> impl Strategy<Value = Value> {
            let junk = prop_oneof![
                Just(Value::Null),
                any::<bool>().prop_map(Value::Bool),
                any::<i64>().prop_map(Value::from),
                any::<f64>().prop_map(Value::from),
                "(?s).{0,12}".prop_map(Value::String),
                Just(json!([])),
                Just(json!({})),
            ];
            let text = prop_oneof!["(?s).{0,12}".prop_map(Value::String), junk.clone()];
            let call = (
                prop_oneof![any::<u8>().prop_map(Value::from), junk.clone()],
                text.clone(),
                text.clone(),
                text.clone(),
            )
                .prop_map(|(index, id, name, arguments)| {
                    json!({"index": index, "id": id, "type": "function",
                           "function": {"name": name, "arguments": arguments}})
                });
            let choice = (
                prop_oneof![Just(json!(0)), junk.clone()],
                text.clone(),
                prop_oneof![vec(call, 0..3).prop_map(Value::from), junk.clone()],
                prop_oneof![
                    Just(json!("stop")),
                    Just(json!("tool_calls")),
                    Just(json!("length")),
                    text.clone()
                ],
            )
                .prop_map(|(index, content, calls, finish)| {
                    json!({"index": index, "delta": {"content": content, "tool_calls": calls},
                           "finish_reason": finish})
                });
            (
                prop_oneof![vec(choice, 0..3).prop_map(Value::from), junk.clone()],
                prop_oneof![
                    Just(Value::Null),
                    Just(json!({"prompt_tokens": 3, "completion_tokens": 1})),
                    junk.clone()
                ],
                prop_oneof![Just(Value::Null), Just(json!({"message": "x"})), junk],
            )
                .prop_map(|(choices, usage, error)| {
                    json!({"choices": choices, "usage": usage, "error": error})
                })
        }

        proptest! {
            #![proptest_config(ProptestConfig::with_cases(256))]

            /// Any sequence of chunk-shaped events never panics, and a finished reply's text is
            /// exactly the text that was streamed.
            #[test]
            fn events_never_panic_and_streamed_text_is_the_reply(
                events in vec(chunk(), 0..8),
                done in any::<bool>(),
            ) {
                let streamed = Mutex::new(String::new());
                let on_text = |t: &str| streamed.lock().unwrap().push_str(t);
                let mut acc = Accumulator::default();
                let mut failed = false;
                for event in &events {
                    if acc.apply_event(event.to_string().as_bytes(), &on_text).is_err() {
                        failed = true;
                        break;
                    }
                }
                if !failed && let Ok(reply) = acc.finish(done) {
                    prop_assert_eq!(&reply.text, &*streamed.lock().unwrap());
                    prop_assert!(reply.calls.iter().all(|c| !c.id.is_empty()));
                }
            }

            /// Arbitrary bytes as an event's data never panic.
            #[test]
            fn arbitrary_event_data_never_panics(bytes in vec(any::<u8>(), 0..256)) {
                let mut acc = Accumulator::default();
                let _ = acc.apply_event(&bytes, &|_: &str| {});
                let _ = acc.finish(false);
            }
        }
    }
}
