//! Tests of `updates.rs`: dsh events as ACP updates and stop reasons.

use super::*;
use serde_json::{Value, json};

/// An update as the client reads it.
fn wire(update: &SessionUpdate) -> Value {
    serde_json::to_value(update).unwrap()
}

fn event(session: &str, kind: &str, data: Value) -> v1::Event {
    v1::Event {
        session_id: session.into(),
        r#type: kind.into(),
        seq: None,
        time_ms: 0,
        data_json: data.to_string(),
    }
}

fn texts(outputs: &[Output]) -> String {
    outputs
        .iter()
        .filter_map(|o| match o {
            Output::Update(SessionUpdate::AgentMessageChunk {
                content: Content::Text { text },
            }) => Some(text.clone()),
            _ => None,
        })
        .collect()
}

#[test]
fn deltas_then_the_rest_of_the_message_give_the_text_once() {
    let mut t = Translator::new("s", false);
    let mut out = Vec::new();
    for (offset, text) in [(0, "Hel"), (3, "lo, "), (3, "lo, "), (5, ", wo")] {
        out.extend(t.translate(&event(
            "s",
            "text/delta",
            json!({"turn": 1, "step": 1, "offset": offset, "text": text}),
        )));
    }
    out.extend(t.translate(&event(
        "s",
        "assistant/message",
        json!({"turn": 1, "step": 1, "message": {"text": "Hello, world"}}),
    )));
    assert_eq!(texts(&out), "Hello, world");
    // Another step starts from nothing again.
    let next = t.translate(&event(
        "s",
        "assistant/message",
        json!({"turn": 1, "step": 2, "message": {"text": "again"}}),
    ));
    assert_eq!(texts(&next), "again");
}

#[test]
fn calls_results_and_approvals_of_the_agent_and_its_children() {
    let mut t = Translator::new("s", false);
    let call = json!({"turn": 1, "step": 1, "callId": "c1", "name": "bash", "arguments": {"command": "ls"}});
    let out = t.translate(&event("s", "tool/call", call.clone()));
    let Output::Update(first) = &out[0] else {
        panic!("{out:?}")
    };
    let first = wire(first);
    assert_eq!(
        (&first["toolCallId"], &first["title"], &first["kind"]),
        (&json!("c1"), &json!("ls"), &json!("execute"))
    );
    let out = t.translate(&event("child1234567890", "tool/call", call));
    let Output::Update(first) = &out[0] else {
        panic!("{out:?}")
    };
    let first = wire(first);
    assert_eq!(first["toolCallId"], "child1234567890/c1");
    assert_eq!(first["title"], "[child 34567890] ls");
    let ask = t.translate(&event(
        "child1234567890",
        "approval/request",
        json!({"turn": 1, "step": 1, "callId": "c1", "tool": "bash", "command": "ls", "cwd": "/w", "reason": "r", "timeoutMs": 1000}),
    ));
    let [Output::Ask(ask)] = ask.as_slice() else {
        panic!("{ask:?}")
    };
    assert_eq!(
        (ask.agent_id.as_str(), ask.call_id.as_str()),
        ("child1234567890", "c1")
    );
    let out = t.translate(&event(
        "s",
        "tool/result",
        json!({"turn": 1, "step": 1, "callId": "c1", "content": "boom", "isError": true}),
    ));
    let [Output::Update(done)] = out.as_slice() else {
        panic!("{out:?}")
    };
    let done = wire(done);
    assert_eq!(done["status"], "failed");
    assert_eq!(done["content"][0]["content"]["text"], "boom");
    // The prompt itself is the client's: shown on replay only.
    let prompt = json!({"message": {"text": "hi", "source": {"kind": "user"}}});
    assert!(
        t.translate(&event("s", "user/message", prompt.clone()))
            .is_empty()
    );
    let mut replay = Translator::new("s", true);
    assert_eq!(
        replay.translate(&event("s", "user/message", prompt)).len(),
        1
    );
}

fn content_text(outputs: &[Output]) -> Vec<String> {
    outputs
        .iter()
        .map(|o| match o {
            Output::Update(u) => wire(u)["content"][0]["content"]["text"]
                .as_str()
                .unwrap_or_default()
                .to_owned(),
            other => panic!("{other:?}"),
        })
        .collect()
}

