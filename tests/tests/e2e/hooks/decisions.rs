//! What hooks decide, as the agent loop applies it: PreToolUse deny/ask, UserPromptSubmit blocks,
//! additional context, and Stop continuations.

use super::*;

/// A reply whose bash call would create `<dir>/marker`.
fn touch_marker(w: &World) -> Value {
    bash_reply("creating the marker", &format!("touch {}", w.q("marker")))
}

/// Runs a turn whose only call would create the marker, under a PreToolUse hook running
/// `command`; returns the turn after checking that the command never ran.
fn denied_call(command: &str) -> (World, Turn) {
    denied_call_with(command, "")
}

/// [`denied_call`] with more config after the `[hooks]` table.
fn denied_call_with(command: &str, more_toml: &str) -> (World, Turn) {
    let w = World::new(|_| Setup {
        hooks_toml: more_toml.to_owned(),
        ..Setup::claude_code(hook_file(&[("PreToolUse", Some("Bash"), command)]))
    });
    let agent = w.agent(&json!({"replies": [touch_marker(&w), {"text": "done"}]}));
    let turn = w.prompt(&agent, "make the marker");
    assert_eq!(turn.kind(), "completed", "{:?}", turn.lines);
    assert!(!w.path("marker").exists(), "the denied command ran anyway");
    let results = turn.tool_results();
    assert_eq!(results.len(), 1, "{:?}", turn.lines);
    assert_eq!(results[0]["isError"], true, "{}", results[0]);
    // The model's next request is built from the log: the result there is what the model sees.
    let events = w.events(&agent);
    let logged = of_type(&events, "tool/result");
    assert_eq!(logged.len(), 1);
    assert_eq!(logged[0]["data"]["content"], results[0]["content"]);
    (w, turn)
}

fn content(turn: &Turn) -> String {
    turn.tool_results()[0]["content"]
        .as_str()
        .unwrap()
        .to_owned()
}

#[test]
fn pre_tool_use_exit_2_keeps_the_command_from_running_and_shows_the_model_its_stderr() {
    let (_w, turn) = denied_call("cat > /dev/null; echo 'markers are off limits' >&2; exit 2");
    assert!(
        content(&turn).contains("markers are off limits"),
        "{}",
        content(&turn)
    );
}

#[test]
fn pre_tool_use_permission_decision_deny_keeps_the_command_from_running() {
    let deny = json!({"hookSpecificOutput": {
        "hookEventName": "PreToolUse",
        "permissionDecision": "deny",
        "permissionDecisionReason": "policy says no markers",
    }});
    let (_w, turn) = denied_call(&format!("cat > /dev/null; echo '{deny}'"));
    assert!(
        content(&turn).contains("policy says no markers"),
        "{}",
        content(&turn)
    );
}

#[test]
fn pre_tool_use_ask_under_the_never_policy_denies_without_asking() {
    let ask = json!({"hookSpecificOutput": {
        "hookEventName": "PreToolUse",
        "permissionDecision": "ask",
        "permissionDecisionReason": "a human should look at markers",
    }});
    let (w, turn) = denied_call_with(
        &format!("cat > /dev/null; echo '{ask}'"),
        "[approvals]\npolicy = \"never\"\n",
    );
    let text = content(&turn);
    assert!(text.contains("a human should look at markers"), "{text}");
    assert!(text.contains("approval policy is `never`"), "{text}");
    let agent = turn.lines[0]["sessionId"].as_str().unwrap().to_owned();
    assert!(
        of_type(&w.events(&agent), "approval/request").is_empty(),
        "nobody may be asked"
    );
}

