//! One started server of one agent: its connection and, for a stdio server, its process.

use std::sync::Arc;

use serde_json::{Map, Value};
use tokio_util::sync::CancellationToken;

use super::client::RemoteTool;
use super::client::{Connection, McpError};
use super::config::{MCP_PREFIX, McpServerConfig, McpTransport, SESSION_HEADER, command_line};
use crate::call::{AgentContext, ToolExecution};
use crate::exec::{Served, ServedHandle};
use crate::shell::{Command, Shell};

/// How long a server that failed to start is given to exit, so its stderr can be read.
const EXIT_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// One started server.
#[derive(Debug)]
pub(crate) struct Server {
    /// What it is.
    pub(super) config: McpServerConfig,
    /// The MCP session with it.
    connection: Connection,
    /// A stdio server's process (how it ended, its stderr); dropping it kills the group.
    /// `None` for an HTTP server.
    process: Option<ServedHandle>,
}

impl Server {
    /// Whether it can still answer: its process runs and the connection is open.
    pub(super) fn alive(&self) -> bool {
        self.process.as_ref().is_none_or(|p| p.ended().is_none()) && self.connection.is_open()
    }

    /// Calls `tool` with `arguments`, within the server's tool timeout.
    pub(super) async fn call(
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
    pub(super) fn gone(&self) -> String {
        let how = self
            .process
            .as_ref()
            .and_then(ServedHandle::ended)
            .unwrap_or_else(|| "closed the connection".to_owned());
        format!(
            "the MCP server {} {how}{}; it is started again at the next turn",
            self.config.name,
            last_words(self.process.as_ref())
        )
    }
}

/// `; its last stderr line: …` of a stdio server's process, or nothing.
fn last_words(process: Option<&ServedHandle>) -> String {
    process
        .and_then(ServedHandle::last_stderr_line)
        .map(|l| format!("; its last stderr line: {l}"))
        .unwrap_or_default()
}

/// Starts one server for `agent`: the server and the tools it lists.
pub(super) async fn start(
    shell: &Shell,
    agent: &AgentContext,
    config: McpServerConfig,
) -> Result<(Arc<Server>, Vec<RemoteTool>), String> {
    let (connection, remote, process) = match &config.transport {
        McpTransport::Stdio {
            command,
            args,
            env,
            cwd,
        } => {
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
            let command_spec = Command {
                command: command_line(command, args),
                cwd: cwd.clone(),
                timeout: None,
                env: env.clone(),
                background: false,
                sandbox: None,
            };
            let served = shell
                .serve(&exec, command_spec)
                .await
                .map_err(|e| format!("cannot start {command}: {e}"))?;
            let Served {
                stdin,
                stdout,
                handle: process,
            } = served;
            match Connection::open(stdin, stdout, config.startup_timeout).await {
                Ok((connection, remote)) => (connection, remote, Some(process)),
                Err(error) => {
                    // A server that could not start has usually exited: its stderr says why.
                    process.wait_ended(EXIT_WAIT).await;
                    return Err(format!(
                        "{} did not start: {error}{}",
                        config.name,
                        last_words(Some(&process))
                    ));
                }
            }
        }
        McpTransport::Http {
            url,
            headers,
            bearer_token,
        } => {
            let mut headers = headers.clone();
            headers.insert(SESSION_HEADER.to_owned(), agent.header.id.to_string());
            match Connection::open_http(
                url,
                &headers,
                bearer_token.as_deref(),
                config.startup_timeout,
            )
            .await
            {
                Ok((connection, remote)) => (connection, remote, None),
                Err(error) => {
                    return Err(format!("{} ({url}) did not answer: {error}", config.name));
                }
            }
        }
    };
    let server = Arc::new(Server {
        config,
        connection,
        process,
    });
    Ok((server, remote))
}
