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
//! ([`super::Executor::release_sandbox_of`]); one per call for commands of no agent, made new in
//! [`Spawners::calls_dir`] and removed when the call (or job) is over. The rules of a thread for
//! commands of no agent grant that whole directory, so such a command could write into another
//! such command's directory while both run; it can read everything anyway (no mode confines
//! reads), and it cannot write an agent's.

use std::collections::{BTreeMap, VecDeque};
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

    /// What is left of `confined` once its command has been spawned: the rest (its hold on the
    /// spawning thread) is dropped.
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
    let private = |dir: &Path| {
        ensure_private_dir(&tmp_root(settings))
            .and_then(|()| ensure_private_dir(dir))
            .map_err(|source| SandboxError::Tmp {
                path: dir.to_owned(),
                source,
            })
    };
    let writes = policy.mode != SandboxMode::Off;
    let workspace = &request.workspace;
    let confinement = match owner {
        Some(owner) => {
            let tmp = if writes {
                let dir = tmp_dir_of(settings, owner);
                private(&dir)?;
                Some(dir)
            } else {
                None
            };
            let plan = Plan::new(policy, settings, support, workspace, tmp.as_deref())?;
            Confinement {
                policy: *policy,
                spawner: spawners.for_agent(owner, plan)?,
                tmp,
                transient: false,
            }
        }
        None => {
            // The rules grant the directory every such call's own is made in, so one thread
            // serves every call of the same plan.
            let parent = if writes {
                let dir = spawners.calls_dir(settings);
                private(&dir)?;
                Some(dir)
            } else {
                None
            };
            let plan = Plan::new(policy, settings, support, workspace, parent.as_deref())?;
            let spawner = spawners.for_calls(plan)?;
            let tmp = match parent {
                Some(parent) => {
                    let dir = parent.join(uuid::Uuid::now_v7().simple().to_string());
                    // A new name: made here or not at all (never one someone else put there).
                    DirBuilder::new()
                        .mode(0o700)
                        .create(&dir)
                        .map_err(|source| SandboxError::Tmp {
                            path: dir.clone(),
                            source,
                        })?;
                    Some(dir)
                }
                None => None,
            };
            Confinement {
                policy: *policy,
                spawner,
                tmp,
                transient: true,
            }
        }
    };
    Ok(Some(confinement))
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
}

impl Default for Spawners {
    fn default() -> Self {
        Self {
            agents: Mutex::default(),
            calls: Mutex::default(),
            calls_name: format!("calls-{}", uuid::Uuid::now_v7().simple()),
        }
    }
}

impl Spawners {
    /// Where this daemon's commands of no agent make their temporary directories, one each.
    pub(crate) fn calls_dir(&self, settings: &SandboxSettings) -> PathBuf {
        tmp_root(settings).join(&self.calls_name)
    }

    /// `owner`'s thread for `plan`: the kept one while it serves the plan, else a new one kept in
    /// its place (the old one ends once its last call has spawned).
    fn for_agent(
        &self,
        owner: &SessionId,
        plan: Plan,
    ) -> Result<Arc<ConfinedSpawner>, SandboxError> {
        if let Some(kept) = lock(&self.agents).get(owner)
            && kept.serves(&plan)
        {
            return Ok(kept.clone());
        }
        // Restricting a thread takes a few syscalls per root; not under the lock.
        let fresh = Arc::new(ConfinedSpawner::start(plan)?);
        lock(&self.agents).insert(owner.clone(), fresh.clone());
        Ok(fresh)
    }

    /// A thread for a command of no agent with `plan`: a kept one that serves it, else a new one,
    /// kept in place of any for the same plan whose directories were since made again.
    fn for_calls(&self, plan: Plan) -> Result<Arc<ConfinedSpawner>, SandboxError> {
        {
            let mut kept = lock(&self.calls);
            if let Some(thread) = kept
                .iter()
                .position(|thread| thread.serves(&plan))
                .and_then(|at| kept.remove(at))
            {
                kept.push_front(thread.clone());
                return Ok(thread);
            }
        }
        let fresh = Arc::new(ConfinedSpawner::start(plan)?);
        let dropped = {
            let mut kept = lock(&self.calls);
            kept.retain(|thread| thread.plan() != fresh.plan());
            kept.push_front(fresh.clone());
            let keep = kept.len().min(CALL_THREADS);
            kept.split_off(keep)
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
