//! Each dialect's view of dsh's tools: the `tool_name` its scripts compare against, the
//! `tool_input` and `tool_response` shapes they read, the names its matchers fire on, and how a
//! PreToolUse `updatedInput` written in that shape becomes dsh arguments again.
//!
//! | dsh tool | Claude Code | Codex |
//! |---|---|---|
//! | `bash` | `Bash`; input `{command, description?, timeout? (ms), run_in_background?}`; response `{stdout, stderr, interrupted, isImage}` | `Bash`; input `{command}`; response the command's output as one string |
//! | `spawn_agent` | `Agent`; input `{prompt, description?, subagent_type}`; response the child's answer | `spawn_agent` (matched as `Agent` too); input and response as dsh has them |
//! | `read` | `Read`; input as dsh has it (`file_path`, made absolute; `offset`, `limit`); response the text | `read` (Codex has no read tool: its models read with the shell); input and text as dsh has them |
//! | `write`, `edit` | `Write`, `Edit`; input as dsh has it (`file_path` made absolute, as Claude Code's are; `content`; `file_path`, `old_string`, `new_string`, `replace_all`); response `{filePath, ...}` (below) | `apply_patch` (matched as `Write` and `Edit` too), as Codex shows its file changes; input `{command}`, the change in Codex's patch grammar (`*** Add File:` for a write, `*** Update File:` with one `@@` hunk of the old and new strings for an edit); response the result text; an `updatedInput` is refused (dsh cannot run a rewritten patch) |
//! | `job_output`, `job_kill` | their own names, input and text | the same |
//!
//! Sources: Claude Code's hooks reference (PreToolUse input tables: Bash's four fields, `timeout`
//! in milliseconds; Agent's `prompt`, `description`, `subagent_type`, `model`) and its Bash tool
//! output object; Codex's hooks reference ("`Bash` and `apply_patch` use `tool_input.command`",
//! "other local function tools send their arguments" and "their model-facing output",
//! "`spawn_agent` also matches `Agent`") and its exec output, which hands PostToolUse the command's
//! output as a string; codex-rs's `HookToolName::apply_patch` (payload name `apply_patch`, matcher
//! aliases `Write` and `Edit`, input `{"command": <patch>}`). dsh's own name stays a matcher alias in both dialects: a config written for
//! an earlier dsh with matcher `bash` must not silently stop guarding.

use std::path::Path;

use serde_json::{Map, Value, json};

use super::Dialect;

use crate::call::{AGENT_TYPE, EDIT, READ, SPAWN_AGENT, ToolDetail, ToolOutput, WRITE};

const BASH: &str = "bash";

/// The name Codex's hooks see for a file change.
const APPLY_PATCH: &str = "apply_patch";

/// The `tool_name` `dialect` sends for dsh's `tool`.
pub(super) fn payload_name(dialect: Dialect, tool: &str) -> &str {
    match (dialect, tool) {
        (_, BASH) => "Bash",
        (Dialect::ClaudeCode, SPAWN_AGENT) => "Agent",
        // Claude Code's file tools take the same input, so `Write|Edit` matchers and scripts
        // reading `tool_input.file_path` work unchanged.
        (Dialect::ClaudeCode, READ) => "Read",
        (Dialect::ClaudeCode, WRITE) => "Write",
        (Dialect::ClaudeCode, EDIT) => "Edit",
        (Dialect::Codex, WRITE | EDIT) => APPLY_PATCH,
        _ => tool,
    }
}

/// The names a `dialect` matcher is tried against for `tool`: its payload name first, then the
/// aliases (upstream's, and dsh's own name).
pub(super) fn matcher_names(dialect: Dialect, tool: &str) -> Vec<&str> {
    let mut names = vec![payload_name(dialect, tool)];
    if tool == SPAWN_AGENT && dialect == Dialect::Codex {
        names.push("Agent");
    }
    if (tool == WRITE || tool == EDIT) && dialect == Dialect::Codex {
        names.extend(["Write", "Edit"]);
    }
    if !names.contains(&tool) {
        names.push(tool);
    }
    names
}

