//! The keyless scripted model: replays a JSON script, one reply per model request. It is the
//! provider of the tests and of the README demo, so its behaviour is fully deterministic.
//!
//! ```json
//! {"replies": [
//!   {"text": "Let me look.", "tool_calls": [{"name": "bash", "arguments": {"command": "ls"}}]},
//!   {"tool_calls": [{"name": "spawn_agent", "arguments": {"prompt": "count files"},
//!                    "child_script": {"replies": [{"text": "42"}]}}]},
//!   {"text": "Done.", "delay_ms": 50}
//! ]}
//! ```

use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use serde::Deserialize;
use serde_json::Value;
use tokio_util::sync::CancellationToken;

use super::provider::{
    FinishReason, ModelChoice, ModelError, ModelProgress, ModelProvider, ModelReply, ModelRequest,
};
use crate::call::BoxFuture;
use crate::locks::lock;
use dsh_session::ToolCallRequest;

/// Provider name of the scripted model.
pub const PROVIDER: &str = "scripted";

/// A parsed, validated script.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct Script {
    /// Replies, consumed in order, one per model request.
    pub replies: Vec<ScriptReply>,
}

/// One scripted model reply.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptReply {
    /// Assistant text.
    #[serde(default)]
    pub text: String,
    /// The model's reasoning before the text (as a reasoning model returns it).
    #[serde(default)]
    pub reasoning: String,
    /// Tool calls, in order.
    #[serde(default)]
    pub tool_calls: Vec<ScriptCall>,
    /// Wait this long before answering (cancellable), to hold a turn open in tests and demos.
    #[serde(default)]
    pub delay_ms: u64,
}

/// One scripted tool call.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScriptCall {
    /// Tool name.
    pub name: String,
    /// Arguments object (default `{}`).
    #[serde(default = "empty_object")]
    pub arguments: Value,
    /// Call id; generated when absent.
    #[serde(default)]
    pub id: Option<String>,
    /// The script of a child agent this call spawns (`spawn_agent`).
    #[serde(default)]
    pub child_script: Option<Value>,
}

fn empty_object() -> Value {
    Value::Object(serde_json::Map::new())
}

/// Why a script was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("invalid script at {path}: {message}")]
pub struct ScriptError {
    /// Where in the script, e.g. `replies[1].tool_calls[0].name`.
    pub path: String,
    /// What was wrong.
    pub message: String,
}

impl Script {
    /// Parses and validates a script from JSON text, including every nested `child_script`.
    pub fn parse(text: &str) -> Result<Self, ScriptError> {
        let mut de = serde_json::Deserializer::from_str(text);
        let script: Self = serde_path_to_error::deserialize(&mut de).map_err(|e| ScriptError {
            path: path_label(&e.path().to_string()),
            message: e.into_inner().to_string(),
        })?;
        de.end().map_err(|e| ScriptError {
            path: "(end)".into(),
            message: e.to_string(),
        })?;
        script.validate("")?;
        Ok(script)
    }

    /// Parses a script given as a JSON value (a nested `child_script`).
    pub fn from_value(value: &Value) -> Result<Self, ScriptError> {
        Self::parse(&value.to_string())
    }

    fn validate(&self, prefix: &str) -> Result<(), ScriptError> {
        for (r, reply) in self.replies.iter().enumerate() {
            for (c, call) in reply.tool_calls.iter().enumerate() {
                let here = format!("{prefix}replies[{r}].tool_calls[{c}]");
                if call.name.trim().is_empty() {
                    return Err(ScriptError {
                        path: format!("{here}.name"),
                        message: "tool name is empty".into(),
                    });
                }
                if let Some(child) = &call.child_script {
                    let nested: Self =
                        serde_json::from_value(child.clone()).map_err(|e| ScriptError {
                            path: format!("{here}.child_script"),
                            message: e.to_string(),
                        })?;
                    nested.validate(&format!("{here}.child_script."))?;
                }
            }
        }
        Ok(())
    }
}

fn path_label(path: &str) -> String {
    if path == "." {
        "(root)".to_owned()
    } else {
        path.to_owned()
    }
}

/// The scripted provider: each model request takes the next reply.
#[derive(Debug)]
pub(crate) struct ScriptedProvider {
    script: Script,
    /// Index of the next reply. Shared by every request of the agent, so the script runs across
    /// turns.
    next: AtomicUsize,
    /// The `child_script` of each call replayed so far, by call id, until a child takes it: the
    /// script is the scripted model's own business, so it travels here rather than with the call.
    child_scripts: Mutex<HashMap<String, Value>>,
}

impl ScriptedProvider {
    /// A provider replaying `script`.
    pub(crate) fn new(script: Script) -> Self {
        Self {
            script,
            next: AtomicUsize::new(0),
            child_scripts: Mutex::new(HashMap::new()),
        }
    }

    /// Number of replies consumed so far.
    #[cfg(test)]
    pub(crate) fn consumed(&self) -> usize {
        self.next
            .load(Ordering::SeqCst)
            .min(self.script.replies.len())
    }
}

impl ModelProvider for ScriptedProvider {
    fn provider(&self) -> &str {
        PROVIDER
    }

    fn model(&self) -> &str {
        "script"
    }

    /// A child replays the script its call carried, or an empty one.
    fn child_choice(&self, call_id: &str) -> ModelChoice {
        let script = lock(&self.child_scripts)
            .remove(call_id)
            .unwrap_or_else(|| serde_json::json!({"replies": []}));
        ModelChoice {
            provider: Some(PROVIDER.into()),
            model: None,
            reasoning_effort: None,
            script: Some(script.to_string()),
        }
    }

