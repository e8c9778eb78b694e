//! How a dsh tool call looks in ACP: its id (a child's marked), title and kind, the updates of
//! its start, status, display-only terminal and end, and where a file change begins.

use serde::Deserialize;
use serde_json::Value;

use super::schema::{
    RawOutput, SessionUpdate, TerminalMeta, ToolCallContent, ToolCallStatus, ToolKind,
};
use super::updates::{Output, text_content};

/// The ACP tool call id of a dsh call: its call id, prefixed with the child's session id for a
/// child's call (call ids are unique per session only).
pub(super) fn call_id(call: &str, child: Option<&str>) -> String {
    match child {
        Some(child) => format!("{child}/{call}"),
        None => call.to_owned(),
    }
}

/// The arguments of the tools whose calls are shown by what they do.
#[derive(Deserialize)]
struct BashArguments {
    command: String,
    /// What the model says the command does, in a few words: the card's title when given.
    #[serde(default)]
    description: Option<String>,
}

#[derive(Deserialize)]
struct SpawnArguments {
    prompt: String,
}

/// A call's title and kind: a bash command is shown by the model's own description of it when
/// it gave one (the command itself is in `rawInput`), else as itself; a child agent by its prompt.
pub(super) fn call_title(tool: &str, arguments: &Value, child: Option<&str>) -> (String, ToolKind) {
    let (title, kind) = match tool {
        "bash" => (
            BashArguments::deserialize(arguments).map_or_else(
                |_| "bash".to_owned(),
                |a| {
                    a.description
                        .filter(|d| !d.trim().is_empty())
                        .unwrap_or(a.command)
                },
            ),
            ToolKind::Execute,
        ),
        "spawn_agent" => (
            format!(
                "child agent: {}",
                SpawnArguments::deserialize(arguments)
                    .map(|a| a.prompt)
                    .unwrap_or_default()
            ),
            ToolKind::Other,
        ),
        // The file tools: titled by the file, with the kinds editors show as reads and edits.
        "read" | "write" | "edit" => {
            let path = arguments
                .get("file_path")
                .and_then(Value::as_str)
                .unwrap_or_default();
            let kind = if tool == "read" {
                ToolKind::Read
            } else {
                ToolKind::Edit
            };
            (format!("{tool} {path}"), kind)
        }
        _ => (format!("{tool} {arguments}"), ToolKind::Other),
    };
    (marked(title, child), kind)
}

/// An approval request's title and kind: a bash command as itself, another tool's request as
/// the tool and what it asks.
pub(super) fn request_title(tool: &str, command: &str, child: Option<&str>) -> (String, ToolKind) {
    let (title, kind) = match tool {
        "bash" => (command.to_owned(), ToolKind::Execute),
        _ => (format!("{tool} {command}"), ToolKind::Other),
    };
    (marked(title, child), kind)
}

pub(super) fn marked(title: String, child: Option<&str>) -> String {
    match child {
        Some(child) => format!("[child {}] {title}", short(child)),
        None => title,
    }
}

fn short(id: &str) -> &str {
    id.get(id.len().saturating_sub(8)..).unwrap_or(id)
}

pub(super) fn started(
    id: String,
    tool: &str,
    arguments: Value,
    child: Option<&str>,
    terminal: bool,
) -> Vec<Output> {
    let (title, kind) = call_title(tool, &arguments, child);
    let (content, meta) = if terminal {
        let terminal_id = id.clone();
        (
            vec![ToolCallContent::Terminal {
                terminal_id: terminal_id.clone(),
            }],
            Some(TerminalMeta::Info { terminal_id }),
        )
    } else {
        (Vec::new(), None)
    };
    vec![
        Output::Update(SessionUpdate::ToolCall {
            tool_call_id: id.clone(),
            title,
            kind,
            status: ToolCallStatus::Pending,
            raw_input: arguments,
            content,
            meta,
        }),
        status(id, ToolCallStatus::InProgress),
    ]
}

/// More output of the call's display-only terminal.
pub(super) fn terminal_output(id: String, data: String) -> Output {
    Output::Update(SessionUpdate::ToolCallUpdate {
        tool_call_id: id.clone(),
        status: None,
        content: None,
        raw_output: None,
        meta: Some(TerminalMeta::Output {
            terminal_id: id,
            data,
        }),
    })
}

pub(super) fn status(id: String, status: ToolCallStatus) -> Output {
    Output::Update(SessionUpdate::ToolCallUpdate {
        tool_call_id: id,
        status: Some(status),
        content: None,
        raw_output: None,
        meta: None,
    })
}

/// A call's end: its result as text content, or, for a call shown as a terminal (`exit`), how
/// the command ended (the terminal shows the output).
pub(super) fn finished(
    id: String,
    content: String,
    is_error: bool,
    code: Option<String>,
    exit: Option<TerminalMeta>,
) -> Output {
    Output::Update(SessionUpdate::ToolCallUpdate {
        tool_call_id: id,
        status: Some(if is_error {
            ToolCallStatus::Failed
        } else {
            ToolCallStatus::Completed
        }),
        content: exit.is_none().then(|| vec![text_content(content.clone())]),
        raw_output: Some(RawOutput {
            content,
            is_error,
            code,
        }),
        meta: exit,
    })
}

/// The first line (from 1) of the new text a unified diff changes: the first added line, or
/// where the first removed one was.
pub(super) fn first_changed_line(diff: &str) -> Option<u32> {
    let mut line: Option<u32> = None;
    for text in diff.lines() {
        if let Some(header) = text.strip_prefix("@@ ") {
            // `@@ -a,b +c,d @@`: the hunk's new text starts at line c (0 for an empty file).
            let start = header.split(' ').nth(1)?.strip_prefix('+')?;
            line = start.split(',').next()?.parse().ok();
            continue;
        }
        let Some(n) = line.as_mut() else { continue };
        match text.as_bytes().first() {
            Some(b'+' | b'-') => return Some((*n).max(1)),
            Some(b' ') => *n += 1,
            _ => {}
        }
    }
    None
}
