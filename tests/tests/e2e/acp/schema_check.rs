//! Every message `dshctl acp` sends while an editor drives the surface dsh shows (the slash
//! commands, a turn with a described command, its `session_info_update`, a permission request
//! withdrawn by `$/cancel_request`, a load replaying a title, a delete) is checked against the
//! published ACP JSON schema, version 1 as of schema 1.20 (`tests/fixtures/acp/`, sources there).

use std::sync::OnceLock;

use dsh_tests::{DaemonSpec, private_dir};

use super::*;

/// The published schema (`$defs` by name).
fn published() -> &'static Value {
    static SCHEMA: OnceLock<Value> = OnceLock::new();
    SCHEMA.get_or_init(|| {
        serde_json::from_str(include_str!("../../../fixtures/acp/schema-1.20.json")).unwrap()
    })
}

/// Fails the test unless `value` is a valid `definition` of the published schema.
pub(super) fn check(definition: &str, value: &Value) {
    let root = published();
    assert!(
        root["$defs"].get(definition).is_some(),
        "the schema has no {definition}"
    );
    let schema = json!({"$ref": format!("#/$defs/{definition}"), "$defs": root["$defs"]});
    let validator = jsonschema::validator_for(&schema).unwrap();
    let errors: Vec<String> = validator
        .iter_errors(value)
        .map(|e| e.to_string())
        .collect();
    assert!(errors.is_empty(), "{definition}: {errors:?}\n{value}");
}

/// Checks every message the bridge sent unasked or asked (notifications and requests).
fn check_sent(messages: &[Value]) {
    for m in messages {
        let definition = match m["method"].as_str() {
            Some("session/update") => "SessionNotification",
            Some("session/request_permission") => "RequestPermissionRequest",
            Some("$/cancel_request") => "CancelRequestNotification",
            Some(other) => panic!("a message the check does not know: {other}"),
            None => panic!("an answer where none was expected: {m}"),
        };
        check(definition, &m["params"]);
    }
}

/// The updates of `kind` among `messages`.
fn of_kind<'a>(messages: &'a [Value], kind: &str) -> Vec<&'a Value> {
    messages
        .iter()
        .filter(|m| m["params"]["update"]["sessionUpdate"] == kind)
        .map(|m| &m["params"]["update"])
        .collect()
}

#[test]
fn what_the_bridge_sends_follows_the_published_schema() {
    let dir = private_dir();
    let skill = dir.path().join("home/skills/release-notes");
    std::fs::create_dir_all(&skill).unwrap();
    std::fs::write(
        skill.join("SKILL.md"),
        "---\nname: release-notes\ndescription: Draft release notes from the git log\n---\n",
    )
    .unwrap();
    let daemon = TestDaemon::spawn(DaemonSpec::default(), dir);
    daemon.wait_ready();
    let project = daemon.dir.path().join("project");
    std::fs::create_dir_all(&project).unwrap();
    let mut acp = Acp::start(&daemon.socket, &["--demo", "--approval", "always"]);

    let (sent, initialized) = acp.call(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {"fs": {"readTextFile": true}, "terminal": true}}),
    );
    check_sent(&sent);
    check("InitializeResponse", &initialized);
    assert_eq!(
        initialized["agentCapabilities"]["sessionCapabilities"]["delete"],
        json!({})
    );
    let (_, created) = acp.call("session/new", json!({"cwd": project, "mcpServers": []}));
    check("NewSessionResponse", &created);
    let id = created["sessionId"].as_str().unwrap().to_owned();

    // The turn: its command asks, the person answers at a terminal, the editor's question is
    // withdrawn; the commands came right after session/new.
    let turn = acp.send("session/prompt", prompt(&id, "hello"));
    let mut sent = Vec::new();
    let answer = loop {
        let message = acp.recv();
        if message["id"] == turn && message.get("method").is_none() {
            break message;
        }
        if message["method"] == "session/request_permission" {
            let call = message["params"]["toolCall"]["toolCallId"]
                .as_str()
                .unwrap();
            let approved = daemon.dshctl(&["approve", &id, call, "--allow"]);
            assert!(approved.status.success(), "{approved:?}");
        }
        if message["method"] == "$/cancel_request" {
            let cancelled = json!({"jsonrpc": "2.0", "id": message["params"]["requestId"],
                "error": {"code": -32800, "message": "cancelled"}});
            acp.line(&cancelled.to_string());
        }
        sent.push(message);
    };
    check("PromptResponse", &answer["result"]);
    check_sent(&sent);
    let commands = of_kind(&sent, "available_commands_update");
    assert_eq!(
        commands[0]["availableCommands"][0]["name"], "release-notes",
        "{commands:?}"
    );
    // The demo model's reasoning, shown as thinking.
    let thoughts = of_kind(&sent, "agent_thought_chunk");
    assert!(
        thoughts[0]["content"]["text"]
            .as_str()
            .is_some_and(|t| t.contains("one command")),
        "{thoughts:?}"
    );
    let calls = of_kind(&sent, "tool_call");
    assert_eq!(
        calls[0]["title"], "Say hello",
        "the command's description: {calls:?}"
    );
    assert!(
        sent.iter().any(|m| m["method"] == "$/cancel_request"),
        "no withdrawal: {sent:?}"
    );
    let info = of_kind(&sent, "session_info_update");
    assert!(
        info.iter()
            .any(|u| u["updatedAt"].as_str().is_some_and(|t| t.ends_with('Z'))),
        "{info:?}"
    );

    // Named at a terminal, then loaded: the replay carries the title.
    let renamed = daemon.dshctl(&["session", "rename", &id, "Release work"]);
    assert!(renamed.status.success(), "{renamed:?}");
    acp.call("session/close", json!({"sessionId": id}));
    let (sent, loaded) = acp.call(
        "session/load",
        json!({"sessionId": id, "cwd": project, "mcpServers": []}),
    );
    check("LoadSessionResponse", &loaded);
    check_sent(&sent);
    let info = of_kind(&sent, "session_info_update");
    assert!(
        info.iter().any(|u| u["title"] == "Release work"),
        "{info:?}"
    );

    // Deleted: gone from the list.
    let (sent, deleted) = acp.call("session/delete", json!({"sessionId": id}));
    check_sent(&sent);
    check("DeleteSessionResponse", &deleted);
    let (_, listed) = acp.call("session/list", json!({}));
    assert!(!listed.to_string().contains(&id), "{listed}");
    let error = acp.call_err("session/delete", json!({"sessionId": id}));
    assert_eq!(error["code"], -32002, "{error}");
    assert_eq!(acp.finish().code(), Some(0));
}
