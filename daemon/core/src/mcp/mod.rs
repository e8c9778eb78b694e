//! MCP servers as agent tools. Each top-level agent gets its own instance of each server (of
//! dshd's config, and those its client gave it; a `spawn_agent` child, of those configured with
//! `children`), started when a turn begins and its tools join
//! the agent's tool set as `mcp__<server>__<tool>`. A stdio server starts through the launcher
//! like a command: the agent's sandbox plan, the managed `DSH_*` snapshot (so the server knows
//! which session it serves and where its transcript is), the agent's base environment. An HTTP
//! server gets the session id in a header. A server that died is started again at the next
//! turn, after a backoff that doubles with each failure in a row; it is stopped (its process
//! group killed) when the agent closes, and a dshd killed outright leaves it to see its stdin
//! close and to the next dshd's leftover sweep, as a background job.
//!
//! `config.rs` says what a server is; `client.rs` is the only file that knows the MCP SDK;
//! `server.rs` starts one; `tool.rs` turns a server tool into a [`Tool`].

mod client;
mod config;
mod server;
mod tool;

pub use config::{
    DEFAULT_STARTUP_TIMEOUT, DEFAULT_TOOL_TIMEOUT, MCP_PREFIX, McpServerConfig, McpTransport,
    SESSION_HEADER, check_server_env, check_server_name, check_server_url,
};

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use crate::call::{AgentContext, Tool};
use crate::locks::lock;
use crate::shell::Shell;
use dsh_session::SessionId;
use server::{Server, start};
use tool::McpTool;

/// Longest wait between two starts of a server that keeps failing.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// Where one server of one agent stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum McpServerState {
    /// The agent has not begun a turn since it went live.
    NotStarted,
    /// A turn is starting it now.
    Starting,
    /// It answers.
    Running,
    /// It did not start, or died; a later turn starts it again.
    Failed,
}

/// One server of one agent, for `dshctl mcp list` and `Agents.Show`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerStatus {
    /// The server's name.
    pub name: String,
    /// Where it stands.
    pub state: McpServerState,
    /// The tools the agent is offered (`mcp__<server>__<tool>`).
    pub tools: Vec<String>,
    /// What went wrong last (a failed start, a crash), and server tools not offered and why.
    pub last_error: Option<String>,
    /// How many times it was started.
    pub starts: u32,
}

/// One configured server of one agent.
#[derive(Debug, Default)]
struct Slot {
    server: Option<Arc<Server>>,
    tools: Vec<Arc<dyn Tool>>,
    last_error: Option<String>,
    starts: u32,
    failures: u32,
    retry_at: Option<Instant>,
}

/// One agent's servers: what it was given and where each stands.
#[derive(Debug)]
struct AgentServers {
    /// The configured servers, then those its client gave it, in that order.
    configs: Vec<McpServerConfig>,
    /// One per config.
    slots: Vec<Slot>,
}

impl AgentServers {
    fn new(configs: Vec<McpServerConfig>) -> Self {
        Self {
            slots: configs.iter().map(|_| Slot::default()).collect(),
            configs,
        }
    }
}

/// Every agent's MCP servers.
#[derive(Debug)]
pub struct McpServers {
    /// Starts the servers (through the executor, with each agent's snapshot).
    shell: Option<Shell>,
    /// What is configured for every top-level agent.
    configs: Arc<[McpServerConfig]>,
    /// Per live agent, its servers. A tokio mutex: a turn holds it while its servers start, so
    /// two turns of one agent never start the same server twice.
    agents: Mutex<HashMap<SessionId, Arc<tokio::sync::Mutex<AgentServers>>>>,
}

impl McpServers {
    /// No servers.
    pub fn none() -> Self {
        Self {
            shell: None,
            configs: Arc::from([]),
            agents: Mutex::default(),
        }
    }

    /// `configs`, started through `shell`.
    pub fn new(shell: Shell, configs: Vec<McpServerConfig>) -> Self {
        Self {
            shell: Some(shell),
            configs: configs.into(),
            agents: Mutex::default(),
        }
    }

    /// The configured servers an agent `depth` levels down gets: all for a top-level agent,
    /// those with `children` for a `spawn_agent` child.
    fn configs_for(&self, depth: u32) -> Vec<McpServerConfig> {
        self.configs
            .iter()
            .filter(|c| depth == 0 || c.children)
            .cloned()
            .collect()
    }

    /// `agent`'s servers; `None` when it has none (nothing is kept for it then: most agents,
    /// and every child of a fan-out, have none).
    fn servers_of(&self, agent: &AgentContext) -> Option<Arc<tokio::sync::Mutex<AgentServers>>> {
        let mut agents = lock(&self.agents);
        if let Some(servers) = agents.get(&agent.header.id) {
            return Some(servers.clone());
        }
        let configs = self.configs_for(agent.header.delegation_depth);
        if configs.is_empty() {
            return None;
        }
        let servers = Arc::new(tokio::sync::Mutex::new(AgentServers::new(configs)));
        agents.insert(agent.header.id.clone(), servers.clone());
        Some(servers)
    }

    /// Why `extra` cannot be given to an agent: a name a configured server has.
    pub fn check_extra(&self, extra: &[McpServerConfig]) -> Result<(), String> {
        for (index, server) in extra.iter().enumerate() {
            if self.configs.iter().any(|c| c.name == server.name) {
                return Err(format!(
                    "mcp_servers[{index}].name: {:?} is the name of a server of dshd's config",
                    server.name
                ));
            }
        }
        Ok(())
    }

