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
use crate::agent::provider::{FinishReason, PlannedCall, ToolSchema};
use crate::session::history::HistoryMessage;
use crate::session::{MessageSource, SessionId, ToolCallRequest, Usage};

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
        }],
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
    let (reply, fragments) = complete(
        &provider(&mock.base_url),
        &request(),
        &CancellationToken::new(),
    )
    .await;
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
    let (reply, fragments) = complete(
        &provider(&mock.base_url),
        &request(),
        &CancellationToken::new(),
    )
    .await;
    let reply = reply.unwrap();
    assert_eq!(fragments, ["Let me look."]);
    assert_eq!(reply.finish, FinishReason::ToolCalls);
    assert_eq!(
        reply.calls,
        [PlannedCall {
            call: ToolCallRequest {
                id: "call_0".into(),
                name: "bash".into(),
                arguments: json!({"command": "ls -la"}),
            },
            child_script: None,
        }]
    );
}

#[tokio::test]
async fn rate_limit_is_retried_after_the_servers_wait() {
    let mock = Mock::start(vec![
        status(
            429,
            vec![("retry-after", "0".into())],
            r#"{"error":{"message":"Rate limit reached"}}"#,
        ),
        ok_stream("fine"),
    ])
    .await;
    // A long backoff shows that `retry-after: 0` is honoured rather than the exponential wait.
    let provider = OpenAiProvider::new(
        OpenAiConfig {
            max_backoff: Duration::from_secs(3600),
            ..config(&mock.base_url)
        },
        Some("k".into()),
    )
    .unwrap();
    let (reply, _) = complete(&provider, &request(), &CancellationToken::new()).await;
    assert_eq!(reply.unwrap().text, "fine");
    assert_eq!(mock.requests().len(), 2);
}

