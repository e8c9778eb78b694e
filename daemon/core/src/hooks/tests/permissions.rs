//! The permission events through the engine: PermissionRequest's `permission_suggestions`,
//! `updatedInput` and `updatedPermissions`, PermissionDenied's payload and `retry`, and Codex's
//! PermissionRequest `tool_input.description`.

use serde_json::{Value, json};

use super::payload::received;
use super::*;
use crate::hooks::{Decision, Dialect, SessionRule};

fn asked(arguments: Value) -> HookEvent {
    HookEvent::PermissionRequest {
        tool_name: "bash".into(),
        tool_input: arguments,
        tool_use_id: "c1".into(),
    }
}

fn denied() -> HookEvent {
    HookEvent::PermissionDenied {
        tool_name: "bash".into(),
        tool_input: json!({"command": "rm -rf build", "description": "clean"}),
        tool_use_id: "c2".into(),
        reason: "the user denied this call".into(),
    }
}

/// A Claude Code PermissionRequest hook printing `decision` (its `hookSpecificOutput.decision`).
fn answering(decision: &Value) -> String {
    let out =
        json!({"hookSpecificOutput": {"hookEventName": "PermissionRequest", "decision": decision}});
    format!("cat > /dev/null; echo '{out}'")
}

/// The `hook/result` summaries (`stderr_summary`) of `run`, in order.
fn summaries(run: &HookRun) -> Vec<String> {
    results(run)
        .iter()
        .map(|r| match r {
            EventData::HookResult { stderr_summary, .. } => {
                stderr_summary.clone().unwrap_or_default()
            }
            _ => String::new(),
        })
        .collect()
}

#[tokio::test]
async fn claude_code_permission_requests_carry_the_suggestions_dsh_honours() {
    let fx = Fx::new();
    let bytes = received(
        &fx,
        Dialect::ClaudeCode,
        asked(json!({"command": "npm test", "description": "run the tests"})),
    )
    .await;
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(
        v["tool_input"],
        json!({"command": "npm test", "description": "run the tests"})
    );
    assert_eq!(
        v["permission_suggestions"],
        json!([{"type": "addRules", "rules": [{"toolName": "Bash", "ruleContent": "npm test"}],
                "behavior": "allow", "destination": "session"}])
    );
    let write = HookEvent::PermissionRequest {
        tool_name: "write".into(),
        tool_input: json!({"file_path": "a.txt", "content": "x"}),
        tool_use_id: "c3".into(),
    };
    let v: Value =
        serde_json::from_slice(&received(&fx, Dialect::ClaudeCode, write).await).unwrap();
    assert_eq!(v["permission_suggestions"], json!([]));
}

#[tokio::test]
async fn codex_permission_requests_show_the_description_and_pre_tool_use_does_not() {
    let fx = Fx::new();
    let arguments = json!({"command": "rm -f x", "description": "remove the stale lock"});
    let v: Value =
        serde_json::from_slice(&received(&fx, Dialect::Codex, asked(arguments.clone())).await)
            .unwrap();
    assert_eq!(
        v["tool_input"],
        json!({"command": "rm -f x", "description": "remove the stale lock"})
    );
    assert!(v.get("permission_suggestions").is_none(), "{v}");
    let v: Value = serde_json::from_slice(
        &received(&fx, Dialect::Codex, asked(json!({"command": "ls"}))).await,
    )
    .unwrap();
    assert_eq!(v["tool_input"], json!({"command": "ls"}));
    let v: Value =
        serde_json::from_slice(&received(&fx, Dialect::Codex, pre_tool("bash", arguments)).await)
            .unwrap();
    assert_eq!(v["tool_input"], json!({"command": "rm -f x"}));
}

#[tokio::test]
async fn permission_denied_carries_claude_codes_fields_and_codex_has_no_such_event() {
    let fx = Fx::new();
    let bytes = received(&fx, Dialect::ClaudeCode, denied()).await;
    assert_eq!(
        keys(&bytes),
        [
            "session_id",
            "prompt_id",
            "transcript_path",
            "cwd",
            "permission_mode",
            "hook_event_name",
            "tool_name",
            "tool_input",
            "tool_use_id",
            "reason"
        ]
    );
    let v: Value = serde_json::from_slice(&bytes).unwrap();
    assert_eq!(v["hook_event_name"], "PermissionDenied");
    assert_eq!(v["tool_name"], "Bash");
    assert_eq!(
        v["tool_input"],
        json!({"command": "rm -rf build", "description": "clean"})
    );
    assert_eq!(v["tool_use_id"], "c2");
    assert_eq!(v["reason"], "the user denied this call");

    let codex = fx.codex(&config(
        "PermissionDenied",
        None,
        &[&format!("cat > {}", fx.q("codex-in"))],
    ));
    let run = codex.run(&fx.ctx(), denied()).await;
    assert!(run.records.is_empty(), "{run:?}");
}

