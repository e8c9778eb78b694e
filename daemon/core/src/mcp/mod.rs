//! MCP servers as agent tools. Each configured stdio server is started per agent, lazily at the
//! agent's first turn, through the launcher like a command: the agent's sandbox plan, the
//! managed `DSH_*` snapshot (so the server knows which session it serves and where its
//! transcript is), the agent's base environment. Its tools join that agent's tool set as
//! `mcp__<server>__<tool>`. A server that died is started again at the next turn, after a
//! backoff that doubles with each failure in a row; it is stopped (its process group killed) when
//! the agent closes, and a dshd killed outright leaves it to the next dshd's leftover sweep, as
//! a background job.
//!
//! `client.rs` is the only file that knows the MCP SDK; `tool.rs` turns a server tool into a
//! [`Tool`].

mod client;
mod tool;

pub use tool::MCP_PREFIX;

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use crate::call::{AgentContext, Tool, ToolExecution};
use crate::exec::ServedHandle;
use crate::locks::lock;
use crate::shell::{Command, Shell};
use client::{Connection, McpError};
use dsh_session::SessionId;

/// Longest wait between two starts of a server that keeps failing.
const MAX_BACKOFF: Duration = Duration::from_secs(60);

/// One configured stdio MCP server (`[mcp_servers.<name>]`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerConfig {
    /// Its name: the middle of its tools' names. ASCII letters, digits, `_` and `-`.
    pub name: String,
    /// The program to run (looked up in the agent's `PATH`).
    pub command: String,
    /// Its arguments.
    pub args: Vec<String>,
    /// Variables added to its environment (never `DSH_*`: those come from the snapshot).
    pub env: BTreeMap<String, String>,
    /// Its working directory; the agent's when `None`.
    pub cwd: Option<PathBuf>,
    /// How long it may take to start and list its tools.
    pub startup_timeout: Duration,
    /// How long one tool call may take.
    pub tool_timeout: Duration,
    /// Only these tools are offered, when set.
    pub enabled_tools: Option<Vec<String>>,
    /// These tools are never offered.
    pub disabled_tools: Vec<String>,
}

/// Why `name` cannot name a server: it is the middle of `mcp__<name>__<tool>`, which a provider
/// takes only in ASCII letters, digits, `_` and `-`, and a `__` in it would make the split
/// ambiguous.
pub fn check_server_name(name: &str) -> Result<(), &'static str> {
    let charset = name
        .chars()
        .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-');
    if name.is_empty() || name.contains("__") || !charset {
        return Err("a server name has ASCII letters, digits, '_' and '-' only, and no \"__\"");
    }
    Ok(())
}

/// The defaults of [`McpServerConfig`]'s timeouts.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(10);
/// See [`DEFAULT_STARTUP_TIMEOUT`].
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(60);

impl McpServerConfig {
    /// The command line the shell runs: `exec` and each word quoted, so nothing in a name or
    /// argument is read as shell syntax, and the server is the process, not a child of bash.
    fn command_line(&self) -> String {
        std::iter::once("exec".to_owned())
            .chain(
                std::iter::once(&self.command)
                    .chain(&self.args)
                    .map(|word| format!("'{}'", word.replace('\'', r"'\''"))),
            )
            .collect::<Vec<_>>()
            .join(" ")
    }

    fn offers(&self, tool: &str) -> bool {
        self.enabled_tools
            .as_ref()
            .is_none_or(|allowed| allowed.iter().any(|t| t == tool))
            && !self.disabled_tools.iter().any(|t| t == tool)
    }
}

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

/// One started server: its connection and its process.
#[derive(Debug)]
pub(crate) struct Server {
    config: McpServerConfig,
    connection: Connection,
    /// Its process: how it ended, its stderr; dropping it kills the group.
    process: ServedHandle,
}

impl Server {
    /// Whether it can still answer: its process runs and the connection is open.
    fn alive(&self) -> bool {
        self.process.ended().is_none() && self.connection.is_open()
    }

    /// Calls `tool` with `arguments`, within the server's tool timeout.
    async fn call(
        &self,
        tool: &str,
        arguments: Map<String, Value>,
        cancel: &CancellationToken,
    ) -> Result<Value, String> {
        if !self.alive() {
            return Err(self.gone());
        }
        match self
            .connection
            .call(tool, arguments, self.config.tool_timeout, cancel)
            .await
        {
            Ok(result) => Ok(result),
            Err(McpError::Closed) => Err(self.gone()),
            Err(error) => Err(error.to_string()),
        }
    }

