//! The `read` tool: a file's lines, numbered as `cat -n` numbers them.

use std::sync::Arc;

use dsh_launch::file_op::{FileReply, FileRequest};
use serde_json::{Value, json};

use super::{EDIT_LIMIT, FileAccess, failure_text, file_path, reply_cap};
use crate::call::{BoxFuture, Tool, ToolDetail, ToolExecution, ToolOutput, ToolSchema};

/// Lines returned when the model gives no limit.
const DEFAULT_LIMIT: u64 = 2000;
/// Bytes of the file one read returns at most.
const MAX_BYTES: u64 = 256 * 1024;
/// Characters of one line shown at most.
const MAX_LINE_CHARS: usize = 2000;

const DESCRIPTION: &str = "Read a text file. Returns its lines numbered from 1 (like cat -n). \
By default up to 2000 lines from the start; give offset (the first line number to return) and \
limit for long files. Read a file before you edit or overwrite it. Binary files and files that \
are not UTF-8 are reported, not shown. Reads happen under the same sandbox as your bash commands.";

/// The `read` tool.
#[derive(Debug)]
pub(crate) struct ReadTool {
    files: Arc<FileAccess>,
}

impl ReadTool {
    pub(crate) fn new(files: Arc<FileAccess>) -> Self {
        Self { files }
    }
}

/// A positive whole number argument, if given.
fn line_number(arguments: &Value, name: &str) -> Result<Option<u64>, String> {
    match arguments.get(name) {
        None | Some(Value::Null) => Ok(None),
        Some(v) => match v.as_u64() {
            Some(n) if n >= 1 => Ok(Some(n)),
            _ => Err(format!(
                "`{name}` must be a whole number of at least 1, got {v}"
            )),
        },
    }
}

/// Numbers `text`'s lines from `first`, as the model sees them.
pub(crate) fn numbered(text: &str, first: u64) -> String {
    let mut out = String::with_capacity(text.len() + text.len() / 8);
    let body = text.strip_suffix('\n').unwrap_or(text);
    for (i, line) in body.split('\n').enumerate() {
        let line = line.strip_suffix('\r').unwrap_or(line);
        let shown: String = line.chars().take(MAX_LINE_CHARS).collect();
        out.push_str(&format!("{:>6}\t{shown}", first + i as u64));
        if shown.len() < line.len() {
            out.push_str(" [line truncated]");
        }
        out.push('\n');
    }
    out
}

impl Tool for ReadTool {
    // The record is shared by the three file tools; the read tool, which makes it, clears it.
    fn release(&self, owner: &dsh_session::SessionId) {
        self.files.forget(owner);
    }

    fn schema(&self) -> ToolSchema {
        ToolSchema {
            name: crate::call::READ.into(),
            description: DESCRIPTION.into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "file_path": {"type": "string", "description": "The file to read (absolute, or relative to the session's working directory)."},
                    "offset": {"type": "integer", "minimum": 1, "description": "The line number to start at (default 1)."},
                    "limit": {"type": "integer", "minimum": 1, "description": "How many lines to read (default 2000)."}
                },
                "required": ["file_path"],
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
            let refused = |m: String| ToolOutput::refused(format!("Error: read: {m}"));
            let path = match file_path(arguments, &exec.cwd) {
                Ok(p) => p,
                Err(m) => return refused(m),
            };
            let (offset, limit) = match (
                line_number(arguments, "offset"),
                line_number(arguments, "limit"),
            ) {
                (Ok(o), Ok(l)) => (o.unwrap_or(1), l.unwrap_or(DEFAULT_LIMIT)),
                (Err(m), _) | (_, Err(m)) => return refused(m),
            };
            let request = FileRequest::Read {
                path: path.clone(),
                offset: offset - 1,
                limit,
                max_bytes: MAX_BYTES,
                hash_limit: EDIT_LIMIT,
            };
            let detail = ToolDetail::File {
                path: path.clone(),
                kind: dsh_session::FileToolKind::Read,
                change: None,
            };
            let read = match self.files.run(exec, request, reply_cap(MAX_BYTES)).await {
                Ok(FileReply::Read(read)) => read,
                Ok(other) => {
                    return ToolOutput::error(format!(
                        "Error: read: {}",
                        failure_text(&path, other)
                    ))
                    .with_detail(detail);
                }
                Err(m) => {
                    return ToolOutput::error(format!("Error: read: {m}")).with_detail(detail);
                }
            };
            // A file too large to hash is recorded too: the agent read it, and an edit is then
            // refused for its size, not for want of a read.
            self.files.record(exec, &path, read.size, read.digest);
            let error = |m: String| ToolOutput::error(m).with_detail(detail.clone());
            if read.bytes.contains(&0) {
                return error(format!(
                    "Error: read: {} looks binary (it contains NUL bytes; {} bytes); inspect it \
                     with bash (e.g. `xxd | head`) instead",
                    path.display(),
                    read.size
                ));
            }
            // A read cut inside a character is still text: only the cut is invalid.
            let text = match std::str::from_utf8(&read.bytes) {
                Ok(t) => t,
                Err(e) if read.cut && e.error_len().is_none() => {
                    std::str::from_utf8(&read.bytes[..e.valid_up_to()]).unwrap_or_default()
                }
                Err(e) => {
                    return error(format!(
                        "Error: read: {} is not valid UTF-8 text (an invalid byte {} bytes into \
                         what was read); inspect it with bash (e.g. `file` or `iconv`) instead",
                        path.display(),
                        e.valid_up_to()
                    ));
                }
            };
            if read.size == 0 {
                return ToolOutput::ok(format!("({} is empty)", path.display()))
                    .with_detail(detail);
            }
            if text.is_empty() && !read.cut {
                return ToolOutput::ok(format!(
                    "({} has fewer than {offset} lines)",
                    path.display()
                ))
                .with_detail(detail);
            }
            let mut out = numbered(text, offset);
            let shown = text.matches('\n').count() as u64 + u64::from(!text.ends_with('\n'));
            if read.cut {
                out.push_str(&format!(
                    "[stopped after {MAX_BYTES} bytes; continue with offset {}]\n",
                    offset + shown.saturating_sub(1)
                ));
            } else if read.more {
                out.push_str(&format!(
                    "[more lines follow; continue with offset {}]\n",
                    offset + shown
                ));
            }
            if read.digest.is_none() {
                out.push_str(&format!(
                    "[this file is larger than {} MiB: edit and write refuse it; use bash]\n",
                    EDIT_LIMIT / (1024 * 1024)
                ));
            }
            ToolOutput::ok(out).with_detail(detail)
        })
    }
}