    fn complete<'a>(
        &'a self,
        _request: &'a ModelRequest,
        cancel: &'a CancellationToken,
        progress: &'a dyn ModelProgress,
    ) -> BoxFuture<'a, Result<ModelReply, ModelError>> {
        Box::pin(async move {
            if cancel.is_cancelled() {
                return Err(ModelError::Cancelled);
            }
            let index = self.next.fetch_add(1, Ordering::SeqCst);
            let Some(reply) = self.script.replies.get(index) else {
                return Err(ModelError::ScriptExhausted {
                    replies: self.script.replies.len(),
                });
            };
            if reply.delay_ms > 0 {
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_millis(reply.delay_ms)) => {}
                    () = cancel.cancelled() => return Err(ModelError::Cancelled),
                }
            }
            if !reply.text.is_empty() {
                progress.text(&reply.text);
            }
            let mut child_scripts = lock(&self.child_scripts);
            let calls: Vec<ToolCallRequest> = reply
                .tool_calls
                .iter()
                .enumerate()
                .map(|(i, call)| {
                    let id = call
                        .id
                        .clone()
                        .unwrap_or_else(|| format!("call_{}_{i}", uuid::Uuid::now_v7().simple()));
                    if let Some(script) = &call.child_script {
                        child_scripts.insert(id.clone(), script.clone());
                    }
                    ToolCallRequest {
                        id,
                        name: call.name.clone(),
                        arguments: call.arguments.clone(),
                    }
                })
                .collect();
            drop(child_scripts);
            Ok(ModelReply {
                text: reply.text.clone(),
                reasoning: reply.reasoning.clone(),
                finish: if calls.is_empty() {
                    FinishReason::Stop
                } else {
                    FinishReason::ToolCalls
                },
                calls,
                usage: None,
            })
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use dsh_session::SessionId;

    fn request() -> ModelRequest {
        ModelRequest {
            session_id: SessionId::parse("s").unwrap(),
            system: String::new(),
            messages: Default::default(),
            tools: Vec::new(),
        }
    }

    #[test]
    fn parse_errors_name_the_place() {
        let err =
            Script::parse(r#"{"replies": [{"text": "a"}, {"tool_calls": [{"arguments": {}}]}]}"#)
                .unwrap_err();
        assert_eq!(err.path, "replies[1].tool_calls[0]");
        assert!(err.message.contains("missing field `name`"), "{err}");
        let err = Script::parse(r#"{"replies": [{"txt": "a"}]}"#).unwrap_err();
        assert!(err.to_string().contains("replies[0]"), "{err}");
        let err = Script::parse(r#"{"replies": [{"tool_calls": [{"name": "spawn_agent", "child_script": {"replies": [{"tool_calls": [{"name": " "}]}]}}]}]}"#)
            .unwrap_err();
        assert_eq!(
            err.path,
            "replies[0].tool_calls[0].child_script.replies[0].tool_calls[0].name"
        );
        assert!(Script::parse("{\"replies\": []} x").is_err());
    }

    #[tokio::test]
    async fn replies_in_order_then_exhausted() {
        let script = Script::parse(
            r#"{"replies": [{"text": "one", "tool_calls": [{"name": "bash", "arguments": {"command": "ls"}, "id": "c1", "child_script": {"replies": [{"text": "42"}]}}]}, {"text": "two"}]}"#,
        )
        .unwrap();
        let provider = ScriptedProvider::new(script);
        let cancel = CancellationToken::new();
        let seen = std::sync::Mutex::new(Vec::new());
        let on_text = |t: &str| seen.lock().unwrap().push(t.to_owned());
        let req = request();
        let first = provider.complete(&req, &cancel, &on_text).await.unwrap();
        assert_eq!(first.text, "one");
        assert_eq!(first.finish, FinishReason::ToolCalls);
        assert_eq!(first.calls[0].id, "c1");
        assert_eq!(first.calls[0].arguments["command"], "ls");
        assert_eq!(
            provider.child_choice("c1").script.as_deref(),
            Some(r#"{"replies":[{"text":"42"}]}"#)
        );
        assert_eq!(
            provider.child_choice("c1").script.as_deref(),
            Some(r#"{"replies":[]}"#),
            "taken once; a second child gets an empty script"
        );
        let second = provider.complete(&req, &cancel, &on_text).await.unwrap();
        assert_eq!(second.finish, FinishReason::Stop);
        assert_eq!(*seen.lock().unwrap(), ["one", "two"]);
        let err = provider
            .complete(&req, &cancel, &on_text)
            .await
            .unwrap_err();
        assert_eq!(err, ModelError::ScriptExhausted { replies: 2 });
        assert!(err.to_string().contains("exhausted"));
        assert_eq!(provider.consumed(), 2);
    }

    #[tokio::test]
    async fn delay_is_cancellable() {
        let provider = ScriptedProvider::new(
            Script::parse(r#"{"replies": [{"text": "late", "delay_ms": 600000}]}"#).unwrap(),
        );
        let cancel = CancellationToken::new();
        let req = request();
        let waiter = {
            let cancel = cancel.clone();
            tokio::spawn(async move { cancel.cancel() })
        };
        let err = provider
            .complete(&req, &cancel, &|_: &str| {})
            .await
            .unwrap_err();
        waiter.await.unwrap();
        assert_eq!(err, ModelError::Cancelled);
    }
}
