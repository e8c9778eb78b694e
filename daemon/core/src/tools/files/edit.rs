//! The `edit` tool: replace an exact string in a file the agent has read.

use std::path::Path;
use std::sync::Arc;

use serde_json::{Value, json};

use super::{Change, FileAccess, Plan, failed, file_path, string_arg};
use crate::call::{BoxFuture, EDIT, ToolExecution, ToolOutput, ToolSchema};

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

impl Change for EditTool {
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

    fn files(&self) -> &FileAccess {
        &self.files
    }

    fn plan<'a>(
        &'a self,
        exec: &'a ToolExecution,
        arguments: &'a Value,
    ) -> BoxFuture<'a, Result<Plan, ToolOutput>> {
        Box::pin(self.work_out(exec, arguments))
    }
}

impl EditTool {
    /// The edit worked out against the file as it is now, or the result saying why not.
    async fn work_out(&self, exec: &ToolExecution, arguments: &Value) -> Result<Plan, ToolOutput> {
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
        let (path, old, new, all) = parsed.map_err(refused)?;
        if self.files.seen(exec, &path).is_none() {
            return Err(refused(format!(
                "you have not read {} in this session; read it with the read tool first, then \
                 edit it",
                path.display()
            )));
        }
        let error = |m: String| failed(EDIT, &path, m);
        let current = match self.files.read_whole(exec, &path).await.map_err(error)? {
            Some(current) => current,
            None => {
                return Err(error(format!(
                    "{} does not exist; create it with write",
                    path.display()
                )));
            }
        };
        let expect = self
            .files
            .expect_unchanged(exec, &path, &current)
            .map_err(error)?;
        let Ok(text) = String::from_utf8(current.bytes) else {
            return Err(error(format!(
                "{} is not UTF-8 text; change it with bash instead",
                path.display()
            )));
        };
        let (new_text, count) = apply(&text, old, new, all, &path).map_err(error)?;
        let done = format!(
            "Edited {}: replaced {count} occurrence{}.",
            path.display(),
            if count == 1 { "" } else { "s" }
        );
        Ok(Plan::new(
            path,
            expect,
            current.digest.as_ref(),
            Some(text),
            new_text,
            done,
        ))
    }
}
