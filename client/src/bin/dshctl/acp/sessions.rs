//! The session methods: new, load, resume, list, close, set_mode. An ACP session is a dsh
//! agent; everything about it is asked of the daemon.

use std::path::Path;
use std::sync::atomic::Ordering;

use dsh_client::refusal::Refusal;
use dsh_proto::v1;
use tokio_stream::StreamExt;

use super::Bridge;
use super::jsonrpc::RpcError;
use super::schema::{
    Empty, EnvVariable, ForkSessionRequest, ListSessionsRequest, ListSessionsResponse, ListedMeta,
    McpServer, Meta, Mode, ModeState, NewSessionRequest, Sandbox, SessionInfo, SessionMeta,
    SessionNotification, SessionRequest, SessionResponse, SessionUpdate, SetModeRequest,
    Transcript,
};
use super::updates::{Output, Translator};

/// The approval policies, as ACP modes: (id, name, description).
const MODES: [(&str, &str, &str); 3] = [
    (
        "never",
        "Never ask",
        "Commands run without asking; a hook's \"ask\" is a denial",
    ),
    (
        "on-request",
        "Ask when a hook asks",
        "Commands run unless a PreToolUse hook asks for approval",
    ),
    (
        "always",
        "Ask before every command",
        "Every bash command waits for your approval",
    ),
];

impl Bridge {
    pub(super) async fn new_session(
        &self,
        p: NewSessionRequest,
    ) -> Result<SessionResponse, RpcError> {
        absolute(&p.cwd)?;
        let client = self.client().await?;
        let info = client
            .agents()
            .create(v1::CreateAgentRequest {
                cwd: p.cwd.clone(),
                model: Some(self.model.clone()),
                sandbox: self.sandbox.clone(),
                approval: self.approval,
                session_id: None,
                environment: Some(dsh_client::client_environment()),
                mcp_servers: given_servers(&p.mcp_servers),
            })
            .await?
            .into_inner();
        self.live_set().insert(info.agent_id.clone());
        self.remember(&info, Some(&p.cwd));
        self.session_answer(&info, &p.mcp_servers).await
    }

    /// `session/fork` (ACP's unstable `sessionCapabilities.fork`): `Agents.Fork`, a new live
    /// agent starting from the session's completed turns; the session itself is untouched. A
    /// dsh fork keeps the session's working directory, so `cwd` must be that directory.
    pub(super) async fn fork_session(
        &self,
        p: ForkSessionRequest,
    ) -> Result<SessionResponse, RpcError> {
        if p.session_id.is_empty() {
            return Err(RpcError::params("session/fork: sessionId: required"));
        }
        absolute(&p.cwd)?;
        let client = self.client().await?;
        let info = client
            .agents()
            .fork(v1::ForkAgentRequest {
                session_id: p.session_id,
                model: Some(self.model.clone()),
                sandbox: self.sandbox.clone(),
                approval: self.approval,
                at_seq: None,
                environment: Some(dsh_client::client_environment()),
                mcp_servers: given_servers(&p.mcp_servers),
            })
            .await?
            .into_inner();
        let cwd = info.header.as_ref().map_or("", |h| h.cwd.as_str());
        if cwd != p.cwd {
            // Only the fork knows the stored session's directory: refused after the fact, and
            // the fork closed and deleted, so nothing of the refused request stays.
            let closed = client
                .agents()
                .close(v1::CloseAgentRequest {
                    agent_id: info.agent_id.clone(),
                })
                .await;
            let deleted = client
                .persistence()
                .delete(v1::DeleteSessionRequest {
                    session_id: info.session_id.clone(),
                })
                .await;
            if let Some(e) = closed.err().or(deleted.err()) {
                crate::safe::eprintln(format_args!(
                    "dshctl acp: removing the refused fork {}: {}",
                    info.session_id,
                    e.message()
                ));
            }
            return Err(RpcError::params(format!(
                "cwd: a fork keeps the session's working directory, {cwd:?}; got {:?}",
                p.cwd
            )));
        }
        self.live_set().insert(info.agent_id.clone());
        self.session_answer(&info, &p.mcp_servers).await
    }

