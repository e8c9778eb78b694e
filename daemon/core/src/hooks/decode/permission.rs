//! PermissionRequest: a hook answers an approval request instead of a person, or leaves it to
//! people.
//!
//! **Claude Code** (its hooks reference, "PermissionRequest decision control"): exit 2 denies with
//! stderr as the message; on exit 0 `hookSpecificOutput.decision.behavior` is `allow` or `deny`
//! (with `message`), and `interrupt: true` beside a deny also stops the turn; `continue: false`
//! stops it too. Anything else (no output, plain text, no `decision`) decides nothing: the request
//! goes to people. Beside an allow ("for `allow` only"), `updatedInput` replaces the call's whole
//! input, translated to dsh's arguments as PreToolUse's is (`rewritten_arguments` in `updates.rs`),
//! and `updatedPermissions` may add session rules (`updates.rs`: what dsh cannot honour is
//! left out and noted in the record). Beside a deny both are ignored, as upstream ignores them.
//!
//! **Codex** (`parse_permission_request` and `permission_request.rs` of codex-rs's hooks crate):
//! the output must fit the schema exactly; `continue: false`, `stopReason`, `suppressOutput`,
//! and a decision with `updatedInput`, `updatedPermissions` or `interrupt: true` make the hook
//! fail, which decides nothing; a deny without a message says "PermissionRequest hook denied
//! approval"; exit 2 denies with stderr, and without stderr fails; plain text decides nothing.

use serde_json::{Map, Value};

use super::super::Dialect;
use super::super::job::RunEnd;
use super::{HookOutput, Verdict, json_object, non_empty, text};

/// Decodes a PermissionRequest hook of `dialect`.
pub(super) fn decode(end: &RunEnd, dialect: Dialect) -> HookOutput {
    if let Some(failure) = &end.failure {
        return HookOutput::error(failure.clone());
    }
    let stdout = end.stdout.trim();
    match (dialect, end.exit_code) {
        (_, None) => HookOutput::error("no exit status"),
        (Dialect::ClaudeCode, Some(2)) => HookOutput::blocked(
            Verdict::Deny,
            Some(non_empty(&end.stderr).unwrap_or_else(|| DENIED.to_owned())),
        ),
        (Dialect::Codex, Some(2)) => match non_empty(&end.stderr) {
            Some(message) => HookOutput::blocked(Verdict::Deny, Some(message)),
            None => HookOutput::error(
                "PermissionRequest hook exited with code 2 but did not write a denial reason to stderr",
            ),
        },
        (_, Some(0)) if stdout.is_empty() => HookOutput::with(Verdict::Pass),
        (Dialect::ClaudeCode, Some(0)) if !stdout.starts_with('{') => {
            HookOutput::with(Verdict::Pass)
        }
        (Dialect::Codex, Some(0)) if !(stdout.starts_with('{') || stdout.starts_with('[')) => {
            HookOutput::with(Verdict::Pass)
        }
        (dialect, Some(0)) => match json_object(stdout) {
            Ok(map) => match dialect {
                Dialect::ClaudeCode => claude_code(&map),
                Dialect::Codex => codex(&map).unwrap_or_else(|why| {
                    HookOutput::error(format!(
                        "hook returned invalid permission-request JSON output ({why})"
                    ))
                }),
            },
            Err(note) => HookOutput::error(note),
        },
        (_, Some(code)) => HookOutput::error(format!("exit code {code}")),
    }
}

/// The default message of a deny that gives none (Codex's words).
const DENIED: &str = "PermissionRequest hook denied approval";

fn claude_code(map: &Map<String, Value>) -> HookOutput {
    let mut out = HookOutput::with(Verdict::Pass);
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
        Some(Value::String(name)) if name == "PermissionRequest" => {}
        Some(_) => return out,
    }
    let Some(decision) = specific.get("decision").and_then(Value::as_object) else {
        return out;
    };
    match decision.get("behavior").and_then(Value::as_str) {
        Some("allow") => {
            out.verdict = Verdict::Allow;
            out.updated_input = decision
                .get("updatedInput")
                .filter(|v| !v.is_null())
                .cloned();
            if let Some(updates) = decision.get("updatedPermissions").filter(|v| !v.is_null()) {
                let (rules, notes) = super::updates::session_rules(updates);
                out.rules = rules;
                if !notes.is_empty() {
                    out.note = Some(notes.join("; "));
                }
            }
        }
        Some("deny") => {
            out.verdict = Verdict::Deny;
            out.reason = Some(text(decision, "message").unwrap_or_else(|| DENIED.to_owned()));
            if decision.get("interrupt").and_then(Value::as_bool) == Some(true) {
                out.stop = true;
                out.stop_reason
                    .get_or_insert_with(|| out.reason.clone().unwrap_or_else(|| DENIED.to_owned()));
            }
        }
        _ => {}
    }
    out
}