    /// Why the server can no longer answer, with its last words.
    fn gone(&self) -> String {
        let how = self
            .process
            .ended()
            .unwrap_or_else(|| "closed the connection".to_owned());
        let said = self
            .process
            .last_stderr_line()
            .map(|l| format!("; its last stderr line: {l}"))
            .unwrap_or_default();
        format!(
            "the MCP server {} {how}{said}; it is started again at the next turn",
            self.config.name
        )
    }
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

    /// The configured servers.
    pub fn configs(&self) -> &[McpServerConfig] {
        &self.configs
    }

    fn servers_of(&self, id: &SessionId) -> Arc<tokio::sync::Mutex<AgentServers>> {
        lock(&self.agents)
            .entry(id.clone())
            .or_insert_with(|| {
                Arc::new(tokio::sync::Mutex::new(AgentServers::new(
                    self.configs.to_vec(),
                )))
            })
            .clone()
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
        let Some(shell) = &self.shell else {
            return Vec::new();
        };
        let servers = self.servers_of(&agent.header.id);
        let mut servers = servers.lock().await;
        let AgentServers { configs, slots } = &mut *servers;
        let mut starting = tokio::task::JoinSet::new();
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
            starting.spawn(async move { (index, start(&shell, &agent, config).await) });
        }
        while let Some(joined) = starting.join_next().await {
            let Ok((index, started)) = joined else {
                continue;
            };
            let Some(slot) = slots.get_mut(index) else {
                continue;
            };
            match started {
                Ok((server, tools, skipped)) => {
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
    pub fn status(&self, agent: &SessionId) -> Vec<McpServerStatus> {
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
            return unknown(&self.configs, McpServerState::NotStarted);
        };
        let Ok(servers) = servers.try_lock() else {
            return unknown(&self.configs, McpServerState::Starting);
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

/// Starts one server for `agent` and lists its tools: the server, the tools offered, and the
/// server tools not offered with why.
async fn start(
    shell: &Shell,
    agent: &AgentContext,
    config: McpServerConfig,
) -> Result<(Arc<Server>, Vec<Arc<dyn Tool>>, Vec<String>), String> {
    let exec = ToolExecution {
        call_id: format!("mcp-start-{}", config.name),
        tool_name: format!("{MCP_PREFIX}{}", config.name),
        agent: Some(agent.clone()),
        turn: None,
        step: None,
        cwd: agent.header.cwd.clone(),
        cancel: CancellationToken::new(),
        output: None,
    };
    let command = Command {
        command: config.command_line(),
        cwd: config.cwd.clone(),
        timeout: None,
        env: config.env.clone(),
        background: false,
        sandbox: None,
    };
    let served = shell
        .serve(&exec, command)
        .await
        .map_err(|e| format!("cannot start {}: {e}", config.command))?;
    let (stdin, stdout, process) = served.into_parts();
    let (connection, remote) = match Connection::open(stdin, stdout, config.startup_timeout).await {
        Ok(opened) => opened,
        Err(error) => {
            let said = process
                .last_stderr_line()
                .map(|l| format!("; its last stderr line: {l}"))
                .unwrap_or_default();
            return Err(format!("{} did not start: {error}{said}", config.name));
        }
    };
    let server = Arc::new(Server {
        config,
        connection,
        process,
    });
    let mut tools: Vec<Arc<dyn Tool>> = Vec::new();
    let mut skipped = Vec::new();
    for remote in remote.iter().filter(|t| server.config.offers(&t.name)) {
        match tool::McpTool::new(server.clone(), remote) {
            Ok(tool) => tools.push(Arc::new(tool)),
            Err(why) => skipped.push(format!("not offered: {why}")),
        }
    }
    Ok((server, tools, skipped))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_quotes_every_word() {
        let config = McpServerConfig {
            name: "s".into(),
            command: "my server".into(),
            args: vec!["--x=$HOME".into(), "it's".into()],
            env: BTreeMap::new(),
            cwd: None,
            startup_timeout: DEFAULT_STARTUP_TIMEOUT,
            tool_timeout: DEFAULT_TOOL_TIMEOUT,
            enabled_tools: None,
            disabled_tools: vec!["b".into()],
        };
        assert_eq!(
            config.command_line(),
            r"exec 'my server' '--x=$HOME' 'it'\''s'"
        );
        assert!(config.offers("a") && !config.offers("b"));
    }
}
