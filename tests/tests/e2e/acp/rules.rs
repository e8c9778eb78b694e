//! "Allow always" rules are facts of the session: made in the editor, listed by `dshctl agent
//! show` and `dshctl agent rules`, kept across a kill -9 and restart of dshd and by a fork,
//! removed with `dshctl agent rules --remove` (logged), after which the same command asks again.
//! A question answered elsewhere (`dshctl approve`) is withdrawn from the editor.

use dsh_tests::DaemonSpec;

use super::*;

/// Runs a prompt, answering every permission request with `option`; the stop reason and the
/// number of requests.
fn prompt_answering(acp: &mut Acp, id: &str, option: &str) -> (Value, usize) {
    let turn = acp.send("session/prompt", prompt(id, "go"));
    let mut asked = 0;
    loop {
        let message = acp.recv();
        if message["id"] == turn && message.get("method").is_none() {
            return (message["result"]["stopReason"].clone(), asked);
        }
        if message["method"] == "session/request_permission" {
            asked += 1;
            let reply = json!({"jsonrpc": "2.0", "id": message["id"], "result": {"outcome": {"outcome": "selected", "optionId": option}}});
            acp.line(&reply.to_string());
        }
    }
}

fn rules_of(daemon: &TestDaemon, id: &str) -> Vec<Value> {
    daemon.dshctl_json(&["agent", "rules", id])["rules"]
        .as_array()
        .unwrap()
        .clone()
}

#[test]
fn allow_always_survives_a_restart_and_a_fork_and_a_removed_rule_asks_again() {
    let mut daemon = TestDaemon::start();
    let command = format!("touch {}", daemon.dir.path().join("made").display());
    // Each live agent replays the script from its start: two turns' worth.
    let call = json!({"tool_calls": [{"name": "bash", "arguments": {"command": command}}]});
    let script = json!({"replies": [call, {"text": "done"}, call, {"text": "done"}]});
    let mut acp = Acp::scripted(&daemon, &script, &["--approval", "always"]);
    let id = acp.ready_session(daemon.dir.path());
    assert_eq!(
        prompt_answering(&mut acp, &id, "allow-always"),
        (json!("end_turn"), 1)
    );
    let rule =
        json!({"tool": "bash", "command": command, "cwd": daemon.dir.path().to_str().unwrap()});
    assert_eq!(rules_of(&daemon, &id), vec![rule.clone()]);

    // dshd is killed; the thread goes on, and the rule still holds: nobody is asked.
    daemon.kill9();
    daemon.restart_with(DaemonSpec::default());
    assert_eq!(
        prompt_answering(&mut acp, &id, "reject-once"),
        (json!("end_turn"), 0)
    );
    let shown = daemon.dshctl_json(&["agent", "show", &id]);
    assert_eq!(shown["approval_rules"], json!([rule.clone()]), "{shown}");

    // A fork keeps the rules of the turns it copies.
    let script_path = daemon.dir.path().join("fork-script.json");
    std::fs::write(&script_path, script.to_string()).unwrap();
    let fork = daemon.dshctl_json(&[
        "agent",
        "fork",
        &id,
        "--script",
        script_path.to_str().unwrap(),
    ]);
    let fork_id = fork["agent_id"].as_str().unwrap();
    assert_eq!(rules_of(&daemon, fork_id), vec![rule.clone()]);

    // Removed (and logged): the same command asks again.
    let removed = daemon.dshctl_json(&["agent", "rules", &id, "--remove", "1"]);
    assert_eq!(removed["removed"], json!([rule]), "{removed}");
    assert_eq!(removed["rules"], json!([]), "{removed}");
    let types: Vec<String> = daemon
        .dshctl_json_lines(&["session", "events", &id])
        .iter()
        .map(|e| e["type"].as_str().unwrap().to_owned())
        .collect();
    assert_eq!(
        types.last().map(String::as_str),
        Some("approval/rule-removed"),
        "{types:?}"
    );
    assert_eq!(
        prompt_answering(&mut acp, &id, "reject-once"),
        (json!("end_turn"), 1)
    );
    // The fork's own rule is untouched.
    assert_eq!(rules_of(&daemon, fork_id).len(), 1);
    assert_eq!(acp.finish().code(), Some(0));
}

#[test]
fn a_permission_answered_with_dshctl_approve_is_withdrawn_from_the_editor() {
    let daemon = TestDaemon::start();
    let made = daemon.dir.path().join("made");
    let command = format!("touch {}", made.display());
    let script = json!({"replies": [
        {"tool_calls": [{"id": "c1", "name": "bash", "arguments": {"command": command}}]},
        {"text": "done"},
    ]});
    let mut acp = Acp::scripted(&daemon, &script, &["--approval", "always"]);
    let id = acp.ready_session(daemon.dir.path());
    let turn = acp.send("session/prompt", prompt(&id, "go"));
    // The editor shows the question and leaves it open; the person answers at a terminal.
    let asked = loop {
        let message = acp.recv();
        assert!(message["id"] != turn, "the turn ended unasked: {message}");
        if message["method"] == "session/request_permission" {
            break message;
        }
    };
    let approved = daemon.dshctl(&["approve", &id, "c1", "--allow"]);
    assert!(approved.status.success(), "{approved:?}");
    let withdrawn = loop {
        let message = acp.recv();
        assert!(
            message["id"] != turn,
            "the turn ended before the withdrawal: {message}"
        );
        if message["method"] == "$/cancel_request" {
            break message;
        }
    };
    assert_eq!(
        withdrawn["params"],
        json!({"requestId": asked["id"]}),
        "{withdrawn}"
    );
    assert!(withdrawn.get("id").is_none(), "a notification: {withdrawn}");
    // As ACP asks, the client still answers the withdrawn request; the bridge takes it quietly.
    let cancelled = json!({"jsonrpc": "2.0", "id": asked["id"], "error": {"code": -32800, "message": "cancelled"}});
    acp.line(&cancelled.to_string());
    let (_, answer) = acp.until_answer(turn);
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert!(
        made.exists(),
        "the command allowed at the terminal did not run"
    );
    assert_eq!(acp.finish().code(), Some(0));
}
