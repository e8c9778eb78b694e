//! Running an agent's hooks and logging what they said: shared by the turn (`turn.rs`), the
//! guard around each tool call (`guard.rs`) and approvals (`approval.rs`), so none of those names
//! another for it.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::live::Agent;
use super::services::AgentServices;
use crate::call::AGENT_TYPE;
use crate::hooks::{EventName, HookContext, HookEvent, HookRun, SubagentOf};

/// Stores `agent`'s session first when nothing of it is stored yet and a hook of `name` is about
/// to run: a hook is never handed a `transcript_path` that does not exist (a new session's file
/// is made by its first checkpoint, which this is). A failure is logged; the hook runs anyway.
pub(super) async fn store_for_hooks(agent: &Arc<Agent>, services: &AgentServices, name: EventName) {
    if !agent.nothing_stored().await || !services.hooks.handles(name, &agent.header().cwd).await {
        return;
    }
    if let Err(error) = agent.checkpoint(services).await {
        tracing::warn!(session = %agent.id(), %error, "cannot store the session before its first hook");
    }
}

/// Runs `event`'s hooks for `agent` and appends their records to its log.
pub(super) async fn run_hooks(
    agent: &Arc<Agent>,
    services: &AgentServices,
    turn: Option<u32>,
    cancel: &CancellationToken,
    event: HookEvent,
) -> HookRun {
    store_for_hooks(agent, services, event.name()).await;
    let ctx = HookContext {
        header: agent.header().clone(),
        subagent: agent.parent_session().map(|parent| SubagentOf {
            parent: parent.clone(),
            agent_type: AGENT_TYPE.to_owned(),
        }),
        turn,
        model: agent.provider().model().to_owned(),
        effort: agent.provider().reasoning_effort(),
        sandbox: agent.sandbox(),
        cancel: cancel.clone(),
        background: Some(agent.background_token()),
        events: Some(agent.clone()),
    };
    let mut run = services.hooks.run(&ctx, event).await;
    for record in &run.records {
        agent.append(record.clone());
    }
    agent.start_background(std::mem::take(&mut run.background));
    run
}

/// The hook's `stopReason`, or a default naming the event.
pub(super) fn stop_text(stop_reason: Option<String>, event: EventName) -> String {
    stop_reason.unwrap_or_else(|| format!("stopped by {} hook", event.as_str()))
}