#[test]
fn live_output_is_the_calls_content_so_far_until_its_result() {
    let mut t = Translator::new("s", false);
    let piece = |stream: &str, offset: usize, text: &str| json!({"turn": 1, "step": 1, "callId": "c1", "stream": stream, "offset": offset, "text": text});
    let mut shown = Vec::new();
    for (session, data) in [
        ("s", piece("stdout", 0, "1\n")),
        ("s", piece("stderr", 0, "warn\n")),
        ("s", piece("stdout", 0, "1\n")), // a repeat: nothing new
        ("s", piece("stdout", 2, "2\n")),
        ("kid", piece("stdout", 0, "child\n")),
    ] {
        shown.extend(content_text(&t.translate(&event(
            session,
            "tool/output",
            data,
        ))));
    }
    assert_eq!(shown, ["1\n", "1\nwarn\n", "1\nwarn\n2\n", "child\n"]);
    let done = t.translate(&event(
        "s",
        "tool/result",
        json!({"turn": 1, "step": 1, "callId": "c1", "content": "1\n2\nwarn\n", "isError": false}),
    ));
    assert_eq!(content_text(&done), ["1\n2\nwarn\n"]);
    assert!(
        !t.outputs.contains_key("c1"),
        "a finished call's output is dropped"
    );

    // Only the tail of a long output is carried, cut at a character boundary.
    let long = "é".repeat(PREVIEW_BYTES);
    let out = t.translate(&event("s", "tool/output", piece("stdout", 0, &long)));
    let text = &content_text(&out)[0];
    assert!(text.len() <= PREVIEW_BYTES && text.len() > PREVIEW_BYTES - 2);
    assert!(text.chars().all(|c| c == 'é'));
}

#[test]
fn turn_ends_map_to_stop_reasons_or_errors() {
    assert_eq!(
        stop_reason(&TurnEndReason::Completed),
        Ok(StopReason::EndTurn)
    );
    assert_eq!(
        stop_reason(&TurnEndReason::Aborted {
            cause: dsh_session::AbortCause::User
        }),
        Ok(StopReason::Cancelled)
    );
    assert_eq!(
        stop_reason(&TurnEndReason::Blocked {
            reason: "no".into()
        }),
        Ok(StopReason::Refusal)
    );
    assert_eq!(
        stop_reason(&TurnEndReason::StepLimit { limit: 2 }),
        Ok(StopReason::MaxTurnRequests)
    );
    // An error is an error, whatever its text says (before step_limit existed, the limit
    // was an error naming the setting).
    assert_eq!(
        stop_reason(&TurnEndReason::Error {
            message: "the turn reached the limit of 2 steps (agent.max_steps_per_turn)".into()
        }),
        Err("the turn reached the limit of 2 steps (agent.max_steps_per_turn)".to_owned())
    );
}

/// A turn's end arrives typed from its `turn/end`; a child's does not end the prompt.
#[test]
fn the_prompted_agents_turn_end_ends_the_prompt() {
    let mut t = Translator::new("s", false);
    let end = json!({"turn": 1, "reason": {"kind": "step_limit", "limit": 3}});
    assert!(
        t.translate(&event("kid", "turn/end", end.clone()))
            .is_empty()
    );
    // The session's last activity first (the event's time), then the end.
    assert_eq!(
        t.translate(&event("s", "turn/end", end)),
        [
            Output::Update(SessionUpdate::SessionInfoUpdate {
                title: None,
                updated_at: Some("1970-01-01T00:00:00.000Z".to_owned()),
            }),
            Output::End(TurnEndReason::StepLimit { limit: 3 })
        ]
    );
}

#[test]
fn a_commands_description_is_its_cards_title() {
    let mut t = Translator::new("s", false);
    let described = json!({"turn": 1, "step": 1, "callId": "c1", "name": "bash",
        "arguments": {"command": "cargo test -q", "description": "Run the tests"}});
    let out = t.translate(&event("s", "tool/call", described));
    let Output::Update(first) = &out[0] else {
        panic!("{out:?}")
    };
    let first = wire(first);
    assert_eq!(first["title"], "Run the tests");
    assert_eq!(first["rawInput"]["command"], "cargo test -q");
    // A blank description is no title.
    let blank = json!({"turn": 1, "step": 1, "callId": "c2", "name": "bash",
        "arguments": {"command": "ls", "description": " "}});
    let out = t.translate(&event("s", "tool/call", blank));
    let Output::Update(first) = &out[0] else {
        panic!("{out:?}")
    };
    assert_eq!(wire(first)["title"], "ls");
}

#[test]
fn times_are_iso_8601_in_utc() {
    assert_eq!(iso_8601(0), "1970-01-01T00:00:00.000Z");
    assert_eq!(iso_8601(951_782_400_123), "2000-02-29T00:00:00.123Z");
    assert_eq!(iso_8601(1_796_430_184_500), "2026-12-05T00:23:04.500Z");
    assert_eq!(iso_8601(-1), "1969-12-31T23:59:59.999Z");
}

