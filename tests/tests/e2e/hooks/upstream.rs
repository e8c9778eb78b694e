//! Public hook scripts, copied verbatim into `tests/fixtures/hooks/` (each one's repository, path
//! and commit are in `tests/fixtures/hooks/SOURCES.md`), run by the real daemon the way their
//! authors configured them. Each test checks something the script's own harness does that dsh
//! did not do before: Claude Code's `{`-only JSON rule, PostToolUseFailure, PermissionRequest and
//! Notification while a call waits for a person, Codex's subagent events and StopFailure (the
//! Claude-Code-format transcript is `transcripts.rs`, HTTP hooks `http.rs`).

use super::*;

/// `tests/fixtures/hooks/<rel>`.
pub(super) fn fixture(rel: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("fixtures/hooks")
        .join(rel)
}

/// Copies fixture `rel` to `to` (creating its directory), keeping its executable bit.
pub(super) fn install(rel: &str, to: &Path) {
    std::fs::create_dir_all(to.parent().unwrap()).unwrap();
    std::fs::copy(fixture(rel), to).unwrap();
}

/// The command running fixture `rel` where it lies, with `args`, quoted for bash.
pub(super) fn run_fixture(rel: &str, args: &str) -> String {
    format!("'{}' {args}", fixture(rel).display())
}

/// The `hook/result` records of `event` in `events`, as `(dialect, decision, summary)`.
pub(super) fn results_of(events: &[Value], event: &str) -> Vec<(String, String, String)> {
    of_type(events, "hook/result")
        .into_iter()
        .filter(|e| e["data"]["event"] == event)
        .map(|e| {
            let d = &e["data"];
            (
                d["dialect"].as_str().unwrap_or_default().to_owned(),
                d["decision"].as_str().unwrap_or_default().to_owned(),
                d["stderrSummary"].as_str().unwrap_or_default().to_owned(),
            )
        })
        .collect()
}

/// soundbluemusic/public-monorepo's whole `.claude` setup (settings.json and its five hooks),
/// installed in the session's project: its UserPromptSubmit reminder prints plain text that
/// starts with `[`, which Claude Code adds as context (only `{` starts JSON); its
/// PostToolUseFailure hook logs failed Bash calls to `.claude/failure.log`, with the error.
#[test]
fn a_real_projects_bracketed_reminder_is_context_and_its_failure_logger_logs() {
    dsh_core::test_support::require_jq();
    let w = World::new(|_| Setup {
        hooks_toml: "project_hooks = true".into(),
        ..Setup::default()
    });
    let claude = w.cwd.join(".claude");
    install(
        "public-monorepo/settings.json",
        &claude.join("settings.json"),
    );
    for hook in [
        "on-failure.sh",
        "response-rules.sh",
        "session-start.sh",
        "protect-files.sh",
        "biome-format.sh",
    ] {
        install(
            &format!("public-monorepo/hooks/{hook}"),
            &claude.join("hooks").join(hook),
        );
    }
    let agent = w.agent(&json!({"replies": [
        {"text": "checking", "tool_calls": [
            {"id": "ok", "name": "bash", "arguments": {"command": "echo fine"}},
            {"id": "bad", "name": "bash", "arguments": {"command": "ls no-such-dir"}},
        ]},
        {"text": "done"},
    ]}));
    let turn = w.prompt(&agent, "look around");
    assert_eq!(turn.kind(), "completed", "{:?}", turn.lines);
    let events = w.events(&agent);

    // The reminder reached the model as context, and the hook passed (it did not fail as
    // "stdout is not valid JSON").
    assert_eq!(
        results_of(&events, "UserPromptSubmit"),
        [("claude-code".into(), "pass".into(), String::new())]
    );
    let context: Vec<&str> = plugin_messages(&events)
        .iter()
        .filter_map(|e| e["data"]["message"]["text"].as_str())
        .collect();
    assert!(
        context
            .iter()
            .any(|t| t.starts_with("[응답 규칙 리마인더]")),
        "{context:?}"
    );

    // Only the failed call fired PostToolUseFailure; the logger saw its tool and error.
    let failures = results_of(&events, "PostToolUseFailure");
    assert_eq!(failures.len(), 1, "{failures:?}");
    let log = std::fs::read_to_string(claude.join("failure.log")).unwrap();
    assert_eq!(log.matches("Tool: Bash").count(), 1, "{log}");
    assert!(
        log.contains("  Error: ") && log.contains("no-such-dir"),
        "{log}"
    );
    let invoked: Vec<&Value> = of_type(&events, "hook/invoked")
        .into_iter()
        .filter(|e| e["data"]["event"] == "PostToolUseFailure")
        .collect();
    assert_eq!(invoked[0]["data"]["toolCallId"], "bad");
}

