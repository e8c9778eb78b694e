//! One live agent: a session log plus the provider that drives it and the state of its running turn.

use std::sync::{Arc, Mutex, RwLock, Weak};

use tokio::sync::watch;
use tokio_util::sync::CancellationToken;

use super::provider::ModelProvider;
pub(crate) use super::publish::Preview;
pub(crate) use super::reconfigure::Reconfigure;
use super::services::AgentServices;
use crate::call::AgentContext;
use crate::exec::OutputTap;
use crate::hooks::SessionSource;
use crate::locks::{lock, read_lock, write_lock};
use crate::persistence::PersistenceError;
use crate::persistence::handle::{self, DurableCursor};
use crate::sandbox::SandboxPolicy;
use dsh_session::history::{HistoryCache, HistoryMessage};
use dsh_session::{
    AbortCause, AgentSettings, ApprovalPolicy, Event, EventData, MessageSource, SessionHeader,
    SessionId, SessionLog, UserMessage,
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
    /// Steering messages waiting for the next step boundary, oldest first.
    steers: Vec<String>,
    /// The loop has taken the last steers it will deliver: later ones are refused.
    closing: bool,
}

/// Where a live agent publishes what happens to it: the watch hub (`watch/hub.rs`). A trait, so
/// this file does not name the watch module, which is built on agents.
pub(crate) trait Publish: Send + Sync + std::fmt::Debug {
    /// Event `seq` of `agent` was logged. Called under the agent's log lock.
    fn logged(&self, agent: &Arc<Agent>, seq: u64);
    /// `agent` streamed `text` at byte `offset` of `what` (its step's text, a call's output).
    fn preview(&self, agent: &Arc<Agent>, what: &Preview, offset: u64, text: &str);
    /// Whether any watcher follows `agent` now.
    fn watching(&self, agent: &Agent) -> bool;
    /// Changes whenever a watcher leaves.
    fn departures(&self) -> watch::Receiver<u64>;
}

/// What a new live agent is made of.
pub(crate) struct NewAgent {
    /// Its log (for a resumed or forked session, with the stored events).
    pub log: SessionLog,
    /// How much of the log is durable.
    pub cursor: DurableCursor,
    /// The top-most live ancestor when the agent went live (itself for a top-level agent).
    pub root: SessionId,
    /// The live parent, for a spawned child.
    pub parent: Option<Arc<Agent>>,
    /// Its model.
    pub provider: Arc<dyn ModelProvider>,
    /// How it came to be, for its first SessionStart hook.
    pub source: SessionSource,
    /// Its approval policy.
    pub approval: ApprovalPolicy,
    /// The sandbox its bash calls run in.
    pub sandbox: SandboxPolicy,
    /// Where it publishes its events for watchers.
    pub hub: Arc<dyn Publish>,
}

