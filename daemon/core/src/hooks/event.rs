//! The event vocabulary: dialects, event names, what each event carries, and who fires it.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use crate::call::ToolOutput;
use crate::sandbox::SandboxPolicy;
use dsh_session::SessionHeader;

/// Which hook format a handler was written for.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Dialect {
    /// Claude Code's `hooks` settings shape.
    ClaudeCode,
    /// Codex's `hooks.json` shape.
    Codex,
}

impl Dialect {
    /// Both dialects, in the order their handlers run and are recorded.
    pub const ALL: [Dialect; 2] = [Dialect::ClaudeCode, Dialect::Codex];

    /// The name persisted in `hook/*` records: `claude-code` or `codex`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::ClaudeCode => "claude-code",
            Self::Codex => "codex",
        }
    }

    /// The plugin name context from this dialect is attributed to in the session log.
    pub fn plugin_name(self) -> &'static str {
        match self {
            Self::ClaudeCode => "hooks-claude-code",
            Self::Codex => "hooks-codex",
        }
    }
}

/// The hook events dsh fires.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum EventName {
    /// A session started or was resumed.
    SessionStart,
    /// A prompt is about to be handled.
    UserPromptSubmit,
    /// A tool call is about to run.
    PreToolUse,
    /// A tool call waits for a person's approval; a hook may answer instead.
    PermissionRequest,
    /// A tool call was denied before it ran (Claude Code only).
    PermissionDenied,
    /// A tool call finished (Claude Code: only one that succeeded).
    PostToolUse,
    /// A tool call failed: non-zero exit, timeout, interrupt (Claude Code only).
    PostToolUseFailure,
    /// Someone is asked for something: dsh sends `permission_prompt` (Claude Code only).
    Notification,
    /// The model answered without tool calls; the turn is about to end.
    Stop,
    /// The turn ended in an error.
    StopFailure,
    /// A child agent was spawned.
    SubagentStart,
    /// A child agent finished.
    SubagentStop,
    /// A top-level agent was closed: its session ended.
    SessionEnd,
    /// A project instructions file was loaded into the session's context (Claude Code only).
    InstructionsLoaded,
    /// The context is about to be compacted.
    PreCompact,
    /// The context was compacted.
    PostCompact,
}

impl EventName {
    /// Every event, in the order config files are read.
    pub const ALL: [EventName; 16] = [
        EventName::SessionStart,
        EventName::UserPromptSubmit,
        EventName::PreToolUse,
        EventName::PermissionRequest,
        EventName::PermissionDenied,
        EventName::PostToolUse,
        EventName::PostToolUseFailure,
        EventName::Notification,
        EventName::Stop,
        EventName::StopFailure,
        EventName::SubagentStart,
        EventName::SubagentStop,
        EventName::SessionEnd,
        EventName::InstructionsLoaded,
        EventName::PreCompact,
        EventName::PostCompact,
    ];

    /// The upstream name, e.g. `PreToolUse`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SessionStart => "SessionStart",
            Self::UserPromptSubmit => "UserPromptSubmit",
            Self::PreToolUse => "PreToolUse",
            Self::PermissionRequest => "PermissionRequest",
            Self::PermissionDenied => "PermissionDenied",
            Self::PostToolUse => "PostToolUse",
            Self::PostToolUseFailure => "PostToolUseFailure",
            Self::Notification => "Notification",
            Self::Stop => "Stop",
            Self::StopFailure => "StopFailure",
            Self::SubagentStart => "SubagentStart",
            Self::SubagentStop => "SubagentStop",
            Self::SessionEnd => "SessionEnd",
            Self::InstructionsLoaded => "InstructionsLoaded",
            Self::PreCompact => "PreCompact",
            Self::PostCompact => "PostCompact",
        }
    }

    /// Whether `dialect` has this event. Codex has no PostToolUseFailure (its PostToolUse runs for
    /// failed calls too), no Notification, no InstructionsLoaded and no PermissionDenied.
    pub fn supported_by(self, dialect: Dialect) -> bool {
        match dialect {
            Dialect::ClaudeCode => true,
            Dialect::Codex => !matches!(
                self,
                Self::PostToolUseFailure
                    | Self::Notification
                    | Self::InstructionsLoaded
                    | Self::PermissionDenied
            ),
        }
    }

    /// Whether a hook's block or deny decides anything on this event. SessionStart, SubagentStart,
    /// Notification, StopFailure and SessionEnd only observe, and PostToolUse(Failure) comes after
    /// the tool ran: the references list them as unable to block (a PostToolUse block is
    /// feedback, see `merge.rs`). PermissionDenied comes after the denial, which stands (its
    /// `retry` only adds a message). PermissionRequest decides allow or deny; PreCompact blocks
    /// for Claude Code's hooks only (`merge.rs`).
    pub fn can_block(self) -> bool {
        !matches!(
            self,
            Self::SessionStart
                | Self::SubagentStart
                | Self::SessionEnd
                | Self::PostToolUse
                | Self::PostToolUseFailure
                | Self::Notification
                | Self::StopFailure
                | Self::InstructionsLoaded
                | Self::PostCompact
                | Self::PermissionDenied
        )
    }

    /// Whether matchers are honoured. Upstream ignores them on UserPromptSubmit and Stop; dsh drops
    /// them before validation, so a junk matcher there cannot reject a file.
    pub fn takes_matcher(self) -> bool {
        !matches!(self, Self::UserPromptSubmit | Self::Stop)
    }
}