/// Claude Code fires PostToolUse only for a call that succeeded and PostToolUseFailure (with
/// `error` and `is_interrupt`) for one that exits non-zero or times out; Codex runs PostToolUse
/// for both. xhy0825/smart-teaching-system's PostToolUseFailure hook answers with context for
/// the model; openai/codex's `dump_payload.py` records what each dialect was sent.
#[test]
fn post_tool_use_failure_carries_the_error_and_its_context_reaches_the_model() {
    dsh_core::test_support::require_jq();
    dsh_core::test_support::require_python3();
    let w = World::new(|_| {
        let dump = |rel: &str| run_fixture("openai-codex/dump_payload.py", rel);
        Setup {
            claude_code: vec![hook_file(&[
                (
                    "PostToolUseFailure",
                    Some("Bash"),
                    &run_fixture("smart-teaching-system/post-tool-failure.sh", ""),
                ),
                ("PostToolUseFailure", None, &dump("cc-failure.jsonl")),
                ("PostToolUse", None, &dump("cc-post.jsonl")),
            ])],
            codex: vec![hook_file(&[(
                "PostToolUse",
                None,
                &dump("codex-post.jsonl"),
            )])],
            ..Setup::default()
        }
    });
    let agent = w.agent(&json!({"replies": [
        {"text": "trying", "tool_calls": [
            {"id": "ok", "name": "bash", "arguments": {"command": "echo fine"}},
            {"id": "exit", "name": "bash", "arguments": {"command": "echo broken >&2; exit 3"}},
            {"id": "slow", "name": "bash", "arguments": {"command": "sleep 30", "timeout_ms": 300}},
        ]},
        {"text": "done"},
    ]}));
    let turn = w.prompt(&agent, "try things");
    assert_eq!(turn.kind(), "completed", "{:?}", turn.lines);

    let ids = |name: &str| -> Vec<String> {
        let mut ids: Vec<String> =
            parse_lines(&std::fs::read_to_string(w.cwd.join(name)).unwrap_or_default())
                .iter()
                .map(|p| p["tool_use_id"].as_str().unwrap().to_owned())
                .collect();
        ids.sort();
        ids
    };
    assert_eq!(
        ids("cc-post.jsonl"),
        ["ok"],
        "Claude Code: PostToolUse only on success"
    );
    assert_eq!(ids("cc-failure.jsonl"), ["exit", "slow"]);
    assert_eq!(
        ids("codex-post.jsonl"),
        ["exit", "ok", "slow"],
        "Codex keeps PostToolUse for every call that ran"
    );
    let raw = w.read("proj/cc-failure.jsonl");
    let failures = parse_lines(&raw);
    for (line, f) in raw.lines().zip(&failures) {
        assert_eq!(f["hook_event_name"], "PostToolUseFailure");
        assert_eq!(f["tool_name"], "Bash");
        assert_eq!(f["is_interrupt"], false);
        // Claude Code's order: the tool fields, then the failure's.
        let keys = dsh_core::test_support::keys(line);
        assert!(
            keys.ends_with(&[
                "tool_name".into(),
                "tool_input".into(),
                "tool_use_id".into(),
                "error".into(),
                "is_interrupt".into(),
                "duration_ms".into()
            ]),
            "{keys:?}"
        );
    }
    let error = |id: &str| {
        failures.iter().find(|f| f["tool_use_id"] == id).unwrap()["error"]
            .as_str()
            .unwrap()
            .to_owned()
    };
    assert!(error("exit").contains("broken"), "{}", error("exit"));
    assert!(error("slow").contains("timed out"), "{}", error("slow"));

    // The hook's context is in the model's next request, once per failed call.
    let events = w.events(&agent);
    let context: String = plugin_messages(&events)
        .iter()
        .filter_map(|e| e["data"]["message"]["text"].as_str())
        .collect();
    assert_eq!(
        context
            .matches("[SDLC 工具失败] 阶段=P0，工具=Bash。")
            .count(),
        2,
        "{context}"
    );
}

