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
//! (may block the turn before any model request), PreToolUse (may deny a call, rewrite its input,
//! or ask for a person's approval, see [`super::approval`]), PostToolUse (may add
//! feedback to a result or, for Codex, replace it), and Stop (may force another step, up to
//! `hooks.stop_continuation_cap` times). A hook's `continue: false` ends the turn `stopped` where its
//! harness stops. Their context and feedback reach the next model request as user-role messages
//! from the hook plugin. SessionEnd runs when a top-level agent is closed ([`session_end`]).

use std::sync::Arc;

use super::instructions;

use tokio_util::sync::CancellationToken;
use tracing::Instrument;

use super::gauge;
use super::guard::{CallEnd, guarded_call};
use super::hook_run::{run_hooks, stop_text};
use super::live::Agent;
use super::provider::{ModelError, ModelProgress, ModelReply, ModelRequest, ModelRetry};
use super::services::{AgentServices, CheckpointPolicy};
use crate::call::{SPAWN_AGENT, ToolDetail, ToolExecution, ToolOutput, ToolSchema};
use crate::hooks::{
    Decision, EventName, HookEvent, HookRun, NotificationKind, SessionEndReason, StopFailureKind,
};
use crate::tools::ToolSet;
use dsh_session::ToolCallRequest;
use dsh_session::{AssistantMessage, EventData, MessageSource, TurnEndReason, Usage, UserMessage};

mod compact;

use compact::{MeasuredRequest, StepFailure};

/// Plugin name of steering messages from blocking Stop hooks.
const STOP_HOOK_PLUGIN: &str = "hooks";

/// How a turn ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TurnOutcome {
    /// The turn number.
    pub turn: u32,
    /// Why it ended.
    pub reason: TurnEndReason,
    /// The seq of the `assistant/message` holding the turn's answer (its last non-empty assistant
    /// text), `None` when it has none. A seq, not the text: the log holds the answer already,
    /// and a caller that needs it reads it with [`Agent::turn_answer`](super::Agent::turn_answer)
    /// (a second copy of a long reply is what a caller that drops the outcome should not pay).
    pub answer_seq: Option<u64>,
    /// The turn's token usage (the sum of its steps'), when the provider reported any.
    pub usage: Option<Usage>,
}

/// What a turn is for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum TurnInput {
    /// A person's prompt.
    Prompt(String),
    /// A person asked for the context to be compacted (`Agents.Compact`), with instructions for
    /// the summary: the turn holds the compaction alone (as Codex runs its compact task as a
    /// turn), so it is cancelled, watched and stored like any other.
    Compact {
        /// What the summary should keep or stress.
        instructions: Option<String>,
    },
}

/// Runs turn `turn` of `agent` for `input`. The caller has claimed the agent
/// ([`Agent::begin_turn`]) and releases it afterwards.
pub(crate) async fn run(
    agent: Arc<Agent>,
    services: Arc<AgentServices>,
    turn: u32,
    input: TurnInput,
    cancel: CancellationToken,
) -> TurnOutcome {
    let span = tracing::info_span!("turn", session = %agent.id(), turn);
    let mut run = TurnRun {
        agent,
        services,
        turn,
        cancel,
        failure: StopFailureKind::Unknown,
    };
    async move {
        tracing::info!("turn started");
        let started = std::time::Instant::now();
        let reason = match input {
            TurnInput::Prompt(prompt) => run.steps(prompt).await,
            TurnInput::Compact { instructions } => run.compact_only(instructions).await,
        };
        // StopFailure runs for a turn that failed, the step limit included (it did before the
        // limit had a reason of its own).
        if matches!(
            reason,
            TurnEndReason::Error { .. } | TurnEndReason::StepLimit { .. }
        ) {
            run.stop_failure(&reason.message()).await;
        }
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

/// What the model reports while it answers one step, handed to the agent's watchers.
struct StepProgress<'a> {
    agent: &'a Agent,
    turn: u32,
    step: u32,
}

impl ModelProgress for StepProgress<'_> {
    fn text(&self, text: &str) {
        self.agent.stream_text(self.turn, self.step, text);
    }

    fn thought(&self, text: &str) {
        self.agent.stream_thought(self.turn, self.step, text);
    }

    fn retry(&self, retry: &ModelRetry) {
        self.agent.stream_retry(self.turn, self.step, retry);
    }
}

