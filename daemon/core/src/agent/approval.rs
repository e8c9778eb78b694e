//! Asking a person before a tool call runs (the agent's approval policy, or a PreToolUse hook's
//! "ask"). The request is logged, so every watcher of the agent sees it; a client answers with
//! `Agents.Approve`. It fails closed: no answer within the configured time, nobody watching the
//! agent, or a cancelled turn all deny the call, and the model is told why. A client may allow
//! "for this session": the agent then keeps a rule and allows the same request (tool, command,
//! directory) again without asking, logging each such decision as made `by` the rule. A
//! PermissionRequest hook that allows may rewrite the call (`updatedInput`) and add such rules
//! (`updatedPermissions`), logged as `approval/rule-added`.

use std::sync::Arc;

use serde_json::Value;

use super::hook_run::run_hooks;
use super::live::Agent;
use super::services::AgentServices;
use crate::call::{BASH, EDIT, Preview, ToolExecution, WRITE};
use crate::hooks::{Decision, HookEvent, NotificationKind, SessionRule};
use dsh_session::{ApprovalPolicy, ApprovalScope, ApprovalSource, ApprovalVerdict, EventData};
use dsh_session::{ApprovalRule, ProposedChange};

/// Why a call needs a person's approval before it runs, if it does: a hook asked (`hook_reason`)
/// and the policy lets someone be asked, or the policy asks for every `bash` call and every file
/// change (`write`, `edit`: what a command could do, so approved like one).
pub(crate) fn needed(
    policy: ApprovalPolicy,
    tool: &str,
    hook_reason: Option<&str>,
) -> Option<String> {
    match (policy, hook_reason) {
        (ApprovalPolicy::Never, _) => None,
        (_, Some(reason)) => Some(reason.to_owned()),
        (ApprovalPolicy::Always, None) if tool == BASH => {
            Some("the approval policy is `always`: every bash command waits for approval".into())
        }
        (ApprovalPolicy::Always, None) if tool == WRITE || tool == EDIT => {
            Some("the approval policy is `always`: every file change waits for approval".into())
        }
        (ApprovalPolicy::Always, None) if tool.starts_with(crate::mcp::MCP_PREFIX) => {
            Some("the approval policy is `always`: every MCP tool call waits for approval".into())
        }
        (ApprovalPolicy::OnRequest | ApprovalPolicy::Always, None) => None,
    }
}

/// What the request shows a person: the command (a bash call's, or the arguments of another
/// tool) and where it would run.
fn describe(exec: &ToolExecution, arguments: &Value) -> (String, String) {
    let cwd = match arguments.get("workdir") {
        Some(Value::String(dir)) if !dir.is_empty() => {
            dsh_paths::home::normalize(&exec.cwd.join(dir))
        }
        _ => exec.cwd.clone(),
    };
    let command = match arguments.get("command") {
        Some(Value::String(command)) if exec.tool_name == BASH => command.clone(),
        _ => arguments.to_string(),
    };
    (command, cwd.to_string_lossy().into_owned())
}

/// The change as the request shows it: the texts only when small, as in `tool/file`.
fn proposed(preview: &Preview) -> ProposedChange {
    let change = &preview.change;
    let small = change.new_text.len() + change.old_text.as_ref().map_or(0, String::len)
        <= crate::call::FILE_EVENT_TEXT_BYTES;
    ProposedChange {
        path: preview.path.to_string_lossy().into_owned(),
        diff: change.diff.clone(),
        old_text: change.old_text.clone().filter(|_| small),
        new_text: small.then(|| change.new_text.clone()),
    }
}