/// How a session came to run: the SessionStart `source` and its matcher subject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionSource {
    /// A new session.
    Startup,
    /// A session loaded from persistence.
    Resume,
    /// The session's context was just compacted.
    Compact,
}

impl SessionSource {
    /// `startup`, `resume` or `compact`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Startup => "startup",
            Self::Resume => "resume",
            Self::Compact => "compact",
        }
    }
}

/// Why a session ended: the SessionEnd `reason` and its matcher subject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SessionEndReason {
    /// The agent was closed. Both references call every end that is not one of their own UI
    /// actions (`/clear`, logout, ...) `other`.
    Other,
}

impl SessionEndReason {
    /// `other`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Other => "other",
        }
    }
}

/// Why a person is notified: the Notification `notification_type` and its matcher subject.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NotificationKind {
    /// A tool call waits for a person's approval.
    PermissionPrompt,
    /// A top-level agent has waited for its next prompt for `hooks.idle_prompt_ms`.
    IdlePrompt,
}

impl NotificationKind {
    /// `permission_prompt` or `idle_prompt`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::PermissionPrompt => "permission_prompt",
            Self::IdlePrompt => "idle_prompt",
        }
    }
}

/// What kind of error ended a turn: StopFailure's `error` and its matcher subject (values both
/// Claude Code and Codex use; dsh errors that are no API error are `unknown`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopFailureKind {
    /// The API kept rate limiting.
    RateLimit,
    /// The API refused the key.
    AuthenticationFailed,
    /// The API refused the request.
    InvalidRequest,
    /// The API failed or could not be reached.
    ServerError,
    /// Anything else (the step limit, a failed checkpoint, an exhausted script, ...).
    Unknown,
}

impl StopFailureKind {
    /// `rate_limit`, `authentication_failed`, `invalid_request`, `server_error` or `unknown`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::RateLimit => "rate_limit",
            Self::AuthenticationFailed => "authentication_failed",
            Self::InvalidRequest => "invalid_request",
            Self::ServerError => "server_error",
            Self::Unknown => "unknown",
        }
    }
}

/// The hooks of a child agent fire as the subagent of its parent's session, as both upstream
/// harnesses fire them: the payload carries the parent's `session_id` and the child's `agent_id`
/// and `agent_type`.
#[derive(Debug, Clone)]
pub struct SubagentOf {
    /// The parent's session.
    pub parent: Arc<SessionHeader>,
    /// The child's kind, e.g. `general-purpose`.
    pub agent_type: String,
}

/// Who fires an event: the session whose hooks run, and how to stop them.
#[derive(Clone)]
pub struct HookContext {
    /// The session (for SubagentStart/SubagentStop: the parent's; for events fired inside a child
    /// agent: the child's, with [`Self::subagent`] naming the parent).
    pub header: Arc<SessionHeader>,
    /// Set when the firing agent is a child agent (events fired inside it).
    pub subagent: Option<SubagentOf>,
    /// The current turn, for turn-scoped events.
    pub turn: Option<u32>,
    /// The model name (Codex payloads carry it).
    pub model: String,
    /// The reasoning effort the agent's requests ask for (Claude Code's `effort.level`, and
    /// `CLAUDE_EFFORT`); `None` when they ask for none (the provider's default).
    pub effort: Option<dsh_session::ReasoningEffort>,
    /// The sandbox of the agent [`Self::header`] belongs to: a command hook that names, or comes
    /// from a file, it can write runs under it (`sandboxing.rs`). Unconfined when no agent fires.
    pub sandbox: SandboxPolicy,
    /// Cancelling it kills every running hook of this call (e.g. the turn was cancelled).
    pub cancel: CancellationToken,
    /// What background (`async`) hooks run under instead of `cancel`, since they outlive the
    /// call: the agent's, cancelled when it is closed. `None`: `cancel`.
    pub background: Option<CancellationToken>,
    /// The log of [`Self::header`]'s session, for `hooks.claude_code_transcript = "claude"`
    /// (`None`: no projection is written; hooks get the path as it is).
    pub events: Option<std::sync::Arc<dyn super::SessionEvents>>,
}