struct TurnRun {
    agent: Arc<Agent>,
    services: Arc<AgentServices>,
    turn: u32,
    cancel: CancellationToken,
    /// What kind of error the model request that ended the turn failed with (StopFailure's
    /// `error`); `unknown` for every other error.
    failure: StopFailureKind,
}

/// StopFailure's `error` for a model error, in Claude Code's vocabulary.
fn failure_kind(error: &ModelError) -> StopFailureKind {
    match error {
        ModelError::RateLimited { .. } => StopFailureKind::RateLimit,
        ModelError::MissingKey { .. } | ModelError::Unauthorized { .. } => {
            StopFailureKind::AuthenticationFailed
        }
        ModelError::Http { status, .. } if *status >= 500 => StopFailureKind::ServerError,
        ModelError::Http { .. } | ModelError::ContextOverflow { .. } => {
            StopFailureKind::InvalidRequest
        }
        ModelError::Transport(_) | ModelError::IdleTimeout { .. } | ModelError::Malformed(_) => {
            StopFailureKind::ServerError
        }
        ModelError::ScriptExhausted { .. } | ModelError::Cancelled => StopFailureKind::Unknown,
    }
}

/// How a turn ends when a hook of `event` said `continue: false`.
fn stopped(stop_reason: Option<String>, event: EventName) -> TurnEndReason {
    TurnEndReason::Stopped {
        reason: stop_text(stop_reason, event),
    }
}

