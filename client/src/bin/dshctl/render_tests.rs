//! Tests of `render.rs`: what event streams show on a terminal.

#![allow(clippy::unwrap_used)]

use super::*;

use serde_json::Value;

fn event(kind: &str, session: &str, data: Value) -> v1::Event {
    v1::Event {
        session_id: session.to_owned(),
        r#type: kind.to_owned(),
        seq: None,
        time_ms: 0,
        data_json: data.to_string(),
    }
}

fn delta(step: u64, offset: u64, text: &str) -> v1::Event {
    event(
        "text/delta",
        "a",
        serde_json::json!({"turn": 1, "step": step, "offset": offset, "text": text}),
    )
}

fn full(step: u64, text: &str) -> v1::Event {
    event(
        "assistant/message",
        "a",
        serde_json::json!({"turn": 1, "step": step, "message": {"text": text}, "usage": null}),
    )
}

/// What `events` show on a terminal.
fn render(screen: &mut Screen, events: &[v1::Event]) -> String {
    let mut out = Vec::new();
    {
        let mut w = safe::SafeWriter::new(&mut out, true);
        for e in events {
            screen.write(&mut w, e).unwrap();
        }
    }
    String::from_utf8(out).unwrap()
}

#[test]
fn a_decision_says_who_answered() {
    let client = |pid, uid, terminal| ApprovalClient { pid, uid, terminal };
    assert_eq!(answered_by(ApprovalSource::Timeout, None, &[]), "timeout");
    assert_eq!(
        answered_by(
            ApprovalSource::Client,
            Some(&client(Some(42), 1000, Some(true))),
            &[]
        ),
        "client pid 42, uid 1000, at a terminal"
    );
    assert_eq!(
        answered_by(
            ApprovalSource::Client,
            Some(&client(None, 0, Some(false))),
            &[]
        ),
        "client uid 0, no terminal"
    );
    assert_eq!(
        answered_by(
            ApprovalSource::Hook,
            None,
            &["/h/settings.json#PermissionRequest[0][0]".to_owned()]
        ),
        "hook /h/settings.json#PermissionRequest[0][0]"
    );
}

#[test]
fn skipped_text_is_taken_from_the_full_text() {
    let mut screen = Screen::new(Some("a".into()));
    // dshd skipped "big " while we were slow: nothing after the gap is printed out of place.
    let out = render(
        &mut screen,
        &[
            delta(1, 0, "Hello, "),
            delta(1, 11, "world"),
            full(1, "Hello, big world"),
        ],
    );
    assert_eq!(out, "Hello, big world");
}

#[test]
fn a_step_streamed_whole_is_printed_once() {
    let mut screen = Screen::new(Some("a".into()));
    let out = render(
        &mut screen,
        &[
            delta(1, 0, "one"),
            full(1, "one"),
            delta(2, 0, "two"),
            delta(2, 3, "!"),
            full(2, "two!"),
        ],
    );
    assert_eq!(out, "onetwo!");
    assert!(screen.mid_line.is_some());
}

fn output(call: &str, stream: &str, offset: u64, text: &str) -> v1::Event {
    event(
        "tool/output",
        "a",
        serde_json::json!({"turn": 1, "step": 1, "callId": call, "stream": stream, "offset": offset, "text": text}),
    )
}

#[test]
fn live_output_is_indented_escaped_and_capped_per_call() {
    let mut screen = Screen::new(Some("a".into()));
    let many: String = (0..30).map(|i| format!("{i}\n")).collect();
    let out = render(
        &mut screen,
        &[
            output("c1", "stdout", 0, "one\ntw"),
            output("c1", "stdout", 6, "o\x1b[2J\n"),
            output("c1", "stderr", 4, "late\n"),
            output("c2", "stdout", 0, &many),
            output("c2", "stdout", 81, "never shown\n"),
        ],
    );
    let mut expected = "  one\n  two\\x1b[2J\n  [… 4 bytes not shown]\n  late\n".to_owned();
    for i in 0..20 {
        expected.push_str(&format!("  {i}\n"));
    }
    expected.push_str("  … (more output; the result shows it)\n");
    assert_eq!(out, expected);
}

#[test]
fn a_retry_says_how_long_and_why() {
    let mut screen = Screen::new(Some("a".into()));
    let retry = |ms: u64| {
        event(
            "model/retry",
            "a",
            serde_json::json!({"turn": 1, "step": 1, "attempt": 1, "delayMs": ms, "reason": "429"}),
        )
    };
    let out = render(&mut screen, &[retry(3000), retry(500)]);
    assert_eq!(out, "⟳ retrying in 3 s (429)\n⟳ retrying in 0.5 s (429)\n");
}

