//! The registry of live agents: creating, resuming, forking and spawning them, running their turns,
//! closing them, and winding them all down at shutdown (CONTRACTS §4.2, §7).

use std::collections::HashMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};

use tokio_util::sync::CancellationToken;

pub use super::error::{AgentError, Unsaved};
use super::live::{Agent, NewAgent};
use super::model::{
    ModelChoice, ModelList, ProviderFactory, UnusableModel, record_settings, settings_of,
};
use super::provider::ModelProvider;
use super::services::AgentServices;
use super::turn::{self, TurnInput, TurnOutcome};
use super::watch::hub::WatchHub;
use super::watch::{WatchScope, WatchedBy, Watcher};
use crate::hooks::SessionSource;
use crate::locks::lock;
use crate::persistence::handle::DurableCursor;
use crate::persistence::{PersistenceError, StoredSession};
use crate::sandbox::SandboxPolicy;
use crate::tools::ChildAgents;
use dsh_session::{
    AbortCause, ApprovalPolicy, EventData, HeaderError, Origin, SessionHeader, SessionId,
    SessionLog, Usage, recorded_settings,
};

/// A running turn, as its caller sees it.
#[derive(Debug)]
pub struct TurnHandle {
    /// The turn number.
    pub turn: u32,
    /// Everything the turn (and the children it spawns) logs and streams, ending with its
    /// `turn/end` once the agent takes the next prompt (bounded: see [`Watcher`]).
    pub updates: Watcher,
    /// Resolves to how the turn ended.
    pub outcome: tokio::task::JoinHandle<TurnOutcome>,
}

/// The live agents.
#[derive(Debug)]
pub struct AgentRegistry {
    services: Arc<AgentServices>,
    pub(super) providers: ProviderFactory,
    pub(super) agents: Mutex<HashMap<SessionId, Arc<Agent>>>,
    /// Where agents publish their events, and watchers register.
    pub(super) hub: Arc<WatchHub>,
    /// Finished children whose close could not save them: still registered (so their events stay
    /// in memory and nothing can resume them meanwhile), closed again by every later close and
    /// spawn, and saved at shutdown at the latest.
    pub(super) pending_closes: Mutex<Vec<SessionId>>,
    /// Set at shutdown: no agent may be added or prompted after it.
    shutting_down: AtomicBool,
    /// Token usage of every turn that ended since the daemon started.
    usage: Arc<Mutex<Usage>>,
}

impl AgentRegistry {
    /// An empty registry. `services` builds what its agents share, given the registry itself as
    /// the `ChildAgents` that `spawn_agent` needs, so the tool set is whole from the start.
    pub fn new(
        providers: ProviderFactory,
        services: impl FnOnce(Weak<dyn ChildAgents>) -> AgentServices,
    ) -> Arc<Self> {
        Arc::new_cyclic(|registry: &Weak<Self>| {
            let children: Weak<dyn ChildAgents> = registry.clone();
            let services = services(children);
            let hub = Arc::new(WatchHub::new(services.watch_max_pending));
            Self {
                services: Arc::new(services),
                providers,
                agents: Mutex::new(HashMap::new()),
                hub,
                pending_closes: Mutex::new(Vec::new()),
                shutting_down: AtomicBool::new(false),
                usage: Arc::default(),
            }
        })
    }

    /// Where agent `id`'s MCP servers stand; none for an agent that is not live.
    pub fn mcp_servers(&self, id: &SessionId) -> Vec<crate::mcp::McpServerStatus> {
        match self.get(id) {
            Ok(agent) => self
                .services
                .mcp
                .status(id, agent.header().delegation_depth),
            Err(_) => Vec::new(),
        }
    }

    /// The shared services.
    pub fn services(&self) -> &Arc<AgentServices> {
        &self.services
    }

    /// The variable the `openai` provider's key is read from, and whether it held one at start.
    pub fn model_key(&self) -> (&str, bool) {
        self.providers.model_key()
    }

    /// The models agents can be given (`Models.List`): see [`ProviderFactory::models`].
    pub async fn models(&self) -> ModelList {
        self.providers.models().await
    }

