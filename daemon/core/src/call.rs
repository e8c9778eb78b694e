//! One tool call, as every layer sees it: who makes it ([`ToolExecution`]), what a tool is
//! ([`Tool`], [`ToolSchema`]) and what it produced ([`ToolOutput`]).
//!
//! A leaf module: the managed environment, hooks, tools and the agent loop all speak these types,
//! and none of them has to name another to do so. The execution's `agent` field is the only
//! carrier of "who is calling": nothing reads a current session from global state, so concurrent
//! calls of different agents can never see each other's facts.

use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Value;
use tokio_util::sync::CancellationToken;

use crate::sandbox::SandboxPolicy;
use dsh_session::{SessionHeader, SessionId};

/// A boxed, sendable future (tools and providers are used as trait objects).
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// The name of the tool that runs commands, as the model calls it.
pub(crate) const BASH: &str = "bash";

/// The file tools' names, as the model calls them.
pub(crate) const READ: &str = "read";
pub(crate) const WRITE: &str = "write";
pub(crate) const EDIT: &str = "edit";

/// The name of the tool that delegates to a child agent, as the model calls it.
pub(crate) const SPAWN_AGENT: &str = "spawn_agent";

/// The agent type hooks see for children spawned by [`SPAWN_AGENT`] (Claude Code's default
/// subagent).
pub(crate) const AGENT_TYPE: &str = "general-purpose";

/// A tool as the model sees it.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolSchema {
    /// Tool name, e.g. `bash`.
    pub name: String,
    /// What the tool does and when to use it.
    pub description: String,
    /// JSON Schema of the arguments object.
    pub parameters: Value,
}

/// The agent a tool call belongs to.
#[derive(Debug, Clone)]
pub struct AgentContext {
    /// The agent's session header (its id is the agent id).
    pub header: Arc<SessionHeader>,
    /// The top-most live ancestor when the agent was created (itself for top-level agents).
    pub root: SessionId,
    /// How the agent's bash calls (and background jobs) are confined.
    pub sandbox: SandboxPolicy,
    /// The environment its commands start from, when the client that made it live sent its own
    /// (scrubbed); `None`: dshd's.
    pub env: Option<crate::exec::ClientEnv>,
}

/// One tool call: who makes it, where in the turn, and how to cancel it.
#[derive(Debug, Clone)]
pub struct ToolExecution {
    /// Call id (unique within the session; generated for calls from outside a turn).
    pub call_id: String,
    /// Tool name, e.g. `bash`.
    pub tool_name: String,
    /// The calling agent; `None` for calls made on behalf of no agent (`Shell.Run` without one).
    pub agent: Option<AgentContext>,
    /// Turn number, inside a turn.
    pub turn: Option<u32>,
    /// Step number, inside a turn.
    pub step: Option<u32>,
    /// Working directory of the call.
    pub cwd: PathBuf,
    /// Cancelled when the call must stop (turn cancelled, daemon shutting down).
    pub cancel: CancellationToken,
    /// Where the output of the foreground command this call runs also goes as it is produced
    /// (an agent's watchers, a streaming `Shell.Run`); `None`: nowhere but the result.
    pub output: Option<crate::exec::OutputTap>,
}

impl ToolExecution {
    /// The calling agent's session id, if the call belongs to an agent.
    pub fn session_id(&self) -> Option<&SessionId> {
        self.agent.as_ref().map(|a| &a.header.id)
    }
}

/// What a tool call produced, as the model will see it, plus what hooks are shown of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ToolOutput {
    /// The result text.
    pub content: String,
    /// True when the call failed (the model sees an error result).
    pub is_error: bool,
    /// False when the call was refused before the tool did anything (arguments it cannot use, a
    /// command `execve` would refuse, ...). Such a call gets no PostToolUse hooks: both upstream
    /// harnesses run PostToolUse only for a tool that produced output.
    pub ran: bool,
    /// What a command did, for the hook dialects that show it structured (Claude Code's Bash
    /// `tool_response` is an object with `stdout` and `stderr`, not the model's text).
    pub detail: Option<ToolDetail>,
}

