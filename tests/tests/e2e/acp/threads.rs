//! Threads an editor can keep: settings changed on the live agent (before its first prompt, and
//! after a turn, without closing it), and the same thread going on after dshd is killed and
//! restarted, whether or not it had a turn before; a session made by one bridge process prompted
//! from the next.

use dsh_tests::DaemonSpec;

use super::*;

/// What Zed advertises when it starts an agent server.
fn initialize_like_zed(acp: &mut Acp) {
    acp.call(
        "initialize",
        json!({
            "protocolVersion": 1,
            "clientCapabilities": {"fs": {"readTextFile": true, "writeTextFile": true}, "terminal": true},
            "clientInfo": {"name": "zed", "version": "0.200.0"}
        }),
    );
}

/// `dshctl agent show ID --json`.
fn agent_show(daemon: &TestDaemon, id: &str) -> Value {
    daemon.dshctl_json(&["agent", "show", id])
}

/// The types of the session's stored events, in order.
fn stored_types(daemon: &TestDaemon, id: &str) -> Vec<String> {
    daemon
        .dshctl_json_lines(&["session", "events", id])
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_owned())
        .collect()
}

/// Sets the mode; returns the `current_mode_update` it sent.
fn set_mode(acp: &mut Acp, id: &str, mode: &str) -> Vec<Value> {
    let (before, result) = acp.call("session/set_mode", json!({"sessionId": id, "modeId": mode}));
    assert_eq!(result, json!({}), "{result}");
    // The slash commands sent after the answer that made the session are not the mode's.
    updates(&before)
        .into_iter()
        .filter(|u| u["sessionUpdate"] != "available_commands_update")
        .collect()
}

