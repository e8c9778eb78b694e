//! Contributors: a name, the managed keys it may return, and how it resolves them (CONTRACTS §5.1).

use std::collections::BTreeMap;
use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Value;

use crate::call::ToolExecution;

/// What a synchronous resolver answers: managed key to value, declared keys only. A declared key
/// left out means "absent now".
pub(crate) type SyncOutput = BTreeMap<String, String>;

/// What an asynchronous (dynamic) resolver answers: a JSON object whose values must be strings.
/// Values stay JSON so that a remote contributor's wrong answer is caught and named by the
/// registry rather than by whoever decoded it.
pub(crate) type DynamicOutput = serde_json::Map<String, Value>;

/// The future an [`AsyncResolver`] returns. The error is a human-readable reason; the registry
/// wraps it with the contributor's name.
pub(crate) type ResolveFuture<'a> =
    Pin<Box<dyn Future<Output = Result<DynamicOutput, String>> + Send + 'a>>;

/// A resolver that answers later, e.g. an external client asked over its `ShellEnv.Contribute`
/// stream. The registry bounds every answer with its resolve timeout and stops waiting when the
/// call is cancelled.
pub trait AsyncResolver: Send + Sync {
    /// Resolves the contributor's variables for one tool call.
    fn resolve<'a>(&'a self, exec: &'a ToolExecution) -> ResolveFuture<'a>;
}

type SyncFn = dyn Fn(&ToolExecution, &mut Answer<'_>) -> Result<(), String> + Send + Sync;

/// Where a synchronous resolver puts its values: straight into the snapshot being collected, so
/// that no map is built per contributor only to be copied into it (a bash call collects every
/// contributor). Each value is checked as it arrives (declared key, no NUL); the first refusal is
/// kept and fails the collection once the resolver returns.
pub struct Answer<'a> {
    pub(super) contributor: &'a str,
    pub(super) declared: &'a BTreeMap<super::ManagedKey, String>,
    pub(super) env: &'a mut BTreeMap<String, String>,
    pub(super) refused: Option<super::CollectError>,
}

impl Answer<'_> {
    /// Sets the declared key `key` to `value` for this call.
    pub fn set(&mut self, key: &str, value: String) {
        if self.refused.is_some() {
            return;
        }
        if !self.declared.contains_key(key) {
            self.refused = Some(super::CollectError::UndeclaredKey {
                contributor: self.contributor.to_owned(),
                key: key.to_owned(),
            });
            return;
        }
        if value.contains('\0') {
            self.refused = Some(super::CollectError::NulInValue {
                contributor: self.contributor.to_owned(),
                key: key.to_owned(),
            });
            return;
        }
        // Never overwrites: reserved keys cannot be declared and every other key has one owner.
        self.env.insert(key.to_owned(), value);
    }
}

impl fmt::Debug for Answer<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Answer")
            .field("contributor", &self.contributor)
            .finish_non_exhaustive()
    }
}

/// How a contributor computes its values for one tool call.
///
/// Synchronous resolvers are a separate variant so that the common case (every shipped
/// contributor) is a plain function call: no boxed future, no timer, no task.
#[derive(Clone)]
pub enum Resolver {
    /// Answers at once, from facts in memory. Must not block: it runs on the caller's thread
    /// (an async worker) and no timeout can interrupt it.
    Sync(Arc<SyncFn>),
    /// Answers later; bounded by the registry's resolve timeout and by the call's cancellation.
    Async(Arc<dyn AsyncResolver>),
}

impl Resolver {
    /// A synchronous resolver from a closure that answers with a map.
    pub fn sync<F>(resolve: F) -> Self
    where
        F: Fn(&ToolExecution) -> Result<SyncOutput, String> + Send + Sync + 'static,
    {
        Self::filling(move |exec, answer| {
            for (key, value) in resolve(exec)? {
                answer.set(&key, value);
            }
            Ok(())
        })
    }

    /// A synchronous resolver that sets its values on the call's `Answer` as it finds them
    /// (what the shipped contributors do: no map per contributor per call).
    pub fn filling<F>(resolve: F) -> Self
    where
        F: Fn(&ToolExecution, &mut Answer<'_>) -> Result<(), String> + Send + Sync + 'static,
    {
        Self::Sync(Arc::new(resolve))
    }

    /// An asynchronous resolver.
    pub fn asynchronous<R: AsyncResolver + 'static>(resolver: R) -> Self {
        Self::Async(Arc::new(resolver))
    }
}

impl fmt::Debug for Resolver {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Sync(_) => "Resolver::Sync",
            Self::Async(_) => "Resolver::Async",
        })
    }
}

/// A named provider of declared managed keys, as offered to
/// [`ShellEnvRegistry::register`](super::ShellEnvRegistry::register).
///
/// Keys are kept as plain strings until registration so that every declaration, wherever it came
/// from (code or a remote client), is checked by the registry in one documented order and refused
/// with one typed error.
#[derive(Debug, Clone)]
pub struct Contributor {
    name: String,
    variables: BTreeMap<String, String>,
    resolver: Resolver,
}

impl Contributor {
    /// A contributor that declares no variables yet. `name` should be stable: it appears in
    /// `list()`, in every error about this contributor, and decides resolution order.
    pub fn new(name: impl Into<String>, resolver: Resolver) -> Self {
        Self {
            name: name.into(),
            variables: BTreeMap::new(),
            resolver,
        }
    }

    /// Declares `key` with a one-line `description`. Declaring the same key again replaces its
    /// description. The declarations are the complete set of keys the resolver may ever return.
    #[must_use]
    pub fn variable(mut self, key: impl Into<String>, description: impl Into<String>) -> Self {
        self.variables.insert(key.into(), description.into());
        self
    }

    /// The contributor's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The declared keys and their descriptions, unvalidated, sorted by key.
    pub fn variables(&self) -> &BTreeMap<String, String> {
        &self.variables
    }

    /// The resolver.
    pub fn resolver(&self) -> &Resolver {
        &self.resolver
    }

    pub(super) fn into_parts(self) -> (String, BTreeMap<String, String>, Resolver) {
        (self.name, self.variables, self.resolver)
    }
}
