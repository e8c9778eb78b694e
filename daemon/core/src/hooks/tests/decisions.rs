//! Decisions from real hook processes: exit codes, JSON on stdout, merging, records.

use serde_json::json;

use super::*;
use crate::hooks::{Decision, Dialect, MergedOutcome, SessionSource};

fn bash_ls() -> HookEvent {
    pre_tool("bash", json!({"command": "ls"}))
}

/// A command printing `json` on stdout.
fn print(json: &Value) -> String {
    format!("printf '%s' '{json}'")
}

#[tokio::test]
async fn exit_two_denies_with_stderr_and_ignores_stdout() {
    let fx = Fx::new();
    let hooks = fx.cc(&config(
        "PreToolUse",
        Some("Bash"),
        &[r#"echo '{"hookSpecificOutput":{"permissionDecision":"allow"}}'; echo 'bash is disabled by policy' >&2; exit 2"#],
    ));
    let run = hooks.run(&fx.ctx(), bash_ls()).await;
    assert_eq!(run.outcome.decision, Decision::Deny);
    assert_eq!(
        run.outcome.reason.as_deref(),
        Some("bash is disabled by policy")
    );
    let path = fx.path("cc/settings.json").display().to_string();
    assert_eq!(
        run.records,
        [
            EventData::HookInvoked {
                dialect: "claude-code".into(),
                event: "PreToolUse".into(),
                handler: format!("{path}#PreToolUse[0][0]"),
                turn: Some(3),
                tool_call_id: Some("call-1".into()),
            },
            EventData::HookResult {
                dialect: "claude-code".into(),
                event: "PreToolUse".into(),
                handler: format!("{path}#PreToolUse[0][0]"),
                decision: "block".into(),
                exit_code: Some(2),
                stderr_summary: Some("bash is disabled by policy".into()),
                duration_ms: match &run.records[1] {
                    EventData::HookResult { duration_ms, .. } => *duration_ms,
                    _ => unreachable!(),
                },
                system_message: None,
                sandbox: None,
            }
        ]
    );

    // Empty stderr: the default reason. Claude Code blocks anyway; Codex would fail open, and dsh
    // blocks too, recording upstream's complaint.
    for (hooks, summary) in [
        (fx.cc(&config("PreToolUse", None, &["exit 2"])), None),
        (
            fx.codex(&config("PreToolUse", None, &["exit 2"])),
            Some("did not write a blocking reason to stderr"),
        ),
    ] {
        let run = hooks.run(&fx.ctx(), bash_ls()).await;
        assert_eq!(run.outcome.decision, Decision::Deny);
        assert_eq!(
            run.outcome.reason.as_deref(),
            Some("blocked by PreToolUse hook")
        );
        let EventData::HookResult {
            stderr_summary,
            exit_code,
            decision,
            ..
        } = results(&run)[0]
        else {
            unreachable!()
        };
        assert_eq!((decision.as_str(), *exit_code), ("block", Some(2)));
        match summary {
            None => assert_eq!(*stderr_summary, None),
            Some(s) => assert!(stderr_summary.as_deref().unwrap().contains(s)),
        }
    }
}

#[tokio::test]
async fn json_permission_decisions() {
    let fx = Fx::new();
    // (decision, Claude Code's outcome, Codex's outcome and record). Codex supports only deny
    // here: `allow` without updatedInput is unsupported and fails open (the call runs, as with
    // allow), `ask` is unsupported and dsh denies rather than run it.
    for (decision, cc_expected, codex_expected, codex_record) in [
        ("deny", Decision::Deny, Decision::Deny, "deny"),
        ("ask", Decision::Ask, Decision::Deny, "block"),
        ("allow", Decision::Allow, Decision::None, "error"),
    ] {
        let out = json!({"hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": decision,
            "permissionDecisionReason": format!("because {decision}")
        }});
        let root = config("PreToolUse", Some("Bash"), &[&print(&out)]);
        for (dialect, hooks, expected, record) in [
            (Dialect::ClaudeCode, fx.cc(&root), cc_expected, decision),
            (
                Dialect::Codex,
                fx.codex(&root),
                codex_expected,
                codex_record,
            ),
        ] {
            let run = hooks.run(&fx.ctx(), bash_ls()).await;
            assert_eq!(run.outcome.decision, expected, "{decision} {dialect:?}");
            assert_eq!(decisions(&run), [record], "{decision} {dialect:?}");
            let reason = (expected >= Decision::Ask).then(|| format!("because {decision}"));
            assert_eq!(run.outcome.reason, reason, "{decision} {dialect:?}");
        }
    }
}