#[test]
fn user_prompt_submit_exit_2_ends_the_turn_blocked_before_any_model_request() {
    let w = World::new(|_| {
        Setup::claude_code(hook_file(&[(
            "UserPromptSubmit",
            None,
            "grep -q forbidden && { echo 'that prompt is refused' >&2; exit 2; }; exit 0",
        )]))
    });
    let agent = w.agent(&json!({"replies": [{"text": "reply one"}, {"text": "reply two"}]}));

    let blocked = w.prompt(&agent, "something forbidden");
    assert_eq!(blocked.kind(), "blocked", "{:?}", blocked.lines);
    assert!(
        blocked.message().contains("that prompt is refused"),
        "{}",
        blocked.message()
    );
    assert!(
        blocked.of_type("step/start").is_empty(),
        "{:?}",
        blocked.lines
    );
    let events = w.events(&agent);
    assert!(of_type(&events, "step/start").is_empty(), "{events:#?}");
    assert!(
        of_type(&events, "assistant/message").is_empty(),
        "{events:#?}"
    );
    assert!(
        of_type(&events, "user/message").is_empty(),
        "a blocked prompt is not part of the conversation: {events:#?}"
    );

    // The script was not consumed: the next turn gets the first reply.
    let next = w.prompt(&agent, "something fine");
    assert_eq!(next.kind(), "completed", "{:?}", next.lines);
    assert_eq!(next.text(), "reply one");
}

#[test]
fn additional_context_reaches_the_log_as_a_hook_message_before_the_next_model_request() {
    let context = |event: &str, text: &str| {
        let out =
            json!({"hookSpecificOutput": {"hookEventName": event, "additionalContext": text}});
        format!("cat > /dev/null; echo '{out}'")
    };
    let w = World::new(|_| {
        Setup::claude_code(hook_file(&[
            (
                "UserPromptSubmit",
                None,
                &context("UserPromptSubmit", "CTX-FROM-PROMPT"),
            ),
            (
                "PostToolUse",
                Some("Bash"),
                &context("PostToolUse", "CTX-FROM-TOOL"),
            ),
        ]))
    });
    let agent = w.agent(&json!({"replies": [
        bash_reply("looking", "echo hi"),
        {"text": "done"},
    ]}));
    assert_eq!(w.prompt(&agent, "go").kind(), "completed");

    let events = w.events(&agent);
    let hook_messages = plugin_messages(&events);
    let texts: Vec<&str> = hook_messages
        .iter()
        .map(|e| e["data"]["message"]["text"].as_str().unwrap())
        .collect();
    assert_eq!(texts, ["CTX-FROM-PROMPT", "CTX-FROM-TOOL"], "{events:#?}");
    for m in &hook_messages {
        assert_eq!(
            m["data"]["message"]["source"]["plugin"], "hooks-claude-code",
            "{m}"
        );
    }
    let prompt = of_type(&events, "user/message")
        .into_iter()
        .find(|e| e["data"]["message"]["source"]["kind"] == "user")
        .unwrap();
    let answers = of_type(&events, "assistant/message");
    let result = of_type(&events, "tool/result");
    assert_eq!(answers.len(), 2);
    // Prompt, its context, the first request; the tool's result, its context, the next request.
    assert!(seq(prompt) < seq(hook_messages[0]));
    assert!(seq(hook_messages[0]) < seq(answers[0]));
    assert!(seq(result[0]) < seq(hook_messages[1]));
    assert!(seq(hook_messages[1]) < seq(answers[1]));
}

#[test]
fn stop_exit_2_forces_another_step_with_stop_hook_active() {
    let w = World::new(|dir| {
        // Blocks the first Stop only (the marker remembers), saving every payload.
        let command = format!(
            "cat >> {log}; if [ ! -e {once} ]; then touch {once}; \
             echo 'not yet: check the tests' >&2; exit 2; fi",
            log = dir.q("stop.jsonl"),
            once = dir.q("blocked-once"),
        );
        Setup::claude_code(hook_file(&[("Stop", None, &command)]))
    });
    let agent = w.agent(&json!({"replies": [{"text": "first answer"}, {"text": "second answer"}]}));
    let turn = w.prompt(&agent, "go");
    assert_eq!(turn.kind(), "completed", "{:?}", turn.lines);
    assert_eq!(turn.text(), "second answer");

    let payloads = parse_lines(&w.read("stop.jsonl"));
    assert_eq!(payloads.len(), 2, "{payloads:?}");
    assert_eq!(payloads[0]["stop_hook_active"], false);
    assert_eq!(payloads[0]["last_assistant_message"], "first answer");
    assert_eq!(payloads[1]["stop_hook_active"], true);
    assert_eq!(payloads[1]["last_assistant_message"], "second answer");

    // The reason went to the model as a hook message between the two answers.
    let events = w.events(&agent);
    let answers = of_type(&events, "assistant/message");
    let reasons = plugin_messages(&events);
    assert_eq!(answers.len(), 2);
    assert_eq!(reasons.len(), 1, "{events:#?}");
    assert!(
        reasons[0]["data"]["message"]["text"]
            .as_str()
            .unwrap()
            .contains("not yet: check the tests")
    );
    assert!(seq(answers[0]) < seq(reasons[0]) && seq(reasons[0]) < seq(answers[1]));
}

