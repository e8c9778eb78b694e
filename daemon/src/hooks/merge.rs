//! Folding the outputs of several hooks into one [`MergedOutcome`].
//!
//! The strictest decision wins (deny/block > ask > allow > nothing); the reasons of the hooks that
//! reached the winning rank are joined by a blank line, in configured order, and a default names
//! the event when none gave one. `continue: false` is sticky and the first `stopReason` wins.
//! Context and system messages accumulate in configured order. The fold does not depend on which
//! process ended first, only on the configured order of the handlers.

use super::decode::{HookOutput, Verdict};
use super::{Decision, Dialect, EventName, MergedOutcome};

fn rank(verdict: Verdict) -> Decision {
    match verdict {
        Verdict::Block | Verdict::Deny => Decision::Deny,
        Verdict::Ask => Decision::Ask,
        Verdict::Allow => Decision::Allow,
        Verdict::Pass | Verdict::Error => Decision::None,
    }
}

/// Merges the outputs of `event`'s hooks, given in configured order.
pub(super) fn merge(event: EventName, outputs: &[(Dialect, HookOutput)]) -> MergedOutcome {
    let mut merged = MergedOutcome::default();
    if event.can_block() {
        merged.decision = outputs
            .iter()
            .map(|(_, o)| rank(o.verdict))
            .max()
            .unwrap_or_default();
    }
    if matches!(merged.decision, Decision::Deny | Decision::Ask) {
        let reasons: Vec<&str> = outputs
            .iter()
            .filter(|(_, o)| rank(o.verdict) == merged.decision)
            .filter_map(|(_, o)| o.reason.as_deref())
            .collect();
        merged.reason = Some(if reasons.is_empty() {
            default_reason(event, merged.decision)
        } else {
            reasons.join("\n\n")
        });
    }
    for (dialect, output) in outputs {
        if output.stop && !merged.stop {
            merged.stop = true;
            merged.stop_reason = output.stop_reason.clone();
        }
        if let Some(context) = &output.additional_context {
            merged
                .additional_context
                .push((dialect.plugin_name(), context.clone()));
        }
        if let Some(message) = &output.system_message {
            merged.system_messages.push(message.clone());
        }
    }
    merged
}

fn default_reason(event: EventName, decision: Decision) -> String {
    match decision {
        Decision::Ask => format!("approval required by {} hook", event.as_str()),
        _ => format!("blocked by {} hook", event.as_str()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn out(verdict: Verdict, reason: Option<&str>) -> HookOutput {
        HookOutput {
            verdict,
            reason: reason.map(str::to_owned),
            stop: false,
            stop_reason: None,
            additional_context: None,
            system_message: None,
            updated_input: false,
            note: None,
        }
    }

    const CC: Dialect = Dialect::ClaudeCode;

    #[test]
    fn strictest_decision_wins_with_its_reasons_joined() {
        let m = merge(
            EventName::PreToolUse,
            &[
                (CC, out(Verdict::Allow, Some("fine"))),
                (CC, out(Verdict::Ask, Some("check"))),
                (Dialect::Codex, out(Verdict::Block, Some("no"))),
                (CC, out(Verdict::Error, Some("ignored"))),
                (CC, out(Verdict::Deny, Some("never"))),
                (CC, out(Verdict::Deny, None)),
            ],
        );
        assert_eq!(m.decision, Decision::Deny);
        assert_eq!(m.reason.as_deref(), Some("no\n\nnever"));

        let m = merge(
            EventName::PreToolUse,
            &[
                (CC, out(Verdict::Ask, Some("a"))),
                (CC, out(Verdict::Allow, Some("b"))),
                (CC, out(Verdict::Ask, Some("c"))),
            ],
        );
        assert_eq!(
            (m.decision, m.reason.as_deref()),
            (Decision::Ask, Some("a\n\nc"))
        );

        let m = merge(
            EventName::PreToolUse,
            &[(CC, out(Verdict::Allow, Some("ok")))],
        );
        assert_eq!((m.decision, m.reason), (Decision::Allow, None));
        assert_eq!(merge(EventName::Stop, &[]), MergedOutcome::default());
    }

    #[test]
    fn default_reasons_name_the_event() {
        let m = merge(EventName::PostToolUse, &[(CC, out(Verdict::Block, None))]);
        assert_eq!(m.reason.as_deref(), Some("blocked by PostToolUse hook"));
        let m = merge(EventName::PreToolUse, &[(CC, out(Verdict::Ask, None))]);
        assert_eq!(
            m.reason.as_deref(),
            Some("approval required by PreToolUse hook")
        );
    }

    #[test]
    fn observe_only_events_never_block() {
        for event in [EventName::SessionStart, EventName::SubagentStart] {
            let m = merge(event, &[(CC, out(Verdict::Block, Some("no")))]);
            assert_eq!((m.decision, m.reason), (Decision::None, None));
        }
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
        let m = merge(
            EventName::UserPromptSubmit,
            &[(CC, a), (Dialect::Codex, b), (CC, c)],
        );
        assert!(m.stop);
        assert_eq!(m.stop_reason.as_deref(), Some("first"));
        assert_eq!(
            m.additional_context,
            [
                ("hooks-claude-code", "one".to_owned()),
                ("hooks-codex", "two".to_owned())
            ]
        );
        assert_eq!(m.system_messages, ["m1"]);
    }
}
