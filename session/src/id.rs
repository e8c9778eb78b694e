//! Session identities.

use std::fmt;

use serde::{Deserialize, Serialize};

/// Longest id accepted from outside, in bytes.
pub const MAX_ID_BYTES: usize = 256;

/// A session id (also the id of the agent that owns the session while it is live).
///
/// New ids are UUID v7 strings, so they sort by creation time. Ids that arrive from outside
/// (resume, RPC) are opaque: any non-empty string of at most `MAX_ID_BYTES` bytes without NUL is
/// accepted. An id is never used as a path directly: backends escape it first.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(try_from = "String", into = "String")]
pub struct SessionId(String);

/// Why a string is not a session id.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum SessionIdError {
    /// The empty string.
    #[error("session id is empty")]
    Empty,
    /// Longer than [`MAX_ID_BYTES`].
    #[error("session id is {0} bytes; the limit is {MAX_ID_BYTES}")]
    TooLong(usize),
    /// Contains a NUL byte.
    #[error("session id contains a NUL byte")]
    Nul,
}

impl SessionId {
    /// Mints a new UUID v7 id.
    pub fn new_v7() -> Self {
        Self(uuid::Uuid::now_v7().to_string())
    }

    /// Accepts an id from outside.
    pub fn parse(value: impl Into<String>) -> Result<Self, SessionIdError> {
        let value = value.into();
        if value.is_empty() {
            return Err(SessionIdError::Empty);
        }
        if value.len() > MAX_ID_BYTES {
            return Err(SessionIdError::TooLong(value.len()));
        }
        if value.contains('\0') {
            return Err(SessionIdError::Nul);
        }
        Ok(Self(value))
    }

    /// The id as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl TryFrom<String> for SessionId {
    type Error = SessionIdError;
    fn try_from(value: String) -> Result<Self, Self::Error> {
        Self::parse(value)
    }
}

impl From<SessionId> for String {
    fn from(id: SessionId) -> Self {
        id.0
    }
}

impl fmt::Display for SessionId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn new_ids_are_uuid_v7() {
        let id = SessionId::new_v7();
        let uuid = uuid::Uuid::parse_str(id.as_str()).unwrap();
        assert_eq!(uuid.get_version_num(), 7);
        assert_ne!(SessionId::new_v7(), id);
    }

    #[test]
    fn outside_ids_are_opaque_but_bounded() {
        for ok in [
            "../../x",
            "a/b",
            ".",
            "..",
            "~",
            "ünï",
            "x".repeat(256).as_str(),
        ] {
            assert_eq!(SessionId::parse(ok).unwrap().as_str(), ok);
        }
        assert_eq!(SessionId::parse(""), Err(SessionIdError::Empty));
        assert_eq!(
            SessionId::parse("x".repeat(257)),
            Err(SessionIdError::TooLong(257))
        );
        assert_eq!(SessionId::parse("a\0b"), Err(SessionIdError::Nul));
    }

    #[test]
    fn deserialising_validates() {
        assert!(serde_json::from_str::<SessionId>("\"\"").is_err());
        assert_eq!(
            serde_json::from_str::<SessionId>("\"s1\"")
                .unwrap()
                .as_str(),
            "s1"
        );
    }
}
