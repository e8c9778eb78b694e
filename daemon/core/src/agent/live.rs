//! One live agent: a session log plus the provider that drives it and the state of its running turn.

use std::sync::{Arc, Mutex, PoisonError, RwLock};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::feed::{self, EventSource, FeedSender, TurnFeed};
use super::provider::ModelProvider;
use super::services::AgentServices;
use crate::call::AgentContext;
use crate::hooks::SessionSource;
use crate::persistence::PersistenceError;
use crate::persistence::handle::{self, DurableCursor};
use crate::sandbox::SandboxPolicy;
use crate::session::history::{HistoryCache, HistoryMessage};
use crate::session::{
    AbortCause, Event, EventData, MessageSource, SessionHeader, SessionId, SessionLog, UserMessage,
};

/// Whether an agent is running a turn.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AgentStatus {
    /// Waiting for a prompt.
    Idle,
    /// Running turn `turn`.
    Running {
        /// The turn number.
        turn: u32,
    },
}

/// The turn in progress, if any.
#[derive(Debug, Default)]
struct TurnState {
    running: Option<RunningTurn>,
    /// Set once the agent is closed: no new turn may start.
    closed: bool,
}

#[derive(Debug)]
struct RunningTurn {
    turn: u32,
    cancel: CancellationToken,
    /// Who cancelled, read by the loop to write `turn/end {aborted{cause}}`.
    cause: Option<AbortCause>,
    /// Where the turn's updates go (the Prompt stream, if anyone listens). Dropped with the
    /// running turn, which tells the watcher the turn is over.
    updates: FeedSender,
}

/// A live agent. Agent id = session id.
#[derive(Debug)]
pub struct Agent {
    /// Identity carried into every tool call of this agent.
    context: AgentContext,
    /// The live parent agent, for spawned children.
    parent: Option<SessionId>,
    /// The model provider chosen at creation.
    provider: Arc<dyn ModelProvider>,
    /// The session log; written by the running turn, read by RPC handlers and checkpoints.
    log: RwLock<SessionLog>,
    /// How much of the log is durable, and where; the lock also serialises checkpoints.
    cursor: Mutex<DurableCursor>,
    /// The running turn.
    state: Mutex<TurnState>,
    /// `true` while a turn runs, so closers and shutdown can wait for idleness.
    busy: watch::Sender<bool>,
    /// How this live agent came to be, for the SessionStart hook of its first turn; taken once.
    session_start: Mutex<Option<SessionSource>>,
    /// The model history, extended with each request instead of derived anew.
    history: Mutex<HistoryCache>,
    /// For a spawned child: its parent's session, whose subagent its hooks fire as.
    subagent_of: Option<Arc<SessionHeader>>,
}

impl Agent {
    /// A live agent over `log`, whose first `cursor.stored()` events are durable.
    pub fn new(
        log: SessionLog,
        cursor: DurableCursor,
        root: SessionId,
        parent: Option<SessionId>,
        provider: Arc<dyn ModelProvider>,
        source: SessionSource,
    ) -> Self {
        Self {
            context: AgentContext {
                header: log.header().clone(),
                root,
                sandbox: SandboxPolicy::UNCONFINED,
            },
            parent,
            provider,
            log: RwLock::new(log),
            cursor: Mutex::new(cursor),
            state: Mutex::new(TurnState::default()),
            busy: watch::Sender::new(false),
            session_start: Mutex::new(Some(source)),
            history: Mutex::new(HistoryCache::default()),
            subagent_of: None,
        }
    }

    /// The model history derived from the log as it is now (only new events are projected).
    pub fn history(&self) -> Arc<Vec<HistoryMessage>> {
        let log = self.log.read().unwrap_or_else(PoisonError::into_inner);
        self.history
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .update(log.events())
    }

    /// The agent as a subagent of `parent`'s session: its hooks carry the parent's session and
    /// its own agent id, as both upstream harnesses fire a subagent's hooks.
    pub(crate) fn subagent_of(mut self, parent: Arc<SessionHeader>) -> Self {
        self.subagent_of = Some(parent);
        self
    }

    /// The agent with `policy` confining its bash calls.
    pub(crate) fn with_sandbox(mut self, policy: SandboxPolicy) -> Self {
        self.context.sandbox = policy;
        self
    }

    /// The parent session, for a spawned child.
    pub(crate) fn parent_session(&self) -> Option<&Arc<SessionHeader>> {
        self.subagent_of.as_ref()
    }

