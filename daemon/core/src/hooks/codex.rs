//! The Codex dialect: its payload shape.
//!
//! Payload (the command input structs of codex-rs's hooks crate, fields in their declared order):
//! `session_id`, then on the turn-scoped events (UserPromptSubmit, PreToolUse, PostToolUse, Stop)
//! `turn_id` (the turn number as a string), then for events fired inside a child agent
//! `agent_id` and `agent_type` (upstream's subagent fields, which it sends on the events it fires
//! inside a subagent; dsh also fires SessionStart and Stop there and marks them the same way),
//! then `transcript_path` (a string, or `null` when the backend has no
//! per-session file), `cwd`, `hook_event_name`, `model`, `permission_mode` (`default`; not on
//! SessionEnd, PreCompact or PostCompact), then the event's fields. PreCompact and PostCompact
//! are turn-scoped too (`turn_id`; a manual compaction has its own turn) and carry `trigger`
//! only. Tools appear as Codex's (`tools.rs`): the bash tool is
//! `Bash` with `{command}` and responds with its output as a string. Inside a child agent
//! `session_id` is the parent's ("Subagent hooks use the parent session id") and
//! `transcript_path` the child's own. No trailing newline (upstream writes none; scripts use
//! `cat`/`jq`, not `read`). SubagentStart/SubagentStop carry the parent's session and transcript,
//! `turn_id`, then `agent_id`, `agent_type` (and on SubagentStop `stop_hook_active`,
//! `agent_transcript_path`, `last_assistant_message`), as codex-rs's subagent command inputs;
//! PermissionRequest carries `tool_name` and `tool_input` (its command input has no
//! `tool_use_id`; for Bash `{command, description?}`, [`permission_input`]).

use super::payload::{Payload, path_text, transcript};
use super::tools;
use super::{Dialect, EventName, HookContext, HookEvent};
use crate::persistence::PersistenceHandle;

const DIALECT: Dialect = Dialect::Codex;

/// The stdin bytes for `event`.
pub(super) fn payload(
    persistence: &PersistenceHandle,
    ctx: &HookContext,
    event: &HookEvent,
) -> Vec<u8> {
    let header = &ctx.header;
    let name = event.name();
    let session = ctx.subagent.as_ref().map_or(header, |s| &s.parent);
    let mut p = Payload::new().str("session_id", session.id.as_str());
    if matches!(
        name,
        EventName::UserPromptSubmit
            | EventName::PreToolUse
            | EventName::PermissionRequest
            | EventName::PostToolUse
            | EventName::Stop
            | EventName::StopFailure
            | EventName::SubagentStart
            | EventName::SubagentStop
            | EventName::PreCompact
            | EventName::PostCompact
    ) {
        p = p.str("turn_id", &ctx.turn.unwrap_or(0).to_string());
    }
    if let Some(subagent) = &ctx.subagent {
        p = p
            .str("agent_id", header.id.as_str())
            .str("agent_type", &subagent.agent_type);
    }
    p = p
        .opt_str(
            "transcript_path",
            transcript(persistence, header).as_deref(),
        )
        .str("cwd", &path_text(&header.cwd))
        .str("hook_event_name", name.as_str())
        .str("model", &ctx.model);
    // Upstream's SessionEnd and compaction inputs have no permission mode.
    if !matches!(
        name,
        EventName::SessionEnd | EventName::PreCompact | EventName::PostCompact
    ) {
        p = p.str("permission_mode", "default");
    }
    let p = match event {
        HookEvent::SessionStart { source } => p.str("source", source.as_str()),
        HookEvent::UserPromptSubmit { prompt } => p.str("prompt", prompt),
        HookEvent::PreToolUse {
            tool_name,
            tool_input,
            tool_use_id,
        } => p
            .tool(DIALECT, tool_name, tool_input, &header.cwd)
            .str("tool_use_id", tool_use_id),
        HookEvent::PostToolUse {
            tool_name,
            tool_input,
            tool_use_id,
            tool_response,
            ..
        } => p
            .tool(DIALECT, tool_name, tool_input, &header.cwd)
            .value(
                "tool_response",
                &tools::response(DIALECT, tool_name, tool_response),
            )
            .str("tool_use_id", tool_use_id),
        HookEvent::Stop {
            stop_hook_active,
            last_assistant_message,
        } => p
            .bool("stop_hook_active", *stop_hook_active)
            .opt_str("last_assistant_message", last_assistant_message.as_deref()),
        HookEvent::SessionEnd { reason } => p.str("reason", reason.as_str()),
        HookEvent::PermissionRequest {
            tool_name,
            tool_input,
            ..
        } => p
            .str("tool_name", tools::payload_name(DIALECT, tool_name))
            .value(
                "tool_input",
                &permission_input(tool_name, tool_input, &header.cwd),
            ),
        HookEvent::SubagentStart { child, agent_type } => p
            .str("agent_id", child.id.as_str())
            .str("agent_type", agent_type),
        HookEvent::SubagentStop {
            child,
            agent_type,
            last_assistant_message,
        } => p
            .bool("stop_hook_active", false)
            .str("agent_id", child.id.as_str())
            .str("agent_type", agent_type)
            .opt_str(
                "agent_transcript_path",
                transcript(persistence, child).as_deref(),
            )
            .opt_str("last_assistant_message", last_assistant_message.as_deref()),
        HookEvent::StopFailure {
            kind,
            details,
            last_assistant_message,
        } => p
            .str("error", kind.as_str())
            .opt_str("error_details", Some(details))
            .opt_str("last_assistant_message", last_assistant_message.as_deref()),
        // Not fired for Codex (no such event upstream); the engine never asks. An empty tail keeps
        // this total.
        HookEvent::PostToolUseFailure { .. }
        | HookEvent::Notification { .. }
        | HookEvent::InstructionsLoaded { .. }
        | HookEvent::PermissionDenied { .. } => p,
        HookEvent::PreCompact { trigger, .. } | HookEvent::PostCompact { trigger, .. } => {
            p.str("trigger", trigger.as_str())
        }
    };
    p.finish(false)
}

/// Codex's PermissionRequest `tool_input`: for Bash `{command, description?}`, the description
/// being what the request says the command is for (codex-rs's `PermissionRequestPayload::bash`
/// puts the approval's justification there; dsh's is the bash call's `description`, the model's
/// own words for the person asked). PreToolUse and PostToolUse show `{command}` only, as
/// upstream does. Other tools as [`tools::input`] shows them.
fn permission_input(
    tool: &str,
    arguments: &serde_json::Value,
    cwd: &std::path::Path,
) -> serde_json::Value {
    let mut input = tools::input(DIALECT, tool, arguments, cwd);
    if tool == crate::call::BASH
        && let (Some(map), Some(description)) = (
            input.as_object_mut(),
            arguments
                .get("description")
                .and_then(serde_json::Value::as_str)
                .filter(|d| !d.trim().is_empty()),
        )
    {
        map.insert("description".into(), description.into());
    }
    input
}
