//! Tests of the managed-environment registry and the shipped contributors, with shared fixtures.

mod builtin;
mod collect;
mod registry;

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;

use super::{AsyncResolver, Contributor, DynamicOutput, ResolveFuture, Resolver, ShellEnvRegistry};
use crate::call::{AgentContext, ToolExecution};
use dsh_session::{SessionHeader, SessionId};

const HOME: &str = "/home/u/.dsh";

fn registry() -> ShellEnvRegistry {
    ShellEnvRegistry::new(PathBuf::from(HOME), Duration::from_secs(5))
}

fn id(value: &str) -> SessionId {
    SessionId::parse(value).unwrap()
}

fn unconfined() -> crate::sandbox::SandboxPolicy {
    crate::sandbox::SandboxPolicy::UNCONFINED
}

/// A top-level agent whose root is itself.
fn agent(session: &str) -> AgentContext {
    AgentContext {
        header: Arc::new(SessionHeader::new(id(session), "/work".into(), 1)),
        root: id(session),
        sandbox: unconfined(),
        env: None,
    }
}

/// A child agent one level below `parent`, under `root`.
fn child(session: &str, parent: &str, root: &str) -> AgentContext {
    let mut header = SessionHeader::new(id(session), "/work".into(), 2);
    header.parent_session = Some(id(parent));
    header.delegation_depth = 1;
    AgentContext {
        header: Arc::new(header),
        root: id(root),
        sandbox: unconfined(),
        env: None,
    }
}

fn exec(agent: Option<AgentContext>) -> ToolExecution {
    ToolExecution {
        call_id: "call-1".to_owned(),
        tool_name: "bash".to_owned(),
        agent,
        turn: None,
        step: None,
        cwd: "/work".into(),
        cancel: CancellationToken::new(),
        output: None,
    }
}

/// A synchronous contributor that declares `declared` and answers `answer` every time.
fn fixed(name: &str, declared: &[&str], answer: &[(&str, &str)]) -> Contributor {
    let answer: BTreeMap<String, String> = answer
        .iter()
        .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
        .collect();
    declared.iter().fold(
        Contributor::new(name, Resolver::sync(move |_| Ok(answer.clone()))),
        |c, key| c.variable(*key, format!("test variable {key}")),
    )
}

/// A contributor whose resolver must never run.
fn untouchable(name: &str, key: &str) -> Contributor {
    Contributor::new(
        name,
        Resolver::sync(|_| panic!("list() or a refused registration ran a resolver")),
    )
    .variable(key, "must not be resolved")
}

/// An asynchronous resolver that yields once, then answers with `answer()`.
struct Later<F>(F);

impl<F> AsyncResolver for Later<F>
where
    F: Fn() -> Result<DynamicOutput, String> + Send + Sync,
{
    fn resolve<'a>(&'a self, _exec: &'a ToolExecution) -> ResolveFuture<'a> {
        Box::pin(async move {
            tokio::task::yield_now().await;
            (self.0)()
        })
    }
}

/// An asynchronous resolver that never answers.
struct Never;

impl AsyncResolver for Never {
    fn resolve<'a>(&'a self, _exec: &'a ToolExecution) -> ResolveFuture<'a> {
        Box::pin(std::future::pending())
    }
}

fn later(name: &str, declared: &[&str], answer: serde_json::Value) -> Contributor {
    let resolver = Later(move || match &answer {
        serde_json::Value::Object(map) => Ok(map.clone()),
        other => Err(format!("test answer {other} is not an object")),
    });
    declared.iter().fold(
        Contributor::new(name, Resolver::asynchronous(resolver)),
        |c, key| c.variable(*key, format!("test variable {key}")),
    )
}

/// Runs a collection to completion on a private current-thread runtime, for tests that drive
/// collections from plain threads.
fn collect_blocking(
    registry: &ShellEnvRegistry,
    exec: &ToolExecution,
) -> Result<super::ManagedEnv, super::CollectError> {
    tokio::runtime::Builder::new_current_thread()
        .enable_time()
        .build()
        .unwrap()
        .block_on(registry.collect(exec))
}
