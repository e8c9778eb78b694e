//! Decoding one hook's exit status and output into a neutral [`HookOutput`], by the rules of the
//! hook's own dialect.
//!
//! Both dialects: anything but exit 0 or 2 (other codes, signals, timeouts, cancellation, failure
//! to start) is a non-blocking error; exit 2 ignores stdout; on exit 0 stdout that looks like JSON
//! must be a JSON object (dsh records anything else as an error: a hook that meant to decide and
//! failed is worth a record; both harnesses ignore or fail such output, never act on it); other
//! plain text on stdout of SessionStart and UserPromptSubmit is context for the model (both
//! references: "stdout is added as context"). What looks like JSON differs: Claude Code parses
//! stdout as JSON only when it starts with `{` (its debug log says "Hook output does not start
//! with {, treating as plain text", anthropics/claude-code#10463), so a validator printing
//! `[12:00] ✓ Prompt validated` adds that line as context; Codex also treats `[` as JSON
//! (`looks_like_json` in codex-rs's output parser), so the same line fails a Codex hook.
//!
//! **Claude Code** (its hooks reference, "Exit code output", "JSON output", "Decision control"):
//! exit 2 blocks with stderr as the reason (an empty stderr still blocks); JSON fields are read
//! leniently — values of the wrong type are ignored, as are unknown fields — `continue: false`
//! stops with `stopReason` and takes precedence over any decision; `decision` is `block` (and, on
//! PreToolUse, the deprecated `approve`/`block`, which "map to allow and deny");
//! `hookSpecificOutput` applies when its `hookEventName` is this event or absent, with
//! `permissionDecision` (`allow`/`deny`/`ask`, and `defer`, which dsh treats as `ask`),
//! `permissionDecisionReason`, `updatedInput` and `additionalContext`.
//!
//! **Codex** (its hooks reference and the output parser of codex-rs's hooks crate): the JSON must
//! fit the event's output schema exactly (unknown fields, wrong types or a `hookSpecificOutput`
//! without this event's `hookEventName` make the hook fail: "hook returned invalid … JSON
//! output"), and each event has the rules of `codex_*` below: what upstream calls unsupported or
//! invalid marks the hook failed and fails open. Where that would let through something the hook
//! asked to stop (a deny without a reason, exit 2 without stderr, `ask`, `continue: false` or an
//! invalid `updatedInput` on PreToolUse, a block without a reason on UserPromptSubmit), dsh blocks
//! instead and records upstream's complaint; CONFIG.md lists these.

use serde_json::{Map, Value};

use super::job::RunEnd;
use super::{Dialect, EventName};

/// What one hook asked for, as recorded in `hook/result`.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Nothing.
    #[default]
    Pass,
    /// `permissionDecision: "allow"` or `decision: "approve"`.
    Allow,
    /// `permissionDecision: "ask"`.
    Ask,
    /// `permissionDecision: "deny"`.
    Deny,
    /// Exit 2 or `decision: "block"` (on PostToolUse: feedback for the model).
    Block,
    /// The hook failed; its output is ignored (except `systemMessage`, which Codex still shows).
    Error,
}

/// One hook's decoded output.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(super) struct HookOutput {
    pub verdict: Verdict,
    /// The reason for a block, deny or ask; on PostToolUse, the feedback for the model.
    pub reason: Option<String>,
    /// `continue: false`.
    pub stop: bool,
    pub stop_reason: Option<String>,
    pub additional_context: Option<String>,
    pub system_message: Option<String>,
    /// PreToolUse or PermissionRequest `updatedInput`, in the dialect's shape, when the dialect
    /// honours it here.
    pub updated_input: Option<Value>,
    /// PermissionRequest `updatedPermissions` dsh honours: the session rules to add.
    pub rules: Vec<SessionRule>,
    /// PermissionDenied `retry: true`: the model is told it may retry the call.
    pub retry: bool,
    /// Claude Code SessionStart `sessionTitle`: the session's new title.
    pub session_title: Option<String>,
    /// For an error: why. Otherwise: what upstream would have said where dsh was stricter.
    pub note: Option<String>,
}

impl HookOutput {
    fn with(verdict: Verdict) -> Self {
        Self {
            verdict,
            ..Self::default()
        }
    }

    pub(super) fn error(note: impl Into<String>) -> Self {
        Self {
            note: Some(note.into()),
            ..Self::with(Verdict::Error)
        }
    }

    fn blocked(verdict: Verdict, reason: Option<String>) -> Self {
        Self {
            reason,
            ..Self::with(verdict)
        }
    }

    /// The `decision` string of the `hook/result` record.
    pub(super) fn record_decision(&self) -> &'static str {
        match self.verdict {
            Verdict::Error => "error",
            _ if self.stop => "stop",
            Verdict::Pass => "pass",
            Verdict::Allow => "allow",
            Verdict::Ask => "ask",
            Verdict::Deny => "deny",
            Verdict::Block => "block",
        }
    }

    /// Why the hook failed, when it did.
    pub(super) fn error_note(&self) -> Option<&str> {
        match self.verdict {
            Verdict::Error => Some(self.note.as_deref().unwrap_or("failed")),
            _ => None,
        }
    }
}

