//! `dsh.v1.Agents`: live agents and their turns.

use std::ffi::OsString;
use std::future::Future;
use std::path::PathBuf;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use dsh_proto::v1::{self, agents_server};
use tokio_stream::Stream;
use tonic::{Request, Response, Status};

use super::convert::{
    agent_info, agent_status, approval_policy, client_environment, mcp_servers, model_choice,
    rule_wire, sandbox_policy, session_id, stream_event,
};
use dsh_core::{
    Agent, AgentRegistry, ApprovalAnswer, ApprovalClient, ApprovalRule, ApprovalScope,
    ApprovalVerdict, EventFilter, McpServerConfig, SandboxPolicy, SettingsChange, WatchScope,
    Watcher,
};

/// The `Agents` service.
pub struct AgentsService {
    /// The live agents.
    agents: Arc<AgentRegistry>,
    /// The sandbox policy of an agent whose request names none (`[sandbox]` in the config).
    default_sandbox: SandboxPolicy,
}

impl AgentsService {
    /// A service over `agents`, confining new agents by `default_sandbox` unless told otherwise.
    pub fn new(agents: Arc<AgentRegistry>, default_sandbox: SandboxPolicy) -> Self {
        Self {
            agents,
            default_sandbox,
        }
    }
}

impl AgentsService {
    /// The client's MCP servers from the wire, checked, before anything is made live.
    fn servers(&self, specs: Vec<v1::McpServerSpec>) -> Result<Vec<McpServerConfig>, Status> {
        let servers = mcp_servers(specs)?;
        self.agents
            .services()
            .mcp
            .check_extra(&servers)
            .map_err(Status::invalid_argument)?;
        Ok(servers)
    }

    /// Makes `agent`'s commands start from its client's environment, when the client sent one,
    /// and gives it the client's MCP servers.
    fn give(
        &self,
        agent: &Agent,
        env: Option<Vec<(OsString, OsString)>>,
        servers: Vec<McpServerConfig>,
    ) {
        if let Some(vars) = env {
            let env = self.agents.services().executor.client_env(vars);
            agent.set_client_env(Some(env));
        }
        self.agents.services().mcp.give(agent.id(), servers);
    }
}

type Reply<T> = Result<Response<T>, Status>;

#[tonic::async_trait]
impl agents_server::Agents for AgentsService {
    type PromptStream = EventStream;
    type WatchStream = EventStream;

    async fn create(&self, request: Request<v1::CreateAgentRequest>) -> Reply<v1::AgentInfo> {
        let req = request.into_inner();
        if req.cwd.is_empty() {
            return Err(Status::invalid_argument(
                "cwd: required (an absolute directory)",
            ));
        }
        let sandbox = sandbox_policy(req.sandbox, self.default_sandbox)?;
        let approval = approval_policy(req.approval)?;
        let env = client_environment(req.environment)?;
        let servers = self.servers(req.mcp_servers)?;
        let cwd = PathBuf::from(req.cwd);
        let choice = model_choice(req.model)?;
        let agent = match req.session_id {
            None => self.agents.create(&cwd, &choice, sandbox, approval),
            Some(id) => {
                let id = session_id("session_id", id)?;
                self.agents
                    .create_as(id, &cwd, &choice, sandbox, approval)
                    .await
            }
        }
        .map_err(agent_status)?;
        self.give(&agent, env, servers);
        Ok(Response::new(agent_info(&agent, &self.agents)))
    }

    async fn remove_rules(
        &self,
        request: Request<v1::RemoveRulesRequest>,
    ) -> Reply<v1::RemoveRulesResponse> {
        let req = request.into_inner();
        let id = session_id("agent_id", req.agent_id)?;
        let which = match (req.all, req.rules.is_empty()) {
            (true, true) => None,
            (true, false) => {
                return Err(Status::invalid_argument(
                    "rules: give the rules to remove or all, not both",
                ));
            }
            (false, true) => {
                return Err(Status::invalid_argument(
                    "rules: required (the rules to remove), or set all",
                ));
            }
            (false, false) => Some(
                req.rules
                    .into_iter()
                    .map(|r| ApprovalRule {
                        tool: r.tool,
                        command: r.command,
                        cwd: r.cwd,
                    })
                    .collect(),
            ),
        };
        let removed = self
            .agents
            .remove_rules(&id, which)
            .await
            .map_err(agent_status)?;
        let agent = self.agents.get(&id).map_err(agent_status)?;
        Ok(Response::new(v1::RemoveRulesResponse {
            removed: removed.into_iter().map(rule_wire).collect(),
            agent: Some(agent_info(&agent, &self.agents)),
        }))
    }

