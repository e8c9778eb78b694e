//! Decoding one hook's exit status and output into a neutral [`HookOutput`].
//!
//! - **exit 2** blocks; the trimmed stderr is the reason; stdout is ignored (not even parsed).
//! - **exit 0**: stdout that starts with `{` or `[` must be a JSON object (anything else is a
//!   non-blocking error: a hook that meant to decide and failed is worth a record). Read from it:
//!   `continue` (false stops), `stopReason`, `systemMessage`, `decision` (`approve`/`block` only),
//!   `reason`, and `hookSpecificOutput` — honoured only when its `hookEventName` is this event or
//!   absent — with `permissionDecision` (`allow`/`deny`/`ask`, PreToolUse only; it overrides
//!   `decision`), `permissionDecisionReason` (overrides `reason`) and `additionalContext`. Values
//!   of the wrong type are ignored. Plain text on stdout is ignored, except that Codex adds it as
//!   context on SessionStart and UserPromptSubmit.
//! - **anything else** (other exit codes, signals, timeouts, cancellation, failure to start) is a
//!   non-blocking error.

use serde_json::{Map, Value};

use super::runner::RunEnd;
use super::{Dialect, EventName};

/// What one hook asked for, as recorded in `hook/result`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Verdict {
    /// Nothing.
    Pass,
    /// `permissionDecision: "allow"` or `decision: "approve"`.
    Allow,
    /// `permissionDecision: "ask"`.
    Ask,
    /// `permissionDecision: "deny"`.
    Deny,
    /// Exit 2 or `decision: "block"`.
    Block,
    /// The hook failed; its output is ignored.
    Error,
}

/// One hook's decoded output.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) struct HookOutput {
    pub verdict: Verdict,
    /// The reason for a block, deny or ask.
    pub reason: Option<String>,
    /// `continue: false`.
    pub stop: bool,
    pub stop_reason: Option<String>,
    pub additional_context: Option<String>,
    pub system_message: Option<String>,
    /// The hook asked to rewrite the tool input (not honoured; logged).
    pub updated_input: bool,
    /// Why the hook counts as failed, for the log and the record's summary.
    pub note: Option<String>,
}

impl HookOutput {
    fn with(verdict: Verdict) -> Self {
        Self {
            verdict,
            reason: None,
            stop: false,
            stop_reason: None,
            additional_context: None,
            system_message: None,
            updated_input: false,
            note: None,
        }
    }

    fn error(note: String) -> Self {
        Self {
            note: Some(note),
            ..Self::with(Verdict::Error)
        }
    }

    /// The `decision` string of the `hook/result` record.
    pub(super) fn record_decision(&self) -> &'static str {
        match self.verdict {
            Verdict::Pass if self.stop => "stop",
            Verdict::Pass => "pass",
            Verdict::Allow => "allow",
            Verdict::Ask => "ask",
            Verdict::Deny => "deny",
            Verdict::Block => "block",
            Verdict::Error => "error",
        }
    }

    /// Why the hook failed, when it did.
    pub(super) fn error_note(&self) -> Option<&str> {
        match self.verdict {
            Verdict::Error => Some(self.note.as_deref().unwrap_or("failed")),
            _ => None,
        }
    }
}

/// Decodes how a hook of `dialect` on `event` ended.
pub(super) fn decode(end: &RunEnd, event: EventName, dialect: Dialect) -> HookOutput {
    if let Some(failure) = &end.failure {
        return HookOutput::error(failure.clone());
    }
    match end.exit_code {
        Some(2) => HookOutput {
            reason: non_empty(end.stderr.trim()),
            ..HookOutput::with(Verdict::Block)
        },
        Some(0) => decode_stdout(end.stdout.trim(), event, dialect),
        Some(code) => HookOutput::error(format!("exit code {code}")),
        None => HookOutput::error("no exit status".to_owned()),
    }
}

fn decode_stdout(stdout: &str, event: EventName, dialect: Dialect) -> HookOutput {
    if stdout.starts_with('{') || stdout.starts_with('[') {
        return match serde_json::from_str::<Value>(stdout) {
            Ok(Value::Object(map)) => decode_object(&map, event),
            Ok(_) => HookOutput::error("stdout is JSON but not an object".to_owned()),
            Err(e) => HookOutput::error(format!("stdout is not valid JSON: {e}")),
        };
    }
    let mut out = HookOutput::with(Verdict::Pass);
    if dialect == Dialect::Codex
        && matches!(event, EventName::SessionStart | EventName::UserPromptSubmit)
    {
        out.additional_context = non_empty(stdout);
    }
    out
}

