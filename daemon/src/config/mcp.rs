//! `[mcp_servers.<name>]`: the stdio MCP servers every top-level agent gets (Codex's table of the
//! same name and keys). Only from dshd's own config file: never from files in a workspace, which
//! a sandboxed model can write.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{Builder, ConfigError};
use dsh_core::{
    MCP_DEFAULT_STARTUP_TIMEOUT, MCP_DEFAULT_TOOL_TIMEOUT, McpServerConfig, check_mcp_server_name,
};

/// One `[mcp_servers.<name>]` table as written.
#[derive(Debug, Deserialize)]
#[serde(deny_unknown_fields)]
pub(super) struct McpServerSection {
    pub command: Option<String>,
    #[serde(default)]
    pub args: Vec<String>,
    #[serde(default)]
    pub env: BTreeMap<String, String>,
    pub cwd: Option<String>,
    pub enabled: Option<bool>,
    pub startup_timeout_ms: Option<u64>,
    pub tool_timeout_ms: Option<u64>,
    pub enabled_tools: Option<Vec<String>>,
    #[serde(default)]
    pub disabled_tools: Vec<String>,
    /// Streamable HTTP servers are not supported yet: named so the error says so.
    pub url: Option<String>,
}

impl Builder<'_> {
    /// The enabled servers, in name order.
    pub(super) fn mcp_servers(
        &self,
        sections: &BTreeMap<String, McpServerSection>,
    ) -> Result<Vec<McpServerConfig>, ConfigError> {
        let mut servers = Vec::new();
        for (name, section) in sections {
            let key = |field: &str| format!("mcp_servers.{name}.{field}");
            check_mcp_server_name(name)
                .map_err(|why| self.invalid(&format!("mcp_servers.{name}"), why))?;
            if section.url.is_some() {
                return Err(self.invalid(
                    &key("url"),
                    "streamable HTTP servers are not supported yet; run the server over stdio (`command`)",
                ));
            }
            let Some(command) = section.command.clone().filter(|c| !c.is_empty()) else {
                return Err(self.invalid(&key("command"), "is required: the program to run"));
            };
            if section.enabled == Some(false) {
                continue;
            }
            if let Some(bad) = section
                .env
                .keys()
                .find(|k| k.to_ascii_uppercase().starts_with("DSH_"))
            {
                return Err(self.invalid(
                    &key("env"),
                    format!("{bad:?}: DSH_* values come only from the session's managed snapshot"),
                ));
            }
            servers.push(McpServerConfig {
                name: name.clone(),
                command,
                args: section.args.clone(),
                env: section.env.clone(),
                cwd: self.path(section.cwd.as_ref(), &key("cwd"))?,
                startup_timeout: self.positive_ms(
                    section.startup_timeout_ms,
                    &key("startup_timeout_ms"),
                    MCP_DEFAULT_STARTUP_TIMEOUT,
                )?,
                tool_timeout: self.positive_ms(
                    section.tool_timeout_ms,
                    &key("tool_timeout_ms"),
                    MCP_DEFAULT_TOOL_TIMEOUT,
                )?,
                enabled_tools: section.enabled_tools.clone(),
                disabled_tools: section.disabled_tools.clone(),
            });
        }
        Ok(servers)
    }
}
