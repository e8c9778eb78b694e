//! The registry: who contributes which managed keys, and the per-call snapshot (CONTRACTS §5.1).

use std::collections::BTreeMap;
use std::fmt;
use std::path::PathBuf;
use std::sync::{Arc, RwLock, Weak};
use std::time::Duration;

use serde_json::Value;

use super::contributor::{Answer, AsyncResolver, Contributor, DynamicOutput, Resolver};
use super::error::{CollectError, RegisterError};
use super::key::{DSH_HOME, DSH_SESSION_ID, DSH_SHELL, ManagedKey, RESERVED_KEYS};
use super::{BUILTIN_CONTRIBUTOR, ManagedEnv, VariableInfo};
use crate::call::ToolExecution;
use crate::locks::{read_lock, write_lock};

/// What `list()` says about the registry's own keys, in [`RESERVED_KEYS`] order.
const BUILTIN_DESCRIPTIONS: [&str; 3] = [
    "Absolute path of the harness home this daemon runs from (config, sessions, skills).",
    "Always 1: the command runs in a shell started by dsh.",
    "Id of the session of the agent that made this call; absent when the call has no agent.",
];

/// The registry of managed-variable contributors. Cheap to clone: clones share one registry.
///
/// Contributors resolve in byte order of their names (`"B" < "_" < "a"`). Because keys are
/// uniquely owned and the built-in keys cannot be declared, the order never changes a snapshot; it
/// only decides which resolver runs first and so which error surfaces first.
#[derive(Clone)]
pub struct ShellEnvRegistry {
    inner: Arc<Inner>,
}

struct Inner {
    /// `Err` holds a home that is not UTF-8: kept so that every collection can say so, rather than
    /// handing children a lossily converted path that names another directory.
    home: Result<String, PathBuf>,
    resolve_timeout: Duration,
    /// Taken with `read_lock`/`write_lock`: a poisoned lock only means some thread panicked while
    /// holding it; every change is made after all checks, so the state is still consistent.
    state: RwLock<State>,
}

#[derive(Default)]
struct State {
    by_name: BTreeMap<String, Arc<Entry>>,
    /// Key -> owning contributor, for the ownership check.
    owners: BTreeMap<ManagedKey, String>,
    /// Identifies each registration, so a stale guard can tell its registration from a later one
    /// of the same name.
    last_epoch: u64,
    /// `by_name`'s values in name order, rebuilt on every change so that `collect` and `list`
    /// take the contributor list with one reference-count increment under the lock.
    ordered: Arc<[Arc<Entry>]>,
}

struct Entry {
    name: String,
    epoch: u64,
    variables: BTreeMap<ManagedKey, String>,
    resolver: Resolver,
}

impl ShellEnvRegistry {
    /// A registry with no contributors. `home` is what `DSH_HOME` says (resolved once, CONTRACTS §3);
    /// `resolve_timeout` bounds each asynchronous resolver's answer.
    pub fn new(home: PathBuf, resolve_timeout: Duration) -> Self {
        let home = home.into_os_string().into_string().map_err(PathBuf::from);
        Self {
            inner: Arc::new(Inner {
                home,
                resolve_timeout,
                state: RwLock::new(State::default()),
            }),
        }
    }

    /// The bound on each asynchronous resolver's answer.
    pub fn resolve_timeout(&self) -> Duration {
        self.inner.resolve_timeout
    }