#[tokio::test]
async fn rate_limit_gives_up_after_the_retries() {
    let limited = || status(429, vec![], r#"{"error":{"message":"slow down"}}"#);
    let mock = Mock::start(vec![limited(), limited(), limited()]).await;
    let provider = OpenAiProvider::new(
        OpenAiConfig {
            retries: 2,
            ..config(&mock.base_url)
        },
        Some("k".into()),
    )
    .unwrap();
    let (reply, _) = complete(&provider, &request(), &CancellationToken::new()).await;
    let err = reply.unwrap_err();
    assert_eq!(
        err,
        ModelError::RateLimited {
            attempts: 3,
            message: "slow down".into()
        }
    );
    assert_eq!(mock.requests().len(), 3);
}

#[tokio::test]
async fn unauthorized_names_the_key_variable() {
    for code in [401, 403] {
        let mock = Mock::start(vec![status(
            code,
            vec![("content-type", "application/json".into())],
            r#"{"error":{"message":"Authentication Fails, Your api key: ****cret is invalid","type":"authentication_error"}}"#,
        )])
        .await;
        let (reply, _) = complete(
            &provider(&mock.base_url),
            &request(),
            &CancellationToken::new(),
        )
        .await;
        let err = reply.unwrap_err();
        assert!(
            matches!(&err, ModelError::Unauthorized { variable, status, .. } if variable == "DEEPSEEK_API_KEY" && *status == code),
            "{err:?}"
        );
        let message = err.to_string();
        assert!(message.contains("DEEPSEEK_API_KEY"), "{message}");
        assert!(message.contains("Authentication Fails"), "{message}");
        assert!(!message.contains("sk-test-secret"), "{message}");
        assert_eq!(mock.requests().len(), 1, "never retried");
    }
}

#[tokio::test]
async fn a_stream_cut_in_the_middle_says_so() {
    for end in [End::Cut, End::Close] {
        let mock = Mock::start(vec![Reply::Stream {
            pieces: vec![
                text_delta("partial "),
                "data: {\"choices\":[{\"index\":0,\"delta\":{\"content\":\"ans".into(),
            ],
            end,
        }])
        .await;
        let (reply, fragments) = complete(
            &provider(&mock.base_url),
            &request(),
            &CancellationToken::new(),
        )
        .await;
        let err = reply.unwrap_err();
        assert!(matches!(err, ModelError::Transport(_)), "{end:?}: {err:?}");
        assert!(err.to_string().contains("cut off"), "{end:?}: {err}");
        assert_eq!(fragments, ["partial "]);
        assert_eq!(mock.requests().len(), 1, "never retried after streaming");
    }
}

#[tokio::test]
async fn cancel_during_a_stalled_stream_returns_cancelled() {
    let mock = Mock::start(vec![Reply::Stream {
        pieces: vec![text_delta("thinking...")],
        end: End::Stall,
    }])
    .await;
    let provider = provider(&mock.base_url);
    let cancel = CancellationToken::new();
    let started = Arc::new(tokio::sync::Notify::new());
    let canceller = {
        let (cancel, started) = (cancel.clone(), started.clone());
        tokio::spawn(async move {
            started.notified().await;
            cancel.cancel();
        })
    };
    let request = request();
    let on_text = |_: &str| started.notify_one();
    let reply = tokio::time::timeout(
        Duration::from_secs(60),
        provider.complete(&request, &cancel, &on_text),
    )
    .await
    .expect("cancel made the provider return");
    assert_eq!(reply.unwrap_err(), ModelError::Cancelled);
    canceller.await.unwrap();
}

#[tokio::test]
async fn cancel_before_the_response_returns_cancelled() {
    let mock = Mock::start(vec![Reply::Silent]).await;
    let provider = provider(&mock.base_url);
    let cancel = CancellationToken::new();
    let request = request();
    let waiter = {
        let cancel = cancel.clone();
        let requests = mock.requests.clone();
        tokio::spawn(async move {
            while requests.lock().unwrap().is_empty() {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            cancel.cancel();
        })
    };
    let (reply, _) = complete(&provider, &request, &cancel).await;
    assert_eq!(reply.unwrap_err(), ModelError::Cancelled);
    waiter.await.unwrap();

    // An already-cancelled token sends nothing.
    let (reply, _) = complete(&provider, &request, &cancel).await;
    assert_eq!(reply.unwrap_err(), ModelError::Cancelled);
    assert_eq!(mock.requests().len(), 1);
}

#[tokio::test]
async fn missing_key_fails_without_a_request() {
    let mock = Mock::start(vec![ok_stream("unreachable")]).await;
    for key in [None, Some(String::new()), Some("  \n".into())] {
        let provider = OpenAiProvider::new(
            OpenAiConfig {
                api_key_env: "MY_MODEL_KEY".into(),
                ..config(&mock.base_url)
            },
            key,
        )
        .unwrap();
        let (reply, _) = complete(&provider, &request(), &CancellationToken::new()).await;
        let err = reply.unwrap_err();
        assert_eq!(
            err,
            ModelError::MissingKey {
                variable: "MY_MODEL_KEY".into()
            }
        );
        assert!(err.to_string().contains("MY_MODEL_KEY"));
    }
    assert!(mock.requests().is_empty());
}

#[tokio::test]
async fn server_error_is_retried_then_succeeds() {
    let mock = Mock::start(vec![
        status(500, vec![], r#"{"error":{"message":"internal"}}"#),
        status(503, vec![], "upstream unavailable"),
        ok_stream("recovered"),
    ])
    .await;
    let (reply, _) = complete(
        &provider(&mock.base_url),
        &request(),
        &CancellationToken::new(),
    )
    .await;
    assert_eq!(reply.unwrap().text, "recovered");
    assert_eq!(mock.requests().len(), 3);
}

#[tokio::test]
async fn server_error_gives_up_with_the_status() {
    let mock = Mock::start(vec![
        status(502, vec![], "bad gateway"),
        status(502, vec![], "bad gateway"),
    ])
    .await;
    let provider = OpenAiProvider::new(
        OpenAiConfig {
            retries: 1,
            ..config(&mock.base_url)
        },
        Some("k".into()),
    )
    .unwrap();
    let (reply, _) = complete(&provider, &request(), &CancellationToken::new()).await;
    let err = reply.unwrap_err();
    assert!(
        matches!(&err, ModelError::Http { status: 502, message } if message.contains("bad gateway") && message.contains("2 attempts")),
        "{err:?}"
    );
    assert_eq!(mock.requests().len(), 2);
}

#[tokio::test]
async fn client_error_reports_the_api_message_without_retrying() {
    let mock = Mock::start(vec![status(
        400,
        vec![],
        r#"{"error":{"message":"This model's maximum context length is 65536 tokens","type":"invalid_request_error"}}"#,
    )])
    .await;
    let (reply, _) = complete(
        &provider(&mock.base_url),
        &request(),
        &CancellationToken::new(),
    )
    .await;
    assert_eq!(
        reply.unwrap_err(),
        ModelError::Http {
            status: 400,
            message: "This model's maximum context length is 65536 tokens".into()
        }
    );
    assert_eq!(mock.requests().len(), 1);
}

#[tokio::test]
async fn a_redirect_is_reported_not_followed() {
    let mock = Mock::start(vec![status(
        301,
        vec![("location", "https://api.example.invalid/".into())],
        "",
    )])
    .await;
    let (reply, _) = complete(
        &provider(&mock.base_url),
        &request(),
        &CancellationToken::new(),
    )
    .await;
    let err = reply.unwrap_err();
    assert!(
        matches!(&err, ModelError::Http { status: 301, message } if message.contains("https://api.example.invalid/") && message.contains("base_url")),
        "{err:?}"
    );
    assert_eq!(mock.requests().len(), 1);
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
        ],
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
            "model": "deepseek-chat",
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
    assert_eq!(requests[1].body["model"], "deepseek-chat");
}

#[tokio::test]
async fn idle_timeout_when_the_server_stalls() {
    let mock = Mock::start(vec![
        Reply::Stream {
            pieces: vec![text_delta("hm")],
            end: End::Stall,
        },
        Reply::Silent,
    ])
    .await;
    let tiny = |c: OpenAiConfig| OpenAiConfig {
        idle_timeout: Duration::from_millis(100),
        request_timeout: Duration::from_millis(100),
        ..c
    };
    let provider = OpenAiProvider::new(tiny(config(&mock.base_url)), Some("k".into())).unwrap();
    let (reply, fragments) = complete(&provider, &request(), &CancellationToken::new()).await;
    let err = reply.unwrap_err();
    assert_eq!(err, ModelError::IdleTimeout { seconds: 1 });
    assert!(err.to_string().contains("sent nothing"));
    assert_eq!(fragments, ["hm"]);

    // No response headers at all: the request ceiling ends it the same way, without a retry.
    let (reply, _) = complete(&provider, &request(), &CancellationToken::new()).await;
    assert!(matches!(reply.unwrap_err(), ModelError::IdleTimeout { .. }));
    assert_eq!(mock.requests().len(), 2);
}

#[tokio::test]
async fn connection_refused_is_a_transport_error() {
    // Bind then drop, so the port is (almost certainly) closed.
    let addr = TcpListener::bind("127.0.0.1:0")
        .await
        .unwrap()
        .local_addr()
        .unwrap();
    let provider = provider(&format!("http://{addr}"));
    let (reply, _) = complete(&provider, &request(), &CancellationToken::new()).await;
    let err = reply.unwrap_err();
    assert!(matches!(err, ModelError::Transport(_)), "{err:?}");
    assert!(err.to_string().contains("cannot reach"), "{err}");
}

#[tokio::test]
async fn a_non_streamed_json_reply_is_accepted() {
    let body = json!({
        "id": "x", "object": "chat.completion",
        "choices": [{"index": 0, "message": {"role": "assistant", "content": "whole"}, "finish_reason": "stop"}],
        "usage": {"prompt_tokens": 3, "completion_tokens": 1}
    });
    let mock = Mock::start(vec![status(
        200,
        vec![("content-type", "application/json".into())],
        &body.to_string(),
    )])
    .await;
    let (reply, fragments) = complete(
        &provider(&mock.base_url),
        &request(),
        &CancellationToken::new(),
    )
    .await;
    let reply = reply.unwrap();
    assert_eq!(
        (reply.text.as_str(), reply.finish),
        ("whole", FinishReason::Stop)
    );
    assert_eq!(fragments, ["whole"]);
}

#[tokio::test]
async fn an_error_event_inside_the_stream_is_reported() {
    let mock = Mock::start(vec![Reply::Stream {
        pieces: vec![
            text_delta("a"),
            event(json!({"error": {"message": "model overloaded", "type": "server_error"}})),
        ],
        end: End::Complete,
    }])
    .await;
    let (reply, _) = complete(
        &provider(&mock.base_url),
        &request(),
        &CancellationToken::new(),
    )
    .await;
    let err = reply.unwrap_err();
    assert!(err.to_string().contains("model overloaded"), "{err}");
}

#[test]
fn config_defaults_and_toml_keys() {
    let defaults = OpenAiConfig::default();
    assert_eq!(defaults.base_url, "https://api.deepseek.com");
    assert_eq!(defaults.model, "deepseek-chat");
    assert_eq!(defaults.api_key_env, "DEEPSEEK_API_KEY");
    assert_eq!(defaults.request_timeout, Duration::from_secs(300));
    assert_eq!(defaults.idle_timeout, Duration::from_secs(120));
    assert_eq!(defaults.retries, 3);
    assert_eq!(defaults.max_backoff, Duration::from_secs(30));
    assert_eq!(toml::from_str::<OpenAiConfig>("").unwrap(), defaults);

    let parsed: OpenAiConfig = toml::from_str(
        r#"
        base_url = "https://api.openai.com/v1"
        model = "gpt-4.1"
        api_key_env = "OPENAI_API_KEY"
        request_timeout_ms = 1500
        idle_timeout_ms = 250
        retries = 0
        max_backoff_ms = 10
        "#,
    )
    .unwrap();
    assert_eq!(
        parsed,
        OpenAiConfig {
            base_url: "https://api.openai.com/v1".into(),
            model: "gpt-4.1".into(),
            api_key_env: "OPENAI_API_KEY".into(),
            request_timeout: Duration::from_millis(1500),
            idle_timeout: Duration::from_millis(250),
            retries: 0,
            max_backoff: Duration::from_millis(10),
        }
    );
    assert!(toml::from_str::<OpenAiConfig>("idle_timeout = 5").is_err());
    assert!(toml::from_str::<OpenAiConfig>("request_timeout_ms = \"soon\"").is_err());
}

/// How the daemon's `[model]` table can embed this config next to `provider`.
#[test]
fn config_embeds_in_a_tagged_model_table() {
    #[derive(Debug, Deserialize)]
    #[serde(tag = "provider", rename_all = "lowercase", deny_unknown_fields)]
    enum ModelConfig {
        Scripted { script: String },
        Openai(OpenAiConfig),
    }
    #[derive(Debug, Deserialize)]
    #[serde(deny_unknown_fields)]
    struct File {
        model: ModelConfig,
    }
    let file: File =
        toml::from_str("[model]\nprovider = \"openai\"\nmodel = \"deepseek-reasoner\"\n").unwrap();
    let ModelConfig::Openai(openai) = file.model else {
        panic!("not openai: {file:?}");
    };
    assert_eq!(openai.model, "deepseek-reasoner");
    assert_eq!(openai.base_url, DEFAULT_BASE_URL);
    let typo = toml::from_str::<File>("[model]\nprovider = \"openai\"\nmodle = \"x\"\n");
    assert!(typo.unwrap_err().to_string().contains("modle"));
    let scripted: File =
        toml::from_str("[model]\nprovider = \"scripted\"\nscript = \"s.json\"\n").unwrap();
    assert!(matches!(scripted.model, ModelConfig::Scripted { script } if script == "s.json"));
}

#[test]
fn construction_validates_the_config() {
    let bad = |c: OpenAiConfig| OpenAiProvider::new(c, None).unwrap_err();
    let base = OpenAiConfig::default();
    for url in [
        "",
        "api.deepseek.com",
        "ftp://x",
        "https://x?q=1",
        "https://u:p@x",
    ] {
        assert!(
            matches!(
                bad(OpenAiConfig {
                    base_url: url.into(),
                    ..base.clone()
                }),
                OpenAiSetupError::BaseUrl { .. }
            ),
            "{url}"
        );
    }
    assert_eq!(
        bad(OpenAiConfig {
            idle_timeout: Duration::ZERO,
            ..base.clone()
        }),
        OpenAiSetupError::ZeroTimeout {
            key: "idle_timeout_ms"
        }
    );
    assert_eq!(
        bad(OpenAiConfig {
            model: " ".into(),
            ..base.clone()
        }),
        OpenAiSetupError::Empty { key: "model" }
    );
    let err = OpenAiProvider::new(base.clone(), Some("sk-a\nb".into())).unwrap_err();
    assert_eq!(
        err,
        OpenAiSetupError::InvalidKey {
            variable: "DEEPSEEK_API_KEY".into()
        }
    );
    assert!(!err.to_string().contains("sk-a"));

    let provider = OpenAiProvider::new(base, Some("sk-very-secret".into())).unwrap();
    assert_eq!(
        provider.endpoint(),
        "https://api.deepseek.com/chat/completions"
    );
    let debug = format!("{provider:?}");
    assert!(!debug.contains("sk-very-secret"), "{debug}");
    assert!(debug.contains("has_key: true"), "{debug}");
    let v1 = OpenAiProvider::new(
        OpenAiConfig {
            base_url: "https://api.openai.com/v1/".into(),
            ..OpenAiConfig::default()
        },
        None,
    )
    .unwrap();
    assert_eq!(v1.endpoint(), "https://api.openai.com/v1/chat/completions");
}
