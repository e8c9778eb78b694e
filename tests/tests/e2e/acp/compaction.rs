//! `/compact` in an editor: the bridge's own slash command runs `Agents.Compact` with the text
//! after it as the summary's instructions. A client that opted in
//! (`clientCapabilities.session.compaction`) sees `compaction_update` (in progress, then completed
//! with the summary); `session/load` replays it as one update, and the outputs it shortened as
//! they were. A client that did not opt in gets a line of agent text instead.

use super::*;

#[test]
fn compact_is_a_compaction_update_live_and_one_on_replay() {
    let daemon = TestDaemon::start();
    let script = json!({"replies": [
        {"tool_calls": [{"id": "c1", "name": "bash", "arguments": {"command": "head -c 6000 /dev/zero | tr '\\0' x"}}]},
        {"text": "Listed."},
        {"text": "Summary: six thousand x were printed."},
    ]});
    let mut acp = Acp::scripted(&daemon, &script, &[]);
    acp.call(
        "initialize",
        json!({"protocolVersion": 1, "clientCapabilities": {"session": {"compaction": {}}},
            "clientInfo": {"name": "e2e", "version": "0"}}),
    );
    let (_, answer) = acp.call(
        "session/new",
        json!({"cwd": daemon.dir.path(), "mcpServers": []}),
    );
    let id = answer["sessionId"].as_str().unwrap().to_owned();
    // The commands come after the answer that made the session.
    let (made, answer) = acp.call("session/prompt", prompt(&id, "print"));
    assert_eq!(answer["stopReason"], "end_turn");
    let commands: Vec<Value> = updates(&made)
        .into_iter()
        .filter(|u| u["sessionUpdate"] == "available_commands_update")
        .collect();
    let names: Vec<&str> = commands[0]["availableCommands"]
        .as_array()
        .unwrap()
        .iter()
        .map(|c| c["name"].as_str().unwrap())
        .collect();
    assert!(names.contains(&"compact"), "{names:?}");

    let (live, answer) = acp.call("session/prompt", prompt(&id, "/compact keep the count"));
    assert_eq!(answer["stopReason"], "end_turn", "{live:?}");
    let compactions = |messages: &[Value]| -> Vec<Value> {
        updates(messages)
            .into_iter()
            .filter(|u| u["sessionUpdate"] == "compaction_update")
            .collect()
    };
    let shown = compactions(&live);
    assert_eq!(shown.len(), 2, "{shown:?}");
    assert_eq!(shown[0]["status"], "in_progress");
    assert_eq!(shown[1]["status"], "completed");
    assert_eq!(shown[0]["compactionId"], shown[1]["compactionId"]);
    assert_eq!(
        shown[1]["summary"],
        json!([{"type": "text", "text": "Summary: six thousand x were printed."}])
    );
    let events = daemon.events(&id);
    let start = events
        .iter()
        .find(|e| e["type"] == "compaction/start")
        .unwrap();
    assert_eq!(start["data"]["instructions"], "keep the count");

    acp.call("session/close", json!({"sessionId": id}));
    let (replayed, _) = acp.call(
        "session/load",
        json!({"sessionId": id, "cwd": daemon.dir.path(), "mcpServers": []}),
    );
    let again = compactions(&replayed);
    assert_eq!(again.len(), 1, "{again:?}");
    assert_eq!(again[0], shown[1]);
    // The output the compaction shortened is replayed as it was.
    let whole = "x".repeat(6000);
    assert!(
        updates(&replayed)
            .iter()
            .any(|u| u.to_string().contains(&whole)),
        "the call's output is replayed whole"
    );
    assert_eq!(acp.finish().code(), Some(0));

    // A client that did not opt in reads a line of text where the compaction was.
    let mut plain = Acp::scripted(&daemon, &json!({"replies": []}), &[]);
    plain.initialize();
    let (replayed, _) = plain.call(
        "session/load",
        json!({"sessionId": id, "cwd": daemon.dir.path(), "mcpServers": []}),
    );
    assert!(compactions(&replayed).is_empty());
    let texts: String = updates(&replayed)
        .iter()
        .filter(|u| u["sessionUpdate"] == "agent_message_chunk")
        .map(|u| u["content"]["text"].as_str().unwrap().to_owned())
        .collect();
    assert!(
        texts.contains("Context compacted (older messages summarised"),
        "{texts}"
    );
    assert_eq!(plain.finish().code(), Some(0));
}
