//! What each dialect's hook output does in its own harness, end to end: plain SessionStart text
//! reaching the model, `continue: false` stopping where each reference stops with `stopReason`
//! delivered to the client, PostToolUse feedback (Claude Code: beside the output; Codex: instead
//! of it), `updatedInput` rewrites, `systemMessage` for the user, and SessionEnd on close.
//! (The public patterns these stand for are listed in `patterns.rs`.)

use dsh_testkit::{Mock, ok_stream};

use super::*;

/// A world whose hooks run `body` (saved as an executable script) on each `(event, matcher)`.
fn world_with(dialect: Dialect, body: &str, entries: &[(&str, Option<&str>)]) -> World {
    dsh_core::test_support::require_jq();
    World::new(|dir| {
        let command = dir.script("hook", body);
        let entries: Vec<(&str, Option<&str>, &str)> = entries
            .iter()
            .map(|(event, matcher)| (*event, *matcher, command.as_str()))
            .collect();
        Setup::dialect(dialect, hook_file(&entries))
    })
}

/// A hook script that saves its payload to `<dir>/<event>.json` and prints `output`.
fn printing(output: &Value) -> String {
    format!(
        "#!/usr/bin/env bash\ninput=$(cat)\nevent=$(printf '%s' \"$input\" | jq -r .hook_event_name)\n\
         printf '%s' \"$input\" > \"$(dirname \"$0\")/$event.json\"\nprintf '%s\\n' '{output}'\n"
    )
}

fn content<'a>(turn: &'a Turn, id: &str) -> &'a str {
    turn.tool_results()
        .into_iter()
        .find(|r| r["callId"] == id)
        .and_then(|r| r["content"].as_str())
        .unwrap_or_else(|| panic!("no result for {id}: {:?}", turn.lines))
}

const GIT_CONTEXT: &str = r#"#!/bin/bash
# SessionStart: orientation for the model - branch, status, recent commits.
cd "$(jq -r .cwd)" || exit 0
echo "Branch: $(git rev-parse --abbrev-ref HEAD 2>/dev/null || echo unknown)"
echo ""
echo "Git Status:"
git status --short 2>/dev/null | head -10
echo ""
echo "Recent Commits:"
git log --oneline -5 2>/dev/null || echo "No commits"
exit 0
"#;

/// Pattern 8: plain text from SessionStart is context in the first model request, in both
/// dialects ("stdout is added as context" in both references).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_start_plain_text_is_in_the_first_model_request() {
    dsh_core::test_support::require_jq();
    let mock = Mock::start(vec![ok_stream("Ready.")]).await;
    let base_url = mock.base_url.clone();
    let w = World::new(move |dir| {
        let command = dir.script("session-start.sh", GIT_CONTEXT);
        let file = hook_file(&[("SessionStart", None, &command)]);
        Setup {
            claude_code: vec![file.clone()],
            codex: vec![file],
            hooks_toml: format!(
                "[model]\nprovider = \"openai\"\nbase_url = \"{base_url}\"\nretries = 0\n"
            ),
            env: vec![("DEEPSEEK_API_KEY".into(), "sk-test-hooks".into())],
            ..Setup::default()
        }
    });
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(args)
            .current_dir(&w.cwd)
            .env("GIT_AUTHOR_NAME", "t")
            .env("GIT_AUTHOR_EMAIL", "t@example.com")
            .env("GIT_COMMITTER_NAME", "t")
            .env("GIT_COMMITTER_EMAIL", "t@example.com")
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    git(&["init", "-q", "-b", "feature-login"]);
    std::fs::write(w.cwd.join("app.py"), "print('hi')\n").unwrap();
    git(&["add", "app.py"]);
    git(&["commit", "-q", "-m", "Add the login form"]);
    std::fs::write(w.cwd.join("app.py"), "print('changed')\n").unwrap();

    let (socket, cwd) = (w.daemon.socket.clone(), w.cwd.clone());
    let turn = tokio::task::spawn_blocking(move || {
        let info = dsh_tests::dshctl_at(
            &socket,
            &[
                "--json",
                "agent",
                "new",
                "--model",
                "openai",
                "--cwd",
                cwd.to_str().unwrap(),
            ],
        );
        let info: Value = serde_json::from_slice(&info.stdout).unwrap();
        let agent = info["agent_id"].as_str().unwrap().to_owned();
        let out = dsh_tests::dshctl_at(&socket, &["--json", "prompt", "--agent", &agent, "hi"]);
        Turn::parse(&out.stdout, &String::from_utf8_lossy(&out.stderr))
    })
    .await
    .unwrap();
    assert_eq!(turn.kind(), "completed", "{:?}", turn.lines);

    let requests = mock.requests();
    assert_eq!(requests.len(), 1);
    let messages = requests[0].body["messages"].as_array().unwrap();
    let user_texts: Vec<&str> = messages
        .iter()
        .filter(|m| m["role"] == "user")
        .filter_map(|m| m["content"].as_str())
        .collect();
    // The prompt, then one context message per dialect, each the script's whole stdout.
    assert_eq!(user_texts.len(), 3, "{messages:#?}");
    assert_eq!(user_texts[0], "hi");
    for context in &user_texts[1..] {
        assert!(context.contains("Branch: feature-login"), "{context}");
        assert!(context.contains(" M app.py"), "{context}");
        assert!(context.contains("Add the login form"), "{context}");
    }
}

