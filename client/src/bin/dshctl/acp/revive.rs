//! Sessions that are stored but not live (dshd restarted, or another bridge process created and
//! closed them) are made live again when a request needs them, so an editor's thread goes on: a
//! stored one is resumed; one this bridge created that dshd never stored (it restarted before the
//! first turn) is created again under its id with the settings this bridge gave it.

use dsh_client::refusal::Refusal;
use dsh_proto::v1;

use super::jsonrpc::RpcError;
use super::schema::{Content, SessionUpdate};
use super::{Bridge, lock};

/// What this bridge gave a session it created or changed: enough to create it again under its
/// id when dshd lost it before its first turn, and to resume it as it ran.
#[derive(Debug, Clone)]
pub(super) struct Known {
    /// Its working directory (known only for sessions this bridge created).
    pub cwd: Option<String>,
    /// Its approval policy, as last set through this bridge.
    pub approval: i32,
    /// Its sandbox, as last seen.
    pub sandbox: Option<v1::SandboxPolicy>,
    /// The model chosen through this bridge (`session/set_config_option`), if any.
    pub model: Option<v1::ModelSpec>,
    /// The editor's stdio MCP servers it was last given, given again when it is made live.
    pub mcp_servers: Vec<v1::McpServerSpec>,
}

/// How a session was made live again.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Revived {
    /// Its stored log was resumed.
    Resumed,
    /// It was never stored: created again under its id.
    Recreated,
    /// Someone else made it live meanwhile.
    AlreadyLive,
}

impl Bridge {
    /// Remembers what `info` runs with (and `cwd`, for a session this bridge created).
    pub(super) fn remember(&self, info: &v1::AgentInfo, cwd: Option<&str>) {
        self.remember_with(info, |entry| {
            if let Some(cwd) = cwd {
                entry.cwd = Some(cwd.to_owned());
            }
        });
    }

    /// Remembers what `info` runs with and the editor's MCP servers it was given.
    pub(super) fn remember_servers(&self, info: &v1::AgentInfo, servers: Vec<v1::McpServerSpec>) {
        self.remember_with(info, |entry| entry.mcp_servers = servers);
    }

    fn remember_with(&self, info: &v1::AgentInfo, also: impl FnOnce(&mut Known)) {
        let mut known = lock(&self.known);
        let entry = known.entry(info.session_id.clone()).or_insert(Known {
            cwd: None,
            approval: info.approval,
            sandbox: None,
            model: None,
            mcp_servers: Vec::new(),
        });
        entry.approval = info.approval;
        entry.sandbox.clone_from(&info.sandbox);
        also(entry);
    }

    /// Makes session `session_id` live again: resumed when stored, created again under its id
    /// when this bridge created it and dshd never stored it.
    pub(super) async fn revive(&self, session_id: &str) -> Result<Revived, RpcError> {
        let client = self.client().await?;
        let known = lock(&self.known).get(session_id).cloned();
        let sandbox = known
            .as_ref()
            .and_then(|k| k.sandbox.clone())
            .or_else(|| self.sandbox.clone());
        let approval = known.as_ref().map_or(self.approval, |k| k.approval);
        let model = known
            .as_ref()
            .and_then(|k| k.model.clone())
            .unwrap_or_else(|| self.model.clone());
        let mcp_servers = known
            .as_ref()
            .map(|k| k.mcp_servers.clone())
            .unwrap_or_default();
        let resumed = client
            .agents()
            .resume(v1::ResumeAgentRequest {
                session_id: session_id.to_owned(),
                model: Some(model.clone()),
                sandbox: sandbox.clone(),
                approval,
                environment: Some(dsh_client::client_environment()),
                mcp_servers: mcp_servers.clone(),
            })
            .await;
        let (info, how) = match resumed {
            Ok(info) => (info.into_inner(), Revived::Resumed),
            Err(s) if s.code() == tonic::Code::AlreadyExists => return Ok(Revived::AlreadyLive),
            Err(s) if s.code() == tonic::Code::NotFound && Refusal::of(&s).is_none() => {
                let Some(cwd) = known.and_then(|k| k.cwd) else {
                    return Err(s.into());
                };
                let created = client
                    .agents()
                    .create(v1::CreateAgentRequest {
                        cwd,
                        model: Some(model),
                        sandbox,
                        approval,
                        session_id: Some(session_id.to_owned()),
                        environment: Some(dsh_client::client_environment()),
                        mcp_servers,
                    })
                    .await;
                match created {
                    Ok(info) => (info.into_inner(), Revived::Recreated),
                    // Another client was first: it is live, or stored now.
                    Err(s) if s.code() == tonic::Code::AlreadyExists => {
                        return Ok(Revived::AlreadyLive);
                    }
                    Err(s) => return Err(s.into()),
                }
            }
            Err(s) => return Err(s.into()),
        };
        self.live_set().insert(info.agent_id.clone());
        self.remember(&info, None);
        Ok(how)
    }

    /// Tells the person that their session was made live again, as agent text in the thread.
    pub(super) async fn revived_notice(&self, session_id: &str, how: Revived) {
        let text = match how {
            Revived::Resumed => {
                "[dsh: this session was no longer live in dshd (it restarted, or the session was \
                 closed); it was resumed from its log and goes on.]\n\n"
            }
            Revived::Recreated => {
                "[dsh: dshd restarted before this session's first turn, so nothing of it was \
                 stored; it was started again under the same id with its settings.]\n\n"
            }
            Revived::AlreadyLive => return,
        };
        let update = SessionUpdate::AgentMessageChunk {
            content: Content::Text {
                text: text.to_owned(),
            },
        };
        self.update(session_id, &update).await;
        // It may run another model than the editor last heard of.
        self.config_changed(session_id).await;
    }

    /// Remembers that the editor chose `model` for session `session_id`.
    pub(super) fn remember_model(&self, session_id: &str, model: v1::ModelSpec) {
        if let Some(known) = lock(&self.known).get_mut(session_id) {
            known.model = Some(model);
        }
    }

    /// `Agents.Configure` on session `session_id`, made live again first when it is not.
    pub(super) async fn configure(
        &self,
        request: v1::ConfigureAgentRequest,
    ) -> Result<v1::AgentInfo, RpcError> {
        let client = self.client().await?;
        let first = client.agents().configure(request.clone()).await;
        let info = match first {
            Ok(info) => info.into_inner(),
            Err(s) if matches!(Refusal::of(&s), Some(Refusal::AgentNotLive { .. })) => {
                let how = self.revive(&request.agent_id).await?;
                self.revived_notice(&request.agent_id, how).await;
                client.agents().configure(request).await?.into_inner()
            }
            Err(s) => return Err(s.into()),
        };
        self.remember(&info, None);
        Ok(info)
    }
}
