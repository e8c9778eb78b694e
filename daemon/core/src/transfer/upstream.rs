//! Upstream DeepSeek Harness session logs (`session.jsonl`, `session.jsonl.zstd`), format
//! version 0: a header line like dsh's, then `{type, seq, time, data}` events whose names dsh's
//! vocabulary follows but whose messages are upstream's (content blocks: `text`, `reasoning`,
//! `tool-call` with its arguments as the model's JSON text, `tool-result`). Each event becomes
//! dsh's; records dsh keeps nothing of (stream chunks and their packed rows, the todo list,
//! request headers and route metadata) are left out and counted; an event type this dsh does not
//! know is refused unless upstream marked it `ignorable`, as upstream's own reader does.
//! Upstream's compactions, which replace parts of its surface, become dsh's (`surface.rs`).

use std::io::BufRead;

use serde_json::Value;

use super::TransferError;
use super::blocks::text_of;
use super::context::Context;
use super::lines::Lines;
use super::surface::Surface;
use dsh_session::{
    AbortCause, AssistantMessage, EventData, MessageSource, ToolCallRequest, TurnEndReason, Usage,
    UserMessage,
};

/// The upstream log format version this dsh reads (upstream's `SESSION_FORMAT_VERSION`).
pub(super) const VERSION: u64 = 0;

/// Upstream records that carry nothing dsh keeps: raw stream chunks (dsh logs the assembled
/// message), their packed storage rows, the todo list (UI state), request snapshots, and the
/// token price of a pruned result (`compaction/prune`; the pruned copy that follows it is what
/// counts).
pub(super) const LEFT_OUT: &[&str] = &[
    "compaction/prune",
    "assistant/chunk",
    "text-chunks",
    "reasoning-chunks",
    "tool-call-chunks",
    "todo/write",
    "request/header",
    "request/context",
];

/// Reads the events after the header: `ahead` (already read) first, then the rest of `lines`.
pub(super) fn events<R: BufRead>(
    ahead: Vec<(u64, Vec<u8>, usize)>,
    mut lines: Lines<R>,
    container: &str,
    cx: &mut Context<'_>,
) -> Result<(), TransferError> {
    let mut surface = Surface::default();
    for (n, line, bytes) in ahead {
        event(cx, &mut surface, container, n, &line, bytes)?;
    }
    while let Some((n, line, bytes)) = lines.next_line().map_err(|e| cx.line_error(container, e))? {
        event(cx, &mut surface, container, n, line, bytes)?;
    }
    Ok(())
}

fn event(
    cx: &mut Context<'_>,
    surface: &mut Surface,
    container: &str,
    n: u64,
    line: &[u8],
    bytes: usize,
) -> Result<(), TransferError> {
    cx.builder.consumed(bytes);
    let bad = |what: &str| format!("line {n} of {container}: {what}");
    let value: Value = serde_json::from_slice(line).map_err(|e| {
        cx.bad(bad(&format!(
            "not JSON ({e}); the line is damaged or cut short"
        )))
    })?;
    let kind = value
        .get("type")
        .and_then(Value::as_str)
        .ok_or_else(|| cx.bad(bad("no event type")))?;
    let time = value.get("time").and_then(Value::as_i64).unwrap_or(0);
    let data = value.get("data").unwrap_or(&Value::Null);
    let int = |key: &str| -> Result<u32, TransferError> {
        data.get(key)
            .and_then(Value::as_u64)
            .and_then(|v| u32::try_from(v).ok())
            .ok_or_else(|| cx.bad(bad(&format!("{kind} has no {key}"))))
    };
    let seq = value.get("seq").and_then(Value::as_u64);
    if let Some(op) = value
        .get("surfaceOp")
        .or_else(|| data.get("surfaceOp"))
        .filter(|op| op.is_object())
    {
        cx.builder.read += 1;
        return surface.replace(cx, (seq, kind, data), op, time, &bad);
    }
    let converted = match kind {
        "compaction/start" => {
            cx.builder.read += 1;
            return surface.start(cx, data, time);
        }
        "compaction/summary" => {
            cx.builder.read += 1;
            surface.summarised(data);
            return Ok(());
        }
        "compaction/end" => {
            cx.builder.read += 1;
            return surface.end(cx, data, time);
        }
        "turn/start" => EventData::TurnStart { turn: int("turn")? },
        "turn/end" => {
            cx.builder.read += 1;
            return cx.builder.end_turn(time, reason(data.get("reason")));
        }
        "step/start" => EventData::StepStart {
            turn: int("turn")?,
            step: int("step")?,
        },
        "step/end" => {
            cx.builder.read += 1;
            return cx.builder.close_step(time);
        }
        "user/message" => EventData::UserMessage {
            message: UserMessage {
                text: text_of(data.get("content")),
                source: source(data.get("source")),
            },
        },
        "assistant/message" => {
            let (turn, step) = (int("turn")?, int("step")?);
            let message = data.get("message").unwrap_or(&Value::Null);
            let blocks = message.get("content").and_then(Value::as_array);
            let thought: String = blocks
                .into_iter()
                .flatten()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some("reasoning"))
                .filter_map(|b| b.get("text").and_then(Value::as_str))
                .collect();
            if !thought.is_empty() {
                cx.builder.push(
                    time,
                    EventData::AssistantThought {
                        turn,
                        step,
                        text: thought,
                    },
                )?;
            }
            let tool_calls = blocks
                .into_iter()
                .flatten()
                .filter(|b| b.get("type").and_then(Value::as_str) == Some("tool-call"))
                .map(|b| ToolCallRequest {
                    id: string(b, "id"),
                    name: string(b, "name"),
                    arguments: arguments(b.get("arguments")),
                })
                .collect();
            EventData::AssistantMessage {
                turn,
                step,
                message: AssistantMessage {
                    text: text_of(message.get("content")),
                    tool_calls,
                },
                usage: data.get("usage").map(usage),
            }
        }
        "tool/call" => EventData::ToolCall {
            turn: int("turn")?,
            step: int("step")?,
            call_id: string(data, "callId"),
            name: string(data, "name"),
            arguments: arguments(data.get("arguments")),
        },
        "tool/result" => {
            let block = data
                .get("message")
                .and_then(|m| m.get("content"))
                .and_then(Value::as_array)
                .and_then(|c| c.first())
                .ok_or_else(|| cx.bad(bad("tool/result has no tool-result block")))?;
            EventData::ToolResult {
                turn: int("turn")?,
                step: int("step")?,
                call_id: string(block, "toolCallId"),
                content: text_of(block.get("content")),
                is_error: block.get("isError").and_then(Value::as_bool) == Some(true),
                code: data
                    .get("error")
                    .and_then(|e| e.get("code"))
                    .and_then(Value::as_str)
                    .map(str::to_owned),
                exit_code: None,
            }
        }
        "session/end-seed" => EventData::EndSeed {},
        left_out if LEFT_OUT.contains(&left_out) => {
            cx.builder.skipped += 1;
            return Ok(());
        }
        _ if value.get("ignorable") == Some(&Value::Bool(true)) => {
            cx.builder.skipped += 1;
            return Ok(());
        }
        unknown => {
            return Err(cx.bad(bad(&format!(
                "event type {unknown:?} is not one this dsh knows, and upstream did not mark it ignorable, so the session cannot be rebuilt without it"
            ))));
        }
    };
    cx.builder.read += 1;
    cx.builder.push(time, converted)?;
    if matches!(kind, "user/message" | "assistant/message" | "tool/result") {
        surface.appended(seq, cx);
    }
    Ok(())
}

