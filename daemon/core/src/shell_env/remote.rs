//! External contributors: a resolver answered by someone outside the daemon (a gRPC client on the
//! `ShellEnv.Contribute` stream). Protocol-neutral: queries go out on a channel, answers come back
//! through [`RemoteResolver::answer`]; the RPC layer does the wire translation.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use serde_json::Value;
use tokio::sync::{mpsc, oneshot};

use super::contributor::{AsyncResolver, DynamicOutput, ResolveFuture};
use crate::call::ToolExecution;
use crate::locks::lock;

/// The facts of one tool execution, as an external contributor is told them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExecutionFacts {
    /// The calling agent (= its session id), if any.
    pub agent_id: Option<String>,
    /// The session's working directory, or the call's.
    pub cwd: String,
    /// The tool call id.
    pub tool_call_id: String,
    /// The tool name.
    pub tool_name: String,
    /// The turn, inside a turn.
    pub turn: Option<u32>,
}

impl ExecutionFacts {
    /// The facts of `exec`.
    pub fn of(exec: &ToolExecution) -> Self {
        Self {
            agent_id: exec.session_id().map(ToString::to_string),
            cwd: exec.cwd.to_string_lossy().into_owned(),
            tool_call_id: exec.call_id.clone(),
            tool_name: exec.tool_name.clone(),
            turn: exec.turn,
        }
    }
}

/// One question for the external contributor.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResolveQuery {
    /// Answer with this id.
    pub id: u64,
    /// About this execution.
    pub facts: ExecutionFacts,
}

type Pending = Mutex<HashMap<u64, oneshot::Sender<Result<DynamicOutput, String>>>>;

/// A resolver whose answers come from outside.
#[derive(Debug)]
pub struct RemoteResolver {
    queries: mpsc::Sender<ResolveQuery>,
    pending: Arc<Pending>,
    next: AtomicU64,
}

impl RemoteResolver {
    /// A resolver and the stream of queries it will send.
    pub fn new() -> (Arc<Self>, mpsc::Receiver<ResolveQuery>) {
        let (tx, rx) = mpsc::channel(64);
        (
            Arc::new(Self {
                queries: tx,
                pending: Arc::new(Mutex::new(HashMap::new())),
                next: AtomicU64::new(1),
            }),
            rx,
        )
    }

    /// Delivers the answer to query `id`: a JSON object text, or an error message. Answers to
    /// unknown (timed-out or already answered) queries are ignored; returns whether it was wanted.
    pub fn answer(&self, id: u64, answer: Result<String, String>) -> bool {
        let Some(waiter) = lock(&self.pending).remove(&id) else {
            return false;
        };
        let parsed = answer.and_then(|text| match serde_json::from_str::<Value>(&text) {
            Ok(Value::Object(map)) => Ok(map),
            Ok(other) => Err(format!("answered {other} where a JSON object was expected")),
            Err(e) => Err(format!("answered invalid JSON: {e}")),
        });
        waiter.send(parsed).is_ok()
    }

    /// Fails every query still waiting (the contributor went away).
    pub fn close(&self) {
        lock(&self.pending).clear();
    }
}

/// Removes a query's waiter when its resolve future is dropped (e.g. by the registry's timeout).
struct Forget {
    pending: Arc<Pending>,
    id: u64,
}

impl Drop for Forget {
    fn drop(&mut self) {
        lock(&self.pending).remove(&self.id);
    }
}

