//! The bytes a hook receives on stdin, per dialect and event, captured with `cat > file`.

use std::sync::Arc;

use serde_json::{Value, json};

use super::*;
use crate::hooks::{Dialect, SessionEndReason, SessionSource, SubagentOf};

/// Runs `event` with one `cat > in` hook of `dialect` (matching everything) and returns the bytes.
pub(super) async fn received(fx: &Fx, dialect: Dialect, event: HookEvent) -> Vec<u8> {
    let name = event.name().as_str();
    let _ = std::fs::remove_file(fx.path("in"));
    let root = config(name, None, &[&format!("cat > {}", fx.q("in"))]);
    let hooks = match dialect {
        Dialect::ClaudeCode => fx.cc(&root),
        Dialect::Codex => fx.codex(&root),
    };
    let run = hooks.run(&fx.ctx(), event).await;
    assert_eq!(decisions(&run), ["pass"], "{run:?}");
    std::fs::read(fx.path("in")).unwrap()
}

fn child(fx: &Fx) -> Arc<SessionHeader> {
    let mut h = SessionHeader::new(SessionId::parse("child-1").unwrap(), fx.cwd.clone(), 2);
    h.parent_session = Some(fx.header.id.clone());
    h.delegation_depth = 1;
    Arc::new(h)
}

fn events(fx: &Fx) -> Vec<HookEvent> {
    vec![
        HookEvent::SessionStart {
            source: SessionSource::Resume,
        },
        prompt("fix it"),
        pre_tool("bash", json!({"command": "ls -la", "timeout_ms": 5})),
        post_tool(
            "bash",
            json!({"command": "ls -la"}),
            bash_output("total 0\n", "", 0),
        ),
        HookEvent::Stop {
            stop_hook_active: true,
            last_assistant_message: Some("done".into()),
        },
        HookEvent::SubagentStart {
            child: child(fx),
            agent_type: "general-purpose".into(),
        },
        HookEvent::SubagentStop {
            child: child(fx),
            agent_type: "general-purpose".into(),
            last_assistant_message: None,
        },
        HookEvent::SessionEnd {
            reason: SessionEndReason::Other,
        },
    ]
}

#[tokio::test]
async fn claude_code_payload_keys_in_order_with_a_trailing_newline() {
    let fx = Fx::new();
    // Claude Code's reference, "Common input fields" and its examples' order.
    let base = [
        "session_id",
        "transcript_path",
        "cwd",
        "permission_mode",
        "hook_event_name",
    ];
    let tails: [&[&str]; 8] = [
        &["source", "model"],
        &["prompt"],
        &["tool_name", "tool_input", "tool_use_id"],
        &[
            "tool_name",
            "tool_input",
            "tool_response",
            "tool_use_id",
            "duration_ms",
        ],
        &["stop_hook_active", "last_assistant_message"],
        &["agent_id", "agent_type"],
        &[
            "stop_hook_active",
            "agent_id",
            "agent_type",
            "agent_transcript_path",
            "last_assistant_message",
        ],
        &["reason"],
    ];
    let transcript = fx.transcript_of(&fx.header).display().to_string();
    for (event, tail) in events(&fx).into_iter().zip(tails) {
        let name = event.name().as_str();
        let bytes = received(&fx, Dialect::ClaudeCode, event).await;
        assert_eq!(bytes.last(), Some(&b'\n'), "{name}");
        assert_eq!(bytes.iter().filter(|b| **b == b'\n').count(), 1, "{name}");
        // `prompt_id` follows `session_id` once there is a prompt (not on SessionStart).
        let mut expected: Vec<&str> = base.iter().chain(tail).copied().collect();
        if name != "SessionStart" {
            expected.insert(1, "prompt_id");
        }
        assert_eq!(keys(&bytes), expected, "{name}");
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(
            v["session_id"], "s-1",
            "subagent events carry the parent's id"
        );
        assert_eq!(v["transcript_path"], transcript.as_str());
        assert_eq!(v["cwd"], fx.cwd.to_str().unwrap());
        assert_eq!(v["hook_event_name"], name);
        assert_eq!(v["permission_mode"], "default");
    }
    // Values of the event fields.
    let start = received(&fx, Dialect::ClaudeCode, events(&fx).remove(0)).await;
    let start: Value = serde_json::from_slice(&start).unwrap();
    assert_eq!(
        (&start["source"], &start["model"]),
        (&json!("resume"), &json!("test-model"))
    );
    let stop = received(&fx, Dialect::ClaudeCode, events(&fx).remove(4)).await;
    let stop: Value = serde_json::from_slice(&stop).unwrap();
    assert_eq!(
        (&stop["stop_hook_active"], &stop["last_assistant_message"]),
        (&json!(true), &json!("done"))
    );
    let sub = received(&fx, Dialect::ClaudeCode, events(&fx).remove(6)).await;
    let sub: Value = serde_json::from_slice(&sub).unwrap();
    assert_eq!(sub["agent_id"], "child-1");
    assert_eq!(sub["agent_type"], "general-purpose");
    assert_eq!(
        sub["agent_transcript_path"],
        fx.transcript_of(&child(&fx)).to_str().unwrap()
    );
    assert_eq!(
        sub["last_assistant_message"], "",
        "a string, like every Claude Code text field"
    );
    let end = received(&fx, Dialect::ClaudeCode, events(&fx).remove(7)).await;
    assert_eq!(
        serde_json::from_slice::<Value>(&end).unwrap()["reason"],
        "other"
    );
}

