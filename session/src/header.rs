//! The immutable session header (CONTRACTS §4.1).

use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use super::{ApprovalPolicy, SessionId};

/// Format version written in every header. A log of a newer version is read, never written; an
/// older one does not exist.
pub const FORMAT_VERSION: u32 = 0;

/// Why a session was created other than directly by a user.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum Origin {
    /// A child agent spawned by a parent agent.
    Subagent,
}

/// How hard a reasoning model thinks before it answers: the OpenAI-compatible request's
/// `reasoning_effort`. `low`, `medium` and `high` are OpenAI's and DeepSeek's (which maps
/// `medium` to `high`); `max` is DeepSeek's alone.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum ReasoningEffort {
    /// Least thinking.
    Low,
    /// OpenAI's middle setting.
    Medium,
    /// Thorough.
    High,
    /// DeepSeek's most thorough.
    Max,
}

impl ReasoningEffort {
    /// Every value, in increasing effort.
    pub const ALL: [ReasoningEffort; 4] = [Self::Low, Self::Medium, Self::High, Self::Max];

    /// The value as the request and the wire write it.
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Low => "low",
            Self::Medium => "medium",
            Self::High => "high",
            Self::Max => "max",
        }
    }

    /// The effort named `name`, if it is one.
    pub fn parse(name: &str) -> Option<Self> {
        Self::ALL.into_iter().find(|e| e.as_str() == name)
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
    /// The reasoning effort asked of the model; `None`: the provider's default (absent in logs
    /// written before it could be chosen).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub reasoning_effort: Option<ReasoningEffort>,
    /// The approval policy.
    pub approval: ApprovalPolicy,
}

/// The header of a session: who it is, where it works, and where it came from. Immutable once the
/// session exists; stored as line 1 of a JSONL file or a row of the SQLite `sessions` table.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct SessionHeader {
    /// Always `FORMAT_VERSION`.
    pub version: u32,
    /// The session's id.
    pub id: SessionId,
    /// Creation time, Unix milliseconds.
    pub created_at: i64,
    /// Absolute working directory (UTF-8; JSON cannot carry anything else).
    pub cwd: PathBuf,
    /// The session this one was forked or spawned from.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub parent_session: Option<SessionId>,
    /// Number of leading events inherited through a fork.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub seed_length: Option<u64>,
    /// Set for spawned child agents.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub origin: Option<Origin>,
    /// 0 for top-level sessions, parent + 1 for children. Always written.
    pub delegation_depth: u32,
    /// The provider, model and approval policy the session was created with (a later
    /// `session/settings` event replaces them). Absent in sessions written before dsh recorded
    /// them.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub settings: Option<AgentSettings>,
}

impl SessionHeader {
    /// The members a header of `FORMAT_VERSION` has, as serialised: what this dshd reads of a
    /// newer format's header (which it then never writes to).
    pub const MEMBERS: &'static [&'static str] = &[
        "version",
        "id",
        "createdAt",
        "cwd",
        "parentSession",
        "seedLength",
        "origin",
        "delegationDepth",
        "settings",
    ];
}

/// Why a header is not acceptable.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HeaderError {
    /// The version is not [`FORMAT_VERSION`].
    #[error(
        "session format version {found} is not supported (this dshd reads version {FORMAT_VERSION})"
    )]
    Version {
        /// The version found.
        found: u32,
    },
    /// The cwd is relative.
    #[error("cwd {0:?} is not absolute")]
    RelativeCwd(PathBuf),
    /// The cwd is not UTF-8.
    #[error("cwd {0:?} is not valid UTF-8")]
    NonUtf8Cwd(PathBuf),
    /// `createdAt` is negative.
    #[error("createdAt {0} is negative")]
    NegativeTime(i64),
}

impl SessionHeader {
    /// A header for a new top-level session.
    pub fn new(id: SessionId, cwd: PathBuf, created_at: i64) -> Self {
        Self {
            version: FORMAT_VERSION,
            id,
            created_at,
            cwd,
            parent_session: None,
            seed_length: None,
            origin: None,
            delegation_depth: 0,
            settings: None,
        }
    }

    /// Checks the invariants every stored or created header must satisfy.
    pub fn validate(&self) -> Result<(), HeaderError> {
        if self.version != FORMAT_VERSION {
            return Err(HeaderError::Version {
                found: self.version,
            });
        }
        validate_cwd(&self.cwd)?;
        if self.created_at < 0 {
            return Err(HeaderError::NegativeTime(self.created_at));
        }
        Ok(())
    }
}

/// Checks that `cwd` can be a session cwd: absolute and UTF-8.
pub fn validate_cwd(cwd: &Path) -> Result<(), HeaderError> {
    if !cwd.is_absolute() {
        return Err(HeaderError::RelativeCwd(cwd.to_owned()));
    }
    if cwd.to_str().is_none() {
        return Err(HeaderError::NonUtf8Cwd(cwd.to_owned()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn serialises_in_camel_case_with_depth_always_present() {
        let h = SessionHeader::new(SessionId::parse("s1").unwrap(), "/w".into(), 5);
        assert_eq!(
            serde_json::to_string(&h).unwrap(),
            r#"{"version":0,"id":"s1","createdAt":5,"cwd":"/w","delegationDepth":0}"#
        );
        let child = SessionHeader {
            parent_session: Some(SessionId::parse("p").unwrap()),
            origin: Some(Origin::Subagent),
            delegation_depth: 1,
            ..h
        };
        let json = serde_json::to_string(&child).unwrap();
        assert!(json.contains(r#""parentSession":"p""#) && json.contains(r#""origin":"subagent""#));
        assert_eq!(serde_json::from_str::<SessionHeader>(&json).unwrap(), child);
    }

    /// `MEMBERS` names every member a header can have, and nothing else.
    #[test]
    fn members_are_every_serialised_member() {
        let full = SessionHeader {
            parent_session: Some(SessionId::parse("p").unwrap()),
            seed_length: Some(3),
            origin: Some(Origin::Subagent),
            settings: Some(AgentSettings {
                provider: "scripted".into(),
                model: "script".into(),
                reasoning_effort: None,
                approval: crate::ApprovalPolicy::default(),
            }),
            ..SessionHeader::new(SessionId::parse("s").unwrap(), "/w".into(), 5)
        };
        let value = serde_json::to_value(&full).unwrap();
        let mut keys: Vec<&str> = value
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        let mut members = SessionHeader::MEMBERS.to_vec();
        keys.sort_unstable();
        members.sort_unstable();
        assert_eq!(keys, members);
    }

    #[test]
    fn validation() {
        let mut h = SessionHeader::new(SessionId::parse("s").unwrap(), "/w".into(), 0);
        assert!(h.validate().is_ok());
        h.cwd = "rel".into();
        assert_eq!(h.validate(), Err(HeaderError::RelativeCwd("rel".into())));
        h.cwd = "/w".into();
        h.version = 1;
        assert!(matches!(
            h.validate(),
            Err(HeaderError::Version { found: 1 })
        ));
    }
}