    /// A new top-level agent working in `cwd`, its bash calls confined by `sandbox`, with
    /// `approval` (the configured default when `None`). Nothing is written until its first
    /// checkpoint.
    pub fn create(
        &self,
        cwd: &Path,
        choice: &ModelChoice,
        sandbox: SandboxPolicy,
        approval: Option<ApprovalPolicy>,
    ) -> Result<Arc<Agent>, AgentError> {
        self.create_with(SessionId::new_v7(), cwd, choice, sandbox, approval)
    }

    /// [`create`](Self::create) under `id`, which the caller has checked is not stored.
    pub(super) fn create_with(
        &self,
        id: SessionId,
        cwd: &Path,
        choice: &ModelChoice,
        sandbox: SandboxPolicy,
        approval: Option<ApprovalPolicy>,
    ) -> Result<Arc<Agent>, AgentError> {
        self.check_open()?;
        let cwd = &dsh_paths::home::normalize(cwd);
        check_cwd(cwd)?;
        let provider = self.providers.build(choice)?;
        let approval = approval.unwrap_or(self.services.approval.policy);
        let header = SessionHeader {
            settings: Some(settings_of(provider.as_ref(), approval)),
            ..SessionHeader::new(id, cwd.to_owned(), dsh_session::now_ms())
        };
        let agent = self.top_level(
            SessionLog::new(header),
            DurableCursor::default(),
            SessionSource::Startup,
            provider,
            approval,
            sandbox,
        );
        self.insert(agent, "create")
    }

    /// A child agent of the live agent `parent`: origin `subagent`, depth + 1, the parent's cwd,
    /// and the parent's sandbox unless a stricter one is asked for (a looser one is refused), and
    /// the parent's approval policy unless `approval` names one.
    pub fn spawn(
        &self,
        parent: &SessionId,
        choice: &ModelChoice,
        sandbox: Option<SandboxPolicy>,
        approval: Option<ApprovalPolicy>,
    ) -> Result<Arc<Agent>, AgentError> {
        self.check_open()?;
        let parent = self.get(parent)?;
        let sandbox = parent.sandbox().child(sandbox)?;
        let parent_header = parent.header();
        let limit = self.services.limits.max_depth;
        let depth = parent_header.delegation_depth + 1;
        if depth > limit {
            return Err(AgentError::TooDeep {
                parent: parent_header.id.clone(),
                depth,
                limit,
            });
        }
        let provider = self.providers.build(choice)?;
        let approval = approval.unwrap_or(parent.approval());
        let header = SessionHeader {
            parent_session: Some(parent_header.id.clone()),
            origin: Some(Origin::Subagent),
            delegation_depth: depth,
            settings: Some(settings_of(provider.as_ref(), approval)),
            ..SessionHeader::new(
                SessionId::new_v7(),
                parent_header.cwd.clone(),
                dsh_session::now_ms(),
            )
        };
        let agent = Agent::new(NewAgent {
            log: SessionLog::new(header),
            cursor: DurableCursor::default(),
            root: parent.context().root.clone(),
            provider,
            source: SessionSource::Startup,
            approval,
            sandbox,
            hub: self.hub.clone(),
            parent: Some(parent.clone()),
        });
        // A child runs its commands in its parent's environment.
        agent.set_client_env(parent.client_env());
        self.insert(agent, "spawn")
    }

