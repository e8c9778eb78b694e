//! `spawn_agent`: the model delegates a task to a child agent, which runs its own turn in its own
//! session; the parent's tool result is the child's final answer. Several children of one step run
//! at once (the loop dispatches a step's calls concurrently).

use std::sync::{Arc, Weak};

use serde_json::{Value, json};

use super::{Tool, ToolExecution, ToolOutput};
use crate::agent::provider::{BoxFuture, ToolSchema};
use crate::agent::{AgentRegistry, ModelChoice, scripted};
use crate::hooks::{HookContext, HookEvent};
use crate::session::TurnEndReason;

/// The tool's name, as the model calls it.
pub const SPAWN_AGENT: &str = "spawn_agent";

/// The agent type hooks see for children spawned by this tool (Claude Code's default subagent).
pub const AGENT_TYPE: &str = "general-purpose";

/// The `spawn_agent` tool.
#[derive(Debug)]
pub struct SpawnAgentTool {
    /// Weak: the registry owns the services that own this tool.
    agents: Weak<AgentRegistry>,
}

impl SpawnAgentTool {
    /// A tool spawning children into `agents`.
    pub fn new(agents: &Arc<AgentRegistry>) -> Self {
        Self {
            agents: Arc::downgrade(agents),
        }
    }
}

impl Tool for SpawnAgentTool {
    fn schema(&self) -> ToolSchema {
        ToolSchema {
            name: SPAWN_AGENT.into(),
            description: "Delegate a self-contained task to a child agent working in the same \
directory. The child runs until it has an answer, which is returned as this call's result. Call it \
several times in one step to run children in parallel."
                .into(),
            parameters: json!({
                "type": "object",
                "properties": {
                    "prompt": {"type": "string", "description": "The complete task for the child."},
                    "description": {"type": "string", "description": "The task in a few words."}
                },
                "required": ["prompt"],
                "additionalProperties": false
            }),
        }
    }

    fn call<'a>(
        &'a self,
        exec: &'a ToolExecution,
        arguments: &'a Value,
    ) -> BoxFuture<'a, ToolOutput> {
        Box::pin(async move {
            let Some(prompt) = arguments
                .get("prompt")
                .and_then(Value::as_str)
                .filter(|p| !p.trim().is_empty())
            else {
                return ToolOutput::error(
                    "Error: spawn_agent: `prompt` is required and must be a non-empty string",
                );
            };
            let (Some(agents), Some(parent_id)) = (self.agents.upgrade(), exec.session_id()) else {
                return ToolOutput::error(
                    "Error: spawn_agent: only an agent can spawn a child agent",
                );
            };
            let parent = match agents.get(parent_id) {
                Ok(parent) => parent,
                Err(error) => return ToolOutput::error(format!("Error: spawn_agent: {error}")),
            };
            // A scripted parent's child replays the script its call carries; any other provider's
            // child uses the same provider and model as the parent.
            let provider = parent.provider();
            let choice = if provider.provider() == scripted::PROVIDER {
                ModelChoice {
                    provider: Some(scripted::PROVIDER.into()),
                    model: None,
                    script: Some(
                        exec.child_script
                            .as_ref()
                            .map_or_else(|| json!({"replies": []}).to_string(), Value::to_string),
                    ),
                }
            } else {
                ModelChoice {
                    provider: Some(provider.provider().to_owned()),
                    model: Some(provider.model().to_owned()),
                    script: None,
                }
            };
            // A good moment to save children whose earlier close could not.
            agents.retry_pending_closes().await;
            let child = match agents.spawn(parent_id, &choice) {
                Ok(child) => child,
                Err(error) => return ToolOutput::error(format!("Error: spawn_agent: {error}")),
            };
            let child_id = child.id().clone();
            let hooks = agents.services().hooks.clone();
            let ctx = HookContext {
                header: parent.header().clone(),
                subagent: None,
                turn: exec.turn,
                model: provider.model().to_owned(),
                cancel: exec.cancel.clone(),
            };
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
            child.log_hook_context(&start.outcome.additional_context);
            let outcome = match agents.prompt(&child_id, prompt.to_owned(), Some(&exec.cancel)) {
                Ok(handle) => handle.outcome.await,
                Err(error) => {
                    let _ = agents.close_child(&child_id).await;
                    return ToolOutput::error(format!("Error: spawn_agent: {error}"));
                }
            };
            let stop = hooks
                .run(
                    &ctx,
                    HookEvent::SubagentStop {
                        child: child.header().clone(),
                        agent_type: AGENT_TYPE.into(),
                        last_assistant_message: outcome.as_ref().ok().map(|o| o.text.clone()),
                    },
                )
                .await;
            for record in stop.records {
                parent.append(record);
            }
            // The child is one-shot: its session stays stored (resumable by id), the agent goes. If
            // it cannot be saved now it stays in memory and is saved by a later close or spawn, or
            // at shutdown.
            if let Err(error) = agents.close_child(&child_id).await {
                tracing::warn!(child = %child_id, %error, "a finished child could not be saved yet; it stays in memory");
            }
            match outcome {
                Ok(outcome) if outcome.reason == TurnEndReason::Completed => {
                    ToolOutput::ok(outcome.text)
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
