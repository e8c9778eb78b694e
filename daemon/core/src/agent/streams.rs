//! What clients follow and answer while agents run: watchers of live agents, a session's log in
//! follow mode, and the answers to approval requests.

use super::AgentStatus;
use super::answers::ApprovalAnswer;
use super::registry::{AgentError, AgentRegistry};
use super::watch::{EventFilter, WatchScope, WatchedBy, Watcher};
use dsh_session::SessionId;

impl AgentRegistry {
    /// A watcher of `scope`, with streamed text. With `from_seq`, the scope's agent (which must
    /// be live) is replayed from that seq first, and so are its live descendants (from their
    /// start) for a [`WatchScope::Tree`]; without it, every followed agent is followed from its
    /// next event. [`WatchScope::All`] takes no `from_seq` (the caller checks).
    pub fn watch(
        &self,
        scope: WatchScope,
        from_seq: Option<u64>,
        by: WatchedBy,
    ) -> Result<Watcher, AgentError> {
        self.watch_types(scope, from_seq, None, by)
    }

    /// [`watch`](Self::watch), handing out only the event types `filter` admits; previews
    /// (streamed text, command output, retries) are not even queued when it admits none of them.
    pub fn watch_types(
        &self,
        scope: WatchScope,
        from_seq: Option<u64>,
        filter: Option<EventFilter>,
        by: WatchedBy,
    ) -> Result<Watcher, AgentError> {
        let root = match &scope {
            WatchScope::Agent(id) | WatchScope::Tree(id) => Some(self.get(id)?),
            WatchScope::All => None,
        };
        // Registered before anything is read, so nothing published meanwhile is missed; what
        // is both replayed and published is handed out once (the watcher keeps cursors).
        let deltas = filter.as_ref().is_none_or(EventFilter::wants_previews);
        let mut watcher = self.watcher(scope.clone(), deltas, by).filtered(filter);
        if let (Some(root), Some(from)) = (root, from_seq) {
            watcher.replay(root.clone(), from);
            if let WatchScope::Tree(id) = &scope {
                for agent in self.list() {
                    if agent.id() != id && agent.lineage().contains(id) {
                        watcher.replay(agent, 0);
                    }
                }
            }
        }
        Ok(watcher)
    }

    /// Session `id`'s logged events from `from_seq`, then every event it logs from then on, live
    /// or stored alike: a stored session is followed once it is resumed. Ends at shutdown.
    pub async fn follow(
        &self,
        id: &SessionId,
        from_seq: u64,
        by: WatchedBy,
    ) -> Result<Watcher, AgentError> {
        let mut watcher = self.watcher(WatchScope::Agent(id.clone()), false, by);
        match self.get(id) {
            Ok(agent) => watcher.replay(agent, from_seq),
            Err(_) => {
                self.stored_exists(id).await?;
                watcher.replay_stored(id.clone(), from_seq);
            }
        }
        Ok(watcher)
    }

    /// Answers approval request `call_id` of agent `id`.
    pub fn approve(
        &self,
        id: &SessionId,
        call_id: &str,
        answer: ApprovalAnswer,
    ) -> Result<(), AgentError> {
        if self.get(id)?.approvals().answer(call_id, answer) {
            Ok(())
        } else {
            Err(AgentError::NoPendingApproval {
                agent: id.clone(),
                call_id: call_id.to_owned(),
            })
        }
    }

    /// A watcher of `scope`, registered now (streamed text too when `deltas`).
    pub(crate) fn watcher(&self, scope: WatchScope, deltas: bool, by: WatchedBy) -> Watcher {
        Watcher::register(
            &self.hub,
            scope,
            deltas,
            by,
            self.services().persistence.clone(),
        )
    }

    /// Fails with [`AgentError::SessionNotFound`] unless the active backend stores session `id`.
    async fn stored_exists(&self, id: &SessionId) -> Result<(), AgentError> {
        let backend = self.services().persistence.backend();
        let stored = backend.stored_len(id).await?;
        stored
            .map(drop)
            .ok_or_else(|| AgentError::SessionNotFound(id.clone()))
    }

    /// How many agents are running a turn now.
    pub fn running_turns(&self) -> usize {
        self.list()
            .iter()
            .filter(|a| matches!(a.status(), AgentStatus::Running { .. }))
            .count()
    }
}
