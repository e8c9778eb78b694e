//! Claude Code's async hooks (`"async": true`): the call goes on while the hook runs; what it
//! says reaches the model at the next turn; its run is logged like any hook's; closing the agent
//! kills it.

use super::*;

/// A hook that records its pid, waits for `<dir>/go` (or forever, as `sleep 4242`), then answers
/// with context for the model.
fn waiting_hook(dir: &Dir, name: &str, forever: bool) -> String {
    let wait = if forever {
        "exec sleep 4242".to_owned()
    } else {
        format!("while [ ! -e {} ]; do sleep 0.05; done", dir.q("go"))
    };
    dir.script(
        name,
        &format!(
            "#!/bin/sh\ncat > /dev/null\necho $$ > {pid}\n{wait}\necho '{answer}'\n",
            pid = dir.q(&format!("{name}.pid")),
            answer = json!({"hookSpecificOutput": {"hookEventName": "PostToolUse",
                "additionalContext": "async: lint passed"}})
        ),
    )
}

fn async_file(event: &str, command: &str) -> Value {
    json!({"hooks": {event: [{"matcher": "Bash", "hooks": [
        {"type": "command", "command": command, "async": true}
    ]}]}})
}

#[test]
fn an_async_hook_runs_while_the_turn_goes_on_and_speaks_at_the_next_turn() {
    let w = World::new(|dir| {
        Setup::claude_code(async_file(
            "PostToolUse",
            &waiting_hook(dir, "lint.sh", false),
        ))
    });
    let agent = w.agent(&json!({"replies": [
        bash_reply("", "echo hi"),
        {"text": "done"},
        {"text": "second"},
    ]}));
    assert_eq!(w.prompt(&agent, "go").kind(), "completed");
    // The turn ended while the hook still waits: it did not wait for the hook.
    let pid = w.pid("lint.sh.pid");
    assert!(alive(pid, "lint.sh"), "the hook runs on after the turn");
    assert!(
        of_type(&w.events(&agent), "hook/result").is_empty(),
        "nothing logged before it ends"
    );
    std::fs::write(w.path("go"), "").unwrap();
    assert!(
        eventually(PATIENCE, || !of_type(&w.events(&agent), "hook/result")
            .is_empty()),
        "its run is logged when it ends"
    );
    let events = w.events(&agent);
    let result = &of_type(&events, "hook/result")[0]["data"];
    assert_eq!(result["event"], "PostToolUse");
    assert_eq!(result["exitCode"], 0);
    // What it said reaches the model at the next turn, after that turn's prompt.
    assert_eq!(w.prompt(&agent, "again").kind(), "completed");
    let events = w.events(&agent);
    let prompt = events
        .iter()
        .find(|e| e["type"] == "user/message" && e["data"]["message"]["text"] == "again")
        .unwrap();
    let context: Vec<&Value> = plugin_messages(&events)
        .into_iter()
        .filter(|e| e["data"]["message"]["text"] == "async: lint passed")
        .collect();
    assert_eq!(context.len(), 1, "{events:?}");
    assert!(seq(context[0]) > seq(prompt));
}

#[test]
fn closing_the_agent_kills_its_async_hooks() {
    let w = World::new(|dir| {
        Setup::claude_code(async_file(
            "PostToolUse",
            &waiting_hook(dir, "forever.sh", true),
        ))
    });
    let agent = w.agent(&json!({"replies": [bash_reply("", "echo hi"), {"text": "done"}]}));
    assert_eq!(w.prompt(&agent, "go").kind(), "completed");
    let pid = w.pid("forever.sh.pid");
    // The pid is written just before the script becomes `sleep 4242`.
    assert!(eventually(PATIENCE, || alive(pid, "4242")));
    assert!(
        w.daemon
            .dshctl(&["agent", "close", &agent])
            .status
            .success()
    );
    assert_gone(pid, "4242");
}

/// A desktop notifier configured `"async": true` on Notification, as users publish them (our own
/// fixture, see SOURCES.md), tells the person while a call waits for their approval; the call
/// waits for the answer, not for the hook, and the hook's run is logged (issue 45).
#[test]
fn an_async_notifier_tells_the_person_while_a_call_waits_for_approval() {
    dsh_core::test_support::require_jq();
    let w = World::new(|_| Setup {
        claude_code: vec![
            json!({"hooks": {"Notification": [{"matcher": "permission_prompt",
            "hooks": [{"type": "command", "async": true,
                "command": super::upstream::run_fixture("own/notify-desktop.sh", "")}]}]}}),
        ],
        hooks_toml: "[approvals]\npolicy = \"always\"\ntimeout_ms = 600000".into(),
        ..Setup::default()
    });
    let agent = w.agent(&json!({"replies": [
        {"text": "", "tool_calls": [
            {"id": "c1", "name": "bash", "arguments": {"command": "echo approved-and-ran"}},
        ]},
        {"text": "done"},
    ]}));
    let turn = w.prompt_in_background(&agent, "go");
    w.daemon
        .wait_for_events(&agent, "an approval request", |e| {
            !of_type(e, "approval/request").is_empty()
        });
    let log = w.cwd.join(".claude/notifications.log");
    assert!(
        eventually(PATIENCE, || std::fs::read_to_string(&log)
            .is_ok_and(|t| t.contains("[permission_prompt]"))),
        "the person was not told while the call waited"
    );
    let told = std::fs::read_to_string(&log).unwrap();
    assert!(
        told.contains("Permission needed: Claude needs your permission to use Bash"),
        "{told}"
    );
    w.daemon.dshctl_json(&["approve", &agent, "c1", "--allow"]);
    let turn = Turn::wait(turn);
    assert_eq!(turn.kind(), "completed", "{:?}", turn.lines);
    assert!(
        turn.tool_results()[0]["content"]
            .as_str()
            .unwrap()
            .contains("approved-and-ran")
    );
    assert!(
        eventually(PATIENCE, || of_type(&w.events(&agent), "hook/result")
            .iter()
            .any(
                |e| e["data"]["event"] == "Notification" && e["data"]["exitCode"] == 0
            )),
        "the notifier's run is logged"
    );
}
