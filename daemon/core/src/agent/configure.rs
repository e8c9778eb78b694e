//! A live agent's settings changed in place, and a new agent created under a requested id: what
//! lets a client set a session up before its first turn and bring it back after a restart.

use std::path::Path;
use std::sync::Arc;

use super::live::{Agent, Reconfigure};
use super::model::ModelChoice;
use super::registry::{AgentError, AgentRegistry};
use crate::locks::lock;
use crate::sandbox::SandboxPolicy;
use dsh_session::{ApprovalPolicy, ApprovalRule, EventData, SessionId};

/// The settings to change on a live agent ([`AgentRegistry::configure`]); `None` keeps the one it
/// runs with.
#[derive(Debug, Clone, Default)]
pub struct SettingsChange {
    /// Another model: the fields it names replace the current ones (a model name alone keeps
    /// the provider).
    pub model: Option<ModelChoice>,
    /// Another approval policy.
    pub approval: Option<ApprovalPolicy>,
    /// Another sandbox for its next bash calls.
    pub sandbox: Option<SandboxPolicy>,
}

impl AgentRegistry {
    /// A new top-level agent as [`create`](Self::create) makes, under `id`: refused when a live
    /// agent or a stored session has that id. A client that created a session which was never
    /// stored (dshd restarted before its first turn) brings it back under the same id.
    pub async fn create_as(
        &self,
        id: SessionId,
        cwd: &Path,
        choice: &ModelChoice,
        sandbox: SandboxPolicy,
        approval: Option<ApprovalPolicy>,
    ) -> Result<Arc<Agent>, AgentError> {
        if lock(&self.agents).contains_key(&id) {
            return Err(AgentError::AlreadyLive(id));
        }
        let backend = self.services().persistence.backend();
        let stored = backend.stored_len(&id).await?;
        if stored.is_some() {
            return Err(AgentError::SessionExists(id));
        }
        self.create_with(id, cwd, choice, sandbox, approval)
    }

    /// Changes the settings of the live top-level agent `id` in place, between turns: its model,
    /// approval policy or sandbox. The agent is not closed: its background jobs keep running
    /// (under the sandbox they started in), its "allow always" rules and its log stay. A change
    /// is logged as one `session/settings` event with every setting, so the session resumes as
    /// it now runs; asking for what it runs with already logs nothing.
    ///
    /// The change is checkpointed at once when the session has had a turn (its file exists), so
    /// an acknowledged change survives a crash; before the first turn nothing is written, as for
    /// any new session (its first checkpoint creates it).
    pub async fn configure(
        &self,
        id: &SessionId,
        change: SettingsChange,
    ) -> Result<Arc<Agent>, AgentError> {
        let agent = self.get(id)?;
        if agent.parent().is_some() {
            return Err(AgentError::ChildSettings(id.clone()));
        }
        let provider = match &change.model {
            Some(choice) => self.provider_change(&agent, choice)?,
            None => None,
        };
        let applied = agent.configure(Reconfigure {
            provider,
            approval: change.approval,
            sandbox: change.sandbox,
        });
        match applied {
            Ok(changed) => {
                if changed {
                    tracing::info!(session = %id, "agent settings changed");
                    if agent.last_turn() > 0 {
                        agent.checkpoint(self.services()).await?;
                    }
                }
                Ok(agent)
            }
            Err(Some(turn)) => Err(AgentError::Busy {
                id: id.clone(),
                turn,
            }),
            Err(None) => Err(AgentError::Closed(id.clone())),
        }
    }

    /// Removes "allow always" rules of the live agent `id`: `which`, or every one when `None`.
    /// Each removal is logged (`approval/rule-removed`), so the session keeps it when it goes
    /// live again; the same request then asks again. Returns the rules removed (a rule not in
    /// force is not an error: nothing is logged for it). Checkpointed at once when the session
    /// has had a turn, as for [`configure`](Self::configure).
    pub async fn remove_rules(
        &self,
        id: &SessionId,
        which: Option<Vec<ApprovalRule>>,
    ) -> Result<Vec<ApprovalRule>, AgentError> {
        let agent = self.get(id)?;
        let wanted = which.unwrap_or_else(|| agent.approval_rules());
        let mut removed = Vec::new();
        for rule in wanted {
            if agent.approvals().forget(&rule) {
                agent.append(EventData::ApprovalRuleRemoved {
                    tool: rule.tool.clone(),
                    command: rule.command.clone(),
                    cwd: rule.cwd.clone(),
                });
                removed.push(rule);
            }
        }
        if !removed.is_empty() && agent.last_turn() > 0 {
            agent.checkpoint(self.services()).await?;
        }
        Ok(removed)
    }

    /// The provider `agent` switches to for `choice`, or `None` when the choice is what it runs
    /// with (a scripted agent keeps its place in its script).
    fn provider_change(
        &self,
        agent: &Agent,
        choice: &ModelChoice,
    ) -> Result<Option<Arc<dyn super::provider::ModelProvider>>, AgentError> {
        let now = agent.settings();
        let same_provider = choice.provider.as_ref().is_none_or(|p| *p == now.provider);
        let same_model = choice.model.as_ref().is_none_or(|m| *m == now.model);
        let same_effort = choice
            .reasoning_effort
            .is_none_or(|e| e == now.reasoning_effort);
        if choice.script.is_none() && same_provider && same_model && same_effort {
            return Ok(None);
        }
        let scripted = choice.script.is_none() && same_provider;
        if scripted && now.provider == super::scripted::PROVIDER && !same_effort {
            return Err(super::model::InvalidModel {
                field: "model.reasoning_effort",
                message: "a reasoning effort is only for the openai provider".into(),
            }
            .into());
        }
        if scripted && now.provider == super::scripted::PROVIDER {
            return Err(super::model::InvalidModel {
                field: "model.model",
                message: "the scripted provider has no models to choose from; give another \
                          provider (openai) or a script"
                    .into(),
            }
            .into());
        }
        let choice = self.providers.again(agent.id(), choice, Some(&now))?;
        Ok(Some(self.providers.build(&choice)?))
    }
}
