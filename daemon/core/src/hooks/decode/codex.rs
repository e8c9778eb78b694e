//! The Codex dialect's decoding (its hooks reference and the output parser of codex-rs's hooks
//! crate): the JSON must fit the event's output schema exactly, and each event has the rules of
//! the functions below; see the parent module for where dsh is stricter.

use serde_json::{Map, Value};

use super::super::EventName;
use super::{
    HookOutput, Verdict, codex_looks_like_json, json_object, non_empty, plain_text_is_context, text,
};

/// Exit 2: every blocking event needs a reason on stderr (upstream: "exited with code 2 but did
/// not write a blocking reason to stderr" fails the hook); SessionStart and SessionEnd treat it as
/// any other failing exit.
pub(super) fn exit_two(stderr: &str, event: EventName) -> HookOutput {
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

pub(super) fn stdout(stdout: &str, event: EventName) -> HookOutput {
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