#[tokio::test]
async fn post_tool_use_block_is_feedback_for_claude_code_and_a_replacement_for_codex() {
    let fx = Fx::new();
    let block = print(&json!({
        "decision": "block",
        "reason": "lint failed",
        "hookSpecificOutput": {"hookEventName": "PostToolUse", "additionalContext": "see the linter"}
    }));
    let event = || {
        post_tool(
            "bash",
            json!({"command": "ls"}),
            bash_output("out\n", "", 0),
        )
    };
    let run = fx
        .cc(&config("PostToolUse", None, &[&block]))
        .run(&fx.ctx(), event())
        .await;
    assert_eq!(decisions(&run), ["block"]);
    // The tool already ran: nothing is denied; the reason is feedback next to its output.
    assert_eq!(run.outcome.decision, Decision::None);
    assert_eq!(
        run.outcome.feedback,
        [("hooks-claude-code", "lint failed".to_owned())]
    );
    assert_eq!(run.outcome.replacement, None);
    assert_eq!(
        run.outcome.additional_context,
        [("hooks-claude-code", "see the linter".to_owned())]
    );

    let run = fx
        .codex(&config("PostToolUse", None, &[&block]))
        .run(&fx.ctx(), event())
        .await;
    assert_eq!(decisions(&run), ["block"]);
    assert_eq!(run.outcome.decision, Decision::None);
    assert!(run.outcome.feedback.is_empty());
    assert_eq!(run.outcome.replacement.as_deref(), Some("lint failed"));
    assert_eq!(
        run.outcome.additional_context,
        [("hooks-codex", "see the linter".to_owned())]
    );
}

#[tokio::test]
async fn continue_false_stops_with_its_reason_and_system_messages_reach_the_record() {
    let fx = Fx::new();
    let hooks = fx.cc(&config(
        "Stop",
        None,
        &[&print(
            &json!({"continue": false, "stopReason": "halt", "systemMessage": "bye", "decision": "block", "reason": "more"}),
        )],
    ));
    let stop = HookEvent::Stop {
        stop_hook_active: false,
        last_assistant_message: None,
    };
    let run = hooks.run(&fx.ctx(), stop).await;
    assert_eq!(decisions(&run), ["stop"]);
    assert!(run.outcome.stop);
    assert_eq!(run.outcome.stop_reason.as_deref(), Some("halt"));
    assert_eq!(run.outcome.system_messages, ["bye"]);
    assert!(matches!(
        results(&run)[0],
        EventData::HookResult { system_message: Some(m), .. } if m == "bye"
    ));
}

#[tokio::test]
async fn another_events_fields_are_ignored() {
    let fx = Fx::new();
    let hooks = fx.cc(&config(
        "PreToolUse",
        None,
        &[&print(&json!({"hookSpecificOutput": {
            "hookEventName": "UserPromptSubmit",
            "permissionDecision": "deny",
            "additionalContext": "not for this event"
        }}))],
    ));
    let run = hooks.run(&fx.ctx(), bash_ls()).await;
    assert_eq!(decisions(&run), ["pass"]);
    assert_eq!(run.outcome, MergedOutcome::default());
}