/// The acceptance of PermissionRequest: xhy0825/smart-teaching-system's auto-approver allows
/// `git status` and leaves `rm -rf` to people, so under `approvals.policy = "always"` the first
/// runs with nobody answering (logged `by: hook` with the handler) and the second waits, is
/// shown to watchers, and is denied at the approval timeout. mgreenly/ikigai's Notification
/// logger hears the `permission_prompt` of the one request people were asked, before it was
/// shown; codex-brain-bootstrap's Codex PermissionRequest audit logs both requests.
#[test]
fn a_permission_request_hook_answers_for_git_status_and_leaves_rm_rf_to_people() {
    dsh_core::test_support::require_jq();
    let w = World::new(|dir| {
        // ikigai's logger writes to `<its dir>/../logs/current.log`, and only when it exists.
        let notify = dir.path("ikigai/hooks/notification.sh");
        install("ikigai/notification.sh", &notify);
        std::fs::create_dir_all(dir.path("ikigai/logs")).unwrap();
        std::fs::write(dir.path("ikigai/logs/current.log"), "").unwrap();
        Setup {
            claude_code: vec![hook_file(&[
                (
                    "PermissionRequest",
                    Some("Bash"),
                    &run_fixture("smart-teaching-system/permission-request.sh", ""),
                ),
                (
                    "Notification",
                    Some("permission_prompt"),
                    &dir.q("ikigai/hooks/notification.sh"),
                ),
            ])],
            codex: vec![hook_file(&[(
                "PermissionRequest",
                Some("Bash"),
                &run_fixture("codex-brain-bootstrap/permission-audit.sh", ""),
            )])],
            hooks_toml: "[approvals]\npolicy = \"always\"\ntimeout_ms = 1500".into(),
            ..Setup::default()
        }
    });
    let git = |args: &[&str]| {
        let out = Command::new("git")
            .args(args)
            .current_dir(&w.cwd)
            .output()
            .unwrap();
        assert!(out.status.success(), "git {args:?}: {out:?}");
    };
    git(&["init", "-q", "-b", "main"]);
    std::fs::create_dir(w.cwd.join("x")).unwrap();
    std::fs::write(w.cwd.join("x/keep"), "keep me").unwrap();
    let agent = w.agent(&json!({"replies": [
        {"text": "looking", "tool_calls": [
            {"id": "status", "name": "bash", "arguments": {"command": "git status"}},
            {"id": "wipe", "name": "bash", "arguments": {"command": "rm -rf x"}},
        ]},
        {"text": "done"},
    ]}));
    let turn = w.prompt(&agent, "tidy up");
    assert_eq!(turn.kind(), "completed", "{:?}", turn.lines);

    let result = |id: &str| {
        turn.tool_results()
            .into_iter()
            .find(|r| r["callId"] == id)
            .unwrap()
            .clone()
    };
    let status = result("status");
    assert_eq!(status["isError"], false, "{status}");
    assert!(
        status["content"]
            .as_str()
            .unwrap()
            .contains("On branch main"),
        "{status}"
    );
    let wipe = result("wipe");
    assert_eq!(wipe["isError"], true, "{wipe}");
    assert!(w.cwd.join("x/keep").exists(), "the unanswered rm -rf ran");

    let events = w.events(&agent);
    let decisions: Vec<&Value> = of_type(&events, "approval/decision");
    let by = |call: &str| {
        decisions
            .iter()
            .find(|d| d["data"]["callId"] == call)
            .map(|d| d["data"].clone())
            .unwrap()
    };
    let allowed = by("status");
    assert_eq!(
        (allowed["decision"].clone(), allowed["by"].clone()),
        (json!("allow"), json!("hook"))
    );
    let handlers = allowed["handlers"].as_array().unwrap();
    assert_eq!(handlers.len(), 1, "{allowed}");
    assert!(
        handlers[0]
            .as_str()
            .unwrap()
            .ends_with("#PermissionRequest[0][0]"),
        "{allowed}"
    );
    let denied = by("wipe");
    assert_eq!(
        (denied["decision"].clone(), denied["by"].clone()),
        (json!("deny"), json!("timeout"))
    );
    // Only the call left to people was shown to watchers, after its Notification hook ran.
    let requests = of_type(&events, "approval/request");
    assert_eq!(requests.len(), 1, "{requests:?}");
    assert_eq!(requests[0]["data"]["callId"], "wipe");
    let notified = of_type(&events, "hook/result")
        .into_iter()
        .find(|e| e["data"]["event"] == "Notification")
        .unwrap();
    assert!(seq(notified) < seq(requests[0]));
    let log = std::fs::read_to_string(w.path("ikigai/logs/current.log")).unwrap();
    assert_eq!(log.matches("Type: permission_prompt").count(), 1, "{log}");
    assert!(
        log.contains("Claude needs your permission to use Bash"),
        "{log}"
    );

    // The Codex audit heard both requests (it decides nothing).
    let audit = std::fs::read_to_string(w.cwd.join("brain/tasks/.permission-audit.log")).unwrap();
    assert!(audit.contains("| tool=Bash | cmd=git status |"), "{audit}");
    assert!(audit.contains("| tool=Bash | cmd=rm -rf x |"), "{audit}");
}

