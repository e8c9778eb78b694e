//! Confined launches (issue 15): the sandbox plan of a command, its private temporary directory,
//! and the helper invocation that takes the place of `shell -c command`.
//!
//! A confined command runs as `<helper> <plan> -- <shell> -c <command>`; the helper confines its
//! own process and `exec`s the shell, so the pid, process group, environment, cwd, pipes, limits
//! and owner marker are those of an unconfined launch. The one variable added is `TMPDIR`, naming
//! the private temporary directory (a caller's own `TMPDIR` still wins).
//!
//! Private temporary directories live under `SandboxSettings::tmp_root` (outside the harness
//! home): one per agent, kept across its calls and jobs until the agent closes
//! ([`super::Executor::release_sandbox_of`]); one per call for commands of no agent, removed when
//! the call (or job) is over.

use std::ffi::OsString;
use std::path::{Path, PathBuf};

use super::ExecError;
use super::limits::Extra;
use super::output::ensure_private_dir;
use crate::sandbox::plan::{Plan, check_support};
use crate::sandbox::{LandlockSupport, SandboxError, SandboxMode, SandboxPolicy, SandboxSettings};
use crate::session::SessionId;

/// How one command is to be confined.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SandboxRequest {
    /// The policy.
    pub policy: SandboxPolicy,
    /// The workspace `workspace-write` may write: the agent's cwd (for a command of no agent, the
    /// command's cwd). A call's own working directory does not widen it.
    pub workspace: PathBuf,
}

/// A confined launch, ready to spawn.
#[derive(Debug)]
pub(crate) struct Confinement {
    /// The policy, recorded with the shell's pid so its clients of the socket are known as
    /// confined (`lineage`).
    pub policy: SandboxPolicy,
    /// The helper program.
    pub program: PathBuf,
    /// The helper's arguments up to and including `--`; the shell, `-c` and the command follow.
    pub args: Vec<OsString>,
    /// The private temporary directory, given to the command as `TMPDIR`.
    pub tmp: Option<PathBuf>,
    /// Whether `tmp` belongs to this launch alone (removed when it is over).
    pub transient: bool,
}

impl Confinement {
    /// What the launch adds to `execve`'s strings: the helper program (path and argv[0]), its
    /// arguments, the shell once more as an argument, and `TMPDIR=…`.
    pub(crate) fn extra(&self, shell: &Path) -> Extra {
        let arg = |s: &std::ffi::OsStr| s.len() + 1;
        let mut extra = Extra {
            bytes: arg(self.program.as_os_str()) * 2 + arg(shell.as_os_str()),
            strings: 2,
        };
        for a in &self.args {
            extra.bytes += arg(a);
            extra.strings += 1;
        }
        if let Some(tmp) = &self.tmp {
            extra.bytes += "TMPDIR=".len() + arg(tmp.as_os_str());
            extra.strings += 1;
        }
        extra
    }

    /// Removes a transient temporary directory (the launch is over).
    pub(crate) fn finish(&self) {
        if self.transient
            && let Some(tmp) = &self.tmp
        {
            remove_tmp(tmp);
        }
    }
}

/// The confinement of `request` for a command owned by `owner` (an agent) or by no one; `None`
/// when the policy confines nothing. Refuses (nothing is spawned) when the kernel cannot enforce
/// the policy, no helper is configured, or a writable root would expose a protected path.
pub(crate) fn confine(
    settings: &SandboxSettings,
    support: LandlockSupport,
    request: &SandboxRequest,
    owner: Option<&SessionId>,
) -> Result<Option<Confinement>, ExecError> {
    let policy = &request.policy;
    if !policy.is_confined() {
        return Ok(None);
    }
    let Some(helper) = &settings.helper else {
        return Err(SandboxError::NoHelper { policy: *policy }.into());
    };
    // Before any directory is made: an unenforceable policy leaves nothing behind.
    check_support(policy, settings, support)?;
    let (tmp, transient) = if policy.mode == SandboxMode::Off {
        (None, false)
    } else {
        let (dir, transient) = match owner {
            Some(owner) => (tmp_dir_of(settings, owner), false),
            None => (
                tmp_root(settings).join(format!("call-{}", uuid::Uuid::now_v7().simple())),
                true,
            ),
        };
        ensure_private_dir(&tmp_root(settings))
            .and_then(|()| ensure_private_dir(&dir))
            .map_err(|source| SandboxError::Tmp {
                path: dir.clone(),
                source,
            })?;
        (Some(dir), transient)
    };
    let plan = match Plan::new(
        policy,
        settings,
        support,
        &request.workspace,
        tmp.as_deref(),
    ) {
        Ok(plan) => plan,
        Err(error) => {
            if transient && let Some(tmp) = &tmp {
                remove_tmp(tmp);
            }
            return Err(error.into());
        }
    };
    let mut args = helper.args.clone();
    args.extend(plan.to_args());
    Ok(Some(Confinement {
        policy: *policy,
        program: helper.program.clone(),
        args,
        tmp,
        transient,
    }))
}

fn tmp_root(settings: &SandboxSettings) -> PathBuf {
    if settings.tmp_root.as_os_str().is_empty() {
        crate::sandbox::default_tmp_root()
    } else {
        settings.tmp_root.clone()
    }
}

/// The private temporary directory of agent `owner`.
pub(crate) fn tmp_dir_of(settings: &SandboxSettings, owner: &SessionId) -> PathBuf {
    tmp_root(settings).join(owner.to_string())
}

/// Removes a private temporary directory and everything in it (links are removed, not followed).
pub(crate) fn remove_tmp(dir: &Path) {
    match std::fs::remove_dir_all(dir) {
        Ok(()) => {}
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => {
            tracing::warn!(%error, dir = %dir.display(), "cannot remove a sandbox temporary directory");
        }
    }
}
