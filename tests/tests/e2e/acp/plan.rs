//! The model's `update_plan` is the editor's plan view: each accepted plan is one `plan` update
//! with every step (ACP replaces the whole plan each time), no tool call card; a plan the tool
//! refuses is the model's to fix and shows nothing. The same on `session/load` replay. Every
//! message is checked against the published ACP schema.

use super::*;

#[test]
fn an_accepted_plan_is_the_editors_plan_view() {
    let daemon = TestDaemon::start();
    let step = |s: &str, status: &str| json!({"step": s, "status": status});
    let script = json!({"replies": [
        {"tool_calls": [{"id": "p1", "name": "update_plan", "arguments": {"plan": [step("read", "in_progress"), step("fix", "in_progress")]}}]},
        {"tool_calls": [{"id": "p2", "name": "update_plan", "arguments": {"plan": [step("read", "completed"), step("fix", "in_progress"), step("test", "pending")]}}]},
        {"text": "Working on it."},
    ]});
    let mut acp = Acp::scripted(&daemon, &script, &[]);
    acp.initialize();
    let id = acp.new_session(daemon.dir.path())["sessionId"]
        .as_str()
        .unwrap()
        .to_owned();
    let (before, answer) = acp.call("session/prompt", prompt(&id, "fix the bug"));
    assert_eq!(answer["stopReason"], "end_turn", "{answer}");
    let expected = json!([
        {"content": "read", "priority": "medium", "status": "completed"},
        {"content": "fix", "priority": "medium", "status": "in_progress"},
        {"content": "test", "priority": "medium", "status": "pending"},
    ]);
    let plans = |messages: &[Value]| -> Vec<Value> {
        for m in messages {
            super::schema_check::check("SessionNotification", &m["params"]);
        }
        let shown = updates(messages);
        assert!(
            !shown.iter().any(|u| u["sessionUpdate"] == "tool_call"),
            "a plan is not a tool call card: {shown:?}"
        );
        shown
            .into_iter()
            .filter(|u| u["sessionUpdate"] == "plan")
            .map(|u| u["entries"].clone())
            .collect()
    };
    assert_eq!(plans(&before), vec![expected.clone()]);

    acp.call("session/close", json!({"sessionId": id}));
    let (replayed, _) = acp.call(
        "session/load",
        json!({"sessionId": id, "cwd": daemon.dir.path(), "mcpServers": []}),
    );
    assert_eq!(plans(&replayed), vec![expected]);
    assert_eq!(acp.finish().code(), Some(0));
}
