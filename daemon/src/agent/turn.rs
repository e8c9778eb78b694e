//! The agent loop (CONTRACTS §7): one turn, from the user's prompt to `turn/end`.
//!
//! `turn/start`, then steps until the model answers without tool calls: `step/start`, a model request
//! built from the derived history, `assistant/message`, the step's tool calls (`tool/call` for each,
//! all dispatched concurrently, `tool/result`s committed in the model's order), `step/end`, and a
//! checkpoint. Then Stop hooks, `turn/end` and a final checkpoint. Every path — cancellation, a model
//! error, a failed checkpoint, the step limit, a blocking hook — ends the turn with a `turn/end` that
//! says why.
//!
//! Hooks (CONTRACTS §8) run at five points: SessionStart (first turn of a live agent), UserPromptSubmit
//! (may block the turn before any model request), PreToolUse (may deny a call; `ask` fails closed
//! because dsh has no interactive approver), PostToolUse (may replace a result), and Stop (may force
//! another step, up to `hooks.stop_continuation_cap` times). Their context reaches the next model
//! request as user-role messages from the hook plugin.

use std::sync::Arc;

use serde_json::Value;
use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::live::Agent;
use super::provider::{ModelError, ModelReply, ModelRequest, PlannedCall, ToolSchema};
use super::services::{AgentServices, CheckpointPolicy};
use crate::hooks::{Decision, HookContext, HookEvent, HookRun};
use crate::session::{AssistantMessage, EventData, MessageSource, TurnEndReason, UserMessage};
use crate::tools::{ToolExecution, ToolOutput, ToolSet};

/// Plugin name of steering messages from blocking Stop hooks.
const STOP_HOOK_PLUGIN: &str = "hooks";

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
) -> TurnOutcome {
    let span = tracing::info_span!("turn", session = %agent.id(), turn);
    let mut run = TurnRun {
        agent,
        services,
        turn,
        cancel,
    };
    async move {
        tracing::info!("turn started");
        let started = std::time::Instant::now();
        let reason = run.steps(prompt).await;
        let outcome = run.finish(reason).await;
        tracing::info!(
            reason = outcome.reason.kind(),
            detail = outcome.reason.message(),
            duration_ms = started.elapsed().as_millis(),
            "turn ended"
        );
        outcome
    }
    .instrument(span)
    .await
}

struct TurnRun {
    agent: Arc<Agent>,
    services: Arc<AgentServices>,
    turn: u32,
    cancel: CancellationToken,
}

/// Runs `event`'s hooks for `agent` and appends their records to its log.
async fn run_hooks(
    agent: &Agent,
    services: &AgentServices,
    turn: u32,
    cancel: &CancellationToken,
    event: HookEvent,
) -> HookRun {
    let ctx = HookContext {
        header: agent.header().clone(),
        turn: Some(turn),
        model: agent.provider().model().to_owned(),
        cancel: cancel.clone(),
    };
    let run = services.hooks.run(&ctx, event).await;
    for record in &run.records {
        agent.append(record.clone());
    }
    run
}

impl TurnRun {
    fn log(&self, data: EventData) {
        self.agent.append(data);
    }

    fn aborted(&self) -> TurnEndReason {
        TurnEndReason::Aborted {
            cause: self.agent.abort_cause(),
        }
    }

    async fn hooks(&self, event: HookEvent) -> HookRun {
        run_hooks(&self.agent, &self.services, self.turn, &self.cancel, event).await
    }