    /// Resumes a stored session: same id, header and location; the log is repaired on load and a
    /// `session/end-seed` marker appended once. Unless the request says otherwise, the agent runs
    /// with the provider, model and approval policy the session last ran with, and under
    /// `sandbox`, else the sandbox its last `session/settings` records, else `default_sandbox`;
    /// when they change, a `session/settings` event records the new ones.
    pub async fn resume(
        &self,
        id: &SessionId,
        choice: &ModelChoice,
        sandbox: Option<SandboxPolicy>,
        default_sandbox: SandboxPolicy,
        approval: Option<ApprovalPolicy>,
    ) -> Result<Arc<Agent>, AgentError> {
        self.check_open()?;
        if lock(&self.agents).contains_key(id) {
            return Err(AgentError::AlreadyLive(id.clone()));
        }
        let (stored, generation) = self.read_stored(id, Read::Load).await?;
        let recorded = recorded_settings(&stored.header, &stored.events);
        let recorded_sandbox = dsh_session::recorded_sandbox(&stored.events);
        let sandbox = sandbox.or(recorded_sandbox).unwrap_or(default_sandbox);
        let again = self
            .providers
            .again(id, choice, recorded.as_ref())
            .map_err(UnusableModel::from)
            .and_then(|choice| self.providers.build(&choice));
        let provider = match again {
            Ok(provider) => provider,
            Err(error) => {
                // Nothing will write this session: let the backend forget it.
                self.services.persistence.backend().release(id).await;
                return Err(error.into());
            }
        };
        let approval = approval
            .or(recorded.as_ref().map(|r| r.approval))
            .unwrap_or(self.services.approval.policy);
        let durable = stored.events.len() as u64;
        let mut log = SessionLog::from_parts(stored.header, stored.events).map_err(|e| {
            AgentError::Persistence(PersistenceError::Config(format!("session {id}: {e}")))
        })?;
        if !log.ends_with_seed_marker() {
            log.append(EventData::EndSeed {});
        }
        record_settings(
            &mut log,
            (recorded, recorded_sandbox),
            settings_of(provider.as_ref(), approval),
            sandbox,
        );
        let agent = self.top_level(
            log,
            DurableCursor::at(generation, durable),
            SessionSource::Resume,
            provider,
            approval,
            sandbox,
        );
        self.insert(agent, "resume")
    }

    /// The token usage of every turn that ended since the daemon started (children's included).
    pub fn usage_totals(&self) -> Usage {
        *lock(&self.usage)
    }

    /// The live agent `id`.
    pub fn get(&self, id: &SessionId) -> Result<Arc<Agent>, AgentError> {
        lock(&self.agents)
            .get(id)
            .cloned()
            .ok_or_else(|| AgentError::NotFound(id.clone()))
    }

    /// Every live agent, oldest first.
    pub fn list(&self) -> Vec<Arc<Agent>> {
        let mut agents: Vec<_> = lock(&self.agents).values().cloned().collect();
        agents
            .sort_by(|a, b| (a.header().created_at, a.id()).cmp(&(b.header().created_at, b.id())));
        agents
    }

    /// Number of live agents.
    pub fn len(&self) -> usize {
        lock(&self.agents).len()
    }

    /// True when no agent is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Starts a turn of agent `id` for `prompt`. Refused while a turn runs (no queueing: a client
    /// that wants to interrupt cancels first). `parent_cancel` links the turn to a parent's
    /// cancellation (child agents).
    pub fn prompt(
        &self,
        id: &SessionId,
        prompt: String,
        parent_cancel: Option<&CancellationToken>,
        by: WatchedBy,
    ) -> Result<TurnHandle, AgentError> {
        self.start_turn(id, TurnInput::Prompt(prompt), parent_cancel, by)
    }

    /// Starts a turn of agent `id` that compacts its context (CONTRACTS §7.1), with
    /// `instructions` for the summary. Refused while a turn runs, as a prompt is.
    pub fn compact(
        &self,
        id: &SessionId,
        instructions: Option<String>,
        by: WatchedBy,
    ) -> Result<TurnHandle, AgentError> {
        self.start_turn(id, TurnInput::Compact { instructions }, None, by)
    }

    fn start_turn(
        &self,
        id: &SessionId,
        input: TurnInput,
        parent_cancel: Option<&CancellationToken>,
        by: WatchedBy,
    ) -> Result<TurnHandle, AgentError> {
        self.check_open()?;
        let agent = self.get(id)?;
        let Some((turn, first_seq, cancel)) = agent.begin_turn(parent_cancel) else {
            return Err(match agent.status() {
                super::AgentStatus::Running { turn } => AgentError::Busy {
                    id: id.clone(),
                    turn,
                },
                super::AgentStatus::Idle => AgentError::Closed(id.clone()),
            });
        };
        // Registered before the turn starts, so it misses nothing of it.
        let mut updates = self.watcher(WatchScope::Tree(id.clone()), true, by);
        updates.start_at(id.clone(), first_seq);
        let updates = updates.until_turn_end(id.clone(), turn);
        let services = self.services.clone();
        let totals = self.usage.clone();
        let outcome = tokio::spawn(async move {
            let outcome = turn::run(agent.clone(), services, turn, input, cancel).await;
            if let Some(usage) = &outcome.usage {
                lock(&totals).add(usage);
            }
            agent.end_turn();
            outcome
        });
        Ok(TurnHandle {
            turn,
            updates,
            outcome,
        })
    }

