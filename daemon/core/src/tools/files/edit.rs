//! The `edit` tool: replace an exact string in a file the agent has read.

use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};

use super::{FileAccess, diff, file_path, hash_text, string_arg};
use crate::call::{BoxFuture, FileChange, Tool, ToolDetail, ToolExecution, ToolOutput, ToolSchema};

const DESCRIPTION: &str = "Edit a file by replacing an exact string. old_string must match the \
file's text exactly (indentation included) and occur once, unless replace_all is set. Read the \
file with the read tool first; an edit of a file you have not read, or that changed since you \
read it, is refused. Line endings (LF or CRLF) are kept. Edits happen under the same sandbox as \
your bash commands.";

/// The `edit` tool.
#[derive(Debug)]
pub(crate) struct EditTool {
    files: Arc<FileAccess>,
}

impl EditTool {
    pub(crate) fn new(files: Arc<FileAccess>) -> Self {
        Self { files }
    }
}

/// Every line of `text` ends in CRLF (and there is at least one): the file is edited as LF and
/// written back as CRLF, so a model's `\n` strings match and the endings stay.
pub(crate) fn all_crlf(text: &str) -> bool {
    text.contains("\r\n") && !text.replace("\r\n", "").contains('\n')
}

/// `text` with `old` replaced by `new` (every occurrence with `all`), and how many were
/// replaced; an error the model can act on when `old` is not there or not unique.
pub(crate) fn apply(
    text: &str,
    old: &str,
    new: &str,
    all: bool,
    path: &Path,
) -> Result<(String, usize), String> {
    let crlf = all_crlf(text);
    let (work, old, new) = if crlf {
        (
            text.replace("\r\n", "\n"),
            old.replace("\r\n", "\n"),
            new.replace("\r\n", "\n"),
        )
    } else {
        (text.to_owned(), old.to_owned(), new.to_owned())
    };
    let count = work.matches(old.as_str()).count();
    if count == 0 {
        return Err(format!(
            "`old_string` was not found in {}; read the file again and copy the exact text \
             (indentation and line breaks included)",
            path.display()
        ));
    }
    if count > 1 && !all {
        return Err(format!(
            "`old_string` occurs {count} times in {}; include more surrounding lines to make it \
             unique, or set `replace_all` to replace every occurrence",
            path.display()
        ));
    }
    let replaced = work.replace(old.as_str(), &new);
    let out = if crlf {
        replaced.replace('\n', "\r\n")
    } else {
        replaced
    };
    Ok((out, count))
}

impl Tool for EditTool {
    fn schema(&self) -> ToolSchema {
        ToolSchema {
            name: crate::call::EDIT.into(),
            description: DESCRIPTION.into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "file_path": {"type": "string", "description": "The file to edit (absolute, or relative to the session's working directory)."},
                    "old_string": {"type": "string", "description": "The exact text to replace."},
                    "new_string": {"type": "string", "description": "The text to put in its place (must differ from old_string)."},
                    "replace_all": {"type": "boolean", "description": "Replace every occurrence of old_string (default false)."}
                },
                "required": ["file_path", "old_string", "new_string"],
                "additionalProperties": false
            }),
        }
    }

    fn call<'a>(
        &'a self,
        exec: &'a ToolExecution,
        arguments: &'a Value,
    ) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let refused = |m: String| ToolOutput::refused(format!("Error: edit: {m}"));
            let parsed = file_path(arguments, &exec.cwd).and_then(|path| {
                let old = string_arg(arguments, "old_string")?;
                let new = string_arg(arguments, "new_string")?;
                let all = match arguments.get("replace_all") {
                    None | Some(Value::Null) => false,
                    Some(Value::Bool(b)) => *b,
                    Some(other) => {
                        return Err(format!("`replace_all` must be a boolean, got {other}"));
                    }
                };
                if old.is_empty() {
                    return Err("`old_string` must not be empty; to create a file use write".into());
                }
                if old == new {
                    return Err(
                        "`old_string` and `new_string` are the same; nothing would change".into(),
                    );
                }
                Ok((path, old, new, all))
            });
            let (path, old, new, all) = match parsed {
                Ok(p) => p,
                Err(m) => return refused(m),
            };
            if self.files.seen(exec, &path).is_none() {
                return refused(format!(
                    "you have not read {} in this session; read it with the read tool first, \
                     then edit it",
                    path.display()
                ));
            }
            let detail = |change| ToolDetail::File {
                path: path.clone(),
                kind: dsh_session::FileToolKind::Edit,
                change,
            };
            let error = |m: String| {
                ToolOutput::error(format!("Error: edit: {m}")).with_detail(detail(None))
            };
            let current = match self.files.read_whole(exec, &path).await {
                Ok(Some(current)) => current,
                Ok(None) => {
                    return error(format!(
                        "{} does not exist; create it with write",
                        path.display()
                    ));
                }
                Err(m) => return error(m),
            };
            let expect = match self.files.expect_unchanged(exec, &path, &current) {
                Ok(e) => e,
                Err(m) => return error(m),
            };
            let Ok(text) = String::from_utf8(current.bytes) else {
                return error(format!(
                    "{} is not UTF-8 text; change it with bash instead",
                    path.display()
                ));
            };
            let (new_text, count) = match apply(&text, old, new, all, &path) {
                Ok(done) => done,
                Err(m) => return error(m),
            };
            let new_bytes = new_text.clone().into_bytes();
            let digest = match self.files.write(exec, &path, new_bytes, expect).await {
                Ok(d) => d,
                Err(m) => return error(m),
            };
            let change = FileChange {
                diff: diff::unified(&path, Some(&text), &new_text),
                old_hash: current.digest.as_ref().map(hash_text),
                new_hash: hash_text(&digest),
                old_text: Some(text),
                new_text,
            };
            ToolOutput::ok(format!(
                "Edited {}: replaced {count} occurrence{}.",
                path.display(),
                if count == 1 { "" } else { "s" }
            ))
            .with_detail(detail(Some(change)))
        })
    }
}
