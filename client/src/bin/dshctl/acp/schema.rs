//! The ACP messages the bridge reads and writes (protocol version 1, as schema 1.20 of the
//! `agent-client-protocol` crates shapes them), as serde types of our own: the schema crate turns
//! on serde_json's `preserve_order`, which would change dshd itself in a workspace build
//! (DECISIONS.md, "ACP bridge"). Only what the bridge uses is here; members it does not read are
//! ignored, so a newer client's additions are harmless.

use serde::{Deserialize, Serialize};
use serde_json::value::RawValue;

// What the client sends.

/// `initialize`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeRequest {
    /// The version the client speaks.
    pub protocol_version: u64,
    /// What the client can do; its `_meta.terminal_output` and `session.compaction` are read.
    #[serde(default)]
    pub client_capabilities: ClientCapabilities,
}

/// `initialize`'s `clientCapabilities`.
#[derive(Debug, Default, Deserialize)]
pub struct ClientCapabilities {
    /// Extensions; `terminal_output: true` (Zed's) shows commands in display-only terminals.
    #[serde(default, rename = "_meta")]
    pub meta: Option<serde_json::Map<String, serde_json::Value>>,
    /// Session capabilities; `compaction: {}` opts in to `compaction_update`.
    #[serde(default)]
    pub session: Option<serde_json::Map<String, serde_json::Value>>,
}

impl ClientCapabilities {
    /// Whether the client takes `compaction_update` (`session.compaction`, an object).
    pub fn compaction(&self) -> bool {
        self.session
            .as_ref()
            .and_then(|s| s.get("compaction"))
            .is_some_and(serde_json::Value::is_object)
    }

    /// Whether the client shows a command's output in a display-only terminal.
    pub fn terminal_output(&self) -> bool {
        self.meta
            .as_ref()
            .and_then(|m| m.get("terminal_output"))
            .is_some_and(|v| v.as_bool() == Some(true))
    }
}

/// An MCP server the client asked for. Stdio servers (no `type`, or `stdio`) and streamable HTTP
/// ones (`http`) are given to the agent; `sse` ones are named as not connected.
#[derive(Debug, Deserialize)]
pub struct McpServer {
    /// Its name.
    #[serde(default)]
    pub name: String,
    /// `http` or `sse` for a remote server; absent (or `stdio`) for a stdio one.
    #[serde(default, rename = "type")]
    pub kind: Option<String>,
    /// A stdio server's program.
    #[serde(default)]
    pub command: String,
    /// Its arguments.
    #[serde(default)]
    pub args: Vec<String>,
    /// Its environment variables.
    #[serde(default)]
    pub env: Vec<EnvVariable>,
    /// An HTTP server's endpoint.
    #[serde(default)]
    pub url: String,
    /// An HTTP server's headers.
    #[serde(default)]
    pub headers: Vec<EnvVariable>,
}

/// One `{name, value}` of an MCP server's `env` or `headers`.
#[derive(Debug, Deserialize)]
pub struct EnvVariable {
    /// The variable's name.
    pub name: String,
    /// Its value.
    pub value: String,
}

/// `session/new`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct NewSessionRequest {
    /// The working directory (absolute).
    pub cwd: String,
    /// MCP servers: stdio ones are the agent's, others are not connected.
    #[serde(default)]
    pub mcp_servers: Vec<McpServer>,
}

/// `session/load`, `session/resume` and `session/close`: a session, and for the first two the
/// MCP servers the client would have connected.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionRequest {
    /// The session.
    pub session_id: String,
    /// MCP servers (not connected).
    #[serde(default)]
    pub mcp_servers: Vec<McpServer>,
}

/// `session/fork`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ForkSessionRequest {
    /// The session forked.
    pub session_id: String,
    /// The fork's working directory: must be the session's.
    pub cwd: String,
    /// MCP servers (not connected).
    #[serde(default)]
    pub mcp_servers: Vec<McpServer>,
}

/// `session/list`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ListSessionsRequest {
    /// Only sessions in this directory.
    #[serde(default)]
    pub cwd: Option<String>,
    /// The page to read (dsh's page token).
    #[serde(default)]
    pub cursor: Option<String>,
}

