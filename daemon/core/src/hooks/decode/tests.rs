//! One test per row of each reference's output rules: Claude Code's hooks reference ("Exit code
//! output", "Exit code 2 behavior per event", "JSON output", each event's "decision control") and
//! Codex's (its hooks reference and the output parser and event handlers of codex-rs's hooks
//! crate, whose messages dsh records). Each row names the event, the hook's exit code and output,
//! and what must come of it.

use std::time::Duration;

use serde_json::json;

use super::*;

fn end(exit: Option<i32>, stdout: &str, stderr: &str) -> RunEnd {
    RunEnd {
        exit_code: exit,
        stdout: stdout.to_owned(),
        stderr: stderr.to_owned(),
        failure: None,
        duration: Duration::ZERO,
        sandbox: None,
    }
}

fn cc(event: EventName, exit: i32, stdout: &str, stderr: &str) -> HookOutput {
    decode(&end(Some(exit), stdout, stderr), event, Dialect::ClaudeCode)
}

fn codex(event: EventName, exit: i32, stdout: &str, stderr: &str) -> HookOutput {
    decode(&end(Some(exit), stdout, stderr), event, Dialect::Codex)
}

/// What a row expects: the recorded decision, the reason, the stop reason (when it stops), the
/// context, and (for dsh's stricter rows and for errors) a fragment of the note.
#[derive(Debug)]
struct Row {
    decision: &'static str,
    reason: Option<&'static str>,
    stop_reason: Option<&'static str>,
    context: Option<&'static str>,
    note: Option<&'static str>,
}

const PASS: Row = Row {
    decision: "pass",
    reason: None,
    stop_reason: None,
    context: None,
    note: None,
};

fn check(label: &str, out: &HookOutput, row: &Row) {
    assert_eq!(out.record_decision(), row.decision, "{label}: {out:?}");
    assert_eq!(out.reason.as_deref(), row.reason, "{label}: reason {out:?}");
    if row.decision == "stop" {
        assert!(out.stop, "{label}");
        assert_eq!(out.stop_reason.as_deref(), row.stop_reason, "{label}");
    }
    assert_eq!(
        out.additional_context.as_deref(),
        row.context,
        "{label}: context {out:?}"
    );
    match row.note {
        Some(fragment) => assert!(
            out.note.as_deref().is_some_and(|n| n.contains(fragment)),
            "{label}: note {:?} lacks {fragment:?}",
            out.note
        ),
        None => assert_eq!(out.note, None, "{label}: unexpected note"),
    }
}

fn row(decision: &'static str) -> Row {
    Row { decision, ..PASS }
}

// ---------------------------------------------------------------------------------------------
// Both dialects