#[tokio::test]
async fn claude_code_pre_tool_use_bytes_exactly() {
    let fx = Fx::new();
    let bytes = received(
        &fx,
        Dialect::ClaudeCode,
        pre_tool("bash", json!({"command": "echo \"HELLO\""})),
    )
    .await;
    let expected = format!(
        "{{\"session_id\":\"s-1\",\"prompt_id\":\"s-1-prompt-3\",\"transcript_path\":{},\"cwd\":{},\"permission_mode\":\"default\",\"hook_event_name\":\"PreToolUse\",\"tool_name\":\"Bash\",\"tool_input\":{{\"command\":\"echo \\\"HELLO\\\"\"}},\"tool_use_id\":\"call-1\"}}\n",
        json!(fx.transcript_of(&fx.header).to_str().unwrap()),
        json!(fx.cwd.to_str().unwrap()),
    );
    assert_eq!(String::from_utf8(bytes).unwrap(), expected);
}

/// The `tool_name`, `tool_input` and `tool_response` a `dialect` hook receives for `event`.
async fn tool_view(fx: &Fx, dialect: Dialect, event: HookEvent) -> (Value, Value, Value) {
    let v: Value = serde_json::from_slice(&received(fx, dialect, event).await).unwrap();
    (
        v["tool_name"].clone(),
        v["tool_input"].clone(),
        v["tool_response"].clone(),
    )
}

#[tokio::test]
async fn the_bash_tool_is_claude_codes_bash() {
    let fx = Fx::new();
    let args = json!({"command": "make test", "timeout_ms": 90000, "workdir": "sub",
                      "description": "run the tests", "run_in_background": false});
    let (name, input, _) =
        tool_view(&fx, Dialect::ClaudeCode, pre_tool("bash", args.clone())).await;
    assert_eq!(name, "Bash");
    assert_eq!(
        input,
        json!({"command": "make test", "description": "run the tests", "timeout": 90000,
               "run_in_background": false}),
        "Claude Code's Bash input: timeout in milliseconds, no workdir"
    );
    let (name, input, response) = tool_view(
        &fx,
        Dialect::ClaudeCode,
        post_tool("bash", args, bash_output("PASS 12\n", "warning: slow\n", 0)),
    )
    .await;
    assert_eq!(name, "Bash");
    assert_eq!(input["command"], "make test");
    assert_eq!(
        response,
        json!({"stdout": "PASS 12\n", "stderr": "warning: slow\n", "interrupted": false,
               "isImage": false}),
        "the Bash tool's output object, not the model's text"
    );
}