/// Runs a turn of a world whose only hook prints `{"continue": false, "stopReason": ...}` on
/// `event`; the model's script would create `marker` and then answer twice.
fn stopped_turn(dialect: Dialect, event: &str) -> (World, String, Turn) {
    let stop =
        json!({"continue": false, "stopReason": "Build failed, fix errors before continuing"});
    let w = world_with(dialect, &printing(&stop), &[(event, None)]);
    let agent = w.agent(&json!({"replies": [
        bash_reply("making the marker", &format!("touch {}", w.q("marker"))),
        {"text": "second answer"},
        {"text": "third answer"},
    ]}));
    let turn = w.prompt(&agent, "go");
    (w, agent, turn)
}

fn assert_stopped(turn: &Turn, label: &str) {
    assert_eq!(turn.kind(), "stopped", "{label}: {:?}", turn.lines);
    assert_eq!(
        turn.message(),
        "Build failed, fix errors before continuing",
        "{label}: the stopReason reaches the client"
    );
}

/// Pattern 13, on UserPromptSubmit: the prompt is not processed (no model request, nothing
/// logged of it), in both dialects.
#[test]
fn continue_false_on_user_prompt_submit_stops_before_the_model() {
    for dialect in Dialect::ALL {
        let (w, agent, turn) = stopped_turn(dialect, "UserPromptSubmit");
        assert_stopped(&turn, &format!("{dialect:?}"));
        assert!(turn.of_type("step/start").is_empty(), "{dialect:?}");
        let events = w.events(&agent);
        assert!(of_type(&events, "user/message").is_empty(), "{events:#?}");
        let end = of_type(&events, "turn/end")[0];
        assert_eq!(end["data"]["reason"]["kind"], "stopped");
        assert_eq!(
            end["data"]["reason"]["reason"],
            "Build failed, fix errors before continuing"
        );
        assert!(!w.path("marker").exists());
    }
}

/// Pattern 13, on PreToolUse: the call does not run and the turn ends after its step. Claude Code
/// "stops processing entirely"; Codex calls `continue: false` unsupported here and would run the
/// call, which dsh does not (CONFIG.md: stricter for safety).
#[test]
fn continue_false_on_pre_tool_use_refuses_the_call_and_stops() {
    for dialect in Dialect::ALL {
        let (w, agent, turn) = stopped_turn(dialect, "PreToolUse");
        assert_stopped(&turn, &format!("{dialect:?}"));
        assert!(!w.path("marker").exists(), "{dialect:?}: the call ran");
        assert_eq!(
            turn.of_type("assistant/message").len(),
            1,
            "no second model request"
        );
        assert_eq!(turn.text(), "making the marker");
        let events = w.events(&agent);
        let result = of_type(&events, "tool/result")[0];
        assert_eq!(result["data"]["isError"], true);
        let records: Vec<&str> = of_type(&events, "hook/result")
            .iter()
            .map(|e| e["data"]["decision"].as_str().unwrap())
            .collect();
        assert_eq!(records, ["stop"], "{dialect:?}");
        // The script was not consumed: the next turn gets the next reply.
        let next = w.prompt(&agent, "again");
        assert_eq!(next.kind(), "completed");
        assert_eq!(next.text(), "second answer");
    }
}

