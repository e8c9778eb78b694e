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
    updates(&before)
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