    /// Sends `text` into agent `id`'s running turn: logged as a user message (`source: steer`)
    /// at the next step boundary, after the calls running now finish. Returns the turn.
    pub fn steer(&self, id: &SessionId, text: String) -> Result<u32, AgentError> {
        let agent = self.get(id)?;
        agent
            .steer(text)
            .ok_or_else(|| AgentError::NotRunning(id.clone()))
    }

    /// Cancels agent `id`'s running turn; false when none was running.
    pub fn cancel(&self, id: &SessionId) -> Result<bool, AgentError> {
        Ok(self.get(id)?.cancel(AbortCause::User))
    }

    /// Closes agent `id`: cancels its turn, waits for it, kills its background jobs, checkpoints,
    /// and removes it. Its session stays stored and can be resumed.
    ///
    /// When the checkpoint fails nothing is lost: the agent stays live (and takes turns again),
    /// the error is returned, and a later close retries. Closing also retries the closes of
    /// finished children that could not be saved before.
    pub async fn close(&self, id: &SessionId) -> Result<(), AgentError> {
        let result = self.close_one(id).await;
        self.retry_pending_closes().await;
        result
    }

    pub(super) async fn close_one(&self, id: &SessionId) -> Result<(), AgentError> {
        let agent = self.get(id)?;
        agent.mark_closed();
        agent.cancel(AbortCause::Closed);
        agent.wait_idle().await;
        self.services.executor.kill_jobs_of(agent.id());
        agent.stop_background();
        self.services.mcp.stop(agent.id());
        self.services.executor.release_spills_of(agent.id());
        self.services.executor.release_sandbox_of(agent.id());
        self.services.tools.release(agent.id());
        turn::session_end(&agent, &self.services).await;
        agent.keep_if_unprompted();
        // The Claude Code transcript projection stays while the session is stored, whole.
        self.services.hooks.close_transcript(
            agent.header(),
            agent.provider().model(),
            agent.as_ref(),
        );
        if let Err(error) = agent.checkpoint(&self.services).await {
            agent.reopen();
            return Err(error.into());
        }
        // Still registered, so no resume of this id can start before its log is let go.
        self.services
            .persistence
            .backend()
            .release(agent.id())
            .await;
        lock(&self.agents).remove(id);
        tracing::info!(session = %id, "agent closed");
        Ok(())
    }

    /// Winds every agent down for shutdown: refuses new work, cancels every turn, waits for them
    /// to end, and checkpoints every session. A session that cannot be saved is written whole to
    /// the first of `rescue_dirs` that takes it, and reported, so the caller can say which
    /// sessions did not reach their backend (and exit non-zero).
    pub async fn shutdown(&self, rescue_dirs: &[PathBuf]) -> Vec<Unsaved> {
        self.shutting_down.store(true, Ordering::SeqCst);
        let agents = self.list();
        for agent in &agents {
            agent.mark_closed();
            agent.cancel(AbortCause::Shutdown);
        }
        let mut unsaved = Vec::new();
        for agent in &agents {
            agent.wait_idle().await;
            agent.keep_if_unprompted();
            let Err(error) = agent.checkpoint(&self.services).await else {
                continue;
            };
            let (header, events) =
                agent.read_log(|log| (log.header().as_ref().clone(), log.events().to_vec()));
            let rescue = crate::persistence::jsonl::rescue(rescue_dirs, header, events).await;
            match &rescue {
                Ok(path) => tracing::error!(
                    session = %agent.id(), %error, rescue = %path.display(),
                    "cannot persist the session at shutdown; wrote a rescue copy"
                ),
                Err(rescue_error) => tracing::error!(
                    session = %agent.id(), %error, %rescue_error,
                    "cannot persist the session at shutdown, nor write a rescue copy"
                ),
            }
            unsaved.push(Unsaved {
                id: agent.id().clone(),
                error,
                rescue,
            });
        }
        // Every turn has ended: watchers end once they have read it all.
        self.hub.close();
        unsaved
    }

