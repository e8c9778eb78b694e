//! What the bridge makes of the ends and refusals dsh gives in a form programs read: the step
//! limit's own turn end is the stop reason `max_turn_requests`, and refusals keep dshd's reason
//! in the error's `data`, choosing the error code by it (a missing key is `-32000`).

use dsh_tests::DaemonSpec;

use super::*;

#[test]
fn a_turn_at_the_step_limit_stops_with_max_turn_requests() {
    let daemon = TestDaemon::start_with(DaemonSpec {
        config: Some("[agent]\nmax_steps_per_turn = 2\n".to_owned()),
        ..DaemonSpec::default()
    });
    let call = json!({"tool_calls": [{"name": "bash", "arguments": {"command": "true"}}]});
    let script = json!({"replies": [call, call, call, {"text": "never"}]});
    let mut acp = Acp::scripted(&daemon, &script, &[]);
    let id = acp.ready_session(daemon.dir.path());
    let turn = acp.send("session/prompt", prompt(&id, "loop"));
    let (_, answer) = acp.until_answer(turn);
    assert_eq!(
        answer["result"]["stopReason"], "max_turn_requests",
        "{answer}"
    );

    // Once closed, the session is stored, not live: closing it again is said by dshd's
    // AGENT_NOT_LIVE.
    acp.call("session/close", json!({"sessionId": id}));
    let error = acp.call_err("session/close", json!({"sessionId": id}));
    assert_eq!(error["code"], -32002, "{error}");
    assert_eq!(error["data"]["reason"], "AGENT_NOT_LIVE", "{error}");
}

#[test]
fn a_missing_model_key_is_auth_required_with_dshds_reason() {
    let daemon = TestDaemon::start();
    let mut acp = Acp::start(&daemon.socket, &["--model", "openai"]);
    acp.initialize();
    let error = acp.call_err(
        "session/new",
        json!({"cwd": daemon.dir.path().to_str().unwrap(), "mcpServers": []}),
    );
    assert_eq!(error["code"], -32000, "{error}");
    assert_eq!(
        error["data"],
        json!({"grpcCode": "FailedPrecondition", "reason": "NO_MODEL_KEY"}),
        "{error}"
    );
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .contains("DEEPSEEK_API_KEY"),
        "{error}"
    );
}

#[test]
fn a_cursor_dsh_did_not_issue_is_invalid_params_naming_the_cursor() {
    let daemon = TestDaemon::start();
    let mut acp = Acp::start(&daemon.socket, &[]);
    acp.initialize();
    let error = acp.call_err("session/list", json!({"cursor": "junk"}));
    assert_eq!(error["code"], -32602, "{error}");
    assert!(
        error["message"]
            .as_str()
            .unwrap()
            .starts_with("cursor: page_token: not a token this daemon issued"),
        "{error}"
    );
}
