//! Confined launches: the sandbox plan of a command, its private temporary directory, and the
//! confined thread that spawns it.
//!
//! A confined command is spawned exactly as an unconfined one, but from a thread restricted to
//! its plan ([`crate::sandbox`]), so the pid, process group, environment, cwd, pipes, limits and
//! owner marker are those of an unconfined launch. The one variable added is `TMPDIR`, naming the
//! private temporary directory (a caller's own `TMPDIR` still wins).
//!
//! An agent's confined thread is kept for its next calls while its plan holds (see
//! [`Spawners`]); a command of no agent gets a thread of its own, ended with the call (made one
//! call ahead, so the call does not wait for it).
//!
//! Private temporary directories live under `SandboxSettings::tmp_root` (outside the harness
//! home): one per agent, kept across its calls and jobs until the agent closes
//! ([`super::Executor::release_sandbox_of`]); one per call for commands of no agent, removed when
//! the call (or job) is over.

use std::collections::BTreeMap;
use std::fs::DirBuilder;
use std::os::unix::fs::DirBuilderExt;
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::ExecError;
use super::output::ensure_private_dir;
use crate::sandbox::plan::{Plan, check_support};
use crate::sandbox::spawner::ConfinedSpawner;
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
    /// The thread that spawns the command, restricted to its plan.
    pub spawner: Arc<ConfinedSpawner>,
    /// The private temporary directory, given to the command as `TMPDIR`.
    pub tmp: Option<PathBuf>,
    /// Whether `tmp` belongs to this launch alone (removed when it is over).
    pub transient: bool,
}

/// A confined command's temporary directory of its own, if it has one, to remove when it is over.
#[derive(Debug)]
pub(crate) struct Leftover(Option<PathBuf>);

impl Leftover {
    /// Removes the directory on a blocking thread, so the caller is not kept waiting for it.
    pub(crate) fn finish_later(self) {
        if self.0.is_some() {
            tokio::task::spawn_blocking(move || self.finish());
        }
    }

    /// What is left of `confined` once its command has been spawned. Dropping the rest lets a
    /// one-call thread end at once.
    pub(crate) fn of(confined: Option<Confinement>) -> Self {
        Self(confined.and_then(|c| c.tmp.filter(|_| c.transient)))
    }

    /// Removes the directory (the command is over).
    pub(crate) fn finish(self) {
        if let Some(tmp) = self.0 {
            remove_tmp(&tmp);
        }
    }
}

/// The confinement of `request` for a command owned by `owner` (an agent) or by no one; `None`
/// when the policy confines nothing. Refuses (nothing is spawned) when the kernel cannot enforce
/// the policy or a writable root would expose a protected path.
pub(crate) fn confine(
    settings: &SandboxSettings,
    support: LandlockSupport,
    request: &SandboxRequest,
    owner: Option<&SessionId>,
    spawners: &Spawners,
) -> Result<Option<Confinement>, ExecError> {
    let policy = &request.policy;
    if !policy.is_confined() {
        return Ok(None);
    }
    // Before any directory is made: an unenforceable policy leaves nothing behind.
    check_support(policy, settings, support)?;
    let (spawner, tmp, transient) = match owner {
        Some(owner) => {
            let tmp = if policy.mode == SandboxMode::Off {
                None
            } else {
                let dir = tmp_dir_of(settings, owner);
                ensure_private_dir(&tmp_root(settings))
                    .and_then(|()| ensure_private_dir(&dir))
                    .map_err(|source| SandboxError::Tmp {
                        path: dir.clone(),
                        source,
                    })?;
                Some(dir)
            };
            let plan = Plan::new(
                policy,
                settings,
                support,
                &request.workspace,
                tmp.as_deref(),
            )?;
            (spawners.for_agent(owner, plan)?, tmp, false)
        }
        None => {
            let (spawner, tmp) = match spawners.take_ready(settings, support, request) {
                Some(ready) => ready,
                None => one_call(settings, support, request)?,
            };
            spawners.prepare(settings, support, request);
            (spawner, tmp, true)
        }
    };
    Ok(Some(Confinement {
        policy: *policy,
        spawner,
        tmp,
        transient,
    }))
}

/// A confinement of its own for one command of no agent: a new private temporary directory and
/// a thread restricted to it. Nothing is left behind on an error.
fn one_call(
    settings: &SandboxSettings,
    support: LandlockSupport,
    request: &SandboxRequest,
) -> Result<(Arc<ConfinedSpawner>, Option<PathBuf>), SandboxError> {
    let tmp = if request.policy.mode == SandboxMode::Off {
        None
    } else {
        let dir = tmp_root(settings).join(format!("call-{}", uuid::Uuid::now_v7().simple()));
        ensure_private_dir(&tmp_root(settings))
            // A new name: made here or not at all (never one someone else put there).
            .and_then(|()| DirBuilder::new().mode(0o700).create(&dir))
            .map_err(|source| SandboxError::Tmp {
                path: dir.clone(),
                source,
            })?;
        Some(dir)
    };
    let started = Plan::new(
        &request.policy,
        settings,
        support,
        &request.workspace,
        tmp.as_deref(),
    )
    .and_then(ConfinedSpawner::start);
    match started {
        Ok(spawner) => Ok((Arc::new(spawner), tmp)),
        Err(error) => {
            if let Some(tmp) = &tmp {
                remove_tmp(tmp);
            }
            Err(error)
        }
    }
}