#[test]
fn failures_of_every_kind_are_non_blocking_errors() {
    for dialect in Dialect::ALL {
        for end in [
            end(Some(1), r#"{"decision":"block","reason":"x"}"#, "x"),
            end(Some(127), "", ""),
            end(None, "", ""),
            RunEnd {
                failure: Some("timed out after 5ms".into()),
                ..end(Some(2), "", "no")
            },
        ] {
            for event in EventName::ALL {
                let o = decode(&end, event, dialect);
                assert_eq!(o.verdict, Verdict::Error, "{dialect:?} {event:?} {end:?}");
                assert!(o.error_note().is_some());
            }
        }
    }
}

#[test]
fn exit_zero_without_output_passes() {
    for dialect in Dialect::ALL {
        for event in EventName::ALL {
            let o = decode(&end(Some(0), " \n", ""), event, dialect);
            check(&format!("{dialect:?} {event:?}"), &o, &PASS);
        }
    }
}

#[test]
fn plain_stdout_is_context_on_session_start_and_prompt_submit_only() {
    // Claude Code: "The exceptions are UserPromptSubmit and SessionStart, where stdout is added
    // as context". Codex: "Plain text on stdout is added as extra developer context" (the same two
    // events); "Plain text on stdout is ignored" (tool events).
    for dialect in Dialect::ALL {
        for event in [EventName::SessionStart, EventName::UserPromptSubmit] {
            let o = decode(&end(Some(0), "branch: main\n", ""), event, dialect);
            check(
                &format!("{dialect:?} {event:?}"),
                &o,
                &Row {
                    context: Some("branch: main"),
                    ..PASS
                },
            );
        }
        for event in [EventName::PreToolUse, EventName::PostToolUse] {
            let o = decode(&end(Some(0), "plain", ""), event, dialect);
            check(&format!("{dialect:?} {event:?}"), &o, &PASS);
        }
    }
    check("cc Stop", &cc(EventName::Stop, 0, "plain", ""), &PASS);
    check(
        "codex Stop",
        &codex(EventName::Stop, 0, "plain", ""),
        &Row {
            note: Some("hook returned invalid stop hook JSON output"),
            ..row("error")
        },
    );
}

#[test]
fn json_that_is_not_an_object_is_an_error() {
    for dialect in Dialect::ALL {
        for stdout in ["{not json", "{\"decision\": "] {
            let o = decode(&end(Some(0), stdout, ""), EventName::PreToolUse, dialect);
            assert_eq!(o.verdict, Verdict::Error, "{dialect:?} {stdout}");
        }
    }
    // Codex reads `[` as JSON too; Claude Code only `{`.
    assert_eq!(
        codex(EventName::PreToolUse, 0, "[1,2]", "").verdict,
        Verdict::Error
    );
    check(
        "cc [1,2]",
        &cc(EventName::PreToolUse, 0, "[1,2]", ""),
        &PASS,
    );
}

#[test]
fn claude_code_reads_json_only_from_a_leading_brace() {
    // "[12:00] ✓ Prompt validated" is plain text to Claude Code: context on UserPromptSubmit.
    let line = "[12:00] ✓ Prompt validated";
    check(
        "cc",
        &cc(EventName::UserPromptSubmit, 0, &format!("  {line}\n"), ""),
        &Row {
            context: Some(line),
            ..PASS
        },
    );
    let o = codex(EventName::UserPromptSubmit, 0, line, "");
    assert_eq!(o.verdict, Verdict::Error, "Codex parses `[` as JSON");
}

// ---------------------------------------------------------------------------------------------
// Claude Code

#[test]
fn claude_code_exit_two_blocks_with_stderr_and_ignores_stdout() {
    // "Exit 2 means a blocking error. Claude Code ignores stdout and any JSON in it."
    for event in EventName::ALL {
        let o = cc(event, 2, r#"{"decision":"approve"}"#, "  no way \n");
        // PermissionRequest: "Denies the permission".
        let decision = match event {
            EventName::PermissionRequest => "deny",
            _ => "block",
        };
        check(
            event.as_str(),
            &o,
            &Row {
                reason: Some("no way"),
                ..row(decision)
            },
        );
    }
    // An empty stderr still blocks (the loop supplies a default reason).
    check(
        "empty stderr",
        &cc(EventName::PreToolUse, 2, "", ""),
        &row("block"),
    );
}

#[test]
fn claude_code_universal_fields() {
    // continue:false stops, with stopReason, and "takes precedence over any event-specific
    // decision fields" (the loop checks it first); systemMessage is kept for the user.
    for event in [
        EventName::UserPromptSubmit,
        EventName::PreToolUse,
        EventName::PostToolUse,
        EventName::Stop,
        EventName::SessionStart,
    ] {
        let o = cc(
            event,
            0,
            r#"{"continue":false,"stopReason":"build is red","systemMessage":"heads up","decision":"block","reason":"r"}"#,
            "",
        );
        assert!(o.stop, "{event:?}");
        assert_eq!(o.stop_reason.as_deref(), Some("build is red"));
        assert_eq!(o.system_message.as_deref(), Some("heads up"));
        assert_eq!(o.record_decision(), "stop");
    }
    // Values of the wrong type are ignored; suppressOutput has nothing to hide in dsh.
    let o = cc(
        EventName::Stop,
        0,
        r#"{"continue":"no","decision":"deny","reason":7,"suppressOutput":true,"extra":1}"#,
        "",
    );
    check("lenient", &o, &PASS);
}

#[test]
fn claude_code_top_level_decision_block() {
    // UserPromptSubmit, PostToolUse, Stop, SubagentStop: decision "block" with reason.
    for event in [
        EventName::UserPromptSubmit,
        EventName::PostToolUse,
        EventName::Stop,
        EventName::SubagentStop,
    ] {
        let o = cc(
            event,
            0,
            r#"{"decision":"block","reason":"tests first"}"#,
            "",
        );
        check(
            event.as_str(),
            &o,
            &Row {
                reason: Some("tests first"),
                ..row("block")
            },
        );
    }
    // "To allow the action to proceed, omit decision": a reason alone does nothing.
    check(
        "reason only",
        &cc(EventName::Stop, 0, r#"{"reason":"why"}"#, ""),
        &Row {
            reason: Some("why"),
            ..PASS
        },
    );
}

#[test]
fn claude_code_pre_tool_use_decision_control() {
    let pre = |json: &str| cc(EventName::PreToolUse, 0, json, "");
    for (decision, expected) in [
        ("allow", "allow"),
        ("deny", "deny"),
        ("ask", "ask"),
        // `defer` waits for an approver that dsh does not have: like ask.
        ("defer", "ask"),
    ] {
        let o = pre(&format!(
            r#"{{"decision":"block","reason":"top","hookSpecificOutput":{{"hookEventName":"PreToolUse","permissionDecision":"{decision}","permissionDecisionReason":"why"}}}}"#
        ));
        check(
            decision,
            &o,
            &Row {
                reason: Some("why"),
                ..row(expected)
            },
        );
    }
    // "The deprecated values approve and block map to allow and deny respectively."
    check(
        "approve",
        &pre(r#"{"decision":"approve","reason":"ok"}"#),
        &Row {
            reason: Some("ok"),
            ..row("allow")
        },
    );
    check(
        "block",
        &pre(r#"{"decision":"block","reason":"no"}"#),
        &Row {
            reason: Some("no"),
            ..row("deny")
        },
    );
    // No event name: accepted. Another event's: its fields are ignored, top-level ones kept.
    check(
        "no name",
        &pre(r#"{"hookSpecificOutput":{"permissionDecision":"deny"}}"#),
        &row("deny"),
    );
    let o = pre(
        r#"{"systemMessage":"m","hookSpecificOutput":{"hookEventName":"UserPromptSubmit","permissionDecision":"deny","additionalContext":"c"}}"#,
    );
    check("other event", &o, &PASS);
    assert_eq!(o.system_message.as_deref(), Some("m"));
    // additionalContext: "String added to Claude's context before the tool executes".
    check(
        "context",
        &pre(
            r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","additionalContext":"prod!"}}"#,
        ),
        &Row {
            context: Some("prod!"),
            ..PASS
        },
    );
}

#[test]
fn claude_code_updated_input() {
    let pre = |json: &str| cc(EventName::PreToolUse, 0, json, "");
    let update = json!({"command": "echo safe"});
    // With allow, and (as upstream applies it) with no decision at all.
    for json in [
        r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow","updatedInput":{"command":"echo safe"}}}"#,
        r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","updatedInput":{"command":"echo safe"}}}"#,
    ] {
        assert_eq!(pre(json).updated_input, Some(update.clone()), "{json}");
    }
    // Beside deny or ask the call does not run, so the rewrite is moot.
    for decision in ["deny", "ask"] {
        let o = pre(&format!(
            r#"{{"hookSpecificOutput":{{"hookEventName":"PreToolUse","permissionDecision":"{decision}","updatedInput":{{"command":"x"}}}}}}"#
        ));
        assert_eq!(o.updated_input, None, "{decision}");
    }
    // Not an object: carried, so that dsh refuses the call instead of running the original.
    let o = pre(r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","updatedInput":"echo"}}"#);
    assert_eq!(o.updated_input, Some(json!("echo")));
}

#[test]
fn claude_code_context_fields_by_event() {
    for (event, takes) in [
        (EventName::SessionStart, true),
        (EventName::UserPromptSubmit, true),
        (EventName::PostToolUse, true),
        (EventName::SubagentStart, true),
        (EventName::Stop, false),
        (EventName::SessionEnd, false),
    ] {
        let o = cc(
            event,
            0,
            &format!(
                r#"{{"hookSpecificOutput":{{"hookEventName":"{}","additionalContext":"ctx"}}}}"#,
                event.as_str()
            ),
            "",
        );
        assert_eq!(o.additional_context.is_some(), takes, "{event:?}");
    }
}

// ---------------------------------------------------------------------------------------------
// Codex: PreToolUse

fn codex_pre(json: &str) -> HookOutput {
    codex(EventName::PreToolUse, 0, json, "")
}

#[test]
fn codex_pre_tool_use_supported_outputs() {
    check(
        "deny",
        &codex_pre(
            r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"do not run that"}}"#,
        ),
        &Row {
            reason: Some("do not run that"),
            ..row("deny")
        },
    );
    check(
        "legacy block",
        &codex_pre(r#"{"decision":"block","reason":"do not run that"}"#),
        &Row {
            reason: Some("do not run that"),
            ..row("block")
        },
    );
    check(
        "exit 2",
        &codex(EventName::PreToolUse, 2, "", "blocked by policy\n"),
        &Row {
            reason: Some("blocked by policy"),
            ..row("block")
        },
    );
    check(
        "context",
        &codex_pre(
            r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","additionalContext":"touches generated files"}}"#,
        ),
        &Row {
            context: Some("touches generated files"),
            ..PASS
        },
    );
    // Context beside a deny is kept (upstream records both).
    let o = codex_pre(
        r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"no","additionalContext":"nope"}}"#,
    );
    assert_eq!(
        (o.verdict, o.additional_context.as_deref()),
        (Verdict::Deny, Some("nope"))
    );
    let o = codex_pre(
        r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow","updatedInput":{"command":"echo rewritten"}}}"#,
    );
    check("rewrite", &o, &row("allow"));
    assert_eq!(o.updated_input, Some(json!({"command": "echo rewritten"})));
    // systemMessage is shown whatever else happens.
    assert_eq!(
        codex_pre(r#"{"systemMessage":"checked"}"#)
            .system_message
            .as_deref(),
        Some("checked")
    );
    check("plain stdout", &codex_pre("hook ran successfully"), &PASS);
}

#[test]
fn codex_pre_tool_use_unsupported_outputs_fail_open_as_upstream() {
    // Upstream marks these failed and runs the call; nothing in them asks dsh to hold it back.
    for (json, message) in [
        (
            r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"allow"}}"#,
            "PreToolUse hook returned unsupported permissionDecision:allow",
        ),
        (
            r#"{"decision":"approve"}"#,
            "PreToolUse hook returned unsupported decision:approve",
        ),
        (
            r#"{"stopReason":"why"}"#,
            "PreToolUse hook returned unsupported stopReason",
        ),
        (
            r#"{"suppressOutput":true}"#,
            "PreToolUse hook returned unsupported suppressOutput",
        ),
        (
            r#"{"reason":"no decision"}"#,
            "PreToolUse hook returned reason without decision",
        ),
        (
            r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecisionReason":"r"}}"#,
            "PreToolUse hook returned permissionDecisionReason without permissionDecision",
        ),
        (r#"{"unknown":1}"#, "invalid pre-tool-use JSON output"),
        (
            r#"{"hookSpecificOutput":{"hookEventName":"PostToolUse"}}"#,
            "invalid pre-tool-use JSON output",
        ),
        (
            r#"{"hookSpecificOutput":{"additionalContext":"x"}}"#,
            "hookEventName is missing",
        ),
        (r#"{"continue":"no"}"#, "continue must be a boolean"),
    ] {
        let o = codex_pre(json);
        check(
            json,
            &o,
            &Row {
                note: Some(message),
                ..row("error")
            },
        );
    }
}

#[test]
fn codex_pre_tool_use_is_stricter_where_upstream_would_run_a_call_the_hook_held_back() {
    for (json, stderr, exit, message, reason) in [
        (
            r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny"}}"#,
            "",
            0,
            "permissionDecision:deny without a non-empty permissionDecisionReason",
            None,
        ),
        (
            r#"{"decision":"block","reason":"  "}"#,
            "",
            0,
            "decision:block without a non-empty reason",
            None,
        ),
        (
            r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"ask","permissionDecisionReason":"please confirm"}}"#,
            "",
            0,
            "unsupported permissionDecision:ask",
            Some("please confirm"),
        ),
        (
            r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","updatedInput":{"command":"echo x"}}}"#,
            "",
            0,
            "updatedInput without permissionDecision:allow",
            Some(
                "PreToolUse hook returned updatedInput without permissionDecision:allow, which Codex does not accept; the call was not run",
            ),
        ),
        (
            r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","permissionDecision":"deny","permissionDecisionReason":"no","updatedInput":{"command":"x"}}}"#,
            "",
            0,
            "updatedInput without permissionDecision:allow",
            Some("no"),
        ),
        (
            r#"{"decision":"block","reason":"no","extra":true}"#,
            "",
            0,
            "invalid pre-tool-use JSON output",
            Some("no"),
        ),
        (
            "",
            "",
            2,
            "exited with code 2 but did not write a blocking reason to stderr",
            None,
        ),
    ] {
        let o = codex(EventName::PreToolUse, exit, json, stderr);
        check(
            json,
            &o,
            &Row {
                reason,
                note: Some(message),
                ..row("block")
            },
        );
        assert_eq!(o.updated_input, None, "{json}: never rewritten");
    }
    // continue:false is unsupported upstream (the call runs); dsh refuses it and stops.
    let o = codex_pre(r#"{"continue":false,"stopReason":"freeze"}"#);
    check(
        "continue:false",
        &o,
        &Row {
            stop_reason: Some("freeze"),
            note: Some("unsupported continue:false"),
            ..row("stop")
        },
    );
}

// ---------------------------------------------------------------------------------------------
// Codex: PostToolUse, UserPromptSubmit, Stop, SessionStart, SessionEnd

#[test]
fn codex_post_tool_use() {
    let post = |json: &str| codex(EventName::PostToolUse, 0, json, "");
    check(
        "block",
        &post(r#"{"decision":"block","reason":"bash output looked sketchy"}"#),
        &Row {
            reason: Some("bash output looked sketchy"),
            ..row("block")
        },
    );
    check(
        "exit 2",
        &codex(EventName::PostToolUse, 2, "", "post hook says pause"),
        &Row {
            reason: Some("post hook says pause"),
            ..row("block")
        },
    );
    check(
        "context",
        &post(
            r#"{"hookSpecificOutput":{"hookEventName":"PostToolUse","additionalContext":"Remember the cleanup note."}}"#,
        ),
        &Row {
            context: Some("Remember the cleanup note."),
            ..PASS
        },
    );
    // continue:false replaces the result with the reason, else the stop reason, else a default.
    check(
        "stop with reason",
        &post(
            r#"{"continue":false,"stopReason":"halt after bash output","reason":"post-tool hook says stop"}"#,
        ),
        &Row {
            reason: Some("post-tool hook says stop"),
            stop_reason: Some("halt after bash output"),
            ..row("stop")
        },
    );
    check(
        "stop",
        &post(r#"{"continue":false,"stopReason":"halt"}"#),
        &Row {
            reason: Some("halt"),
            stop_reason: Some("halt"),
            ..row("stop")
        },
    );
    check(
        "stop bare",
        &post(r#"{"continue":false}"#),
        &Row {
            reason: Some("PostToolUse hook stopped execution"),
            ..row("stop")
        },
    );
    for (json, exit, stderr, message) in [
        (
            r#"{"decision":"block"}"#,
            0,
            "",
            "PostToolUse hook returned decision:block without a non-empty reason",
        ),
        (
            r#"{"reason":"r"}"#,
            0,
            "",
            "PostToolUse hook returned reason without decision",
        ),
        (
            r#"{"suppressOutput":true}"#,
            0,
            "",
            "PostToolUse hook returned unsupported suppressOutput",
        ),
        (
            r#"{"hookSpecificOutput":{"hookEventName":"PostToolUse","updatedMCPToolOutput":{"ok":true},"additionalContext":"c"}}"#,
            0,
            "",
            "PostToolUse hook returned unsupported updatedMCPToolOutput",
        ),
        (
            "",
            2,
            "",
            "PostToolUse hook exited with code 2 but did not write feedback to stderr",
        ),
        (
            r#"{"hookSpecificOutput":{"hookEventName":"PostToolUse","updatedToolOutput":"x"}}"#,
            0,
            "",
            "invalid post-tool-use JSON output",
        ),
    ] {
        check(
            json,
            &codex(EventName::PostToolUse, exit, json, stderr),
            &Row {
                note: Some(message),
                ..row("error")
            },
        );
    }
    check("plain", &post("plain text only"), &PASS);
}

#[test]
fn codex_user_prompt_submit() {
    let submit = |json: &str| codex(EventName::UserPromptSubmit, 0, json, "");
    check(
        "block",
        &submit(
            r#"{"decision":"block","reason":"slow down","hookSpecificOutput":{"hookEventName":"UserPromptSubmit","additionalContext":"kept"}}"#,
        ),
        &Row {
            reason: Some("slow down"),
            context: Some("kept"),
            ..row("block")
        },
    );
    check(
        "stop keeps context for later turns",
        &submit(
            r#"{"continue":false,"stopReason":"pause","hookSpecificOutput":{"hookEventName":"UserPromptSubmit","additionalContext":"later"}}"#,
        ),
        &Row {
            stop_reason: Some("pause"),
            context: Some("later"),
            ..row("stop")
        },
    );
    check(
        "exit 2",
        &codex(EventName::UserPromptSubmit, 2, "", "blocked by policy\n"),
        &Row {
            reason: Some("blocked by policy"),
            ..row("block")
        },
    );
    // Stricter than upstream (which processes the prompt): blocks, without the context.
    check(
        "block without reason",
        &submit(
            r#"{"decision":"block","hookSpecificOutput":{"hookEventName":"UserPromptSubmit","additionalContext":"dropped"}}"#,
        ),
        &Row {
            note: Some("decision:block without a non-empty reason"),
            ..row("block")
        },
    );
    check(
        "exit 2 without stderr",
        &codex(EventName::UserPromptSubmit, 2, "", ""),
        &Row {
            note: Some("did not write a blocking reason to stderr"),
            ..row("block")
        },
    );
    check(
        "unknown field",
        &submit(
            r#"{"hookSpecificOutput":{"hookEventName":"UserPromptSubmit","additionalContext":"x","extra":1}}"#,
        ),
        &Row {
            note: Some("invalid user prompt submit JSON output"),
            ..row("error")
        },
    );
}

#[test]
fn codex_stop() {
    let stop = |json: &str| codex(EventName::Stop, 0, json, "");
    check(
        "block continues with the reason as the prompt",
        &stop(r#"{"decision":"block","reason":"Run one more pass over the failing tests."}"#),
        &Row {
            reason: Some("Run one more pass over the failing tests."),
            ..row("block")
        },
    );
    check(
        "exit 2",
        &codex(EventName::Stop, 2, "", "continue please"),
        &Row {
            reason: Some("continue please"),
            ..row("block")
        },
    );
    check(
        "continue:false wins over block",
        &stop(
            r#"{"continue":false,"stopReason":"done for today","decision":"block","reason":"more"}"#,
        ),
        &Row {
            reason: None,
            stop_reason: Some("done for today"),
            ..row("stop")
        },
    );
    for (json, exit, message) in [
        (
            r#"{"decision":"block"}"#,
            0,
            "Stop hook returned decision:block without a non-empty reason",
        ),
        (
            "",
            2,
            "Stop hook exited with code 2 but did not write a continuation prompt to stderr",
        ),
        (
            r#"{"hookSpecificOutput":{"hookEventName":"Stop"}}"#,
            0,
            "invalid stop hook JSON output",
        ),
    ] {
        check(
            json,
            &codex(EventName::Stop, exit, json, ""),
            &Row {
                note: Some(message),
                ..row("error")
            },
        );
    }
}

#[test]
fn codex_session_start_and_end() {
    check(
        "context",
        &codex(
            EventName::SessionStart,
            0,
            r#"{"hookSpecificOutput":{"hookEventName":"SessionStart","additionalContext":"Load the conventions."}}"#,
            "",
        ),
        &Row {
            context: Some("Load the conventions."),
            ..PASS
        },
    );
    check(
        "stop",
        &codex(
            EventName::SessionStart,
            0,
            r#"{"continue":false,"stopReason":"pause","hookSpecificOutput":{"hookEventName":"SessionStart","additionalContext":"kept"}}"#,
            "",
        ),
        &Row {
            stop_reason: Some("pause"),
            context: Some("kept"),
            ..row("stop")
        },
    );
    check(
        "exit 2 is a failure",
        &codex(EventName::SessionStart, 2, "", "no"),
        &Row {
            note: Some("exit code 2"),
            ..row("error")
        },
    );
    check(
        "session end exit 2",
        &codex(EventName::SessionEnd, 2, "", "no"),
        &Row {
            note: Some("exit code 2"),
            ..row("error")
        },
    );
    let o = codex(
        EventName::SessionEnd,
        0,
        r#"{"systemMessage":"saved notes"}"#,
        "",
    );
    check("session end", &o, &PASS);
    assert_eq!(o.system_message.as_deref(), Some("saved notes"));
}

mod properties {
    use proptest::collection::vec;
    use proptest::prelude::*;
    use serde_json::{Map, Value};

    use super::*;

    const KEYS: [&str; 12] = [
        "decision",
        "reason",
        "continue",
        "stopReason",
        "systemMessage",
        "hookSpecificOutput",
        "hookEventName",
        "permissionDecision",
        "permissionDecisionReason",
        "additionalContext",
        "updatedInput",
        "other",
    ];

    const WORDS: [&str; 12] = [
        "approve",
        "block",
        "allow",
        "deny",
        "ask",
        "defer",
        "PreToolUse",
        "PostToolUse",
        "Stop",
        "SessionStart",
        "UserPromptSubmit",
        "",
    ];

    /// JSON a hook might print: the keys the decoder reads, with values of any type.
    fn output() -> impl Strategy<Value = Value> {
        let leaf = prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            prop::sample::select(&WORDS[..]).prop_map(Value::from),
            "(?s).{0,12}".prop_map(Value::String),
        ];
        leaf.prop_recursive(3, 32, 6, |inner| {
            prop_oneof![
                vec(inner.clone(), 0..3).prop_map(Value::Array),
                vec((prop::sample::select(&KEYS[..]), inner), 0..6).prop_map(|pairs| {
                    Value::Object(
                        pairs
                            .into_iter()
                            .map(|(k, v)| (k.to_owned(), v))
                            .collect::<Map<_, _>>(),
                    )
                }),
            ]
        })
    }

    fn event_name() -> impl Strategy<Value = EventName> {
        prop::sample::select(vec![
            EventName::SessionStart,
            EventName::UserPromptSubmit,
            EventName::PreToolUse,
            EventName::PostToolUse,
            EventName::Stop,
            EventName::SubagentStart,
            EventName::SubagentStop,
        ])
    }

    fn dialect() -> impl Strategy<Value = Dialect> {
        prop::sample::select(Dialect::ALL.to_vec())
    }

    /// Stdout: JSON of the right shape (maybe broken or padded), or any text.
    fn stdout() -> impl Strategy<Value = String> {
        prop_oneof![
            (
                output(),
                "[ \t\n]{0,2}",
                any::<prop::sample::Index>(),
                any::<bool>()
            )
                .prop_map(|(json, pad, cut, truncate)| {
                    let mut text = format!("{pad}{json}{pad}");
                    if truncate {
                        let mut at = cut.index(text.len() + 1);
                        while !text.is_char_boundary(at) {
                            at -= 1;
                        }
                        text.truncate(at);
                    }
                    text
                }),
            "(?s).{0,40}",
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig::with_cases(512))]

        /// Whatever a hook prints and however it ends, decoding never panics, and the exit
        /// status rules hold: a failure or an exit other than 0 and 2 is an error, exit 2
        /// blocks with the trimmed stderr as the reason (Codex: only with a reason), and only an
        /// error carries a note.
        #[test]
        fn any_output_decodes_without_panic(
            exit in prop_oneof![Just(Some(0)), Just(Some(2)), any::<Option<i32>>()],
            out in stdout(),
            err in "(?s).{0,24}",
            failure in prop::option::of("(?s).{0,12}"),
            event in event_name(),
            dialect in dialect(),
        ) {
            let end = RunEnd {
                exit_code: exit,
                stdout: out,
                stderr: err.clone(),
                failure: failure.clone(),
                duration: std::time::Duration::ZERO,
                sandbox: None,
            };
            let decoded = decode(&end, event, dialect);
            prop_assert_eq!(decoded.verdict == Verdict::Error, decoded.error_note().is_some());
            let _ = decoded.record_decision();
            match (failure, exit) {
                (Some(_), _) => prop_assert_eq!(decoded.verdict, Verdict::Error),
                // Codex blocks with exit 2 only on the events that can block, and on Stop and
                // PostToolUse only with a reason on stderr (PreToolUse and UserPromptSubmit block
                // even without one: see `codex_exit_two`).
                (None, Some(2))
                    if dialect == Dialect::Codex
                        && match event {
                            EventName::PreToolUse | EventName::UserPromptSubmit => false,
                            EventName::Stop | EventName::SubagentStop | EventName::PostToolUse => {
                                err.trim().is_empty()
                            }
                            EventName::PermissionRequest => err.trim().is_empty(),
                            _ => true,
                        } =>
                {
                    prop_assert_eq!(decoded.verdict, Verdict::Error);
                }
                (None, Some(2)) if event == EventName::PermissionRequest => {
                    prop_assert_eq!(decoded.verdict, Verdict::Deny);
                }
                (None, Some(2)) => {
                    prop_assert_eq!(decoded.verdict, Verdict::Block);
                    let reason = err.trim();
                    prop_assert_eq!(
                        decoded.reason.as_deref(),
                        (!reason.is_empty()).then_some(reason)
                    );
                }
                (None, Some(0)) => {}
                (None, _) => prop_assert_eq!(decoded.verdict, Verdict::Error),
            }
        }
    }
}

// ---------------------------------------------------------------------------------------------
// PermissionRequest

#[test]
fn permission_request_answers_like_a_person_or_leaves_it_to_people() {
    let pr = EventName::PermissionRequest;
    let allow = r#"{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"allow"}}}"#;
    let deny = r#"{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"deny","message":"not here"}}}"#;
    for dialect in Dialect::ALL {
        let o = decode(&end(Some(0), allow, ""), pr, dialect);
        check(&format!("{dialect:?} allow"), &o, &row("allow"));
        let o = decode(&end(Some(0), deny, ""), pr, dialect);
        check(
            &format!("{dialect:?} deny"),
            &o,
            &Row {
                reason: Some("not here"),
                ..row("deny")
            },
        );
        // No decision, plain text or nothing: people decide.
        for stdout in ["", "looks fine", r#"{"systemMessage":"seen"}"#] {
            let o = decode(&end(Some(0), stdout, ""), pr, dialect);
            assert_eq!(o.verdict, Verdict::Pass, "{dialect:?} {stdout}");
        }
    }
    // Claude Code: `interrupt: true` beside a deny also stops the turn.
    let o = cc(
        pr,
        0,
        r#"{"hookSpecificOutput":{"decision":{"behavior":"deny","interrupt":true}}}"#,
        "",
    );
    assert_eq!((o.verdict, o.stop), (Verdict::Deny, true));
    // Codex: what its schema calls unsupported fails the hook, which decides nothing.
    for stdout in [
        r#"{"continue":false}"#,
        r#"{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"allow","updatedInput":{}}}}"#,
        r#"{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"deny","interrupt":true}}}"#,
        r#"{"hookSpecificOutput":{"hookEventName":"PreToolUse","decision":{"behavior":"allow"}}}"#,
        r#"{"decision":"approve"}"#,
    ] {
        let o = codex(pr, 0, stdout, "");
        assert_eq!(o.verdict, Verdict::Error, "{stdout}");
    }
    let o = codex(pr, 2, "", "");
    assert_eq!(o.verdict, Verdict::Error, "exit 2 without a reason");
    let o = codex(
        pr,
        0,
        r#"{"hookSpecificOutput":{"hookEventName":"PermissionRequest","decision":{"behavior":"deny"}}}"#,
        "",
    );
    assert_eq!(
        o.reason.as_deref(),
        Some("PermissionRequest hook denied approval")
    );
}
