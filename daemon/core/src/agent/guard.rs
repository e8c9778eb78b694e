//! One tool call of a turn, between its PreToolUse and PostToolUse hooks and, when the agent's
//! approval policy or a hook's `ask` wants it, after a person's approval. A call denied before it
//! ran (by a hook, the policy or a person) fires Claude Code's PermissionDenied.

use std::sync::Arc;

use serde_json::Value;

use super::approval;
use super::hook_run::{run_hooks, stop_text};
use super::live::Agent;
use super::services::AgentServices;
use crate::call::{Preview, ToolExecution, ToolOutput};
use crate::hooks::{Decision, Dialect, EventName, HookEvent, MergedOutcome};
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
            let why = pre
                .reason
                .unwrap_or_else(|| "blocked by PreToolUse hook".into());
            return denied(agent, services, exec, arguments, why, messages).await;
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
        let why = format!(
            "{reason} (approval was required and the approval policy is `never`, so nobody was asked and the call was denied)"
        );
        return denied(agent, services, exec, arguments, why, messages).await;
    }
    let mut arguments = match pre.updated_input {
        Some(updated) => rewritten(agent, exec, updated),
        None => arguments.clone(),
    };
    // What runs is what is approved (a hook's rewrite included); a file change is shown as the
    // change, and only that change is then made.
    let mut approved = None;
    if let Some(reason) = approval::needed(policy, &exec.tool_name, hook_asks.as_deref()) {
        let change = tools.preview(exec, &arguments).await;
        match approval::ask(agent, services, exec, &arguments, change.as_ref(), reason).await {
            Err(text) => {
                let why = text.strip_prefix("Error: ").unwrap_or(&text).to_owned();
                return denied(agent, services, exec, &arguments, why, messages).await;
            }
            // A PermissionRequest hook allowed it with another input: that is what runs, and
            // the change a file call makes is the rewritten one's.
            Ok(Some(updated)) => {
                arguments = rewritten(agent, exec, updated);
                approved = tools.preview(exec, &arguments).await;
            }
            Ok(None) => approved = change,
        }
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

/// Logs that a hook rewrote `exec`'s input to `updated` and returns it. The log keeps both: the
/// model's arguments in `tool/call`, what ran in `tool/rewritten` (the last one, when PreToolUse
/// and PermissionRequest both rewrote it).
fn rewritten(agent: &Agent, exec: &ToolExecution, updated: Value) -> Value {
    agent.append(EventData::ToolRewritten {
        turn: exec.turn.unwrap_or(0),
        step: exec.step.unwrap_or(0),
        call_id: exec.call_id.clone(),
        arguments: updated.clone(),
    });
    updated
}

/// A call denied before it ran, because of `why`: its result, after Claude Code's
/// PermissionDenied hooks heard of it (once per denial). A hook's `retry: true` adds a message
/// telling the model it may retry, as Claude Code does; the denial stands. Not fired when the
/// turn was cancelled: its hooks would be cancelled with it.
async fn denied(
    agent: &Arc<Agent>,
    services: &AgentServices,
    exec: &ToolExecution,
    arguments: &Value,
    why: String,
    mut messages: Vec<(&'static str, String)>,
) -> CallEnd {
    if !exec.cancel.is_cancelled() {
        let heard = run_hooks(
            agent,
            services,
            exec.turn,
            &exec.cancel,
            HookEvent::PermissionDenied {
                tool_name: exec.tool_name.clone(),
                tool_input: arguments.clone(),
                tool_use_id: exec.call_id.clone(),
                reason: why.clone(),
            },
        )
        .await
        .outcome;
        if heard.retry {
            messages.push((
                Dialect::ClaudeCode.plugin_name(),
                format!(
                    "A PermissionDenied hook says you may try tool call {} again. The denial \
                     stands: a retry is a new call, checked like any other.",
                    exec.call_id
                ),
            ));
        }
    }
    CallEnd {
        output: ToolOutput::refused(format!("Error: {why}")),
        messages,
        stop: None,
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