    async fn steps(&mut self, prompt: String) -> TurnEndReason {
        let turn = self.turn;
        self.log(EventData::TurnStart { turn });
        let mut context = Vec::new();
        if let Some(source) = self.agent.take_session_start() {
            context.extend(
                self.hooks(HookEvent::SessionStart { source })
                    .await
                    .outcome
                    .additional_context,
            );
        }
        let submit = self
            .hooks(HookEvent::UserPromptSubmit {
                prompt: prompt.clone(),
            })
            .await
            .outcome;
        if self.cancel.is_cancelled() {
            return self.aborted();
        }
        if submit.decision >= Decision::Ask {
            return TurnEndReason::Blocked {
                reason: submit
                    .reason
                    .unwrap_or_else(|| "blocked by UserPromptSubmit hook".into()),
            };
        }
        context.extend(submit.additional_context);
        self.log(EventData::UserMessage {
            message: UserMessage {
                text: prompt,
                source: MessageSource::User,
            },
        });
        self.agent.log_hook_context(&context);

        let tools = self.services.tools();
        let mut step = 0;
        let mut stop_hook_active = false;
        let mut continuations = 0;
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
            // The text moves into the log: a long reply is held once, not once per owner.
            self.log(EventData::AssistantMessage {
                turn,
                step,
                message: AssistantMessage {
                    text: reply.text,
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
            if !done {
                continue;
            }
            let stop = self
                .hooks(HookEvent::Stop {
                    stop_hook_active,
                    last_assistant_message: Some(self.answer()),
                })
                .await
                .outcome;
            if self.cancel.is_cancelled() {
                return self.aborted();
            }
            if stop.decision < Decision::Ask {
                return TurnEndReason::Completed;
            }
            if continuations >= self.services.hooks.stop_continuation_cap() {
                tracing::warn!(
                    session = %self.agent.id(),
                    cap = continuations,
                    "Stop hooks keep blocking; ending the turn at the continuation cap"
                );
                return TurnEndReason::Completed;
            }
            continuations += 1;
            stop_hook_active = true;
            self.log(EventData::UserMessage {
                message: UserMessage {
                    text: stop
                        .reason
                        .unwrap_or_else(|| "continue: blocked by Stop hook".into()),
                    source: MessageSource::Plugin {
                        plugin: STOP_HOOK_PLUGIN.to_owned(),
                    },
                },
            });
        }
    }

    /// The tools the model is offered: all of them, except `spawn_agent` for an agent already at
    /// the deepest delegation level (its children would be refused anyway).
    fn offered(&self, tools: &ToolSet) -> Vec<ToolSchema> {
        let at_limit = self.agent.header().delegation_depth >= self.services.limits.max_depth;
        tools
            .schemas()
            .into_iter()
            .filter(|t| !(at_limit && t.name == crate::tools::SPAWN_AGENT))
            .collect()
    }

    async fn ask_model(&self, step: u32, tools: &ToolSet) -> Result<ModelReply, ModelError> {
        let request = ModelRequest {
            session_id: self.agent.id().clone(),
            system: self.services.system_prompt(),
            messages: self.agent.history(),
            tools: self.offered(tools),
        };
        let turn = self.turn;
        let agent = self.agent.clone();
        let on_text = move |text: &str| agent.stream_text(turn, step, text);
        let provider = self.agent.provider().clone();
        tokio::select! {
            reply = provider.complete(&request, &self.cancel, &on_text) => reply,
            () = self.cancel.cancelled() => Err(ModelError::Cancelled),
        }
    }

    /// Logs every call, dispatches them concurrently, and commits the results in the model's
    /// order, followed by any PostToolUse context. Cancelled calls still get a result, so the log
    /// never has a call without one.
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
            let (agent, services, tools) =
                (self.agent.clone(), self.services.clone(), tools.clone());
            let arguments = call.arguments;
            let span = tracing::info_span!(
                "tool_call",
                session = %self.agent.id(),
                turn,
                step,
                call_id = %call.id,
                tool = %call.name
            );
            tasks.push((
                call.id,
                tokio::spawn(
                    async move {
                        let started = std::time::Instant::now();
                        let result =
                            guarded_call(&agent, &services, &tools, &exec, &arguments).await;
                        tracing::info!(
                            is_error = result.0.is_error,
                            duration_ms = started.elapsed().as_millis(),
                            "tool call ended"
                        );
                        result
                    }
                    .instrument(span),
                ),
            ));
        }
        let mut context = Vec::new();
        for (call_id, task) in tasks {
            let (output, more) = task.await.unwrap_or_else(|join| {
                (
                    ToolOutput::error(format!("Error: the tool failed unexpectedly: {join}")),
                    Vec::new(),
                )
            });
            context.extend(more);
            self.log(EventData::ToolResult {
                turn,
                step,
                call_id,
                content: output.content,
                is_error: output.is_error,
                code: None,
            });
        }
        self.agent.log_hook_context(&context);
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
            text: self.answer(),
        }
    }

    /// The turn's answer so far: its last non-empty assistant text.
    fn answer(&self) -> String {
        self.agent
            .read_log(|log| log.turn_answer(self.turn).to_owned())
    }
}

/// One call between its PreToolUse and PostToolUse hooks. Returns the result and any context the
/// hooks added.
async fn guarded_call(
    agent: &Agent,
    services: &AgentServices,
    tools: &ToolSet,
    exec: &ToolExecution,
    arguments: &Value,
) -> (ToolOutput, Vec<(&'static str, String)>) {
    let turn = exec.turn.unwrap_or(0);
    let pre = run_hooks(
        agent,
        services,
        turn,
        &exec.cancel,
        HookEvent::PreToolUse {
            tool_name: exec.tool_name.clone(),
            tool_input: arguments.clone(),
            tool_use_id: exec.call_id.clone(),
        },
    )
    .await
    .outcome;
    let output = match pre.decision {
        Decision::Deny => ToolOutput::error(format!(
            "Error: {}",
            pre.reason
                .unwrap_or_else(|| "blocked by PreToolUse hook".into())
        )),
        // dsh has no interactive approver, so a request for approval fails closed.
        Decision::Ask => ToolOutput::error(format!(
            "Error: {} (approval was required and no approver is available, so the call was denied)",
            pre.reason
                .unwrap_or_else(|| "approval required by PreToolUse hook".into())
        )),
        Decision::None | Decision::Allow => dispatch(tools, exec, arguments).await,
    };
    if pre.decision >= Decision::Ask {
        return (output, Vec::new());
    }
    let post = run_hooks(
        agent,
        services,
        turn,
        &exec.cancel,
        HookEvent::PostToolUse {
            tool_name: exec.tool_name.clone(),
            tool_input: arguments.clone(),
            tool_use_id: exec.call_id.clone(),
            tool_response: Value::String(output.content.clone()),
        },
    )
    .await
    .outcome;
    let output = if post.decision >= Decision::Ask {
        ToolOutput::error(
            post.reason
                .unwrap_or_else(|| "blocked by PostToolUse hook".into()),
        )
    } else {
        output
    };
    (output, post.additional_context)
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