    /// Gives agent `id` the servers its client asked for (`Agents.Create`, an editor's ACP
    /// `mcpServers`), after the configured ones; checked first with [`Self::check_extra`].
    pub fn give(&self, id: &SessionId, extra: Vec<McpServerConfig>) {
        if extra.is_empty() {
            return;
        }
        let mut configs = self.configs.to_vec();
        configs.extend(extra);
        lock(&self.agents).insert(
            id.clone(),
            Arc::new(tokio::sync::Mutex::new(AgentServers::new(configs))),
        );
    }

    /// The tools of `agent`'s servers for its next turn, starting those not running (the first
    /// turn, or a server that died and whose backoff has passed). A server that cannot start
    /// offers no tools and says why in [`Self::status`].
    pub async fn tools(&self, agent: &AgentContext) -> Vec<Arc<dyn Tool>> {
        let (Some(shell), Some(servers)) = (&self.shell, self.servers_of(agent)) else {
            return Vec::new();
        };
        let mut servers = servers.lock().await;
        let AgentServers { configs, slots } = &mut *servers;
        let mut starting = tokio::task::JoinSet::new();
        let mut indexes = HashMap::new();
        for (index, (slot, config)) in slots.iter_mut().zip(configs.iter()).enumerate() {
            let alive = slot.server.as_ref().is_some_and(|s| s.alive());
            if alive {
                continue;
            }
            if let Some(server) = slot.server.take() {
                // It died since the last turn: said once, then started again.
                let gone = server.gone();
                tracing::warn!(session = %agent.header.id, server = %config.name, "{gone}");
                slot.last_error = Some(gone);
                slot.tools.clear();
            }
            if slot.retry_at.is_some_and(|at| Instant::now() < at) {
                continue;
            }
            slot.starts += 1;
            let (shell, config, agent) = (shell.clone(), config.clone(), agent.clone());
            let task = starting.spawn(async move { (index, start(&shell, &agent, config).await) });
            indexes.insert(task.id(), index);
        }
        while let Some(joined) = starting.join_next_with_id().await {
            let (index, started) = match joined {
                Ok((_, started)) => started,
                // A start that panicked is a failed start, said as such; never a lost slot.
                Err(error) => match indexes.get(&error.id()) {
                    Some(&index) => (index, Err(format!("starting it failed: {error}"))),
                    None => continue,
                },
            };
            let Some(slot) = slots.get_mut(index) else {
                continue;
            };
            match started {
                Ok((server, remote)) => {
                    let (tools, skipped) = offered(&server, &remote);
                    slot.server = Some(server);
                    slot.tools = tools;
                    slot.failures = 0;
                    slot.retry_at = None;
                    slot.last_error = (!skipped.is_empty()).then(|| skipped.join("; "));
                }
                Err(error) => {
                    slot.failures += 1;
                    let backoff = Duration::from_secs(1 << slot.failures.min(6)).min(MAX_BACKOFF);
                    slot.retry_at = Some(Instant::now() + backoff);
                    tracing::warn!(session = %agent.header.id, server = %configs[index].name, %error, "MCP server failed to start");
                    slot.last_error = Some(error);
                }
            }
        }
        slots.iter().flat_map(|s| s.tools.iter().cloned()).collect()
    }

    /// Where `agent`'s servers stand. Never waits: while a turn starts them, they are
    /// [`McpServerState::Starting`].
    pub fn status(&self, agent: &SessionId, depth: u32) -> Vec<McpServerStatus> {
        let servers = lock(&self.agents).get(agent).cloned();
        let unknown = |configs: &[McpServerConfig], state| {
            configs
                .iter()
                .map(|c| McpServerStatus {
                    name: c.name.clone(),
                    state,
                    tools: Vec::new(),
                    last_error: None,
                    starts: 0,
                })
                .collect()
        };
        let Some(servers) = servers else {
            return unknown(&self.configs_for(depth), McpServerState::NotStarted);
        };
        let Ok(servers) = servers.try_lock() else {
            return unknown(&self.configs_for(depth), McpServerState::Starting);
        };
        servers
            .slots
            .iter()
            .zip(servers.configs.iter())
            .map(|(slot, config)| McpServerStatus {
                name: config.name.clone(),
                state: match &slot.server {
                    Some(s) if s.alive() => McpServerState::Running,
                    _ if slot.starts == 0 => McpServerState::NotStarted,
                    _ => McpServerState::Failed,
                },
                tools: slot.tools.iter().map(|t| t.schema().name).collect(),
                last_error: slot.last_error.clone(),
                starts: slot.starts,
            })
            .collect()
    }

    /// Stops `agent`'s servers (it closed): their process groups are killed.
    pub fn stop(&self, agent: &SessionId) {
        lock(&self.agents).remove(agent);
    }
}

/// The agent's tools for the server tools `remote` of `server`, and those not offered, with why.
fn offered(
    server: &Arc<Server>,
    remote: &[client::RemoteTool],
) -> (Vec<Arc<dyn Tool>>, Vec<String>) {
    let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
    let mut skipped = Vec::new();
    for remote in remote.iter().filter(|t| server.config.offers(&t.name)) {
        match McpTool::new(server.clone(), remote) {
            Ok(tool) => tools.push(Arc::new(tool)),
            Err(why) => skipped.push(format!("not offered: {why}")),
        }
    }
    (tools, skipped)
}
