//! One hook to run and how it ended: what the command runner (`runner.rs`) and the HTTP runner
//! (`http.rs`) share, so neither names the other for it.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::Dialect;
use super::sandboxing::Reach;
use crate::sandbox::SandboxPolicy;
use dsh_session::HookConfinement;

/// One hook to run.
#[derive(Debug, Clone)]
pub(super) struct Job {
    pub dialect: Dialect,
    pub handler_id: String,
    /// The command after the dialect's expansion.
    pub command: String,
    pub cwd: PathBuf,
    /// The dialect's variables (e.g. `CLAUDE_PROJECT_DIR`).
    pub env: BTreeMap<String, String>,
    /// The payload, shared by every hook of the dialect.
    pub stdin: Arc<Vec<u8>>,
    pub timeout: Duration,
    pub cancel: CancellationToken,
    /// Set for an HTTP hook: `command` is the URL the payload is POSTed to.
    pub http: Option<super::config::HttpHook>,
    /// The file the hook was read from.
    pub file: PathBuf,
    /// The firing agent's confinement, when it has one: decides whether the hook runs in its
    /// sandbox (`sandboxing.rs`).
    pub reach: Option<Arc<Reach>>,
    /// It runs in the background (Claude Code's `async`).
    pub background: bool,
}

/// The sandbox a hook ran in, and why.
#[derive(Debug, Clone)]
pub(super) struct Confined {
    pub policy: SandboxPolicy,
    pub reason: String,
}

impl Confined {
    /// Its form in the `hook/result` record.
    pub(super) fn record(&self) -> HookConfinement {
        HookConfinement {
            mode: self.policy.mode.as_str().to_owned(),
            network: self.policy.network.as_str().to_owned(),
            reason: self.reason.clone(),
        }
    }
}

/// How one hook ended.
#[derive(Debug, Clone, Default)]
pub(super) struct RunEnd {
    /// The exit status, when the shell exited by itself.
    pub exit_code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
    /// Why it did not end normally: timed out, cancelled, killed by a signal, or never started.
    pub failure: Option<String>,
    pub duration: Duration,
    /// Set when it ran in its agent's sandbox.
    pub sandbox: Option<Confined>,
}