    /// Registers `contributor` after checking, in this order: the name is not blank; the name is
    /// free (`builtin` never is); then for each declared key in key order: it is well formed, not
    /// reserved, described, and not owned by another contributor. A refusal changes nothing.
    ///
    /// The registration lasts until the returned guard is dropped or
    /// [`unregister`](Registration::unregister)ed.
    pub fn register(&self, contributor: Contributor) -> Result<Registration, RegisterError> {
        let (name, variables, resolver) = contributor.into_parts();
        if name.trim().is_empty() {
            return Err(RegisterError::BlankName);
        }
        // One write lock for check and change, so two racing registrations cannot both pass the
        // ownership check.
        let mut state = write_lock(&self.inner.state);
        if name == BUILTIN_CONTRIBUTOR || state.by_name.contains_key(&name) {
            return Err(RegisterError::DuplicateName { name });
        }
        let mut declared = BTreeMap::new();
        for (key, description) in variables {
            let key = match ManagedKey::parse(key.as_str()) {
                Ok(key) => key,
                Err(reason) => {
                    return Err(RegisterError::InvalidKey {
                        contributor: name,
                        key,
                        reason,
                    });
                }
            };
            if key.is_reserved() {
                return Err(RegisterError::ReservedKey {
                    contributor: name,
                    key: key.into(),
                });
            }
            if description.trim().is_empty() {
                return Err(RegisterError::BlankDescription {
                    contributor: name,
                    key: key.into(),
                });
            }
            if let Some(owner) = state.owners.get(&key) {
                return Err(RegisterError::KeyOwned {
                    key: key.into(),
                    owner: owner.clone(),
                    contributor: name,
                });
            }
            declared.insert(key, description);
        }
        state.last_epoch += 1;
        let epoch = state.last_epoch;
        for key in declared.keys() {
            state.owners.insert(key.clone(), name.clone());
        }
        let entry = Arc::new(Entry {
            name: name.clone(),
            epoch,
            variables: declared,
            resolver,
        });
        state.by_name.insert(name.clone(), entry);
        state.reorder();
        drop(state);
        Ok(Registration {
            registry: Arc::downgrade(&self.inner),
            name,
            epoch,
        })
    }

    /// Every declared key, the built-ins included (contributor `builtin`), sorted by key. Runs no
    /// resolver.
    pub fn list(&self) -> Vec<VariableInfo> {
        let entries = self.inner.snapshot();
        let mut out: Vec<VariableInfo> = RESERVED_KEYS
            .iter()
            .zip(BUILTIN_DESCRIPTIONS)
            .map(|(key, description)| VariableInfo {
                key: ManagedKey::builtin(key),
                contributor: BUILTIN_CONTRIBUTOR.to_owned(),
                description: description.to_owned(),
            })
            .collect();
        for entry in entries.iter() {
            out.extend(
                entry
                    .variables
                    .iter()
                    .map(|(key, description)| VariableInfo {
                        key: key.clone(),
                        contributor: entry.name.clone(),
                        description: description.clone(),
                    }),
            );
        }
        out.sort_unstable_by(|a, b| a.key.cmp(&b.key));
        out
    }

    /// A new snapshot for one tool call: `DSH_HOME`, `DSH_SHELL=1`, `DSH_SESSION_ID` when the call
    /// has an agent, then every contributor's answer, resolved in name order. Nothing is cached:
    /// every call asks every resolver again.
    ///
    /// The contributor list is taken once at the start; resolvers run outside the registry lock,
    /// so a resolver may itself list or register. Synchronous resolvers run inline on the calling
    /// task. Each asynchronous resolver is awaited in turn, bounded by the resolve timeout and
    /// abandoned if `exec.cancel` fires; that path needs a Tokio runtime with timers enabled.
    ///
    /// Any refused answer fails the whole collection with an error naming the contributor.
    pub async fn collect(&self, exec: &ToolExecution) -> Result<ManagedEnv, CollectError> {
        let home = self
            .inner
            .home
            .as_ref()
            .map_err(|home| CollectError::HomeNotUtf8 { home: home.clone() })?;
        let entries = self.inner.snapshot();
        let mut env = BTreeMap::new();
        env.insert(DSH_HOME.to_owned(), home.clone());
        env.insert(DSH_SHELL.to_owned(), "1".to_owned());
        if let Some(agent) = &exec.agent {
            env.insert(
                DSH_SESSION_ID.to_owned(),
                agent.header.id.as_str().to_owned(),
            );
        }
        for entry in entries.iter() {
            match &entry.resolver {
                Resolver::Sync(resolve) => {
                    let mut answer = Answer {
                        contributor: &entry.name,
                        declared: &entry.variables,
                        env: &mut env,
                        refused: None,
                    };
                    resolve(exec, &mut answer).map_err(|message| CollectError::Failed {
                        contributor: entry.name.clone(),
                        message,
                    })?;
                    if let Some(refused) = answer.refused {
                        return Err(refused);
                    }
                }
                Resolver::Async(resolver) => {
                    let answer = self.ask(entry, resolver.as_ref(), exec).await?;
                    for (key, value) in answer {
                        entry.check_declared(&key)?;
                        let Value::String(value) = value else {
                            return Err(CollectError::NonStringValue {
                                contributor: entry.name.clone(),
                                key,
                            });
                        };
                        entry.accept(key, value, &mut env)?;
                    }
                }
            }
        }
        Ok(ManagedEnv::new(env))
    }

