//! The permission hooks through the real daemon, with scripts in the shape users publish
//! (`tests/fixtures/hooks/own/`, SOURCES.md): a PermissionRequest hook's `updatedInput` is what
//! runs, its `updatedPermissions` (an echoed `permission_suggestions` entry) becomes a session
//! rule that `agent show` lists, that survives a close and resume, and that answers the same
//! request later without asking; PermissionDenied fires once per denial (by a PreToolUse hook, a
//! PermissionRequest hook, a person) with Claude Code's fields, and its `retry: true` tells the
//! model it may retry.

use super::upstream::{results_of, run_fixture};
use super::*;

/// A world with Claude Code hooks `entries` and the `always` approval policy (every bash call
/// asks first).
fn always(entries: &[(&str, Option<&str>, &str)]) -> World {
    let file = hook_file(entries);
    World::new(|_| Setup {
        hooks_toml: "[approvals]\npolicy = \"always\"\n".into(),
        ..Setup::claude_code(file)
    })
}

/// A scripted reply with one bash call `id` running `command`.
fn call(id: &str, command: &str) -> Value {
    json!({"tool_calls": [{"id": id, "name": "bash", "arguments": {"command": command}}]})
}

/// `(callId, decision, by)` of each `approval/decision` in `events`.
fn decisions(events: &[Value]) -> Vec<(String, String, String)> {
    of_type(events, "approval/decision")
        .iter()
        .map(|e| {
            let d = &e["data"];
            let text = |k: &str| d[k].as_str().unwrap_or_default().to_owned();
            (text("callId"), text("decision"), text("by"))
        })
        .collect()
}

fn triple(call: &str, decision: &str, by: &str) -> (String, String, String) {
    (call.into(), decision.into(), by.into())
}

#[test]
fn a_permission_request_hook_runs_the_command_it_rewrote() {
    let w = always(&[(
        "PermissionRequest",
        Some("Bash"),
        &run_fixture("own/rm-to-trash.sh", ""),
    )]);
    std::fs::write(w.cwd.join("victim.txt"), "keep me").unwrap();
    let agent = w.agent(&json!({"replies": [call("c1", "rm victim.txt"), {"text": "done"}]}));
    let turn = w.prompt(&agent, "delete victim.txt");
    assert_eq!(turn.kind(), "completed", "{:?}", turn.lines);
    assert!(!w.cwd.join("victim.txt").exists(), "nothing ran");
    assert_eq!(
        std::fs::read_to_string(w.cwd.join(".trash/victim.txt")).unwrap(),
        "keep me",
        "the rewritten command did not run"
    );
    let events = w.events(&agent);
    assert_eq!(decisions(&events), [triple("c1", "allow", "hook")]);
    assert!(
        of_type(&events, "approval/request").is_empty(),
        "a person was asked"
    );
    let rewritten = of_type(&events, "tool/rewritten");
    assert_eq!(rewritten.len(), 1, "{rewritten:?}");
    assert_eq!(rewritten[0]["data"]["callId"], "c1");
    assert_eq!(
        rewritten[0]["data"]["arguments"],
        json!({"command": "mkdir -p .trash && mv -- victim.txt .trash/",
               "description": "move to .trash instead of deleting"})
    );
    // The model's own call stays in the log as it made it.
    assert_eq!(
        of_type(&events, "tool/call")[0]["data"]["arguments"]["command"],
        "rm victim.txt"
    );
    let result = &of_type(&events, "tool/result")[0]["data"];
    assert_eq!(result["isError"], false, "{result}");
}

