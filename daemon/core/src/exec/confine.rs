//! Confined launches: the sandbox plan of a command and its private temporary directory.
//!
//! A confined command is spawned exactly as an unconfined one, through the launcher
//! (`dsh_launch`); the plan rides on the launcher's arguments, and the launcher confines itself
//! before it `exec`s the shell, so the pid, process group, environment, cwd, pipes, limits and
//! owner marker are those of an unconfined launch. The one variable added is `TMPDIR`, naming
//! the private temporary directory (a caller's own `TMPDIR` still wins).
//!
//! Private temporary directories ([`TmpDirs`]): one per agent, kept across its calls and jobs
//! until the agent closes ([`super::Executor::release_sandbox_of`]); a fresh one for each
//! command of no agent, removed when the command (or job) is over.

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use super::ExecError;
use super::output::ensure_private_dir;
use crate::locks::lock;
use crate::sandbox::plan::{self, Plan, check_support};
use crate::sandbox::{LandlockSupport, SandboxError, SandboxMode, SandboxPolicy, SandboxSettings};
use dsh_session::SessionId;

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
    /// What the launcher confines itself to.
    pub plan: Plan,
    /// The private temporary directory, given to the command as `TMPDIR`.
    pub tmp: Option<PathBuf>,
    /// Whether `tmp` belongs to this launch alone (a command of no agent): removed after it.
    own_tmp: bool,
}

/// A confined command's temporary directory of its own, if it has one, to remove when it is over.
#[derive(Debug)]
pub(crate) struct Leftover(Option<PathBuf>);

impl Leftover {
    /// What is left of `confined` once its command has been spawned.
    pub(crate) fn of(confined: Option<&Confinement>) -> Self {
        Self(confined.filter(|c| c.own_tmp).and_then(|c| c.tmp.clone()))
    }

    /// Removes the directory on a blocking thread, so the caller is not kept waiting.
    pub(crate) fn finish_later(self) {
        if let Some(dir) = self.0 {
            tokio::task::spawn_blocking(move || remove_tmp(&dir));
        }
    }

    /// Removes the directory (the command is over).
    pub(crate) fn finish(self) {
        if let Some(dir) = self.0 {
            remove_tmp(&dir);
        }
    }
}

/// The confinement of `request` for a command owned by `owner` (an agent) or by no one; `None`
/// when the policy confines nothing. Refuses (nothing is spawned, nothing is left behind) when
/// the kernel cannot enforce the policy or a writable root would expose a protected path.
pub(crate) fn confine(
    settings: &SandboxSettings,
    support: LandlockSupport,
    request: &SandboxRequest,
    owner: Option<&SessionId>,
    dirs: &TmpDirs,
) -> Result<Option<Confinement>, ExecError> {
    let policy = &request.policy;
    if !policy.is_confined() {
        return Ok(None);
    }
    // Before any directory is made: an unenforceable policy leaves nothing behind.
    check_support(policy, settings, support)?;
    let tmp = if policy.mode == SandboxMode::Off {
        None
    } else {
        Some(match owner {
            Some(owner) => dirs.of_agent(settings, owner)?,
            None => dirs.for_call(settings)?,
        })
    };
    let own_tmp = owner.is_none() && tmp.is_some();
    match plan::new(
        policy,
        settings,
        support,
        &request.workspace,
        tmp.as_deref(),
    ) {
        Ok(plan) => Ok(Some(Confinement {
            policy: *policy,
            plan,
            tmp,
            own_tmp,
        })),
        Err(error) => {
            if own_tmp && let Some(dir) = &tmp {
                remove_tmp(dir);
            }
            Err(error.into())
        }
    }
}

/// The private temporary directories of confined commands, and where they are made.
///
/// The parent is the first of [`SandboxSettings::tmp_roots`] that is, or can be made, a private
/// directory of this user's (0700, no link): never a predictable path in a shared directory that
/// another user could create first. One that is not usable is logged (once) and skipped.
#[derive(Debug, Default)]
pub(crate) struct TmpDirs {
    /// Each agent's directory, made at its first confined call.
    agents: Mutex<BTreeMap<SessionId, PathBuf>>,
    /// Candidate parents found unusable and already logged.
    reported: Mutex<BTreeSet<PathBuf>>,
}

impl TmpDirs {
    /// The directory of agent `owner`, made (again) when it is not there as it should be.
    fn of_agent(
        &self,
        settings: &SandboxSettings,
        owner: &SessionId,
    ) -> Result<PathBuf, SandboxError> {
        let known = lock(&self.agents).get(owner).cloned();
        if let Some(dir) = known
            && ensure_private_dir(&dir).is_ok()
        {
            return Ok(dir);
        }
        let dir = self.root(settings)?.join(owner.to_string());
        ensure_private_dir(&dir).map_err(|source| SandboxError::Tmp {
            path: dir.clone(),
            error: source,
        })?;
        lock(&self.agents).insert(owner.clone(), dir.clone());
        Ok(dir)
    }

    /// A new, empty directory for one command of no agent: made here or not at all.
    fn for_call(&self, settings: &SandboxSettings) -> Result<PathBuf, SandboxError> {
        use std::os::unix::fs::DirBuilderExt;
        let dir = self
            .root(settings)?
            .join(format!("call-{}", uuid::Uuid::now_v7().simple()));
        std::fs::DirBuilder::new()
            .mode(0o700)
            .create(&dir)
            .map_err(|source| SandboxError::Tmp {
                path: dir.clone(),
                error: source,
            })?;
        Ok(dir)
    }

    /// The first usable parent.
    fn root(&self, settings: &SandboxSettings) -> Result<PathBuf, SandboxError> {
        let mut last = None;
        for root in &settings.tmp_roots {
            match ensure_private_dir(root) {
                Ok(()) => return Ok(root.clone()),
                Err(error) => {
                    if lock(&self.reported).insert(root.clone()) {
                        tracing::warn!(
                            %error, dir = %root.display(),
                            "this directory cannot hold sandbox temporary directories (it must be a directory of this user's, mode 0700, no link); trying the next place"
                        );
                    }
                    last = Some((root.clone(), error));
                }
            }
        }
        let (path, source) = last.unwrap_or_else(|| {
            (
                PathBuf::new(),
                std::io::Error::new(
                    std::io::ErrorKind::NotFound,
                    "no place is configured for sandbox temporary directories",
                ),
            )
        });
        Err(SandboxError::Tmp {
            path,
            error: source,
        })
    }

    /// Removes agent `owner`'s directory (it closed).
    pub(crate) fn release(&self, owner: &SessionId) {
        let dir = lock(&self.agents).remove(owner);
        if let Some(dir) = dir {
            remove_tmp(&dir);
        }
    }

    /// Removes every agent's directory (the executor is shutting down).
    pub(crate) fn release_all(&self) {
        let all = std::mem::take(&mut *lock(&self.agents));
        for dir in all.values() {
            remove_tmp(dir);
        }
    }
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
