//! The agent loop (DESIGN §7): one turn, from the user's prompt to `turn/end`.
//!
//! `turn/start`, then steps until the model answers without tool calls: `step/start`, a model request
//! built from the derived history, `assistant/message`, the step's tool calls (`tool/call` for each,
//! all dispatched concurrently, `tool/result`s committed in the model's order), `step/end`, and a
//! checkpoint. Then `turn/end` and a final checkpoint. Every path — cancellation, a model error, a
//! failed checkpoint, the step limit — ends the turn with a `turn/end` that says why.

use std::sync::Arc;

use serde_json::Value;
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;

use super::live::{Agent, TurnUpdate};
use super::provider::{ModelError, ModelReply, ModelRequest, PlannedCall};
use super::services::{AgentServices, CheckpointPolicy};
use crate::session::history;
use crate::session::{AssistantMessage, EventData, MessageSource, TurnEndReason, UserMessage};
use crate::tools::{ToolExecution, ToolOutput, ToolSet};

/// How a turn ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnOutcome {
    /// The turn number.
    pub turn: u32,
    /// Why it ended.
    pub reason: TurnEndReason,
    /// The last non-empty assistant text of the turn.
    pub text: String,
}

/// Runs turn `turn` of `agent` for `prompt`. The caller has claimed the agent
/// ([`Agent::begin_turn`]) and releases it afterwards.
pub(crate) async fn run(
    agent: Arc<Agent>,
    services: Arc<AgentServices>,
    turn: u32,
    prompt: String,
    cancel: CancellationToken,
    updates: mpsc::UnboundedSender<TurnUpdate>,
) -> TurnOutcome {
    let mut run = TurnRun {
        agent,
        services,
        turn,
        cancel,
        updates,
        text: String::new(),
    };
    let reason = run.steps(prompt).await;
    run.finish(reason).await
}

struct TurnRun {
    agent: Arc<Agent>,
    services: Arc<AgentServices>,
    turn: u32,
    cancel: CancellationToken,
    updates: mpsc::UnboundedSender<TurnUpdate>,
    /// The last non-empty assistant text, the turn's answer.
    text: String,
}

impl TurnRun {
    fn log(&self, data: EventData) {
        self.agent.append(data, &self.updates);
    }

    fn aborted(&self) -> TurnEndReason {
        TurnEndReason::Aborted {
            cause: self.agent.abort_cause(),
        }
    }

    async fn steps(&mut self, prompt: String) -> TurnEndReason {
        let turn = self.turn;
        self.log(EventData::TurnStart { turn });
        self.log(EventData::UserMessage {
            message: UserMessage {
                text: prompt,
                source: MessageSource::User,
            },
        });
        let tools = self.services.tools();
        let mut step = 0;
        loop {
            if self.cancel.is_cancelled() {
                return self.aborted();
            }
            if step >= self.services.max_steps_per_turn {
                return TurnEndReason::Error {
                    message: format!(
                        "the turn reached the limit of {} steps (agent.max_steps_per_turn)",
                        self.services.max_steps_per_turn
                    ),
                };
            }
            step += 1;
            self.log(EventData::StepStart { turn, step });
            let reply = match self.ask_model(step, &tools).await {
                Ok(reply) => reply,
                Err(error) => {
                    self.log(EventData::StepEnd { turn, step });
                    return match error {
                        ModelError::Cancelled => self.aborted(),
                        other => TurnEndReason::Error {
                            message: other.to_string(),
                        },
                    };
                }
            };
            if !reply.text.is_empty() {
                self.text.clone_from(&reply.text);
            }
            self.log(EventData::AssistantMessage {
                turn,
                step,
                message: AssistantMessage {
                    text: reply.text.clone(),
                    tool_calls: reply.calls.iter().map(|c| c.call.clone()).collect(),
                },
                usage: reply.usage,
            });
            let done = reply.calls.is_empty();
            if !done {
                self.run_calls(step, &tools, reply.calls).await;
            }
            self.log(EventData::StepEnd { turn, step });
            if self.cancel.is_cancelled() {
                return self.aborted();
            }
            if self.services.checkpoint == CheckpointPolicy::Step
                && let Err(error) = self.agent.checkpoint(&self.services).await
            {
                return TurnEndReason::Error {
                    message: format!("cannot persist the session: {error}"),
                };
            }
            if done {
                return TurnEndReason::Completed;
            }
        }
    }