#[test]
fn set_mode_before_the_first_prompt_and_a_kill_9_keep_the_thread_under_its_id() {
    let mut daemon = TestDaemon::start();
    let script = json!({"replies": [{"text": "hello"}]});
    let mut acp = Acp::scripted(&daemon, &script, &[]);
    initialize_like_zed(&mut acp);
    let id = acp.new_session(daemon.dir.path())["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    // Zed sends this right after session/new when a default mode is configured.
    let sent = set_mode(&mut acp, &id, "never");
    assert_eq!(
        sent,
        vec![json!({"sessionUpdate": "current_mode_update", "currentModeId": "never"})]
    );
    let shown = agent_show(&daemon, &id);
    assert_eq!(shown["approval"], "never", "{shown}");
    assert_eq!(shown["turns"], 0, "{shown}");

    // dshd dies before the first prompt: nothing of the session was ever stored.
    daemon.kill9();
    daemon.restart_with(DaemonSpec::default());
    let turn = acp.send("session/prompt", prompt(&id, "hi"));
    let (before, answer) = acp.until_answer(turn);
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let said = text_of(&updates(&before), "agent_message_chunk");
    assert!(
        said.starts_with("[dsh: dshd restarted before this session's first turn")
            && said.ends_with("hello"),
        "{said}"
    );
    // The same id, with the mode it was given, and one log.
    let shown = agent_show(&daemon, &id);
    assert_eq!(shown["approval"], "never", "{shown}");
    assert_eq!(shown["turns"], 1, "{shown}");
    let types = stored_types(&daemon, &id);
    assert_eq!(
        types.iter().filter(|t| *t == "turn/start").count(),
        1,
        "{types:?}"
    );
    assert_eq!(acp.finish().code(), Some(0));
}

#[test]
fn a_mode_change_after_a_turn_keeps_the_jobs_and_a_restart_resumes_the_thread() {
    let mut daemon = TestDaemon::start();
    let job = json!({"tool_calls": [{"name": "bash", "arguments": {"command": "sleep 600", "run_in_background": true}}]});
    let script = json!({"replies": [job, {"text": "started"}, {"text": "again"}]});
    let mut acp = Acp::scripted(&daemon, &script, &[]);
    initialize_like_zed(&mut acp);
    let id = acp.new_session(daemon.dir.path())["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let (_, first) = acp.call("session/prompt", prompt(&id, "start a job"));
    assert_eq!(first["stopReason"], "end_turn", "{first}");
    let running = |daemon: &TestDaemon| {
        let jobs = daemon.dshctl_json(&["job", "list", "--agent", &id]);
        jobs["jobs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|j| j["state"] == "running")
            .count()
    };
    assert_eq!(running(&daemon), 1);

    // Changed in place: the agent is not closed, its job still runs, and the change is logged
    // (and stored at once: the session has had a turn).
    set_mode(&mut acp, &id, "never");
    assert_eq!(running(&daemon), 1);
    let shown = agent_show(&daemon, &id);
    assert_eq!(shown["approval"], "never", "{shown}");
    let types = stored_types(&daemon, &id);
    assert_eq!(
        types.last().map(String::as_str),
        Some("session/settings"),
        "{types:?}"
    );
    assert!(!types.contains(&"session/end-seed".to_owned()), "{types:?}");

    // dshd is killed: the thread goes on when the editor prompts, resumed, with a notice.
    daemon.kill9();
    daemon.restart_with(DaemonSpec::default());
    let turn = acp.send("session/prompt", prompt(&id, "and now?"));
    let (before, answer) = acp.until_answer(turn);
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let said = text_of(&updates(&before), "agent_message_chunk");
    assert!(
        said.starts_with("[dsh: this session was no longer live"),
        "{said}"
    );
    let shown = agent_show(&daemon, &id);
    assert_eq!(shown["approval"], "never", "{shown}");
    assert_eq!(shown["turns"], 2, "{shown}");
    let types = stored_types(&daemon, &id);
    assert_eq!(
        types.iter().filter(|t| *t == "turn/start").count(),
        2,
        "{types:?}"
    );
    assert_eq!(acp.finish().code(), Some(0));
}

#[test]
fn a_session_made_by_one_bridge_process_is_prompted_from_the_next() {
    let daemon = TestDaemon::start();
    let script = json!({"replies": [{"text": "from the second bridge"}]});
    // As acpx's `sessions new`: initialize, session/new, set a mode, and exit.
    let mut first = Acp::scripted(&daemon, &script, &[]);
    let id = first.ready_session(daemon.dir.path());
    set_mode(&mut first, &id, "always");
    assert_eq!(first.finish().code(), Some(0));
    // Closed before any turn, it is stored with its settings.
    let types = stored_types(&daemon, &id);
    assert_eq!(types, vec!["session/settings"], "{types:?}");

    // As `acpx prompt`: another process, the session loaded, then prompted.
    let mut second = Acp::scripted(&daemon, &script, &[]);
    second.initialize();
    second.call(
        "session/load",
        json!({"sessionId": id, "cwd": daemon.dir.path().to_str().unwrap(), "mcpServers": []}),
    );
    let shown = agent_show(&daemon, &id);
    assert_eq!(shown["approval"], "always", "{shown}");
    let (before, answer) = second.call("session/prompt", prompt(&id, "hi"));
    assert_eq!(answer["stopReason"], "end_turn", "{answer}");
    assert_eq!(
        text_of(&updates(&before), "agent_message_chunk"),
        "from the second bridge"
    );
    assert_eq!(second.finish().code(), Some(0));

    // And a third, that prompts without loading first: resumed, with a notice.
    let mut third = Acp::scripted(&daemon, &script, &[]);
    third.initialize();
    let (before, answer) = third.call("session/prompt", prompt(&id, "hi"));
    assert_eq!(answer["stopReason"], "end_turn", "{answer}");
    let said = text_of(&updates(&before), "agent_message_chunk");
    assert!(
        said.starts_with("[dsh: this session was no longer live"),
        "{said}"
    );
    assert_eq!(third.finish().code(), Some(0));
}

/// Zed's flow with a model switch: new, set_mode and set_config_option `model` before any
/// prompt, a prompt on the chosen model, dshd killed and restarted, a prompt again: one id, one
/// log, the mode and the model kept; each message as the ACP schema defines it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn zeds_flow_with_a_model_switch_survives_a_kill_9() {
    use dsh_testkit::{DONE, End, Mock, Reply, finish, ok_stream, text_delta, usage_event};
    // The first reply reports its usage: 120 prompt tokens (20 from cache), 30 completion.
    let with_usage = Reply::Stream {
        pieces: vec![
            text_delta("from the model"),
            finish("stop"),
            usage_event(120, 30, 20),
            DONE.into(),
        ],
        end: End::Complete,
    };
    let mock = Mock::start(vec![with_usage, ok_stream("again")]).await;
    let spec = |base_url: &str| DaemonSpec {
        config: Some(format!(
            "[model]\nbase_url = \"{base_url}\"\ncontext_window = 1000\n"
        )),
        env: vec![("DEEPSEEK_API_KEY".into(), "sk-test".into())],
        ..DaemonSpec::default()
    };
    let base_url = mock.base_url.clone();
    tokio::task::spawn_blocking(move || {
        let mut daemon = TestDaemon::start_with(spec(&base_url));
        let mut acp = Acp::start(&daemon.socket, &["--demo"]);
        initialize_like_zed(&mut acp);
        let created = acp.new_session(daemon.dir.path());
        super::schema_check::check("NewSessionResponse", &created);
        let id = created["sessionId"].as_str().unwrap().to_owned();
        let picker = &created["configOptions"][0];
        assert_eq!(picker["currentValue"], "scripted", "{created}");
        let values: Vec<&str> = picker["options"]
            .as_array()
            .unwrap()
            .iter()
            .map(|o| o["value"].as_str().unwrap())
            .collect();
        assert_eq!(
            values,
            [
                "scripted",
                "openai/deepseek-v4-flash",
                "openai/deepseek-v4-pro"
            ],
            "the provider's models are offered: {created}"
        );

        set_mode(&mut acp, &id, "never");
        let (_, chosen) = acp.call(
            "session/set_config_option",
            json!({"sessionId": id, "configId": "model", "value": "openai/deepseek-v4-flash"}),
        );
        super::schema_check::check("SetSessionConfigOptionResponse", &chosen);
        assert_eq!(
            chosen["configOptions"][0]["currentValue"],
            "openai/deepseek-v4-flash"
        );
        // An openai session has a reasoning effort too (a scripted one has none).
        assert_eq!(created["configOptions"].as_array().unwrap().len(), 1);
        let effort = &chosen["configOptions"][1];
        assert_eq!(
            (&effort["id"], &effort["category"], &effort["currentValue"]),
            (
                &json!("reasoning_effort"),
                &json!("thought_level"),
                &json!("default")
            ),
            "{chosen}"
        );
        let (_, thinking) = acp.call(
            "session/set_config_option",
            json!({"sessionId": id, "configId": "reasoning_effort", "value": "max"}),
        );
        super::schema_check::check("SetSessionConfigOptionResponse", &thinking);
        assert_eq!(
            (
                &thinking["configOptions"][0]["currentValue"],
                &thinking["configOptions"][1]["currentValue"]
            ),
            (&json!("openai/deepseek-v4-flash"), &json!("max")),
            "{thinking}"
        );
        let (before, answer) = acp.call("session/prompt", prompt(&id, "hi"));
        assert_eq!(answer["stopReason"], "end_turn", "{answer}");
        assert_eq!(
            text_of(&updates(&before), "agent_message_chunk"),
            "from the model"
        );
        // How full the context is, against the configured window.
        let usage: Vec<Value> = updates(&before)
            .into_iter()
            .filter(|u| u["sessionUpdate"] == "usage_update")
            .collect();
        assert_eq!(
            usage,
            [json!({"sessionUpdate": "usage_update", "used": 150, "size": 1000})]
        );
        for m in &before {
            super::schema_check::check("SessionNotification", &m["params"]);
        }

        daemon.kill9();
        daemon.restart_with(spec(&base_url));
        let (before, answer) = acp.call("session/prompt", prompt(&id, "and now?"));
        assert_eq!(answer["stopReason"], "end_turn", "{answer}");
        for m in &before {
            super::schema_check::check("SessionNotification", &m["params"]);
        }
        let said = text_of(&updates(&before), "agent_message_chunk");
        assert!(
            said.starts_with("[dsh: this session was no longer live") && said.ends_with("again"),
            "{said}"
        );
        let option_updates: Vec<&Value> = before
            .iter()
            .filter(|m| m["params"]["update"]["sessionUpdate"] == "config_option_update")
            .collect();
        assert_eq!(
            option_updates[0]["params"]["update"]["configOptions"][0]["currentValue"],
            "openai/deepseek-v4-flash"
        );
        let shown = agent_show(&daemon, &id);
        assert_eq!(
            (
                &shown["approval"],
                &shown["provider"],
                &shown["reasoning_effort"],
                &shown["turns"]
            ),
            (&json!("never"), &json!("openai"), &json!("max"), &json!(2)),
            "{shown}"
        );
        let types = stored_types(&daemon, &id);
        assert_eq!(
            types.iter().filter(|t| *t == "turn/start").count(),
            2,
            "{types:?}"
        );
        assert_eq!(acp.finish().code(), Some(0));
    })
    .await
    .unwrap();
    // Both model requests, before and after the restart, asked for the chosen effort.
    let asked: Vec<Value> = mock
        .requests()
        .into_iter()
        .filter(|r| r.path == "/chat/completions")
        .map(|r| r.body["reasoning_effort"].clone())
        .collect();
    assert_eq!(asked, [json!("max"), json!("max")]);
}

/// The model's reasoning streams to the editor as `agent_thought_chunk`s while the model is
/// still answering: here the reply stops after its reasoning and never finishes, so only a
/// streamed thought can reach the editor before the person cancels.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reasoning_streams_as_thought_chunks_before_the_reply_ends() {
    use dsh_testkit::{End, Mock, Reply, reasoning_delta};
    let stalled = Reply::Stream {
        pieces: vec![reasoning_delta("Let me "), reasoning_delta("think.")],
        end: End::Stall,
    };
    let mock = Mock::start(vec![stalled]).await;
    let base_url = mock.base_url.clone();
    tokio::task::spawn_blocking(move || {
        let daemon = TestDaemon::start_with(DaemonSpec {
            config: Some(format!("[model]\nbase_url = \"{base_url}\"\n")),
            env: vec![("DEEPSEEK_API_KEY".into(), "sk-test".into())],
            ..DaemonSpec::default()
        });
        let mut acp = Acp::start(&daemon.socket, &["--demo"]);
        let id = acp.ready_session(daemon.dir.path());
        acp.call(
            "session/set_config_option",
            json!({"sessionId": id, "configId": "model", "value": "openai/deepseek-v4-flash"}),
        );
        let turn = acp.send("session/prompt", prompt(&id, "think"));
        let mut thought = String::new();
        while thought != "Let me think." {
            let message = acp.recv();
            assert_ne!(message["id"], turn, "the turn ended first: {message}");
            let update = &message["params"]["update"];
            if update["sessionUpdate"] == "agent_thought_chunk" {
                super::schema_check::check("SessionNotification", &message["params"]);
                thought.push_str(update["content"]["text"].as_str().unwrap());
            }
        }
        acp.notify("session/cancel", json!({"sessionId": id}));
        let (rest, answer) = acp.until_answer(turn);
        assert_eq!(answer["result"]["stopReason"], "cancelled", "{answer}");
        assert!(
            updates(&rest)
                .iter()
                .all(|u| u["sessionUpdate"] != "agent_thought_chunk"),
            "the reasoning was sent twice: {rest:?}"
        );
        assert_eq!(acp.finish().code(), Some(0));
    })
    .await
    .unwrap();
}