#[test]
fn a_stop_hook_that_always_blocks_is_obeyed_up_to_the_cap_and_the_turn_still_completes() {
    let w = World::new(|dir| Setup {
        claude_code: vec![hook_file(&[(
            "Stop",
            None,
            &format!(
                "cat >> {}; echo 'never done' >&2; exit 2",
                dir.q("stop.jsonl")
            ),
        )])],
        hooks_toml: "stop_continuation_cap = 2".into(),
        ..Setup::default()
    });
    let replies: Vec<Value> = (1..=6)
        .map(|i| json!({"text": format!("answer {i}")}))
        .collect();
    let agent = w.agent(&json!({ "replies": replies }));
    let turn = w.prompt(&agent, "go");
    assert_eq!(turn.kind(), "completed", "{:?}", turn.lines);
    // The first answer, then one more step per allowed continuation.
    assert_eq!(turn.text(), "answer 3");

    let payloads = parse_lines(&w.read("stop.jsonl"));
    let active: Vec<&Value> = payloads.iter().map(|p| &p["stop_hook_active"]).collect();
    assert_eq!(active, [&json!(false), &json!(true), &json!(true)]);
    let events = w.events(&agent);
    assert_eq!(of_type(&events, "assistant/message").len(), 3);
    let ends = of_type(&events, "turn/end");
    assert_eq!(ends.len(), 1);
    assert_eq!(
        ends[0]["data"]["reason"]["kind"], "completed",
        "{}",
        ends[0]
    );
}

/// A Claude Code PreToolUse hook with the matcher its users write for MCP tools (`mcp__.*`) sees
/// the call as Claude Code names it, `mcp__<server>__<tool>` with the tool's own arguments, and
/// its deny keeps the server from ever being called.
#[test]
fn a_pre_tool_use_matcher_for_mcp_tools_denies_the_call_before_the_server_sees_it() {
    let deny = json!({"hookSpecificOutput": {
        "hookEventName": "PreToolUse",
        "permissionDecision": "deny",
        "permissionDecisionReason": "no MCP writes here",
    }});
    let servers = format!(
        "[mcp_servers.probe]\ncommand = {:?}\nargs = [{:?}]\n",
        dsh_tests::mcp::python().display().to_string(),
        dsh_tests::mcp::probe_server().display().to_string(),
    );
    let w = World::new(|dir| Setup {
        hooks_toml: servers,
        ..Setup::claude_code(hook_file(&[(
            "PreToolUse",
            Some("mcp__.*"),
            &format!("cat > {}; echo '{deny}'", dir.q("payload.json")),
        )]))
    });
    let marker = w.path("marker");
    let agent = w.agent(&json!({"replies": [
        {"tool_calls": [{"name": "mcp__probe__write_file", "arguments": {"path": marker, "text": "x"}}]},
        {"text": "done"},
    ]}));
    let turn = w.prompt(&agent, "write through the server");
    assert_eq!(turn.kind(), "completed", "{:?}", turn.lines);
    assert!(!marker.exists(), "the denied MCP call reached the server");
    let results = turn.tool_results();
    assert_eq!(results[0]["isError"], true, "{}", results[0]);
    assert!(
        content(&turn).contains("no MCP writes here"),
        "{}",
        content(&turn)
    );
    let payload: Value = serde_json::from_str(&w.read("payload.json")).unwrap();
    assert_eq!(payload["tool_name"], "mcp__probe__write_file", "{payload}");
    assert_eq!(
        payload["tool_input"]["path"],
        marker.display().to_string(),
        "{payload}"
    );
}