    async fn configure(&self, request: Request<v1::ConfigureAgentRequest>) -> Reply<v1::AgentInfo> {
        let req = request.into_inner();
        let id = session_id("agent_id", req.agent_id)?;
        let live = self.agents.get(&id).map_err(agent_status)?;
        // Empty fields keep what the agent runs with.
        let sandbox = match req.sandbox {
            None => None,
            Some(spec) => Some(sandbox_policy(Some(spec), live.sandbox())?),
        };
        let change = SettingsChange {
            model: req.model.map(|spec| model_choice(Some(spec))).transpose()?,
            approval: approval_policy(req.approval)?,
            sandbox,
        };
        let agent = self
            .agents
            .configure(&id, change)
            .await
            .map_err(agent_status)?;
        Ok(Response::new(agent_info(&agent, &self.agents)))
    }

    async fn resume(&self, request: Request<v1::ResumeAgentRequest>) -> Reply<v1::AgentInfo> {
        let req = request.into_inner();
        let id = session_id("session_id", req.session_id)?;
        // Unset: what the session last ran with, else the default (the registry knows which).
        let sandbox = match req.sandbox {
            None => None,
            Some(spec) => Some(sandbox_policy(Some(spec), self.default_sandbox)?),
        };
        let approval = approval_policy(req.approval)?;
        let env = client_environment(req.environment)?;
        let servers = self.servers(req.mcp_servers)?;
        let agent = self
            .agents
            .resume(
                &id,
                &model_choice(req.model)?,
                sandbox,
                self.default_sandbox,
                approval,
            )
            .await
            .map_err(agent_status)?;
        self.give(&agent, env, servers);
        Ok(Response::new(agent_info(&agent, &self.agents)))
    }

    async fn fork(&self, request: Request<v1::ForkAgentRequest>) -> Reply<v1::AgentInfo> {
        let req = request.into_inner();
        let id = session_id("session_id", req.session_id)?;
        let sandbox = sandbox_policy(req.sandbox, self.default_sandbox)?;
        let approval = approval_policy(req.approval)?;
        let env = client_environment(req.environment)?;
        let servers = self.servers(req.mcp_servers)?;
        let agent = self
            .agents
            .fork_at(
                &id,
                req.at_seq,
                &model_choice(req.model)?,
                sandbox,
                approval,
            )
            .await
            .map_err(agent_status)?;
        self.give(&agent, env, servers);
        Ok(Response::new(agent_info(&agent, &self.agents)))
    }

    async fn spawn(&self, request: Request<v1::SpawnAgentRequest>) -> Reply<v1::AgentInfo> {
        let req = request.into_inner();
        let parent = session_id("parent_agent_id", req.parent_agent_id)?;
        // Empty fields are the parent's; the registry refuses a looser result.
        let sandbox = match req.sandbox {
            None => None,
            Some(spec) => {
                let base = self.agents.get(&parent).map_err(agent_status)?;
                Some(sandbox_policy(Some(spec), base.sandbox())?)
            }
        };
        let approval = approval_policy(req.approval)?;
        let agent = self
            .agents
            .spawn(&parent, &model_choice(req.model)?, sandbox, approval)
            .map_err(agent_status)?;
        Ok(Response::new(agent_info(&agent, &self.agents)))
    }

    async fn list(
        &self,
        _request: Request<v1::ListAgentsRequest>,
    ) -> Reply<v1::ListAgentsResponse> {
        let agents = self
            .agents
            .list()
            .iter()
            .map(|a| agent_info(a, &self.agents))
            .collect();
        Ok(Response::new(v1::ListAgentsResponse { agents }))
    }