/// A live agent. Agent id = session id.
#[derive(Debug)]
pub struct Agent {
    /// The session header (its id is the agent id).
    header: Arc<SessionHeader>,
    /// The top-most live ancestor when the agent went live.
    root: SessionId,
    /// The sandbox its next bash calls run in (changed live by [`configure`](Self::configure)).
    sandbox: Mutex<SandboxPolicy>,
    /// The environment its commands start from, when its client sent one.
    client_env: Mutex<Option<crate::exec::ClientEnv>>,
    /// The live parent agent, for spawned children.
    parent: Option<SessionId>,
    /// The model provider it runs with now (chosen at creation, changed live by
    /// [`configure`](Self::configure)).
    provider: RwLock<Arc<dyn ModelProvider>>,
    /// The session log; written by the running turn, read by RPC handlers and checkpoints.
    log: RwLock<SessionLog>,
    /// How much of the log is durable, and where; the lock also serialises checkpoints (an async
    /// lock: it is held across the backend's I/O).
    cursor: tokio::sync::Mutex<DurableCursor>,
    /// The running turn.
    state: Mutex<TurnState>,
    /// `true` while a turn runs, so closers and shutdown can wait for idleness.
    busy: watch::Sender<bool>,
    /// How this live agent came to be, for the SessionStart hook of its first turn; taken once.
    session_start: Mutex<Option<SessionSource>>,
    /// The model history, extended with each request instead of derived anew.
    history: Mutex<HistoryCache>,
    /// Its background (`async`) hooks.
    background: super::background::BackgroundHooks,
    /// How full its model's context is, and how many tokens a byte of request is.
    gauge: Mutex<super::gauge::Gauge>,
    /// For a spawned child: its parent's session, whose subagent its hooks fire as.
    subagent_of: Option<Arc<SessionHeader>>,
    /// Itself, so what it publishes can hold it (a watcher reads the event from its log).
    me: Weak<Agent>,
    /// Its id and its live ancestors' ids when it went live, nearest first: whose descendant it is.
    lineage: Vec<SessionId>,
    /// When a person must approve its tool calls.
    approval: Mutex<ApprovalPolicy>,
    /// Where its events go to watchers.
    hub: Arc<dyn Publish>,
    /// The step whose text streams now, and how many bytes of it have streamed (so every watcher
    /// gets the same offsets).
    streaming: Mutex<((u32, u32), u64)>,
    /// The same for the reasoning it streams.
    thinking: Mutex<((u32, u32), u64)>,
    /// The last turn whose task has let the agent go.
    released: watch::Sender<u32>,
    /// Its tool calls waiting for a person's approval.
    approvals: super::answers::Approvals,
}

impl Agent {
    /// A live agent made of `parts`.
    pub(crate) fn new(parts: NewAgent) -> Arc<Self> {
        let NewAgent {
            log,
            cursor,
            root,
            parent,
            provider,
            source,
            approval,
            sandbox,
            hub,
        } = parts;
        let mut lineage = vec![log.header().id.clone()];
        if let Some(parent) = &parent {
            lineage.extend(parent.lineage.iter().cloned());
        }
        let released = log.last_turn();
        // A session made live again keeps the rules it made.
        let rules = dsh_session::approval_rules(log.events());
        Arc::new_cyclic(|me| Self {
            header: log.header().clone(),
            root,
            sandbox: Mutex::new(sandbox),
            client_env: Mutex::new(None),
            parent: parent.as_ref().map(|p| p.id().clone()),
            provider: RwLock::new(provider),
            log: RwLock::new(log),
            cursor: tokio::sync::Mutex::new(cursor),
            state: Mutex::new(TurnState::default()),
            busy: watch::Sender::new(false),
            session_start: Mutex::new(Some(source)),
            history: Mutex::new(HistoryCache::default()),
            gauge: Mutex::new(super::gauge::Gauge::default()),
            background: super::background::BackgroundHooks::default(),
            subagent_of: parent.map(|p| p.header().clone()),
            me: me.clone(),
            lineage,
            approval: Mutex::new(approval),
            hub,
            streaming: Mutex::new(((0, 0), 0)),
            thinking: Mutex::new(((0, 0), 0)),
            released: watch::Sender::new(released),
            approvals: super::answers::Approvals::with_rules(rules),
        })
    }

    /// The model history derived from the log as it is now (only new events are projected).
    pub fn history(&self) -> Arc<Vec<HistoryMessage>> {
        let log = read_lock(&self.log);
        lock(&self.history).update(log.events())
    }

    /// Starts its background hooks of a call (they log their records when they end).
    pub(crate) fn start_background(&self, hooks: Vec<crate::hooks::Background>) {
        for hook in hooks {
            let me = self.me.clone();
            self.background.start(hook, move |end| {
                if let Some(agent) = me.upgrade() {
                    for record in end.records {
                        agent.append(record);
                    }
                }
            });
        }
    }

    /// The token its background hooks run under.
    pub(crate) fn background_token(&self) -> tokio_util::sync::CancellationToken {
        self.background.token()
    }

    /// Kills its running background hooks (it is being closed).
    pub(crate) fn stop_background(&self) {
        self.background.stop();
    }

