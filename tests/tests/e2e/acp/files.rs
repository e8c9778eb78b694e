//! File tools through `dshctl acp` (issue 42): an edit arrives as a `kind: edit` call whose
//! change is `diff` content with `locations`, live and again on `session/load`.

use super::*;

#[test]
fn an_edit_arrives_as_a_diff_with_its_location_live_and_on_replay() {
    let daemon = TestDaemon::start();
    let work = daemon.workdir("acp-files");
    let file = work.join("notes.txt");
    std::fs::write(&file, "one\ntwo\nthree\n").unwrap();
    let path = file.to_str().unwrap();
    let script = json!({"replies": [
        {"tool_calls": [{"id": "r1", "name": "read", "arguments": {"file_path": path}}]},
        {"tool_calls": [{"id": "e1", "name": "edit", "arguments":
            {"file_path": path, "old_string": "two", "new_string": "TWO"}}]},
        {"text": "Done."},
    ]});
    let mut acp = Acp::scripted(&daemon, &script, &[]);
    let id = acp.ready_session(&work);
    let (before, answer) = acp.call("session/prompt", prompt(&id, "edit it"));
    assert_eq!(answer["stopReason"], "end_turn");
    assert_eq!(std::fs::read_to_string(&file).unwrap(), "one\nTWO\nthree\n");
    let live = updates(&before);
    let kinds: Vec<(Value, Value)> = live
        .iter()
        .filter(|u| u["sessionUpdate"] == "tool_call")
        .map(|u| (u["toolCallId"].clone(), u["kind"].clone()))
        .collect();
    assert_eq!(
        kinds,
        [(json!("r1"), json!("read")), (json!("e1"), json!("edit"))]
    );
    let changes = |u: &[Value]| -> Vec<Value> {
        u.iter()
            .filter(|u| u.get("locations").is_some())
            .cloned()
            .collect()
    };
    let change = changes(&live);
    assert_eq!(change.len(), 1, "{live:?}");
    assert_eq!(change[0]["toolCallId"], "e1");
    assert_eq!(
        change[0]["content"],
        json!([{"type": "diff", "path": path, "oldText": "one\ntwo\nthree\n", "newText": "one\nTWO\nthree\n"}])
    );
    assert_eq!(change[0]["locations"], json!([{"path": path, "line": 2}]));

    acp.call("session/close", json!({"sessionId": id}));
    let (before, _) = acp.call(
        "session/load",
        json!({"sessionId": id, "cwd": work, "mcpServers": []}),
    );
    assert_eq!(
        changes(&updates(&before)),
        change,
        "the replay shows the same diff"
    );
    assert!(acp.finish().success());
}