#[test]
fn other_agents_are_marked_with_their_id() {
    let mut screen = Screen::new(Some("a".into()));
    let child = "0198c0de-0000-7000-8000-00000000beef";
    let out = render(
        &mut screen,
        &[
            event("turn/start", "a", serde_json::json!({"turn": 1})),
            event("turn/start", child, serde_json::json!({"turn": 1})),
        ],
    );
    assert_eq!(out, "── turn 1\n[…0000beef] ── turn 1\n");
}

/// A change shows as its diff: coloured when colour is on, plain otherwise, and what the model
/// wrote in it escaped either way (a terminal sequence in a file cannot act on the screen).
#[test]
fn a_file_change_shows_as_its_diff_coloured_only_when_colour_is_on() {
    let change = event(
        "tool/file",
        "a",
        serde_json::json!({"turn": 1, "step": 1, "callId": "c", "path": "/w/f", "kind": "edit",
            "diff": "--- /w/f\n+++ /w/f\n@@ -1 +1 @@\n-old\n+new\x1b[2J\n", "oldHash": "sha256:0", "newHash": "sha256:1"}),
    );
    let mut plain = Screen::new(Some("a".into()));
    plain.dim = false;
    let text = render(&mut plain, std::slice::from_ref(&change));
    assert!(text.contains("✎ /w/f\n"), "{text:?}");
    assert!(
        text.contains("  -old\n") && text.contains("  +new"),
        "{text:?}"
    );
    assert!(!text.contains('\x1b'), "{text:?}");
    let mut coloured = Screen::new(Some("a".into()));
    coloured.dim = true;
    let text = render(&mut coloured, &[change]);
    assert!(text.contains("\x1b[31m-old\x1b[0m"), "{text:?}");
    assert!(text.contains("\x1b[32m+new"), "{text:?}");
    assert!(
        !text.contains("\x1b[2J"),
        "the model's sequence was escaped: {text:?}"
    );
    // A read shows nothing more than its call.
    let read = event(
        "tool/file",
        "a",
        serde_json::json!({"turn": 1, "step": 1, "callId": "c", "path": "/w/f", "kind": "read"}),
    );
    assert_eq!(render(&mut plain, &[read]), "");
}

/// An approval request for a file change shows the change as its diff before the question.
#[test]
fn an_approval_request_for_a_change_shows_its_diff_before_the_question() {
    let request = event(
        "approval/request",
        "a",
        serde_json::json!({"turn": 1, "step": 1, "callId": "c", "tool": "edit",
            "command": "{\"file_path\":\"f\"}", "cwd": "/w", "reason": "policy", "timeoutMs": 1000,
            "change": {"path": "/w/f", "diff": "--- /w/f\n+++ /w/f\n@@ -1 +1 @@\n-old\n+new\n"}}),
    );
    let mut screen = Screen::new(Some("a".into()));
    screen.dim = false;
    let text = render(&mut screen, &[request]);
    let diff = text.find("  -old\n  +new\n").expect(&text);
    let question = text.find("? approval needed for edit call c").expect(&text);
    assert!(diff < question, "{text:?}");
    assert!(text.find("✎ /w/f\n").expect(&text) < diff, "{text:?}");
}

/// A plan shows as a checklist, a step's terminal sequence escaped; a plan the tool will refuse
/// shows as any other call, with its raw arguments.
#[test]
fn a_plan_shows_as_a_checklist() {
    let mut screen = Screen::new(Some("a".into()));
    let call = |arguments: Value| {
        event(
            "tool/call",
            "a",
            serde_json::json!({"turn": 1, "step": 1, "callId": "p", "name": "update_plan", "arguments": arguments}),
        )
    };
    let out = render(
        &mut screen,
        &[
            call(serde_json::json!({"plan": [
                {"step": "read", "status": "completed"},
                {"step": "fix \u{1b}[2J", "status": "in_progress"},
                {"step": "test", "status": "pending"},
            ]})),
            call(serde_json::json!({"todos": []})),
        ],
    );
    assert_eq!(
        out,
        "▶ plan\n  ✓ read\n  ▸ fix \\x1b[2J\n  ○ test\n▶ update_plan {\"todos\":[]}\n"
    );
}

#[test]
fn a_rule_a_hook_added_names_the_hook_and_what_it_allows() {
    let mut screen = Screen::new(Some("a".into()));
    let added = event(
        "approval/rule-added",
        "a",
        serde_json::json!({"tool": "bash", "command": "npm test", "cwd": "/w",
                           "handlers": ["/h/settings.json#PermissionRequest[0][0]"]}),
    );
    let out = render(&mut screen, &[added]);
    assert_eq!(
        out,
        "+ rule added by hook /h/settings.json#PermissionRequest[0][0]: bash npm test in /w is allowed without asking\n"
    );
}