impl AsyncResolver for Arc<RemoteResolver> {
    fn resolve<'a>(&'a self, exec: &'a ToolExecution) -> ResolveFuture<'a> {
        Box::pin(async move {
            let id = self.next.fetch_add(1, Ordering::Relaxed);
            let (tx, rx) = oneshot::channel();
            lock(&self.pending).insert(id, tx);
            let _forget = Forget {
                pending: self.pending.clone(),
                id,
            };
            let query = ResolveQuery {
                id,
                facts: ExecutionFacts::of(exec),
            };
            if self.queries.send(query).await.is_err() {
                return Err("the contributor has disconnected".to_owned());
            }
            rx.await
                .unwrap_or_else(|_| Err("the contributor disconnected before answering".to_owned()))
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::shell_env::{Contributor, Resolver, ShellEnvRegistry};
    use std::time::Duration;
    use tokio_util::sync::CancellationToken;

    fn exec() -> ToolExecution {
        ToolExecution {
            call_id: "c1".into(),
            tool_name: "bash".into(),
            agent: None,
            turn: Some(3),
            step: None,
            cwd: "/w".into(),
            cancel: CancellationToken::new(),
            output: None,
        }
    }

    #[tokio::test]
    async fn answers_flow_through_the_registry_and_are_checked() {
        let registry = ShellEnvRegistry::new("/h".into(), Duration::from_secs(5));
        let (remote, mut queries) = RemoteResolver::new();
        let _guard = registry
            .register(
                Contributor::new("editor", Resolver::asynchronous(remote.clone()))
                    .variable("DSH_EDITOR_FILE", "The file open in the editor."),
            )
            .unwrap();
        let answering = {
            let remote = remote.clone();
            tokio::spawn(async move {
                let q = queries.recv().await.unwrap();
                assert_eq!(q.facts.turn, Some(3));
                assert_eq!(q.facts.tool_call_id, "c1");
                assert!(remote.answer(q.id, Ok(r#"{"DSH_EDITOR_FILE": "/w/a.rs"}"#.into())));
                let q = queries.recv().await.unwrap();
                assert!(remote.answer(q.id, Ok(r#"{"DSH_EDITOR_FILE": 7}"#.into())));
                let q = queries.recv().await.unwrap();
                assert!(remote.answer(q.id, Ok("[1]".into())));
            })
        };
        let env = registry.collect(&exec()).await.unwrap();
        assert_eq!(env.get("DSH_EDITOR_FILE"), Some("/w/a.rs"));
        let err = registry.collect(&exec()).await.unwrap_err().to_string();
        assert!(
            err.contains("editor") && err.contains("non-string"),
            "{err}"
        );
        let err = registry.collect(&exec()).await.unwrap_err().to_string();
        assert!(
            err.contains("editor") && err.contains("JSON object"),
            "{err}"
        );
        answering.await.unwrap();
    }

    #[tokio::test]
    async fn a_silent_contributor_times_out_and_late_answers_are_ignored() {
        let registry = ShellEnvRegistry::new("/h".into(), Duration::from_millis(50));
        let (remote, mut queries) = RemoteResolver::new();
        let _guard = registry
            .register(
                Contributor::new("slow", Resolver::asynchronous(remote.clone()))
                    .variable("DSH_SLOW", "Never answers in time."),
            )
            .unwrap();
        let err = registry.collect(&exec()).await.unwrap_err().to_string();
        assert!(err.contains("slow"), "{err}");
        let q = queries.recv().await.unwrap();
        assert!(
            !remote.answer(q.id, Ok("{}".into())),
            "a timed-out query was still pending"
        );
    }

    #[tokio::test]
    async fn closing_fails_waiting_queries() {
        let registry = ShellEnvRegistry::new("/h".into(), Duration::from_secs(30));
        let (remote, mut queries) = RemoteResolver::new();
        let _guard = registry
            .register(
                Contributor::new("gone", Resolver::asynchronous(remote.clone()))
                    .variable("DSH_GONE", "Disconnects."),
            )
            .unwrap();
        let closer = {
            let remote = remote.clone();
            tokio::spawn(async move {
                queries.recv().await.unwrap();
                remote.close();
            })
        };
        let err = registry.collect(&exec()).await.unwrap_err().to_string();
        assert!(err.contains("disconnected"), "{err}");
        closer.await.unwrap();
    }
}