fn decode_object(map: &Map<String, Value>, event: EventName) -> HookOutput {
    let text =
        |m: &Map<String, Value>, key: &str| m.get(key).and_then(Value::as_str).and_then(non_empty);
    let mut out = HookOutput::with(match map.get("decision").and_then(Value::as_str) {
        Some("approve") => Verdict::Allow,
        Some("block") => Verdict::Block,
        _ => Verdict::Pass,
    });
    out.reason = text(map, "reason");
    if map.get("continue").and_then(Value::as_bool) == Some(false) {
        out.stop = true;
        out.stop_reason = text(map, "stopReason");
    }
    out.system_message = text(map, "systemMessage");

    let Some(specific) = map.get("hookSpecificOutput").and_then(Value::as_object) else {
        return out;
    };
    match specific.get("hookEventName") {
        None | Some(Value::Null) => {}
        Some(Value::String(name)) if name == event.as_str() => {}
        // Written for another event (or not a name at all): its event-scoped fields do not apply.
        Some(_) => return out,
    }
    if event == EventName::PreToolUse {
        let decision = match specific.get("permissionDecision").and_then(Value::as_str) {
            Some("allow") => Some(Verdict::Allow),
            Some("deny") => Some(Verdict::Deny),
            Some("ask") => Some(Verdict::Ask),
            _ => None,
        };
        if let Some(decision) = decision {
            out.verdict = decision;
        }
        if let Some(reason) = text(specific, "permissionDecisionReason") {
            out.reason = Some(reason);
        }
    }
    out.additional_context = text(specific, "additionalContext");
    out.updated_input = specific.get("updatedInput").is_some_and(Value::is_object);
    out
}