/// The confined threads of live agents, one each, kept while the agent's plan holds: an agent's
/// calls share a plan (its policy, cwd and temporary directory), so its thread is restricted once.
/// An agent's thread ends when it closes ([`Self::release`]).
///
/// Commands of no agent share nothing: each gets a temporary directory and a thread of its own.
/// Making them is kept off the call's path by preparing them one call ahead ([`Ready`]).
#[derive(Debug, Default)]
pub(crate) struct Spawners {
    /// Each live agent's thread.
    agents: Mutex<BTreeMap<SessionId, Arc<ConfinedSpawner>>>,
    /// The next command of no agent's confinement, made ahead.
    ready: Arc<Mutex<Ready>>,
}

/// A confinement made ahead for the next command of no agent, on the guess that it asks what the
/// last one asked (the same policy and workspace: a script or editor running commands in its
/// project). A call that finds one that fits takes it and pays only for the hand-off to its
/// thread, as an agent's call does; one that does not makes its own, as before. Either way it is
/// the call's alone (its temporary directory is new and removed after it), so taking it changes
/// no call's isolation. What it costs while unused: one sleeping thread and an empty directory.
#[derive(Debug, Default)]
struct Ready {
    /// The confinement made ahead, if any.
    next: Option<Prepared>,
    /// Whether one is being made (at most one at a time, so a burst of calls does not make a
    /// thread each that all but one would discard).
    preparing: bool,
    /// Set at shutdown: nothing more is made, so no directory outlives the daemon.
    closed: bool,
}

/// One confinement made ahead.
#[derive(Debug)]
struct Prepared {
    /// What it was made for.
    request: SandboxRequest,
    spawner: Arc<ConfinedSpawner>,
    /// Its temporary directory, removed if it is dropped unused.
    tmp: Option<PathBuf>,
}

impl Drop for Prepared {
    fn drop(&mut self) {
        if let Some(tmp) = self.tmp.take() {
            remove_tmp(&tmp);
        }
    }
}

impl Spawners {
    /// `owner`'s thread for `plan`: the kept one while it serves the plan, else a new one kept in
    /// its place (the old one ends once its last call has spawned).
    fn for_agent(
        &self,
        owner: &SessionId,
        plan: Plan,
    ) -> Result<Arc<ConfinedSpawner>, SandboxError> {
        if let Some(kept) = self.agents().get(owner)
            && kept.serves(&plan)
        {
            return Ok(kept.clone());
        }
        // Restricting a thread takes a few syscalls per root; not under the lock.
        let fresh = Arc::new(ConfinedSpawner::start(plan)?);
        self.agents().insert(owner.clone(), fresh.clone());
        Ok(fresh)
    }

    /// The confinement made ahead, if it fits `request` as things are now: the same request, and
    /// the plan built for it today (settings, links and the workspace's directory may have changed
    /// since) one its thread serves. One that does not fit is dropped.
    fn take_ready(
        &self,
        settings: &SandboxSettings,
        support: LandlockSupport,
        request: &SandboxRequest,
    ) -> Option<(Arc<ConfinedSpawner>, Option<PathBuf>)> {
        let taken = lock(&self.ready).next.take();
        let mut prepared = taken.filter(|p| p.request == *request)?;
        let plan = Plan::new(
            &request.policy,
            settings,
            support,
            &request.workspace,
            prepared.tmp.as_deref(),
        )
        .ok()?;
        if !prepared.spawner.serves(&plan) {
            return None;
        }
        Some((prepared.spawner.clone(), prepared.tmp.take()))
    }

    /// Makes the next command of no agent's confinement for `request`, on a blocking thread,
    /// unless one is there or being made. A failure is left for a call to meet and report.
    fn prepare(
        &self,
        settings: &SandboxSettings,
        support: LandlockSupport,
        request: &SandboxRequest,
    ) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        {
            let mut ready = lock(&self.ready);
            if ready.closed || ready.preparing || ready.next.is_some() {
                return;
            }
            ready.preparing = true;
        }
        let (slot, settings, request) = (self.ready.clone(), settings.clone(), request.clone());
        runtime.spawn_blocking(move || {
            let made = one_call(&settings, support, &request).ok();
            let mut ready = lock(&slot);
            ready.preparing = false;
            let prepared = made.map(|(spawner, tmp)| Prepared {
                request,
                spawner,
                tmp,
            });
            // Dropped (its directory removed) after the lock, when the daemon is closing.
            let unused = if ready.closed {
                prepared
            } else {
                std::mem::replace(&mut ready.next, prepared)
            };
            drop(ready);
            drop(unused);
        });
    }

    /// Forgets `owner`'s thread (it ends).
    pub(crate) fn release(&self, owner: &SessionId) {
        self.agents().remove(owner);
    }

    /// Forgets every thread, the one made ahead included (its directory is removed) and makes no
    /// more; the agents that had one.
    pub(crate) fn release_all(&self) -> Vec<SessionId> {
        let unused = {
            let mut ready = lock(&self.ready);
            ready.closed = true;
            ready.next.take()
        };
        drop(unused);
        std::mem::take(&mut *self.agents()).into_keys().collect()
    }

    /// Whether a confinement made ahead is waiting.
    #[cfg(test)]
    pub(crate) fn has_ready(&self) -> bool {
        lock(&self.ready).next.is_some()
    }

    fn agents(&self) -> MutexGuard<'_, BTreeMap<SessionId, Arc<ConfinedSpawner>>> {
        lock(&self.agents)
    }
}

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex.lock().unwrap_or_else(PoisonError::into_inner)
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