#[tokio::test]
async fn the_bash_tool_is_codexs_bash() {
    let fx = Fx::new();
    let args = json!({"command": "make test", "timeout_ms": 90000, "workdir": "sub"});
    let (name, input, _) = tool_view(&fx, Dialect::Codex, pre_tool("bash", args.clone())).await;
    assert_eq!(
        (name, input),
        (json!("Bash"), json!({"command": "make test"}))
    );
    let (name, input, response) = tool_view(
        &fx,
        Dialect::Codex,
        post_tool("bash", args, bash_output("PASS 12\n", "warning: slow\n", 1)),
    )
    .await;
    assert_eq!(
        (name, input),
        (json!("Bash"), json!({"command": "make test"}))
    );
    assert_eq!(
        response,
        json!("PASS 12\nwarning: slow\n"),
        "the command's output"
    );
}

#[tokio::test]
async fn other_tools_keep_their_names_and_arguments() {
    let fx = Fx::new();
    for dialect in Dialect::ALL {
        let (name, input, _) = tool_view(
            &fx,
            dialect,
            pre_tool("job_output", json!({"job_id": "j1"})),
        )
        .await;
        assert_eq!(
            (name, input),
            (json!("job_output"), json!({"job_id": "j1"}))
        );
    }
    let args = json!({"prompt": "count", "description": "c"});
    let (name, input, _) = tool_view(
        &fx,
        Dialect::ClaudeCode,
        pre_tool("spawn_agent", args.clone()),
    )
    .await;
    assert_eq!(name, "Agent");
    assert_eq!(
        input,
        json!({"prompt": "count", "description": "c", "subagent_type": "general-purpose"})
    );
    let (name, input, response) = tool_view(
        &fx,
        Dialect::Codex,
        post_tool("spawn_agent", args.clone(), ToolOutput::ok("one two three")),
    )
    .await;
    assert_eq!(
        (name, input, response),
        (json!("spawn_agent"), args, json!("one two three"))
    );
}

#[tokio::test]
async fn codex_payload_keys_in_order_without_a_trailing_newline() {
    let fx = Fx::new();
    // The field order of the command input structs in codex-rs's hooks crate.
    let common = ["transcript_path", "cwd", "hook_event_name", "model"];
    let expected: [(&[&str], &[&str]); 8] = [
        (&["session_id"], &["permission_mode", "source"]),
        (&["session_id", "turn_id"], &["permission_mode", "prompt"]),
        (
            &["session_id", "turn_id"],
            &["permission_mode", "tool_name", "tool_input", "tool_use_id"],
        ),
        (
            &["session_id", "turn_id"],
            &[
                "permission_mode",
                "tool_name",
                "tool_input",
                "tool_response",
                "tool_use_id",
            ],
        ),
        (
            &["session_id", "turn_id"],
            &[
                "permission_mode",
                "stop_hook_active",
                "last_assistant_message",
            ],
        ),
        (
            &["session_id", "turn_id"],
            &["permission_mode", "agent_id", "agent_type"],
        ),
        (
            &["session_id", "turn_id"],
            &[
                "permission_mode",
                "stop_hook_active",
                "agent_id",
                "agent_type",
                "agent_transcript_path",
                "last_assistant_message",
            ],
        ),
        (&["session_id"], &["reason"]),
    ];
    let codex_events: Vec<HookEvent> = events(&fx)
        .into_iter()
        .filter(|e| e.name().supported_by(Dialect::Codex))
        .collect();
    assert_eq!(codex_events.len(), expected.len());
    for (event, (head, tail)) in codex_events.into_iter().zip(expected) {
        let name = event.name().as_str();
        let bytes = received(&fx, Dialect::Codex, event).await;
        assert_eq!(bytes.last(), Some(&b'}'), "{name}: no trailing newline");
        let keys_expected: Vec<&str> = head.iter().chain(&common).chain(tail).copied().collect();
        assert_eq!(keys(&bytes), keys_expected, "{name}");
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(v["model"], "test-model");
        if head.contains(&"turn_id") {
            assert_eq!(v["turn_id"], "3", "{name}");
        }
    }
    let stop = received(
        &fx,
        Dialect::Codex,
        HookEvent::Stop {
            stop_hook_active: false,
            last_assistant_message: None,
        },
    )
    .await;
    let stop: Value = serde_json::from_slice(&stop).unwrap();
    assert_eq!(stop["last_assistant_message"], Value::Null);
    assert_eq!(stop["stop_hook_active"], false);

    let bytes = received(
        &fx,
        Dialect::Codex,
        pre_tool("bash", json!({"command": "ls"})),
    )
    .await;
    let expected = format!(
        "{{\"session_id\":\"s-1\",\"turn_id\":\"3\",\"transcript_path\":{},\"cwd\":{},\"hook_event_name\":\"PreToolUse\",\"model\":\"test-model\",\"permission_mode\":\"default\",\"tool_name\":\"Bash\",\"tool_input\":{{\"command\":\"ls\"}},\"tool_use_id\":\"call-1\"}}",
        json!(fx.transcript_of(&fx.header).to_str().unwrap()),
        json!(fx.cwd.to_str().unwrap()),
    );
    assert_eq!(String::from_utf8(bytes).unwrap(), expected);
}