/// The `tool_input` `dialect` shows for a call of `tool` with dsh `arguments`, made in `cwd`.
pub(super) fn input(dialect: Dialect, tool: &str, arguments: &Value, cwd: &Path) -> Value {
    let text = |key: &str| arguments.get(key).and_then(Value::as_str);
    match (dialect, tool) {
        // Claude Code's file tools take only absolute paths, and scripts compare them with
        // `$CLAUDE_PROJECT_DIR`: a relative `file_path` is shown joined to the call's directory.
        (Dialect::ClaudeCode, READ | WRITE | EDIT) => {
            let mut input = arguments.clone();
            if let (Some(path), Some(map)) = (text("file_path"), input.as_object_mut()) {
                let absolute = cwd.join(path).to_string_lossy().into_owned();
                map.insert("file_path".into(), absolute.into());
            }
            input
        }
        (Dialect::ClaudeCode, BASH) => {
            let mut input = Map::new();
            input.insert("command".into(), text("command").unwrap_or_default().into());
            for (theirs, ours) in [
                ("description", "description"),
                ("timeout", "timeout_ms"),
                ("run_in_background", "run_in_background"),
            ] {
                if let Some(value) = arguments.get(ours).filter(|v| !v.is_null()) {
                    input.insert(theirs.into(), value.clone());
                }
            }
            Value::Object(input)
        }
        (Dialect::Codex, BASH) => json!({ "command": text("command").unwrap_or_default() }),
        (Dialect::Codex, WRITE | EDIT) => json!({ "command": codex_patch(tool, arguments) }),
        (Dialect::ClaudeCode, SPAWN_AGENT) => {
            let mut input = Map::new();
            input.insert("prompt".into(), text("prompt").unwrap_or_default().into());
            if let Some(description) = text("description") {
                input.insert("description".into(), description.into());
            }
            input.insert("subagent_type".into(), AGENT_TYPE.into());
            Value::Object(input)
        }
        _ => arguments.clone(),
    }
}

/// The dsh tool and arguments of a call Claude Code logged as `name` with `input` (importing a
/// Claude Code transcript): the inverse of [`payload_name`] and [`input`] for the Claude Code
/// dialect. A tool dsh does not have keeps its name and input (the imported history shows the
/// call as it was; it is never run again).
pub(crate) fn from_claude_code(name: &str, input: &Value) -> (String, Value) {
    match name {
        "Bash" => {
            let arguments = apply_update(Dialect::ClaudeCode, BASH, &json!({}), input)
                .unwrap_or_else(|_| input.clone());
            (BASH.to_owned(), arguments)
        }
        "Read" => (READ.to_owned(), input.clone()),
        "Write" => (WRITE.to_owned(), input.clone()),
        "Edit" => (EDIT.to_owned(), input.clone()),
        "Agent" | "Task" => {
            let mut arguments = Map::new();
            for key in ["prompt", "description"] {
                if let Some(value) = input.get(key) {
                    arguments.insert(key.into(), value.clone());
                }
            }
            (SPAWN_AGENT.to_owned(), Value::Object(arguments))
        }
        other => (other.to_owned(), input.clone()),
    }
}

/// A `write` or `edit` as Codex's `apply_patch` would have made it: `*** Add File:` with every
/// line added, or `*** Update File:` with one hunk taking the old string's lines out and putting
/// the new string's in.
fn codex_patch(tool: &str, arguments: &Value) -> String {
    let text = |key: &str| {
        arguments
            .get(key)
            .and_then(Value::as_str)
            .unwrap_or_default()
    };
    let lines = |prefix: char, body: &str| -> String {
        body.lines().map(|l| format!("{prefix}{l}\n")).collect()
    };
    let path = text("file_path");
    let body = if tool == WRITE {
        format!("*** Add File: {path}\n{}", lines('+', text("content")))
    } else {
        format!(
            "*** Update File: {path}\n@@\n{}{}",
            lines('-', text("old_string")),
            lines('+', text("new_string"))
        )
    };
    format!("*** Begin Patch\n{body}*** End Patch\n")
}