/// Codex's schema check and rules; `Err` says why the output is invalid.
fn codex(map: &Map<String, Value>) -> Result<HookOutput, String> {
    let mut out = HookOutput::with(Verdict::Pass);
    let mut specific = None;
    for (key, value) in map {
        match key.as_str() {
            "continue" => match value.as_bool() {
                Some(true) => {}
                Some(false) => {
                    return Err("PermissionRequest hook returned unsupported continue:false".into());
                }
                None => return Err("continue must be a boolean".into()),
            },
            "stopReason" => match value {
                Value::Null => {}
                Value::String(_) => {
                    return Err("PermissionRequest hook returned unsupported stopReason".into());
                }
                _ => return Err("stopReason must be a string".into()),
            },
            "suppressOutput" => match value.as_bool() {
                Some(false) => {}
                Some(true) => {
                    return Err("PermissionRequest hook returned unsupported suppressOutput".into());
                }
                None => return Err("suppressOutput must be a boolean".into()),
            },
            "systemMessage" => match value {
                Value::Null => {}
                Value::String(s) => out.system_message = non_empty(s),
                _ => return Err("systemMessage must be a string".into()),
            },
            "hookSpecificOutput" => match value {
                Value::Null => {}
                Value::Object(s) => specific = Some(s),
                _ => return Err("hookSpecificOutput must be an object".into()),
            },
            other => return Err(format!("unknown field {other}")),
        }
    }
    let Some(specific) = specific else {
        return Ok(out);
    };
    match specific.get("hookEventName") {
        Some(Value::String(name)) if name == "PermissionRequest" => {}
        Some(other) => {
            return Err(format!(
                "hookSpecificOutput.hookEventName {other} is not \"PermissionRequest\""
            ));
        }
        None => return Err("hookSpecificOutput.hookEventName is missing".into()),
    }
    let mut decision = None;
    for (key, value) in specific {
        match key.as_str() {
            "hookEventName" => {}
            "decision" => match value {
                Value::Null => {}
                Value::Object(d) => decision = Some(d),
                _ => return Err("hookSpecificOutput.decision must be an object".into()),
            },
            other => return Err(format!("unknown field hookSpecificOutput.{other}")),
        }
    }
    let Some(decision) = decision else {
        return Ok(out);
    };
    let mut behavior = None;
    let mut message = None;
    for (key, value) in decision {
        match (key.as_str(), value) {
            ("behavior", Value::String(b)) if b == "allow" || b == "deny" => behavior = Some(b),
            ("behavior", other) => {
                return Err(format!("decision.behavior {other} is not allow or deny"));
            }
            ("message", Value::Null) | ("addDirectories", Value::Null) => {}
            ("message", Value::String(m)) => message = non_empty(m),
            ("message", _) => return Err("decision.message must be a string".into()),
            ("updatedInput" | "updatedPermissions", Value::Null) => {}
            ("updatedInput", _) => {
                return Err("PermissionRequest hook returned unsupported updatedInput".into());
            }
            ("updatedPermissions", _) => {
                return Err(
                    "PermissionRequest hook returned unsupported updatedPermissions".into(),
                );
            }
            ("interrupt", Value::Bool(false)) => {}
            ("interrupt", Value::Bool(true)) => {
                return Err("PermissionRequest hook returned unsupported interrupt:true".into());
            }
            ("interrupt", _) => return Err("decision.interrupt must be a boolean".into()),
            // Directories to add to the sandbox: dsh's sandbox is the agent's, not a hook's.
            ("addDirectories", Value::Array(_)) => {}
            (other, _) => return Err(format!("unknown field decision.{other}")),
        }
    }
    match behavior.map(String::as_str) {
        Some("allow") => out.verdict = Verdict::Allow,
        Some(_) => {
            out.verdict = Verdict::Deny;
            out.reason = Some(message.unwrap_or_else(|| DENIED.to_owned()));
        }
        None => return Err("decision.behavior is missing".into()),
    }
    Ok(out)
}