#[tokio::test]
async fn failures_are_non_blocking_errors() {
    let fx = Fx::new();
    let cases = [
        ("echo oops >&2; exit 1", Some(1), "oops\n[exit code 1]"),
        (
            "printf '{\"decision\": \"block\"'",
            Some(0),
            "[stdout is not valid JSON",
        ),
        ("no-such-command-xyz", Some(127), "command not found"),
        ("kill -9 $$", None, "[killed by signal SIGKILL]"),
    ];
    for (command, exit, summary) in cases {
        let hooks = fx.cc(&config("PreToolUse", None, &[command, "exit 0"]));
        let run = hooks.run(&fx.ctx(), bash_ls()).await;
        assert_eq!(run.outcome, MergedOutcome::default(), "{command}");
        assert_eq!(decisions(&run), ["error", "pass"], "{command}");
        let EventData::HookResult {
            exit_code,
            stderr_summary,
            ..
        } = results(&run)[0]
        else {
            unreachable!()
        };
        assert_eq!(*exit_code, exit, "{command}");
        let s = stderr_summary.as_deref().unwrap();
        assert!(s.contains(summary), "{command}: {s}");
    }
}

#[tokio::test]
async fn a_spawn_failure_is_a_non_blocking_error() {
    let fx = Fx::new();
    // The session cwd is gone: nothing can start there.
    let mut header = (*fx.header).clone();
    header.cwd = fx.path("gone");
    let ctx = HookContext {
        header: Arc::new(header),
        ..fx.ctx()
    };
    let hooks = fx.cc(&config("UserPromptSubmit", None, &["exit 2"]));
    let run = hooks.run(&ctx, prompt("p")).await;
    assert_eq!(run.outcome, MergedOutcome::default());
    assert_eq!(decisions(&run), ["error"]);
    let EventData::HookResult {
        exit_code,
        stderr_summary,
        ..
    } = results(&run)[0]
    else {
        unreachable!()
    };
    assert_eq!(*exit_code, None);
    assert!(
        stderr_summary
            .as_deref()
            .unwrap()
            .contains("could not run the hook")
    );

    // The shell itself cannot be started.
    let config_ = ExecConfig {
        shell: "/nonexistent/bash".into(),
        spill_dir: fx.path("spill"),
        ..ExecConfig::default()
    };
    let executor = Arc::new(Executor::with_base_env(config_, Vec::new()).unwrap());
    let path = fx.file("x.json", &config("UserPromptSubmit", None, &["exit 2"]));
    let hooks = Hooks::new(
        HookSettings {
            codex: vec![path],
            ..HookSettings::default()
        },
        executor,
        fx.persistence.clone(),
    );
    let run = hooks.run(&fx.ctx(), prompt("p")).await;
    assert_eq!(decisions(&run), ["error"]);
    assert_eq!(run.outcome.decision, Decision::None);
}

#[tokio::test]
async fn the_strictest_decision_wins_and_reasons_are_joined() {
    let fx = Fx::new();
    let decide = |d: &str, r: &str| {
        print(
            &json!({"hookSpecificOutput": {"permissionDecision": d, "permissionDecisionReason": r}}),
        )
    };
    let cc = fx.file(
        "cc.json",
        &config(
            "PreToolUse",
            Some("Bash|Edit"),
            &[
                &decide("allow", "fine"),
                &decide("ask", "check"),
                "echo 'no rm' >&2; exit 2",
            ],
        ),
    );
    let codex = fx.file(
        "codex.json",
        &config(
            "PreToolUse",
            Some("^Bash$"),
            &[&print(&json!({"hookSpecificOutput": {
                "hookEventName": "PreToolUse",
                "permissionDecision": "deny",
                "permissionDecisionReason": "never"
            }}))],
        ),
    );
    let hooks = fx.hooks(HookSettings {
        claude_code: vec![cc],
        codex: vec![codex],
        ..HookSettings::default()
    });
    let run = hooks.run(&fx.ctx(), bash_ls()).await;
    assert_eq!(decisions(&run), ["allow", "ask", "block", "deny"]);
    assert_eq!(run.outcome.decision, Decision::Deny);
    assert_eq!(run.outcome.reason.as_deref(), Some("no rm\n\nnever"));

    let hooks = fx.cc(&config(
        "PreToolUse",
        None,
        &[
            &decide("ask", "a"),
            &decide("allow", "b"),
            &decide("ask", "c"),
        ],
    ));
    let run = hooks.run(&fx.ctx(), bash_ls()).await;
    assert_eq!(run.outcome.decision, Decision::Ask);
    assert_eq!(run.outcome.reason.as_deref(), Some("a\n\nc"));
}