/// The `tool_response` `dialect` shows for what `tool` returned.
pub(super) fn response(dialect: Dialect, tool: &str, output: &ToolOutput) -> Value {
    match (dialect, tool, &output.detail) {
        (Dialect::ClaudeCode, BASH, Some(detail)) => {
            let (stdout, stderr, interrupted) = match detail {
                ToolDetail::Command {
                    stdout,
                    stderr,
                    interrupted,
                    ..
                } => (stdout.as_str(), stderr.as_str(), *interrupted),
                // A job's output arrives later, through job_output.
                ToolDetail::Background { .. } | ToolDetail::File { .. } => ("", "", false),
            };
            json!({
                "stdout": stdout,
                "stderr": stderr,
                "interrupted": interrupted,
                "isImage": false,
            })
        }
        (Dialect::Codex, BASH, Some(ToolDetail::Command { stdout, stderr, .. })) => {
            Value::String(joined_output(stdout, stderr))
        }
        (Dialect::ClaudeCode, WRITE | EDIT, Some(ToolDetail::File { path, change, .. })) => {
            // The fields of Claude Code's Write and Edit results that hook scripts read.
            let mut response = Map::new();
            response.insert(
                "filePath".into(),
                path.to_string_lossy().into_owned().into(),
            );
            if let Some(change) = change {
                if tool == WRITE {
                    let kind = if change.old_hash.is_none() {
                        "create"
                    } else {
                        "update"
                    };
                    response.insert("type".into(), kind.into());
                    response.insert("content".into(), change.new_text.clone().into());
                }
                response.insert(
                    "originalFile".into(),
                    change.old_text.clone().map_or(Value::Null, Value::String),
                );
            }
            response.insert("success".into(), (!output.is_error).into());
            Value::Object(response)
        }
        _ => Value::String(output.content.clone()),
    }
}

/// What a command printed, as one text: stdout, then stderr (dsh captures the two apart; Codex
/// hands its hooks the combined output).
fn joined_output(stdout: &str, stderr: &str) -> String {
    if stderr.is_empty() {
        return stdout.to_owned();
    }
    if stdout.is_empty() || stdout.ends_with('\n') {
        return format!("{stdout}{stderr}");
    }
    format!("{stdout}\n{stderr}")
}

/// Why an `updatedInput` cannot become dsh arguments: the call is refused rather than run with
/// its original arguments.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub(super) enum UpdateError {
    /// Not a JSON object.
    #[error("updatedInput must be a JSON object")]
    NotAnObject,
    /// A required field is missing or not a non-empty string.
    #[error("updatedInput.{field} must be a non-empty string")]
    Required {
        /// The field, in the dialect's names.
        field: &'static str,
    },
    /// A field has the wrong type.
    #[error("updatedInput.{field} must be {expected}")]
    WrongType {
        /// The field, in the dialect's names.
        field: String,
        /// What it must be.
        expected: &'static str,
    },
    /// A field the dialect's input for this tool does not have.
    #[error("updatedInput.{field} is not a field of {dialect}'s {tool} input")]
    Unknown {
        /// The field.
        field: String,
        /// `Claude Code` or `Codex`.
        dialect: &'static str,
        /// The tool's name in that dialect.
        tool: &'static str,
    },
    /// A value dsh cannot honour.
    #[error("updatedInput.{field}: {message}")]
    Unsupported {
        /// The field.
        field: &'static str,
        /// Why.
        message: String,
    },
}