/// Codex fires SubagentStart and SubagentStop around a `spawn_agent` child (codex-rs's
/// subagent inputs: the parent's session, `turn_id`, the child's `agent_id` and `agent_type`,
/// its transcript and answer). openai/codex's `dump_payload.py` records them;
/// codex-brain-bootstrap's SubagentStop hook prints plain text, which Codex calls invalid output.
#[test]
fn codex_hears_a_child_agent_start_and_stop() {
    dsh_core::test_support::require_jq();
    dsh_core::test_support::require_python3();
    let w = World::new(|_| {
        let dump = run_fixture("openai-codex/dump_payload.py", "subagents.jsonl");
        Setup {
            codex: vec![hook_file(&[
                ("SubagentStart", None, &dump),
                ("SubagentStop", None, &dump),
                (
                    "SubagentStop",
                    None,
                    &run_fixture("codex-brain-bootstrap/subagent-stop.sh", ""),
                ),
            ])],
            ..Setup::default()
        }
    });
    let agent = w.agent(&json!({"replies": [
        {"text": "delegating", "tool_calls": [
            {"id": "kid", "name": "spawn_agent", "arguments": {"prompt": "count to three"},
             "child_script": {"replies": [{"text": "one two three"}]}},
        ]},
        {"text": "done"},
    ]}));
    assert_eq!(w.prompt(&agent, "go").kind(), "completed");
    let payloads = parse_lines(&w.read("proj/subagents.jsonl"));
    assert_eq!(payloads.len(), 2, "{payloads:?}");
    let (start, stop) = (&payloads[0], &payloads[1]);
    assert_eq!(start["hook_event_name"], "SubagentStart");
    assert_eq!(stop["hook_event_name"], "SubagentStop");
    for p in [start, stop] {
        assert_eq!(p["session_id"], agent.as_str());
        assert_eq!(p["turn_id"], "1");
        assert_eq!(p["agent_type"], "general-purpose");
        assert_ne!(p["agent_id"], agent.as_str());
    }
    assert_eq!(start["agent_id"], stop["agent_id"]);
    assert_eq!(stop["last_assistant_message"], "one two three");
    assert_eq!(stop["stop_hook_active"], false);
    assert!(stop.get("agent_transcript_path").is_some());
    let events = w.events(&agent);
    let stops = results_of(&events, "SubagentStop");
    assert_eq!(stops.len(), 2, "{stops:?}");
    let plain = &stops[1];
    assert_eq!(plain.0, "codex");
    assert_eq!(plain.1, "error");
    assert!(
        plain
            .2
            .contains("hook returned invalid subagent stop JSON output"),
        "{plain:?}"
    );
}

/// Both harnesses fire StopFailure when a turn ends in an error, with the error's kind (its
/// matcher subject) and details; its output changes nothing. Codex's payload adds `turn_id` and
/// `model` (codex-rs's stop-failure input).
#[test]
fn a_turn_that_ends_in_an_error_fires_stop_failure() {
    dsh_core::test_support::require_python3();
    let w = World::new(|_| {
        let dump = |rel: &str| run_fixture("openai-codex/dump_payload.py", rel);
        Setup {
            claude_code: vec![hook_file(&[(
                "StopFailure",
                Some("unknown"),
                &dump("stop-failure.jsonl"),
            )])],
            codex: vec![hook_file(&[(
                "StopFailure",
                None,
                &dump("codex-stop-failure.jsonl"),
            )])],
            ..Setup::default()
        }
    });
    // The script runs out before the model answers the call's result: the turn fails.
    let agent = w.agent(&json!({"replies": [
        {"text": "one call", "tool_calls": [{"name": "bash", "arguments": {"command": "true"}}]},
    ]}));
    let turn = w.prompt(&agent, "go");
    assert_eq!(turn.kind(), "error", "{:?}", turn.lines);
    let payloads = parse_lines(&w.read("proj/stop-failure.jsonl"));
    assert_eq!(payloads.len(), 1, "{payloads:?}");
    let p = &payloads[0];
    assert_eq!(p["hook_event_name"], "StopFailure");
    assert_eq!(p["error"], "unknown");
    assert!(
        p["error_details"]
            .as_str()
            .unwrap()
            .contains("script is exhausted"),
        "{p}"
    );
    assert_eq!(p["last_assistant_message"], "one call");
    let raw = w.read("proj/codex-stop-failure.jsonl");
    assert_eq!(
        dsh_core::test_support::keys(raw.trim()),
        [
            "session_id",
            "turn_id",
            "transcript_path",
            "cwd",
            "hook_event_name",
            "model",
            "permission_mode",
            "error",
            "error_details",
            "last_assistant_message"
        ]
    );
    let c = parse(&raw);
    assert_eq!(
        (c["turn_id"].clone(), c["error"].clone()),
        (json!("1"), json!("unknown"))
    );
    assert_eq!(c["error_details"], p["error_details"]);
    // Its records are the turn's: before turn/end.
    let events = w.events(&agent);
    let result = of_type(&events, "hook/result")
        .into_iter()
        .find(|e| e["data"]["event"] == "StopFailure")
        .unwrap();
    assert!(seq(result) < seq(of_type(&events, "turn/end")[0]));
}
