//! Inside and around a turn (issue 29): steering a running turn, forking at a step's or a turn's
//! end, and the token usage a turn reports, through the real dshd, dshctl and the local mock of
//! an OpenAI-compatible API.

#![allow(clippy::unwrap_used, clippy::expect_used)] // Test code: a failed step fails the test.

use crate::openai::stream;
use dsh_proto::v1;
use dsh_testkit::{DONE, Mock, finish, ok_stream, text_delta, tool_call_stream, usage_event};
use dsh_tests::agents::parse_json_lines;
use dsh_tests::{DaemonSpec, TestDaemon};
use serde_json::{Value, json};
use tokio_stream::StreamExt;

/// A daemon whose `openai` provider is `mock`.
fn openai_daemon(mock: &Mock) -> TestDaemon {
    TestDaemon::start_with(DaemonSpec {
        config: Some(format!(
            "[model]\nprovider = \"openai\"\nbase_url = \"{}\"\nretries = 0\n",
            mock.base_url
        )),
        env: vec![("DEEPSEEK_API_KEY".into(), "sk-test-turns".into())],
        ..DaemonSpec::default()
    })
}

/// `dshctl --json prompt` off the async runtime (the mock serves on it): its lines.
pub(crate) async fn prompt(daemon: &TestDaemon, agent: &str, text: &str) -> Vec<Value> {
    let socket = daemon.socket.clone();
    let (agent, text) = (agent.to_owned(), text.to_owned());
    let out = tokio::task::spawn_blocking(move || {
        dsh_tests::dshctl_at(&socket, &["--json", "prompt", "--agent", &agent, &text])
    })
    .await
    .unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    parse_json_lines(&out.stdout)
}