/// `session/set_mode`.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SetModeRequest {
    /// The session.
    pub session_id: String,
    /// The mode: an approval policy.
    pub mode_id: String,
}

/// `session/set_config_option` (a value id: dsh's options are all dropdowns).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SetConfigOptionRequest {
    /// The session.
    pub session_id: String,
    /// The option (`model`).
    pub config_id: String,
    /// The value chosen.
    pub value: String,
}

/// `session/prompt`. The blocks are read one by one ([`ContentBlock`]), so a refused one is named
/// by its index.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptRequest {
    /// The session.
    pub session_id: String,
    /// The prompt's content blocks, as written.
    pub prompt: Vec<Box<RawValue>>,
}

/// `session/cancel` (a notification).
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct CancelNotification {
    /// The session whose turn is cancelled.
    pub session_id: String,
}

/// A content block of a prompt the bridge can take.
#[derive(Debug, Deserialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum ContentBlock {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
    /// A link to a resource the agent can read itself.
    ResourceLink {
        /// Its URI.
        uri: String,
    },
    /// A resource's contents (embedded context).
    Resource {
        /// The resource.
        resource: EmbeddedResource,
    },
}

/// The contents of a `resource` block: text, or (refused) a blob.
#[derive(Debug, Deserialize)]
pub struct EmbeddedResource {
    /// Its URI.
    #[serde(default)]
    pub uri: Option<String>,
    /// Its text, for a text resource.
    #[serde(default)]
    pub text: Option<String>,
}

/// Only the `type` of a content block, to name one the bridge cannot read.
#[derive(Debug, Deserialize)]
pub struct BlockType {
    /// The block's type.
    #[serde(rename = "type", default)]
    pub kind: Option<String>,
}

/// The client's answer to `session/request_permission`.
#[derive(Debug, Deserialize)]
pub struct RequestPermissionResponse {
    /// What the person chose.
    pub outcome: PermissionOutcome,
}

/// What the person chose.
#[derive(Debug, Deserialize)]
#[serde(
    tag = "outcome",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum PermissionOutcome {
    /// The prompt turn was cancelled before they chose.
    Cancelled,
    /// One of the options offered.
    Selected {
        /// The option's id.
        option_id: String,
    },
}

/// The session id of an answer the bridge wrote (new, load, resume, fork), read back.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionId {
    /// The session.
    pub session_id: String,
}

// What the bridge answers.

/// `initialize`'s answer.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct InitializeResponse {
    /// The version the bridge speaks.
    pub protocol_version: u64,
    /// What it can do.
    pub agent_capabilities: AgentCapabilities,
    /// How a client could authenticate (dsh takes no keys from editors: only a pointer to the
    /// variable dshd reads).
    pub auth_methods: Vec<AuthMethod>,
    /// The bridge itself.
    pub agent_info: Implementation,
    /// The daemon the bridge talks to.
    #[serde(rename = "_meta")]
    pub meta: Meta<DaemonMeta>,
}

/// The agent's capabilities.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct AgentCapabilities {
    /// `session/load` is supported.
    pub load_session: bool,
    /// What a prompt may hold.
    pub prompt_capabilities: PromptCapabilities,
    /// Which MCP transports are connected.
    pub mcp_capabilities: McpCapabilities,
    /// The session methods beyond the required ones.
    pub session_capabilities: SessionCapabilities,
}

/// What a prompt may hold.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptCapabilities {
    /// Images.
    pub image: bool,
    /// Audio.
    pub audio: bool,
    /// Resources' contents.
    pub embedded_context: bool,
}

/// Which MCP transports are connected.
#[derive(Debug, Serialize)]
pub struct McpCapabilities {
    /// HTTP.
    pub http: bool,
    /// SSE.
    pub sse: bool,
}

/// The session methods beyond the required ones: each present one is supported.
#[derive(Debug, Serialize)]
pub struct SessionCapabilities {
    /// `session/list`.
    pub list: Empty,
    /// `session/resume`.
    pub resume: Empty,
    /// `session/close`.
    pub close: Empty,
    /// `session/fork` (unstable in ACP).
    pub fork: Empty,
    /// `session/delete`.
    pub delete: Empty,
}