/// Runs SessionEnd hooks for `agent`, which is being closed, once its turn is over and before its
/// final checkpoint (so their records are saved with it; the transcript they are pointed at holds
/// everything up to the last turn). Children are skipped: neither harness runs SessionEnd for a
/// subagent, whose end is its SubagentStop. Nothing a SessionEnd hook says changes the close.
pub(crate) async fn session_end(agent: &Arc<Agent>, services: &AgentServices) {
    if agent.parent().is_some() {
        return;
    }
    let event = HookEvent::SessionEnd {
        reason: SessionEndReason::Other,
    };
    run_hooks(agent, services, None, &CancellationToken::new(), event).await;
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
        run_hooks(
            &self.agent,
            &self.services,
            Some(self.turn),
            &self.cancel,
            event,
        )
        .await
    }

    /// Claude Code's StopFailure: the turn ends in an error. Its hooks only observe (their output
    /// and exit codes change nothing) and run before `turn/end`, so their records are the turn's.
    async fn stop_failure(&self, message: &str) {
        let cwd = &self.agent.header().cwd;
        if !self
            .services
            .hooks
            .handles(EventName::StopFailure, cwd)
            .await
        {
            return;
        }
        let answer = self.agent.turn_answer(self.turn);
        self.hooks(HookEvent::StopFailure {
            kind: self.failure,
            details: message.to_owned(),
            last_assistant_message: (!answer.is_empty()).then_some(answer),
        })
        .await;
    }

    async fn steps(&mut self, prompt: String) -> TurnEndReason {
        let turn = self.turn;
        let loaded = if turn == 1 {
            instructions::load_into(&self.agent, &self.services, &self.cancel).await
        } else {
            Vec::new()
        };
        self.log(EventData::TurnStart { turn });
        let mut context = Vec::new();
        if let Some(source) = self.agent.take_session_start() {
            let run = self.hooks(HookEvent::SessionStart { source }).await;
            self.agent.add_env(&self.services.executor, &run.env);
            let start = run.outcome;
            self.retitle(start.session_title.as_deref());
            context.extend(start.additional_context);
            if start.stop {
                // The session started: its context stays for later turns; this prompt is not
                // processed (Codex: "Codex ends the turn without sending another model request").
                self.agent.log_hook_context(&context);
                return stopped(start.stop_reason, EventName::SessionStart);
            }
        }
        // Claude Code's InstructionsLoaded, once per file: it observes.
        for (file_path, memory_type) in loaded {
            self.hooks(HookEvent::InstructionsLoaded {
                file_path,
                memory_type,
                load_reason: "session_start",
            })
            .await;
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
        // `continue: false` takes precedence over a block (Claude Code: "Takes precedence over any
        // event-specific decision fields"). Either way the prompt is not part of the conversation;
        // the context that survives it (SessionStart's, Codex's) is.
        context.extend(submit.additional_context);
        if submit.stop || submit.decision >= Decision::Ask {
            self.agent.log_hook_context(&context);
            if submit.stop {
                return stopped(submit.stop_reason, EventName::UserPromptSubmit);
            }
            return TurnEndReason::Blocked {
                reason: submit
                    .reason
                    .unwrap_or_else(|| "blocked by UserPromptSubmit hook".into()),
            };
        }
        self.log(EventData::UserMessage {
            message: UserMessage {
                text: prompt,
                source: MessageSource::User,
            },
        });
        self.agent.log_hook_context(&context);
        // What background hooks said since the last turn (Claude Code delivers it then).
        self.agent.log_background_context();

        let tools = self.tools().await;
        let mut step = 0;
        let mut stop_hook_active = false;
        let mut continuations = 0;
        loop {
            if self.cancel.is_cancelled() {
                return self.aborted();
            }
            if step >= self.services.max_steps_per_turn {
                return TurnEndReason::StepLimit {
                    limit: self.services.max_steps_per_turn,
                };
            }
            // A step boundary: what was steered meanwhile reaches this request.
            self.deliver_steers(false);
            let request = match self.compact_if_full(&tools).await {
                Ok(request) => request,
                Err(end) => return end,
            };
            step += 1;
            self.log(EventData::StepStart { turn, step });
            let reply = match self.ask_model_or_compact(step, &tools, request).await {
                Ok(reply) => reply,
                Err(StepFailure::Ended(reason)) => {
                    self.log(EventData::StepEnd { turn, step });
                    return reason;
                }
                Err(StepFailure::Model(error)) => {
                    self.log(EventData::StepEnd { turn, step });
                    self.failure = failure_kind(&error);
                    return match error {
                        ModelError::Cancelled => self.aborted(),
                        other => TurnEndReason::Error {
                            message: other.to_string(),
                        },
                    };
                }
            };
            // What the model reasoned comes first, as it did; it is never sent back to it.
            if !reply.reasoning.is_empty() {
                self.log(EventData::AssistantThought {
                    turn,
                    step,
                    text: reply.reasoning,
                });
            }
            // The text moves into the log: a long reply is held once, not once per owner.
            self.log(EventData::AssistantMessage {
                turn,
                step,
                message: AssistantMessage {
                    text: reply.text,
                    tool_calls: reply.calls.clone(),
                },
                usage: reply.usage,
            });
            let done = reply.calls.is_empty();
            let mut stop = None;
            if !done {
                stop = self.run_calls(step, &tools, reply.calls).await;
            }
            self.log(EventData::StepEnd { turn, step });
            if self.cancel.is_cancelled() {
                return self.aborted();
            }
            if let Some(reason) = stop {
                return TurnEndReason::Stopped { reason };
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
            // Copied only for a hook that reads it: the log already holds the answer once.
            let last_assistant_message = self
                .services
                .hooks
                .handles(EventName::Stop, &self.agent.header().cwd)
                .await
                .then(|| self.agent.turn_answer(turn));
            let stop = self
                .hooks(HookEvent::Stop {
                    stop_hook_active,
                    last_assistant_message,
                })
                .await
                .outcome;
            if self.cancel.is_cancelled() {
                return self.aborted();
            }
            // `continue: false` takes precedence over a block in both references.
            if stop.stop {
                return stopped(stop.stop_reason, EventName::Stop);
            }
            if stop.decision < Decision::Ask {
                // Steered while the model answered: the model answers the steer in another
                // step instead of the turn ending over it.
                if self.deliver_steers(true) {
                    continue;
                }
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

    /// The tools of this turn: dshd's own and its MCP servers' (started now if they are not
    /// running; a child gets only the servers configured with `children`). A cancel while they
    /// start stops the starts (their processes are killed) and the turn ends at its first check.
    async fn tools(&self) -> ToolSet {
        let context = self.agent.context().clone();
        let mcp = tokio::select! {
            tools = self.services.mcp.tools(&context) => tools,
            () = self.cancel.cancelled() => Vec::new(),
        };
        mcp.into_iter()
            .fold(self.services.tools.clone(), ToolSet::with)
    }

    /// The tools the model is offered: all of them, except `spawn_agent` for an agent already at
    /// the deepest delegation level (its children would be refused anyway).
    fn offered(&self, tools: &ToolSet) -> Vec<ToolSchema> {
        let at_limit = self.agent.header().delegation_depth >= self.services.limits.max_depth;
        tools
            .schemas()
            .into_iter()
            .filter(|t| !(at_limit && t.name == SPAWN_AGENT))
            .collect()
    }

    /// The request the next step sends, from the history as the log says it is now.
    fn request(&self, tools: &ToolSet) -> ModelRequest {
        ModelRequest {
            session_id: self.agent.id().clone(),
            system: self.services.system_prompt(),
            messages: self.agent.history(),
            tools: self.offered(tools),
        }
    }

    /// [`request`](Self::request), measured when a figure comes of it (a known window, or the
    /// provider's usage): the scripted model's long turns pay nothing per step for it.
    fn measured_request(&self, tools: &ToolSet) -> MeasuredRequest {
        let request = self.request(tools);
        let bytes = self
            .agent
            .provider()
            .context_window()
            .map(|_| gauge::request_bytes(&request));
        MeasuredRequest { request, bytes }
    }

    async fn ask_model(
        &self,
        step: u32,
        MeasuredRequest { request, bytes }: &MeasuredRequest,
    ) -> Result<ModelReply, ModelError> {
        let provider = self.agent.provider();
        if let Some(bytes) = *bytes {
            self.agent.gauge(|g| g.sending(bytes));
        }
        let progress = StepProgress {
            agent: &self.agent,
            turn: self.turn,
            step,
        };
        let reply = tokio::select! {
            reply = provider.complete(request, &self.cancel, &progress) => reply,
            () = self.cancel.cancelled() => Err(ModelError::Cancelled),
        };
        if let Ok(ModelReply {
            usage: Some(usage), ..
        }) = &reply
        {
            let bytes = bytes.unwrap_or_else(|| gauge::request_bytes(request));
            self.agent.gauge(|g| g.observe(bytes, usage));
        }
        reply
    }

    /// Logs every call, dispatches them concurrently, and commits the results in the model's
    /// order, followed by any hook context and feedback. Cancelled calls still get a result, so
    /// the log never has a call without one. Returns the stop reason when a hook said
    /// `continue: false` (the first in the model's order).
    async fn run_calls(
        &self,
        step: u32,
        tools: &ToolSet,
        calls: Vec<ToolCallRequest>,
    ) -> Option<String> {
        let turn = self.turn;
        let mut tasks = Vec::with_capacity(calls.len());
        for call in calls {
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
                output: self
                    .services
                    .tool_output
                    .then(|| self.agent.output_tap(turn, step, &call.id)),
            };
            let (agent, services, tools) =
                (self.agent.clone(), self.services.clone(), tools.clone());
            let arguments = call.arguments;
            // A child of the `turn` span, which names the session and the turn: the line
            // carries each id once.
            let span = tracing::info_span!(
                "tool_call",
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
                            is_error = result.output.is_error,
                            duration_ms = started.elapsed().as_millis(),
                            "tool call ended"
                        );
                        result
                    }
                    .instrument(span),
                ),
            ));
        }
        let mut messages = Vec::new();
        let mut stop = None;
        for (call_id, task) in tasks {
            let end = task.await.unwrap_or_else(|join| CallEnd {
                output: ToolOutput::error(format!("Error: the tool failed unexpectedly: {join}")),
                messages: Vec::new(),
                stop: None,
            });
            messages.extend(end.messages);
            if stop.is_none() {
                stop = end.stop;
            }
            let file = file_event(turn, step, &call_id, end.output.detail.as_ref());
            let exit_code = match &end.output.detail {
                Some(ToolDetail::Command {
                    exit_code,
                    interrupted: false,
                    ..
                }) => *exit_code,
                _ => None,
            };
            self.log(EventData::ToolResult {
                turn,
                step,
                call_id,
                content: end.output.content,
                is_error: end.output.is_error,
                code: None,
                exit_code,
            });
            if let Some(file) = file {
                self.log(file);
            }
        }
        self.agent.log_hook_context(&messages);
        stop
    }

    /// Logs the queued steers as user messages (`source: steer`), in the order they came;
    /// whether there were any. With `last`, an empty queue closes it for this turn.
    fn deliver_steers(&self, last: bool) -> bool {
        let steers = self.agent.take_steers(last);
        let any = !steers.is_empty();
        for text in steers {
            self.log(EventData::UserMessage {
                message: UserMessage {
                    text,
                    source: MessageSource::Steer,
                },
            });
        }
        any
    }

    async fn finish(self, reason: TurnEndReason) -> TurnOutcome {
        // A turn that ends otherwise (cancelled, failed, stopped) keeps what was steered into
        // it: logged before its end, so the next turn's model request has it.
        self.deliver_steers(true);
        let (answer_seq, usage) = self.agent.read_log(|log| {
            (
                log.turn_answer_seq(self.turn),
                Usage::of_turn(log.events(), self.turn),
            )
        });
        self.log(EventData::TurnEnd {
            turn: self.turn,
            reason: reason.clone(),
            answer_seq,
            usage,
        });
        if let Err(error) = self.agent.checkpoint(&self.services).await {
            // The events stay in memory; the next checkpoint (or shutdown) retries them.
            tracing::error!(session = %self.agent.id(), %error, "cannot persist the session at turn end");
        }
        self.notify_when_idle();
        TurnOutcome {
            turn: self.turn,
            reason,
            answer_seq,
            usage,
        }
    }
}