fn turn_end(lines: &[Value]) -> &Value {
    let last = lines.last().unwrap();
    assert_eq!(last["type"], "turn/end", "{lines:?}");
    &last["data"]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_turns_usage_is_the_sum_of_its_steps_and_absent_when_none_was_reported() {
    let mut call = tool_call_stream("call_1", "bash", &["{\"command\": \"true\"}"]);
    call.push(usage_event(120, 30, 20));
    call.push(DONE.into());
    let answer = vec![
        text_delta("done"),
        finish("stop"),
        usage_event(200, 5, 100),
        DONE.into(),
    ];
    let human = vec![
        text_delta("hi"),
        finish("stop"),
        usage_event(10, 2, 0),
        DONE.into(),
    ];
    let mock = Mock::start(vec![
        stream(call),
        stream(answer),
        ok_stream("no usage"),
        stream(human),
    ])
    .await;
    let daemon = openai_daemon(&mock);
    let agent = crate::openai::new_agent(&daemon, daemon.dir.path());

    let lines = prompt(&daemon, &agent, "go").await;
    let mut sum = json!({"inputTokens": 0, "outputTokens": 0, "cacheReadTokens": 0});
    for step in lines.iter().filter(|l| l["type"] == "assistant/message") {
        for key in ["inputTokens", "outputTokens", "cacheReadTokens"] {
            sum[key] =
                json!(sum[key].as_u64().unwrap() + step["data"]["usage"][key].as_u64().unwrap());
        }
    }
    assert_eq!(
        sum,
        json!({"inputTokens": 100 + 100, "outputTokens": 35, "cacheReadTokens": 120})
    );
    assert_eq!(turn_end(&lines)["usage"], sum, "turn/end carries the sum");
    // The stored turn/end says the same.
    let stored = daemon.events(&agent);
    let end = stored
        .iter()
        .rev()
        .find(|e| e["type"] == "turn/end")
        .unwrap();
    assert_eq!(end["data"]["usage"], sum);

    // A server that reports nothing: no usage, not a zero.
    let lines = prompt(&daemon, &agent, "again").await;
    let end = turn_end(&lines);
    assert!(end.get("usage").is_none(), "{end}");
    assert!(
        mock.requests()
            .iter()
            .all(|r| r.body["stream_options"]["include_usage"] == true),
        "every request asks for usage"
    );

    // The daemon's totals: every turn so far.
    let status = daemon
        .client()
        .await
        .daemon()
        .status(v1::StatusRequest {})
        .await
        .unwrap()
        .into_inner();
    assert_eq!(
        (
            status.usage_input_tokens,
            status.usage_output_tokens,
            status.usage_cache_read_tokens
        ),
        (200, 35, 120)
    );
    // dshctl prompt prints it at the end of the turn.
    let socket = daemon.socket.clone();
    let id = agent.clone();
    let out = tokio::task::spawn_blocking(move || {
        dsh_tests::dshctl_at(&socket, &["prompt", "--agent", &id, "hello"])
    })
    .await
    .unwrap();
    let shown = String::from_utf8_lossy(&out.stdout);
    assert!(out.status.success(), "{shown}");
    let last = shown.lines().rev().find(|l| !l.trim().is_empty()).unwrap();
    assert!(last.contains("tokens: 10 in (0 cached), 2 out"), "{shown}");
}

/// Two steers sent while a `sleep 2` call runs reach the model's next request, in order, are
/// logged as user messages with `source: steer`, and show on a second client's Watch; without a
/// running turn a steer is refused with "use prompt".
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn steers_during_a_tool_call_reach_the_next_request_in_order() {
    let mut call = tool_call_stream("call_1", "bash", &["{\"command\": \"sleep 2\"}"]);
    call.push(DONE.into());
    let mock = Mock::start(vec![stream(call), ok_stream("steered answer")]).await;
    let daemon = openai_daemon(&mock);
    let agent = crate::openai::new_agent(&daemon, daemon.dir.path());
    let client = daemon.client().await;
    let mut watch = client
        .agents()
        .watch(v1::WatchRequest {
            agent_id: agent.clone(),
            descendants: false,
            from_seq: None,
            types: vec![
                "tool/call".to_owned(),
                "user/message".to_owned(),
                "turn/end".to_owned(),
            ],
        })
        .await
        .unwrap()
        .into_inner();
    let (socket, id) = (daemon.socket.clone(), agent.clone());
    let prompted = tokio::task::spawn_blocking(move || {
        dsh_tests::dshctl_at(&socket, &["--json", "prompt", "--agent", &id, "start"])
    });
    // The call is dispatched just after its tool/call is logged; it sleeps 2 s.
    let mut seen = Vec::new();
    loop {
        let event = watch.next().await.unwrap().unwrap();
        let kind = event.r#type.clone();
        seen.push(event);
        if kind == "tool/call" {
            break;
        }
    }
    for text in ["first steer", "second steer"] {
        let socket = daemon.socket.clone();
        let (id, text) = (agent.clone(), text.to_owned());
        let out = tokio::task::spawn_blocking(move || {
            dsh_tests::dshctl_at(&socket, &["--json", "steer", &id, &text])
        })
        .await
        .unwrap();
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
        assert_eq!(doc["turn"], 1);
    }
    loop {
        let event = watch.next().await.unwrap().unwrap();
        let end = event.r#type == "turn/end";
        seen.push(event);
        if end {
            break;
        }
    }
    let out = prompted.await.unwrap();
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );

    // The model's second request ends with the call's result and the two steers, in order.
    let requests = mock.requests();
    assert_eq!(requests.len(), 2);
    let messages = requests[1].body["messages"].as_array().unwrap();
    let tail: Vec<(&str, &str)> = messages[messages.len() - 3..]
        .iter()
        .map(|m| {
            (
                m["role"].as_str().unwrap(),
                m["content"].as_str().unwrap_or_default(),
            )
        })
        .collect();
    assert_eq!(tail[0].0, "tool");
    assert_eq!(
        tail[1..],
        [("user", "first steer"), ("user", "second steer")]
    );
    // Logged, between the step that ran the call and the next one.
    let logged = daemon.events(&agent);
    let steers: Vec<&Value> = logged
        .iter()
        .filter(|e| {
            e["type"] == "user/message" && e["data"]["message"]["source"]["kind"] == "steer"
        })
        .collect();
    assert_eq!(steers.len(), 2);
    assert_eq!(steers[0]["data"]["message"]["text"], "first steer");
    assert_eq!(steers[1]["data"]["message"]["text"], "second steer");
    let first = steers[0]["seq"].as_u64().unwrap() as usize;
    assert_eq!(logged[first - 1]["type"], "step/end");
    assert_eq!(logged[first + 2]["type"], "step/start");
    // The second client saw them too, with nothing but the types it asked for.
    let watched: Vec<String> = seen
        .iter()
        .filter(|e| e.r#type == "user/message")
        .map(|e| {
            serde_json::from_str::<Value>(&e.data_json).unwrap()["message"]["text"]
                .as_str()
                .unwrap()
                .to_owned()
        })
        .collect();
    assert_eq!(watched, ["start", "first steer", "second steer"]);

    // No running turn: refused, pointing at prompt.
    let out = daemon.dshctl(&["--json", "steer", &agent, "too late"]);
    assert_eq!(out.status.code(), Some(1));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["error"]["kind"], "failed_precondition", "{doc}");
    assert!(
        doc["error"]["message"]
            .as_str()
            .unwrap()
            .contains("use prompt"),
        "{doc}"
    );
}

