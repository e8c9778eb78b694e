//! "Allow always" rules as facts of the session: a client's allow for the session (an
//! `approval/decision` with `scope: session`) makes one from its `approval/request` (tool,
//! command, cwd), and so does a PermissionRequest hook's `approval/rule-added`; an
//! `approval/rule-removed` ends it. Derived from the log, so an agent made live
//! again (resumed, forked, after a restart) keeps the rules its session made.

use std::collections::HashMap;

use super::{ApprovalScope, ApprovalVerdict, Event, EventData};

/// A request allowed for the rest of the session: the same tool with the same command (a bash
/// command, or another tool's arguments as JSON) in the same directory is allowed without asking.
/// Exact text, no patterns: what was allowed is what a person saw.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct ApprovalRule {
    /// The tool, e.g. `bash`.
    pub tool: String,
    /// The command exactly as the request showed it.
    pub command: String,
    /// Where it runs, as the request showed it.
    pub cwd: String,
}

/// The rules in force at the end of `events`, oldest first.
pub fn approval_rules(events: &[Event]) -> Vec<ApprovalRule> {
    let mut asked: HashMap<&str, ApprovalRule> = HashMap::new();
    let mut rules: Vec<ApprovalRule> = Vec::new();
    for event in events {
        match &event.data {
            EventData::ApprovalRequest {
                call_id,
                tool,
                command,
                cwd,
                ..
            } => {
                let rule = ApprovalRule {
                    tool: tool.clone(),
                    command: command.clone(),
                    cwd: cwd.clone(),
                };
                asked.insert(call_id.as_str(), rule);
            }
            EventData::ApprovalDecision {
                call_id,
                decision: ApprovalVerdict::Allow,
                scope: ApprovalScope::Session,
                ..
            } => {
                if let Some(rule) = asked.remove(call_id.as_str())
                    && !rules.contains(&rule)
                {
                    rules.push(rule);
                }
            }
            EventData::ApprovalRuleAdded {
                tool, command, cwd, ..
            } => {
                let rule = ApprovalRule {
                    tool: tool.clone(),
                    command: command.clone(),
                    cwd: cwd.clone(),
                };
                if !rules.contains(&rule) {
                    rules.push(rule);
                }
            }
            EventData::ApprovalRuleRemoved { tool, command, cwd } => {
                rules.retain(|r| !(r.tool == *tool && r.command == *command && r.cwd == *cwd));
            }
            _ => {}
        }
    }
    rules
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::ApprovalSource;

    fn event(seq: u64, data: EventData) -> Event {
        Event { seq, time: 0, data }
    }

    fn request(call: &str, command: &str) -> EventData {
        EventData::ApprovalRequest {
            turn: 1,
            step: 1,
            call_id: call.into(),
            tool: "bash".into(),
            command: command.into(),
            cwd: "/w".into(),
            reason: String::new(),
            timeout_ms: 1,
            change: None,
        }
    }

    fn decision(call: &str, verdict: ApprovalVerdict, scope: ApprovalScope) -> EventData {
        EventData::ApprovalDecision {
            turn: 1,
            step: 1,
            call_id: call.into(),
            decision: verdict,
            by: ApprovalSource::Client,
            reason: None,
            scope,
            client: None,
            handlers: Vec::new(),
        }
    }

    #[test]
    fn an_allow_for_the_session_makes_a_rule_and_a_removal_ends_it() {
        let rule = |command: &str| ApprovalRule {
            tool: "bash".into(),
            command: command.into(),
            cwd: "/w".into(),
        };
        let mut log = vec![
            event(0, request("a", "make")),
            event(
                1,
                decision("a", ApprovalVerdict::Allow, ApprovalScope::Session),
            ),
            event(2, request("b", "ls")),
            event(
                3,
                decision("b", ApprovalVerdict::Allow, ApprovalScope::Once),
            ),
            event(4, request("c", "rm -rf x")),
            event(5, decision("c", ApprovalVerdict::Deny, ApprovalScope::Once)),
            event(6, request("d", "make test")),
            event(
                7,
                decision("d", ApprovalVerdict::Allow, ApprovalScope::Session),
            ),
        ];
        assert_eq!(approval_rules(&log), vec![rule("make"), rule("make test")]);
        log.push(event(
            8,
            EventData::ApprovalRuleRemoved {
                tool: "bash".into(),
                command: "make".into(),
                cwd: "/w".into(),
            },
        ));
        assert_eq!(approval_rules(&log), vec![rule("make test")]);
    }

    #[test]
    fn a_hook_added_rule_is_kept_once_until_removed() {
        let added = |command: &str| EventData::ApprovalRuleAdded {
            tool: "bash".into(),
            command: command.into(),
            cwd: "/w".into(),
            handlers: vec!["h#PermissionRequest[0][0]".into()],
        };
        let rule = ApprovalRule {
            tool: "bash".into(),
            command: "npm test".into(),
            cwd: "/w".into(),
        };
        let mut log = vec![event(0, added("npm test")), event(1, added("npm test"))];
        assert_eq!(approval_rules(&log), vec![rule.clone()]);
        log.push(event(
            2,
            EventData::ApprovalRuleRemoved {
                tool: rule.tool.clone(),
                command: rule.command.clone(),
                cwd: rule.cwd.clone(),
            },
        ));
        assert_eq!(approval_rules(&log), Vec::<ApprovalRule>::new());
    }
}