/// What a tool did beyond its text, in terms the hook dialects can show.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ToolDetail {
    /// A foreground command ran to its end (or was stopped).
    Command {
        /// Its stdout (the kept tail when it was longer than the cap).
        stdout: String,
        /// Its stderr (likewise).
        stderr: String,
        /// Its exit status, when it exited by itself.
        exit_code: Option<i32>,
        /// It timed out or was cancelled before it ended.
        interrupted: bool,
    },
    /// A background job was started; its output comes later through `job_output`.
    Background {
        /// The job's id.
        job_id: String,
    },
    /// A file tool's call (`read`, `write`, `edit`), whether or not it succeeded.
    File {
        /// The file, absolute, as the call named it.
        path: PathBuf,
        /// `read`, or `edit` for `write` and `edit`.
        kind: dsh_session::FileToolKind,
        /// What a successful `write` or `edit` changed; `None` for a read or a failure.
        change: Option<FileChange>,
    },
}

/// The most text (before and after together) a change's event carries (`tool/file`,
/// `approval/request`); a larger change has only its diff in the log.
pub(crate) const FILE_EVENT_TEXT_BYTES: usize = 256 * 1024;

/// A change a call would make to a file, worked out before it runs so that a person asked to
/// approve the call sees it ([`Tool::preview`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preview {
    /// The file, absolute, as the call names it.
    pub path: PathBuf,
    /// The change.
    pub change: FileChange,
}

/// What a `write` or `edit` changed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FileChange {
    /// The text before (`None`: the file was created, or was not UTF-8).
    pub old_text: Option<String>,
    /// The text written.
    pub new_text: String,
    /// `sha256:<hex>` of the content before, when there was a file.
    pub old_hash: Option<String>,
    /// `sha256:<hex>` of the content written.
    pub new_hash: String,
    /// The unified diff from before to after.
    pub diff: String,
}

impl ToolOutput {
    /// A successful result.
    pub fn ok(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            is_error: false,
            ran: true,
            detail: None,
        }
    }

    /// A failed result; the text says what went wrong. The tool ran (or tried to).
    pub fn error(content: impl Into<String>) -> Self {
        Self {
            content: content.into(),
            is_error: true,
            ran: true,
            detail: None,
        }
    }

    /// A call refused before the tool did anything; the text says why.
    pub fn refused(content: impl Into<String>) -> Self {
        Self {
            ran: false,
            ..Self::error(content)
        }
    }

    /// The same result with `detail` attached.
    pub fn with_detail(mut self, detail: ToolDetail) -> Self {
        self.detail = Some(detail);
        self
    }
}

/// A model-facing tool.
pub trait Tool: Send + Sync + std::fmt::Debug {
    /// Name, description and argument schema, as the model sees them.
    fn schema(&self) -> ToolSchema;

    /// Runs one call. Never fails outright: every failure is an error result the model can read.
    /// Must honour `exec.cancel`.
    fn call<'a>(
        &'a self,
        exec: &'a ToolExecution,
        arguments: &'a Value,
    ) -> BoxFuture<'a, ToolOutput>;

    /// What the call would change, worked out without changing anything, so that a person
    /// asked to approve it sees the change itself (a file tool's diff). `None`: the arguments
    /// say it all, or the call would fail (it then fails when it runs, with its own error).
    fn preview<'a>(
        &'a self,
        _exec: &'a ToolExecution,
        _arguments: &'a Value,
    ) -> BoxFuture<'a, Option<Preview>> {
        Box::pin(std::future::ready(None))
    }

    /// Runs a call whose [`preview`](Tool::preview) a person approved: it makes exactly that
    /// change, or none and says why (the file changed while the call waited).
    fn call_approved<'a>(
        &'a self,
        exec: &'a ToolExecution,
        arguments: &'a Value,
        _approved: &'a Preview,
    ) -> BoxFuture<'a, ToolOutput> {
        self.call(exec, arguments)
    }

    /// Forgets what the tool keeps for agent `owner`, which closed (the file tools' record of
    /// what it read). Most tools keep nothing.
    fn release(&self, _owner: &SessionId) {}
}