/// Asks for approval of `exec` with `arguments` (and the file `change` it would make, shown with
/// the request), because of `reason`, and waits for the answer. `Ok` when allowed, with the
/// arguments a PermissionRequest hook rewrote the call to, if it did; otherwise the text the
/// model is given instead of the call's result.
pub(crate) async fn ask(
    agent: &Arc<Agent>,
    services: &AgentServices,
    exec: &ToolExecution,
    arguments: &Value,
    change: Option<&Preview>,
    reason: String,
) -> Result<Option<Value>, String> {
    let (turn, step) = (exec.turn.unwrap_or(0), exec.step.unwrap_or(0));
    let timeout = services.approval.timeout;
    let (command, cwd) = describe(exec, arguments);
    let rule = ApprovalRule {
        tool: exec.tool_name.clone(),
        command,
        cwd,
    };
    if agent.approvals().allows(&rule) {
        agent.append(EventData::ApprovalDecision {
            turn,
            step,
            call_id: exec.call_id.clone(),
            decision: ApprovalVerdict::Allow,
            by: ApprovalSource::Rule,
            reason: None,
            scope: ApprovalScope::Once,
            client: None,
            handlers: Vec::new(),
        });
        tracing::info!("allowed by a rule of this session");
        return Ok(None);
    }
    if let Some(answered) = ask_hooks(agent, services, exec, arguments, &rule).await {
        return answered;
    }
    // Registered before it is announced, so an answer can never miss it.
    let mut answer = agent.approvals().register(&exec.call_id);
    let mut departures = agent.departures();
    agent.append(EventData::ApprovalRequest {
        turn,
        step,
        call_id: exec.call_id.clone(),
        tool: rule.tool.clone(),
        command: rule.command.clone(),
        cwd: rule.cwd.clone(),
        reason: reason.clone(),
        timeout_ms: u64::try_from(timeout.as_millis()).unwrap_or(u64::MAX),
        change: change.map(proposed),
    });
    tracing::info!(%reason, "a tool call waits for approval");
    let deadline = tokio::time::sleep(timeout);
    tokio::pin!(deadline);
    let once = ApprovalScope::Once;
    let mut decided = loop {
        if !agent.watched() {
            break (
                ApprovalVerdict::Deny,
                ApprovalSource::Unwatched,
                None,
                once,
                None,
            );
        }
        tokio::select! {
            got = &mut answer => break match got {
                Ok(a) => (a.verdict, ApprovalSource::Client, a.reason, a.scope, a.client),
                Err(_) => (ApprovalVerdict::Deny, ApprovalSource::Cancelled, None, once, None),
            },
            () = &mut deadline => {
                break (ApprovalVerdict::Deny, ApprovalSource::Timeout, None, once, None);
            }
            () = exec.cancel.cancelled() => {
                break (ApprovalVerdict::Deny, ApprovalSource::Cancelled, None, once, None);
            }
            // A watcher left: check again whether anyone still watches.
            _ = departures.changed() => {}
        }
    };
    if decided.1 != ApprovalSource::Client && !agent.approvals().withdraw(&exec.call_id) {
        // A client's answer took the request first: it stands.
        if let Ok(a) = answer.try_recv() {
            decided = (
                a.verdict,
                ApprovalSource::Client,
                a.reason,
                a.scope,
                a.client,
            );
        }
    }
    let (verdict, by, client_reason, scope, client) = decided;
    // Only a client's allow makes a rule (the RPC refuses a denial for the session).
    let scope = match (verdict, by) {
        (ApprovalVerdict::Allow, ApprovalSource::Client) => scope,
        _ => ApprovalScope::Once,
    };
    if scope == ApprovalScope::Session {
        agent.approvals().remember(rule);
    }
    agent.append(EventData::ApprovalDecision {
        turn,
        step,
        call_id: exec.call_id.clone(),
        decision: verdict,
        by,
        reason: client_reason.clone(),
        scope,
        client,
        handlers: Vec::new(),
    });
    tracing::info!(
        decision = verdict.as_str(),
        by = by.as_str(),
        "approval decided"
    );
    match (verdict, by) {
        (ApprovalVerdict::Allow, _) => Ok(None),
        (ApprovalVerdict::Deny, ApprovalSource::Client) => Err(match client_reason {
            Some(why) if !why.trim().is_empty() => {
                format!("Error: the user denied this call: {why}")
            }
            _ => "Error: the user denied this call".to_owned(),
        }),
        (ApprovalVerdict::Deny, ApprovalSource::Timeout) => Err(format!(
            "Error: the call needed approval ({reason}) and nobody answered within {} s, so it was denied",
            timeout.as_secs_f64()
        )),
        (ApprovalVerdict::Deny, ApprovalSource::Unwatched) => Err(format!(
            "Error: the call needed approval ({reason}) and nobody is watching this agent to give it, so it was denied"
        )),
        (
            ApprovalVerdict::Deny,
            ApprovalSource::Cancelled | ApprovalSource::Rule | ApprovalSource::Hook,
        ) => Err("Error: the turn was cancelled while the call waited for approval".to_owned()),
    }
}

