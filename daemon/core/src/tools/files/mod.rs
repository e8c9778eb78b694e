//! The file tools `read`, `write` and `edit`. dshd never touches the file itself: every read and
//! write is one file operation of the launcher (`dsh-launch --file-op`), confined by the calling
//! agent's sandbox plan exactly as its `bash` commands are, and run under the same limits. So a
//! file tool reaches what the agent's commands could and nothing more; symbolic links, `..`,
//! hard links and `/proc/self/root` are resolved by the kernel under Landlock.
//!
//! dshd keeps what it needs to guard edits: per agent, the size and SHA-256 of each file at the
//! agent's last read or write of it. An `edit`, or a `write` over an existing file, is refused
//! unless the agent has read the file and it is unchanged since (the launcher checks the digest
//! again just before it replaces the file).

mod diff;
mod edit;
mod read;
mod write;

pub(crate) use edit::EditTool;
pub(crate) use read::ReadTool;
pub(crate) use write::WriteTool;

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use dsh_launch::file_op::{Expect, FailureKind, FileReply, FileRequest, ReadReply};
use dsh_launch::sha256::{Digest, Sha256, hex};
use dsh_session::{FileToolKind, SessionId};
use serde_json::Value;

use crate::call::{
    BoxFuture, FileChange, Preview, Tool, ToolDetail, ToolExecution, ToolOutput, ToolSchema,
};
use crate::exec::{CommandSpec, Executor, SandboxRequest};
use crate::locks::lock;
use crate::sandbox::SandboxPolicy;

/// The largest file `edit` and `write` replace, and `read` hashes: larger files are edited
/// with `bash`.
pub(crate) const EDIT_LIMIT: u64 = 8 * 1024 * 1024;

/// Files remembered per agent; past this the oldest half is forgotten (the model reads again).
const SEEN_PER_AGENT: usize = 4096;

/// What an agent last saw of a file.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
struct Seen {
    size: u64,
    /// `None`: the file was too large to hash (and so to edit); the agent did read it.
    digest: Option<Digest>,
    /// Order of recording, to forget the oldest first.
    tick: u64,
}

/// The state the three tools share: the executor their operations run through, and what each
/// agent last saw of each file.
#[derive(Debug)]
pub(crate) struct FileAccess {
    executor: Arc<Executor>,
    seen: Mutex<HashMap<Option<SessionId>, HashMap<PathBuf, Seen>>>,
    tick: std::sync::atomic::AtomicU64,
}

impl FileAccess {
    /// File access through `executor`.
    pub(crate) fn new(executor: Arc<Executor>) -> Arc<Self> {
        Arc::new(Self {
            executor,
            seen: Mutex::new(HashMap::new()),
            tick: std::sync::atomic::AtomicU64::new(0),
        })
    }

    fn seen(&self, exec: &ToolExecution, path: &Path) -> Option<(u64, Option<Digest>)> {
        lock(&self.seen)
            .get(&exec.session_id().cloned())
            .and_then(|files| files.get(path))
            .map(|s| (s.size, s.digest))
    }

    fn record(&self, exec: &ToolExecution, path: &Path, size: u64, digest: Option<Digest>) {
        let tick = self.tick.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let mut seen = lock(&self.seen);
        let files = seen.entry(exec.session_id().cloned()).or_default();
        if files.len() >= SEEN_PER_AGENT && !files.contains_key(path) {
            let mut ticks: Vec<u64> = files.values().map(|s| s.tick).collect();
            ticks.sort_unstable();
            let cut = ticks[ticks.len() / 2];
            files.retain(|_, s| s.tick > cut);
        }
        files.insert(path.to_owned(), Seen { size, digest, tick });
    }

    /// Forgets what agent `owner` saw (it closed).
    pub(crate) fn forget(&self, owner: &SessionId) {
        lock(&self.seen).remove(&Some(owner.clone()));
    }

    /// Runs one operation in a launcher confined by the calling agent's sandbox plan.
    async fn run(
        &self,
        exec: &ToolExecution,
        request: FileRequest,
        reply_cap: usize,
    ) -> Result<FileReply, String> {
        run(&self.executor, exec, request, reply_cap).await
    }
}

/// Runs one file operation through `executor`, in a launcher confined by the calling agent's
/// sandbox plan (unconfined for a call of no agent), keeping at most `reply_cap` bytes of the
/// reply; a launcher that did not complete is an error in the model's words.
pub(crate) async fn run(
    executor: &Executor,
    exec: &ToolExecution,
    request: FileRequest,
    reply_cap: usize,
) -> Result<FileReply, String> {
    // The same plan as the agent's bash calls: its policy, with its cwd as the workspace.
    let (policy, workspace) = match &exec.agent {
        Some(agent) => (agent.sandbox, agent.header.cwd.clone()),
        None => (SandboxPolicy::UNCONFINED, exec.cwd.clone()),
    };
    let spec = CommandSpec {
        cwd: exec.cwd.clone(),
        stdin: Some(request.encode()),
        cancel: exec.cancel.clone(),
        spill_owner: exec.session_id().cloned(),
        sandbox: Some(SandboxRequest { policy, workspace }),
        ..CommandSpec::default()
    };
    let run = executor
        .run_file_op(spec, reply_cap)
        .await
        .map_err(|e| e.to_string())?;
    if run.timed_out {
        return Err("the file operation timed out".to_owned());
    }
    if run.aborted {
        return Err("the file operation was cancelled".to_owned());
    }
    match (run.exit_code, run.stdout) {
        (Some(0), Some(bytes)) => FileReply::decode(&bytes).map_err(|e| e.to_string()),
        (_, None) => Err("the file operation's reply was too large".to_owned()),
        (code, Some(_)) => Err(format!(
            "the file operation did not complete (exit status {}): {}",
            code.map_or_else(|| "none".to_owned(), |c| c.to_string()),
            run.stderr.trim()
        )),
    }
}