    /// What its background hooks said for the model since the last turn: logged as their
    /// context once this turn's prompt is.
    pub(crate) fn log_background_context(&self) {
        let context = self.background.take_context();
        if !context.is_empty() {
            self.log_hook_context(&context);
        }
    }

    /// Runs `f` on its context gauge.
    pub(crate) fn gauge<T>(&self, f: impl FnOnce(&mut super::gauge::Gauge) -> T) -> T {
        f(&mut lock(&self.gauge))
    }

    /// Tokens of its model's context in use at its last request (the provider's count when it
    /// reported one, else dshd's estimate; 0 before the first), and the window's size when
    /// known.
    pub fn context_use(&self) -> (u64, Option<u64>) {
        (self.gauge(|g| g.used()), self.provider().context_window())
    }

    /// Its id, then its live ancestors' when it went live, nearest first.
    pub fn lineage(&self) -> &[SessionId] {
        &self.lineage
    }

    /// Its approval policy.
    pub fn approval(&self) -> ApprovalPolicy {
        *lock(&self.approval)
    }

    /// The provider, model, reasoning effort and approval policy it runs with.
    pub fn settings(&self) -> AgentSettings {
        let provider = self.provider();
        AgentSettings {
            provider: provider.provider().to_owned(),
            model: provider.model().to_owned(),
            reasoning_effort: provider.reasoning_effort(),
            approval: self.approval(),
        }
    }

    /// The sandbox its next bash calls run in.
    pub fn sandbox(&self) -> SandboxPolicy {
        *lock(&self.sandbox)
    }

    /// Runs it from now on with `change`'s settings (the ones it names), logged as one
    /// `session/settings` event carrying all of them; nothing else changes: its rules, its
    /// background jobs (which keep the sandbox they started in) and its log stay. Returns
    /// whether anything changed (nothing is logged otherwise). Refused while a turn runs (the
    /// running turn's number), so the event falls between turns, or once it is closed (`None`).
    pub(crate) fn configure(&self, change: Reconfigure) -> Result<bool, Option<u32>> {
        // Held throughout, so no turn can start in the middle of the change.
        let state = lock(&self.state);
        if let Some(running) = &state.running {
            return Err(Some(running.turn));
        }
        if state.closed {
            return Err(None);
        }
        let before = (self.settings(), self.sandbox());
        if let Some(provider) = change.provider {
            *write_lock(&self.provider) = provider;
        }
        if let Some(approval) = change.approval {
            *lock(&self.approval) = approval;
        }
        if let Some(sandbox) = change.sandbox {
            *lock(&self.sandbox) = sandbox;
        }
        let after = (self.settings(), self.sandbox());
        if before == after {
            return Ok(false);
        }
        self.log_settings();
        Ok(true)
    }

    /// A session closed before its first turn has nothing logged, and a checkpoint writes
    /// nothing for it: it logs the settings it ran with, so that it is stored and comes back under
    /// its id (a client that created it and set it up may prompt it later, from another process).
    pub(crate) fn keep_if_unprompted(&self) {
        if self.read_log(SessionLog::is_empty) {
            self.log_settings();
        }
    }

    /// Logs what it runs with now as a `session/settings` event, sandbox included.
    pub(crate) fn log_settings(&self) {
        let AgentSettings {
            provider,
            model,
            reasoning_effort,
            approval,
        } = self.settings();
        self.append(EventData::Settings {
            provider,
            model,
            reasoning_effort,
            approval,
            sandbox: Some(self.sandbox()),
        });
    }

    /// Whether a watcher (a Prompt or Watch stream) follows it now.
    pub fn watched(&self) -> bool {
        self.hub.watching(self)
    }

    /// The project instructions files its session loaded, in order (`session/instructions`,
    /// logged before the first `turn/start`, so the search stops there).
    pub fn instruction_files(&self) -> Vec<String> {
        self.read_log(|log| {
            log.events()
                .iter()
                .take_while(|e| !matches!(e.data, EventData::TurnStart { .. }))
                .find_map(|e| match &e.data {
                    EventData::Instructions { files, .. } => {
                        Some(files.iter().map(|f| f.path.clone()).collect())
                    }
                    _ => None,
                })
                .unwrap_or_default()
        })
    }