    async fn ask(
        &self,
        entry: &Entry,
        resolver: &dyn AsyncResolver,
        exec: &ToolExecution,
    ) -> Result<DynamicOutput, CollectError> {
        let timeout = self.inner.resolve_timeout;
        let answer = tokio::select! {
            // Checked first so that an already cancelled call does not even ask.
            biased;
            () = exec.cancel.cancelled() => {
                return Err(CollectError::Cancelled { contributor: entry.name.clone() });
            }
            answer = tokio::time::timeout(timeout, resolver.resolve(exec)) => answer,
        };
        match answer {
            Err(_elapsed) => Err(CollectError::TimedOut {
                contributor: entry.name.clone(),
                timeout,
            }),
            Ok(Err(message)) => Err(CollectError::Failed {
                contributor: entry.name.clone(),
                message,
            }),
            Ok(Ok(answer)) => Ok(answer),
        }
    }

    #[cfg(test)]
    pub(super) fn is_registered(&self, name: &str) -> bool {
        read_lock(&self.inner.state).by_name.contains_key(name)
    }
}

impl fmt::Debug for ShellEnvRegistry {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let entries = self.inner.snapshot();
        f.debug_struct("ShellEnvRegistry")
            .field("home", &self.inner.home)
            .field("resolve_timeout", &self.inner.resolve_timeout)
            .field(
                "contributors",
                &entries.iter().map(|e| e.name.as_str()).collect::<Vec<_>>(),
            )
            .finish()
    }
}

impl Inner {
    fn snapshot(&self) -> Arc<[Arc<Entry>]> {
        read_lock(&self.state).ordered.clone()
    }

    /// Removes the registration `name` if it is still the one made with `epoch`.
    fn unregister(&self, name: &str, epoch: u64) -> bool {
        let mut state = write_lock(&self.state);
        let Some(entry) = state.by_name.get(name) else {
            return false;
        };
        if entry.epoch != epoch {
            return false;
        }
        let entry = entry.clone();
        state.by_name.remove(name);
        for key in entry.variables.keys() {
            state.owners.remove(key);
        }
        state.reorder();
        true
    }
}

impl State {
    fn reorder(&mut self) {
        self.ordered = self.by_name.values().cloned().collect();
    }
}

impl Entry {
    fn check_declared(&self, key: &str) -> Result<(), CollectError> {
        if self.variables.contains_key(key) {
            Ok(())
        } else {
            Err(CollectError::UndeclaredKey {
                contributor: self.name.clone(),
                key: key.to_owned(),
            })
        }
    }

    fn accept(
        &self,
        key: String,
        value: String,
        env: &mut BTreeMap<String, String>,
    ) -> Result<(), CollectError> {
        self.check_declared(&key)?;
        if value.contains('\0') {
            return Err(CollectError::NulInValue {
                contributor: self.name.clone(),
                key,
            });
        }
        // Never overwrites: reserved keys cannot be declared and every other key has one owner.
        env.insert(key, value);
        Ok(())
    }
}

/// Keeps one contributor registered. Dropping it (or calling [`unregister`](Self::unregister))
/// removes the registration; either is idempotent, and a guard whose registration is already gone
/// never removes a later registration of the same name. Outliving the registry is harmless.
#[must_use = "dropping the Registration removes the contributor at once"]
pub struct Registration {
    registry: Weak<Inner>,
    name: String,
    epoch: u64,
}

impl Registration {
    /// The registered contributor's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Whether this registration is still in the registry.
    pub fn is_active(&self) -> bool {
        self.registry.upgrade().is_some_and(|inner| {
            read_lock(&inner.state)
                .by_name
                .get(&self.name)
                .is_some_and(|entry| entry.epoch == self.epoch)
        })
    }

    /// Removes the registration now, if it is still there; returns whether it was. Lets an owner
    /// that keeps the guard in a larger value (e.g. a stream's state) end the registration early.
    pub fn unregister(&self) -> bool {
        self.registry
            .upgrade()
            .is_some_and(|inner| inner.unregister(&self.name, self.epoch))
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.unregister();
    }
}

impl fmt::Debug for Registration {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Registration")
            .field("name", &self.name)
            .field("epoch", &self.epoch)
            .finish_non_exhaustive()
    }
}
