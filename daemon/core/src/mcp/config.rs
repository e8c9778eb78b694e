//! What an MCP server is, as configured (`[mcp_servers.<name>]`) or given by a client.

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::time::Duration;

/// One MCP server an agent gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct McpServerConfig {
    /// Its name: the middle of its tools' names ([`check_server_name`]).
    pub name: String,
    /// How dshd reaches it.
    pub transport: McpTransport,
    /// How long it may take to start (or answer) and list its tools.
    pub startup_timeout: Duration,
    /// How long one tool call may take.
    pub tool_timeout: Duration,
    /// Only these tools are offered, when set.
    pub enabled_tools: Option<Vec<String>>,
    /// These tools are never offered.
    pub disabled_tools: Vec<String>,
    /// Whether each `spawn_agent` child gets its own instance too (top-level agents always do).
    pub children: bool,
}

/// How dshd reaches a server.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum McpTransport {
    /// A process per agent, started through the launcher, spoken to over its stdin and stdout.
    Stdio {
        /// The program to run (looked up in the agent's `PATH`).
        command: String,
        /// Its arguments.
        args: Vec<String>,
        /// Variables added to its environment (never `DSH_*`: those come from the snapshot).
        env: BTreeMap<String, String>,
        /// Its working directory; the agent's when `None`.
        cwd: Option<PathBuf>,
    },
    /// A server already running, spoken to over streamable HTTP by dshd (one MCP session per
    /// agent); it gets the agent's session id in the [`SESSION_HEADER`] header.
    Http {
        /// Its endpoint, `http://` or `https://`.
        url: String,
        /// Headers sent with every request.
        headers: BTreeMap<String, String>,
        /// Sent as `Authorization: Bearer <token>`.
        bearer_token: Option<String>,
    },
}

/// What every MCP tool's name starts with (Claude Code's and Codex's convention, so a hook
/// matcher `mcp__.*` or `mcp__github__.*` written for them matches dsh's).
pub const MCP_PREFIX: &str = "mcp__";

/// The header an HTTP server finds the calling agent's session id in.
pub const SESSION_HEADER: &str = "X-DSH-Session-Id";

/// The defaults of [`McpServerConfig`]'s timeouts. A server started with `npx` or a Python
/// SDK on a busy machine takes seconds to import before it answers; 30 s leaves room for that.
pub const DEFAULT_STARTUP_TIMEOUT: Duration = Duration::from_secs(30);
/// See [`DEFAULT_STARTUP_TIMEOUT`].
pub const DEFAULT_TOOL_TIMEOUT: Duration = Duration::from_secs(60);

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

/// Why `env` cannot be a stdio server's added environment: the executor's rule for a caller's
/// variables (no `DSH_*`, no shell startup variables, no reserved names), checked when the server
/// is configured or given rather than only when it starts.
pub fn check_server_env(env: &BTreeMap<String, String>) -> Result<(), String> {
    crate::exec::check_caller_env(env).map_err(|e| e.to_string())
}

/// Why `url` cannot be an HTTP server's endpoint.
pub fn check_server_url(url: &str) -> Result<(), &'static str> {
    let rest = url
        .strip_prefix("http://")
        .or_else(|| url.strip_prefix("https://"))
        .ok_or("an endpoint starts with http:// or https://")?;
    if rest.is_empty() || rest.starts_with('/') || url.chars().any(char::is_whitespace) {
        return Err("an endpoint names a host, and has no spaces");
    }
    Ok(())
}

impl McpServerConfig {
    /// Whether tool `tool` of the server is offered.
    pub(super) fn offers(&self, tool: &str) -> bool {
        self.enabled_tools
            .as_ref()
            .is_none_or(|allowed| allowed.iter().any(|t| t == tool))
            && !self.disabled_tools.iter().any(|t| t == tool)
    }
}

/// The command line the shell runs for a stdio server: `exec` and each word quoted, so nothing
/// in a name or argument is read as shell syntax, and the server is the process, not a child of
/// bash.
pub(super) fn command_line(command: &str, args: &[String]) -> String {
    std::iter::once("exec".to_owned())
        .chain(
            std::iter::once(command)
                .chain(args.iter().map(String::as_str))
                .map(|word| format!("'{}'", word.replace('\'', r"'\''"))),
        )
        .collect::<Vec<_>>()
        .join(" ")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_command_line_quotes_every_word() {
        assert_eq!(
            command_line("my server", &["--x=$HOME".into(), "it's".into()]),
            r"exec 'my server' '--x=$HOME' 'it'\''s'"
        );
        let config = McpServerConfig {
            name: "s".into(),
            transport: McpTransport::Http {
                url: "http://h/mcp".into(),
                headers: BTreeMap::new(),
                bearer_token: None,
            },
            startup_timeout: DEFAULT_STARTUP_TIMEOUT,
            tool_timeout: DEFAULT_TOOL_TIMEOUT,
            enabled_tools: None,
            disabled_tools: vec!["b".into()],
            children: false,
        };
        assert!(config.offers("a") && !config.offers("b"));
    }

    #[test]
    fn names_and_endpoints_are_checked() {
        assert!(check_server_name("git-hub_2").is_ok());
        for bad in ["", "a b", "a__b", "a.b"] {
            assert!(check_server_name(bad).is_err(), "{bad:?}");
        }
        assert!(check_server_url("http://127.0.0.1:3001/mcp").is_ok());
        assert!(check_server_url("https://mcp.example.com/mcp").is_ok());
        for bad in ["ftp://h", "http://", "http:///x", "http://h/a b", "h/mcp"] {
            assert!(check_server_url(bad).is_err(), "{bad:?}");
        }
    }
}