    /// The requests its clients allowed for the rest of the session ("allow always"), oldest
    /// first: made by its clients' allows, kept when the session goes live again.
    pub fn approval_rules(&self) -> Vec<dsh_session::ApprovalRule> {
        self.approvals.rules()
    }

    /// Its tool calls waiting for approval.
    pub(crate) fn approvals(&self) -> &super::answers::Approvals {
        &self.approvals
    }

    /// Changes whenever a watcher of any agent leaves (see [`watched`](Self::watched)).
    pub(crate) fn departures(&self) -> watch::Receiver<u64> {
        self.hub.departures()
    }

    /// The parent session, for a spawned child (whose subagent its hooks fire as).
    pub(crate) fn parent_session(&self) -> Option<&Arc<SessionHeader>> {
        self.subagent_of.as_ref()
    }

    /// The SessionStart source, the first time it is asked (the first turn of this live agent).
    pub(crate) fn take_session_start(&self) -> Option<SessionSource> {
        lock(&self.session_start).take()
    }

    /// The agent (and session) id.
    pub fn id(&self) -> &SessionId {
        &self.header.id
    }

    /// The session header.
    pub fn header(&self) -> &Arc<SessionHeader> {
        &self.header
    }

    /// Identity for tool calls, with the sandbox it runs in now.
    pub fn context(&self) -> AgentContext {
        AgentContext {
            header: self.header.clone(),
            root: self.root.clone(),
            sandbox: self.sandbox(),
            env: self.client_env(),
        }
    }

    /// The environment its commands start from, when its client sent one (scrubbed).
    pub fn client_env(&self) -> Option<crate::exec::ClientEnv> {
        lock(&self.client_env).clone()
    }

    /// Its commands start from `env` (a client's environment, scrubbed: see
    /// [`crate::Executor::client_env`]) instead of dshd's, from the next command on.
    pub fn set_client_env(&self, env: Option<crate::exec::ClientEnv>) {
        *lock(&self.client_env) = env;
    }

    /// Adds what SessionStart hooks wrote to `CLAUDE_ENV_FILE` to the environment its commands
    /// start from, from the next command on: each value expanded against what came before it
    /// (the file's earlier lines, then this environment), and checked as a client's variable is
    /// (a value the executor would not pass on is left out, and dshd's log says so).
    pub(crate) fn add_env(
        &self,
        executor: &crate::exec::Executor,
        assignments: &[crate::hooks::Assignment],
    ) {
        if assignments.is_empty() {
            return;
        }
        let mut env = lock(&self.client_env);
        let mut set: Vec<(String, String)> = Vec::with_capacity(assignments.len());
        for assignment in assignments {
            let value = assignment.expand(|name| {
                set.iter()
                    .rev()
                    .find(|(n, _)| n == name)
                    .map(|(_, v)| v.clone())
                    .or_else(|| executor.base_var(env.as_ref(), name))
            });
            match executor.refusal(&assignment.name, &value) {
                Some(why) => tracing::warn!(
                    session = %self.id(), name = %assignment.name,
                    "CLAUDE_ENV_FILE: a variable was left out: {why}"
                ),
                None => set.push((assignment.name.clone(), value)),
            }
        }
        *env = Some(executor.env_with(env.as_ref(), set));
    }

    /// The live parent agent, for children.
    pub fn parent(&self) -> Option<&SessionId> {
        self.parent.as_ref()
    }

    /// The provider it runs with now.
    pub fn provider(&self) -> Arc<dyn ModelProvider> {
        read_lock(&self.provider).clone()
    }

