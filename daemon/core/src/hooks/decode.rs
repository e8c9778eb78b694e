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

use super::runner::RunEnd;
use super::{Dialect, EventName};

/// What one hook asked for, as recorded in `hook/result`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Nothing.
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct HookOutput {
    pub verdict: Verdict,
    /// The reason for a block, deny or ask; on PostToolUse, the feedback for the model.
    pub reason: Option<String>,
    /// `continue: false`.
    pub stop: bool,
    pub stop_reason: Option<String>,
    pub additional_context: Option<String>,
    pub system_message: Option<String>,
    /// PreToolUse `updatedInput`, in the dialect's shape, when the dialect honours it here.
    pub updated_input: Option<Value>,
    /// For an error: why. Otherwise: what upstream would have said where dsh was stricter.
    pub note: Option<String>,
}

impl HookOutput {
    fn with(verdict: Verdict) -> Self {
        Self {
            verdict,
            reason: None,
            stop: false,
            stop_reason: None,
            additional_context: None,
            system_message: None,
            updated_input: None,
            note: None,
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
        (Dialect::Codex, Some(2)) => codex_exit_two(&end.stderr, event),
        (Dialect::ClaudeCode, Some(0)) => claude_code_stdout(end.stdout.trim(), event),
        (Dialect::Codex, Some(0)) => codex_stdout(end.stdout.trim(), event),
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
    if claude_code_takes_context(event) {
        out.additional_context = text(specific, "additionalContext");
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Codex

/// Exit 2: every blocking event needs a reason on stderr (upstream: "exited with code 2 but did
/// not write a blocking reason to stderr" fails the hook); SessionStart and SessionEnd treat it as
/// any other failing exit.
fn codex_exit_two(stderr: &str, event: EventName) -> HookOutput {
    let reason = non_empty(stderr);
    match (event, reason) {
        (
            EventName::PreToolUse
            | EventName::UserPromptSubmit
            | EventName::Stop
            | EventName::SubagentStop
            | EventName::PostToolUse,
            Some(reason),
        ) => HookOutput::blocked(Verdict::Block, Some(reason)),
        // Stricter than upstream, which lets the call or the prompt through: the hook asked to
        // block, and a missing message is no reason to run what it meant to stop.
        (EventName::PreToolUse | EventName::UserPromptSubmit, None) => HookOutput {
            note: Some(format!(
                "{} hook exited with code 2 but did not write a blocking reason to stderr; dsh blocks anyway",
                event.as_str()
            )),
            ..HookOutput::blocked(Verdict::Block, None)
        },
        (EventName::Stop | EventName::SubagentStop, None) => HookOutput::error(
            "Stop hook exited with code 2 but did not write a continuation prompt to stderr",
        ),
        (EventName::PostToolUse, None) => HookOutput::error(
            "PostToolUse hook exited with code 2 but did not write feedback to stderr",
        ),
        _ => HookOutput::error("exit code 2"),
    }
}

fn codex_stdout(stdout: &str, event: EventName) -> HookOutput {
    if stdout.is_empty() {
        return HookOutput::with(Verdict::Pass);
    }
    if !codex_looks_like_json(stdout) {
        let mut out = HookOutput::with(Verdict::Pass);
        if plain_text_is_context(event) {
            out.additional_context = Some(stdout.to_owned());
        } else if event == EventName::Stop {
            // "Stop expects JSON on stdout when it exits 0. Plain text output is invalid."
            return HookOutput::error("hook returned invalid stop hook JSON output");
        } else if matches!(event, EventName::SubagentStart | EventName::SubagentStop) {
            // Upstream parses these outputs as JSON whatever they start with.
            return HookOutput::error(codex_invalid_name(event));
        }
        return out;
    }
    let map = match json_object(stdout) {
        Ok(map) => map,
        Err(note) => return HookOutput::error(note),
    };
    match CodexWire::read(&map, event) {
        Ok(wire) => match event {
            EventName::PreToolUse => codex_pre_tool_use(&wire),
            EventName::PostToolUse => codex_post_tool_use(&wire),
            EventName::UserPromptSubmit => codex_user_prompt_submit(&wire),
            EventName::Stop | EventName::SubagentStop => codex_stop(&wire),
            EventName::SessionStart | EventName::SubagentStart => codex_session_start(&wire),
            _ => HookOutput {
                system_message: wire.system_message.clone(),
                ..HookOutput::with(Verdict::Pass)
            },
        },
        Err(why) => codex_invalid(&map, event, &why),
    }
}

/// What upstream's parser makes of an output that does not fit the event's schema: a failed hook.
/// On PreToolUse and UserPromptSubmit dsh looks at what it asked for anyway, and blocks when it
/// asked to block, deny, ask or stop.
fn codex_invalid(map: &Map<String, Value>, event: EventName, why: &str) -> HookOutput {
    let note = format!("{} ({why})", codex_invalid_name(event));
    if !matches!(event, EventName::PreToolUse | EventName::UserPromptSubmit) {
        return HookOutput::error(note);
    }
    let specific = map.get("hookSpecificOutput").and_then(Value::as_object);
    let permission = specific
        .and_then(|s| s.get("permissionDecision"))
        .and_then(Value::as_str);
    let stops = map.get("continue").and_then(Value::as_bool) == Some(false);
    let blocks = map.get("decision").and_then(Value::as_str) == Some("block")
        || matches!(permission, Some("deny" | "ask"))
        || (event == EventName::PreToolUse
            && specific.is_some_and(|s| s.get("updatedInput").is_some_and(|v| !v.is_null())));
    if !stops && !blocks {
        return HookOutput::error(note);
    }
    let mut out = HookOutput::blocked(
        Verdict::Block,
        specific
            .and_then(|s| text(s, "permissionDecisionReason"))
            .or_else(|| text(map, "reason")),
    );
    if stops {
        out.stop = true;
        out.stop_reason = text(map, "stopReason");
    }
    out.system_message = text(map, "systemMessage");
    out.note = Some(format!("{note}; dsh blocks anyway"));
    out
}

/// Upstream's complaint about an output that does not parse for `event`.
fn codex_invalid_name(event: EventName) -> String {
    let name = match event {
        EventName::PreToolUse => "pre-tool-use",
        EventName::PostToolUse => "post-tool-use",
        EventName::UserPromptSubmit => "user prompt submit",
        EventName::Stop => "stop hook",
        EventName::SessionStart => "session start",
        EventName::SubagentStart => "subagent start",
        EventName::SubagentStop => "subagent stop",
        _ => "hook",
    };
    format!("hook returned invalid {name} JSON output")
}

/// An output that fits a Codex event's output schema (upstream deserialises it with
/// `deny_unknown_fields`; absent and `null` optional fields are the same).
#[derive(Debug, Default)]
struct CodexWire {
    continue_processing: bool,
    stop_reason: Option<String>,
    suppress_output: bool,
    system_message: Option<String>,
    decision: Option<String>,
    /// As written (upstream checks it for emptiness itself).
    reason: Option<String>,
    /// `hookSpecificOutput`, checked.
    specific: Option<Map<String, Value>>,
}

impl CodexWire {
    fn read(map: &Map<String, Value>, event: EventName) -> Result<Self, String> {
        let (decisions, has_specific): (&[&str], bool) = match event {
            EventName::PreToolUse => (&["approve", "block"], true),
            EventName::PostToolUse | EventName::UserPromptSubmit => (&["block"], true),
            EventName::Stop | EventName::SubagentStop => (&["block"], false),
            EventName::SessionStart | EventName::SubagentStart => (&[], true),
            _ => (&[], false),
        };
        let mut wire = Self {
            continue_processing: true,
            ..Self::default()
        };
        for (key, value) in map {
            match key.as_str() {
                "continue" => wire.continue_processing = bool_field(key, value)?,
                "stopReason" => wire.stop_reason = opt_string(key, value)?,
                "suppressOutput" => wire.suppress_output = bool_field(key, value)?,
                "systemMessage" => wire.system_message = opt_string(key, value)?,
                "decision" if !decisions.is_empty() => {
                    wire.decision = opt_string(key, value)?;
                    if let Some(d) = &wire.decision
                        && !decisions.contains(&d.as_str())
                    {
                        return Err(format!("decision {d:?} is not one of {decisions:?}"));
                    }
                }
                "reason" if !decisions.is_empty() => wire.reason = opt_string(key, value)?,
                "hookSpecificOutput" if has_specific => {
                    wire.specific = match value {
                        Value::Null => None,
                        Value::Object(specific) => Some(check_specific(specific, event)?),
                        _ => return Err("hookSpecificOutput must be an object".to_owned()),
                    }
                }
                other => return Err(format!("unknown field {other}")),
            }
        }
        Ok(wire)
    }

    fn specific_text(&self, key: &str) -> Option<String> {
        self.specific.as_ref().and_then(|s| text(s, key))
    }

    fn specific_value(&self, key: &str) -> Option<&Value> {
        self.specific
            .as_ref()
            .and_then(|s| s.get(key))
            .filter(|v| !v.is_null())
    }

    fn base(&self) -> HookOutput {
        HookOutput {
            system_message: self.system_message.as_deref().and_then(non_empty),
            ..HookOutput::with(Verdict::Pass)
        }
    }
}

fn bool_field(key: &str, value: &Value) -> Result<bool, String> {
    value
        .as_bool()
        .ok_or_else(|| format!("{key} must be a boolean"))
}

fn opt_string(key: &str, value: &Value) -> Result<Option<String>, String> {
    match value {
        Value::Null => Ok(None),
        Value::String(s) => Ok(Some(s.clone())),
        _ => Err(format!("{key} must be a string")),
    }
}

/// Checks `hookSpecificOutput` against the event's shape: `hookEventName` is required and must be
/// this event; the other fields are the event's own.
fn check_specific(
    specific: &Map<String, Value>,
    event: EventName,
) -> Result<Map<String, Value>, String> {
    let fields: &[&str] = match event {
        EventName::PreToolUse => &[
            "permissionDecision",
            "permissionDecisionReason",
            "updatedInput",
            "additionalContext",
        ],
        EventName::PostToolUse => &["additionalContext", "updatedMCPToolOutput"],
        _ => &["additionalContext"],
    };
    match specific.get("hookEventName") {
        Some(Value::String(name)) if name == event.as_str() => {}
        Some(other) => {
            return Err(format!(
                "hookSpecificOutput.hookEventName {other} is not {:?}",
                event.as_str()
            ));
        }
        None => return Err("hookSpecificOutput.hookEventName is missing".to_owned()),
    }
    for (key, value) in specific {
        if key == "hookEventName" {
            continue;
        }
        if !fields.contains(&key.as_str()) {
            return Err(format!("unknown field hookSpecificOutput.{key}"));
        }
        match key.as_str() {
            // Any JSON value deserialises into these.
            "updatedInput" | "updatedMCPToolOutput" => {}
            "permissionDecision" => {
                if let Some(d) = opt_string(key, value)?
                    && !["allow", "deny", "ask"].contains(&d.as_str())
                {
                    return Err(format!(
                        "permissionDecision {d:?} is not allow, deny or ask"
                    ));
                }
            }
            _ => {
                opt_string(&format!("hookSpecificOutput.{key}"), value)?;
            }
        }
    }
    Ok(specific.clone())
}

/// PreToolUse (upstream `parse_pre_tool_use`): `continue`, `stopReason` and `suppressOutput` are
/// unsupported; a hook-specific decision, when there is one, takes over from the legacy
/// `decision`/`reason`; `allow` is only valid with `updatedInput` and `updatedInput` only with
/// `allow`; `ask` is unsupported; `deny` and legacy `block` need a non-empty reason; a reason
/// without a decision, and legacy `approve`, are invalid. Every invalid output fails open upstream.
fn codex_pre_tool_use(wire: &CodexWire) -> HookOutput {
    let permission = wire
        .specific
        .as_ref()
        .and_then(|s| s.get("permissionDecision"))
        .and_then(Value::as_str);
    let permission_reason = wire.specific_text("permissionDecisionReason");
    let updated = wire.specific_value("updatedInput");
    let use_specific = permission.is_some()
        || wire.specific.as_ref().is_some_and(|s| {
            s.get("permissionDecisionReason")
                .is_some_and(|v| !v.is_null())
        })
        || updated.is_some();
    let legacy_reason = wire.reason.as_deref().and_then(non_empty);

    let invalid = if !wire.continue_processing {
        Some("PreToolUse hook returned unsupported continue:false")
    } else if wire.stop_reason.is_some() {
        Some("PreToolUse hook returned unsupported stopReason")
    } else if wire.suppress_output {
        Some("PreToolUse hook returned unsupported suppressOutput")
    } else if use_specific {
        if updated.is_some() && permission != Some("allow") {
            Some("PreToolUse hook returned updatedInput without permissionDecision:allow")
        } else {
            match permission {
                Some("allow") if updated.is_none() => {
                    Some("PreToolUse hook returned unsupported permissionDecision:allow")
                }
                Some("ask") => Some("PreToolUse hook returned unsupported permissionDecision:ask"),
                Some("deny") if permission_reason.is_none() => Some(
                    "PreToolUse hook returned permissionDecision:deny without a non-empty permissionDecisionReason",
                ),
                None => Some(
                    "PreToolUse hook returned permissionDecisionReason without permissionDecision",
                ),
                _ => None,
            }
        }
    } else {
        match wire.decision.as_deref() {
            Some("approve") => Some("PreToolUse hook returned unsupported decision:approve"),
            Some("block") if legacy_reason.is_none() => {
                Some("PreToolUse hook returned decision:block without a non-empty reason")
            }
            None if wire.reason.is_some() => {
                Some("PreToolUse hook returned reason without decision")
            }
            _ => None,
        }
    };

    let mut out = wire.base();
    if let Some(invalid) = invalid {
        // Stricter than upstream where the hook asked for the call not to run as the model wrote
        // it: stop, deny, ask, block, or a rewrite upstream would drop (it runs the original).
        let stops = !wire.continue_processing;
        let blocks = (use_specific
            && (matches!(permission, Some("deny" | "ask")) || updated.is_some()))
            || (!use_specific && wire.decision.as_deref() == Some("block"));
        if !stops && !blocks {
            out.verdict = Verdict::Error;
            out.note = Some(invalid.to_owned());
            return out;
        }
        out.verdict = Verdict::Block;
        out.reason = permission_reason.or(legacy_reason).or_else(|| {
            // Without a reason of the hook's own, say why the call did not run: a rewrite that
            // upstream drops would otherwise read as an unexplained block.
            updated
                .is_some()
                .then(|| format!("{invalid}, which Codex does not accept; the call was not run"))
        });
        if stops {
            out.stop = true;
            out.stop_reason = wire.stop_reason.as_deref().and_then(non_empty);
        }
        out.note = Some(format!("{invalid}; dsh does not run the call"));
        return out;
    }
    out.additional_context = wire.specific_text("additionalContext");
    if use_specific {
        match permission {
            Some("deny") => {
                out.verdict = Verdict::Deny;
                out.reason = permission_reason;
            }
            Some("allow") => {
                out.verdict = Verdict::Allow;
                out.updated_input = updated.cloned();
            }
            _ => {}
        }
    } else if wire.decision.as_deref() == Some("block") {
        out.verdict = Verdict::Block;
        out.reason = legacy_reason;
    }
    out
}

/// PostToolUse (upstream `parse_post_tool_use`): `suppressOutput` and `updatedMCPToolOutput` are
/// unsupported; `block` needs a non-empty reason; a reason without a decision is invalid; context
/// counts only from a valid output. `continue: false` replaces the tool's result with the reason,
/// the stop reason, or "PostToolUse hook stopped execution", and the turn goes on ("Codex will
/// replace the tool result with your feedback or stop text and continue from there").
fn codex_post_tool_use(wire: &CodexWire) -> HookOutput {
    let block = wire.decision.as_deref() == Some("block");
    let reason = wire.reason.as_deref().and_then(non_empty);
    let invalid = if wire.suppress_output {
        Some("PostToolUse hook returned unsupported suppressOutput")
    } else if wire.specific_value("updatedMCPToolOutput").is_some() {
        Some("PostToolUse hook returned unsupported updatedMCPToolOutput")
    } else {
        None
    };
    let invalid_block = if block && reason.is_none() {
        Some("PostToolUse hook returned decision:block without a non-empty reason")
    } else if !block && wire.continue_processing && wire.reason.is_some() {
        Some("PostToolUse hook returned reason without decision")
    } else {
        None
    };
    let mut out = wire.base();
    if invalid.is_none() && invalid_block.is_none() {
        out.additional_context = wire.specific_text("additionalContext");
    }
    if !wire.continue_processing {
        let stop_text = wire
            .stop_reason
            .as_deref()
            .and_then(non_empty)
            .unwrap_or_else(|| "PostToolUse hook stopped execution".to_owned());
        out.stop = true;
        out.stop_reason = wire.stop_reason.as_deref().and_then(non_empty);
        out.verdict = Verdict::Block;
        out.reason = Some(reason.unwrap_or(stop_text));
    } else if let Some(note) = invalid.or(invalid_block) {
        out.verdict = Verdict::Error;
        out.note = Some(note.to_owned());
    } else if block {
        out.verdict = Verdict::Block;
        out.reason = reason;
    }
    out
}

/// UserPromptSubmit (upstream `parse_user_prompt_submit`): `block` needs a non-empty reason;
/// `continue: false` stops, keeping the context for later turns.
fn codex_user_prompt_submit(wire: &CodexWire) -> HookOutput {
    let block = wire.decision.as_deref() == Some("block");
    let reason = wire.reason.as_deref().and_then(non_empty);
    let invalid_block = block && reason.is_none();
    let mut out = wire.base();
    if !invalid_block {
        out.additional_context = wire.specific_text("additionalContext");
    }
    if !wire.continue_processing {
        out.stop = true;
        out.stop_reason = wire.stop_reason.as_deref().and_then(non_empty);
    } else if invalid_block {
        // Stricter than upstream, which processes the prompt: the hook asked to block it.
        out.verdict = Verdict::Block;
        out.note = Some(
            "UserPromptSubmit hook returned decision:block without a non-empty reason; dsh blocks anyway"
                .to_owned(),
        );
    } else if block {
        out.verdict = Verdict::Block;
        out.reason = reason;
    }
    out
}

/// Stop (upstream `parse_stop`): `continue: false` takes precedence over a block; a block needs a
/// non-empty reason, which becomes the continuation prompt.
fn codex_stop(wire: &CodexWire) -> HookOutput {
    let mut out = wire.base();
    let reason = wire.reason.as_deref().and_then(non_empty);
    if !wire.continue_processing {
        out.stop = true;
        out.stop_reason = wire.stop_reason.as_deref().and_then(non_empty);
    } else if wire.decision.as_deref() == Some("block") {
        match reason {
            Some(reason) => {
                out.verdict = Verdict::Block;
                out.reason = Some(reason);
            }
            None => {
                out.verdict = Verdict::Error;
                out.note =
                    Some("Stop hook returned decision:block without a non-empty reason".to_owned());
            }
        }
    }
    out
}

/// SessionStart (upstream `parse_session_start`): context, and `continue: false` stops.
fn codex_session_start(wire: &CodexWire) -> HookOutput {
    let mut out = wire.base();
    out.additional_context = wire.specific_text("additionalContext");
    if !wire.continue_processing {
        out.stop = true;
        out.stop_reason = wire.stop_reason.as_deref().and_then(non_empty);
    }
    out
}

mod permission;

#[cfg(test)]
mod tests;