#[tokio::test]
async fn matchers_select_handlers() {
    let fx = Fx::new();
    let mut root = config("PreToolUse", Some("Bash"), &["exit 2"]);
    root["hooks"]["PreToolUse"]
        .as_array_mut()
        .unwrap()
        .push(json!({"matcher": "^Edit$", "hooks": [{"command": "exit 2"}]}));
    root["hooks"]["SessionStart"] = json!([
        {"matcher": "startup", "hooks": [{"command": "echo started"}]},
        {"matcher": "resume", "hooks": [{"command": "echo resumed"}]}
    ]);
    let hooks = fx.codex(&root);
    assert_eq!(decisions(&hooks.run(&fx.ctx(), bash_ls()).await), ["block"]);
    let other = pre_tool("job_output", json!({}));
    assert!(hooks.run(&fx.ctx(), other).await.records.is_empty());
    let run = hooks
        .run(
            &fx.ctx(),
            HookEvent::SessionStart {
                source: SessionSource::Resume,
            },
        )
        .await;
    assert_eq!(
        run.outcome.additional_context,
        [("hooks-codex", "resumed".to_owned())]
    );
}

#[tokio::test]
async fn plain_stdout_is_context_for_session_start_and_prompt_in_both_dialects() {
    let fx = Fx::new();
    let mut root = json!({"hooks": {}});
    for event in ["SessionStart", "UserPromptSubmit", "PreToolUse", "Stop"] {
        root["hooks"][event] = json!([{"hooks": [{"command": "echo 'on branch main'"}]}]);
    }
    let start = || HookEvent::SessionStart {
        source: SessionSource::Startup,
    };
    let stop = || HookEvent::Stop {
        stop_hook_active: false,
        last_assistant_message: None,
    };
    for (dialect, hooks) in [
        (Dialect::ClaudeCode, fx.cc(&root)),
        (Dialect::Codex, fx.codex(&root)),
    ] {
        let expected = [(dialect.plugin_name(), "on branch main".to_owned())];
        for event in [start(), prompt("p")] {
            let run = hooks.run(&fx.ctx(), event).await;
            assert_eq!(run.outcome.additional_context, expected, "{dialect:?}");
            assert_eq!(decisions(&run), ["pass"]);
        }
        let run = hooks.run(&fx.ctx(), bash_ls()).await;
        assert!(run.outcome.additional_context.is_empty(), "{dialect:?}");
        let run = hooks.run(&fx.ctx(), stop()).await;
        assert!(run.outcome.additional_context.is_empty(), "{dialect:?}");
        // Codex: "Stop expects JSON on stdout when it exits 0. Plain text output is invalid."
        let expected = match dialect {
            Dialect::ClaudeCode => "pass",
            Dialect::Codex => "error",
        };
        assert_eq!(decisions(&run), [expected]);
    }

    // Context from JSON.
    let hooks = fx.cc(&config(
        "UserPromptSubmit",
        None,
        &[&print(&json!({"hookSpecificOutput": {"hookEventName": "UserPromptSubmit", "additionalContext": "favourite colour: teal"}}))],
    ));
    let run = hooks.run(&fx.ctx(), prompt("p")).await;
    assert_eq!(
        run.outcome.additional_context,
        [("hooks-claude-code", "favourite colour: teal".to_owned())]
    );
    assert_eq!(decisions(&run), ["pass"]);
}