    /// The SessionStart source, the first time it is asked (the first turn of this live agent).
    pub(crate) fn take_session_start(&self) -> Option<SessionSource> {
        self.session_start
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    /// The agent (and session) id.
    pub fn id(&self) -> &SessionId {
        &self.context.header.id
    }

    /// The session header.
    pub fn header(&self) -> &Arc<SessionHeader> {
        &self.context.header
    }

    /// Identity for tool calls.
    pub fn context(&self) -> &AgentContext {
        &self.context
    }

    /// The live parent agent, for children.
    pub fn parent(&self) -> Option<&SessionId> {
        self.parent.as_ref()
    }

    /// The provider.
    pub fn provider(&self) -> &Arc<dyn ModelProvider> {
        &self.provider
    }

    /// Idle or running.
    pub fn status(&self) -> AgentStatus {
        match &self.lock_state().running {
            Some(running) => AgentStatus::Running { turn: running.turn },
            None => AgentStatus::Idle,
        }
    }

    /// Number of the last turn started.
    pub fn last_turn(&self) -> u32 {
        self.read_log(SessionLog::last_turn)
    }

    /// Reads the log under its lock.
    pub fn read_log<T>(&self, f: impl FnOnce(&SessionLog) -> T) -> T {
        f(&self.log.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Events from `from_seq` on (a copy).
    pub fn events_from(&self, from_seq: u64) -> Vec<Event> {
        self.read_log(|log| {
            let from = usize::try_from(from_seq).unwrap_or(usize::MAX);
            log.events()
                .get(from..)
                .map(<[Event]>::to_vec)
                .unwrap_or_default()
        })
    }

    /// Appends an event, tells the running turn's watcher about it, and returns its seq. The
    /// watcher reads the event from the log, so nothing is copied for it.
    pub(crate) fn append(&self, data: EventData) -> u64 {
        let seq = self
            .log
            .write()
            .unwrap_or_else(PoisonError::into_inner)
            .append(data)
            .seq;
        if let Some(running) = &self.lock_state().running {
            running.updates.logged(seq);
        }
        seq
    }

    /// Logs hook context as user-role messages from the hook plugin, one message per plugin, so the
    /// next model request sees it.
    pub(crate) fn log_hook_context(&self, context: &[(&'static str, String)]) {
        let mut plugins: Vec<&str> = context.iter().map(|(p, _)| *p).collect();
        plugins.dedup();
        for plugin in plugins {
            let text = context
                .iter()
                .filter(|(p, _)| *p == plugin)
                .map(|(_, t)| t.as_str())
                .collect::<Vec<_>>()
                .join("\n\n");
            self.append(EventData::UserMessage {
                message: UserMessage {
                    text,
                    source: MessageSource::Plugin {
                        plugin: plugin.to_owned(),
                    },
                },
            });
        }
    }

    /// Tells the running turn's watcher that the model streamed `text` in `step` (never waits: a
    /// slow watcher gets pending text merged, or skipped beyond a bound; see [`feed`]).
    pub(crate) fn stream_text(&self, turn: u32, step: u32, text: &str) {
        if let Some(running) = &self.lock_state().running {
            running.updates.text(turn, step, text);
        }
    }

    /// Makes the log durable in the active backend (blocking I/O on the blocking pool).
    pub async fn checkpoint(
        self: &Arc<Self>,
        services: &AgentServices,
    ) -> Result<(), PersistenceError> {
        let agent = self.clone();
        let persistence = services.persistence.clone();
        tokio::task::spawn_blocking(move || {
            let log = agent.log.read().unwrap_or_else(PoisonError::into_inner);
            let mut cursor = agent.cursor.lock().unwrap_or_else(PoisonError::into_inner);
            handle::checkpoint(&persistence, &log, &mut cursor)
        })
        .await
        .unwrap_or_else(|join| {
            Err(PersistenceError::Task {
                what: "checkpoint",
                message: join.to_string(),
            })
        })
    }

    /// Claims the agent for its next turn: the turn number, its cancellation token and the
    /// watcher's end of its updates. `None` when a turn is already running or the agent is closed
    /// (the caller reports which via [`status`](Self::status) / [`is_closed`](Self::is_closed)).
    pub(crate) fn begin_turn(
        self: &Arc<Self>,
        parent_cancel: Option<&CancellationToken>,
    ) -> Option<(u32, CancellationToken, TurnFeed)> {
        let mut state = self.lock_state();
        if state.closed || state.running.is_some() {
            return None;
        }
        let (turn, next_seq) = self.read_log(|log| (log.last_turn() + 1, log.len()));
        let cancel =
            parent_cancel.map_or_else(CancellationToken::new, CancellationToken::child_token);
        let source: Arc<dyn EventSource> = self.clone();
        let (tx, rx) = feed::channel(source, next_seq);
        state.running = Some(RunningTurn {
            turn,
            cancel: cancel.clone(),
            cause: None,
            updates: tx,
        });
        self.busy.send_replace(true);
        Some((turn, cancel, rx))
    }

    /// Marks the running turn finished.
    pub(crate) fn end_turn(&self) {
        self.lock_state().running = None;
        self.busy.send_replace(false);
    }

    /// Why the running turn was cancelled (`parent` when its parent's token fired).
    pub(crate) fn abort_cause(&self) -> AbortCause {
        self.lock_state()
            .running
            .as_ref()
            .and_then(|r| r.cause)
            .unwrap_or(AbortCause::Parent)
    }

    /// Cancels the running turn; returns false when none was running.
    pub fn cancel(&self, cause: AbortCause) -> bool {
        let mut state = self.lock_state();
        match state.running.as_mut() {
            Some(running) => {
                running.cause.get_or_insert(cause);
                running.cancel.cancel();
                true
            }
            None => false,
        }
    }

    /// Refuses new turns from now on.
    pub(crate) fn mark_closed(&self) {
        self.lock_state().closed = true;
    }

    /// Takes new turns again: a close that could not save the session leaves the agent as it was.
    pub(crate) fn reopen(&self) {
        self.lock_state().closed = false;
    }

    /// True once closed.
    pub fn is_closed(&self) -> bool {
        self.lock_state().closed
    }

    /// Waits until no turn is running.
    pub async fn wait_idle(&self) {
        let mut rx = self.busy.subscribe();
        // The sender lives as long as `self`, so this only ends when the value is false.
        let _ = rx.wait_for(|busy| !busy).await;
    }

    fn lock_state(&self) -> std::sync::MutexGuard<'_, TurnState> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

impl EventSource for Agent {
    fn event(&self, seq: u64) -> Option<Event> {
        let index = usize::try_from(seq).ok()?;
        self.read_log(|log| log.events().get(index).cloned())
    }

    fn answer(&self, turn: u32) -> String {
        self.read_log(|log| log.turn_answer(turn).to_owned())
    }
}
