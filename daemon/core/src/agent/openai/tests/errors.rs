//! Failures the provider turns into actionable turn-end reasons: retries, refusals, cut and stalled streams, cancellation.

use super::*;

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
        let (reply, _) = complete_once(&mock).await;
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
        let (reply, fragments) = complete_once(&mock).await;
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
    let (reply, _) = complete_once(&mock).await;
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
        r#"{"error":{"message":"Invalid value for 'temperature'","type":"invalid_request_error"}}"#,
    )])
    .await;
    let (reply, _) = complete_once(&mock).await;
    assert_eq!(
        reply.unwrap_err(),
        ModelError::Http {
            status: 400,
            message: "Invalid value for 'temperature'".into()
        }
    );
    assert_eq!(mock.requests().len(), 1);
}

#[tokio::test]
async fn a_request_longer_than_the_context_is_an_overflow_by_code_or_by_message() {
    // OpenAI's code, and the message DeepSeek and other compatible servers send without one.
    for body in [
        r#"{"error":{"message":"Your input is too long.","type":"invalid_request_error","code":"context_length_exceeded"}}"#,
        r#"{"error":{"message":"This model's maximum context length is 65536 tokens. However, you requested 70000 tokens.","type":"invalid_request_error","param":null,"code":"invalid_request_error"}}"#,
    ] {
        let mock = Mock::start(vec![status(400, vec![], body)]).await;
        let (reply, _) = complete_once(&mock).await;
        let err = reply.unwrap_err();
        assert!(
            matches!(&err, ModelError::ContextOverflow { .. }),
            "{err:?} for {body}"
        );
        assert_eq!(mock.requests().len(), 1, "not retried");
    }
}

#[tokio::test]
async fn a_redirect_is_reported_not_followed() {
    let mock = Mock::start(vec![status(
        301,
        vec![("location", "https://api.example.invalid/".into())],
        "",
    )])
    .await;
    let (reply, _) = complete_once(&mock).await;
    let err = reply.unwrap_err();
    assert!(
        matches!(&err, ModelError::Http { status: 301, message } if message.contains("https://api.example.invalid/") && message.contains("base_url")),
        "{err:?}"
    );
    assert_eq!(mock.requests().len(), 1);
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
    let (reply, fragments) = complete_once(&mock).await;
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
    let (reply, _) = complete_once(&mock).await;
    let err = reply.unwrap_err();
    assert!(err.to_string().contains("model overloaded"), "{err}");
}