/// The file tools' calls reach editors as reads and edits titled by their file.
#[test]
fn file_tool_calls_are_reads_and_edits() {
    let mut t = Translator::new("s", false);
    for (name, kind) in [("read", "read"), ("write", "edit"), ("edit", "edit")] {
        let call = json!({"turn": 1, "step": 1, "callId": name, "name": name,
            "arguments": {"file_path": "/w/a.rs", "content": "x"}});
        let out = t.translate(&event("s", "tool/call", call));
        let Output::Update(first) = &out[0] else {
            panic!("{out:?}")
        };
        let first = wire(first);
        assert_eq!(first["kind"], kind, "{first}");
        assert_eq!(first["title"], format!("{name} /w/a.rs"), "{first}");
    }
    // A change too large to carry its texts adds nothing the result has not shown.
    let diff = "--- /w/a.rs\n+++ /w/a.rs\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n";
    let mut file = json!({"turn": 1, "step": 1, "callId": "edit", "path": "/w/a.rs",
        "kind": "edit", "diff": diff, "oldHash": "sha256:0", "newHash": "sha256:1"});
    assert!(
        t.translate(&event("s", "tool/file", file.clone()))
            .is_empty()
    );
    // With them, the editor gets the diff and the first changed line.
    file["oldText"] = json!("a\nb\nc\n");
    file["newText"] = json!("a\nB\nc\n");
    let out = t.translate(&event("s", "tool/file", file));
    let Output::Update(update) = &out[0] else {
        panic!("{out:?}")
    };
    assert_eq!(
        wire(update),
        json!({"sessionUpdate": "tool_call_update", "toolCallId": "edit",
            "content": [{"type": "diff", "path": "/w/a.rs", "oldText": "a\nb\nc\n", "newText": "a\nB\nc\n"}],
            "locations": [{"path": "/w/a.rs", "line": 2}]})
    );
    // A new file's diff has no old text, and starts at line 1.
    assert_eq!(
        first_changed_line("--- /dev/null\n+++ /w/n\n@@ -0,0 +1,1 @@\n+x\n"),
        Some(1)
    );
}

/// For a client with `_meta.terminal_output`, a bash call is a display-only terminal: its id at
/// the start, each new piece of output (never a repeat), and how it ended with the exit code;
/// no text content. A call whose output never streamed sends its result to the terminal whole;
/// other tools keep text content.
#[test]
fn bash_calls_are_display_only_terminals_for_clients_that_show_them() {
    let mut t = Translator::new("s", false).with_terminal_output(true);
    let all: Vec<Value> = [
        ("tool/call", json!({"turn": 1, "step": 1, "callId": "c1", "name": "bash", "arguments": {"command": "make"}})),
        ("tool/output", json!({"turn": 1, "step": 1, "callId": "c1", "stream": "stdout", "offset": 0, "text": "cc a.c\n"})),
        ("tool/output", json!({"turn": 1, "step": 1, "callId": "c1", "stream": "stdout", "offset": 0, "text": "cc a.c\n"})),
        ("tool/output", json!({"turn": 1, "step": 1, "callId": "c1", "stream": "stderr", "offset": 0, "text": "error\n"})),
        ("tool/result", json!({"turn": 1, "step": 1, "callId": "c1", "content": "cc a.c\n[stderr]\nerror\n[exit code: 2]", "isError": true, "exitCode": 2})),
        ("tool/call", json!({"turn": 1, "step": 2, "callId": "c2", "name": "bash", "arguments": {"command": "true"}})),
        ("tool/result", json!({"turn": 1, "step": 2, "callId": "c2", "content": "(no output)", "isError": false, "exitCode": 0})),
    ]
    .into_iter()
    .flat_map(|(kind, data)| t.translate(&event("s", kind, data)))
    .map(|o| match o {
        Output::Update(u) => wire(&u),
        other => panic!("{other:?}"),
    })
    .collect();
    assert_eq!(
        all[0]["content"],
        json!([{"type": "terminal", "terminalId": "c1"}])
    );
    assert_eq!(
        all[0]["_meta"],
        json!({"terminal_info": {"terminal_id": "c1"}})
    );
    let metas: Vec<&Value> = all[2..].iter().map(|u| &u["_meta"]).collect();
    assert_eq!(
        metas,
        [
            &json!({"terminal_output": {"terminal_id": "c1", "data": "cc a.c\n"}}),
            &json!({"terminal_output": {"terminal_id": "c1", "data": "error\n"}}),
            &json!({"terminal_exit": {"terminal_id": "c1", "exit_code": 2, "signal": null}}),
            &json!({"terminal_info": {"terminal_id": "c2"}}),
            &Value::Null,
            &json!({"terminal_output": {"terminal_id": "c2", "data": "(no output)"}}),
            &json!({"terminal_exit": {"terminal_id": "c2", "exit_code": 0, "signal": null}}),
        ]
    );
    assert_eq!(all[4]["status"], "failed");
    assert!(
        all.iter()
            .all(|u| u["sessionUpdate"] == "tool_call" || u.get("content").is_none()),
        "{all:?}"
    );
    // Other tools, and clients without the capability, get text content as before.
    let mut plain = Translator::new("s", false);
    plain.translate(&event("s", "tool/call", json!({"turn": 1, "step": 1, "callId": "c1", "name": "bash", "arguments": {"command": "ls"}})));
    let done = plain.translate(&event("s", "tool/result", json!({"turn": 1, "step": 1, "callId": "c1", "content": "a\n", "isError": false, "exitCode": 0})));
    assert_eq!(content_text(&done), ["a\n"]);
}