impl FileAccess {
    /// Reads the whole file (up to [`EDIT_LIMIT`]) for a change: `Ok(None)` when it does not
    /// exist.
    async fn read_whole(
        &self,
        exec: &ToolExecution,
        path: &Path,
    ) -> Result<Option<ReadReply>, String> {
        let request = FileRequest::Read {
            path: path.to_owned(),
            offset: 0,
            limit: u64::MAX,
            max_bytes: EDIT_LIMIT,
            hash_limit: EDIT_LIMIT,
        };
        match self.run(exec, request, reply_cap(EDIT_LIMIT)).await? {
            FileReply::Read(read) if read.digest.is_none() || read.cut => Err(format!(
                "{} is larger than {} MiB; change it with bash instead",
                path.display(),
                EDIT_LIMIT / (1024 * 1024)
            )),
            FileReply::Read(read) => Ok(Some(read)),
            FileReply::Failed(f) if f.kind == FailureKind::NotFound => Ok(None),
            other => Err(failure_text(path, other)),
        }
    }

    /// Checks that the agent read `path` and that `current` is what it read; the expectation
    /// for the write.
    fn expect_unchanged(
        &self,
        exec: &ToolExecution,
        path: &Path,
        current: &ReadReply,
    ) -> Result<Expect, String> {
        let Some((size, digest)) = self.seen(exec, path) else {
            return Err(format!(
                "{} exists and you have not read it in this session; read it with the read tool \
                 first, then try again",
                path.display()
            ));
        };
        let Some(digest) = digest.filter(|_| current.digest == digest && current.size == size)
        else {
            return Err(format!(
                "{} has changed since you last read it (another process or the user changed \
                 it); read it again with the read tool, then try again",
                path.display()
            ));
        };
        Ok(Expect::Same { size, digest })
    }

    /// Writes `content` to `path` if it is still as `expect` says, and remembers it as seen.
    async fn write(
        &self,
        exec: &ToolExecution,
        path: &Path,
        content: Vec<u8>,
        digest: Digest,
        expect: Expect,
    ) -> Result<(), String> {
        let size = content.len() as u64;
        let request = FileRequest::Write {
            path: path.to_owned(),
            content,
            expect,
        };
        match self.run(exec, request, reply_cap(0)).await? {
            FileReply::Written(_) => {
                self.record(exec, path, size, Some(digest));
                Ok(())
            }
            other => Err(failure_text(path, other)),
        }
    }
}

/// What `write` and `edit` have in common: each works a change out against the file as it is
/// ([`Plan`]), then makes it; a person asked to approve the call is shown the planned change.
/// [`Changing`] makes one a [`Tool`].
pub(crate) trait Change: Send + Sync + std::fmt::Debug {
    /// The tool as the model sees it.
    fn schema(&self) -> ToolSchema;
    /// The file access the change goes through.
    fn files(&self) -> &FileAccess;
    /// The change `arguments` ask for, worked out now, or the result saying why not.
    fn plan<'a>(
        &'a self,
        exec: &'a ToolExecution,
        arguments: &'a Value,
    ) -> BoxFuture<'a, Result<Plan, ToolOutput>>;
}

/// A [`Change`] as a tool.
#[derive(Debug)]
pub(crate) struct Changing<C>(pub(crate) C);

impl<C: Change> Tool for Changing<C> {
    fn schema(&self) -> ToolSchema {
        self.0.schema()
    }

    fn call<'a>(
        &'a self,
        exec: &'a ToolExecution,
        arguments: &'a Value,
    ) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            match self.0.plan(exec, arguments).await {
                Ok(plan) => self.0.files().make(exec, plan, None).await,
                Err(refused) => refused,
            }
        })
    }

    fn preview<'a>(
        &'a self,
        exec: &'a ToolExecution,
        arguments: &'a Value,
    ) -> BoxFuture<'a, Option<Preview>> {
        Box::pin(async move {
            let plan = self.0.plan(exec, arguments).await.ok()?;
            Some(Preview {
                path: plan.path,
                change: plan.change,
            })
        })
    }

    fn call_approved<'a>(
        &'a self,
        exec: &'a ToolExecution,
        arguments: &'a Value,
        approved: &'a Preview,
    ) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            match self.0.plan(exec, arguments).await {
                Ok(plan) => self.0.files().make(exec, plan, Some(approved)).await,
                Err(refused) => refused,
            }
        })
    }
}

