//! Folding the outputs of several hooks into one [`MergedOutcome`].
//!
//! The strictest decision wins (deny/block > ask > allow > nothing); the reasons of the hooks that
//! reached the winning rank are joined by a blank line, in configured order, and a default names
//! the event when none gave one. `continue: false` is sticky and the first `stopReason` wins.
//! Context and system messages accumulate in configured order. The fold does not depend on which
//! process ended first, only on the configured order of the handlers.
//!
//! What each dialect's hooks do differs by event, and each keeps its own harness's effect:
//!
//! - **PostToolUse** cannot block (both references: "the tool already ran"). A Claude Code block
//!   or exit 2 is feedback shown to the model next to the tool's output ("prompts Claude with the
//!   reason"); a Codex one replaces the tool's result ("Codex records the feedback, replaces the
//!   tool result with that feedback"), and so does a Codex `continue: false`, after which the turn
//!   goes on. A Claude Code `continue: false` stops the turn after the call.
//! - **UserPromptSubmit** blocked or stopped: Claude Code "erases" the prompt, so its hooks'
//!   context goes too; Codex records the context for later turns even then.
//! - **SubagentStart**, **SubagentStop** and **SessionEnd** cannot stop anything (Codex: "doesn't
//!   stop the subagent from starting"; SessionEnd is advisory in both).
//! - **PermissionRequest** allowed: the allowing hooks' `updatedInput` rewrites the call as
//!   PreToolUse's does (two different rewrites refuse it), and their session rules
//!   (`updatedPermissions`) are all added, each once. A deny or a stop applies neither.
//! - **PermissionDenied** cannot undo the denial; any hook's `retry: true` tells the model it may
//!   retry (Claude Code adds its message when any hook asks for it).
//! - **PreCompact**: a Claude Code block (exit 2 or `decision: "block"`) stops the compaction;
//!   Codex's PreCompact only observes (its output schema has no decision).

use serde_json::Value;

use super::decode::{HookOutput, Verdict};
use super::{Decision, Dialect, EventName, MergedOutcome};

/// What one hook's output decides on `event`.
fn decides(event: EventName, decoded: &Decoded) -> Decision {
    if event == EventName::PreCompact && decoded.dialect == Dialect::Codex {
        return Decision::None;
    }
    rank(decoded.output.verdict)
}

fn rank(verdict: Verdict) -> Decision {
    match verdict {
        Verdict::Block | Verdict::Deny => Decision::Deny,
        Verdict::Ask => Decision::Ask,
        Verdict::Allow => Decision::Allow,
        Verdict::Pass | Verdict::Error => Decision::None,
    }
}

/// Whether `continue: false` on `event` stops the turn, for `dialect`.
fn stops_turn(event: EventName, dialect: Dialect) -> bool {
    match event {
        EventName::SessionStart
        | EventName::UserPromptSubmit
        | EventName::PreToolUse
        | EventName::Stop => true,
        EventName::PostToolUse | EventName::PostToolUseFailure | EventName::PermissionRequest => {
            dialect == Dialect::ClaudeCode
        }
        EventName::SubagentStart
        | EventName::SubagentStop
        | EventName::SessionEnd
        | EventName::Notification
        | EventName::StopFailure
        | EventName::InstructionsLoaded
        | EventName::PreCompact
        | EventName::PostCompact
        | EventName::PermissionDenied => false,
    }
}

/// One hook's decoded output, with what dsh made of its `updatedInput`: the arguments the call
/// would run with (already checked).
#[derive(Debug, Clone)]
pub(super) struct Decoded {
    pub dialect: Dialect,
    /// The handler's id, for the record of who decided.
    pub handler: String,
    pub output: HookOutput,
    /// The rewritten dsh arguments of a PreToolUse `updatedInput` that dsh can run.
    pub arguments: Option<Value>,
}

