//! `spawn_agent`: the model delegates a task to a child agent, which runs its own turn in its own
//! session; the parent's tool result is the child's final answer. Several children of one step run
//! at once (the loop dispatches a step's calls concurrently).
//!
//! The tool only checks its arguments; running the child is the agent layer's business, reached
//! through the narrow [`ChildAgents`] seam it is given at construction.

use std::sync::Weak;

use serde_json::{Value, json};

use crate::call::{BoxFuture, SPAWN_AGENT, Tool, ToolExecution, ToolOutput, ToolSchema};

/// What `spawn_agent` needs from the agents: running one child of the calling agent to its end.
pub trait ChildAgents: Send + Sync + std::fmt::Debug {
    /// Runs `prompt` as a new child of the agent making `exec`, and returns the child's final
    /// answer as the tool result (or an error result saying why there is none).
    fn run_child<'a>(
        &'a self,
        exec: &'a ToolExecution,
        prompt: &'a str,
    ) -> BoxFuture<'a, ToolOutput>;
}

/// The `spawn_agent` tool.
#[derive(Debug)]
pub(crate) struct SpawnAgentTool {
    /// Weak: the agents own the services that own this tool.
    agents: Weak<dyn ChildAgents>,
}

impl SpawnAgentTool {
    /// A tool spawning children through `agents`.
    pub(crate) fn new(agents: Weak<dyn ChildAgents>) -> Self {
        Self { agents }
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
            // The agents check that the caller is one (`run_child`); gone, they spawn nothing.
            let Some(agents) = self.agents.upgrade() else {
                return ToolOutput::error(
                    "Error: spawn_agent: only an agent can spawn a child agent",
                );
            };
            agents.run_child(exec, prompt).await
        })
    }
}