    async fn ask_model(&self, step: u32, tools: &ToolSet) -> Result<ModelReply, ModelError> {
        let request = ModelRequest {
            session_id: self.agent.id().clone(),
            system: self.services.system_prompt(),
            messages: self.agent.read_log(|log| history::derive(log.events())),
            tools: tools.schemas(),
        };
        let turn = self.turn;
        let updates = self.updates.clone();
        let on_text = move |text: &str| {
            let _ = updates.send(TurnUpdate::TextDelta {
                turn,
                step,
                text: text.to_owned(),
            });
        };
        let provider = self.agent.provider().clone();
        tokio::select! {
            reply = provider.complete(&request, &self.cancel, &on_text) => reply,
            () = self.cancel.cancelled() => Err(ModelError::Cancelled),
        }
    }

    /// Logs every call, dispatches them concurrently, and commits the results in the model's
    /// order. Cancelled calls still get a result, so the log never has a call without one.
    async fn run_calls(&self, step: u32, tools: &ToolSet, calls: Vec<PlannedCall>) {
        let turn = self.turn;
        let mut tasks = Vec::with_capacity(calls.len());
        for planned in calls {
            let call = planned.call;
            self.log(EventData::ToolCall {
                turn,
                step,
                call_id: call.id.clone(),
                name: call.name.clone(),
                arguments: call.arguments.clone(),
            });
            let exec = ToolExecution {
                call_id: call.id.clone(),
                tool_name: call.name.clone(),
                agent: Some(self.agent.context().clone()),
                turn: Some(turn),
                step: Some(step),
                cwd: self.agent.header().cwd.clone(),
                cancel: self.cancel.child_token(),
                child_script: planned.child_script,
            };
            let tools = tools.clone();
            let arguments = call.arguments;
            let id = call.id;
            tasks.push((
                id,
                tokio::spawn(async move { dispatch(&tools, &exec, &arguments).await }),
            ));
        }
        for (call_id, task) in tasks {
            let output = task.await.unwrap_or_else(|join| {
                ToolOutput::error(format!("Error: the tool failed unexpectedly: {join}"))
            });
            self.log(EventData::ToolResult {
                turn,
                step,
                call_id,
                content: output.content,
                is_error: output.is_error,
                code: None,
            });
        }
    }

    async fn finish(self, reason: TurnEndReason) -> TurnOutcome {
        self.log(EventData::TurnEnd {
            turn: self.turn,
            reason: reason.clone(),
        });
        if let Err(error) = self.agent.checkpoint(&self.services).await {
            // The events stay in memory; the next checkpoint (or shutdown) retries them.
            tracing::error!(session = %self.agent.id(), %error, "cannot persist the session at turn end");
        }
        TurnOutcome {
            turn: self.turn,
            reason,
            text: self.text,
        }
    }
}

/// Runs one call; arguments that are not a JSON object get an error result without running.
async fn dispatch(tools: &ToolSet, exec: &ToolExecution, arguments: &Value) -> ToolOutput {
    if exec.cancel.is_cancelled() {
        return ToolOutput::error("Error: tool call aborted before dispatch");
    }
    if !arguments.is_object() {
        return ToolOutput::error(format!(
            "Error: arguments of {} must be a JSON object, got: {}",
            exec.tool_name,
            truncate(&arguments.to_string(), 200)
        ));
    }
    tools.dispatch(exec, arguments).await
}

fn truncate(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}
