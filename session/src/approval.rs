//! The approval vocabulary: when a person must approve a tool call, their verdict, who answered,
//! and for how long it holds. Recorded in events (`event.rs`) and in an agent's settings
//! (`settings.rs`), so both name this file rather than each other.

use std::fmt;

use serde::{Deserialize, Serialize};

/// When a person must approve a tool call before it runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, Serialize, Deserialize)]
#[serde(rename_all = "kebab-case")]
pub enum ApprovalPolicy {
    /// Nobody is asked: a PreToolUse hook's "ask" is a denial.
    Never,
    /// A PreToolUse hook's "ask" waits for a person's answer.
    #[default]
    OnRequest,
    /// Every `bash` call waits for a person's answer (and so does a hook's "ask").
    Always,
}

impl ApprovalPolicy {
    /// Every policy, in order of strictness.
    pub const ALL: [Self; 3] = [Self::Never, Self::OnRequest, Self::Always];

    /// The policy's name as written in config and on the wire: `never`, `on-request`, `always`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Never => "never",
            Self::OnRequest => "on-request",
            Self::Always => "always",
        }
    }

    /// The policy named `name`, if any.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|p| p.as_str() == name)
    }
}

impl fmt::Display for ApprovalPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// How a person (or the lack of one) answered an approval request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalVerdict {
    /// The call runs.
    Allow,
    /// The call does not run; the model is told why.
    Deny,
}

impl ApprovalVerdict {
    /// `allow` or `deny`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Allow => "allow",
            Self::Deny => "deny",
        }
    }
}

/// Who decided an approval request.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalSource {
    /// A client answered (`Agents.Approve`).
    Client,
    /// Nobody answered within the configured time: denied.
    Timeout,
    /// No client was watching the agent, so nobody could answer: denied.
    Unwatched,
    /// The turn was cancelled while the request waited: denied.
    Cancelled,
    /// A rule a client made earlier in the session ("allow for this session") allowed the call;
    /// nobody was asked.
    Rule,
    /// A PermissionRequest hook answered (its handler is recorded); nobody was asked.
    Hook,
}

/// The client that answered an approval request, as dshd saw it: a process outside every command
/// dshd started (approvals from inside one are refused), so the log says who decided.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct ApprovalClient {
    /// The pid that connected (`SO_PEERCRED`), when the kernel told.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub pid: Option<i32>,
    /// Its uid.
    pub uid: u32,
    /// Whether it had a controlling terminal when it answered (a person at a shell has one; an
    /// editor or a service has none); absent when it could not be read.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub terminal: Option<bool>,
}

/// How long a client's allow holds: this call only, or every identical request (same tool,
/// command and directory) of the live agent from now on.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ApprovalScope {
    /// This call only.
    #[default]
    Once,
    /// This call and every identical request of the agent while it is live.
    Session,
}

impl ApprovalScope {
    /// True for [`ApprovalScope::Once`] (the default, left out of the log).
    pub fn is_once(&self) -> bool {
        *self == Self::Once
    }

    /// `once` or `session`.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Once => "once",
            Self::Session => "session",
        }
    }
}

impl ApprovalSource {
    /// The source as a word.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Client => "client",
            Self::Timeout => "timeout",
            Self::Unwatched => "unwatched",
            Self::Cancelled => "cancelled",
            Self::Rule => "rule",
            Self::Hook => "hook",
        }
    }
}
