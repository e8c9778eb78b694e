//! The managed environment (CONTRACTS §5): the registry of contributors of `DSH_*` variables and the
//! immutable snapshot collected for each tool call.
//!
//! The registry owns three facts itself (`DSH_HOME`, `DSH_SHELL`, `DSH_SESSION_ID`); every other
//! managed key belongs to exactly one registered [`Contributor`]. The daemon ships four
//! contributors ([`builtin`]); external clients add more through the RPC layer, which wraps its
//! stream in an [`AsyncResolver`]. A snapshot is built fresh for every call and identity comes
//! only from the call's [`ToolExecution`](crate::call::ToolExecution), so concurrent calls of
//! different agents never see each other's facts.
//!
//! Decisions where the contract (CONTRACTS §5) leaves room:
//! - `list()` includes the registry's own keys under contributor `builtin`, and that name can
//!   therefore never be registered (refused as already registered).
//! - Contributors resolve, and `list()` and snapshots sort, in byte order (`"B" < "_" < "a"`).
//! - Declared keys stay plain strings until `register`, so every source of declarations gets the
//!   same checks in the same order; declarations are checked in key order.
//! - Values must not contain NUL (no environment can carry one); a home, socket or transcript path
//!   that is not UTF-8 fails the collection instead of being converted lossily into another path.
//! - Asynchronous resolvers are awaited one after another, each bounded by the resolve timeout and
//!   by the call's cancellation token; synchronous ones are plain calls with no timer.

pub(crate) mod builtin;
mod contributor;
mod error;
mod key;
mod registry;
pub(crate) mod remote;

#[cfg(test)]
mod tests;

use std::collections::BTreeMap;
use std::collections::btree_map;

pub use builtin::register_builtins;
#[cfg(test)]
pub(crate) use contributor::{AsyncResolver, DynamicOutput, ResolveFuture};
pub use contributor::{Contributor, Resolver};
pub(crate) use error::CollectError;
pub use error::RegisterError;
#[cfg(test)]
pub(crate) use key::KeyError;
pub(crate) use key::ManagedKey;
pub use registry::{Registration, ShellEnvRegistry};

/// The contributor name `list()` gives the registry's own keys. No contributor may take it.
pub(crate) const BUILTIN_CONTRIBUTOR: &str = "builtin";

/// One declared managed key, as `list()` reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VariableInfo {
    /// The key.
    pub key: ManagedKey,
    /// The contributor that owns it ([`BUILTIN_CONTRIBUTOR`] for the registry's own keys).
    pub contributor: String,
    /// One line saying what the value is and when it is present.
    pub description: String,
}

/// The managed variables collected for one tool call: an immutable map sorted by key (byte
/// order). A key that is not here is absent for this call; the executor applies the snapshot
/// last, so nothing from the daemon's own environment can stand in for it.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ManagedEnv(BTreeMap<String, String>);

impl ManagedEnv {
    pub(crate) fn new(vars: BTreeMap<String, String>) -> Self {
        Self(vars)
    }

    /// The value of `key`, if present.
    pub fn get(&self, key: &str) -> Option<&str> {
        self.0.get(key).map(String::as_str)
    }

    /// Whether `key` is present.
    pub fn contains_key(&self, key: &str) -> bool {
        self.0.contains_key(key)
    }

    /// The variables in key order.
    pub fn iter(&self) -> Iter<'_> {
        Iter(self.0.iter())
    }

    /// Number of variables.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are no variables (never true for a collected snapshot).
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// The variables as a plain map.
    pub fn into_inner(self) -> BTreeMap<String, String> {
        self.0
    }
}

/// Iterator over a [`ManagedEnv`] in key order.
#[derive(Debug, Clone)]
pub struct Iter<'a>(btree_map::Iter<'a, String, String>);

impl<'a> Iterator for Iter<'a> {
    type Item = (&'a str, &'a str);

    fn next(&mut self) -> Option<Self::Item> {
        self.0.next().map(|(k, v)| (k.as_str(), v.as_str()))
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        self.0.size_hint()
    }
}

impl ExactSizeIterator for Iter<'_> {}

impl<'a> IntoIterator for &'a ManagedEnv {
    type Item = (&'a str, &'a str);
    type IntoIter = Iter<'a>;

    fn into_iter(self) -> Self::IntoIter {
        self.iter()
    }
}
