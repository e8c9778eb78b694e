//! The provider against an in-process HTTP/1.1 mock on 127.0.0.1: no test reaches the internet.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use dsh_testkit::{
    DONE, End, Mock, Reply, event, finish, ok_stream, status, text_delta, usage_event,
};
use serde_json::{Value, json};
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;

use super::*;
use crate::agent::provider::FinishReason;
use crate::call::ToolSchema;
use dsh_session::history::HistoryMessage;
use dsh_session::{MessageSource, SessionId, ToolCallRequest, Usage};

fn config(base_url: &str) -> OpenAiConfig {
    OpenAiConfig {
        base_url: base_url.to_owned(),
        request_timeout: Duration::from_secs(20),
        idle_timeout: Duration::from_secs(20),
        max_backoff: Duration::from_millis(5),
        ..OpenAiConfig::default()
    }
}

fn provider(base_url: &str) -> OpenAiProvider {
    OpenAiProvider::new(config(base_url), Some("sk-test-secret".into())).unwrap()
}

fn request() -> ModelRequest {
    ModelRequest {
        session_id: SessionId::new_v7(),
        system: "You are dsh.".into(),
        messages: vec![HistoryMessage::User {
            text: "hello".into(),
            source: MessageSource::User,
        }]
        .into(),
        tools: vec![bash_tool()],
    }
}

