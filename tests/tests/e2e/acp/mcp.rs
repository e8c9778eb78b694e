//! An editor's MCP servers (`session/new` `mcpServers`, as Zed and JetBrains pass theirs) are the
//! agent's: a stdio server is started for the session, with the session's identity, a streamable
//! HTTP one is connected, and their tools are used in a prompt; an SSE one, which dsh does not
//! connect, is named in `_meta.dsh.mcpServersNotConnected`, and only it.

use super::*;

#[test]
fn an_editors_stdio_and_http_servers_are_the_sessions_and_an_sse_one_is_named_not_connected() {
    let daemon = TestDaemon::start();
    let web = dsh_tests::mcp::HttpEverything::start();
    let script = json!({"replies": [
        {"tool_calls": [
            {"id": "m1", "name": "mcp__probe__env", "arguments": {"prefix": "DSH_SESSION_ID"}},
            {"id": "m2", "name": "mcp__probe__env", "arguments": {"prefix": "PROBE_"}},
            {"id": "m3", "name": "mcp__web__echo", "arguments": {"message": "over HTTP"}},
        ]},
        {"text": "done"},
    ]});
    let mut acp = Acp::scripted(&daemon, &script, &[]);
    acp.initialize();
    let (_, answer) = acp.call(
        "session/new",
        json!({
            "cwd": daemon.dir.path(),
            "mcpServers": [
                {
                    "name": "probe",
                    "command": dsh_tests::mcp::python(),
                    "args": [dsh_tests::mcp::probe_server()],
                    "env": [{"name": "PROBE_FLAVOR", "value": "from-the-editor"}],
                },
                {"type": "http", "name": "web", "url": web.url, "headers": [{"name": "X-Team", "value": "dsh"}]},
                {"type": "sse", "name": "legacy", "url": "http://127.0.0.1:9/sse", "headers": []},
            ],
        }),
    );
    let id = answer["sessionId"].as_str().unwrap().to_owned();
    assert_eq!(
        answer["_meta"]["dsh"]["mcpServersNotConnected"],
        json!(["legacy"]),
        "{answer}"
    );
    let (before, answer) = acp.call("session/prompt", prompt(&id, "ask the probe"));
    assert_eq!(answer["stopReason"], "end_turn", "{answer}");
    for m in &before {
        super::schema_check::check("SessionNotification", &m["params"]);
    }
    let results: Vec<(String, bool)> = daemon
        .events(&id)
        .iter()
        .filter(|e| e["type"] == "tool/result")
        .map(|e| {
            (
                e["data"]["content"].as_str().unwrap().to_owned(),
                e["data"]["isError"].as_bool().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        results,
        [
            (format!("DSH_SESSION_ID={id}"), false),
            ("PROBE_FLAVOR=from-the-editor".to_owned(), false),
            ("Echo: over HTTP".to_owned(), false),
        ]
    );
    assert_eq!(acp.finish().code(), Some(0));
}
