//! The `write` tool: create a file, or replace one the agent has read.

use std::sync::Arc;

use dsh_launch::file_op::Expect;
use serde_json::{Value, json};

use super::edit::all_crlf;
use super::{FileAccess, diff, file_path, hash_text, string_arg};
use crate::call::{BoxFuture, FileChange, Tool, ToolDetail, ToolExecution, ToolOutput, ToolSchema};

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

impl Tool for WriteTool {
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

    fn call<'a>(
        &'a self,
        exec: &'a ToolExecution,
        arguments: &'a Value,
    ) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let parsed = file_path(arguments, &exec.cwd)
                .and_then(|path| Ok((path, string_arg(arguments, "content")?)));
            let (path, content) = match parsed {
                Ok(p) => p,
                Err(m) => return ToolOutput::refused(format!("Error: write: {m}")),
            };
            let detail = |change| ToolDetail::File {
                path: path.clone(),
                kind: dsh_session::FileToolKind::Edit,
                change,
            };
            let error = |m: String| {
                ToolOutput::error(format!("Error: write: {m}")).with_detail(detail(None))
            };
            let current = match self.files.read_whole(exec, &path).await {
                Ok(c) => c,
                Err(m) => return error(m),
            };
            let (expect, old_text, old_hash) = match &current {
                None => (Expect::Absent, None, None),
                Some(current) => match self.files.expect_unchanged(exec, &path, current) {
                    // A file that is not text has no old text to show or endings to keep.
                    Ok(expect) => (
                        expect,
                        String::from_utf8(current.bytes.clone()).ok(),
                        current.digest.as_ref().map(hash_text),
                    ),
                    Err(m) => return error(m),
                },
            };
            let new_text = match &old_text {
                Some(old) => keep_endings(old, content),
                None => content.to_owned(),
            };
            let digest = match self
                .files
                .write(exec, &path, new_text.clone().into_bytes(), expect)
                .await
            {
                Ok(d) => d,
                Err(m) => return error(m),
            };
            let created = current.is_none();
            let change = FileChange {
                diff: diff::unified(&path, old_text.as_deref(), &new_text),
                old_hash,
                new_hash: hash_text(&digest),
                old_text,
                new_text,
            };
            ToolOutput::ok(format!(
                "{} {} ({} bytes).",
                if created { "Created" } else { "Wrote" },
                path.display(),
                change.new_text.len()
            ))
            .with_detail(detail(Some(change)))
        })
    }
}