/// A fork at the end of turn 1 of a 3-turn session holds turn 1 only; the original's log is
/// unchanged byte for byte; a seq in the middle of a step is refused naming the valid seqs.
#[test]
fn a_fork_at_the_end_of_turn_one_holds_turn_one_only() {
    let daemon = TestDaemon::start();
    let script = json!({"replies": [{"text": "one"}, {"text": "two"}, {"text": "three"}]});
    let id = daemon.new_agent(&daemon.workdir("fork"), &script);
    for text in ["first", "second", "third"] {
        daemon.prompt(&id, text).assert_completed();
    }
    assert!(daemon.dshctl(&["agent", "close", &id]).status.success());
    let path = daemon.located_path(&id);
    let before = std::fs::read(&path).unwrap();
    let original = daemon.events(&id);
    let ends: Vec<u64> = original
        .iter()
        .filter(|e| e["type"] == "turn/end")
        .map(|e| e["seq"].as_u64().unwrap())
        .collect();
    assert_eq!(ends.len(), 3);

    // `session events` marks where a fork may start.
    let shown = daemon.dshctl(&["session", "events", &id]);
    let shown = String::from_utf8_lossy(&shown.stdout);
    assert!(
        shown.contains("--at SEQ): ") && shown.contains(&format!("{}  turn/end", ends[0])),
        "{shown}"
    );

    let at = ends[0].to_string();
    let fork = daemon.agent_with_script(&["fork", &id, "--at", &at], &script);
    let fork_id = fork["agent_id"].as_str().unwrap().to_owned();
    assert_eq!(fork["header"]["seed_length"], ends[0] + 1, "{fork}");
    let forked = daemon.events(&fork_id);
    let seed = usize::try_from(ends[0] + 1).unwrap();
    assert_eq!(
        forked[..seed],
        original[..seed],
        "the fork starts with turn 1, as logged"
    );
    assert_eq!(forked.len(), seed + 1, "{forked:?}");
    assert_eq!(forked[seed]["type"], "session/end-seed");
    assert!(
        forked
            .iter()
            .all(|e| e["data"]["turn"].as_u64().is_none_or(|t| t == 1))
    );
    // Its next turn follows turn 1.
    let next = daemon.prompt(&fork_id, "again");
    next.assert_completed();
    assert_eq!(next.turn_ended()["data"]["turn"], 2);
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "the original is never rewritten"
    );

    // Turn 2's prompt is inside a step: refused, naming the nearest valid seqs.
    let user2 = original
        .iter()
        .filter(|e| e["type"] == "user/message")
        .nth(1)
        .unwrap()["seq"]
        .as_u64()
        .unwrap();
    let step2_end = original
        .iter()
        .find(|e| e["type"] == "step/end" && e["data"]["turn"] == 2)
        .unwrap()["seq"]
        .as_u64()
        .unwrap();
    let script_path = daemon.write_script(&script);
    let out = daemon.dshctl(&[
        "--json",
        "agent",
        "fork",
        &id,
        "--at",
        &user2.to_string(),
        "--script",
        script_path.to_str().unwrap(),
    ]);
    assert_eq!(out.status.code(), Some(1));
    let doc: Value = serde_json::from_slice(&out.stdout).unwrap();
    assert_eq!(doc["error"]["kind"], "invalid_argument", "{doc}");
    let message = doc["error"]["message"].as_str().unwrap();
    assert!(message.starts_with("at_seq: "), "{message}");
    assert!(
        message.contains(&format!("{} and {step2_end}", ends[0])),
        "{message}"
    );
    assert_eq!(std::fs::read(&path).unwrap(), before);
}
