//! Why a registration or a collection is refused. Every message names the contributor and, where
//! one is involved, the key, so a failed tool call says which plugin or client to blame.

use std::path::PathBuf;
use std::time::Duration;

use super::key::KeyError;

/// Why [`ShellEnvRegistry::register`](super::ShellEnvRegistry::register) refused a contributor.
/// Checks run in the order of the variants; the first failure is returned and nothing changes.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RegisterError {
    /// The name is empty or only whitespace.
    #[error("shell env contributor name must be non-empty")]
    BlankName,
    /// A contributor with exactly this name (case-sensitive, untrimmed) is registered, or the
    /// name is `builtin`, which `list()` uses for the registry's own keys.
    #[error("shell env contributor {name:?} is already registered")]
    DuplicateName {
        /// The name.
        name: String,
    },
    /// A declared key is not `DSH_` followed by `[A-Z][A-Z0-9_]*`.
    #[error("shell env contributor {contributor:?} declared invalid key {key:?}: {reason}")]
    InvalidKey {
        /// The contributor.
        contributor: String,
        /// The key as declared.
        key: String,
        /// The rule it breaks.
        reason: KeyError,
    },
    /// A declared key is one the registry sets itself (`DSH_HOME`, `DSH_SHELL`,
    /// `DSH_SESSION_ID`).
    #[error("shell env contributor {contributor:?} cannot own reserved key {key:?}")]
    ReservedKey {
        /// The contributor.
        contributor: String,
        /// The key.
        key: String,
    },
    /// A declared key has an empty or whitespace-only description.
    #[error("shell env contributor {contributor:?} must describe {key:?}")]
    BlankDescription {
        /// The contributor.
        contributor: String,
        /// The key.
        key: String,
    },
    /// A declared key already belongs to another registered contributor.
    #[error(
        "shell env key {key:?} is already owned by contributor {owner:?}; contributor \
         {contributor:?} cannot also own it"
    )]
    KeyOwned {
        /// The key.
        key: String,
        /// The contributor that owns it.
        owner: String,
        /// The contributor that asked for it.
        contributor: String,
    },
}

/// Why [`ShellEnvRegistry::collect`](super::ShellEnvRegistry::collect) produced no snapshot. A
/// collection is all or nothing: the tool call fails and nothing is spawned.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CollectError {
    /// The harness home cannot be written into an environment string without changing it.
    #[error("harness home {} is not valid UTF-8, so DSH_HOME cannot be set", home.display())]
    HomeNotUtf8 {
        /// The home.
        home: PathBuf,
    },
    /// The resolver reported an error.
    #[error("shell env contributor {contributor:?} failed: {message}")]
    Failed {
        /// The contributor.
        contributor: String,
        /// The resolver's reason.
        message: String,
    },
    /// The resolver returned a key it did not declare (the built-in keys are never declared).
    #[error("shell env contributor {contributor:?} returned undeclared key {key:?}")]
    UndeclaredKey {
        /// The contributor.
        contributor: String,
        /// The key.
        key: String,
    },
    /// A dynamic resolver returned something other than a string (including `null`).
    #[error("shell env contributor {contributor:?} returned a non-string value for {key:?}")]
    NonStringValue {
        /// The contributor.
        contributor: String,
        /// The key.
        key: String,
    },
    /// The value contains a NUL byte, which no environment variable can carry.
    #[error("shell env contributor {contributor:?} returned a value with a NUL byte for {key:?}")]
    NulInValue {
        /// The contributor.
        contributor: String,
        /// The key.
        key: String,
    },
    /// An asynchronous resolver did not answer within the resolve timeout.
    #[error("shell env contributor {contributor:?} did not answer within {timeout:?}")]
    TimedOut {
        /// The contributor.
        contributor: String,
        /// The resolve timeout.
        timeout: Duration,
    },
    /// The tool call was cancelled while an asynchronous resolver was being waited for.
    #[error("tool call cancelled while waiting for shell env contributor {contributor:?}")]
    Cancelled {
        /// The contributor.
        contributor: String,
    },
}