    async fn get(&self, request: Request<v1::GetAgentRequest>) -> Reply<v1::AgentInfo> {
        let id = session_id("agent_id", request.into_inner().agent_id)?;
        let agent = self.agents.get(&id).map_err(agent_status)?;
        Ok(Response::new(agent_info(&agent, &self.agents)))
    }

    async fn prompt(&self, request: Request<v1::PromptRequest>) -> Reply<Self::PromptStream> {
        let by = crate::connection::peer_of(&request).watched_by();
        let req = request.into_inner();
        let id = session_id("agent_id", req.agent_id)?;
        if req.text.trim().is_empty() {
            return Err(Status::invalid_argument("text: the prompt is empty"));
        }
        let handle = self
            .agents
            .prompt(&id, req.text, None, by)
            .map_err(agent_status)?;
        // The turn's outcome is not needed here: the core ends the stream with the turn's
        // `turn/end`, once the agent takes the next prompt. Dropping the handle lets the finished
        // task free its result at once.
        drop(handle.outcome);
        Ok(Response::new(event_stream(handle.updates, true)))
    }

    type CompactStream = EventStream;

    async fn compact(&self, request: Request<v1::CompactRequest>) -> Reply<Self::CompactStream> {
        let by = crate::connection::peer_of(&request).watched_by();
        let req = request.into_inner();
        let id = session_id("agent_id", req.agent_id)?;
        let handle = self
            .agents
            .compact(&id, req.instructions, by)
            .map_err(agent_status)?;
        drop(handle.outcome);
        Ok(Response::new(event_stream(handle.updates, true)))
    }

    async fn watch(&self, request: Request<v1::WatchRequest>) -> Reply<Self::WatchStream> {
        let by = crate::connection::peer_of(&request).watched_by();
        let req = request.into_inner();
        let scope = if req.agent_id.is_empty() {
            if req.from_seq.is_some() {
                return Err(Status::invalid_argument(
                    "from_seq: a replay needs agent_id (the agent whose log to replay)",
                ));
            }
            WatchScope::All
        } else {
            let id = session_id("agent_id", req.agent_id)?;
            if req.descendants {
                WatchScope::Tree(id)
            } else {
                WatchScope::Agent(id)
            }
        };
        let filter =
            EventFilter::parse(&req.types).map_err(|e| Status::invalid_argument(e.to_string()))?;
        let watcher = self
            .agents
            .watch_types(scope, req.from_seq, filter, by)
            .map_err(agent_status)?;
        Ok(Response::new(event_stream(watcher, true)))
    }

    async fn approve(&self, request: Request<v1::ApproveRequest>) -> Reply<v1::ApproveResponse> {
        let peer = crate::connection::peer_of(&request);
        // Approvals come from people: a process an agent's command started (its own background
        // job included) could otherwise answer its agent's requests.
        if !peer.provenance.is_outside() {
            tracing::warn!(client_pid = peer.pid, client = %peer.provenance, "refused an approval from inside a command dshd started");
            return Err(Status::permission_denied(format!(
                "Agents.Approve is refused: this client {}; approvals come from people, so answer from a terminal or editor outside every command dshd started",
                peer.provenance
            )));
        }
        let req = request.into_inner();
        let id = session_id("agent_id", req.agent_id)?;
        if req.call_id.is_empty() {
            return Err(Status::invalid_argument(
                "call_id: required (the callId of the approval/request event)",
            ));
        }
        let verdict = match v1::ApprovalDecision::try_from(req.decision) {
            Ok(v1::ApprovalDecision::Allow) => ApprovalVerdict::Allow,
            Ok(v1::ApprovalDecision::Deny) => ApprovalVerdict::Deny,
            Ok(v1::ApprovalDecision::Unspecified) | Err(_) => {
                return Err(Status::invalid_argument(format!(
                    "decision: must be APPROVAL_DECISION_ALLOW or APPROVAL_DECISION_DENY, got {}",
                    req.decision
                )));
            }
        };
        let scope = match v1::ApprovalScope::try_from(req.scope) {
            Ok(v1::ApprovalScope::Unspecified | v1::ApprovalScope::Once) => ApprovalScope::Once,
            Ok(v1::ApprovalScope::Session) if verdict == ApprovalVerdict::Allow => {
                ApprovalScope::Session
            }
            Ok(v1::ApprovalScope::Session) => {
                return Err(Status::invalid_argument(
                    "scope: APPROVAL_SCOPE_SESSION goes with APPROVAL_DECISION_ALLOW only; a denial holds for this call",
                ));
            }
            Err(_) => {
                return Err(Status::invalid_argument(format!(
                    "scope: must be APPROVAL_SCOPE_ONCE or APPROVAL_SCOPE_SESSION, got {}",
                    req.scope
                )));
            }
        };
        let reason = (!req.reason.trim().is_empty()).then_some(req.reason);
        let answer = ApprovalAnswer {
            verdict,
            reason,
            scope,
            client: Some(ApprovalClient {
                pid: peer.pid,
                uid: peer.uid,
                terminal: peer.terminal,
            }),
        };
        self.agents
            .approve(&id, &req.call_id, answer)
            .map_err(agent_status)?;
        Ok(Response::new(v1::ApproveResponse {}))
    }