fn bash_tool() -> ToolSchema {
    ToolSchema {
        name: "bash".into(),
        description: "Run a command.".into(),
        parameters: json!({"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]}),
    }
}

/// One completion of the default request by a provider pointed at `mock`.
async fn complete_once(mock: &Mock) -> (Result<ModelReply, ModelError>, Vec<String>) {
    complete(
        &provider(&mock.base_url),
        &request(),
        &CancellationToken::new(),
    )
    .await
}

/// Runs one completion, collecting the `on_text` fragments; guarded so a bug fails instead of
/// hanging the suite.
async fn complete(
    provider: &OpenAiProvider,
    request: &ModelRequest,
    cancel: &CancellationToken,
) -> (Result<ModelReply, ModelError>, Vec<String>) {
    let fragments = Mutex::new(Vec::new());
    let on_text = |text: &str| fragments.lock().unwrap().push(text.to_owned());
    let result = tokio::time::timeout(
        Duration::from_secs(60),
        provider.complete(request, cancel, &on_text),
    )
    .await
    .expect("the provider returned");
    (result, fragments.into_inner().unwrap())
}

#[tokio::test]
async fn streams_text_in_chunks_with_usage() {
    let mock = Mock::start(vec![Reply::Stream {
        pieces: vec![
            ": keep-alive\n\n".into(),
            text_delta("Hel"),
            text_delta("lo, "),
            text_delta("world"),
            finish("stop"),
            usage_event(100, 7, 60),
            DONE.into(),
        ],
        end: End::Complete,
    }])
    .await;
    let (reply, fragments) = complete_once(&mock).await;
    let reply = reply.unwrap();
    assert_eq!(reply.text, "Hello, world");
    assert_eq!(fragments, ["Hel", "lo, ", "world"]);
    assert_eq!(reply.finish, FinishReason::Stop);
    assert!(reply.calls.is_empty());
    assert_eq!(
        reply.usage,
        Some(Usage {
            input_tokens: 40,
            output_tokens: 7,
            cache_read_tokens: Some(60),
            reasoning_tokens: None,
        })
    );
    assert_eq!(mock.requests().len(), 1);
}

#[tokio::test]
async fn streams_a_tool_call_whose_arguments_arrive_in_fragments() {
    let call = |value: Value| {
        event(
            json!({"choices": [{"index": 0, "delta": {"tool_calls": [value]}, "finish_reason": null}]}),
        )
    };
    let mock = Mock::start(vec![Reply::Stream {
        pieces: vec![
            text_delta("Let me look."),
            call(
                json!({"index": 0, "id": "call_0", "type": "function", "function": {"name": "bash", "arguments": ""}}),
            ),
            call(json!({"index": 0, "function": {"arguments": "{\"comm"}})),
            call(json!({"index": 0, "function": {"arguments": "and\": \"ls "}})),
            call(json!({"index": 0, "function": {"arguments": "-la\"}"}})),
            finish("tool_calls"),
            usage_event(10, 5, 0),
            DONE.into(),
        ],
        end: End::Complete,
    }])
    .await;
    let (reply, fragments) = complete_once(&mock).await;
    let reply = reply.unwrap();
    assert_eq!(fragments, ["Let me look."]);
    assert_eq!(reply.finish, FinishReason::ToolCalls);
    assert_eq!(
        reply.calls,
        [ToolCallRequest {
            id: "call_0".into(),
            name: "bash".into(),
            arguments: json!({"command": "ls -la"}),
        }]
    );
}

/// A chosen effort is the request's `reasoning_effort`; without one the member is absent (the
/// exact body of the next test).
#[tokio::test]
async fn a_chosen_reasoning_effort_is_sent_as_reasoning_effort() {
    let mock = Mock::start(vec![ok_stream("ok")]).await;
    let thinking = provider(&mock.base_url).with_reasoning_effort(Some(ReasoningEffort::Max));
    let (reply, _) = complete(&thinking, &request(), &CancellationToken::new()).await;
    reply.unwrap();
    assert_eq!(mock.requests()[0].body["reasoning_effort"], "max");
}

#[tokio::test]
async fn request_body_and_headers_have_the_chat_completions_shape() {
    let mock = Mock::start(vec![ok_stream("ok")]).await;
    let request = ModelRequest {
        session_id: SessionId::new_v7(),
        system: "You are dsh.".into(),
        messages: vec![
            HistoryMessage::User {
                text: "list files".into(),
                source: MessageSource::User,
            },
            HistoryMessage::Assistant {
                text: String::new(),
                tool_calls: vec![
                    ToolCallRequest {
                        id: "call_1".into(),
                        name: "bash".into(),
                        arguments: json!({"command": "ls"}),
                    },
                    ToolCallRequest {
                        id: "call_2".into(),
                        name: "bash".into(),
                        arguments: json!("{\"command\": oops"),
                    },
                ],
            },
            HistoryMessage::ToolResult {
                call_id: "call_1".into(),
                content: "a\nb".into(),
                is_error: false,
            },
            HistoryMessage::ToolResult {
                call_id: "call_2".into(),
                content: "invalid arguments".into(),
                is_error: true,
            },
            HistoryMessage::Assistant {
                text: "Two files.".into(),
                tool_calls: vec![],
            },
            HistoryMessage::User {
                text: "hook context".into(),
                source: MessageSource::Plugin {
                    plugin: "hooks-claude-code".into(),
                },
            },
        ]
        .into(),
        tools: vec![bash_tool()],
    };
    let (reply, _) = complete(
        &provider(&mock.base_url),
        &request,
        &CancellationToken::new(),
    )
    .await;
    reply.unwrap();
    let requests = mock.requests();
    let seen = &requests[0];
    assert_eq!(
        (seen.method.as_str(), seen.path.as_str()),
        ("POST", "/chat/completions")
    );
    assert_eq!(seen.headers["authorization"], "Bearer sk-test-secret");
    assert_eq!(seen.headers["content-type"], "application/json");
    assert_eq!(seen.headers["accept"], "text/event-stream");
    assert!(seen.headers["user-agent"].starts_with("dshd/"));
    assert_eq!(
        seen.body,
        json!({
            "model": "deepseek-v4-flash",
            "messages": [
                {"role": "system", "content": "You are dsh."},
                {"role": "user", "content": "list files"},
                {"role": "assistant", "content": "", "tool_calls": [
                    {"id": "call_1", "type": "function", "function": {"name": "bash", "arguments": "{\"command\":\"ls\"}"}},
                    {"id": "call_2", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": oops"}},
                ]},
                {"role": "tool", "tool_call_id": "call_1", "content": "a\nb"},
                {"role": "tool", "tool_call_id": "call_2", "content": "invalid arguments"},
                {"role": "assistant", "content": "Two files."},
                {"role": "user", "content": "hook context"},
            ],
            "tools": [{"type": "function", "function": {
                "name": "bash",
                "description": "Run a command.",
                "parameters": {"type": "object", "properties": {"command": {"type": "string"}}, "required": ["command"]},
            }}],
            "stream": true,
            "stream_options": {"include_usage": true},
        })
    );
}

#[tokio::test]
async fn base_url_variants_and_model_override() {
    let mock = Mock::start(vec![ok_stream("a"), ok_stream("b")]).await;
    let no_tools = ModelRequest {
        tools: vec![],
        ..request()
    };
    let with_v1 = provider(&format!("{}/v1/", mock.base_url)).with_model("deepseek-reasoner");
    assert_eq!(with_v1.model(), "deepseek-reasoner");
    assert_eq!(with_v1.provider(), "openai");
    complete(&with_v1, &no_tools, &CancellationToken::new())
        .await
        .0
        .unwrap();
    let plain = provider(&format!("{}/", mock.base_url));
    complete(&plain, &no_tools, &CancellationToken::new())
        .await
        .0
        .unwrap();
    let requests = mock.requests();
    assert_eq!(requests[0].path, "/v1/chat/completions");
    assert_eq!(requests[0].body["model"], "deepseek-reasoner");
    assert!(
        requests[0].body.get("tools").is_none(),
        "no tools, no array"
    );
    assert_eq!(requests[1].path, "/chat/completions");
    assert_eq!(requests[1].body["model"], "deepseek-v4-flash");
}

mod config;
mod errors;
