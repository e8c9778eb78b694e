//! What an agent runs with — provider, model and approval policy — as the session records it, so
//! that a resumed agent runs as it did (the header holds the settings at creation, a
//! `session/settings` event every later change).

use std::fmt;

use serde::{Deserialize, Serialize};

use super::{Event, EventData, SessionHeader};

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

/// The provider, model and approval policy an agent runs with.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct AgentSettings {
    /// `scripted` or `openai`.
    pub provider: String,
    /// The model name (`script` for the scripted provider).
    pub model: String,
    /// The approval policy.
    pub approval: ApprovalPolicy,
}

/// The settings a session last ran with: its header's, replaced by its last `session/settings`
/// event. `None` for sessions written before settings were recorded.
pub(crate) fn recorded_settings(header: &SessionHeader, events: &[Event]) -> Option<AgentSettings> {
    events
        .iter()
        .rev()
        .find_map(|e| match &e.data {
            EventData::Settings {
                provider,
                model,
                approval,
            } => Some(AgentSettings {
                provider: provider.clone(),
                model: model.clone(),
                approval: *approval,
            }),
            _ => None,
        })
        .or_else(|| header.settings.clone())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::session::SessionId;

    #[test]
    fn policy_names_round_trip() {
        for policy in ApprovalPolicy::ALL {
            assert_eq!(ApprovalPolicy::parse(policy.as_str()), Some(policy));
            assert_eq!(
                serde_json::to_string(&policy).unwrap(),
                format!("\"{policy}\"")
            );
        }
        assert_eq!(ApprovalPolicy::parse("sometimes"), None);
    }

    #[test]
    fn the_last_settings_event_wins_over_the_header() {
        let settings = |provider: &str| AgentSettings {
            provider: provider.into(),
            model: "m".into(),
            approval: ApprovalPolicy::Always,
        };
        let mut header = SessionHeader::new(SessionId::parse("s").unwrap(), "/w".into(), 0);
        assert_eq!(recorded_settings(&header, &[]), None);
        header.settings = Some(settings("scripted"));
        assert_eq!(recorded_settings(&header, &[]), Some(settings("scripted")));
        let changed = Event {
            seq: 0,
            time: 0,
            data: EventData::Settings {
                provider: "openai".into(),
                model: "m".into(),
                approval: ApprovalPolicy::Always,
            },
        };
        assert_eq!(
            recorded_settings(&header, &[changed]),
            Some(settings("openai"))
        );
    }
}
