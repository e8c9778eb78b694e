//! The bytes a hook receives on stdin, per dialect and event, captured with `cat > file`.

use std::sync::Arc;

use serde_json::{Value, json};

use super::*;
use crate::hooks::{Dialect, SessionSource};

/// Runs `event` with one `cat > in` hook of `dialect` (matching everything) and returns the bytes.
async fn received(fx: &Fx, dialect: Dialect, event: HookEvent) -> Vec<u8> {
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
        HookEvent::PostToolUse {
            tool_name: "bash".into(),
            tool_input: json!({"command": "ls -la"}),
            tool_use_id: "call-1".into(),
            tool_response: json!("total 0\n"),
        },
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
    ]
}

#[tokio::test]
async fn claude_code_payload_keys_in_order_with_a_trailing_newline() {
    let fx = Fx::new();
    let base = [
        "session_id",
        "transcript_path",
        "cwd",
        "hook_event_name",
        "permission_mode",
    ];
    let tails: [&[&str]; 7] = [
        &["source"],
        &["prompt"],
        &["tool_name", "tool_input", "tool_use_id"],
        &["tool_name", "tool_input", "tool_use_id", "tool_response"],
        &["stop_hook_active", "last_assistant_message"],
        &["agent_id", "agent_type"],
        &[
            "stop_hook_active",
            "agent_id",
            "agent_type",
            "agent_transcript_path",
            "last_assistant_message",
        ],
    ];
    let transcript = fx.transcript_of(&fx.header).display().to_string();
    for (event, tail) in events(&fx).into_iter().zip(tails) {
        let name = event.name().as_str();
        let bytes = received(&fx, Dialect::ClaudeCode, event).await;
        assert_eq!(bytes.last(), Some(&b'\n'), "{name}");
        assert_eq!(bytes.iter().filter(|b| **b == b'\n').count(), 1, "{name}");
        let expected: Vec<&str> = base.iter().chain(tail).copied().collect();
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
    let bytes = received(&fx, Dialect::ClaudeCode, events(&fx).remove(0)).await;
    assert_eq!(
        serde_json::from_slice::<Value>(&bytes).unwrap()["source"],
        "resume"
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
        "{{\"session_id\":\"s-1\",\"transcript_path\":{},\"cwd\":{},\"hook_event_name\":\"PreToolUse\",\"permission_mode\":\"default\",\"tool_name\":\"bash\",\"tool_input\":{{\"command\":\"echo \\\"HELLO\\\"\"}},\"tool_use_id\":\"call-1\"}}\n",
        json!(fx.transcript_of(&fx.header).to_str().unwrap()),
        json!(fx.cwd.to_str().unwrap()),
    );
    assert_eq!(String::from_utf8(bytes).unwrap(), expected);
}

#[tokio::test]
async fn codex_payload_keys_in_order_without_a_trailing_newline() {
    let fx = Fx::new();
    let base = [
        "session_id",
        "transcript_path",
        "cwd",
        "hook_event_name",
        "model",
        "permission_mode",
    ];
    let tails: [&[&str]; 5] = [
        &["source"],
        &["turn_id", "prompt"],
        &["turn_id", "tool_name", "tool_input", "tool_use_id"],
        &[
            "turn_id",
            "tool_name",
            "tool_input",
            "tool_use_id",
            "tool_response",
        ],
        &["turn_id", "stop_hook_active", "last_assistant_message"],
    ];
    for (event, tail) in events(&fx).into_iter().zip(tails) {
        let name = event.name().as_str();
        let bytes = received(&fx, Dialect::Codex, event).await;
        assert_eq!(bytes.last(), Some(&b'}'), "{name}: no trailing newline");
        let expected: Vec<&str> = base.iter().chain(tail).copied().collect();
        assert_eq!(keys(&bytes), expected, "{name}");
        let v: Value = serde_json::from_slice(&bytes).unwrap();
        assert_eq!(v["model"], "test-model");
        assert_eq!(v["permission_mode"], "default");
        if tail.contains(&"turn_id") {
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
}

#[tokio::test]
async fn codex_bash_input_is_the_shell_shape() {
    let fx = Fx::new();
    let fx = &fx;
    let input = |event| async move {
        let bytes = received(fx, Dialect::Codex, event).await;
        serde_json::from_slice::<Value>(&bytes).unwrap()["tool_input"].clone()
    };
    assert_eq!(
        input(pre_tool(
            "bash",
            json!({"command": "ls", "timeout_ms": 10, "run_in_background": false})
        ))
        .await,
        json!({"command": "ls"})
    );
    assert_eq!(
        input(pre_tool("bash", json!({"command": 7}))).await,
        json!({"command": ""})
    );
    assert_eq!(
        input(pre_tool("bash", json!({}))).await,
        json!({"command": ""})
    );
    assert_eq!(
        input(pre_tool("job_output", json!({"job_id": "j1"}))).await,
        json!({"job_id": "j1"}),
        "other tools keep their arguments"
    );
    let bytes = received(
        fx,
        Dialect::Codex,
        pre_tool("bash", json!({"command": "ls"})),
    )
    .await;
    let expected = format!(
        "{{\"session_id\":\"s-1\",\"transcript_path\":{},\"cwd\":{},\"hook_event_name\":\"PreToolUse\",\"model\":\"test-model\",\"permission_mode\":\"default\",\"turn_id\":\"3\",\"tool_name\":\"bash\",\"tool_input\":{{\"command\":\"ls\"}},\"tool_use_id\":\"call-1\"}}",
        json!(fx.transcript_of(&fx.header).to_str().unwrap()),
        json!(fx.cwd.to_str().unwrap()),
    );
    assert_eq!(String::from_utf8(bytes).unwrap(), expected);
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