    async fn steer(&self, request: Request<v1::SteerRequest>) -> Reply<v1::SteerResponse> {
        let req = request.into_inner();
        let id = session_id("agent_id", req.agent_id)?;
        if req.text.trim().is_empty() {
            return Err(Status::invalid_argument(
                "text: empty; give the message to send",
            ));
        }
        let turn = self.agents.steer(&id, req.text).map_err(agent_status)?;
        Ok(Response::new(v1::SteerResponse { turn }))
    }

    async fn cancel(
        &self,
        request: Request<v1::CancelAgentRequest>,
    ) -> Reply<v1::CancelAgentResponse> {
        let id = session_id("agent_id", request.into_inner().agent_id)?;
        let cancelled = self.agents.cancel(&id).map_err(agent_status)?;
        Ok(Response::new(v1::CancelAgentResponse { cancelled }))
    }

    async fn close(
        &self,
        request: Request<v1::CloseAgentRequest>,
    ) -> Reply<v1::CloseAgentResponse> {
        let id = session_id("agent_id", request.into_inner().agent_id)?;
        self.agents.close(&id).await.map_err(agent_status)?;
        Ok(Response::new(v1::CloseAgentResponse {}))
    }
}

/// A stream of events for the wire.
pub type EventStream = Pin<Box<dyn Stream<Item = Result<v1::Event, Status>> + Send>>;

/// The wire stream of `watcher`'s events (unlogged ones only when `unlogged`). It takes the next
/// event from the watcher only when tonic asks for the next message, which hyper does only when
/// the connection can send more: a client that stops reading leaves its backlog in the watcher's
/// queue, where it is bounded (no channel of ready messages in between that would grow).
pub fn event_stream(watcher: Watcher, unlogged: bool) -> EventStream {
    Box::pin(WatcherStream {
        next: Some(Box::pin(next_message(watcher, unlogged))),
        unlogged,
    })
}

struct WatcherStream {
    next: Option<NextMessage>,
    unlogged: bool,
}

/// [`next_message`], boxed so the stream can hold it between polls.
type NextMessage = Pin<Box<dyn Future<Output = Option<(v1::Event, Watcher)>> + Send>>;

impl Stream for WatcherStream {
    type Item = Result<v1::Event, Status>;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let Some(next) = self.next.as_mut() else {
            return Poll::Ready(None);
        };
        match next.as_mut().poll(cx) {
            Poll::Pending => Poll::Pending,
            Poll::Ready(None) => {
                self.next = None;
                Poll::Ready(None)
            }
            Poll::Ready(Some((message, watcher))) => {
                let unlogged = self.unlogged;
                self.next = Some(Box::pin(next_message(watcher, unlogged)));
                Poll::Ready(Some(Ok(message)))
            }
        }
    }
}

/// The next wire message, and the watcher to take the one after from; `None` at the end.
async fn next_message(mut watcher: Watcher, unlogged: bool) -> Option<(v1::Event, Watcher)> {
    loop {
        let event = watcher.recv().await?;
        if unlogged || event.seq.is_some() {
            return Some((stream_event(event), watcher));
        }
    }
}