    /// `session/load` (with `replay`) and `session/resume`: the stored session made live again
    /// (unless it is live already), its log replayed as updates for a load.
    pub(super) async fn load_session(
        &self,
        method: &str,
        p: SessionRequest,
        replay: bool,
    ) -> Result<SessionResponse, RpcError> {
        if p.session_id.is_empty() {
            return Err(RpcError::params(format!("{method}: sessionId: required")));
        }
        let client = self.client().await?;
        let live = client
            .agents()
            .get(v1::GetAgentRequest {
                agent_id: p.session_id.clone(),
            })
            .await;
        let info = match live {
            Ok(info) => info.into_inner(),
            Err(s) if s.code() == tonic::Code::NotFound => {
                let info = client
                    .agents()
                    .resume(v1::ResumeAgentRequest {
                        session_id: p.session_id.clone(),
                        model: Some(self.model.clone()),
                        sandbox: self.sandbox.clone(),
                        approval: self.approval,
                        environment: Some(dsh_client::client_environment()),
                        mcp_servers: given_servers(&p.mcp_servers),
                    })
                    .await?
                    .into_inner();
                self.live_set().insert(info.agent_id.clone());
                info
            }
            Err(s) => return Err(s.into()),
        };
        if replay {
            self.replay(&client, &p.session_id).await?;
        }
        self.session_answer(&info, &p.mcp_servers).await
    }

    /// Sends the session's logged history as updates.
    async fn replay(&self, client: &dsh_client::Client, session_id: &str) -> Result<(), RpcError> {
        let mut events = client
            .persistence()
            .read_events(v1::ReadEventsRequest {
                session_id: session_id.to_owned(),
                from_seq: 0,
                follow: false,
            })
            .await?
            .into_inner();
        let mut translator = Translator::new(session_id, true)
            .with_terminal_output(self.terminal_output.load(Ordering::Relaxed))
            .with_compaction(self.compaction.load(Ordering::Relaxed));
        while let Some(event) = events.next().await {
            let event = event?;
            for out in translator.translate(&event) {
                if let Output::Update(update) = out {
                    self.update(session_id, &update).await;
                }
            }
        }
        Ok(())
    }

    /// The answer to new/load/resume: the modes, and in `_meta` where the transcript is, the
    /// sandbox, and the MCP servers dsh did not connect.
    async fn session_answer(
        &self,
        info: &v1::AgentInfo,
        mcp_servers: &[McpServer],
    ) -> Result<SessionResponse, RpcError> {
        let client = self.client().await?;
        let location = client
            .persistence()
            .locate(v1::LocateRequest {
                session_id: info.session_id.clone(),
            })
            .await?
            .into_inner()
            .location;
        // What the agent runs is what it says it has: an editor's server the agent does not
        // list (a remote one, or one given to an agent that was already live) is not connected.
        let skipped: Vec<String> = mcp_servers
            .iter()
            .filter(|s| {
                let name = server_name(&s.name);
                !info.mcp_servers.iter().any(|m| m.name == name)
            })
            .map(|s| s.name.clone())
            .collect();
        if !skipped.is_empty() {
            crate::safe::eprintln(format_args!(
                "dshctl acp: session {}: MCP servers not connected (dsh connects stdio and http servers given with a new, loaded or resumed session): {}",
                info.session_id,
                skipped.join(", ")
            ));
        }
        self.remember_servers(info, given_servers(mcp_servers));
        let sandbox = info.sandbox.clone().unwrap_or_default();
        Ok(SessionResponse {
            session_id: info.session_id.clone(),
            modes: modes(info.approval, &sandbox),
            config_options: self.config_options(info).await?,
            meta: Meta {
                dsh: SessionMeta {
                    transcript: location.map(|l| Transcript {
                        kind: l.kind,
                        path: l.path,
                    }),
                    sandbox: Sandbox {
                        mode: sandbox.mode,
                        network: sandbox.network,
                    },
                    mcp_servers_not_connected: skipped,
                    instructions: info.instruction_files.clone(),
                },
            },
        })
    }

    pub(super) async fn list_sessions(
        &self,
        p: ListSessionsRequest,
    ) -> Result<ListSessionsResponse, RpcError> {
        if let Some(cwd) = &p.cwd {
            absolute(cwd)?;
        }
        let page = self
            .client()
            .await?
            .persistence()
            .list_sessions(v1::ListSessionsRequest {
                page_size: None,
                page_token: p.cursor.unwrap_or_default(),
                order: v1::SessionOrder::NewestFirst as i32,
                cwd: p.cwd.unwrap_or_default(),
                include_archived: false,
                host: String::new(),
            })
            .await
            .map_err(|s| match Refusal::bad_field(&s).as_deref() {
                // dsh's page token is ACP's cursor.
                Some("page_token") => RpcError::params(format!("cursor: {}", s.message())),
                _ => RpcError::from(s),
            })?
            .into_inner();
        // Child agents' sessions are shown as tool calls of their parent, not as sessions.
        let sessions = page
            .sessions
            .iter()
            .filter_map(|s| {
                let h = s.header.as_ref()?;
                (h.origin.as_deref() != Some("subagent")).then(|| SessionInfo {
                    session_id: h.id.clone(),
                    cwd: h.cwd.clone(),
                    title: (!s.title.is_empty()).then(|| s.title.clone()),
                    meta: Meta {
                        dsh: ListedMeta {
                            created_at_ms: h.created_at_ms,
                            live: s.live,
                        },
                    },
                })
            })
            .collect();
        Ok(ListSessionsResponse {
            sessions,
            next_cursor: (!page.next_page_token.is_empty()).then_some(page.next_page_token),
        })
    }