#[tokio::test]
async fn events_inside_a_child_agent_are_the_parent_sessions_subagent() {
    let fx = Fx::new();
    let child = child(&fx);
    let ctx = HookContext {
        header: child.clone(),
        subagent: Some(SubagentOf {
            parent: fx.header.clone(),
            agent_type: "general-purpose".into(),
        }),
        ..fx.ctx()
    };
    let bash = || pre_tool("bash", json!({"command": "ls"}));
    let read = |name: &str| -> (String, Value) {
        let text = fx.read(name);
        let v = serde_json::from_str(&text).unwrap();
        (text, v)
    };
    for dialect in Dialect::ALL {
        let root = config("PreToolUse", None, &[&format!("cat > {}", fx.q("in"))]);
        let hooks = match dialect {
            Dialect::ClaudeCode => fx.cc(&root),
            Dialect::Codex => fx.codex(&root),
        };
        assert_eq!(decisions(&hooks.run(&ctx, bash()).await), ["pass"]);
        let (text, v) = read("in");
        assert_eq!(v["session_id"], "s-1", "{dialect:?}: the parent's session");
        assert_eq!(v["agent_id"], "child-1", "{dialect:?}");
        assert_eq!(v["agent_type"], "general-purpose", "{dialect:?}");
        let transcript = match dialect {
            // Claude Code: the main session's transcript (as for SubagentStop).
            Dialect::ClaudeCode => fx.transcript_of(&fx.header),
            // Codex: the child thread's own.
            Dialect::Codex => fx.transcript_of(&child),
        };
        assert_eq!(v["transcript_path"], transcript.to_str().unwrap());
        let k = keys(text.as_bytes());
        match dialect {
            Dialect::ClaudeCode => {
                assert_eq!(k[4..7], ["hook_event_name", "agent_id", "agent_type"])
            }
            Dialect::Codex => {
                assert_eq!(k[..4], ["session_id", "turn_id", "agent_id", "agent_type"])
            }
        }
    }
    // The main session's own events carry neither field.
    let hooks = fx.cc(&config(
        "PreToolUse",
        None,
        &[&format!("cat > {}", fx.q("in"))],
    ));
    hooks.run(&fx.ctx(), bash()).await;
    assert!(read("in").1.get("agent_id").is_none());
}

#[tokio::test]
async fn transcript_path_is_located_at_invocation_and_never_created() {
    let fx = Fx::new();
    let transcript = fx.transcript_of(&fx.header);
    let path_in = |bytes: Vec<u8>| {
        serde_json::from_slice::<Value>(&bytes).unwrap()["transcript_path"].clone()
    };
    let stop = || HookEvent::Stop {
        stop_hook_active: false,
        last_assistant_message: None,
    };
    for dialect in Dialect::ALL {
        assert_eq!(
            path_in(received(&fx, dialect, stop()).await),
            json!(transcript.to_str().unwrap())
        );
    }
    assert!(
        !transcript.exists(),
        "a hook run never creates the session file"
    );
    assert!(!fx.path("sessions").exists(), "nor its directory");

    // A swap to a backend without per-session files is seen by the very next hook.
    fx.persistence.swap(Arc::new(Locator {
        root: fx.path("db.sqlite"),
        answers: false,
    }));
    assert_eq!(
        path_in(received(&fx, Dialect::ClaudeCode, stop()).await),
        json!("")
    );
    assert_eq!(
        path_in(received(&fx, Dialect::Codex, stop()).await),
        Value::Null
    );
    let sub = received(
        &fx,
        Dialect::ClaudeCode,
        HookEvent::SubagentStop {
            child: child(&fx),
            agent_type: "general-purpose".into(),
            last_assistant_message: Some("bye".into()),
        },
    )
    .await;
    let sub: Value = serde_json::from_slice(&sub).unwrap();
    assert_eq!(
        (&sub["transcript_path"], &sub["agent_transcript_path"]),
        (&json!(""), &json!(""))
    );
}

