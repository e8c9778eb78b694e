//! Claude Code's permission update entries (its hooks reference, "Permission update entries"):
//! what a PermissionRequest hook's `updatedPermissions` asks for, and what dsh can honour of it.
//!
//! dsh keeps "allow always" rules per session, each one exact tool, command and directory
//! (`dsh_session::ApprovalRule`), and writes no settings files. So of the six entry types only an
//! `addRules` entry with `behavior: "allow"` and `destination: "session"` can be honoured, and of
//! its rules only a `Bash` rule whose `ruleContent` is one exact command: it becomes a session
//! rule for that command in the directory the request was for, as a person's "allow always"
//! would. Everything else (another destination, `deny`/`ask` rules, a whole-tool rule, a prefix
//! or wildcard pattern, `replaceRules`, `removeRules`, `setMode`, `addDirectories`,
//! `removeDirectories`) is left out with a note naming it and why, so the hook's record says what
//! did not happen. Leaving an entry out never lets more through than the hook's own allow did.
//!
//! The same shape is what dsh offers as `permission_suggestions` ([`suggestions`]): the one entry
//! it can honour, so a hook that echoes a suggestion back gets exactly that rule.
//!
//! `updatedInput` (PreToolUse's, and PermissionRequest's beside an allow) becomes dsh arguments in
//! one place, [`rewritten_arguments`], whichever event carried it.

use serde_json::{Value, json};

use super::super::{Dialect, HookEvent, tools};
use super::{HookOutput, Verdict};
use crate::call::BASH;

/// The dsh arguments of a PreToolUse or PermissionRequest `updatedInput` that `output` carries,
/// checked. One that cannot become arguments the dialect's tool would accept turns the hook's
/// answer into a deny: the call is refused, never run with its original input.
pub(crate) fn rewritten_arguments(
    dialect: Dialect,
    event: &HookEvent,
    output: &mut HookOutput,
) -> Option<serde_json::Value> {
    let updated = output.updated_input.as_ref()?;
    let (tool, arguments) = event.tool_call()?;
    match tools::apply_update(dialect, tool, arguments, updated) {
        Ok(arguments) => Some(arguments),
        Err(error) => {
            output.verdict = Verdict::Deny;
            output.reason = Some(format!(
                "a {} hook rewrote the call with an input {} cannot run, so it was not run: {error}",
                event.name().as_str(),
                tools::payload_name(dialect, tool)
            ));
            output.note = Some(error.to_string());
            None
        }
    }
}

/// A session "allow always" rule a PermissionRequest hook asked for: a dsh tool and one exact
/// command (the directory is the request's).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SessionRule {
    /// The dsh tool, e.g. `bash`.
    pub tool: String,
    /// The exact command the rule allows.
    pub command: String,
}

/// The rules `value` (an `updatedPermissions` array) asks for that dsh honours, and a note for
/// each entry or rule it does not.
pub(super) fn session_rules(value: &Value) -> (Vec<SessionRule>, Vec<String>) {
    let mut rules = Vec::new();
    let mut notes = Vec::new();
    let Some(entries) = value.as_array() else {
        notes.push("updatedPermissions is not an array: nothing was applied".to_owned());
        return (rules, notes);
    };
    for (i, entry) in entries.iter().enumerate() {
        let field = |key: &str| entry.get(key).and_then(Value::as_str).unwrap_or_default();
        let kind = field("type");
        let destination = field("destination");
        let behavior = field("behavior");
        if kind != "addRules" {
            let what = if kind.is_empty() { "(no type)" } else { kind };
            notes.push(format!(
                "updatedPermissions[{i}] {what} is not applied: dsh honours only addRules entries \
                 (session allow rules for exact Bash commands)"
            ));
            continue;
        }
        if destination != "session" {
            notes.push(format!(
                "updatedPermissions[{i}] addRules to {destination:?} is not applied: dsh writes \
                 no settings files; only destination \"session\" is honoured"
            ));
            continue;
        }
        if behavior != "allow" {
            notes.push(format!(
                "updatedPermissions[{i}] addRules with behavior {behavior:?} is not applied: dsh \
                 keeps only allow rules"
            ));
            continue;
        }
        let Some(list) = entry.get("rules").and_then(Value::as_array) else {
            notes.push(format!(
                "updatedPermissions[{i}] addRules has no rules array: nothing was applied"
            ));
            continue;
        };
        for (j, rule) in list.iter().enumerate() {
            let tool = rule.get("toolName").and_then(Value::as_str);
            let content = rule.get("ruleContent").and_then(Value::as_str);
            match (tool, content.map(str::trim)) {
                (Some("Bash"), Some(command)) if !command.is_empty() && !command.contains('*') => {
                    let rule = SessionRule {
                        tool: BASH.to_owned(),
                        command: command.to_owned(),
                    };
                    if !rules.contains(&rule) {
                        rules.push(rule);
                    }
                }
                (Some("Bash"), Some(command)) if command.contains('*') => notes.push(format!(
                    "updatedPermissions[{i}].rules[{j}] Bash({command}) is not applied: dsh rules \
                     allow one exact command, not a prefix or wildcard pattern"
                )),
                (Some(tool), _) => notes.push(format!(
                    "updatedPermissions[{i}].rules[{j}] for {tool} without an exact command is \
                     not applied: dsh rules allow one exact Bash command"
                )),
                (None, _) => notes.push(format!(
                    "updatedPermissions[{i}].rules[{j}] has no toolName: not applied"
                )),
            }
        }
    }
    (rules, notes)
}