/// The dsh arguments a call of `tool` runs with after a `dialect` hook rewrote its input from
/// `original` to `updated` (the dialect's shape).
///
/// Claude Code replaces the whole input (a field the hook leaves out is gone, as upstream does),
/// and checks it against the tool's input; dsh refuses what that input could not hold. Codex's
/// Bash input is only `command`, which "must include a string `command`"; what Codex shows no
/// hook (dsh's `timeout_ms`, `workdir`, ...) keeps its original value.
pub(super) fn apply_update(
    dialect: Dialect,
    tool: &str,
    original: &Value,
    updated: &Value,
) -> Result<Value, UpdateError> {
    let updated = updated.as_object().ok_or(UpdateError::NotAnObject)?;
    let mut arguments = original.as_object().cloned().unwrap_or_default();
    match (dialect, tool) {
        (Dialect::ClaudeCode, BASH) => {
            for key in updated.keys() {
                if !["command", "description", "timeout", "run_in_background"]
                    .contains(&key.as_str())
                {
                    return Err(UpdateError::Unknown {
                        field: key.clone(),
                        dialect: "Claude Code",
                        tool: "Bash",
                    });
                }
            }
            let command = required_text(updated, "command")?;
            for ours in ["command", "description", "timeout_ms", "run_in_background"] {
                arguments.remove(ours);
            }
            arguments.insert("command".into(), command.into());
            if let Some(v) = present(updated, "description") {
                expect(v.is_string(), "description", "a string")?;
                arguments.insert("description".into(), v.clone());
            }
            if let Some(v) = present(updated, "timeout") {
                expect(
                    v.as_u64().is_some(),
                    "timeout",
                    "a non-negative integer (milliseconds)",
                )?;
                arguments.insert("timeout_ms".into(), v.clone());
            }
            if let Some(v) = present(updated, "run_in_background") {
                expect(v.is_boolean(), "run_in_background", "a boolean")?;
                arguments.insert("run_in_background".into(), v.clone());
            }
        }
        (Dialect::Codex, BASH) => {
            let command = required_text(updated, "command")?;
            arguments.insert("command".into(), command.into());
        }
        (Dialect::Codex, WRITE | EDIT) => {
            return Err(UpdateError::Unsupported {
                field: "command",
                message: "dsh runs file changes as write and edit calls, not patches; a hook \
                          cannot rewrite one"
                    .into(),
            });
        }
        (Dialect::ClaudeCode, SPAWN_AGENT) => {
            for key in updated.keys() {
                if !["prompt", "description", "subagent_type", "model"].contains(&key.as_str()) {
                    return Err(UpdateError::Unknown {
                        field: key.clone(),
                        dialect: "Claude Code",
                        tool: "Agent",
                    });
                }
            }
            let prompt = required_text(updated, "prompt")?;
            if let Some(kind) = present(updated, "subagent_type")
                && kind.as_str() != Some(AGENT_TYPE)
            {
                return Err(UpdateError::Unsupported {
                    field: "subagent_type",
                    message: format!("dsh runs every child as {AGENT_TYPE:?}, not {kind}"),
                });
            }
            if present(updated, "model").is_some() {
                return Err(UpdateError::Unsupported {
                    field: "model",
                    message: "a child runs on its parent's model; a hook cannot choose another"
                        .into(),
                });
            }
            arguments.remove("description");
            arguments.insert("prompt".into(), prompt.into());
            if let Some(v) = present(updated, "description") {
                expect(v.is_string(), "description", "a string")?;
                arguments.insert("description".into(), v.clone());
            }
        }
        // Other tools are shown as dsh has them, so the update is their new arguments; the tool
        // checks them as it checks the model's.
        _ => return Ok(Value::Object(updated.clone())),
    }
    Ok(Value::Object(arguments))
}

fn present<'a>(map: &'a Map<String, Value>, key: &str) -> Option<&'a Value> {
    map.get(key).filter(|v| !v.is_null())
}

fn required_text<'a>(
    map: &'a Map<String, Value>,
    field: &'static str,
) -> Result<&'a str, UpdateError> {
    map.get(field)
        .and_then(Value::as_str)
        .filter(|s| !s.trim().is_empty())
        .ok_or(UpdateError::Required { field })
}