impl TurnRun {
    /// Claude Code's SessionStart `sessionTitle`: the session's title, checked as a person's is
    /// (one line, at most 200 characters); one that is not is left out, and dshd's log says why.
    fn retitle(&self, title: Option<&str>) {
        let Some(title) = title else {
            return;
        };
        match dsh_session::check_title(title) {
            Ok(title) => self.log(EventData::SessionTitle { title }),
            Err(error) => tracing::warn!(
                session = %self.agent.id(),
                "a SessionStart hook's sessionTitle was not used: {error}"
            ),
        }
    }

    /// Claude Code's Notification `idle_prompt`: when this top-level agent is still waiting for
    /// its next prompt `hooks.idle_prompt_ms` after this turn, once. A prompt, a close or a
    /// dshd shutdown in the meantime ends the wait; a child agent (one turn, its parent's call)
    /// never waits for a person.
    fn notify_when_idle(&self) {
        if self.agent.parent().is_some() {
            return;
        }
        let (agent, services, turn) = (self.agent.clone(), self.services.clone(), self.turn);
        let closed = agent.background_token();
        tokio::spawn(async move {
            if !services
                .hooks
                .handles(EventName::Notification, &agent.header().cwd)
                .await
            {
                return;
            }
            tokio::select! {
                () = tokio::time::sleep(services.hooks.settings().idle_prompt) => {}
                () = closed.cancelled() => return,
            }
            if agent.last_turn() != turn || agent.is_busy() {
                return;
            }
            run_hooks(
                &agent,
                &services,
                None,
                &closed,
                HookEvent::Notification {
                    kind: NotificationKind::IdlePrompt,
                    message: services.hooks.idle_message(),
                    title: "Waiting for input".to_owned(),
                },
            )
            .await;
        });
    }
}

/// The `tool/file` event of a file tool's call: the file, the kind, and a change's diff and
/// hashes.
fn file_event(
    turn: u32,
    step: u32,
    call_id: &str,
    detail: Option<&ToolDetail>,
) -> Option<EventData> {
    let Some(ToolDetail::File { path, kind, change }) = detail else {
        return None;
    };
    let texts = change.as_ref().filter(|c| {
        c.new_text.len() + c.old_text.as_ref().map_or(0, String::len)
            <= crate::call::FILE_EVENT_TEXT_BYTES
    });
    Some(EventData::ToolFile {
        turn,
        step,
        call_id: call_id.to_owned(),
        path: path.to_string_lossy().into_owned(),
        kind: *kind,
        diff: change.as_ref().map(|c| c.diff.clone()),
        old_hash: change.as_ref().and_then(|c| c.old_hash.clone()),
        new_hash: change.as_ref().map(|c| c.new_hash.clone()),
        old_text: texts.as_ref().and_then(|c| c.old_text.clone()),
        new_text: texts.map(|c| c.new_text.clone()),
    })
}
