//! Confined launches: the sandbox plan of a command, its private temporary directory, and the
//! confined thread that spawns it.
//!
//! A confined command is spawned exactly as an unconfined one, but from a thread restricted to
//! its plan ([`crate::sandbox`]), so the pid, process group, environment, cwd, pipes, limits and
//! owner marker are those of an unconfined launch. The one variable added is `TMPDIR`, naming the
//! private temporary directory (a caller's own `TMPDIR` still wins).
//!
//! An agent's confined thread is kept for its next calls while its plan holds; commands of no
//! agent share a few threads, one per plan (see [`Spawners`]).
//!
//! Private temporary directories live under `SandboxSettings::tmp_root` (outside the harness
//! home): one per agent, kept across its calls and jobs until the agent closes
//! ([`super::Executor::release_sandbox_of`]); one per call for commands of no agent, empty and in
//! [`Spawners::calls_dir`], removed when the call (or job) is over, or handed on to the next call
//! when the call left it as it was made ([`super::call_dir`]). The rules of a thread for commands
//! of no agent grant that whole directory, so such a command could write into another such
//! command's directory while both run; it can read everything anyway (no mode confines reads),
//! and it cannot write an agent's.

use std::collections::{BTreeMap, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use super::ExecError;
use super::call_dir::CallDirs;
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
    /// Set when `tmp` belongs to this launch alone: handed on or removed when it is over.
    pub call_dirs: Option<Arc<CallDirs>>,
}

/// A confined command's temporary directory of its own, if it has one, to remove when it is over.
#[derive(Debug)]
pub(crate) struct Leftover(Option<(PathBuf, Arc<CallDirs>)>);

impl Leftover {
    /// Hands the directory on when it is as it was made, else removes it on a blocking thread,
    /// so the caller is not kept waiting for either.
    pub(crate) fn finish_later(self) {
        if let Some((tmp, dirs)) = self.0
            && let Some(used) = dirs.hand_on(tmp)
        {
            tokio::task::spawn_blocking(move || dirs.discard(&used));
        }
    }

    /// What is left of `confined` once its command has been spawned: the rest (its hold on the
    /// spawning thread) is dropped.
    pub(crate) fn of(confined: Option<Confinement>) -> Self {
        Self(confined.and_then(|c| c.tmp.zip(c.call_dirs)))
    }