fn expect(ok: bool, field: &str, expected: &'static str) -> Result<(), UpdateError> {
    if ok {
        Ok(())
    } else {
        Err(UpdateError::WrongType {
            field: field.to_owned(),
            expected,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const CC: Dialect = Dialect::ClaudeCode;
    const CODEX: Dialect = Dialect::Codex;

    fn command(stdout: &str, stderr: &str, exit_code: Option<i32>) -> ToolOutput {
        ToolOutput::ok("rendered for the model").with_detail(ToolDetail::Command {
            stdout: stdout.into(),
            stderr: stderr.into(),
            exit_code,
            interrupted: false,
        })
    }

    #[test]
    fn names_and_matcher_subjects() {
        assert_eq!(payload_name(CC, "bash"), "Bash");
        assert_eq!(payload_name(CODEX, "bash"), "Bash");
        assert_eq!(payload_name(CC, "spawn_agent"), "Agent");
        assert_eq!(payload_name(CODEX, "spawn_agent"), "spawn_agent");
        assert_eq!(payload_name(CC, "job_output"), "job_output");
        assert_eq!(matcher_names(CC, "bash"), ["Bash", "bash"]);
        assert_eq!(matcher_names(CODEX, "bash"), ["Bash", "bash"]);
        assert_eq!(matcher_names(CC, "spawn_agent"), ["Agent", "spawn_agent"]);
        assert_eq!(
            matcher_names(CODEX, "spawn_agent"),
            ["spawn_agent", "Agent"]
        );
        assert_eq!(matcher_names(CODEX, "job_kill"), ["job_kill"]);
        assert_eq!(matcher_names(CC, "edit"), ["Edit", "edit"]);
        assert_eq!(matcher_names(CC, "write"), ["Write", "write"]);
        assert_eq!(
            matcher_names(CODEX, "edit"),
            ["apply_patch", "Write", "Edit", "edit"]
        );
        assert_eq!(
            matcher_names(CODEX, "write"),
            ["apply_patch", "Write", "Edit", "write"]
        );
        assert_eq!(matcher_names(CODEX, "read"), ["read"]);
    }

    /// Codex's hooks see a file change as `apply_patch` with the patch as `command`.
    #[test]
    fn codex_sees_file_changes_as_patches() {
        let edit = json!({"file_path": "src/a.rs", "old_string": "a\nb", "new_string": "c"});
        assert_eq!(
            input(CODEX, "edit", &edit, Path::new("/w")),
            json!({"command": "*** Begin Patch\n*** Update File: src/a.rs\n@@\n-a\n-b\n+c\n*** End Patch\n"})
        );
        let write = json!({"file_path": "/w/new.txt", "content": "x\ny\n"});
        assert_eq!(
            input(CODEX, "write", &write, Path::new("/w")),
            json!({"command": "*** Begin Patch\n*** Add File: /w/new.txt\n+x\n+y\n*** End Patch\n"})
        );
        assert!(matches!(
            apply_update(CODEX, "edit", &edit, &json!({"command": "x"})),
            Err(UpdateError::Unsupported {
                field: "command",
                ..
            })
        ));
        // Claude Code's input is dsh's, its path absolute.
        let mut absolute = edit.clone();
        absolute["file_path"] = "/w/src/a.rs".into();
        assert_eq!(input(CC, "edit", &edit, Path::new("/w")), absolute);
    }

    #[test]
    fn claude_code_bash_input_uses_its_own_field_names() {
        let args = json!({"command": "make", "timeout_ms": 5000, "workdir": "sub",
                          "description": "build", "run_in_background": false});
        let v = input(CC, "bash", &args, Path::new("/w"));
        assert_eq!(
            v,
            json!({"command": "make", "description": "build", "timeout": 5000, "run_in_background": false})
        );
        assert_eq!(
            serde_json::to_string(&v).unwrap(),
            r#"{"command":"make","description":"build","run_in_background":false,"timeout":5000}"#,
            "serde_json sorts nested keys; the payload writer keeps this value as it is"
        );
        assert_eq!(
            input(CC, "bash", &json!({"command": 7}), Path::new("/w")),
            json!({"command": ""})
        );
        assert_eq!(
            input(
                CC,
                "bash",
                &json!({"command": "ls", "timeout_ms": null}),
                Path::new("/w")
            ),
            json!({"command": "ls"})
        );
    }

    #[test]
    fn codex_bash_input_is_only_the_command() {
        assert_eq!(
            input(
                CODEX,
                "bash",
                &json!({"command": "ls", "timeout_ms": 10, "workdir": "x"}),
                Path::new("/w")
            ),
            json!({"command": "ls"})
        );
        assert_eq!(
            input(CODEX, "bash", &json!({}), Path::new("/w")),
            json!({"command": ""})
        );
        let job = json!({"job_id": "j1"});
        assert_eq!(input(CODEX, "job_output", &job, Path::new("/w")), job);
        assert_eq!(input(CC, "job_output", &job, Path::new("/w")), job);
    }

    #[test]
    fn agent_input_for_claude_code() {
        assert_eq!(
            input(
                CC,
                "spawn_agent",
                &json!({"prompt": "count", "description": "c"}),
                Path::new("/w")
            ),
            json!({"prompt": "count", "description": "c", "subagent_type": "general-purpose"})
        );
        let args = json!({"prompt": "count"});
        assert_eq!(input(CODEX, "spawn_agent", &args, Path::new("/w")), args);
    }

    #[test]
    fn responses() {
        let out = command("hello\n", "warn\n", Some(0));
        assert_eq!(
            response(CC, "bash", &out),
            json!({"stdout": "hello\n", "stderr": "warn\n", "interrupted": false, "isImage": false})
        );
        assert_eq!(response(CODEX, "bash", &out), json!("hello\nwarn\n"));
        assert_eq!(
            response(CODEX, "bash", &command("a", "b", Some(1))),
            json!("a\nb")
        );
        assert_eq!(
            response(CODEX, "bash", &command("", "b", Some(1))),
            json!("b")
        );
        let stopped = ToolOutput::error("x").with_detail(ToolDetail::Command {
            stdout: "partial".into(),
            stderr: String::new(),
            exit_code: None,
            interrupted: true,
        });
        assert_eq!(response(CC, "bash", &stopped)["interrupted"], true);
        let job =
            ToolOutput::ok("Started background job j1.").with_detail(ToolDetail::Background {
                job_id: "j1".into(),
            });
        assert_eq!(response(CC, "bash", &job)["stdout"], "");
        assert_eq!(
            response(CODEX, "bash", &job),
            json!("Started background job j1.")
        );
        let text = ToolOutput::ok("one two three");
        assert_eq!(response(CC, "spawn_agent", &text), json!("one two three"));
        assert_eq!(response(CODEX, "job_output", &text), json!("one two three"));
    }

    #[test]
    fn claude_code_bash_update_replaces_what_claude_code_shows() {
        let original = json!({"command": "rm -rf build", "timeout_ms": 9000, "workdir": "sub",
                              "description": "clean"});
        assert_eq!(
            apply_update(CC, "bash", &original, &json!({"command": "echo safe"})).unwrap(),
            json!({"command": "echo safe", "workdir": "sub"}),
            "a replaced input drops what the hook left out; dsh's workdir, unseen, stays"
        );
        assert_eq!(
            apply_update(
                CC,
                "bash",
                &original,
                &json!({"command": "echo safe", "timeout": 100, "run_in_background": true})
            )
            .unwrap(),
            json!({"command": "echo safe", "timeout_ms": 100, "run_in_background": true, "workdir": "sub"})
        );
        for (bad, field) in [
            (json!({"timeout": 5}), "updatedInput.command"),
            (json!({"command": ""}), "updatedInput.command"),
            (json!({"command": 3}), "updatedInput.command"),
            (
                json!({"command": "x", "timeout": "soon"}),
                "updatedInput.timeout",
            ),
            (
                json!({"command": "x", "timeout": -1}),
                "updatedInput.timeout",
            ),
            (
                json!({"command": "x", "run_in_background": "yes"}),
                "updatedInput.run_in_background",
            ),
            (
                json!({"command": "x", "workdir": "/"}),
                "updatedInput.workdir",
            ),
            (json!("echo"), "updatedInput must be"),
        ] {
            let e = apply_update(CC, "bash", &original, &bad).unwrap_err();
            assert!(e.to_string().contains(field), "{bad}: {e}");
        }
    }

    #[test]
    fn codex_bash_update_replaces_the_command_only() {
        let original = json!({"command": "rm -rf build", "timeout_ms": 9000, "workdir": "sub"});
        assert_eq!(
            apply_update(
                CODEX,
                "bash",
                &original,
                &json!({"command": "echo rewritten"})
            )
            .unwrap(),
            json!({"command": "echo rewritten", "timeout_ms": 9000, "workdir": "sub"})
        );
        assert_eq!(
            apply_update(CODEX, "bash", &original, &json!({"cmd": "x"})).unwrap_err(),
            UpdateError::Required { field: "command" }
        );
        assert_eq!(
            apply_update(CODEX, "bash", &original, &json!([])).unwrap_err(),
            UpdateError::NotAnObject
        );
    }

    #[test]
    fn agent_and_other_tool_updates() {
        let original = json!({"prompt": "count", "description": "c"});
        assert_eq!(
            apply_update(
                CC,
                "spawn_agent",
                &original,
                &json!({"prompt": "count to ten",
                "subagent_type": "general-purpose"})
            )
            .unwrap(),
            json!({"prompt": "count to ten"})
        );
        assert!(
            apply_update(
                CC,
                "spawn_agent",
                &original,
                &json!({"prompt": "p", "subagent_type": "Explore"})
            )
            .is_err()
        );
        assert!(
            apply_update(
                CC,
                "spawn_agent",
                &original,
                &json!({"prompt": "p", "model": "opus"})
            )
            .is_err()
        );
        let update = json!({"job_id": "j2"});
        assert_eq!(
            apply_update(CODEX, "job_output", &json!({"job_id": "j1"}), &update).unwrap(),
            update
        );
        assert_eq!(
            apply_update(CODEX, "spawn_agent", &original, &json!({"prompt": "p"})).unwrap(),
            json!({"prompt": "p"})
        );
    }
}
