//! One tool call of a turn, between its PreToolUse and PostToolUse hooks and, when the agent's
//! approval policy or a hook's `ask` wants it, after a person's approval.

use std::sync::Arc;

use serde_json::Value;

use super::approval;
use super::hook_run::{run_hooks, stop_text};
use super::live::Agent;
use super::services::AgentServices;
use crate::call::{Preview, ToolExecution, ToolOutput};
use crate::hooks::{Decision, EventName, HookEvent, MergedOutcome};
use crate::tools::ToolSet;
use dsh_session::{ApprovalPolicy, EventData};

/// How one call ended: its result, what its hooks tell the model, and whether a hook stopped the
/// turn.
pub(super) struct CallEnd {
    pub output: ToolOutput,
    /// Context and feedback for the model, by plugin, logged after the step's results.
    pub messages: Vec<(&'static str, String)>,
    /// A hook's `continue: false`: the turn ends after this step.
    pub stop: Option<String>,
}

/// One call between its PreToolUse and PostToolUse hooks.
pub(super) async fn guarded_call(
    agent: &Arc<Agent>,
    services: &AgentServices,
    tools: &ToolSet,
    exec: &ToolExecution,
    arguments: &Value,
) -> CallEnd {
    let pre = run_hooks(
        agent,
        services,
        exec.turn,
        &exec.cancel,
        HookEvent::PreToolUse {
            tool_name: exec.tool_name.clone(),
            tool_input: arguments.clone(),
            tool_use_id: exec.call_id.clone(),
        },
    )
    .await
    .outcome;
    // PreToolUse context is for the model whether or not the call runs (Codex keeps it beside a
    // deny; Claude Code adds it "before the tool executes").
    let mut messages = pre.additional_context;
    let refused = |output| CallEnd {
        output,
        messages: messages.clone(),
        stop: None,
    };
    if pre.stop {
        let reason = stop_text(pre.stop_reason, EventName::PreToolUse);
        return CallEnd {
            output: ToolOutput::refused(format!(
                "Error: the call was not run: a PreToolUse hook stopped the turn ({reason})"
            )),
            messages,
            stop: Some(reason),
        };
    }
    match pre.decision {
        Decision::Deny => {
            return refused(ToolOutput::refused(format!(
                "Error: {}",
                pre.reason
                    .unwrap_or_else(|| "blocked by PreToolUse hook".into())
            )));
        }
        Decision::Ask | Decision::None | Decision::Allow => {}
    }
    let hook_asks = (pre.decision == Decision::Ask).then(|| {
        pre.reason
            .clone()
            .unwrap_or_else(|| "approval required by PreToolUse hook".into())
    });
    let policy = agent.approval();
    if let (Some(reason), ApprovalPolicy::Never) = (&hook_asks, policy) {
        // Nobody may be asked, so a request for approval fails closed.
        return refused(ToolOutput::refused(format!(
            "Error: {reason} (approval was required and the approval policy is `never`, so nobody was asked and the call was denied)"
        )));
    }
    let arguments = match pre.updated_input {
        // The log keeps both: the model's arguments in `tool/call`, what ran here.
        Some(updated) => {
            agent.append(EventData::ToolRewritten {
                turn: exec.turn.unwrap_or(0),
                step: exec.step.unwrap_or(0),
                call_id: exec.call_id.clone(),
                arguments: updated.clone(),
            });
            updated
        }
        None => arguments.clone(),
    };
    // What runs is what is approved (a hook's rewrite included); a file change is shown as the
    // change, and only that change is then made.
    let mut approved = None;
    if let Some(reason) = approval::needed(policy, &exec.tool_name, hook_asks.as_deref()) {
        let change = tools.preview(exec, &arguments).await;
        if let Err(denied) =
            approval::ask(agent, services, exec, &arguments, change.as_ref(), reason).await
        {
            return CallEnd {
                output: ToolOutput::refused(denied),
                messages,
                stop: None,
            };
        }
        approved = change;
    }
    let started = std::time::Instant::now();
    let mut output = dispatch(tools, exec, &arguments, approved.as_ref()).await;
    let duration_ms = u64::try_from(started.elapsed().as_millis()).unwrap_or(u64::MAX);
    if !output.ran {
        return CallEnd {
            output,
            messages,
            stop: None,
        };
    }
    let post = after_call(agent, services, exec, arguments, &output, duration_ms).await;
    if let Some(replacement) = post.replacement {
        output.content = replacement;
    }
    messages.extend(post.additional_context);
    messages.extend(post.feedback.into_iter().map(|(plugin, reason)| {
        (
            plugin,
            format!(
                "PostToolUse hook feedback on tool call {}: {reason}",
                exec.call_id
            ),
        )
    }));
    let stop = post
        .stop
        .then(|| stop_text(post.stop_reason, EventName::PostToolUse));
    CallEnd {
        output,
        messages,
        stop,
    }
}

/// The hooks after a call that ran: PostToolUse (Codex for every call, Claude Code for one that
/// succeeded) and, for a failed call (non-zero exit, timeout, interrupt, an error result),
/// Claude Code's PostToolUseFailure with the error the model is shown. Their outcomes are merged:
/// only one of the two has Claude Code handlers.
async fn after_call(
    agent: &Arc<Agent>,
    services: &AgentServices,
    exec: &ToolExecution,
    arguments: Value,
    output: &ToolOutput,
    duration_ms: u64,
) -> MergedOutcome {
    let failure = output.is_error.then(|| HookEvent::PostToolUseFailure {
        tool_name: exec.tool_name.clone(),
        tool_input: arguments.clone(),
        tool_use_id: exec.call_id.clone(),
        error: output.content.clone(),
        is_interrupt: exec.cancel.is_cancelled(),
        duration_ms,
    });
    let mut post = run_hooks(
        agent,
        services,
        exec.turn,
        &exec.cancel,
        HookEvent::PostToolUse {
            tool_name: exec.tool_name.clone(),
            tool_input: arguments,
            tool_use_id: exec.call_id.clone(),
            tool_response: output.clone(),
            duration_ms,
        },
    )
    .await
    .outcome;
    if let Some(failure) = failure {
        let failed = run_hooks(agent, services, exec.turn, &exec.cancel, failure)
            .await
            .outcome;
        post.additional_context.extend(failed.additional_context);
        post.feedback.extend(failed.feedback);
        post.system_messages.extend(failed.system_messages);
        if failed.stop && !post.stop {
            post.stop = true;
            post.stop_reason = failed.stop_reason;
        }
    }
    post
}

/// Runs one call; arguments that are not a JSON object get an error result without running.
async fn dispatch(
    tools: &ToolSet,
    exec: &ToolExecution,
    arguments: &Value,
    approved: Option<&Preview>,
) -> ToolOutput {
    if exec.cancel.is_cancelled() {
        return ToolOutput::refused("Error: tool call aborted before dispatch");
    }
    if !arguments.is_object() {
        return ToolOutput::refused(format!(
            "Error: arguments of {} must be a JSON object, got: {}",
            exec.tool_name,
            truncate(&arguments.to_string(), 200)
        ));
    }
    tools.dispatch(exec, arguments, approved).await
}

fn truncate(text: &str, max: usize) -> &str {
    match text.char_indices().nth(max) {
        Some((i, _)) => &text[..i],
        None => text,
    }
}