/// Pattern 13, on Stop: `continue: false` takes precedence over a block; the turn ends stopped
/// with the model's answer.
#[test]
fn continue_false_on_stop_wins_over_a_block() {
    for dialect in Dialect::ALL {
        let out = json!({"continue": false, "stopReason": "Build failed, fix errors before continuing",
                         "decision": "block", "reason": "keep going"});
        let w = world_with(dialect, &printing(&out), &[("Stop", None)]);
        let agent = w.agent(&json!({"replies": [{"text": "first"}, {"text": "second"}]}));
        let turn = w.prompt(&agent, "go");
        assert_stopped(&turn, &format!("{dialect:?}"));
        assert_eq!(turn.text(), "first", "{dialect:?}: no continuation");
        assert!(plugin_messages(&w.events(&agent)).is_empty());
    }
}

/// PostToolUse `continue: false`: Claude Code stops after the call (its output stays); Codex
/// replaces the result with the stop text and goes on ("continue from there").
#[test]
fn continue_false_on_post_tool_use_by_dialect() {
    let (w, agent, turn) = stopped_turn(Dialect::ClaudeCode, "PostToolUse");
    assert_stopped(&turn, "claude-code");
    assert!(w.path("marker").exists());
    assert_eq!(turn.of_type("assistant/message").len(), 1);
    let _ = agent;

    let (w, _agent, turn) = stopped_turn(Dialect::Codex, "PostToolUse");
    assert_eq!(turn.kind(), "completed", "{:?}", turn.lines);
    assert!(w.path("marker").exists());
    assert_eq!(turn.text(), "second answer");
    assert_eq!(
        turn.tool_results()[0]["content"],
        "Build failed, fix errors before continuing"
    );
}

/// Pattern 15: lint feedback after a command. Claude Code: the output stays and the reason is
/// shown to the model next to it (exit 2 "shows stderr to Claude"; `decision: "block"` "prompts
/// Claude with the reason"). Codex: "replaces the tool result with that feedback".
#[test]
fn post_tool_use_block_feedback_by_dialect() {
    let exit_two =
        "#!/usr/bin/env bash\ncat > /dev/null\necho 'lint: 3 problems in app.py' >&2\nexit 2\n";
    let block = printing(&json!({"decision": "block", "reason": "lint: 3 problems in app.py"}));
    for (dialect, body) in [
        (Dialect::ClaudeCode, exit_two),
        (Dialect::ClaudeCode, block.as_str()),
        (Dialect::Codex, exit_two),
        (Dialect::Codex, block.as_str()),
    ] {
        let w = world_with(dialect, body, &[("PostToolUse", Some("Bash"))]);
        let agent = w.agent(&json!({"replies": [
            bash_reply("formatting", "echo FORMATTED-OUTPUT"),
            {"text": "done"},
        ]}));
        let turn = w.prompt(&agent, "format");
        assert_eq!(turn.kind(), "completed", "{dialect:?}");
        let events = w.events(&agent);
        let result = of_type(&events, "tool/result")[0]["data"]["content"]
            .as_str()
            .unwrap();
        let feedback: Vec<&str> = plugin_messages(&events)
            .iter()
            .map(|e| e["data"]["message"]["text"].as_str().unwrap())
            .collect();
        match dialect {
            Dialect::ClaudeCode => {
                assert!(
                    result.contains("FORMATTED-OUTPUT"),
                    "the output stays: {result}"
                );
                assert_eq!(feedback.len(), 1, "{events:#?}");
                assert!(feedback[0].contains("lint: 3 problems in app.py"));
            }
            Dialect::Codex => {
                assert_eq!(result, "lint: 3 problems in app.py");
                assert!(feedback.is_empty(), "{feedback:?}");
            }
        }
        // Both reach the model before its next answer.
        let answers = of_type(&events, "assistant/message");
        assert!(seq(of_type(&events, "tool/result")[0]) < seq(answers[1]));
        if let Some(message) = plugin_messages(&events).first() {
            assert!(seq(message) < seq(answers[1]));
        }
    }
}

