//! The ACP messages the bridge sends unasked (`session/update`) and the requests it makes
//! (`session/request_permission`), as serde types; `schema.rs` has the rest.

use serde::Serialize;
use serde_json::Value;

/// `session/update`'s params.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionNotification<'a> {
    /// The session.
    pub session_id: &'a str,
    /// The update.
    pub update: &'a SessionUpdate,
}

/// One update of a session.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(
    tag = "sessionUpdate",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum SessionUpdate {
    /// Model text.
    AgentMessageChunk {
        /// The text.
        content: Content,
    },
    /// The model's reasoning (`assistant/thought`).
    AgentThoughtChunk {
        /// The text.
        content: Content,
    },
    /// The person's own prompt (replayed on load).
    UserMessageChunk {
        /// The text.
        content: Content,
    },
    /// The model's plan (`update_plan`), whole, each time it changes.
    Plan {
        /// The steps, in order.
        entries: Vec<PlanEntry>,
    },
    /// A tool call began.
    ToolCall {
        /// Its id.
        tool_call_id: String,
        /// What it shows.
        title: String,
        /// Its kind.
        kind: ToolKind,
        /// Its status.
        status: ToolCallStatus,
        /// Its arguments.
        raw_input: Value,
        /// A display-only terminal for a command's output, for clients that show one.
        #[serde(skip_serializing_if = "Vec::is_empty")]
        content: Vec<ToolCallContent>,
        /// `terminal_info` of that terminal (see [`TerminalMeta`]).
        #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
        meta: Option<TerminalMeta>,
    },
    /// A tool call changed.
    ToolCallUpdate {
        /// Its id.
        tool_call_id: String,
        /// Its status, when it changed.
        #[serde(skip_serializing_if = "Option::is_none")]
        status: Option<ToolCallStatus>,
        /// Its content so far, when it changed.
        #[serde(skip_serializing_if = "Option::is_none")]
        content: Option<Vec<ToolCallContent>>,
        /// Its result, at its end.
        #[serde(skip_serializing_if = "Option::is_none")]
        raw_output: Option<RawOutput>,
        /// New output of its display-only terminal, or how the command ended.
        #[serde(rename = "_meta", skip_serializing_if = "Option::is_none")]
        meta: Option<TerminalMeta>,
    },
    /// A file tool's change, after its result: the diff and where it is. ACP's
    /// `tool_call_update` again, with the members only a change has.
    #[serde(rename = "tool_call_update")]
    ToolCallChange {
        /// Its id.
        tool_call_id: String,
        /// The diff.
        content: Vec<ToolCallContent>,
        /// The file and its first changed line.
        locations: Vec<ToolCallLocation>,
    },
    /// The session's mode changed.
    CurrentModeUpdate {
        /// The mode now in force.
        current_mode_id: String,
    },
    /// The session's title or time of last activity changed.
    SessionInfoUpdate {
        /// The title a person gave it (`session/title`).
        #[serde(skip_serializing_if = "Option::is_none")]
        title: Option<String>,
        /// ISO 8601 (UTC) time of its last activity: the end of its last turn.
        #[serde(skip_serializing_if = "Option::is_none")]
        updated_at: Option<String>,
    },
    /// How full the model's context is, as of the last model reply.
    UsageUpdate {
        /// Tokens in the context: the reply's prompt (cached or not) and its completion.
        used: u64,
        /// Tokens the context holds (`model.context_window`).
        size: u64,
    },
    /// The session's configuration options (the model picker) changed.
    ConfigOptionUpdate {
        /// Every option, as it now is.
        config_options: Vec<ConfigOption>,
    },
    /// A context compaction, by its id: started, then finished (ACP's session compaction, to
    /// clients that opted in).
    CompactionUpdate {
        /// dsh's id of it: `compaction-<seq of its compaction/start>`.
        compaction_id: String,
        /// `in_progress`, `completed` or `failed`.
        status: &'static str,
        /// The summary that replaced the older messages (with `completed`).
        #[serde(skip_serializing_if = "Option::is_none")]
        summary: Option<Vec<Content>>,
        /// Why it failed (with `failed`).
        #[serde(skip_serializing_if = "Option::is_none")]
        error: Option<String>,
    },
    /// The slash commands the editor may offer: dsh's skills.
    AvailableCommandsUpdate {
        /// The commands.
        available_commands: Vec<AvailableCommand>,
    },
}

/// A session configuration option: a dropdown (`type: "select"`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ConfigOption {
    /// Its id (`model`).
    pub id: String,
    /// Its label.
    pub name: String,
    /// What it is, for the editor's placement (`model`).
    pub category: String,
    /// Always `select`.
    #[serde(rename = "type")]
    pub kind: String,
    /// The value in force.
    pub current_value: String,
    /// The values to choose from.
    pub options: Vec<ConfigValue>,
}

/// One value of a [`ConfigOption`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ConfigValue {
    /// What `session/set_config_option` names.
    pub value: String,
    /// Its label.
    pub name: String,
}

