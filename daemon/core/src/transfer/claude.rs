//! Claude Code transcripts, both ways.
//!
//! Export writes the records of the hooks' projection (`hooks/transcript`: the same `record`),
//! one session after another (child agents' records are sidechains, as Claude Code marks its
//! subagents'), each session's `parentUuid` chain starting at `null`, and a `summary` record
//! first, as Claude Code starts a transcript it has named: its `leafUuid` is the root session's
//! last record.
//!
//! Import reads what Claude Code writes: `user` records (a prompt as a string or text blocks,
//! or `tool_result` blocks), `assistant` records (one per content block, several sharing one
//! `message.id`, which are one model answer: `text`, `thinking`, `tool_use`), and records dsh
//! keeps nothing of (`summary`, `system`, file snapshots), which are counted and left out. A
//! prompt opens a turn, a new assistant message a step; tool names and inputs become dsh's.

use std::io::BufRead;

use serde_json::{Value, json};

use super::TransferError;
use super::context::{Context, Found};
use super::copy::Copy;
use super::lines::Lines;
use crate::hooks::{claude_record, from_claude_code};
use dsh_session::{
    AssistantMessage, EventData, MessageSource, SessionMeta, ToolCallRequest, TurnEndReason, Usage,
    UserMessage,
};

/// The exported transcript: the summary, then every session's records.
pub(super) fn export(copies: &[Copy]) -> Vec<u8> {
    let mut records = Vec::new();
    let mut root_leaf = None;
    for (i, copy) in copies.iter().enumerate() {
        let model = copy
            .header
            .settings
            .as_ref()
            .map_or("dsh", |s| s.model.as_str())
            .to_owned();
        let mut model = model;
        let mut parent: Option<String> = None;
        for event in &copy.events {
            if let EventData::Settings { model: m, .. } = &event.data {
                model.clone_from(m);
            }
            if let Some(record) = claude_record(&copy.header, &model, event, parent.as_deref()) {
                parent = record["uuid"].as_str().map(str::to_owned);
                records.push(record);
            }
        }
        if i == 0 {
            root_leaf = parent;
        }
    }
    let mut out = Vec::new();
    if let Some(root) = copies.first() {
        let title = SessionMeta::of(&root.header, &root.events)
            .title
            .unwrap_or_else(|| format!("dsh session {}", root.header.id.as_str()));
        let summary = json!({"type": "summary", "summary": title, "leafUuid": root_leaf});
        out.extend_from_slice(summary.to_string().as_bytes());
        out.push(b'\n');
    }
    for record in records {
        out.extend_from_slice(record.to_string().as_bytes());
        out.push(b'\n');
    }
    out
}

/// Whether line 1 of a file is a Claude Code transcript record.
pub(super) fn is_record(value: &Value) -> bool {
    let kind = value.get("type").and_then(Value::as_str);
    matches!(
        kind,
        Some("user" | "assistant" | "summary" | "system" | "file-history-snapshot")
    ) && (value.get("sessionId").is_some()
        || value.get("uuid").is_some()
        || value.get("leafUuid").is_some()
        || value.get("messageId").is_some())
}

/// The assistant message being read: Claude Code writes one record per content block.
#[derive(Default)]
struct Answer {
    id: String,
    time: i64,
    text: Vec<String>,
    thinking: Vec<String>,
    calls: Vec<ToolCallRequest>,
    usage: Option<Usage>,
}

/// Imports a transcript whose first record is `first`.
pub(super) fn import<R: BufRead>(
    first: &Value,
    mut lines: Lines<R>,
    container: &str,
    cx: &mut Context<'_>,
) -> Result<Found, TransferError> {
    let mut original_id = None;
    let mut answer: Option<Answer> = None;
    let mut chain = None;
    record(cx, first, &mut answer, &mut chain)?;
    remember_id(&mut original_id, first);
    while let Some((n, line, bytes)) = lines.next_line().map_err(|e| cx.line_error(container, e))? {
        cx.builder.consumed(bytes);
        if line.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let value: Value = serde_json::from_slice(line).map_err(|e| {
            cx.bad(format!(
                "line {n} of {container} is not JSON ({e}); the line is damaged or cut short"
            ))
        })?;
        record(cx, &value, &mut answer, &mut chain)?;
        remember_id(&mut original_id, &value);
    }
    if let Some(answer) = answer.take() {
        emit(cx, answer)?;
    }
    let time = dsh_session::now_ms();
    cx.builder.end_turn(time, TurnEndReason::Completed)?;
    Ok(Found {
        format: "claude-jsonl",
        original_id,
        descendants: Vec::new(),
    })
}