/// Merges the outputs of `event`'s hooks, given in configured order.
pub(super) fn merge(event: EventName, outputs: &[Decoded]) -> MergedOutcome {
    let mut merged = MergedOutcome::default();
    if event.can_block() {
        merged.decision = outputs
            .iter()
            .map(|d| decides(event, d))
            .max()
            .unwrap_or_default();
    }
    if matches!(merged.decision, Decision::Deny | Decision::Ask) {
        let reasons: Vec<&str> = outputs
            .iter()
            .filter(|d| decides(event, d) == merged.decision)
            .filter_map(|d| d.output.reason.as_deref())
            .collect();
        merged.reason = Some(if reasons.is_empty() {
            default_reason(event, merged.decision)
        } else {
            reasons.join("\n\n")
        });
    }
    if merged.decision != Decision::None {
        merged.decided_by = outputs
            .iter()
            .filter(|d| decides(event, d) == merged.decision)
            .map(|d| d.handler.clone())
            .collect();
    }
    let mut replacement = Vec::new();
    for Decoded {
        dialect, output, ..
    } in outputs
    {
        if output.verdict == Verdict::Error {
            // A failed hook decides nothing; Codex still shows its systemMessage.
            merged.system_messages.extend(output.system_message.clone());
            continue;
        }
        if output.stop && stops_turn(event, *dialect) && !merged.stop {
            merged.stop = true;
            merged.stop_reason = output.stop_reason.clone();
        }
        if matches!(
            event,
            EventName::PostToolUse | EventName::PostToolUseFailure
        ) && output.verdict == Verdict::Block
        {
            match dialect {
                Dialect::ClaudeCode => merged.feedback.push((
                    dialect.plugin_name(),
                    output
                        .reason
                        .clone()
                        .unwrap_or_else(|| default_reason(event, Decision::Deny)),
                )),
                Dialect::Codex => replacement.extend(output.reason.clone()),
            }
        }
        if let Some(context) = &output.additional_context {
            merged
                .additional_context
                .push((dialect.plugin_name(), context.clone()));
        }
        if let Some(message) = &output.system_message {
            merged.system_messages.push(message.clone());
        }
        merged.retry |= event == EventName::PermissionDenied && output.retry;
        // The last hook in configured order that names a title sets it.
        if let Some(title) = &output.session_title {
            merged.session_title = Some(title.clone());
        }
    }
    if !replacement.is_empty() {
        merged.replacement = Some(replacement.join("\n\n"));
    }
    if event == EventName::UserPromptSubmit && (merged.stop || merged.decision >= Decision::Ask) {
        merged
            .additional_context
            .retain(|(plugin, _)| *plugin == Dialect::Codex.plugin_name());
    }
    if event == EventName::PreToolUse && !merged.stop && merged.decision < Decision::Ask {
        rewrite(&mut merged, outputs);
    }
    if event == EventName::PermissionRequest && !merged.stop && merged.decision == Decision::Allow {
        rewrite(&mut merged, outputs);
        if merged.decision == Decision::Allow {
            for rule in outputs
                .iter()
                .filter(|d| d.output.verdict == Verdict::Allow)
                .flat_map(|d| &d.output.rules)
            {
                if !merged.rules.contains(rule) {
                    merged.rules.push(rule.clone());
                }
            }
        }
    }
    merged
}

/// The arguments the call runs with when hooks rewrote it. Hooks run concurrently, so two
/// different rewrites have no order to settle them (Codex takes the one that finished last);
/// dsh refuses such a call rather than pick one by timing.
fn rewrite(merged: &mut MergedOutcome, outputs: &[Decoded]) {
    let mut rewrites: Vec<&Value> = Vec::new();
    for arguments in outputs.iter().filter_map(|d| d.arguments.as_ref()) {
        if !rewrites.contains(&arguments) {
            rewrites.push(arguments);
        }
    }
    match rewrites.as_slice() {
        [] => {}
        [one] => merged.updated_input = Some((*one).clone()),
        _ => {
            merged.decision = Decision::Deny;
            merged.reason = Some(
                "hooks rewrote the call's input in different ways, so it was not run".to_owned(),
            );
        }
    }
}