    pub(super) async fn close_session(&self, p: SessionRequest) -> Result<Empty, RpcError> {
        self.client()
            .await?
            .agents()
            .close(v1::CloseAgentRequest {
                agent_id: p.session_id.clone(),
            })
            .await?;
        self.live_set().remove(&p.session_id);
        Ok(Empty {})
    }

    /// A mode is an approval policy, changed on the live agent in place (`Agents.Configure`,
    /// logged as `session/settings`): its jobs and "allow always" rules stay. A session that is
    /// not live is made live again first.
    pub(super) async fn set_mode(&self, p: SetModeRequest) -> Result<Empty, RpcError> {
        let policy = match p.mode_id.as_str() {
            "never" => v1::ApprovalPolicy::Never,
            "on-request" => v1::ApprovalPolicy::OnRequest,
            "always" => v1::ApprovalPolicy::Always,
            other => {
                return Err(RpcError::params(format!(
                    "modeId: unknown mode {other:?}; the modes are never, on-request, always"
                )));
            }
        };
        self.configure(v1::ConfigureAgentRequest {
            agent_id: p.session_id.clone(),
            model: None,
            sandbox: None,
            approval: policy as i32,
        })
        .await?;
        self.update(
            &p.session_id,
            &SessionUpdate::CurrentModeUpdate {
                current_mode_id: p.mode_id,
            },
        )
        .await;
        Ok(Empty {})
    }

    /// Sends one `session/update`.
    pub(super) async fn update(&self, session_id: &str, update: &SessionUpdate) {
        self.peer
            .notify("session/update", SessionNotification { session_id, update })
            .await;
    }
}

/// `cwd` as ACP requires it: an absolute path (`-32602` naming the field otherwise).
fn absolute(cwd: &str) -> Result<(), RpcError> {
    if Path::new(cwd).is_absolute() {
        Ok(())
    } else {
        Err(RpcError::params(format!(
            "cwd: must be an absolute path, got {cwd:?}"
        )))
    }
}

/// The mode state of an agent with approval policy `approval`; each mode's description says the
/// sandbox it runs in (not a mode: it is fixed when the agent goes live).
fn modes(approval: i32, sandbox: &v1::SandboxPolicy) -> ModeState {
    let current = match v1::ApprovalPolicy::try_from(approval) {
        Ok(v1::ApprovalPolicy::Never) => "never",
        Ok(v1::ApprovalPolicy::Always) => "always",
        _ => "on-request",
    };
    let confined = format!("sandbox {}, network {}", sandbox.mode, sandbox.network);
    ModeState {
        current_mode_id: current.to_owned(),
        available_modes: MODES
            .iter()
            .map(|(id, name, description)| Mode {
                id: (*id).to_owned(),
                name: (*name).to_owned(),
                description: format!("{description} ({confined})"),
            })
            .collect(),
    }
}

/// The editor's stdio and streamable HTTP MCP servers, as the agent is given them.
fn given_servers(servers: &[McpServer]) -> Vec<v1::McpServerSpec> {
    let pairs = |list: &[EnvVariable]| {
        list.iter()
            .map(|v| (v.name.clone(), v.value.clone()))
            .collect()
    };
    servers
        .iter()
        .filter_map(|s| match s.kind.as_deref() {
            None | Some("stdio") if !s.command.is_empty() => Some(v1::McpServerSpec {
                name: server_name(&s.name),
                command: s.command.clone(),
                args: s.args.clone(),
                env: pairs(&s.env),
                ..Default::default()
            }),
            Some("http") if !s.url.is_empty() => Some(v1::McpServerSpec {
                name: server_name(&s.name),
                url: s.url.clone(),
                headers: pairs(&s.headers),
                ..Default::default()
            }),
            _ => None,
        })
        .collect()
}

/// An editor's server name as dsh takes it (ASCII letters, digits, `_`, `-`, no `__`): each
/// other character becomes `_`, runs of `_` one. `My Server.v2` is `My_Server_v2`.
fn server_name(name: &str) -> String {
    let mut out = String::with_capacity(name.len());
    for c in name.chars() {
        let c = if c.is_ascii_alphanumeric() || c == '-' {
            c
        } else {
            '_'
        };
        if !(c == '_' && out.ends_with('_')) {
            out.push(c);
        }
    }
    if out.is_empty() || out == "_" {
        return "server".to_owned();
    }
    out
}