impl std::fmt::Debug for HookContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HookContext")
            .field("session", &self.header.id)
            .field("subagent", &self.subagent)
            .field("turn", &self.turn)
            .field("model", &self.model)
            .field("sandbox", &self.sandbox)
            .finish_non_exhaustive()
    }
}

/// One interception point, with what its payload says.
#[derive(Debug, Clone)]
pub enum HookEvent {
    /// A session started or was resumed.
    SessionStart {
        /// Why it started.
        source: SessionSource,
    },
    /// A prompt is about to be handled.
    UserPromptSubmit {
        /// The prompt text.
        prompt: String,
    },
    /// A tool call is about to run.
    PreToolUse {
        /// The daemon's tool name, e.g. `bash` (each dialect sees its own name, see `tools.rs`).
        tool_name: String,
        /// The call's arguments as the model gave them (each dialect sees its own shape).
        tool_input: serde_json::Value,
        /// The call id.
        tool_use_id: String,
    },
    /// A tool call waits for a person's approval.
    PermissionRequest {
        /// The daemon's tool name.
        tool_name: String,
        /// The arguments the call would run with.
        tool_input: serde_json::Value,
        /// The call id (recorded; neither harness sends it on this event).
        tool_use_id: String,
    },
    /// A tool call was denied before it ran: by the approval policy, a person, or a hook. Claude
    /// Code only.
    PermissionDenied {
        /// The daemon's tool name.
        tool_name: String,
        /// The arguments the call would have run with.
        tool_input: serde_json::Value,
        /// The call id.
        tool_use_id: String,
        /// Why it was denied.
        reason: String,
    },
    /// A tool call finished (for Claude Code: one that succeeded).
    PostToolUse {
        /// The daemon's tool name.
        tool_name: String,
        /// The arguments the call ran with (after any PreToolUse rewrite).
        tool_input: serde_json::Value,
        /// The call id.
        tool_use_id: String,
        /// What the tool returned.
        tool_response: ToolOutput,
        /// How long the call ran (Claude Code's `duration_ms`).
        duration_ms: u64,
    },
    /// A tool call failed. Claude Code only.
    PostToolUseFailure {
        /// The daemon's tool name.
        tool_name: String,
        /// The arguments the call ran with.
        tool_input: serde_json::Value,
        /// The call id.
        tool_use_id: String,
        /// The error the model is shown (the failed call's result text).
        error: String,
        /// True when the call failed because the turn was interrupted.
        is_interrupt: bool,
        /// How long the call ran (Claude Code's `duration_ms`).
        duration_ms: u64,
    },
    /// A person is notified. Claude Code only.
    Notification {
        /// Why.
        kind: NotificationKind,
        /// What the notification says.
        message: String,
        /// Its title.
        title: String,
    },
    /// The turn ended in an error.
    StopFailure {
        /// The kind of error (matcher subject).
        kind: StopFailureKind,
        /// The error message.
        details: String,
        /// The model's last answer in the turn, when there is one.
        last_assistant_message: Option<String>,
    },
    /// The turn is about to end.
    Stop {
        /// True when this turn already continued because of a Stop hook (scripts' loop guard).
        stop_hook_active: bool,
        /// The model's last answer, when there is one.
        last_assistant_message: Option<String>,
    },
    /// A child agent was spawned; the context is the parent's.
    SubagentStart {
        /// The child's header.
        child: Arc<SessionHeader>,
        /// The child's kind (matcher subject), e.g. `general-purpose`.
        agent_type: String,
    },
    /// A child agent finished; the context is the parent's.
    SubagentStop {
        /// The child's header.
        child: Arc<SessionHeader>,
        /// The child's kind (matcher subject).
        agent_type: String,
        /// The child's final answer, when there is one.
        last_assistant_message: Option<String>,
    },
    /// A top-level agent was closed.
    SessionEnd {
        /// Why.
        reason: SessionEndReason,
    },
    /// A project instructions file was loaded (before the session's first turn). Claude Code
    /// only; it observes.
    InstructionsLoaded {
        /// The file, absolute.
        file_path: String,
        /// `User` for the harness home's file, `Project` for the repository's.
        memory_type: &'static str,
        /// Why it was loaded (matcher subject): dsh loads at the session's start only.
        load_reason: &'static str,
    },
    /// The context is about to be compacted. It observes.
    PreCompact {
        /// `manual` or `auto` (matcher subject).
        trigger: dsh_session::CompactionTrigger,
        /// A person's instructions for the summary (empty for `auto`).
        custom_instructions: String,
    },
    /// The context was compacted. It observes.
    PostCompact {
        /// `manual` or `auto` (matcher subject).
        trigger: dsh_session::CompactionTrigger,
        /// The summary that replaced the older messages (empty when only outputs were
        /// shortened).
        compact_summary: String,
    },
}