#[tokio::test]
async fn both_dialects_run_for_one_event_each_with_its_own_shape() {
    let fx = Fx::new();
    let cc = fx.file(
        "cc.json",
        &config(
            "UserPromptSubmit",
            None,
            &[&format!("cat > {}", fx.q("cc-in"))],
        ),
    );
    let codex = fx.file(
        "codex.json",
        &config(
            "UserPromptSubmit",
            None,
            &[&format!("cat > {}", fx.q("codex-in"))],
        ),
    );
    let hooks = fx.hooks(HookSettings {
        claude_code: vec![cc],
        codex: vec![codex],
        ..HookSettings::default()
    });
    let run = hooks.run(&fx.ctx(), prompt("both")).await;
    assert_eq!(decisions(&run), ["pass", "pass"]);
    let dialects: Vec<&str> = run
        .records
        .iter()
        .map(|r| match r {
            EventData::HookInvoked { dialect, .. } | EventData::HookResult { dialect, .. } => {
                dialect.as_str()
            }
            _ => "?",
        })
        .collect();
    assert_eq!(dialects, ["claude-code", "claude-code", "codex", "codex"]);
    assert!(fx.read("cc-in").ends_with("}\n"));
    assert!(fx.read("codex-in").ends_with('}'));
    assert!(fx.read("codex-in").contains("\"turn_id\":\"3\""));
    assert!(!fx.read("cc-in").contains("turn_id"));
}

#[tokio::test]
async fn the_events_a_person_or_a_failure_brings_carry_their_harness_fields() {
    let fx = Fx::new();
    let base = [
        "session_id",
        "transcript_path",
        "cwd",
        "permission_mode",
        "hook_event_name",
    ];
    let failed = HookEvent::PostToolUseFailure {
        tool_name: "bash".into(),
        tool_input: json!({"command": "false"}),
        tool_use_id: "c1".into(),
        error: "exit code 1".into(),
        is_interrupt: false,
        duration_ms: 7,
    };
    let asked = HookEvent::PermissionRequest {
        tool_name: "bash".into(),
        tool_input: json!({"command": "rm -rf x"}),
        tool_use_id: "c2".into(),
    };
    let notified = HookEvent::Notification {
        kind: crate::hooks::NotificationKind::PermissionPrompt,
        message: "Claude needs your permission to use Bash".into(),
        title: "Permission needed".into(),
    };
    let broke = HookEvent::StopFailure {
        kind: crate::hooks::StopFailureKind::RateLimit,
        details: "HTTP 429".into(),
        last_assistant_message: None,
    };
    let cases: [(HookEvent, &[&str]); 4] = [
        (
            failed,
            &[
                "tool_name",
                "tool_input",
                "tool_use_id",
                "error",
                "is_interrupt",
                "duration_ms",
            ],
        ),
        (
            asked.clone(),
            &["tool_name", "tool_input", "permission_suggestions"],
        ),
        (notified, &["message", "title", "notification_type"]),
        (broke, &["error", "error_details", "last_assistant_message"]),
    ];
    for (event, tail) in cases {
        let name = event.name().as_str();
        let bytes = received(&fx, Dialect::ClaudeCode, event).await;
        let mut expected: Vec<&str> = base.iter().copied().chain(tail.iter().copied()).collect();
        expected.insert(1, "prompt_id");
        assert_eq!(keys(&bytes), expected, "{name}");
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(v["hook_event_name"], name);
    }
    let bytes = received(&fx, Dialect::Codex, asked).await;
    assert_eq!(
        keys(&bytes),
        [
            "session_id",
            "turn_id",
            "transcript_path",
            "cwd",
            "hook_event_name",
            "model",
            "permission_mode",
            "tool_name",
            "tool_input"
        ]
    );
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(v["tool_input"], json!({"command": "rm -rf x"}));
}