/// The transcript's session id: the first record's that names one (a `summary` names none).
fn remember_id(id: &mut Option<String>, value: &Value) {
    if id.is_none() {
        *id = value
            .get("sessionId")
            .and_then(Value::as_str)
            .map(str::to_owned);
    }
}

/// Reads one record. `chain` is whether the conversation imported is a sidechain, set by the
/// first prompt or answer: a transcript with a subagent's records among its own (`isSidechain`,
/// as Claude Code wrote them inline) keeps its own conversation, and the subagent's records are
/// left out and counted (its answer is in the parent's tool result already); a subagent's own
/// transcript, every record a sidechain, is imported as a conversation like any other.
fn record(
    cx: &mut Context<'_>,
    value: &Value,
    answer: &mut Option<Answer>,
    chain: &mut Option<bool>,
) -> Result<(), TransferError> {
    if matches!(
        value.get("type").and_then(Value::as_str),
        Some("user" | "assistant")
    ) {
        let sidechain = value.get("isSidechain").and_then(Value::as_bool) == Some(true);
        match *chain {
            None => {
                cx.set_header(value.get("cwd").and_then(Value::as_str), None, None);
                *chain = Some(sidechain);
            }
            Some(ours) if ours != sidechain => {
                cx.builder.skipped += 1;
                return Ok(());
            }
            Some(_) => {}
        }
    } else if chain.is_none() && cx.builder.header.is_none() {
        cx.set_header(None, None, None);
    }
    let time = value
        .get("timestamp")
        .and_then(Value::as_str)
        .and_then(parse_time)
        .unwrap_or_else(|| cx.builder.last_time());
    let message = value.get("message").unwrap_or(&Value::Null);
    match value.get("type").and_then(Value::as_str) {
        Some("assistant") => {
            let id = message
                .get("id")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned();
            if answer.as_ref().is_some_and(|a| a.id != id || id.is_empty())
                && let Some(done) = answer.take()
            {
                emit(cx, done)?;
            }
            let current = answer.get_or_insert_with(|| Answer {
                id,
                time,
                ..Answer::default()
            });
            for block in blocks(message) {
                match block.get("type").and_then(Value::as_str) {
                    Some("text") => current.text.push(text(block, "text")),
                    Some("thinking") => current.thinking.push(text(block, "thinking")),
                    Some("tool_use") => {
                        let input = block.get("input").cloned().unwrap_or(json!({}));
                        let (name, arguments) = from_claude_code(&text(block, "name"), &input);
                        current.calls.push(ToolCallRequest {
                            id: text(block, "id"),
                            name,
                            arguments,
                        });
                    }
                    _ => {}
                }
            }
            if let Some(usage) = message.get("usage").filter(|u| u.is_object()) {
                // Claude Code repeats the message's usage on each of its records: the last
                // one counts once.
                let count = |key: &str| usage.get(key).and_then(Value::as_u64);
                current.usage = Some(Usage {
                    input_tokens: count("input_tokens")
                        .unwrap_or(0)
                        .saturating_add(count("cache_creation_input_tokens").unwrap_or(0)),
                    output_tokens: count("output_tokens").unwrap_or(0),
                    cache_read_tokens: count("cache_read_input_tokens").filter(|&c| c > 0),
                    reasoning_tokens: None,
                });
            }
            cx.builder.read += 1;
            Ok(())
        }
        Some("user") => {
            if let Some(done) = answer.take() {
                emit(cx, done)?;
            }
            cx.builder.read += 1;
            let meta = value.get("isMeta").and_then(Value::as_bool) == Some(true);
            let content = message.get("content");
            if let Some(prompt) = content.and_then(Value::as_str) {
                return prompt_event(cx, time, prompt, meta);
            }
            let mut prompt = Vec::new();
            for block in blocks(message) {
                match block.get("type").and_then(Value::as_str) {
                    Some("tool_result") => tool_result(cx, time, block)?,
                    Some("text") => prompt.push(text(block, "text")),
                    _ => {}
                }
            }
            if prompt.is_empty() {
                Ok(())
            } else {
                prompt_event(cx, time, &prompt.join("\n"), meta)
            }
        }
        _ => {
            cx.builder.skipped += 1;
            Ok(())
        }
    }
}

fn blocks(message: &Value) -> impl Iterator<Item = &Value> {
    message
        .get("content")
        .and_then(Value::as_array)
        .into_iter()
        .flatten()
}