    /// Reads a stored session from the active backend, with the backend's generation: `Load`
    /// repairs it (for resuming), `Inspect` only reads (for forking).
    pub(super) async fn read_stored(
        &self,
        id: &SessionId,
        how: Read,
    ) -> Result<(StoredSession, u64), AgentError> {
        let (backend, generation) = self.services.persistence.current();
        let stored = match how {
            Read::Inspect => backend.inspect(id).await,
            Read::Load => {
                let loaded = backend.load(id).await;
                if loaded.is_err() {
                    // Nothing will write this session: keep no state for an id a client made up.
                    backend.release(id).await;
                }
                loaded
            }
        }
        .map_err(stored_error)?;
        Ok((stored, generation))
    }

    /// Registers a new live agent; `how` (create, spawn, resume, fork) is for the log.
    pub(super) fn insert(
        &self,
        agent: Arc<Agent>,
        how: &'static str,
    ) -> Result<Arc<Agent>, AgentError> {
        let mut agents = lock(&self.agents);
        if self.shutting_down.load(Ordering::SeqCst) {
            return Err(AgentError::ShuttingDown);
        }
        if agents.contains_key(agent.id()) {
            return Err(AgentError::AlreadyLive(agent.id().clone()));
        }
        let limit = self.services.limits.max_live_agents;
        if agents.len() >= limit {
            return Err(AgentError::TooMany { limit });
        }
        agents.insert(agent.id().clone(), agent.clone());
        let header = agent.header();
        tracing::info!(
            session = %agent.id(),
            how,
            parent = header.parent_session.as_ref().map(ToString::to_string),
            depth = header.delegation_depth,
            provider = agent.provider().provider(),
            cwd = %header.cwd.display(),
            "agent is live"
        );
        Ok(agent)
    }

    /// A new top-level agent over `log`, not registered yet: no parent (it is its own root), its
    /// events published to the hub.
    pub(super) fn top_level(
        &self,
        log: SessionLog,
        cursor: DurableCursor,
        source: SessionSource,
        provider: Arc<dyn ModelProvider>,
        approval: ApprovalPolicy,
        sandbox: SandboxPolicy,
    ) -> Arc<Agent> {
        Agent::new(NewAgent {
            root: log.header().id.clone(),
            log,
            cursor,
            parent: None,
            provider,
            source,
            approval,
            sandbox,
            hub: self.hub.clone(),
        })
    }

    pub(super) fn check_open(&self) -> Result<(), AgentError> {
        if self.shutting_down.load(Ordering::SeqCst) {
            Err(AgentError::ShuttingDown)
        } else {
            Ok(())
        }
    }
}

/// How [`AgentRegistry::read_stored`] reads.
#[derive(Debug, Clone, Copy)]
pub(super) enum Read {
    /// With repair, for resuming.
    Load,
    /// Without, for forking.
    Inspect,
}

fn check_cwd(cwd: &Path) -> Result<(), AgentError> {
    let invalid = |reason: String| AgentError::InvalidCwd {
        path: cwd.to_owned(),
        reason,
    };
    dsh_session::validate_cwd(cwd).map_err(|e| match e {
        HeaderError::RelativeCwd(_) => invalid("must be an absolute path".into()),
        HeaderError::NonUtf8Cwd(_) => invalid("must be valid UTF-8".into()),
        other => invalid(other.to_string()),
    })?;
    match std::fs::metadata(cwd) {
        Ok(meta) if meta.is_dir() => Ok(()),
        Ok(_) => Err(invalid("is not a directory".into())),
        Err(e) => Err(invalid(e.to_string())),
    }
}

/// A backend's error about a stored session: `NotFound` is [`AgentError::SessionNotFound`].
pub(super) fn stored_error(error: PersistenceError) -> AgentError {
    match error {
        PersistenceError::NotFound(id) => AgentError::SessionNotFound(id),
        other => AgentError::Persistence(other),
    }
}