const REWRITE: &str = r#"#!/usr/bin/env bash
# PreToolUse: rewrites a command to its project-approved form, keeping the other input fields.
INPUT=$(cat)
CMD=$(echo "$INPUT" | jq -r '.tool_input.command // empty')
case "$CMD" in
  "cat secrets.txt") REWRITTEN="echo REWRITTEN-BY-HOOK > ran.txt; echo REWRITTEN-BY-HOOK" ;;
  *) exit 0 ;;
esac
ORIGINAL_INPUT=$(echo "$INPUT" | jq -c '.tool_input')
UPDATED_INPUT=$(echo "$ORIGINAL_INPUT" | jq --arg cmd "$REWRITTEN" '.command = $cmd')
jq -n --argjson updated "$UPDATED_INPUT" '{
  "hookSpecificOutput": {
    "hookEventName": "PreToolUse",
    "permissionDecision": "allow",
    "permissionDecisionReason": "auto-rewrite",
    "updatedInput": $updated
  }
}'
"#;

/// Pattern 11: `updatedInput` beside `allow` runs the rewritten command; the log keeps the
/// model's call and the rewrite.
#[test]
fn updated_input_runs_the_rewritten_command() {
    for dialect in Dialect::ALL {
        let w = world_with(dialect, REWRITE, &[("PreToolUse", Some("Bash"))]);
        std::fs::write(w.cwd.join("secrets.txt"), "TOP-SECRET\n").unwrap();
        let agent = w.agent(&json!({"replies": [
            {"text": "reading", "tool_calls": [{"id": "c1", "name": "bash", "arguments": {
                "command": "cat secrets.txt", "description": "read it", "timeout_ms": 30000}}]},
            {"text": "done"},
        ]}));
        let turn = w.prompt(&agent, "read the file");
        assert_eq!(turn.kind(), "completed", "{dialect:?}");
        let out = content(&turn, "c1");
        assert!(out.contains("REWRITTEN-BY-HOOK"), "{dialect:?}: {out}");
        assert!(
            !out.contains("TOP-SECRET"),
            "{dialect:?}: the original ran: {out}"
        );
        assert_eq!(w.read("proj/ran.txt"), "REWRITTEN-BY-HOOK\n");

        let events = w.events(&agent);
        let call = of_type(&events, "tool/call")[0];
        assert_eq!(call["data"]["arguments"]["command"], "cat secrets.txt");
        let rewritten = of_type(&events, "tool/rewritten");
        assert_eq!(rewritten.len(), 1, "{events:#?}");
        assert_eq!(rewritten[0]["data"]["callId"], "c1");
        let args = &rewritten[0]["data"]["arguments"];
        assert!(
            args["command"]
                .as_str()
                .unwrap()
                .starts_with("echo REWRITTEN-BY-HOOK")
        );
        // What the hook did not see or change keeps its value.
        assert_eq!(args["timeout_ms"], 30000, "{dialect:?}: {args}");
    }
}

/// `updatedInput` the dialect's rules make invalid refuses the call: Codex takes it only beside
/// `allow` (upstream would run the original command), Claude Code's Bash needs a `command`.
#[test]
fn an_invalid_updated_input_refuses_the_call() {
    for (dialect, output) in [
        (
            Dialect::Codex,
            json!({"hookSpecificOutput": {"hookEventName": "PreToolUse",
                   "updatedInput": {"command": "echo rewritten"}}}),
        ),
        (
            Dialect::ClaudeCode,
            json!({"hookSpecificOutput": {"hookEventName": "PreToolUse",
                   "permissionDecision": "allow", "updatedInput": {"cmd": "echo rewritten"}}}),
        ),
    ] {
        let w = world_with(dialect, &printing(&output), &[("PreToolUse", None)]);
        let agent = w.agent(&json!({"replies": [
            bash_reply("marking", &format!("touch {}", w.q("marker"))),
            {"text": "done"},
        ]}));
        let turn = w.prompt(&agent, "go");
        assert!(!w.path("marker").exists(), "{dialect:?}: the original ran");
        let result = &turn.tool_results()[0];
        assert_eq!(result["isError"], true);
        assert!(
            result["content"].as_str().unwrap().contains("updatedInput"),
            "{result}"
        );
        assert!(of_type(&w.events(&agent), "tool/rewritten").is_empty());
    }
}