/// Decodes how a hook of `dialect` on `event` ended.
pub(super) fn decode(end: &RunEnd, event: EventName, dialect: Dialect) -> HookOutput {
    if let Some(failure) = &end.failure {
        return HookOutput::error(failure.clone());
    }
    if event == EventName::PermissionRequest {
        return permission::decode(end, dialect);
    }
    match (dialect, end.exit_code) {
        (_, None) => HookOutput::error("no exit status"),
        (Dialect::ClaudeCode, Some(2)) => {
            HookOutput::blocked(Verdict::Block, non_empty(end.stderr.trim()))
        }
        (Dialect::Codex, Some(2)) => codex::exit_two(&end.stderr, event),
        (Dialect::ClaudeCode, Some(0)) => claude_code_stdout(end.stdout.trim(), event),
        (Dialect::Codex, Some(0)) => codex::stdout(end.stdout.trim(), event),
        (_, Some(code)) => HookOutput::error(format!("exit code {code}")),
    }
}

/// Parses stdout that looks like JSON; `Err` is the error note.
fn json_object(stdout: &str) -> Result<Map<String, Value>, String> {
    match serde_json::from_str::<Value>(stdout) {
        Ok(Value::Object(map)) => Ok(map),
        Ok(_) => Err("stdout is JSON but not an object".to_owned()),
        Err(e) => Err(format!("stdout is not valid JSON: {e}")),
    }
}

/// Codex's rule (`looks_like_json` of codex-rs's output parser): `{` or `[` after trimming.
fn codex_looks_like_json(stdout: &str) -> bool {
    stdout.starts_with('{') || stdout.starts_with('[')
}

/// Claude Code's rule: JSON only when the trimmed stdout starts with `{`.
fn claude_code_looks_like_json(stdout: &str) -> bool {
    stdout.starts_with('{')
}

/// Plain text that both dialects add as context (SessionStart and UserPromptSubmit).
fn plain_text_is_context(event: EventName) -> bool {
    matches!(event, EventName::SessionStart | EventName::UserPromptSubmit)
}

fn non_empty(s: &str) -> Option<String> {
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_owned())
}

fn text(map: &Map<String, Value>, key: &str) -> Option<String> {
    map.get(key).and_then(Value::as_str).and_then(non_empty)
}

// ---------------------------------------------------------------------------------------------
// Claude Code

fn claude_code_stdout(stdout: &str, event: EventName) -> HookOutput {
    if stdout.is_empty() {
        return HookOutput::with(Verdict::Pass);
    }
    if !claude_code_looks_like_json(stdout) {
        let mut out = HookOutput::with(Verdict::Pass);
        if plain_text_is_context(event) {
            out.additional_context = Some(stdout.to_owned());
        }
        return out;
    }
    match json_object(stdout) {
        Ok(map) => claude_code_object(&map, event),
        Err(note) => HookOutput::error(note),
    }
}

/// Events whose `additionalContext` Claude Code's reference lists.
fn claude_code_takes_context(event: EventName) -> bool {
    matches!(
        event,
        EventName::SessionStart
            | EventName::UserPromptSubmit
            | EventName::PreToolUse
            | EventName::PostToolUse
            | EventName::PostToolUseFailure
            | EventName::SubagentStart
    )
}

fn claude_code_object(map: &Map<String, Value>, event: EventName) -> HookOutput {
    let mut out = HookOutput::with(match map.get("decision").and_then(Value::as_str) {
        // "The deprecated values approve and block map to allow and deny" (PreToolUse); on other
        // events `block` is the only value and `approve` means nothing to decide.
        Some("approve") => Verdict::Allow,
        Some("block") if event == EventName::PreToolUse => Verdict::Deny,
        Some("block") => Verdict::Block,
        _ => Verdict::Pass,
    });
    out.reason = text(map, "reason");
    if map.get("continue").and_then(Value::as_bool) == Some(false) {
        out.stop = true;
        out.stop_reason = text(map, "stopReason");
    }
    out.system_message = text(map, "systemMessage");

    let Some(specific) = map.get("hookSpecificOutput").and_then(Value::as_object) else {
        return out;
    };
    match specific.get("hookEventName") {
        None | Some(Value::Null) => {}
        Some(Value::String(name)) if name == event.as_str() => {}
        // Written for another event (or not a name at all): its event-scoped fields do not apply.
        Some(_) => return out,
    }
    if event == EventName::PreToolUse {
        let decision = match specific.get("permissionDecision").and_then(Value::as_str) {
            Some("allow") => Some(Verdict::Allow),
            Some("deny") => Some(Verdict::Deny),
            // `defer` hands the call to an interactive approver, which dsh does not have.
            Some("ask" | "defer") => Some(Verdict::Ask),
            _ => None,
        };
        if let Some(decision) = decision {
            out.verdict = decision;
        }
        if let Some(reason) = text(specific, "permissionDecisionReason") {
            out.reason = Some(reason);
        }
        // Honoured beside `allow` and, as upstream does, with no decision at all; beside `ask`
        // the call is denied anyway (no approver), and beside `deny` it never runs.
        if matches!(out.verdict, Verdict::Allow | Verdict::Pass) {
            out.updated_input = specific
                .get("updatedInput")
                .filter(|v| !v.is_null())
                .cloned();
        }
    }
    if event == EventName::PermissionDenied {
        out.retry = specific.get("retry").and_then(Value::as_bool) == Some(true);
    }
    if event == EventName::SessionStart {
        out.session_title = text(specific, "sessionTitle");
    }
    if claude_code_takes_context(event) {
        out.additional_context = text(specific, "additionalContext");
    }
    out
}

mod codex;
mod permission;
mod updates;

pub(crate) use updates::SessionRule;
pub(crate) use updates::{rewritten_arguments, suggestions};

#[cfg(test)]
mod tests;