/// A change worked out against the file as it is, not yet made: what `write` and `edit` write,
/// and what a person approving the call is shown.
#[derive(Debug)]
pub(crate) struct Plan {
    path: PathBuf,
    /// What must be there when it is written: the state the change was worked out from.
    expect: Expect,
    /// The change.
    change: FileChange,
    /// The digest of the new text (the launcher does not hash what it writes: dshd has).
    new_digest: Digest,
    /// The result text once it is made.
    done: String,
}

impl Plan {
    fn new(
        path: PathBuf,
        expect: Expect,
        old_digest: Option<&Digest>,
        old_text: Option<String>,
        new_text: String,
        done: String,
    ) -> Self {
        let new_digest = Sha256::digest(new_text.as_bytes());
        let change = FileChange {
            diff: diff::unified(&path, old_text.as_deref(), &new_text),
            old_hash: old_digest.map(hash_text),
            new_hash: hash_text(&new_digest),
            old_text,
            new_text,
        };
        Self {
            path,
            expect,
            change,
            new_digest,
            done,
        }
    }
}

impl FileAccess {
    /// Makes `plan`'s change. When a person approved a change, only that one: the file must
    /// still be what it was worked out from and the new text the same, else nothing is written
    /// (calls of one step run together, so another may have changed the file meanwhile).
    async fn make(
        &self,
        exec: &ToolExecution,
        plan: Plan,
        approved: Option<&Preview>,
    ) -> ToolOutput {
        let tool = exec.tool_name.as_str();
        if let Some(approved) = approved.map(|p| &p.change)
            && (approved.old_hash != plan.change.old_hash
                || approved.new_text != plan.change.new_text)
        {
            return failed(
                tool,
                &plan.path,
                format!(
                    "{} changed while the call waited for approval, so the approved change was \
                     not made; read it again with the read tool, then try again",
                    plan.path.display()
                ),
            );
        }
        let bytes = plan.change.new_text.clone().into_bytes();
        match self
            .write(exec, &plan.path, bytes, plan.new_digest, plan.expect)
            .await
        {
            Ok(()) => ToolOutput::ok(plan.done).with_detail(ToolDetail::File {
                path: plan.path,
                kind: FileToolKind::Edit,
                change: Some(plan.change),
            }),
            Err(m) => failed(tool, &plan.path, m),
        }
    }
}

/// The error result of a `write` or `edit` (`tool`) of `path` that changed nothing.
fn failed(tool: &str, path: &Path, message: String) -> ToolOutput {
    ToolOutput::error(format!("Error: {tool}: {message}")).with_detail(ToolDetail::File {
        path: path.to_owned(),
        kind: FileToolKind::Edit,
        change: None,
    })
}

/// Room for a reply carrying `bytes` of content and its framing.
fn reply_cap(bytes: u64) -> usize {
    usize::try_from(bytes)
        .unwrap_or(usize::MAX)
        .saturating_add(4096)
}

/// The model's words for a reply that is not the one expected.
fn failure_text(path: &Path, reply: FileReply) -> String {
    let path = path.display();
    match reply {
        FileReply::Failed(f) => match f.kind {
            FailureKind::NotFound => format!("{path} does not exist ({})", f.message),
            FailureKind::NotRegular => format!("{path} cannot be used: {}", f.message),
            FailureKind::Denied => format!(
                "{path}: permission denied: the sandbox or the file's permissions do not allow \
                 this ({})",
                f.message
            ),
            FailureKind::NoParent => format!(
                "cannot create {path}: {}; create the directory first (e.g. mkdir -p with bash)",
                f.message
            ),
            FailureKind::Changed => format!(
                "{path} changed while this call ran ({}); read it again with the read tool, then \
                 try again",
                f.message
            ),
            FailureKind::Other => format!("{path}: {}", f.message),
        },
        other => format!("{path}: unexpected reply {other:?}"),
    }
}

/// The `file_path` argument, made absolute against the call's working directory. Not
/// normalised: `..` and links are resolved by the kernel, in the confined launcher, as a
/// command's would be.
fn file_path(arguments: &Value, cwd: &Path) -> Result<PathBuf, String> {
    match arguments.get("file_path") {
        Some(Value::String(p)) if !p.is_empty() && !p.contains('\0') => Ok(cwd.join(p)),
        Some(Value::String(_)) | None => {
            Err("`file_path` is required and must be a non-empty path".to_owned())
        }
        Some(other) => Err(format!("`file_path` must be a string, got {other}")),
    }
}

/// A required string argument.
fn string_arg<'a>(arguments: &'a Value, name: &str) -> Result<&'a str, String> {
    match arguments.get(name) {
        Some(Value::String(s)) => Ok(s),
        None | Some(Value::Null) => Err(format!("`{name}` is required")),
        Some(other) => Err(format!("`{name}` must be a string, got {other}")),
    }
}

/// Content hashes as events show them.
pub(crate) fn hash_text(digest: &Digest) -> String {
    format!("sha256:{}", hex(digest))
}

#[cfg(test)]
mod tests;