fn default_reason(event: EventName, decision: Decision) -> String {
    match decision {
        Decision::Ask => format!("approval required by {} hook", event.as_str()),
        _ => format!("blocked by {} hook", event.as_str()),
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn out(verdict: Verdict, reason: Option<&str>) -> HookOutput {
        HookOutput {
            verdict,
            reason: reason.map(str::to_owned),
            stop: false,
            stop_reason: None,
            additional_context: None,
            system_message: None,
            updated_input: None,
            rules: Vec::new(),
            retry: false,
            session_title: None,
            note: None,
        }
    }

    fn cc(output: HookOutput) -> Decoded {
        Decoded {
            dialect: Dialect::ClaudeCode,
            handler: "h".to_owned(),
            output,
            arguments: None,
        }
    }

    fn codex(output: HookOutput) -> Decoded {
        Decoded {
            dialect: Dialect::Codex,
            ..cc(output)
        }
    }

    #[test]
    fn strictest_decision_wins_with_its_reasons_joined() {
        let m = merge(
            EventName::PreToolUse,
            &[
                cc(out(Verdict::Allow, Some("fine"))),
                cc(out(Verdict::Ask, Some("check"))),
                codex(out(Verdict::Block, Some("no"))),
                cc(out(Verdict::Error, Some("ignored"))),
                cc(out(Verdict::Deny, Some("never"))),
                cc(out(Verdict::Deny, None)),
            ],
        );
        assert_eq!(m.decision, Decision::Deny);
        assert_eq!(m.reason.as_deref(), Some("no\n\nnever"));

        let m = merge(
            EventName::PreToolUse,
            &[
                cc(out(Verdict::Ask, Some("a"))),
                cc(out(Verdict::Allow, Some("b"))),
                cc(out(Verdict::Ask, Some("c"))),
            ],
        );
        assert_eq!(
            (m.decision, m.reason.as_deref()),
            (Decision::Ask, Some("a\n\nc"))
        );

        let m = merge(
            EventName::PreToolUse,
            &[cc(out(Verdict::Allow, Some("ok")))],
        );
        assert_eq!((m.decision, m.reason), (Decision::Allow, None));
        assert_eq!(merge(EventName::Stop, &[]), MergedOutcome::default());
    }

    #[test]
    fn default_reasons_name_the_event() {
        let m = merge(EventName::Stop, &[cc(out(Verdict::Block, None))]);
        assert_eq!(m.reason.as_deref(), Some("blocked by Stop hook"));
        let m = merge(EventName::PreToolUse, &[cc(out(Verdict::Ask, None))]);
        assert_eq!(
            m.reason.as_deref(),
            Some("approval required by PreToolUse hook")
        );
    }

    #[test]
    fn observe_only_events_never_block() {
        for event in [
            EventName::SessionStart,
            EventName::SubagentStart,
            EventName::SessionEnd,
            EventName::PostToolUse,
            EventName::PostToolUseFailure,
            EventName::Notification,
            EventName::StopFailure,
            EventName::InstructionsLoaded,
            EventName::PostCompact,
        ] {
            let m = merge(event, &[cc(out(Verdict::Block, Some("no")))]);
            assert_eq!((m.decision, m.reason), (Decision::None, None), "{event:?}");
        }
    }

    #[test]
    fn a_claude_code_pre_compact_block_stops_the_compaction_and_a_codex_one_does_not() {
        let m = merge(
            EventName::PreCompact,
            &[cc(out(Verdict::Block, Some("a build is running")))],
        );
        assert_eq!(
            (m.decision, m.reason.as_deref()),
            (Decision::Deny, Some("a build is running"))
        );
        let m = merge(
            EventName::PreCompact,
            &[codex(out(Verdict::Block, Some("no")))],
        );
        assert_eq!((m.decision, m.reason), (Decision::None, None));
    }

    #[test]
    fn post_tool_use_blocks_are_feedback_or_a_replacement_by_dialect() {
        let m = merge(
            EventName::PostToolUse,
            &[
                cc(out(Verdict::Block, Some("lint failed"))),
                cc(out(Verdict::Block, None)),
                codex(out(Verdict::Block, Some("output looked sketchy"))),
                codex(out(Verdict::Block, Some("and again"))),
            ],
        );
        assert_eq!(
            m.feedback,
            [
                ("hooks-claude-code", "lint failed".to_owned()),
                (
                    "hooks-claude-code",
                    "blocked by PostToolUse hook".to_owned()
                )
            ]
        );
        assert_eq!(
            m.replacement.as_deref(),
            Some("output looked sketchy\n\nand again")
        );
        assert!(!m.stop);

        // continue:false: Claude Code stops the turn; Codex replaces the result and goes on.
        let mut stop = out(Verdict::Pass, None);
        stop.stop = true;
        stop.stop_reason = Some("halt".into());
        let m = merge(EventName::PostToolUse, &[cc(stop.clone())]);
        assert_eq!((m.stop, m.stop_reason.as_deref()), (true, Some("halt")));
        assert_eq!(m.replacement, None);
        stop.verdict = Verdict::Block;
        stop.reason = Some("halt".into());
        let m = merge(EventName::PostToolUse, &[codex(stop)]);
        assert!(!m.stop);
        assert_eq!(m.replacement.as_deref(), Some("halt"));
    }

    #[test]
    fn stop_is_sticky_and_context_accumulates_in_order() {
        let mut a = out(Verdict::Pass, None);
        a.additional_context = Some("one".into());
        a.system_message = Some("m1".into());
        let mut b = out(Verdict::Pass, None);
        b.stop = true;
        b.stop_reason = Some("first".into());
        b.additional_context = Some("two".into());
        let mut c = out(Verdict::Pass, None);
        c.stop = true;
        c.stop_reason = Some("second".into());
        let mut e = out(Verdict::Error, None);
        e.system_message = Some("m2".into());
        e.additional_context = Some("not from a failed hook".into());
        let m = merge(EventName::SessionStart, &[cc(a), codex(b), cc(c), codex(e)]);
        assert!(m.stop);
        assert_eq!(m.stop_reason.as_deref(), Some("first"));
        assert_eq!(
            m.additional_context,
            [
                ("hooks-claude-code", "one".to_owned()),
                ("hooks-codex", "two".to_owned())
            ]
        );
        assert_eq!(m.system_messages, ["m1", "m2"]);
    }

    #[test]
    fn a_blocked_prompt_keeps_only_codex_context() {
        let mut a = out(Verdict::Block, Some("no"));
        a.additional_context = Some("claude".into());
        let mut b = out(Verdict::Pass, None);
        b.additional_context = Some("codex".into());
        let m = merge(EventName::UserPromptSubmit, &[cc(a), codex(b)]);
        assert_eq!(m.decision, Decision::Deny);
        assert_eq!(m.additional_context, [("hooks-codex", "codex".to_owned())]);
    }

    #[test]
    fn subagent_events_never_stop() {
        let mut s = out(Verdict::Pass, None);
        s.stop = true;
        for event in [
            EventName::SubagentStart,
            EventName::SubagentStop,
            EventName::SessionEnd,
        ] {
            assert!(!merge(event, &[cc(s.clone())]).stop, "{event:?}");
        }
    }

    #[test]
    fn rewrites_apply_when_they_agree_and_refuse_the_call_when_they_do_not() {
        let rewrite = |args: Value| Decoded {
            arguments: Some(args),
            ..cc(out(Verdict::Allow, None))
        };
        let m = merge(
            EventName::PreToolUse,
            &[
                rewrite(json!({"command": "echo a"})),
                cc(out(Verdict::Pass, None)),
                Decoded {
                    dialect: Dialect::Codex,
                    ..rewrite(json!({"command": "echo a"}))
                },
            ],
        );
        assert_eq!(m.decision, Decision::Allow);
        assert_eq!(m.updated_input, Some(json!({"command": "echo a"})));

        let m = merge(
            EventName::PreToolUse,
            &[
                rewrite(json!({"command": "echo a"})),
                rewrite(json!({"command": "echo b"})),
            ],
        );
        assert_eq!(m.decision, Decision::Deny);
        assert_eq!(m.updated_input, None);
        assert!(m.reason.unwrap().contains("different ways"));

        // A deny wins over a rewrite.
        let m = merge(
            EventName::PreToolUse,
            &[
                rewrite(json!({"command": "echo a"})),
                cc(out(Verdict::Deny, Some("no"))),
            ],
        );
        assert_eq!((m.decision, m.updated_input), (Decision::Deny, None));
    }
}