#[tokio::test]
async fn a_retry_from_any_permission_denied_hook_is_the_outcome_and_nothing_is_undone() {
    let fx = Fx::new();
    let retry = r#"cat > /dev/null; echo '{"hookSpecificOutput": {"hookEventName": "PermissionDenied", "retry": true}}'"#;
    let hooks = fx.cc(&config(
        "PermissionDenied",
        Some("Bash"),
        &["cat > /dev/null", retry, "exit 2"],
    ));
    let run = hooks.run(&fx.ctx(), denied()).await;
    assert!(run.outcome.retry);
    assert_eq!(run.outcome.decision, Decision::None);
    // `retry: false`, plain text, or a retry written for another event: the denial just stands.
    for out in [
        r#"{"hookSpecificOutput": {"hookEventName": "PermissionDenied", "retry": false}}"#,
        "retry",
        r#"{"hookSpecificOutput": {"hookEventName": "PermissionRequest", "retry": true}}"#,
    ] {
        let hooks = fx.cc(&config(
            "PermissionDenied",
            None,
            &[&format!("cat > /dev/null; echo '{out}'")],
        ));
        assert!(!hooks.run(&fx.ctx(), denied()).await.outcome.retry, "{out}");
    }
}

#[tokio::test]
async fn an_allow_with_updated_input_and_permissions_rewrites_and_adds_rules() {
    let fx = Fx::new();
    let allow = answering(&json!({
        "behavior": "allow",
        "updatedInput": {"command": "npm run lint", "description": "lint instead"},
        "updatedPermissions": [
            {"type": "addRules", "rules": [{"toolName": "Bash", "ruleContent": "npm run lint"}],
             "behavior": "allow", "destination": "session"},
            {"type": "setMode", "mode": "acceptEdits", "destination": "session"},
        ],
    }));
    let hooks = fx.cc(&config("PermissionRequest", Some("Bash"), &[&allow]));
    let run = hooks
        .run(
            &fx.ctx(),
            asked(json!({"command": "npm test", "timeout_ms": 5000, "workdir": "sub"})),
        )
        .await;
    let outcome = &run.outcome;
    assert_eq!(outcome.decision, Decision::Allow);
    // Claude Code's input replaces the whole input; dsh's `workdir`, which it does not show,
    // keeps its value (as for PreToolUse).
    assert_eq!(
        outcome.updated_input,
        Some(json!({"command": "npm run lint", "description": "lint instead", "workdir": "sub"}))
    );
    assert_eq!(
        outcome.rules,
        [SessionRule {
            tool: "bash".into(),
            command: "npm run lint".into()
        }]
    );
    let summary = &summaries(&run)[0];
    assert!(
        summary.contains("updatedPermissions[1] setMode is not applied"),
        "{summary}"
    );
}

#[tokio::test]
async fn a_deny_or_a_bad_rewrite_applies_nothing() {
    let fx = Fx::new();
    let rule = json!([{"type": "addRules", "rules": [{"toolName": "Bash", "ruleContent": "ls"}],
                       "behavior": "allow", "destination": "session"}]);
    let allow = answering(&json!({"behavior": "allow", "updatedPermissions": rule}));
    let deny = answering(&json!({"behavior": "deny", "message": "no",
                                 "updatedInput": {"command": "ls"}, "updatedPermissions": rule}));
    let hooks = fx.cc(&config("PermissionRequest", None, &[&allow, &deny]));
    let run = hooks.run(&fx.ctx(), asked(json!({"command": "ls"}))).await;
    assert_eq!(run.outcome.decision, Decision::Deny);
    assert_eq!(run.outcome.reason.as_deref(), Some("no"));
    assert!(run.outcome.rules.is_empty());
    assert_eq!(run.outcome.updated_input, None);

    // An input Claude Code's Bash would not take refuses the call, naming the event.
    let bad = answering(&json!({"behavior": "allow", "updatedInput": {"cmd": "ls"},
                                "updatedPermissions": rule}));
    let hooks = fx.cc(&config("PermissionRequest", None, &[&bad]));
    let run = hooks.run(&fx.ctx(), asked(json!({"command": "ls"}))).await;
    assert_eq!(run.outcome.decision, Decision::Deny);
    let reason = run.outcome.reason.unwrap();
    assert!(
        reason.contains("a PermissionRequest hook rewrote"),
        "{reason}"
    );
    assert!(run.outcome.rules.is_empty());

    // Two allows rewriting the call differently: it is not run.
    let one = answering(&json!({"behavior": "allow", "updatedInput": {"command": "echo a"}}));
    let two = answering(&json!({"behavior": "allow", "updatedInput": {"command": "echo b"}}));
    let hooks = fx.cc(&config("PermissionRequest", None, &[&one, &two]));
    let run = hooks.run(&fx.ctx(), asked(json!({"command": "ls"}))).await;
    assert_eq!(run.outcome.decision, Decision::Deny);
    assert_eq!(run.outcome.updated_input, None);
}

#[tokio::test]
async fn codex_still_fails_a_rewrite_or_permission_update() {
    let fx = Fx::new();
    for field in ["updatedInput", "updatedPermissions"] {
        let out = json!({"hookSpecificOutput": {"hookEventName": "PermissionRequest",
                         "decision": {"behavior": "allow", field: {"command": "ls"}}}});
        let hooks = fx.codex(&config(
            "PermissionRequest",
            None,
            &[&format!("cat > /dev/null; echo '{out}'")],
        ));
        let run = hooks.run(&fx.ctx(), asked(json!({"command": "ls"}))).await;
        assert_eq!(decisions(&run), ["error"], "{field}");
        assert_eq!(run.outcome.decision, Decision::None);
        assert!(run.outcome.rules.is_empty());
    }
}