/// `{}`: a capability without options, or an answer without members.
#[derive(Debug, Serialize)]
pub struct Empty {}

/// An authentication method.
#[derive(Debug, Serialize)]
pub struct AuthMethod {
    /// Its id.
    pub id: String,
    /// What it is called.
    pub name: String,
    /// What to do.
    pub description: String,
}

/// A program's name and version.
#[derive(Debug, Serialize)]
pub struct Implementation {
    /// Its name.
    pub name: String,
    /// Its title.
    pub title: String,
    /// Its version.
    pub version: String,
}

/// `_meta`: dsh's own members, under `dsh`.
#[derive(Debug, Serialize)]
pub struct Meta<T> {
    /// dsh's members.
    pub dsh: T,
}

/// `initialize`'s `_meta.dsh`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct DaemonMeta {
    /// dshd's version.
    pub daemon_version: String,
    /// dshd's gRPC protocol version.
    pub daemon_protocol_version: u32,
    /// dshd's socket.
    pub socket: String,
}

/// The answer to `session/new`, `session/load`, `session/resume` and `session/fork`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionResponse {
    /// The session (= dsh agent id).
    pub session_id: String,
    /// Its modes: dsh's approval policies.
    pub modes: ModeState,
    /// Its configuration options: the model.
    pub config_options: Vec<ConfigOption>,
    /// Where its transcript is, its sandbox, the MCP servers not connected.
    #[serde(rename = "_meta")]
    pub meta: Meta<SessionMeta>,
}

/// A session's `_meta.dsh`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionMeta {
    /// Where the session is stored (`null` where it is no file, under SQLite).
    pub transcript: Option<Transcript>,
    /// The sandbox its commands run in.
    pub sandbox: Sandbox,
    /// The MCP servers asked for and not connected.
    pub mcp_servers_not_connected: Vec<String>,
    /// The project instructions files the session loaded (none before its first turn).
    pub instructions: Vec<String>,
}

/// Where a session is stored.
#[derive(Debug, Serialize)]
pub struct Transcript {
    /// The backend's kind.
    pub kind: String,
    /// The path.
    pub path: String,
}

/// A sandbox policy.
#[derive(Debug, Serialize)]
pub struct Sandbox {
    /// The filesystem mode.
    pub mode: String,
    /// `on` or `off`.
    pub network: String,
}

/// The modes of a session.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ModeState {
    /// The mode in force.
    pub current_mode_id: String,
    /// Every mode.
    pub available_modes: Vec<Mode>,
}

/// A mode.
#[derive(Debug, Serialize)]
pub struct Mode {
    /// Its id.
    pub id: String,
    /// Its name.
    pub name: String,
    /// What it does, and the sandbox it runs in.
    pub description: String,
}

/// `session/list`'s answer.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListSessionsResponse {
    /// This page's sessions.
    pub sessions: Vec<SessionInfo>,
    /// The next page's cursor, when there is one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub next_cursor: Option<String>,
}

/// A listed session.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionInfo {
    /// The session.
    pub session_id: String,
    /// Its working directory.
    pub cwd: String,
    /// Its title, when a person gave one.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub title: Option<String>,
    /// When it was created and whether it is live.
    #[serde(rename = "_meta")]
    pub meta: Meta<ListedMeta>,
}

/// A listed session's `_meta.dsh`.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ListedMeta {
    /// Unix milliseconds.
    pub created_at_ms: i64,
    /// Whether it is live as an agent.
    pub live: bool,
}

/// `session/prompt`'s answer.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PromptResponse {
    /// Why the turn ended.
    pub stop_reason: StopReason,
}

/// Why a prompt turn ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum StopReason {
    /// The model finished.
    EndTurn,
    /// It was cancelled (or dsh aborted or interrupted it).
    Cancelled,
    /// A hook refused the prompt or stopped the turn.
    Refusal,
    /// The turn reached dsh's step limit.
    MaxTurnRequests,
}

// What the bridge sends unasked, and asks: `outgoing.rs`.
pub use super::outgoing::*;