    /// Hands the directory on or removes it (the command is over).
    pub(crate) fn finish(self) {
        if let Some((tmp, dirs)) = self.0
            && let Some(used) = dirs.hand_on(tmp)
        {
            dirs.discard(&used);
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
    // The directory the plan grants: the agent's own, or the one every call of no agent makes
    // its own in (so one thread serves every call of the same plan).
    let granted = (policy.mode != SandboxMode::Off).then(|| match owner {
        Some(owner) => tmp_dir_of(settings, owner),
        None => spawners.calls_dir(settings),
    });
    let plan = || {
        Plan::new(
            policy,
            settings,
            support,
            &request.workspace,
            granted.as_deref(),
        )
    };
    // A kept thread started after its directories were made and checked private, and `serves`
    // finds them the very ones it granted: no need to check them again. Otherwise (the first
    // call, or a directory removed since) they are made and checked, then a thread started.
    let first = plan();
    let kept = first
        .as_ref()
        .ok()
        .and_then(|plan| spawners.kept(owner, plan));
    let spawner = match kept {
        Some(spawner) => spawner,
        None => {
            if let Some(dir) = &granted {
                ensure_private_dir(&tmp_root(settings))
                    .and_then(|()| ensure_private_dir(dir))
                    .map_err(|source| SandboxError::Tmp {
                        path: dir.clone(),
                        source,
                    })?;
            }
            // Resolved again only when the first try failed: its directories may not have existed.
            let plan = match first {
                Ok(plan) => plan,
                Err(_) => plan()?,
            };
            spawners.start(owner, plan)?
        }
    };
    let (tmp, call_dirs) = match (owner, granted) {
        (None, Some(parent)) => (
            Some(spawners.call_dirs.take(&parent)?),
            Some(spawners.call_dirs.clone()),
        ),
        (_, granted) => (granted, None),
    };
    Ok(Some(Confinement {
        policy: *policy,
        spawner,
        tmp,
        call_dirs,
    }))
}

/// How many threads are kept for commands of no agent, one per plan (policy and workspace), the
/// most recently used first: a script or editor works in a few projects at a time.
const CALL_THREADS: usize = 8;

/// The confined threads of live agents, one each, kept while the agent's plan holds: an agent's
/// calls share a plan (its policy, cwd and temporary directory), so its thread is restricted once.
/// An agent's thread ends when it closes ([`Self::release`]).
///
/// Commands of no agent share threads by plan: each such command's temporary directory is its
/// own, made in one directory the threads' rules grant ([`Self::calls_dir`]).
#[derive(Debug)]
pub(crate) struct Spawners {
    /// Each live agent's thread.
    agents: Mutex<BTreeMap<SessionId, Arc<ConfinedSpawner>>>,
    /// Threads for commands of no agent, the most recently used first, at most [`CALL_THREADS`].
    calls: Mutex<VecDeque<Arc<ConfinedSpawner>>>,
    /// The name, under the temporary root, of the directory this daemon's commands of no agent
    /// make theirs in: its own, since every dshd of the user shares the root and this one removes
    /// the directory when it stops.
    calls_name: String,
    /// The directories of commands of no agent, one waiting for the next call.
    call_dirs: Arc<CallDirs>,
}

impl Default for Spawners {
    fn default() -> Self {
        Self {
            agents: Mutex::default(),
            calls: Mutex::default(),
            calls_name: format!("calls-{}", uuid::Uuid::now_v7().simple()),
            call_dirs: Arc::default(),
        }
    }
}

impl Spawners {
    /// Where this daemon's commands of no agent make their temporary directories, one each.
    pub(crate) fn calls_dir(&self, settings: &SandboxSettings) -> PathBuf {
        tmp_root(settings).join(&self.calls_name)
    }

    /// The kept thread of `owner` (an agent, or no one) that serves `plan`, if there is one.
    fn kept(&self, owner: Option<&SessionId>, plan: &Plan) -> Option<Arc<ConfinedSpawner>> {
        match owner {
            Some(owner) => lock(&self.agents)
                .get(owner)
                .filter(|kept| kept.serves(plan))
                .cloned(),
            None => {
                let mut kept = lock(&self.calls);
                let at = kept.iter().position(|thread| thread.serves(plan))?;
                let thread = kept.remove(at)?;
                kept.push_front(thread.clone());
                Some(thread)
            }
        }
    }

    /// A new thread for `plan`, kept in place of `owner`'s (which ends once its last call has
    /// spawned), or for commands of no agent in place of any for the same plan whose directories
    /// were since made again.
    fn start(
        &self,
        owner: Option<&SessionId>,
        plan: Plan,
    ) -> Result<Arc<ConfinedSpawner>, SandboxError> {
        // Restricting a thread takes a few syscalls per root; not under a lock.
        let fresh = Arc::new(ConfinedSpawner::start(plan)?);
        let dropped = match owner {
            Some(owner) => lock(&self.agents)
                .insert(owner.clone(), fresh.clone())
                .into_iter()
                .collect(),
            None => {
                let mut kept = lock(&self.calls);
                kept.retain(|thread| thread.plan() != fresh.plan());
                kept.push_front(fresh.clone());
                let keep = kept.len().min(CALL_THREADS);
                kept.split_off(keep)
            }
        };
        // Their threads end here, outside the lock.
        drop(dropped);
        Ok(fresh)
    }

    /// Forgets `owner`'s thread (it ends).
    pub(crate) fn release(&self, owner: &SessionId) {
        lock(&self.agents).remove(owner);
    }

    /// Forgets every thread; the agents that had one.
    pub(crate) fn release_all(&self) -> Vec<SessionId> {
        std::mem::take(&mut *lock(&self.calls));
        // It is removed with the rest of [`Self::calls_dir`].
        self.call_dirs.forget();
        std::mem::take(&mut *lock(&self.agents))
            .into_keys()
            .collect()
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
