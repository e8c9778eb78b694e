//! `[mcp_servers.<name>]`: the MCP servers every top-level agent gets (Codex's table of the same
//! name and keys): a `command` run over stdio, or a streamable HTTP `url`. Only from dshd's own
//! config file: never from files in a workspace, which a sandboxed model can write.

use std::collections::BTreeMap;

use serde::Deserialize;

use super::{Builder, ConfigError};
use dsh_core::{
    MCP_DEFAULT_STARTUP_TIMEOUT, MCP_DEFAULT_TOOL_TIMEOUT, McpServerConfig, McpTransport,
    check_mcp_server_env, check_mcp_server_name, check_mcp_server_url,
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
    pub url: Option<String>,
    #[serde(default)]
    pub http_headers: BTreeMap<String, String>,
    pub bearer_token_env_var: Option<String>,
    pub bearer_token_file: Option<String>,
    pub children: Option<bool>,
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
            if section.enabled == Some(false) {
                continue;
            }
            let transport = self.mcp_transport(name, section)?;
            servers.push(McpServerConfig {
                name: name.clone(),
                transport,
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
                children: section.children.unwrap_or(false),
            });
        }
        Ok(servers)
    }

    /// A server's `command` (stdio) or `url` (streamable HTTP), with the keys that go with it.
    fn mcp_transport(
        &self,
        name: &str,
        section: &McpServerSection,
    ) -> Result<McpTransport, ConfigError> {
        let key = |field: &str| format!("mcp_servers.{name}.{field}");
        let stdio_only = [
            ("args", !section.args.is_empty()),
            ("env", !section.env.is_empty()),
            ("cwd", section.cwd.is_some()),
        ];
        let http_only = [
            ("http_headers", !section.http_headers.is_empty()),
            (
                "bearer_token_env_var",
                section.bearer_token_env_var.is_some(),
            ),
            ("bearer_token_file", section.bearer_token_file.is_some()),
        ];
        let misplaced = |keys: &[(&str, bool)], kind: &str| {
            keys.iter()
                .find(|(_, set)| *set)
                .map(|(field, _)| self.invalid(&key(field), format!("is for {kind} servers only")))
        };
        match (&section.command, &section.url) {
            (Some(_), Some(_)) => Err(self.invalid(
                &key("url"),
                "give `command` (a stdio server) or `url` (a streamable HTTP one), not both",
            )),
            (None, None) => Err(self.invalid(
                &key("command"),
                "is required: the program to run (or `url` for a streamable HTTP server)",
            )),
            (Some(command), None) => {
                if command.is_empty() {
                    return Err(self.invalid(&key("command"), "is empty"));
                }
                if let Some(error) = misplaced(&http_only, "streamable HTTP") {
                    return Err(error);
                }
                check_mcp_server_env(&section.env).map_err(|why| self.invalid(&key("env"), why))?;
                Ok(McpTransport::Stdio {
                    command: command.clone(),
                    args: section.args.clone(),
                    env: section.env.clone(),
                    cwd: self.path(section.cwd.as_ref(), &key("cwd"))?,
                })
            }
            (None, Some(url)) => {
                check_mcp_server_url(url).map_err(|why| self.invalid(&key("url"), why))?;
                if let Some(error) = misplaced(&stdio_only, "stdio") {
                    return Err(error);
                }
                let bearer_token = match (&section.bearer_token_env_var, &section.bearer_token_file)
                {
                    (Some(_), Some(_)) => {
                        return Err(self.invalid(
                            &key("bearer_token_file"),
                            "give bearer_token_env_var or bearer_token_file, not both",
                        ));
                    }
                    // Read once, at start, as the model key is: a token dshd was not given
                    // stops it here, naming the key, rather than failing every turn later.
                    (Some(var), None) => Some(
                        std::env::var(var)
                            .ok()
                            .filter(|t| !t.is_empty())
                            .ok_or_else(|| {
                                self.invalid(
                                    &key("bearer_token_env_var"),
                                    format!("{var} is not set in dshd's environment (or is empty)"),
                                )
                            })?,
                    ),
                    (None, Some(file)) => {
                        let path = self.absolute(file, &key("bearer_token_file"))?;
                        let token = std::fs::read_to_string(&path).map_err(|e| {
                            self.invalid(
                                &key("bearer_token_file"),
                                format!("cannot read {}: {e}", path.display()),
                            )
                        })?;
                        Some(token.trim().to_owned())
                    }
                    (None, None) => None,
                };
                Ok(McpTransport::Http {
                    url: url.clone(),
                    headers: section.http_headers.clone(),
                    bearer_token,
                })
            }
        }
    }
}