/// The `permission_suggestions` of a Claude Code PermissionRequest for a call of dsh's `tool`
/// showing `command` (a bash command): an `addRules` entry allowing that exact command for the
/// session, the one kind of update dsh honours. Other tools get none: their rules are exact
/// arguments, which no Claude Code rule can express.
pub(crate) fn suggestions(tool: &str, command: Option<&str>) -> Value {
    match (tool, command) {
        (BASH, Some(command)) if !command.trim().is_empty() => json!([{
            "type": "addRules",
            "rules": [{"toolName": "Bash", "ruleContent": command}],
            "behavior": "allow",
            "destination": "session",
        }]),
        _ => json!([]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bash(command: &str) -> SessionRule {
        SessionRule {
            tool: BASH.into(),
            command: command.into(),
        }
    }

    #[test]
    fn a_session_allow_rule_for_an_exact_bash_command_is_honoured() {
        let (rules, notes) = session_rules(&json!([{
            "type": "addRules",
            "rules": [{"toolName": "Bash", "ruleContent": "npm test"},
                      {"toolName": "Bash", "ruleContent": "npm test"},
                      {"toolName": "Bash", "ruleContent": "cargo build"}],
            "behavior": "allow",
            "destination": "session",
        }]));
        assert_eq!(rules, [bash("npm test"), bash("cargo build")]);
        assert!(notes.is_empty(), "{notes:?}");
    }

    #[test]
    fn what_dsh_cannot_honour_is_noted_and_left_out() {
        let (rules, notes) = session_rules(&json!([
            {"type": "addRules", "rules": [{"toolName": "Bash", "ruleContent": "ls"}],
             "behavior": "allow", "destination": "localSettings"},
            {"type": "addRules", "rules": [{"toolName": "Bash", "ruleContent": "rm -rf x"}],
             "behavior": "deny", "destination": "session"},
            {"type": "addRules", "behavior": "allow", "destination": "session",
             "rules": [{"toolName": "Bash", "ruleContent": "npm run test:*"},
                       {"toolName": "Bash"},
                       {"toolName": "Edit", "ruleContent": "src/**"},
                       {"ruleContent": "make"},
                       {"toolName": "Bash", "ruleContent": "make"}]},
            {"type": "setMode", "mode": "acceptEdits", "destination": "session"},
            {"type": "addDirectories", "directories": ["/tmp"], "destination": "session"},
            {"type": "removeRules", "rules": [], "behavior": "allow", "destination": "session"},
        ]));
        assert_eq!(rules, [bash("make")]);
        let expected = [
            "\"localSettings\" is not applied",
            "behavior \"deny\"",
            "Bash(npm run test:*) is not applied",
            "for Bash without an exact command",
            "for Edit without an exact command",
            "has no toolName",
            "setMode is not applied",
            "addDirectories is not applied",
            "removeRules is not applied",
        ];
        assert_eq!(notes.len(), expected.len(), "{notes:#?}");
        for (note, part) in notes.iter().zip(expected) {
            assert!(note.contains(part), "{note:?} lacks {part:?}");
        }
        let (rules, notes) = session_rules(&json!({"type": "addRules"}));
        assert!(rules.is_empty());
        assert!(notes[0].contains("not an array"));
    }

    #[test]
    fn suggestions_are_what_dsh_honours() {
        let offered = suggestions(BASH, Some("npm test"));
        assert_eq!(
            offered,
            json!([{"type": "addRules", "rules": [{"toolName": "Bash", "ruleContent": "npm test"}],
                    "behavior": "allow", "destination": "session"}])
        );
        // Echoed back, a suggestion is the rule it offered.
        assert_eq!(session_rules(&offered), (vec![bash("npm test")], vec![]));
        assert_eq!(suggestions("write", Some("{}")), json!([]));
        assert_eq!(suggestions(BASH, None), json!([]));
    }
}