/// Pattern 14: a hook's `systemMessage` is for the user: it reaches the client as a turn event
/// and `dshctl prompt` shows it, in both dialects; the model never sees it.
#[test]
fn system_messages_reach_the_client() {
    for dialect in Dialect::ALL {
        let out = json!({"systemMessage": "Tests passed after editing app.py"});
        let w = world_with(dialect, &printing(&out), &[("PostToolUse", Some("Bash"))]);
        let agent = w.agent(&json!({"replies": [
            bash_reply("testing", "echo ok"),
            {"text": "done"},
            bash_reply("again", "echo ok"),
            {"text": "done again"},
        ]}));
        let turn = w.prompt(&agent, "test");
        let hooks = turn.of_type("hook/result");
        assert_eq!(hooks.len(), 1, "{:?}", turn.lines);
        assert_eq!(
            hooks[0]["data"]["systemMessage"], "Tests passed after editing app.py",
            "{dialect:?}"
        );
        let events = w.events(&agent);
        assert!(plugin_messages(&events).is_empty(), "not for the model");
        let record = of_type(&events, "hook/result")[0];
        assert_eq!(
            record["data"]["systemMessage"],
            "Tests passed after editing app.py"
        );

        let human = w
            .daemon
            .dshctl(&["prompt", "--agent", &agent, "test again"]);
        let text = String::from_utf8_lossy(&human.stdout);
        assert!(
            text.contains("⚠ Tests passed after editing app.py"),
            "{dialect:?}: {text}"
        );
    }
}

const BACKUP_ON_END: &str = r#"#!/usr/bin/env bash
# SessionEnd: keeps a copy of the session's transcript.
input=$(cat)
dir=$(dirname "$0")
printf '%s' "$input" > "$dir/session-end.json"
transcript=$(printf '%s' "$input" | jq -r '.transcript_path // empty')
[ -n "$transcript" ] && [ -f "$transcript" ] || exit 0
cp "$transcript" "$dir/transcript-backup.jsonl"
"#;

/// Pattern 12: closing an agent ends its session: SessionEnd runs with `reason` and the
/// session's `transcript_path` (from the backend's `locate()` then), which it can read.
#[test]
fn closing_an_agent_runs_session_end_with_its_transcript() {
    for dialect in Dialect::ALL {
        let w = world_with(dialect, BACKUP_ON_END, &[("SessionEnd", None)]);
        let agent = w.agent(&json!({"replies": [{"text": "hello"}]}));
        assert_eq!(w.prompt(&agent, "hi").kind(), "completed");
        assert!(!w.path("session-end.json").exists(), "not before the close");
        let located = w.locate(&agent).unwrap();

        w.daemon.dshctl_json(&["agent", "close", &agent]);
        let payload = parse(&w.read("session-end.json"));
        assert_eq!(payload["hook_event_name"], "SessionEnd");
        assert_eq!(payload["session_id"], agent.as_str());
        assert_eq!(payload["reason"], "other");
        assert_eq!(payload["transcript_path"], located.as_str(), "{dialect:?}");
        let backup = w.read("transcript-backup.jsonl");
        assert!(backup.contains("\"turn/end\""), "{dialect:?}: {backup}");
        // The hook's records were saved with the session.
        let events = w.events(&agent);
        let ends: Vec<&Value> = of_type(&events, "hook/result")
            .into_iter()
            .filter(|e| e["data"]["event"] == "SessionEnd")
            .collect();
        assert_eq!(ends.len(), 1, "{dialect:?}");
    }
}

/// Without a per-session file the transcript rules are unchanged: `""` for Claude Code, `null`
/// for Codex.
#[test]
fn session_end_without_a_transcript_file() {
    for (dialect, expected) in [
        (Dialect::ClaudeCode, json!("")),
        (Dialect::Codex, Value::Null),
    ] {
        let w = world_with(dialect, BACKUP_ON_END, &[("SessionEnd", None)]);
        let agent = w.agent(&json!({"replies": [{"text": "hello"}]}));
        assert_eq!(w.prompt(&agent, "hi").kind(), "completed");
        let backend = w.daemon.dshctl_json(&["persistence", "use", "sqlite"]);
        assert_eq!(backend["name"], "sqlite", "{backend}");
        w.daemon.dshctl_json(&["agent", "close", &agent]);
        let payload = parse(&w.read("session-end.json"));
        assert_eq!(payload["transcript_path"], expected, "{dialect:?}");
        assert!(!w.path("transcript-backup.jsonl").exists());
    }
}
