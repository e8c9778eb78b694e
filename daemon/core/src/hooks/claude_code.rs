//! The Claude Code dialect: its payload shape, `CLAUDE_PROJECT_DIR`, and the
//! `${CLAUDE_PROJECT_DIR}` / `${CLAUDE_PLUGIN_ROOT}` expansion in commands.
//!
//! Payload (Claude Code's hooks reference, "Common input fields" and each event's input): the
//! common `session_id`, `prompt_id` (`<session>-prompt-<turn>`; not on SessionStart, before any
//! prompt, nor inside a child agent), `transcript_path` (always a string, `""` when the backend has no
//! per-session file), `cwd`, `permission_mode` (dsh has no permission modes: `default`) and
//! `hook_event_name`, in the reference's order, then the event's fields, compact, followed by a
//! newline (so `read -r` works). Tools appear as Claude Code's (`tools.rs`): the bash tool is
//! `Bash` with `{command, description?, timeout?, run_in_background?}` and responds
//! `{stdout, stderr, interrupted, isImage}`.
//!
//! Subagents: SubagentStart/SubagentStop carry the **parent's** session id and transcript (as
//! upstream does) plus the child's `agent_id`, `agent_type` and, on SubagentStop,
//! `agent_transcript_path`. Events fired inside a child agent are the parent session's too, with
//! the child's `agent_id` and `agent_type` after the common fields ("When running … inside a
//! subagent, two additional fields are included").

use std::collections::BTreeMap;
use std::path::Path;

use super::payload::{Payload, path_text, transcript};
use super::tools;
use super::transcript::Transcripts;
use super::{Dialect, HookContext, HookEvent};
use crate::persistence::PersistenceHandle;
use dsh_session::SessionHeader;

/// The environment variable naming the project (the session cwd).
pub(super) const PROJECT_DIR: &str = "CLAUDE_PROJECT_DIR";
/// The environment variable naming the directory of the hook file's plugin.
pub(super) const PLUGIN_ROOT: &str = "CLAUDE_PLUGIN_ROOT";

const DIALECT: Dialect = Dialect::ClaudeCode;