    /// Idle or running.
    pub fn status(&self) -> AgentStatus {
        match &lock(&self.state).running {
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
        f(&read_lock(&self.log))
    }

    /// The answer of turn `turn` so far, a copy: its last non-empty assistant text, empty when it
    /// has none.
    pub fn turn_answer(&self, turn: u32) -> String {
        self.read_log(|log| log.turn_answer(turn).to_owned())
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

    /// Appends an event, tells the watchers about it, and returns its seq. Watchers read the
    /// event from the log, so nothing is copied for them; they are told under the log's lock so
    /// that each learns of this agent's events in seq order.
    pub(crate) fn append(&self, data: EventData) -> u64 {
        let mut log = write_lock(&self.log);
        let seq = log.append(data).seq;
        if let Some(me) = self.me.upgrade() {
            self.hub.logged(&me, seq);
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

    /// Tells the watchers that the model streamed `text` in `step` (never waits: a slow watcher
    /// gets pending text merged, or skipped beyond a bound; see [`super::watch`]).
    pub(crate) fn stream_text(&self, turn: u32, step: u32, text: &str) {
        self.stream(
            &self.streaming,
            (turn, step),
            Preview::Text { turn, step },
            text,
        );
    }

    /// Tells the watchers that the model streamed reasoning `text` in `step`, as
    /// [`stream_text`](Self::stream_text) does its text.
    pub(crate) fn stream_thought(&self, turn: u32, step: u32, text: &str) {
        self.stream(
            &self.thinking,
            (turn, step),
            Preview::Thought { turn, step },
            text,
        );
    }

    /// Hands `text` of `what` (of step `at`) on at its offset in the step, kept in `position`.
    fn stream(
        &self,
        position: &Mutex<((u32, u32), u64)>,
        at: (u32, u32),
        what: Preview,
        text: &str,
    ) {
        if text.is_empty() {
            return;
        }
        let offset = {
            let mut position = lock(position);
            if position.0 != at {
                *position = (at, 0);
            }
            let offset = position.1;
            position.1 = offset.saturating_add(text.len() as u64);
            offset
        };
        if let Some(me) = self.me.upgrade() {
            self.hub.preview(&me, &what, offset, text);
        }
    }

    /// Tells the watchers that the model request of `step` failed and is retried after a wait.
    pub(crate) fn stream_retry(&self, turn: u32, step: u32, retry: &super::provider::ModelRetry) {
        if let Some(me) = self.me.upgrade() {
            let what = Preview::Retry {
                turn,
                step,
                attempt: retry.attempt,
                delay_ms: u64::try_from(retry.delay.as_millis()).unwrap_or(u64::MAX),
                reason: retry.reason.clone(),
            };
            self.hub.preview(&me, &what, 0, "");
        }
    }

    /// Where call `call_id`'s command output goes as it is produced: to the watchers, as
    /// `tool/output` (never waits; bounded like streamed text, see [`super::watch`]).
    pub(crate) fn output_tap(&self, turn: u32, step: u32, call_id: &str) -> OutputTap {
        let me = self.me.clone();
        let call_id: Arc<str> = Arc::from(call_id);
        OutputTap::new(move |stream, offset, text| {
            if let Some(agent) = me.upgrade() {
                let what = Preview::Output {
                    turn,
                    step,
                    call_id: call_id.clone(),
                    stream,
                };
                agent.hub.preview(&agent, &what, offset, text);
            }
        })
    }

    /// Whether nothing of its session is stored yet (a new session before its first checkpoint).
    pub(crate) async fn nothing_stored(&self) -> bool {
        self.cursor.lock().await.nothing_stored()
    }

    /// Makes the log durable in the active backend. A backend that writes in place (the file
    /// backends on dshd's runtime) writes the log's tail borrowed, the log read-locked meanwhile;
    /// for any other the log is locked only while the tail is copied.
    pub async fn checkpoint(
        self: &Arc<Self>,
        services: &AgentServices,
    ) -> Result<(), PersistenceError> {
        let mut cursor = self.cursor.lock().await;
        let in_place = |backend: &dyn crate::persistence::Persistence, from| {
            self.read_log(|log| handle::write_in_place(backend, log, from))
        };
        handle::checkpoint_from(
            &services.persistence,
            self.id(),
            &mut cursor,
            in_place,
            |from| {
                self.read_log(|log| {
                    let from = usize::try_from(from).unwrap_or(usize::MAX);
                    let tail = log.events().get(from..).unwrap_or_default().to_vec();
                    (log.header().clone(), tail, log.len())
                })
            },
        )
        .await
    }

    /// Claims the agent for its next turn: the turn number, the seq its first event will have,
    /// and its cancellation token. `None` when a turn is already running or the agent is closed
    /// (the caller reports which via [`status`](Self::status)).
    pub(crate) fn begin_turn(
        &self,
        parent_cancel: Option<&CancellationToken>,
    ) -> Option<(u32, u64, CancellationToken)> {
        let mut state = lock(&self.state);
        if state.closed || state.running.is_some() {
            return None;
        }
        let (turn, next_seq) = self.read_log(|log| (log.last_turn() + 1, log.len()));
        let cancel =
            parent_cancel.map_or_else(CancellationToken::new, CancellationToken::child_token);
        state.running = Some(RunningTurn {
            turn,
            cancel: cancel.clone(),
            cause: None,
            steers: Vec::new(),
            closing: false,
        });
        self.busy.send_replace(true);
        Some((turn, next_seq, cancel))
    }

    /// Whether a turn runs now.
    pub(crate) fn is_busy(&self) -> bool {
        *self.busy.borrow()
    }

    /// Marks the running turn finished: the agent takes the next prompt.
    pub(crate) fn end_turn(&self) {
        let turn = {
            let mut state = lock(&self.state);
            state.running.take().map(|r| r.turn)
        };
        self.busy.send_replace(false);
        if let Some(turn) = turn {
            self.released.send_modify(|last| *last = (*last).max(turn));
        }
    }

    /// Waits until turn `turn`'s task has let the agent go (it is idle, or running a later turn).
    pub(crate) async fn turn_released(&self, turn: u32) {
        let mut rx = self.released.subscribe();
        // The sender lives as long as `self`.
        let _ = rx.wait_for(|last| *last >= turn).await;
    }

    /// Why the running turn was cancelled (`parent` when its parent's token fired).
    pub(crate) fn abort_cause(&self) -> AbortCause {
        lock(&self.state)
            .running
            .as_ref()
            .and_then(|r| r.cause)
            .unwrap_or(AbortCause::Parent)
    }

    /// Queues `text` for the running turn's next step boundary; returns the turn. `None` when
    /// no turn runs, or the running one has taken its last steers (it is ending).
    pub(crate) fn steer(&self, text: String) -> Option<u32> {
        let mut state = lock(&self.state);
        let running = state.running.as_mut().filter(|r| !r.closing)?;
        running.steers.push(text);
        Some(running.turn)
    }

    /// The steers queued since the last call, oldest first. With `last`, and none queued, the
    /// turn takes no more: later steers are refused (so none is accepted and then lost).
    pub(crate) fn take_steers(&self, last: bool) -> Vec<String> {
        let mut state = lock(&self.state);
        let Some(running) = state.running.as_mut() else {
            return Vec::new();
        };
        let steers = std::mem::take(&mut running.steers);
        if last && steers.is_empty() {
            running.closing = true;
        }
        steers
    }

    /// Cancels the running turn; returns false when none was running.
    pub fn cancel(&self, cause: AbortCause) -> bool {
        let mut state = lock(&self.state);
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
        lock(&self.state).closed = true;
    }

    /// Takes new turns again: a close that could not save the session leaves the agent as it was.
    pub(crate) fn reopen(&self) {
        lock(&self.state).closed = false;
    }

    /// Waits until no turn is running.
    pub async fn wait_idle(&self) {
        let mut rx = self.busy.subscribe();
        // The sender lives as long as `self`, so this only ends when the value is false.
        let _ = rx.wait_for(|busy| !busy).await;
    }
}

/// The hook engine reads an agent's log for the Claude Code transcript projection.
impl crate::hooks::SessionEvents for Agent {
    fn events_from(&self, seq: u64) -> Vec<Event> {
        Agent::events_from(self, seq)
    }
}