fn string(value: &Value, key: &str) -> String {
    value
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// A call's arguments: upstream keeps the model's JSON text; dsh the parsed object, or the text
/// when it is not JSON.
fn arguments(value: Option<&Value>) -> Value {
    match value {
        Some(Value::String(text)) => {
            serde_json::from_str(text).unwrap_or(Value::String(text.clone()))
        }
        Some(other) => other.clone(),
        None => Value::Object(serde_json::Map::new()),
    }
}

fn source(value: Option<&Value>) -> MessageSource {
    match value.and_then(|s| s.get("kind")).and_then(Value::as_str) {
        Some("user") | None => MessageSource::User,
        Some("plugin") => MessageSource::Plugin {
            plugin: value
                .and_then(|s| s.get("plugin"))
                .and_then(Value::as_str)
                .unwrap_or("upstream")
                .to_owned(),
        },
        Some(other) => MessageSource::Plugin {
            plugin: format!("upstream-{other}"),
        },
    }
}

fn usage(value: &Value) -> Usage {
    let count = |key: &str| value.get(key).and_then(Value::as_u64);
    Usage {
        input_tokens: count("inputTokens").unwrap_or(0),
        output_tokens: count("outputTokens").unwrap_or(0),
        cache_read_tokens: count("cacheReadTokens"),
        reasoning_tokens: count("reasoningTokens"),
    }
}

/// Upstream's turn end reasons in dsh's words.
fn reason(value: Option<&Value>) -> TurnEndReason {
    let kind = value.and_then(|r| r.get("kind")).and_then(Value::as_str);
    match kind {
        Some("completed") => TurnEndReason::Completed,
        Some("aborted") => {
            let cause = value
                .and_then(|r| r.get("reason"))
                .and_then(|r| r.get("kind"))
                .and_then(Value::as_str);
            match cause {
                Some("parent") => TurnEndReason::Aborted {
                    cause: AbortCause::Parent,
                },
                Some("disposed") => TurnEndReason::Aborted {
                    cause: AbortCause::Closed,
                },
                Some("hook") => TurnEndReason::Stopped {
                    reason: value
                        .and_then(|r| r.get("reason"))
                        .and_then(|r| r.get("reason"))
                        .and_then(Value::as_str)
                        .unwrap_or("a hook stopped the turn")
                        .to_owned(),
                },
                _ => TurnEndReason::Aborted {
                    cause: AbortCause::User,
                },
            }
        }
        Some("blocked") => TurnEndReason::Blocked {
            reason: "blocked (upstream gives no reason)".to_owned(),
        },
        Some("error") => TurnEndReason::Error {
            message: value
                .and_then(|r| r.get("error"))
                .and_then(|e| e.get("message"))
                .and_then(Value::as_str)
                .unwrap_or("the turn failed")
                .to_owned(),
        },
        Some("max-tokens") => TurnEndReason::Error {
            message: "the model reached its output token limit (upstream's max-tokens)".to_owned(),
        },
        _ => TurnEndReason::Interrupted,
    }
}
