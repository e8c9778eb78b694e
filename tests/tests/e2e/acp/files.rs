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

/// Under the `always` policy an edit waits for a person, and the permission request carries the
/// change itself: `kind: edit`, the `diff` content and the location. What is approved is what is
/// made: of two edits of one file in one step, both shown against the text the agent read, the
/// one allowed after the other was made writes nothing; an edit allowed after the user changed
/// the file writes nothing either; the model is told to read the file again.
#[test]
fn a_permission_request_for_an_edit_carries_the_diff_and_only_that_change_is_made() {
    let daemon = TestDaemon::start();
    let work = daemon.workdir("acp-approve-edit");
    let (kept, raced) = (work.join("kept.txt"), work.join("raced.txt"));
    std::fs::write(&kept, "alpha\nbeta\n").unwrap();
    std::fs::write(&raced, "one\n").unwrap();
    let (kept_path, raced_path) = (kept.to_str().unwrap(), raced.to_str().unwrap());
    let edit = |id: &str, path: &str, old: &str, new: &str| {
        json!({"id": id, "name": "edit", "arguments":
            {"file_path": path, "old_string": old, "new_string": new}})
    };
    let script = json!({"replies": [
        {"tool_calls": [
            {"id": "r1", "name": "read", "arguments": {"file_path": kept_path}},
            {"id": "r2", "name": "read", "arguments": {"file_path": raced_path}},
        ]},
        {"tool_calls": [edit("e1", kept_path, "beta", "BETA"), edit("e2", kept_path, "alpha", "ALPHA")]},
        {"tool_calls": [edit("e3", raced_path, "one", "ONE")]},
        {"text": "Done."},
    ]});
    let mut acp = Acp::scripted(&daemon, &script, &["--approval", "always"]);
    let id = acp.ready_session(&work);
    let turn = acp.send("session/prompt", prompt(&id, "edit them"));
    let allow = |acp: &mut Acp, request: &Value| {
        let reply = json!({"jsonrpc": "2.0", "id": request["id"],
            "result": {"outcome": {"outcome": "selected", "optionId": "allow-once"}}});
        acp.line(&reply.to_string());
    };
    let mut asked: Vec<Value> = Vec::new();
    let answer = loop {
        let message = acp.recv();
        if message["id"] == turn && message.get("method").is_none() {
            break message;
        }
        let update = &message["params"]["update"];
        if update["toolCallId"] == "e1" && update["status"] == "completed" {
            // e1's change is made: now allow e2, shown against the text before it.
            let e2 = asked
                .iter()
                .find(|m| m["params"]["toolCall"]["toolCallId"] == "e2");
            allow(&mut acp, &e2.unwrap().clone());
        }
        if message["method"] != "session/request_permission" {
            continue;
        }
        super::schema_check::check("RequestPermissionRequest", &message["params"]);
        let call = message["params"]["toolCall"]["toolCallId"].clone();
        if call == "e3" {
            // The user changes the file while the request is on screen.
            std::fs::write(&raced, "one (changed by the user)\n").unwrap();
        }
        if call != "e2" {
            allow(&mut acp, &message);
        }
        asked.push(message);
    };
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    let calls: Vec<&Value> = asked.iter().map(|m| &m["params"]["toolCall"]).collect();
    let ids: Vec<&Value> = calls.iter().map(|c| &c["toolCallId"]).collect();
    assert_eq!(ids.len(), 3, "{calls:?}");
    let e1 = calls.iter().find(|c| c["toolCallId"] == "e1").unwrap();
    assert_eq!(e1["kind"], "edit");
    assert_eq!(
        e1["content"],
        json!([{"type": "diff", "path": kept_path, "oldText": "alpha\nbeta\n", "newText": "alpha\nBETA\n"}])
    );
    assert_eq!(e1["locations"], json!([{"path": kept_path, "line": 2}]));
    let e2 = calls.iter().find(|c| c["toolCallId"] == "e2").unwrap();
    assert_eq!(e2["content"][0]["newText"], "ALPHA\nbeta\n", "{e2}");
    assert_eq!(
        std::fs::read_to_string(&kept).unwrap(),
        "alpha\nBETA\n",
        "e2 was approved against the text before e1, and made on the text after it"
    );
    assert_eq!(
        std::fs::read_to_string(&raced).unwrap(),
        "one (changed by the user)\n",
        "an edit approved against the old text was made on the new one"
    );
    let events = daemon.dshctl_json_lines(&["session", "events", &id]);
    let result = |call: &str| {
        let e = events
            .iter()
            .find(|e| e["type"] == "tool/result" && e["data"]["callId"] == call)
            .unwrap();
        assert_eq!(e["data"]["isError"], true, "{e}");
        e["data"]["content"].as_str().unwrap().to_owned()
    };
    let e2 = result("e2");
    assert!(
        e2.contains("changed while the call waited for approval"),
        "{e2}"
    );
    let e3 = result("e3");
    assert!(e3.contains("has changed since you last read it"), "{e3}");
    let request = events
        .iter()
        .find(|e| e["type"] == "approval/request" && e["data"]["callId"] == "e1")
        .unwrap();
    assert!(
        request["data"]["change"]["diff"]
            .as_str()
            .unwrap()
            .contains("-beta\n+BETA\n"),
        "{request}"
    );
    assert!(acp.finish().success());
}

