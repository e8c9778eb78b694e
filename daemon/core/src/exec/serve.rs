//! A long-lived process its caller talks to over its stdin and stdout: an agent's MCP server.
//! It starts as a command does (the launcher, the agent's sandbox plan, the managed snapshot, the
//! owner marker that lets the next dshd kill it if this one dies), has no time limit, and is
//! killed with its whole group when its [`Served`] is dropped, when it is stopped, or at shutdown.

use std::collections::VecDeque;
use std::sync::{Arc, Mutex};

use tokio::io::{AsyncRead, AsyncReadExt};
use tokio::process::{ChildStdin, ChildStdout};
use tokio::sync::watch;
use tokio_util::sync::{CancellationToken, DropGuard};

use super::output::Collector;
use super::process;
use super::tap::OutputStream;
use super::{CommandSpec, ExecError, Executor};
use crate::locks::lock;
use dsh_session::SessionId;

/// What a served process's stderr keeps, in memory only: its last words, for the error that
/// names why it failed. A server that floods stderr costs this much and no disk.
const STDERR_CAP: usize = 16 * 1024;

/// The last [`STDERR_CAP`] bytes of a stderr.
type Tail = Arc<Mutex<VecDeque<u8>>>;

/// A started served process: the caller's pipes, and the handle that watches and kills it.
#[derive(Debug)]
pub struct Served {
    /// Where the caller writes to it.
    pub stdin: ChildStdin,
    /// What it answers.
    pub stdout: ChildStdout,
    /// Its end and stderr; dropping it kills the process group.
    pub handle: ServedHandle,
}

/// What stays with a served process's owner once the pipes went to a client.
#[derive(Debug)]
pub struct ServedHandle {
    /// Its stderr's tail.
    stderr: Tail,
    /// `Some` once it ended: its exit code or signal, said in words.
    end: watch::Receiver<Option<String>>,
    /// Kills it when the handle goes.
    _kill: DropGuard,
}

impl ServedHandle {
    /// Waits, at most `bound`, for it to end, its stderr read to the end: then
    /// [`Self::last_stderr_line`] has its last words.
    pub async fn wait_ended(&self, bound: std::time::Duration) {
        let mut end = self.end.clone();
        let _ = tokio::time::timeout(bound, end.wait_for(Option::is_some)).await;
    }

    /// How it ended (`exited with code 1`, `killed by SIGSEGV`), or `None` while it runs.
    pub fn ended(&self) -> Option<String> {
        self.end.borrow().clone()
    }

    /// The last line it wrote to stderr that has text, if any (what a failing server says).
    pub fn last_stderr_line(&self) -> Option<String> {
        let tail: Vec<u8> = lock(&self.stderr).iter().copied().collect();
        String::from_utf8_lossy(&tail)
            .lines()
            .rev()
            .map(str::trim)
            .find(|l| !l.is_empty())
            .map(|l| l.chars().take(500).collect())
    }
}

impl Executor {
    /// Starts `spec` as a served process owned by agent `owner`: its stdin and stdout are the
    /// caller's, its stderr is kept (bounded); `spec.stdin`, `timeout` and `output` are unused.
    /// Errors only when nothing could be started.
    pub fn serve(&self, spec: CommandSpec, owner: Option<&SessionId>) -> Result<Served, ExecError> {
        let runtime = tokio::runtime::Handle::try_current().map_err(|_| ExecError::NoRuntime)?;
        let tracked = self.admit(&spec)?;
        // An empty input keeps stdin a pipe; the caller writes to it, not `supervise`.
        let (mut spawned, leftover) = self.spawn(&spec, Some(Vec::new()), owner)?;
        let (Some(stdin), Some(stdout), stderr_pipe) = spawned.take_stdio() else {
            // Cannot happen for pipes asked for at spawn; dropping `spawned` kills the group.
            return Err(ExecError::Spawn {
                shell: self.config.launcher.path().to_owned(),
                error: std::io::Error::other("the served process has no stdin or stdout pipe"),
            });
        };
        let stderr = Tail::default();
        // `supervise` pumps nothing (the pipes are taken): these stay empty and never spill.
        let unused = || {
            Arc::new(Mutex::new(Collector::new(
                OutputStream::Stdout,
                1,
                self.spill.clone(),
            )))
        };
        let (out, err) = (unused(), unused());
        let kill = self.stop.child_token();
        let (ended_tx, end) = watch::channel(None);
        let limits = self.limits(None);
        let cancel = kill.clone();
        let tail = runtime.spawn(keep_tail(stderr_pipe, stderr.clone()));
        runtime.spawn(async move {
            let _tracked = tracked;
            let never = CancellationToken::new();
            let ended = process::supervise(spawned, out, err, limits, &cancel, &never).await;
            // Its last words are in the tail before its end is announced (a grandchild that
            // keeps stderr open is not waited for long).
            let _ = tokio::time::timeout(limits.drain, tail).await;
            let _ = tokio::task::spawn_blocking(move || leftover.finish()).await;
            let said = match (ended.exit_code, ended.signal) {
                _ if ended.aborted => "was stopped".to_owned(),
                (Some(code), _) => format!("exited with code {code}"),
                (None, Some(signal)) => format!("was killed by {}", super::signal_name(signal)),
                (None, None) => "ended".to_owned(),
            };
            ended_tx.send_replace(Some(said));
        });
        Ok(Served {
            stdin,
            stdout,
            handle: ServedHandle {
                stderr,
                end,
                _kill: kill.drop_guard(),
            },
        })
    }
}

/// Keeps the last [`STDERR_CAP`] bytes of `pipe` in `tail` until EOF.
async fn keep_tail(pipe: Option<impl AsyncRead + Unpin>, tail: Tail) {
    let Some(mut pipe) = pipe else { return };
    let mut buf = vec![0u8; 8 * 1024];
    while let Ok(n) = pipe.read(&mut buf).await {
        if n == 0 {
            break;
        }
        let mut tail = lock(&tail);
        tail.extend(&buf[..n]);
        let excess = tail.len().saturating_sub(STDERR_CAP);
        tail.drain(..excess);
    }
}