fn non_empty(s: &str) -> Option<String> {
    let s = s.trim();
    (!s.is_empty()).then(|| s.to_owned())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;

    fn end(exit: Option<i32>, stdout: &str, stderr: &str) -> RunEnd {
        RunEnd {
            exit_code: exit,
            stdout: stdout.to_owned(),
            stderr: stderr.to_owned(),
            failure: None,
            duration: Duration::ZERO,
        }
    }

    fn cc(exit: i32, stdout: &str, event: EventName) -> HookOutput {
        decode(&end(Some(exit), stdout, ""), event, Dialect::ClaudeCode)
    }

    #[test]
    fn exit_two_blocks_with_stderr_and_ignores_stdout() {
        let o = decode(
            &end(Some(2), r#"{"decision":"approve"}"#, "  no way \n"),
            EventName::PreToolUse,
            Dialect::ClaudeCode,
        );
        assert_eq!(o.verdict, Verdict::Block);
        assert_eq!(o.reason.as_deref(), Some("no way"));
        assert_eq!(o.record_decision(), "block");
        let o = decode(&end(Some(2), "", ""), EventName::Stop, Dialect::Codex);
        assert_eq!((o.verdict, o.reason), (Verdict::Block, None));
    }

    #[test]
    fn other_exits_and_failures_are_errors() {
        for o in [
            decode(
                &end(Some(1), "{\"decision\":\"block\"}", "x"),
                EventName::Stop,
                Dialect::Codex,
            ),
            decode(&end(Some(127), "", ""), EventName::Stop, Dialect::Codex),
            decode(&end(None, "", ""), EventName::Stop, Dialect::Codex),
            decode(
                &RunEnd {
                    failure: Some("timed out after 5ms".into()),
                    ..end(Some(2), "", "")
                },
                EventName::Stop,
                Dialect::Codex,
            ),
            cc(0, "{not json", EventName::PreToolUse),
            cc(0, "[1,2]", EventName::PreToolUse),
        ] {
            assert_eq!(o.verdict, Verdict::Error, "{o:?}");
            assert_eq!(o.record_decision(), "error");
            assert!(o.error_note().is_some());
        }
    }

    #[test]
    fn json_fields() {
        let o = cc(
            0,
            r#"{"decision":"block","reason":"bad","continue":false,"stopReason":"halt","systemMessage":"hi"}"#,
            EventName::PostToolUse,
        );
        assert_eq!(o.verdict, Verdict::Block);
        assert_eq!(o.reason.as_deref(), Some("bad"));
        assert!(o.stop);
        assert_eq!(o.stop_reason.as_deref(), Some("halt"));
        assert_eq!(o.system_message.as_deref(), Some("hi"));

        // Only approve/block are top-level decisions; wrong types are ignored.
        let o = cc(
            0,
            r#"{"decision":"deny","reason":7,"continue":"no"}"#,
            EventName::Stop,
        );
        assert_eq!((o.verdict, o.reason, o.stop), (Verdict::Pass, None, false));
        assert_eq!(
            cc(0, r#"{"decision":"approve"}"#, EventName::Stop).verdict,
            Verdict::Allow
        );

        let o = cc(0, r#"{"continue":false}"#, EventName::PreToolUse);
        assert_eq!(o.record_decision(), "stop");
        assert_eq!(
            cc(0, r#"{"unrelated":1}"#, EventName::PreToolUse).record_decision(),
            "pass"
        );
        assert_eq!(cc(0, "", EventName::PreToolUse).record_decision(), "pass");
    }

    #[test]
    fn permission_decisions_override_and_are_event_scoped() {
        let pre = |json: &str| cc(0, json, EventName::PreToolUse);
        for (decision, verdict) in [
            ("allow", Verdict::Allow),
            ("deny", Verdict::Deny),
            ("ask", Verdict::Ask),
            ("defer", Verdict::Block),
        ] {
            let o = pre(&format!(
                r#"{{"decision":"block","reason":"top","hookSpecificOutput":{{"hookEventName":"PreToolUse","permissionDecision":"{decision}","permissionDecisionReason":"why"}}}}"#
            ));
            assert_eq!(o.verdict, verdict, "{decision}");
            assert_eq!(o.reason.as_deref(), Some("why"));
        }
        // No event name: accepted.
        let o = pre(r#"{"hookSpecificOutput":{"permissionDecision":"deny"}}"#);
        assert_eq!((o.verdict, o.reason), (Verdict::Deny, None));
        // Another event's fields are ignored; top-level fields are kept.
        let o = pre(
            r#"{"systemMessage":"m","hookSpecificOutput":{"hookEventName":"UserPromptSubmit","permissionDecision":"deny","additionalContext":"c"}}"#,
        );
        assert_eq!(
            (o.verdict, o.additional_context, o.system_message.as_deref()),
            (Verdict::Pass, None, Some("m"))
        );
        // permissionDecision belongs to PreToolUse only.
        let o = cc(
            0,
            r#"{"hookSpecificOutput":{"hookEventName":"PostToolUse","permissionDecision":"deny","additionalContext":"ctx"}}"#,
            EventName::PostToolUse,
        );
        assert_eq!(
            (o.verdict, o.additional_context.as_deref()),
            (Verdict::Pass, Some("ctx"))
        );
        let o = pre(
            r#"{"hookSpecificOutput":{"permissionDecision":"allow","updatedInput":{"command":"x"}}}"#,
        );
        assert!(o.updated_input);
    }

    #[test]
    fn codex_plain_stdout_is_context_on_session_start_and_prompt_only() {
        let codex =
            |exit, stdout: &str, event| decode(&end(Some(exit), stdout, ""), event, Dialect::Codex);
        for event in [EventName::SessionStart, EventName::UserPromptSubmit] {
            assert_eq!(
                codex(0, " branch main \n", event)
                    .additional_context
                    .as_deref(),
                Some("branch main")
            );
            assert_eq!(codex(2, "stale", event).additional_context, None);
            assert_eq!(codex(1, "stale", event).additional_context, None);
            assert_eq!(cc(0, "plain", event).additional_context, None);
            assert_eq!(
                codex(0, r#"{"unrelated":true}"#, event).additional_context,
                None
            );
        }
        for event in [
            EventName::PreToolUse,
            EventName::PostToolUse,
            EventName::Stop,
        ] {
            assert_eq!(codex(0, "plain", event).additional_context, None);
        }
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
            /// blocks with the trimmed stderr as the reason, and only an error carries a note.
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
                };
                let decoded = decode(&end, event, dialect);
                prop_assert_eq!(decoded.verdict == Verdict::Error, decoded.error_note().is_some());
                let _ = decoded.record_decision();
                match (failure, exit) {
                    (Some(_), _) => prop_assert_eq!(decoded.verdict, Verdict::Error),
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
}