/// A parent directory swapped for a link out of the workspace in the middle of a call (here
/// while the edit waits for approval, after dshd worked it out against the real file) does not
/// carry the write out: the launcher writes under the agent's Landlock domain, which refuses the
/// directory outside, even though the file there has the very content the agent read.
#[test]
fn a_parent_swapped_for_a_link_outside_during_the_call_does_not_carry_the_write_out() {
    let daemon = TestDaemon::start();
    let work = daemon.workdir("acp-swap");
    let outside = daemon.workdir("acp-swap-outside");
    std::fs::create_dir(work.join("sub")).unwrap();
    std::fs::write(work.join("sub/f.txt"), "v1\n").unwrap();
    std::fs::write(outside.join("f.txt"), "v1\n").unwrap();
    let path = work.join("sub/f.txt");
    let path = path.to_str().unwrap();
    let script = json!({"replies": [
        {"tool_calls": [{"id": "r", "name": "read", "arguments": {"file_path": path}}]},
        {"tool_calls": [{"id": "e", "name": "edit", "arguments":
            {"file_path": path, "old_string": "v1", "new_string": "v2"}}]},
        {"text": "Done."},
    ]});
    let mut acp = Acp::scripted(
        &daemon,
        &script,
        &["--approval", "always", "--sandbox", "workspace-write"],
    );
    let id = acp.ready_session(&work);
    let turn = acp.send("session/prompt", prompt(&id, "edit it"));
    let answer = loop {
        let message = acp.recv();
        if message["id"] == turn && message.get("method").is_none() {
            break message;
        }
        if message["method"] == "session/request_permission" {
            std::fs::rename(work.join("sub"), work.join("sub-moved")).unwrap();
            std::os::unix::fs::symlink(&outside, work.join("sub")).unwrap();
            let reply = json!({"jsonrpc": "2.0", "id": message["id"],
                "result": {"outcome": {"outcome": "selected", "optionId": "allow-once"}}});
            acp.line(&reply.to_string());
        }
    };
    assert_eq!(answer["result"]["stopReason"], "end_turn", "{answer}");
    assert_eq!(
        std::fs::read_to_string(outside.join("f.txt")).unwrap(),
        "v1\n"
    );
    let names: Vec<_> = std::fs::read_dir(&outside)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["f.txt"], "no temporary file was left outside");
    let events = daemon.dshctl_json_lines(&["session", "events", &id]);
    let result = events
        .iter()
        .find(|e| e["type"] == "tool/result" && e["data"]["callId"] == "e")
        .unwrap();
    assert_eq!(result["data"]["isError"], true, "{result}");
    assert!(
        result["data"]["content"]
            .as_str()
            .unwrap()
            .contains("permission denied"),
        "{result}"
    );
    assert!(acp.finish().success());
}