fn text(value: &Value, key: &str) -> String {
    value
        .get(key)
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned()
}

/// A person's prompt opens a turn (ending the one before); context Claude Code injected
/// (`isMeta`) joins the turn it is in as a plugin's message.
fn prompt_event(
    cx: &mut Context<'_>,
    time: i64,
    text: &str,
    meta: bool,
) -> Result<(), TransferError> {
    if !meta || cx.builder.turn().is_none() {
        cx.builder.end_turn(time, TurnEndReason::Completed)?;
        cx.builder.start_turn(time)?;
    }
    let source = if meta {
        MessageSource::Plugin {
            plugin: "claude-code".to_owned(),
        }
    } else {
        MessageSource::User
    };
    cx.builder.push(
        time,
        EventData::UserMessage {
            message: UserMessage {
                text: text.to_owned(),
                source,
            },
        },
    )
}

fn tool_result(cx: &mut Context<'_>, time: i64, block: &Value) -> Result<(), TransferError> {
    let Some((turn, step)) = cx.builder.step() else {
        // A result with no call before it: nothing in dsh's log can hold it.
        cx.builder.skipped += 1;
        return Ok(());
    };
    let content = match block.get("content") {
        Some(Value::String(text)) => text.clone(),
        Some(Value::Array(parts)) => parts
            .iter()
            .filter_map(|p| p.get("text").and_then(Value::as_str))
            .collect::<Vec<_>>()
            .join("\n"),
        _ => String::new(),
    };
    cx.builder.push(
        time,
        EventData::ToolResult {
            turn,
            step,
            call_id: text(block, "tool_use_id"),
            content,
            is_error: block.get("is_error").and_then(Value::as_bool) == Some(true),
            code: None,
            exit_code: None,
        },
    )
}

/// One model answer: a step of the open turn (a turn of its own when none is open).
fn emit(cx: &mut Context<'_>, answer: Answer) -> Result<(), TransferError> {
    let time = answer.time;
    let turn = match cx.builder.turn() {
        Some(turn) => turn,
        None => cx.builder.start_turn(time)?,
    };
    cx.builder.close_step(time)?;
    let step = cx.builder.last_step() + 1;
    cx.builder.push(time, EventData::StepStart { turn, step })?;
    if !answer.thinking.is_empty() {
        cx.builder.push(
            time,
            EventData::AssistantThought {
                turn,
                step,
                text: answer.thinking.join("\n"),
            },
        )?;
    }
    let calls = answer.calls.clone();
    cx.builder.push(
        time,
        EventData::AssistantMessage {
            turn,
            step,
            message: AssistantMessage {
                text: answer.text.join("\n"),
                tool_calls: answer.calls,
            },
            usage: answer.usage,
        },
    )?;
    for call in calls {
        cx.builder.push(
            time,
            EventData::ToolCall {
                turn,
                step,
                call_id: call.id,
                name: call.name,
                arguments: call.arguments,
            },
        )?;
    }
    Ok(())
}

/// RFC 3339 UTC (`2025-12-02T13:00:00.123Z`, as Claude Code writes) to Unix milliseconds.
pub(super) fn parse_time(text: &str) -> Option<i64> {
    let (date, rest) = text.split_once('T')?;
    let mut date = date.splitn(3, '-').map(str::parse::<i64>);
    let (y, m, d) = (date.next()?.ok()?, date.next()?.ok()?, date.next()?.ok()?);
    let rest = rest.trim_end_matches('Z');
    let (clock, millis) = match rest.split_once('.') {
        Some((clock, fraction)) => {
            let digits: String = fraction
                .chars()
                .take_while(char::is_ascii_digit)
                .take(3)
                .collect();
            let padded = format!("{digits:0<3}");
            (clock, padded.parse::<i64>().ok()?)
        }
        None => (rest, 0),
    };
    let mut clock = clock.splitn(3, ':').map(str::parse::<i64>);
    let (h, min, s) = (
        clock.next()?.ok()?,
        clock.next()?.ok()?,
        clock.next()?.ok()?,
    );
    // Days from 1970-01-01 to a proleptic Gregorian date (Howard Hinnant's algorithm).
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    Some(((days * 86_400 + h * 3600 + min * 60 + s) * 1000) + millis)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn times_read_back_what_the_projection_writes() {
        for ms in [0, 1_764_680_400_123, 951_782_400_000] {
            let text = crate::hooks::claude_timestamp(ms);
            assert_eq!(parse_time(&text), Some(ms), "{text}");
        }
    }
}