#[test]
fn an_echoed_suggestion_becomes_a_session_rule_that_outlives_a_resume() {
    let w = always(&[(
        "PermissionRequest",
        Some("Bash"),
        &run_fixture("own/allow-read-only.sh", ""),
    )]);
    let cwd = w.cwd.to_str().unwrap().to_owned();
    let agent =
        w.agent(&json!({"replies": [call("c1", "ls"), call("c2", "ls"), {"text": "done"}]}));
    let turn = w.prompt(&agent, "look twice");
    assert_eq!(turn.kind(), "completed", "{:?}", turn.lines);
    let events = w.events(&agent);
    // The hook allowed the first call and echoed the suggested rule; the rule allowed the second.
    assert_eq!(
        decisions(&events),
        [triple("c1", "allow", "hook"), triple("c2", "allow", "rule")]
    );
    let added = of_type(&events, "approval/rule-added");
    assert_eq!(added.len(), 1, "{added:?}");
    assert_eq!(added[0]["data"]["tool"], "bash");
    assert_eq!(added[0]["data"]["command"], "ls");
    assert_eq!(added[0]["data"]["cwd"], cwd.as_str());
    assert!(
        added[0]["data"]["handlers"][0]
            .as_str()
            .unwrap()
            .ends_with("#PermissionRequest[0][0]"),
        "{}",
        added[0]
    );
    let asked_hook = || w.read("proj/.claude/permissions.log").lines().count();
    assert_eq!(asked_hook(), 1, "the rule did not answer the second call");
    assert_eq!(results_of(&events, "PermissionRequest").len(), 1);
    let rules = json!([{"tool": "bash", "command": "ls", "cwd": cwd}]);
    let shown = w.daemon.dshctl_json(&["agent", "show", &agent]);
    assert_eq!(shown["approval_rules"], rules, "{shown}");

    // Closed and resumed, the session keeps the rule, and it answers the same request again.
    w.daemon.dshctl_json(&["agent", "close", &agent]);
    let script = w.script(&json!({"replies": [call("c3", "ls"), {"text": "again"}]}));
    w.daemon.dshctl_json(&[
        "agent",
        "resume",
        &agent,
        "--script",
        script.to_str().unwrap(),
    ]);
    let shown = w.daemon.dshctl_json(&["agent", "show", &agent]);
    assert_eq!(shown["approval_rules"], rules, "{shown}");
    let turn = w.prompt(&agent, "look again");
    assert_eq!(turn.kind(), "completed", "{:?}", turn.lines);
    let events = w.events(&agent);
    assert_eq!(decisions(&events)[2], triple("c3", "allow", "rule"));
    assert_eq!(asked_hook(), 1, "the hook was asked again after the resume");
    assert!(
        of_type(&events, "approval/request").is_empty(),
        "a person was asked"
    );
}

#[test]
fn permission_denied_fires_once_per_denial_and_a_retry_reaches_the_model() {
    // A PreToolUse guard in the usual shape: exit 2 with the reason on stderr.
    let guard = r#"jq -r .tool_input.command | grep -q forbidden && { echo "forbidden files stay untouched" >&2; exit 2; }; exit 0"#;
    let w = World::new(|_| {
        Setup::claude_code(hook_file(&[
            ("PreToolUse", Some("Bash"), guard),
            (
                "PermissionDenied",
                Some("Bash"),
                &run_fixture("own/denial-log.sh", ""),
            ),
        ]))
    });
    // The model retries once after the hook allows it, and then gives up.
    let agent = w.agent(&json!({"replies": [
        call("c1", "touch forbidden"),
        call("c2", "touch forbidden"),
        {"text": "I cannot"},
    ]}));
    let turn = w.prompt(&agent, "touch it");
    assert_eq!(turn.kind(), "completed", "{:?}", turn.lines);
    assert!(!w.cwd.join("forbidden").exists());
    let denials = parse_lines(&w.read("proj/.claude/denials.jsonl"));
    assert_eq!(denials.len(), 2, "once per denial: {denials:?}");
    for (denial, id) in denials.iter().zip(["c1", "c2"]) {
        assert_eq!(denial["session_id"], agent.as_str());
        assert_eq!(denial["hook_event_name"], "PermissionDenied");
        assert_eq!(denial["tool_name"], "Bash");
        assert_eq!(denial["tool_input"]["command"], "touch forbidden");
        assert_eq!(denial["tool_use_id"], id);
        assert_eq!(denial["reason"], "forbidden files stay untouched");
    }
    let events = w.events(&agent);
    // Only the first denial was followed by a retry: one message, after that call's result.
    let retries: Vec<&Value> = plugin_messages(&events)
        .into_iter()
        .filter(|m| {
            m["data"]["message"]
                .to_string()
                .contains("PermissionDenied")
        })
        .collect();
    assert_eq!(retries.len(), 1, "{retries:?}");
    let text = retries[0]["data"]["message"].to_string();
    assert!(text.contains("c1") && text.contains("may try"), "{text}");
    let first_result = of_type(&events, "tool/result")[0];
    assert!(seq(retries[0]) > seq(first_result));
    assert_eq!(
        first_result["data"]["content"], "Error: forbidden files stay untouched",
        "the denial stands"
    );
    assert_eq!(results_of(&events, "PermissionDenied").len(), 2);
}

