//! The Codex dialect: its payload shape.
//!
//! Payload: `session_id`, `transcript_path` (a string, or `null` when the backend has no
//! per-session file), `cwd`, `hook_event_name`, `model`, `permission_mode` (`default`), then
//! `turn_id` (the turn number as a string) on the turn-scoped events, then the event's fields.
//! The bash tool's input is Codex's shell shape `{"command": ...}`; other tools' inputs are passed
//! as they are. No trailing newline (upstream writes none; scripts use `cat`/`jq`, not `read`).
//! Codex has no subagent events.

use serde_json::{Value, json};

use super::payload::{Payload, path_text, transcript};
use super::{EventName, HookContext, HookEvent};
use crate::persistence::PersistenceHandle;

/// The stdin bytes for `event`.
pub(super) fn payload(
    persistence: &PersistenceHandle,
    ctx: &HookContext,
    event: &HookEvent,
) -> Vec<u8> {
    let header = &ctx.header;
    let name = event.name();
    let mut p = Payload::new()
        .str("session_id", header.id.as_str())
        .opt_str(
            "transcript_path",
            transcript(persistence, header).as_deref(),
        )
        .str("cwd", &path_text(&header.cwd))
        .str("hook_event_name", name.as_str())
        .str("model", &ctx.model)
        .str("permission_mode", "default");
    if matches!(
        name,
        EventName::UserPromptSubmit
            | EventName::PreToolUse
            | EventName::PostToolUse
            | EventName::Stop
    ) {
        p = p.str("turn_id", &ctx.turn.unwrap_or(0).to_string());
    }
    let p = match event {
        HookEvent::SessionStart { source } => p.str("source", source.as_str()),
        HookEvent::UserPromptSubmit { prompt } => p.str("prompt", prompt),
        HookEvent::PreToolUse {
            tool_name,
            tool_input,
            tool_use_id,
        } => p
            .str("tool_name", tool_name)
            .value("tool_input", &tool_input_shape(tool_name, tool_input))
            .str("tool_use_id", tool_use_id),
        HookEvent::PostToolUse {
            tool_name,
            tool_input,
            tool_use_id,
            tool_response,
        } => p
            .str("tool_name", tool_name)
            .value("tool_input", &tool_input_shape(tool_name, tool_input))
            .str("tool_use_id", tool_use_id)
            .value("tool_response", tool_response),
        HookEvent::Stop {
            stop_hook_active,
            last_assistant_message,
        } => p
            .bool("stop_hook_active", *stop_hook_active)
            .opt_str("last_assistant_message", last_assistant_message.as_deref()),
        // Not a Codex event; the engine never asks. An empty tail keeps this total.
        HookEvent::SubagentStart { .. } | HookEvent::SubagentStop { .. } => p,
    };
    p.finish(false)
}

/// Codex's shell input: `{"command": <string>}`, `""` when the call has no string command.
fn tool_input_shape(tool_name: &str, input: &Value) -> Value {
    if tool_name != "bash" {
        return input.clone();
    }
    let command = input.get("command").and_then(Value::as_str).unwrap_or("");
    json!({ "command": command })
}