#[tokio::test]
async fn an_updated_input_runs_as_dsh_arguments_or_refuses_the_call() {
    let fx = Fx::new();
    let original = json!({"command": "rm -rf build", "timeout_ms": 9000, "workdir": "sub"});
    let rewrite = |update: Value| {
        print(&json!({"hookSpecificOutput": {
            "hookEventName": "PreToolUse",
            "permissionDecision": "allow",
            "updatedInput": update
        }}))
    };
    let run = fx
        .cc(&config(
            "PreToolUse",
            Some("Bash"),
            &[&rewrite(json!({"command": "echo safe"}))],
        ))
        .run(&fx.ctx(), pre_tool("bash", original.clone()))
        .await;
    assert_eq!(decisions(&run), ["allow"]);
    assert_eq!(run.outcome.decision, Decision::Allow);
    assert_eq!(
        run.outcome.updated_input,
        Some(json!({"command": "echo safe", "workdir": "sub"}))
    );
    let run = fx
        .codex(&config(
            "PreToolUse",
            Some("Bash"),
            &[&rewrite(json!({"command": "echo safe"}))],
        ))
        .run(&fx.ctx(), pre_tool("bash", original.clone()))
        .await;
    assert_eq!(
        run.outcome.updated_input,
        Some(json!({"command": "echo safe", "timeout_ms": 9000, "workdir": "sub"}))
    );

    // A rewrite the dialect's Bash could not take: refused, never the original run.
    for (dialect, update) in [
        (Dialect::ClaudeCode, json!({"cmd": "echo safe"})),
        (
            Dialect::ClaudeCode,
            json!({"command": "x", "timeout": "soon"}),
        ),
        (Dialect::Codex, json!({"command": 5})),
    ] {
        let root = config("PreToolUse", Some("Bash"), &[&rewrite(update.clone())]);
        let hooks = match dialect {
            Dialect::ClaudeCode => fx.cc(&root),
            Dialect::Codex => fx.codex(&root),
        };
        let run = hooks
            .run(&fx.ctx(), pre_tool("bash", original.clone()))
            .await;
        assert_eq!(decisions(&run), ["deny"], "{dialect:?} {update}");
        assert_eq!(run.outcome.decision, Decision::Deny);
        assert_eq!(run.outcome.updated_input, None);
        let reason = run.outcome.reason.unwrap();
        assert!(reason.contains("updatedInput"), "{reason}");
        assert!(reason.contains("was not run"), "{reason}");
    }
}

#[tokio::test]
async fn observe_only_events_record_a_block_without_effect() {
    let fx = Fx::new();
    let hooks = fx.cc(&config("SessionStart", None, &["echo nope >&2; exit 2"]));
    let run = hooks
        .run(
            &fx.ctx(),
            HookEvent::SessionStart {
                source: SessionSource::Startup,
            },
        )
        .await;
    assert_eq!(decisions(&run), ["block"]);
    assert_eq!(run.outcome.decision, Decision::None);
    // Records carry the context's turn; only tool events carry a call id.
    assert!(matches!(
        &run.records[0],
        EventData::HookInvoked {
            turn: Some(3),
            tool_call_id: None,
            ..
        }
    ));
}

#[tokio::test]
async fn stderr_summaries_are_bounded() {
    let fx = Fx::new();
    let path = fx.file(
        "cc.json",
        &config("Stop", None, &["printf 'x%.0s' $(seq 1 600) >&2; exit 2"]),
    );
    let hooks = fx.hooks(HookSettings {
        claude_code: vec![path],
        stderr_summary_chars: 40,
        ..HookSettings::default()
    });
    let run = hooks
        .run(
            &fx.ctx(),
            HookEvent::Stop {
                stop_hook_active: false,
                last_assistant_message: None,
            },
        )
        .await;
    let EventData::HookResult { stderr_summary, .. } = results(&run)[0] else {
        unreachable!()
    };
    assert_eq!(
        stderr_summary.as_deref(),
        Some(format!("{}…", "x".repeat(40)).as_str())
    );
    // The reason itself is not truncated: the model sees the whole stderr.
    assert_eq!(run.outcome.reason.map(|r| r.len()), Some(600));
}
