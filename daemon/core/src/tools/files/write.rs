//! The `write` tool: create a file, or replace one the agent has read.

use std::sync::Arc;

use dsh_launch::file_op::Expect;
use serde_json::{Value, json};

use super::edit::all_crlf;
use super::{Change, FileAccess, Plan, failed, file_path, string_arg};
use crate::call::{BoxFuture, ToolExecution, ToolOutput, ToolSchema, WRITE};

const DESCRIPTION: &str = "Write a file: create it, or replace all of its content. To replace an \
existing file, read it with the read tool first; a write over a file you have not read, or that \
changed since you read it, is refused. Prefer edit for changes to part of a file. The parent \
directory must exist. An existing file keeps its mode, its CRLF line endings and its final \
newline. Writes happen under the same sandbox as your bash commands.";

/// The `write` tool.
#[derive(Debug)]
pub(crate) struct WriteTool {
    files: Arc<FileAccess>,
}

impl WriteTool {
    pub(crate) fn new(files: Arc<FileAccess>) -> Self {
        Self { files }
    }
}

/// `content` as it is written over `old`: CRLF line endings when every line of `old` had them,
/// and a final newline when `old` had one.
pub(crate) fn keep_endings(old: &str, content: &str) -> String {
    let crlf = all_crlf(old);
    let mut out = if crlf && !content.contains("\r\n") {
        content.replace('\n', "\r\n")
    } else {
        content.to_owned()
    };
    if old.ends_with('\n') && !out.is_empty() && !out.ends_with('\n') {
        out.push_str(if crlf { "\r\n" } else { "\n" });
    }
    out
}

impl Change for WriteTool {
    fn schema(&self) -> ToolSchema {
        ToolSchema {
            name: crate::call::WRITE.into(),
            description: DESCRIPTION.into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "file_path": {"type": "string", "description": "The file to write (absolute, or relative to the session's working directory)."},
                    "content": {"type": "string", "description": "The whole new content of the file."}
                },
                "required": ["file_path", "content"],
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

impl WriteTool {
    /// The write worked out against the file as it is now, or the result saying why not.
    async fn work_out(&self, exec: &ToolExecution, arguments: &Value) -> Result<Plan, ToolOutput> {
        let (path, content) = file_path(arguments, &exec.cwd)
            .and_then(|path| Ok((path, string_arg(arguments, "content")?)))
            .map_err(|m| ToolOutput::refused(format!("Error: write: {m}")))?;
        let error = |m: String| failed(WRITE, &path, m);
        let current = self.files.read_whole(exec, &path).await.map_err(error)?;
        let Some(current) = current else {
            let done = format!("Created {} ({} bytes).", path.display(), content.len());
            return Ok(Plan::new(
                path,
                Expect::Absent,
                None,
                None,
                content.to_owned(),
                done,
            ));
        };
        let expect = self
            .files
            .expect_unchanged(exec, &path, &current)
            .map_err(error)?;
        // A file that is not text has no old text to show or endings to keep.
        let old_text = String::from_utf8(current.bytes).ok();
        let new_text = match &old_text {
            Some(old) => keep_endings(old, content),
            None => content.to_owned(),
        };
        let done = format!("Wrote {} ({} bytes).", path.display(), new_text.len());
        Ok(Plan::new(
            path,
            expect,
            current.digest.as_ref(),
            old_text,
            new_text,
            done,
        ))
    }
}
