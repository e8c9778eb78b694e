//! The event vocabulary: dialects, event names, what each event carries, and who fires it.

use std::sync::Arc;

use tokio_util::sync::CancellationToken;

use super::tool_aliases;
use crate::session::SessionHeader;

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
    /// A tool call finished.
    PostToolUse,
    /// The model answered without tool calls; the turn is about to end.
    Stop,
    /// A child agent was spawned (Claude Code only).
    SubagentStart,
    /// A child agent finished (Claude Code only).
    SubagentStop,
}

impl EventName {
    /// Every event, in the order config files are read.
    pub const ALL: [EventName; 7] = [
        EventName::SessionStart,
        EventName::UserPromptSubmit,
        EventName::PreToolUse,
        EventName::PostToolUse,
        EventName::Stop,
        EventName::SubagentStart,
        EventName::SubagentStop,
    ];

    /// The upstream name, e.g. `PreToolUse`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SessionStart => "SessionStart",
            Self::UserPromptSubmit => "UserPromptSubmit",
            Self::PreToolUse => "PreToolUse",
            Self::PostToolUse => "PostToolUse",
            Self::Stop => "Stop",
            Self::SubagentStart => "SubagentStart",
            Self::SubagentStop => "SubagentStop",
        }
    }

    /// Whether `dialect` has this event (Codex has no subagent events).
    pub fn supported_by(self, dialect: Dialect) -> bool {
        match dialect {
            Dialect::ClaudeCode => true,
            Dialect::Codex => !matches!(self, Self::SubagentStart | Self::SubagentStop),
        }
    }

    /// Whether a hook's block or deny has an effect on this event. SessionStart and SubagentStart
    /// only observe (upstream cannot block them either).
    pub fn can_block(self) -> bool {
        !matches!(self, Self::SessionStart | Self::SubagentStart)
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
}

impl SessionSource {
    /// `startup` or `resume`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Startup => "startup",
            Self::Resume => "resume",
        }
    }
}

/// Who fires an event: the session whose hooks run, and how to stop them.
#[derive(Debug, Clone)]
pub struct HookContext {
    /// The session (for subagent events: the parent's).
    pub header: Arc<SessionHeader>,
    /// The current turn, for turn-scoped events.
    pub turn: Option<u32>,
    /// The model name (Codex payloads carry it).
    pub model: String,
    /// Cancelling it kills every running hook of this call (e.g. the turn was cancelled).
    pub cancel: CancellationToken,
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
        /// The daemon's tool name, e.g. `bash`.
        tool_name: String,
        /// The call's arguments as the model gave them.
        tool_input: serde_json::Value,
        /// The call id.
        tool_use_id: String,
    },
    /// A tool call finished.
    PostToolUse {
        /// The daemon's tool name.
        tool_name: String,
        /// The call's arguments.
        tool_input: serde_json::Value,
        /// The call id.
        tool_use_id: String,
        /// What the tool returned.
        tool_response: serde_json::Value,
    },
    /// The turn is about to end.
    Stop {
        /// True when this turn already continued because of a Stop hook (scripts' loop guard).
        stop_hook_active: bool,
        /// The model's last answer, when there is one.
        last_assistant_message: Option<String>,
    },
    /// A child agent was spawned; the context is the parent's. Claude Code only.
    SubagentStart {
        /// The child's header.
        child: Arc<SessionHeader>,
        /// The child's kind (matcher subject), e.g. `general-purpose`.
        agent_type: String,
    },
    /// A child agent finished; the context is the parent's. Claude Code only.
    SubagentStop {
        /// The child's header.
        child: Arc<SessionHeader>,
        /// The child's kind (matcher subject).
        agent_type: String,
        /// The child's final answer, when there is one.
        last_assistant_message: Option<String>,
    },
}

impl HookEvent {
    /// Which event this is.
    pub fn name(&self) -> EventName {
        match self {
            Self::SessionStart { .. } => EventName::SessionStart,
            Self::UserPromptSubmit { .. } => EventName::UserPromptSubmit,
            Self::PreToolUse { .. } => EventName::PreToolUse,
            Self::PostToolUse { .. } => EventName::PostToolUse,
            Self::Stop { .. } => EventName::Stop,
            Self::SubagentStart { .. } => EventName::SubagentStart,
            Self::SubagentStop { .. } => EventName::SubagentStop,
        }
    }

    /// The names a matcher is tried against: the tool name and its aliases, the session source,
    /// or the agent type. Empty for events that take no matcher.
    pub(super) fn matcher_subjects(&self) -> Vec<&str> {
        match self {
            Self::SessionStart { source } => vec![source.as_str()],
            Self::PreToolUse { tool_name, .. } | Self::PostToolUse { tool_name, .. } => {
                tool_aliases(tool_name)
            }
            Self::SubagentStart { agent_type, .. } | Self::SubagentStop { agent_type, .. } => {
                vec![agent_type.as_str()]
            }
            Self::UserPromptSubmit { .. } | Self::Stop { .. } => Vec::new(),
        }
    }

    pub(super) fn tool_use_id(&self) -> Option<&str> {
        match self {
            Self::PreToolUse { tool_use_id, .. } | Self::PostToolUse { tool_use_id, .. } => {
                Some(tool_use_id)
            }
            _ => None,
        }
    }
}