/// The stdin bytes for `event`.
/// `projections`: the Claude-Code-format transcripts to name instead of the sessions' own files
/// (`hooks.claude_code_transcript = "claude"`).
pub(super) fn payload(
    persistence: &PersistenceHandle,
    ctx: &HookContext,
    event: &HookEvent,
    projections: Option<&Transcripts>,
) -> Vec<u8> {
    let header = &ctx.header;
    let session = ctx.subagent.as_ref().map_or(header, |s| &s.parent);
    let transcript_of = |header: &SessionHeader| match projections {
        Some(projections) => path_text(&projections.path(&header.id)),
        None => transcript(persistence, header).unwrap_or_default(),
    };
    let transcript_path = transcript_of(session);
    let mut p = Payload::new().str("session_id", session.id.as_str());
    // Claude Code sends the prompt's id after `session_id`, absent before the first prompt
    // (SessionStart) and, here, inside a child agent (whose turn is not the parent's prompt).
    if let (Some(turn), None, false) = (
        ctx.turn,
        &ctx.subagent,
        event.name() == super::EventName::SessionStart,
    ) {
        p = p.str("prompt_id", &prompt_id(session, turn));
    }
    let mut p = p
        .str("transcript_path", &transcript_path)
        .str("cwd", &path_text(&header.cwd))
        .str("permission_mode", "default")
        .str("hook_event_name", event.name().as_str());
    if let Some(subagent) = &ctx.subagent {
        p = p
            .str("agent_id", header.id.as_str())
            .str("agent_type", &subagent.agent_type);
    }
    // Claude Code sends the effort on the events of a tool-use context only (not on the
    // session's own: SessionStart, UserPromptSubmit, ...).
    if let (Some(effort), true) = (ctx.effort, in_tool_use_context(event.name())) {
        p = p.value("effort", &serde_json::json!({"level": effort.as_str()}));
    }
    let p = match event {
        HookEvent::SessionStart { source } => {
            p.str("source", source.as_str()).str("model", &ctx.model)
        }
        HookEvent::UserPromptSubmit { prompt } => p.str("prompt", prompt),
        HookEvent::PreToolUse {
            tool_name,
            tool_input,
            tool_use_id,
        } => p
            .tool(DIALECT, tool_name, tool_input, &header.cwd)
            .str("tool_use_id", tool_use_id),
        // "An optional `permission_suggestions` array": dsh offers what it can honour when a
        // hook echoes it back as `updatedPermissions` (`decode/updates.rs`).
        HookEvent::PermissionRequest {
            tool_name,
            tool_input,
            ..
        } => p.tool(DIALECT, tool_name, tool_input, &header.cwd).value(
            "permission_suggestions",
            &super::decode::suggestions(
                tool_name,
                tool_input
                    .get("command")
                    .and_then(serde_json::Value::as_str),
            ),
        ),
        HookEvent::PermissionDenied {
            tool_name,
            tool_input,
            tool_use_id,
            reason,
        } => p
            .tool(DIALECT, tool_name, tool_input, &header.cwd)
            .str("tool_use_id", tool_use_id)
            .str("reason", reason),
        HookEvent::PostToolUseFailure {
            tool_name,
            tool_input,
            tool_use_id,
            error,
            is_interrupt,
            duration_ms,
        } => p
            .tool(DIALECT, tool_name, tool_input, &header.cwd)
            .str("tool_use_id", tool_use_id)
            .str("error", error)
            .bool("is_interrupt", *is_interrupt)
            .num("duration_ms", *duration_ms),
        HookEvent::InstructionsLoaded {
            file_path,
            memory_type,
            load_reason,
        } => p
            .str("file_path", file_path)
            .str("memory_type", memory_type)
            .str("load_reason", load_reason),
        HookEvent::PreCompact {
            trigger,
            custom_instructions,
        } => p
            .str("trigger", trigger.as_str())
            .str("custom_instructions", custom_instructions),
        HookEvent::PostCompact {
            trigger,
            compact_summary,
        } => p
            .str("trigger", trigger.as_str())
            .str("compact_summary", compact_summary),
        HookEvent::Notification {
            kind,
            message,
            title,
        } => p
            .str("message", message)
            .str("title", title)
            .str("notification_type", kind.as_str()),
        HookEvent::StopFailure {
            kind,
            details,
            last_assistant_message,
        } => p
            .str("error", kind.as_str())
            .str("error_details", details)
            .str(
                "last_assistant_message",
                last_assistant_message.as_deref().unwrap_or_default(),
            ),
        HookEvent::PostToolUse {
            tool_name,
            tool_input,
            tool_use_id,
            tool_response,
            duration_ms,
        } => p
            .tool(DIALECT, tool_name, tool_input, &header.cwd)
            .value(
                "tool_response",
                &tools::response(DIALECT, tool_name, tool_response),
            )
            .str("tool_use_id", tool_use_id)
            .num("duration_ms", *duration_ms),
        HookEvent::Stop {
            stop_hook_active,
            last_assistant_message,
        } => p.bool("stop_hook_active", *stop_hook_active).str(
            "last_assistant_message",
            last_assistant_message.as_deref().unwrap_or_default(),
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
            .str("agent_transcript_path", &transcript_of(child))
            .str(
                "last_assistant_message",
                last_assistant_message.as_deref().unwrap_or_default(),
            ),
        HookEvent::SessionEnd { reason } => p.str("reason", reason.as_str()),
    };
    p.finish(true)
}

fn in_tool_use_context(event: super::EventName) -> bool {
    use super::EventName as E;
    matches!(
        event,
        E::PreToolUse
            | E::PostToolUse
            | E::PostToolUseFailure
            | E::PermissionRequest
            | E::PermissionDenied
            | E::Stop
            | E::SubagentStop
    )
}

/// Claude Code's `prompt_id`: one per prompt; dsh's prompts are its turns.
fn prompt_id(session: &dsh_session::SessionHeader, turn: u32) -> String {
    format!("{}-prompt-{turn}", session.id.as_str())
}

/// The variables a Claude Code hook gets on top of the executor's environment:
/// `CLAUDE_PROJECT_DIR`, `CLAUDE_PLUGIN_ROOT` only for a plugin's hooks file (Claude Code
/// leaves it unset for settings files), and `CLAUDE_EFFORT` when the agent asks for an effort.
pub(super) fn env(
    cwd: &Path,
    plugin_root: Option<&Path>,
    effort: Option<dsh_session::ReasoningEffort>,
) -> BTreeMap<String, String> {
    let mut env = BTreeMap::from([(PROJECT_DIR.to_owned(), path_text(cwd))]);
    if let Some(root) = plugin_root {
        env.insert(PLUGIN_ROOT.to_owned(), path_text(root));
    }
    if let Some(effort) = effort {
        env.insert("CLAUDE_EFFORT".to_owned(), effort.as_str().to_owned());
    }
    env
}

/// Expands `${CLAUDE_PROJECT_DIR}` and `${CLAUDE_PLUGIN_ROOT}` in `command`.
///
/// A value made only of characters that mean nothing to the shell is substituted as text (so it
/// also works inside single quotes, as upstream's substitution does). Any other value is left for
/// bash to expand from the exported variable of the same name: pasting a directory named
/// `$(rm -rf ~)` into a command line would run it.
pub(super) fn expand_command(command: &str, cwd: &Path, plugin_root: Option<&Path>) -> String {
    let mut out = command.to_owned();
    for (name, value) in [(PROJECT_DIR, Some(cwd)), (PLUGIN_ROOT, plugin_root)] {
        // Without a plugin root the variable is unset, and bash expands it to nothing.
        let Some(value) = value else { continue };
        let token = format!("${{{name}}}");
        let value = path_text(value);
        if out.contains(&token) && shell_inert(&value) {
            out = out.replace(&token, &value);
        }
    }
    out
}

fn shell_inert(value: &str) -> bool {
    !value.is_empty()
        && value
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b"/._-+,:@%=".contains(&b))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn expansion_is_textual_only_for_inert_values() {
        let cmd = "'${CLAUDE_PROJECT_DIR}'/x ${CLAUDE_PLUGIN_ROOT}/y ${CLAUDE_PROJECT_DIR}";
        assert_eq!(
            expand_command(cmd, Path::new("/p/q-1"), Some(Path::new("/r"))),
            "'/p/q-1'/x /r/y /p/q-1"
        );
        assert_eq!(
            expand_command(cmd, Path::new("/p/$(boom)"), Some(Path::new("/r s"))),
            cmd,
            "unsafe values are left to the shell's own expansion"
        );
        assert_eq!(
            expand_command(
                "${OTHER} $CLAUDE_PROJECT_DIR",
                Path::new("/p"),
                Some(Path::new("/r"))
            ),
            "${OTHER} $CLAUDE_PROJECT_DIR"
        );
    }
}
