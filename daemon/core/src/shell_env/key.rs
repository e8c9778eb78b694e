//! Managed keys: the `DSH_*` names a contributor may declare (CONTRACTS §5.1).

use std::borrow::Borrow;
use std::fmt;
use std::str::FromStr;

/// The prefix every managed key starts with. The executor strips every ambient name with this
/// prefix (case-insensitively), so a managed value can only come from a snapshot.
pub(crate) const PREFIX: &str = "DSH_";

/// Absolute path of the harness home. Always present.
pub(crate) const DSH_HOME: &str = "DSH_HOME";
/// `1` in every managed shell. Always present.
pub(crate) const DSH_SHELL: &str = "DSH_SHELL";
/// Id of the calling agent's session. Present when the call has an agent.
pub(crate) const DSH_SESSION_ID: &str = "DSH_SESSION_ID";

/// Keys the registry itself sets; no contributor may declare them, so a contributor can never
/// shadow or forge the identity facts.
pub(crate) const RESERVED_KEYS: [&str; 3] = [DSH_HOME, DSH_SHELL, DSH_SESSION_ID];

/// A syntactically valid managed key: `DSH_` followed by `[A-Z][A-Z0-9_]*`, ASCII only.
///
/// Reserved keys ([`RESERVED_KEYS`]) are valid keys; whether a contributor may own one is the
/// registry's decision, not the key's.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct ManagedKey(String);

/// Which rule a candidate key breaks.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyError {
    /// Does not start with `DSH_` (the prefix is case-sensitive).
    #[error("a managed key must start with {PREFIX}")]
    MissingPrefix,
    /// Nothing after `DSH_`.
    #[error("a managed key needs a name after {PREFIX}")]
    EmptySuffix,
    /// The first character after `DSH_` is not an ASCII upper-case letter.
    #[error("the first character after {PREFIX} must be an ASCII upper-case letter, not {0:?}")]
    BadFirst(char),
    /// A later character is not an ASCII upper-case letter, digit or `_`.
    #[error("a managed key may only contain ASCII upper-case letters, digits and _, not {0:?}")]
    BadChar(char),
}

impl ManagedKey {
    /// Validates `key`.
    pub fn parse(key: impl Into<String>) -> Result<Self, KeyError> {
        let key = key.into();
        check(&key)?;
        Ok(Self(key))
    }

    /// One of the registry's own keys, known to be valid.
    pub(super) fn builtin(key: &'static str) -> Self {
        debug_assert!(check(key).is_ok(), "{key}");
        Self(key.to_owned())
    }

    /// The key as a string.
    pub fn as_str(&self) -> &str {
        &self.0
    }

    /// Whether the registry sets this key itself.
    pub fn is_reserved(&self) -> bool {
        RESERVED_KEYS.contains(&self.0.as_str())
    }
}

fn check(key: &str) -> Result<(), KeyError> {
    let suffix = key.strip_prefix(PREFIX).ok_or(KeyError::MissingPrefix)?;
    let mut chars = suffix.chars();
    let first = chars.next().ok_or(KeyError::EmptySuffix)?;
    if !first.is_ascii_uppercase() {
        return Err(KeyError::BadFirst(first));
    }
    match chars.find(|c| !(c.is_ascii_uppercase() || c.is_ascii_digit() || *c == '_')) {
        Some(bad) => Err(KeyError::BadChar(bad)),
        None => Ok(()),
    }
}

impl FromStr for ManagedKey {
    type Err = KeyError;
    fn from_str(key: &str) -> Result<Self, Self::Err> {
        Self::parse(key)
    }
}

impl TryFrom<String> for ManagedKey {
    type Error = KeyError;
    fn try_from(key: String) -> Result<Self, Self::Error> {
        Self::parse(key)
    }
}

impl From<ManagedKey> for String {
    fn from(key: ManagedKey) -> Self {
        key.0
    }
}

impl AsRef<str> for ManagedKey {
    fn as_ref(&self) -> &str {
        &self.0
    }
}

/// Lets maps keyed by [`ManagedKey`] be searched with the plain `&str` keys resolvers return.
impl Borrow<str> for ManagedKey {
    fn borrow(&self) -> &str {
        &self.0
    }
}

impl fmt::Display for ManagedKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn key_pattern_accepts_upper_ascii_names() {
        for ok in [
            "DSH_A",
            "DSH_A__",
            "DSH_A1_B",
            "DSH_SESSION_JSONL",
            "DSH_HOME",
        ] {
            assert_eq!(ManagedKey::parse(ok).unwrap().as_str(), ok);
        }
    }

    #[test]
    fn key_pattern_refuses_everything_else_naming_the_rule() {
        let cases = [
            ("", KeyError::MissingPrefix),
            ("HOME", KeyError::MissingPrefix),
            ("dsh_x", KeyError::MissingPrefix),
            ("Dsh_X", KeyError::MissingPrefix),
            ("DSH", KeyError::MissingPrefix),
            ("DSH_", KeyError::EmptySuffix),
            ("DSH_1X", KeyError::BadFirst('1')),
            ("DSH__A", KeyError::BadFirst('_')),
            ("DSH_a", KeyError::BadFirst('a')),
            ("DSH_É", KeyError::BadFirst('É')),
            ("DSH_AÉ", KeyError::BadChar('É')),
            ("DSH_A-B", KeyError::BadChar('-')),
            ("DSH_A b", KeyError::BadChar(' ')),
            ("DSH_Ab", KeyError::BadChar('b')),
            ("DSH_A\0", KeyError::BadChar('\0')),
        ];
        for (key, want) in cases {
            assert_eq!(ManagedKey::parse(key), Err(want), "{key:?}");
        }
        assert!(
            KeyError::BadFirst('1')
                .to_string()
                .contains("must be an ASCII upper-case letter")
        );
    }

    #[test]
    fn reserved_keys_are_valid_and_known() {
        for key in RESERVED_KEYS {
            assert!(ManagedKey::parse(key).unwrap().is_reserved());
        }
        assert!(
            !ManagedKey::parse("DSH_SESSION_JSONL")
                .unwrap()
                .is_reserved()
        );
    }
}