/// The hooks that hear of a request before any person does (CONTRACTS §8): PermissionRequest in
/// both dialects, whose allow or deny answers it as a person would (logged `by: hook` with the
/// handlers), then, when they leave it to people, Claude Code's Notification
/// (`permission_prompt`). Both are bounded by their hook timeouts and run before the request is
/// logged, so watchers are shown only requests that wait for them. `Some` is the hooks' answer;
/// an allow carries the rewritten arguments, if a hook rewrote the call, and adds the session
/// rules the hooks asked for, in the directory the call runs in.
async fn ask_hooks(
    agent: &Arc<Agent>,
    services: &AgentServices,
    exec: &ToolExecution,
    arguments: &Value,
    rule: &ApprovalRule,
) -> Option<Result<Option<Value>, String>> {
    let (turn, step) = (exec.turn.unwrap_or(0), exec.step.unwrap_or(0));
    let asked = run_hooks(
        agent,
        services,
        exec.turn,
        &exec.cancel,
        HookEvent::PermissionRequest {
            tool_name: exec.tool_name.clone(),
            tool_input: arguments.clone(),
            tool_use_id: exec.call_id.clone(),
        },
    )
    .await
    .outcome;
    let verdict = match asked.decision {
        Decision::Allow => Some(ApprovalVerdict::Allow),
        Decision::Deny => Some(ApprovalVerdict::Deny),
        Decision::Ask | Decision::None => None,
    };
    if let Some(verdict) = verdict {
        agent.append(EventData::ApprovalDecision {
            turn,
            step,
            call_id: exec.call_id.clone(),
            decision: verdict,
            by: ApprovalSource::Hook,
            reason: asked.reason.clone(),
            scope: ApprovalScope::Once,
            client: None,
            handlers: asked.decided_by.clone(),
        });
        tracing::info!(call_id = %exec.call_id, decision = verdict.as_str(), handlers = ?asked.decided_by, "a PermissionRequest hook answered");
        if verdict == ApprovalVerdict::Allow {
            let runs = asked.updated_input.as_ref().unwrap_or(arguments);
            add_rules(
                agent,
                &asked.rules,
                describe(exec, runs).1,
                &asked.decided_by,
            );
        }
        return Some(match verdict {
            ApprovalVerdict::Allow => Ok(asked.updated_input),
            ApprovalVerdict::Deny => Err(format!(
                "Error: a PermissionRequest hook denied this call: {}",
                asked.reason.as_deref().unwrap_or("denied")
            )),
        });
    }
    // Only Claude Code has Notification; the engine runs nothing for Codex.
    run_hooks(
        agent,
        services,
        exec.turn,
        &exec.cancel,
        HookEvent::Notification {
            kind: NotificationKind::PermissionPrompt,
            message: services
                .hooks
                .permission_message(hook_tool_name(&rule.tool)),
            title: "Permission needed".to_owned(),
        },
    )
    .await;
    None
}

/// Adds the session rules PermissionRequest hooks (`handlers`) asked for, for calls in `cwd`: kept
/// by the live agent and logged, so the session keeps them when it goes live again and
/// `Agents.RemoveRules` ends them as it ends a person's. A rule already in force is not logged
/// again.
fn add_rules(agent: &Arc<Agent>, rules: &[SessionRule], cwd: String, handlers: &[String]) {
    for rule in rules {
        let rule = ApprovalRule {
            tool: rule.tool.clone(),
            command: rule.command.clone(),
            cwd: cwd.clone(),
        };
        if agent.approvals().allows(&rule) {
            continue;
        }
        agent.approvals().remember(rule.clone());
        tracing::info!(tool = %rule.tool, command = %rule.command, cwd = %rule.cwd, ?handlers, "a PermissionRequest hook added a rule for this session");
        agent.append(EventData::ApprovalRuleAdded {
            tool: rule.tool,
            command: rule.command,
            cwd: rule.cwd,
            handlers: handlers.to_vec(),
        });
    }
}

/// The tool as a Claude Code user knows it (`Bash` for dsh's `bash`).
fn hook_tool_name(tool: &str) -> &str {
    if tool == BASH { "Bash" } else { tool }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn who_is_asked_under_each_policy() {
        let hook = Some("a hook asks");
        assert_eq!(needed(ApprovalPolicy::Never, BASH, hook), None);
        assert_eq!(needed(ApprovalPolicy::Never, BASH, None), None);
        assert_eq!(
            needed(ApprovalPolicy::OnRequest, "job_kill", hook).as_deref(),
            hook
        );
        assert_eq!(needed(ApprovalPolicy::OnRequest, BASH, None), None);
        assert!(needed(ApprovalPolicy::Always, BASH, None).is_some());
        assert!(needed(ApprovalPolicy::Always, EDIT, None).is_some());
        assert!(needed(ApprovalPolicy::Always, WRITE, None).is_some());
        assert_eq!(needed(ApprovalPolicy::Always, "read", None), None);
        assert_eq!(needed(ApprovalPolicy::Always, "job_output", None), None);
        assert_eq!(needed(ApprovalPolicy::Always, BASH, hook).as_deref(), hook);
    }
}