impl HookEvent {
    /// Which event this is.
    pub fn name(&self) -> EventName {
        match self {
            Self::SessionStart { .. } => EventName::SessionStart,
            Self::UserPromptSubmit { .. } => EventName::UserPromptSubmit,
            Self::PreToolUse { .. } => EventName::PreToolUse,
            Self::PermissionRequest { .. } => EventName::PermissionRequest,
            Self::PermissionDenied { .. } => EventName::PermissionDenied,
            Self::PostToolUse { .. } => EventName::PostToolUse,
            Self::PostToolUseFailure { .. } => EventName::PostToolUseFailure,
            Self::Notification { .. } => EventName::Notification,
            Self::Stop { .. } => EventName::Stop,
            Self::StopFailure { .. } => EventName::StopFailure,
            Self::SubagentStart { .. } => EventName::SubagentStart,
            Self::SubagentStop { .. } => EventName::SubagentStop,
            Self::SessionEnd { .. } => EventName::SessionEnd,
            Self::InstructionsLoaded { .. } => EventName::InstructionsLoaded,
            Self::PreCompact { .. } => EventName::PreCompact,
            Self::PostCompact { .. } => EventName::PostCompact,
        }
    }

    /// The names a `dialect` matcher is tried against: the tool's names in that dialect, the
    /// session source or end reason, or the agent type. Empty for events that take no matcher.
    pub(super) fn matcher_subjects(&self, dialect: Dialect) -> Vec<&str> {
        match self {
            Self::SessionStart { source } => vec![source.as_str()],
            Self::SessionEnd { reason } => vec![reason.as_str()],
            Self::PreToolUse { tool_name, .. }
            | Self::PermissionRequest { tool_name, .. }
            | Self::PermissionDenied { tool_name, .. }
            | Self::PostToolUse { tool_name, .. }
            | Self::PostToolUseFailure { tool_name, .. } => {
                super::tools::matcher_names(dialect, tool_name)
            }
            Self::Notification { kind, .. } => vec![kind.as_str()],
            Self::StopFailure { kind, .. } => vec![kind.as_str()],
            Self::SubagentStart { agent_type, .. } | Self::SubagentStop { agent_type, .. } => {
                vec![agent_type.as_str()]
            }
            Self::InstructionsLoaded { load_reason, .. } => vec![load_reason],
            Self::PreCompact { trigger, .. } | Self::PostCompact { trigger, .. } => {
                vec![trigger.as_str()]
            }
            Self::UserPromptSubmit { .. } | Self::Stop { .. } => Vec::new(),
        }
    }

    /// Whether `dialect`'s handlers hear this event. Claude Code runs PostToolUse only for a call
    /// that succeeded (a failed one is its PostToolUseFailure); Codex runs it for every call that
    /// ran.
    pub(super) fn fires_for(&self, dialect: Dialect) -> bool {
        match self {
            Self::PostToolUse { tool_response, .. } => {
                dialect == Dialect::Codex || !tool_response.is_error
            }
            _ => self.name().supported_by(dialect),
        }
    }

    /// The tool call's dsh name and arguments, for tool events.
    pub(super) fn tool_call(&self) -> Option<(&str, &serde_json::Value)> {
        match self {
            Self::PreToolUse {
                tool_name,
                tool_input,
                ..
            }
            | Self::PermissionRequest {
                tool_name,
                tool_input,
                ..
            }
            | Self::PermissionDenied {
                tool_name,
                tool_input,
                ..
            }
            | Self::PostToolUse {
                tool_name,
                tool_input,
                ..
            }
            | Self::PostToolUseFailure {
                tool_name,
                tool_input,
                ..
            } => Some((tool_name, tool_input)),
            _ => None,
        }
    }

    pub(super) fn tool_use_id(&self) -> Option<&str> {
        match self {
            Self::PreToolUse { tool_use_id, .. }
            | Self::PermissionRequest { tool_use_id, .. }
            | Self::PermissionDenied { tool_use_id, .. }
            | Self::PostToolUse { tool_use_id, .. }
            | Self::PostToolUseFailure { tool_use_id, .. } => Some(tool_use_id),
            _ => None,
        }
    }
}
