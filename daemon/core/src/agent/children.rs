//! Running a child agent for the `spawn_agent` tool: the registry's side of
//! [`ChildAgents`], with the SubagentStart and SubagentStop hooks around the child's one turn.

use super::registry::{AgentError, AgentRegistry};
use super::watch::WatchedBy;
use crate::call::{AGENT_TYPE, BoxFuture, ToolExecution, ToolOutput};
use crate::hooks::{HookContext, HookEvent};
use crate::locks::lock;
use crate::tools::ChildAgents;
use dsh_session::SessionId;
use dsh_session::TurnEndReason;

impl ChildAgents for AgentRegistry {
    fn run_child<'a>(
        &'a self,
        exec: &'a ToolExecution,
        prompt: &'a str,
    ) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let Some(parent_id) = exec.session_id() else {
                return ToolOutput::error(
                    "Error: spawn_agent: only an agent can spawn a child agent",
                );
            };
            let parent = match self.get(parent_id) {
                Ok(parent) => parent,
                Err(error) => return ToolOutput::error(format!("Error: spawn_agent: {error}")),
            };
            // The parent's provider decides the child's model (the same one, or for the scripted
            // model the script this call carried).
            let provider = parent.provider();
            let choice = provider.child_choice(&exec.call_id);
            // A good moment to save children whose earlier close could not.
            self.retry_pending_closes().await;
            // The parent's sandbox: the model cannot choose another; the parent's approval policy.
            let child = match self.spawn(parent_id, &choice, None, None) {
                Ok(child) => child,
                Err(error) => return ToolOutput::error(format!("Error: spawn_agent: {error}")),
            };
            let child_id = child.id().clone();
            let hooks = self.services().hooks.clone();
            let ctx = HookContext {
                header: parent.header().clone(),
                subagent: None,
                turn: exec.turn,
                model: provider.model().to_owned(),
                effort: provider.reasoning_effort(),
                sandbox: parent.sandbox(),
                cancel: exec.cancel.clone(),
                background: Some(parent.background_token()),
                events: Some(parent.clone()),
            };
            super::hook_run::store_for_hooks(
                &parent,
                self.services(),
                crate::hooks::EventName::SubagentStart,
            )
            .await;
            let start = hooks
                .run(
                    &ctx,
                    HookEvent::SubagentStart {
                        child: child.header().clone(),
                        agent_type: AGENT_TYPE.into(),
                    },
                )
                .await;
            for record in start.records {
                parent.append(record);
            }
            parent.start_background(start.background);
            child.log_hook_context(&start.outcome.additional_context);
            // The parent's call waits for the outcome; nobody reads the turn's events through
            // it, so it is no person watching the child (those watch the parent's tree).
            let turn = self.prompt(
                &child_id,
                prompt.to_owned(),
                Some(&exec.cancel),
                WatchedBy::Command,
            );
            let outcome = match turn {
                Ok(handle) => handle.outcome.await,
                Err(error) => {
                    let _ = self.close_child(&child_id).await;
                    return ToolOutput::error(format!("Error: spawn_agent: {error}"));
                }
            };
            // Read before the child is closed: the parent's tool result is the child's answer.
            let answer = outcome.as_ref().ok().map(|o| child.turn_answer(o.turn));
            hooks.project_child(child.header(), child.provider().model(), child.as_ref());
            let stop = hooks
                .run(
                    &ctx,
                    HookEvent::SubagentStop {
                        child: child.header().clone(),
                        agent_type: AGENT_TYPE.into(),
                        last_assistant_message: answer.clone(),
                    },
                )
                .await;
            for record in stop.records {
                parent.append(record);
            }
            parent.start_background(stop.background);
            // The child is one-shot: its session stays stored (resumable by id), the agent goes. If
            // it cannot be saved now it stays in memory and is saved by a later close or spawn, or
            // at shutdown.
            if let Err(error) = self.close_child(&child_id).await {
                tracing::warn!(child = %child_id, %error, "a finished child could not be saved yet; it stays in memory");
            }
            match outcome {
                Ok(outcome) if outcome.reason == TurnEndReason::Completed => {
                    ToolOutput::ok(answer.unwrap_or_default())
                }
                Ok(outcome) => ToolOutput::error(format!(
                    "Error: child agent {child_id} ended {}{}{}",
                    outcome.reason.kind(),
                    if outcome.reason.message().is_empty() {
                        ""
                    } else {
                        ": "
                    },
                    outcome.reason.message()
                )),
                Err(join) => {
                    ToolOutput::error(format!("Error: child agent {child_id} failed: {join}"))
                }
            }
        })
    }
}

/// Closing finished children, whose sessions a failed save must not lose.
impl AgentRegistry {
    /// Closes a finished child agent; when its session cannot be saved now, keeps it registered
    /// (closed to new turns) and retries with every later close and spawn, and at shutdown.
    pub async fn close_child(&self, id: &SessionId) -> Result<(), AgentError> {
        let result = self.close_one(id).await;
        if result.is_err()
            && let Ok(agent) = self.get(id)
        {
            agent.mark_closed();
            lock(&self.pending_closes).push(id.clone());
        }
        self.retry_pending_closes().await;
        result
    }

    /// Tries again to close every child whose close could not save it.
    pub async fn retry_pending_closes(&self) {
        let pending = std::mem::take(&mut *lock(&self.pending_closes));
        for id in pending {
            match self.close_one(&id).await {
                Ok(()) | Err(AgentError::NotFound(_)) => {
                    tracing::info!(session = %id, "saved a child session whose earlier close failed");
                }
                Err(error) => {
                    tracing::warn!(session = %id, %error, "a finished child still cannot be saved");
                    if let Ok(agent) = self.get(&id) {
                        agent.mark_closed();
                    }
                    lock(&self.pending_closes).push(id);
                }
            }
        }
    }
}
