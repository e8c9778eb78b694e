//! A client that shows commands in display-only terminals (Zed: `clientCapabilities._meta.
//! terminal_output`, the convention of Zed's own Codex adapter) gets each bash call as a terminal:
//! its id with the call, the command's output as it comes, and the exit code at the end; live and
//! on `session/load` replay. Every message is checked against the published ACP schema.

use super::*;

#[test]
fn bash_output_goes_to_a_display_only_terminal_with_its_exit_code() {
    let daemon = TestDaemon::start();
    let script = json!({"replies": [
        {"tool_calls": [{"id": "c1", "name": "bash", "arguments": {"command": "echo building; echo broken >&2; exit 3"}}]},
        {"text": "It failed."},
    ]});
    let mut acp = Acp::scripted(&daemon, &script, &[]);
    acp.call(
        "initialize",
        json!({
            "protocolVersion": 1,
            "clientCapabilities": {"terminal": true, "_meta": {"terminal_output": true}},
            "clientInfo": {"name": "zed", "version": "0.200.0"}
        }),
    );
    let id = acp.new_session(daemon.dir.path())["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let (before, answer) = acp.call("session/prompt", prompt(&id, "build it"));
    assert_eq!(answer["stopReason"], "end_turn", "{answer}");
    for m in &before {
        super::schema_check::check("SessionNotification", &m["params"]);
    }
    let shown = |updates: &[Value]| -> (Value, String, Value) {
        let call = updates
            .iter()
            .find(|u| u["sessionUpdate"] == "tool_call")
            .unwrap()
            .clone();
        let output: String = updates
            .iter()
            .filter_map(|u| u["_meta"]["terminal_output"]["data"].as_str())
            .collect();
        let exit = updates
            .iter()
            .find_map(|u| u["_meta"].get("terminal_exit"))
            .cloned()
            .unwrap_or(Value::Null);
        (call, output, exit)
    };
    let (call, output, exit) = shown(&updates(&before));
    assert_eq!(
        call["content"],
        json!([{"type": "terminal", "terminalId": "c1"}])
    );
    assert_eq!(
        call["_meta"],
        json!({"terminal_info": {"terminal_id": "c1"}})
    );
    assert!(
        output.contains("building") && output.contains("broken"),
        "{output:?}"
    );
    assert_eq!(
        exit,
        json!({"terminal_id": "c1", "exit_code": 3, "signal": null})
    );

    acp.call("session/close", json!({"sessionId": id}));
    let (replayed, _) = acp.call(
        "session/load",
        json!({"sessionId": id, "cwd": daemon.dir.path(), "mcpServers": []}),
    );
    for m in &replayed {
        super::schema_check::check("SessionNotification", &m["params"]);
    }
    let (call, output, exit) = shown(&updates(&replayed));
    assert_eq!(
        call["_meta"],
        json!({"terminal_info": {"terminal_id": "c1"}})
    );
    assert!(
        output.contains("building") && output.contains("broken"),
        "{output:?}"
    );
    assert_eq!(exit["exit_code"], 3);
    assert_eq!(acp.finish().code(), Some(0));
}