/// Waits until agent `agent` has logged `n` approval requests.
fn wait_for_requests(w: &World, agent: &str, n: usize) {
    w.daemon.wait_for_events(agent, "an approval request", |e| {
        of_type(e, "approval/request").len() >= n
    });
}

#[test]
fn a_permission_request_hooks_deny_and_a_persons_deny_each_fire_it() {
    let deny = r#"jq -r .tool_input.command | grep -q hook-says-no || exit 0; echo '{"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": {"behavior": "deny", "message": "not that one"}}}'"#;
    // Each payload is appended as one line (Claude Code's ends with a newline).
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("denied.jsonl");
    let w = always(&[
        ("PermissionRequest", Some("Bash"), deny),
        (
            "PermissionDenied",
            None,
            &format!("cat >> '{}'", log.display()),
        ),
    ]);
    let agent = w.agent(&json!({"replies": [
        call("d1", "touch hook-says-no"),
        call("d2", "touch person-says-no"),
        {"text": "done"},
    ]}));
    let running = w.prompt_in_background(&agent, "try both");
    wait_for_requests(&w, &agent, 1);
    w.daemon
        .dshctl_json(&["approve", &agent, "d2", "--deny", "--reason", "not today"]);
    let turn = Turn::wait(running);
    assert_eq!(turn.kind(), "completed", "{:?}", turn.lines);
    let denied = parse_lines(&std::fs::read_to_string(&log).unwrap());
    let seen: Vec<(&str, &str)> = denied
        .iter()
        .map(|d| {
            (
                d["tool_use_id"].as_str().unwrap(),
                d["reason"].as_str().unwrap(),
            )
        })
        .collect();
    assert_eq!(
        seen,
        [
            (
                "d1",
                "a PermissionRequest hook denied this call: not that one"
            ),
            ("d2", "the user denied this call: not today"),
        ]
    );
    // Claude Code's documented input: the common fields, then the event's four.
    for payload in &denied {
        let mut keys: Vec<&str> = payload
            .as_object()
            .unwrap()
            .keys()
            .map(String::as_str)
            .collect();
        keys.sort_unstable();
        assert_eq!(
            keys,
            [
                "cwd",
                "hook_event_name",
                "permission_mode",
                "prompt_id",
                "reason",
                "session_id",
                "tool_input",
                "tool_name",
                "tool_use_id",
                "transcript_path"
            ],
            "{payload}"
        );
        assert_eq!(payload["hook_event_name"], "PermissionDenied");
        assert_eq!(payload["tool_name"], "Bash");
        assert!(payload["tool_input"]["command"].is_string(), "{payload}");
    }
    assert_eq!(
        decisions(&w.events(&agent)),
        [triple("d1", "deny", "hook"), triple("d2", "deny", "client")]
    );
}

#[test]
fn a_denial_by_the_never_policy_fires_it_with_the_policys_reason() {
    let ask = r#"cat > /dev/null; echo '{"hookSpecificOutput": {"hookEventName": "PreToolUse", "permissionDecision": "ask", "permissionDecisionReason": "check this"}}'"#;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("denied.jsonl");
    let w = World::new(|_| Setup {
        hooks_toml: "[approvals]\npolicy = \"never\"\n".into(),
        ..Setup::claude_code(hook_file(&[
            ("PreToolUse", Some("Bash"), ask),
            (
                "PermissionDenied",
                Some("Bash"),
                &format!("cat >> '{}'", log.display()),
            ),
        ]))
    });
    let agent = w.agent(&json!({"replies": [call("n1", "touch never"), {"text": "ok"}]}));
    let turn = w.prompt(&agent, "try");
    assert_eq!(turn.kind(), "completed", "{:?}", turn.lines);
    assert!(!w.cwd.join("never").exists());
    let denied = parse_lines(&std::fs::read_to_string(&log).unwrap());
    assert_eq!(denied.len(), 1, "{denied:?}");
    assert_eq!(denied[0]["tool_use_id"], "n1");
    let reason = denied[0]["reason"].as_str().unwrap();
    assert!(
        reason.starts_with("check this") && reason.contains("the approval policy is `never`"),
        "{reason}"
    );
    // Nobody was asked, so no approval was requested or decided.
    assert!(decisions(&w.events(&agent)).is_empty());
}