/// `session/set_config_option`'s answer: every option, as it now is.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SetConfigOptionResponse {
    /// The options.
    pub config_options: Vec<ConfigOption>,
}

/// A slash command: a skill, whose text after the name goes to the agent with it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct AvailableCommand {
    /// The name typed after `/`.
    pub name: String,
    /// What it does.
    pub description: String,
    /// What may follow the name.
    pub input: CommandInput,
}

/// Free text after a command's name.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct CommandInput {
    /// Shown until the person types something.
    pub hint: String,
}

/// A content block the bridge writes: text.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(tag = "type", rename_all = "snake_case")]
pub enum Content {
    /// Text.
    Text {
        /// The text.
        text: String,
    },
}

/// A tool call's content.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(
    tag = "type",
    rename_all = "snake_case",
    rename_all_fields = "camelCase"
)]
pub enum ToolCallContent {
    /// A content block.
    Content {
        /// The block.
        content: Content,
    },
    /// A display-only terminal (the client's `_meta.terminal_output` convention): its id is
    /// the tool call's.
    Terminal {
        /// The terminal.
        terminal_id: String,
    },
    /// A file's change.
    Diff {
        /// The file, absolute.
        path: String,
        /// Its text before; `null` for a new file.
        old_text: Option<String>,
        /// Its text after.
        new_text: String,
    },
}

/// The `_meta` of a command's display-only terminal, as Zed reads it (`clientCapabilities._meta.
/// terminal_output`, which Zed's own Codex adapter uses): the terminal at the call's start, its
/// output as it comes, and how the command ended.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub enum TerminalMeta {
    /// The terminal the call's output goes to.
    #[serde(rename = "terminal_info")]
    Info {
        /// The terminal (the tool call's id).
        terminal_id: String,
    },
    /// More output, to append.
    #[serde(rename = "terminal_output")]
    Output {
        /// The terminal.
        terminal_id: String,
        /// The bytes, as text.
        data: String,
    },
    /// The command ended.
    #[serde(rename = "terminal_exit")]
    Exit {
        /// The terminal.
        terminal_id: String,
        /// Its exit status, when it ran to an end.
        exit_code: Option<i32>,
        /// Never known to dsh's clients: always null.
        signal: Option<String>,
    },
}

/// One step of a [`SessionUpdate::Plan`].
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PlanEntry {
    /// What the step does.
    pub content: String,
    /// Always `medium`: the model gives no priorities.
    pub priority: &'static str,
    /// `pending`, `in_progress` or `completed`.
    pub status: &'static str,
}

/// A file a tool call touches, and the line.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ToolCallLocation {
    /// The file, absolute.
    pub path: String,
    /// The line (from 1), when known.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub line: Option<u32>,
}

/// What kind of tool a call is, for an editor's icon.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolKind {
    /// A command.
    Execute,
    /// Reading a file (`read`).
    Read,
    /// Changing a file (`write`, `edit`).
    Edit,
    /// Anything else.
    Other,
}

/// Where a tool call is.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolCallStatus {
    /// Waiting (to start, or for a permission).
    Pending,
    /// Running.
    InProgress,
    /// Ended.
    Completed,
    /// Ended with an error.
    Failed,
}

/// A call's result, as dsh logged it.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RawOutput {
    /// What the model got.
    pub content: String,
    /// Whether it is an error.
    pub is_error: bool,
    /// dsh's machine-readable error code, or `null`.
    pub code: Option<String>,
}

/// `session/request_permission`'s params.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct RequestPermissionRequest<'a> {
    /// The session.
    pub session_id: &'a str,
    /// The call that waits.
    pub tool_call: &'a PermissionToolCall,
    /// The choices.
    pub options: &'a [PermissionOption],
}

/// The call a permission request is about, pending, with what the request shows.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PermissionToolCall {
    /// Its id.
    pub tool_call_id: String,
    /// What it shows.
    pub title: String,
    /// Its kind.
    pub kind: ToolKind,
    /// Pending.
    pub status: ToolCallStatus,
    /// What dsh asks about.
    pub raw_input: PermissionInput,
    /// For a file change, the change (a `diff`, or the unified diff as text when the file is
    /// too large to send whole).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub content: Vec<ToolCallContent>,
    /// For a file change, the file and its first changed line.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub locations: Vec<ToolCallLocation>,
}

/// What an approval request says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct PermissionInput {
    /// The command (or another tool's arguments as JSON).
    pub command: String,
    /// Where it would run.
    pub cwd: String,
    /// Why approval is needed.
    pub reason: String,
}

/// A choice offered in a permission request.
#[derive(Debug, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PermissionOption {
    /// Its id, which the answer names.
    pub option_id: &'static str,
    /// What it says.
    pub name: &'static str,
    /// Its kind.
    pub kind: PermissionOptionKind,
}

/// What a permission choice does.
#[derive(Debug, Clone, Copy, Serialize)]
#[serde(rename_all = "snake_case")]
pub enum PermissionOptionKind {
    /// Allow this once.
    AllowOnce,
    /// Allow it from now on.
    AllowAlways,
    /// Refuse it this once.
    RejectOnce,
}
